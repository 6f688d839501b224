package telegram

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/switchboard-chat/switchboard/pkg/bus/bustest"
	deliveryv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/delivery/v1"
	"github.com/switchboard-chat/switchboard/pkg/telegramfake"
)

// TestReactions: with TELEGRAM_REACTIONS on, a turn marks the user's
// message as Hermes does (👀 while it runs, then 👍, 👎 or nothing: the
// emoji Telegram accepts), once however often typing repeats; off (the
// default), or when Telegram refuses them, the reply is sent all the
// same, once.
func TestReactions(t *testing.T) {
	t.Parallel()
	for i, tc := range []struct {
		name      string
		off       bool
		fail      *telegramfake.APIError // every setMessageReaction answers this
		errorCode string                 // of the final message
		want      []string
		calls     int // setMessageReaction calls
	}{
		{name: "success", want: []string{"👍"}, calls: 2},
		{name: "failure", errorCode: "provider", want: []string{"👎"}, calls: 2},
		{name: "interrupted", errorCode: "interrupted", calls: 2},
		{name: "reactions off", off: true, calls: 0},
		{name: "flood wait", fail: &telegramfake.APIError{Code: 429, Description: "Too Many Requests: retry after 3", RetryAfter: 3}, calls: 2},
		{name: "server error", fail: &telegramfake.APIError{Code: 500, Description: "Internal Server Error"}, calls: 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f := newFake(t)
			if tc.fail != nil {
				for range 4 {
					f.FailNext("setMessageReaction", *tc.fail)
				}
			}
			cfg := testConfig(f)
			if cfg.Reactions {
				t.Fatal("reactions are on by default; Hermes has them off")
			}
			cfg.Reactions = !tc.off
			b := bustest.New(t, bustest.EmbeddedURL(t))
			s, _ := startService(t, cfg, b, "r1")
			waitFor(t, "the gateway to start", 10*time.Second, func() bool { return s.Ready(context.Background()) == nil })
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			send := func(req *deliveryv1.SendRequested) *deliveryv1.SendReceipt {
				t.Helper()
				r := &deliveryv1.SendReceipt{}
				if err := b.Request(ctx, b.Topology().SendSubject("telegram"), req, r); err != nil {
					t.Fatal(err)
				}
				return r
			}
			const chat = "99"
			msg, turn := 300+i, fmt.Sprintf("turn-%d", i)
			target := &deliveryv1.Target{Platform: "telegram", ChatId: chat, ReplyToMessageId: strconv.Itoa(msg)}
			inputs := []string{strconv.Itoa(msg)}
			for range 3 {
				send(&deliveryv1.SendRequested{Op: deliveryv1.SendOp_SEND_OP_TYPING, Target: target, TurnId: turn, InputMessageIds: inputs})
			}
			if !tc.off && tc.fail == nil {
				waitFor(t, "👀 on the message", 10*time.Second, func() bool { return strings.Join(f.Reactions(chat, msg), " ") == "👀" })
			}
			final := &deliveryv1.SendRequested{Op: deliveryv1.SendOp_SEND_OP_SEND, IdempotencyKey: turn + ":0", Text: "the answer",
				Target: target, TurnId: turn, InputMessageIds: inputs, Final: true, ErrorCode: tc.errorCode}
			if r := send(final); !r.GetOk() {
				t.Fatalf("final receipt %v", r)
			}
			waitFor(t, fmt.Sprintf("%d setMessageReaction calls", tc.calls), 10*time.Second, func() bool {
				return f.Calls("setMessageReaction") >= tc.calls
			})
			time.Sleep(200 * time.Millisecond)
			if n := f.Calls("setMessageReaction"); n != tc.calls {
				t.Errorf("%d setMessageReaction calls, want %d", n, tc.calls)
			}
			if got := f.Reactions(chat, msg); strings.Join(got, " ") != strings.Join(tc.want, " ") {
				t.Errorf("the message shows %q, want %q", got, tc.want)
			}
			var texts []string
			for _, m := range f.Messages(chat) {
				texts = append(texts, m.Shown)
			}
			if len(texts) != 1 || texts[0] != "the answer" {
				t.Errorf("the chat has %q, want the answer once", texts)
			}
		})
	}
}

// Telegram takes only its own list of reaction emoji: Discord's ✅ is
// refused, so the gateway never sends it.
func TestReactionEmojiAreTelegrams(t *testing.T) {
	t.Parallel()
	f := newFake(t)
	cfg := testConfig(f)
	cfg.Reactions = true
	p, err := NewPlatform(cfg, quietLog(), nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	target := &deliveryv1.Target{ChatId: "99"}
	e := p.Reactions()
	for _, emoji := range []string{e.Processing, e.Success, e.Failure} {
		if err := p.React(ctx, target, "5", emoji); err != nil {
			t.Errorf("react %s: %v", emoji, err)
		}
	}
	if err := p.React(ctx, target, "5", "✅"); err == nil {
		t.Error("react ✅: accepted, want REACTION_INVALID as on Telegram")
	}
	if err := p.Unreact(ctx, target, "5", e.Failure); err != nil || len(f.Reactions("99", 5)) != 0 {
		t.Errorf("unreact: %v, left %q", err, f.Reactions("99", 5))
	}
}
