package slack

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	deliveryv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/delivery/v1"
	"github.com/switchboard-chat/switchboard/pkg/platform/platformtest"
	"github.com/switchboard-chat/switchboard/services/gateway/slack/slackfake"
)

// TestReactions: a turn marks the user's message as Hermes does (eyes
// while it runs, then white_check_mark, x or nothing), once however often
// typing repeats (Slack has no typing indicator, but delivery still asks);
// with reactions off, or when Slack refuses them, the reply is posted all
// the same, once.
func TestReactions(t *testing.T) {
	t.Parallel()
	for i, tc := range []struct {
		name      string
		off       bool
		fail      int    // HTTP status Slack answers reactions with
		errorCode string // of the final message
		want      []string
		calls     int // reactions.* calls
	}{
		{name: "success", want: []string{"white_check_mark"}, calls: 3},
		{name: "failure", errorCode: "provider", want: []string{"x"}, calls: 4},
		{name: "interrupted", errorCode: "interrupted", calls: 3},
		{name: "reactions off", off: true, calls: 0},
		{name: "rate limited", fail: http.StatusTooManyRequests, calls: 2},
		{name: "server error", fail: http.StatusInternalServerError, calls: 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			fake := slackfake.New(t)
			fake.FailReactions(tc.fail)
			cfg := DefaultConfig()
			cfg.AppToken, cfg.Reactions = fake.AppToken, !tc.off
			_, b, _, _ := gateway(t, fake, cfg)
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			send := func(req *deliveryv1.SendRequested) *deliveryv1.SendReceipt {
				t.Helper()
				r := &deliveryv1.SendReceipt{}
				if err := b.Request(ctx, b.Topology().SendSubject("slack"), req, r); err != nil {
					t.Fatal(err)
				}
				return r
			}
			ts, turn := fmt.Sprintf("1700000100.%06d", i), fmt.Sprintf("turn-%d", i)
			target := &deliveryv1.Target{Platform: "slack", ChatId: "C0CHANNEL", ThreadId: ts, ReplyToMessageId: ts}
			for range 3 {
				send(&deliveryv1.SendRequested{Op: deliveryv1.SendOp_SEND_OP_TYPING, Target: target, TurnId: turn, InputMessageIds: []string{ts}})
			}
			if !tc.off && tc.fail == 0 {
				platformtest.WaitFor(t, "eyes on the message", func() bool { return strings.Join(fake.Reactions("C0CHANNEL", ts), " ") == "eyes" })
			}
			final := &deliveryv1.SendRequested{Op: deliveryv1.SendOp_SEND_OP_SEND, IdempotencyKey: turn + ":0", Text: "the answer",
				Target: target, TurnId: turn, InputMessageIds: []string{ts}, Final: true, ErrorCode: tc.errorCode}
			if r := send(final); !r.GetOk() {
				t.Fatalf("final receipt %v", r)
			}
			platformtest.WaitFor(t, fmt.Sprintf("%d reaction calls", tc.calls), func() bool { return fake.ReactionCalls() >= tc.calls })
			time.Sleep(200 * time.Millisecond)
			if n := fake.ReactionCalls(); n != tc.calls {
				t.Errorf("%d reaction calls, want %d", n, tc.calls)
			}
			if got := fake.Reactions("C0CHANNEL", ts); strings.Join(got, " ") != strings.Join(tc.want, " ") {
				t.Errorf("the message shows %q, want %q", got, tc.want)
			}
			var texts []string
			for _, m := range fake.Messages("C0CHANNEL") {
				texts = append(texts, m.Text)
			}
			if len(texts) != 1 || texts[0] != "the answer" {
				t.Errorf("the channel has %q, want the answer once", texts)
			}
		})
	}
}
