package worker_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/switchboard-chat/switchboard/pkg/fakellm"
	turnsv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/turns/v1"
	"github.com/switchboard-chat/switchboard/services/worker"
	"github.com/switchboard-chat/switchboard/services/worker/internal/tools"
)

// pageTool reads "page n": about 3.6 KB each, a web page or a file.
func pageTool() tools.Tool {
	return tools.Tool{Name: "read_page", Description: "read a page", Run: func(_ context.Context, _ tools.Call, args json.RawMessage) (string, error) {
		var a struct{ N int }
		_ = json.Unmarshal(args, &a)
		return fmt.Sprintf("page %d: ", a.N) + strings.Repeat("lorem ipsum ", 300), nil
	}}
}

// pageModel is a fake model of window bytes (~4 a token) that refuses a
// longer prompt as the providers do (context_length_exceeded), reads
// pages pages one by one, then answers.
func pageModel(window, pages int) fakellm.ScriptFunc {
	return func(r *fakellm.Request) (fakellm.Reply, bool) {
		size := len(r.System)
		results := 0
		for _, m := range r.Messages {
			size += len(m.Content)
			if m.Role == "tool" {
				results++
			}
		}
		if size > window {
			return fakellm.Reply{Failure: &fakellm.Failure{Status: 400, Type: "context_length_exceeded",
				Message: "This model's maximum context length is exceeded."}}, true
		}
		if results < pages {
			return fakellm.Reply{ToolCalls: []fakellm.ToolCall{{ID: fmt.Sprintf("c%d", results), Name: "read_page",
				Arguments: fmt.Sprintf(`{"n":%d}`, results)}}}, true
		}
		return fakellm.Reply{Text: fmt.Sprintf("read %d pages", results)}, true
	}
}

// A turn whose own tool results outgrow the context window (a long tool
// loop reading big pages) is compressed between its tool iterations, as
// Hermes does, instead of failing with "conversation has grown too
// long": its older results are cleared, its question and its latest
// result stay whole, each call keeps its result, and what was cleared is
// stored so the transcript (and a re-run) reads the same.
func TestLongToolLoopCompressesMidTurn(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.setGeneration("s1", 1)
	h.startWorker("w1", func(c *worker.Config, d *worker.Deps) {
		c.Agent.ContextWindow = 4000 // tokens: ~16 KB at the worker's estimate
		d.Tools = []tools.Tool{pageTool()}
	})
	h.fake.SetScript(pageModel(4000*4, 8)) // eight pages: ~29 KB
	req := h.requestTurn("s1", "read the eight pages", turnOpts{})
	c := h.waitCompleted(req.TurnId)
	if c.GetStatus() != turnsv1.TurnStatus_TURN_STATUS_COMPLETED {
		t.Fatalf("status %v: %v", c.GetStatus(), checkReplies(t, h.replies(req.TurnId)).GetError())
	}
	if got := checkReplies(t, h.replies(req.TurnId)).GetFinalText().GetText(); got != "read 8 pages" {
		t.Errorf("final %q", got)
	}
	if n := c.GetUsage().GetModelCalls(); n != 9 {
		t.Errorf("%d model calls, want 9 (none refused)", n)
	}
	reqs := h.fake.Requests()
	last := reqs[len(reqs)-1]
	if last.Messages[0].Role != "user" || last.Messages[0].Content != "read the eight pages" {
		t.Errorf("the question is not kept first: %+v", last.Messages[0])
	}
	var results []string
	for i, m := range last.Messages {
		if m.Role == "tool" {
			results = append(results, m.Content)
			if p := last.Messages[i-1]; p.Role != "assistant" || len(p.ToolCalls) != 1 || p.ToolCalls[0].ID != m.ToolCallID {
				t.Errorf("result %s does not follow its call: %+v", m.ToolCallID, p)
			}
		}
	}
	if len(results) != 8 {
		t.Fatalf("%d results in the last call, want 8", len(results))
	}
	if !strings.HasPrefix(results[0], "[Earlier tool output cleared to save context space") {
		t.Errorf("the oldest result was not cleared: %.80q", results[0])
	}
	if r := results[7]; !strings.HasPrefix(r, "page 7: ") || len(r) < 3000 {
		t.Errorf("the latest result is not whole: %.80q", r)
	}
	var cleared, whole int
	if err := h.db.QueryRow(context.Background(), `SELECT count(*) FILTER (WHERE compacted IS NOT NULL),
		count(*) FILTER (WHERE length(content) > 3000) FROM transcript_messages
		WHERE session_id = 'sid-s1' AND role = 'tool'`).Scan(&cleared, &whole); err != nil {
		t.Fatal(err)
	}
	if cleared == 0 || whole != 8 {
		t.Errorf("%d results stored as cleared, %d kept whole in content; want some, 8", cleared, whole)
	}
	// The next turn (as a re-run of this one) reads the results as cleared.
	next := h.requestTurn("s1", "thanks", turnOpts{})
	if c := h.waitCompleted(next.TurnId); c.GetStatus() != turnsv1.TurnStatus_TURN_STATUS_COMPLETED {
		t.Fatalf("next turn: %v", c.GetStatus())
	}
	reqs = h.fake.Requests()
	n := 0
	for _, m := range reqs[len(reqs)-1].Messages {
		if m.Role == "tool" && strings.HasPrefix(m.Content, "[Earlier tool output cleared") {
			n++
		}
	}
	if n != cleared {
		t.Errorf("the next turn reads %d results cleared, want the %d stored", n, cleared)
	}
}

// A provider that counts more than the worker's estimate refuses a long
// turn's prompt as too long before the estimate reaches
// agent.compress_at: the turn's older tool results are then cleared at
// once and the call asked again, as Hermes compresses on a
// context-length error. As the turn grows again it may be refused again
// later; each refusal that compressing answers is asked again, a second
// refusal of the same prompt ends the turn.
func TestContextOverflowMidTurnClearsOlderToolResults(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.setGeneration("s1", 1)
	h.startWorker("w1", func(c *worker.Config, d *worker.Deps) {
		c.Agent.ContextWindow = 4000 // the estimate compresses at ~13.6 KB
		d.Tools = []tools.Tool{pageTool()}
	})
	h.fake.SetScript(pageModel(11000, 8)) // the provider refuses above 11 KB
	req := h.requestTurn("s1", "read the eight pages", turnOpts{})
	c := h.waitCompleted(req.TurnId)
	if c.GetStatus() != turnsv1.TurnStatus_TURN_STATUS_COMPLETED {
		t.Fatalf("status %v: %v", c.GetStatus(), checkReplies(t, h.replies(req.TurnId)).GetError())
	}
	if got := checkReplies(t, h.replies(req.TurnId)).GetFinalText().GetText(); got != "read 8 pages" {
		t.Errorf("final %q", got)
	}
	if n := c.GetUsage().GetModelCalls(); n < 11 {
		t.Errorf("%d model calls, want 9 answered and at least two refused", n)
	}
}

// A /stop ends the summary call of a compression in the middle of a turn
// as it ends one at the turn's start (TestStopEndsACompressionSummaryCall):
// the turn stops, and the summary nobody waits for is not stored.
func TestStopEndsAMidTurnSummaryCall(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.setGeneration("s1", 1)
	h.startWorker("w1", func(c *worker.Config, d *worker.Deps) {
		c.Agent.ContextWindow = 4000
		c.Agent.ProtectLast = 2
		d.Tools = []tools.Tool{pageTool()}
	})
	for _, text := range []string{"first topic", "second topic", "third topic"} {
		req := h.requestTurn("s1", text, turnOpts{})
		if c := h.waitCompleted(req.TurnId); c.GetStatus() != turnsv1.TurnStatus_TURN_STATUS_COMPLETED {
			t.Fatalf("%s: %v", text, c.GetStatus())
		}
	}
	summary := func(r *fakellm.Request) bool { return strings.HasPrefix(r.System, "You compress chat history") }
	pages := pageModel(4000*4, 8)
	h.fake.SetScript(func(r *fakellm.Request) (fakellm.Reply, bool) {
		if summary(r) {
			return fakellm.Reply{Text: "a summary", Failure: &fakellm.Failure{Latency: 2500 * time.Millisecond}}, true
		}
		return pages(r)
	})
	req := h.requestTurn("s1", "read the eight pages", turnOpts{})
	waitFor(t, 30*time.Second, "the summary call", func() bool {
		for _, r := range h.fake.Requests() {
			if summary(&r) {
				return true
			}
		}
		return false
	})
	h.control("s1", turnsv1.ControlAction_CONTROL_ACTION_STOP, "")
	c := h.waitCompleted(req.TurnId)
	if c.GetStatus() != turnsv1.TurnStatus_TURN_STATUS_STOPPED {
		t.Errorf("status %v (%s), want STOPPED", c.GetStatus(), c.GetError())
	}
	if c.GetUsage().GetToolCalls() == 0 {
		t.Error("the summary call came before the turn read any page: not mid-turn")
	}
	var n int
	if err := h.db.QueryRow(context.Background(), `SELECT count(*) FROM transcript_summaries WHERE session_key = 's1'`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 0 {
		t.Errorf("%d summaries stored by the stopped turn", n)
	}
}
