package telemetry

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

// Check reports whether one dependency or component is ready.
type Check func(ctx context.Context) error

// Health aggregates readiness checks. Liveness is the process answering;
// readiness is every check passing and the process not draining.
type Health struct {
	mu       sync.RWMutex
	checks   map[string]Check
	draining atomic.Bool
}

// NewHealth returns an empty Health (ready until checks are added).
func NewHealth() *Health { return &Health{checks: map[string]Check{}} }

// Add registers a named readiness check.
func (h *Health) Add(name string, c Check) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.checks[name] = c
}

// SetDraining marks the process as shutting down: readiness fails so load
// balancers and Kubernetes stop sending work while in-flight work finishes.
func (h *Health) SetDraining() { h.draining.Store(true) }

// ErrDraining is the readiness error while shutting down.
var ErrDraining = errors.New("draining")

// checkTimeout bounds each readiness check (the manifests' probes time
// out after 3 s).
const checkTimeout = 2 * time.Second

// Ready runs every check at once, each bounded by a short timeout, and
// returns the failures by name; nil means ready. At once, not one after
// the other: a slow dependency would otherwise use up the time of the
// checks after it, and /readyz would name them as failing too.
func (h *Health) Ready(ctx context.Context) map[string]error {
	if h.draining.Load() {
		return map[string]error{"process": ErrDraining}
	}
	h.mu.RLock()
	checks := make(map[string]Check, len(h.checks))
	for n, c := range h.checks {
		checks[n] = c
	}
	h.mu.RUnlock()
	ctx, cancel := context.WithTimeout(ctx, checkTimeout)
	defer cancel()
	var (
		mu     sync.Mutex
		wg     sync.WaitGroup
		failed map[string]error
	)
	for n, c := range checks {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := c(ctx); err != nil {
				mu.Lock()
				defer mu.Unlock()
				if failed == nil {
					failed = map[string]error{}
				}
				failed[n] = err
			}
		}()
	}
	wg.Wait()
	return failed
}

// Err is Ready folded into one error.
func (h *Health) Err(ctx context.Context) error {
	failed := h.Ready(ctx)
	if len(failed) == 0 {
		return nil
	}
	errs := make([]error, 0, len(failed))
	for n, err := range failed {
		errs = append(errs, fmt.Errorf("%s: %w", n, err))
	}
	return errors.Join(errs...)
}

// SyncGRPC keeps a gRPC health server's overall status, and that of each
// named service, in step with readiness until ctx ends, then marks them
// NOT_SERVING. (A client that checks the service by name, as grpc-go's
// client-side health checking does, otherwise saw SERVING while the
// database was down.)
func (h *Health) SyncGRPC(ctx context.Context, srv *health.Server, every time.Duration, services ...string) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		h.syncGRPC(ctx, srv, services)
		select {
		case <-ctx.Done():
			srv.Shutdown()
			return
		case <-t.C:
		}
	}
}

// syncGRPC sets srv's statuses from readiness once.
func (h *Health) syncGRPC(ctx context.Context, srv *health.Server, services []string) {
	status := healthpb.HealthCheckResponse_SERVING
	if h.Err(ctx) != nil {
		status = healthpb.HealthCheckResponse_NOT_SERVING
	}
	srv.SetServingStatus("", status)
	for _, name := range services {
		srv.SetServingStatus(name, status)
	}
}
