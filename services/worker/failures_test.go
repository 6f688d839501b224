package worker_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/switchboard-chat/switchboard/pkg/fakellm"
	deliveryv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/delivery/v1"
	eventsv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/events/v1"
	repliesv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/replies/v1"
	turnsv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/turns/v1"
	"github.com/switchboard-chat/switchboard/pkg/llm"
	"github.com/switchboard-chat/switchboard/services/worker"
	"github.com/switchboard-chat/switchboard/services/worker/internal/store"
	"github.com/switchboard-chat/switchboard/services/worker/internal/tools"
)

// A tool that panics or never returns (ignoring its context) costs the
// model one failed result, not the worker process or the session's turn.
func TestBrokenToolsBecomeFailedResults(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		run  func(release <-chan struct{}) func(context.Context, tools.Call, json.RawMessage) (string, error)
		want string
	}{
		{"panics", func(<-chan struct{}) func(context.Context, tools.Call, json.RawMessage) (string, error) {
			return func(_ context.Context, _ tools.Call, args json.RawMessage) (string, error) {
				var v []int
				return fmt.Sprint(v[len(args)]), nil // index out of range: a panic
			}
		}, "error: the tool crashed: runtime error: index out of range [2] with length 0"},
		{"hangs", func(release <-chan struct{}) func(context.Context, tools.Call, json.RawMessage) (string, error) {
			return func(context.Context, tools.Call, json.RawMessage) (string, error) {
				<-release // deaf to its context
				return "late", nil
			}
		}, "error: the tool did not finish within 300ms"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			h := newHarness(t)
			h.setGeneration("s1", 1)
			release := make(chan struct{})
			t.Cleanup(func() { close(release) })
			h.startWorker("w1", func(c *worker.Config, d *worker.Deps) {
				c.Agent.ToolTimeout = 300 * time.Millisecond
				d.Tools = []tools.Tool{{Name: "broken", Description: "Broken.", Run: tt.run(release)}}
			})
			req := h.requestTurn("s1", `[[tool:broken {}]] try it`, turnOpts{})
			if c := h.waitCompleted(req.TurnId); c.GetStatus() != turnsv1.TurnStatus_TURN_STATUS_COMPLETED {
				t.Fatalf("status %v", c.GetStatus())
			}
			if got, want := checkReplies(t, h.replies(req.TurnId)).GetFinalText().GetText(), "echo: try it ["+tt.want+"]"; got != want {
				t.Errorf("final %q, want %q", got, want)
			}
			// The worker lives on.
			req = h.requestTurn("s1", "still there?", turnOpts{})
			if c := h.waitCompleted(req.TurnId); c.GetStatus() != turnsv1.TurnStatus_TURN_STATUS_COMPLETED {
				t.Fatalf("next turn: %v", c.GetStatus())
			}
		})
	}
}

// A huge tool output is cut before it reaches the model and the
// transcript, with a note saying so.
func TestHugeToolOutputIsCut(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.setGeneration("s1", 1)
	h.startWorker("w1", func(c *worker.Config, d *worker.Deps) {
		c.Agent.MaxToolResultBytes = 1000
		d.Tools = []tools.Tool{{Name: "dump", Description: "Dump a log.",
			Run: func(context.Context, tools.Call, json.RawMessage) (string, error) {
				return strings.Repeat("é", 100000), nil // 200000 bytes
			}}, {Name: "fail", Description: "Fail verbosely.",
			Run: func(context.Context, tools.Call, json.RawMessage) (string, error) {
				return "", errors.New(strings.Repeat("x", 5000))
			}}}
	})
	req := h.requestTurn("s1", `[[tool:dump {}]] show the log`, turnOpts{})
	if c := h.waitCompleted(req.TurnId); c.GetStatus() != turnsv1.TurnStatus_TURN_STATUS_COMPLETED {
		t.Fatalf("status %v", c.GetStatus())
	}
	var result string
	for _, r := range h.fake.Requests() {
		for _, m := range r.Messages {
			if m.Role == "tool" {
				result = m.Content
			}
		}
	}
	want := strings.Repeat("é", 500) + "\n\n[Output truncated: 1000 of 200000 bytes shown.]"
	if result != want {
		t.Errorf("tool result the model saw: %d bytes, ends %q", len(result), result[max(0, len(result)-60):])
	}
	// A failure's text is cut too.
	req = h.requestTurn("s1", `[[tool:fail {}]] try`, turnOpts{})
	h.waitCompleted(req.TurnId)
	reqs := h.fake.Requests()
	msgs := reqs[len(reqs)-1].Messages
	if got := msgs[len(msgs)-1]; got.Role != "tool" || got.Content != "error: "+strings.Repeat("x", 993)+"\n\n[Output truncated: 1000 of 5007 bytes shown.]" {
		t.Errorf("failed tool's result: %d bytes", len(got.Content))
	}
	var stored int
	if err := h.db.QueryRow(context.Background(), `SELECT max(length(content)) FROM transcript_messages WHERE role = 'tool' AND content LIKE 'é%'`).Scan(&stored); err != nil {
		t.Fatal(err)
	}
	if stored != len([]rune(want)) {
		t.Errorf("stored tool result of %d characters", stored)
	}
}

// A provider that refuses the prompt as too long (its count is above the
// worker's estimate) gets the older messages summarised and the question
// again, as Hermes does, instead of the user being told to start over.
func TestContextOverflowCompressesAndAsksAgain(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.setGeneration("s1", 1)
	h.startWorker("w1", func(c *worker.Config, _ *worker.Deps) {
		c.Agent.ProtectLast = 2
	})
	for _, text := range []string{"first topic", "second topic", "third topic"} {
		req := h.requestTurn("s1", text, turnOpts{})
		if c := h.waitCompleted(req.TurnId); c.GetStatus() != turnsv1.TurnStatus_TURN_STATUS_COMPLETED {
			t.Fatalf("%s: %v", text, c.GetStatus())
		}
	}
	h.fake.FailNext(1, fakellm.Failure{Status: 400, Type: "context_length_exceeded",
		Message: "This model's maximum context length is 128000 tokens."})
	req := h.requestTurn("s1", "fourth topic", turnOpts{})
	c := h.waitCompleted(req.TurnId)
	if c.GetStatus() != turnsv1.TurnStatus_TURN_STATUS_COMPLETED {
		t.Fatalf("status %v: %v", c.GetStatus(), checkReplies(t, h.replies(req.TurnId)).GetError())
	}
	if got := checkReplies(t, h.replies(req.TurnId)).GetFinalText().GetText(); got != "echo: fourth topic" {
		t.Errorf("final %q", got)
	}
	if n := c.GetUsage().GetModelCalls(); n != 3 { // refused, summary, answer
		t.Errorf("%d model calls", n)
	}
	reqs := h.fake.Requests()
	last := reqs[len(reqs)-1]
	if !strings.Contains(last.Messages[0].Content, "[Summary of the earlier conversation]") {
		t.Errorf("the second ask does not start with the summary: %+v", last.Messages[0])
	}
	if len(last.Messages) != 4 { // summary, the two protected, the question
		t.Errorf("the second ask has %d messages", len(last.Messages))
	}
}

// A turn that used its iterations ends as Hermes ends it: the model is
// asked, without tools, for a final answer from what it found so far.
func TestIterationLimitAsksForAFinalAnswer(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.setGeneration("s1", 1)
	h.startWorker("w1", func(c *worker.Config, _ *worker.Deps) {
		c.Agent.MaxIterations = 2
	})
	req := h.requestTurn("s1", `[[tool:clock {}]] [[tool:clock {}]] [[tool:clock {}]] what time is it`, turnOpts{})
	c := h.waitCompleted(req.TurnId)
	if c.GetStatus() != turnsv1.TurnStatus_TURN_STATUS_COMPLETED {
		t.Fatalf("status %v", c.GetStatus())
	}
	if n := c.GetUsage().GetModelCalls(); n != 3 {
		t.Errorf("%d model calls, want the 2 allowed and the final one", n)
	}
	reqs := h.fake.Requests()
	last := reqs[len(reqs)-1]
	if len(last.Tools) != 0 {
		t.Errorf("the final ask offers %d tools", len(last.Tools))
	}
	ask := last.Messages[len(last.Messages)-1]
	if ask.Role != "user" || !strings.HasPrefix(ask.Content, "You've reached the maximum number of tool-calling iterations allowed.") {
		t.Errorf("the final ask ends with %+v", ask)
	}
	final := checkReplies(t, h.replies(req.TurnId)).GetFinalText().GetText()
	if !strings.HasPrefix(final, "echo: You've reached the maximum number") {
		t.Errorf("final %q", final)
	}
	// The next turn's history carries the ask and the answer, in order.
	req = h.requestTurn("s1", "thanks", turnOpts{})
	h.waitCompleted(req.TurnId)
	reqs = h.fake.Requests()
	msgs := reqs[len(reqs)-1].Messages
	if n := len(msgs); n < 3 || msgs[n-3].Role != "user" || msgs[n-2].Role != "assistant" || msgs[n-2].Content != final {
		t.Errorf("next turn's history ends %+v", msgs[max(0, n-3):])
	}
}

// Tool calls whose ids repeat (servers that send none, or number every
// answer's calls from call_0) all run, each under an id of its own.
func TestRepeatedToolCallIDsAllRun(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.setGeneration("s1", 1)
	var mu sync.Mutex
	ran := map[string]string{} // call id → argument
	h.startWorker("w1", func(_ *worker.Config, d *worker.Deps) {
		d.Tools = []tools.Tool{{Name: "note", Description: "Note a number.",
			Run: func(_ context.Context, c tools.Call, args json.RawMessage) (string, error) {
				mu.Lock()
				defer mu.Unlock()
				ran[c.ID] = string(args)
				return "noted " + string(args), nil
			}}}
	})
	h.fake.Enqueue(
		fakellm.Reply{ToolCalls: []fakellm.ToolCall{{ID: "call_0", Name: "note", Arguments: `{"n":1}`}, {ID: "call_0", Name: "note", Arguments: `{"n":2}`}}},
		fakellm.Reply{ToolCalls: []fakellm.ToolCall{{ID: "call_0", Name: "note", Arguments: `{"n":3}`}}},
	)
	req := h.requestTurn("s1", "note three numbers", turnOpts{})
	if c := h.waitCompleted(req.TurnId); c.GetStatus() != turnsv1.TurnStatus_TURN_STATUS_COMPLETED {
		t.Fatalf("status %v", c.GetStatus())
	}
	mu.Lock()
	defer mu.Unlock()
	if len(ran) != 3 {
		t.Fatalf("calls that ran, by id: %v", ran)
	}
	want := `echo: note three numbers [noted {"n":1}] [noted {"n":2}] [noted {"n":3}]`
	if got := checkReplies(t, h.replies(req.TurnId)).GetFinalText().GetText(); got != want {
		t.Errorf("final %q, want %q", got, want)
	}
}

// panicky panics on a request whose last message says "boom", as a
// provider SDK meeting an answer it did not expect might.
type panicky struct{ llm.Provider }

func (p panicky) Stream(ctx context.Context, req llm.Request, fn func(llm.Delta) error) (*llm.Response, error) {
	if strings.Contains(req.Messages[len(req.Messages)-1].Content, "boom") {
		panic("unexpected answer shape")
	}
	return p.Provider.Stream(ctx, req, fn)
}

// A turn whose code panics fails as any other failing turn does: its last
// attempt tells the user and frees the session, and the worker lives on.
func TestPanickingTurnFailsAloneAndTellsTheUser(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.setGeneration("s1", 1)
	h.setGeneration("s2", 1)
	h.startWorker("w1", func(c *worker.Config, d *worker.Deps) {
		c.MaxDeliver = 2
		d.LLM.Provider = panicky{d.LLM.Provider}
	})
	req := h.requestTurn("s1", "boom", turnOpts{lockTTL: shortLockTTL})
	c := h.waitCompleted(req.TurnId)
	if c.GetStatus() != turnsv1.TurnStatus_TURN_STATUS_FAILED {
		t.Fatalf("status %v", c.GetStatus())
	}
	if e := checkReplies(t, h.replies(req.TurnId)).GetError(); e.GetCode() != "interrupted" {
		t.Errorf("error reply %v", e)
	}
	for _, key := range []string{"s1", "s2"} {
		req := h.requestTurn(key, "fine", turnOpts{})
		if c := h.waitCompleted(req.TurnId); c.GetStatus() != turnsv1.TurnStatus_TURN_STATUS_COMPLETED {
			t.Errorf("%s afterwards: %v", key, c.GetStatus())
		}
	}
}

// Arguments that are not a JSON object (a call cut short) do not run the
// tool, tell the model why, and reach the provider afterwards as {}: a
// server that parses the history would refuse every later request.
func TestMalformedToolArgumentsDoNotRun(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.setGeneration("s1", 1)
	var runs atomic.Int32
	h.startWorker("w1", func(_ *worker.Config, d *worker.Deps) {
		d.Tools = []tools.Tool{{Name: "note", Description: "Note a number.",
			Run: func(context.Context, tools.Call, json.RawMessage) (string, error) {
				runs.Add(1)
				return "noted", nil
			}}}
	})
	h.fake.Enqueue(fakellm.Reply{ToolCalls: []fakellm.ToolCall{{ID: "c1", Name: "note", Arguments: `{"n": 1, "text": "cut sh`}}})
	req := h.requestTurn("s1", "note it", turnOpts{})
	if c := h.waitCompleted(req.TurnId); c.GetStatus() != turnsv1.TurnStatus_TURN_STATUS_COMPLETED {
		t.Fatalf("status %v", c.GetStatus())
	}
	want := `echo: note it [error: the arguments are not a JSON object, so the call did not run: {"n": 1, "text": "cut sh. Call note again with a JSON object of its parameters.]`
	if got := checkReplies(t, h.replies(req.TurnId)).GetFinalText().GetText(); got != want {
		t.Errorf("final %q", got)
	}
	req = h.requestTurn("s1", "and now?", turnOpts{})
	h.waitCompleted(req.TurnId)
	reqs := h.fake.Requests()
	for _, m := range reqs[len(reqs)-1].Messages {
		for _, tc := range m.ToolCalls {
			if tc.Arguments != "{}" {
				t.Errorf("the next turn sent the call's arguments as %q", tc.Arguments)
			}
		}
	}
	if n := runs.Load(); n != 0 {
		t.Errorf("the tool ran %d times", n)
	}
}

// /stop ends a running tool as it ends a model call; the tool's result
// says it was cut short, and the transcript stays valid.
func TestStopEndsARunningTool(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.setGeneration("s1", 1)
	started, ended := make(chan struct{}), make(chan error, 1)
	h.startWorker("w1", func(c *worker.Config, d *worker.Deps) {
		c.Agent.ToolTimeout = 10 * time.Minute
		d.Tools = []tools.Tool{{Name: "build", Description: "Build it.",
			Run: func(ctx context.Context, _ tools.Call, _ json.RawMessage) (string, error) {
				close(started)
				<-ctx.Done()
				ended <- ctx.Err()
				return "", ctx.Err()
			}}}
	})
	req := h.requestTurn("s1", `[[tool:build {}]] build it`, turnOpts{})
	select {
	case <-started:
	case <-time.After(30 * time.Second):
		t.Fatal("the tool did not start")
	}
	h.control("s1", turnsv1.ControlAction_CONTROL_ACTION_STOP, "")
	select {
	case <-ended:
	case <-time.After(30 * time.Second):
		t.Fatal("the stop did not reach the tool")
	}
	if c := h.waitCompleted(req.TurnId); c.GetStatus() != turnsv1.TurnStatus_TURN_STATUS_STOPPED {
		t.Fatalf("status %v", c.GetStatus())
	}
	var result string
	if err := h.db.QueryRow(context.Background(), `SELECT content FROM transcript_messages WHERE role = 'tool'`).Scan(&result); err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(result, "Cut short") {
		t.Errorf("tool result %q", result)
	}
}

// A /stop, a newer message or the lock's loss ends the summary call of a
// compression as it ends any model call: the turn does not hold its
// session until the summary comes (up to llm.call_timeout, the summary
// being asked in one piece), and the summary nobody waits for any more
// is not stored.
func TestStopEndsACompressionSummaryCall(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.setGeneration("s1", 1)
	h.startWorker("w1", func(c *worker.Config, _ *worker.Deps) {
		c.Agent.ProtectLast = 2
	})
	for _, text := range []string{"first topic", "second topic", "third topic"} {
		req := h.requestTurn("s1", text, turnOpts{})
		if c := h.waitCompleted(req.TurnId); c.GetStatus() != turnsv1.TurnStatus_TURN_STATUS_COMPLETED {
			t.Fatalf("%s: %v", text, c.GetStatus())
		}
	}
	summary := func(r *fakellm.Request) bool { return strings.HasPrefix(r.System, "You compress chat history") }
	h.fake.SetScript(func(r *fakellm.Request) (fakellm.Reply, bool) {
		if !summary(r) {
			return fakellm.Reply{}, false
		}
		return fakellm.Reply{Text: "a summary", Failure: &fakellm.Failure{Latency: 2500 * time.Millisecond}}, true
	})
	// /compress: the summary call comes first.
	req := h.requestTurn("s1", "", turnOpts{command: "compress"})
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
	var n int
	if err := h.db.QueryRow(context.Background(), `SELECT count(*) FROM transcript_summaries WHERE session_key = 's1'`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 0 {
		t.Errorf("%d summaries stored by the stopped turn", n)
	}
}

// The conversation a stateless client sends with its request (the
// OpenAI API without a session) is the turn's input, not its steps: its
// assistant messages are not model calls of the turn and do not use up
// agent.max_iterations. A client with a long conversation still gets the
// model with its tools, not the iteration limit's last question at once.
func TestClientConversationDoesNotCountAsIterations(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.setGeneration("s1", 1)
	h.startWorker("w1", func(c *worker.Config, _ *worker.Deps) { c.Agent.MaxIterations = 2 })
	var history []*eventsv1.ContextMessage
	for i := range 3 {
		history = append(history, &eventsv1.ContextMessage{Role: "user", Content: fmt.Sprintf("question %d", i)},
			&eventsv1.ContextMessage{Role: "assistant", Content: fmt.Sprintf("answer %d", i)})
	}
	req := h.requestTurn("s1", "[[tool:clock {}]] what time is it", turnOpts{context: history})
	if c := h.waitCompleted(req.TurnId); c.GetStatus() != turnsv1.TurnStatus_TURN_STATUS_COMPLETED || c.GetUsage().GetToolCalls() != 1 {
		t.Fatalf("status %v, %d tool calls, want the clock called", c.GetStatus(), c.GetUsage().GetToolCalls())
	}
	for _, r := range h.fake.Requests() {
		if strings.Contains(r.LastUserText(), "maximum number of tool-calling iterations") {
			t.Fatal("the turn was asked for its final answer at the iteration limit")
		}
	}
}

// A turn at the iteration limit whose last question fails answers with
// the last text the model wrote in the turn, never with an answer from
// the conversation a stateless client sent with its request.
func TestIterationLimitFallbackIgnoresTheClientConversation(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.setGeneration("s1", 1)
	h.startWorker("w1", func(c *worker.Config, _ *worker.Deps) { c.Agent.MaxIterations = 1 })
	h.fake.SetScript(func(r *fakellm.Request) (fakellm.Reply, bool) {
		if !strings.Contains(r.LastUserText(), "maximum number of tool-calling iterations") {
			return fakellm.Reply{}, false
		}
		return fakellm.Reply{Failure: &fakellm.Failure{Status: 400, Message: "no"}}, true
	})
	history := []*eventsv1.ContextMessage{{Role: "user", Content: "earlier"}, {Role: "assistant", Content: "an earlier answer"}}
	req := h.requestTurn("s1", "[[tool:clock {}]] what time is it", turnOpts{context: history})
	h.waitCompleted(req.TurnId)
	final := checkReplies(t, h.replies(req.TurnId)).GetFinalText().GetText()
	if strings.Contains(final, "an earlier answer") || !strings.Contains(final, "(I stopped after 1 steps") {
		t.Fatalf("final %q", final)
	}
}

// A cron run whose last attempt fails tells the job's chat which job
// failed and that its run was interrupted, not to send again a message
// nobody sent (Hermes: "Cron job '<name>' failed").
func TestCronRunFailingOnItsLastAttemptSaysItWasInterrupted(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	runID := "c0ffeec0ffee_20261205_090000"
	key := "agent:main:cron:dm:" + runID
	h.setGeneration(key, 1)
	h.startWorker("w1", func(c *worker.Config, d *worker.Deps) {
		c.MaxDeliver = 2
		d.LLM.Provider = panicky{d.LLM.Provider}
	})
	origin := &eventsv1.SessionSource{Platform: "cron", Account: "default", ChatId: runID, ChatName: "Nightly cleanup",
		ChatType: "dm", UserId: "c0ffeec0ffee", UserName: "Nightly cleanup"}
	req := h.requestTurn(key, "boom", turnOpts{answerOnly: true, origin: origin, lockTTL: shortLockTTL})
	if c := h.waitCompleted(req.TurnId); c.GetStatus() != turnsv1.TurnStatus_TURN_STATUS_FAILED {
		t.Fatalf("status %v", c.GetStatus())
	}
	e := checkReplies(t, h.replies(req.TurnId)).GetError()
	if want := "Cron job 'Nightly cleanup' failed:\nThe run was interrupted before it finished."; e.GetCode() != "interrupted" || e.GetMessage() != want {
		t.Errorf("error reply %v, want %q", e, want)
	}
}

// beforeCall runs hook before each model call, n counting them from 1:
// a test's way into the moment between a turn's first read and its end.
type beforeCall struct {
	llm.Provider
	n    atomic.Int32
	hook func(n int32)
}

func (p *beforeCall) Stream(ctx context.Context, req llm.Request, fn func(llm.Delta) error) (*llm.Response, error) {
	p.hook(p.n.Add(1))
	return p.Provider.Stream(ctx, req, fn)
}

// A last attempt's apology whose write fails (here a Postgres error a
// trigger raises, neither an outage nor a stale fence) goes out
// uncommitted. When an earlier attempt's final was committed at seq 1
// meanwhile (an older worker's, frozen past its lock: it claims nothing,
// so nothing fences it) and the last attempt created the turn's seq
// counter, the apology goes out at seq 1 too, where the bus passes one of
// the two finals: the API answers once. Before, a listing turn's apology
// took seq 2 (the counter's floor), and both finals reached the gateway.
func TestLastAttemptsUncommittedApologySharesSeq1WithAnEarlierFinal(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		lists bool
	}{
		{"a Responses answer, which lists its calls", true},
		{"a chat completion", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			h := newHarness(t)
			h.setGeneration("s1", 1)
			turnID := fmt.Sprintf("turn-s1-%d", h.seq.Load()+1) // requestTurn's next
			api := &eventsv1.SessionSource{Platform: "api", Account: "default", ChatId: "req_1", ChatType: "dm", UserId: "key"}
			older := store.Final{Status: store.StatusFailed, Kind: store.FinalError, ErrorCode: "provider", Text: "the older worker's answer", Seq: 1}
			var hookErr atomic.Value
			h.startWorker("w1", func(c *worker.Config, d *worker.Deps) {
				c.MaxDeliver = 2
				d.LLM.Provider = &beforeCall{Provider: d.LLM.Provider, hook: func(n int32) {
					if n == 2 {
						// The last attempt has read the turn: the older
						// worker wakes, commits its final at seq 1 and
						// publishes it; then the final's table refuses
						// every write.
						if err := olderWorkersFinal(h, turnID, api, older, true); err != nil {
							hookErr.Store(err)
						}
					}
					panic("every attempt fails")
				}}
			})
			req := h.requestTurn("s1", "go", turnOpts{answerOnly: true, listsCalls: tc.lists, origin: api, lockTTL: shortLockTTL})
			if c := h.waitCompleted(req.TurnId); c.GetStatus() != turnsv1.TurnStatus_TURN_STATUS_FAILED {
				t.Fatalf("status %v (%s)", c.GetStatus(), c.GetError())
			}
			if err, _ := hookErr.Load().(error); err != nil {
				t.Fatal(err)
			}
			var finals []string
			for _, ev := range h.replies(req.TurnId) {
				if e := ev.GetError(); e != nil || ev.GetFinalText() != nil {
					finals = append(finals, fmt.Sprintf("%d %s", ev.GetSeq(), e.GetMessage()))
				}
			}
			if want := "1 " + older.Text; len(finals) != 1 || finals[0] != want {
				t.Errorf("finals published %q, want only %q", finals, want)
			}
		})
	}
}

// olderWorkersFinal commits f as a worker from before the attempt fence
// does (no attempt, no claim checked) and publishes it at its seq; then,
// when refuse, every write of a turn's final fails.
func olderWorkersFinal(h *harness, turnID string, src *eventsv1.SessionSource, f store.Final, refuse bool) error {
	ctx := context.Background()
	kept, err := store.New(h.db).Finish(ctx, store.Turn{TurnID: turnID, SessionKey: "s1", SessionID: "sid-s1", Generation: 1, UserKey: "api:key"},
		nil, 0, nil, f)
	if err != nil || kept.Seq != f.Seq {
		return fmt.Errorf("the older worker's Finish: %+v, %v", kept, err)
	}
	ev := &repliesv1.ReplyEvent{TurnId: turnID, SessionKey: "s1", Generation: 1, Seq: f.Seq,
		Target: &deliveryv1.Target{Platform: src.GetPlatform(), Account: src.GetAccount(), ChatId: src.GetChatId()},
		Body:   &repliesv1.ReplyEvent_Error{Error: &repliesv1.ReplyError{Code: f.ErrorCode, Message: f.Text}}}
	if _, err := h.bus.Publish(ctx, h.bus.Topology().ReplySubject("s1"), fmt.Sprintf("reply:%s:%d", turnID, f.Seq), ev); err != nil {
		return err
	}
	if !refuse {
		return nil
	}
	_, err = h.db.Exec(ctx, `CREATE FUNCTION refuse_final() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN RAISE EXCEPTION 'the final''s write is refused'; END $$;
		CREATE TRIGGER refuse_final BEFORE INSERT OR UPDATE ON worker_turns FOR EACH ROW EXECUTE FUNCTION refuse_final()`)
	if err != nil {
		return fmt.Errorf("make the final's write fail: %w", err)
	}
	return nil
}

// During a rolling upgrade, an earlier attempt of an answer-only turn
// took its final's seq from the counter and died before its commit,
// while an older worker's attempt, frozen past its lock, still holds a
// final for that seq: seq 1, which its first attempt takes without the
// counter (and a later attempt of a turn that lists no calls takes from
// it), or a later seq, which its later attempt took after the seqs
// earlier attempts took (a listing turn's first attempt's steps, a later
// attempt's final); it claims nothing, so nothing fences it. The next
// attempt leaves that hole: a typing event filling it made the bus drop
// the older worker's final as its duplicate, and the final this
// attempt's Finish then kept (that one) with it: the request had no
// answer. An answer-only turn publishes no typing, and nothing waits for
// a seq.
func TestLaterAttemptLeavesItsHoleToAnOlderWorkersFinal(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		lists bool
		// taken is the seq the dying attempt took, the older worker's
		// final's.
		taken int64
	}{
		{"seq 1, a chat completion", false, 1},
		{"a later seq, a Responses answer, which lists its calls", true, 2},
		{"a later seq, a chat completion", false, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			h := newHarness(t)
			h.setGeneration("s1", 1)
			turnID := fmt.Sprintf("turn-s1-%d", h.seq.Load()+1) // requestTurn's next
			api := &eventsv1.SessionSource{Platform: "api", Account: "default", ChatId: "req_1", ChatType: "dm", UserId: "key"}
			older := store.Final{Status: store.StatusFailed, Kind: store.FinalError, ErrorCode: "provider", Text: "the older worker's answer", Seq: tc.taken}
			var hookErr atomic.Value
			h.startWorker("w1", func(c *worker.Config, d *worker.Deps) {
				c.MaxDeliver = 3
				d.LLM.Provider = &beforeCall{Provider: d.LLM.Provider, hook: func(n int32) {
					switch n {
					case 1:
						// An attempt takes its final's seq from the
						// counter and dies.
						if err := h.rdb.Set(context.Background(), h.prefix+"turnseq:"+turnID, tc.taken, time.Hour).Err(); err != nil {
							hookErr.Store(err)
						}
						panic("the attempt dies before its commit")
					case 2:
						// The next attempt has begun: the older worker
						// wakes and commits and publishes its final.
						if err := olderWorkersFinal(h, turnID, api, older, false); err != nil {
							hookErr.Store(err)
						}
					}
				}}
			})
			req := h.requestTurn("s1", "go", turnOpts{answerOnly: true, listsCalls: tc.lists, origin: api, lockTTL: shortLockTTL})
			h.waitCompleted(req.TurnId)
			if err, _ := hookErr.Load().(error); err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, ev := range h.replies(req.TurnId) {
				got = append(got, fmt.Sprintf("%d %T %s", ev.GetSeq(), ev.GetBody(), ev.GetError().GetMessage()))
			}
			if want := fmt.Sprintf("%d %T %s", tc.taken, &repliesv1.ReplyEvent_Error{}, older.Text); len(got) != 1 || got[0] != want {
				t.Errorf("published %q, want only %q", got, want)
			}
		})
	}
}

// The same when the last attempt created the counter earlier, for its
// tool calls' steps: a listing turn's later attempt creates it at the
// floor (seq 2 first), so seq 1 is still free or an earlier attempt's
// counter-less final, and the apology whose write fails goes out there
// too. Before, it took the counter's next (4) and both finals reached
// the gateway.
func TestLastAttemptsUncommittedApologyAfterItsStepsSharesSeq1(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.setGeneration("s1", 1)
	turnID := fmt.Sprintf("turn-s1-%d", h.seq.Load()+1) // requestTurn's next
	api := &eventsv1.SessionSource{Platform: "api", Account: "default", ChatId: "req_1", ChatType: "dm", UserId: "key"}
	older := store.Final{Status: store.StatusFailed, Kind: store.FinalError, ErrorCode: "provider", Text: "the older worker's answer", Seq: 1}
	var hookErr atomic.Value
	h.startWorker("w1", func(c *worker.Config, d *worker.Deps) {
		c.MaxDeliver = 2
		d.LLM.Provider = &beforeCall{Provider: d.LLM.Provider, hook: func(n int32) {
			switch n {
			case 1:
				panic("the first attempt fails")
			case 3:
				// The last attempt listed its call's steps: the older
				// worker wakes, commits its final at seq 1 and
				// publishes it; then the final's table refuses every
				// write.
				if err := olderWorkersFinal(h, turnID, api, older, true); err != nil {
					hookErr.Store(err)
				}
				panic("the last attempt fails")
			}
		}}
	})
	req := h.requestTurn("s1", "what time is it [[tool:clock {\"tz\":\"UTC\"}]]", turnOpts{answerOnly: true, listsCalls: true, origin: api, lockTTL: shortLockTTL})
	if c := h.waitCompleted(req.TurnId); c.GetStatus() != turnsv1.TurnStatus_TURN_STATUS_FAILED {
		t.Fatalf("status %v (%s)", c.GetStatus(), c.GetError())
	}
	if err, _ := hookErr.Load().(error); err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, ev := range h.replies(req.TurnId) {
		switch {
		case ev.GetToolProgress() != nil:
			got = append(got, fmt.Sprintf("%d %s", ev.GetSeq(), strings.ToLower(strings.TrimPrefix(ev.GetToolProgress().GetPhase().String(), "TOOL_PHASE_"))))
		default:
			got = append(got, fmt.Sprintf("%d %s", ev.GetSeq(), ev.GetError().GetMessage()))
		}
	}
	want := []string{"1 " + older.Text, "2 started", "3 finished"}
	if strings.Join(got, ", ") != strings.Join(want, ", ") {
		t.Errorf("published %q, want %q", got, want)
	}
}

// A turn that runs longer than its reply seq counter's expiry (a day: a
// long tool, an external agent's long run, approvals waited for) keeps
// counting: the attempt renews the counter while it runs. Before, the
// counter expired and started again at 1, and the final, at seq 1 (the
// turn's typing's), was dropped by the bus as the typing's duplicate.
func TestTurnOutlivingItsSeqCountersExpiryKeepsCounting(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.setGeneration("s1", 1)
	// An expiry and a lock that a starved process under -race still
	// renews in time (both are renewed every quarter or third of theirs).
	const expiry = 3 * time.Second
	h.startWorker("w1", func(c *worker.Config, d *worker.Deps) {
		c.SeqTTL = expiry
		// Few events after the wait: before, they took seqs from 1 again
		// and were dropped as the earlier events' duplicates, the final
		// with them (a turn streaming many deltas hid it: those past the
		// earlier seqs went out, and the final with them).
		c.DeltaInterval = time.Hour
		d.LLM.Provider = &beforeCall{Provider: d.LLM.Provider, hook: func(n int32) {
			if n == 2 {
				// The typing and the tool's steps took their seqs: the
				// turn runs on past the counter's expiry, twice.
				time.Sleep(2 * expiry)
			}
		}}
	})
	req := h.requestTurn("s1", "[[tool:clock {}]] what time is it", turnOpts{lockTTL: shortLockTTL})
	h.waitCompleted(req.TurnId)
	checkReplies(t, h.replies(req.TurnId))
}

// During a rolling upgrade, an older worker's later attempt fills a hole
// with a typing event (its gap fill: seq 1 of an answer-only turn, or the
// counter's value), at the seq an earlier attempt took for its final:
// that attempt, frozen past its lock rather than dead and not fenced by
// the older one (which claims nothing), then commits its final and
// publishes it under the typing event's id. Before, the bus dropped it as
// the typing event's duplicate, and the turn had no answer; a final whose
// id the bus holds for an event that is not a final now goes again under
// an id of its own.
func TestFinalAtASeqAnOlderWorkerFilledIsPublished(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.setGeneration("s1", 1)
	turnID := fmt.Sprintf("turn-s1-%d", h.seq.Load()+1) // requestTurn's next
	var hookErr atomic.Value
	h.startWorker("w1", func(c *worker.Config, d *worker.Deps) {
		d.LLM.Provider = &beforeCall{Provider: d.LLM.Provider, hook: func(n int32) {
			if n != 1 {
				return
			}
			// The answer-only turn's first attempt takes seq 1 for its
			// final (without the counter), which the older worker's
			// attempt fills first.
			ev := &repliesv1.ReplyEvent{TurnId: turnID, SessionKey: "s1", Generation: 1, Seq: 1,
				Target: &deliveryv1.Target{Platform: "telegram", Account: "bot1", ChatId: "99"},
				Body:   &repliesv1.ReplyEvent_Typing{Typing: &repliesv1.Typing{Active: true}}}
			if _, err := h.bus.Publish(context.Background(), h.bus.Topology().ReplySubject("s1"), fmt.Sprintf("reply:%s:1", turnID), ev); err != nil {
				hookErr.Store(err)
			}
		}}
	})
	req := h.requestTurn("s1", "hello", turnOpts{answerOnly: true})
	h.waitCompleted(req.TurnId)
	if err, _ := hookErr.Load().(error); err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, ev := range h.replies(req.TurnId) {
		got = append(got, fmt.Sprintf("%d %T", ev.GetSeq(), ev.GetBody()))
	}
	want := []string{"1 *repliesv1.ReplyEvent_Typing", "1 *repliesv1.ReplyEvent_FinalText"}
	if strings.Join(got, ", ") != strings.Join(want, ", ") {
		t.Errorf("published %q, want %q", got, want)
	}
}
