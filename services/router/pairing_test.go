package router

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/switchboard-chat/switchboard/pkg/bus"
	"github.com/switchboard-chat/switchboard/pkg/pairing"
	"github.com/switchboard-chat/switchboard/services/router/internal/auth"
)

// A pairing code is kept only once the notice carrying it is on the bus.
// With the replies stream gone, the notice's publish fails (it reaches
// core subscribers, as a publish whose acknowledgement was lost does,
// but no stream stores it for delivery): the code is not kept, and the
// redelivered message issues a new one, not "a code was sent to you
// recently" for a code nobody got. Only the sent code approves, and its
// notice is the one the replies stream holds. Hermes stores the code
// before sending it: a failed send cost the user ten minutes.
func TestPairingCodeKeptOnlyOnceSent(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	cfg := testConfig()
	cfg.Auth.UnauthorizedDMBehavior = auth.DMPair
	e.startRouter(cfg, nil, nil)
	ctx := context.Background()
	js := e.bus.JetStream()
	replies := e.bus.Topology().Stream(bus.StreamReplies)
	if err := js.DeleteStream(ctx, replies); err != nil {
		t.Fatal(err)
	}
	// Each attempt draws a code id, committed or not.
	attempts := func() int64 {
		var n int64
		if err := e.db.QueryRow(ctx, `SELECT coalesce(pg_sequence_last_value(pg_get_serial_sequence('pairing_codes', 'id')), 0)`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	e.publish(dm("mallory", "hello"))
	// The second attempt runs once the first failed (one message of a
	// partition at a time): then the stream comes back.
	waitFor(t, "a second pairing attempt", func() bool { return attempts() >= 2 })
	if err := e.bus.EnsureStreams(ctx); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "inbound drained", e.inboundDrained)

	var kept int
	if err := e.db.QueryRow(ctx, `SELECT count(*) FROM pairing_codes`).Scan(&kept); err != nil || kept != 1 {
		t.Fatalf("%d codes kept (%v), want the one sent", kept, err)
	}
	// Every attempt's notice reached the test's subscription, each under
	// ids of its own (a later one is no duplicate of a lost one).
	e.mu.Lock()
	var codes, turns []string
	for _, n := range e.notices {
		if m := codeRE.FindStringSubmatch(n.GetNotice().GetText()); m != nil && n.GetTarget().GetChatId() == "chat-mallory" {
			codes, turns = append(codes, m[1]), append(turns, n.GetTurnId())
		}
	}
	e.mu.Unlock()
	if len(codes) < 2 {
		t.Fatalf("pairing notices %q, want the failed attempt's and the sent one", codes)
	}
	for i := range turns {
		for j := range i {
			if turns[i] == turns[j] {
				t.Fatalf("two pairing notices under turn id %s", turns[i])
			}
		}
	}
	// The stream holds the last notice only: what delivery sends.
	st, err := js.Stream(ctx, replies)
	if err != nil {
		t.Fatal(err)
	}
	if info, err := st.Info(ctx); err != nil || info.State.Msgs != 1 {
		t.Fatalf("replies stream: %+v %v, want the sent notice alone", info, err)
	}
	store := pairing.NewStore(e.db)
	sent := codes[len(codes)-1]
	for _, lost := range codes[:len(codes)-1] {
		if lost == sent {
			continue
		}
		if _, err := store.Approve(ctx, "telegram", lost, "op"); !errors.Is(err, pairing.ErrInvalidCode) {
			t.Fatalf("approving the code of a failed notice: %v, want invalid", err)
		}
	}
	if p, err := store.Approve(ctx, "telegram", sent, "op"); err != nil || p.UserID != "mallory" {
		t.Fatalf("approving the sent code: %+v %v", p, err)
	}
}

// A router that crashed after a pairing code was kept (its notice on the
// bus) but before it recorded the message as handled sees the message
// again: the redelivery recognises its own code and publishes nothing,
// neither a second code nor "a code was sent to you recently". Another
// message of the same user within the rate window still gets that answer.
func TestPairingRedeliveryAfterACrashPublishesNothingNew(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	cfg := testConfig()
	cfg.Auth.UnauthorizedDMBehavior = auth.DMPair
	e.startRouter(cfg, nil, nil)
	ctx := context.Background()
	ev := dm("mallory", "hello")
	e.publish(ev)
	waitFor(t, "the pairing notice", func() bool { return len(e.noticesTo("mallory")) == 1 })
	waitFor(t, "inbound drained", e.inboundDrained)
	// The crash: the code is kept, the message is not recorded as handled.
	keys, err := e.rdb.Keys(ctx, e.prefix+"inbound:*").Result()
	if err != nil || len(keys) != 1 {
		t.Fatalf("dedupe records %v, %v", keys, err)
	}
	if err := e.rdb.Del(ctx, keys...).Err(); err != nil {
		t.Fatal(err)
	}
	e.publishID(ev, "redelivered")
	waitFor(t, "inbound drained", e.inboundDrained)
	// The replies stream stores what the router published before it
	// acknowledged the message: the code's notice alone.
	st, err := e.bus.JetStream().Stream(ctx, e.bus.Topology().Stream(bus.StreamReplies))
	if err != nil {
		t.Fatal(err)
	}
	if info, err := st.Info(ctx); err != nil || info.State.Msgs != 1 {
		t.Fatalf("replies stream after the redelivery: %+v %v, want the code's notice alone", info.State, err)
	}
	// A later message is handled after the redelivery (one message of a
	// partition at a time): once its answer is in, the redelivery's
	// would be too.
	e.publish(dm("mallory", "again"))
	waitFor(t, "the answer to the next message", func() bool { return len(e.noticesTo("mallory")) >= 2 })
	waitFor(t, "inbound drained", e.inboundDrained)
	got := e.noticesTo("mallory")
	if len(got) != 2 || !codeRE.MatchString(got[0]) || !strings.Contains(got[1], "sent to you recently") {
		t.Fatalf("notices %q, want the code, then the rate limit's answer to the next message only", got)
	}
	var kept int
	if err := e.db.QueryRow(ctx, `SELECT count(*) FROM pairing_codes`).Scan(&kept); err != nil || kept != 1 {
		t.Fatalf("%d codes kept (%v), want one", kept, err)
	}
}
