package delivery_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	deliveryv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/delivery/v1"
	"github.com/switchboard-chat/switchboard/pkg/outbox"
)

// failFirst fails the first tries of every request with a retryable
// error that names no retry-after, so the row waits its backoff.
func failFirst(tries int) func(*deliveryv1.SendRequested, int) behaviour {
	return func(_ *deliveryv1.SendRequested, try int) behaviour {
		if try <= tries {
			return behaviour{fail: &deliveryv1.SendReceipt{ErrorClass: deliveryv1.ErrorClass_ERROR_CLASS_RETRYABLE, Error: "bad gateway"}}
		}
		return behaviour{}
	}
}

// A retry is sent when it comes due, not at the next poll: with a poll
// interval of an hour, rows retried a few times after 75–300 ms backoffs
// are all sent (nothing else wakes the send loop once the last failure
// is recorded), each exactly once.
func TestRetryWakesTheSendLoop(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.gw.setBehaviour(failFirst(2))
	cfg := testConfig()
	cfg.PollInterval = time.Hour
	cfg.RetryBase, cfg.RetryMax = 150*time.Millisecond, 300*time.Millisecond
	e.start(t, cfg, "a")
	const n = 3
	for i := range n {
		e.publish(t, event(fmt.Sprint("t", i), 1, fmt.Sprint("s", i), final(fmt.Sprint("answer ", i))))
	}
	eventually(t, e.clock, 0, "every answer after its retries", func() bool { return len(e.gw.postedTexts()) == n })
	for text, c := range e.gw.postedTexts() {
		if c != 1 {
			t.Errorf("%q posted %d times", text, c)
		}
	}
	calls, _ := e.gw.snapshot()
	perKey := map[string]int{}
	for _, c := range calls {
		perKey[c.Key]++
	}
	for k, c := range perKey {
		if c != 3 {
			t.Errorf("%s requested %d times, want 3 (two failures, then sent)", k, c)
		}
	}
	// The row is marked sent after the platform took the message.
	eventually(t, e.clock, 0, "every row sent", func() bool {
		for i := range n {
			if rowState(t, e.db, fmt.Sprintf("t%d:1:0", i)) != "sent" {
				return false
			}
		}
		return true
	})
}

// Rows no replica's clock knows of (due a moment later, as a retry of a
// replica that went away) are taken by the poll fallback; with two
// replicas polling, each is claimed and sent once, and the half whose
// first attempt fails is retried once: the gateway gets each key once,
// or twice for that half, never from two replicas taking one row.
func TestPollTakesRowsNoReplicaKnows(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.gw.setBehaviour(func(req *deliveryv1.SendRequested, try int) behaviour {
		if req.GetChunkIndex() == 0 && try == 1 && req.GetText()[len(req.GetText())-1]%2 == 0 {
			return failFirst(1)(req, try)
		}
		return behaviour{}
	})
	cfg := testConfig()
	cfg.PollInterval = 200 * time.Millisecond
	cfg.Senders = 2
	// A send the gateway answers after the send timeout is retried under
	// its key ("maybe delivered"), a request more for that key: under
	// -race on a loaded machine 300 ms was exceeded (32 requests for 30).
	// The lease outlasts the timeout, as in production, so no row is
	// taken over from a sender that is only slow.
	cfg.SendTimeout, cfg.Lease = 5*time.Second, 10*time.Second
	e.start(t, cfg, "a")
	e.start(t, cfg, "b")
	store := outbox.New(e.db)
	// Due in a moment, as another replica's retries are: no round a
	// replica runs when it starts or is woken now can take them.
	due := e.clock.Now().Add(300 * time.Millisecond)
	const n = 20
	var reqs []*deliveryv1.SendRequested
	for i := range n {
		reqs = append(reqs, &deliveryv1.SendRequested{
			IdempotencyKey: fmt.Sprint("elsewhere-", i), Op: deliveryv1.SendOp_SEND_OP_SEND,
			Target: &deliveryv1.Target{Platform: "test", ChatId: fmt.Sprint("chat-", i%5)},
			Text:   fmt.Sprint("queued elsewhere ", i),
		})
	}
	if _, err := store.Enqueue(context.Background(), due, time.Hour, reqs...); err != nil {
		t.Fatal(err)
	}
	eventually(t, e.clock, 0, "every row", func() bool { return len(e.gw.postedTexts()) == n })
	for text, c := range e.gw.postedTexts() {
		if c != 1 {
			t.Errorf("%q posted %d times", text, c)
		}
	}
	calls, _ := e.gw.snapshot()
	perKey := map[string]int{}
	for _, c := range calls {
		perKey[c.Key]++
	}
	for _, r := range reqs {
		want := 1
		if r.GetText()[len(r.GetText())-1]%2 == 0 {
			want = 2 // failed first
		}
		if got := perKey[r.GetIdempotencyKey()]; got != want {
			t.Errorf("%s requested %d times, want %d", r.GetIdempotencyKey(), got, want)
		}
	}
}

// A row whose sender died mid-send (claimed under its lease, never
// finished) is taken over when the lease runs out, not at the next poll:
// with a poll interval of an hour, nothing else wakes the send loop of
// the replica that started meanwhile, whose first round found the row
// still leased. The row behind it in its chat follows it, each sent
// once, in order. The sender here still answers whether it runs (one
// that does not is taken over at once: TestRowsOfAGoneReplicaAreTakenOverAtOnce),
// as a sender hung mid-send, or one whose answer does not come.
func TestTakeoverWakesTheSendLoop(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	sub, err := e.bus.Conn().Subscribe(e.bus.Topology().DeliveryAliveSubject("died"), func(m *nats.Msg) { _ = m.Respond(nil) })
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	store := outbox.New(e.db)
	reqs := []*deliveryv1.SendRequested{
		{IdempotencyKey: "died-mid-send", Op: deliveryv1.SendOp_SEND_OP_SEND,
			Target: &deliveryv1.Target{Platform: "test", ChatId: "chat-takeover"}, Text: "the dead sender's row"},
		{IdempotencyKey: "behind-it", Op: deliveryv1.SendOp_SEND_OP_SEND,
			Target: &deliveryv1.Target{Platform: "test", ChatId: "chat-takeover"}, Text: "the row behind it"},
	}
	if _, err := store.Enqueue(ctx, e.clock.Now(), time.Hour, reqs...); err != nil {
		t.Fatal(err)
	}
	// The replica that dies claims the first row: its lease outlives the
	// start of the one that takes over.
	const lease = 3 * time.Second
	claimedAt := e.clock.Now()
	rows, err := store.Claim(ctx, claimedAt, lease, "died", 10)
	if err != nil || len(rows) != 1 || rows[0].Key != "died-mid-send" {
		t.Fatalf("claimed %+v, %v", rows, err)
	}
	cfg := testConfig()
	cfg.PollInterval = time.Hour
	e.start(t, cfg, "b")
	eventually(t, e.clock, 0, "both rows sent", func() bool {
		return rowState(t, e.db, "died-mid-send") == "sent" && rowState(t, e.db, "behind-it") == "sent"
	})
	_, posted := e.gw.snapshot()
	var got []string
	for _, p := range posted {
		got = append(got, p.Key)
		if p.Key == "died-mid-send" && p.At.Before(claimedAt.Add(lease)) {
			t.Errorf("taken over at %v, before its lease ran out at %v", p.At, claimedAt.Add(lease))
		}
	}
	if fmt.Sprint(got) != "[died-mid-send behind-it]" {
		t.Errorf("posted %v, want each row once, in order", got)
	}
}
