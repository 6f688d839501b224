package platform_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/switchboard-chat/switchboard/pkg/bus"
	"github.com/switchboard-chat/switchboard/pkg/bus/bustest"
	deliveryv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/delivery/v1"
	"github.com/switchboard-chat/switchboard/pkg/platform"
	"github.com/switchboard-chat/switchboard/pkg/platform/platformtest"
	"github.com/switchboard-chat/switchboard/pkg/telemetry/telemetrytest"
)

// blockingTyping is a platform whose typing calls block until released
// (or, unless hung, until their context ends), and which notes every
// message sent to a chat while a typing call to that chat was going on:
// one the platform would show "typing…" under. Its name is its own, so
// that its metrics are its test's.
type blockingTyping struct {
	*platformtest.Memory
	name string
	// hung: a typing call ignores its context, as a platform client
	// stuck on a connection may.
	hung    bool
	release chan struct{}
	began   chan string

	mu sync.Mutex
	// typing are the contexts of the typing calls going on, by chat.
	typing map[string][]context.Context
	// sent are the texts sent, and overtook those sent while a typing
	// call to their chat was going on and not given up (its context
	// live).
	sent, overtook []string
}

func newBlockingTyping(name string, hung bool) *blockingTyping {
	return &blockingTyping{Memory: platformtest.NewMemory("bot", false), name: name, hung: hung,
		release: make(chan struct{}), began: make(chan string, 4), typing: map[string][]context.Context{}}
}

func (p *blockingTyping) Name() string { return p.name }

func (p *blockingTyping) Typing(ctx context.Context, req *deliveryv1.SendRequested) error {
	chat := req.GetTarget().GetChatId()
	p.mu.Lock()
	p.typing[chat] = append(p.typing[chat], ctx)
	p.mu.Unlock()
	defer func() {
		p.mu.Lock()
		p.typing[chat] = slices.DeleteFunc(p.typing[chat], func(c context.Context) bool { return c == ctx })
		p.mu.Unlock()
	}()
	p.began <- chat
	if p.hung {
		<-p.release
		return nil
	}
	select {
	case <-p.release:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (p *blockingTyping) Send(ctx context.Context, req *deliveryv1.SendRequested) (string, error) {
	p.mu.Lock()
	p.sent = append(p.sent, req.GetText())
	for _, c := range p.typing[req.GetTarget().GetChatId()] {
		if c.Err() == nil {
			p.overtook = append(p.overtook, req.GetText())
			break
		}
	}
	p.mu.Unlock()
	return p.Memory.Send(ctx, req)
}

func (p *blockingTyping) snapshot() (sent, overtook []string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.sent), slices.Clone(p.overtook)
}

// request asks p's gateway for req as delivery does, typing requests
// with delivery's start bound, and hands the receipt (or the error) on.
func request(b *bus.Bus, p platform.Platform, req *deliveryv1.SendRequested) <-chan *deliveryv1.SendReceipt {
	out := make(chan *deliveryv1.SendReceipt, 1)
	req.Target.Platform = p.Name()
	var hdr nats.Header
	if req.GetOp() == deliveryv1.SendOp_SEND_OP_TYPING {
		hdr = nats.Header{bus.HeaderStartWithin: []string{"750"}}
	}
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		rec := &deliveryv1.SendReceipt{}
		if _, err := b.RequestHeaders(ctx, b.Topology().SendSubject(p.Name()), hdr, req, rec); err != nil {
			rec = &deliveryv1.SendReceipt{Error: "request: " + err.Error()}
		}
		out <- rec
	}()
	return out
}

func typingReq(turn, chat string) *deliveryv1.SendRequested {
	return &deliveryv1.SendRequested{IdempotencyKey: turn + ":typing:0", Op: deliveryv1.SendOp_SEND_OP_TYPING,
		Target: &deliveryv1.Target{ChatId: chat}, TurnId: turn}
}

func sendReq(turn, chat, text string) *deliveryv1.SendRequested {
	return &deliveryv1.SendRequested{IdempotencyKey: turn + ":1:0", Op: deliveryv1.SendOp_SEND_OP_SEND,
		Target: &deliveryv1.Target{ChatId: chat}, TurnId: turn, Text: text}
}

// A turn's answer that reaches the gateway while the typing call to its
// chat is still at the platform (started near its bound and slow there:
// delivery stopped waiting for it) goes to the platform only after that
// call returned: sent first, the indicator would show under the answer
// for 5–10 s. Another chat's message is not held by it.
func TestAMessageWaitsForItsChatsTypingCallInFlight(t *testing.T) {
	t.Parallel()
	b := bustest.New(t, bustest.EmbeddedURL(t))
	p := newBlockingTyping("typing-hold-chat", false)
	// A bound that does not run out here: only the typing call's return
	// lets the answer go.
	h := startRunner(t, p, b, platform.Options{TypingHold: time.Minute})
	platformtest.WaitFor(t, "connected", func() bool { return state(h.r) == platform.StateConnected })
	typed := request(b, p, typingReq("t1", "c1"))
	if chat := <-p.began; chat != "c1" {
		t.Fatalf("typing call to %q, want c1", chat)
	}
	answer := request(b, p, sendReq("t1", "c1", "the answer"))
	holds := map[string]string{"platform": p.Name()}
	platformtest.WaitFor(t, "the answer held, or at the platform", func() bool {
		sent, _ := p.snapshot()
		return telemetrytest.Value(t, "switchboard_gateway_typing_holds", holds) == 1 || len(sent) > 0
	})
	// Another chat's turn is answered meanwhile.
	if rec := <-request(b, p, sendReq("t2", "c2", "another chat's answer")); !rec.GetOk() {
		t.Fatalf("another chat's answer while c1's typing call is in flight: receipt %+v, want it sent", rec)
	}
	if sent, _ := p.snapshot(); !slices.Equal(sent, []string{"another chat's answer"}) {
		t.Errorf("sent %q while c1's typing call is in flight, want only the other chat's answer", sent)
	}
	close(p.release)
	if rec := <-answer; !rec.GetOk() {
		t.Fatalf("the answer: receipt %+v, want it sent", rec)
	}
	if rec := <-typed; !rec.GetOk() {
		t.Errorf("the typing request: receipt %+v, want it carried out", rec)
	}
	if _, overtook := p.snapshot(); len(overtook) > 0 {
		t.Errorf("sent %q while the typing call to its chat was in flight, want them after it", overtook)
	}
	telemetrytest.Want(t, "switchboard_gateway_typing_holds", holds, 0)
}

// A typing call the platform hangs on holds its chat's answer for the
// bound at most: then it is cancelled, and the answer goes. Held longer,
// a hung platform call would hold the answer for the send timeout.
func TestAHungTypingCallHoldsItsChatsMessageForTheBoundAtMost(t *testing.T) {
	t.Parallel()
	b := bustest.New(t, bustest.EmbeddedURL(t))
	p := newBlockingTyping("typing-hold-hung", true)
	h := startRunner(t, p, b, platform.Options{TypingHold: 200 * time.Millisecond})
	// Before the runner's stop (cleanups run last first), which waits
	// for the hung call.
	t.Cleanup(func() { close(p.release) })
	platformtest.WaitFor(t, "connected", func() bool { return state(h.r) == platform.StateConnected })
	cut := map[string]string{"platform": p.Name()}
	cutBefore := telemetrytest.Value(t, "switchboard_gateway_typing_cut_total", cut)
	request(b, p, typingReq("t1", "c1"))
	<-p.began
	// The typing call never returns (until the test ends): the answer
	// goes once the bound ran out, the typing call cancelled.
	if rec := <-request(b, p, sendReq("t1", "c1", "the answer")); !rec.GetOk() {
		t.Fatalf("the answer behind a hung typing call: receipt %+v, want it sent", rec)
	}
	if _, overtook := p.snapshot(); len(overtook) > 0 {
		t.Errorf("sent %q while the hung typing call to its chat was still going on, want it cancelled first", overtook)
	}
	if got := telemetrytest.Value(t, "switchboard_gateway_typing_cut_total", cut) - cutBefore; got != 1 {
		t.Errorf("typing calls cut counted %v, want 1", got)
	}
}

// A typing call cut for a message (the platform hangs on it) holds no
// later message to its chat: it was given up, and the second part of a
// long answer, its images, the next turn's answer, each waited the
// whole bound again for it (and counted it cut again) while it hung.
func TestACutTypingCallHoldsNoLaterMessage(t *testing.T) {
	t.Parallel()
	b := bustest.New(t, bustest.EmbeddedURL(t))
	p := newBlockingTyping("typing-hold-cut", true)
	h := startRunner(t, p, b, platform.Options{TypingHold: 200 * time.Millisecond})
	t.Cleanup(func() { close(p.release) })
	platformtest.WaitFor(t, "connected", func() bool { return state(h.r) == platform.StateConnected })
	cut := map[string]string{"platform": p.Name()}
	cutBefore := telemetrytest.Value(t, "switchboard_gateway_typing_cut_total", cut)
	request(b, p, typingReq("t1", "c1"))
	<-p.began
	for i, text := range []string{"the answer, part 1", "the answer, part 2", "the answer, part 3"} {
		req := sendReq("t1", "c1", text)
		req.IdempotencyKey = fmt.Sprintf("t1:1:%d", i)
		if rec := <-request(b, p, req); !rec.GetOk() {
			t.Fatalf("%s behind a hung typing call: receipt %+v, want it sent", text, rec)
		}
	}
	if got := telemetrytest.Value(t, "switchboard_gateway_typing_cut_total", cut) - cutBefore; got != 1 {
		t.Errorf("typing calls cut counted %v for one hung call, want 1: each message waited for it again", got)
	}
}
