package router

import (
	"slices"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	eventsv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/events/v1"
)

// A native command (a Discord slash command) in a group from a sender
// not allowed is refused in words, as Hermes does, once a minute per
// sender; the same sender's typed message there still gets silence, and
// no turn runs. The refusal's target carries the command's interaction,
// for the gateway to show it to the sender only; an allowed sender's
// command goes into its turn without it.
func TestSlashCommandRefusedInGroup(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.startRouter(testConfig(), nil, nil)
	w := e.startWorker(nil)
	const refusal = "You're not authorized to use this command."

	ia := &eventsv1.Interaction{Id: "800000000000000001", ApplicationId: "100000000000000001", Token: "aW50ZXJhY3Rpb24.secret",
		ExpiresAt: timestamppb.New(time.Now().Add(15 * time.Minute))}
	slash := func(user, text string) {
		ev := dm(user, text)
		ev.Source.Platform, ev.Source.ChatType, ev.Source.ScopeId = "discord", "group", "guild1"
		ev.SlashCommand, ev.NoReaction, ev.Mentioned = true, true, true
		ev.Interaction = ia
		e.publish(ev)
	}
	slash("mallory", "/model gpt-5")
	waitFor(t, "the refusal", func() bool { return slices.Contains(e.noticesTo("mallory"), refusal) })
	e.mu.Lock()
	for _, n := range e.notices {
		if got := n.GetTarget().GetInteraction(); n.GetNotice().GetText() == refusal &&
			(got.GetId() != ia.GetId() || got.GetApplicationId() != ia.GetApplicationId() || got.GetToken() != ia.GetToken() || !got.GetExpiresAt().AsTime().Equal(ia.GetExpiresAt().AsTime())) {
			t.Errorf("the refusal's target %v, want the command's interaction", n.GetTarget())
		}
	}
	e.mu.Unlock()

	slash("mallory", "/status") // within the minute: dropped
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

	// An allowed sender's: into the turn, without the interaction.
	slash("alice", "what is new")
	waitFor(t, "alice's turn", func() bool { turns, _ := w.snapshot(); return len(turns) == 1 })
	turns, _ := w.snapshot()
	for _, in := range turns[0].GetInputs() {
		if in.GetText() != "what is new" || in.GetInteraction() != nil {
			t.Fatalf("turn input %v, want alice's message without its interaction", in)
		}
	}
}
