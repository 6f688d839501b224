package discord

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/switchboard-chat/switchboard/pkg/bus/bustest"
	"github.com/switchboard-chat/switchboard/pkg/platform"
	"github.com/switchboard-chat/switchboard/pkg/platform/platformtest"
	"github.com/switchboard-chat/switchboard/services/gateway/discord/discordfake"
)

// Discord out of reach when the gateway starts: users/@me is asked again
// on the backoff schedule, the gateway unready meanwhile; once Discord
// answers the gateway connects and a message gets through.
func TestDiscordDownAtStart(t *testing.T) {
	t.Parallel()
	f := newFake(t)
	down := platformtest.NewOutage(t)
	b := bustest.New(t, bustest.EmbeddedURL(t))
	evs := platformtest.InboundEvents(t, b)
	cfg := Config{BotToken: f.Token, APIBaseURL: "http://" + down.Addr()}
	s, err := New(cfg, Deps{Log: slog.New(slog.DiscardHandler), Bus: b,
		Runner: platform.Options{Backoff: platform.Schedule(20 * time.Millisecond), LeaseTTL: time.Second}})
	if err != nil {
		t.Fatalf("New with Discord out of reach: %v", err)
	}
	ctx := platformtest.Start(t, b, s)
	down.ComeUp(t, s, "users/@me", strings.TrimPrefix(f.URL(), "http://"))
	m := discordfake.MessageCreate{ID: f.NewID(), ChannelID: dmChan, AuthorID: user, Content: "are you there?"}
	if err := f.Dispatch(ctx, "MESSAGE_CREATE", m.Payload()); err != nil {
		t.Fatal(err)
	}
	if ev := platformtest.NextEvent(t, evs); ev.GetEventId() != m.ID || ev.GetSource().GetAccount() != f.BotID {
		t.Fatalf("event %v, want %s for the bot %s", ev, m.ID, f.BotID)
	}
}

// A token Discord refuses ends Run at once with the reason.
func TestRefusedTokenEndsRun(t *testing.T) {
	t.Parallel()
	f := newFake(t)
	b := bustest.New(t, bustest.EmbeddedURL(t))
	s, err := New(Config{BotToken: "not-the-token", APIBaseURL: f.URL()}, Deps{Log: slog.New(slog.DiscardHandler), Bus: b,
		Runner: platform.Options{Backoff: platform.Schedule(10 * time.Millisecond)}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := s.Run(ctx); err == nil || !strings.Contains(err.Error(), "DISCORD_BOT_TOKEN") {
		t.Fatalf("Run with a refused token: %v", err)
	}
	if st, _ := s.Runner().State(); st != platform.StateFatal {
		t.Fatalf("state %s, want fatal", st)
	}
}
