package personality_test

import (
	"slices"
	"strings"
	"testing"

	"github.com/switchboard-chat/switchboard/pkg/personality"
)

func TestBuiltinsAreHermes(t *testing.T) {
	b := personality.Builtins()
	want := []string{"helpful", "concise", "technical", "creative", "teacher", "kawaii", "catgirl", "pirate",
		"shakespeare", "surfer", "noir", "uwu", "philosopher", "hype"}
	if got := personality.Names(b); !slices.Equal(got, want) {
		t.Fatalf("Names(Builtins()) = %q, want %q", got, want)
	}
	if !strings.HasPrefix(b["concise"], "You are a concise assistant.") {
		t.Fatalf("concise: %q", b["concise"])
	}
	b["helpful"] = "changed"
	if personality.Builtins()["helpful"] == "changed" {
		t.Fatal("Builtins returns a shared map")
	}
}

func TestNamesAndLookup(t *testing.T) {
	m := personality.Builtins()
	m["zeta"] = "You are Zeta."
	m["Alpha"] = "  You are Alpha.  "
	m["pirate"] = " " // an operator removes a built-in
	names := personality.Names(m)
	if slices.Contains(names, "pirate") {
		t.Errorf("a personality without a prompt is listed: %q", names)
	}
	if n := len(names); names[n-2] != "Alpha" || names[n-1] != "zeta" {
		t.Errorf("the operator's personalities come last, by name: %q", names)
	}
	tests := []struct {
		name, prompt string
		ok           bool
	}{
		{"helpful", "You are a helpful, friendly AI assistant.", true},
		{"alpha", "You are Alpha.", true},
		{" ZETA ", "You are Zeta.", true},
		{"pirate", "", false},
		{"nobody", "", false},
		{"", "", false},
	}
	for _, tt := range tests {
		prompt, ok := personality.Lookup(m, tt.name)
		if prompt != tt.prompt || ok != tt.ok {
			t.Errorf("Lookup(%q) = %q, %v; want %q, %v", tt.name, prompt, ok, tt.prompt, tt.ok)
		}
	}
}

func TestClearsAndEfforts(t *testing.T) {
	for _, w := range []string{"none", "default", "neutral"} {
		if !personality.Clears(w) {
			t.Errorf("Clears(%q) = false", w)
		}
	}
	if personality.Clears("helpful") {
		t.Error("Clears(helpful)")
	}
	for _, e := range []string{"none", "minimal", "low", "medium", "high", "xhigh"} {
		if !personality.ValidEffort(e) {
			t.Errorf("ValidEffort(%q) = false", e)
		}
	}
	for _, e := range []string{"", "max", "HIGH", "show"} {
		if personality.ValidEffort(e) {
			t.Errorf("ValidEffort(%q) = true", e)
		}
	}
}
