package router

import (
	"context"
	"strings"
	"testing"

	"github.com/switchboard-chat/switchboard/pkg/bus"
	turnsv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/turns/v1"
)

// startToolProgressRouter is startRouter with delivery's configured tool
// progress modes: telegram off, every other platform all.
func (e *env) startToolProgressRouter(cfg Config, b *bus.Bus) {
	e.t.Helper()
	e.startRouterWith(cfg, b, func(d *Deps) {
		d.ToolProgress = func(platform string) string {
			if platform == "telegram" {
				return "off"
			}
			return "all"
		}
	})
}

// startRouterWith is startRouter with deps changed by edit.
func (e *env) startRouterWith(cfg Config, b *bus.Bus, edit func(*Deps)) {
	e.t.Helper()
	if b == nil {
		b = e.bus
	}
	deps := Deps{Bus: b, DB: e.db, Redis: e.rdb, RedisPrefix: e.prefix, Environ: []string{}, Homes: e.homes, Provider: e.provider}
	edit(&deps)
	s, err := New(cfg, deps)
	if err != nil {
		e.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	e.t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			e.t.Errorf("router run: %v", err)
		}
	})
}

// turnOf waits for the turn that answers text and returns it.
func turnOf(t *testing.T, w *worker, text string) *turnsv1.TurnRequested {
	t.Helper()
	var found *turnsv1.TurnRequested
	waitFor(t, "the turn of "+text, func() bool {
		turns, _ := w.snapshot()
		for _, tr := range turns {
			for _, in := range tr.GetInputs() {
				if in.GetText() == text {
					found = tr
					// A worker that holds no turn ends it at once: the
					// session is idle again for what the test sends next
					// (a command refused mid-turn, say).
					return w.hold != nil || w.hasEnded(tr.GetTurnId())
				}
			}
		}
		return false
	})
	return found
}

// Without router.tool_progress_command, /verbose answers Hermes's "not
// enabled" with the key that turns it on, and turns carry no mode.
func TestVerboseOffByDefault(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.startToolProgressRouter(testConfig(), nil)
	w := e.startWorker(nil)
	if got := e.ask("alice", "/verbose"); got != verboseDisabled {
		t.Fatalf("/verbose answered %q, want %q", got, verboseDisabled)
	}
	e.publish(dm("alice", "hello"))
	if got := turnOf(t, w, "hello").GetToolProgressMode(); got != "" {
		t.Errorf("turn carries tool progress mode %q, want none", got)
	}
}

// /verbose cycles the platform's mode from the configured one (telegram:
// off), off → new → all → verbose → off, in Hermes's words; "/verbose
// <mode>" sets one; anything else gets the usage. Each later turn of any
// chat of the platform carries the mode, whichever router replica starts
// it; another platform's turns carry none.
func TestVerboseCyclesThePlatformsMode(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	cfg := testConfig()
	cfg.ToolProgressCommand = true
	e.startToolProgressRouter(cfg, nil)
	e.startToolProgressRouter(cfg, e.secondBus())
	w := e.startWorker(nil)
	saved := "\n_(saved for **telegram** — takes effect on next message)_"
	steps := []struct{ send, want, mode string }{
		{"/verbose", "⚙️ Tool progress: **NEW** — shown when tool changes (preview length: `delivery.tool_preview_length`, default 40)." + saved, "new"},
		{"/verbose", "⚙️ Tool progress: **ALL** — every tool call shown (preview length: `delivery.tool_preview_length`, default 40)." + saved, "all"},
		{"/verbose next", "⚙️ Tool progress: **VERBOSE** — every tool call with full arguments." + saved, "verbose"},
		{"/verbose", "⚙️ Tool progress: **OFF** — no tool activity shown." + saved, "off"},
		{"/VERBOSE Verbose", "⚙️ Tool progress: **VERBOSE** — every tool call with full arguments." + saved, "verbose"},
		{"/verbose loud", verboseUsage, "verbose"},
	}
	for i, st := range steps {
		if got := e.ask("alice", st.send); got != st.want {
			t.Fatalf("%s answered %q, want %q", st.send, got, st.want)
		}
		for _, user := range []string{"alice", "bob"} {
			text := user + " after step " + string(rune('a'+i))
			e.publish(dm(user, text))
			if got := turnOf(t, w, text).GetToolProgressMode(); got != st.mode {
				t.Errorf("after %q, %s's turn carries mode %q, want %q", st.send, user, got, st.mode)
			}
		}
	}
	slack := dm("alice", "on slack")
	slack.Source.Platform = "slack"
	e.publish(slack)
	if got := turnOf(t, w, "on slack").GetToolProgressMode(); got != "" {
		t.Errorf("a slack turn carries mode %q, want none (telegram's is telegram's)", got)
	}
	var mode, by string
	if err := e.db.QueryRow(context.Background(), `SELECT mode, set_by FROM tool_progress_modes WHERE profile = '' AND platform = 'telegram'`).Scan(&mode, &by); err != nil {
		t.Fatal(err)
	}
	if mode != "verbose" || by != "telegram:alice" {
		t.Errorf("stored %q set by %q, want verbose by telegram:alice", mode, by)
	}
}

// /verbose runs while a turn runs (as in Hermes); the running turn keeps
// the mode it started with, the next one takes the new mode.
func TestVerboseMidTurn(t *testing.T) {
	t.Parallel()
	cfg := testConfig()
	cfg.ToolProgressCommand = true
	cfg.BusyMode = BusyQueue
	e, g, w := busySession(t, cfg, "alice", "long task")
	// busySession's router has no configured modes: all, so verbose next.
	if got := e.ask("alice", "/verbose"); !strings.HasPrefix(got, "⚙️ Tool progress: **VERBOSE**") {
		t.Fatalf("/verbose mid-turn answered %q", got)
	}
	e.publish(dm("alice", "next task"))
	g.open()
	if got := turnOf(t, w, "long task").GetToolProgressMode(); got != "" {
		t.Errorf("the running turn carries %q, want none", got)
	}
	if got := turnOf(t, w, "next task").GetToolProgressMode(); got != "verbose" {
		t.Errorf("the next turn carries %q, want verbose", got)
	}
}

func TestNextToolProgress(t *testing.T) {
	t.Parallel()
	tests := []struct {
		current, args, want string
		ok                  bool
	}{
		{"off", "", "new", true},
		{"new", "", "all", true},
		{"all", " ", "verbose", true},
		{"verbose", "", "off", true},
		{"log", "", "verbose", true}, // unknown counts as all
		{"", "next", "verbose", true},
		{"off", "ALL", "all", true},
		{"off", "verbose", "verbose", true},
		{"off", "log", "", false},
		{"off", "on", "", false},
	}
	for _, tt := range tests {
		if got, ok := nextToolProgress(tt.current, tt.args); got != tt.want || ok != tt.ok {
			t.Errorf("nextToolProgress(%q, %q) = %q, %v; want %q, %v", tt.current, tt.args, got, ok, tt.want, tt.ok)
		}
	}
}
