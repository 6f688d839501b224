package llm_test

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/switchboard-chat/switchboard/pkg/fakellm"
	"github.com/switchboard-chat/switchboard/pkg/llm"
)

// /fast reaches the wire: OpenAI's service_tier "priority" and
// Anthropic's speed "fast" with the fast mode beta, only when the request
// asks for it and only for a model that has it; the fake refuses what
// the APIs refuse (an unknown tier, speed without the beta), so a request
// it answered was well formed.
func TestFastModeOnTheWire(t *testing.T) {
	srv := startFake(t, fakellm.Config{})
	openai := llm.NewOpenAI(llm.OpenAIConfig{BaseURL: srv.URL() + "/v1", Model: "gpt-5.4"})
	anthropic := llm.NewAnthropic(llm.AnthropicConfig{APIKey: "k", BaseURL: srv.URL(), Model: "claude-opus-5"})
	withBeta := llm.NewAnthropic(llm.AnthropicConfig{APIKey: "k", BaseURL: srv.URL(), Model: "claude-opus-5",
		Headers: map[string]string{"anthropic-beta": "context-1m-2025-08-07"}})
	tests := []struct {
		name      string
		p         llm.Provider
		model     string
		fast      bool
		wantTier  string
		wantSpeed string
		wantBeta  string
	}{
		{"openai normal", openai, "", false, "", "", ""},
		{"openai fast", openai, "", true, "priority", "", ""},
		{"openai fast o4-mini", openai, "o4-mini", true, "priority", "", ""},
		{"openai fast vendor prefix", openai, "openai/gpt-5.4", true, "priority", "", ""},
		{"openai fast codex model", openai, "gpt-5.3-codex", true, "", "", ""},
		{"openai fast local model", openai, "llama3.1", true, "", "", ""},
		{"anthropic normal", anthropic, "", false, "", "", ""},
		{"anthropic fast", anthropic, "", true, "", "fast", "fast-mode-2026-02-01"},
		{"anthropic fast dated", anthropic, "claude-opus-4-8-20260601", true, "", "fast", "fast-mode-2026-02-01"},
		{"anthropic fast unsupported model", anthropic, "claude-sonnet-4-6", true, "", "", ""},
		{"anthropic fast keeps configured betas", withBeta, "", true, "", "fast", "context-1m-2025-08-07,fast-mode-2026-02-01"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for _, stream := range []bool{false, true} {
				srv.Reset()
				req := userReq("hurry")
				req.Model, req.Fast = tt.model, tt.fast
				var err error
				if stream {
					_, _, err = collect(context.Background(), tt.p, req)
				} else {
					_, err = llm.Complete(context.Background(), tt.p, req)
				}
				if err != nil {
					t.Fatalf("stream=%v: %v", stream, err)
				}
				got := srv.Requests()[0]
				if got.ServiceTier != tt.wantTier || got.Speed != tt.wantSpeed {
					t.Errorf("stream=%v: service_tier %q speed %q, want %q %q", stream, got.ServiceTier, got.Speed, tt.wantTier, tt.wantSpeed)
				}
				if beta := strings.Join(got.Header.Values("anthropic-beta"), ","); beta != tt.wantBeta {
					t.Errorf("stream=%v: anthropic-beta %q, want %q", stream, beta, tt.wantBeta)
				}
			}
		})
	}
}

// A provider that refuses the fast tier for the model answers 400, which
// comes back as a BadRequest error (never retried), not as an answer.
func TestFastModeRefused(t *testing.T) {
	srv := startFake(t, fakellm.Config{FastModels: []string{"gpt-5.4", "claude-opus-5"}})
	for _, tt := range []struct {
		name string
		p    llm.Provider
	}{
		{"openai", llm.NewOpenAI(llm.OpenAIConfig{BaseURL: srv.URL() + "/v1", Model: "gpt-4o"})},
		{"anthropic", llm.NewAnthropic(llm.AnthropicConfig{APIKey: "k", BaseURL: srv.URL(), Model: "claude-opus-4-8"})},
	} {
		t.Run(tt.name, func(t *testing.T) {
			req := userReq("hurry")
			req.Fast = true
			_, err := llm.Complete(context.Background(), llm.WithRetry(tt.p, llm.RetryPolicy{BaseDelay: time.Millisecond}), req)
			var e *llm.Error
			if !errors.As(err, &e) || e.Class != llm.BadRequest || e.Status != http.StatusBadRequest {
				t.Fatalf("err = %v, want a 400 bad_request", err)
			}
			if !llm.FastRefused(err) {
				t.Errorf("FastRefused(%v) = false", err)
			}
			if n := len(srv.Requests()); n != 1 {
				t.Errorf("%d requests, want 1 (a 400 is not retried)", n)
			}
			srv.Reset()
		})
	}
}

func TestFastModeSupported(t *testing.T) {
	for _, tt := range []struct {
		kind, model string
		want        bool
	}{
		{llm.KindOpenAI, "gpt-5.4", true},
		{llm.KindOpenAI, "GPT-4o-mini", true},
		{llm.KindOpenAI, "o3", true},
		{llm.KindOpenAI, "openai/gpt-5", true},
		{llm.KindOpenAI, "gpt-5-codex", false},
		{llm.KindOpenAI, "claude-opus-5", false},
		{llm.KindOpenAI, "qwen2.5:7b", false},
		{llm.KindOpenAI, "", false},
		{llm.KindAnthropic, "claude-opus-5", true},
		{llm.KindAnthropic, "claude-opus-5.5", true},
		{llm.KindAnthropic, "anthropic/claude-opus-4.8", true},
		{llm.KindAnthropic, "claude-opus-4-8-20260601", true},
		{llm.KindAnthropic, "claude-opus-4-7", false},
		{llm.KindAnthropic, "claude-sonnet-4-6", false},
		{llm.KindAnthropic, "gpt-5.4", false},
		{"fake", "gpt-5.4", false},
	} {
		if got := llm.FastModeSupported(tt.kind, tt.model); got != tt.want {
			t.Errorf("FastModeSupported(%q, %q) = %v, want %v", tt.kind, tt.model, got, tt.want)
		}
	}
}

func TestParseServiceTier(t *testing.T) {
	for in, want := range map[string]string{"": "normal", "normal": "normal", "Standard": "normal", "off": "normal",
		"fast": "fast", "priority": "fast", "ON": "fast", "auto": "", "flex": ""} {
		got, ok := llm.ParseServiceTier(in)
		if got != want || ok != (want != "") {
			t.Errorf("ParseServiceTier(%q) = %q, %v; want %q", in, got, ok, want)
		}
	}
}
