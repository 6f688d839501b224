package api

import (
	"cmp"
	"fmt"
	"net/http"
	"slices"
	"strings"

	deliveryv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/delivery/v1"
)

// Tool progress in streams, as Hermes's API server shows it. A streamed
// chat completion shows each tool call's start and end as an event of
// its own, "hermes.tool.progress", between the chunks of the text; a
// streamed Responses API response shows each call as a function_call
// output item, added when it starts and done when it ends. Answers that
// do not stream show none: the turn of a plain request publishes no
// progress (answer_only).

// toolProgressEvent names the chat completions stream's tool events.
const toolProgressEvent = "hermes.tool.progress"

// defaultToolEmoji is the emoji of a tool call's start, as delivery
// shows a tool without its own: the steps the gateway gets do not carry
// the tool's.
const defaultToolEmoji = "⚙️"

// toolPiece is the waiting request's piece of a step of a tool call.
func toolPiece(req *deliveryv1.SendRequested) piece {
	return piece{tool: req.GetToolStep()}
}

// shownCall is a tool call a stream showed the start of.
type shownCall struct {
	name, args string
	// item and index are its function_call item in a Responses stream.
	item  string
	index int
}

// toolCalls are the tool calls of one stream, shown as Hermes shows
// them: from their start, a call without an id or of an internal tool
// (its name starts with "_") not at all, and the end of a call only
// after its start — a keyed request's retry, which joins the turn
// midway, shows no end of a call it did not see start, nor a step
// delivered twice.
type toolCalls struct {
	open  map[string]*shownCall
	order []string // the ids of open, in the order the calls started
}

// step takes a step of a call and returns the call and whether the
// step started it (else ended it); ok is false for a step the stream
// does not show, such as a call waiting for approval.
func (c *toolCalls) step(s *deliveryv1.ToolStep) (call *shownCall, started, ok bool) {
	id, name := s.GetToolCallId(), s.GetToolName()
	if id == "" || strings.HasPrefix(name, "_") {
		return nil, false, false
	}
	switch s.GetPhase() {
	case "started":
		if _, seen := c.open[id]; seen {
			return nil, false, false
		}
		if c.open == nil {
			c.open = map[string]*shownCall{}
		}
		call = &shownCall{name: name, args: s.GetDetail()}
		c.open[id] = call
		c.order = append(c.order, id)
		return call, true, true
	case "finished", "failed":
		if call, ok = c.open[id]; !ok {
			return nil, false, false
		}
		delete(c.open, id)
		c.order = slices.DeleteFunc(c.order, func(x string) bool { return x == id })
		return call, false, true
	}
	return nil, false, false
}

// toolProgress is the data of a hermes.tool.progress event: Hermes's
// fields — tool, emoji and label (the call's arguments as the worker
// previews them, cut at 200 bytes, or the tool's name) at the start,
// toolCallId, status running or completed — in a chat.completion.chunk
// of the stream without choices, so that a client that reads every
// event's data as a chunk, whatever its name, takes it as it takes the
// chunk of the usage (the official SDKs get none: officialSDK).
type toolProgress struct {
	chunk
	Tool       string `json:"tool"`
	Emoji      string `json:"emoji,omitempty"`
	Label      string `json:"label,omitempty"`
	ToolCallID string `json:"toolCallId"`
	Status     string `json:"status"`
}

// officialSDK reports whether r comes from one of OpenAI's official SDKs,
// which all send X-Stainless-Lang. They get no hermes.tool.progress
// events: Node's SDK (and older Python releases) hand a named event to
// the caller as {event, data}, without choices, on which the loop their
// READMEs show (chunk.choices[0]) and Node's stream helper fail; the
// others hand it over as a chunk with empty choices, on which that loop
// fails too, as OpenAI sends such a chunk only to a request that asked
// for usage. Hermes's clients read the events with their own SSE
// parsers.
func officialSDK(r *http.Request) bool { return r.Header.Get("X-Stainless-Lang") != "" }

// chatTools shows the steps of the turn's tool calls in a chat
// completions stream, each as an event of head's chunk — or, unless
// show, none.
func chatTools(out *sse, head chunk, show bool) func(*deliveryv1.ToolStep) {
	if !show {
		return func(*deliveryv1.ToolStep) {}
	}
	head.Choices = []chunkChoice{}
	var calls toolCalls
	return func(s *deliveryv1.ToolStep) {
		call, started, ok := calls.step(s)
		if !ok {
			return
		}
		ev := toolProgress{chunk: head, Tool: call.name, ToolCallID: s.GetToolCallId(), Status: "completed"}
		if started {
			ev.Emoji, ev.Label, ev.Status = defaultToolEmoji, cmp.Or(call.args, call.name), "running"
		}
		out.send(toolProgressEvent, ev)
	}
}

// functionCall is the output item of a tool call in a Responses stream.
type functionCall struct {
	ID     string `json:"id"`
	Type   string `json:"type"`
	Status string `json:"status"`
	Name   string `json:"name"`
	CallID string `json:"call_id"`
	// Arguments are the call's arguments as the worker previews them
	// (JSON cut at 200 bytes).
	Arguments string `json:"arguments"`
}

type callEvent struct {
	eventHead
	OutputIndex int          `json:"output_index"`
	Item        functionCall `json:"item"`
}

// tool shows a step of a tool call: a call's start adds its
// function_call item (in_progress), its end makes the item done
// (completed), as in Hermes's stream.
func (e *responseEvents) tool(s *deliveryv1.ToolStep) {
	call, started, ok := e.calls.step(s)
	if !ok {
		return
	}
	if !started {
		e.call("response.output_item.done", s.GetToolCallId(), call, "completed")
		return
	}
	call.index = e.next
	e.next++
	call.item = fmt.Sprintf("fc_%s_%d", strings.TrimPrefix(e.o.messageID, "msg_"), call.index)
	e.call("response.output_item.added", s.GetToolCallId(), call, "in_progress")
}

// closeCalls ends the items of the calls still going when the stream
// ends (the wait ended, the turn failed): incomplete.
func (e *responseEvents) closeCalls() {
	for _, id := range e.calls.order {
		e.call("response.output_item.done", id, e.calls.open[id], "incomplete")
	}
	e.calls = toolCalls{}
}

func (e *responseEvents) call(typ, id string, c *shownCall, status string) {
	e.out.send(typ, callEvent{eventHead: e.head(typ), OutputIndex: c.index,
		Item: functionCall{ID: c.item, Type: "function_call", Status: status, Name: c.name, CallID: id, Arguments: c.args}})
}
