package api

import (
	"cmp"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"

	deliveryv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/delivery/v1"
	"github.com/switchboard-chat/switchboard/pkg/toolline"
)

// Tool progress in streams, as Hermes's API server shows it. A streamed
// chat completion shows each tool call's start and end as an event of
// its own, "hermes.tool.progress", between the chunks of the text; a
// streamed Responses API response shows each call as a function_call
// output item, added when it starts and done when it ends. A Responses
// answer that does not stream lists the same items in its output, before
// the message, as Hermes's does; a chat completion that does not stream
// shows none, as Hermes's. (The turn of a plain request publishes no
// progress, answer_only, but for its tool calls' steps when its message
// says the answer lists them, lists_tool_calls: a Responses request's.)

// toolProgressEvent names the chat completions stream's tool events.
const toolProgressEvent = "hermes.tool.progress"

// toolPiece is the waiting request's piece of a step of a tool call.
func toolPiece(req *deliveryv1.SendRequested) piece {
	return piece{tool: req.GetToolStep()}
}

// shownCall is a tool call a stream showed the start of.
type shownCall struct {
	// args are its arguments, a JSON object (ToolStep.arguments; "{}"
	// when the step has none, as Hermes's are when the model gave none).
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
// delivered twice, nor a call's start again after its end (call ids are
// unique in a turn: that is an earlier attempt of the turn, frozen past
// its lock, waking to run a call a later attempt ran already).
type toolCalls struct {
	open  map[string]*shownCall
	order []string // the ids of open, in the order the calls started
	ended map[string]bool
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
		if _, seen := c.open[id]; seen || c.ended[id] {
			return nil, false, false
		}
		if c.open == nil {
			c.open = map[string]*shownCall{}
		}
		call = &shownCall{name: name, args: cmp.Or(s.GetArguments(), "{}")}
		c.open[id] = call
		c.order = append(c.order, id)
		return call, true, true
	case "finished", "failed":
		if call, ok = c.open[id]; !ok {
			return nil, false, false
		}
		delete(c.open, id)
		if c.ended == nil {
			c.ended = map[string]bool{}
		}
		c.ended[id] = true
		c.order = slices.DeleteFunc(c.order, func(x string) bool { return x == id })
		return call, false, true
	}
	return nil, false, false
}

// toolProgress is the data of a hermes.tool.progress event: Hermes's
// fields — tool, emoji and label at the start (the tool's own emoji, "⚡"
// for a tool without one, and the call's one-line label: its main
// argument, else the tool's name; toolline), toolCallId, status running
// or completed — in a chat.completion.chunk
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
			ev.Emoji = toolline.Emoji(s.GetEmoji(), toolline.APIEmoji)
			ev.Label, ev.Status = toolline.Label(call.name, s.GetDetail()), "running"
		}
		out.send(toolProgressEvent, ev)
	}
}

type callEvent struct {
	eventHead
	OutputIndex int           `json:"output_index"`
	Item        outputMessage `json:"item"`
}

// toolItemsMax bounds the tool calls' items a response lists in its
// output (response.completed, the kept response): past it the later
// calls' items are left out of it — the stream showed them — so that a
// turn of many calls still fits its record (a NATS message, 1 MiB by
// default). Each item is bounded: arguments 2000 bytes, a result 1000
// characters.
const toolItemsMax = 256 << 10

// toolItem is an item of a tool call or its result and its output_index.
type toolItem struct {
	index int
	item  outputMessage
}

// tool shows a step of a tool call as Hermes's stream does: a call's
// start adds its function_call item (in_progress); its end makes the
// item done (completed) and adds and ends a function_call_output item
// with the result's preview (ToolStep.detail). The response's output
// lists both (outputWith).
func (e *responseEvents) tool(s *deliveryv1.ToolStep) {
	call, started, ok := e.calls.step(s)
	if !ok {
		return
	}
	id := s.GetToolCallId()
	if started {
		call.index = e.next
		e.next++
		call.item = fmt.Sprintf("fc_%s_%d", e.suffix(), call.index)
		e.call("response.output_item.added", id, call, "in_progress")
		return
	}
	e.call("response.output_item.done", id, call, "completed")
	index := e.next
	e.next++
	out := outputMessage{ID: fmt.Sprintf("fco_%s_%d", e.suffix(), index), Type: "function_call_output", Status: "completed",
		CallID: id, Output: []outputPart{{Type: "input_text", Text: s.GetDetail()}}}
	for _, typ := range []string{"response.output_item.added", "response.output_item.done"} {
		e.send(typ, callEvent{eventHead: e.head(typ), OutputIndex: index, Item: out})
	}
	e.list(index, out)
}

// closeCalls ends the items of the calls still going when the stream
// ends (the wait ended, the turn failed): incomplete.
func (e *responseEvents) closeCalls() {
	for _, id := range e.calls.order {
		e.call("response.output_item.done", id, e.calls.open[id], "incomplete")
	}
	e.calls = toolCalls{}
}

// call sends an event of a call's function_call item, and lists the
// item as it ends.
func (e *responseEvents) call(typ, id string, c *shownCall, status string) {
	item := outputMessage{ID: c.item, Type: "function_call", Status: status, Name: c.name, CallID: id, Arguments: c.args}
	e.send(typ, callEvent{eventHead: e.head(typ), OutputIndex: c.index, Item: item})
	if status != "in_progress" {
		e.list(c.index, item)
	}
}

// list keeps an item for the response's output, while the items fit
// toolItemsMax: none after the first that does not, so that a call's
// items are not listed without the ones before.
func (e *responseEvents) list(index int, item outputMessage) {
	data, _ := json.Marshal(item)
	if e.toolsFull || e.toolBytes+len(data) > toolItemsMax {
		e.toolsFull = true
		return
	}
	e.toolBytes += len(data)
	e.tools = append(e.tools, toolItem{index: index, item: item})
}

// outputWith is the response's output: the tool calls' items and the
// message's (msgs: none or one), in the order of their output_index, as
// the stream numbered them. (Hermes lists the message last whatever its
// index; here an item's place in output is its output_index, as OpenAI's
// are.)
func (e *responseEvents) outputWith(msgs []outputMessage) []outputMessage {
	if len(e.tools) == 0 {
		return msgs
	}
	items := slices.Clone(e.tools)
	for _, m := range msgs {
		items = append(items, toolItem{index: e.index, item: m})
	}
	slices.SortStableFunc(items, func(a, b toolItem) int { return a.index - b.index })
	out := make([]outputMessage, len(items))
	for i, it := range items {
		out[i] = it.item
	}
	return out
}

// send sends an event of a tool call's items, if the response streams.
func (e *responseEvents) send(typ string, v any) {
	if e.out != nil {
		e.out.send(typ, v)
	}
}

// toolsFirst is the output of a response that did not stream: the tool
// calls' items, then the message's (msgs), as Hermes lists them.
func (e *responseEvents) toolsFirst(msgs []outputMessage) []outputMessage {
	e.index = e.next
	return e.outputWith(msgs)
}

// suffix is the response's own part of its items' ids.
func (e *responseEvents) suffix() string { return strings.TrimPrefix(e.o.messageID, "msg_") }
