package homeassistant

import (
	"bytes"
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/switchboard-chat/switchboard/pkg/bus"
	"github.com/switchboard-chat/switchboard/pkg/bus/bustest"
	"github.com/switchboard-chat/switchboard/pkg/platform"
	"github.com/switchboard-chat/switchboard/pkg/platform/platformtest"
	"github.com/switchboard-chat/switchboard/services/gateway/homeassistant/hafake"
)

// A state change read while NATS is out of reach waits in the gateway
// until the bus is back, on the websocket it came by, as the docs say:
// the reader, held up publishing it, reads no pongs meanwhile, and their
// absence is no dead connection. Before, the next ping failed and the
// connection was dropped with the change unpublished; the catch-up after
// the reconnect compares states only, so a door opened and closed again
// during the outage was never told.
func TestChangeReadDuringANATSOutageIsPublished(t *testing.T) {
	t.Parallel()
	n := bustest.NewRestartable(t)
	b := n.Bus(t, n.Topology())

	f := hafake.New(token)
	t.Cleanup(f.Close)
	cfg := testConfig(f)
	// Short, so the outage below spans many intervals; not so short that
	// a loaded machine's late pong drops the connection before the
	// first change (seen at 100 ms under -race with other packages).
	cfg.PingInterval = 400 * time.Millisecond
	s, err := New(cfg, Deps{Log: slog.New(slog.DiscardHandler), Bus: b,
		Runner: platform.Options{Backoff: platform.Schedule(10 * time.Millisecond), LeaseTTL: time.Second}})
	if err != nil {
		t.Fatal(err)
	}
	platformtest.Start(t, b, s)
	platformtest.WaitFor(t, "the gateway to subscribe", func() bool {
		st, _ := s.Runner().State()
		return st == platform.StateConnected && f.Subscribed() == 1
	})
	wctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	closed := f.Change(door("off", "on"))
	platformtest.WaitFor(t, "the first change published", func() bool { return published(wctx, b, closed.EventID) })

	n.Stop()
	opened := f.Change(door("on", "off"))
	time.Sleep(300 * time.Millisecond)
	closedAgain := f.Change(door("off", "on"))
	time.Sleep(3 * time.Second) // many ping intervals
	n.Start()

	platformtest.WaitFor(t, "the door's opening published", func() bool { return published(wctx, b, opened.EventID) })
	platformtest.WaitFor(t, "its closing published", func() bool { return published(wctx, b, closedAgain.EventID) })
	if n := f.Connections(); n != 1 {
		t.Errorf("%d websocket connections, want the first one kept", n)
	}
}

// published reports whether the inbound stream holds an event naming id.
func published(ctx context.Context, b *bus.Bus, id string) bool {
	st, err := b.JetStream().Stream(ctx, b.Topology().Stream(bus.StreamInbound))
	if err != nil {
		return false
	}
	info, err := st.Info(ctx)
	if err != nil {
		return false
	}
	for seq := info.State.FirstSeq; seq <= info.State.LastSeq && seq > 0; seq++ {
		if m, err := st.GetMsg(ctx, seq); err == nil && bytes.Contains(m.Data, []byte(id)) {
			return true
		}
	}
	return false
}
