package telemetry

import (
	"context"
	"errors"
	"testing"

	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

func TestSyncGRPCFollowsReadiness(t *testing.T) {
	t.Parallel()
	const svc = "switchboard.admin.v1.AdminService"
	tests := []struct {
		name     string
		depErr   error
		draining bool
		want     healthpb.HealthCheckResponse_ServingStatus
	}{
		{"ready", nil, false, healthpb.HealthCheckResponse_SERVING},
		{"dependency down", errors.New("connection refused"), false, healthpb.HealthCheckResponse_NOT_SERVING},
		{"draining", nil, true, healthpb.HealthCheckResponse_NOT_SERVING},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			h := NewHealth()
			h.Add("postgres", func(context.Context) error { return tt.depErr })
			if tt.draining {
				h.SetDraining()
			}
			srv := health.NewServer()
			srv.SetServingStatus(svc, healthpb.HealthCheckResponse_SERVING)
			h.syncGRPC(context.Background(), srv, []string{svc})
			for _, name := range []string{"", svc} {
				resp, err := srv.Check(context.Background(), &healthpb.HealthCheckRequest{Service: name})
				if err != nil {
					t.Fatalf("check %q: %v", name, err)
				}
				if resp.GetStatus() != tt.want {
					t.Errorf("service %q: %v, want %v", name, resp.GetStatus(), tt.want)
				}
			}
		})
	}
}

// A dependency that hangs fails its own check only: the others run
// beside it, not in the time it left them.
func TestReadyChecksDoNotWaitForEachOther(t *testing.T) {
	t.Parallel()
	h := NewHealth()
	started := make(chan struct{})
	h.Add("a-postgres", func(ctx context.Context) error {
		close(started)
		<-ctx.Done()
		return ctx.Err()
	})
	h.Add("b-redis", func(ctx context.Context) error {
		<-started
		return ctx.Err()
	})
	failed := h.Ready(context.Background())
	if len(failed) != 1 || failed["a-postgres"] == nil {
		t.Fatalf("failed %v, want only a-postgres", failed)
	}
}
