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
		reason, got := tool.Approval(call, args)
		if got != tt.ask {
			t.Errorf("target %q: needs approval %v, want %v", tt.target, got, tt.ask)
		}
		if want := "send_message to " + tt.target + ", a chat that is neither"; got && !strings.HasPrefix(reason, want) {
			t.Errorf("target %q: reason %q, want it to start %q", tt.target, reason, want)
		}
	}
	if _, ask := tool.Approval(Call{}, json.RawMessage(`{"target":"telegram:99","text":"hi"}`)); !ask {
		t.Error("a turn that answers no chat sent to a chat without approval")
	}
}

// A dangerous tool gives its description as the reason; a tool neither
// dangerous nor confirming runs without asking.
func TestApprovalReasons(t *testing.T) {
	clock := Clock(time.Now)
	if reason, ask := clock.Approval(Call{}, nil); ask || reason != "" {
		t.Errorf("clock: %q %v, want no approval", reason, ask)
	}
	clock.Dangerous = true
	if reason, ask := clock.Approval(Call{}, nil); !ask || reason != "dangerous tool (agent.dangerous_tools): "+clock.Description {
		t.Errorf("dangerous clock: %q %v", reason, ask)
	}
}

// A progress line previews a call's main argument on one line: the
// tool's own choice, or the first string argument as the model wrote it.
func TestPreviewOf(t *testing.T) {
	tests := []struct {
		tool Tool
		args string
		want string
	}{
		{Clock(time.Now), `{"tz":"Europe/Paris"}`, "Europe/Paris"},
		{Clock(time.Now), `{}`, ""},
		{Clock(time.Now), `not json`, ""},
		{SessionSearch(nil), `{"limit":3,"query":"tea\n  and   biscuits"}`, "tea and biscuits"},
		{SendMessage(nil, nil), `{"target":"telegram:1","text":"hi"}`, "telegram:1"},
		{Memory(nil), `{"action":"add","content":"likes tea"}`, "add: likes tea"},
		{Memory(nil), `{"action":"remove","id":3}`, "remove: 3"},
		{Memory(nil), `{"action":"list"}`, "list"},
		{Tool{Name: "x"}, `{"n":1,"s":"  ","t":"second"}`, "second"},
	}
	for _, tt := range tests {
		if got := tt.tool.PreviewOf(json.RawMessage(tt.args)); got != tt.want {
			t.Errorf("%s %s: preview %q, want %q", tt.tool.Name, tt.args, got, tt.want)
		}
	}
}
