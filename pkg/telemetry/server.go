package telemetry

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Server serves /metrics, /healthz, /readyz and, when enabled,
// /debug/pprof on the operations port.
type Server struct {
	addr   string
	health *Health
	log    *slog.Logger
	mux    *http.ServeMux
	ln     net.Listener
}

// NewServer prepares the operations server. Call Listen, then Run.
func NewServer(addr string, h *Health, pprofOn bool, log *slog.Logger) *Server {
	registerRuntimeMetrics()
	s := &Server{addr: addr, health: h, log: log, mux: http.NewServeMux()}
	s.mux.Handle("GET /metrics", promhttp.Handler())
	s.mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain")
		_, _ = w.Write([]byte("ok\n"))
	})
	s.mux.HandleFunc("GET /readyz", s.readyz)
	if pprofOn {
		s.mux.HandleFunc("/debug/pprof/", pprof.Index)
		s.mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
		s.mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
		s.mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
		s.mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	}
	return s
}

// Handle adds a handler to the operations mux.
func (s *Server) Handle(pattern string, h http.Handler) { s.mux.Handle(pattern, h) }

func (s *Server) readyz(w http.ResponseWriter, r *http.Request) {
	failed := s.health.Ready(r.Context())
	w.Header().Set("Content-Type", "application/json")
	body := map[string]any{"ready": len(failed) == 0}
	if len(failed) > 0 {
		reasons := map[string]string{}
		for n, err := range failed {
			reasons[n] = err.Error()
		}
		body["failing"] = reasons
		w.WriteHeader(http.StatusServiceUnavailable)
	}
	_ = json.NewEncoder(w).Encode(body)
}

// Listen binds the address (":0" picks a free port; see Addr).
func (s *Server) Listen() error {
	ln, err := net.Listen("tcp", s.addr)
	if err != nil {
		return fmt.Errorf("listen %s: %w", s.addr, err)
	}
	s.ln = ln
	return nil
}

// Addr is the bound address.
func (s *Server) Addr() string {
	if s.ln == nil {
		return s.addr
	}
	return s.ln.Addr().String()
}

// Run serves until ctx ends, then shuts down gracefully.
func (s *Server) Run(ctx context.Context) error {
	if s.ln == nil {
		if err := s.Listen(); err != nil {
			return err
		}
	}
	srv := &http.Server{Handler: s.mux, ReadHeaderTimeout: 5 * time.Second}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(s.ln) }()
	select {
	case err := <-errc:
		return fmt.Errorf("operations server: %w", err)
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("stop operations server: %w", err)
	}
	return nil
}
