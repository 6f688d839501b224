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
// conversation carried. Each topic of the DM is a conversation of its
// own (nothing of the other topic is recalled), answered in its topic,
// with topic mode off as on; after /topic the main view takes commands
// only, after /topic off it is a chat again.
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
	// recall checks what the fake model saw of the conversation: exactly.
	recall := func(thread int, text, want string) {
		t.Helper()
		say(thread, text+" [[recall:user]]", want)
		msgs := tg.Messages("99")
		if got := msgs[len(msgs)-1].Shown; got != want {
			t.Fatalf("%q in thread %d: the model saw %q, want %q", text, thread, got, want)
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

	// Off (the default): each topic a conversation of its own (the
	// second recalls nothing of the first), the main view a chat too.
	say(work, "alpha", "echo: alpha")
	say(home, "beta", "echo: beta")
	recall(work, "gamma", "recall: alpha")
	say(0, "in the main view", "echo: in the main view")

	// On: the topics go on as they were; the main view takes commands.
	say(0, "/topic", "Telegram multi-session topics are enabled.")
	recall(home, "delta", "recall: beta")
	say(0, "a prompt in the lobby", "This main chat is reserved for system commands.")

	// Off again: the main view's conversation goes on.
	say(0, "/topic off", "Multi-session topic mode is now OFF for this chat.")
	recall(0, "epsilon", "recall: in the main view")
	time.Sleep(500 * time.Millisecond)
	if n := len(tg.Messages("99")); n != 9 {
		t.Fatalf("the chat has %d messages, want 9: %+v", n, tg.Messages("99"))
	}
}
