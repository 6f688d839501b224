package bluebubbles

import (
	"bytes"
	"context"
	"log/slog"
	"net/http"
	"testing"
	"time"

	"github.com/switchboard-chat/switchboard/pkg/bus"
	"github.com/switchboard-chat/switchboard/pkg/bus/bustest"
	"github.com/switchboard-chat/switchboard/pkg/platform"
	"github.com/switchboard-chat/switchboard/pkg/platform/platformtest"
	"github.com/switchboard-chat/switchboard/services/gateway/bluebubbles/bbfake"
)

// BlueBubbles posts each webhook once and never again, whatever the
// answer. Messages posted while NATS is out of reach longer than
// ack_timeout are held by the gateway and published once the bus is
// back, in the order they came, once each; before, each was answered 500
// and lost.
func TestMessagesPostedDuringANATSOutageArePublished(t *testing.T) {
	t.Parallel()
	n := bustest.NewRestartable(t)
	b := n.Bus(t, n.Topology())

	f := newFake(t, false)
	cfg := testConfig(f)
	cfg.AckTimeout = 300 * time.Millisecond
	s, err := New(cfg, Deps{Log: slog.New(slog.DiscardHandler), Bus: b,
		Runner: platform.Options{Backoff: platform.Schedule(10 * time.Millisecond)}})
	if err != nil {
		t.Fatal(err)
	}
	platformtest.Start(t, b, s)
	platformtest.WaitFor(t, "the gateway to be ready", func() bool { return s.Ready(context.Background()) == nil && s.Addr() != "" })
	hook := hookURL(s.p, f.Password)

	n.Stop()
	var guids []string
	for _, text := range []string{"first, while NATS is down", "second"} {
		body, guid := bbfake.Event(bbfake.Inbound{ChatGUID: dmGUID, From: ann, Text: text})
		code, _, err := bbfake.Post(context.Background(), hook, body)
		if err != nil || code/100 != 2 {
			t.Fatalf("%q answered %d %v, want it taken", text, code, err)
		}
		guids = append(guids, guid)
	}
	time.Sleep(time.Second)
	n.Start()

	wctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var seqs []uint64
	platformtest.WaitFor(t, "the held messages published", func() bool {
		seqs = publishedSeqs(wctx, b, guids)
		return len(seqs) == len(guids)
	})
	if seqs[0] >= seqs[1] {
		t.Fatalf("published at %v: want the messages in the order they came", seqs)
	}
	// Nothing twice.
	time.Sleep(2 * holdRetry)
	if seqs = publishedSeqs(wctx, b, guids); len(seqs) != len(guids) {
		t.Fatalf("published at %v: want each message once", seqs)
	}
	if code, _, err := bbfake.Post(context.Background(), hook, mustEvent(t, "after the outage")); err != nil || code != http.StatusOK {
		t.Fatalf("a message after the outage answered %d %v", code, err)
	}
}

func mustEvent(t *testing.T, text string) []byte {
	t.Helper()
	body, _ := bbfake.Event(bbfake.Inbound{ChatGUID: dmGUID, From: ann, Text: text})
	return body
}

// publishedSeqs are the inbound stream's sequences of the events naming
// each of ids, in stream order; an id found twice counts twice.
func publishedSeqs(ctx context.Context, b *bus.Bus, ids []string) []uint64 {
	st, err := b.JetStream().Stream(ctx, b.Topology().Stream(bus.StreamInbound))
	if err != nil {
		return nil
	}
	info, err := st.Info(ctx)
	if err != nil {
		return nil
	}
	var out []uint64
	for _, id := range ids {
		for seq := info.State.FirstSeq; seq <= info.State.LastSeq && seq > 0; seq++ {
			if m, err := st.GetMsg(ctx, seq); err == nil && bytes.Contains(m.Data, []byte(id)) {
				out = append(out, seq)
			}
		}
	}
	return out
}
