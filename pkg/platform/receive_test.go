package platform_test

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
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
			if strings.Contains(log, "s3cret") || strings.Contains(log, `"hi"`) {
				t.Errorf("the log shows the payload's token or text: %s", log)
			}
			if !tt.ok && (!strings.Contains(log, "payload_id=u1") || !strings.Contains(log, "platform=memory") || !strings.Contains(log, `text:str(2)`)) {
				t.Errorf("log %s: want the platform, the payload id and its summary", log)
			}
		})
	}
}

// TestSummary runs Summary over payloads shaped as the platforms (and
// the gateways' fakes) send them: the log line must let an operator find
// the event (its ids, its kind) without a word of the message, a name, a
// phone number or an address.
func TestSummary(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name      string
		file      string // in testdata/payloads
		raw       string // when no file
		want      []string
		forbidden []string
	}{
		{name: "telegram update", file: "telegram_update.json",
			want:      []string{"update_id:815000001", "message_id:42", `type:"private"`, "text:str(44)", `type:"phone_number"`, "first_name:str(7)"},
			forbidden: []string{"number is", "Annabel", "Quist", "annabelq", "7700", "900123", "555000111"}},
		{name: "slack event", file: "slack_event.json",
			want:      []string{`event_id:"Ev0TESTEVENT1"`, `ts:"1764750000.000100"`, `type:"event_callback"`, `type:"message"`, "text:str(45)", "files:[1]", "token:str(18)"},
			forbidden: []string{"verification-token", "email", "bob.rivers", "example.com", "Bob", "Rivers", "bobr", "passport", "U0USER01", "D0DIRECT"}},
		{name: "discord message", file: "discord_message.json",
			want:      []string{`id:"1200000000000000042"`, "content:str(52)", "type:0", "author:{id:str(18)", "attachments:[1]"},
			forbidden: []string{"phone", "867", "5309", "carla", "Carla", "Mendes", "700000000000000007", "cv.pdf"}},
		{name: "matrix event", file: "matrix_event.json",
			want:      []string{`event_id:"$Ab3dEf6hIj9kLm:example.org"`, `type:"m.room.message"`, `msgtype:"m.text"`, "body:str(", "<key>:{displayname:str(13)}"},
			forbidden: []string{"Dmitri", "dmitri", "volkov", "912", "reach me", "!roomAbc"}},
		{name: "email", file: "email.eml",
			want:      []string{"bytes sha256:", "not JSON"},
			forbidden: []string{"Erin", "Walsh", "erin", "415", "0172", "tax return", "Message-ID"}},
		{name: "empty", raw: "", want: []string{"0 bytes sha256:"}},
		{name: "secrets are shapes too", raw: `{"token":"t0k","a":{"Authorization":"Bearer x1","apiKey":"k2","list":[{"client_secret":"c3"}]}}`,
			want: []string{"token:str(3)", "Authorization:str(9)", "list:[1]{client_secret:str(2)}"}, forbidden: []string{"t0k", "x1", "k2", "c3"}},
		{name: "an id that is not one", raw: `{"update_id":"+15551234567","message_id":"call me maybe","event_id":"ann@example.com"}`,
			want: []string{"update_id:str(12)", "message_id:str(13)", "event_id:str(15)"}, forbidden: []string{"555", "call", "ann@"}},
		{name: "keys that are data", raw: `{"+15551234567":1,"@ann:example.org":{"ann@example.com":true},"15551234567":[]}`,
			want: []string{"{<key>:num <key>:{<key>:bool} <key>:[0]}"}, forbidden: []string{"555", "ann"}},
		{name: "long", raw: `{"text":"` + strings.Repeat("é", 300) + `","items":[` + strings.Repeat(`{"name":"x","text":"y"},`, 200) + `{}]}`,
			want: []string{"text:str(600)", "items:[201]{name:str(1) text:str(1)}"}},
		{name: "wide", raw: `{` + strings.Repeat(`"field":"Zoë",`, 400) + `"last":1}`, want: []string{"field:str(4) field:str(4)", "…"},
			forbidden: []string{"Zoë", "last"}},
		{name: "deep", raw: strings.Repeat(`{"a":`, 50) + "1" + strings.Repeat("}", 50), want: []string{"{a:{a:{a:{a:{a:{a:{a:{a:{…}}}}}}}}}"}},
		{name: "trailing data", raw: `{"a":1} secret words`, want: []string{"not JSON"}, forbidden: []string{"secret"}},
		{name: "not json", raw: "\x00garbage from Ann", want: []string{"not JSON"}, forbidden: []string{"garbage", "Ann"}},
		{name: "top-level string", raw: `"hello Ann"`, want: []string{"str(9)"}, forbidden: []string{"Ann"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			raw := []byte(tt.raw)
			if tt.file != "" {
				var err error
				if raw, err = os.ReadFile(filepath.Join("testdata", "payloads", tt.file)); err != nil {
					t.Fatal(err)
				}
			}
			got := platform.Summary(raw)
			t.Logf("%s", got)
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
			if len(got) > 450 {
				t.Errorf("Summary is %d bytes long", len(got))
			}
		})
	}
}
