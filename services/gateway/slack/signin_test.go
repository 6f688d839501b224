package slack

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/switchboard-chat/switchboard/pkg/bus/bustest"
	"github.com/switchboard-chat/switchboard/pkg/platform"
	"github.com/switchboard-chat/switchboard/pkg/platform/platformtest"
	"github.com/switchboard-chat/switchboard/services/gateway/slack/slackfake"
)

// Slack out of reach when the socket-mode gateway starts: auth.test is
// asked again on the backoff schedule, the gateway unready meanwhile;
// once Slack answers the gateway connects and a message gets through.
func TestSlackDownAtStart(t *testing.T) {
	t.Parallel()
	fake := slackfake.New(t)
	down := platformtest.NewOutage(t)
	b := bustest.New(t, bustest.EmbeddedURL(t))
	evs := platformtest.InboundEvents(t, b)
	cfg := DefaultConfig()
	cfg.BotToken, cfg.AppToken = fake.BotToken, fake.AppToken
	up := strings.TrimSuffix(strings.TrimPrefix(fake.APIURL(), "http://"), "/api/") // the fake's host:port
	cfg.APIBaseURL = "http://" + down.Addr() + "/api/"
	s, err := New(cfg, Deps{Log: slog.New(slog.DiscardHandler), Bus: b, Runner: platform.Options{Backoff: platform.Schedule(20 * time.Millisecond)}})
	if err != nil {
		t.Fatalf("New with Slack out of reach: %v", err)
	}
	ctx := platformtest.Start(t, b, s)
	down.ComeUp(t, s, "auth.test", up)
	e := slackfake.Event{Channel: "D0DIRECT", ChannelType: "im", User: "U0USER01", Text: "are you there?", TS: "5.1"}
	if err := fake.Push(ctx, fake.Callback("EvDown", e), 0); err != nil {
		t.Fatal(err)
	}
	if ev := platformtest.NextEvent(t, evs); ev.GetMessageId() != "5.1" || ev.GetSource().GetAccount() != fake.BotUserID {
		t.Fatalf("event %v, want 5.1 for the bot %s", ev, fake.BotUserID)
	}
}

// A bot token Slack refuses ends Run at once with the reason.
func TestRefusedTokenEndsRun(t *testing.T) {
	t.Parallel()
	fake := slackfake.New(t)
	b := bustest.New(t, bustest.EmbeddedURL(t))
	cfg := DefaultConfig()
	cfg.BotToken, cfg.AppToken, cfg.APIBaseURL = "xoxb-wrong", fake.AppToken, fake.APIURL()
	s, err := New(cfg, Deps{Log: slog.New(slog.DiscardHandler), Bus: b, Runner: platform.Options{Backoff: platform.Schedule(10 * time.Millisecond)}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := s.Run(ctx); err == nil || !strings.Contains(err.Error(), "SLACK_BOT_TOKEN") || !strings.Contains(err.Error(), "invalid_auth") {
		t.Fatalf("Run with a refused token: %v", err)
	}
	if st, _ := s.Runner().State(); st != platform.StateFatal {
		t.Fatalf("state %s, want fatal", st)
	}
}
