package api

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
)

// TestSpansNamedByRoute checks that a request's span is named by the
// route that served it, not by its path: paths hold response, run, job
// and media ids, and each would be a span name of its own.
func TestSpansNamedByRoute(t *testing.T) {
	t.Parallel()
	s := startService(t, newBus(t), nil)
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	t.Cleanup(func() { _ = tp.Shutdown(t.Context()) })
	h := traced(s.routes(), otelhttp.WithTracerProvider(tp))

	for _, tc := range []struct {
		method, path, want string
	}{
		{http.MethodGet, "/v1/responses/resp_0123456789", "gateway.api GET /v1/responses/{id}"},
		{http.MethodHead, "/v1/models/gpt-4o-2024-08-06", "gateway.api HEAD /v1/models/{model}"},
		{http.MethodPost, "/v1/runs/run_12345678/stop", "gateway.api POST /v1/runs/{id}/stop"},
		{http.MethodDelete, "/api/jobs/job_987654321", "gateway.api DELETE /api/jobs/{id}"},
		{http.MethodGet, "/v1/media/m_55555555", "gateway.api GET /v1/media/{id}"},
		// A method the path is not served with: its 405 route.
		{http.MethodPut, "/v1/chat/completions", "gateway.api PUT /v1/chat/completions"},
		// No route of its own: the catch-all's.
		{http.MethodGet, "/v1/nowhere/12345678", "gateway.api GET /v1/"},
	} {
		exp.Reset()
		req := httptest.NewRequest(tc.method, tc.path, nil)
		req.Header.Set("Authorization", "Bearer "+testKey)
		h.ServeHTTP(httptest.NewRecorder(), req)
		spans := exp.GetSpans()
		if len(spans) != 1 || spans[0].Name != tc.want {
			var names []string
			for _, sp := range spans {
				names = append(names, sp.Name)
			}
			t.Errorf("%s %s: spans %q, want one named %q", tc.method, tc.path, names, tc.want)
		}
	}
}
