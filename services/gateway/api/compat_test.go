package api

import (
	"context"
	"errors"
	"net/http"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/responses"

	"github.com/switchboard-chat/switchboard/pkg/bus"
	eventsv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/events/v1"
)

// What the official client sends that the agent cannot take is refused
// with OpenAI's error, which the client raises, and nothing runs: a file
// or audio part (as Hermes refuses it, rather than answering without
// it), more than one choice, a tool call the client's code would wait
// for, an answer held to JSON.
func TestSDKRequestsTheAgentCannotAnswer(t *testing.T) {
	t.Parallel()
	b := newBus(t)
	s := startService(t, b, nil)
	r := startResponder(t, b)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	client := sdkClient(s)
	for _, tt := range []struct {
		name   string
		params openai.ChatCompletionNewParams
		code   string
		param  string
	}{
		{"a file part", openai.ChatCompletionNewParams{Model: "switchboard", Messages: []openai.ChatCompletionMessageParamUnion{
			openai.UserMessage([]openai.ChatCompletionContentPartUnionParam{
				openai.TextContentPart("summarise this"),
				openai.FileContentPart(openai.ChatCompletionContentPartFileFileParam{FileID: openai.String("file-abc")}),
			})}}, "unsupported_content_type", "messages[0].content[1].type"},
		{"an audio part", openai.ChatCompletionNewParams{Model: "switchboard", Messages: []openai.ChatCompletionMessageParamUnion{
			openai.UserMessage([]openai.ChatCompletionContentPartUnionParam{
				openai.InputAudioContentPart(openai.ChatCompletionContentPartInputAudioInputAudioParam{Data: "UklGRg==", Format: "wav"}),
			})}}, "unsupported_content_type", "messages[0].content[0].type"},
		{"two choices", openai.ChatCompletionNewParams{Model: "switchboard", N: openai.Int(2),
			Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("hello")}}, "unsupported_parameter", "n"},
		{"a tool call required", openai.ChatCompletionNewParams{Model: "switchboard",
			Tools:      []openai.ChatCompletionToolUnionParam{openai.ChatCompletionFunctionTool(openai.FunctionDefinitionParam{Name: "lookup"})},
			ToolChoice: openai.ChatCompletionToolChoiceOptionUnionParam{OfAuto: openai.String("required")},
			Messages:   []openai.ChatCompletionMessageParamUnion{openai.UserMessage("hello")}}, "unsupported_parameter", "tool_choice"},
		{"a JSON answer", openai.ChatCompletionNewParams{Model: "switchboard",
			ResponseFormat: openai.ChatCompletionNewParamsResponseFormatUnion{OfJSONObject: &openai.ResponseFormatJSONObjectParam{}},
			Messages:       []openai.ChatCompletionMessageParamUnion{openai.UserMessage("hello")}}, "unsupported_parameter", "response_format"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := client.Chat.Completions.New(ctx, tt.params)
			var apiErr *openai.Error
			if !errors.As(err, &apiErr) || apiErr.StatusCode != 400 || apiErr.Code != tt.code || apiErr.Param != tt.param || apiErr.Type != "invalid_request_error" {
				t.Fatalf("error %v, want 400 %s at %s", err, tt.code, tt.param)
			}
		})
	}
	// A picture in the Responses API's spelling is a picture here too.
	resp, err := client.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{Model: "switchboard", N: openai.Int(1),
		Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage([]openai.ChatCompletionContentPartUnionParam{
			openai.TextContentPart("what is it"),
			openai.ImageContentPart(openai.ChatCompletionContentPartImageImageURLParam{URL: "https://example.com/cat.png", Detail: "low"}),
		})}})
	if err != nil || len(resp.Choices) != 1 {
		t.Fatalf("picture: %v", err)
	}
	evs := r.received()
	if len(evs) != 1 || len(evs[0].GetAttachments()) != 1 || evs[0].GetAttachments()[0].GetUrl() != "https://example.com/cat.png" {
		t.Fatalf("published %v: want only the picture's request, with its picture", evs)
	}
}

// A browser page on an allowed origin that calls the gateway through
// OpenAI's client (LobeChat, a page using the SDK) sends the client's own
// headers (X-Stainless-*, OpenAI-Organization …): the preflight allows
// every header it asks for, or the browser never sends the request.
func TestPreflightAllowsTheClientsHeaders(t *testing.T) {
	t.Parallel()
	b := newBus(t)
	s := startService(t, b, func(c *Config) { c.CORSOrigins = []string{"https://ui.example.test"} })
	startResponder(t, b)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// The headers the official client sends, as a browser would name
	// them in its preflight.
	var sent []string
	record := option.WithMiddleware(func(req *http.Request, next option.MiddlewareNext) (*http.Response, error) {
		for k := range req.Header {
			if k != "Accept" && k != "User-Agent" {
				sent = append(sent, strings.ToLower(k))
			}
		}
		return next(req)
	})
	client := sdkClient(s, record, option.WithOrganization("org-1"))
	if _, err := client.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{
		Model: "switchboard", Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("hi")},
	}); err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(sent, "x-stainless-os") || !slices.Contains(sent, "authorization") {
		t.Fatalf("the client sent %q", sent)
	}
	slices.Sort(sent)
	r := do(t, http.MethodOptions, "http://"+s.Addr()+"/v1/chat/completions", "", "", map[string]string{
		"Origin": "https://ui.example.test", "Access-Control-Request-Method": "POST",
		"Access-Control-Request-Headers": strings.Join(sent, ","),
	})
	allowed := map[string]bool{}
	for _, h := range strings.Split(r.header.Get("Access-Control-Allow-Headers"), ",") {
		allowed[strings.ToLower(strings.TrimSpace(h))] = true
	}
	for _, h := range sent {
		if !allowed[h] {
			t.Errorf("the preflight does not allow %s: %q", h, r.header.Get("Access-Control-Allow-Headers"))
		}
	}
	if r.code != http.StatusNoContent || r.header.Get("Access-Control-Allow-Origin") != "https://ui.example.test" {
		t.Fatalf("preflight %d, origin %q", r.code, r.header.Get("Access-Control-Allow-Origin"))
	}
	// Another origin's preflight is still refused, whatever it asks for.
	if r := do(t, http.MethodOptions, "http://"+s.Addr()+"/v1/chat/completions", "", "", map[string]string{
		"Origin": "https://evil.example.test", "Access-Control-Request-Method": "POST", "Access-Control-Request-Headers": "authorization",
	}); r.code != http.StatusForbidden || r.header.Get("Access-Control-Allow-Headers") != "" {
		t.Fatalf("another origin's preflight: %d, %q", r.code, r.header.Get("Access-Control-Allow-Headers"))
	}
}

// A stream still waiting when the gateway stops (SIGTERM, past its
// shutdown grace) ends with OpenAI's in-stream error, which the client
// raises: a stream that just ended would read as a whole, empty answer.
func TestStreamCutByShutdownEndsWithAnError(t *testing.T) {
	t.Parallel()
	b := newBus(t)
	s, stop := runService(t, b, func(c *Config) { c.ShutdownGrace = 200 * time.Millisecond })
	r := startResponder(t, b)
	// Never released: an answer sent after the gateway stopped would find
	// no one to take it (the responder's cleanup ends its wait).
	_ = r.hold()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	client := sdkClient(s)
	stream := client.Chat.Completions.NewStreaming(ctx, openai.ChatCompletionNewParams{
		Model: "switchboard", Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("never answered")},
	})
	// The role chunk came: the request waits for its answer.
	if !stream.Next() {
		t.Fatalf("no first chunk: %v", stream.Err())
	}
	go stop()
	var text string
	for stream.Next() {
		if c := stream.Current(); len(c.Choices) > 0 {
			text += c.Choices[0].Delta.Content
		}
	}
	if err := stream.Err(); err == nil || !strings.Contains(err.Error(), `"code":"shutting_down"`) {
		t.Fatalf("stream ended with %v after %q, want the shutting_down error", err, text)
	}
}

// OpenAI's models.retrieve finds the gateway's model and answers OpenAI's
// 404 for another; a key sent as "bearer" (the scheme is
// case-insensitive) is the key.
func TestSDKRetrievesTheModel(t *testing.T) {
	t.Parallel()
	b := newBus(t)
	s := startService(t, b, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	client := sdkClient(s)
	m, err := client.Models.Get(ctx, "switchboard")
	if err != nil || m.ID != "switchboard" || m.Object != "model" {
		t.Fatalf("model %+v, %v", m, err)
	}
	_, err = client.Models.Get(ctx, "gpt-4o")
	var apiErr *openai.Error
	if !errors.As(err, &apiErr) || apiErr.StatusCode != http.StatusNotFound || apiErr.Code != "model_not_found" {
		t.Fatalf("another model: %v", err)
	}
	for _, auth := range []string{"bearer " + testKey, "BEARER " + testKey, "Bearer  " + testKey} {
		if r := do(t, http.MethodGet, "http://"+s.Addr()+"/v1/models", "", "", map[string]string{"Authorization": auth}); r.code != http.StatusOK {
			t.Errorf("Authorization %q: %d", strings.Replace(auth, testKey, "<key>", 1), r.code)
		}
	}
	for _, auth := range []string{"Basic " + testKey, testKey, "Bearer", "Bearer " + testKey + "x"} {
		if r := do(t, http.MethodGet, "http://"+s.Addr()+"/v1/models", "", "", map[string]string{"Authorization": auth}); r.code != http.StatusUnauthorized {
			t.Errorf("Authorization %q: %d, want 401", strings.Replace(auth, testKey, "<key>", 1), r.code)
		}
	}
}

// A request that stopped waiting after its message went out (reply
// timeout, shutdown) leaves its turn running: the official clients,
// which retry a 5xx twice by default, must not send the message again,
// or the agent runs it three times (its tools too). A request with an
// Idempotency-Key may be retried: its retry follows the same answer.
func TestTimedOutRequestIsNotSentAgain(t *testing.T) {
	t.Parallel()
	b := newBus(t)
	s := startService(t, b, func(c *Config) { c.ReplyTimeout = 300 * time.Millisecond })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	client := sdkClient(s, option.WithMaxRetries(2))
	_, err := client.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{Model: "switchboard",
		Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("a long job")}})
	var apiErr *openai.Error
	if !errors.As(err, &apiErr) || apiErr.StatusCode != http.StatusGatewayTimeout || apiErr.Code != "timeout" {
		t.Fatalf("completion: %v, want 504 timeout", err)
	}
	_, err = client.Responses.New(ctx, responses.ResponseNewParams{Model: "switchboard", Input: inputText("another long job")})
	if e := sdkErrorOf(t, err); e.StatusCode != http.StatusGatewayTimeout || e.Code != "timeout" {
		t.Fatalf("response: %d %q, want 504 timeout", e.StatusCode, e.Code)
	}
	if n := inboundCount(t, b); n != 2 {
		t.Fatalf("%d messages published for 2 requests: the client sent them again", n)
	}
	keyed := do(t, "POST", "http://"+s.Addr()+"/v1/chat/completions", testKey,
		`{"model":"switchboard","messages":[{"role":"user","content":"keyed"}]}`, map[string]string{HeaderIdempotencyKey: "k-1"})
	if keyed.code != http.StatusGatewayTimeout || keyed.header.Get("X-Should-Retry") == "false" {
		t.Fatalf("keyed: %d, X-Should-Retry %q; want 504 a retry may follow", keyed.code, keyed.header.Get("X-Should-Retry"))
	}
}

// A streamed answer still being written is not cut at reply_timeout,
// which bounds a stream's silence, not its length: a turn that writes a
// long answer piece by piece streams to its end, on both endpoints, as
// it does in Hermes. A whole answer's wait keeps its total bound, and a
// stream that goes silent for reply_timeout still ends with the timeout.
func TestStreamStillWritingOutlastsTheReplyTimeout(t *testing.T) {
	t.Parallel()
	b := newBus(t)
	s := startService(t, b, func(c *Config) { c.ReplyTimeout = 1200 * time.Millisecond })
	// 6 pieces and the final: 2.1 s, each well within reply_timeout
	// (a loaded machine delays a piece)
	r := startPacedResponder(t, b, 300*time.Millisecond)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	client := sdkClient(s)
	chat := openai.ChatCompletionNewParams{Model: "switchboard", Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("write a lot")}}
	streamed := func() (string, error) {
		stream := client.Chat.Completions.NewStreaming(ctx, chat)
		var text string
		for stream.Next() {
			if c := stream.Current(); len(c.Choices) > 0 {
				text += c.Choices[0].Delta.Content
			}
		}
		return text, stream.Err()
	}
	if text, err := streamed(); err != nil || text != pacedAnswer {
		t.Fatalf("chat stream: %q, %v; want the whole answer", text, err)
	}
	_, deltas, last := streamEvents(ctx, t, client, responses.ResponseNewParams{Model: "switchboard", Input: inputText("write a lot")})
	if last.Status != "completed" || strings.Join(deltas, "") != pacedAnswer {
		t.Fatalf("responses stream: %s %q; want the whole answer", last.Status, deltas)
	}
	_, err := client.Chat.Completions.New(ctx, chat)
	if e := sdkErrorOf(t, err); e.StatusCode != http.StatusGatewayTimeout || e.Code != "timeout" {
		t.Fatalf("whole answer: %d %q, want 504 timeout", e.StatusCode, e.Code)
	}
	r.mu.Lock()
	r.pace = 3 * time.Second
	r.mu.Unlock()
	// No text: it ended before the first piece, 3 s in.
	if text, err := streamed(); err == nil || !strings.Contains(err.Error(), `"code":"timeout"`) || text != "" {
		t.Fatalf("silent stream: %q, %v; want the timeout error before any text", text, err)
	}
}

// A request whose turn was stopped (/stop or /new in its conversation)
// or failed on every attempt is answered 503 interrupted, which the
// official clients would send again on their own: the stopped message
// would run after all.
func TestStoppedRequestIsNotSentAgain(t *testing.T) {
	t.Parallel()
	b := newBus(t)
	s := startService(t, b, nil)
	r := startResponder(t, b)
	r.mu.Lock()
	r.failure = "interrupted"
	r.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	client := sdkClient(s, option.WithMaxRetries(2))
	_, err := client.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{Model: "switchboard",
		Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("stop me")}})
	var apiErr *openai.Error
	if !errors.As(err, &apiErr) || apiErr.StatusCode != http.StatusServiceUnavailable || apiErr.Code != "interrupted" {
		t.Fatalf("%v, want 503 interrupted", err)
	}
	if n := len(r.received()); n != 1 {
		t.Fatalf("the message was sent %d times", n)
	}
}

// A turn that failed after the worker's own retries of the model (a
// provider's 429, its 5xx, a stalled call) ran its message: the
// official clients, which retry a 429 and a 5xx twice by default, must
// not send it again, or the agent runs it three times, tools and all.
func TestFailedTurnIsNotSentAgain(t *testing.T) {
	t.Parallel()
	b := newBus(t)
	s := startService(t, b, nil)
	r := startResponder(t, b)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	client := sdkClient(s, option.WithMaxRetries(2))
	for i, c := range []struct {
		code, want string
		status     int
	}{
		{"rate_limited", "rate_limit_exceeded", http.StatusTooManyRequests},
		{"provider", "upstream_error", http.StatusBadGateway},
		{"timeout", "timeout", http.StatusGatewayTimeout},
		{"internal", "internal_error", http.StatusInternalServerError},
	} {
		r.mu.Lock()
		r.failure = c.code
		r.mu.Unlock()
		_, err := client.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{Model: "switchboard",
			Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("fail " + c.code)}})
		if e := sdkErrorOf(t, err); e.StatusCode != c.status || e.Code != c.want {
			t.Fatalf("%s: %d %q, want %d %s", c.code, e.StatusCode, e.Code, c.status, c.want)
		}
		_, err = client.Responses.New(ctx, responses.ResponseNewParams{Model: "switchboard", Input: inputText("fail " + c.code)})
		if e := sdkErrorOf(t, err); e.StatusCode != c.status || e.Code != c.want {
			t.Fatalf("%s response: %d %q, want %d %s", c.code, e.StatusCode, e.Code, c.status, c.want)
		}
		if n := len(r.received()); n != 2*(i+1) {
			t.Fatalf("%s: %d messages published for %d requests: the client sent them again", c.code, n, 2*(i+1))
		}
	}
}

// A 409 the gateway answers (a deleted response's key, an expired key, a
// response that cannot be continued, a run's state) is the same for
// every attempt; the official clients retry a 409 twice by default (at
// OpenAI it is a lock that clears), so it says not to.
func TestConflictsAreNotRetried(t *testing.T) {
	t.Parallel()
	b := newBus(t)
	s := startService(t, b, nil)
	startResponder(t, b)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var attempts atomic.Int64
	client := sdkClient(s, option.WithHeader(HeaderIdempotencyKey, "k-conflict"), option.WithMaxRetries(2),
		option.WithMiddleware(func(r *http.Request, next option.MiddlewareNext) (*http.Response, error) {
			attempts.Add(1)
			return next(r)
		}))
	params := responses.ResponseNewParams{Model: "switchboard", Input: inputText("forget me")}
	resp, err := client.Responses.New(ctx, params)
	if err != nil {
		t.Fatal(err)
	}
	if err := client.Responses.Delete(ctx, resp.ID); err != nil {
		t.Fatal(err)
	}
	attempts.Store(0)
	_, err = client.Responses.New(ctx, params)
	if e := sdkErrorOf(t, err); e.StatusCode != http.StatusConflict || e.Code != "response_deleted" {
		t.Fatalf("%d %q, want 409 response_deleted", e.StatusCode, e.Code)
	}
	if n := attempts.Load(); n != 1 {
		t.Fatalf("the client sent the request %d times", n)
	}
}

// A streamed response that outlasts response_ttl, which validation holds
// at reply_timeout or more, is still kept when it ends: reply_timeout no
// longer bounds a stream that is still writing, and the record written
// when the request was accepted expired before the end was written over
// it, so the answer vanished (GET 404, previous_response_id unusable).
func TestStreamedResponseOutlastingItsTTLIsKept(t *testing.T) {
	t.Parallel()
	b := newBus(t)
	s := startService(t, b, func(c *Config) { c.ReplyTimeout, c.ResponseTTL = time.Second, time.Second })
	startPacedResponder(t, b, 300*time.Millisecond) // 7 pieces, about 2 s: twice the TTL
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	client := sdkClient(s)
	_, _, last := streamEvents(ctx, t, client, responses.ResponseNewParams{Model: "switchboard", Input: inputText("write a lot")})
	if last.Status != "completed" || last.OutputText() != pacedAnswer {
		t.Fatalf("stream: %s %q; want the whole answer", last.Status, last.OutputText())
	}
	got, err := client.Responses.Get(ctx, last.ID, responses.ResponseGetParams{})
	if err != nil || got.Status != "completed" || got.OutputText() != pacedAnswer {
		t.Fatalf("kept response: %v; want it completed with the answer", err)
	}
}

// pacedAnswer is what startPacedResponder's turns answer, in six pieces.
const pacedAnswer = "one two three four five six"

// startPacedResponder starts a responder whose turns write pacedAnswer
// piece by piece, pace before each piece and before the final: a turn
// whose answer takes a while to write.
func startPacedResponder(t *testing.T, b *bus.Bus, pace time.Duration) *responder {
	t.Helper()
	r := startResponder(t, b)
	r.mu.Lock()
	defer r.mu.Unlock()
	r.pace = pace
	r.answer = func(*eventsv1.MessageReceived, int) []string {
		return []string{"one", " two", " three", " four", " five", " six"}
	}
	return r
}
