// Package platformtest is the contract suite every platform gateway passes
// against a fake of its platform: normalization of each message kind,
// dedupe of a redelivered event, send/edit/typing receipts with
// idempotency, reconnect after the platform drops the connection, and
// rejection of oversized and malformed payloads with a logged reason.
//
// A gateway's test provides a Harness whose New builds the platform and a
// Fake that drives the platform's side of the real wire protocol.
package platformtest

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/encoding/prototext"
	"google.golang.org/protobuf/proto"

	"github.com/switchboard-chat/switchboard/pkg/bus"
	"github.com/switchboard-chat/switchboard/pkg/bus/bustest"
	deliveryv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/delivery/v1"
	eventsv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/events/v1"
	"github.com/switchboard-chat/switchboard/pkg/platform"
	"github.com/switchboard-chat/switchboard/pkg/telemetry/telemetrytest"
)

// Env is what the suite gives a harness to build its platform with.
type Env struct {
	Bus *bus.Bus
	// Log captures what the gateway logs; the suite reads it to check
	// rejection reasons.
	Log *slog.Logger
	// Runner is set once the runner exists (after New returned); HTTP
	// platforms that deliver outside Connect may use it.
	Runner func() *platform.Runner
}

// Fake drives the platform's side of the wire.
type Fake interface {
	// Kinds lists the message kinds the platform normalizes (text,
	// image, command, reply …); the suite delivers one of each.
	Kinds() []string
	// Deliver makes the platform send one event of kind and returns the
	// normalized event the gateway must publish (received_at is ignored;
	// sent_at, message_id and source.account only when set).
	Deliver(t *testing.T, ctx context.Context, kind string) *eventsv1.MessageReceived
	// Redeliver sends the event with this id again, as the platform does
	// when it did not see an acknowledgement.
	Redeliver(t *testing.T, ctx context.Context, eventID string)
	// DeliverOversized and DeliverMalformed send payloads the gateway
	// must reject with a logged reason and never publish.
	DeliverOversized(t *testing.T, ctx context.Context)
	DeliverMalformed(t *testing.T, ctx context.Context)
	// Drop breaks the current connection from the platform's side.
	Drop(t *testing.T)
	// Connections counts connections the platform accepted so far.
	Connections() int
	// Answer returns a send request (target, input message ids) that
	// replies to ev, the event the gateway published.
	Answer(ev *eventsv1.MessageReceived) *deliveryv1.SendRequested
	// Sent returns the texts the platform shows for target so far.
	Sent(t *testing.T, ctx context.Context, target *deliveryv1.Target) []string
}

// ReactionFake is implemented by the fakes of platforms that react to
// the user's messages (platform.Reactor): with reactions on, the suite
// checks what a turn leaves on the message it answers.
type ReactionFake interface {
	// Reactions returns the bot's reactions on message messageID in
	// target's chat, as the platform shows them.
	Reactions(t *testing.T, ctx context.Context, target *deliveryv1.Target, messageID string) []string
}

// PoisonFake is implemented by the fakes that can send a payload whose
// handling panics in the gateway's code (a crafted payload, or one whose
// handling reads an answer of the platform's API that reaches a nil
// path): the suite checks that the gateway skips it, counted, keeps its
// connection and publishes the payloads around it. The memory platform's
// fake is one; no real gateway's fake has such a payload now (Signal's
// overflowing mention and Discord's null channel are handled), and the
// suite skips the check for them.
type PoisonFake interface {
	DeliverPoison(t *testing.T, ctx context.Context)
}

// Sessioned is implemented by the fakes whose Connections counts more
// than the gateway's connections (Telegram's counts long polls, one
// after another in one polling session): Sessions counts the
// connections proper, which rise only when the gateway reconnects.
type Sessioned interface {
	Sessions() int
}

// sessions counts the gateway's connections proper (Sessioned).
func sessions(f Fake) int {
	if s, ok := f.(Sessioned); ok {
		return s.Sessions()
	}
	return f.Connections()
}

// Connectionless is implemented by the fakes of platforms that keep no
// connection to the platform, whose events the platform posts to the
// gateway (the WhatsApp Cloud API's webhooks): there is nothing to drop,
// and the reconnect check is skipped.
type Connectionless interface {
	Connectionless() bool
}

// Harness builds a fresh platform and its fake for each subtest.
type Harness struct {
	New func(t *testing.T, env Env) (platform.Platform, Fake)
}

// Run runs the contract suite.
func Run(t *testing.T, h Harness) {
	t.Run("normalizes each kind", func(t *testing.T) {
		s := start(t, h)
		for _, kind := range s.fake.Kinds() {
			want := s.fake.Deliver(t, s.ctx, kind)
			got := s.next(t)
			s.compare(t, kind, want, got)
		}
	})
	t.Run("dedupes a redelivered event", func(t *testing.T) {
		s := start(t, h)
		kind := s.fake.Kinds()[0]
		first := s.fake.Deliver(t, s.ctx, kind)
		s.next(t)
		s.fake.Redeliver(t, s.ctx, first.GetEventId())
		sentinel := s.fake.Deliver(t, s.ctx, kind)
		if got := s.next(t); got.GetEventId() != sentinel.GetEventId() {
			t.Fatalf("after a redelivery of %s the next event is %s, want the sentinel %s", first.GetEventId(), got.GetEventId(), sentinel.GetEventId())
		}
	})
	t.Run("send edit typing receipts", func(t *testing.T) {
		s := start(t, h)
		caps := s.p.Capabilities()
		s.fake.Deliver(t, s.ctx, s.fake.Kinds()[0])
		ev := s.next(t)
		req := s.fake.Answer(ev)
		req.Op = deliveryv1.SendOp_SEND_OP_SEND
		req.IdempotencyKey = "turn-1:1:0:" + ev.GetEventId()
		req.Text = "reply to " + ev.GetEventId()
		req.Final = true
		first := s.send(t, req)
		if !caps.CanSend {
			if first.GetOk() || first.GetErrorClass() != deliveryv1.ErrorClass_ERROR_CLASS_PERMANENT {
				t.Fatalf("send on a platform that cannot send: receipt %v, want a permanent error", first)
			}
			return
		}
		if !first.GetOk() || first.GetPlatformMessageId() == "" || first.GetDuplicate() {
			t.Fatalf("first send receipt %v: want ok with a message id", first)
		}
		again := s.send(t, req)
		if is, ok := s.p.(platform.IdempotentSender); ok && is.IdempotentSends() {
			// No receipts kept: the platform itself takes a repeat once
			// (checked below).
			if !again.GetOk() {
				t.Fatalf("repeated send receipt %v: want ok", again)
			}
		} else if !again.GetOk() || !again.GetDuplicate() || again.GetPlatformMessageId() != first.GetPlatformMessageId() {
			t.Fatalf("repeated send receipt %v: want the first receipt (id %s) marked duplicate", again, first.GetPlatformMessageId())
		}
		waitFor(t, s.ctx, "the reply to show once on the platform", func() bool {
			return count(s.fake.Sent(t, s.ctx, req.GetTarget()), req.Text) == 1
		})
		if n := count(s.fake.Sent(t, s.ctx, req.GetTarget()), req.Text); n != 1 {
			t.Fatalf("platform shows the reply %d times, want once", n)
		}

		edit := proto.Clone(req).(*deliveryv1.SendRequested)
		edit.Op = deliveryv1.SendOp_SEND_OP_EDIT
		edit.IdempotencyKey = "turn-1:1:edit:" + ev.GetEventId()
		edit.MessageId = first.GetPlatformMessageId()
		edit.Text = "edited"
		r := s.send(t, edit)
		if caps.CanEdit && !r.GetOk() {
			t.Fatalf("edit receipt %v: want ok", r)
		}
		if !caps.CanEdit && (r.GetOk() || r.GetErrorClass() != deliveryv1.ErrorClass_ERROR_CLASS_PERMANENT) {
			t.Fatalf("edit on a platform that cannot edit: receipt %v, want a permanent error", r)
		}

		typing := s.fake.Answer(ev)
		typing.Op = deliveryv1.SendOp_SEND_OP_TYPING
		r = s.send(t, typing)
		if caps.CanTyping && !r.GetOk() {
			t.Fatalf("typing receipt %v: want ok", r)
		}
		if !caps.CanTyping && r.GetOk() {
			t.Fatalf("typing on a platform without typing: receipt ok, want an error")
		}

		bad := &deliveryv1.SendRequested{Op: deliveryv1.SendOp_SEND_OP_SEND, IdempotencyKey: "no-target"}
		if r := s.send(t, bad); r.GetOk() || r.GetErrorClass() != deliveryv1.ErrorClass_ERROR_CLASS_PERMANENT {
			t.Fatalf("send without a target: receipt %v, want a permanent error", r)
		}
	})
	t.Run("reacts while a turn runs", func(t *testing.T) {
		s := start(t, h)
		rp, ok := s.p.(platform.Reactor)
		rf, fok := s.fake.(ReactionFake)
		if !ok || !fok || !rp.Reactions().On() {
			t.Skip("the platform does not react, or reactions are off")
		}
		e := rp.Reactions()
		for i, tc := range []struct {
			name, errorCode string
			want            []string
		}{
			{"success", "", []string{e.Success}},
			{"failure", "provider", []string{e.Failure}},
			{"interrupted", "interrupted", nil},
		} {
			t.Run(tc.name, func(t *testing.T) {
				s.fake.Deliver(t, s.ctx, s.fake.Kinds()[0])
				ev := s.next(t)
				turn := fmt.Sprintf("react-%d-%s", i, ev.GetEventId())
				typing := s.fake.Answer(ev)
				typing.Op, typing.TurnId = deliveryv1.SendOp_SEND_OP_TYPING, turn
				for range 3 {
					s.send(t, typing)
				}
				shows := func(want []string) func() bool {
					return func() bool {
						got := rf.Reactions(t, s.ctx, typing.GetTarget(), ev.GetMessageId())
						return strings.Join(got, " ") == strings.Join(want, " ")
					}
				}
				waitFor(t, s.ctx, "the message to show "+e.Processing, shows([]string{e.Processing}))
				final := s.fake.Answer(ev)
				final.Op, final.TurnId, final.Final, final.ErrorCode = deliveryv1.SendOp_SEND_OP_SEND, turn, true, tc.errorCode
				final.IdempotencyKey, final.Text = turn+":0", "the answer to "+ev.GetEventId()
				if r := s.send(t, final); !r.GetOk() {
					t.Fatalf("final send receipt %v", r)
				}
				waitFor(t, s.ctx, fmt.Sprintf("the message to show %q", tc.want), shows(tc.want))
			})
		}
	})
	t.Run("reconnects after a drop", func(t *testing.T) {
		s := start(t, h)
		if c, ok := s.fake.(Connectionless); ok && c.Connectionless() {
			t.Skip("the platform posts to the gateway: no connection to drop")
		}
		before := s.fake.Connections()
		s.fake.Drop(t)
		waitFor(t, s.ctx, "a new connection", func() bool {
			st, _ := s.runner.State()
			return s.fake.Connections() > before && st == platform.StateConnected
		})
		want := s.fake.Deliver(t, s.ctx, s.fake.Kinds()[0])
		if got := s.next(t); got.GetEventId() != want.GetEventId() {
			t.Fatalf("after reconnect got event %s, want %s", got.GetEventId(), want.GetEventId())
		}
	})
	t.Run("skips a payload whose handling panics", func(t *testing.T) { poison(t, h) })
	t.Run("rejects oversized and malformed payloads", func(t *testing.T) {
		s := start(t, h)
		conns := sessions(s.fake)
		defer func() {
			if n := sessions(s.fake); n != conns {
				t.Errorf("the gateway connected %d times more around the bad payloads, want it to keep its connection; its warnings:\n%s",
					n-conns, s.logs.warnings())
			}
		}()
		for _, c := range []struct {
			name    string
			deliver func(*testing.T, context.Context)
		}{{"oversized", s.fake.DeliverOversized}, {"malformed", s.fake.DeliverMalformed}} {
			mark := s.logs.Len()
			c.deliver(t, s.ctx)
			waitFor(t, s.ctx, "a logged rejection of the "+c.name+" payload", func() bool {
				return s.logs.rejectionSince(mark)
			})
			sentinel := s.fake.Deliver(t, s.ctx, s.fake.Kinds()[0])
			if got := s.next(t); got.GetEventId() != sentinel.GetEventId() {
				t.Fatalf("%s payload was published as %s", c.name, got.GetEventId())
			}
		}
	})
}

// poison checks that a payload whose handling panics costs only itself:
// the events before and after it are published once each, the panic is
// counted, the connection is kept.
func poison(t *testing.T, h Harness) {
	s := start(t, h)
	pf, ok := s.fake.(PoisonFake)
	if !ok {
		t.Skip("the fake has no payload that panics")
	}
	labels := map[string]string{"component": platform.ReceiveComponent}
	panics := telemetrytest.Value(t, "switchboard_panics_total", labels)
	conns := sessions(s.fake)
	kind := s.fake.Kinds()[0]
	before := s.fake.Deliver(t, s.ctx, kind)
	if got := s.next(t); got.GetEventId() != before.GetEventId() {
		t.Fatalf("got event %s, want %s", got.GetEventId(), before.GetEventId())
	}
	pf.DeliverPoison(t, s.ctx)
	after := s.fake.Deliver(t, s.ctx, kind)
	if got := s.next(t); got.GetEventId() != after.GetEventId() {
		t.Fatalf("after the poison payload got event %s, want %s", got.GetEventId(), after.GetEventId())
	}
	waitFor(t, s.ctx, "the panic to be counted", func() bool {
		return telemetrytest.Value(t, "switchboard_panics_total", labels) > panics
	})
	if n := sessions(s.fake); n != conns {
		t.Errorf("the gateway connected %d times more around the poison payload, want it to keep its connection", n-conns)
	}
	if st, _ := s.runner.State(); st != platform.StateConnected {
		t.Errorf("runner state %v, want connected", st)
	}
	// Nothing came twice: the next event is a fresh one's.
	last := s.fake.Deliver(t, s.ctx, kind)
	if got := s.next(t); got.GetEventId() != last.GetEventId() {
		t.Fatalf("got event %s, want %s", got.GetEventId(), last.GetEventId())
	}
}

type suite struct {
	ctx    context.Context
	bus    *bus.Bus
	p      platform.Platform
	fake   Fake
	runner *platform.Runner
	logs   *logBuffer
	events jetstream.MessagesContext
}

func start(t *testing.T, h Harness) *suite {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	b := bustest.New(t, bustest.EmbeddedURL(t))
	logs := &logBuffer{}
	log := slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	s := &suite{ctx: ctx, bus: b, logs: logs}
	p, fake := h.New(t, Env{Bus: b, Log: log, Runner: func() *platform.Runner { return s.runner }})
	r, err := platform.NewRunner(p, b, platform.Options{
		Log: log, Backoff: platform.Schedule(10 * time.Millisecond), LeaseTTL: time.Second, SendTimeout: 10 * time.Second,
	})
	if err != nil {
		t.Fatal(err)
	}
	s.p, s.fake, s.runner = p, fake, r
	done := make(chan error, 1)
	runCtx, stop := context.WithCancel(context.Background())
	go func() { done <- r.Run(runCtx) }()
	t.Cleanup(func() {
		stop()
		if err := <-done; err != nil {
			t.Errorf("runner: %v", err)
		}
		cancel()
		DeleteBuckets(b)
	})

	cons, err := b.JetStream().OrderedConsumer(ctx, b.Topology().Stream(bus.StreamInbound), jetstream.OrderedConsumerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	it, err := cons.Messages()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(it.Stop)
	s.events = it
	waitFor(t, ctx, "the platform to connect", func() bool {
		st, _ := r.State()
		return st == platform.StateConnected
	})
	return s
}

// next returns the next inbound event on the bus.
func (s *suite) next(t *testing.T) *eventsv1.MessageReceived {
	t.Helper()
	type res struct {
		m   jetstream.Msg
		err error
	}
	ch := make(chan res, 1)
	go func() {
		m, err := s.events.Next()
		ch <- res{m, err}
	}()
	select {
	case r := <-ch:
		if r.err != nil {
			t.Fatalf("read inbound event: %v", r.err)
		}
		ev := &eventsv1.MessageReceived{}
		if err := proto.Unmarshal(r.m.Data(), ev); err != nil {
			t.Fatalf("decode inbound event: %v", err)
		}
		src := ev.GetSource()
		if want := src.GetPlatform() + ":" + src.GetAccount() + ":" + ev.GetEventId(); r.m.Headers().Get("Nats-Msg-Id") != want {
			t.Fatalf("Nats-Msg-Id %q, want %q", r.m.Headers().Get("Nats-Msg-Id"), want)
		}
		return ev
	case <-time.After(20 * time.Second):
		t.Fatal("no inbound event within 20s")
		return nil
	}
}

func (s *suite) compare(t *testing.T, kind string, want, got *eventsv1.MessageReceived) {
	t.Helper()
	if got.GetReceivedAt() == nil {
		t.Errorf("%s: received_at not set", kind)
	}
	g := proto.Clone(got).(*eventsv1.MessageReceived)
	g.ReceivedAt = nil
	if want.GetSentAt() == nil {
		g.SentAt = nil
	}
	if want.GetMessageId() == "" {
		g.MessageId = ""
	}
	if want.GetSource().GetAccount() == "" && g.Source != nil {
		g.Source.Account = ""
	}
	if want.GetInteraction() != nil && want.GetInteraction().GetExpiresAt() == nil && g.GetInteraction() != nil {
		// When the interaction ends depends on when it arrived: only
		// that it is said is compared.
		if g.GetInteraction().GetExpiresAt() == nil {
			t.Errorf("%s: interaction without its end", kind)
		}
		g.Interaction.ExpiresAt = nil
	}
	if !proto.Equal(want, g) {
		t.Errorf("%s: normalized event\n got: %s\nwant: %s", kind, prototext.Format(g), prototext.Format(want))
	}
}

func (s *suite) send(t *testing.T, req *deliveryv1.SendRequested) *deliveryv1.SendReceipt {
	t.Helper()
	ctx, cancel := context.WithTimeout(s.ctx, 15*time.Second)
	defer cancel()
	r := &deliveryv1.SendReceipt{}
	if err := s.bus.Request(ctx, s.bus.Topology().SendSubject(s.p.Name()), req, r); err != nil {
		t.Fatalf("send request: %v", err)
	}
	return r
}

func count(texts []string, s string) int {
	n := 0
	for _, x := range texts {
		if x == s {
			n++
		}
	}
	return n
}

// waitFor polls cond until it holds or the deadline passes.
func waitFor(t *testing.T, ctx context.Context, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) || ctx.Err() != nil {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// DeleteBuckets removes the kit's KV buckets of b's topology (tests on a
// shared NATS server clean up after themselves).
func DeleteBuckets(b *bus.Bus) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for _, name := range []string{platform.BucketReceipts, platform.BucketSeen, platform.BucketLeases} {
		_ = b.JetStream().DeleteKeyValue(ctx, b.Topology().Stream(name))
	}
}

// WaitFor is waitFor for harnesses.
func WaitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	waitFor(t, context.Background(), what, cond)
}

type logBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logBuffer) Len() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Len()
}

// rejectionSince reports a logged rejection with a reason after offset.
func (l *logBuffer) rejectionSince(off int) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, line := range strings.Split(l.b.String()[off:], "\n") {
		if strings.Contains(line, "rejected") && strings.Contains(line, "reason=") {
			return true
		}
	}
	return false
}

// warnings are the logged lines at level WARN or ERROR, for failure
// messages that must say why a gateway reconnected (a lease lost, a
// poll that failed).
func (l *logBuffer) warnings() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	for _, line := range strings.Split(l.b.String(), "\n") {
		if strings.Contains(line, "level=WARN") || strings.Contains(line, "level=ERROR") {
			out = append(out, line)
		}
	}
	return strings.Join(out, "\n")
}

// String is for failure messages.
func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return fmt.Sprint(l.b.String())
}
