package signal

import (
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/switchboard-chat/switchboard/pkg/bus/bustest"
	eventsv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/events/v1"
	"github.com/switchboard-chat/switchboard/pkg/platform"
	"github.com/switchboard-chat/switchboard/pkg/platform/platformtest"
	"github.com/switchboard-chat/switchboard/services/gateway/signal/signalfake"
)

// runBehind runs a gateway pointed at o, which forwards to the daemon
// once ended; it stops at the end of the test.
func runBehind(t *testing.T, o *platformtest.Outage, cfg Config) (*Service, chan *eventsv1.MessageReceived) {
	t.Helper()
	b := bustest.New(t, bustest.EmbeddedURL(t))
	evs := platformtest.InboundEvents(t, b)
	cfg.HTTPURL, cfg.Account = "http://"+o.Addr(), bot
	s, err := New(cfg, Deps{Log: slog.New(slog.DiscardHandler), Bus: b,
		Runner: platform.Options{Backoff: platform.Schedule(20 * time.Millisecond), LeaseTTL: time.Second}})
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	platformtest.Start(t, b, s)
	return s, evs
}

// A daemon that is down when the gateway starts is tried again on the
// backoff schedule, the gateway unready meanwhile; once it is up a
// message gets through, in both receive modes.
func TestDaemonDownAtStart(t *testing.T) {
	t.Parallel()
	for _, mode := range []string{ReceiveManual, ReceiveSSE} {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			f := signalfake.New(bot)
			t.Cleanup(f.Close)
			if mode == ReceiveManual {
				f.SetReceiveMode(signalfake.Manual)
			}
			down := platformtest.NewOutage(t)
			cfg := DefaultConfig()
			cfg.ReceiveMode, cfg.PollTimeout = mode, 300*time.Millisecond
			s, evs := runBehind(t, down, cfg)
			down.ComeUp(t, s, "not reachable", strings.TrimPrefix(f.URL, "http://"))
			waitReceiving(t, s, f, mode)
			f.Receive(signalfake.Message{From: ann, Text: "are you there?"})
			if ev := platformtest.NextEvent(t, evs); ev.GetText() != "are you there?" {
				t.Fatalf("got %q", ev.GetText())
			}
		})
	}
}

// An idle gateway keeps its connection to the daemon: each receive call
// (manual mode) goes over the kept-alive connection, an idle event
// stream (sse mode) with the daemon's keepalives stays open; neither is
// torn down and dialled again every poll.
func TestIdleConnectionKept(t *testing.T) {
	t.Parallel()
	for _, mode := range []string{ReceiveManual, ReceiveSSE} {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			f := signalfake.New(bot)
			t.Cleanup(f.Close)
			if mode == ReceiveManual {
				f.SetReceiveMode(signalfake.Manual)
			} else {
				f.SetKeepalive(50 * time.Millisecond)
			}
			o := platformtest.NewOutage(t)
			o.End(t, strings.TrimPrefix(f.URL, "http://"))
			cfg := DefaultConfig()
			cfg.ReceiveMode, cfg.PollTimeout, cfg.IdleTimeout = mode, 100*time.Millisecond, 300*time.Millisecond
			s, evs := runBehind(t, o, cfg)
			waitReceiving(t, s, f, mode)
			time.Sleep(200 * time.Millisecond) // the first calls' connections made
			before, polls := o.Accepted(), f.Polls()
			if mode == ReceiveManual {
				platformtest.WaitFor(t, "ten idle receive calls", func() bool { return f.Polls()-polls >= 10 })
			} else {
				time.Sleep(2 * time.Second) // six idle timeouts
			}
			// At most one more: the transport may dial a second
			// connection when a call starts before the last one's went
			// back to its pool; a redial per call would be ten.
			if n := o.Accepted() - before; n > 1 {
				t.Fatalf("%d new connections to the daemon while idle (%d receive calls), want none", n, f.Polls()-polls)
			}
			if mode == ReceiveSSE && f.Connections() != 1 {
				t.Fatalf("%d event streams opened, want the one kept", f.Connections())
			}
			f.Receive(signalfake.Message{From: ann, Text: "still here"})
			if ev := platformtest.NextEvent(t, evs); ev.GetText() != "still here" {
				t.Fatalf("got %q", ev.GetText())
			}
		})
	}
}
