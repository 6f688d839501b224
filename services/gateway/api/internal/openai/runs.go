package openai

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"

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

// historyEntry is one message of a run request's conversation_history.
type historyEntry struct {
	Role    string          `json:"role"`
	Content json.RawMessage `json:"content"`
}

// Run is a validated run request: the newest user message of the input
// is the input; the instructions, the conversation_history and the
// input's other messages, in that order, are its context.
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
	in, err := readInput(req.Input, req.ConversationHistory, req.PreviousResponseID)
	if err != nil {
		return nil, err
	}
	msgs, last, history, previous := in.msgs, in.last, in.history, in.previous
	out := &Run{Model: req.Model, SessionID: req.SessionID, PreviousResponseID: previous, InstructionsSent: req.Instructions != nil}
	if req.Instructions != nil && *req.Instructions != "" {
		out.Instructions = *req.Instructions
		out.Context = append(out.Context, &eventsv1.ContextMessage{Role: "system", Content: out.Instructions})
	}
	// The history's pictures are not carried: context is text.
	input := len(history) + last
	for i, m := range append(history, msgs...) {
		text, images, err := responseContent(m.content, m.param+".content")
		if err != nil {
			return nil, err
		}
		if i == input {
			out.Text, out.Attachments = text, imageAttachments(images)
			continue
		}
		out.Context = append(out.Context, &eventsv1.ContextMessage{Role: contextRole(m.role), Content: text})
	}
	if strings.TrimSpace(out.Text) == "" && len(out.Attachments) == 0 {
		return nil, invalid(msgs[last].param, "the last user message is empty")
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
// conversation_history: the input's messages, the index of the last
// user message among them, the history's messages, and the response to
// continue.
type input struct {
	msgs     []message
	last     int
	history  []message
	previous string
}

// readInput reads a request's input and conversation_history (both
// JSON, raw) and the previous_response_id it names.
func readInput(rawInput, rawHistory json.RawMessage, previousResponseID string) (input, error) {
	msgs, err := inputMessages(rawInput)
	if err != nil {
		return input{}, err
	}
	in := input{msgs: msgs, last: -1, previous: previousResponseID}
	for i, m := range msgs {
		if m.role == "user" {
			in.last = i
		}
	}
	if in.last < 0 {
		return input{}, invalid("input", "input must contain a user message")
	}
	if in.history, err = historyMessages(rawHistory); err != nil {
		return input{}, err
	}
	if len(in.history)+len(msgs) > maxMessages {
		return input{}, invalid("conversation_history", "at most %d messages with the input", maxMessages)
	}
	if len(in.history) > 0 {
		// As Hermes: the client's own history wins over the server's
		// copy; the response it names is not continued (nor read).
		in.previous = ""
	}
	return in, nil
}

// historyMessages reads the conversation_history of a run or a
// Responses request (Hermes takes it on both): an array of messages,
// each with a role and a content.
func historyMessages(raw json.RawMessage) ([]message, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || bytes.Equal(raw, []byte("null")) {
		return nil, nil
	}
	var entries []json.RawMessage
	if raw[0] != '[' || json.Unmarshal(raw, &entries) != nil {
		return nil, invalid("conversation_history", "conversation_history must be an array of message objects")
	}
	if len(entries) > maxMessages {
		return nil, invalid("conversation_history", "at most %d messages", maxMessages)
	}
	msgs := make([]message, 0, len(entries))
	for i, e := range entries {
		param := fmt.Sprintf("conversation_history[%d]", i)
		var h historyEntry
		e = bytes.TrimSpace(e)
		if len(e) == 0 || e[0] != '{' || json.Unmarshal(e, &h) != nil || h.Role == "" || len(h.Content) == 0 {
			return nil, invalid(param, "%s must have 'role' and 'content' fields", param)
		}
		switch h.Role {
		case "user", "system", "developer", "assistant":
		default:
			return nil, invalid(param+".role", "unknown role %q", Clip(h.Role, maxRoleLen))
		}
		msgs = append(msgs, message{role: h.Role, content: h.Content, param: param})
	}
	return msgs, nil
}
