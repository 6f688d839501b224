// Package telemetry sets up what every Switchboard process exposes: JSON
// logs with trace ids, OpenTelemetry traces, Prometheus metrics, and the
// health endpoints (/healthz, /readyz, gRPC health).
package telemetry

import (
	"context"
	"io"
	"log/slog"
	"os"
	"strings"

	"go.opentelemetry.io/otel/trace"
)

// LogConfig selects the log level and format, and whether records name
// people by pseudonyms.
type LogConfig struct {
	// Level: debug, info, warn or error.
	Level string `koanf:"level"`
	// Format: json (default) or text.
	Format string `koanf:"format"`
	// Pseudonymize replaces session keys' personal parts and platform
	// user and chat ids in log records (and span attributes) with
	// pseudonyms (pkg/pseudonym); on by default.
	Pseudonymize bool `koanf:"pseudonymize"`
	// PseudonymKey keys the pseudonyms' hash; every process of one
	// deployment needs the same. Empty: a fixed built-in key.
	PseudonymKey string `koanf:"pseudonym_key"`
}

// ParseLevel maps a level name to a slog level; unknown names are info.
func ParseLevel(s string) slog.Level {
	switch strings.ToLower(s) {
	case "debug":
		return slog.LevelDebug
	case "warn", "warning":
		return slog.LevelWarn
	case "error":
		return slog.LevelError
	default:
		return slog.LevelInfo
	}
}

// NewLogger builds the process logger. Records logged with a context that
// carries a span get trace_id and span_id attributes. With
// cfg.Pseudonymize, personal ids in records become pseudonyms
// (pseudonymizeAttr).
func NewLogger(cfg LogConfig, w io.Writer) *slog.Logger {
	if w == nil {
		w = os.Stderr
	}
	opts := &slog.HandlerOptions{Level: ParseLevel(cfg.Level)}
	p := cfg.Pseudonyms()
	if p != nil {
		opts.ReplaceAttr = pseudonymizeAttr(p)
	}
	var h slog.Handler
	if strings.EqualFold(cfg.Format, "text") {
		h = slog.NewTextHandler(w, opts)
	} else {
		h = slog.NewJSONHandler(w, opts)
	}
	if p != nil {
		h = namingHandler{Handler: h, p: p}
	}
	return slog.New(traceHandler{Handler: h})
}

// WithTrace returns log with the trace and span ids of ctx bound, for a
// logger that lives as long as one traced piece of work and is called
// without a context. Records logged through it with a context keep these
// ids rather than adding a second pair.
func WithTrace(ctx context.Context, log *slog.Logger) *slog.Logger {
	sc := trace.SpanContextFromContext(ctx)
	if !sc.IsValid() {
		return log
	}
	attrs := []slog.Attr{slog.String("trace_id", sc.TraceID().String()), slog.String("span_id", sc.SpanID().String())}
	if th, ok := log.Handler().(traceHandler); ok {
		return slog.New(traceHandler{Handler: th.Handler.WithAttrs(attrs), bound: true})
	}
	return slog.New(log.Handler().WithAttrs(attrs))
}

// traceHandler adds the current trace and span ids to each record.
type traceHandler struct {
	slog.Handler
	// bound: the ids are already attributes (WithTrace).
	bound bool
}

func (h traceHandler) Handle(ctx context.Context, r slog.Record) error {
	if sc := trace.SpanContextFromContext(ctx); sc.IsValid() && !h.bound {
		r.AddAttrs(slog.String("trace_id", sc.TraceID().String()), slog.String("span_id", sc.SpanID().String()))
	}
	return h.Handler.Handle(ctx, r)
}

func (h traceHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	return traceHandler{h.Handler.WithAttrs(attrs), h.bound}
}

func (h traceHandler) WithGroup(name string) slog.Handler {
	return traceHandler{h.Handler.WithGroup(name), h.bound}
}
