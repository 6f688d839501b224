package panics_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/switchboard-chat/switchboard/pkg/panics"
	"github.com/switchboard-chat/switchboard/pkg/telemetry/telemetrytest"
)

func TestRecover(t *testing.T) {
	plain := errors.New("plain failure")
	tests := []struct {
		name      string
		f         func() error
		wantPanic bool
		wantErr   error
	}{
		{"returns nil", func() error { return nil }, false, nil},
		{"returns its error", func() error { return plain }, false, plain},
		{"runtime panic", func() error {
			var items []string
			return errors.New(items[len(plain.Error())]) // index out of range
		}, true, panics.ErrPanicked},
		{"panic with a value", func() error { panic("bad item") }, true, panics.ErrPanicked},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			component := "test_" + strings.ReplaceAll(tt.name, " ", "_")
			var buf bytes.Buffer
			log := slog.New(slog.NewJSONHandler(&buf, nil))
			// The counter is the process's: what this call adds (the test
			// may run more than once, -count).
			labels := map[string]string{"component": component}
			before := telemetrytest.Value(t, "switchboard_panics_total", labels)
			err := panics.Recover(log, component, tt.f, "item_id", "item-7")
			if !errors.Is(err, tt.wantErr) || (tt.wantErr == nil && err != nil) {
				t.Fatalf("err = %v, want %v", err, tt.wantErr)
			}
			got := telemetrytest.Value(t, "switchboard_panics_total", labels) - before
			logged := buf.String()
			if !tt.wantPanic {
				if got != 0 || logged != "" {
					t.Fatalf("counted %v, logged %q for no panic", got, logged)
				}
				return
			}
			if got != 1 {
				t.Errorf("counted %v, want 1", got)
			}
			for _, want := range []string{`"msg":"panic recovered"`, `"item_id":"item-7"`, `"component":"` + component + `"`, "panics_test.go"} {
				if !strings.Contains(logged, want) {
					t.Errorf("log lacks %s: %s", want, logged)
				}
			}
		})
	}
}

func TestUnaryServerInterceptor(t *testing.T) {
	info := &grpc.UnaryServerInfo{FullMethod: "/switchboard.admin.v1.AdminService/PruneSessions"}
	failed := status.Error(codes.InvalidArgument, "bad request")
	tests := []struct {
		name     string
		handler  grpc.UnaryHandler
		wantResp any
		wantCode codes.Code
		panics   float64
	}{
		{"answer", func(context.Context, any) (any, error) { return "ok", nil }, "ok", codes.OK, 0},
		{"error", func(context.Context, any) (any, error) { return nil, failed }, nil, codes.InvalidArgument, 0},
		{"panic", func(_ context.Context, req any) (any, error) {
			var parts []string
			return parts[len(req.(string))], nil // index out of range
		}, nil, codes.Internal, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			component := "test_rpc_" + tt.name
			intercept := panics.UnaryServerInterceptor(slog.New(slog.DiscardHandler), component)
			labels := map[string]string{"component": component}
			before := telemetrytest.Value(t, "switchboard_panics_total", labels)
			resp, err := intercept(context.Background(), "req", info, tt.handler)
			if resp != tt.wantResp || status.Code(err) != tt.wantCode {
				t.Fatalf("resp %v, err %v; want %v, %v", resp, err, tt.wantResp, tt.wantCode)
			}
			if got := telemetrytest.Value(t, "switchboard_panics_total", labels) - before; got != tt.panics {
				t.Errorf("counted %v, want %v", got, tt.panics)
			}
		})
	}
}
