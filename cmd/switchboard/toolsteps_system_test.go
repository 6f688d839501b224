package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/switchboard-chat/switchboard/pkg/telegramfake"
)

// TestWholeSystemToolStepsInAChat runs `switchboard dev` with the Telegram
// gateway pointed at the fake Bot API, tool progress on (Hermes's
// HERMES_TOOL_PROGRESS_MODE) and clock a dangerous tool. A message whose
// turn searches, then asks the clock: the chat shows the search's
// progress line, then Hermes's approval prompt; the user's /approve runs
// the clock, whose line starts a new progress message below the prompt,
// and the answer carries the clock's result. Without the prompt in the
// chat the call could only time out, denied. The next call's prompt is
// answered with its "✅ Allow Once" button: the card then says who
// allowed it, and the first prompt's button, pressed late, that it
// expired.
func TestWholeSystemToolStepsInAChat(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the whole system")
	}
	t.Parallel()
	tg, err := telegramfake.New("4343:telegram-test-token", "switchboard_bot")
	if err != nil {
		t.Fatal(err)
	}
	defer tg.Close()
	d := startDev(t,
		"GATEWAY_ALLOW_ALL_USERS=true",
		"TELEGRAM_BOT_TOKEN=4343:telegram-test-token", "TELEGRAM_API_BASE_URL="+tg.URL,
		"SWITCHBOARD_GATEWAYS__TELEGRAM__POLL_TIMEOUT=1s",
		"SWITCHBOARD_ROUTER__HOME_NOTICE=false",
		"SWITCHBOARD_AGENT__DANGEROUS_TOOLS=clock",
		"HERMES_TOOL_PROGRESS_MODE=all",
	)
	defer d.stop(t)
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	chat := &annChat{t: t, ctx: ctx, tg: tg, d: d}
	waitFor := chat.waitFor
	ann := func(id int, text string) map[string]any {
		return map[string]any{"message": map[string]any{
			"message_id": id, "date": time.Now().Unix(), "text": text,
			"chat": map[string]any{"id": 99, "type": "private", "first_name": "Ann"},
			"from": map[string]any{"id": 99, "is_bot": false, "first_name": "Ann"},
		}}
	}

	tg.Inject(ann(1, `what time? [[tool:session_search {"query":"tea"}]] [[tool:clock {"tz":"UTC"}]]`))
	got := waitFor("the approval prompt", func(s []string) bool { return len(s) >= 2 })
	if got[0] != `🔍 session_search: "tea"` {
		t.Errorf("first message %q, want the search's progress line", got[0])
	}
	for _, want := range []string{"⚠️ Dangerous command requires approval:", `clock {"tz":"UTC"}`,
		"Reason: dangerous tool (agent.dangerous_tools): Current date and time", "/approve session", "/deny"} {
		if !strings.Contains(got[1], want) {
			t.Errorf("approval prompt %q lacks %q", got[1], want)
		}
	}
	tg.Inject(ann(2, "/approve"))
	// The router's acknowledgement, the clock's line and the answer, in
	// some order after the prompt (the router answers once the turn took
	// the approval, and the turn runs on meanwhile: with the instant fake
	// model a busy machine may deliver the answer first); each once.
	answered := func(s []string) bool {
		for _, m := range s {
			if strings.HasPrefix(m, "echo: what time?") && strings.Contains(m, "UTC") {
				return true
			}
		}
		return false
	}
	got = waitFor("the acknowledgement and the answer", func(s []string) bool {
		return len(s) > 2 && answered(s[2:]) && strings.Contains(strings.Join(s[2:], "\n"), "✅ Command approved")
	})
	rest := strings.Join(got[2:], "\n---\n")
	if len(got) != 5 || !strings.Contains(rest, `🕐 clock: "UTC"`) {
		t.Errorf("after the approval the chat shows %q", got[2:])
	}
	if n := strings.Count(strings.Join(got, "\n"), "Dangerous command requires approval"); n != 1 {
		t.Errorf("the prompt shows %d times", n)
	}

	// The prompt's buttons: "Allow Once" runs the tool and the card says
	// who allowed it, without its buttons.
	first := tg.Messages("99")[1]
	if len(first.Buttons) != 2 || first.Buttons[0][0].Text != "✅ Allow Once" || first.Buttons[1][1].Text != "❌ Deny" {
		t.Fatalf("the prompt's buttons are %v, want Hermes's four", first.Buttons)
	}
	before := len(got)
	tg.Inject(ann(3, `again? [[tool:clock {"tz":"UTC"}]]`))
	got = waitFor("the second prompt", func(s []string) bool {
		return len(s) > before && strings.Contains(s[len(s)-1], "Dangerous command requires approval")
	})
	card := tg.Messages("99")[len(got)-1]
	ann99 := map[string]any{"id": 99, "is_bot": false, "first_name": "Ann"}
	if _, _, err := tg.Press("99", card.ID, ann99, card.Buttons[0][0].Data); err != nil {
		t.Fatal(err)
	}
	// The answer, the card's edit and the press's callback answer, in
	// any order: they travel apart, and a busy machine may send the
	// answer first.
	got = waitFor("the answer, the card's edit and the callback answer after the button", func(s []string) bool {
		return len(s) > 0 && strings.HasPrefix(s[len(s)-1], "echo: again?") && strings.Contains(s[len(s)-1], "UTC") &&
			tg.Message("99", card.ID).Shown != card.Shown && len(tg.CallbackAnswers()) > 0
	})
	if m := tg.Message("99", card.ID); m.Shown != "✅ Approved once by Ann" || len(m.Buttons) != 0 {
		t.Errorf("the pressed card shows %q with buttons %v, want the decision alone", m.Shown, m.Buttons)
	}
	if strings.Contains(strings.Join(got[before:], "\n"), "✅ Command approved") {
		t.Errorf("a button's answer also came as a message: %q", got[before:])
	}
	if n := len(tg.CallbackAnswers()); n != 1 {
		t.Errorf("%d callback queries answered, want 1", n)
	}
	// The first prompt's button, pressed now that nothing waits: the card
	// says it expired.
	if _, _, err := tg.Press("99", first.ID, ann99, first.Buttons[1][1].Data); err != nil {
		t.Fatal(err)
	}
	waitFor("the expired card", func([]string) bool {
		return strings.HasPrefix(tg.Message("99", first.ID).Shown, "⌛ Approval expired")
	})
}
