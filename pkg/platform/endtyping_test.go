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
