package worker_test

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/switchboard-chat/switchboard/pkg/fakellm"
	turnsv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/turns/v1"
	"github.com/switchboard-chat/switchboard/services/worker"
	"github.com/switchboard-chat/switchboard/services/worker/internal/tools"
)

// continueText is Hermes's request to go on with a cut answer.
const continueText = "[System: Your previous response was truncated by the output length limit. Continue exactly " +
	"where you left off. Do not restart or repeat prior text. Finish the answer directly.]"

// transcript is the turn's committed messages as role:content lines.
func (h *harness) transcript(turnID string) []string {
	h.t.Helper()
	rows, err := h.db.Query(context.Background(), `SELECT role, content FROM transcript_messages WHERE turn_id = $1 ORDER BY step`, turnID)
	if err != nil {
		h.t.Fatal(err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var role, content string
		if err := rows.Scan(&role, &content); err != nil {
			h.t.Fatal(err)
		}
		out = append(out, role+":"+content)
	}
	return out
}

// An answer the output limit cut (finish_reason "length", stop_reason
// "max_tokens") is not delivered as if whole: as Hermes does, the model
// is asked to go on, and the parts are joined (a newline where two would
// glue together), the deltas streaming exactly the joined answer. The
// continuations are bounded: after four cut calls the parts are the
// answer, kept as one message.
func TestAnswerCutAtTheOutputLimitIsContinued(t *testing.T) {
	t.Parallel()
	for _, kind := range []string{"openai", "anthropic"} {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			h := newHarness(t)
			h.setGeneration("s1", 1)
			h.startWorker("w1", func(_ *worker.Config, d *worker.Deps) {
				if kind == "anthropic" {
					d.LLM = h.anthropic()
				}
			})
			check := func(req *turnsv1.TurnRequested, want string, calls int32, transcript []string) {
				t.Helper()
				c := h.waitCompleted(req.TurnId)
				if c.GetStatus() != turnsv1.TurnStatus_TURN_STATUS_COMPLETED || c.GetUsage().GetModelCalls() != calls {
					t.Errorf("status %v, %d model calls, want %d", c.GetStatus(), c.GetUsage().GetModelCalls(), calls)
				}
				evs := h.replies(req.TurnId)
				var streamed strings.Builder
				for _, ev := range evs {
					streamed.WriteString(ev.GetTextDelta().GetText())
				}
				if got := checkReplies(t, evs).GetFinalText().GetText(); got != want {
					t.Errorf("final %q, want %q", got, want)
				}
				if streamed.String() != want {
					t.Errorf("streamed %q, want the answer %q", streamed.String(), want)
				}
				if got := h.transcript(req.TurnId); strings.Join(got, "|") != strings.Join(transcript, "|") {
					t.Errorf("transcript %q, want %q", got, transcript)
				}
			}

			h.fake.Enqueue(
				fakellm.Reply{Text: "The first half of", Truncated: true},
				fakellm.Reply{Text: " the answer,", Truncated: true},
				fakellm.Reply{Text: "and the end."},
			)
			req := h.requestTurn("s1", "write a long answer", turnOpts{})
			check(req, "The first half of the answer,\nand the end.", 3, []string{
				"user:write a long answer",
				"assistant:The first half of", "user:" + continueText,
				"assistant: the answer,", "user:" + continueText,
				"assistant:and the end.",
			})
			reqs := h.fake.Requests()
			last := reqs[len(reqs)-1].Messages
			if n := len(last); n < 2 || last[n-2].Role != "assistant" || last[n-2].Content != " the answer," ||
				last[n-1].Role != "user" || last[n-1].Content != continueText {
				t.Errorf("the continuation asked with %+v", last)
			}

			// Bounded: four cut calls, then the parts are the answer.
			before := len(h.fake.Requests())
			for _, part := range []string{"one", "two", "three", "four"} {
				h.fake.Enqueue(fakellm.Reply{Text: part, Truncated: true})
			}
			h.fake.Enqueue(fakellm.Reply{Text: "never asked"})
			req = h.requestTurn("s1", "write an endless answer", turnOpts{})
			check(req, "one\ntwo\nthree\nfour", 4, []string{"user:write an endless answer", "assistant:one\ntwo\nthree\nfour"})
			if n := len(h.fake.Requests()) - before; n != 4 {
				t.Errorf("%d model calls for the cut answer, want 4", n)
			}
			// The next turn's context has the joined answer, and no
			// request to go on.
			h.fake.Reset()
			req = h.requestTurn("s1", "thanks", turnOpts{})
			h.waitCompleted(req.TurnId)
			for _, m := range h.fake.Requests()[0].Messages {
				if strings.Contains(m.Content, "truncated by the output length limit") && strings.Contains(m.Content, "endless") {
					t.Errorf("the next turn carries a request to go on: %+v", m)
				}
			}
		})
	}
}

// A tool call the output limit cut never runs with half its arguments,
// even when what was cut parses (Anthropic sends {} for a call cut before
// its input): the answer is asked again with a higher limit, as Hermes
// does, and a call cut on every try ends the turn with why.
func TestToolCallCutAtTheOutputLimitDoesNotRun(t *testing.T) {
	t.Parallel()
	for _, kind := range []string{"openai", "anthropic"} {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			h := newHarness(t)
			h.setGeneration("s1", 1)
			var mu sync.Mutex
			var ran []string
			h.startWorker("w1", func(_ *worker.Config, d *worker.Deps) {
				if kind == "anthropic" {
					d.LLM = h.anthropic()
				}
				d.Tools = []tools.Tool{{Name: "note", Description: "Note it.",
					Run: func(_ context.Context, _ tools.Call, args json.RawMessage) (string, error) {
						mu.Lock()
						defer mu.Unlock()
						ran = append(ran, string(args))
						return "noted", nil
					}}}
			})
			cut := fakellm.Reply{Text: "Noting. ", ToolCalls: []fakellm.ToolCall{{Name: "note", Arguments: `{}`}}, Truncated: true}
			h.fake.Enqueue(cut,
				fakellm.Reply{Text: "Noting. ", ToolCalls: []fakellm.ToolCall{{Name: "note", Arguments: `{"text":"whole"}`}}},
				fakellm.Reply{Text: "Done."})
			req := h.requestTurn("s1", "note it", turnOpts{})
			if c := h.waitCompleted(req.TurnId); c.GetStatus() != turnsv1.TurnStatus_TURN_STATUS_COMPLETED {
				t.Fatalf("status %v", c.GetStatus())
			}
			if got := checkReplies(t, h.replies(req.TurnId)).GetFinalText().GetText(); got != "Done." {
				t.Errorf("final %q", got)
			}
			mu.Lock()
			if len(ran) != 1 || ran[0] != `{"text":"whole"}` {
				t.Errorf("the tool ran with %q, want once with the whole call", ran)
			}
			ran = nil
			mu.Unlock()
			reqs := h.fake.Requests()
			if len(reqs) != 3 || reqs[1].MaxTokens != 8192 || len(reqs[1].Messages) != len(reqs[0].Messages) {
				t.Errorf("the cut answer was asked again with %d requests (max_tokens %d)", len(reqs), reqs[1].MaxTokens)
			}

			// Cut on every try: the call does not run, and the user is told.
			h.fake.Reset()
			bad := fakellm.Reply{ToolCalls: []fakellm.ToolCall{{Name: "note", Arguments: `{"text": "cut sh`}}, Truncated: true}
			for range 5 {
				h.fake.Enqueue(bad)
			}
			h.fake.Enqueue(fakellm.Reply{Text: "never asked"})
			req = h.requestTurn("s1", "note a lot", turnOpts{})
			if c := h.waitCompleted(req.TurnId); c.GetStatus() != turnsv1.TurnStatus_TURN_STATUS_FAILED {
				t.Errorf("status %v", c.GetStatus())
			}
			final := checkReplies(t, h.replies(req.TurnId))
			if !strings.Contains(final.GetError().GetMessage(), "output length limit") {
				t.Errorf("final %v", final)
			}
			var limits []int
			for _, r := range h.fake.Requests() {
				limits = append(limits, r.MaxTokens)
			}
			want := []int{0, 8192, 16384, 32768, 32768}
			if kind == "anthropic" {
				want[0] = 4096 // the client's default
			}
			if !slices.Equal(limits, want) {
				t.Errorf("max_tokens of the tries %v, want %v", limits, want)
			}
			mu.Lock()
			if len(ran) != 0 {
				t.Errorf("a cut call ran: %q", ran)
			}
			mu.Unlock()
		})
	}
}

// An interrupt while a cut answer is continued ends the turn with what
// the user saw: the cut part and what the continuation had streamed,
// joined as the stream showed them, in the final and the transcript.
func TestInterruptDuringAContinuationKeepsTheParts(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.setGeneration("s1", 1)
	h.startWorker("w1", nil)
	h.fake.Enqueue(
		fakellm.Reply{Text: "The first half of", Truncated: true},
		fakellm.Reply{Text: "the answer, streamed slowly and at length", Failure: &fakellm.Failure{ChunkDelay: time.Second}},
	)
	req := h.requestTurn("s1", "write a long answer", turnOpts{})
	streamed := func() string {
		var b strings.Builder
		for _, ev := range h.replies(req.TurnId) {
			b.WriteString(ev.GetTextDelta().GetText())
		}
		return b.String()
	}
	waitFor(t, 30*time.Second, "the continuation streams", func() bool { return strings.HasPrefix(streamed(), "The first half of\nthe") })
	h.control("s1", turnsv1.ControlAction_CONTROL_ACTION_INTERRUPT, "")
	if c := h.waitCompleted(req.TurnId); c.GetStatus() != turnsv1.TurnStatus_TURN_STATUS_INTERRUPTED {
		t.Fatalf("status %v, want INTERRUPTED", c.GetStatus())
	}
	got, final := streamed(), checkReplies(t, h.replies(req.TurnId)).GetFinalText().GetText()
	if final != got || got == "The first half of\nthe answer, streamed slowly and at length" {
		t.Errorf("final %q, streamed %q: want the streamed parts, cut short", final, got)
	}
	if tr := h.transcript(req.TurnId); len(tr) != 2 || tr[1] != "assistant:"+got {
		t.Errorf("transcript %q", tr)
	}
}

// The answers that end a turn without the loop's tools — the summary
// asked at agent.max_iterations and the /moa aggregator's — go on past
// the output limit too, their tool calls ignored as before.
func TestCutSummaryAndAggregatorAnswersAreContinued(t *testing.T) {
	t.Parallel()
	t.Run("iteration limit", func(t *testing.T) {
		t.Parallel()
		h := newHarness(t)
		h.setGeneration("s1", 1)
		h.startWorker("w1", func(c *worker.Config, _ *worker.Deps) { c.Agent.MaxIterations = 1 })
		h.fake.Enqueue(fakellm.Reply{ToolCalls: []fakellm.ToolCall{{Name: "clock", Arguments: `{}`}}},
			fakellm.Reply{Text: "Found the time", Truncated: true},
			fakellm.Reply{Text: " and stopped."})
		req := h.requestTurn("s1", "what time is it?", turnOpts{})
		h.waitCompleted(req.TurnId)
		if got := checkReplies(t, h.replies(req.TurnId)).GetFinalText().GetText(); got != "Found the time and stopped." {
			t.Errorf("final %q", got)
		}
	})
	t.Run("moa", func(t *testing.T) {
		t.Parallel()
		h := newHarness(t)
		const key = "agent:main:telegram:dm:moa"
		h.setGeneration(key, 1)
		h.startWorker("w1", moaPreset("agg", 1, 8, "ref-a"))
		h.fake.EnqueueFor("ref-a", fakellm.Reply{Text: "answer A"})
		h.fake.EnqueueFor("agg", fakellm.Reply{Text: "the synth", Truncated: true},
			fakellm.Reply{Text: "esis", ToolCalls: []fakellm.ToolCall{{Name: "clock", Arguments: `{}`}}})
		req := h.requestTurn(key, "Name three risks.", turnOpts{moa: true})
		h.waitCompleted(req.TurnId)
		if got := checkReplies(t, h.replies(req.TurnId)).GetFinalText().GetText(); got != "the synth\nesis" {
			t.Errorf("final %q", got)
		}
		if n := len(requestsFor(h, "agg")); n != 2 {
			t.Errorf("the aggregator was asked %d times", n)
		}
	})
}
