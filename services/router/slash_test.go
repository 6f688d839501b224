package router

import (
	"slices"
	"testing"
)

// A native command (a Discord slash command) in a group from a sender
// not allowed is refused in words, as Hermes does, once a minute per
// sender; the same sender's typed message there still gets silence, and
// no turn runs.
func TestSlashCommandRefusedInGroup(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.startRouter(testConfig(), nil, nil)
	w := e.startWorker(nil)
	const refusal = "You're not authorized to use this command."

	slash := func(text string) {
		ev := dm("mallory", text)
		ev.Source.Platform, ev.Source.ChatType, ev.Source.ScopeId = "discord", "group", "guild1"
		ev.SlashCommand, ev.NoReaction = true, true
		e.publish(ev)
	}
	slash("/model gpt-5")
	waitFor(t, "the refusal", func() bool { return slices.Contains(e.noticesTo("mallory"), refusal) })

	slash("/status") // within the minute: dropped
	typed := dm("mallory", "/model gpt-5")
	typed.Source.Platform, typed.Source.ChatType = "discord", "group"
	e.publish(typed)
	waitFor(t, "inbound drained", e.inboundDrained)
	if n := e.noticesTo("mallory"); len(n) != 1 || n[0] != refusal {
		t.Fatalf("mallory got %q, want one refusal", n)
	}
	if turns, _ := w.snapshot(); len(turns) != 0 {
		t.Fatalf("a sender not allowed started %d turns", len(turns))
	}
}
