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
// typing repeats;
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

// TestReactionsOnlyWhenAddressed: as Hermes's Slack adapter, the gateway
// marks only the messages addressed to the bot — in a DM, or mentioning
// it — though a turn answers others too: a reply in the thread of a
// mention, a message in a free-response channel. The gateway says so on
// the inbound event (no_reaction), and delivery carries it on the turn's
// send requests (no_reaction_message_ids), which this test builds as
// delivery does.
func TestReactionsOnlyWhenAddressed(t *testing.T) {
	t.Parallel()
	fake := slackfake.New(t)
	cfg := DefaultConfig()
	cfg.AppToken, cfg.FreeResponseChannels = fake.AppToken, []string{"C0FREE"}
	_, b, next, _ := gateway(t, fake, cfg)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	bot := "<@" + fake.BotUserID + "> "
	// answer runs a turn that answers the events pushed, as the router,
	// worker and delivery would: typing, then the final message.
	answer := func(turn string, events ...slackfake.Event) {
		t.Helper()
		var ids, skip []string
		for _, e := range events {
			if err := fake.Push(ctx, fake.Callback("Ev"+e.TS, e), 0); err != nil {
				t.Fatal(err)
			}
			ev := next()
			if ev.GetMessageId() != e.TS {
				t.Fatalf("published %s, want %s", ev.GetMessageId(), e.TS)
			}
			ids = append(ids, ev.GetMessageId())
			if ev.GetNoReaction() {
				skip = append(skip, ev.GetMessageId())
			}
		}
		last := events[len(events)-1]
		thread := last.ThreadTS
		if thread == "" && last.ChannelType != "im" {
			thread = last.TS
		}
		target := &deliveryv1.Target{Platform: "slack", ChatId: last.Channel, ThreadId: thread, ReplyToMessageId: last.TS}
		for _, req := range []*deliveryv1.SendRequested{
			{Op: deliveryv1.SendOp_SEND_OP_TYPING},
			{Op: deliveryv1.SendOp_SEND_OP_SEND, IdempotencyKey: turn + ":0", Text: "answer " + turn, Final: true},
		} {
			req.Target, req.TurnId, req.InputMessageIds, req.NoReactionMessageIds = target, turn, ids, skip
			r := &deliveryv1.SendReceipt{}
			if err := b.Request(ctx, b.Topology().SendSubject("slack"), req, r); err != nil {
				t.Fatal(err)
			}
			if !r.GetOk() {
				t.Fatalf("%s: receipt %v", turn, r)
			}
		}
	}
	answer("mention", slackfake.Event{Channel: "C0CHANNEL", ChannelType: "channel", User: "U0USER01", Text: bot + "help", TS: "10.1"})
	answer("thread reply", slackfake.Event{Channel: "C0CHANNEL", ChannelType: "channel", User: "U0USER01", Text: "and then?", TS: "11.1", ThreadTS: "10.1"})
	answer("free-response", slackfake.Event{Channel: "C0FREE", ChannelType: "channel", User: "U0USER01", Text: "anyone?", TS: "12.1"})
	answer("dm", slackfake.Event{Channel: "D0DM", ChannelType: "im", User: "U0USER01", Text: "hi", TS: "13.1"})
	// One turn answers a reply without a mention and one with: only the
	// second is marked.
	answer("merged",
		slackfake.Event{Channel: "C0CHANNEL", ChannelType: "channel", User: "U0USER01", Text: "also", TS: "14.1", ThreadTS: "10.1"},
		slackfake.Event{Channel: "C0CHANNEL", ChannelType: "channel", User: "U0USER01", Text: bot + "and this", TS: "15.1", ThreadTS: "10.1"})

	marked := []struct{ chat, ts string }{{"C0CHANNEL", "10.1"}, {"D0DM", "13.1"}, {"C0CHANNEL", "15.1"}}
	for _, m := range marked {
		platformtest.WaitFor(t, "the check mark on "+m.ts, func() bool {
			return strings.Join(fake.Reactions(m.chat, m.ts), " ") == "white_check_mark"
		})
	}
	time.Sleep(200 * time.Millisecond)
	for _, m := range []struct{ chat, ts string }{{"C0CHANNEL", "11.1"}, {"C0FREE", "12.1"}, {"C0CHANNEL", "14.1"}} {
		if got := fake.Reactions(m.chat, m.ts); len(got) != 0 {
			t.Errorf("%s shows %q, want no reaction (not addressed to the bot)", m.ts, got)
		}
	}
	// eyes on, eyes off, check mark on: three calls per marked message.
	if n, want := fake.ReactionCalls(), 3*len(marked); n != want {
		t.Errorf("%d reaction calls, want %d", n, want)
	}
}
