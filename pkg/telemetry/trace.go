package telemetry

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.26.0"

	"github.com/switchboard-chat/switchboard/pkg/pseudonym"
)

// TraceConfig says where spans go.
type TraceConfig struct {
	// Service is the OpenTelemetry service.name unless OTEL_SERVICE_NAME
	// or OTEL_RESOURCE_ATTRIBUTES names one.
	Service string
	Version string
	// Exporter overrides the OTLP exporter (tests use an in-memory one).
	Exporter sdktrace.SpanExporter
	// Log receives the SDK's errors (a collector out of reach), at most
	// one a minute; nil: slog's default logger.
	Log *slog.Logger
	// Pseudonyms, when set, pseudonymize the exported spans as the logs
	// are (LogConfig.Pseudonyms): session keys and user and chat ids in
	// their names, attributes, events and status descriptions; and
	// SpanError takes the ids an error names out of its status.
	Pseudonyms *pseudonym.Pseudonymizer
}

// SetupTracing installs the global propagator, the one OTEL_PROPAGATORS
// names (Propagators; W3C trace context and baggage by default: the bus
// and the HTTP and gRPC servers and clients all use it), and, when OTEL_EXPORTER_OTLP_ENDPOINT (or
// OTEL_EXPORTER_OTLP_TRACES_ENDPOINT) is set or an exporter is given, a
// tracer provider that exports spans. The returned function flushes and
// stops it.
//
// The standard OTEL_* variables apply: the exporters read the endpoint,
// headers, timeout, compression and TLS settings; the provider reads
// OTEL_TRACES_SAMPLER and the span limits; OTEL_SERVICE_NAME and
// OTEL_RESOURCE_ATTRIBUTES override the resource's service name and add
// attributes. OTEL_EXPORTER_OTLP_(TRACES_)PROTOCOL picks the transport:
// grpc (the default here, port 4317) or http/protobuf (4318); any other
// value is a configuration error. OTEL_SDK_DISABLED=true or
// OTEL_TRACES_EXPORTER=none export nothing.
func SetupTracing(ctx context.Context, cfg TraceConfig) (shutdown func(context.Context) error, err error) {
	log := cfg.Log
	if log == nil {
		log = slog.Default()
	}
	prop, names, unknown := Propagators(os.Getenv("OTEL_PROPAGATORS"))
	if len(unknown) > 0 {
		log.Warn("OTEL_PROPAGATORS names propagators this build does not know; ignored",
			"unknown", strings.Join(unknown, ","), "using", strings.Join(names, ","),
			"known", "tracecontext,baggage,b3,b3multi,jaeger,xray,ottrace,none")
	}
	otel.SetTextMapPropagator(prop)
	noop := func(context.Context) error { return nil }
	exp := cfg.Exporter
	if exp == nil {
		if strings.EqualFold(os.Getenv("OTEL_SDK_DISABLED"), "true") || strings.EqualFold(os.Getenv("OTEL_TRACES_EXPORTER"), "none") {
			return noop, nil
		}
		if os.Getenv("OTEL_EXPORTER_OTLP_ENDPOINT") == "" && os.Getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") == "" {
			return noop, nil
		}
		if exp, err = otlpExporter(ctx); err != nil {
			return nil, err
		}
	}
	res, err := traceResource(ctx, cfg)
	if err != nil {
		return nil, err
	}
	otel.SetErrorHandler(newOTelErrors(cfg.Log, time.Minute))
	if cfg.Pseudonyms != nil {
		exp = pseudonymizingExporter{SpanExporter: exp, p: cfg.Pseudonyms}
	}
	spanPseudonyms.Store(cfg.Pseudonyms)
	var opts []sdktrace.TracerProviderOption
	if cfg.Exporter != nil {
		opts = append(opts, sdktrace.WithSyncer(exp))
	} else {
		opts = append(opts, sdktrace.WithBatcher(exp))
	}
	tp := sdktrace.NewTracerProvider(append(opts, sdktrace.WithResource(res))...)
	otel.SetTracerProvider(tp)
	return tp.Shutdown, nil
}

// otlpExporter is the OTLP exporter for the protocol the environment
// asks for.
func otlpExporter(ctx context.Context) (sdktrace.SpanExporter, error) {
	proto, from := os.Getenv("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"), "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"
	if proto == "" {
		proto, from = os.Getenv("OTEL_EXPORTER_OTLP_PROTOCOL"), "OTEL_EXPORTER_OTLP_PROTOCOL"
	}
	switch proto {
	case "", "grpc":
		exp, err := otlptracegrpc.New(ctx)
		if err != nil {
			return nil, fmt.Errorf("otlp grpc trace exporter: %w", err)
		}
		return exp, nil
	case "http/protobuf":
		exp, err := otlptracehttp.New(ctx)
		if err != nil {
			return nil, fmt.Errorf("otlp http trace exporter: %w", err)
		}
		return exp, nil
	default:
		return nil, fmt.Errorf("%s=%q: want grpc or http/protobuf", from, proto)
	}
}

// traceResource describes this process: the SDK's defaults, then the
// service's name and version, then OTEL_SERVICE_NAME and
// OTEL_RESOURCE_ATTRIBUTES, which win (an operator names the service
// per environment).
//
// Ours is schemaless: with the semconv package's schema URL it conflicted
// with the SDK default's newer one, the merge failed, and every process
// reported service.name "unknown_service:switchboard".
func traceResource(ctx context.Context, cfg TraceConfig) (*resource.Resource, error) {
	res, err := resource.Merge(resource.Default(), resource.NewSchemaless(
		semconv.ServiceName(cfg.Service), semconv.ServiceVersion(cfg.Version)))
	if err != nil {
		return nil, fmt.Errorf("trace resource: %w", err)
	}
	env, err := resource.New(ctx, resource.WithFromEnv())
	if err != nil {
		return nil, fmt.Errorf("trace resource: OTEL_RESOURCE_ATTRIBUTES: %w", err)
	}
	if res, err = resource.Merge(res, env); err != nil {
		return nil, fmt.Errorf("trace resource: %w", err)
	}
	return res, nil
}

// otelErrors logs the OpenTelemetry SDK's errors as JSON records like the
// rest of the process (the SDK's default prints them with the standard
// logger), at most one per interval: a collector out of reach fails every
// export, every few seconds.
type otelErrors struct {
	log      *slog.Logger
	interval time.Duration
	mu       sync.Mutex
	last     time.Time
	dropped  int
}

func newOTelErrors(log *slog.Logger, interval time.Duration) *otelErrors {
	if log == nil {
		log = slog.Default()
	}
	return &otelErrors{log: log, interval: interval}
}

func (h *otelErrors) Handle(err error) {
	h.mu.Lock()
	now := time.Now()
	if !h.last.IsZero() && now.Sub(h.last) < h.interval {
		h.dropped++
		h.mu.Unlock()
		return
	}
	dropped := h.dropped
	h.last, h.dropped = now, 0
	h.mu.Unlock()
	h.log.Warn("opentelemetry error; spans may be lost", "err", err, "similar_errors_not_logged", dropped)
}
