package telemetry

import (
	"context"
	"fmt"
	"os"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.26.0"
)

// TraceConfig says where spans go.
type TraceConfig struct {
	// Service is the OpenTelemetry service.name.
	Service string
	Version string
	// Exporter overrides the OTLP exporter (tests use an in-memory one).
	Exporter sdktrace.SpanExporter
}

// SetupTracing installs the global propagator (W3C trace context and
// baggage, always) and, when OTEL_EXPORTER_OTLP_ENDPOINT is set or an
// exporter is given, a tracer provider that exports spans. The returned
// function flushes and stops it.
func SetupTracing(ctx context.Context, cfg TraceConfig) (shutdown func(context.Context) error, err error) {
	otel.SetTextMapPropagator(propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{}))
	exp := cfg.Exporter
	if exp == nil {
		if os.Getenv("OTEL_EXPORTER_OTLP_ENDPOINT") == "" && os.Getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") == "" {
			return func(context.Context) error { return nil }, nil
		}
		exp, err = otlptracegrpc.New(ctx)
		if err != nil {
			return nil, fmt.Errorf("otlp trace exporter: %w", err)
		}
	}
	res, err := resource.Merge(resource.Default(), resource.NewWithAttributes(semconv.SchemaURL,
		semconv.ServiceName(cfg.Service), semconv.ServiceVersion(cfg.Version)))
	if err != nil {
		res = resource.Default()
	}
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
