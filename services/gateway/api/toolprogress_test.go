package api

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/responses"

	deliveryv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/delivery/v1"
	eventsv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/events/v1"
)

// sseEvent is one event of a raw event stream.
type sseEvent struct{ name, data string }

// sseEvents splits a raw event stream into its events (comments left out).
func sseEvents(t *testing.T, r httpResult) []sseEvent {
	t.Helper()
	if r.code != 200 {
		t.Fatalf("status %d: %s", r.code, r.body)
	}
	var out []sseEvent
	var ev sseEvent
	sc := bufio.NewScanner(strings.NewReader(string(r.body)))
	for sc.Scan() {
		line := sc.Text()
		switch {
		case line == "":
			if ev.data != "" {
				out = append(out, ev)
			}
			ev = sseEvent{}
		case strings.HasPrefix(line, "event: "):
			ev.name = strings.TrimPrefix(line, "event: ")
		case strings.HasPrefix(line, "data: "):
			ev.data = strings.TrimPrefix(line, "data: ")
		}
	}
	return out
}

// toolTurn makes r's turns call two tools after "Let me check." — one
// with its emoji and preview, one without — with an internal tool
// (named "_…") beside them and the end of a call that never started,
// which streams do not show, and answer after them.
func toolTurn(r *responder) (shown, final string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.answer = func(*eventsv1.MessageReceived, int) []string {
		return []string{"Let me check.", "\n\n", "It's ", "5pm."}
	}
	r.restart = func(i int) bool { return i == 1 }
	r.final = func([]string) string { return "It's 5pm." }
	step := func(id, name, phase, detail string) *deliveryv1.ToolStep {
		return &deliveryv1.ToolStep{ToolCallId: id, ToolName: name, Phase: phase, Detail: detail}
	}
	date := step("call_1", "terminal", "started", "date")
	date.Emoji, date.Arguments = "💻", `{"command":"date"}`
	r.tools = map[int][]*deliveryv1.ToolStep{
		1: {date, step("call_2", "_thinking", "started", ""), step("call_3", "clock", "started", "")},
		2: {step("call_1", "terminal", "finished", "Sat Dec  5 17:00:00 UTC 2026"), step("call_2", "_thinking", "finished", ""),
			step("call_9", "terminal", "failed", ""), step("call_3", "clock", "failed", "error: no clock")},
	}
	return "Let me check.\n\nIt's 5pm.", "It's 5pm."
}

// A streamed chat completion shows the turn's tool calls as Hermes's
// API server does: an "event: hermes.tool.progress" when a call starts
// (tool, emoji, label, toolCallId, status running — the tool's emoji,
// "⚡" for one without, and the call's one-line preview, else the tool's
// name, as chats' progress lines show them) and one when it ends
// (status completed), between the chunks of the text, in the order the
// turn made them — with or without an Idempotency-Key. An internal tool
// and the end of a call the stream did not see start are left out. The
// answer of a request that does not stream is unchanged.
func TestChatStreamShowsToolProgress(t *testing.T) {
	t.Parallel()
	b := newBus(t)
	s := startService(t, b, nil)
	r := startResponder(t, b)
	shown, final := toolTurn(r)
	body := `{"stream":true,"messages":[{"role":"user","content":"what time is it?"}]}`
	want := []string{
		"role", "text Let me check.",
		`tool {"emoji":"💻","label":"date","status":"running","tool":"terminal","toolCallId":"call_1"}`,
		`tool {"emoji":"⚡","label":"clock","status":"running","tool":"clock","toolCallId":"call_3"}`,
		"text \n\n",
		`tool {"status":"completed","tool":"terminal","toolCallId":"call_1"}`,
		`tool {"status":"completed","tool":"clock","toolCallId":"call_3"}`,
		"text It's ", "text 5pm.", "finish", "[DONE]",
	}
	for name, headers := range map[string]map[string]string{
		"plain": nil,
		"keyed": {HeaderIdempotencyKey: "tool-progress"},
	} {
		var got []string
		var text strings.Builder
		var id string
		for _, ev := range sseEvents(t, post(s, body, headers)) {
			if ev.data == "[DONE]" {
				got = append(got, ev.data)
				continue
			}
			var c chunk
			if err := json.Unmarshal([]byte(ev.data), &c); err != nil {
				t.Fatalf("%s: event %q: %v", name, ev.data, err)
			}
			if id == "" {
				id = c.ID
			}
			if c.ID != id || c.Object != "chat.completion.chunk" || c.Choices == nil {
				t.Errorf("%s: event %q is not a chunk of the stream", name, ev.data)
			}
			switch {
			case ev.name == toolProgressEvent:
				// Hermes's fields; the chunk's are checked above.
				var fields map[string]any
				_ = json.Unmarshal([]byte(ev.data), &fields)
				for _, k := range []string{"id", "object", "created", "model", "choices"} {
					delete(fields, k)
				}
				data, _ := json.Marshal(fields)
				got = append(got, "tool "+string(data))
			case ev.name != "":
				got = append(got, "event "+ev.name)
			case len(c.Choices) == 1 && c.Choices[0].Delta.Role != "":
				got = append(got, "role")
			case len(c.Choices) == 1 && c.Choices[0].FinishReason != nil:
				got = append(got, "finish")
			case len(c.Choices) == 1:
				got = append(got, "text "+c.Choices[0].Delta.Content)
				text.WriteString(c.Choices[0].Delta.Content)
			default:
				got = append(got, "other "+ev.data)
			}
		}
		if strings.Join(got, "\n") != strings.Join(want, "\n") || text.String() != shown {
			t.Errorf("%s: stream\n%s\nwant\n%s", name, strings.Join(got, "\n"), strings.Join(want, "\n"))
		}
	}
	if _, text := answerOf(t, post(s, `{"messages":[{"role":"user","content":"what time is it?"}]}`, nil)); text != final {
		t.Errorf("answer %q, want %q", text, final)
	}
}

// The official OpenAI SDKs (they send X-Stainless-Lang) get no
// hermes.tool.progress events: Node's (and older Python releases') hand a
// named event to the caller as {event, data}, without choices, which
// their documented loop (chunk.choices[0]) and Node's stream helper fail
// on, and the others hand it over as a chunk whose choices are empty,
// which that loop fails on too (OpenAI sends such a chunk only to a
// request that asked for usage). The stream is the text's alone.
func TestSDKClientsGetNoToolProgressEvents(t *testing.T) {
	t.Parallel()
	b := newBus(t)
	s := startService(t, b, nil)
	r := startResponder(t, b)
	shown, _ := toolTurn(r)
	body := `{"stream":true,"messages":[{"role":"user","content":"what time is it?"}]}`
	for _, lang := range []string{"js", "python", "go"} {
		var text strings.Builder
		for _, ev := range sseEvents(t, post(s, body, map[string]string{"X-Stainless-Lang": lang})) {
			if ev.data == "[DONE]" {
				continue
			}
			var c chunk
			if err := json.Unmarshal([]byte(ev.data), &c); err != nil {
				t.Fatalf("%s: event %q: %v", lang, ev.data, err)
			}
			if ev.name != "" || len(c.Choices) != 1 {
				t.Errorf("%s: event %q %s, not a chunk the SDK's loop reads", lang, ev.name, ev.data)
				continue
			}
			text.WriteString(c.Choices[0].Delta.Content)
		}
		if text.String() != shown {
			t.Errorf("%s: streamed %q, want %q", lang, text.String(), shown)
		}
	}
}

// An OpenAI SDK client reads a stream of a turn that calls tools as it
// reads any: every chunk has its choice, the accumulator takes each, and
// the text is the answer's.
func TestSDKReadsAStreamWithToolProgress(t *testing.T) {
	t.Parallel()
	b := newBus(t)
	s := startService(t, b, nil)
	r := startResponder(t, b)
	shown, _ := toolTurn(r)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	client := sdkClient(s)
	stream := client.Chat.Completions.NewStreaming(ctx, openai.ChatCompletionNewParams{
		Model:    "switchboard",
		Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("what time is it?")},
	})
	var acc openai.ChatCompletionAccumulator
	var text string
	empty := 0
	for stream.Next() {
		c := stream.Current()
		if !acc.AddChunk(c) {
			t.Errorf("the accumulator refused chunk %s", c.RawJSON())
		}
		if len(c.Choices) == 0 {
			empty++
			continue
		}
		text += c.Choices[0].Delta.Content
	}
	if err := stream.Err(); err != nil {
		t.Fatal(err)
	}
	if text != shown || acc.Choices[0].Message.Content != shown || empty != 0 {
		t.Fatalf("read %q, accumulated %q, %d chunks without choices; want %q and none", text, acc.Choices[0].Message.Content, empty, shown)
	}
}

// A streamed Responses API response shows each tool call as Hermes's
// does: a function_call output item added (in_progress) when the call
// starts, its arguments a JSON object ("{}" for none), and done
// (completed) when it ends, then a function_call_output item with the
// result's preview, added and done; items are numbered as they are
// added, and the message's text events keep their item's output_index.
// response.completed and the kept response (GET) list every item, in
// the order of their output_index.
func TestResponsesStreamShowsToolCalls(t *testing.T) {
	t.Parallel()
	b := newBus(t)
	s := startService(t, b, nil)
	r := startResponder(t, b)
	shown, _ := toolTurn(r)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var items []string
	textAt := map[int64]bool{}
	client := sdkClient(s)
	_, deltas, last := streamEventsWith(ctx, t, client, responses.ResponseNewParams{Model: "switchboard", Input: inputText("what time is it?")},
		func(ev responses.ResponseStreamEventUnion) {
			switch ev.Type {
			case "response.output_item.added", "response.output_item.done":
				items = append(items, fmt.Sprintf("%s %d %s", strings.TrimPrefix(ev.Type, "response.output_item."), ev.OutputIndex, itemOf(t, ev.Item.RawJSON())))
			case "response.output_text.delta", "response.output_text.done", "response.content_part.added", "response.content_part.done":
				textAt[ev.OutputIndex] = true
			}
		})
	want := []string{
		`added 0 message in_progress ""`,
		`added 1 function_call in_progress terminal call_1 {"command":"date"}`,
		`added 2 function_call in_progress clock call_3 {}`,
		`done 1 function_call completed terminal call_1 {"command":"date"}`,
		`added 3 function_call_output completed call_1 "Sat Dec  5 17:00:00 UTC 2026"`,
		`done 3 function_call_output completed call_1 "Sat Dec  5 17:00:00 UTC 2026"`,
		`done 2 function_call completed clock call_3 {}`,
		`added 4 function_call_output completed call_3 "error: no clock"`,
		`done 4 function_call_output completed call_3 "error: no clock"`,
		`done 0 message completed "Let me check.\n\nIt's 5pm."`,
	}
	if strings.Join(items, "\n") != strings.Join(want, "\n") {
		t.Errorf("items\n%s\nwant\n%s", strings.Join(items, "\n"), strings.Join(want, "\n"))
	}
	if len(textAt) != 1 || !textAt[0] {
		t.Errorf("text events at output indexes %v, want the message's (0)", textAt)
	}
	if strings.Join(deltas, "") != shown || last.Status != "completed" || last.OutputText() != shown {
		t.Errorf("streamed %q, ended %s with %q; want %q, completed", deltas, last.Status, last.OutputText(), shown)
	}
	output := []string{
		`message completed "Let me check.\n\nIt's 5pm."`,
		`function_call completed terminal call_1 {"command":"date"}`,
		`function_call completed clock call_3 {}`,
		`function_call_output completed call_1 "Sat Dec  5 17:00:00 UTC 2026"`,
		`function_call_output completed call_3 "error: no clock"`,
	}
	kept, err := client.Responses.Get(ctx, last.ID, responses.ResponseGetParams{})
	if err != nil {
		t.Fatal(err)
	}
	for what, raw := range map[string]string{"completed": last.RawJSON(), "kept": kept.RawJSON()} {
		var o struct{ Output []json.RawMessage }
		if err := json.Unmarshal([]byte(raw), &o); err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, it := range o.Output {
			got = append(got, itemOf(t, string(it)))
		}
		if strings.Join(got, "\n") != strings.Join(output, "\n") {
			t.Errorf("%s output\n%s\nwant\n%s", what, strings.Join(got, "\n"), strings.Join(output, "\n"))
		}
	}
}

// itemOf is a Responses output item in brief; a function_call's
// arguments must parse as JSON.
func itemOf(t *testing.T, raw string) string {
	t.Helper()
	var it struct {
		Type, Status, Name, Arguments string
		CallID                        string `json:"call_id"`
		Content                       []struct{ Text string }
		Output                        []struct{ Type, Text string }
	}
	if err := json.Unmarshal([]byte(raw), &it); err != nil {
		t.Fatalf("item %s: %v", raw, err)
	}
	switch it.Type {
	case "function_call":
		if !json.Valid([]byte(it.Arguments)) {
			t.Errorf("function_call arguments %q do not parse", it.Arguments)
		}
		return fmt.Sprintf("%s %s %s %s %s", it.Type, it.Status, it.Name, it.CallID, it.Arguments)
	case "function_call_output":
		if len(it.Output) != 1 || it.Output[0].Type != "input_text" {
			t.Errorf("function_call_output %s: want one input_text part", raw)
			return raw
		}
		return fmt.Sprintf("%s %s %s %q", it.Type, it.Status, it.CallID, it.Output[0].Text)
	}
	text := ""
	for _, c := range it.Content {
		text += c.Text
	}
	return fmt.Sprintf("%s %s %q", it.Type, it.Status, text)
}

// A Responses answer that does not stream lists the turn's tool calls
// as Hermes's does: each call's function_call item and its result's
// function_call_output item, in the order the turn made them, before
// the message — in the answer and in its kept copy. A chat completion
// that does not stream shows none, as Hermes's.
func TestResponsesAnswerListsToolCalls(t *testing.T) {
	t.Parallel()
	b := newBus(t)
	s := startService(t, b, nil)
	r := startResponder(t, b)
	_, final := toolTurn(r)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	client := sdkClient(s)
	want := []string{
		`function_call completed terminal call_1 {"command":"date"}`,
		`function_call completed clock call_3 {}`,
		`function_call_output completed call_1 "Sat Dec  5 17:00:00 UTC 2026"`,
		`function_call_output completed call_3 "error: no clock"`,
		fmt.Sprintf("message completed %q", final),
	}
	answer, err := client.Responses.New(ctx, responses.ResponseNewParams{Model: "switchboard", Input: inputText("what time is it?")})
	if err != nil {
		t.Fatal(err)
	}
	if answer.Status != "completed" || answer.OutputText() != final {
		t.Errorf("answer %s %q, want completed %q", answer.Status, answer.OutputText(), final)
	}
	kept, err := client.Responses.Get(ctx, answer.ID, responses.ResponseGetParams{})
	if err != nil {
		t.Fatal(err)
	}
	for what, raw := range map[string]string{"answer": answer.RawJSON(), "kept": kept.RawJSON()} {
		var o struct{ Output []json.RawMessage }
		if err := json.Unmarshal([]byte(raw), &o); err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, it := range o.Output {
			got = append(got, itemOf(t, string(it)))
		}
		if strings.Join(got, "\n") != strings.Join(want, "\n") {
			t.Errorf("%s output\n%s\nwant\n%s", what, strings.Join(got, "\n"), strings.Join(want, "\n"))
		}
	}
	chat := post(s, `{"model":"switchboard","messages":[{"role":"user","content":"what time is it?"}]}`, nil)
	if _, text := answerOf(t, chat); text != final || strings.Contains(string(chat.body), "call_1") {
		t.Errorf("chat completion %s, want the answer %q alone", chat.body, final)
	}
	// Only the Responses request's message asks its turn for the steps
	// of its tool calls: the chat completion's turn need publish none.
	r.mu.Lock()
	defer r.mu.Unlock()
	var lists []bool
	for _, ev := range r.events {
		lists = append(lists, ev.GetListsToolCalls())
	}
	if !slices.Equal(lists, []bool{true, false}) {
		t.Errorf("messages list tool calls %v, want [true false] (the response's, the chat completion's)", lists)
	}
}

// A call's start that comes again after its end — a frozen earlier
// attempt of the turn waking to run a call the later attempt already
// ran (call ids are unique in a turn), or a step delivered twice — is
// not listed again: the answer lists each call once, completed, and no
// second, incomplete copy of it.
func TestResponsesAnswerListsACallOnce(t *testing.T) {
	t.Parallel()
	b := newBus(t)
	s := startService(t, b, nil)
	r := startResponder(t, b)
	_, final := toolTurn(r)
	r.mu.Lock()
	again := &deliveryv1.ToolStep{ToolCallId: "call_1", ToolName: "terminal", Phase: "started", Detail: "date", Arguments: `{"command":"date"}`}
	r.tools[2] = append(r.tools[2], again)
	r.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	client := sdkClient(s)
	answer, err := client.Responses.New(ctx, responses.ResponseNewParams{Model: "switchboard", Input: inputText("what time is it?")})
	if err != nil {
		t.Fatal(err)
	}
	var o struct{ Output []json.RawMessage }
	if err := json.Unmarshal([]byte(answer.RawJSON()), &o); err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, it := range o.Output {
		got = append(got, itemOf(t, string(it)))
	}
	want := []string{
		`function_call completed terminal call_1 {"command":"date"}`,
		`function_call completed clock call_3 {}`,
		`function_call_output completed call_1 "Sat Dec  5 17:00:00 UTC 2026"`,
		`function_call_output completed call_3 "error: no clock"`,
		fmt.Sprintf("message completed %q", final),
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("output\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}
