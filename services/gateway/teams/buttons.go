package teams

import (
	"context"
	"encoding/json"
	"strings"
	"unicode"

	"github.com/switchboard-chat/switchboard/pkg/platform"

	deliveryv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/delivery/v1"
	eventsv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/events/v1"
)

// An approval prompt goes out as Hermes's: the prompt's text, and under
// it an Adaptive Card (1.4) headed "⚠️ Command Approval Required" with
// four Action.Execute buttons of verb hermes_approve, "Allow Once"
// (positive), "Allow Session", "Always Allow", "Deny" (destructive),
// each with data {"hermes_action": approve_once | approve_session |
// approve_always | deny, "tool_call_id": …} (Hermes puts its session
// key and the command there). A press comes back as an invoke activity
// named adaptiveCard/action whose value.action carries the verb and the
// data (or, from a client that falls back to Action.Submit, as a message
// activity whose value is the data), read by its data whatever the verb,
// as Hermes reads it; the gateway publishes it as the
// command the button stands for, typed by whoever pressed, naming the
// card (replyToId) and the call, and answers the invoke at once. So the
// router authorizes the presser as for typing, and its answer replaces
// the card with text, which takes the buttons off. A press that comes as
// a message is not held (endpoint.go): a message takes no answer, and a
// reply would be the whole conversation's, so its presser is shown the
// card's edit alone, as in Hermes, whose adapter answers invokes only.

const (
	// approveVerb is the buttons' Action.Execute verb (Hermes's).
	approveVerb = "hermes_approve"
	// cardActionInvoke is the invoke activity of an Action.Execute.
	cardActionInvoke = "adaptiveCard/action"
	// maxCallID bounds a tool call id carried in a button's data.
	maxCallID = 255
)

// approvalButton is how one choice is shown and what its data says.
type approvalButton struct {
	action, title, style string
}

// approvalButtons are Hermes's Teams buttons of the choices.
var approvalButtons = map[string]approvalButton{
	"once":    {"approve_once", "Allow Once", "positive"},
	"session": {"approve_session", "Allow Session", ""},
	"always":  {"approve_always", "Always Allow", ""},
	"deny":    {"deny", "Deny", "destructive"},
}

// actionCommands are the typed commands the buttons' actions stand for.
var actionCommands = map[string]string{
	"approve_once": "/approve", "approve_session": "/approve session", "approve_always": "/approve always", "deny": "/deny",
}

// approvalCard is the attachment of an approval prompt's card (nil when
// no choice is asked for or a choice is none the gateway knows).
func approvalCard(a *deliveryv1.Approval) *outgoingAttachment {
	if len(a.GetChoices()) == 0 {
		return nil
	}
	var actions []map[string]any
	for _, c := range a.GetChoices() {
		b, ok := approvalButtons[c]
		if !ok {
			return nil
		}
		data := map[string]any{"hermes_action": b.action}
		if call := a.GetToolCallId(); validCall(call) {
			data["tool_call_id"] = call
		}
		act := map[string]any{"type": "Action.Execute", "title": b.title, "verb": approveVerb, "data": data}
		if b.style != "" {
			act["style"] = b.style
		}
		actions = append(actions, act)
	}
	card := map[string]any{
		"type": "AdaptiveCard", "$schema": "http://adaptivecards.io/schemas/adaptive-card.json", "version": "1.4",
		"body":    []map[string]any{{"type": "TextBlock", "text": "⚠️ Command Approval Required", "wrap": true, "weight": "Bolder"}},
		"actions": actions,
	}
	return &outgoingAttachment{ContentType: "application/vnd.microsoft.card.adaptive", Content: card}
}

// validCall reports whether a tool call id can ride in a button's data.
func validCall(id string) bool {
	return id != "" && len(id) <= maxCallID && strings.IndexFunc(id, func(r rune) bool {
		return r > unicode.MaxASCII || !unicode.IsPrint(r) || r == ' '
	}) < 0
}

// buttonData is an approval button's data as it comes back.
type buttonData struct {
	Action     string `json:"hermes_action"`
	ToolCallID string `json:"tool_call_id"`
}

// pressOf reads an activity as the press of an approval button: the
// command it stands for and the call it names. An Action.Execute is
// read by its data alone, whatever its verb, as Hermes's card action
// handler reads every adaptiveCard/action invoke. ok is false for any
// other activity: an invoke of another name, an action or a message
// without an approval's data. unknown is true (ok false) for an
// Action.Execute or an Action.Submit whose data names a choice, but none
// the gateway knows (or a call it cannot carry): Hermes answers the
// invoke after its sender's authorization, "⛔ Not authorized." to a
// stranger and "Unknown action." to anyone else, so the router, which
// authorizes, decides it (unknownChoice); the Submit is its press
// without an answer (normalize). Data naming no choice at all is
// Hermes's "Unknown action." before any authorization, answered by the
// gateway to an invoke; a message with such data is no press, but the
// message it is.
func pressOf(a *Activity) (command, call string, ok, unknown bool) {
	var raw json.RawMessage
	switch {
	case a.Type == "invoke" && a.Name == cardActionInvoke:
		var v struct {
			Action struct {
				Data json.RawMessage `json:"data"`
			} `json:"action"`
		}
		if json.Unmarshal(a.Value, &v) != nil {
			return "", "", false, false
		}
		raw = v.Action.Data
	case a.Type == "message" && len(a.Value) > 0:
		raw = a.Value
	default:
		return "", "", false, false
	}
	var d buttonData
	if json.Unmarshal(raw, &d) != nil {
		return "", "", false, false
	}
	command, ok = actionCommands[d.Action]
	if !ok || (d.ToolCallID != "" && !validCall(d.ToolCallID)) {
		return "", "", false, d.Action != ""
	}
	return command, d.ToolCallID, true, false
}

// unknownChoice is the text of the press of a choice the gateway cannot
// read (pressOf's unknown), published with Interaction.unknown_choice
// for the router to answer: "/start", which a router that does not know
// the field (an older one, during a rolling upgrade) answers with
// nothing, neither a notice nor a turn, refusing a stranger as any
// press; the invoke is then answered "Answer received.". An
// Action.Submit's has no interaction to mark, and takes that nothing
// from every router.
const unknownChoice = "/start"

// pressEvent is the event of an approval button's press: the command,
// from the presser, in the card's conversation, naming the card (the
// activity it replies to) and the call.
func pressEvent(a *Activity, botID, command, call string) normalized {
	if !validID(a.ID) || !validID(a.From.ID) {
		return normalized{skip: "press_without_ids"}
	}
	if isBot(a.From.ID, a.Recipient.ID, botID) {
		return normalized{skip: "own"}
	}
	ev := base(a, botID)
	ev.Text = command
	card := ""
	if validID(a.ReplyToID) {
		card = a.ReplyToID
	}
	ev.ButtonPress = &eventsv1.ButtonPress{MessageId: card, ToolCallId: call}
	return normalized{ev: ev, press: true}
}

// invokeAnswer is the text of the answer to an Action.Execute invoke
// once its press is on the bus, when the router has no word for the
// presser: a message Teams shows briefly; the router's answer then
// replaces the card.
const invokeAnswer = "Answer received."

// unknownAction is Hermes's answer to a card action it cannot read (an
// Action.Execute whose data names no choice it knows, whatever its
// verb).
const unknownAction = "Unknown action."

// invokeResponse is the body of the answer to an Action.Execute invoke:
// an action response with text, a message Teams shows the presser only
// (Hermes's refusal "⛔ Not authorized.", the router's word on the
// press), or invokeAnswer for none.
func invokeResponse(text string) []byte {
	if text == "" {
		text = invokeAnswer
	}
	b, _ := json.Marshal(map[string]any{"statusCode": 200, "type": "application/vnd.microsoft.activity.message", "value": text})
	return b
}

// refusePress sends the router's refusal of a press (the target's
// interaction, Interaction.component: "⛔ Not authorized.") to the
// replica that holds the press's invoke, whose answer it becomes. An
// invoke answered already (its hold ended) drops it: nothing goes to the
// conversation, where others would see it.
func (p *Platform) refusePress(ctx context.Context, req *deliveryv1.SendRequested) (string, error) {
	held, err := platform.AnswerPress(ctx, p.bus, req)
	if err != nil {
		return "", err
	}
	if !held {
		p.log.Info("teams invoke answered already; dropping the press's refusal")
	}
	return "", nil
}
