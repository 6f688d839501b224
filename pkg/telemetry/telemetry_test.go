package telemetry_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"

	"go.opentelemetry.io/otel/trace"

	"github.com/switchboard-chat/switchboard/pkg/telemetry"
)

func TestReadyz(t *testing.T) {
	t.Parallel()
	h := telemetry.NewHealth()
	var depErr error
	h.Add("dep", func(context.Context) error { return depErr })
	srv := telemetry.NewServer("127.0.0.1:0", h, false, nil)
	if err := srv.Listen(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Run(ctx) }()
	defer func() { cancel(); <-done }()

	get := func(path string) (int, string) {
		resp, err := http.Get("http://" + srv.Addr() + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	steps := []struct {
		name     string
		set      func()
		path     string
		wantCode int
		wantBody string
	}{
		{"live", func() {}, "/healthz", 200, "ok"},
		{"ready", func() {}, "/readyz", 200, `"ready":true`},
		{"dependency down", func() { depErr = errors.New("connection refused") }, "/readyz", 503, `"dep":"connection refused"`},
		{"still live", func() {}, "/healthz", 200, "ok"},
		{"draining", func() { depErr = nil; h.SetDraining() }, "/readyz", 503, `"process":"draining"`},
		{"metrics", func() {}, "/metrics", 200, "go_goroutines"},
		{"collector's share", func() {}, "/metrics", 200, "go_cpu_classes_gc_total_cpu_seconds_total"},
		{"process CPU", func() {}, "/metrics", 200, "go_cpu_classes_total_cpu_seconds_total"},
		{"idle CPU", func() {}, "/metrics", 200, "go_cpu_classes_idle_cpu_seconds_total"},
		{"live heap", func() {}, "/metrics", 200, "go_gc_heap_live_bytes"},
	}
	for _, s := range steps {
		s.set()
		code, body := get(s.path)
		if code != s.wantCode || !strings.Contains(body, s.wantBody) {
			t.Errorf("%s: %s = %d %q, want %d containing %q", s.name, s.path, code, body, s.wantCode, s.wantBody)
		}
	}
}

func TestLoggerAddsTraceIDs(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	log := telemetry.NewLogger(telemetry.LogConfig{Level: "info"}, &buf)
	tid, _ := trace.TraceIDFromHex("0102030405060708090a0b0c0d0e0f10")
	sid, _ := trace.SpanIDFromHex("0102030405060708")
	ctx := trace.ContextWithSpanContext(context.Background(), trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: sid}))
	log.InfoContext(ctx, "hello", "k", "v")
	log.Debug("hidden at info")
	var rec map[string]any
	if err := json.Unmarshal(bytes.Split(buf.Bytes(), []byte("\n"))[0], &rec); err != nil {
		t.Fatal(err)
	}
	if rec["trace_id"] != tid.String() || rec["span_id"] != sid.String() || rec["k"] != "v" {
		t.Fatalf("record = %v", rec)
	}
	if strings.Contains(buf.String(), "hidden") {
		t.Fatal("debug record logged at info level")
	}
}

func TestWithTraceBindsIDsOnce(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	log := telemetry.NewLogger(telemetry.LogConfig{Level: "info"}, &buf)
	tid, _ := trace.TraceIDFromHex("0102030405060708090a0b0c0d0e0f10")
	sid, _ := trace.SpanIDFromHex("0102030405060708")
	ctx := trace.ContextWithSpanContext(context.Background(), trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: sid}))
	if telemetry.WithTrace(context.Background(), log) != log {
		t.Fatal("WithTrace without a span should return the logger as it is")
	}
	bound := telemetry.WithTrace(ctx, log).With("turn", "t1")
	bound.Info("without ctx")
	bound.InfoContext(ctx, "with ctx")
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != 2 {
		t.Fatalf("got %d records:\n%s", len(lines), buf.String())
	}
	for _, line := range lines {
		if strings.Count(line, `"trace_id"`) != 1 || !strings.Contains(line, `"trace_id":"`+tid.String()+`"`) ||
			!strings.Contains(line, `"turn":"t1"`) {
			t.Fatalf("record %s: want the trace id once and the bound attributes", line)
		}
	}
}
