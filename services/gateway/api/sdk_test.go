package api

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/responses"

	eventsv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/events/v1"
)

func sdkClient(s *Service, extra ...option.RequestOption) openai.Client {
	opts := append([]option.RequestOption{
		option.WithBaseURL("http://" + s.Addr() + "/v1"),
		option.WithAPIKey(testKey),
		option.WithMaxRetries(0),
	}, extra...)
	return openai.NewClient(opts...)
}

func TestOpenAISDKCompletion(t *testing.T) {
	t.Parallel()
	b := newBus(t)
	s := startService(t, b, nil)
	r := startResponder(t, b)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	client := sdkClient(s)
	resp, err := client.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{
		Model:    "switchboard",
		Messages: []openai.ChatCompletionMessageParamUnion{openai.SystemMessage("be brief"), openai.UserMessage("hello")},
	})
	if err != nil {
		t.Fatal(err)
	}
	if got := resp.Choices[0].Message.Content; got != "echo: hello (turn 1)" {
		t.Fatalf("content %q", got)
	}
	if resp.Choices[0].FinishReason != "stop" {
		t.Fatalf("finish reason %q", resp.Choices[0].FinishReason)
	}
	// The turn's tokens, as the worker reported them with its final.
	if u := resp.Usage; u.PromptTokens != int64(len("hello")) || u.CompletionTokens != int64(len("echo: hello (turn 1)")) || u.TotalTokens != u.PromptTokens+u.CompletionTokens {
		t.Fatalf("usage %+v", u)
	}
	// A plain request waits for the whole answer: the turn needs no progress.
	if evs := r.received(); len(evs) != 1 || !evs[0].GetAnswerOnly() {
		t.Fatalf("a plain request's event is not answer-only: %v", evs)
	}
	models, err := client.Models.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(models.Data) != 1 || models.Data[0].ID != "switchboard" {
		t.Fatalf("models %+v", models.Data)
	}
}

func TestOpenAISDKStreaming(t *testing.T) {
	t.Parallel()
	b := newBus(t)
	s := startService(t, b, nil)
	r := startResponder(t, b)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	client := sdkClient(s)
	stream := client.Chat.Completions.NewStreaming(ctx, openai.ChatCompletionNewParams{
		Model:         "switchboard",
		Messages:      []openai.ChatCompletionMessageParamUnion{openai.UserMessage("stream me")},
		StreamOptions: openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)},
	})
	var acc openai.ChatCompletionAccumulator
	var pieces []string
	var last openai.ChatCompletionChunk
	for stream.Next() {
		c := stream.Current()
		acc.AddChunk(c)
		last = c
		if len(c.Choices) > 0 && c.Choices[0].Delta.Content != "" {
			pieces = append(pieces, c.Choices[0].Delta.Content)
		}
	}
	if err := stream.Err(); err != nil {
		t.Fatal(err)
	}
	// Asked for, the usage comes in a last chunk without choices.
	if u := last.Usage; len(last.Choices) != 0 || u.PromptTokens != int64(len("stream me")) || u.CompletionTokens != int64(len("echo: stream me (turn 1)")) {
		t.Fatalf("last chunk %+v, want the usage alone", last)
	}
	if want := []string{"echo", ": stream me", " (turn 1)"}; strings.Join(pieces, "|") != strings.Join(want, "|") {
		t.Fatalf("streamed pieces %q, want %q", pieces, want)
	}
	if got := acc.Choices[0].Message.Content; got != "echo: stream me (turn 1)" {
		t.Fatalf("accumulated %q", got)
	}
	if evs := r.received(); len(evs) != 1 || evs[0].GetAnswerOnly() {
		t.Fatalf("a streaming request's event asks for the answer only: %v", evs)
	}
}

func TestSessionHeaderKeepsTheChat(t *testing.T) {
	t.Parallel()
	b := newBus(t)
	s := startService(t, b, nil)
	r := startResponder(t, b)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ask := func(client openai.Client, text string) string {
		t.Helper()
		resp, err := client.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{
			Model: "switchboard", Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage(text)},
		})
		if err != nil {
			t.Fatal(err)
		}
		return resp.Choices[0].Message.Content
	}
	withSession := sdkClient(s, option.WithHeader(HeaderSession, "conv-42"))
	hermes := sdkClient(s, option.WithHeader(HeaderHermesSession, "conv-42"))
	if got := ask(withSession, "one"); got != "echo: one (turn 1)" {
		t.Fatalf("first %q", got)
	}
	if got := ask(hermes, "two"); got != "echo: two (turn 2)" {
		t.Fatalf("second (Hermes header) %q: want the same chat's second turn", got)
	}
	stateless := sdkClient(s)
	ask(stateless, "three")
	ask(stateless, "four")
	chats := r.chatIDs()
	if len(chats) != 4 || chats[0] != "conv-42" || chats[1] != "conv-42" {
		t.Fatalf("chat ids %q: want the two session requests in chat conv-42", chats)
	}
	if chats[2] == chats[3] || chats[2] == "conv-42" {
		t.Fatalf("stateless requests share a chat: %q", chats)
	}
	// A stateless request is answered with its session under both names,
	// as Hermes answers; sending it back continues that conversation.
	var first *http.Response
	if _, err := stateless.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{
		Model: "switchboard", Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("five")},
	}, option.WithResponseInto(&first)); err != nil {
		t.Fatal(err)
	}
	id := first.Header.Get(HeaderHermesSession)
	if id == "" || id != first.Header.Get(HeaderSession) {
		t.Fatalf("session headers %q and %q: want the same id under both", id, first.Header.Get(HeaderSession))
	}
	if got := ask(sdkClient(s, option.WithHeader(HeaderHermesSession, id)), "six"); got != "echo: six (turn 2)" {
		t.Fatalf("with the returned session id: %q, want the conversation's second turn", got)
	}
}

// Each named key is a user of its own with sessions of its own: two
// clients naming the same X-Session-Id get two conversations, and each
// gets its session id back as it sent it. The single key still works.
func TestNamedKeysAreUsersOfTheirOwn(t *testing.T) {
	t.Parallel()
	const alice, bob = "alice-key-0123456789abcdef", "bob-key-0123456789abcdefgh"
	b := newBus(t)
	s := startService(t, b, func(c *Config) { c.Keys = map[string]string{"alice": alice, "bob": bob} })
	r := startResponder(t, b)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ask := func(key, text string) string {
		t.Helper()
		var hdr *http.Response
		client := sdkClient(s, option.WithAPIKey(key), option.WithHeader(HeaderSession, "shared"))
		resp, err := client.Chat.Completions.New(ctx,
			openai.ChatCompletionNewParams{Model: "switchboard", Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage(text)}},
			option.WithResponseInto(&hdr))
		if err != nil {
			t.Fatal(err)
		}
		if got := hdr.Header.Get(HeaderSession); got != "shared" {
			t.Errorf("%s header %q, want the session id sent", HeaderSession, got)
		}
		return resp.Choices[0].Message.Content
	}
	for _, tt := range []struct{ key, text, want string }{
		{alice, "one", "echo: one (turn 1)"},
		{alice, "two", "echo: two (turn 2)"},
		{bob, "three", "echo: three (turn 1)"}, // the same session id, another conversation
		{testKey, "four", "echo: four (turn 1)"},
	} {
		if got := ask(tt.key, tt.text); got != tt.want {
			t.Errorf("%q: %q, want %q", tt.text, got, tt.want)
		}
	}
	if got, want := strings.Join(r.chatIDs(), ","), "alice.shared,alice.shared,bob.shared,shared"; got != want {
		t.Errorf("chat ids %s, want %s", got, want)
	}
	users := r.userIDs()
	if len(users) != 4 || users[0] != "key:alice" || users[2] != "key:bob" || !strings.HasPrefix(users[3], "key-") {
		t.Errorf("user ids %q", users)
	}
	stranger := sdkClient(s, option.WithAPIKey("not-a-key"))
	if _, err := stranger.Models.List(ctx); err == nil {
		t.Error("an unknown key was let in")
	}
}

// A final that does not continue what was streamed (the turn ran again
// after its worker died mid-stream) ends the stream with an error: the
// client holds part of another answer.
func TestStreamEndsWithAnErrorWhenTheAnswerChanged(t *testing.T) {
	t.Parallel()
	b := newBus(t)
	s := startService(t, b, nil)
	r := startResponder(t, b)
	r.mu.Lock()
	r.final = func([]string) string { return "a different answer, from the turn's second attempt" }
	r.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	client := sdkClient(s)
	stream := client.Chat.Completions.NewStreaming(ctx, openai.ChatCompletionNewParams{
		Model:    "switchboard",
		Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("stream me")},
	})
	var got string
	for stream.Next() {
		if c := stream.Current(); len(c.Choices) > 0 {
			got += c.Choices[0].Delta.Content
		}
	}
	err := stream.Err()
	if err == nil || !strings.Contains(err.Error(), "interrupted") {
		t.Fatalf("stream ended with %v after %q, want the interrupted error", err, got)
	}
	if strings.Contains(got, "different") {
		t.Fatalf("streamed %q: the changed answer was spliced on", got)
	}
}

// A turn that streamed text before a tool call ("Let me check.") streams
// the answer after a break marked restart, and its final is the answer
// alone: the stream completes, showing both (chat completions, with and
// without an Idempotency-Key, and the Responses API). A final that does
// not continue what streamed after the break still ends with the
// interrupted error.
func TestStreamAfterAToolCallCompletes(t *testing.T) {
	t.Parallel()
	b := newBus(t)
	s := startService(t, b, nil)
	r := startResponder(t, b)
	final := "It's 5pm."
	r.mu.Lock()
	r.answer = func(*eventsv1.MessageReceived, int) []string {
		return []string{"Let me check.", "\n\n", "It's ", "5pm."}
	}
	r.restart = func(i int) bool { return i == 1 }
	r.final = func([]string) string { return final }
	r.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	const shown = "Let me check.\n\nIt's 5pm."
	chat := func(opts ...option.RequestOption) (string, error) {
		client := sdkClient(s, opts...)
		stream := client.Chat.Completions.NewStreaming(ctx, openai.ChatCompletionNewParams{
			Model:    "switchboard",
			Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("what time is it?")},
		})
		var got string
		for stream.Next() {
			if c := stream.Current(); len(c.Choices) > 0 {
				got += c.Choices[0].Delta.Content
			}
		}
		return got, stream.Err()
	}
	for name, opts := range map[string][]option.RequestOption{
		"plain": nil,
		"keyed": {option.WithHeader(HeaderIdempotencyKey, "tool-turn")},
	} {
		got, err := chat(opts...)
		if err != nil || got != shown {
			t.Errorf("%s: streamed %q, ended with %v; want %q, complete", name, got, err, shown)
		}
	}

	client := sdkClient(s)
	stream := client.Responses.NewStreaming(ctx, responses.ResponseNewParams{
		Model: "switchboard", Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("what time is it?")},
	})
	var completed *responses.Response
	for stream.Next() {
		if ev := stream.Current(); ev.Type == "response.completed" {
			r := ev.AsResponseCompleted().Response
			completed = &r
		}
	}
	if err := stream.Err(); err != nil || completed == nil || completed.OutputText() != shown {
		t.Errorf("responses stream: err %v, completed %v; want it completed with %q", err, completed != nil, shown)
	}

	r.mu.Lock()
	final = "another answer, from the turn's second attempt"
	r.mu.Unlock()
	if got, err := chat(); err == nil || !strings.Contains(err.Error(), "interrupted") {
		t.Errorf("a final that does not continue the stream after the break: streamed %q, ended with %v; want the interrupted error", got, err)
	}
}

// Media a tool made (a ReplyEvent's media, which delivery sends to the
// gateway as a send with its attachment) is in the answer, linked in
// markdown after its text — a picture as a picture — streamed or not,
// on the Responses API and through a keyed request's stored answer
// (media kept only in the attachment store: TestKeptMediaIsLinkedAndServed).
func TestAnswerLinksItsMedia(t *testing.T) {
	t.Parallel()
	b := newBus(t)
	s := startService(t, b, nil)
	r := startResponder(t, b)
	r.mu.Lock()
	r.answer = func(*eventsv1.MessageReceived, int) []string { return []string{"Here is", " the chart."} }
	r.media = []*eventsv1.Attachment{
		{Kind: eventsv1.AttachmentKind_ATTACHMENT_KIND_IMAGE, Location: &eventsv1.Attachment_Url{Url: "https://files.example.test/chart.png"}, Caption: "Sales [2026]"},
		{Kind: eventsv1.AttachmentKind_ATTACHMENT_KIND_DOCUMENT, Location: &eventsv1.Attachment_Url{Url: "https://files.example.test/report.pdf"}, FileName: "report.pdf"},
	}
	r.mu.Unlock()
	const want = "Here is the chart.\n\n![Sales (2026)](https://files.example.test/chart.png)\n[report.pdf](https://files.example.test/report.pdf)"
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	client := sdkClient(s)
	chat := openai.ChatCompletionNewParams{Model: "switchboard", Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("chart it")}}
	resp, err := client.Chat.Completions.New(ctx, chat)
	if err != nil || resp.Choices[0].Message.Content != want {
		t.Fatalf("completion %q, %v; want %q", resp.Choices[0].Message.Content, err, want)
	}
	keyed, err := client.Chat.Completions.New(ctx, chat, option.WithHeader(HeaderIdempotencyKey, "k-media"))
	if err != nil || keyed.Choices[0].Message.Content != want {
		t.Fatalf("keyed completion %q, %v; want %q", keyed.Choices[0].Message.Content, err, want)
	}
	stream := client.Chat.Completions.NewStreaming(ctx, chat)
	var text string
	for stream.Next() {
		if c := stream.Current(); len(c.Choices) > 0 {
			text += c.Choices[0].Delta.Content
		}
	}
	if err := stream.Err(); err != nil || text != want {
		t.Fatalf("stream %q, %v; want %q", text, err, want)
	}
	_, _, last := streamEvents(ctx, t, client, responses.ResponseNewParams{Model: "switchboard", Input: inputText("chart it")})
	if last.Status != "completed" || last.OutputText() != want {
		t.Fatalf("streamed response %s %q; want %q", last.Status, last.OutputText(), want)
	}
	got, err := client.Responses.New(ctx, responses.ResponseNewParams{Model: "switchboard", Input: inputText("chart it")})
	if err != nil || got.OutputText() != want {
		t.Fatalf("response %q, %v; want %q", got.OutputText(), err, want)
	}
}

// A request with an Idempotency-Key reports its turn's usage, as one
// without does: its answer comes through the kept answer record, which
// kept no usage, so every keyed answer said 0 tokens (null for a
// response) — the web chat's every message, and every retry. Each
// request is sent twice with its key: the second attempt takes the
// kept answer.
func TestKeyedAnswersReportTheirUsage(t *testing.T) {
	t.Parallel()
	b := newBus(t)
	s := startService(t, b, nil)
	startResponder(t, b)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	client := sdkClient(s)
	for _, tc := range []struct {
		name string
		// ask sends text with key and returns the usage the answer
		// reported and the answer's text.
		ask func(t *testing.T, text string, key option.RequestOption) (prompt, completion int64, answer string)
	}{
		{"chat completion", func(t *testing.T, text string, key option.RequestOption) (int64, int64, string) {
			resp, err := client.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{
				Model: "switchboard", Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage(text)},
			}, key)
			if err != nil {
				t.Fatal(err)
			}
			return resp.Usage.PromptTokens, resp.Usage.CompletionTokens, resp.Choices[0].Message.Content
		}},
		{"streamed chat completion", func(t *testing.T, text string, key option.RequestOption) (int64, int64, string) {
			stream := client.Chat.Completions.NewStreaming(ctx, openai.ChatCompletionNewParams{
				Model: "switchboard", Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage(text)},
				StreamOptions: openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)},
			}, key)
			var acc openai.ChatCompletionAccumulator
			var last openai.ChatCompletionChunk
			for stream.Next() {
				acc.AddChunk(stream.Current())
				last = stream.Current()
			}
			if err := stream.Err(); err != nil {
				t.Fatal(err)
			}
			return last.Usage.PromptTokens, last.Usage.CompletionTokens, acc.Choices[0].Message.Content
		}},
		{"response", func(t *testing.T, text string, key option.RequestOption) (int64, int64, string) {
			resp, err := client.Responses.New(ctx, responses.ResponseNewParams{Model: "switchboard", Input: inputText(text)}, key)
			if err != nil {
				t.Fatal(err)
			}
			return resp.Usage.InputTokens, resp.Usage.OutputTokens, resp.OutputText()
		}},
		{"streamed response", func(t *testing.T, text string, key option.RequestOption) (int64, int64, string) {
			stream := client.Responses.NewStreaming(ctx, responses.ResponseNewParams{Model: "switchboard", Input: inputText(text)}, key)
			var done responses.Response
			for stream.Next() {
				if ev := stream.Current(); ev.Type == "response.completed" {
					done = ev.Response
				}
			}
			if err := stream.Err(); err != nil {
				t.Fatal(err)
			}
			return done.Usage.InputTokens, done.Usage.OutputTokens, done.OutputText()
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			text := "usage of a " + tc.name
			key := option.WithHeader(HeaderIdempotencyKey, "usage-"+strings.ReplaceAll(tc.name, " ", "-"))
			for _, attempt := range []string{"first", "retry"} {
				prompt, completion, answer := tc.ask(t, text, key)
				if answer == "" || prompt != int64(len(text)) || completion != int64(len(answer)) {
					t.Fatalf("%s attempt: usage %d+%d for %q (%d+%d asked), want the turn's", attempt, prompt, completion, answer, len(text), len(answer))
				}
			}
		})
	}
}
