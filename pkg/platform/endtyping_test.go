package platform_test

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/switchboard-chat/switchboard/pkg/bus/bustest"
	deliveryv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/delivery/v1"
	"github.com/switchboard-chat/switchboard/pkg/platform"
	"github.com/switchboard-chat/switchboard/pkg/platform/platformtest"
)

// endingTyping is a platform whose typing indicator is taken down
// (platform.TypingEnder); its EndTyping records the request's key, then
// does what end says.
type endingTyping struct {
	*platformtest.Memory
	end  func(ctx context.Context) error
	mu   sync.Mutex
	ends []string
}

func (p *endingTyping) EndTyping(ctx context.Context, req *deliveryv1.SendRequested) error {
	p.mu.Lock()
	p.ends = append(p.ends, req.GetIdempotencyKey())
	p.mu.Unlock()
	return p.end(ctx)
}

func (p *endingTyping) ended() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.ends...)
}

// TestTypingEndsWithTheTurn: the Runner takes a TypingEnder's indicator
// down after a turn's final request (its last message, or the typing
// request that ends it without one), not after the turn's other
// messages nor a final answer outside a turn (a command's). The end is
// best effort: failing, panicking or hanging, it leaves the receipt ok,
// and a hanging one holds it 2 s at most.
func TestTypingEndsWithTheTurn(t *testing.T) {
	t.Parallel()
	b := bustest.New(t, bustest.EmbeddedURL(t))
	for _, tc := range []struct {
		name string
		end  func(ctx context.Context) error
	}{
		{"ends", func(context.Context) error { return nil }},
		{"fails", func(context.Context) error { return platform.Permanent(errors.New("missing_scope")) }},
		{"panics", func(context.Context) error { panic("end of typing") }},
		{"hangs", func(ctx context.Context) error { <-ctx.Done(); return ctx.Err() }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := &endingTyping{Memory: platformtest.NewMemory("bot-"+tc.name, false), end: tc.end}
			r, ctx := runRunner(t, p, b)
			target := &deliveryv1.Target{Platform: "memory", ChatId: "chat"}
			for _, req := range []*deliveryv1.SendRequested{
				{IdempotencyKey: "typing", Op: deliveryv1.SendOp_SEND_OP_TYPING, TurnId: "t1"},
				{IdempotencyKey: "t1:0", Op: deliveryv1.SendOp_SEND_OP_SEND, TurnId: "t1", Text: "first part"},
				{IdempotencyKey: "t1:1", Op: deliveryv1.SendOp_SEND_OP_SEND, TurnId: "t1", Text: "last part", Final: true},
				{IdempotencyKey: "t2:ended", Op: deliveryv1.SendOp_SEND_OP_TYPING, TurnId: "t2", Final: true},
				{IdempotencyKey: "notice", Op: deliveryv1.SendOp_SEND_OP_SEND, Text: "a command's answer", Final: true},
			} {
				// Keys of its own: the runners share the bus's receipts.
				req.Target, req.IdempotencyKey = target, tc.name+":"+req.GetIdempotencyKey()
				start := time.Now()
				if rec := r.Execute(ctx, req); !rec.GetOk() {
					t.Errorf("%s: receipt %+v, want ok", req.GetIdempotencyKey(), rec)
				}
				if d := time.Since(start); d > 5*time.Second {
					t.Errorf("%s: receipt after %v", req.GetIdempotencyKey(), d)
				}
			}
			if got, want := p.ended(), []string{tc.name + ":t1:1", tc.name + ":t2:ended"}; !slices.Equal(got, want) {
				t.Errorf("typing ended after %q, want %q", got, want)
			}
		})
	}
}

// heldTyping is an endingTyping whose typing call takes until release is
// closed, and which notes when its typing calls return and its ends are
// made, in order.
type heldTyping struct {
	*endingTyping
	started chan struct{}
	release chan struct{}
	mu      sync.Mutex
	events  []string
}

func (p *heldTyping) note(e string) {
	p.mu.Lock()
	p.events = append(p.events, e)
	p.mu.Unlock()
}

func (p *heldTyping) Typing(ctx context.Context, req *deliveryv1.SendRequested) error {
	close(p.started)
	<-p.release
	p.note("typing returned")
	return nil
}

func (p *heldTyping) EndTyping(ctx context.Context, req *deliveryv1.SendRequested) error {
	p.note("end")
	return p.endingTyping.EndTyping(ctx, req)
}

// TestTypingEndsAfterTheTypingInFlight: the edit that ends a streamed
// answer does not wait for the chat's typing call in flight (edits do
// not), but the end of the indicator does, or a refresh that started
// just before the edit (Slack's setStatus) would show the indicator
// again after it was taken down, until the platform's own timeout (two
// minutes on Slack).
func TestTypingEndsAfterTheTypingInFlight(t *testing.T) {
	t.Parallel()
	b := bustest.New(t, bustest.EmbeddedURL(t))
	mem := platformtest.NewMemory("bot-inflight", false)
	p := &heldTyping{endingTyping: &endingTyping{Memory: mem, end: func(context.Context) error { return nil }},
		started: make(chan struct{}), release: make(chan struct{})}
	r, ctx := runRunner(t, p, b)
	target := &deliveryv1.Target{Platform: "memory", ChatId: "chat"}
	sent := r.Execute(ctx, &deliveryv1.SendRequested{IdempotencyKey: "inflight:t1:0", Op: deliveryv1.SendOp_SEND_OP_SEND,
		TurnId: "t1", Text: "streamed", Target: target})
	if !sent.GetOk() {
		t.Fatalf("stream's message: %+v", sent)
	}
	typed := make(chan struct{})
	go func() {
		defer close(typed)
		r.Execute(ctx, &deliveryv1.SendRequested{IdempotencyKey: "inflight:typing", Op: deliveryv1.SendOp_SEND_OP_TYPING,
			TurnId: "t1", Target: target})
	}()
	<-p.started
	go func() {
		time.Sleep(300 * time.Millisecond)
		close(p.release)
	}()
	if rec := r.Execute(ctx, &deliveryv1.SendRequested{IdempotencyKey: "inflight:t1:0:final", Op: deliveryv1.SendOp_SEND_OP_EDIT,
		TurnId: "t1", Text: "the answer", MessageId: sent.GetPlatformMessageId(), Target: target, Final: true}); !rec.GetOk() {
		t.Errorf("final edit: receipt %+v, want ok", rec)
	}
	<-typed
	p.mu.Lock()
	defer p.mu.Unlock()
	if want := []string{"typing returned", "end"}; !slices.Equal(p.events, want) {
		t.Errorf("events %q, want %q: the end before the typing call in flight returned", p.events, want)
	}
}
