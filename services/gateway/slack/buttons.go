package slack

import (
	"strings"
	"unicode"
	"unicode/utf8"

	slackapi "github.com/slack-go/slack"
	"google.golang.org/protobuf/types/known/timestamppb"

	deliveryv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/delivery/v1"
	eventsv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/events/v1"
)

// An approval prompt is posted with Block Kit, as Hermes does: a section
// with the prompt's text (mrkdwn) and an actions block of four buttons,
// "Allow Once", "Allow Session", "Always Allow", "Deny", with Hermes's
// action ids. A press arrives as a block_actions interactive envelope;
// the gateway acks it and publishes the command the button stands for,
// typed by whoever pressed it in the prompt's channel and thread. The
// router's answer edits the card with chat.update and blocks=[], which
// takes the buttons off.
//
// A button's value is "ea:<choice>" or "ea:<choice>:<tool call id>" (the
// call's id only where it is printable ASCII of at most maxCallID bytes).

const (
	valuePrefix = "ea:"
	maxCallID   = 255
	// maxSectionText is Slack's limit of a section's text (a longer one:
	// invalid_blocks).
	maxSectionText = 3000
	// sectionCut is where a longer prompt's section text is cut, as
	// Hermes's send_exec_approval cuts its command at 2,900 characters
	// and adds "...", keeping the buttons.
	sectionCut = 2900
)

// approvalButton is how one choice is shown.
type approvalButton struct {
	actionID, label string
	style           slackapi.Style
}

// approvalButtons are Hermes's Slack buttons of the choices.
var approvalButtons = map[string]approvalButton{
	"once":    {"hermes_approve_once", "Allow Once", slackapi.StylePrimary},
	"session": {"hermes_approve_session", "Allow Session", slackapi.StyleDefault},
	"always":  {"hermes_approve_always", "Always Allow", slackapi.StyleDefault},
	"deny":    {"hermes_deny", "Deny", slackapi.StyleDanger},
}

// choiceCommands are the typed commands the choices stand for (what the
// Telegram gateway publishes too; the router reads "/" on Slack as well).
var choiceCommands = map[string]string{
	"once": "/approve", "session": "/approve session", "always": "/approve always", "deny": "/deny",
}

// approvalBlocks are the blocks of an approval prompt whose rendered
// text is mrkdwn (nil when no choice is asked for or a choice is none
// the gateway knows). A text too long for a section is cut there
// (sectionText); the message's text, the notification's fallback, stays
// whole.
func approvalBlocks(a *deliveryv1.Approval, mrkdwn string) []slackapi.Block {
	if len(a.GetChoices()) == 0 || mrkdwn == "" {
		return nil
	}
	var buttons []slackapi.BlockElement
	for _, c := range a.GetChoices() {
		b, ok := approvalButtons[c]
		if !ok {
			return nil
		}
		value := valuePrefix + c
		if call := a.GetToolCallId(); validCall(call) {
			value += ":" + call
		}
		el := slackapi.NewButtonBlockElement(b.actionID, value, slackapi.NewTextBlockObject(slackapi.PlainTextType, b.label, false, false))
		if b.style != slackapi.StyleDefault {
			el = el.WithStyle(b.style)
		}
		buttons = append(buttons, el)
	}
	return []slackapi.Block{
		slackapi.NewSectionBlock(slackapi.NewTextBlockObject(slackapi.MarkdownType, sectionText(mrkdwn), false, false), nil, nil),
		slackapi.NewActionBlock("approval", buttons...),
	}
}

// sectionText is mrkdwn as a section shows it: whole when it fits
// Slack's 3,000 characters, else its first 2,900 and "...", as Hermes
// cuts its prompt, so the buttons stay and the user can still answer
// (posted without them before, a prompt this long could only be
// answered by typing). The cut does not split an escape (&amp;) or a
// <link|label>, mention or date (they start at "&" and "<", which the
// escaped text has nowhere else), and a code block it opens is closed.
func sectionText(mrkdwn string) string {
	if utf8.RuneCountInString(mrkdwn) <= maxSectionText {
		return mrkdwn
	}
	cut := string([]rune(mrkdwn)[:sectionCut])
	if i := strings.LastIndexByte(cut, '&'); i >= 0 && !strings.Contains(cut[i:], ";") {
		cut = cut[:i]
	}
	if i := strings.LastIndexByte(cut, '<'); i >= 0 && !strings.Contains(cut[i:], ">") {
		cut = cut[:i]
	}
	cut += "..."
	if strings.Count(cut, "```")%2 == 1 {
		cut += "\n```"
	}
	return cut
}

// validCall reports whether a tool call id can ride in a button's value.
func validCall(id string) bool {
	return id != "" && len(id) <= maxCallID && strings.IndexFunc(id, func(r rune) bool {
		return r > unicode.MaxASCII || !unicode.IsPrint(r) || r == ' '
	}) < 0
}

// parseValue reads an approval button's value: the typed command it
// stands for and the tool call it names ("" for none). ok is false for
// any other value.
func parseValue(value string) (command, call string, ok bool) {
	rest, found := strings.CutPrefix(value, valuePrefix)
	if !found {
		return "", "", false
	}
	choice, call, _ := strings.Cut(rest, ":")
	command, ok = choiceCommands[choice]
	if !ok || (call != "" && !validCall(call)) {
		return "", "", false
	}
	return command, call, true
}

// pressed turns a block_actions payload into the press of an approval
// button, or says why it is skipped. The event id is the prompt's
// channel and ts with the action's action_ts, the same in every
// delivery of the envelope; the press names the prompt (its ts) and the
// tool call.
func pressed(cb slackapi.InteractionCallback, id identity) (*eventsv1.MessageReceived, skip) {
	if cb.Type != slackapi.InteractionTypeBlockActions {
		return nil, skip("interaction type " + string(cb.Type))
	}
	var action *slackapi.BlockAction
	for _, a := range cb.ActionCallback.BlockActions {
		if a != nil && strings.HasPrefix(a.Value, valuePrefix) {
			action = a
			break
		}
	}
	if action == nil {
		return nil, "no approval button"
	}
	command, call, ok := parseValue(action.Value)
	if !ok {
		return nil, "unknown button"
	}
	channel, card := cb.Container.ChannelID, cb.Container.MessageTs
	if channel == "" {
		channel = cb.Channel.ID
	}
	if card == "" {
		card = cb.Message.Timestamp
	}
	thread := cb.Container.ThreadTs
	if thread == "" {
		thread = cb.Message.ThreadTimestamp
	}
	actionTS := action.ActionTs
	if actionTS == "" {
		actionTS = cb.ActionTs
	}
	if channel == "" || card == "" || cb.User.ID == "" || (actionTS == "" && cb.TriggerID == "") {
		return nil, "button press without its message, user or time"
	}
	eventID := "press:" + channel + ":" + card + ":" + actionTS
	if actionTS == "" {
		eventID = "press:" + cb.TriggerID
	}
	// A group DM (mpim) is a DM, as normalize keys its messages: the
	// payload names it "mpdm-…" (its id starts with G or C, as a
	// channel's does), and keyed group the press would reach a session
	// with no call waiting.
	chatType := "group"
	if strings.HasPrefix(channel, "D") || strings.HasPrefix(cb.Channel.Name, "mpdm-") {
		chatType = "dm"
	}
	if thread == card {
		thread = ""
	}
	name := cb.User.Name
	if cb.User.Profile.DisplayName != "" {
		name = cb.User.Profile.DisplayName
	}
	team := cb.Team.ID
	if team == "" {
		team = cb.User.TeamID
	}
	return &eventsv1.MessageReceived{
		EventId:   eventID,
		MessageId: eventID,
		Source: &eventsv1.SessionSource{
			Platform: "slack", Account: id.Account, ChatId: channel, ChatType: chatType, ThreadId: thread,
			UserId: cb.User.ID, UserName: name, ScopeId: team, ChatName: cb.Channel.Name,
		},
		Text:        command,
		Mentioned:   true,
		SentAt:      timestamppb.Now(),
		ButtonPress: &eventsv1.ButtonPress{MessageId: card, ToolCallId: call},
		// Its message id names no Slack message to react to.
		NoReaction: true,
	}, ""
}
