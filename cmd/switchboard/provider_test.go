package main

import (
	"context"
	"fmt"
	"testing"

	"github.com/switchboard-chat/switchboard/pkg/fakellm"
	"github.com/switchboard-chat/switchboard/services/router"
)

// The router tells of the provider the workers resolve: the llm
// section, else the environment, else the fake model in dev; never the
// key.
func TestRouterProvider(t *testing.T) {
	for _, v := range []string{"OPENAI_API_KEY", "OPENAI_BASE_URL", "OPENAI_MODEL", "ANTHROPIC_API_KEY", "ANTHROPIC_BASE_URL", "ANTHROPIC_MODEL"} {
		t.Setenv(v, "")
	}
	tests := []struct {
		name string
		app  string
		set  func(*Config)
		env  map[string]string
		want router.Provider
	}{
		{"section", "router", func(c *Config) { c.LLM.Provider, c.LLM.BaseURL, c.LLM.APIKey = "anthropic", "https://proxy/x", "sk-a" }, nil,
			router.Provider{Kind: "anthropic", Model: "claude-sonnet-4-5", BaseURL: "https://proxy/x"}},
		{"environment", "router", nil, map[string]string{"OPENAI_API_KEY": "sk-o", "OPENAI_BASE_URL": "http://llm:8000/v1", "OPENAI_MODEL": "qwen"},
			router.Provider{Kind: "openai", Model: "qwen", BaseURL: "http://llm:8000/v1"}},
		{"none", "router", nil, nil, router.Provider{}},
		{"dev", "dev", nil, nil, router.Provider{Kind: "fake", Model: "fake-model"}},
		{"external agent", "router", func(c *Config) { c.Agent.Backend = "grpc://agent:7000" }, nil, router.Provider{Agent: "grpc://agent:7000"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for k, v := range tt.env {
				t.Setenv(k, v)
			}
			cfg := defaultConfig()
			if tt.set != nil {
				tt.set(cfg)
			}
			if got := newApp(tt.app, cfg).routerProvider(); got != tt.want {
				t.Errorf("got %+v, want %+v", got, tt.want)
			}
		})
	}
}

// The router lists the models of an OpenAI-compatible provider the
// workers resolve (the llm section, else the environment) with their
// key; of no other provider, and not for an external agent.
func TestModelLister(t *testing.T) {
	for _, v := range []string{"OPENAI_API_KEY", "OPENAI_BASE_URL", "OPENAI_MODEL", "ANTHROPIC_API_KEY", "ANTHROPIC_BASE_URL", "ANTHROPIC_MODEL"} {
		t.Setenv(v, "")
	}
	fake := fakellm.New(fakellm.Config{APIKey: "sk-o", Models: []string{"qwen", "llama"}})
	if err := fake.Start(""); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = fake.Close() })
	base := fake.URL() + "/v1"
	tests := []struct {
		name string
		set  func(*Config)
		env  map[string]string
		want string // the models listed; "" for no lister
	}{
		{"section", func(c *Config) { c.LLM.Provider, c.LLM.BaseURL, c.LLM.APIKey = "openai", base, "sk-o" }, nil, "[qwen llama]"},
		{"environment", nil, map[string]string{"OPENAI_API_KEY": "sk-o", "OPENAI_BASE_URL": base}, "[qwen llama]"},
		{"anthropic", func(c *Config) { c.LLM.Provider, c.LLM.APIKey = "anthropic", "sk-a" }, nil, ""},
		{"none", nil, nil, ""},
		{"external agent", func(c *Config) {
			c.LLM.Provider, c.LLM.BaseURL, c.LLM.APIKey, c.Agent.Backend = "openai", base, "sk-o", "grpc://agent:7000"
		}, nil, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for k, v := range tt.env {
				t.Setenv(k, v)
			}
			cfg := defaultConfig()
			if tt.set != nil {
				tt.set(cfg)
			}
			l := newApp("router", cfg).modelLister()
			if tt.want == "" {
				if l != nil {
					t.Fatalf("a lister %T, want none", l)
				}
				return
			}
			if l == nil {
				t.Fatal("no lister")
			}
			ids, err := l.Models(context.Background())
			if err != nil || fmt.Sprint(ids) != tt.want {
				t.Fatalf("listed %v, %v; want %s", ids, err, tt.want)
			}
		})
	}
}
