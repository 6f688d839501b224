package discord

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bwmarrin/discordgo"

	"github.com/switchboard-chat/switchboard/pkg/bus"
	"github.com/switchboard-chat/switchboard/pkg/bus/bustest"
	deliveryv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/delivery/v1"
	eventsv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/events/v1"
	"github.com/switchboard-chat/switchboard/pkg/platform"
	"github.com/switchboard-chat/switchboard/pkg/platform/platformtest"
	"github.com/switchboard-chat/switchboard/services/gateway/discord/discordfake"
)

// An approval prompt is posted with Hermes's four buttons; a press is
// published once as the presser's command in the prompt's thread (also
// when Discord dispatches the interaction again), the interaction is
// acknowledged with a deferred update, and the answer's edit takes the
// buttons off.
func TestApprovalButtons(t *testing.T) {
	t.Parallel()
	f := newFake(t)
	b, next := run(t, f, Config{})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	send := func(req *deliveryv1.SendRequested) *deliveryv1.SendReceipt {
		t.Helper()
		r := &deliveryv1.SendReceipt{}
		if err := b.Request(ctx, b.Topology().SendSubject("discord"), req, r); err != nil {
			t.Fatal(err)
		}
		if !r.GetOk() {
			t.Fatalf("receipt %v, want ok", r)
		}
		return r
	}
	target := &deliveryv1.Target{Platform: "discord", ChatId: channel, ThreadId: thread}
	send(&deliveryv1.SendRequested{Op: deliveryv1.SendOp_SEND_OP_SEND, IdempotencyKey: "prompt", Target: target,
		Text:     "⚠️ **Dangerous command requires approval:**\n```\nrm -rf /tmp/x\n```",
		Approval: &deliveryv1.Approval{Choices: []string{"once", "session", "always", "deny"}, ToolCallId: "call_1"}})
	ms := f.Messages(thread)
	if len(ms) != 1 {
		t.Fatalf("thread has %+v, want the prompt", ms)
	}
	card := ms[0]
	want := []discordfake.Button{
		{Label: "Allow Once", Style: 3, CustomID: "ea:once:call_1"},
		{Label: "Allow Session", Style: 2, CustomID: "ea:session:call_1"},
		{Label: "Always Allow", Style: 1, CustomID: "ea:always:call_1"},
		{Label: "Deny", Style: 4, CustomID: "ea:deny:call_1"},
	}
	if !slices.Equal(card.Buttons, want) || !strings.Contains(card.Content, "rm -rf /tmp/x") {
		t.Fatalf("prompt %q with buttons %+v, want its text and %+v", card.Content, card.Buttons, want)
	}

	d, err := f.Press(ctx, discordfake.Press{ChannelID: thread, GuildID: guild, MessageID: card.ID, UserID: user, UserName: "alice", CustomID: "ea:always:call_1"})
	if err != nil {
		t.Fatal(err)
	}
	ev := next(20 * time.Second)
	src := ev.GetSource()
	if ev.GetText() != "/approve always" || src.GetUserId() != user || src.GetUserName() != "alice" || src.GetChatId() != thread ||
		src.GetThreadId() != thread || src.GetParentChatId() != channel || src.GetChatType() != "thread" || src.GetScopeId() != guild ||
		ev.GetButtonPress().GetMessageId() != card.ID || ev.GetButtonPress().GetToolCallId() != "call_1" || !ev.GetNoReaction() ||
		ev.GetEventId() != "press:"+d["id"].(string) {
		t.Fatalf("published %v, want /approve always from %s in the prompt's thread, pressing %s for call_1", ev, user, card.ID)
	}
	platformtest.WaitFor(t, "the press to be acknowledged", func() bool {
		acks, _ := f.Acks(d["id"].(string))
		return len(acks) == 1
	})
	if acks, _ := f.Acks(d["id"].(string)); acks[0] != int(discordgo.InteractionResponseDeferredMessageUpdate) {
		t.Fatalf("acknowledged with %v, want a deferred message update (6)", acks)
	}
	if err := f.Dispatch(ctx, "INTERACTION_CREATE", d); err != nil { // a redelivery
		t.Fatal(err)
	}
	platformtest.WaitFor(t, "the redelivery to be answered", func() bool {
		_, refused := f.Acks(d["id"].(string))
		return refused == 1
	})
	if ev := next(300 * time.Millisecond); ev != nil {
		t.Fatalf("the redelivered press was published again: %v", ev)
	}

	// A notice to the presser (a refusal) replies to the press: no message.
	notice := &deliveryv1.Target{Platform: "discord", ChatId: src.GetChatId(), ThreadId: src.GetThreadId(), ReplyToMessageId: ev.GetMessageId()}
	send(&deliveryv1.SendRequested{Op: deliveryv1.SendOp_SEND_OP_SEND, IdempotencyKey: "notice", Target: notice, Text: "⛔ not allowed"})
	if ms := f.Messages(thread); len(ms) != 2 || ms[1].ReplyTo != "" {
		t.Fatalf("thread has %+v, want the notice posted without a reply reference", ms)
	}
	send(&deliveryv1.SendRequested{Op: deliveryv1.SendOp_SEND_OP_EDIT, IdempotencyKey: "answer", Target: target, MessageId: card.ID,
		Text: "✅ Approved permanently by alice"})
	if ms := f.Messages(thread); len(ms) != 2 || ms[0].Content != "✅ Approved permanently by alice" || len(ms[0].Buttons) != 0 || ms[0].Edits != 1 {
		t.Fatalf("after the answer the thread has %+v, want the card edited without buttons", ms)
	}
}

// A press is held for the router's answer: its text (Hermes's word on
// a prompt resolved before) is shown to the presser only, an ephemeral
// followup of the acknowledged press that leaves the card alone; an
// answer without text shows nothing, as does a redelivered press,
// which the router does not decide again.
func TestPressAnswerEphemeral(t *testing.T) {
	t.Parallel()
	f := newFake(t)
	b, next := run(t, f, Config{PressHold: 10 * time.Second})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	const card, resolved = "700000000000000042", "This approval has already been resolved~"
	pressOf := func() (map[string]any, *eventsv1.MessageReceived) {
		t.Helper()
		d, err := f.Press(ctx, discordfake.Press{ChannelID: thread, GuildID: guild, MessageID: card, UserID: user, UserName: "alice", CustomID: "ea:deny:call_1"})
		if err != nil {
			t.Fatal(err)
		}
		ev := next(20 * time.Second)
		if ev.GetInteraction().GetId() != d["id"] {
			t.Fatalf("published %v, want the press with its interaction", ev)
		}
		return d, ev
	}
	// answer is the router's answer to the press of ev, as it sends it.
	answer := func(ev *eventsv1.MessageReceived, text string) {
		t.Helper()
		src := ev.GetSource()
		req := &deliveryv1.SendRequested{IdempotencyKey: "press:" + ev.GetEventId(), Op: deliveryv1.SendOp_SEND_OP_SEND, Text: text,
			Target: &deliveryv1.Target{Platform: "discord", Account: src.GetAccount(), ChatId: src.GetChatId(), ThreadId: src.GetThreadId(),
				Interaction: ev.GetInteraction()}}
		if err := platform.PublishPressAnswer(b, req); err != nil {
			t.Fatal(err)
		}
	}

	quiet, ev := pressOf()
	answer(ev, "")
	d, ev := pressOf()
	answer(ev, resolved)
	id := d["id"].(string)
	platformtest.WaitFor(t, "the answer shown to the presser", func() bool { return len(f.InteractionState(id).Followups) > 0 })
	st := f.InteractionState(id)
	if len(st.Callbacks) != 1 || st.Callbacks[0] != int(discordgo.InteractionResponseDeferredMessageUpdate) || st.Original != "" ||
		len(st.Followups) != 1 || st.Followups[0].Content != resolved || st.Followups[0].Flags != 64 {
		t.Fatalf("interaction %+v, want a deferred update, then the answer as an ephemeral followup", st)
	}
	if st := f.InteractionState(quiet["id"].(string)); len(st.Callbacks) != 1 || len(st.Followups) != 0 || st.Original != "" {
		t.Fatalf("interaction answered without text: %+v, want acknowledged only", st)
	}
	for _, req := range f.Requests() {
		if strings.HasPrefix(req, "DELETE /api/v9/webhooks/") || strings.HasPrefix(req, "PATCH /api/v9/webhooks/") {
			t.Fatalf("the press's response message was touched: %s", req)
		}
	}

	// A redelivery: acknowledged again (refused), not published again.
	if err := f.Dispatch(ctx, "INTERACTION_CREATE", d); err != nil {
		t.Fatal(err)
	}
	platformtest.WaitFor(t, "the redelivery to be answered", func() bool { _, refused := f.Acks(id); return refused == 1 })
	if ev := next(300 * time.Millisecond); ev != nil {
		t.Fatalf("the redelivered press was published again: %v", ev)
	}
	if st := f.InteractionState(id); len(st.Followups) != 1 {
		t.Fatalf("interaction %+v after a redelivery, want the one answer", st)
	}
	if ms := f.Messages(thread); len(ms) != 0 {
		t.Fatalf("the thread got %+v", ms)
	}
}

// A press in a DM (user, not member) is published; a click on a button
// the gateway does not know (a Hermes view's, whose ids discord.py made)
// is not published, and its user is told at once, in a message only
// they see, that nothing was done: a silent acknowledgement left the
// click doing nothing without a word.
func TestPressInDMAndUnknownButton(t *testing.T) {
	t.Parallel()
	f := newFake(t)
	dmChannel := "900000000000000077"
	f.AddChannel(dmChannel, discordfake.TypeDM, "", "")
	_, next := run(t, f, Config{})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	other, err := f.Press(ctx, discordfake.Press{ChannelID: dmChannel, MessageID: "700000000000000009", UserID: user, UserName: "bob", CustomID: "model_cancel"})
	if err != nil {
		t.Fatal(err)
	}
	deny, err := f.Press(ctx, discordfake.Press{ChannelID: dmChannel, MessageID: "700000000000000009", UserID: user, UserName: "bob", CustomID: "ea:deny"})
	if err != nil {
		t.Fatal(err)
	}
	ev := next(20 * time.Second)
	if ev.GetText() != "/deny" || ev.GetSource().GetChatType() != "dm" || ev.GetSource().GetChatId() != dmChannel ||
		ev.GetSource().GetUserName() != "bob" || ev.GetButtonPress().GetToolCallId() != "" || ev.GetEventId() != "press:"+deny["id"].(string) {
		t.Fatalf("published %v, want bob's /deny in the DM (the other button is not published)", ev)
	}
	for _, d := range []map[string]any{other, deny} {
		platformtest.WaitFor(t, "both presses to be acknowledged", func() bool {
			acks, _ := f.Acks(d["id"].(string))
			return len(acks) == 1
		})
	}
	if st := f.InteractionState(deny["id"].(string)); st.Callbacks[0] != 6 {
		t.Fatalf("press acknowledged %+v, want a deferred update", st)
	}
	if st := f.InteractionState(other["id"].(string)); st.Callbacks[0] != 4 || st.Flags != 64 || st.Content != unreadInteraction {
		t.Fatalf("unknown button answered %+v, want an ephemeral message saying nothing was done", st)
	}
}

func TestApprovalComponents(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("c", 100)
	for _, tc := range []struct {
		name string
		a    *deliveryv1.Approval
		ids  []string
	}{
		{"none", nil, nil},
		{"no choices", &deliveryv1.Approval{ToolCallId: "x"}, nil},
		{"unknown choice", &deliveryv1.Approval{Choices: []string{"once", "later"}}, nil},
		{"without call", &deliveryv1.Approval{Choices: []string{"once", "deny"}}, []string{"ea:once", "ea:deny"}},
		{"call too long", &deliveryv1.Approval{Choices: []string{"deny"}, ToolCallId: long}, []string{"ea:deny"}},
		{"call with a space", &deliveryv1.Approval{Choices: []string{"deny"}, ToolCallId: "a b"}, []string{"ea:deny"}},
		{"call", &deliveryv1.Approval{Choices: []string{"session"}, ToolCallId: "toolu_01"}, []string{"ea:session:toolu_01"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cs := approvalComponents(tc.a)
			var ids []string
			if len(cs) > 0 {
				for _, c := range cs[0].(discordgo.ActionsRow).Components {
					ids = append(ids, c.(discordgo.Button).CustomID)
				}
			}
			if !slices.Equal(ids, tc.ids) {
				t.Fatalf("custom ids %v, want %v", ids, tc.ids)
			}
			for _, id := range ids {
				if len(id) > maxCustomID {
					t.Fatalf("custom id of %d bytes", len(id))
				}
				if _, _, ok := parseCustomID(id); !ok {
					t.Fatalf("custom id %q does not parse", id)
				}
			}
		})
	}
}

// FuzzInteraction feeds INTERACTION_CREATE payloads to the parser and
// the press builder: no panic, and a published press is well formed.
func FuzzInteraction(f *testing.F) {
	ff := discordfake.New(f)
	for _, p := range []discordfake.Press{
		{ChannelID: "1", GuildID: "2", MessageID: "3", UserID: "4", CustomID: "ea:once:call_1"},
		{ChannelID: "1", MessageID: "3", UserID: "4", CustomID: "ea:deny"},
		{ChannelID: "1", GuildID: "2", MessageID: "3", UserID: bot, CustomID: "ea:session"},
	} {
		d, err := ff.Press(context.Background(), p)
		if err != nil {
			f.Fatal(err)
		}
		raw, _ := json.Marshal(d)
		f.Add(raw, false)
	}
	f.Add([]byte(`{"id":"5","type":3,"token":"t","channel_id":"1","data":{"custom_id":"ea:always:a:b","component_type":2},"user":{"id":"4"},"message":{"id":"3"}}`), true)
	f.Add([]byte(`{"id":"5/../x","type":3,"token":"t","channel_id":"1","data":{"custom_id":"ea:once","component_type":2},"user":{"id":"4"},"message":{"id":"3"}}`), false)
	f.Add([]byte(`{"id":"5","type":2,"token":"t","data":{"name":"approve"}}`), false)
	f.Add([]byte(`{"id":"5","type":3,"token":"t?x=1","data":null}`), false)
	// Interactions that do not parse, or of a type the gateway does not
	// know, whose id and token can be read all the same (answerUnread).
	f.Add([]byte(`{"id":"5","type":3,"token":"t","data":{"custom_id":7,"component_type":2}}`), false)
	f.Add([]byte(`{"id":"5","type":3,"token":"t"}`), false)
	f.Add([]byte(`{"id":"5","type":99,"token":"t","user":"alice"}`), false)
	f.Add([]byte(`{"id":5,"type":3,"token":"t","data":{}}`), false)
	f.Fuzz(func(t *testing.T, raw []byte, thread bool) {
		in, err := parseInteraction(raw)
		if err == nil && in.Type != discordgo.InteractionApplicationCommand && in.Type != discordgo.InteractionMessageComponent {
			err = errMalformed // answered as one that does not parse
		}
		if err != nil {
			if !errors.Is(err, errMalformed) {
				t.Fatalf("error not marked malformed: %v", err)
			}
			if id, token, _, ok := unreadIDs(raw); ok && (!snowflake(id) || !urlSafe(token)) {
				t.Fatalf("answering id %q token %q", id, token)
			}
			return
		}
		if !snowflake(in.ID) || !urlSafe(in.Token) {
			t.Fatalf("accepted id %q token %q", in.ID, in.Token)
		}
		ev, why := pressed(in, channelInfo{Thread: thread, Parent: "P"}, rules{Account: bot, BotID: bot}, time.Now())
		if ev == nil {
			if why == "" {
				t.Fatal("skipped without a reason")
			}
			return
		}
		if _, _, ok := parseCustomID(in.Data.(discordgo.MessageComponentInteractionData).CustomID); !ok {
			t.Fatal("published a press of an unknown button")
		}
		if ev.GetEventId() != "press:"+in.ID || !snowflake(ev.GetButtonPress().GetMessageId()) || ev.GetSource().GetUserId() == "" {
			t.Fatalf("press %v", ev)
		}
		if err := platform.CheckEvent(ev, "discord", "", 1<<20); err != nil {
			t.Fatalf("press fails the kit's check: %v", err)
		}
	})
}

// FuzzCustomID: a custom_id that parses names a known command and a
// printable call, and one the gateway builds parses back.
func FuzzCustomID(f *testing.F) {
	for _, s := range []string{"ea:once", "ea:deny:call_1", "ea:always:", "ea:x:y", "ea:session:a b", "hermes_deny", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, id string) {
		command, call, ok := parseCustomID(id)
		if !ok {
			return
		}
		if !slices.Contains([]string{"/approve", "/approve session", "/approve always", "/deny"}, command) || (call != "" && !validCall(call)) || len(id) > maxCustomID {
			t.Fatalf("%q parsed as %q %q", id, command, call)
		}
	})
}

// A picker (the /model picker) is posted as rows of buttons, a page
// counter disabled, Hermes's eight models a page joined into Discord's
// five rows; a press of a model is published as the presser's typed
// command, a press with data as "/model" and the data; an edit with a
// picker shows its buttons (the next page), one without takes them off.
func TestPickerButtons(t *testing.T) {
	t.Parallel()
	f := newFake(t)
	b, next := run(t, f, Config{})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	send := func(req *deliveryv1.SendRequested) {
		t.Helper()
		r := &deliveryv1.SendReceipt{}
		if err := b.Request(ctx, b.Topology().SendSubject("discord"), req, r); err != nil {
			t.Fatal(err)
		}
		if !r.GetOk() {
			t.Fatalf("receipt %v, want ok", r)
		}
	}
	picker := &deliveryv1.Picker{}
	var want []discordfake.Button
	for i := 0; i < 8; i += 2 {
		row := &deliveryv1.PickerRow{}
		for j := i; j < i+2; j++ {
			m := fmt.Sprintf("model-%d", j)
			row.Choices = append(row.Choices, &deliveryv1.PickerChoice{Label: m, Command: "/model " + m})
			want = append(want, discordfake.Button{Label: m, Style: 2, CustomID: "pc:/model " + m})
		}
		picker.Rows = append(picker.Rows, row)
	}
	picker.Rows = append(picker.Rows,
		&deliveryv1.PickerRow{Choices: []*deliveryv1.PickerChoice{{Label: "1/2"}, {Label: "Next ▶", Command: "/model", Data: "p1"}}},
		&deliveryv1.PickerRow{Choices: []*deliveryv1.PickerChoice{{Label: "✗ Cancel", Command: "/model", Data: "x"}}})
	want = append(want, discordfake.Button{Label: "1/2", Style: 2, CustomID: "pn:8", Disabled: true},
		discordfake.Button{Label: "Next ▶", Style: 2, CustomID: "pd:p1:model"}, discordfake.Button{Label: "✗ Cancel", Style: 2, CustomID: "pd:x:model"})
	target := &deliveryv1.Target{Platform: "discord", ChatId: channel, ThreadId: thread}
	send(&deliveryv1.SendRequested{Op: deliveryv1.SendOp_SEND_OP_SEND, IdempotencyKey: "picker", Target: target,
		Text: "⚙ **Model Configuration**\n\nSelect a model:", Picker: picker})
	ms := f.Messages(thread)
	if len(ms) != 1 || !slices.Equal(ms[0].Buttons, want) {
		t.Fatalf("thread has %+v, want the picker with %+v", ms, want)
	}
	card := ms[0]
	if rows := pickerComponents(picker); len(rows) != 5 || len(rows[0].(discordgo.ActionsRow).Components) != 4 {
		t.Fatalf("action rows %+v, want six rows joined into five, the first two into one", rows)
	}

	for _, tc := range []struct{ id, text, data string }{{"pc:/model model-3", "/model model-3", ""}, {"pd:p1:model", "/model", "p1"}} {
		if _, err := f.Press(ctx, discordfake.Press{ChannelID: thread, GuildID: guild, MessageID: card.ID, UserID: user, UserName: "alice", CustomID: tc.id}); err != nil {
			t.Fatal(err)
		}
		ev := next(20 * time.Second)
		if ev.GetText() != tc.text || ev.GetButtonPress().GetData() != tc.data || ev.GetSource().GetUserId() != user || ev.GetButtonPress().GetMessageId() != card.ID {
			t.Fatalf("published %v, want %q with data %q from %s pressing the picker", ev, tc.text, tc.data, user)
		}
	}
	d, err := f.Press(ctx, discordfake.Press{ChannelID: thread, GuildID: guild, MessageID: card.ID, UserID: user, UserName: "alice", CustomID: "pn:8"})
	if err != nil {
		t.Fatal(err)
	}
	platformtest.WaitFor(t, "the counter's press to be acknowledged", func() bool {
		acks, _ := f.Acks(d["id"].(string))
		return len(acks) == 1
	})
	if ev := next(300 * time.Millisecond); ev != nil {
		t.Fatalf("the counter's press was published: %v", ev)
	}

	page := &deliveryv1.Picker{Rows: []*deliveryv1.PickerRow{{Choices: []*deliveryv1.PickerChoice{{Label: "◀ Prev", Command: "/model", Data: "p0"}}}}}
	send(&deliveryv1.SendRequested{Op: deliveryv1.SendOp_SEND_OP_EDIT, IdempotencyKey: "page", Target: target, MessageId: card.ID,
		Text: "Select a model (9–9 of 9):", Picker: page})
	if ms := f.Messages(thread); !slices.Equal(ms[0].Buttons, []discordfake.Button{{Label: "◀ Prev", Style: 2, CustomID: "pd:p0:model"}}) {
		t.Fatalf("page 2 shows %+v", ms[0].Buttons)
	}
	send(&deliveryv1.SendRequested{Op: deliveryv1.SendOp_SEND_OP_EDIT, IdempotencyKey: "answer", Target: target, MessageId: card.ID,
		Text: "Model switched to `model-3`"})
	if ms := f.Messages(thread); ms[0].Content != "Model switched to `model-3`" || len(ms[0].Buttons) != 0 {
		t.Fatalf("after the answer the picker is %+v, want it without buttons", ms[0])
	}
}

// A picker's menu row (Hermes's Discord /model picker) is posted as a
// string select menu alone in its action row, its options' values the
// choices' payloads, beside buttons (Cancel red); choosing an option is
// published as the chooser's press of that choice (the typed command,
// or "/model" with its data); an edit shows the next step's menus, and
// one without a picker takes the menus off.
func TestPickerMenus(t *testing.T) {
	t.Parallel()
	f := newFake(t)
	b, next := run(t, f, Config{})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	send := func(req *deliveryv1.SendRequested) {
		t.Helper()
		r := &deliveryv1.SendReceipt{}
		if err := b.Request(ctx, b.Topology().SendSubject("discord"), req, r); err != nil {
			t.Fatal(err)
		}
		if !r.GetOk() {
			t.Fatalf("receipt %v, want ok", r)
		}
	}
	cancelChoice := &deliveryv1.PickerChoice{Label: "Cancel", Command: "/model", Data: "x", Danger: true}
	providers := &deliveryv1.Picker{Rows: []*deliveryv1.PickerRow{
		{Placeholder: "Choose a provider...", Choices: []*deliveryv1.PickerChoice{
			{Label: "OpenAI-compatible (30 models)", Description: "current", Command: "/model", Data: "v"}}},
		{Choices: []*deliveryv1.PickerChoice{cancelChoice}},
	}}
	target := &deliveryv1.Target{Platform: "discord", ChatId: channel, ThreadId: thread}
	send(&deliveryv1.SendRequested{Op: deliveryv1.SendOp_SEND_OP_SEND, IdempotencyKey: "picker", Target: target,
		Text: "⚙ **Model Configuration**\n\nSelect a provider:", Picker: providers})
	ms := f.Messages(thread)
	wantMenus := []discordfake.Menu{{CustomID: "pm:0", Placeholder: "Choose a provider...", Options: []discordfake.MenuOption{
		{Label: "OpenAI-compatible (30 models)", Value: "pd:v:model", Description: "current"}}}}
	wantButtons := []discordfake.Button{{Label: "Cancel", Style: 4, CustomID: "pd:x:model"}}
	if len(ms) != 1 || fmt.Sprint(ms[0].Menus) != fmt.Sprint(wantMenus) || !slices.Equal(ms[0].Buttons, wantButtons) {
		t.Fatalf("thread has %+v, want the picker with %+v and %+v", ms, wantMenus, wantButtons)
	}
	card := ms[0]
	choose := func(menu, value string) {
		t.Helper()
		if _, err := f.Select(ctx, discordfake.Select{ChannelID: thread, GuildID: guild, MessageID: card.ID, UserID: user, UserName: "alice",
			CustomID: menu, Value: value}); err != nil {
			t.Fatal(err)
		}
	}
	choose("pm:0", "pd:v:model")
	if ev := next(20 * time.Second); ev.GetText() != "/model" || ev.GetButtonPress().GetData() != "v" || ev.GetButtonPress().GetMessageId() != card.ID || ev.GetSource().GetUserId() != user {
		t.Fatalf("published %v, want /model with data v from %s choosing the provider", ev, user)
	}

	// The models: two menus of 25 and 5, Back and Cancel in one row.
	models := &deliveryv1.Picker{}
	for i := 0; i < 30; i += 25 {
		row := &deliveryv1.PickerRow{Placeholder: fmt.Sprintf("Choose a model from OpenAI-compatible (%d/2)...", i/25+1)}
		for j := i; j < min(i+25, 30); j++ {
			m := fmt.Sprintf("org/model-%d", j)
			row.Choices = append(row.Choices, &deliveryv1.PickerChoice{Label: m[4:], Command: "/model " + m})
		}
		models.Rows = append(models.Rows, row)
	}
	models.Rows = append(models.Rows, &deliveryv1.PickerRow{Choices: []*deliveryv1.PickerChoice{{Label: "◀ Back", Command: "/model", Data: "b"}, cancelChoice}})
	send(&deliveryv1.SendRequested{Op: deliveryv1.SendOp_SEND_OP_EDIT, IdempotencyKey: "models", Target: target, MessageId: card.ID,
		Text: "⚙ **Model Configuration**\n\nProvider: **OpenAI-compatible**\nSelect a model:", Picker: models})
	ms = f.Messages(thread)
	if got := ms[0].Menus; len(got) != 2 || len(got[0].Options) != 25 || len(got[1].Options) != 5 || got[1].CustomID != "pm:1" ||
		got[1].Placeholder != "Choose a model from OpenAI-compatible (2/2)..." || got[1].Options[4] != (discordfake.MenuOption{Label: "model-29", Value: "pc:/model org/model-29"}) {
		t.Fatalf("the models step shows menus %+v", got)
	}
	if want := []discordfake.Button{{Label: "◀ Back", Style: 2, CustomID: "pd:b:model"}, wantButtons[0]}; !slices.Equal(ms[0].Buttons, want) {
		t.Fatalf("the models step shows buttons %+v, want %+v", ms[0].Buttons, want)
	}
	if rows := pickerComponents(models); len(rows) != 3 || len(rows[2].(discordgo.ActionsRow).Components) != 2 {
		t.Fatalf("action rows %+v, want two menus and a row of two buttons", rows)
	}
	choose("pm:1", "pc:/model org/model-29")
	if ev := next(20 * time.Second); ev.GetText() != "/model org/model-29" || ev.GetButtonPress().GetData() != "" || ev.GetButtonPress().GetMessageId() != card.ID {
		t.Fatalf("published %v, want the model's typed command", ev)
	}
	// A menu the message does not show cannot be chosen from.
	if _, err := f.Select(ctx, discordfake.Select{ChannelID: thread, GuildID: guild, MessageID: card.ID, UserID: user, CustomID: "pm:0", Value: "pd:v:model"}); err == nil {
		t.Fatal("chose the provider from a step that no longer shows it")
	}

	send(&deliveryv1.SendRequested{Op: deliveryv1.SendOp_SEND_OP_EDIT, IdempotencyKey: "answer", Target: target, MessageId: card.ID,
		Text: "⚙ **Model Switched**\n\nModel switched to `org/model-29`"})
	if ms := f.Messages(thread); len(ms[0].Menus) != 0 || len(ms[0].Buttons) != 0 {
		t.Fatalf("after the answer the picker is %+v, want it without menus or buttons", ms[0])
	}
}

// A menu is cut to what Discord takes: 25 options, labels and
// descriptions of 100 characters, a placeholder of 150; a choice that
// cannot be carried, a duplicate and one that does nothing are left
// out, and a menu left empty is no row. Menus are never joined with
// other rows.
func TestPickerMenuLimits(t *testing.T) {
	long := strings.Repeat("é", 120)
	menu := &deliveryv1.PickerRow{Placeholder: strings.Repeat("p", 160)}
	menu.Choices = append(menu.Choices,
		&deliveryv1.PickerChoice{Label: long, Description: long, Command: "/model a"},
		&deliveryv1.PickerChoice{Label: "again", Command: "/model a"},
		&deliveryv1.PickerChoice{Label: "counter"},
		&deliveryv1.PickerChoice{Label: "too long", Command: "/model " + strings.Repeat("x", 70)})
	for i := 0; i < 30; i++ {
		menu.Choices = append(menu.Choices, &deliveryv1.PickerChoice{Label: fmt.Sprint(i), Command: fmt.Sprintf("/model m%d", i)})
	}
	empty := &deliveryv1.PickerRow{Placeholder: "nothing", Choices: []*deliveryv1.PickerChoice{{Label: "counter"}}}
	button := func(l string) *deliveryv1.PickerRow {
		return &deliveryv1.PickerRow{Choices: []*deliveryv1.PickerChoice{{Label: l, Command: "/model " + l}}}
	}
	rows := pickerComponents(&deliveryv1.Picker{Rows: []*deliveryv1.PickerRow{menu, empty, button("a"), button("b"), menu, button("c"), button("d")}})
	if len(rows) != 5 {
		t.Fatalf("%d rows, want 5: %+v", len(rows), rows)
	}
	sm, ok := rows[0].(discordgo.ActionsRow).Components[0].(discordgo.SelectMenu)
	if !ok || len(rows[0].(discordgo.ActionsRow).Components) != 1 {
		t.Fatalf("first row %+v, want a menu alone", rows[0])
	}
	first := sm.Options[0]
	if len(sm.Options) != 25 || len([]rune(sm.Placeholder)) != 150 || len([]rune(first.Label)) != 100 || len([]rune(first.Description)) != 100 ||
		!strings.HasSuffix(first.Label, "…") || sm.Options[1].Label != "0" || sm.CustomID != "pm:0" || sm.MenuType != discordgo.StringSelectMenu {
		t.Fatalf("menu %+v, want 25 options cut to Discord's limits", sm)
	}
	if got := len(rows[1].(discordgo.ActionsRow).Components); got != 2 {
		t.Fatalf("second row has %d buttons, want a and b joined", got)
	}
	if _, ok := rows[2].(discordgo.ActionsRow).Components[0].(discordgo.SelectMenu); !ok {
		t.Fatalf("third row %+v, want the second menu", rows[2])
	}
}

// flakyConn is a runner's Conn whose first publish fails after the bus
// stored the press (a publish acknowledgement lost): the retry is told
// it is a duplicate. It holds presses on b, as the runner's Conn does.
type flakyConn struct {
	platform.Conn
	b        *bus.Bus
	attempts atomic.Int32
}

func (c *flakyConn) Deliver(_ context.Context, _ *eventsv1.MessageReceived) (platform.Accepted, error) {
	if c.attempts.Add(1) == 1 {
		return platform.Accepted{}, errors.New("publish: nats: timeout")
	}
	return platform.Accepted{Duplicate: true}, nil
}

func (c *flakyConn) HoldPress(id string) (*platform.PressHold, error) {
	return platform.HoldPress(c.b, "discord", id)
}

// A press whose first publish failed after the bus stored it, which the
// retry is told is a duplicate, is still this replica's to hold: the
// router decides it (the stored press) and its answer is shown to the
// presser. Taken for someone else's, the hold ended with the publish and
// the answer found no one.
func TestPressStoredByAFailedPublishIsHeld(t *testing.T) {
	t.Parallel()
	f := newFake(t)
	b := bustest.New(t, bustest.EmbeddedURL(t))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cfg := DefaultConfig()
	cfg.BotToken, cfg.APIBaseURL, cfg.PressHold = f.Token, f.URL(), 10*time.Second
	p, err := NewPlatform(ctx, cfg, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	d, err := f.Press(ctx, discordfake.Press{ChannelID: dmChan, MessageID: "700000000000000042", UserID: user, UserName: "alice", CustomID: "ea:deny"})
	if err != nil {
		t.Fatal(err)
	}
	raw, err := json.Marshal(d)
	if err != nil {
		t.Fatal(err)
	}
	in, err := parseInteraction(raw)
	if err != nil {
		t.Fatal(err)
	}
	conn := &flakyConn{b: b}
	p.handlePress(ctx, conn, in)
	if n := conn.attempts.Load(); n != 2 {
		t.Fatalf("%d publishes, want a failed one and its retry", n)
	}
	id := d["id"].(string)
	if st := f.InteractionState(id); len(st.Callbacks) != 1 {
		t.Fatalf("interaction %+v, want acknowledged", st)
	}
	const resolved = "This approval has already been resolved~"
	ia := &eventsv1.Interaction{Id: id, Component: true}
	platformtest.WaitFor(t, "the router's answer to be taken", func() bool {
		held, err := platform.AnswerPress(ctx, b, &deliveryv1.SendRequested{Op: deliveryv1.SendOp_SEND_OP_SEND, Text: resolved,
			Target: &deliveryv1.Target{Platform: "discord", ChatId: dmChan, Interaction: ia}})
		if err != nil {
			t.Fatal(err)
		}
		return held
	})
	platformtest.WaitFor(t, "the answer shown to the presser", func() bool { return len(f.InteractionState(id).Followups) > 0 })
	if st := f.InteractionState(id); len(st.Followups) != 1 || st.Followups[0].Content != resolved || st.Followups[0].Flags != 64 {
		t.Fatalf("interaction %+v, want the answer as an ephemeral followup", st)
	}
}

// A press the router refuses is decided: its refusal comes through
// delivery (an ephemeral followup, which any replica may send) and the
// router publishes no other answer, so the replica holding the press is
// told when the refusal has been shown, and its hold ends then rather
// than when Config.PressHold runs out. An answer that comes after finds
// no one, and the presser sees the refusal alone.
func TestRefusedPressEndsItsHold(t *testing.T) {
	t.Parallel()
	f := newFake(t)
	b, next := run(t, f, Config{PressHold: 10 * time.Second})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	d, err := f.Press(ctx, discordfake.Press{ChannelID: channel, GuildID: guild, MessageID: "700000000000000042", UserID: user, UserName: "mallory", CustomID: "ea:once:call_1"})
	if err != nil {
		t.Fatal(err)
	}
	ev := next(20 * time.Second)
	id := d["id"].(string)
	platformtest.WaitFor(t, "the press to be acknowledged", func() bool { acks, _ := f.Acks(id); return len(acks) == 1 })
	const refusal = "You're not authorized to approve commands~"
	src := ev.GetSource()
	target := &deliveryv1.Target{Platform: "discord", Account: src.GetAccount(), ChatId: src.GetChatId(), ReplyToMessageId: ev.GetMessageId(), Interaction: ev.GetInteraction()}
	r := &deliveryv1.SendReceipt{}
	if err := b.Request(ctx, b.Topology().SendSubject("discord"), &deliveryv1.SendRequested{Op: deliveryv1.SendOp_SEND_OP_SEND,
		IdempotencyKey: "press-refusal", Target: target, Text: refusal, Final: true}, r); err != nil || !r.GetOk() {
		t.Fatalf("refusal: %v (%v)", r, err)
	}

	// Probe the hold with a late answer until no one takes it: a hold
	// still waiting would show it.
	late := &deliveryv1.SendRequested{Op: deliveryv1.SendOp_SEND_OP_SEND, Text: "late answer",
		Target: &deliveryv1.Target{Platform: "discord", ChatId: src.GetChatId(), Interaction: &eventsv1.Interaction{Id: id, Component: true}}}
	deadline := time.Now().Add(2 * time.Second)
	for {
		held, err := platform.AnswerPress(ctx, b, late)
		if err != nil {
			t.Fatal(err)
		}
		if !held {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the press is still held 2 s after its refusal was shown")
		}
		time.Sleep(20 * time.Millisecond)
	}
	time.Sleep(200 * time.Millisecond) // a late answer taken would be shown by now
	if st := f.InteractionState(id); len(st.Followups) != 1 || st.Followups[0].Content != refusal || st.Followups[0].Flags != 64 {
		t.Fatalf("interaction %+v, want the refusal alone, as an ephemeral followup", st)
	}
}

// An interaction the gateway cannot read (a field of the wrong type,
// its data missing, a type it does not know) is not published, but it
// is acknowledged with a message only its user sees, when its id and
// token can be read: left unanswered, Discord shows "This interaction
// failed" after 3 s and the user gets no word. One whose id cannot be
// read cannot be answered.
func TestUnreadInteractionIsAnswered(t *testing.T) {
	t.Parallel()
	f := newFake(t)
	_, next := run(t, f, Config{})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, c := range []struct {
		name string
		d    func(id, token string) map[string]any
	}{
		{"custom id not a string", func(id, token string) map[string]any {
			return map[string]any{"id": id, "type": 3, "token": token, "channel_id": dmChan, "user": map[string]any{"id": user},
				"data": map[string]any{"custom_id": 7, "component_type": 2}, "message": map[string]any{"id": "700000000000000042"}}
		}},
		{"no data", func(id, token string) map[string]any {
			return map[string]any{"id": id, "type": 3, "token": token, "channel_id": dmChan, "user": map[string]any{"id": user}}
		}},
		{"user not an object", func(id, token string) map[string]any {
			return map[string]any{"id": id, "type": 2, "token": token, "channel_id": dmChan, "user": "alice", "data": map[string]any{"name": "approve"}}
		}},
		{"unknown type", func(id, token string) map[string]any {
			return map[string]any{"id": id, "type": 99, "token": token, "channel_id": dmChan, "user": map[string]any{"id": user}}
		}},
	} {
		id, token := f.NewInteraction()
		if err := f.Dispatch(ctx, "INTERACTION_CREATE", c.d(id, token)); err != nil {
			t.Fatal(err)
		}
		platformtest.WaitFor(t, c.name+" answered", func() bool { return len(f.InteractionState(id).Callbacks) > 0 })
		if st := f.InteractionState(id); len(st.Callbacks) != 1 || st.Callbacks[0] != 4 || st.Flags != 64 || st.Content != unreadInteraction {
			t.Fatalf("%s: interaction %+v, want an ephemeral message saying it was not read", c.name, st)
		}
	}
	id, token := f.NewInteraction()
	if err := f.Dispatch(ctx, "INTERACTION_CREATE", map[string]any{"id": 5, "type": 3, "token": token, "data": map[string]any{}}); err != nil {
		t.Fatal(err)
	}
	// A press after them is read as ever; nothing else was published.
	d, err := f.Press(ctx, discordfake.Press{ChannelID: dmChan, MessageID: "700000000000000042", UserID: user, UserName: "alice", CustomID: "ea:deny"})
	if err != nil {
		t.Fatal(err)
	}
	if ev := next(20 * time.Second); ev.GetEventId() != "press:"+d["id"].(string) {
		t.Fatalf("published %v, want the press alone", ev)
	}
	if st := f.InteractionState(id); len(st.Callbacks) != 0 {
		t.Fatalf("an interaction without a readable id answered: %+v", st)
	}
}
