package discord

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	deliveryv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/delivery/v1"
	"github.com/switchboard-chat/switchboard/pkg/platform/platformtest"
	"github.com/switchboard-chat/switchboard/services/gateway/discord/discordfake"
)

// TestReactions: a turn marks the user's message as Hermes does (👀 while
// it runs, then ✅, ❌ or nothing), once however often typing repeats; with
// reactions off, or when Discord refuses them, the reply is sent all the
// same, once.
func TestReactions(t *testing.T) {
	t.Parallel()
	for i, tc := range []struct {
		name      string
		off       bool
		fail      int    // status Discord answers reactions with
		thread    bool   // answered in a prospective auto-thread
		opened    bool   // answered in the auto-thread opened from it
		post      bool   // the first message of a forum post
		errorCode string // of the final message
		want      []string
		calls     int // reaction requests
	}{
		{name: "success", want: []string{"✅"}, calls: 3},
		{name: "answered in a new thread", thread: true, want: []string{"✅"}, calls: 3},
		// The thread has the message's id; the message is in the channel.
		{name: "answered in its auto-thread", opened: true, want: []string{"✅"}, calls: 3},
		// A forum post's first message has the post's id too, but is
		// in the post.
		{name: "a forum post's first message", post: true, want: []string{"✅"}, calls: 3},
		{name: "failure", errorCode: "provider", want: []string{"❌"}, calls: 4},
		{name: "interrupted", errorCode: "interrupted", calls: 3},
		{name: "reactions off", off: true, calls: 0},
		{name: "rate limited", fail: http.StatusTooManyRequests, calls: 2},
		{name: "server error", fail: http.StatusInternalServerError, calls: 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f := newFake(t)
			f.FailReactions(tc.fail)
			cfg := DefaultConfig()
			cfg.Reactions = !tc.off
			b, _ := run(t, f, cfg)
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			send := sendOf(ctx, t, b)
			msg, turn := f.NewID(), fmt.Sprintf("turn-%d", i)
			target := &deliveryv1.Target{Platform: "discord", ChatId: channel, ReplyToMessageId: msg}
			if tc.thread {
				target.ThreadId = msg
			}
			in := channel // where the message is
			if tc.opened {
				f.AddChannel(msg, discordfake.TypePublicThread, guild, channel)
				target.ChatId, target.ThreadId = msg, msg
			}
			if tc.post {
				forum := f.NewID()
				f.AddChannel(forum, discordfake.TypeGuildForum, guild, "")
				f.AddChannel(msg, discordfake.TypePublicThread, guild, forum)
				target.ChatId, target.ThreadId = msg, msg
				in = msg
			}
			for range 3 {
				send(&deliveryv1.SendRequested{Op: deliveryv1.SendOp_SEND_OP_TYPING, Target: target, TurnId: turn, InputMessageIds: []string{msg}})
			}
			if !tc.off && tc.fail == 0 {
				platformtest.WaitFor(t, "👀 on the message", func() bool { return strings.Join(f.Reactions(in, msg), " ") == "👀" })
			}
			final := &deliveryv1.SendRequested{Op: deliveryv1.SendOp_SEND_OP_SEND, IdempotencyKey: turn + ":0", Text: "the answer",
				Target: target, TurnId: turn, InputMessageIds: []string{msg}, Final: true, ErrorCode: tc.errorCode}
			if r := send(final); !r.GetOk() {
				t.Fatalf("final receipt %v", r)
			}
			platformtest.WaitFor(t, fmt.Sprintf("%d reaction requests", tc.calls), func() bool { return f.ReactionCalls() >= tc.calls })
			time.Sleep(200 * time.Millisecond)
			if n := f.ReactionCalls(); n != tc.calls {
				t.Errorf("%d reaction requests, want %d", n, tc.calls)
			}
			if got := f.Reactions(in, msg); strings.Join(got, " ") != strings.Join(tc.want, " ") {
				t.Errorf("the message shows %q, want %q", got, tc.want)
			}
			answers := where(target)
			var texts []string
			for _, m := range f.Messages(answers) {
				texts = append(texts, m.Content)
			}
			if len(texts) != 1 || texts[0] != "the answer" {
				t.Errorf("%s has %q, want the answer once", answers, texts)
			}
		})
	}
}

// A message id that is not a snowflake never reaches a REST path.
func TestReactionIDsAreSnowflakes(t *testing.T) {
	t.Parallel()
	f := newFake(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	p, err := NewPlatform(ctx, Config{BotToken: f.Token, APIBaseURL: f.URL(), Reactions: true}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ chat, message string }{
		{channel, "1/../../../users/@me"},
		{"1/../../guilds/1", "700000000000000001"},
	} {
		before := len(f.Requests())
		if err := p.React(ctx, &deliveryv1.Target{ChatId: tc.chat}, tc.message, "👀"); err == nil {
			t.Errorf("react on %q/%q: no error", tc.chat, tc.message)
		}
		if err := p.Unreact(ctx, &deliveryv1.Target{ChatId: tc.chat}, tc.message, "👀"); err == nil {
			t.Errorf("unreact on %q/%q: no error", tc.chat, tc.message)
		}
		if got := f.Requests()[before:]; len(got) != 0 {
			t.Errorf("requests reached Discord: %q", got)
		}
	}
}
