package platform_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/switchboard-chat/switchboard/pkg/bus/bustest"
	deliveryv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/delivery/v1"
	"github.com/switchboard-chat/switchboard/pkg/platform"
	"github.com/switchboard-chat/switchboard/pkg/platform/platformtest"
)

func TestMemoryContractWithReactions(t *testing.T) {
	t.Parallel()
	for name, e := range map[string]platform.Reactions{
		"reactions add up": {Processing: "👀", Success: "✅", Failure: "❌"},
		"one reaction":     {Processing: "👀", Success: "👍", Failure: "👎", Replace: true},
	} {
		t.Run(name, func(t *testing.T) {
			platformtest.Run(t, platformtest.Harness{New: func(t *testing.T, env platformtest.Env) (platform.Platform, platformtest.Fake) {
				m := platformtest.NewMemory("bot-react", false)
				m.SetReactions(e)
				return m, m.Fake()
			}})
		})
	}
}

// TestReactions: the first typing request of a turn marks the messages it
// answers, its final message (once sent) swaps that for the outcome, and
// nothing else reacts; a reaction that fails fails nothing else.
func TestReactions(t *testing.T) {
	t.Parallel()
	b := bustest.New(t, bustest.EmbeddedURL(t))
	adding := platform.Reactions{Processing: "👀", Success: "✅", Failure: "❌"}
	replacing := platform.Reactions{Processing: "👀", Success: "👍", Failure: "👎", Replace: true}
	type op struct {
		typing    bool
		final     bool
		errorCode string
		key       string // idempotency key of a send (default: fresh)
		chat      string // default: chat
		replyTo   string // default: the answered message m1
		unmarked  bool   // m1 is in no_reaction_message_ids
	}
	typing := op{typing: true}
	for i, tc := range []struct {
		name  string
		emoji platform.Reactions
		fail  error
		// panics: React and Unreact panic; the worker lives on, the
		// reactions fail like errors.
		panics bool
		ops    []op
		want   []string // the bot's reactions on m1 in the end
		calls  int      // React and Unreact calls
	}{
		{name: "repeated typing reacts once", emoji: adding, ops: []op{typing, typing, typing}, want: []string{"👀"}, calls: 1},
		{name: "success", emoji: adding, ops: []op{typing, typing, {final: true}}, want: []string{"✅"}, calls: 3},
		{name: "failure", emoji: adding, ops: []op{typing, {final: true, errorCode: "provider"}}, want: []string{"❌"}, calls: 4},
		{name: "failure after the streamed text", emoji: adding, ops: []op{typing, {final: true}, {final: true, errorCode: "timeout"}},
			want: []string{"❌"}, calls: 6},
		{name: "interrupted", emoji: adding, ops: []op{typing, {final: true, errorCode: "interrupted"}}, want: nil, calls: 3},
		{name: "interrupted before it said anything", emoji: adding, ops: []op{typing, {typing: true, final: true, errorCode: "interrupted"}}, want: nil, calls: 3},
		{name: "one reaction: interrupted before it said anything", emoji: replacing, ops: []op{typing, {typing: true, final: true, errorCode: "interrupted"}}, want: nil, calls: 2},
		{name: "one reaction: success", emoji: replacing, ops: []op{typing, {final: true}}, want: []string{"👍"}, calls: 2},
		{name: "one reaction: failure", emoji: replacing, ops: []op{typing, {final: true, errorCode: "internal"}}, want: []string{"👎"}, calls: 2},
		{name: "one reaction: interrupted", emoji: replacing, ops: []op{typing, {final: true, errorCode: "interrupted"}}, want: nil, calls: 2},
		{name: "reactions off", ops: []op{typing, {final: true}}, want: nil, calls: 0},
		{name: "a message that is not the last", emoji: adding, ops: []op{typing, {}}, want: []string{"👀"}, calls: 1},
		{name: "a repeated final key is answered from its receipt", emoji: adding, ops: []op{typing, {final: true, key: "same"}, {final: true, key: "same"}},
			want: []string{"✅"}, calls: 3},
		{name: "a typing request after the final", emoji: adding, ops: []op{typing, {final: true}, typing}, want: []string{"✅"}, calls: 3},
		{name: "a final send that failed", emoji: adding, ops: []op{{typing: true, chat: "missing-1"}, {final: true, chat: "missing-1"}},
			want: []string{"👀"}, calls: 1},
		{name: "a reply routed to another chat", emoji: adding, ops: []op{{typing: true, replyTo: "-"}, {final: true, replyTo: "-"}}, calls: 0},
		{name: "a message the gateway leaves unmarked", emoji: adding, ops: []op{{typing: true, unmarked: true}, {final: true, unmarked: true}}, calls: 0},
		{name: "the platform fails every reaction", emoji: adding, fail: errors.New("500 Internal Server Error"),
			ops: []op{typing, {final: true}}, want: nil, calls: 3},
		{name: "the platform's reaction code panics", emoji: adding, panics: true,
			ops: []op{typing, {final: true}}, want: nil, calls: 3},
		{name: "a 429 is not retried and ends the swap", emoji: adding, fail: platform.RateLimited(errors.New("429 Too Many Requests"), time.Second),
			ops: []op{typing, {final: true}}, want: nil, calls: 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := platformtest.NewMemory(fmt.Sprintf("bot-react-%d", i), false)
			m.SetReactions(tc.emoji)
			m.FailReactions(tc.fail)
			m.PanicReactions(tc.panics)
			r, ctx := runRunner(t, m, b)
			turn := fmt.Sprintf("turn-%d", i)
			var target *deliveryv1.Target
			for j, o := range tc.ops {
				target = &deliveryv1.Target{Platform: "memory", ChatId: "chat", ReplyToMessageId: "m1"}
				if o.chat != "" {
					target.ChatId = o.chat
				}
				if o.replyTo != "" {
					target.ReplyToMessageId = o.replyTo
				}
				req := &deliveryv1.SendRequested{Target: target, TurnId: turn, InputMessageIds: []string{"m1"}}
				if o.unmarked {
					req.NoReactionMessageIds = []string{"m1"}
				}
				if o.typing {
					req.Op, req.IdempotencyKey = deliveryv1.SendOp_SEND_OP_TYPING, fmt.Sprintf("%s:typing:%d", turn, j)
					req.Final, req.ErrorCode = o.final, o.errorCode // final: the turn ended without a message
				} else {
					req.Op, req.Text, req.Final, req.ErrorCode = deliveryv1.SendOp_SEND_OP_SEND, "answer", o.final, o.errorCode
					req.IdempotencyKey = fmt.Sprintf("%s:%d", turn, j)
					if o.key != "" {
						req.IdempotencyKey = turn + ":" + o.key
					}
				}
				rec := r.Execute(ctx, req)
				if wantOK := o.typing || !strings.HasPrefix(target.GetChatId(), "missing"); rec.GetOk() != wantOK {
					t.Fatalf("op %d: receipt %+v, want ok=%v (reactions never change a receipt)", j, rec, wantOK)
				}
			}
			var typings int
			for _, o := range tc.ops {
				if o.typing && !o.final {
					typings++
				}
			}
			if got := m.Typings(); got != typings {
				t.Fatalf("%d typing indicators shown, want %d (none for a turn that ended)", got, typings)
			}
			settled(t, func() bool { return m.ReactionCalls() == tc.calls })
			if got := m.ReactionCalls(); got != tc.calls {
				t.Fatalf("%d reaction calls, want %d", got, tc.calls)
			}
			got := m.Fake().(platformtest.ReactionFake).Reactions(t, ctx, target, "m1")
			if strings.Join(got, " ") != strings.Join(tc.want, " ") {
				t.Fatalf("m1 shows %q, want %q", got, tc.want)
			}
		})
	}
}

// settled waits until cond holds and still holds a moment later: the
// reactions run in the background.
func settled(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		if cond() {
			time.Sleep(150 * time.Millisecond)
			if cond() {
				return
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// blockingReactor's reactions wait for their context to end.
type blockingReactor struct {
	*platformtest.Memory
	entered chan struct{}
}

func (b blockingReactor) React(ctx context.Context, _ *deliveryv1.Target, _, _ string) error {
	select {
	case b.entered <- struct{}{}:
	default:
	}
	<-ctx.Done()
	return ctx.Err()
}

// TestStoppingGatewayWaitsBrieflyForReactions: a reaction stuck at the
// platform holds up a stopping gateway for a few seconds at most.
func TestStoppingGatewayWaitsBrieflyForReactions(t *testing.T) {
	t.Parallel()
	b := bustest.New(t, bustest.EmbeddedURL(t))
	m := platformtest.NewMemory("bot-react-stuck", false)
	m.SetReactions(platform.Reactions{Processing: "👀", Success: "✅", Failure: "❌"})
	p := blockingReactor{Memory: m, entered: make(chan struct{}, 1)}
	r, err := platform.NewRunner(p, b, platform.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	platformtest.WaitFor(t, "the runner to start", func() bool { return state(r) == platform.StateConnected })
	req := &deliveryv1.SendRequested{Op: deliveryv1.SendOp_SEND_OP_TYPING, TurnId: "stuck", InputMessageIds: []string{"m1"},
		Target: &deliveryv1.Target{Platform: "memory", ChatId: "chat", ReplyToMessageId: "m1"}}
	if rec := r.Execute(ctx, req); !rec.GetOk() {
		t.Fatalf("typing receipt %+v", rec)
	}
	<-p.entered
	stopped := time.Now()
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("Run did not return")
	}
	if d := time.Since(stopped); d > 7*time.Second {
		t.Fatalf("stopping took %v", d)
	}
}

// turnReactor records the turn each reaction call is made for.
type turnReactor struct {
	*platformtest.Memory
	turns chan string
}

func (r turnReactor) React(ctx context.Context, t *deliveryv1.Target, messageID, emoji string) error {
	r.turns <- "react " + emoji + " " + platform.ReactionTurn(ctx)
	return r.Memory.React(ctx, t, messageID, emoji)
}

func (r turnReactor) Unreact(ctx context.Context, t *deliveryv1.Target, messageID, emoji string) error {
	r.turns <- "unreact " + emoji + " " + platform.ReactionTurn(ctx)
	return r.Memory.Unreact(ctx, t, messageID, emoji)
}

// TestReactionCallsNameTheirTurn: each React and Unreact call carries the
// turn it marks (ReactionTurn), so platforms can make a turn's reaction
// idempotent without confusing it with a later turn's.
func TestReactionCallsNameTheirTurn(t *testing.T) {
	t.Parallel()
	b := bustest.New(t, bustest.EmbeddedURL(t))
	m := platformtest.NewMemory("bot-react-turn", false)
	m.SetReactions(platform.Reactions{Processing: "👀", Success: "✅", Failure: "❌"})
	p := turnReactor{Memory: m, turns: make(chan string, 16)}
	r, ctx := runRunner(t, p, b)
	for _, tc := range []struct {
		turn string
		op   deliveryv1.SendOp
		want []string
	}{
		{"turn-a", deliveryv1.SendOp_SEND_OP_TYPING, []string{"react 👀 turn-a"}},
		{"turn-a", deliveryv1.SendOp_SEND_OP_SEND, []string{"unreact 👀 turn-a", "react ✅ turn-a"}},
		{"turn-b", deliveryv1.SendOp_SEND_OP_TYPING, []string{"react 👀 turn-b"}},
	} {
		req := &deliveryv1.SendRequested{Op: tc.op, TurnId: tc.turn, InputMessageIds: []string{"m1"}, Text: "answer",
			Final: tc.op == deliveryv1.SendOp_SEND_OP_SEND, IdempotencyKey: tc.turn + ":" + tc.op.String(),
			Target: &deliveryv1.Target{Platform: "memory", ChatId: "chat", ReplyToMessageId: "m1"}}
		if rec := r.Execute(ctx, req); !rec.GetOk() {
			t.Fatalf("%s %s: receipt %+v", tc.turn, tc.op, rec)
		}
		for _, w := range tc.want {
			if got := <-p.turns; got != w {
				t.Fatalf("%s %s: reaction call %q, want %q", tc.turn, tc.op, got, w)
			}
		}
	}
}
