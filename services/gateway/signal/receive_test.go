package signal

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/switchboard-chat/switchboard/pkg/bus/bustest"
	eventsv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/events/v1"
	"github.com/switchboard-chat/switchboard/pkg/platform"
	"github.com/switchboard-chat/switchboard/pkg/platform/platformtest"
	"github.com/switchboard-chat/switchboard/services/gateway/signal/signalfake"
)

// texts reads n events from evs and returns their texts in order.
func texts(t *testing.T, evs chan *eventsv1.MessageReceived, n int) []string {
	t.Helper()
	var out []string
	for range n {
		select {
		case ev := <-evs:
			out = append(out, ev.GetText())
		case <-time.After(15 * time.Second):
			t.Fatalf("%d events within 15s (%q), want %d", len(out), out, n)
		}
	}
	return out
}

// quiet checks that nothing more is published within a short while.
func quiet(t *testing.T, evs chan *eventsv1.MessageReceived) {
	t.Helper()
	select {
	case ev := <-evs:
		t.Fatalf("unexpected event %q", ev.GetText())
	case <-time.After(500 * time.Millisecond):
	}
}

// The gap this mode closes: messages sent while no gateway runs (a
// restart, a deploy) are received once one starts again in manual mode;
// in sse mode they are gone (signal-cli 0.14.6 keeps nothing for a
// stream opened later).
func TestMessagesWhileStopped(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		mode string
		want []string // published after the restart
	}{
		{ReceiveManual, []string{"two", "three", "four"}},
		{ReceiveSSE, []string{"four"}},
	} {
		t.Run(tc.mode, func(t *testing.T) {
			t.Parallel()
			f := signalfake.New(bot)
			t.Cleanup(f.Close)
			if tc.mode == ReceiveManual {
				f.SetReceiveMode(signalfake.Manual)
			}
			b := bustest.New(t, bustest.EmbeddedURL(t))
			evs := platformtest.InboundEvents(t, b)
			cfg := DefaultConfig()
			cfg.ReceiveMode, cfg.Reactions = tc.mode, false

			s, stop := runGatewayStop(t, b, f, cfg, platform.Options{Instance: "first"})
			waitReceiving(t, s, f, tc.mode)
			f.Receive(signalfake.Message{From: ann, Text: "one"})
			if got := texts(t, evs, 1); got[0] != "one" {
				t.Fatalf("got %q", got)
			}
			stop()
			f.Receive(signalfake.Message{From: ann, Text: "two"})
			f.Receive(signalfake.Message{From: ann, Text: "three"})

			s2 := runGateway(t, b, f, cfg, platform.Options{Instance: "second"})
			waitReceiving(t, s2, f, tc.mode)
			f.Receive(signalfake.Message{From: ann, Text: "four"})
			if got := texts(t, evs, len(tc.want)); strings.Join(got, " ") != strings.Join(tc.want, " ") {
				t.Fatalf("after the restart got %q, want %q", got, tc.want)
			}
			quiet(t, evs)
			if lost := f.Lost(); len(lost) != 0 {
				t.Fatalf("the daemon answered %d messages to nobody", len(lost))
			}
		})
	}
}

// A backlog is taken max_messages at a time, in order, each batch
// published before the next call; the calls carry the configured timeout
// and bound.
func TestManualBatches(t *testing.T) {
	t.Parallel()
	f := signalfake.New(bot)
	t.Cleanup(f.Close)
	f.SetReceiveMode(signalfake.Manual)
	var want []string
	for i := range 7 {
		want = append(want, fmt.Sprintf("m%d", i))
		f.Receive(signalfake.Message{From: ann, Text: want[i]})
	}
	b := bustest.New(t, bustest.EmbeddedURL(t))
	evs := platformtest.InboundEvents(t, b)
	cfg := DefaultConfig()
	cfg.MaxMessages, cfg.PollTimeout, cfg.Reactions = 3, 400*time.Millisecond, false
	runGateway(t, b, f, cfg, platform.Options{})
	if got := texts(t, evs, len(want)); strings.Join(got, " ") != strings.Join(want, " ") {
		t.Fatalf("got %q, want %q in order", got, want)
	}
	quiet(t, evs)
	calls := f.Calls("receive")
	if len(calls) < 3 {
		t.Fatalf("%d receive calls for 7 messages in batches of 3", len(calls))
	}
	for i, c := range calls {
		// The first call (the probe) waits min(1 s, poll_timeout).
		if c.Params["maxMessages"].(json.Number).String() != "3" || c.Params["timeout"].(json.Number).String() != "0.4" || c.Params["account"] != bot {
			t.Fatalf("call %d params %v, want timeout 0.4, maxMessages 3 and the account", i, c.Params)
		}
	}
	if f.Pending() != 0 || len(f.Lost()) != 0 {
		t.Fatalf("%d pending, %d lost", f.Pending(), len(f.Lost()))
	}
}

// A gateway that stops while its receive call waits does not abandon
// the call (the daemon would answer nobody): it waits for the answer,
// at most the poll timeout when nothing comes, and publishes what the
// call took before it returns.
func TestManualShutdownMidPoll(t *testing.T) {
	t.Parallel()
	f := signalfake.New(bot)
	t.Cleanup(f.Close)
	f.SetReceiveMode(signalfake.Manual)
	b := bustest.New(t, bustest.EmbeddedURL(t))
	evs := platformtest.InboundEvents(t, b)
	cfg := DefaultConfig()
	cfg.PollTimeout, cfg.Reactions = 2*time.Second, false

	// A message arrives after the stop began: the call in flight takes
	// it, and it is published before Run returns.
	s, stop := runGatewayStop(t, b, f, cfg, platform.Options{})
	waitReceiving(t, s, f, ReceiveManual)
	platformtest.WaitFor(t, "a long poll in flight", func() bool { return len(f.Calls("receive")) >= 2 && f.Polling() == 1 })
	stopped := make(chan time.Duration, 1)
	began := time.Now()
	go func() { stop(); stopped <- time.Since(began) }()
	time.Sleep(200 * time.Millisecond)
	f.Receive(signalfake.Message{From: ann, Text: "during the stop"})
	took := <-stopped
	select {
	case ev := <-evs:
		if ev.GetText() != "during the stop" {
			t.Fatalf("published %q", ev.GetText())
		}
	default:
		t.Fatal("the message the last call took was not published before the gateway stopped")
	}
	if lost := f.Lost(); len(lost) != 0 || f.Pending() != 0 {
		t.Fatalf("lost %d, pending %d: want the message published", len(lost), f.Pending())
	}
	if took > cfg.PollTimeout {
		t.Fatalf("the stop took %s, more than the call's timeout %s", took, cfg.PollTimeout)
	}

	// Nothing arrives: the stop waits for the call's timeout, no longer.
	s2, stop2 := runGatewayStop(t, b, f, cfg, platform.Options{})
	waitReceiving(t, s2, f, ReceiveManual)
	began = time.Now()
	stop2()
	if took := time.Since(began); took > cfg.PollTimeout+time.Second {
		t.Fatalf("an idle stop took %s, want at most the poll timeout %s", took, cfg.PollTimeout)
	}
	if f.Polling() != 0 || len(f.Lost()) != 0 {
		t.Fatalf("after the stop: %d calls in flight, %d lost", f.Polling(), len(f.Lost()))
	}
}

// A daemon that receives on its own (started without
// --receive-mode=manual) refuses receive calls: the gateway is not ready,
// and says why, and receives once the daemon is in manual mode. A
// refusal that passes (another caller's call ending) and a daemon error
// are retried, losing nothing; a daemon without the receive method is
// fatal.
func TestManualDaemonErrors(t *testing.T) {
	t.Parallel()
	t.Run("wrong mode", func(t *testing.T) {
		t.Parallel()
		f := signalfake.New(bot) // on-start, signal-cli's default
		t.Cleanup(f.Close)
		b := bustest.New(t, bustest.EmbeddedURL(t))
		evs := platformtest.InboundEvents(t, b)
		cfg := DefaultConfig()
		cfg.Reactions = false
		s := runGateway(t, b, f, cfg, platform.Options{})
		platformtest.WaitFor(t, "refused receive calls", func() bool { return len(f.Calls("receive")) >= 2 })
		err := s.Ready(context.Background())
		if err == nil || !strings.Contains(err.Error(), "--receive-mode=manual") || !strings.Contains(err.Error(), "already receiving") {
			t.Fatalf("readiness %v, want unready naming --receive-mode=manual", err)
		}
		if st, _ := s.Runner().State(); st != platform.StateConnecting {
			t.Fatalf("state %s, want connecting (retrying)", st)
		}
		f.SetReceiveMode(signalfake.Manual) // the operator restarts the daemon
		f.Receive(signalfake.Message{From: ann, Text: "after the fix"})
		waitReceiving(t, s, f, ReceiveManual)
		if err := s.Ready(context.Background()); err != nil {
			t.Fatalf("ready: %v", err)
		}
		if got := texts(t, evs, 1); got[0] != "after the fix" {
			t.Fatalf("got %q", got)
		}
	})
	for _, tc := range []struct {
		name string
		err  *signalfake.RPCError
	}{
		{"refused once", signalfake.AlreadyReceiving()},
		{"io error", &signalfake.RPCError{Code: -3, Message: "Error while receiving messages: Connection closed!"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			g := start(t, DefaultConfig(), platform.Options{})
			n := len(g.f.Calls("receive"))
			g.f.FailNext("receive", tc.err)
			g.f.Receive(signalfake.Message{From: ann, Text: "one"})
			g.f.Receive(signalfake.Message{From: ann, Text: "two"})
			if got := texts(t, g.evs, 2); strings.Join(got, " ") != "one two" {
				t.Fatalf("got %q", got)
			}
			if len(g.f.Calls("receive")) < n+2 {
				t.Fatalf("the failed call was not retried")
			}
		})
	}
	t.Run("no receive method", func(t *testing.T) {
		t.Parallel()
		f := signalfake.New(bot)
		t.Cleanup(f.Close)
		f.SetReceiveMode(signalfake.Manual)
		f.FailNext("receive", &signalfake.RPCError{Code: -32601, Message: "Method not implemented"})
		b := bustest.New(t, bustest.EmbeddedURL(t))
		s := runGateway(t, b, f, DefaultConfig(), platform.Options{})
		platformtest.WaitFor(t, "the fatal state", func() bool { st, _ := s.Runner().State(); return st == platform.StateFatal })
		if err := s.Ready(context.Background()); err == nil || !strings.Contains(err.Error(), "no receive method") {
			t.Fatalf("readiness %v", err)
		}
	})
}

// Two replicas, messages arriving all along: the active one stops (a
// rolling deploy), the standby takes the lease and receives. Every
// message is published exactly once, none answered to nobody.
func TestManualLeaseHandover(t *testing.T) {
	t.Parallel()
	f := signalfake.New(bot)
	t.Cleanup(f.Close)
	f.SetReceiveMode(signalfake.Manual)
	b := bustest.New(t, bustest.EmbeddedURL(t))
	evs := platformtest.InboundEvents(t, b)
	cfg := DefaultConfig()
	cfg.PollTimeout, cfg.Reactions = 500*time.Millisecond, false
	opts := platform.Options{LeaseTTL: 600 * time.Millisecond}
	type replica struct {
		s    *Service
		stop func()
	}
	var rs []replica
	for _, name := range []string{"a", "b"} {
		o := opts
		o.Instance = name
		s, stop := runGatewayStop(t, b, f, cfg, o)
		rs = append(rs, replica{s, stop})
	}
	active := func() int {
		for i, r := range rs {
			if st, _ := r.s.Runner().State(); st == platform.StateConnected {
				return i
			}
		}
		return -1
	}
	platformtest.WaitFor(t, "an active replica", func() bool { return active() >= 0 && f.Polling() == 1 })
	first := active()
	if st, _ := rs[1-first].s.Runner().State(); st != platform.StateStandby {
		t.Fatalf("the other replica is %s, want standby", st)
	}

	const n = 40
	sent := make(chan struct{})
	go func() {
		defer close(sent)
		for i := range n {
			f.Receive(signalfake.Message{From: ann, Text: fmt.Sprintf("m%02d", i)})
			time.Sleep(40 * time.Millisecond)
		}
	}()
	time.Sleep(400 * time.Millisecond)
	rs[first].stop()
	platformtest.WaitFor(t, "the standby to take over", func() bool {
		st, _ := rs[1-first].s.Runner().State()
		return st == platform.StateConnected
	})
	<-sent
	got := texts(t, evs, n)
	quiet(t, evs)
	for i, text := range got {
		if want := fmt.Sprintf("m%02d", i); text != want {
			t.Fatalf("event %d is %q, want %q (all: %q)", i, text, want, got)
		}
	}
	if lost := f.Lost(); len(lost) != 0 {
		t.Fatalf("%d messages answered to nobody", len(lost))
	}
}

// A message taken while NATS is out of reach waits in the gateway (the
// daemon already acknowledged it to Signal): no further receive call is
// made meanwhile, and it is published once NATS is back.
func TestManualHoldsWhatTheBusRefuses(t *testing.T) {
	t.Parallel()
	nats := bustest.NewRestartable(t)
	b := nats.Bus(t, nats.Topology())

	f := signalfake.New(bot)
	t.Cleanup(f.Close)
	f.SetReceiveMode(signalfake.Manual)
	cfg := DefaultConfig()
	cfg.PollTimeout, cfg.Reactions = 200*time.Millisecond, false
	s := runGateway(t, b, f, cfg, platform.Options{})
	waitReceiving(t, s, f, ReceiveManual)

	nats.Stop()
	f.Receive(signalfake.Message{From: ann, Text: "while NATS is down"})
	platformtest.WaitFor(t, "the message taken", func() bool { return f.Pending() == 0 && f.Polling() == 0 })
	calls := len(f.Calls("receive"))
	time.Sleep(time.Second)
	if n := len(f.Calls("receive")); n != calls {
		t.Fatalf("%d receive calls while the gateway held an unpublished message", n-calls)
	}
	nats.Start()
	evs := platformtest.InboundEvents(t, b)
	if got := texts(t, evs, 1); got[0] != "while NATS is down" {
		t.Fatalf("got %q", got)
	}
	platformtest.WaitFor(t, "receive calls again", func() bool { return len(f.Calls("receive")) > calls })
	quiet(t, evs)
}

// How a failed receive call ends the connection.
func TestReceiveFailed(t *testing.T) {
	t.Parallel()
	p, err := NewPlatform(Config{HTTPURL: "http://127.0.0.1:1", Account: bot}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name  string
		err   error
		fatal bool
		says  string
	}{
		{"already receiving", &rpcError{Method: "receive", Code: -1, Message: "Receive command cannot be used if messages are already being received."}, false, "--receive-mode=manual"},
		{"no such method", &rpcError{Method: "receive", Code: -32601, Message: "Method not implemented"}, true, "no receive method"},
		{"no such account", &rpcError{Method: "receive", Code: -32602, Message: "Specified account does not exist"}, true, "has no account " + bot},
		{"io error", &rpcError{Method: "receive", Code: -3, Message: "Error while receiving messages: Connection closed!"}, false, "Connection closed!"},
		{"http", &httpError{Op: "receive", Status: 502}, false, "HTTP 502"},
		{"network", fmt.Errorf("signal-cli receive: %w", context.DeadlineExceeded), false, "deadline"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := p.receiveFailed(tc.err)
			if platform.IsFatal(got) != tc.fatal || !strings.Contains(got.Error(), tc.says) {
				t.Fatalf("%v (fatal %v), want fatal %v saying %q", got, platform.IsFatal(got), tc.fatal, tc.says)
			}
		})
	}
}
