package llm_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/switchboard-chat/switchboard/pkg/fakellm"
	"github.com/switchboard-chat/switchboard/pkg/llm"
)

// benchRequest is a turn as the worker sends it mid-conversation: a
// system prompt, ten exchanges of 400-byte messages, four tools.
func benchRequest() llm.Request {
	text := strings.Repeat("lorem ipsum dolor sit amet, ", 15)[:400]
	req := llm.Request{System: strings.Repeat("You are a helpful assistant. ", 50), MaxTokens: 4096}
	for range 10 {
		req.Messages = append(req.Messages, llm.Message{Role: llm.RoleUser, Content: text}, llm.Message{Role: llm.RoleAssistant, Content: "echo: " + text})
	}
	req.Messages = append(req.Messages, llm.Message{Role: llm.RoleUser, Content: text})
	for _, name := range []string{"clock", "memory", "send_message", "session_search"} {
		req.Tools = append(req.Tools, llm.ToolSpec{Name: name, Description: "The " + name + " tool, described in a sentence or two for the model.",
			Parameters: json.RawMessage(`{"type":"object","properties":{"action":{"type":"string","enum":["add","remove","list"],"description":"what to do"},"text":{"type":"string","description":"the text"},"limit":{"type":"integer","minimum":1,"maximum":50}},"required":["action"]}`)})
	}
	return req
}

// BenchmarkModelCall is one streamed model call of a mid-conversation
// turn against the shipped fake at zero latency: the provider's request
// encoding, HTTP, the fake's decoding and the stream's parsing — the
// model call's share of a benchmark turn.
func BenchmarkModelCall(b *testing.B) {
	for _, mode := range []struct {
		name    string
		onDelta func(llm.Delta) error
	}{
		{"stream", func(llm.Delta) error { return nil }},
		{"whole", nil}, // what an answer-only turn makes
	} {
		for _, be := range backends {
			b.Run(be.name+"/"+mode.name, func(b *testing.B) { benchModelCall(b, be.make, mode.onDelta) })
		}
	}
}

func benchModelCall(b *testing.B, newProvider func(*fakellm.Server) llm.Provider, onDelta func(llm.Delta) error) {
	srv := fakellm.New(fakellm.Config{MaxRecorded: -1})
	if err := srv.Start("127.0.0.1:0"); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = srv.Close() })
	p := newProvider(srv)
	req := benchRequest()
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if _, err := p.Stream(ctx, req, onDelta); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkModelCallInProcess is BenchmarkModelCall's whole answer from
// OpenAI over the fake's in-process connections (fakellm.HTTPClient), as
// a worker running the shipped fake makes it, against loopback TCP.
func BenchmarkModelCallInProcess(b *testing.B) {
	for _, pipe := range []bool{false, true} {
		name := "tcp"
		if pipe {
			name = "pipe"
		}
		b.Run(name, func(b *testing.B) {
			benchModelCall(b, func(srv *fakellm.Server) llm.Provider {
				cfg := llm.OpenAIConfig{APIKey: "test", BaseURL: srv.URL() + "/v1", Model: "gpt-test"}
				if pipe {
					cfg.HTTPClient = srv.HTTPClient()
				}
				return llm.NewOpenAI(cfg)
			}, nil)
		})
	}
}
