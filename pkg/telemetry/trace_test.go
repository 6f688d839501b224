package telemetry_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"

	adminv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/admin/v1"
	eventsv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/events/v1"
	"github.com/switchboard-chat/switchboard/pkg/pseudonym"
	"github.com/switchboard-chat/switchboard/pkg/telemetry"
)

// Not parallel: the tests set the process's environment and its global
// tracer provider.

func TestTracingResourceFollowsEnv(t *testing.T) {
	tests := []struct {
		name        string
		env         map[string]string
		wantService string
		wantAttr    attribute.KeyValue
	}{
		{"default", nil, "switchboard-router", attribute.String("service.version", "v9")},
		{"OTEL_SERVICE_NAME", map[string]string{"OTEL_SERVICE_NAME": "prod-router"}, "prod-router", attribute.String("service.version", "v9")},
		{"OTEL_RESOURCE_ATTRIBUTES", map[string]string{"OTEL_RESOURCE_ATTRIBUTES": "service.name=eu-router,deployment.environment=prod"},
			"eu-router", attribute.String("deployment.environment", "prod")},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Setenv("OTEL_SERVICE_NAME", "")
			t.Setenv("OTEL_RESOURCE_ATTRIBUTES", "")
			for k, v := range tt.env {
				t.Setenv(k, v)
			}
			exp := tracetest.NewInMemoryExporter()
			shutdown, err := telemetry.SetupTracing(context.Background(), telemetry.TraceConfig{Service: "switchboard-router", Version: "v9", Exporter: exp})
			if err != nil {
				t.Fatal(err)
			}
			_, span := otel.Tracer("test").Start(context.Background(), "op")
			span.End() // exported as it ends (a syncer)
			spans := exp.GetSpans()
			if err := shutdown(context.Background()); err != nil {
				t.Fatal(err)
			}
			if len(spans) != 1 {
				t.Fatalf("%d spans, want 1", len(spans))
			}
			attrs := map[attribute.Key]attribute.Value{}
			for _, kv := range spans[0].Resource.Attributes() {
				attrs[kv.Key] = kv.Value
			}
			if got := attrs["service.name"].AsString(); got != tt.wantService {
				t.Errorf("service.name %q, want %q", got, tt.wantService)
			}
			if got := attrs[tt.wantAttr.Key]; got != tt.wantAttr.Value {
				t.Errorf("%s %q, want %q", tt.wantAttr.Key, got.String(), tt.wantAttr.Value.String())
			}
		})
	}
}

// collector is a fake OpenTelemetry collector: it takes OTLP trace
// exports over gRPC and over HTTP (protobuf) and keeps the span names.
type collector struct {
	coltracepb.UnimplementedTraceServiceServer
	mu    sync.Mutex
	names []string
}

func (c *collector) keep(req *coltracepb.ExportTraceServiceRequest) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, rs := range req.GetResourceSpans() {
		for _, ss := range rs.GetScopeSpans() {
			for _, s := range ss.GetSpans() {
				c.names = append(c.names, s.GetName())
			}
		}
	}
}

func (c *collector) Export(_ context.Context, req *coltracepb.ExportTraceServiceRequest) (*coltracepb.ExportTraceServiceResponse, error) {
	c.keep(req)
	return &coltracepb.ExportTraceServiceResponse{}, nil
}

func (c *collector) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path != "/v1/traces" || r.Header.Get("Content-Type") != "application/x-protobuf" {
		http.Error(w, "not an OTLP/HTTP protobuf trace export", http.StatusBadRequest)
		return
	}
	b, err := io.ReadAll(r.Body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	var req coltracepb.ExportTraceServiceRequest
	if err := proto.Unmarshal(b, &req); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	c.keep(&req)
	out, _ := proto.Marshal(&coltracepb.ExportTraceServiceResponse{})
	w.Header().Set("Content-Type", "application/x-protobuf")
	_, _ = w.Write(out)
}

func (c *collector) spans() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]string(nil), c.names...)
}

// startCollector serves c over gRPC or HTTP and returns its endpoint URL.
func startCollector(t *testing.T, c *collector, protocol string) string {
	t.Helper()
	if protocol == "http/protobuf" {
		srv := httptest.NewServer(c)
		t.Cleanup(srv.Close)
		return srv.URL
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer()
	coltracepb.RegisterTraceServiceServer(gs, c)
	go func() { _ = gs.Serve(ln) }()
	t.Cleanup(gs.Stop)
	return "http://" + ln.Addr().String()
}

func TestTracingExportsOverOTLP(t *testing.T) {
	tests := []struct {
		name     string
		env      map[string]string
		protocol string // the collector's
		want     bool
	}{
		{"grpc by default", nil, "grpc", true},
		{"grpc", map[string]string{"OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"}, "grpc", true},
		{"http/protobuf", map[string]string{"OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf"}, "http/protobuf", true},
		{"traces protocol wins", map[string]string{"OTEL_EXPORTER_OTLP_PROTOCOL": "grpc", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "http/protobuf"}, "http/protobuf", true},
		{"sdk disabled", map[string]string{"OTEL_SDK_DISABLED": "true"}, "grpc", false},
		{"exporter none", map[string]string{"OTEL_TRACES_EXPORTER": "none"}, "grpc", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for _, k := range []string{"OTEL_EXPORTER_OTLP_PROTOCOL", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_SDK_DISABLED", "OTEL_TRACES_EXPORTER"} {
				t.Setenv(k, "")
			}
			for k, v := range tt.env {
				t.Setenv(k, v)
			}
			c := &collector{}
			t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", startCollector(t, c, tt.protocol))
			t.Setenv("OTEL_EXPORTER_OTLP_INSECURE", "true")
			shutdown, err := telemetry.SetupTracing(context.Background(), telemetry.TraceConfig{Service: "switchboard-test"})
			if err != nil {
				t.Fatal(err)
			}
			_, span := otel.Tracer("test").Start(context.Background(), "consume worker-turns")
			span.End()
			// Shutdown flushes the batch: the export is done when it returns.
			if err := shutdown(context.Background()); err != nil {
				t.Fatal(err)
			}
			got := strings.Join(c.spans(), ",")
			if tt.want && got != "consume worker-turns" {
				t.Errorf("collector got spans %q, want the one span", got)
			}
			if !tt.want && got != "" {
				t.Errorf("collector got spans %q, want none", got)
			}
		})
	}
}

func TestTracingRefusesUnknownProtocol(t *testing.T) {
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4318")
	t.Setenv("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "")
	t.Setenv("OTEL_SDK_DISABLED", "")
	t.Setenv("OTEL_TRACES_EXPORTER", "")
	t.Setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "http/json")
	_, err := telemetry.SetupTracing(context.Background(), telemetry.TraceConfig{Service: "switchboard-test"})
	if err == nil || !strings.Contains(err.Error(), `OTEL_EXPORTER_OTLP_PROTOCOL="http/json"`) {
		t.Fatalf("err %v, want a configuration error naming the variable", err)
	}
}

// failingExporter refuses every export, as a collector out of reach.
type failingExporter struct{}

func (failingExporter) ExportSpans(context.Context, []sdktrace.ReadOnlySpan) error {
	return errors.New("connection refused")
}
func (failingExporter) Shutdown(context.Context) error { return nil }

// An export that fails is logged as a JSON record of the process's
// logger, once, not printed by the standard logger for every batch.
func TestTracingLogsExportFailuresOnce(t *testing.T) {
	var buf bytes.Buffer
	log := slog.New(slog.NewJSONHandler(&buf, nil))
	shutdown, err := telemetry.SetupTracing(context.Background(), telemetry.TraceConfig{Service: "switchboard-test", Exporter: failingExporter{}, Log: log})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = shutdown(context.Background()) }()
	for range 3 {
		_, span := otel.Tracer("test").Start(context.Background(), "op")
		span.End() // exported, and refused, as it ends
	}
	if n := strings.Count(buf.String(), `"msg":"opentelemetry error; spans may be lost"`); n != 1 || !strings.Contains(buf.String(), "connection refused") {
		t.Fatalf("%d records, want 1 naming the cause:\n%s", n, buf.String())
	}
}

func TestTracingRefusesMalformedResourceAttributes(t *testing.T) {
	t.Setenv("OTEL_RESOURCE_ATTRIBUTES", "deployment.environment")
	_, err := telemetry.SetupTracing(context.Background(), telemetry.TraceConfig{Service: "switchboard-test", Exporter: tracetest.NewInMemoryExporter()})
	if err == nil || !strings.Contains(err.Error(), "OTEL_RESOURCE_ATTRIBUTES") {
		t.Fatalf("err %v, want a configuration error naming the variable", err)
	}
}

// TestTracingPseudonyms: with Pseudonyms set, exported spans carry
// session keys and ids as the logs do; without, as they were recorded.
func TestTracingPseudonyms(t *testing.T) {
	const key = "agent:main:whatsapp:dm:15551234567"
	p := pseudonym.New("k")
	pkey := p.Key(key)
	for _, tt := range []struct {
		name string
		p    *pseudonym.Pseudonymizer
		want func(string) string
	}{
		{"on", p, func(s string) string { return strings.ReplaceAll(s, key, pkey) }},
		{"off", nil, func(s string) string { return s }},
	} {
		t.Run(tt.name, func(t *testing.T) {
			exp := tracetest.NewInMemoryExporter()
			shutdown, err := telemetry.SetupTracing(context.Background(), telemetry.TraceConfig{Service: "switchboard-test", Exporter: exp, Pseudonyms: tt.p})
			if err != nil {
				t.Fatal(err)
			}
			_, span := otel.Tracer("test").Start(context.Background(), "turn "+key,
				trace.WithAttributes(attribute.String("session.session_key", key), attribute.String("messaging.destination.name", "replies.3"),
					attribute.Int("messaging.batch.message_count", 2)))
			cause := fmt.Errorf("lock session %s: %w", key, errTimeout)
			span.RecordError(cause)
			span.SetStatus(codes.Error, cause.Error())
			span.End()
			spans := exp.GetSpans()
			if err := shutdown(context.Background()); err != nil {
				t.Fatal(err)
			}
			if len(spans) != 1 {
				t.Fatalf("%d spans, want 1", len(spans))
			}
			s := spans[0]
			if want := tt.want("turn " + key); s.Name != want {
				t.Errorf("name %q, want %q", s.Name, want)
			}
			if want := tt.want(cause.Error()); s.Status.Description != want {
				t.Errorf("status %q, want %q", s.Status.Description, want)
			}
			attrs := map[attribute.Key]attribute.Value{}
			for _, kv := range s.Attributes {
				attrs[kv.Key] = kv.Value
			}
			if got, want := attrs["session.session_key"].AsString(), tt.want(key); got != want {
				t.Errorf("session.session_key %q, want %q", got, want)
			}
			if got := attrs["messaging.destination.name"].AsString(); got != "replies.3" {
				t.Errorf("messaging.destination.name %q", got)
			}
			if got := attrs["messaging.batch.message_count"].AsInt64(); got != 2 {
				t.Errorf("messaging.batch.message_count %d", got)
			}
			if len(s.Events) != 1 {
				t.Fatalf("events %v", s.Events)
			}
			for _, kv := range s.Events[0].Attributes {
				if kv.Key == "exception.message" && kv.Value.AsString() != tt.want(cause.Error()) {
					t.Errorf("exception.message %q, want %q", kv.Value.AsString(), tt.want(cause.Error()))
				}
			}
		})
	}
}

// TestSpanErrorPseudonyms: an error set on a span names the chat and
// user it was about (those it is marked as naming, those given, those
// of the message handled) by their pseudonyms, and its session keys by
// theirs as the exporter shows every text (once, not pseudonymized
// again); without pseudonyms as it is.
func TestSpanErrorPseudonyms(t *testing.T) {
	const (
		chat = "900000000000000001"
		user = "15551234567"
		key  = "agent:main:whatsapp:dm:" + user
	)
	p := pseudonym.New("k")
	ev := &eventsv1.MessageReceived{Source: &eventsv1.SessionSource{Platform: "discord", ChatId: chat, UserId: user}}
	for _, tt := range []struct {
		name string
		err  error
		ids  []string
		want string
	}{
		{"marked as naming", pseudonym.Naming(fmt.Errorf(`Post "https://discord.com/api/v9/channels/%s/messages": EOF`, chat), chat),
			nil, `Post "https://discord.com/api/v9/channels/` + p.ID(chat) + `/messages": EOF`},
		{"wrapped, beside a key", fmt.Errorf("send for %s: %w", key, pseudonym.Naming(fmt.Errorf("user %s blocked the bot", user), user)),
			nil, "send for " + p.Key(key) + ": user " + p.ID(user) + " blocked the bot"},
		{"the ids given", fmt.Errorf("chat %s: forbidden", chat), []string{chat}, "chat " + p.ID(chat) + ": forbidden"},
		{"the message's ids", fmt.Errorf("chat %s of user %s: forbidden", chat, user), telemetry.MessageIDs(ev),
			"chat " + p.ID(chat) + " of user " + p.ID(user) + ": forbidden"},
		{"the ids of a message's list", fmt.Errorf("user %s: not allowed", user), telemetry.MessageIDs(&adminv1.PauseAllowlist{UserIds: []string{chat, user}}),
			"user " + p.ID(user) + ": not allowed"},
	} {
		for _, on := range []bool{true, false} {
			exp := tracetest.NewInMemoryExporter()
			cfg := telemetry.TraceConfig{Service: "switchboard-test", Exporter: exp}
			want := tt.err.Error()
			if on {
				cfg.Pseudonyms, want = p, tt.want
			}
			shutdown, err := telemetry.SetupTracing(context.Background(), cfg)
			if err != nil {
				t.Fatal(err)
			}
			_, span := otel.Tracer("test").Start(context.Background(), "consume")
			telemetry.SpanError(span, tt.err, tt.ids...)
			span.End()
			spans := exp.GetSpans()
			if err := shutdown(context.Background()); err != nil {
				t.Fatal(err)
			}
			if len(spans) != 1 {
				t.Fatalf("%d spans, want 1", len(spans))
			}
			if got := spans[0].Status; got.Code != codes.Error || got.Description != want {
				t.Errorf("%s, pseudonyms %v: status %v %q, want error %q", tt.name, on, got.Code, got.Description, want)
			}
		}
	}
}

// TestSpanMessageErrorCostsNothingUnused: a bus error set on a span
// without pseudonyms, or on a span not recorded, does not walk the
// message for its ids (no allocation): the bus's error paths pay for
// pseudonyms only when they are on and the span is exported.
func TestSpanMessageErrorCostsNothingUnused(t *testing.T) {
	ev := &eventsv1.MessageReceived{Source: &eventsv1.SessionSource{Platform: "telegram", ChatId: "900000000000000001", UserId: "15551234567"}}
	failed := errors.New("nats: timeout")
	for _, on := range []bool{false, true} {
		cfg := telemetry.TraceConfig{Service: "switchboard-test", Exporter: tracetest.NewInMemoryExporter()}
		if on {
			cfg.Pseudonyms = pseudonym.New("k")
		}
		shutdown, err := telemetry.SetupTracing(context.Background(), cfg)
		if err != nil {
			t.Fatal(err)
		}
		span := trace.SpanFromContext(context.Background()) // not recorded
		if !on {
			_, span = otel.Tracer("test").Start(context.Background(), "publish")
		}
		if n := testing.AllocsPerRun(100, func() { telemetry.SpanMessageError(span, failed, ev) }); n != 0 {
			t.Errorf("pseudonyms %v, span recorded %v: %v allocations, want 0", on, span.IsRecording(), n)
		}
		span.End()
		if on {
			// Recorded, the message's ids are taken out.
			_, span = otel.Tracer("test").Start(context.Background(), "publish")
			telemetry.SpanMessageError(span, fmt.Errorf("chat %s: forbidden", ev.GetSource().GetChatId()), ev)
			span.End()
			spans := cfg.Exporter.(*tracetest.InMemoryExporter).GetSpans()
			want := "chat " + cfg.Pseudonyms.ID(ev.GetSource().GetChatId()) + ": forbidden"
			if len(spans) != 1 || spans[0].Status.Description != want {
				t.Errorf("recorded with pseudonyms: spans %+v, want one with status %q", spans, want)
			}
		}
		if err := shutdown(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
}
