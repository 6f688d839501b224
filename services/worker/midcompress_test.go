package worker_test

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
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

// isTurnSummary: r asks for a summary of a turn's tool steps.
func isTurnSummary(r *fakellm.Request) bool {
	return strings.HasPrefix(r.System, "You are a summarization agent creating a context checkpoint")
}

// pageModel is a fake model of window bytes (~4 a token) that refuses a
// longer prompt as the providers do (context_length_exceeded), reads
// pages pages one by one, then answers. Asked for a summary of the
// turn's steps, it answers nothing.
func pageModel(window, pages int) fakellm.ScriptFunc {
	return func(r *fakellm.Request) (fakellm.Reply, bool) {
		if isTurnSummary(r) {
			return fakellm.Reply{}, true
		}
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
// long": when the summary of its steps answers nothing, its older results
// are cleared, its question and its latest result stay whole, each call
// keeps its result, and what was cleared is stored so the transcript (and
// a re-run) reads the same.
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
	if n := c.GetUsage().GetModelCalls(); n != 10 {
		t.Errorf("%d model calls, want 9 and the one summary (none refused, no summary after it failed)", n)
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
	c := stopDuringSummary(t, h, func(r *fakellm.Request) bool { return strings.HasPrefix(r.System, "You compress chat history") })
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

// stopDuringSummary runs a turn reading eight pages in s1 whose summary
// calls (the requests summary picks) answer late, sends /stop once one
// is asked, and returns the turn's completion, which must be STOPPED.
func stopDuringSummary(t *testing.T, h *harness, summary func(*fakellm.Request) bool) *turnsv1.TurnCompleted {
	t.Helper()
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
	return c
}

// pairedResults are the tool results r carries, in order, each checked to
// follow its call.
func pairedResults(t *testing.T, r fakellm.Request) []string {
	t.Helper()
	var out []string
	for i, m := range r.Messages {
		if m.Role != "tool" {
			continue
		}
		out = append(out, m.Content)
		if p := r.Messages[i-1]; p.Role != "assistant" || len(p.ToolCalls) != 1 || p.ToolCalls[0].ID != m.ToolCallID {
			t.Errorf("result %s does not follow its call: %+v", m.ToolCallID, p)
		}
	}
	return out
}

// storedResults is what the model reads of the session's tool results as
// stored, in order.
func storedResults(t *testing.T, h *harness) []string {
	t.Helper()
	rows, err := h.db.Query(context.Background(), `SELECT coalesce(compacted, content) FROM transcript_messages
		WHERE session_id = 'sid-s1' AND role = 'tool' ORDER BY id`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var s string
		if err := rows.Scan(&s); err != nil {
			t.Fatal(err)
		}
		out = append(out, s)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// A long tool loop's older steps are summarised by the model, as Hermes
// summarises a conversation's middle: the model then reads the summary in
// the last summarised result, and in each other one a pointer to it, so
// every call keeps a result; a later compression of the turn folds the
// earlier summary into a new one. What the model reads is stored, and
// the next turn reads the same.
func TestLongToolLoopSummarisesItsOlderSteps(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.setGeneration("s1", 1)
	h.startWorker("w1", func(c *worker.Config, d *worker.Deps) {
		c.Agent.ContextWindow = 4000 // tokens: ~16 KB at the worker's estimate
		d.Tools = []tools.Tool{pageTool()}
	})
	pages := pageModel(4000*4, 8)
	h.fake.SetScript(func(r *fakellm.Request) (fakellm.Reply, bool) {
		if isTurnSummary(r) {
			in := r.Messages[0].Content
			return fakellm.Reply{Text: fmt.Sprintf("## Completed Actions\n1. READ %d more pages [tool: read_page]",
				strings.Count(in, "tool read_page result: page "))}, true
		}
		return pages(r)
	})
	req := h.requestTurn("s1", "read the eight pages", turnOpts{})
	c := h.waitCompleted(req.TurnId)
	if c.GetStatus() != turnsv1.TurnStatus_TURN_STATUS_COMPLETED {
		t.Fatalf("status %v: %v", c.GetStatus(), checkReplies(t, h.replies(req.TurnId)).GetError())
	}
	if got := checkReplies(t, h.replies(req.TurnId)).GetFinalText().GetText(); got != "read 8 pages" {
		t.Errorf("final %q", got)
	}
	var summaries []fakellm.Request
	var last fakellm.Request
	for _, r := range h.fake.Requests() {
		if isTurnSummary(&r) {
			summaries = append(summaries, r)
		} else {
			last = r
		}
	}
	if len(summaries) != 2 {
		t.Fatalf("%d summary calls, want 2", len(summaries))
	}
	if n := c.GetUsage().GetModelCalls(); n != 11 {
		t.Errorf("%d model calls, want 9 and the 2 summaries", n)
	}
	first := summaries[0].Messages[0].Content
	if !strings.Contains(first, `assistant called read_page({"n":0})`) || !strings.Contains(first, "tool read_page result: page 0: lorem") {
		t.Errorf("the first summary call does not read the steps: %.300q", first)
	}
	second := summaries[1].Messages[0].Content
	if !strings.HasPrefix(second, "[Earlier summary]\n## Completed Actions\n1. READ") || strings.Contains(second, "result: page 0:") {
		t.Errorf("the second summary call does not fold in the first, or reads its steps again: %.300q", second)
	}
	if last.Messages[0].Role != "user" || last.Messages[0].Content != "read the eight pages" {
		t.Errorf("the question is not kept first: %+v", last.Messages[0])
	}
	results := pairedResults(t, last)
	if len(results) != 8 {
		t.Fatalf("%d results in the last call, want 8", len(results))
	}
	held := -1
	for i, r := range results {
		switch {
		case strings.HasPrefix(r, "[CONTEXT COMPACTION — REFERENCE ONLY]"):
			if held >= 0 {
				t.Errorf("results %d and %d both carry a summary", held, i)
			}
			held = i
			if !strings.Contains(r, "\n## Completed Actions\n1. READ") || !strings.HasSuffix(r, "--- END OF CONTEXT SUMMARY ---") {
				t.Errorf("result %d does not carry the model's summary: %q", i, r)
			}
		case held < 0:
			if !strings.HasPrefix(r, "[Old tool output cleared to save context space; it is summarised") {
				t.Errorf("result %d before the summary does not point to it: %.80q", i, r)
			}
		default:
			if want := fmt.Sprintf("page %d: ", i); !strings.HasPrefix(r, want) || len(r) < 3000 {
				t.Errorf("result %d after the summary is not whole: %.80q", i, r)
			}
		}
	}
	if held < 2 || held > 6 {
		t.Fatalf("the summary is in result %d, want one of the older ones after a second summary", held)
	}
	stored := storedResults(t, h)
	if !slices.Equal(stored, results) {
		t.Errorf("stored results differ from what the model read:\n%.200q\n%.200q", stored, results)
	}
	var whole int
	if err := h.db.QueryRow(context.Background(), `SELECT count(*) FROM transcript_messages
		WHERE session_id = 'sid-s1' AND role = 'tool' AND length(content) > 3000`).Scan(&whole); err != nil {
		t.Fatal(err)
	}
	if whole != 8 {
		t.Errorf("%d results kept whole in content, want 8", whole)
	}
	next := h.requestTurn("s1", "thanks", turnOpts{})
	if c := h.waitCompleted(next.TurnId); c.GetStatus() != turnsv1.TurnStatus_TURN_STATUS_COMPLETED {
		t.Fatalf("next turn: %v", c.GetStatus())
	}
	reqs := h.fake.Requests()
	if got := pairedResults(t, reqs[len(reqs)-1]); !slices.Equal(got, results) {
		t.Errorf("the next turn reads other results:\n%.200q\n%.200q", got, results)
	}
}

// When the summary of a turn's older steps fails, or leaves a prompt the
// provider refused longer than clearing would, the older results are
// cleared as without a summary, and the turn asks for no other summary.
func TestMidTurnSummaryFallsBackToClearing(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		refuse  int // the provider's limit, bytes
		summary fakellm.Reply
	}{
		{"the summary call fails", 4000 * 4, fakellm.Reply{Failure: &fakellm.Failure{Status: 400,
			Type: "invalid_request_error", Message: "summaries are not allowed"}}},
		{"the provider refused the prompt and the summary is longer than clearing", 11000,
			fakellm.Reply{Text: strings.Repeat("a long summary ", 300)}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			h := newHarness(t)
			h.setGeneration("s1", 1)
			h.startWorker("w1", func(c *worker.Config, d *worker.Deps) {
				c.Agent.ContextWindow = 4000
				d.Tools = []tools.Tool{pageTool()}
			})
			pages := pageModel(tt.refuse, 8)
			h.fake.SetScript(func(r *fakellm.Request) (fakellm.Reply, bool) {
				if isTurnSummary(r) {
					return tt.summary, true
				}
				return pages(r)
			})
			req := h.requestTurn("s1", "read the eight pages", turnOpts{})
			c := h.waitCompleted(req.TurnId)
			if c.GetStatus() != turnsv1.TurnStatus_TURN_STATUS_COMPLETED {
				t.Fatalf("status %v: %v", c.GetStatus(), checkReplies(t, h.replies(req.TurnId)).GetError())
			}
			if got := checkReplies(t, h.replies(req.TurnId)).GetFinalText().GetText(); got != "read 8 pages" {
				t.Errorf("final %q", got)
			}
			n := 0
			for _, r := range h.fake.Requests() {
				if isTurnSummary(&r) {
					n++
				}
			}
			if n != 1 {
				t.Errorf("%d summary calls, want 1", n)
			}
			reqs := h.fake.Requests()
			results := pairedResults(t, reqs[len(reqs)-1])
			if len(results) != 8 || !strings.HasPrefix(results[0], "[Earlier tool output cleared to save context space") {
				t.Fatalf("%d results, the oldest not cleared: %.80q", len(results), results)
			}
			stored := storedResults(t, h)
			if !slices.Equal(stored, results) {
				t.Errorf("stored results differ from what the model read:\n%.200q\n%.200q", stored, results)
			}
			for i, r := range stored {
				if strings.Contains(r, "CONTEXT COMPACTION") {
					t.Errorf("result %d stored with a summary: %.80q", i, r)
				}
			}
		})
	}
}

// A /stop ends the summary call of a turn's older steps as it ends any
// model call: the turn stops, and nothing of the compression is stored
// (neither the summary nobody waits for nor the clearing).
func TestStopEndsATurnStepsSummaryCall(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.setGeneration("s1", 1)
	h.startWorker("w1", func(c *worker.Config, d *worker.Deps) {
		c.Agent.ContextWindow = 4000
		d.Tools = []tools.Tool{pageTool()}
	})
	stopDuringSummary(t, h, isTurnSummary)
	var n int
	if err := h.db.QueryRow(context.Background(), `SELECT count(*) FROM transcript_messages
		WHERE session_id = 'sid-s1' AND compacted IS NOT NULL`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 0 {
		t.Errorf("%d results stored compacted by the stopped turn", n)
	}
}

// The summary of a turn's older steps is asked for without the
// credentials its tool results printed, as Hermes redacts what crosses
// its compaction boundary, and a summary longer than its bound
// (turnSummaryMax: 1,600 bytes at this window) is cut after a whole line
// and says so, instead of mid-sentence.
func TestMidTurnSummaryIsRedactedAndCutAtALine(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.setGeneration("s1", 1)
	key := "sk-proj-" + strings.Repeat("Q7x", 12)
	env := tools.Tool{Name: "read_page", Run: func(ctx context.Context, c tools.Call, args json.RawMessage) (string, error) {
		page, err := pageTool().Run(ctx, c, args)
		return "OPENAI_API_KEY=" + key + "\n" + page, err
	}}
	h.startWorker("w1", func(c *worker.Config, d *worker.Deps) {
		c.Agent.ContextWindow = 4000
		d.Tools = []tools.Tool{env}
	})
	var summary strings.Builder
	summary.WriteString("## Completed Actions\n")
	for i := range 30 {
		fmt.Fprintf(&summary, "%d. READ page %d — its text is lorem ipsum, read in full [tool: read_page]\n", i+1, i)
	}
	summary.WriteString("\n## Active State\nAll pages read.")
	pages := pageModel(4000*4, 8)
	h.fake.SetScript(func(r *fakellm.Request) (fakellm.Reply, bool) {
		if isTurnSummary(r) {
			return fakellm.Reply{Text: summary.String()}, true
		}
		return pages(r)
	})
	req := h.requestTurn("s1", "read the eight pages", turnOpts{})
	c := h.waitCompleted(req.TurnId)
	if c.GetStatus() != turnsv1.TurnStatus_TURN_STATUS_COMPLETED {
		t.Fatalf("status %v: %v", c.GetStatus(), checkReplies(t, h.replies(req.TurnId)).GetError())
	}
	asked := 0
	for _, r := range h.fake.Requests() {
		if !isTurnSummary(&r) {
			continue
		}
		asked++
		if in := r.Messages[0].Content; strings.Contains(in, key) || !strings.Contains(in, "OPENAI_API_KEY=sk-pro...") {
			t.Errorf("the summary call reads the key unmasked: %.300q", in)
		}
	}
	if asked == 0 {
		t.Fatal("no summary was asked for")
	}
	var held string
	for _, r := range storedResults(t, h) {
		if s, ok := strings.CutPrefix(r, "[CONTEXT COMPACTION — REFERENCE ONLY]"); ok {
			held = s
		}
	}
	body, ok := strings.CutSuffix(held, "\n\n[Summary cut at 1,600 bytes: the lines after this were left out]\n\n--- END OF CONTEXT SUMMARY ---")
	if !ok {
		t.Fatalf("the stored summary does not end with the cut's note: %q", held[max(0, len(held)-200):])
	}
	_, body, _ = strings.Cut(body, "\n## Completed Actions\n")
	last := body[strings.LastIndexByte(body, '\n')+1:]
	if !strings.HasSuffix(last, "read in full [tool: read_page]") || !strings.Contains(summary.String(), "\n"+last+"\n") {
		t.Errorf("the summary is not cut after a whole line: ends %q", last)
	}
}
