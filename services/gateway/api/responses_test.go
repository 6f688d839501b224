package api

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/responses"

	eventsv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/events/v1"
)

func inputText(s string) responses.ResponseNewParamsInputUnion {
	return responses.ResponseNewParamsInputUnion{OfString: openai.String(s)}
}

// listens makes the responder a model that remembers its conversations:
// each answer is every user message of the chat so far, as the server's
// transcript would show them to the model.
func (r *responder) listens() {
	var mu sync.Mutex
	heard := map[string][]string{}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.answer = func(ev *eventsv1.MessageReceived, _ int) []string {
		mu.Lock()
		defer mu.Unlock()
		chat := ev.GetSource().GetChatId()
		for _, c := range ev.GetContext() {
			if c.GetRole() == "user" {
				heard[chat] = append(heard[chat], c.GetContent())
			}
		}
		heard[chat] = append(heard[chat], ev.GetText())
		return []string{"heard: ", strings.Join(heard[chat], " | ")}
	}
}

// sdkErrorOf returns the OpenAI error an SDK call failed with.
func sdkErrorOf(t *testing.T, err error) *openai.Error {
	t.Helper()
	var apiErr *openai.Error
	if !errors.As(err, &apiErr) {
		t.Fatalf("error %v, want an API error", err)
	}
	return apiErr
}

// streamEvents reads a streamed response through the SDK: the event
// types in order and the final response. Every event must carry the
// next sequence number.
func streamEvents(ctx context.Context, t *testing.T, client openai.Client, params responses.ResponseNewParams) (types []string, deltas []string, last responses.Response) {
	t.Helper()
	return streamEventsWith(ctx, t, client, params, nil)
}

// streamEventsWith is streamEvents calling at with each event as it
// arrives, before the next is read.
func streamEventsWith(ctx context.Context, t *testing.T, client openai.Client, params responses.ResponseNewParams,
	at func(responses.ResponseStreamEventUnion)) (types []string, deltas []string, last responses.Response) {
	t.Helper()
	stream := client.Responses.NewStreaming(ctx, params)
	for stream.Next() {
		ev := stream.Current()
		if at != nil {
			at(ev)
		}
		if ev.SequenceNumber != int64(len(types)) {
			t.Errorf("event %d (%s) has sequence number %d", len(types), ev.Type, ev.SequenceNumber)
		}
		types = append(types, ev.Type)
		switch ev.Type {
		case "response.output_text.delta":
			deltas = append(deltas, ev.Delta)
		case "response.completed", "response.failed", "response.incomplete":
			last = ev.Response
		}
	}
	if err := stream.Err(); err != nil {
		t.Fatalf("stream: %v", err)
	}
	return types, deltas, last
}

func TestResponsesThroughTheSDK(t *testing.T) {
	t.Parallel()
	b := newBus(t)
	s := startService(t, b, nil)
	r := startResponder(t, b)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	client := sdkClient(s)

	var hdr *http.Response
	resp, err := client.Responses.New(ctx, responses.ResponseNewParams{
		Model: "switchboard", Input: inputText("hello"), Instructions: openai.String("be brief"),
		Temperature: openai.Float(0.2), User: openai.String("ada"), Metadata: map[string]string{"ticket": "42"},
	}, option.WithResponseInto(&hdr))
	if err != nil {
		t.Fatal(err)
	}
	const answer = "echo: hello (turn 1)"
	if !strings.HasPrefix(resp.ID, "resp_") || resp.Object != "response" || resp.Status != responses.ResponseStatusCompleted || resp.CreatedAt == 0 {
		t.Fatalf("response %s %s %s %v", resp.ID, resp.Object, resp.Status, resp.CreatedAt)
	}
	if got := resp.OutputText(); got != answer {
		t.Fatalf("output text %q, want %q", got, answer)
	}
	if len(resp.Output) != 1 || resp.Output[0].Type != "message" || resp.Output[0].Role != "assistant" || !strings.HasPrefix(resp.Output[0].ID, "msg_") {
		t.Fatalf("output %+v, want one assistant message", resp.Output)
	}
	if u := resp.Usage; u.InputTokens != int64(len("hello")) || u.OutputTokens != int64(len(answer)) || u.TotalTokens != u.InputTokens+u.OutputTokens {
		t.Fatalf("usage %+v", u)
	}
	if resp.Model != "switchboard" || resp.Instructions.OfString != "be brief" || resp.Metadata["ticket"] != "42" || !strings.Contains(resp.RawJSON(), `"store":true`) {
		t.Fatalf("model %q, instructions %q, metadata %v in %s", resp.Model, resp.Instructions.OfString, resp.Metadata, resp.RawJSON())
	}
	if hdr.Header.Get(HeaderServerTiming) == "" || hdr.Header.Get(HeaderSession) == "" {
		t.Fatalf("headers %v: want Server-Timing and the session", hdr.Header)
	}
	// A stateless request: its own chat, the instructions as its system
	// message, and no progress to show.
	evs := r.received()
	if len(evs) != 1 || !evs[0].GetAnswerOnly() || evs[0].GetClientSessionId() != "" || evs[0].GetSource().GetUserName() != "ada" {
		t.Fatalf("event %v", evs)
	}
	if c := evs[0].GetContext(); len(c) != 1 || c[0].GetRole() != "system" || c[0].GetContent() != "be brief" {
		t.Fatalf("context %v, want the instructions as a system message", c)
	}

	t.Run("streamed", func(t *testing.T) {
		// Kept before response.completed is sent: read as soon as it
		// arrives, before the stream ends.
		var kept *responses.Response
		var keptErr error
		types, deltas, done := streamEventsWith(ctx, t, client, responses.ResponseNewParams{Model: "switchboard", Input: inputText("stream me")},
			func(ev responses.ResponseStreamEventUnion) {
				if ev.Type == "response.completed" {
					kept, keptErr = client.Responses.Get(ctx, ev.Response.ID, responses.ResponseGetParams{})
				}
			})
		want := []string{"response.created", "response.in_progress", "response.output_item.added", "response.content_part.added",
			"response.output_text.delta", "response.output_text.delta", "response.output_text.delta",
			"response.output_text.done", "response.content_part.done", "response.output_item.done", "response.completed"}
		if strings.Join(types, ",") != strings.Join(want, ",") {
			t.Fatalf("events\n%s\nwant\n%s", strings.Join(types, "\n"), strings.Join(want, "\n"))
		}
		if got := strings.Join(deltas, "|"); got != "echo|: stream me| (turn 1)" {
			t.Fatalf("deltas %q", got)
		}
		if done.Status != responses.ResponseStatusCompleted || done.OutputText() != "echo: stream me (turn 1)" || done.Usage.OutputTokens == 0 {
			t.Fatalf("completed response %+v", done)
		}
		if keptErr != nil || kept == nil || kept.OutputText() != done.OutputText() || kept.Status != responses.ResponseStatusCompleted {
			t.Fatalf("kept when response.completed arrived: %v %v", kept, keptErr)
		}
		if evs := r.received(); len(evs) != 2 || evs[1].GetAnswerOnly() {
			t.Fatalf("a streamed request's event asks for the answer only: %v", evs)
		}
	})

	t.Run("input items and pictures", func(t *testing.T) {
		image := responses.ResponseInputContentParamOfInputImage(responses.ResponseInputImageDetailAuto)
		image.OfInputImage.ImageURL = openai.String("data:image/png;base64,iVBORw0KGgo=")
		web := responses.ResponseInputContentParamOfInputImage(responses.ResponseInputImageDetailAuto)
		web.OfInputImage.ImageURL = openai.String("https://example.test/cat.png")
		resp, err := client.Responses.New(ctx, responses.ResponseNewParams{Model: "switchboard", Input: responses.ResponseNewParamsInputUnion{
			OfInputItemList: responses.ResponseInputParam{
				responses.ResponseInputItemParamOfMessage("be kind", responses.EasyInputMessageRoleDeveloper),
				responses.ResponseInputItemParamOfMessage("earlier", responses.EasyInputMessageRoleUser),
				responses.ResponseInputItemParamOfMessage("earlier answer", responses.EasyInputMessageRoleAssistant),
				responses.ResponseInputItemParamOfMessage(responses.ResponseInputMessageContentListParam{
					responses.ResponseInputContentParamOfInputText("what is this?"), image, web,
				}, responses.EasyInputMessageRoleUser),
			},
		}})
		if err != nil {
			t.Fatal(err)
		}
		if resp.OutputText() != "echo: what is this? (turn 1)" {
			t.Fatalf("answer %q", resp.OutputText())
		}
		evs := r.received()
		ev := evs[len(evs)-1]
		var ctxs []string
		for _, c := range ev.GetContext() {
			ctxs = append(ctxs, c.GetRole()+":"+c.GetContent())
		}
		if got := strings.Join(ctxs, ","); got != "system:be kind,user:earlier,assistant:earlier answer" {
			t.Fatalf("context %s", got)
		}
		// The inline picture is kept in the attachment store, the web one
		// is fetched by whoever reads it.
		if a := ev.GetAttachments(); len(a) != 2 || a[0].GetBytesRef() == "" || a[0].GetMimeType() != "image/png" ||
			a[1].GetUrl() != "https://example.test/cat.png" || a[1].GetKind() != eventsv1.AttachmentKind_ATTACHMENT_KIND_IMAGE {
			t.Fatalf("attachments %v", a)
		}
		bad := responses.ResponseInputContentParamOfInputImage(responses.ResponseInputImageDetailAuto)
		bad.OfInputImage.ImageURL = openai.String("data:text/html;base64,PGI+")
		_, err = client.Responses.New(ctx, responses.ResponseNewParams{Model: "switchboard", Input: responses.ResponseNewParamsInputUnion{
			OfInputItemList: responses.ResponseInputParam{responses.ResponseInputItemParamOfMessage(
				responses.ResponseInputMessageContentListParam{bad}, responses.EasyInputMessageRoleUser)},
		}})
		// As Hermes refuses it (_normalize_multimodal_content).
		if e := sdkErrorOf(t, err); e.StatusCode != http.StatusBadRequest || e.Code != "unsupported_content_type" ||
			e.Message != "Only image data URLs are supported. Non-image data payloads are not supported." || e.Param != "input[0].content" {
			t.Fatalf("a data URL that is no picture: %d %s %q %q", e.StatusCode, e.Code, e.Message, e.Param)
		}
	})
}

// previous_response_id and conversation continue a conversation on the
// server; without them every request is a conversation of its own.
func TestResponsesContinueConversations(t *testing.T) {
	t.Parallel()
	b := newBus(t)
	s := startService(t, b, nil)
	r := startResponder(t, b)
	r.listens()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	client := sdkClient(s)
	ask := func(t *testing.T, params responses.ResponseNewParams) *responses.Response {
		t.Helper()
		params.Model = "switchboard"
		resp, err := client.Responses.New(ctx, params)
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}

	t.Run("previous_response_id", func(t *testing.T) {
		first := ask(t, responses.ResponseNewParams{Input: inputText("one")})
		if got := first.OutputText(); got != "heard: one" {
			t.Fatalf("first %q", got)
		}
		second := ask(t, responses.ResponseNewParams{Input: inputText("two"), PreviousResponseID: openai.String(first.ID)})
		if got := second.OutputText(); got != "heard: one | two" {
			t.Fatalf("second %q: want the first exchange seen", got)
		}
		if second.PreviousResponseID != first.ID {
			t.Fatalf("previous_response_id %q", second.PreviousResponseID)
		}
		// Streamed, and chained on the streamed one.
		_, _, third := streamEvents(ctx, t, client, responses.ResponseNewParams{Model: "switchboard", Input: inputText("three"), PreviousResponseID: openai.String(second.ID)})
		if got := third.OutputText(); got != "heard: one | two | three" {
			t.Fatalf("third %q", got)
		}
		fourth := ask(t, responses.ResponseNewParams{Input: inputText("four"), PreviousResponseID: openai.String(third.ID)})
		if got := fourth.OutputText(); got != "heard: one | two | three | four" {
			t.Fatalf("fourth %q", got)
		}
		// The chained requests name the first one's conversation.
		evs := r.received()
		session := evs[len(evs)-4].GetSource().GetChatId()
		for _, ev := range evs[len(evs)-3:] {
			if ev.GetClientSessionId() != session || ev.GetSource().GetChatId() != session {
				t.Fatalf("chained request in %q/%q, want %q", ev.GetClientSessionId(), ev.GetSource().GetChatId(), session)
			}
		}
	})

	t.Run("conversation", func(t *testing.T) {
		conv := responses.ResponseNewParamsConversationUnion{OfString: openai.String("project-7")}
		if got := ask(t, responses.ResponseNewParams{Input: inputText("a"), Conversation: conv}).OutputText(); got != "heard: a" {
			t.Fatalf("first %q", got)
		}
		resp := ask(t, responses.ResponseNewParams{Input: inputText("b"), Conversation: responses.ResponseNewParamsConversationUnion{
			OfConversationObject: &responses.ResponseConversationParam{ID: "project-7"}}})
		if got := resp.OutputText(); got != "heard: a | b" || resp.Conversation.ID != "project-7" {
			t.Fatalf("second %q in %q", got, resp.Conversation.ID)
		}
		// The name is the conversation's X-Session-Id, for chat completions too.
		withSession := sdkClient(s, option.WithHeader(HeaderSession, "project-7"))
		chat, err := withSession.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{
			Model: "switchboard", Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("c")}})
		if err != nil {
			t.Fatal(err)
		}
		if got := chat.Choices[0].Message.Content; got != "heard: a | b | c" {
			t.Fatalf("chat completion in the conversation: %q", got)
		}
		// And chaining on a response of the conversation continues it.
		if got := ask(t, responses.ResponseNewParams{Input: inputText("d"), PreviousResponseID: openai.String(resp.ID)}).OutputText(); got != "heard: a | b | c | d" {
			t.Fatalf("chained %q", got)
		}
	})

	t.Run("stateless", func(t *testing.T) {
		for _, q := range []string{"x", "y"} {
			if got := ask(t, responses.ResponseNewParams{Input: inputText(q)}).OutputText(); got != "heard: "+q {
				t.Fatalf("stateless %q: %q", q, got)
			}
		}
		// A stateless request carries its conversation itself.
		got := ask(t, responses.ResponseNewParams{Input: responses.ResponseNewParamsInputUnion{OfInputItemList: responses.ResponseInputParam{
			responses.ResponseInputItemParamOfMessage("p", responses.EasyInputMessageRoleUser),
			responses.ResponseInputItemParamOfMessage("heard: p", responses.EasyInputMessageRoleAssistant),
			responses.ResponseInputItemParamOfMessage("q", responses.EasyInputMessageRoleUser),
		}}}).OutputText()
		if got != "heard: p | q" {
			t.Fatalf("stateless with history %q", got)
		}
	})
}

// Hermes's conversation_history: a client that keeps its conversation
// itself sends its earlier messages along, and they are the turn's
// context (after the instructions, before the input's other items). It
// wins over previous_response_id, which is then neither continued nor
// read, as in Hermes (api_server.py, _handle_responses).
func TestResponsesTakeConversationHistory(t *testing.T) {
	t.Parallel()
	b := newBus(t)
	s := startService(t, b, nil)
	r := startResponder(t, b)
	r.listens()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	client := sdkClient(s)
	history := func(msgs ...string) option.RequestOption {
		var h []map[string]string
		for i, m := range msgs {
			role := "user"
			if i%2 == 1 {
				role = "assistant"
			}
			h = append(h, map[string]string{"role": role, "content": m})
		}
		return option.WithJSONSet("conversation_history", h)
	}
	contextOf := func(ev *eventsv1.MessageReceived) string {
		var out []string
		for _, c := range ev.GetContext() {
			out = append(out, c.GetRole()+":"+c.GetContent())
		}
		return strings.Join(out, ",")
	}

	resp, err := client.Responses.New(ctx, responses.ResponseNewParams{Model: "switchboard", Input: inputText("now"), Instructions: openai.String("be brief")},
		history("before", "heard: before"))
	if err != nil {
		t.Fatal(err)
	}
	if got := resp.OutputText(); got != "heard: before | now" {
		t.Fatalf("answer %q: want the history seen", got)
	}
	evs := r.received()
	if got := contextOf(evs[len(evs)-1]); got != "system:be brief,user:before,assistant:heard: before" {
		t.Fatalf("context %s", got)
	}

	first, err := client.Responses.New(ctx, responses.ResponseNewParams{Model: "switchboard", Input: inputText("one")})
	if err != nil {
		t.Fatal(err)
	}
	for _, previous := range []string{first.ID, "resp_unknown"} {
		resp, err := client.Responses.New(ctx, responses.ResponseNewParams{Model: "switchboard", Input: inputText("two"), PreviousResponseID: openai.String(previous)},
			history("h1", "a1"))
		if err != nil {
			t.Fatalf("previous %s: %v", previous, err)
		}
		if got := resp.OutputText(); got != "heard: h1 | two" || resp.PreviousResponseID != "" {
			t.Fatalf("previous %s: %q continuing %q, want the history's conversation alone", previous, got, resp.PreviousResponseID)
		}
	}

	for _, c := range []struct {
		history any
		param   string
	}{
		{"before", "conversation_history"},
		{[]any{map[string]string{"role": "user"}}, "conversation_history[0]"},
		{[]any{"before"}, "conversation_history[0]"},
	} {
		_, err := client.Responses.New(ctx, responses.ResponseNewParams{Model: "switchboard", Input: inputText("x")},
			option.WithJSONSet("conversation_history", c.history))
		if e := sdkErrorOf(t, err); e.StatusCode != http.StatusBadRequest || e.Param != c.param {
			t.Errorf("history %v: %d %q, want 400 at %s", c.history, e.StatusCode, e.Param, c.param)
		}
	}
}

// A request naming its conversation (conversation, or the X-Session-Id
// header, which names one the same way) without instructions of its own
// takes those of the conversation's latest response, as Hermes resolves
// a conversation to its latest response and carries its instructions
// forward (api_server.py, _handle_responses); its own, even "", replace
// them. A conversation_history, a new conversation or a latest response
// not kept (store: false) carries none.
func TestResponsesCarryTheInstructionsOfTheirConversation(t *testing.T) {
	t.Parallel()
	b := newBus(t)
	s := startService(t, b, nil)
	r := startResponder(t, b)
	for i, c := range []struct {
		body, header, context string
	}{
		{`{"input":"one","conversation":"c-1","instructions":"be brief"}`, "", "system:be brief"},
		{`{"input":"two","conversation":"c-1"}`, "", "system:be brief"},
		{`{"input":"three","conversation":{"id":"c-1"},"instructions":null}`, "", "system:be brief"},
		{`{"input":"four","conversation":"c-1","instructions":"be kind"}`, "", "system:be kind"},
		{`{"input":"five","conversation":"c-1"}`, "", "system:be kind"},
		{`{"input":"six","conversation":"c-1","conversation_history":[{"role":"user","content":"h"}]}`, "", "user:h"},
		{`{"input":"seven","conversation":"c-1","instructions":""}`, "", ""},
		{`{"input":"one","instructions":"be brief"}`, "c-2", "system:be brief"},
		{`{"input":"two"}`, "c-2", "system:be brief"},
		{`{"input":"one"}`, "c-3", ""},
		{`{"input":"one","conversation":"c-4","instructions":"be brief","store":false}`, "", "system:be brief"},
		{`{"input":"two","conversation":"c-4"}`, "", ""},
	} {
		var headers map[string]string
		if c.header != "" {
			headers = map[string]string{HeaderSession: c.header}
		}
		if res := do(t, http.MethodPost, "http://"+s.Addr()+"/v1/responses", testKey, c.body, headers); res.code != http.StatusOK {
			t.Fatalf("%s: %d %s", c.body, res.code, res.body)
		}
		evs := r.received()
		if len(evs) != i+1 {
			t.Fatalf("%s: %d messages, want %d", c.body, len(evs), i+1)
		}
		var ctx []string
		for _, m := range evs[i].GetContext() {
			ctx = append(ctx, m.GetRole()+":"+m.GetContent())
		}
		if got := strings.Join(ctx, ","); got != c.context {
			t.Errorf("%s (%s): context %q, want %q", c.body, c.header, got, c.context)
		}
	}
}

// A response not kept (store: false) leaves its conversation carrying
// the instructions of the latest response kept, as Hermes, whose
// conversation then still names that one: the next request without
// instructions takes them, and a retry of the request not kept (the
// same Idempotency-Key) carries what its first attempt carried and gets
// its answer, not a refusal of the key.
func TestResponsesCarryInstructionsPastAResponseNotKept(t *testing.T) {
	t.Parallel()
	b := newBus(t)
	s := startService(t, b, nil)
	r := startResponder(t, b)
	url := "http://" + s.Addr() + "/v1/responses"
	n := 0 // messages sent
	for i, c := range []struct {
		body, key, context string
	}{
		{`{"input":"one","conversation":"c-1","instructions":"be brief"}`, "", "system:be brief"},
		{`{"input":"two","conversation":"c-1","store":false}`, "", "system:be brief"},
		{`{"input":"three","conversation":"c-1"}`, "", "system:be brief"},
		{`{"input":"four","conversation":"c-1","instructions":"be kind","store":false}`, "", "system:be kind"},
		{`{"input":"five","conversation":"c-1"}`, "", "system:be brief"},
		{`{"input":"one","conversation":"c-2","instructions":"be brief"}`, "", "system:be brief"},
		{`{"input":"two","conversation":"c-2","store":false}`, "k-2", "system:be brief"},
		{`{"input":"two","conversation":"c-2","store":false}`, "k-2", ""},
		{`{"input":"three","conversation":"c-2"}`, "", "system:be brief"},
		// A retry after the conversation went on under other instructions.
		{`{"input":"one","conversation":"c-4","instructions":"be brief"}`, "", "system:be brief"},
		{`{"input":"two","conversation":"c-4"}`, "k-4", "system:be brief"},
		{`{"input":"three","conversation":"c-4","instructions":"be kind"}`, "", "system:be kind"},
		{`{"input":"two","conversation":"c-4"}`, "k-4", ""},
	} {
		var headers map[string]string
		if c.key != "" {
			headers = map[string]string{HeaderIdempotencyKey: c.key}
		}
		res := do(t, http.MethodPost, url, testKey, c.body, headers)
		if res.code != http.StatusOK {
			t.Fatalf("%d %s: %d %s", i, c.body, res.code, res.body)
		}
		if c.context == "" {
			continue // a retry: its message went out once
		}
		n++
		evs := r.received()
		if len(evs) != n {
			t.Fatalf("%s: %d messages, want %d", c.body, len(evs), n)
		}
		var ctx []string
		for _, m := range evs[n-1].GetContext() {
			ctx = append(ctx, m.GetRole()+":"+m.GetContent())
		}
		if got := strings.Join(ctx, ","); got != c.context {
			t.Errorf("%s: context %q, want %q", c.body, got, c.context)
		}
	}
	// The same after a response not kept that continued one by its id.
	header := map[string]string{HeaderSession: "c-3"}
	res := do(t, http.MethodPost, url, testKey, `{"input":"one","instructions":"be brief"}`, header)
	var first struct{ ID string }
	if res.code != http.StatusOK || json.Unmarshal(res.body, &first) != nil {
		t.Fatalf("%d %s", res.code, res.body)
	}
	if res := do(t, http.MethodPost, url, testKey, `{"input":"two","store":false,"previous_response_id":"`+first.ID+`"}`, nil); res.code != http.StatusOK {
		t.Fatalf("%d %s", res.code, res.body)
	}
	if res := do(t, http.MethodPost, url, testKey, `{"input":"three"}`, header); res.code != http.StatusOK {
		t.Fatalf("%d %s", res.code, res.body)
	}
	evs := r.received()
	if ctx := evs[len(evs)-1].GetContext(); len(ctx) != 1 || ctx[0].GetContent() != "be brief" || evs[len(evs)-2].GetClientSessionId() != "c-3" {
		t.Errorf("after a response not kept continuing one by its id: context %v", ctx)
	}
}

// truncation "auto" is taken, and the response says which it was: its
// context is cut to the latest 100 messages as Hermes cuts it
// (openai.TestResponsesTruncation), here 101 history entries, and its
// message carries the limit of 100 (context_limit), for the worker to
// cut the conversation kept on the server with it, as Hermes cuts the
// stored conversation_history of previous_response_id too.
func TestResponsesTruncationAuto(t *testing.T) {
	t.Parallel()
	b := newBus(t)
	s := startService(t, b, nil)
	r := startResponder(t, b)
	history := make([]string, 101)
	for i := range history {
		history[i] = fmt.Sprintf(`{"role":"user","content":"h%d"}`, i)
	}
	for i, c := range []struct {
		truncation, want, first string
		limit                   int32
	}{
		{`,"truncation":"auto"`, "auto", "h1", 100},
		{`,"truncation":"disabled"`, "disabled", "h0", 0},
		{``, "disabled", "h0", 0},
	} {
		res := do(t, http.MethodPost, "http://"+s.Addr()+"/v1/responses", testKey,
			`{"input":"now","conversation_history":[`+strings.Join(history, ",")+`]`+c.truncation+`}`, nil)
		var o struct {
			Truncation string `json:"truncation"`
		}
		if res.code != http.StatusOK || json.Unmarshal(res.body, &o) != nil || o.Truncation != c.want {
			t.Fatalf("%s: %d %s, want truncation %q", c.truncation, res.code, res.body, c.want)
		}
		evs := r.received()
		if len(evs) != i+1 || evs[i].GetContext()[0].GetContent() != c.first {
			t.Fatalf("%s: context from %v, want from %s", c.truncation, evs[i].GetContext()[0], c.first)
		}
		if got := evs[i].GetContextLimit(); got != c.limit {
			t.Errorf("%s: the message's context limit %d, want %d", c.truncation, got, c.limit)
		}
	}
	// Continuing a kept conversation (previous_response_id), the message
	// carries the limit alike: what is cut is kept on the server.
	first := do(t, http.MethodPost, "http://"+s.Addr()+"/v1/responses", testKey, `{"input":"a"}`, nil)
	var o struct {
		ID string `json:"id"`
	}
	if first.code != http.StatusOK || json.Unmarshal(first.body, &o) != nil {
		t.Fatalf("%d %s", first.code, first.body)
	}
	for _, c := range []struct {
		truncation string
		limit      int32
	}{{`,"truncation":"auto"`, 100}, {``, 0}} {
		res := do(t, http.MethodPost, "http://"+s.Addr()+"/v1/responses", testKey,
			`{"input":"b","previous_response_id":"`+o.ID+`"`+c.truncation+`}`, nil)
		if res.code != http.StatusOK || json.Unmarshal(res.body, &o) != nil {
			t.Fatalf("%s: %d %s", c.truncation, res.code, res.body)
		}
		evs := r.received()
		if got := evs[len(evs)-1].GetContextLimit(); got != c.limit {
			t.Errorf("continuing%s: the message's context limit %d, want %d", c.truncation, got, c.limit)
		}
	}
}

// A kept response is the client's to read and delete; store: false keeps
// none; another client sees none.
func TestResponsesAreKeptForTheirClient(t *testing.T) {
	t.Parallel()
	const alice, bob = "alice-key-0123456789abcdef", "bob-key-0123456789abcdefgh"
	b := newBus(t)
	s := startService(t, b, func(c *Config) { c.Keys = map[string]string{"alice": alice, "bob": bob} })
	startResponder(t, b)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	client := sdkClient(s, option.WithAPIKey(alice))
	other := sdkClient(s, option.WithAPIKey(bob))
	notFound := func(t *testing.T, what string, err error, code string) {
		t.Helper()
		if e := sdkErrorOf(t, err); e.StatusCode != http.StatusNotFound || e.Code != code {
			t.Fatalf("%s: %d %q, want 404 %s", what, e.StatusCode, e.Code, code)
		}
	}
	// As OpenAI answers a chain on a response it does not have: 400, which
	// clients catch to send the conversation again.
	noPrevious := func(t *testing.T, what string, err error) {
		t.Helper()
		if e := sdkErrorOf(t, err); e.StatusCode != http.StatusBadRequest || e.Code != "previous_response_not_found" || e.Param != "previous_response_id" {
			t.Fatalf("%s: %d %q %q, want 400 previous_response_not_found", what, e.StatusCode, e.Code, e.Param)
		}
	}

	resp, err := client.Responses.New(ctx, responses.ResponseNewParams{Model: "switchboard", Input: inputText("keep me")})
	if err != nil {
		t.Fatal(err)
	}
	got, err := client.Responses.Get(ctx, resp.ID, responses.ResponseGetParams{})
	if err != nil {
		t.Fatal(err)
	}
	if got.ID != resp.ID || got.OutputText() != resp.OutputText() || got.Status != responses.ResponseStatusCompleted || got.Usage.TotalTokens != resp.Usage.TotalTokens {
		t.Fatalf("got %+v, want %+v", got, resp)
	}

	_, err = other.Responses.Get(ctx, resp.ID, responses.ResponseGetParams{})
	notFound(t, "another client's get", err, "response_not_found")
	notFound(t, "another client's delete", other.Responses.Delete(ctx, resp.ID), "response_not_found")
	_, err = other.Responses.New(ctx, responses.ResponseNewParams{Model: "switchboard", Input: inputText("mine?"), PreviousResponseID: openai.String(resp.ID)})
	noPrevious(t, "another client's chain", err)

	if err := client.Responses.Delete(ctx, resp.ID); err != nil {
		t.Fatal(err)
	}
	_, err = client.Responses.Get(ctx, resp.ID, responses.ResponseGetParams{})
	notFound(t, "get after delete", err, "response_not_found")
	notFound(t, "delete after delete", client.Responses.Delete(ctx, resp.ID), "response_not_found")
	_, err = client.Responses.New(ctx, responses.ResponseNewParams{Model: "switchboard", Input: inputText("again"), PreviousResponseID: openai.String(resp.ID)})
	noPrevious(t, "chain on a deleted response", err)

	unkept, err := client.Responses.New(ctx, responses.ResponseNewParams{Model: "switchboard", Input: inputText("forget me"), Store: openai.Bool(false)})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(unkept.RawJSON(), `"store":false`) || unkept.OutputText() != "echo: forget me (turn 1)" {
		t.Fatalf("store: false answered %s", unkept.RawJSON())
	}
	_, err = client.Responses.Get(ctx, unkept.ID, responses.ResponseGetParams{})
	notFound(t, "get of store: false", err, "response_not_found")
	_, err = client.Responses.New(ctx, responses.ResponseNewParams{Model: "switchboard", Input: inputText("on"), PreviousResponseID: openai.String(unkept.ID)})
	noPrevious(t, "chain on store: false", err)
}

// A failed turn: a plain request gets the error, a stream ends with
// response.failed, and the kept response says so.
func TestResponsesOfFailedTurns(t *testing.T) {
	t.Parallel()
	b := newBus(t)
	s := startService(t, b, nil)
	r := startResponder(t, b)
	r.mu.Lock()
	r.failure = "rate_limited"
	r.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	client := sdkClient(s)

	var hdr *http.Response
	_, err := client.Responses.New(ctx, responses.ResponseNewParams{Model: "switchboard", Input: inputText("hi")}, option.WithResponseInto(&hdr))
	if e := sdkErrorOf(t, err); e.StatusCode != http.StatusTooManyRequests || e.Code != "rate_limit_exceeded" || !strings.HasPrefix(e.Message, "The AI service is busy") {
		t.Fatalf("failed turn: %d %q %q", e.StatusCode, e.Code, e.Message)
	}
	// The turn streamed text before it failed: the stream closes the
	// message item, incomplete, before response.failed, and the failed
	// response's output holds it.
	types, _, failed := streamEvents(ctx, t, client, responses.ResponseNewParams{Model: "switchboard", Input: inputText("hi")})
	want := []string{"response.created", "response.in_progress", "response.output_item.added", "response.content_part.added",
		"response.output_text.delta", "response.output_text.delta", "response.output_text.delta",
		"response.output_text.done", "response.content_part.done", "response.output_item.done", "response.failed"}
	if strings.Join(types, ",") != strings.Join(want, ",") {
		t.Fatalf("events\n%s\nwant\n%s", strings.Join(types, "\n"), strings.Join(want, "\n"))
	}
	if failed.Status != responses.ResponseStatusFailed || failed.Error.Code != "rate_limit_exceeded" {
		t.Fatalf("stream ended with %+v", failed)
	}
	shown := func(what string, o *responses.Response) {
		t.Helper()
		if len(o.Output) != 1 || o.Output[0].Status != "incomplete" || o.OutputText() != "echo: hi (turn 1)" {
			t.Fatalf("%s output %+v, want the incomplete message shown", what, o.Output)
		}
	}
	shown("failed", &failed)
	kept, err := client.Responses.Get(ctx, failed.ID, responses.ResponseGetParams{})
	if err != nil || kept.Status != responses.ResponseStatusFailed || !strings.HasPrefix(kept.Error.Message, "The AI service is busy") {
		t.Fatalf("kept %+v %v", kept, err)
	}
	shown("kept", kept)
}

// A response with an Idempotency-Key is one message and one response
// however often it is sent; the key cannot be reused for a chat
// completion.
func TestResponsesWithAnIdempotencyKey(t *testing.T) {
	t.Parallel()
	b := newBus(t)
	s := startService(t, b, nil)
	startResponder(t, b)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	client := sdkClient(s, option.WithHeader(HeaderIdempotencyKey, "order-1"))
	params := responses.ResponseNewParams{Model: "switchboard", Input: inputText("once")}
	first, err := client.Responses.New(ctx, params)
	if err != nil {
		t.Fatal(err)
	}
	again, err := client.Responses.New(ctx, params)
	if err != nil {
		t.Fatal(err)
	}
	if first.ID != again.ID || again.OutputText() != "echo: once (turn 1)" {
		t.Fatalf("retry %s %q, want %s %q", again.ID, again.OutputText(), first.ID, first.OutputText())
	}
	if n := inboundCount(t, b); n != 1 {
		t.Fatalf("%d messages published, want 1", n)
	}
	// The key for another request is refused, and the kept response
	// stays the first one's.
	_, err = client.Responses.New(ctx, responses.ResponseNewParams{Model: "switchboard", Input: inputText("twice")})
	if e := sdkErrorOf(t, err); e.StatusCode != http.StatusUnprocessableEntity || e.Code != "idempotency_key_reused" {
		t.Fatalf("the key for another input: %d %q", e.StatusCode, e.Code)
	}
	if kept, err := client.Responses.Get(ctx, first.ID, responses.ResponseGetParams{}); err != nil || kept.OutputText() != "echo: once (turn 1)" ||
		kept.Status != responses.ResponseStatusCompleted {
		t.Fatalf("kept %+v %v", kept, err)
	}
	_, err = client.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{Model: "switchboard", Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("once")}})
	if e := sdkErrorOf(t, err); e.StatusCode != http.StatusUnprocessableEntity || e.Code != "idempotency_key_reused" {
		t.Fatalf("the key on a chat completion: %d %q", e.StatusCode, e.Code)
	}
}

func TestResponsesBadRequests(t *testing.T) {
	t.Parallel()
	b := newBus(t)
	s := startService(t, b, func(c *Config) { c.MaxBodyBytes = 4096 })
	startResponder(t, b)
	base := "http://" + s.Addr() + "/v1/responses"
	kept := do(t, "POST", base, testKey, `{"model":"m","input":"keep"}`, nil)
	var resp responseObject
	if err := json.Unmarshal(kept.body, &resp); kept.code != 200 || err != nil {
		t.Fatalf("a response to chain on: %d %s", kept.code, kept.body)
	}
	item := func(content string) string { return `{"input":[{"role":"user","content":` + content + `}]}` }
	cases := []struct {
		name    string
		method  string
		url     string
		key     string
		body    string
		headers map[string]string
		status  int
		code    string
		param   string
	}{
		{"no key", "POST", base, "", `{"input":"hi"}`, nil, 401, "invalid_api_key", ""},
		{"get without key", "GET", base + "/" + resp.ID, "", "", nil, 401, "invalid_api_key", ""},
		{"delete without key", "DELETE", base + "/" + resp.ID, "", "", nil, 401, "invalid_api_key", ""},
		{"malformed json", "POST", base, testKey, `{"input":`, nil, 400, "invalid_request", ""},
		{"data after the json", "POST", base, testKey, `{"input":"a"} {}`, nil, 400, "invalid_request", ""},
		{"no input", "POST", base, testKey, `{"model":"m"}`, nil, 400, "invalid_request", "input"},
		{"empty input", "POST", base, testKey, `{"input":"  "}`, nil, 400, "invalid_request", "input"},
		{"empty input list", "POST", base, testKey, `{"input":[]}`, nil, 400, "invalid_request", "input"},
		{"input of another type", "POST", base, testKey, `{"input":12}`, nil, 400, "invalid_request", "input"},
		{"wrong field type", "POST", base, testKey, `{"input":"a","model":5}`, nil, 400, "invalid_request", "model"},
		{"no message", "POST", base, testKey, `{"input":[7,null]}`, nil, 400, "invalid_request", "input"},
		{"unknown role's file", "POST", base, testKey, `{"input":[{"role":"robot","content":[{"type":"input_file","file_id":"f"}]},"q"]}`, nil, 400, "unsupported_content_type", "input[0].content[0].type"},
		{"tool output item", "POST", base, testKey, `{"input":[{"type":"function_call_output","call_id":"c","output":"4"}]}`, nil, 400, "unsupported_content_type", "input[0].type"},
		{"file part", "POST", base, testKey, item(`[{"type":"input_file","file_id":"file-1"}]`), nil, 400, "unsupported_content_type", "input[0].content[0].type"},
		{"uploaded picture", "POST", base, testKey, item(`[{"type":"input_image","file_id":"file-1"}]`), nil, 400, "invalid_image_url", "input[0].content"},
		{"picture by an id that is no string", "POST", base, testKey, item(`[{"type":"input_image","file_id":5}]`), nil, 400, "invalid_image_url", "input[0].content"},
		{"not a picture", "POST", base, testKey, item(`[{"type":"input_image","image_url":"data:text/html;base64,PGI+"}]`), nil, 400, "unsupported_content_type", "input[0].content"},
		{"broken base64", "POST", base, testKey, item(`[{"type":"input_image","image_url":"data:image/png;base64,@@@@"}]`), nil, 400, "invalid_image_url", "input[0].content"},
		{"tools", "POST", base, testKey, `{"input":"a","tools":[{"type":"function","name":"f"}]}`, nil, 400, "unsupported_parameter", "tools"},
		{"tool choice", "POST", base, testKey, `{"input":"a","tool_choice":"required"}`, nil, 400, "unsupported_parameter", "tool_choice"},
		{"background", "POST", base, testKey, `{"input":"a","background":true}`, nil, 400, "unsupported_parameter", "background"},
		{"structured output", "POST", base, testKey, `{"input":"a","text":{"format":{"type":"json_schema","name":"x","schema":{}}}}`, nil, 400, "unsupported_parameter", "text.format"},
		{"prompt template", "POST", base, testKey, `{"input":"a","prompt":{"id":"pmpt_1"}}`, nil, 400, "unsupported_parameter", "prompt"},
		{"conversation and previous", "POST", base, testKey, `{"input":"a","conversation":"c","previous_response_id":"` + resp.ID + `"}`, nil, 400, "invalid_request", "conversation"},
		{"conversation name", "POST", base, testKey, `{"input":"a","conversation":"a b"}`, nil, 400, "invalid_session_id", "conversation"},
		{"conversation and header", "POST", base, testKey, `{"input":"a","conversation":"c"}`, map[string]string{HeaderSession: "d"}, 400, "invalid_request", "conversation"},
		{"previous and header", "POST", base, testKey, `{"input":"a","previous_response_id":"` + resp.ID + `"}`, map[string]string{HeaderSession: "d"}, 400, "invalid_request", "previous_response_id"},
		{"bad session header", "POST", base, testKey, `{"input":"a"}`, map[string]string{HeaderSession: "a:b"}, 400, "invalid_session_id", HeaderSession},
		{"too many metadata", "POST", base, testKey, `{"input":"a","metadata":{` + metadataPairs(17) + `}}`, nil, 400, "invalid_request", "metadata"},
		{"metadata value too long", "POST", base, testKey, `{"input":"a","metadata":{"k":"` + strings.Repeat("v", 513) + `"}}`, nil, 400, "invalid_request", "metadata"},
		{"metadata key too long", "POST", base, testKey, `{"input":"a","metadata":{"` + strings.Repeat("k", 65) + `":"v"}}`, nil, 400, "invalid_request", "metadata"},
		{"unknown previous", "POST", base, testKey, `{"input":"a","previous_response_id":"resp_nothing"}`, nil, 400, "previous_response_not_found", "previous_response_id"},
		{"previous that is no id", "POST", base, testKey, `{"input":"a","previous_response_id":"` + strings.Repeat("x", 300) + `"}`, nil, 400, "previous_response_not_found", "previous_response_id"},
		{"too large", "POST", base, testKey, `{"input":"` + strings.Repeat("x", 5000) + `"}`, nil, 413, "body_too_large", ""},
		{"get unknown", "GET", base + "/resp_nothing", testKey, "", nil, 404, "response_not_found", ""},
		{"get no id", "GET", base + "/chatcmpl-1", testKey, "", nil, 404, "response_not_found", ""},
		{"get streamed", "GET", base + "/" + resp.ID + "?stream=true", testKey, "", nil, 400, "unsupported_parameter", "stream"},
		{"delete unknown", "DELETE", base + "/resp_nothing", testKey, "", nil, 404, "response_not_found", ""},
		{"input items list", "GET", base + "/" + resp.ID + "/input_items", testKey, "", nil, 404, "unknown_url", ""},
	}
	before := inboundCount(t, b)
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := do(t, c.method, c.url, c.key, c.body, c.headers)
			if r.code != c.status {
				t.Fatalf("status %d, want %d (%s)", r.code, c.status, r.body)
			}
			var e apiError
			if err := json.Unmarshal(r.body, &e); err != nil || e.Error.Message == "" || e.Error.Type == "" {
				t.Fatalf("body %q is not an OpenAI error", r.body)
			}
			if code := deref(e.Error.Code); code != c.code {
				t.Fatalf("code %q, want %q (%s)", code, c.code, e.Error.Message)
			}
			if param := deref(e.Error.Param); param != c.param {
				t.Fatalf("param %q, want %q (%s)", param, c.param, e.Error.Message)
			}
		})
	}
	if n := inboundCount(t, b); n != before {
		t.Errorf("%d messages published for bad requests", n-before)
	}

	// Parameters that only tune the model, describe the caller or are
	// empty are taken.
	for _, body := range []string{
		`{"input":"a","temperature":0.3,"top_p":0.9,"max_output_tokens":100,"user":"u","metadata":{"k":"v"},"reasoning":{"effort":"low"}}`,
		`{"input":"a","tools":[],"tool_choice":"auto","parallel_tool_calls":false,"truncation":"auto","include":["message.output_text.logprobs"]}`,
		`{"input":"a","text":{"format":{"type":"text"}},"store":true,"stream_options":null,"prompt_cache_key":"x","service_tier":"auto"}`,
		`{"input":["a bare string is a user message"]}`,
		`{"input":"a","metadata":{` + metadataPairs(16) + `}}`,
	} {
		if r := do(t, "POST", base, testKey, body, nil); r.code != 200 {
			t.Errorf("%s: %d %s", body, r.code, r.body)
		}
	}
}

// metadataPairs is n metadata pairs, as JSON object members.
func metadataPairs(n int) string {
	pairs := make([]string, n)
	for i := range pairs {
		pairs[i] = fmt.Sprintf(`"k%d":"v"`, i)
	}
	return strings.Join(pairs, ",")
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

// A response whose answer does not come in time is incomplete: the
// plain request gets 504, the stream response.incomplete, and the kept
// response says why.
func TestResponsesWithoutAnAnswerInTime(t *testing.T) {
	t.Parallel()
	b := newBus(t)
	s := startService(t, b, func(c *Config) { c.ReplyTimeout = 300 * time.Millisecond })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	client := sdkClient(s)
	_, err := client.Responses.New(ctx, responses.ResponseNewParams{Model: "switchboard", Input: inputText("hello?")})
	if e := sdkErrorOf(t, err); e.StatusCode != http.StatusGatewayTimeout || e.Code != "timeout" {
		t.Fatalf("%d %q", e.StatusCode, e.Code)
	}
	types, _, last := streamEvents(ctx, t, client, responses.ResponseNewParams{Model: "switchboard", Input: inputText("hello?")})
	if strings.Join(types, ",") != "response.created,response.in_progress,response.incomplete" ||
		last.Status != responses.ResponseStatusIncomplete || last.IncompleteDetails.Reason != "timeout" {
		t.Fatalf("events %v, last %+v", types, last)
	}
	kept, err := client.Responses.Get(ctx, last.ID, responses.ResponseGetParams{})
	if err != nil || kept.Status != responses.ResponseStatusIncomplete {
		t.Fatalf("kept %+v %v", kept, err)
	}
	// Its conversation can still be continued (the answer may come later).
	_, err = client.Responses.New(ctx, responses.ResponseNewParams{Model: "switchboard", Input: inputText("still there?"), PreviousResponseID: openai.String(last.ID)})
	if e := sdkErrorOf(t, err); e.StatusCode != http.StatusGatewayTimeout {
		t.Fatalf("chained on an incomplete response: %d %q", e.StatusCode, e.Code)
	}
	if n := inboundCount(t, b); n != 3 {
		t.Fatalf("%d messages published, want 3", n)
	}
}
