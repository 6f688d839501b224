package slack

import (
	"context"
	"encoding/json"
	"log/slog"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	slackapi "github.com/slack-go/slack"

	deliveryv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/delivery/v1"
	"github.com/switchboard-chat/switchboard/pkg/sessionkey"
	"github.com/switchboard-chat/switchboard/services/gateway/slack/slackfake"
)

// An approval prompt is posted with Hermes's four buttons under its
// text; a press is published once as the presser's command in the
// prompt's thread (also when Slack sends the envelope again), and the
// answer's chat.update replaces the card without its buttons.
func TestApprovalButtons(t *testing.T) {
	t.Parallel()
	fake := slackfake.New(t)
	s, _, next, empty := gateway(t, fake, Config{AppToken: fake.AppToken})
	ctx := context.Background()

	target := &deliveryv1.Target{Platform: "slack", Account: fake.BotUserID, ChatId: "C0CHANNEL", ThreadId: "1690000000.000001"}
	prompt := "⚠️ **Dangerous command requires approval:**\n```\nrm -rf /tmp/x\n```\nReason: dangerous command"
	ts, err := s.p.Send(ctx, &deliveryv1.SendRequested{Op: deliveryv1.SendOp_SEND_OP_SEND, Target: target, Text: prompt,
		Format:   deliveryv1.TextFormat_TEXT_FORMAT_MARKDOWN,
		Approval: &deliveryv1.Approval{Choices: []string{"once", "session", "always", "deny"}, ToolCallId: "call_1"}})
	if err != nil {
		t.Fatal(err)
	}
	card := fake.Messages("C0CHANNEL")[0]
	want := []slackfake.Button{
		{Label: "Allow Once", ActionID: "hermes_approve_once", Value: "ea:once:call_1", Style: "primary"},
		{Label: "Allow Session", ActionID: "hermes_approve_session", Value: "ea:session:call_1"},
		{Label: "Always Allow", ActionID: "hermes_approve_always", Value: "ea:always:call_1"},
		{Label: "Deny", ActionID: "hermes_deny", Value: "ea:deny:call_1", Style: "danger"},
	}
	if got := card.Buttons(); card.TS != ts || !equalButtons(got, want) {
		t.Fatalf("prompt %s has buttons %v, want %v", card.TS, got, want)
	}
	var blocks []struct {
		Type string `json:"type"`
		Text struct {
			Type, Text string
		} `json:"text"`
	}
	if err := json.Unmarshal(card.Blocks, &blocks); err != nil || len(blocks) != 2 || blocks[0].Type != "section" ||
		blocks[0].Text.Type != "mrkdwn" || !strings.Contains(blocks[0].Text.Text, "*Dangerous command requires approval:*") ||
		!strings.Contains(blocks[0].Text.Text, "rm -rf /tmp/x") || card.Text != blocks[0].Text.Text {
		t.Fatalf("prompt blocks %s (text %q), want a mrkdwn section with the prompt, then the buttons", card.Blocks, card.Text)
	}

	payload, err := fake.Press(ctx, "C0CHANNEL", ts, "U0USER01", "alice", "ea:session:call_1")
	if err != nil {
		t.Fatal(err)
	}
	if err := fake.PushInteractive(ctx, payload, 1); err != nil { // Slack's redelivery
		t.Fatal(err)
	}
	ev := next()
	src := ev.GetSource()
	if ev.GetText() != "/approve session" || src.GetUserId() != "U0USER01" || src.GetUserName() != "alice" ||
		src.GetChatId() != "C0CHANNEL" || src.GetThreadId() != target.GetThreadId() || src.GetChatType() != "group" ||
		ev.GetButtonPress().GetMessageId() != ts || ev.GetButtonPress().GetToolCallId() != "call_1" || !ev.GetNoReaction() {
		t.Fatalf("published %v, want /approve session from U0USER01 in the prompt's thread, pressing it for call_1", ev)
	}
	time.Sleep(200 * time.Millisecond)
	if !empty() {
		t.Fatalf("the redelivered press was published again: %v", next())
	}

	err = s.p.Edit(ctx, &deliveryv1.SendRequested{Op: deliveryv1.SendOp_SEND_OP_EDIT, Target: target, MessageId: ts,
		Text: "✅ Approved for session by alice", Format: deliveryv1.TextFormat_TEXT_FORMAT_PLAIN})
	if err != nil {
		t.Fatal(err)
	}
	after := fake.Messages("C0CHANNEL")[0]
	if after.Text != "✅ Approved for session by alice" || after.Blocks != nil || after.Edits != 1 {
		t.Fatalf("card shows %q with blocks %s, want the answer without buttons", after.Text, after.Blocks)
	}
	if _, err := fake.Press(ctx, "C0CHANNEL", ts, "U0USER01", "alice", "ea:deny:call_1"); err == nil {
		t.Fatal("a button of the answered card could still be pressed")
	}
}

// Over the Events API (HTTP) the gateway serves no interactivity
// endpoint: the prompt is text only.
func TestApprovalButtonsOnlyInSocketMode(t *testing.T) {
	t.Parallel()
	fake := slackfake.New(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	p, err := NewPlatform(ctx, Config{BotToken: fake.BotToken, SigningSecret: "s3cret", APIBaseURL: fake.APIURL()}, slog.New(slog.DiscardHandler), nil)
	if err != nil {
		t.Fatal(err)
	}
	_, err = p.Send(ctx, &deliveryv1.SendRequested{Op: deliveryv1.SendOp_SEND_OP_SEND, Text: "approve?",
		Target:   &deliveryv1.Target{Platform: "slack", ChatId: "D0DM"},
		Approval: &deliveryv1.Approval{Choices: []string{"once", "session", "always", "deny"}, ToolCallId: "call_1"}})
	if err != nil {
		t.Fatal(err)
	}
	if m := fake.Messages("D0DM"); len(m) != 1 || m[0].Text != "approve?" || m[0].Blocks != nil {
		t.Fatalf("posted %v, want the text without blocks", m)
	}
}

// A prompt without choices or with one the gateway does not know is
// text only; one too long for a section keeps its buttons; a call id
// that cannot ride in a value is left out.
func TestApprovalBlocks(t *testing.T) {
	all := []string{"once", "session", "always", "deny"}
	for _, tc := range []struct {
		name    string
		a       *deliveryv1.Approval
		text    string
		buttons int
		value   string
	}{
		{"no prompt", nil, "hi", 0, ""},
		{"unknown choice", &deliveryv1.Approval{Choices: []string{"once", "maybe"}}, "hi", 0, ""},
		{"too long for a section", &deliveryv1.Approval{Choices: all}, strings.Repeat("x", maxSectionText+1), 4, "ea:once"},
		{"without a call", &deliveryv1.Approval{Choices: all}, "hi", 4, "ea:once"},
		{"a call with a space", &deliveryv1.Approval{Choices: all, ToolCallId: "a b"}, "hi", 4, "ea:once"},
		{"a long call", &deliveryv1.Approval{Choices: all, ToolCallId: strings.Repeat("x", maxCallID+1)}, "hi", 4, "ea:once"},
		{"two choices", &deliveryv1.Approval{Choices: []string{"once", "deny"}, ToolCallId: "toolu_01"}, "hi", 2, "ea:once:toolu_01"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			blocks := approvalBlocks(tc.a, tc.text)
			if tc.buttons == 0 {
				if blocks != nil {
					t.Fatalf("blocks %v, want none", blocks)
				}
				return
			}
			actions, ok := blocks[1].(*slackapi.ActionBlock)
			if len(blocks) != 2 || !ok || len(actions.Elements.ElementSet) != tc.buttons {
				t.Fatalf("blocks %v, want a section and %d buttons", blocks, tc.buttons)
			}
			if v := actions.Elements.ElementSet[0].(*slackapi.ButtonBlockElement).Value; v != tc.value {
				t.Fatalf("first value %q, want %q", v, tc.value)
			}
		})
	}
}

// An approval prompt longer than a section's 3,000 characters (a long
// reason) is posted with its buttons, its section cut at 2,900 with
// "...", as Hermes's send_exec_approval; posted without them before,
// it could only be answered by typing. The cut splits no escape, link
// or code block; the message's text, the fallback, stays whole.
func TestLongApprovalPromptKeepsButtons(t *testing.T) {
	t.Parallel()
	fake := slackfake.New(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	p := socketPlatform(t, ctx, fake)
	head := "⚠️ **Dangerous command requires approval:**\n```\nrm -rf /tmp/x\n```\nReason: "
	for _, tc := range []struct{ name, reason string }{
		{"plain", strings.Repeat("r", 5000)},
		{"an escape at the cut", strings.Repeat("a", 2820) + strings.Repeat("&", 1000)},
		{"a link at the cut", strings.Repeat("b", 2730) + "[the page](https://example.com/" + strings.Repeat("p", 200) + ")" + strings.Repeat("b", 1000)},
		{"inside a code block", strings.Repeat("c", 2000) + "\n```\n" + strings.Repeat("d", 3000) + "\n```"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ch := "C0LONG" + strings.ToUpper(strings.ReplaceAll(tc.name, " ", ""))
			prompt := head + tc.reason
			_, err := p.Send(ctx, &deliveryv1.SendRequested{Op: deliveryv1.SendOp_SEND_OP_SEND, Text: prompt,
				Format: deliveryv1.TextFormat_TEXT_FORMAT_MARKDOWN, Target: &deliveryv1.Target{Platform: "slack", ChatId: ch, ThreadId: "1690000000.000001"},
				Approval: &deliveryv1.Approval{Choices: []string{"once", "session", "always", "deny"}, ToolCallId: "call_1"}})
			if err != nil {
				t.Fatal(err)
			}
			card := fake.Messages(ch)[0]
			if got := card.Buttons(); len(got) != 4 {
				t.Fatalf("prompt posted with buttons %v, want four", got)
			}
			var blocks []struct {
				Type string                `json:"type"`
				Text struct{ Text string } `json:"text"`
			}
			if err := json.Unmarshal(card.Blocks, &blocks); err != nil || len(blocks) != 2 {
				t.Fatalf("blocks %s: %v", card.Blocks, err)
			}
			section := blocks[0].Text.Text
			if n := utf8.RuneCountInString(section); n > slackfake.MaxSectionText || n < 2800 ||
				!strings.HasPrefix(section, "⚠️ *Dangerous command requires approval:*") || !strings.Contains(section, "...") {
				t.Fatalf("section of %d characters %q…, want the prompt's start cut with ...", n, section[:80])
			}
			if strings.Count(section, "```")%2 != 0 {
				t.Fatalf("section leaves a code block open: …%q", section[len(section)-40:])
			}
			if i := strings.LastIndexByte(section, '<'); i >= 0 && !strings.Contains(section[i:], ">") {
				t.Fatalf("section cuts a link: …%q", section[i:])
			}
			if i := strings.LastIndexByte(section, '&'); i >= 0 && !strings.Contains(section[i:], ";") {
				t.Fatalf("section cuts an escape: …%q", section[i:])
			}
			if utf8.RuneCountInString(card.Text) <= slackfake.MaxSectionText {
				t.Fatalf("the message's text has %d characters, want the whole prompt", utf8.RuneCountInString(card.Text))
			}
		})
	}
}

// pressed skips what is no approval press and names the prompt itself
// (not a thread) when the prompt is top level; without action_ts the
// trigger id makes the event id.
func TestPressed(t *testing.T) {
	id := identity{Account: "U0BOT"}
	base := func() slackapi.InteractionCallback {
		cb := slackapi.InteractionCallback{Type: slackapi.InteractionTypeBlockActions, TriggerID: "9.9.trigger",
			User: slackapi.User{ID: "U1", Name: "bob"}, Container: slackapi.Container{ChannelID: "D0DM", MessageTs: "5.5", ThreadTs: "5.5"}}
		cb.ActionCallback.BlockActions = []*slackapi.BlockAction{{ActionID: "hermes_deny", Value: "ea:deny", ActionTs: "6.6"}}
		return cb
	}
	cb := base()
	ev, why := pressed(cb, id)
	if ev == nil || ev.GetText() != "/deny" || ev.GetEventId() != "press:D0DM:5.5:6.6" || ev.GetSource().GetThreadId() != "" ||
		ev.GetSource().GetChatType() != "dm" || ev.GetButtonPress().GetMessageId() != "5.5" || ev.GetButtonPress().GetToolCallId() != "" {
		t.Fatalf("pressed = %v (%s)", ev, why)
	}
	cb.ActionCallback.BlockActions[0].ActionTs = ""
	if ev, _ := pressed(cb, id); ev.GetEventId() != "press:9.9.trigger" {
		t.Fatalf("event id %q without action_ts, want the trigger's", ev.GetEventId())
	}
	for name, edit := range map[string]func(*slackapi.InteractionCallback){
		"a view submission": func(cb *slackapi.InteractionCallback) { cb.Type = slackapi.InteractionTypeViewSubmission },
		"another button":    func(cb *slackapi.InteractionCallback) { cb.ActionCallback.BlockActions[0].Value = "menu" },
		"an unknown choice": func(cb *slackapi.InteractionCallback) { cb.ActionCallback.BlockActions[0].Value = "ea:maybe" },
		"no user":           func(cb *slackapi.InteractionCallback) { cb.User.ID = "" },
		"no message":        func(cb *slackapi.InteractionCallback) { cb.Container.MessageTs = "" },
	} {
		cb := base()
		edit(&cb)
		if ev, why := pressed(cb, id); ev != nil || why == "" {
			t.Errorf("%s: published %v", name, ev)
		}
	}
}

// FuzzParseValue: any button value is read without panicking; what is
// read as an approval is a known command, and the value is exactly what
// the gateway writes for it.
func FuzzParseValue(f *testing.F) {
	for _, s := range []string{"ea:once", "ea:session:call_1", "ea:always:toolu_01A", "ea:deny:", "ea:maybe", "ea:once:a b", "ea:once:x:y", "menu", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, value string) {
		command, call, ok := parseValue(value)
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
			t.Fatalf("%q read as unknown command %q", value, command)
		}
		blocks := approvalBlocks(&deliveryv1.Approval{Choices: []string{choice}, ToolCallId: call}, "prompt")
		if blocks == nil {
			t.Fatalf("%q: no blocks for %q", value, choice)
		}
		got := blocks[1].(*slackapi.ActionBlock).Elements.ElementSet[0].(*slackapi.ButtonBlockElement).Value
		if got != value && got+":" != value {
			t.Fatalf("%q read as %q %q, written back as %q", value, command, call, got)
		}
	})
}

func equalButtons(a, b []slackfake.Button) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// TestPressInAGroupDM: a press in a group DM (mpim) is keyed as the
// group DM's messages are, dm (as in Hermes, whose buttons carry the
// session key), so it reaches the session whose call waits: Slack names
// a group DM "mpdm-…" in the payload, while its id starts with G or C
// as a channel's does. A 1:1 DM and a channel keep theirs.
func TestPressInAGroupDM(t *testing.T) {
	f := &slackfake.Fake{TeamID: "T0WORKSPACE", AppID: "A0APP", BotUserID: "U0BOT"}
	id := identity{Account: "U0BOT", BotUserID: "U0BOT", BotID: "B0BOT", RequireMention: true, DMThreads: true}
	for _, c := range []struct {
		name, channel, channelType, channelName string
	}{
		{"group dm", "G0MPIM", "mpim", "mpdm-alice--bob--hermes-1"},
		{"group dm with a C id", "C0MPIM", "mpim", "mpdm-alice--bob--hermes-1"},
		{"dm", "D0DM", "im", "directmessage"},
		{"channel", "C0CHANNEL", "channel", "general"},
	} {
		t.Run(c.name, func(t *testing.T) {
			msg, why, err := normalize(f.Callback("Ev1", slackfake.Event{Channel: c.channel, ChannelType: c.channelType,
				User: "U0USER01", Text: "<@U0BOT> clean up", TS: "1700000001.000100"}), id)
			if err != nil || msg == nil || why != "" {
				t.Fatalf("got %v %q %v; want the message", msg, why, err)
			}
			// The prompt, posted in the message's thread.
			cb := slackapi.InteractionCallback{Type: slackapi.InteractionTypeBlockActions, TriggerID: "9.9.trigger",
				User: slackapi.User{ID: "U0USER01", Name: "alice"}, Team: slackapi.Team{ID: "T0WORKSPACE"},
				Container: slackapi.Container{ChannelID: c.channel, MessageTs: "1700000002.000100", ThreadTs: "1700000001.000100"}}
			cb.Channel.ID, cb.Channel.Name = c.channel, c.channelName
			cb.ActionCallback.BlockActions = []*slackapi.BlockAction{{ActionID: "hermes_approve_once", Value: "ea:once:call_1", ActionTs: "1700000003.000100"}}
			press, why := pressed(cb, id)
			if press == nil {
				t.Fatalf("press skipped: %s", why)
			}
			want := sessionkey.Build(msg.GetSource(), sessionkey.DefaultOptions())
			if got := sessionkey.Build(press.GetSource(), sessionkey.DefaultOptions()); got != want {
				t.Fatalf("press keyed %s, want the message's session %s", got, want)
			}
		})
	}
}
