package main

import (
	"slices"
	"testing"
)

// Hermes's API_SERVER_* names set the API gateway's config.
func TestAPIServerEnv(t *testing.T) {
	for _, tt := range []struct {
		env, value string
		check      func(*Config) bool
	}{
		{"API_SERVER_CORS_ORIGINS", "https://a.example.test,https://b.example.test", func(c *Config) bool {
			return slices.Equal(c.Gateways.API.CORSOrigins, []string{"https://a.example.test", "https://b.example.test"})
		}},
		{"API_SERVER_CORS_ORIGINS", "*", func(c *Config) bool { return slices.Equal(c.Gateways.API.CORSOrigins, []string{"*"}) }},
		{"API_SERVER_MODEL_NAME", "my-agent", func(c *Config) bool { return c.Gateways.API.Model == "my-agent" }},
	} {
		t.Run(tt.env+"="+tt.value, func(t *testing.T) {
			t.Setenv(tt.env, tt.value)
			cfg, _, err := loadConfig("")
			if err != nil {
				t.Fatal(err)
			}
			if !tt.check(cfg) {
				t.Fatalf("%s=%s: cors_origins %q, model %q", tt.env, tt.value, cfg.Gateways.API.CORSOrigins, cfg.Gateways.API.Model)
			}
		})
	}
}
