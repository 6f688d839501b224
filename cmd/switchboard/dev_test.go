package main

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"
)

// TestDevStartsReadyAndStopsOnSIGTERM runs the real binary the way a
// person does: `switchboard dev`, waits for /readyz, sends SIGTERM and
// expects a clean exit well within 10 seconds.
func TestDevStartsReadyAndStopsOnSIGTERM(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the binary")
	}
	t.Parallel()
	d := startDev(t)
	// The banner says what runs, and which gateways are off and why.
	banner := strings.Join(d.banner, "\n")
	for _, want := range []string{"(services: admin, delivery, gateway-api, gateway-webhook, router, worker)",
		"gateway-telegram (TELEGRAM_BOT_TOKEN not set)", "gateway-discord (DISCORD_BOT_TOKEN not set)"} {
		if !strings.Contains(banner, want) {
			t.Errorf("banner lacks %q:\n%s", want, banner)
		}
	}
	d.stop(t)
	if !strings.Contains(d.stderr.String(), `"msg":"stopped"`) {
		t.Errorf("no clean stop logged; stderr:\n%s", d.stderr.String())
	}
}

func TestUnknownCommandIsAUsageError(t *testing.T) {
	t.Parallel()
	if err := dispatch(context.Background(), []string{"frobnicate"}); !errors.Is(err, errUsage) {
		t.Fatalf("err = %v, want usage error", err)
	}
}

func TestConfigDefaultsAreValid(t *testing.T) {
	t.Parallel()
	if err := defaultConfig().Validate(); err != nil {
		t.Fatal(err)
	}
}

func TestConfigRefusesWhatItCannotRun(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		key    string
		change func(*Config)
	}{
		{"nats.dedupe_window", func(c *Config) { c.NATS.DedupeWindow = 0 }},
		{"dev.memory_limit_mib", func(c *Config) { c.Dev.MemoryLimitMiB = -1 }},
		{"dev.gc_percent", func(c *Config) { c.Dev.GCPercent = -1 }},
		{"postgres.max_conns", func(c *Config) { c.Postgres.MaxConns = -1 }},
		{"llm.stream_idle_timeout", func(c *Config) { c.LLM.StreamIdleTimeout = -time.Second }},
		{"cron.max_run_duration", func(c *Config) { c.Cron.MaxRunDuration = c.Cron.Tick / 2 }},
		{"skills.max_bytes", func(c *Config) { c.Skills.MaxBytes = 0 }},
	} {
		c := defaultConfig()
		tc.change(c)
		if err := c.Validate(); err == nil || !strings.Contains(err.Error(), tc.key) {
			t.Errorf("%s: %v, want an error naming it", tc.key, err)
		}
	}
}

func TestGatewayCommand(t *testing.T) {
	t.Parallel()
	if err := dispatch(context.Background(), []string{"gateway", "nosuchplatform"}); !errors.Is(err, errUsage) {
		t.Fatalf("unknown platform: err = %v, want usage error", err)
	}
	for _, p := range []string{"api", "webhook"} {
		if _, ok := services[gateways[p]]; !ok {
			t.Fatalf("gateway %s has no service", p)
		}
	}
	// Without API_SERVER_KEY the API gateway refuses to start.
	cfg := defaultConfig()
	cfg.Gateways.API.Key = ""
	a := newApp("gateway-api", cfg)
	if _, err := startAPIGateway(context.Background(), a); err == nil || !strings.Contains(err.Error(), "gateways.api.key") {
		t.Fatalf("start without a key: %v", err)
	}
}
