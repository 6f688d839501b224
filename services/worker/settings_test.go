package worker_test

import (
	"strings"
	"testing"

	"github.com/switchboard-chat/switchboard/services/worker"
)

// A session's /personality joins its system prompt after the base prompt
// (a new prompt is rendered and stored when it changes), and its
// /reasoning effort, else agent.reasoning_effort, goes with every model
// call; a session without either sends the prompt and request it did.
func TestPersonalityAndReasoningEffortReachTheModel(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.setGeneration("s1", 1)
	base := worker.DefaultConfig().Agent.SystemPrompt
	w := h.startWorker("w1", nil)
	steps := []struct {
		opts       turnOpts
		pirate     bool
		wantEffort string
	}{
		{turnOpts{}, false, ""},
		{turnOpts{}, false, ""},
		{turnOpts{personality: "You are a pirate.", effort: "high"}, true, "high"},
		{turnOpts{personality: "You are a pirate.", effort: "none"}, true, "none"},
		{turnOpts{}, false, ""},
	}
	for i, st := range steps {
		req := h.requestTurn("s1", "turn", st.opts)
		if c := h.waitCompleted(req.TurnId); c.GetError() != "" {
			t.Fatalf("step %d: %s", i, c.GetError())
		}
		got := h.fake.Requests()[i]
		if got.ReasoningEffort != st.wantEffort {
			t.Errorf("step %d: effort %q, want %q", i, got.ReasoningEffort, st.wantEffort)
		}
		if st.wantEffort != "" && got.ReasoningField != "reasoning_effort" {
			t.Errorf("step %d: effort sent as %q", i, got.ReasoningField)
		}
		if has := strings.HasPrefix(got.System, base+"\n\nYou are a pirate.\n\n"); has != st.pirate {
			t.Errorf("step %d: the personality follows the base prompt: %v, want %v:\n%s", i, has, st.pirate, got.System)
		}
	}
	reqs := h.fake.Requests()
	if reqs[0].System != reqs[1].System || reqs[4].System != reqs[0].System {
		t.Errorf("without a personality the prompt changed:\n%q\n%q\n%q", reqs[0].System, reqs[1].System, reqs[4].System)
	}
	if reqs[2].System != reqs[3].System {
		t.Errorf("the same personality rendered twice differently")
	}
	w.stop(t)

	// agent.reasoning_effort is the default of a session without its own.
	w = h.startWorker("w2", func(c *worker.Config, _ *worker.Deps) { c.Agent.ReasoningEffort = "medium" })
	defer w.stop(t)
	for _, st := range []struct{ effort, want string }{{"", "medium"}, {"low", "low"}} {
		req := h.requestTurn("s1", "turn", turnOpts{effort: st.effort})
		h.waitCompleted(req.TurnId)
		reqs = h.fake.Requests()
		if got := reqs[len(reqs)-1].ReasoningEffort; got != st.want {
			t.Errorf("session effort %q: sent %q, want %q", st.effort, got, st.want)
		}
	}
}
