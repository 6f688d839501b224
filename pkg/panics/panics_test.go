package panics_test

import (
	"bytes"
	"errors"
	"log/slog"
	"strings"
	"testing"

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
			var m map[string]int
			m["x"]++ // assignment to entry in nil map
			return nil
		}, true, panics.ErrPanicked},
		{"panic with a value", func() error { panic("bad item") }, true, panics.ErrPanicked},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			component := "test_" + strings.ReplaceAll(tt.name, " ", "_")
			var buf bytes.Buffer
			log := slog.New(slog.NewJSONHandler(&buf, nil))
			err := panics.Recover(log, component, tt.f, "item_id", "item-7")
			if !errors.Is(err, tt.wantErr) || (tt.wantErr == nil && err != nil) {
				t.Fatalf("err = %v, want %v", err, tt.wantErr)
			}
			got := telemetrytest.Value(t, "switchboard_panics_total", map[string]string{"component": component})
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
