package worker_test

import (
	"slices"
	"strings"
	"testing"

	"github.com/switchboard-chat/switchboard/pkg/fakellm"
	eventsv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/events/v1"
	turnsv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/turns/v1"
)

// A turn's context limit (TurnRequested.context_limit: an API Responses
// request's truncation "auto", as Hermes's _handle_responses keeps the
// latest 100 of its stored conversation_history and the input's earlier
// items) shows the model only the latest earlier messages that, with the
// inputs' context, make the limit; a cut that would start at a tool
// result starts after it. The transcript keeps them all: the next turn,
// without a limit, is shown the whole conversation.
func TestContextLimitCutsWhatTheModelIsShown(t *testing.T) {
	t.Parallel()
	// The conversation before the limited turn: one; two, whose answer
	// calls a tool (its call, its result, the answer); three.
	cd := []*eventsv1.ContextMessage{{Role: "user", Content: "c"}, {Role: "assistant", Content: "d"}}
	for _, tc := range []struct {
		name    string
		limit   int32
		context []*eventsv1.ContextMessage
		from    int // the first earlier message the model is shown
	}{
		{name: "no limit"},
		{name: "a limit above the conversation", limit: 100},
		{name: "the latest two", limit: 2, from: 6},
		{name: "with the input's context", limit: 4, context: cd, from: 6},
		{name: "not from a tool result", limit: 4, from: 5},
		{name: "a context above the limit", limit: 1, context: cd, from: 8},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			h := newHarness(t)
			h.setGeneration("s1", 1)
			h.startWorker("w1", nil)
			for _, text := range []string{"one", "[[tool:clock {}]] two", "three"} {
				req := h.requestTurn("s1", text, turnOpts{})
				if done := h.waitCompleted(req.TurnId); done.GetStatus() != turnsv1.TurnStatus_TURN_STATUS_COMPLETED {
					t.Fatalf("%s: %v (%s)", text, done.GetStatus(), done.GetError())
				}
			}
			calls := h.fake.Requests()
			earlier := append(shown(calls[len(calls)-1]), "assistant:echo: three")
			if len(earlier) != 8 || !strings.HasPrefix(earlier[4], "tool:") {
				t.Fatalf("the conversation before the limited turn: %q", earlier)
			}
			req := h.requestTurn("s1", "four", turnOpts{limit: tc.limit, context: tc.context})
			if done := h.waitCompleted(req.TurnId); done.GetStatus() != turnsv1.TurnStatus_TURN_STATUS_COMPLETED {
				t.Fatalf("four: %v (%s)", done.GetStatus(), done.GetError())
			}
			calls = h.fake.Requests()
			want := append(append(slices.Clone(earlier[tc.from:]), contextOf(tc.context)...), "user:four")
			if got := shown(calls[len(calls)-1]); !slices.Equal(got, want) {
				t.Fatalf("the model was shown\n%q\nwant\n%q", got, want)
			}
			next := h.requestTurn("s1", "five", turnOpts{})
			if done := h.waitCompleted(next.TurnId); done.GetStatus() != turnsv1.TurnStatus_TURN_STATUS_COMPLETED {
				t.Fatalf("five: %v (%s)", done.GetStatus(), done.GetError())
			}
			calls = h.fake.Requests()
			want = append(append(slices.Clone(earlier), contextOf(tc.context)...), "user:four", "assistant:echo: four", "user:five")
			if got := shown(calls[len(calls)-1]); !slices.Equal(got, want) {
				t.Fatalf("the next turn was shown\n%q\nwant the whole conversation\n%q", got, want)
			}
		})
	}
}

// shown is what a model call was shown: each message's role and text.
func shown(r fakellm.Request) []string {
	var out []string
	for _, m := range r.Messages {
		out = append(out, m.Role+":"+m.Content)
	}
	return out
}

func contextOf(msgs []*eventsv1.ContextMessage) []string {
	var out []string
	for _, m := range msgs {
		out = append(out, m.GetRole()+":"+m.GetContent())
	}
	return out
}
