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
// once ended, with the runner's opts (a fast backoff schedule added);
// it stops at the end of the test.
func runBehind(t *testing.T, o *platformtest.Outage, cfg Config, opts platform.Options) (*Service, chan *eventsv1.MessageReceived) {
	t.Helper()
	b := bustest.New(t, bustest.EmbeddedURL(t))
	evs := platformtest.InboundEvents(t, b)
	cfg.HTTPURL, cfg.Account = "http://"+o.Addr(), bot
	opts.Backoff = platform.Schedule(20 * time.Millisecond)
	s, err := New(cfg, Deps{Log: slog.New(slog.DiscardHandler), Bus: b, Runner: opts})
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
			s, evs := runBehind(t, down, cfg, platform.Options{LeaseTTL: time.Second})
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
//
// The idle timeout is twenty keepalives: a stream that goes without one
// for that long is dropped and dialled again, as it should be, and a
// loaded machine that stalls the test's process (the race detector, busy
// CPUs) for a few keepalives must not look like it. The lease's default
// TTL is kept for the same reason: a lease that lapses in a stall ends
// the stream too.
func TestIdleConnectionKept(t *testing.T) {
	t.Parallel()
	const keepalive, idle = 50 * time.Millisecond, time.Second
	for _, mode := range []string{ReceiveManual, ReceiveSSE} {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			f := signalfake.New(bot)
			t.Cleanup(f.Close)
			if mode == ReceiveManual {
				f.SetReceiveMode(signalfake.Manual)
			} else {
				f.SetKeepalive(keepalive)
			}
			o := platformtest.NewOutage(t)
			o.End(t, strings.TrimPrefix(f.URL, "http://"))
			cfg := DefaultConfig()
			cfg.ReceiveMode, cfg.PollTimeout, cfg.IdleTimeout = mode, 100*time.Millisecond, idle
			s, evs := runBehind(t, o, cfg, platform.Options{})
			waitReceiving(t, s, f, mode)
			if mode == ReceiveManual {
				// The probe call answered: the connection it went
				// over is back in the transport's pool.
				platformtest.WaitFor(t, "a receive call after the probe", func() bool { return f.Polls() >= 2 })
			}
			before, polls, kept := o.Accepted(), f.Polls(), f.Keepalives()
			if mode == ReceiveManual {
				platformtest.WaitFor(t, "ten idle receive calls", func() bool { return f.Polls()-polls >= 10 })
			} else {
				platformtest.WaitFor(t, "keepalives through two idle timeouts", func() bool {
					return f.Keepalives()-kept >= int(2*idle/keepalive)
				})
			}
			// A redial per call would be one per receive call. The
			// transport may dial another connection when a call starts
			// before the last one's went back to its pool (a goroutine
			// puts it back after the answer is read), which a loaded
			// machine makes likelier: CI saw two, then four, in ten
			// calls. Half or fewer is a kept connection, a redial per
			// call all ten. The event stream is one long call: at most
			// one redial.
			n, calls := o.Accepted()-before, f.Polls()-polls
			if mode == ReceiveManual && 2*n > calls || mode == ReceiveSSE && n > 1 {
				t.Fatalf("%d new connections to the daemon while idle (%d receive calls), want the one kept", n, calls)
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
