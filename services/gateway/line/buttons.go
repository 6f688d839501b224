package line

import (
	"strings"
	"unicode"

	deliveryv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/delivery/v1"
)

// An approval prompt goes out with a quick reply of four postback
// buttons under its text, "Allow Once", "Allow Session", "Always Allow",
// "Deny" (the labels of Hermes's Slack and Discord buttons; LINE's
// buttons template takes 160 characters of text, too few for the
// prompt). A tap posts a postback event whose data is
// "ea:<choice>[:<tool call id>]" and shows the command the button stands
// for as the user's message (displayText). The gateway publishes it as
// that command typed by whoever tapped, with the call in
// MessageReceived.button_press, so the router authorizes the tapper as
// for typing. LINE cannot edit, so the router answers with a message of
// its own; the quick reply is gone once the user taps or writes.

const (
	postbackPrefix = "ea:"
	// maxPostbackData is LINE's limit of a postback action's data.
	maxPostbackData = 300
)

// quickReply is a message's quick reply buttons.
type quickReply struct {
	Items []quickItem `json:"items"`
}

type quickItem struct {
	Type   string         `json:"type"` // action
	Action postbackAction `json:"action"`
}

type postbackAction struct {
	Type        string `json:"type"` // postback
	Label       string `json:"label"`
	Data        string `json:"data"`
	DisplayText string `json:"displayText"`
}

// approvalLabels are the buttons' labels (at most 20 characters each).
var approvalLabels = map[string]string{"once": "Allow Once", "session": "Allow Session", "always": "Always Allow", "deny": "Deny"}

// choiceCommands are the typed commands the choices stand for.
var choiceCommands = map[string]string{
	"once": "/approve", "session": "/approve session", "always": "/approve always", "deny": "/deny",
}

// approvalQuickReply is the quick reply of an approval prompt (nil when
// no choice is asked for or a choice is none the gateway knows).
func approvalQuickReply(a *deliveryv1.Approval) *quickReply {
	if len(a.GetChoices()) == 0 {
		return nil
	}
	q := &quickReply{}
	for _, c := range a.GetChoices() {
		label, ok := approvalLabels[c]
		if !ok {
			return nil
		}
		data := postbackPrefix + c
		if call := a.GetToolCallId(); validCall(call) && len(data)+1+len(call) <= maxPostbackData {
			data += ":" + call
		}
		q.Items = append(q.Items, quickItem{Type: "action", Action: postbackAction{Type: "postback", Label: label, Data: data, DisplayText: choiceCommands[c]}})
	}
	return q
}

// validCall reports whether a tool call id can ride in a postback's data.
func validCall(id string) bool {
	return id != "" && strings.IndexFunc(id, func(r rune) bool {
		return r > unicode.MaxASCII || !unicode.IsPrint(r) || r == ' '
	}) < 0
}

// parsePostback reads an approval button's postback data: the typed
// command it stands for and the tool call it names ("" for none). ok is
// false for any other data.
func parsePostback(data string) (command, call string, ok bool) {
	rest, found := strings.CutPrefix(data, postbackPrefix)
	if !found {
		return "", "", false
	}
	choice, call, _ := strings.Cut(rest, ":")
	command, ok = choiceCommands[choice]
	if !ok || (call != "" && (!validCall(call) || len(data) > maxPostbackData)) {
		return "", "", false
	}
	return command, call, true
}
