package discord

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	eventsv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/events/v1"
	"github.com/switchboard-chat/switchboard/pkg/logtest"
	"github.com/switchboard-chat/switchboard/pkg/platform"
	"github.com/switchboard-chat/switchboard/pkg/telemetry"
	"github.com/switchboard-chat/switchboard/services/gateway/discord/discordfake"
)

// seenFailsOnce is a runner's Conn whose first seen lookup fails (the
// bus out of reach) and which publishes nothing.
type seenFailsOnce struct {
	platform.Conn
	lookups   atomic.Int32
	published atomic.Int32
}

func (c *seenFailsOnce) Seen(context.Context, string) (bool, error) {
	if c.lookups.Add(1) == 1 {
		return false, errors.New("nats: timeout")
	}
	return false, nil
}

func (c *seenFailsOnce) Deliver(context.Context, *eventsv1.MessageReceived) (platform.Accepted, error) {
	c.published.Add(1)
	return platform.Accepted{}, nil
}

// A thread whose lookup fails is logged under chat_id, which the logs'
// pseudonyms replace (log.pseudonymize): a thread is a Discord channel,
// and its id names a conversation as a channel's does.
func TestThreadLookupFailureLogsAPseudonym(t *testing.T) {
	t.Parallel()
	f := newFake(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var logs logtest.Buffer
	logCfg := telemetry.LogConfig{Level: "debug", Pseudonymize: true, PseudonymKey: "k"}
	cfg := DefaultConfig()
	cfg.BotToken, cfg.APIBaseURL = f.Token, f.URL()
	p, err := NewPlatform(ctx, cfg, telemetry.NewLogger(logCfg, &logs))
	if err != nil {
		t.Fatal(err)
	}
	// Not addressed to the bot, in a thread: the bot takes part when the
	// thread is one it opened, which the lookup says.
	raw, err := json.Marshal(discordfake.MessageCreate{ID: f.NewID(), ChannelID: thread, GuildID: guild, AuthorID: user, Content: "hello"}.Payload())
	if err != nil {
		t.Fatal(err)
	}
	conn := &seenFailsOnce{}
	p.handle(ctx, conn, raw)
	if n := conn.lookups.Load(); n != 2 {
		t.Fatalf("%d thread lookups, want a failed one and its retry", n)
	}
	out := logs.String()
	if !strings.Contains(out, "discord thread lookup failed") {
		t.Fatalf("the failed lookup is not logged:\n%s", out)
	}
	if strings.Contains(out, thread) {
		t.Errorf("the log names the thread %s:\n%s", thread, out)
	}
	if want := `"chat_id":"` + logCfg.Pseudonyms().ID(thread) + `"`; !strings.Contains(out, want) {
		t.Errorf("no %s in the log:\n%s", want, out)
	}
}
