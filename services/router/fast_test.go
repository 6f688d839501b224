package router

import (
	"strings"
	"testing"
)

// Hermes's /fast shows and sets the chat's fast mode in Hermes's words;
// the choice is the chat's (another chat keeps the default), outlives
// /new, and reaches the worker on each turn (TurnRequested.service_tier).
func TestFastCommand(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.provider = Provider{Kind: "openai", Model: "gpt-5.4"}
	e.startRouter(testConfig(), nil, nil)
	w := e.startWorker(nil)
	n := 0
	tierOf := func(user string) string {
		t.Helper()
		n++
		text := "hello " + string(rune('a'+n))
		e.publish(dm(user, text))
		return turnOf(t, w, text).GetServiceTier()
	}
	for _, tt := range []struct {
		text string
		want []string
		tier string // the next turn's TurnRequested.service_tier
	}{
		{"/fast", []string{"⚡ Priority Processing\n\nCurrent mode: `normal`\nSet by: the default (`agent.service_tier`)\nModel: `gpt-5.4`\n\n_Usage:_ `/fast <normal|fast|status>`"}, ""},
		{"/fast fast", []string{"⚡ ✓ Priority Processing: **FAST** (this chat only)\n_(takes effect on next message)_"}, "fast"},
		{"/fast status", []string{"Current mode: `fast`\nSet by: this chat's choice"}, "fast"},
		{"/new", []string{"New session started"}, "fast"},
		{"/fast normal", []string{"⚡ ✓ Priority Processing: **NORMAL** (this chat only)"}, "normal"},
		{"/fast ON", []string{"**FAST**"}, "fast"},
		{"/fast off", []string{"**NORMAL**"}, "normal"},
		{"/fast on --global", []string{"⚠️ `--global` is not available here"}, "normal"},
		{"/fast auto", []string{"⚠️ `auto` is not available here", "**Valid options:** normal, fast, status"}, "normal"},
		{"/fast turbo", []string{"⚠️ Unknown argument: `turbo`\n\n**Valid options:** normal, fast, status"}, "normal"},
		{"/status", []string{"Fast mode: normal\n"}, "normal"},
		{"/model llama3.1", []string{"llama3.1"}, "normal"},
		{"/fast fast", []string{"⚡ /fast is only available for OpenAI models that support Priority Processing and Claude models that support Fast Mode (this chat's model: `llama3.1`)."}, "normal"},
		{"/fast", []string{"/fast is only available"}, "normal"},
		{"/model anthropic:claude-opus-5", []string{"claude-opus-5"}, "normal"},
		{"/fast fast", []string{"⚡ ✓ Fast Mode: **FAST** (this chat only)"}, "fast"},
	} {
		got := e.ask("alice", tt.text)
		for _, want := range tt.want {
			if !strings.Contains(got, want) {
				t.Errorf("%s: %q, want it to contain %q", tt.text, got, want)
			}
		}
		if tier := tierOf("alice"); tier != tt.tier {
			t.Errorf("after %s: turn service_tier %q, want %q", tt.text, tier, tt.tier)
		}
	}
	if tier := tierOf("bob"); tier != "" {
		t.Errorf("bob's turn carries service_tier %q that alice chose", tier)
	}
}

// agent.service_tier fast: a chat that chose nothing shows fast as the
// default (its turns carry nothing: the worker applies the default), one
// that chose normal carries normal; without a provider that has a fast
// tier (none configured, an external agent) /fast says it is not
// available.
func TestFastDefaultAndUnsupported(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.provider = Provider{Kind: "anthropic", Model: "claude-opus-4-8"}
	cfg := testConfig()
	cfg.ServiceTier = "priority" // Hermes's alias of fast
	e.startRouter(cfg, nil, nil)
	w := e.startWorker(nil)
	if got := e.ask("alice", "/fast status"); !strings.Contains(got, "⚡ Fast Mode\n\nCurrent mode: `fast`\nSet by: the default") {
		t.Errorf("/fast status: %q", got)
	}
	e.publish(dm("alice", "first"))
	if tier := turnOf(t, w, "first").GetServiceTier(); tier != "" {
		t.Errorf("turn of a chat that chose nothing carries %q", tier)
	}
	e.ask("alice", "/fast normal")
	e.publish(dm("alice", "second"))
	if tier := turnOf(t, w, "second").GetServiceTier(); tier != "normal" {
		t.Errorf("turn after /fast normal carries %q", tier)
	}

	for _, p := range []Provider{{}, {Kind: "fake", Model: "fake-model"}, {Agent: "grpc://agent:50051"}} {
		e := newEnv(t)
		e.provider = p
		e.startRouter(testConfig(), nil, nil)
		if got := e.ask("alice", "/fast fast"); !strings.HasPrefix(got, "⚡ /fast is only available") {
			t.Errorf("provider %+v: /fast fast answered %q", p, got)
		}
	}
}
