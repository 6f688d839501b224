package matrix

import (
	"encoding/json"
	"testing"

	"maunium.net/go/mautrix"
)

func TestDecodeLenient(t *testing.T) {
	t.Parallel()
	good := `{"type":"m.room.message","event_id":"$a","sender":"@a:x","origin_server_ts":1,"content":{"body":"hi"}}`
	tests := []struct {
		name    string
		body    string
		wantErr bool
		events  int // in the room's timeline
		bad     int
	}{
		{"whole", `{"next_batch":"s1","rooms":{"join":{"!r:x":{"timeline":{"events":[` + good + `]}}}}}`, false, 1, 0},
		{"bad event left out", `{"next_batch":"s1","rooms":{"join":{"!r:x":{"timeline":{"events":[` + good + `,{"origin_server_ts":"x"},` + good + `]}}}}}`, false, 2, 1},
		{"bad state and account data", `{"next_batch":"s1","account_data":{"events":[7]},"rooms":{"join":{"!r:x":{"state":{"events":["s"]},"timeline":{"events":[` + good + `]}}}}}`, false, 1, 2},
		{"bad elsewhere", `{"next_batch":7}`, true, 0, 0},
		{"not json", `{`, true, 0, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var resp mautrix.RespSync
			bad := 0
			err := decodeLenient([]byte(tt.body), &resp, func(json.RawMessage, error) { bad++ })
			if (err != nil) != tt.wantErr {
				t.Fatalf("err %v, want error %v", err, tt.wantErr)
			}
			if err != nil {
				return
			}
			if n := len(resp.Rooms.Join["!r:x"].Timeline.Events); n != tt.events || bad != tt.bad {
				t.Errorf("%d events, %d bad; want %d, %d", n, bad, tt.events, tt.bad)
			}
		})
	}
}

func FuzzDecodeLenient(f *testing.F) {
	f.Add([]byte(`{"next_batch":"s1","rooms":{"join":{"!r:x":{"timeline":{"events":[{"origin_server_ts":"x"},null,{"type":"m.room.message"}]}}}}}`))
	f.Add([]byte(`{"chunk":[1,{"content":"x"}],"state":[{}],"end":"e"}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		var resp mautrix.RespSync
		_ = decodeLenient(body, &resp, func(json.RawMessage, error) {})
		var msgs mautrix.RespMessages
		_ = decodeLenient(body, &msgs, func(json.RawMessage, error) {})
	})
}
