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
