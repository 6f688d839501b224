package worker_test

import (
	"context"
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/switchboard-chat/switchboard/pkg/fakellm"
	eventsv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/events/v1"
	repliesv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/replies/v1"
	"github.com/switchboard-chat/switchboard/pkg/llm"
	"github.com/switchboard-chat/switchboard/services/worker"
	"github.com/switchboard-chat/switchboard/services/worker/internal/tools"
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

// With /reasoning show the chat gets the model's reasoning in Hermes's
// block before the answer, cut to 15 lines; the transcript keeps the
// answer alone. The turn streams like any other: the reasoning as
// reasoning deltas, before the answer's text deltas (delivery shows the
// block while they stream), and the final text is the same as before.
// An API turn streams neither (its final carries the block, as before).
// Without /reasoning show, or without reasoning, the answer comes as
// before.
func TestShowReasoning(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.setGeneration("s1", 1)
	w := h.startWorker("w1", nil)
	defer w.stop(t)
	long := strings.TrimSuffix(strings.Repeat("step\n", 17), "\n")
	api := &eventsv1.SessionSource{Platform: "api", Account: "default", ChatId: "c1", ChatType: "dm", UserId: "u-s1"}
	tests := []struct {
		name, reasoning string
		show            bool
		origin          *eventsv1.SessionSource
		want            string
	}{
		{"shown", "Six times seven.", true, nil, "💭 **Reasoning:**\n```\nSix times seven.\n```\n\nThe answer is 42."},
		{"hidden", "Six times seven.", false, nil, "The answer is 42."},
		{"no reasoning", "", true, nil, "The answer is 42."},
		{"cut", long, true, nil, "💭 **Reasoning:**\n```\n" + strings.TrimSuffix(strings.Repeat("step\n", 15), "\n") +
			"\n_... (2 more lines)_\n```\n\nThe answer is 42."},
		{"fenced", "```go\nx := 42\n```", true, nil, "💭 **Reasoning:**\n```\n`\u200b``go\nx := 42\n`\u200b``\n```\n\nThe answer is 42."},
		{"api", "Six times seven.", true, api, "💭 **Reasoning:**\n```\nSix times seven.\n```\n\nThe answer is 42."},
	}
	for _, tt := range tests {
		h.fake.Enqueue(fakellm.Reply{Text: "The answer is 42.", Reasoning: tt.reasoning})
		req := h.requestTurn("s1", "what is six times seven? "+tt.name, turnOpts{show: tt.show, origin: tt.origin})
		h.waitCompleted(req.TurnId)
		evs := h.replies(req.TurnId)
		final := checkReplies(t, evs)
		if got := final.GetFinalText().GetText(); got != tt.want {
			t.Errorf("%s: final %q, want %q", tt.name, got, tt.want)
		}
		var thought, text strings.Builder
		for _, ev := range evs {
			if d := ev.GetReasoningDelta(); d != nil {
				if text.Len() > 0 {
					t.Errorf("%s: a reasoning delta after the answer's text: %q", tt.name, d.GetText())
				}
				thought.WriteString(d.GetText())
			}
			text.WriteString(ev.GetTextDelta().GetText())
		}
		wantThought, wantText := "", "The answer is 42."
		if tt.show {
			wantThought = tt.reasoning
		}
		if tt.origin != nil {
			wantThought, wantText = "", ""
		}
		if thought.String() != wantThought || text.String() != wantText {
			t.Errorf("%s: streamed reasoning %q and text %q, want %q and %q", tt.name, thought.String(), text.String(), wantThought, wantText)
		}
		var stored string
		if err := h.db.QueryRow(context.Background(), `SELECT content FROM transcript_messages WHERE turn_id = $1 AND role = 'assistant'`, req.TurnId).Scan(&stored); err != nil {
			t.Fatal(err)
		}
		if stored != "The answer is 42." {
			t.Errorf("%s: transcript %q, want the answer alone", tt.name, stored)
		}
	}
}

// In a turn that calls tools, each model call after one that streamed
// reasoning restarts the streamed block (ReasoningDelta.restart), so the
// chat sees the current call's reasoning as the final shows the last
// call's; a last call without reasoning restarts it empty before its
// text.
func TestShowReasoningRestartsWithEachCall(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.setGeneration("s1", 1)
	w := h.startWorker("w1", func(_ *worker.Config, d *worker.Deps) {
		d.Tools = []tools.Tool{{Name: "clock", Run: func(context.Context, tools.Call, json.RawMessage) (string, error) {
			return "12:00", nil
		}}}
	})
	defer w.stop(t)
	const looked, said, answer = "The user wants the time: the clock tells it.", "The clock said 12:00.", "It is noon."
	tests := []struct {
		name, last, final string
	}{
		{"the last call reasons", said, "💭 **Reasoning:**\n```\n" + said + "\n```\n\n" + answer},
		{"the last call does not", "", answer},
	}
	for _, tt := range tests {
		h.fake.Enqueue(
			fakellm.Reply{Reasoning: looked, ToolCalls: []fakellm.ToolCall{{ID: "c1", Name: "clock", Arguments: `{}`}}},
			fakellm.Reply{Text: answer, Reasoning: tt.last},
		)
		req := h.requestTurn("s1", "what time is it? "+tt.name, turnOpts{show: true})
		if c := h.waitCompleted(req.TurnId); c.GetError() != "" {
			t.Fatal(c.GetError())
		}
		evs := h.replies(req.TurnId)
		if got := checkReplies(t, evs).GetFinalText().GetText(); got != tt.final {
			t.Errorf("%s: final %q, want %q", tt.name, got, tt.final)
		}
		// What the chat's block shows, delta by delta: a restart empties it.
		var block, text strings.Builder
		restarts := 0
		for _, ev := range evs {
			if d := ev.GetReasoningDelta(); d != nil {
				if d.GetRestart() {
					restarts++
					block.Reset()
				}
				block.WriteString(d.GetText())
			}
			text.WriteString(ev.GetTextDelta().GetText())
		}
		if restarts != 1 || block.String() != tt.last {
			t.Errorf("%s: %d restarts, the block ends showing %q; want 1 restart and %q", tt.name, restarts, block.String(), tt.last)
		}
		if text.String() != answer {
			t.Errorf("%s: streamed text %q, want %q", tt.name, text.String(), answer)
		}
	}
}

// With /reasoning show, the break before a later call's text (a
// TextDelta marked restart) comes before that call's reasoning: delivery
// closes the message of the text said before the tool call there, and
// the call's reasoning and answer stream into a new one, whether or not
// the first call reasoned; after a first call that only reasoned, the
// break carries its block alone.
func TestShowReasoningBreakComesBeforeTheCallsReasoning(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.setGeneration("s1", 1)
	w := h.startWorker("w1", func(_ *worker.Config, d *worker.Deps) {
		d.Tools = []tools.Tool{{Name: "clock", Run: func(context.Context, tools.Call, json.RawMessage) (string, error) {
			return "12:00", nil
		}}}
	})
	defer w.stop(t)
	const looked, said, asked, answer = "The user wants the time.", "The clock said 12:00.", "Let me check.", "It is noon."
	tests := []struct {
		name, first string
		want        string
	}{
		{"the first call reasons", looked, "R:" + looked + " T:" + asked + " B[" + asked + "|" + looked + "] R*:" + said + " T:" + answer},
		{"the first call does not", "", "T:" + asked + " B[" + asked + "|] R:" + said + " T:" + answer},
		// A first call that only reasoned (its block alone in the
		// message) has a break too, with no text: a delivery replica
		// that takes the turn over before it finishes the block's
		// message with the block it carries, without the cursor.
		{"the first call only reasons", looked, "R:" + looked + " B[|" + looked + "] R*:" + said + " T:" + answer},
	}
	for _, tt := range tests {
		text := asked
		if strings.HasSuffix(tt.name, "only reasons") {
			text = ""
		}
		h.fake.Enqueue(
			fakellm.Reply{Text: text, Reasoning: tt.first, ToolCalls: []fakellm.ToolCall{{ID: "c1", Name: "clock", Arguments: `{}`}}},
			fakellm.Reply{Text: answer, Reasoning: said},
		)
		req := h.requestTurn("s1", "what time is it? "+tt.name, turnOpts{show: true})
		if c := h.waitCompleted(req.TurnId); c.GetError() != "" {
			t.Fatal(c.GetError())
		}
		// The deltas in order: R reasoning (R* a restart), T text, B
		// the break with the text and reasoning of the segment it
		// closes; consecutive pieces of one kind joined.
		var got []string
		add := func(kind, text string) {
			if n := len(got); n > 0 && kind != "B" && (strings.HasPrefix(got[n-1], kind+":") || kind == "R" && strings.HasPrefix(got[n-1], "R*:")) {
				got[n-1] += text
				return
			}
			if kind == "B" {
				got = append(got, kind)
				return
			}
			got = append(got, kind+":"+text)
		}
		for _, ev := range h.replies(req.TurnId) {
			switch {
			case ev.GetReasoningDelta() != nil && ev.GetReasoningDelta().GetRestart():
				got = append(got, "R*:"+ev.GetReasoningDelta().GetText())
			case ev.GetReasoningDelta() != nil:
				add("R", ev.GetReasoningDelta().GetText())
			case ev.GetTextDelta() != nil && ev.GetTextDelta().GetRestart():
				if d := ev.GetTextDelta(); d.SegmentText != nil {
					got = append(got, "B["+d.GetSegmentText()+"|"+d.GetSegmentReasoning()+"]")
				} else {
					add("B", "")
				}
			case ev.GetTextDelta() != nil:
				add("T", ev.GetTextDelta().GetText())
			}
		}
		if strings.Join(got, " ") != tt.want {
			t.Errorf("%s: deltas %s, want %s", tt.name, strings.Join(got, " "), tt.want)
		}
	}
}

// A session's /reasoning reaches an Anthropic model as extended thinking;
// the signed thinking of a step that called tools goes back with the
// calls' results (Anthropic refuses the next call otherwise), and with
// /reasoning show the chat sees the answer's thinking before it.
func TestAnthropicThinkingThroughATurn(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.setGeneration("s1", 1)
	p := llm.WithRetry(llm.NewAnthropic(llm.AnthropicConfig{BaseURL: h.fakeURL, Model: "claude-sonnet-4-5", APIKey: "k"}),
		llm.RetryPolicy{MaxAttempts: 1, CallTimeout: callTimeout})
	w := h.startWorker("w1", func(c *worker.Config, d *worker.Deps) {
		d.LLM = worker.Backend{Provider: p, Kind: "anthropic", Model: "claude-sonnet-4-5", BaseURL: h.fakeURL, KeyHash: "k"}
		d.Tools = []tools.Tool{{Name: "clock", Run: func(context.Context, tools.Call, json.RawMessage) (string, error) {
			return "12:00", nil
		}}}
	})
	defer w.stop(t)
	const looked = "The user wants the time: the clock tells it."
	h.fake.Enqueue(
		fakellm.Reply{Reasoning: looked, ToolCalls: []fakellm.ToolCall{{ID: "c1", Name: "clock", Arguments: `{}`}}},
		fakellm.Reply{Text: "It is noon.", Reasoning: "The clock said 12:00."},
	)
	req := h.requestTurn("s1", "what time is it?", turnOpts{effort: "high", show: true})
	if c := h.waitCompleted(req.TurnId); c.GetError() != "" {
		t.Fatal(c.GetError())
	}
	final := checkReplies(t, h.replies(req.TurnId)).GetFinalText().GetText()
	if want := "💭 **Reasoning:**\n```\nThe clock said 12:00.\n```\n\nIt is noon."; final != want {
		t.Errorf("final %q, want %q", final, want)
	}
	reqs := h.fake.Requests()
	if len(reqs) != 2 {
		t.Fatalf("%d model requests", len(reqs))
	}
	for i, r := range reqs {
		if r.Thinking == nil || r.Thinking.Type != "enabled" || r.Thinking.BudgetTokens != 16000 {
			t.Errorf("request %d: thinking %+v, want a budget of 16000", i, r.Thinking)
		}
	}
	var back *fakellm.Message
	for i := range reqs[1].Messages {
		if len(reqs[1].Messages[i].ToolCalls) > 0 {
			back = &reqs[1].Messages[i]
		}
	}
	if back == nil || !reflect.DeepEqual(back.Thinking, []fakellm.Thinking{{Text: looked, Signature: fakellm.ThinkingSignature(looked)}}) {
		t.Errorf("the tool-use step went back as %+v, want it with its signed thinking", back)
	}

	// Without an effort the session's turns ask for no thinking.
	h.waitCompleted(h.requestTurn("s1", "and now?", turnOpts{}).TurnId)
	reqs = h.fake.Requests()
	if th := reqs[len(reqs)-1].Thinking; th != nil {
		t.Errorf("thinking %+v without an effort", th)
	}
}

// A turn with /reasoning on Anthropic whose worker dies after the tool-use
// step was committed resumes on another worker from the transcript: the
// step's signed thinking was stored with it, so the next call still asks
// for thinking and sends the step back with its thinking, unchanged (the
// fake refuses a wrong signature, and a tool-use step without thinking
// would make the call go without thinking).
func TestAnthropicThinkingSurvivesAResume(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.setGeneration("s1", 1)
	p := llm.WithRetry(llm.NewAnthropic(llm.AnthropicConfig{BaseURL: h.fakeURL, Model: "claude-sonnet-4-5", APIKey: "k"}),
		llm.RetryPolicy{MaxAttempts: 1, CallTimeout: callTimeout})
	backend := worker.Backend{Provider: p, Kind: "anthropic", Model: "claude-sonnet-4-5", BaseURL: h.fakeURL, KeyHash: "k"}
	entered := make(chan struct{}, 1)
	blocking := tools.Tool{Name: "clock", Run: func(ctx context.Context, _ tools.Call, _ json.RawMessage) (string, error) {
		entered <- struct{}{}
		<-ctx.Done() // the first worker dies here, after the step was committed
		return "", ctx.Err()
	}}
	answering := blocking
	answering.Run = func(context.Context, tools.Call, json.RawMessage) (string, error) { return "12:00", nil }

	w1 := h.startWorker("w1", func(c *worker.Config, d *worker.Deps) {
		c.DrainTimeout = 50 * time.Millisecond // "kill": handlers are cut off at once
		d.LLM = backend
		d.Tools = []tools.Tool{blocking}
	})
	const looked = "The user wants the time: the clock tells it."
	h.fake.Enqueue(
		fakellm.Reply{Reasoning: looked, ToolCalls: []fakellm.ToolCall{{ID: "c1", Name: "clock", Arguments: `{}`}}},
		fakellm.Reply{Text: "It is noon."},
	)
	req := h.requestTurn("s1", "what time is it?", turnOpts{effort: "high"})
	select {
	case <-entered:
	case <-time.After(30 * time.Second):
		t.Fatal("the tool never ran")
	}
	w1.stop(t)
	if h.completed(req.TurnId) != nil {
		t.Fatal("the killed worker completed the turn")
	}
	if err := h.rdb.Del(context.Background(), h.locker.Key("s1")).Err(); err != nil {
		t.Fatal(err)
	}
	w2 := h.startWorker("w2", func(_ *worker.Config, d *worker.Deps) {
		d.LLM = backend
		d.Tools = []tools.Tool{answering}
	})
	defer w2.stop(t)
	done := h.waitCompleted(req.TurnId)
	if done.GetError() != "" || done.GetWorkerId() != "w2" {
		t.Fatalf("completed by %s: %s", done.GetWorkerId(), done.GetError())
	}
	if final := checkReplies(t, h.replies(req.TurnId)).GetFinalText().GetText(); final != "It is noon." {
		t.Errorf("final %q", final)
	}
	reqs := h.fake.Requests()
	if len(reqs) != 2 {
		t.Fatalf("%d model requests, want 2", len(reqs))
	}
	resumed := reqs[1]
	if resumed.Thinking == nil || resumed.Thinking.Type != "enabled" || resumed.Thinking.BudgetTokens != 16000 {
		t.Errorf("the resumed call's thinking %+v, want a budget of 16000", resumed.Thinking)
	}
	var back *fakellm.Message
	for i := range resumed.Messages {
		if len(resumed.Messages[i].ToolCalls) > 0 {
			back = &resumed.Messages[i]
		}
	}
	if back == nil || !reflect.DeepEqual(back.Thinking, []fakellm.Thinking{{Text: looked, Signature: fakellm.ThinkingSignature(looked)}}) {
		t.Errorf("the resumed turn sent the tool-use step back as %+v, want it with its signed thinking", back)
	}
}

// A break carries the segment it closes, however long: a segment longer
// than a bus message can hold (here over NATS's max payload, streamed in
// pieces that fit) is not published whole in the break, which would
// fail the call, and the break carries none of it (as an older worker's:
// the message keeps what it showed); reasoning that does not fit beside
// the segment's text is cut to its start, the lines the block shows.
func TestBreakAfterAVeryLongSegment(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.setGeneration("s1", 1)
	w := h.startWorker("w1", func(_ *worker.Config, d *worker.Deps) {
		d.Tools = []tools.Tool{{Name: "clock", Run: func(context.Context, tools.Call, json.RawMessage) (string, error) {
			return "12:00", nil
		}}}
		// A 1 MiB answer streamed under -race on a loaded machine can take
		// longer than the harness's usual call bound (seen: 3 s).
		d.LLM = h.openAIWithin(30 * time.Second)
	})
	defer w.stop(t)
	limit := int(h.bus.Conn().MaxPayload())
	long := strings.Repeat("word ", limit/5+1) // over the limit; each of its 3 deltas fits
	tests := []struct {
		name, text, reasoning string
		wantText              bool // the break carries segment_text
		wantReasoningCut      bool // its reasoning is the start of the call's
	}{
		{"long text", long, "", false, false},
		{"long reasoning", "Let me check.", long, true, true},
	}
	for _, tt := range tests {
		h.fake.Enqueue(
			fakellm.Reply{Text: tt.text, Reasoning: tt.reasoning, ToolCalls: []fakellm.ToolCall{{ID: "c1", Name: "clock", Arguments: `{}`}}},
			fakellm.Reply{Text: "It is noon."},
		)
		req := h.requestTurn("s1", "what time is it? "+tt.name, turnOpts{show: true})
		if c := h.waitCompleted(req.TurnId); c.GetError() != "" {
			t.Fatalf("%s: %s", tt.name, c.GetError())
		}
		var brk *repliesv1.TextDelta
		for _, ev := range h.replies(req.TurnId) {
			if d := ev.GetTextDelta(); d.GetRestart() {
				brk = d
			}
		}
		if brk == nil {
			t.Fatalf("%s: no break", tt.name)
		}
		if size := len(brk.GetSegmentText()) + len(brk.GetSegmentReasoning()); size > limit/2 {
			t.Errorf("%s: break carries %d bytes, over half the max payload %d", tt.name, size, limit)
		}
		if got := brk.SegmentText != nil; got != tt.wantText {
			t.Errorf("%s: break carries segment_text %v, want %v", tt.name, got, tt.wantText)
		} else if tt.wantText && brk.GetSegmentText() != tt.text {
			t.Errorf("%s: segment_text %q, want %q", tt.name, brk.GetSegmentText(), tt.text)
		}
		r := brk.GetSegmentReasoning()
		if tt.wantReasoningCut && (r == "" || len(r) >= len(tt.reasoning) || !strings.HasPrefix(tt.reasoning, r)) {
			t.Errorf("%s: segment_reasoning of %d bytes, want the start of the call's %d", tt.name, len(r), len(tt.reasoning))
		}
	}
}
