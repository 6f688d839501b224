package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/switchboard-chat/switchboard/pkg/telegramfake"
)

// Hermes's /topic end to end: switchboard dev with Telegram's fake, the
// bot in Threaded Mode (private-chat topics) and the fake model, whose
// [[recall:user]] answers with the earlier user messages its
// conversation carried. With topic mode off, two topics of one DM are one
// conversation (the second recalls the first), each answered in its own
// topic; after /topic, each topic is a conversation of its own (nothing
// of the other topic is recalled), still answered in its topic, and the
// main view takes commands only.
func TestTopicSessionsEndToEnd(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the whole system")
	}
	t.Parallel()
	tg, err := telegramfake.New("4242:telegram-test-token", "switchboard_bot")
	if err != nil {
		t.Fatal(err)
	}
	defer tg.Close()
	tg.SetPrivateTopics(true, true)
	d := startDev(t,
		"GATEWAY_ALLOW_ALL_USERS=true",
		"TELEGRAM_BOT_TOKEN=4242:telegram-test-token", "TELEGRAM_API_BASE_URL="+tg.URL,
		"SWITCHBOARD_GATEWAYS__TELEGRAM__POLL_TIMEOUT=1s",
		"SWITCHBOARD_ROUTER__HOME_NOTICE=false",
	)
	defer d.stop(t)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	const chat = 99
	id := 100
	// say sends text in thread (0: the main view) and checks the answer,
	// the chat's next message: in the same thread, beginning with want.
	say := func(thread int, text, want string) {
		t.Helper()
		before := len(tg.Messages("99"))
		id++
		tg.Inject(telegramfake.TopicMessage(chat, id, thread, text))
		for len(tg.Messages("99")) <= before {
			if ctx.Err() != nil {
				t.Fatalf("timed out waiting for the answer to %q\nstderr:\n%s", text, d.stderr.String())
			}
			time.Sleep(50 * time.Millisecond)
		}
		m := tg.Messages("99")[before]
		if m.ThreadID != thread || !strings.HasPrefix(m.Shown, want) {
			t.Fatalf("%q in thread %d: answered %q in thread %d, want %q… in thread %d", text, thread, m.Shown, m.ThreadID, want, thread)
		}
	}
	work, err := tg.OpenTopic("99", "Work")
	if err != nil {
		t.Fatal(err)
	}
	home, err := tg.OpenTopic("99", "Home")
	if err != nil {
		t.Fatal(err)
	}

	// Off (the default): the DM is one conversation.
	say(work, "alpha", "echo: alpha")
	say(home, "beta [[recall:user]]", "recall: alpha")

	// On: a conversation per topic; the main view takes commands.
	say(0, "/topic", "Telegram multi-session topics are enabled.")
	say(work, "gamma", "echo: gamma")
	say(home, "delta", "echo: delta")
	say(home, "epsilon [[recall:user]]", "recall: delta")
	say(work, "zeta [[recall:user]]", "recall: gamma")
	say(0, "a prompt in the lobby", "This main chat is reserved for system commands.")

	// Off again: back to the DM's one conversation.
	say(0, "/topic off", "Multi-session topic mode is now OFF for this chat.")
	say(home, "eta [[recall:user]]", "recall: alpha | beta")
	time.Sleep(500 * time.Millisecond)
	if n := len(tg.Messages("99")); n != 10 {
		t.Fatalf("the chat has %d messages, want 10: %+v", n, tg.Messages("99"))
	}
}
