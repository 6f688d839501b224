package main

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"github.com/switchboard-chat/switchboard/pkg/fakellm"
)

// TestWholeSystemAnswersTheOpenAIClient runs `switchboard dev` — every
// service in one process, with the shipped fake model — and talks to it
// with the official OpenAI Go client, as any OpenAI front end would. Each
// request travels gateway → router → worker → delivery → gateway over the
// bus, Redis and Postgres.
func TestWholeSystemAnswersTheOpenAIClient(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the whole system")
	}
	t.Parallel()
	d := startDev(t)
	defer d.stop(t)

	newClient := func(session string) openai.Client {
		opts := []option.RequestOption{option.WithBaseURL("http://" + d.apiAddr + "/v1"), option.WithMaxRetries(0)}
		if session != "" {
			opts = append(opts, option.WithHeader("X-Session-Id", session))
		}
		return openai.NewClient(opts...)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	ask := func(c openai.Client, msgs ...openai.ChatCompletionMessageParamUnion) string {
		t.Helper()
		resp, err := c.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{Model: "switchboard", Messages: msgs})
		if err != nil {
			t.Fatalf("completion: %v\nstderr:\n%s", err, d.stderr.String())
		}
		return resp.Choices[0].Message.Content
	}
	stream := func(c openai.Client, text string) (string, int) {
		t.Helper()
		s := c.Chat.Completions.NewStreaming(ctx, openai.ChatCompletionNewParams{
			Model: "switchboard", Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage(text)},
		})
		var acc openai.ChatCompletionAccumulator
		chunks := 0
		for s.Next() {
			acc.AddChunk(s.Current())
			chunks++
		}
		if err := s.Err(); err != nil {
			t.Fatalf("stream: %v\nstderr:\n%s", err, d.stderr.String())
		}
		return acc.Choices[0].Message.Content, chunks
	}

	session := newClient(randomID())
	if got := ask(session, openai.UserMessage("hello there")); got != "echo: hello there" {
		t.Fatalf("first answer = %q", got)
	}
	got, chunks := stream(session, "streamed please")
	if got != "echo: streamed please" || chunks < 3 {
		t.Fatalf("streamed answer = %q in %d chunks", got, chunks)
	}
	// The same session header continues the conversation: the model sees
	// the earlier turns from the transcript.
	if got := ask(session, openai.UserMessage("what did I say? [[recall:user]]")); got != "recall: hello there | streamed please" {
		t.Fatalf("same session recall = %q", got)
	}
	// Another session shares nothing.
	if got := ask(newClient(randomID()), openai.UserMessage("[[recall:user]]")); got != "recall: " {
		t.Fatalf("fresh session recall = %q", got)
	}
	// Without a session header the request carries its whole conversation.
	got = ask(newClient(""),
		openai.UserMessage("first"), openai.AssistantMessage("echo: first"), openai.UserMessage("[[recall:user]]"))
	if !strings.HasPrefix(got, "recall: first") {
		t.Fatalf("stateless recall = %q", got)
	}
	// A picture sent inline, as a data: URL larger than an inbound event
	// may be, is kept by the gateway and shown to the model with the text.
	pic := append([]byte("\x89PNG\r\n\x1a\n"), make([]byte, 600<<10)...)
	got = ask(newClient(randomID()), openai.UserMessage([]openai.ChatCompletionContentPartUnionParam{
		openai.TextContentPart("what is this?"),
		openai.ImageContentPart(openai.ChatCompletionContentPartImageImageURLParam{URL: "data:image/png;base64," + base64.StdEncoding.EncodeToString(pic)}),
	}))
	if want := "echo: what is this?\n[Attachment: image] [image " + (fakellm.Image{MediaType: "image/png", Data: pic}).String() + "]"; got != want {
		t.Fatalf("picture answer = %q, want %q", got, want)
	}
	// Its scheme and media type in any case, as Hermes reads them: the
	// model is shown the same picture.
	got = ask(newClient(randomID()), openai.UserMessage([]openai.ChatCompletionContentPartUnionParam{
		openai.TextContentPart("and this?"),
		openai.ImageContentPart(openai.ChatCompletionContentPartImageImageURLParam{URL: "DATA:Image/PNG;Base64," + base64.StdEncoding.EncodeToString(pic)}),
	}))
	if want := "echo: and this?\n[Attachment: image] [image " + (fakellm.Image{MediaType: "image/png", Data: pic}).String() + "]"; got != want {
		t.Fatalf("upper-case picture answer = %q, want %q", got, want)
	}
	// A turn the model provider failed is an HTTP error the SDK raises,
	// not a completion whose text explains the failure.
	for _, c := range []struct {
		text   string
		status int
		code   string
	}{
		{"[[fail:402]] pay", http.StatusTooManyRequests, "insufficient_quota"},
		{"[[fail:overflow]] long", http.StatusBadRequest, "context_length_exceeded"},
		{"[[fail:401]] key", http.StatusBadGateway, "upstream_auth_error"},
	} {
		c0 := newClient(randomID())
		_, err := c0.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{
			Model: "switchboard", Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage(c.text)}})
		var apiErr *openai.Error
		if !errors.As(err, &apiErr) || apiErr.StatusCode != c.status || apiErr.Code != c.code {
			t.Errorf("%s: %v, want HTTP %d %s", c.text, err, c.status, c.code)
		}
	}
	failer := newClient(randomID())
	failing := failer.Chat.Completions.NewStreaming(ctx, openai.ChatCompletionNewParams{
		Model: "switchboard", Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("[[fail:402]] pay")}})
	for failing.Next() {
	}
	if err := failing.Err(); err == nil || !strings.Contains(err.Error(), "insufficient_quota") {
		t.Errorf("streamed failure: %v", err)
	}
}

func randomID() string {
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	return "e2e-" + hex.EncodeToString(b)
}
