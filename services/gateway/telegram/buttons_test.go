package telegram

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/switchboard-chat/switchboard/pkg/bus"
	"github.com/switchboard-chat/switchboard/pkg/bus/bustest"
	deliveryv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/delivery/v1"
	eventsv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/events/v1"
	"github.com/switchboard-chat/switchboard/pkg/platform"
	"github.com/switchboard-chat/switchboard/pkg/telegramfake"
)

// An approval prompt shows Hermes's four buttons under its text; a press
// is published once as the presser's command (also when Telegram sends
// the update again), its query answered; the answer's edit replaces the
// text and takes the keyboard off.
func TestApprovalButtons(t *testing.T) {
	t.Parallel()
	f := newFake(t)
	b := bustest.New(t, bustest.EmbeddedURL(t))
	s, _ := startService(t, testConfig(f), b, "a")
	waitFor(t, "connected", 20*time.Second, func() bool { st, _ := s.Runner().State(); return st == platform.StateConnected })

	target := &deliveryv1.Target{Platform: "telegram", Account: "4242", ChatId: "99"}
	prompt := "⚠️ **Dangerous command requires approval:**\n```\nrm -rf /tmp/x\n```\nReason: dangerous command"
	r := sendReq(t, b, &deliveryv1.SendRequested{Op: deliveryv1.SendOp_SEND_OP_SEND, IdempotencyKey: "p1", Target: target, Text: prompt,
		Format:   deliveryv1.TextFormat_TEXT_FORMAT_MARKDOWN,
		Approval: &deliveryv1.Approval{Choices: []string{"once", "session", "always", "deny"}, ToolCallId: "call_1"}})
	if !r.GetOk() {
		t.Fatalf("prompt not sent: %v", r)
	}
	card := f.Messages("99")[0]
	want := [][]telegramfake.Button{
		{{Text: "✅ Allow Once", Data: "ea:once:call_1"}, {Text: "✅ Session", Data: "ea:session:call_1"}},
		{{Text: "✅ Always", Data: "ea:always:call_1"}, {Text: "❌ Deny", Data: "ea:deny:call_1"}},
	}
	if !equalButtons(card.Buttons, want) || !strings.Contains(card.Shown, "rm -rf /tmp/x") {
		t.Fatalf("prompt shows %q with buttons %v, want its text and %v", card.Shown, card.Buttons, want)
	}

	id, query, err := f.Press("99", card.ID, alice, "ea:once:call_1")
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the press answered", 10*time.Second, func() bool { return len(f.CallbackAnswers()) == 1 })
	f.Redeliver(id)
	waitFor(t, "the redelivery confirmed", 10*time.Second, func() bool { return f.Confirmed() > id && f.Pending() == 0 })
	evs := inbound(t, b)
	if len(evs) != 1 {
		t.Fatalf("%d events, want the press once: %v", len(evs), evs)
	}
	ev := evs[0]
	if ev.GetText() != "/approve" || ev.GetSource().GetUserId() != "99" || ev.GetSource().GetChatId() != "99" ||
		ev.GetButtonPress().GetMessageId() != strconv.Itoa(card.ID) || ev.GetButtonPress().GetToolCallId() != "call_1" {
		t.Fatalf("published %v, want /approve from 99 pressing the prompt for call_1", ev)
	}
	if a := f.CallbackAnswers()[0]; a.QueryID != query {
		t.Fatalf("answered query %q, want %q", a.QueryID, query)
	}

	r = sendReq(t, b, &deliveryv1.SendRequested{Op: deliveryv1.SendOp_SEND_OP_EDIT, IdempotencyKey: "p1r", Target: target,
		MessageId: strconv.Itoa(card.ID), Text: "✅ Approved once by Alice Liddell", Format: deliveryv1.TextFormat_TEXT_FORMAT_PLAIN})
	if !r.GetOk() {
		t.Fatalf("answer not shown: %v", r)
	}
	after := f.Message("99", card.ID)
	if after.Shown != "✅ Approved once by Alice Liddell" || len(after.Buttons) != 0 {
		t.Fatalf("card shows %q with buttons %v, want the answer without buttons", after.Shown, after.Buttons)
	}
	if _, _, err := f.Press("99", card.ID, alice, "ea:deny:call_1"); err == nil {
		t.Fatal("a button of the answered card could still be pressed")
	}
}

// A tool call id too long for Telegram's 64 bytes of callback data is
// left out: the buttons answer whatever call waits, as typing does.
func TestApprovalButtonsWithoutRoomForTheCall(t *testing.T) {
	kb := keyboard(&deliveryv1.Approval{Choices: []string{"once", "session"}, ToolCallId: strings.Repeat("x", 60)})
	if kb == nil || len(kb.InlineKeyboard) != 1 {
		t.Fatalf("keyboard %v", kb)
	}
	for _, b := range kb.InlineKeyboard[0] {
		if len(b.CallbackData) > maxCallbackData || strings.Count(b.CallbackData, ":") != 1 {
			t.Fatalf("callback data %q", b.CallbackData)
		}
	}
	if keyboard(&deliveryv1.Approval{Choices: []string{"once", "maybe"}}) != nil {
		t.Fatal("a keyboard with a choice the gateway does not know")
	}
	if keyboard(nil) != nil {
		t.Fatal("a keyboard for a message that is no prompt")
	}
}

// FuzzParseCallback: any callback data is read without panicking; what
// is read as an approval is a known command, and the data is exactly
// what the keyboard writes for it.
func FuzzParseCallback(f *testing.F) {
	for _, s := range []string{"ea:once", "ea:session:call_1", "ea:always:toolu_01A", "ea:deny:", "ea:maybe", "mp:gpt", "ea:once:a b", "ea:once:x:y", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, data string) {
		command, call, ok := parseCallback(data)
		if !ok {
			return
		}
		choice := ""
		for c, cmd := range choiceCommands {
			if cmd == command {
				choice = c
			}
		}
		if choice == "" {
			t.Fatalf("%q read as unknown command %q", data, command)
		}
		kb := keyboard(&deliveryv1.Approval{Choices: []string{choice}, ToolCallId: call})
		if kb == nil {
			t.Fatalf("%q: no keyboard for %q", data, choice)
		}
		got := kb.InlineKeyboard[0][0].CallbackData
		if got != data && got+":" != data {
			t.Fatalf("%q read as %q %q, written back as %q", data, command, call, got)
		}
	})
}

func equalButtons(a, b [][]telegramfake.Button) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if len(a[i]) != len(b[i]) {
			return false
		}
		for j := range a[i] {
			if a[i][j] != b[i][j] {
				return false
			}
		}
	}
	return true
}

// A picker (the /model picker) is an inline keyboard row by row; a press
// of a model is published once as the presser's typed command, a press
// of a page as "/model" with the choice's data, a page counter's press
// is answered and not published; an edit with a picker shows its
// buttons (the next page), one without takes them off.
func TestPickerButtons(t *testing.T) {
	t.Parallel()
	f := newFake(t)
	b := bustest.New(t, bustest.EmbeddedURL(t))
	s, _ := startService(t, testConfig(f), b, "a")
	waitFor(t, "connected", 20*time.Second, func() bool { st, _ := s.Runner().State(); return st == platform.StateConnected })

	target := &deliveryv1.Target{Platform: "telegram", Account: "4242", ChatId: "99"}
	long := "/model org/" + strings.Repeat("x", 60)
	picker := &deliveryv1.Picker{Rows: []*deliveryv1.PickerRow{
		{Choices: []*deliveryv1.PickerChoice{{Label: "✓ gpt-4o", Command: "/model gpt-4o"}, {Label: "o3", Command: "/model openai/o3"}}},
		{Choices: []*deliveryv1.PickerChoice{{Label: "xxx...", Command: long, Data: "m2-0a1b2c3d"}}},
		{Choices: []*deliveryv1.PickerChoice{{Label: "1/2"}, {Label: "Next ▶", Command: "/model", Data: "p1"}}},
		{Choices: []*deliveryv1.PickerChoice{{Label: "✗ Cancel", Command: "/model", Data: "x"}}},
	}}
	text := "⚙ **Model Configuration**\n\nThis session uses the default model.\nSelect a model:"
	r := sendReq(t, b, &deliveryv1.SendRequested{Op: deliveryv1.SendOp_SEND_OP_SEND, IdempotencyKey: "k1", Target: target, Text: text,
		Format: deliveryv1.TextFormat_TEXT_FORMAT_MARKDOWN, Picker: picker})
	if !r.GetOk() {
		t.Fatalf("picker not sent: %v", r)
	}
	card := f.Messages("99")[0]
	want := [][]telegramfake.Button{
		{{Text: "✓ gpt-4o", Data: "pc:/model gpt-4o"}, {Text: "o3", Data: "pc:/model openai/o3"}},
		{{Text: "xxx...", Data: "pd:m2-0a1b2c3d:model"}},
		{{Text: "1/2", Data: "pn:3"}, {Text: "Next ▶", Data: "pd:p1:model"}},
		{{Text: "✗ Cancel", Data: "pd:x:model"}},
	}
	if !equalButtons(card.Buttons, want) || !strings.Contains(card.Shown, "Model Configuration") {
		t.Fatalf("picker shows %q with buttons %v, want its text and %v", card.Shown, card.Buttons, want)
	}

	id, _, err := f.Press("99", card.ID, alice, "pc:/model openai/o3")
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := f.Press("99", card.ID, alice, "pn:3"); err != nil {
		t.Fatal(err)
	}
	if _, _, err := f.Press("99", card.ID, alice, "pd:m2-0a1b2c3d:model"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the presses answered", 10*time.Second, func() bool { return len(f.CallbackAnswers()) == 3 })
	f.Redeliver(id)
	waitFor(t, "the redelivery confirmed", 10*time.Second, func() bool { return f.Confirmed() > id+2 && f.Pending() == 0 })
	evs := inbound(t, b)
	if len(evs) != 2 {
		t.Fatalf("%d events, want the model's press once and the long one's: %v", len(evs), evs)
	}
	for i, w := range []struct{ text, data string }{{"/model openai/o3", ""}, {"/model", "m2-0a1b2c3d"}} {
		ev := evs[i]
		if ev.GetText() != w.text || ev.GetButtonPress().GetData() != w.data || ev.GetSource().GetUserId() != "99" ||
			ev.GetButtonPress().GetMessageId() != strconv.Itoa(card.ID) || ev.GetButtonPress().GetToolCallId() != "" {
			t.Fatalf("published %v, want %q with data %q from 99 pressing the picker", ev, w.text, w.data)
		}
	}

	// The next page replaces the buttons; the answer takes them off.
	next := &deliveryv1.Picker{Rows: []*deliveryv1.PickerRow{{Choices: []*deliveryv1.PickerChoice{{Label: "◀ Prev", Command: "/model", Data: "p0"}}}}}
	r = sendReq(t, b, &deliveryv1.SendRequested{Op: deliveryv1.SendOp_SEND_OP_EDIT, IdempotencyKey: "k1p", Target: target,
		MessageId: strconv.Itoa(card.ID), Text: text + " (page 2)", Format: deliveryv1.TextFormat_TEXT_FORMAT_MARKDOWN, Picker: next})
	if after := f.Message("99", card.ID); !r.GetOk() || !equalButtons(after.Buttons, [][]telegramfake.Button{{{Text: "◀ Prev", Data: "pd:p0:model"}}}) {
		t.Fatalf("page 2 (%v) shows buttons %v", r, after.Buttons)
	}
	r = sendReq(t, b, &deliveryv1.SendRequested{Op: deliveryv1.SendOp_SEND_OP_EDIT, IdempotencyKey: "k1r", Target: target,
		MessageId: strconv.Itoa(card.ID), Text: "Model switched to `openai/o3`", Format: deliveryv1.TextFormat_TEXT_FORMAT_MARKDOWN})
	if after := f.Message("99", card.ID); !r.GetOk() || len(after.Buttons) != 0 || !strings.Contains(after.Shown, "Model switched to") {
		t.Fatalf("the answer (%v) shows %q with buttons %v, want it without buttons", r, after.Shown, after.Buttons)
	}
}

// A press is published with its callback query (Interaction.component),
// held unanswered for the router's answer: a refusal answers the query
// with its text (Hermes's toast, the presser's only) and nothing goes to
// the chat; the router's answer of a press it decided (an allowed
// presser's, whose card it edits or not) ends the hold at once, with its
// text (Hermes's toast) or without; otherwise the hold ends with an
// answer without text, and a refusal after it is dropped, not sent to
// the chat.
func TestPressRefusal(t *testing.T) {
	t.Parallel()
	f := newFake(t)
	b := bustest.New(t, bustest.EmbeddedURL(t))
	cfg := testConfig(f)
	// Long enough that an answer published at once always comes first,
	// however busy the machine.
	const pressHold = 5 * time.Second
	cfg.PressHold = pressHold
	s, _ := startService(t, cfg, b, "a")
	waitFor(t, "connected", 20*time.Second, func() bool { st, _ := s.Runner().State(); return st == platform.StateConnected })
	target := &deliveryv1.Target{Platform: "telegram", Account: "4242", ChatId: "99"}
	card := sendApprovalCard(t, f, b)
	const refusal = "⛔ You are not authorized to approve commands."
	seen := 0
	// pressOf presses the card's button and returns the published
	// press's interaction.
	pressOf := func(data string) *eventsv1.Interaction {
		t.Helper()
		_, query, err := f.Press("99", card.ID, alice, data)
		if err != nil {
			t.Fatal(err)
		}
		var ev *eventsv1.MessageReceived
		waitFor(t, "the press published", 10*time.Second, func() bool {
			evs := inbound(t, b)
			if len(evs) > seen {
				ev = evs[seen]
			}
			return ev != nil
		})
		seen++
		ia := ev.GetInteraction()
		if ia.GetId() != query || !ia.GetComponent() || ia.GetToken() != "" || ia.GetExpiresAt().AsTime().After(time.Now().Add(pressHold)) {
			t.Fatalf("press published with interaction %v, want its query %s held", ia, query)
		}
		return ia
	}
	refuse := func(key string, ia *eventsv1.Interaction) {
		t.Helper()
		r := sendReq(t, b, &deliveryv1.SendRequested{Op: deliveryv1.SendOp_SEND_OP_SEND, IdempotencyKey: key,
			Target: &deliveryv1.Target{Platform: "telegram", Account: "4242", ChatId: "99", Interaction: ia}, Text: refusal})
		if !r.GetOk() {
			t.Fatalf("refusal: %v", r)
		}
	}

	ia := pressOf("ea:once:call_1")
	refuse("r1", ia)
	if a := f.CallbackAnswers(); len(a) != 1 || a[0].QueryID != ia.GetId() || a[0].Text != refusal || a[0].ShowAlert {
		t.Fatalf("answers %+v, want the refusal as the query's answer", a)
	}
	// The refusal decided the press: its hold ends with it, not when
	// press_hold runs out, and an answer after it finds no one.
	time.Sleep(200 * time.Millisecond)
	if held, err := platform.AnswerPress(context.Background(), b, &deliveryv1.SendRequested{Text: "late answer",
		Target: &deliveryv1.Target{Platform: "telegram", Account: "4242", ChatId: "99", Interaction: ia}}); err != nil || held {
		t.Fatalf("the press is still held after its refusal (held %v, %v)", held, err)
	}
	time.Sleep(pressHold + 200*time.Millisecond)
	if a := f.CallbackAnswers(); len(a) != 1 {
		t.Fatalf("answers %+v after the hold, want the refusal alone", a)
	}

	// An allowed presser's: the card's edit and the router's answer, its
	// word the query's answer's text.
	pressed := time.Now()
	ia = pressOf("ea:deny:call_1")
	if r := sendReq(t, b, &deliveryv1.SendRequested{Op: deliveryv1.SendOp_SEND_OP_EDIT, IdempotencyKey: "e1", Target: target,
		MessageId: strconv.Itoa(card.ID), Text: "❌ Denied by Alice"}); !r.GetOk() {
		t.Fatalf("edit: %v", r)
	}
	if err := platform.PublishPressAnswer(b, &deliveryv1.SendRequested{Target: &deliveryv1.Target{Platform: "telegram", Account: "4242", ChatId: "99", Interaction: ia},
		Text: "❌ Denied"}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the query answered", 10*time.Second, func() bool { return len(f.CallbackAnswers()) == 2 })
	if a := f.CallbackAnswers()[1]; a.QueryID != ia.GetId() || a.Text != "❌ Denied" || time.Since(pressed) >= pressHold {
		t.Fatalf("answer %+v %v after the press, want the router's word before the hold ends", a, time.Since(pressed))
	}

	// Nothing comes: the hold ends with an answer without text, and a
	// refusal after it is dropped.
	r := sendReq(t, b, &deliveryv1.SendRequested{Op: deliveryv1.SendOp_SEND_OP_SEND, IdempotencyKey: "p2", Target: target, Text: "approve?",
		Approval: &deliveryv1.Approval{Choices: []string{"once"}}})
	if !r.GetOk() {
		t.Fatalf("prompt not sent: %v", r)
	}
	card = f.Messages("99")[1]
	ia = pressOf("ea:once")
	waitFor(t, "the hold's answer", 10*time.Second, func() bool { return len(f.CallbackAnswers()) == 3 })
	if a := f.CallbackAnswers()[2]; a.QueryID != ia.GetId() || a.Text != "" {
		t.Fatalf("answer %+v, want one without text", a)
	}
	refuse("r2", ia)
	if a := f.CallbackAnswers(); len(a) != 3 {
		t.Fatalf("answers %+v, want the late refusal dropped", a)
	}

	// The router's answer to a press it decided without editing the
	// card (a prompt answered before) ends the hold at once, with its
	// text or without; a second answer changes nothing.
	for i, text := range []string{"This approval has already been resolved.", ""} {
		pressed := time.Now()
		ia = pressOf("ea:once")
		answer := &deliveryv1.SendRequested{Op: deliveryv1.SendOp_SEND_OP_SEND, IdempotencyKey: "press:" + ia.GetId(),
			Target: &deliveryv1.Target{Platform: "telegram", Account: "4242", ChatId: "99", Interaction: ia}, Text: text}
		for range 2 {
			if err := platform.PublishPressAnswer(b, answer); err != nil {
				t.Fatal(err)
			}
		}
		waitFor(t, "the query answered", 10*time.Second, func() bool { return len(f.CallbackAnswers()) == 4+i })
		if a := f.CallbackAnswers()[3+i]; a.QueryID != ia.GetId() || a.Text != text || time.Since(pressed) >= pressHold {
			t.Fatalf("answer %+v %v after the press, want %q before the hold ends", a, time.Since(pressed), text)
		}
	}
	time.Sleep(pressHold + 200*time.Millisecond)
	if a := f.CallbackAnswers(); len(a) != 5 {
		t.Fatalf("answers %+v, want one a press", a)
	}
	if ms := f.Messages("99"); len(ms) != 2 {
		t.Fatalf("the chat has %d messages, want the two prompts alone", len(ms))
	}
}

// Telegram has no menus: a picker's menu row (the Discord /model
// picker's) is shown as its choices' buttons, one a row, beside the
// rows of buttons as they are.
func TestPickerMenuAsButtons(t *testing.T) {
	kb := pickerKeyboard(&deliveryv1.Picker{Rows: []*deliveryv1.PickerRow{
		{Placeholder: "Choose a model...", Choices: []*deliveryv1.PickerChoice{{Label: "a", Command: "/model a"}, {Label: "b", Command: "/model b"}}},
		{Choices: []*deliveryv1.PickerChoice{{Label: "◀ Back", Command: "/model", Data: "b"}, {Label: "Cancel", Command: "/model", Data: "x", Danger: true}}},
	}})
	var got [][]string
	for _, row := range kb.InlineKeyboard {
		var r []string
		for _, b := range row {
			r = append(r, b.Text+"="+b.CallbackData)
		}
		got = append(got, r)
	}
	want := [][]string{{"a=pc:/model a"}, {"b=pc:/model b"}, {"◀ Back=pd:b:model", "Cancel=pd:x:model"}}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("keyboard %q, want %q", got, want)
	}
}

// A press the gateway does not publish, whose update it cannot read (a
// field of the wrong type) or that it skips (a picker's page counter, a
// button it does not know, a press without its message), has its
// callback query answered all the same, without text, when its id can
// be read: the client shows its spinner until the query is answered. A
// failure of that answer that passes (a 5xx, a 429, the network) is
// tried again, as a published press's is; a bad request is not.
func TestUnpublishedPressIsAnswered(t *testing.T) {
	t.Parallel()
	const (
		malformed      = `"callback_query":{"id":"%[1]s","from":{"id":"not a number","first_name":"Alice"},"chat_instance":"-99","data":"ea:once"}`
		pageCounter    = `"callback_query":{"id":"%[1]s","from":{"id":99,"first_name":"Alice"},"chat_instance":"-99","data":"pn:3"}`
		unknownButton  = `"callback_query":{"id":"%[1]s","from":{"id":99,"first_name":"Alice"},"chat_instance":"-99","data":"zz:nothing"}`
		withoutMessage = `"callback_query":{"id":"%[1]s","from":{"id":99,"first_name":"Alice"},"chat_instance":"-99","data":"ea:once"}`
	)
	serverError := telegramfake.APIError{Code: 500, Description: "Internal Server Error"}
	for _, tc := range []struct {
		name, raw string
		// fail are Telegram's replies to the first answers.
		fail []telegramfake.APIError
		// answered: the query ends answered.
		answered bool
	}{
		{name: "malformed", raw: malformed, answered: true},
		{name: "malformed, after a server error", raw: malformed, fail: []telegramfake.APIError{serverError}, answered: true},
		{name: "a page counter, after a server error", raw: pageCounter, fail: []telegramfake.APIError{serverError}, answered: true},
		{name: "an unknown button, after a server error", raw: unknownButton, fail: []telegramfake.APIError{serverError}, answered: true},
		{name: "without its message, after a server error", raw: withoutMessage, fail: []telegramfake.APIError{serverError}, answered: true},
		{name: "a page counter, after a flood wait and the network", raw: pageCounter,
			fail: []telegramfake.APIError{telegramfake.FloodWait(1), telegramfake.ErrDropConnection}, answered: true},
		{name: "malformed, never after a bad request", raw: malformed, fail: []telegramfake.APIError{{Code: 400, Description: "Bad Request: invalid callback query answer"}}},
		{name: "an unknown button, never after a bad request", raw: unknownButton, fail: []telegramfake.APIError{{Code: 400, Description: "Bad Request: invalid callback query answer"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f := newFake(t)
			b := bustest.New(t, bustest.EmbeddedURL(t))
			cfg := testConfig(f)
			var times func() []time.Time
			cfg.APIBaseURL, times = answerTimes(t, f.URL)
			s, stop := startService(t, cfg, b, "a")
			waitFor(t, "connected", 20*time.Second, func() bool { st, _ := s.Runner().State(); return st == platform.StateConnected })
			for _, e := range tc.fail {
				f.FailNext("answerCallbackQuery", e)
			}
			id, query := f.InjectQuery(tc.raw)
			waitFor(t, "the update confirmed", 20*time.Second, func() bool { return f.Confirmed() > id })
			want := len(tc.fail) + 1
			if !tc.answered {
				want = len(tc.fail)
			}
			waitFor(t, "the answers tried", 20*time.Second, func() bool { return len(times()) >= want })
			// The gateway's stop waits for the tries under way: every
			// try came before it returns.
			stop()
			if n := len(times()); n != want {
				t.Errorf("%d answers tried, want %d: each failure, and the answer unless Telegram refused it", n, want)
			}
			a := f.CallbackAnswers()
			switch {
			case !tc.answered && len(a) != 0:
				t.Errorf("answers %+v, want none", a)
			case tc.answered && (len(a) != 1 || a[0].QueryID != query || a[0].Text != ""):
				t.Errorf("answers %+v, want the query's, once, without text", a)
			}
			if evs := inbound(t, b); len(evs) != 0 {
				t.Fatalf("published %v", evs)
			}
		})
	}
}

// A refusal that delivery hands to a replica other than the press's
// holder (every replica serves sends) is sent on to the holder, which
// answers the query with it and ends its hold there: one answer, the
// refusal's, and no hold waiting out press_hold to answer the query a
// second time, which Telegram refuses.
func TestPressRefusalOnAnotherReplica(t *testing.T) {
	t.Parallel()
	f := newFake(t)
	b := bustest.New(t, bustest.EmbeddedURL(t))
	cfg := testConfig(f)
	// Long enough that a hold still waiting is found waiting.
	const pressHold = 5 * time.Second
	cfg.PressHold = pressHold
	sa, _ := startService(t, cfg, b, "a")
	sb, _ := startService(t, cfg, b, "b")
	var other *Service
	waitFor(t, "one replica connected", 20*time.Second, func() bool {
		for _, s := range [][2]*Service{{sa, sb}, {sb, sa}} {
			if st, _ := s[0].Runner().State(); st == platform.StateConnected {
				other = s[1]
				return true
			}
		}
		return false
	})
	card := sendApprovalCard(t, f, b)
	if _, _, err := f.Press("99", card.ID, alice, "ea:once:call_1"); err != nil {
		t.Fatal(err)
	}
	var ia *eventsv1.Interaction
	waitFor(t, "the press published", 10*time.Second, func() bool {
		if evs := inbound(t, b); len(evs) == 1 {
			ia = evs[0].GetInteraction()
		}
		return ia != nil
	})
	const refusal = "⛔ You are not authorized to approve commands."
	req := &deliveryv1.SendRequested{Op: deliveryv1.SendOp_SEND_OP_SEND, IdempotencyKey: "r1",
		Target: &deliveryv1.Target{Platform: "telegram", Account: "4242", ChatId: "99", Interaction: ia}, Text: refusal}
	if _, err := other.p.Send(context.Background(), req); err != nil {
		t.Fatalf("refusal on the other replica: %v", err)
	}
	waitFor(t, "the refusal", 5*time.Second, func() bool { return len(f.CallbackAnswers()) == 1 })
	if a := f.CallbackAnswers()[0]; a.QueryID != ia.GetId() || a.Text != refusal {
		t.Fatalf("answer %+v, want the refusal as the query's answer", a)
	}
	time.Sleep(200 * time.Millisecond)
	if held, err := platform.AnswerPress(context.Background(), b, &deliveryv1.SendRequested{Text: "late answer",
		Target: &deliveryv1.Target{Platform: "telegram", Account: "4242", ChatId: "99", Interaction: ia}}); err != nil || held {
		t.Fatalf("the holder still holds the press after its refusal (held %v, %v)", held, err)
	}
}

// lossyConn stores the first publish of each press on the bus and
// reports it failed, as a publish whose acknowledgement was lost (a
// timeout): the poller tries it again, and the bus tells the retry it
// is a duplicate.
type lossyConn struct {
	platform.Conn
	mu   *sync.Mutex
	lost map[string]bool // event ids whose first publish was "lost"
}

func (c *lossyConn) Deliver(ctx context.Context, ev *eventsv1.MessageReceived) (platform.Accepted, error) {
	acc, err := c.Conn.Deliver(ctx, ev)
	if err != nil || ev.GetInteraction() == nil {
		return acc, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.lost[ev.GetEventId()] {
		return acc, nil
	}
	c.lost[ev.GetEventId()] = true
	return platform.Accepted{}, errors.New("publish: nats: timeout")
}

func (c *lossyConn) HoldPress(id string) (*platform.PressHold, error) {
	return c.Conn.(platform.PressHolder).HoldPress(id)
}

// lossyPlatform is the Telegram platform behind a lossyConn.
type lossyPlatform struct {
	*Platform
	mu   sync.Mutex
	lost map[string]bool
}

func (p *lossyPlatform) Connect(ctx context.Context, conn platform.Conn) error {
	return p.Platform.Connect(ctx, &lossyConn{Conn: conn, mu: &p.mu, lost: p.lost})
}

// lostPublishes reports how many presses had their first publish "lost".
func (p *lossyPlatform) lostPublishes() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.lost)
}

// A press whose publish failed after the bus stored it is still this
// replica's to hold: the router decides the stored press, and its
// refusal, or its word on the outcome, is the query's answer, also when
// it comes after the retry was told the press is a duplicate. Taken for
// a press Telegram sent again, the retry answered the query at once
// without text, and the refusal that came after found it answered.
func TestPressStoredByAFailedPublishIsHeld(t *testing.T) {
	t.Parallel()
	f := newFake(t)
	b := bustest.New(t, bustest.EmbeddedURL(t))
	cfg := testConfig(f)
	// The longest there is, so that the hold is found holding however
	// busy the machine.
	const pressHold = maxPressHold
	cfg.PressHold = pressHold
	tp, err := NewPlatform(cfg, quietLog(), nil)
	if err != nil {
		t.Fatal(err)
	}
	tp.bus = b
	lp := &lossyPlatform{Platform: tp, lost: map[string]bool{}}
	svc, err := platform.NewService(lp, b, quietLog(), platform.Options{Instance: "a", Backoff: platform.Schedule(50 * time.Millisecond)})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- svc.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("run: %v", err)
		}
	})
	waitFor(t, "connected", 20*time.Second, func() bool { st, _ := svc.Runner().State(); return st == platform.StateConnected })

	card := sendApprovalCard(t, f, b)
	// press presses the card's button and returns the stored press's
	// interaction once its retry has been published.
	press := func(n int, data string) *eventsv1.Interaction {
		t.Helper()
		id, query, err := f.Press("99", card.ID, alice, data)
		if err != nil {
			t.Fatal(err)
		}
		waitFor(t, "the press's retry published", 10*time.Second, func() bool {
			return lp.lostPublishes() == n && f.Confirmed() > id
		})
		evs := inbound(t, b)
		if len(evs) != n || evs[n-1].GetInteraction().GetId() != query {
			t.Fatalf("published %v, want the press once", evs)
		}
		return evs[n-1].GetInteraction()
	}

	const refusal = "⛔ You are not authorized to approve commands."
	ia := press(1, "ea:once:call_1")
	r := sendReq(t, b, &deliveryv1.SendRequested{Op: deliveryv1.SendOp_SEND_OP_SEND, IdempotencyKey: "r1",
		Target: &deliveryv1.Target{Platform: "telegram", Account: "4242", ChatId: "99", Interaction: ia}, Text: refusal})
	if !r.GetOk() {
		t.Fatalf("refusal: %v", r)
	}
	waitFor(t, "the query answered", 10*time.Second, func() bool { return len(f.CallbackAnswers()) == 1 })
	if a := f.CallbackAnswers()[0]; a.QueryID != ia.GetId() || a.Text != refusal {
		t.Fatalf("answer %+v, want the refusal as the query's answer", a)
	}

	const resolved = "This approval has already been resolved."
	pressed := time.Now()
	ia = press(2, "ea:deny:call_1")
	if err := platform.PublishPressAnswer(b, &deliveryv1.SendRequested{Target: &deliveryv1.Target{Platform: "telegram", Account: "4242", ChatId: "99", Interaction: ia},
		Text: resolved}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the query answered", 10*time.Second, func() bool { return len(f.CallbackAnswers()) == 2 })
	if a := f.CallbackAnswers()[1]; a.QueryID != ia.GetId() || a.Text != resolved || time.Since(pressed) >= pressHold {
		t.Fatalf("answer %+v %v after the press, want the router's word before the hold ends", a, time.Since(pressed))
	}
}

// A press Telegram sends again while this replica still holds its query
// is left to that hold: the router's answer, or its refusal, is the
// query's answer. Answered at once without text, the query took no
// other answer, and the router's word was lost.
func TestPressSentAgainWhileHeld(t *testing.T) {
	t.Parallel()
	f := newFake(t)
	b := bustest.New(t, bustest.EmbeddedURL(t))
	cfg := testConfig(f)
	// The longest there is, so that the hold is found holding however
	// busy the machine.
	const pressHold = maxPressHold
	cfg.PressHold = pressHold
	s, _ := startService(t, cfg, b, "a")
	waitFor(t, "connected", 20*time.Second, func() bool { st, _ := s.Runner().State(); return st == platform.StateConnected })
	card := sendApprovalCard(t, f, b)
	pressed := time.Now()
	id, query, err := f.Press("99", card.ID, alice, "ea:once:call_1")
	if err != nil {
		t.Fatal(err)
	}
	var ia *eventsv1.Interaction
	waitFor(t, "the press published", 10*time.Second, func() bool {
		if evs := inbound(t, b); len(evs) == 1 {
			ia = evs[0].GetInteraction()
		}
		return ia != nil
	})
	// Telegram sends the press again; a message after it is confirmed
	// once the press sent again has been handled.
	f.Redeliver(id)
	next := f.Inject(obj{"message": msg(obj{"message_id": 500, "from": alice, "chat": dmChat, "text": "after"})})
	waitFor(t, "the press sent again handled", 10*time.Second, func() bool { return f.Confirmed() > next })
	if a := f.CallbackAnswers(); len(a) != 0 {
		t.Fatalf("answers %+v while the press is held, want none yet", a)
	}
	const answer = "✅ Approved once"
	if err := platform.PublishPressAnswer(b, &deliveryv1.SendRequested{Target: &deliveryv1.Target{Platform: "telegram", Account: "4242", ChatId: "99", Interaction: ia},
		Text: answer}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the query answered", 10*time.Second, func() bool { return len(f.CallbackAnswers()) == 1 })
	if a := f.CallbackAnswers()[0]; a.QueryID != query || a.Text != answer || time.Since(pressed) >= pressHold {
		t.Fatalf("answer %+v %v after the press, want the router's word before the hold ends", a, time.Since(pressed))
	}
	if evs := inbound(t, b); len(evs) != 2 {
		t.Fatalf("published %v, want the press once and the message", evs)
	}
}

// sendApprovalCard sends the approval prompt "approve?" (choices once
// and deny, tool call call_1) to chat 99 and returns the card the fake
// Bot API shows.
func sendApprovalCard(t *testing.T, f *telegramfake.Server, b *bus.Bus) telegramfake.Message {
	t.Helper()
	target := &deliveryv1.Target{Platform: "telegram", Account: "4242", ChatId: "99"}
	r := sendReq(t, b, &deliveryv1.SendRequested{Op: deliveryv1.SendOp_SEND_OP_SEND, IdempotencyKey: "p1", Target: target, Text: "approve?",
		Approval: &deliveryv1.Approval{Choices: []string{"once", "deny"}, ToolCallId: "call_1"}})
	if !r.GetOk() {
		t.Fatalf("prompt not sent: %v", r)
	}
	return f.Messages("99")[0]
}

// A callback query's answer over the Bot API's 200 characters is cut to
// fit: counted in UTF-16 units, as Telegram counts its texts, where an
// emoji outside the BMP is two. Cut at 200 runes, such a toast was up to
// 400 units, refused (MESSAGE_TOO_LONG) and lost.
func TestCallbackAnswerFits(t *testing.T) {
	t.Parallel()
	f := newFake(t)
	p, err := NewPlatform(testConfig(f), quietLog(), nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, c := range []struct {
		name, text, want string
	}{
		{"short", "⛔ Not yours.", "⛔ Not yours."},
		{"ascii", strings.Repeat("a", 250), strings.Repeat("a", 200)},
		{"emoji under 200 runes", strings.Repeat("🔒", 150), strings.Repeat("🔒", 100)},
		{"emoji over 200 runes", strings.Repeat("🔒", 250), strings.Repeat("🔒", 100)},
		{"a pair at the cut", "a" + strings.Repeat("🔒", 150), "a" + strings.Repeat("🔒", 99)},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, qid := f.InjectQuery(`{"callback_query":{"id":"%[1]s","from":{"id":99,"is_bot":false,"first_name":"A"},"chat_instance":"-99","data":"x"}}`)
			if err := p.answerQuery(ctx, qid, c.text); err != nil {
				t.Fatalf("answer refused: %v", err)
			}
			for _, a := range f.CallbackAnswers() {
				if a.QueryID == qid && a.Text != c.want {
					t.Fatalf("answered %q, want %q", a.Text, c.want)
				}
			}
		})
	}
}
