package tools

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"
)

func TestRegistry(t *testing.T) {
	r := NewRegistry()
	noop := func(context.Context, Call, json.RawMessage) (string, error) { return "", nil }
	for _, tool := range []Tool{{Name: "b", Run: noop}, {Name: "a", Run: noop, Parameters: json.RawMessage(`{"type":"object"}`)}, {Name: "c", Run: noop}} {
		if err := r.Register(tool); err != nil {
			t.Fatal(err)
		}
	}
	if err := r.Register(Tool{Name: "bad", Run: noop, Parameters: json.RawMessage(`[`)}); err == nil {
		t.Error("invalid schema accepted")
	}
	if err := r.Register(Tool{Name: "norun"}); err == nil {
		t.Error("tool without Run accepted")
	}
	r.Keep([]string{"a", "b"})
	r.MarkDangerous("b", "missing")
	specs := r.Specs()
	if len(specs) != 2 || specs[0].Name != "a" || specs[1].Name != "b" {
		t.Fatalf("specs %v", specs)
	}
	if b, _ := r.Get("b"); !b.Dangerous {
		t.Error("b not dangerous")
	}
	if !json.Valid(specs[1].Parameters) {
		t.Error("default schema invalid")
	}
}

func TestClock(t *testing.T) {
	now := func() time.Time { return time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC) }
	cases := []struct{ args, want string }{
		{`{}`, "Sunday, 1 March 2026 12:00:00 UTC"},
		{`{"tz":"Asia/Tokyo"}`, "21:00:00 JST"},
		{`{"tz":"Mars/Olympus"}`, "error"},
	}
	for _, tc := range cases {
		out, err := Clock(now).Run(context.Background(), Call{}, json.RawMessage(tc.args))
		if tc.want == "error" {
			if err == nil {
				t.Errorf("%s: no error", tc.args)
			}
			continue
		}
		if err != nil || !strings.Contains(out, tc.want) {
			t.Errorf("%s: %q %v", tc.args, out, err)
		}
	}
}

func TestSendMessageNeedsApprovalOutsideItsTargets(t *testing.T) {
	tool := SendMessage(nil, []string{"slack:C123", "discord:*", "slack:#ops"})
	call := Call{Origin: "telegram:99"}
	tests := []struct {
		target string
		ask    bool
	}{
		{"telegram:99", false},     // the turn's own chat
		{"home", false},            // the configured home channel
		{"telegram", false},        // the platform's home channel
		{"slack:C123", false},      // listed
		{"slack:#ops", false},      // listed by name
		{"discord:555", false},     // every chat of the platform
		{"discord:555:777", false}, // and its threads
		{"telegram:100", true},     // another chat
		{"telegram:99:5", true},    // another thread of the chat
		{"slack:C999", true},       // not listed
		{"discord:#general", true}, // a channel name is not a chat id
		{"discord:", true},         // no chat
		{"", true},                 // no target: Run refuses it
	}
	for _, tt := range tests {
		args, _ := json.Marshal(map[string]string{"target": tt.target, "text": "hi"})
		if got := tool.NeedsApproval(call, args); got != tt.ask {
			t.Errorf("target %q: needs approval %v, want %v", tt.target, got, tt.ask)
		}
	}
	if !tool.NeedsApproval(Call{}, json.RawMessage(`{"target":"telegram:99","text":"hi"}`)) {
		t.Error("a turn that answers no chat sent to a chat without approval")
	}
}
