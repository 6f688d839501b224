package telemetry_test

import (
	"bytes"
	"context"
	"log/slog"
	"reflect"
	"sort"
	"strings"
	"testing"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/baggage"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/switchboard-chat/switchboard/pkg/telemetry"
)

// TestPropagatorsFollowEnv: the global propagator SetupTracing installs
// is the one OTEL_PROPAGATORS names, as the OpenTelemetry specification
// reads it: the header fields it injects for a sampled span with baggage,
// per value. Unknown names are ignored with a warning that names them.
// Not parallel: it sets the process's environment and global propagator.
func TestPropagatorsFollowEnv(t *testing.T) {
	for _, tc := range []struct {
		env        string
		wantFields []string
		wantWarn   string
	}{
		{"", []string{"baggage", "traceparent"}, ""},
		{"tracecontext,baggage", []string{"baggage", "traceparent"}, ""},
		{"tracecontext", []string{"traceparent"}, ""},
		{"baggage", []string{"baggage"}, ""},
		{"b3", []string{"b3"}, ""},
		{"b3multi", []string{"x-b3-sampled", "x-b3-spanid", "x-b3-traceid"}, ""},
		{"jaeger", []string{"uber-trace-id"}, ""},
		{"xray", []string{"X-Amzn-Trace-Id"}, ""},
		{"ottrace", []string{"ot-baggage-tenant", "ot-tracer-sampled", "ot-tracer-spanid", "ot-tracer-traceid"}, ""},
		{"tracecontext,b3multi", []string{"traceparent", "x-b3-sampled", "x-b3-spanid", "x-b3-traceid"}, ""},
		{" TraceContext , Jaeger,tracecontext ", []string{"traceparent", "uber-trace-id"}, ""},
		{"none", nil, ""},
		{"tracecontext,none", nil, ""},
		{"tracecontext,zipkin", []string{"traceparent"}, "zipkin"},
		{"zipkin,foo", []string{"baggage", "traceparent"}, "zipkin,foo"},
	} {
		t.Run(tc.env, func(t *testing.T) {
			t.Setenv("OTEL_PROPAGATORS", tc.env)
			var logs bytes.Buffer
			shutdown, err := telemetry.SetupTracing(context.Background(), telemetry.TraceConfig{Service: "switchboard-test",
				Log: slog.New(slog.NewJSONHandler(&logs, nil))})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = shutdown(context.Background()) })
			carrier := propagation.MapCarrier{}
			otel.GetTextMapPropagator().Inject(withSpanAndBaggage(t), carrier)
			var got []string
			for k := range carrier {
				got = append(got, k)
			}
			sort.Strings(got)
			want := append([]string(nil), tc.wantFields...)
			sort.Strings(want)
			if !reflect.DeepEqual(got, want) && !(len(got) == 0 && len(want) == 0) {
				t.Errorf("injected %v, want %v", got, want)
			}
			// What it injects, it extracts: the trace goes on across a hop
			// (ottrace carries its lower 64 bits).
			if tc.env != "baggage" && len(want) > 0 {
				sc := trace.SpanContextFromContext(otel.GetTextMapPropagator().Extract(context.Background(), carrier))
				if id := sc.TraceID().String(); id != "0102030405060708090a0b0c0d0e0f10" && (tc.env != "ottrace" || id != "0000000000000000090a0b0c0d0e0f10") {
					t.Errorf("extracted trace %v", sc.TraceID())
				}
			}
			warned := strings.Contains(logs.String(), "OTEL_PROPAGATORS names propagators this build does not know")
			if warned != (tc.wantWarn != "") || (warned && !strings.Contains(logs.String(), `"unknown":"`+tc.wantWarn+`"`)) {
				t.Errorf("warning %v, want one naming %q: %s", warned, tc.wantWarn, logs.String())
			}
		})
	}
}

func withSpanAndBaggage(t *testing.T) context.Context {
	t.Helper()
	sc := trace.NewSpanContext(trace.SpanContextConfig{
		TraceID:    trace.TraceID{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16},
		SpanID:     trace.SpanID{1, 2, 3, 4, 5, 6, 7, 8},
		TraceFlags: trace.FlagsSampled,
	})
	m, err := baggage.NewMember("tenant", "acme")
	if err != nil {
		t.Fatal(err)
	}
	b, err := baggage.New(m)
	if err != nil {
		t.Fatal(err)
	}
	return baggage.ContextWithBaggage(trace.ContextWithSpanContext(context.Background(), sc), b)
}
