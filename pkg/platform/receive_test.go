package platform_test

import (
	"context"
	"log/slog"
	"strings"
	"testing"

	eventsv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/events/v1"
	"github.com/switchboard-chat/switchboard/pkg/logtest"
	"github.com/switchboard-chat/switchboard/pkg/platform"
	"github.com/switchboard-chat/switchboard/pkg/telemetry/telemetrytest"
)

// rejects is a Conn that records rejections.
type rejects struct {
	platform.Conn
	reasons []string
}

func (r *rejects) Reject(_ context.Context, reason string, _ error) {
	r.reasons = append(r.reasons, reason)
}

func TestReceive(t *testing.T) {
	labels := map[string]string{"component": platform.ReceiveComponent}
	tests := []struct {
		name   string
		handle func()
		ok     bool
	}{
		{"handled", func() {}, true},
		{"nil pointer", func() { var ev *eventsv1.MessageReceived; _ = ev.Source.ChatId }, false},
		{"panic value", func() { panic("bad payload") }, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var buf logtest.Buffer
			conn := &rejects{}
			before := telemetrytest.Value(t, "switchboard_panics_total", labels)
			raw := []byte(`{"id":"u1","bot_token":"s3cret","text":"hi"}`)
			if got := platform.Receive(context.Background(), conn, slog.New(slog.NewTextHandler(&buf, nil)), "memory", "u1", raw, tt.handle); got != tt.ok {
				t.Fatalf("Receive = %v, want %v", got, tt.ok)
			}
			panicked := 0.0
			if !tt.ok {
				panicked = 1
			}
			if got := telemetrytest.Value(t, "switchboard_panics_total", labels) - before; got != panicked {
				t.Errorf("panics counted %v, want %v", got, panicked)
			}
			if len(conn.reasons) != int(panicked) {
				t.Errorf("rejections %q, want %v", conn.reasons, panicked)
			}
			log := buf.String()
			if strings.Contains(log, "s3cret") {
				t.Errorf("the log shows the payload's token: %s", log)
			}
			if !tt.ok && (!strings.Contains(log, "payload_id=u1") || !strings.Contains(log, "platform=memory") || !strings.Contains(log, `text`)) {
				t.Errorf("log %s: want the platform, the payload id and its summary", log)
			}
		})
	}
}

func TestSummary(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("é", 300)
	tests := []struct {
		name      string
		raw       string
		want      []string
		forbidden []string
	}{
		{"empty", "", []string{"0 bytes sha256:"}, nil},
		{"json secrets blanked at any depth", `{"token":"t0k","a":{"Authorization":"Bearer x1","apiKey":"k2","list":[{"client_secret":"c3"}]},"text":"hello"}`,
			[]string{"bytes sha256:", `"text":"hello"`, `"token":"…"`}, []string{"t0k", "x1", "k2", "c3"}},
		{"long json cut", `{"text":"` + long + `"}`, []string{"…"}, nil},
		{"not json", "\x00garbage" + long, []string{`"\x00garbage`}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := platform.Summary([]byte(tt.raw))
			for _, w := range tt.want {
				if !strings.Contains(got, w) {
					t.Errorf("Summary = %s, want %s in it", got, w)
				}
			}
			for _, f := range tt.forbidden {
				if strings.Contains(got, f) {
					t.Errorf("Summary = %s shows %s", got, f)
				}
			}
			if len(got) > 300 {
				t.Errorf("Summary is %d bytes long", len(got))
			}
		})
	}
}
