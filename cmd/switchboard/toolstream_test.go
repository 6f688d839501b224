package main

import (
	"context"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"github.com/switchboard-chat/switchboard/pkg/fakellm"
)

// TestStreamedToolTurnCompletesThroughTheAPI runs every service with a
// model that, as Claude and GPT models do, writes text before its tool
// call ("Let me check.") and answers after the tool ran. An API client
// streaming the completion is streamed both texts, the later one after
// Hermes's paragraph break, and the stream ends as a complete answer,
// not with the interrupted error; the same turn asked without streaming
// answers with the last text alone, as Hermes's final_response.
func TestStreamedToolTurnCompletesThroughTheAPI(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the whole system")
	}
	t.Parallel()
	fake, d := startWithFakeModel(t)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	client := openai.NewClient(option.WithBaseURL("http://"+d.apiAddr+"/v1"), option.WithMaxRetries(0))
	toolTurn := func() {
		fake.Enqueue(
			fakellm.Reply{Text: "Let me check.", ToolCalls: []fakellm.ToolCall{{ID: "c1", Name: "clock", Arguments: `{}`}}},
			fakellm.Reply{Text: "It's 5pm."},
		)
	}
	params := openai.ChatCompletionNewParams{
		Model:    "switchboard",
		Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("what time is it?")},
	}

	toolTurn()
	stream := client.Chat.Completions.NewStreaming(ctx, params)
	var acc openai.ChatCompletionAccumulator
	var streamed string
	for stream.Next() {
		c := stream.Current()
		acc.AddChunk(c)
		if len(c.Choices) > 0 {
			streamed += c.Choices[0].Delta.Content
		}
	}
	if err := stream.Err(); err != nil {
		t.Fatalf("stream ended with %v after %q, want a complete answer", err, streamed)
	}
	if len(acc.Choices) != 1 {
		t.Fatalf("choices %+v", acc.Choices)
	}
	if got, want := acc.Choices[0].Message.Content, "Let me check.\n\nIt's 5pm."; got != want {
		t.Errorf("streamed %q, want %q", got, want)
	}
	if got := acc.Choices[0].FinishReason; got != "stop" {
		t.Errorf("finish reason %q, want stop", got)
	}

	toolTurn()
	resp, err := client.Chat.Completions.New(ctx, params)
	if err != nil {
		t.Fatal(err)
	}
	if got := resp.Choices[0].Message.Content; got != "It's 5pm." {
		t.Errorf("answer %q, want the last step's text", got)
	}
	if n := len(fake.Requests()); n != 4 {
		t.Errorf("%d model calls, want 4", n)
	}
}

// A model that says nothing after its tool call, having streamed text
// before it: the answer is Hermes's "(No response generated)", which the
// stream shows after the paragraph break and completes with, rather than
// ending with the interrupted error because the answer is not the
// streamed text.
func TestStreamedToolTurnWithoutAnAnswerCompletes(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the whole system")
	}
	t.Parallel()
	fake, d := startWithFakeModel(t)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	client := openai.NewClient(option.WithBaseURL("http://"+d.apiAddr+"/v1"), option.WithMaxRetries(0))
	fake.Enqueue(
		fakellm.Reply{Text: "Let me check.", ToolCalls: []fakellm.ToolCall{{ID: "c1", Name: "clock", Arguments: `{}`}}},
		fakellm.Reply{},
	)
	stream := client.Chat.Completions.NewStreaming(ctx, openai.ChatCompletionNewParams{
		Model:    "switchboard",
		Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("what time is it?")},
	})
	var streamed string
	for stream.Next() {
		if c := stream.Current(); len(c.Choices) > 0 {
			streamed += c.Choices[0].Delta.Content
		}
	}
	if err := stream.Err(); err != nil {
		t.Fatalf("stream ended with %v after %q, want a complete answer", err, streamed)
	}
	if want := "Let me check.\n\n(No response generated)"; streamed != want {
		t.Errorf("streamed %q, want %q", streamed, want)
	}
}

// startWithFakeModel runs every service in one process with the shipped
// fake model behind the OpenAI-compatible provider, which the test
// scripts (fake.Enqueue) and reads (fake.Requests).
func startWithFakeModel(t *testing.T) (*fakellm.Server, *inProcessDev) {
	t.Helper()
	fake := fakellm.New(fakellm.Config{})
	if err := fake.Start("127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = fake.Close() })
	d := startInProcessDevWith(t, func(c *Config) {
		c.LLM = LLMConfig{Provider: "openai", BaseURL: fake.URL() + "/v1", APIKey: "test", Model: "fake-model", MaxAttempts: 1}
	})
	return fake, d
}
