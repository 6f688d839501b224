package outbox_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/otel/trace"

	deliveryv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/delivery/v1"
	eventsv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/events/v1"
	"github.com/switchboard-chat/switchboard/pkg/outbox"
	"github.com/switchboard-chat/switchboard/pkg/pg/pgtest"
)

func req(key, chat string) *deliveryv1.SendRequested {
	return &deliveryv1.SendRequested{
		IdempotencyKey: key,
		Op:             deliveryv1.SendOp_SEND_OP_SEND,
		Target:         &deliveryv1.Target{Platform: "test", ChatId: chat},
		Text:           "hello " + key,
		TurnId:         "turn-1",
	}
}

var t0 = time.Date(2025, 1, 1, 12, 0, 0, 0, time.UTC)

func TestEnqueueIsIdempotent(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := outbox.New(pgtest.New(t))
	ids1, err := s.Enqueue(ctx, t0, time.Hour, req("a", "1"), req("b", "1"))
	if err != nil {
		t.Fatal(err)
	}
	ids2, err := s.Enqueue(ctx, t0.Add(time.Minute), time.Hour, req("a", "1"), req("b", "1"))
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(ids1) != fmt.Sprint(ids2) {
		t.Fatalf("ids %v then %v", ids1, ids2)
	}
	r, err := s.Get(ctx, ids1[0])
	if err != nil {
		t.Fatal(err)
	}
	if r.State != outbox.Queued || r.Request.GetText() != "hello a" || r.ChatKey != "test::1" || !r.CreatedAt.Equal(t0) {
		t.Fatalf("row %+v", r)
	}
}

func TestClaimOrderAndLifecycle(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := outbox.New(pgtest.New(t))
	if _, err := s.Enqueue(ctx, t0, time.Hour, req("a1", "A"), req("a2", "A"), req("b1", "B")); err != nil {
		t.Fatal(err)
	}
	got, err := s.Claim(ctx, t0, 10*time.Second, "me", 10)
	if err != nil {
		t.Fatal(err)
	}
	// Head of line per chat: a2 waits for a1.
	if len(got) != 2 || got[0].Key != "a1" || got[1].Key != "b1" || got[0].Attempts != 1 {
		t.Fatalf("claimed %v", keys(got))
	}
	if again, _ := s.Claim(ctx, t0, 10*time.Second, "other", 10); len(again) != 0 {
		t.Fatalf("claimed twice: %v", keys(again))
	}
	if err := s.MarkSent(ctx, got[0].ID, "me", "pm-1", t0); err != nil {
		t.Fatal(err)
	}
	if err := s.MarkSent(ctx, got[1].ID, "other", "x", t0); !errors.Is(err, outbox.ErrLostClaim) {
		t.Fatalf("mark by non-owner: %v", err)
	}
	// b1 fails and is retried later; a2 is now due.
	if err := s.Retry(ctx, got[1].ID, "me", t0.Add(5*time.Second), "boom", nil, t0); err != nil {
		t.Fatal(err)
	}
	next, _ := s.Claim(ctx, t0.Add(time.Second), 10*time.Second, "me", 10)
	if len(next) != 1 || next[0].Key != "a2" {
		t.Fatalf("claimed %v", keys(next))
	}
	if err := s.MarkSent(ctx, next[0].ID, "me", "pm-2", t0); err != nil {
		t.Fatal(err)
	}
	later, _ := s.Claim(ctx, t0.Add(5*time.Second), 10*time.Second, "me", 10)
	if len(later) != 1 || later[0].Key != "b1" || later[0].Attempts != 2 || later[0].LastError != "boom" {
		t.Fatalf("claimed %+v", later)
	}
	// The sender dies: after the lease, someone else takes it over.
	if got, _ := s.Claim(ctx, t0.Add(14*time.Second), 10*time.Second, "other", 10); len(got) != 0 {
		t.Fatalf("lease not honoured: %v", keys(got))
	}
	if _, err := s.Enqueue(ctx, t0, time.Hour, req("c1", "C")); err != nil {
		t.Fatal(err)
	}
	took, _ := s.Claim(ctx, t0.Add(16*time.Second), 10*time.Second, "other", 10)
	if len(took) != 2 {
		t.Fatalf("takeover claimed %v", keys(took))
	}
	for _, r := range took {
		if err := s.Fail(ctx, r.ID, "other", "chat not found", t0); err != nil {
			t.Fatal(err)
		}
	}
	dead, err := s.List(ctx, nil, 0)
	if err != nil || len(dead) != 2 {
		t.Fatalf("dead letters %v %v", keys(dead), err)
	}
	n, err := s.Requeue(ctx, []int64{dead[0].ID}, false, t0.Add(time.Hour), time.Hour)
	if err != nil || n != 1 {
		t.Fatalf("requeue %d %v", n, err)
	}
	n, err = s.Purge(ctx, nil, true)
	if err != nil || n != 1 {
		t.Fatalf("purge %d %v", n, err)
	}
	r, _ := s.Get(ctx, dead[0].ID)
	if r.State != outbox.Queued || r.Attempts != 0 {
		t.Fatalf("requeued row %+v", r)
	}
}

// Expire dead-letters the rows past their expiry, a sending one only
// once its lease ran out, and tells when the next row can expire.
func TestExpire(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := outbox.New(pgtest.New(t))
	// "sending" is claimed until well past its expiry.
	if _, err := s.Enqueue(ctx, t0, time.Minute, req("sending", "B")); err != nil {
		t.Fatal(err)
	}
	if got, err := s.Claim(ctx, t0, 70*time.Second, "me", 10); err != nil || len(got) != 1 {
		t.Fatalf("claim %v %v", keys(got), err)
	}
	if _, err := s.Enqueue(ctx, t0, time.Minute, req("old", "A")); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Enqueue(ctx, t0.Add(30*time.Second), time.Minute, req("new", "C")); err != nil {
		t.Fatal(err)
	}
	got, err := s.Expire(ctx, t0.Add(59*time.Second), time.Minute, nil)
	if err != nil || len(got.Expired)+len(got.Replaced) != 0 || !got.Next.Equal(t0.Add(time.Minute)) {
		t.Fatalf("expire early: %v, next %v, %v", keys(got.Expired), got.Next, err)
	}
	if got, _ := s.Claim(ctx, t0.Add(61*time.Second), time.Second, "me", 10); fmt.Sprint(keys(got)) != "[new]" {
		t.Fatalf("claimed %v, want only the row not expired", keys(got))
	}
	got, err = s.Expire(ctx, t0.Add(61*time.Second), time.Minute, nil)
	if err != nil || fmt.Sprint(keys(got.Expired)) != "[old]" || got.Expired[0].State != outbox.Expired {
		t.Fatalf("expired %v %v, want the queued row past its expiry", keys(got.Expired), err)
	}
	// Next: the sending row once its lease is over (t0+70s), before the
	// new row's expiry (t0+90s).
	if !got.Next.Equal(t0.Add(70 * time.Second)) {
		t.Fatalf("next %v, want the lease's end %v", got.Next, t0.Add(70*time.Second))
	}
	got, err = s.Expire(ctx, t0.Add(91*time.Second), time.Minute, nil)
	if err != nil || fmt.Sprint(keys(got.Expired)) != "[sending new]" || !got.Next.IsZero() {
		t.Fatalf("expired %v, next %v, %v; want the rest and nothing waiting", keys(got.Expired), got.Next, err)
	}
}

// A row replace takes over keeps its place in its chat: the row queued
// after it is claimed only after the replacement went; a row replace
// declines expires. An error of replace's leaves every row as it was.
func TestReplaceKeepsThePlace(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := outbox.New(pgtest.New(t))
	if _, err := s.Enqueue(ctx, t0, time.Minute, req("a:img0", "A"), req("b:img0", "B")); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Enqueue(ctx, t0.Add(30*time.Second), time.Minute, req("later", "A"), req("later", "B")); err != nil {
		t.Fatal(err)
	}
	at := t0.Add(61 * time.Second)
	if _, err := s.Expire(ctx, at, time.Minute, func(context.Context, outbox.Querier, outbox.Row) (*deliveryv1.SendRequested, string, error) {
		return nil, "", errors.New("look-up failed")
	}); err == nil {
		t.Fatal("a pass whose replace failed succeeded")
	}
	for _, k := range []string{"a:img0", "b:img0"} {
		if r, err := s.GetByKey(ctx, k); err != nil || r.State != outbox.Queued {
			t.Fatalf("%s after a failed pass: %v %v, want still queued", k, r.State, err)
		}
	}
	got, err := s.Expire(ctx, at, time.Minute, func(_ context.Context, q outbox.Querier, r outbox.Row) (*deliveryv1.SendRequested, string, error) {
		var n int
		if err := q.QueryRow(ctx, `SELECT count(*) FROM delivery_outbox`).Scan(&n); err != nil || n != 3 {
			t.Errorf("read through the transaction: %d rows, %v", n, err)
		}
		if r.ChatID != "A" {
			return nil, "", nil
		}
		link := req(r.Key+":link", "A")
		link.Text = "the link"
		return link, "expired, link instead", nil
	})
	if err != nil || fmt.Sprint(keys(got.Replaced)) != "[a:img0]" || fmt.Sprint(keys(got.Expired)) != "[b:img0]" {
		t.Fatalf("replaced %v, expired %v, %v; want the image of A replaced, the declined row expired", keys(got.Replaced), keys(got.Expired), err)
	}
	claimed, err := s.Claim(ctx, at, time.Second, "me", 10)
	if err != nil || len(claimed) != 1 || claimed[0].Key != "a:img0" || claimed[0].Request.GetText() != "the link" ||
		claimed[0].Request.GetIdempotencyKey() != "a:img0:link" || claimed[0].Attempts != 1 {
		t.Fatalf("claimed %+v %v, want the link in the image's row, before the later row", claimed, err)
	}
	// Given up once claimed: Replace puts another request in its place.
	other := req("a:img0:other", "A")
	if err := s.Replace(ctx, claimed[0].ID, "me", other, "gave up", at, time.Minute); err != nil {
		t.Fatal(err)
	}
	if got, _ := s.Claim(ctx, at, time.Second, "me", 10); len(got) != 1 || got[0].Request.GetIdempotencyKey() != "a:img0:other" {
		t.Fatalf("claimed %v, want the replacement first", keys(got))
	}
	if err := s.Replace(ctx, claimed[0].ID, "someone else", other, "gave up", at, time.Minute); !errors.Is(err, outbox.ErrLostClaim) {
		t.Fatalf("replace of a row another sender holds: %v", err)
	}
}

// Many senders claim concurrently: every row is claimed exactly once.
func TestConcurrentClaimsSkipLocked(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := outbox.New(pgtest.New(t))
	var reqs []*deliveryv1.SendRequested
	for i := range 60 {
		reqs = append(reqs, req(fmt.Sprint("k", i), fmt.Sprint("chat", i%20)))
	}
	if _, err := s.Enqueue(ctx, t0, time.Hour, reqs...); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	seen := map[string]int{}
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			owner := fmt.Sprint("w", w)
			for range 200 {
				rows, err := s.Claim(ctx, t0, time.Hour, owner, 3)
				if err != nil {
					t.Error(err)
					return
				}
				for _, r := range rows {
					mu.Lock()
					seen[r.Key]++
					mu.Unlock()
					if err := s.MarkSent(ctx, r.ID, owner, "p", t0); err != nil {
						t.Error(err)
					}
				}
				mu.Lock()
				done := len(seen) == 60
				mu.Unlock()
				if done {
					return
				}
			}
		}()
	}
	wg.Wait()
	if len(seen) != 60 {
		t.Fatalf("claimed %d of 60", len(seen))
	}
	for k, n := range seen {
		if n != 1 {
			t.Errorf("%s claimed %d times", k, n)
		}
	}
}

func TestChannels(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := outbox.New(pgtest.New(t))
	if err := s.UpsertChannel(ctx, outbox.Channel{Platform: "slack", Account: "T1", ChatID: "C1", Name: "#general"}); err != nil {
		t.Fatal(err)
	}
	if err := s.UpsertChannel(ctx, outbox.Channel{Platform: "slack", Account: "T1", ChatID: "C1", Name: "General-Renamed"}); err != nil {
		t.Fatal(err)
	}
	c, err := s.LookupChannel(ctx, "slack", "#general-renamed")
	if err != nil || c.ChatID != "C1" || c.Account != "T1" {
		t.Fatalf("lookup %+v %v", c, err)
	}
	if _, err := s.LookupChannel(ctx, "slack", "general"); !errors.Is(err, outbox.ErrNotFound) {
		t.Fatalf("old name: %v", err)
	}
}

func keys(rows []outbox.Row) []string {
	var out []string
	for _, r := range rows {
		out = append(out, r.Key)
	}
	return out
}

// A row keeps the trace context it was enqueued under, so the send, which
// runs later from the row, joins the message's trace.
func TestRowCarriesTraceContext(t *testing.T) {
	t.Parallel()
	s := outbox.New(pgtest.New(t))
	tid, _ := trace.TraceIDFromHex("0102030405060708090a0b0c0d0e0f10")
	sid, _ := trace.SpanIDFromHex("0102030405060708")
	traced := trace.ContextWithSpanContext(context.Background(),
		trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: sid, TraceFlags: trace.FlagsSampled}))
	if _, err := s.Enqueue(traced, t0, time.Hour, req("traced", "A")); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Enqueue(context.Background(), t0, time.Hour, req("untraced", "B")); err != nil {
		t.Fatal(err)
	}
	rows, err := s.Claim(context.Background(), t0, 10*time.Second, "me", 10)
	if err != nil || len(rows) != 2 {
		t.Fatalf("claim = %d rows, %v", len(rows), err)
	}
	for _, r := range rows {
		sc := trace.SpanContextFromContext(r.Context(context.Background()))
		switch r.Key {
		case "traced":
			if sc.TraceID() != tid || sc.SpanID() != sid || !sc.IsRemote() {
				t.Errorf("traced row restores %v (traceparent %q)", sc, r.TraceParent)
			}
		case "untraced":
			if sc.IsValid() || r.TraceParent != "" {
				t.Errorf("untraced row restores %v (traceparent %q)", sc, r.TraceParent)
			}
		}
	}
}

func TestCountsAndPrune(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := outbox.New(pgtest.New(t))
	counts := func() string {
		t.Helper()
		c, err := s.Counts(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return fmt.Sprintf("queued %d, sending %d, failed %d, expired %d, states %d",
			c[outbox.Queued], c[outbox.Sending], c[outbox.Failed], c[outbox.Expired], len(c))
	}
	if got, want := counts(), "queued 0, sending 0, failed 0, expired 0, states 4"; got != want {
		t.Fatalf("empty outbox: %s, want %s", got, want)
	}
	day := 24 * time.Hour
	// Sent long ago and just now; failed long ago and just now; one
	// sending, one queued behind it, one expired.
	for i, at := range []time.Time{t0, t0.Add(10 * day)} {
		if err := s.RecordSent(ctx, at, time.Hour, req(fmt.Sprint("sent", i), "S"), "me", "pm"); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Enqueue(ctx, at, time.Hour, req(fmt.Sprint("fail", i), fmt.Sprint("F", i))); err != nil {
			t.Fatal(err)
		}
		rows, err := s.Claim(ctx, at, time.Minute, "me", 10)
		if err != nil || len(rows) != 1 {
			t.Fatalf("claim %v %v", keys(rows), err)
		}
		if err := s.Fail(ctx, rows[0].ID, "me", "chat not found", at); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.Enqueue(ctx, t0.Add(10*day), time.Hour, req("a1", "A"), req("a2", "A"), req("late", "L")); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Expire(ctx, t0.Add(10*day+2*time.Hour), time.Hour, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Enqueue(ctx, t0.Add(10*day+2*time.Hour), time.Hour, req("b1", "B"), req("b2", "B")); err != nil {
		t.Fatal(err)
	}
	if rows, err := s.Claim(ctx, t0.Add(10*day+2*time.Hour), time.Minute, "me", 10); err != nil || len(rows) != 1 {
		t.Fatalf("claim %v %v", keys(rows), err)
	}
	if got, want := counts(), "queued 1, sending 1, failed 2, expired 3, states 4"; got != want {
		t.Fatalf("counts: %s, want %s", got, want)
	}

	now := t0.Add(10*day + 3*time.Hour)
	// Sent rows older than 7 days and dead letters older than 30: only
	// the first sent row.
	n, err := s.Prune(ctx, now.Add(-7*day), now.Add(-30*day), 100)
	if err != nil || n != 1 {
		t.Fatalf("prune: %d %v", n, err)
	}
	if _, err := s.GetByKey(ctx, "sent0"); !errors.Is(err, outbox.ErrNotFound) {
		t.Fatalf("old sent row still there: %v", err)
	}
	// Dead letters older than 5 days, one row of each kind at a time.
	n, err = s.Prune(ctx, time.Time{}, now.Add(-5*day), 1)
	if err != nil || n != 1 {
		t.Fatalf("prune dead letters: %d %v", n, err)
	}
	if got, want := counts(), "queued 1, sending 1, failed 1, expired 3, states 4"; got != want {
		t.Fatalf("after pruning: %s, want %s", got, want)
	}
	for _, key := range []string{"sent1", "fail1", "a1", "b1", "b2"} {
		if _, err := s.GetByKey(ctx, key); err != nil {
			t.Errorf("%s pruned: %v", key, err)
		}
	}
}

// A request's interaction (a short-lived credential for a private
// answer) is kept while its row may still be sent, and dropped from a
// row that is sent (at once, or from the queue), dead-lettered or
// expired; the admin view never shows it.
func TestInteractionForgotten(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := outbox.New(pgtest.New(t))
	private := func(key, chat string) *deliveryv1.SendRequested {
		r := req(key, chat)
		r.Target.Interaction = &eventsv1.Interaction{Id: "8", ApplicationId: "1", Token: "secret-token"}
		return r
	}
	stored := func(id int64) *eventsv1.Interaction {
		t.Helper()
		r, err := s.Get(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		if r.Proto().GetTarget().GetInteraction() != nil || r.Proto().GetTarget().GetChatId() != r.ChatID {
			t.Fatalf("the admin view shows %v", r.Proto().GetTarget())
		}
		return r.Request.GetTarget().GetInteraction()
	}

	// Sent at once: recorded without it.
	if err := s.RecordSent(ctx, t0, time.Hour, private("direct", "D"), "me", "pm-0"); err != nil {
		t.Fatal(err)
	}
	direct, err := s.GetByKey(ctx, "direct")
	if err != nil {
		t.Fatal(err)
	}
	if ia := stored(direct.ID); ia != nil {
		t.Fatalf("a sent row keeps %v", ia)
	}

	// Queued: kept for the send; sent or dead-lettered: dropped.
	ids, err := s.Enqueue(ctx, t0, time.Hour, private("sent", "A"), private("failed", "B"), private("expired", "C"))
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range ids {
		if ia := stored(id); ia.GetToken() != "secret-token" {
			t.Fatalf("queued row %d has %v, want its interaction", id, ia)
		}
	}
	rows, err := s.Claim(ctx, t0, 10*time.Second, "me", 2)
	if err != nil || len(rows) != 2 {
		t.Fatalf("claimed %v (%v)", keys(rows), err)
	}
	for _, r := range rows {
		switch r.Key {
		case "sent":
			err = s.MarkSent(ctx, r.ID, "me", "pm-1", t0)
		case "failed":
			err = s.Fail(ctx, r.ID, "me", "chat not found", t0)
		}
		if err != nil {
			t.Fatal(err)
		}
		if ia := stored(r.ID); ia.GetToken() != "secret-token" {
			t.Fatalf("%s before ForgetInteraction: %v", r.Key, ia)
		}
		if err := s.ForgetInteraction(ctx, r.ID, r.Request); err != nil {
			t.Fatal(err)
		}
		if ia := stored(r.ID); ia != nil {
			t.Fatalf("%s row keeps %v", r.Key, ia)
		}
	}
	// Not on a row still waiting.
	if err := s.ForgetInteraction(ctx, ids[2], private("expired", "C")); err != nil {
		t.Fatal(err)
	}
	if ia := stored(ids[2]); ia.GetToken() != "secret-token" {
		t.Fatalf("a queued row lost its interaction: %v", ia)
	}
	res, err := s.Expire(ctx, t0.Add(2*time.Hour), time.Hour, nil)
	if err != nil || len(res.Expired) != 1 {
		t.Fatalf("expired %+v (%v)", res, err)
	}
	if ia := stored(ids[2]); ia != nil {
		t.Fatalf("an expired row keeps %v", ia)
	}
}
