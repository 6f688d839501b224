package main

import (
	"context"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/switchboard-chat/switchboard/pkg/telegramfake"
)

// TestWholeSystemBackgroundTask runs `switchboard dev` with the Telegram
// gateway pointed at the fake Bot API. /background answers at once with
// Hermes's acknowledgement; while the task's slow model call runs, the
// chat keeps answering; the task's answer then reaches the chat once,
// under Hermes's "✅ Background task complete" header, from a fresh
// session (the model saw none of the chat's earlier messages).
func TestWholeSystemBackgroundTask(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the whole system")
	}
	t.Parallel()
	tg, err := telegramfake.New("4646:telegram-test-token", "switchboard_bot")
	if err != nil {
		t.Fatal(err)
	}
	defer tg.Close()
	d := startDev(t,
		"GATEWAY_ALLOW_ALL_USERS=true",
		"TELEGRAM_BOT_TOKEN=4646:telegram-test-token", "TELEGRAM_API_BASE_URL="+tg.URL,
		"SWITCHBOARD_GATEWAYS__TELEGRAM__POLL_TIMEOUT=1s",
		"SWITCHBOARD_ROUTER__HOME_NOTICE=false",
	)
	defer d.stop(t)
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	chat := &annChat{t: t, ctx: ctx, tg: tg, d: d}
	shown, waitFor, say, count, index := chat.shown, chat.waitFor, chat.say, countContaining, indexContaining

	say("remember the blue door")
	waitFor("the first answer", func(s []string) bool { return count(s, "echo: remember the blue door") == 1 })

	say("/background what did I say? [[recall:user]] [[latency:8s]]")
	got := waitFor("the acknowledgement", func(s []string) bool { return count(s, "Background task started") == 1 })
	ack := got[index(got, "Background task started")]
	if !regexp.MustCompile(`^🔄 Background task started: "what did I say\? \[\[recall:user\]\] \[\[latency:8s\]\]"\nTask ID: bg_\d{6}_[0-9a-f]{6}\nYou can keep chatting — results will appear when done\.$`).MatchString(ack) {
		t.Errorf("the acknowledgement %q", ack)
	}

	// The chat answers while the task's model call runs.
	say("still there?")
	got = waitFor("the chat's answer", func(s []string) bool { return count(s, "echo: still there?") == 1 })
	if count(got, "Background task complete") != 0 {
		t.Fatalf("the task answered before the chat's next message: %q", got)
	}
	got = waitFor("the task's answer", func(s []string) bool { return count(s, "Background task complete") == 1 })
	answer := got[index(got, "Background task complete")]
	if !strings.HasPrefix(answer, "✅ Background task complete\nPrompt: \"what did I say? [[recall:user]] [[latency:8s]]\"") ||
		!strings.Contains(answer, "recall:") || strings.Contains(answer, "blue door") {
		t.Errorf("the task's answer %q: want Hermes's header and a fresh session's recall", answer)
	}
	if index(got, "echo: still there?") > index(got, "Background task complete") {
		t.Errorf("the chat's answer came after the task's: %q", got)
	}

	// Once: nothing more comes, and the chat's own conversation goes on
	// without the task in it.
	say("what did I say before? [[recall:user]]")
	got = waitFor("the chat's recall", func(s []string) bool { return count(s, "recall: remember the blue door") == 1 })
	recall := got[index(got, "recall: remember the blue door")]
	if strings.Contains(recall, "what did I say?") {
		t.Errorf("the chat's conversation holds the task's prompt: %q", recall)
	}
	time.Sleep(2 * time.Second)
	if got := shown(); count(got, "Background task complete") != 1 || count(got, "Background task started") != 1 {
		t.Errorf("the chat shows %q, want the task's acknowledgement and answer once each", got)
	}
}
