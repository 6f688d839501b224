package telemetry

import (
	"strings"

	"go.opentelemetry.io/contrib/propagators/autoprop"
	"go.opentelemetry.io/otel/propagation"
)

// DefaultPropagators is what OTEL_PROPAGATORS means when it is unset or
// empty (the OpenTelemetry specification's default).
const DefaultPropagators = "tracecontext,baggage"

// Propagators is the propagator OTEL_PROPAGATORS (env) names, as the
// OpenTelemetry specification reads it: a comma-separated list of
// tracecontext, baggage, b3 (single header), b3multi, jaeger, xray and
// ottrace, composed in its order (names are trimmed and read in any
// case; a repeated one counts once); none alone, or with others,
// propagates nothing; empty means DefaultPropagators. Names it does not
// know are returned in unknown and ignored (the specification asks for
// a warning, not a failure); when it names nothing it knows, the default
// applies.
func Propagators(env string) (p propagation.TextMapPropagator, names, unknown []string) {
	seen := map[string]bool{}
	for _, n := range strings.Split(env, ",") {
		n = strings.ToLower(strings.TrimSpace(n))
		if n == "" || seen[n] {
			continue
		}
		seen[n] = true
		if _, err := autoprop.TextMapPropagator(n); err != nil {
			unknown = append(unknown, n)
			continue
		}
		names = append(names, n)
	}
	if len(names) == 0 {
		names = strings.Split(DefaultPropagators, ",")
	}
	for _, n := range names {
		if n == "none" {
			names = []string{"none"}
			break
		}
	}
	p, err := autoprop.TextMapPropagator(names...)
	if err != nil || p == nil { // cannot happen: every name was checked
		p = propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{})
	}
	return p, names, unknown
}
