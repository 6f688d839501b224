package router

import (
	"strings"
	"testing"
)

// Hermes's /footer shows, toggles and sets the chat's runtime footer in
// Hermes's words; the choice is the chat's (another chat keeps the
// default), outlives /new, and reaches the worker on each turn
// (TurnRequested.runtime_footer).
func TestFooterCommand(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.provider = Provider{Kind: "openai", Model: "openai/gpt-5.4"}
	e.startRouter(testConfig(), nil, nil)
	w := e.startWorker(nil)
	n := 0
	footerOf := func(user string) bool {
		t.Helper()
		n++
		text := "hello " + string(rune('a'+n))
		e.publish(dm(user, text))
		return turnOf(t, w, text).GetRuntimeFooter()
	}
	for _, tt := range []struct {
		text string
		want []string
		on   bool
	}{
		{"/footer status", []string{"📎 Runtime footer: **OFF**\nFields: `model, context_pct`\nSet by: the default (`router.runtime_footer`)"}, false},
		{"/footer", []string{"📎 Runtime footer: **ON**\nExample: `gpt-5.4`\n_(saved for this chat — takes effect on next message)_"}, true},
		{"/footer status", []string{"📎 Runtime footer: **ON**", "Set by: this chat's choice"}, true},
		{"/new", []string{"New session started"}, true},
		{"/footer", []string{"📎 Runtime footer: **OFF**\n_(saved for this chat — takes effect on next message)_"}, false},
		{"/footer on", []string{"Runtime footer: **ON**"}, true},
		{"/footer ON", []string{"Runtime footer: **ON**"}, true},
		{"/footer off", []string{"Runtime footer: **OFF**"}, false},
		{"/footer sometimes", []string{"Usage: `/footer [on|off|status]`"}, false},
		{"/footer enable", []string{"Runtime footer: **ON**"}, true},
	} {
		got := e.ask("alice", tt.text)
		for _, want := range tt.want {
			if !strings.Contains(got, want) {
				t.Errorf("%s: %q, want it to contain %q", tt.text, got, want)
			}
		}
		if on := footerOf("alice"); on != tt.on {
			t.Errorf("after %s: turn runtime_footer %v, want %v", tt.text, on, tt.on)
		}
	}
	if footerOf("bob") {
		t.Error("bob's turn carries the footer alice turned on")
	}
}

// router.runtime_footer on: a chat that chose nothing gets the footer,
// one that chose off does not, and API requests (a program's response
// body) never do.
func TestFooterDefaultOn(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	cfg := testConfig()
	cfg.RuntimeFooter = true
	e.startRouter(cfg, nil, nil)
	w := e.startWorker(nil)
	e.publish(dm("alice", "first"))
	if !turnOf(t, w, "first").GetRuntimeFooter() {
		t.Error("turn without the footer while router.runtime_footer is on")
	}
	if got := e.ask("alice", "/footer status"); !strings.Contains(got, "**ON**") || !strings.Contains(got, "the default") {
		t.Errorf("/footer status: %q", got)
	}
	if got := e.ask("alice", "/footer"); !strings.Contains(got, "**OFF**") {
		t.Errorf("/footer: %q", got)
	}
	e.publish(dm("alice", "second"))
	if turnOf(t, w, "second").GetRuntimeFooter() {
		t.Error("turn with the footer in a chat that turned it off")
	}
	api := dm("x", "from the api")
	api.Source.Platform, api.Source.ChatId, api.Source.UserId = "api", "conv-1", ""
	api.TransportAuthenticated = true
	e.publish(api)
	if turnOf(t, w, "from the api").GetRuntimeFooter() {
		t.Error("API turn with the footer")
	}
}
