package main

import (
	"testing"

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
