package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/switchboard-chat/switchboard/pkg/logtest"
	"github.com/switchboard-chat/switchboard/pkg/pg/pgtest"
	"github.com/switchboard-chat/switchboard/pkg/redisx/redistest"
)

// inProcessDev is every dev service running in the test process with an
// in-memory span exporter, on its own schema, Redis prefix, embedded NATS
// and random ports.
type inProcessDev struct {
	cfg     *Config
	spans   *tracetest.InMemoryExporter
	logs    *logtest.Buffer
	apiAddr string
	stop    func()
}

func startInProcessDev(t *testing.T, services ...string) *inProcessDev {
	t.Helper()
	return startInProcessDevWith(t, nil, services...)
}

// startInProcessDevWith is startInProcessDev with a configuration the
// test changes (mutate, when set, after the defaults).
func startInProcessDevWith(t *testing.T, mutate func(*Config), services ...string) *inProcessDev {
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
	// Load tests send from one anonymous key.
	cfg.Gateways.API.RateLimit, cfg.Gateways.API.RateBurst = 1000, 1000
	cfg.Gateways.Webhook.Addr = "127.0.0.1:0"
	cfg.LLM = LLMConfig{Provider: "fake", MaxAttempts: 1}
	if mutate != nil {
		mutate(cfg)
	}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	d := &inProcessDev{cfg: cfg, spans: tracetest.NewInMemoryExporter(), logs: &logtest.Buffer{}, apiAddr: cfg.Gateways.API.Addr}
	ctx, cancel := context.WithCancel(context.Background())
	ready := make(chan string, 1)
	done := make(chan error, 1)
	go func() {
		done <- runDevWith(ctx, cfg, devOptions{exporter: keepSpans{d.spans}, logOut: d.logs, services: services,
			ready: func(a *app, ops string) { ready <- ops }})
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

// keepSpans keeps the recorded spans when the tracer provider shuts
// down, so the test can read them after the services stopped.
type keepSpans struct{ *tracetest.InMemoryExporter }

func (keepSpans) Shutdown(context.Context) error { return nil }

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
	answer, _, ok := decodeCompletion(raw)
	if !ok {
		return "", fmt.Errorf("not a completion: %s", raw)
	}
	return answer, nil
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
	if !strings.HasPrefix(got, "echo: what time is it?") || !strings.Contains(got, "UTC") {
		t.Fatalf("answer %q is not the echo with the clock tool's result", got)
	}

	// Each hop, as its span name: gateway request, router, worker, model
	// and tool, delivery, the send to the gateway and the platform send.
	hops := []*regexp.Regexp{
		regexp.MustCompile(`^gateway\.api POST /v1/chat/completions$`),
		regexp.MustCompile(`^publish .*inbound\.message\.received`),
		regexp.MustCompile(`^consume router-inbound`),
		regexp.MustCompile(`^publish .*turns\.turn\.requested$`),
		regexp.MustCompile(`^consume worker-turns$`),
		regexp.MustCompile(`^llm fake$`),
		regexp.MustCompile(`^tool clock$`),
		regexp.MustCompile(`^publish .*replies\.event`),
		regexp.MustCompile(`^consume delivery-replies`),
		regexp.MustCompile(`^delivery send api$`),
		regexp.MustCompile(`^request .*gateway\.api\.send$`),
		regexp.MustCompile(`^platform send api$`),
	}
	var spans tracetest.SpanStubs
	waitFor(t, 20*time.Second, "a span for every hop, the final send included", func() bool {
		spans = d.spans.GetSpans()
		for _, h := range hops {
			if !hasSpan(spans, h) {
				return false
			}
		}
		return true
	})
	// Let the last sends (typing, stream edits) finish before checking
	// that everything is connected.
	d.stop()
	spans = d.spans.GetSpans()

	traces := map[string]bool{}
	ids := map[string]bool{}
	for _, s := range spans {
		traces[s.SpanContext.TraceID().String()] = true
		ids[s.SpanContext.SpanID().String()] = true
	}
	var roots []string
	for _, s := range spans {
		if !s.Parent.IsValid() {
			roots = append(roots, s.Name)
		} else if !ids[s.Parent.SpanID().String()] {
			t.Errorf("span %q has parent %s, which is not in the trace", s.Name, s.Parent.SpanID())
		}
	}
	if len(traces) != 1 || len(roots) != 1 || roots[0] != "gateway.api POST /v1/chat/completions" {
		for _, s := range spans {
			t.Logf("%s %s parent=%s %q", s.SpanContext.TraceID(), s.SpanContext.SpanID(), s.Parent.SpanID(), s.Name)
		}
		t.Fatalf("want one trace rooted at the gateway request; got %d traces, roots %q", len(traces), roots)
	}
	var traceID string
	for id := range traces {
		traceID = id
	}

	// Logs: the turn's records carry the trace id; the message text never
	// reaches the log at info level.
	logs := d.logs.String()
	if strings.Contains(logs, "what time is it") {
		t.Errorf("the message body was logged:\n%s", logs)
	}
	for _, msg := range []string{"turn requested", "turn started", "turn completed"} {
		found := false
		for _, line := range strings.Split(logs, "\n") {
			if strings.Contains(line, `"msg":"`+msg+`"`) {
				found = true
				if !strings.Contains(line, `"trace_id":"`+traceID+`"`) {
					t.Errorf("log record %q lacks trace id %s: %s", msg, traceID, line)
				}
			}
		}
		if !found {
			t.Errorf("no %q log record:\n%s", msg, logs)
		}
	}
}

func hasSpan(spans tracetest.SpanStubs, re *regexp.Regexp) bool {
	for _, s := range spans {
		if re.MatchString(s.Name) {
			return true
		}
	}
	return false
}

// TestQueuedMessageKeepsItsTrace sends a second message to a session
// while the first one's turn runs (busy mode queue): its turn starts from
// the first turn's completion, yet it must stay in its own trace, from
// its gateway request to its send, not join the first message's.
//
// Not parallel: tracing is process-global.
func TestQueuedMessageKeepsItsTrace(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the whole system")
	}
	d := startInProcessDevWith(t, func(c *Config) { c.Router.BusyMode = "queue" })
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	session := randomID()
	first := make(chan error, 1)
	go func() {
		_, err := chat(ctx, d.apiAddr, session, "[[latency:1500ms]] first")
		first <- err
	}()
	// The second message must arrive while the first turn runs.
	waitFor(t, 20*time.Second, "the first turn running", func() bool {
		return hasSpan(d.spans.GetSpans(), regexp.MustCompile(`^consume worker-turns$`)) ||
			strings.Contains(d.logs.String(), `"msg":"turn started"`)
	})
	got, err := chat(ctx, d.apiAddr, session, "second")
	if err != nil {
		t.Fatalf("second chat: %v\nlog:\n%s", err, d.logs.String())
	}
	if !strings.Contains(got, "second") {
		t.Fatalf("second answer %q", got)
	}
	if err := <-first; err != nil {
		t.Fatalf("first chat: %v", err)
	}
	d.stop()

	byTrace := map[string][]string{}
	ids := map[string]bool{}
	spans := d.spans.GetSpans()
	for _, s := range spans {
		id := s.SpanContext.TraceID().String()
		byTrace[id] = append(byTrace[id], s.Name)
		ids[s.SpanContext.SpanID().String()] = true
	}
	for _, s := range spans {
		if s.Parent.IsValid() && !ids[s.Parent.SpanID().String()] {
			t.Errorf("span %q has parent %s, which is not in its trace", s.Name, s.Parent.SpanID())
		}
	}
	var roots int
	for id, names := range byTrace {
		joined := "\n" + strings.Join(names, "\n") + "\n"
		if !strings.Contains(joined, "\ngateway.api POST /v1/chat/completions\n") {
			continue
		}
		roots++
		for _, want := range []string{"\nconsume worker-turns\n", "\nllm fake\n", "\ndelivery send api\n", "\nplatform send api\n"} {
			if n := strings.Count(joined, want); n != 1 {
				t.Errorf("trace %s has %d %q spans, want 1:%s", id, n, strings.TrimSpace(want), joined)
			}
		}
	}
	if roots != 2 {
		t.Errorf("%d traces start at a gateway request, want 2: %v", roots, byTrace)
	}
}
