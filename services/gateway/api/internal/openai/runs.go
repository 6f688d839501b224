package openai

import (
	"encoding/json"

	eventsv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/events/v1"
)

// runRequest is a request to start a run (POST /v1/runs, Hermes's runs
// API). Other fields are accepted and ignored.
type runRequest struct {
	Model               string          `json:"model"`
	Input               json.RawMessage `json:"input"`
	Instructions        *string         `json:"instructions"`
	SessionID           string          `json:"session_id"`
	PreviousResponseID  string          `json:"previous_response_id"`
	ConversationHistory json.RawMessage `json:"conversation_history"`
}

// Run is a validated run request: the input's last message, whatever
// its role, is the input; the instructions, the conversation_history and
// the input's other messages, in that order, are its context.
type Run struct {
	Input
	Model string
	// Instructions are the run's ephemeral system prompt (also its first
	// context message); empty for none.
	Instructions string
	// InstructionsSent reports that the request has instructions, even
	// empty ones: a run without continues with those of the response it
	// follows (CarryInstructions).
	InstructionsSent bool
	// SessionID names the conversation the run continues ("" for none).
	SessionID string
	// PreviousResponseID names a Responses API response whose
	// conversation the run continues.
	PreviousResponseID string
}

// ParseRun decodes and validates a run request body.
func ParseRun(body []byte) (*Run, error) {
	var req runRequest
	if err := decode(body, &req); err != nil {
		return nil, err
	}
	in, err := readInput(req.Input, req.ConversationHistory, req.PreviousResponseID, true)
	if err != nil {
		return nil, err
	}
	out := &Run{Model: req.Model, SessionID: req.SessionID, PreviousResponseID: in.previous, InstructionsSent: req.Instructions != nil}
	if req.Instructions != nil && *req.Instructions != "" {
		out.Instructions = *req.Instructions
		out.Context = append(out.Context, &eventsv1.ContextMessage{Role: "system", Content: out.Instructions})
	}
	// The history's content, and the input's earlier items', are read as
	// Hermes's run reads them (runText); the last item's as a Responses
	// request's.
	around, err := in.context(runText, 0)
	if err != nil {
		return nil, err
	}
	out.Context = append(out.Context, around...)
	// As Hermes's run refuses it (if not user_message): a last item
	// whose content Python holds false — 0, 0.0, false, {} as well as
	// "", [] and null, which are empty here anyway — where a Responses
	// request reads it as its Python text ("0", "False", "{}").
	if m := in.lastMsg; !m.verbatim && falsy(m.content) {
		return nil, invalid(m.param, "the input's last message is empty")
	}
	// A blank input is run, as Hermes's run takes it.
	if out.Text, out.Attachments, err = in.text(false); err != nil {
		return nil, err
	}
	return out, nil
}

// CarryInstructions makes text the run's instructions, those of the
// response it continues: its first context message. Empty text is none.
func (r *Run) CarryInstructions(text string) {
	if text == "" {
		return
	}
	r.Instructions = text
	r.Context = append([]*eventsv1.ContextMessage{{Role: "system", Content: text}}, r.Context...)
}

// input is a Responses or run request's input read with its
// conversation_history: both as they came (JSON, raw), each read again
// where it is needed, one message at a time, so that a request of many
// small messages holds no more memory than its body; the input's last
// message; and the response to continue.
type input struct {
	raw, history json.RawMessage
	// last is the index of the input's last message, lastMsg that
	// message.
	last    int
	lastMsg message
	// historySent: the conversation_history has entries.
	historySent bool
	previous    string
	// run: the input is a run's, whose earlier items are read as Hermes's
	// run reads them (context).
	run bool
}

// readInput reads a request's input and conversation_history (both
// JSON, raw) and the previous_response_id it names; run: the request is
// a run's.
func readInput(rawInput, rawHistory json.RawMessage, previousResponseID string, run bool) (input, error) {
	in := input{raw: rawInput, history: rawHistory, last: -1, previous: previousResponseID, run: run}
	// As Hermes's _handle_responses (gateway/platforms/api_server.py):
	// the last message, whatever its role (an assistant's prefill, a
	// system message, a role the agent does not know), is the input,
	// and Hermes's run takes the last item alike. An item that is no
	// message is refused, as it comes in a Responses request, and as the
	// last item in a run's: a run reads its earlier items whatever their
	// type, as Hermes's run does (context).
	_, err := eachInputMessage(rawInput, func(i int, m message) error {
		if m.notMessage != nil && !run {
			return m.notMessage
		}
		in.last, in.lastMsg = i, m
		return nil
	})
	if err == nil && in.lastMsg.notMessage != nil {
		err = in.lastMsg.notMessage
	}
	if err != nil {
		return input{}, err
	}
	if in.last < 0 {
		return input{}, invalid("input", "input must contain a message")
	}
	n, err := eachHistoryEntry(rawHistory, func(message) error { return nil })
	if err != nil {
		return input{}, err
	}
	if in.historySent = n > 0; in.historySent {
		// As Hermes: the client's own history wins over the server's
		// copy; the response it names is not continued (nor read).
		in.previous = ""
	}
	return in, nil
}

// context is the input's context, oldest first: the history's messages,
// then the input's other than its last. Every message is
// read (a refused one refuses the request) and, with keep > 0, only the
// last keep are kept, as Hermes truncates its conversation_history
// (entries it later drops count); then those without a role the context
// has (contextRole) are dropped. Without keep, a context of more than
// maxContext messages is refused.
//
// A run's earlier items are read as Hermes's _handle_runs reads them,
// with read (runText, their text, nothing refused: neither their type
// nor their parts, which Hermes's run does not check), and one whose
// content Python holds false, or that has none (a tool's output, a
// reasoning item), is skipped, as Hermes skips it. Those Hermes's run
// drops though they carry text are kept: a string or an item without a
// role (the user's, as the Responses API's), and all of them after a
// conversation_history or a continued response (Hermes's run keeps them
// only without either): the agent would answer without messages the
// client sent.
func (in input) context(read historyText, keep int) ([]*eventsv1.ContextMessage, error) {
	type entry struct{ role, text string }
	var kept []entry
	add := func(m message, text string) error {
		role := contextRole(m.role)
		switch {
		case keep > 0:
			// The latest keep, in at most twice their room.
			if len(kept) == 2*keep {
				kept = append(kept[:0], kept[keep:]...)
			}
		case role == "":
			return nil
		case len(kept) == maxContext:
			return tooMuchContext(m.param)
		}
		kept = append(kept, entry{role, text})
		return nil
	}
	if _, err := eachHistoryEntry(in.history, func(m message) error {
		text, err := read(m.content, m.param+".content")
		if err != nil {
			return err
		}
		return add(m, text)
	}); err != nil {
		return nil, err
	}
	if _, err := eachInputMessage(in.raw, func(i int, m message) error {
		if i == in.last {
			return nil
		}
		if in.run {
			if falsy(m.content) {
				return nil
			}
			text, err := read(m.content, m.param+".content")
			if err != nil {
				return err
			}
			return add(m, text)
		}
		// The history's pictures, and the pictures of the input's other
		// messages, are not carried: context is text.
		text, _, err := m.read()
		if err != nil {
			return err
		}
		return add(m, text)
	}); err != nil {
		return nil, err
	}
	if keep > 0 && len(kept) > keep {
		kept = kept[len(kept)-keep:]
	}
	var out []*eventsv1.ContextMessage
	for _, m := range kept {
		if m.role != "" {
			out = append(out, &eventsv1.ContextMessage{Role: m.role, Content: m.text})
		}
	}
	return out, nil
}

// text reads the input's last message: its text and pictures. One
// with neither is refused; so, with blankRefused, is one whose text is
// blank (Python's strip()), as Hermes's _handle_responses refuses it
// (_content_has_visible_payload), where its run refuses only what
// Python holds false (if not user_message: TestRunInputAsHermes).
func (in input) text(blankRefused bool) (string, []*eventsv1.Attachment, error) {
	m := in.lastMsg
	text, images, err := m.read()
	if err != nil {
		return "", nil, err
	}
	if len(images) == 0 && (text == "" || blankRefused && PythonStrip(text) == "") {
		return "", nil, invalid(m.param, "the input's last message is empty")
	}
	return text, imageAttachments(images), nil
}
