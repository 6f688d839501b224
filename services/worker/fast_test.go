package worker_test

import (
	"context"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/switchboard-chat/switchboard/pkg/fakellm"
	turnsv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/turns/v1"
	"github.com/switchboard-chat/switchboard/pkg/llm"
	"github.com/switchboard-chat/switchboard/services/worker"
)

// A session's /fast (TurnRequested.service_tier), else
// agent.service_tier, reaches the provider: OpenAI's chat completions
// carry service_tier "priority", Anthropic's Messages speed "fast" with
// the fast mode beta, and a normal turn carries neither.
func TestFastModeReachesTheModel(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.setGeneration("s1", 1)
	fastModels := func(c *worker.Config, d *worker.Deps) {
		d.LLM = h.openAI()
		d.LLM.Provider = llm.NewOpenAI(llm.OpenAIConfig{BaseURL: h.fakeURL + "/v1", Model: "gpt-5.4"})
		d.LLM.Model = "gpt-5.4"
		an := h.anthropic()
		an.Provider, an.Model = llm.NewAnthropic(llm.AnthropicConfig{BaseURL: h.fakeURL, Model: "claude-opus-5", APIKey: "k"}), "claude-opus-5"
		d.Providers = map[string]worker.Backend{"anthropic": an}
	}
	check := func(t *testing.T, step string, o turnOpts, wantTier, wantSpeed string) {
		t.Helper()
		req := h.requestTurn("s1", "hurry "+step, o)
		if c := h.waitCompleted(req.TurnId); c.GetStatus() != turnsv1.TurnStatus_TURN_STATUS_COMPLETED {
			t.Fatalf("%s: status %v (%s)", step, c.GetStatus(), c.GetError())
		}
		reqs := h.fake.Requests()
		got := reqs[len(reqs)-1]
		if got.ServiceTier != wantTier || got.Speed != wantSpeed {
			t.Errorf("%s: service_tier %q speed %q, want %q %q", step, got.ServiceTier, got.Speed, wantTier, wantSpeed)
		}
		if beta := strings.Contains(strings.Join(got.Header.Values("anthropic-beta"), ","), llm.AnthropicFastModeBeta); beta != (wantSpeed != "") {
			t.Errorf("%s: fast mode beta sent %v, want %v", step, beta, wantSpeed != "")
		}
	}
	w := h.startWorker("w1", fastModels)
	for _, st := range []struct {
		name              string
		o                 turnOpts
		wantTier, wantSpd string
	}{
		{"default", turnOpts{}, "", ""},
		{"fast", turnOpts{tier: "fast"}, "priority", ""},
		{"normal", turnOpts{tier: "normal"}, "", ""},
		{"anthropic fast", turnOpts{tier: "fast", override: "anthropic:claude-opus-5"}, "", "fast"},
		{"anthropic normal", turnOpts{tier: "normal", override: "anthropic:claude-opus-5"}, "", ""},
		{"fast on a model without it", turnOpts{tier: "fast", override: "gpt-5.3-codex"}, "", ""},
	} {
		check(t, st.name, st.o, st.wantTier, st.wantSpd)
	}
	w.stop(t)

	// agent.service_tier fast is the default of a session that chose
	// nothing; a session's normal overrides it.
	w = h.startWorker("w2", func(c *worker.Config, d *worker.Deps) {
		fastModels(c, d)
		c.Agent.ServiceTier = "fast"
	})
	defer w.stop(t)
	check(t, "config default", turnOpts{}, "priority", "")
	check(t, "session normal over the default", turnOpts{tier: "normal"}, "", "")
}

// A provider that refuses the fast tier for the model (400) fails the
// turn with an answer that names fast mode and how to turn it off, not
// the bare "could not handle this request"; without /fast the same
// model answers.
func TestFastModeRefusedIsExplained(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.setGeneration("s1", 1)
	fake := fakellm.New(fakellm.Config{FastModels: []string{"gpt-5.4"}})
	srv := httptest.NewServer(fake)
	t.Cleanup(srv.Close)
	w := h.startWorker("w1", func(_ *worker.Config, d *worker.Deps) {
		d.LLM = worker.Backend{Kind: "openai", Model: "gpt-4o", BaseURL: srv.URL + "/v1", KeyHash: "none",
			Provider: llm.WithRetry(llm.NewOpenAI(llm.OpenAIConfig{BaseURL: srv.URL + "/v1", Model: "gpt-4o"}),
				llm.RetryPolicy{MaxAttempts: 2, CallTimeout: callTimeout, Sleep: func(context.Context, time.Duration) error { return nil }})}
	})
	defer w.stop(t)
	req := h.requestTurn("s1", "hurry", turnOpts{tier: "fast"})
	if c := h.waitCompleted(req.TurnId); c.GetStatus() != turnsv1.TurnStatus_TURN_STATUS_FAILED {
		t.Fatalf("status %v, want failed", c.GetStatus())
	}
	e := checkReplies(t, h.replies(req.TurnId)).GetError()
	if msg := e.GetMessage(); !strings.HasPrefix(msg, "⚡ The AI service refused fast mode (Priority Processing) for `gpt-4o`") ||
		!strings.Contains(msg, "`/fast normal`") {
		t.Errorf("error %q %q, want it to name fast mode and /fast normal", e.GetCode(), msg)
	}
	if n := len(fake.Requests()); n != 1 || fake.Requests()[0].ServiceTier != "priority" {
		t.Errorf("%d requests, want 1 with service_tier priority (a 400 is not retried)", n)
	}
	req = h.requestTurn("s1", "no hurry", turnOpts{tier: "normal"})
	if c := h.waitCompleted(req.TurnId); c.GetStatus() != turnsv1.TurnStatus_TURN_STATUS_COMPLETED {
		t.Fatalf("normal turn: status %v (%s)", c.GetStatus(), c.GetError())
	}
}
