package worker_test

import (
	"context"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/switchboard-chat/switchboard/pkg/fakellm"
	turnsv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/turns/v1"
	"github.com/switchboard-chat/switchboard/services/worker"
)

// moaPreset configures agent.moa with refs and aggregator agg.
func moaPreset(agg string, minOK, concurrency int, refs ...string) func(*worker.Config, *worker.Deps) {
	return func(c *worker.Config, _ *worker.Deps) {
		c.Agent.MoA.ReferenceModels, c.Agent.MoA.AggregatorModel = refs, agg
		c.Agent.MoA.MinSuccessfulReferences, c.Agent.MoA.MaxConcurrency = minOK, concurrency
	}
}

// requestsFor are the requests the fake had for model.
func requestsFor(h *harness, model string) []fakellm.Request {
	var out []fakellm.Request
	for _, r := range h.fake.Requests() {
		if r.Model == model {
			out = append(out, r)
		}
	}
	return out
}

func temperature(r fakellm.Request) float64 {
	if r.Temperature == nil {
		return -1
	}
	return *r.Temperature
}

// A /moa turn (TurnRequested.moa) asks each reference model the prompt,
// with the conversation so far as context, without tools, at 0.6; the
// aggregator then gets the conversation and, after Hermes's aggregator
// prompt, every reference's answer, numbered, at 0.4, and its answer is
// the turn's, recorded as any turn's. The session's model is never
// asked, and the next turn runs on it as before.
func TestMoAAggregatesReferences(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.startWorker("w1", moaPreset("agg", 1, 8, "ref-a", "ref-b", "ref-c"))
	const key = "agent:main:telegram:dm:moa"
	h.setGeneration(key, 1)
	first := h.requestTurn(key, "The project is called Kestrel.", turnOpts{override: "gpt-mine"})
	if c := h.waitCompleted(first.TurnId); c.GetStatus() != turnsv1.TurnStatus_TURN_STATUS_COMPLETED {
		t.Fatalf("first turn: %v (%s)", c.GetStatus(), c.GetError())
	}
	h.fake.Reset()
	for _, m := range []string{"a", "b", "c"} {
		h.fake.EnqueueFor("ref-"+m, fakellm.Reply{Text: "answer " + strings.ToUpper(m)})
	}
	h.fake.EnqueueFor("agg", fakellm.Reply{Text: "the synthesis"})
	req := h.requestTurn(key, "Name three risks.", turnOpts{moa: true, override: "gpt-mine"})
	if c := h.waitCompleted(req.TurnId); c.GetStatus() != turnsv1.TurnStatus_TURN_STATUS_COMPLETED {
		t.Fatalf("the /moa turn: %v (%s)", c.GetStatus(), c.GetError())
	}
	if got := checkReplies(t, h.replies(req.TurnId)).GetFinalText().GetText(); got != "the synthesis" {
		t.Fatalf("answer %q, want the aggregator's", got)
	}
	for _, m := range []string{"ref-a", "ref-b", "ref-c"} {
		rs := requestsFor(h, m)
		if len(rs) != 1 {
			t.Fatalf("%s asked %d times", m, len(rs))
		}
		r := rs[0]
		if len(r.Tools) != 0 || len(r.Messages) != 1 || r.System != "" || temperature(r) != 0.6 ||
			!strings.HasSuffix(r.LastUserText(), "\n\nName three risks.") ||
			!strings.Contains(r.LastUserText(), "USER: The project is called Kestrel.") {
			t.Errorf("%s's request: %d tools, %d messages, system %q, temperature %v, text %q",
				m, len(r.Tools), len(r.Messages), r.System, temperature(r), r.LastUserText())
		}
	}
	agg := requestsFor(h, "agg")
	if len(agg) != 1 {
		t.Fatalf("aggregator asked %d times", len(agg))
	}
	a := agg[0]
	if !strings.Contains(a.System, "Responses from models:\n\n1. answer A\n2. answer B\n3. answer C") ||
		!strings.Contains(a.System, "synthesize these responses into a single, high-quality response") ||
		len(a.Tools) != 0 || temperature(a) != 0.4 || a.LastUserText() != "Name three risks." ||
		!slices.ContainsFunc(a.Messages, func(m fakellm.Message) bool { return m.Content == "The project is called Kestrel." }) {
		t.Errorf("aggregator's request: system %q, %d tools, temperature %v, messages %v", a.System, len(a.Tools), temperature(a), a.Messages)
	}
	if n := len(requestsFor(h, "gpt-mine")); n != 0 {
		t.Errorf("the session's model was asked %d times in the /moa turn", n)
	}
	var recorded []string
	rows, err := h.db.Query(context.Background(), `SELECT role || ': ' || content FROM transcript_messages WHERE turn_id = $1 ORDER BY step`, req.TurnId)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var s string
		if err := rows.Scan(&s); err != nil {
			t.Fatal(err)
		}
		recorded = append(recorded, s)
	}
	if want := []string{"user: Name three risks.", "assistant: the synthesis"}; !slices.Equal(recorded, want) {
		t.Errorf("recorded %q, want %q", recorded, want)
	}

	next := h.requestTurn(key, "and now?", turnOpts{override: "gpt-mine"})
	if c := h.waitCompleted(next.TurnId); c.GetStatus() != turnsv1.TurnStatus_TURN_STATUS_COMPLETED {
		t.Fatalf("the next turn: %v (%s)", c.GetStatus(), c.GetError())
	}
	mine := requestsFor(h, "gpt-mine")
	if len(mine) != 1 || mine[0].Temperature != nil || len(mine[0].Tools) == 0 || strings.Contains(mine[0].System, "Responses from models") {
		t.Fatalf("the turn after /moa: %d requests to the session's model", len(mine))
	}
	if got := checkReplies(t, h.replies(next.TurnId)).GetFinalText().GetText(); got != "echo: and now?" {
		t.Fatalf("the turn after /moa answered %q", got)
	}
}

// Reference failures: the aggregator runs on the answers there are when
// at least min_successful_references answered; fewer fail the turn with
// an answer saying so (the aggregator is not asked), and a provider's
// refusal (429) is said as on any other turn.
func TestMoAReferenceFailures(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.startWorker("w1", moaPreset("agg", 2, 8, "ref-a", "ref-b", "ref-c"))
	serverError := fakellm.Reply{Failure: &fakellm.Failure{Status: http.StatusInternalServerError, Message: "boom"}}
	tooMany := fakellm.Reply{Failure: &fakellm.Failure{Status: http.StatusTooManyRequests, Message: "slow down"}}
	tests := []struct {
		name    string
		replies map[string][]fakellm.Reply // the harness's provider tries twice
		status  turnsv1.TurnStatus
		want    string // the answer, or the start of the error's text
		system  string // what the aggregator sees of the answers
	}{
		{"one fails, the minimum holds", map[string][]fakellm.Reply{"ref-b": {serverError, serverError}},
			turnsv1.TurnStatus_TURN_STATUS_COMPLETED, "the synthesis", "Responses from models:\n\n1. answer A\n2. answer C"},
		{"an empty answer counts as failed", map[string][]fakellm.Reply{"ref-a": {{Text: "  "}}},
			turnsv1.TurnStatus_TURN_STATUS_COMPLETED, "the synthesis", "Responses from models:\n\n1. answer B\n2. answer C"},
		{"too many fail", map[string][]fakellm.Reply{"ref-a": {serverError, serverError}, "ref-c": {serverError, serverError}},
			turnsv1.TurnStatus_TURN_STATUS_FAILED, "Mixture of Agents failed: 1 of 3 reference models answered, at least 2 needed (ref-a: server; ref-c: server). " +
				"Try again, or send the message without /moa.", ""},
		{"rate limited, said as any turn", map[string][]fakellm.Reply{"ref-b": {tooMany, tooMany}, "ref-c": {serverError, serverError}},
			turnsv1.TurnStatus_TURN_STATUS_FAILED, "The AI service is busy right now. Please try again in a minute.", ""},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h.fake.Reset()
			for _, m := range []string{"a", "b", "c"} {
				model := "ref-" + m
				h.fake.EnqueueFor(model, tt.replies[model]...)
				h.fake.EnqueueFor(model, fakellm.Reply{Text: "answer " + strings.ToUpper(m)})
			}
			h.fake.EnqueueFor("agg", fakellm.Reply{Text: "the synthesis"})
			key := "agent:main:telegram:dm:moa-fail-" + string(rune('0'+i))
			h.setGeneration(key, 1)
			req := h.requestTurn(key, "Name three risks.", turnOpts{moa: true})
			c := h.waitCompleted(req.TurnId)
			final := checkReplies(t, h.replies(req.TurnId))
			if c.GetStatus() != tt.status {
				t.Fatalf("status %v (%s)", c.GetStatus(), final.GetError().GetMessage())
			}
			agg := requestsFor(h, "agg")
			if tt.system == "" {
				if msg := final.GetError().GetMessage(); msg != tt.want {
					t.Errorf("error %q, want %q", msg, tt.want)
				}
				if len(agg) != 0 {
					t.Errorf("the aggregator was asked %d times", len(agg))
				}
				return
			}
			if got := final.GetFinalText().GetText(); got != tt.want {
				t.Errorf("answer %q, want %q", got, tt.want)
			}
			if len(agg) != 1 || !strings.HasSuffix(agg[0].System, tt.system) {
				t.Errorf("aggregator's requests %d, requests %v", len(agg), agg)
			}
		})
	}
}

// The reference calls run at most max_concurrency at once, and a /stop
// ends them all at once: the turn stops, no aggregator is asked.
func TestMoABoundedAndStoppable(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.startWorker("w1", moaPreset("agg", 1, 2, "ref-a", "ref-b", "ref-c", "ref-d"))
	const key = "agent:main:telegram:dm:moa-stop"
	h.setGeneration(key, 1)
	for _, m := range []string{"ref-a", "ref-b", "ref-c", "ref-d"} {
		h.fake.EnqueueFor(m, fakellm.Reply{Text: "answer", Failure: &fakellm.Failure{Latency: 300 * time.Millisecond}})
	}
	h.fake.EnqueueFor("agg", fakellm.Reply{Text: "the synthesis"})
	req := h.requestTurn(key, "bounded", turnOpts{moa: true})
	if c := h.waitCompleted(req.TurnId); c.GetStatus() != turnsv1.TurnStatus_TURN_STATUS_COMPLETED {
		t.Fatalf("the /moa turn: %v (%s)", c.GetStatus(), c.GetError())
	}
	if n := h.maxIn.Load(); n > 2 {
		t.Fatalf("%d reference calls at once, want at most 2", n)
	}

	h.fake.Reset()
	for _, m := range []string{"ref-a", "ref-b", "ref-c", "ref-d"} {
		h.fake.EnqueueFor(m, fakellm.Reply{Text: "answer", Failure: &fakellm.Failure{Latency: 20 * time.Second}})
	}
	stopped := h.requestTurn(key, "never mind", turnOpts{moa: true})
	waitFor(t, 10*time.Second, "the reference calls", func() bool { return len(h.fake.Requests()) >= 2 })
	began := time.Now()
	h.control(key, turnsv1.ControlAction_CONTROL_ACTION_STOP, "")
	c := h.waitCompleted(stopped.TurnId)
	if c.GetStatus() != turnsv1.TurnStatus_TURN_STATUS_STOPPED || time.Since(began) > 10*time.Second {
		t.Fatalf("after /stop: %v in %v", c.GetStatus(), time.Since(began))
	}
	if n := len(requestsFor(h, "agg")); n != 0 {
		t.Fatalf("the aggregator was asked %d times after /stop", n)
	}
}
