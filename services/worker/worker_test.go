package worker_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/nats-io/nats.go"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/switchboard-chat/switchboard/pkg/bus"
	"github.com/switchboard-chat/switchboard/pkg/fakellm"
	deliveryv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/delivery/v1"
	eventsv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/events/v1"
	repliesv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/replies/v1"
	turnsv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/turns/v1"
	"github.com/switchboard-chat/switchboard/pkg/llm"
	"github.com/switchboard-chat/switchboard/pkg/redisx"
	"github.com/switchboard-chat/switchboard/pkg/sessionstore"
	"github.com/switchboard-chat/switchboard/services/worker"
	"github.com/switchboard-chat/switchboard/services/worker/internal/store"
	"github.com/switchboard-chat/switchboard/services/worker/internal/tools"
)

func TestTurnStreamsRepliesAndCompletes(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.setGeneration("s1", 1)
	h.startWorker("w1", nil)

	req := h.requestTurn("s1", "hello there [[tool:clock {\"tz\":\"UTC\"}]]", turnOpts{noReaction: true})
	done := h.waitCompleted(req.TurnId)
	if done.GetStatus() != turnsv1.TurnStatus_TURN_STATUS_COMPLETED {
		t.Fatalf("status %v (%s)", done.GetStatus(), done.GetError())
	}
	if done.GetUsage().GetModelCalls() != 2 || done.GetUsage().GetToolCalls() != 1 {
		t.Errorf("usage %v", done.GetUsage())
	}
	evs := h.replies(req.TurnId)
	final := checkReplies(t, evs)
	if got := final.GetFinalText().GetText(); !strings.HasPrefix(got, "echo: hello there") || !strings.Contains(got, "UTC") {
		t.Errorf("final %q", got)
	}
	if evs[0].GetTyping() == nil {
		t.Errorf("first event is not typing: %v", evs[0])
	}
	var phases []repliesv1.ToolPhase
	deltas := 0
	for _, ev := range evs {
		if tp := ev.GetToolProgress(); tp != nil {
			phases = append(phases, tp.GetPhase())
		}
		if ev.GetTextDelta() != nil {
			deltas++
		}
		if ev.GetTarget().GetChatId() != "99" || len(ev.GetInputMessageIds()) != 1 || ev.GetGeneration() != 1 {
			t.Errorf("event addressing: %v", ev)
		}
		// The gateway marks the input with no reaction (a Slack message
		// not addressed to the bot): every event says so.
		if !slices.Equal(ev.GetNoReactionMessageIds(), ev.GetInputMessageIds()) {
			t.Errorf("no_reaction_message_ids %v, want the input %v", ev.GetNoReactionMessageIds(), ev.GetInputMessageIds())
		}
		// For the latency by hop (the API's Server-Timing header).
		if !proto.Equal(ev.GetTurnRequestedAt(), req.GetRequestedAt()) || ev.GetCreatedAt().AsTime().Before(req.GetRequestedAt().AsTime()) {
			t.Errorf("event times: requested %v, created %v; the turn was requested %v", ev.GetTurnRequestedAt(), ev.GetCreatedAt(), req.GetRequestedAt())
		}
	}
	if len(phases) != 2 || phases[0] != repliesv1.ToolPhase_TOOL_PHASE_STARTED || phases[1] != repliesv1.ToolPhase_TOOL_PHASE_FINISHED {
		t.Errorf("tool phases %v", phases)
	}
	if deltas == 0 {
		t.Error("no text deltas streamed")
	}
	owner, err := h.locker.Owner(context.Background(), "s1")
	if err != nil || owner != "" {
		t.Errorf("lock not released: %q %v", owner, err)
	}
	var roles []string
	rows, err := h.db.Query(context.Background(), `SELECT role FROM transcript_messages WHERE turn_id = $1 ORDER BY step`, req.TurnId)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var r string
		_ = rows.Scan(&r)
		roles = append(roles, r)
	}
	if strings.Join(roles, ",") != "user,assistant,tool,assistant" {
		t.Errorf("transcript roles %v", roles)
	}
}

// A completion tells the router whether it must look at the session's
// queue: only when a start found the lock held and marked it.
func TestCompletionSaysWhetherMessagesWait(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.setGeneration("s1", 1)
	h.startWorker("w1", nil)
	for _, tc := range []struct {
		name   string
		marked bool
	}{{"nothing queued", false}, {"a message queued behind the turn", true}, {"the mark was taken", false}} {
		if tc.marked {
			// As a router's AcquireOrMark does when it finds the lock held.
			if err := h.locker.MarkWaiting(context.Background(), "s1"); err != nil {
				t.Fatal(err)
			}
		}
		req := h.requestTurn("s1", "hello", turnOpts{})
		done := h.waitCompleted(req.TurnId)
		if done.GetStatus() != turnsv1.TurnStatus_TURN_STATUS_COMPLETED || done.GetNothingWaiting() == tc.marked {
			t.Errorf("%s: status %v, nothing waiting %v", tc.name, done.GetStatus(), done.GetNothingWaiting())
		}
		// Only a completion the router must act on goes to its subject.
		routed := false
		for _, ev := range streamMsgs[turnsv1.TurnCompleted](t, h.bus, bus.StreamTurnEvents, h.bus.Topology().Subject(bus.SubjectTurnCompleted)) {
			routed = routed || ev.GetTurnId() == req.TurnId
		}
		if routed != tc.marked {
			t.Errorf("%s: on the router's subject %v, want %v", tc.name, routed, tc.marked)
		}
	}
}

// A turn whose sender waits for the whole answer (a non-streaming API
// request) publishes its answer alone: no typing, no streamed text, no
// tool steps, and the answer at seq 1.
func TestAnswerOnlyTurnPublishesNoProgress(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.setGeneration("s1", 1)
	h.startWorker("w1", nil)
	for _, tc := range []struct {
		name, text string
		calls      int32
	}{
		{"plain", "hello there", 1},
		{"with a tool", "what time is it [[tool:clock {\"tz\":\"UTC\"}]]", 2},
	} {
		req := h.requestTurn("s1", tc.text, turnOpts{answerOnly: true})
		done := h.waitCompleted(req.TurnId)
		if done.GetStatus() != turnsv1.TurnStatus_TURN_STATUS_COMPLETED || done.GetUsage().GetModelCalls() != tc.calls {
			t.Fatalf("%s: status %v, usage %v (%s)", tc.name, done.GetStatus(), done.GetUsage(), done.GetError())
		}
		evs := h.replies(req.TurnId)
		final := checkReplies(t, evs)
		if len(evs) != 1 || !strings.HasPrefix(final.GetFinalText().GetText(), "echo: ") {
			t.Errorf("%s: published %d events, want the answer alone: %v", tc.name, len(evs), evs)
		}
		// Its usage is stored with its final, and the router told so.
		var in, out int64
		if err := h.db.QueryRow(context.Background(), `SELECT input_tokens, output_tokens FROM worker_turns WHERE turn_id = $1`,
			req.TurnId).Scan(&in, &out); err != nil || !done.GetUsageRecorded() || in == 0 ||
			in != done.GetUsage().GetInputTokens() || out != done.GetUsage().GetOutputTokens() {
			t.Errorf("%s: stored usage %d/%d (%v), reported %v recorded %v", tc.name, in, out, err, done.GetUsage(), done.GetUsageRecorded())
		}
		// And it goes out with the final, for the API's usage.
		u := done.GetUsage()
		if got := final.GetFinalText().GetUsage(); got.GetPromptTokens() != u.GetInputTokens()+u.GetCacheReadTokens()+u.GetCacheWriteTokens() ||
			got.GetCompletionTokens() != out {
			t.Errorf("%s: the final's usage %v, want the turn's %v", tc.name, got, u)
		}
		// Its seq is known without the counter.
		if n, err := h.rdb.Exists(context.Background(), h.prefix+"turnseq:"+req.TurnId).Result(); err != nil || n != 0 {
			t.Errorf("%s: seq counter exists (%d, %v)", tc.name, n, err)
		}
	}
	// Nobody reads the deltas: the model answers whole, not as a stream.
	reqs := h.fake.Requests()
	for i, r := range reqs {
		if r.Stream {
			t.Errorf("model call %d of an answer-only turn streamed", i)
		}
	}
	// A turn whose sender reads progress streams.
	req := h.requestTurn("s1", "hello again", turnOpts{})
	if done := h.waitCompleted(req.TurnId); done.GetStatus() != turnsv1.TurnStatus_TURN_STATUS_COMPLETED {
		t.Fatalf("streamed turn: %v", done.GetStatus())
	}
	if all := h.fake.Requests(); len(all) != len(reqs)+1 || !all[len(all)-1].Stream {
		t.Errorf("the model call of a turn with progress did not stream: %d calls", len(all)-len(reqs))
	}
}

// An answer-only turn answering the API gateway publishes its tool
// calls' steps still — a Responses answer that does not stream lists
// them, as Hermes's does — and nothing else of its progress; one that
// calls no tool publishes its answer alone at seq 1, without the
// counter, as before.
func TestAnswerOnlyAPITurnPublishesItsToolSteps(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.setGeneration("s1", 1)
	h.startWorker("w1", nil)
	api := &eventsv1.SessionSource{Platform: "api", Account: "default", ChatId: "req_1", ChatType: "dm", UserId: "key"}
	for _, tc := range []struct {
		name, text string
		lists      bool // a Responses request, whose answer lists the calls
		want       []string
	}{
		{"plain", "hello there", true, []string{"final"}},
		{"with a tool", "what time is it [[tool:clock {\"tz\":\"UTC\"}]]", true, []string{"clock started", "clock finished", "final"}},
		// A chat completion's answer shows no tool calls: no steps.
		{"chat completion with a tool", "what time is it [[tool:clock {\"tz\":\"UTC\"}]]", false, []string{"final"}},
	} {
		req := h.requestTurn("s1", tc.text, turnOpts{answerOnly: true, listsCalls: tc.lists, origin: api})
		if done := h.waitCompleted(req.TurnId); done.GetStatus() != turnsv1.TurnStatus_TURN_STATUS_COMPLETED {
			t.Fatalf("%s: status %v (%s)", tc.name, done.GetStatus(), done.GetError())
		}
		evs := h.replies(req.TurnId)
		checkReplies(t, evs)
		var got []string
		for _, ev := range evs {
			switch {
			case ev.GetToolProgress() != nil:
				tp := ev.GetToolProgress()
				got = append(got, tp.GetToolName()+" "+strings.ToLower(strings.TrimPrefix(tp.GetPhase().String(), "TOOL_PHASE_")))
			case ev.GetFinalText() != nil:
				got = append(got, "final")
			default:
				got = append(got, fmt.Sprintf("%T", ev.GetBody()))
			}
		}
		if strings.Join(got, ", ") != strings.Join(tc.want, ", ") {
			t.Errorf("%s: published %v, want %v", tc.name, got, tc.want)
		}
		n, err := h.rdb.Exists(context.Background(), h.prefix+"turnseq:"+req.TurnId).Result()
		if err != nil || (n == 0) != (len(tc.want) == 1) {
			t.Errorf("%s: seq counter exists %d (%v)", tc.name, n, err)
		}
	}
}

// panicsOnce panics on its first model call: the turn's first attempt
// fails and the next one runs it.
type panicsOnce struct {
	llm.Provider
	done atomic.Bool
}

func (p *panicsOnce) Stream(ctx context.Context, req llm.Request, fn func(llm.Delta) error) (*llm.Response, error) {
	if p.done.CompareAndSwap(false, true) {
		panic("first attempt fails")
	}
	return p.Provider.Stream(ctx, req, fn)
}

// A later attempt of a turn whose answer lists its tool calls (a
// Responses request) publishes its calls' steps too — the answer lists
// them — but never at seq 1: a first attempt frozen past its lock rather
// than dead may still commit its final at seq 1 without the counter
// (finalSeq), and a step at seq 1 would have the bus drop that final,
// and its every republication, as the step's duplicate. Here the first
// attempt fails (panicsOnce) before it publishes anything; the test then
// does what it would have done had it been frozen instead: while the
// second attempt runs its tool, it commits its final at seq 1 and
// publishes it. That final is delivered, the second attempt's Finish
// keeps it, and its steps are at seq 2 and 3.
func TestAnswerOnlyAPITurnLaterAttemptListsItsCallsAfterSeq1(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.setGeneration("s1", 1)
	g := newGate()
	h.startWorker("w1", func(c *worker.Config, d *worker.Deps) {
		c.MaxDeliver = 3
		d.LLM.Provider = &panicsOnce{Provider: d.LLM.Provider}
		d.Tools = []tools.Tool{{Name: "wait", Run: func(ctx context.Context, _ tools.Call, _ json.RawMessage) (string, error) {
			g.entered <- struct{}{}
			<-g.release
			return "waited", nil
		}}}
	})
	api := &eventsv1.SessionSource{Platform: "api", Account: "default", ChatId: "req_1", ChatType: "dm", UserId: "key"}
	req := h.requestTurn("s1", "[[tool:wait {}]] go", turnOpts{answerOnly: true, listsCalls: true, origin: api, lockTTL: shortLockTTL})
	select {
	case <-g.entered:
	case <-time.After(60 * time.Second):
		close(g.release)
		t.Fatal("the second attempt never ran its tool")
	}
	started := func() *repliesv1.ReplyEvent {
		for _, ev := range h.replies(req.TurnId) {
			if ev.GetToolProgress().GetPhase() == repliesv1.ToolPhase_TOOL_PHASE_STARTED {
				return ev
			}
		}
		return nil
	}
	deadline := time.Now().Add(10 * time.Second)
	for started() == nil && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	ev := started()
	if ev == nil {
		close(g.release)
		t.Fatal("the second attempt published no step of its tool call")
	}
	if ev.GetSeq() == 1 {
		t.Errorf("the second attempt's step took seq 1, the first attempt's final's")
	}
	// The frozen first attempt wakes: its model call failed, and it
	// commits and publishes its final at seq 1, as finalSeq gives it.
	ctx := context.Background()
	frozen := store.Final{Status: store.StatusFailed, Kind: store.FinalError, ErrorCode: "provider", Text: "the first attempt's answer", Seq: 1}
	kept, err := store.New(h.db).Finish(ctx, store.Turn{TurnID: req.TurnId, SessionKey: "s1", SessionID: "sid-s1", Generation: 1, UserKey: "api:key"},
		nil, 0, nil, frozen)
	if err != nil || kept.Seq != 1 {
		close(g.release)
		t.Fatalf("the first attempt's Finish: %+v, %v", kept, err)
	}
	final := &repliesv1.ReplyEvent{TurnId: req.TurnId, SessionKey: "s1", Generation: 1, Seq: 1, Target: ev.GetTarget(),
		Body: &repliesv1.ReplyEvent_Error{Error: &repliesv1.ReplyError{Code: frozen.ErrorCode, Message: frozen.Text}}}
	if _, err := h.bus.Publish(ctx, h.bus.Topology().ReplySubject("s1"), fmt.Sprintf("reply:%s:1", req.TurnId), final); err != nil {
		close(g.release)
		t.Fatal(err)
	}
	close(g.release)
	h.waitCompleted(req.TurnId)
	var got []string
	for _, ev := range h.replies(req.TurnId) {
		switch {
		case ev.GetToolProgress() != nil:
			tp := ev.GetToolProgress()
			got = append(got, fmt.Sprintf("%d %s %s", ev.GetSeq(), tp.GetToolName(), strings.ToLower(strings.TrimPrefix(tp.GetPhase().String(), "TOOL_PHASE_"))))
		case ev.GetError() != nil:
			got = append(got, fmt.Sprintf("%d error %s", ev.GetSeq(), ev.GetError().GetMessage()))
		default:
			got = append(got, fmt.Sprintf("%d %T", ev.GetSeq(), ev.GetBody()))
		}
	}
	want := []string{"1 error the first attempt's answer", "2 wait started", "3 wait finished"}
	if strings.Join(got, ", ") != strings.Join(want, ", ") {
		t.Errorf("published %v, want %v", got, want)
	}
}

// During a rolling upgrade an older worker's first attempt of a chat
// completion that does not stream published its tool calls' steps from
// the counter (older releases did for every answer-only API turn), then
// failed; the newer worker's retry, whose turn lists no calls, must not
// take seq 1 for its final, which the bus would drop as the step's
// duplicate: it asks the counter and its final is delivered at seq 2.
func TestAnswerOnlyAPITurnRetryAfterAnOlderWorkersStep(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.setGeneration("s1", 1)
	h.startWorker("w1", func(c *worker.Config, d *worker.Deps) {
		c.MaxDeliver = 3
		d.LLM.Provider = &panicsOnce{Provider: d.LLM.Provider}
	})
	ctx := context.Background()
	turnID := fmt.Sprintf("turn-s1-%d", h.seq.Load()+1) // requestTurn's next
	api := &eventsv1.SessionSource{Platform: "api", Account: "default", ChatId: "req_1", ChatType: "dm", UserId: "key"}
	// The older worker's step, from the counter, as its nextSeq took it.
	if n, err := h.rdb.Incr(ctx, h.prefix+"turnseq:"+turnID).Result(); err != nil || n != 1 {
		t.Fatalf("counter %d, %v", n, err)
	}
	step := &repliesv1.ReplyEvent{TurnId: turnID, SessionKey: "s1", Generation: 1, Seq: 1,
		Target: &deliveryv1.Target{Platform: "api", Account: "default", ChatId: "req_1"},
		Body: &repliesv1.ReplyEvent_ToolProgress{ToolProgress: &repliesv1.ToolProgress{ToolCallId: "call_0", ToolName: "clock",
			Phase: repliesv1.ToolPhase_TOOL_PHASE_STARTED}}}
	if _, err := h.bus.Publish(ctx, h.bus.Topology().ReplySubject("s1"), fmt.Sprintf("reply:%s:1", turnID), step); err != nil {
		t.Fatal(err)
	}
	req := h.requestTurn("s1", "what time is it [[tool:clock {\"tz\":\"UTC\"}]]", turnOpts{answerOnly: true, origin: api, lockTTL: shortLockTTL})
	if req.TurnId != turnID {
		t.Fatalf("turn %s, want %s", req.TurnId, turnID)
	}
	if done := h.waitCompleted(req.TurnId); done.GetStatus() != turnsv1.TurnStatus_TURN_STATUS_COMPLETED {
		t.Fatalf("status %v (%s)", done.GetStatus(), done.GetError())
	}
	final := checkReplies(t, h.replies(req.TurnId))
	if final.GetSeq() != 2 || !strings.HasPrefix(final.GetFinalText().GetText(), "echo: ") {
		t.Errorf("final %v at seq %d, want the answer at seq 2", final.GetBody(), final.GetSeq())
	}
}

func TestTwoWorkersOneSessionTurnsNeverOverlap(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.setGeneration("s1", 1)
	h.startWorker("w1", nil)
	h.startWorker("w2", nil)

	var ids []string
	for i := range 6 {
		// Like the router: the next turn is published once the lock is free.
		req := h.requestTurn("s1", "msg "+string(rune('a'+i))+" [[latency:30ms]]", turnOpts{})
		ids = append(ids, req.TurnId)
	}
	for _, id := range ids {
		if c := h.waitCompleted(id); c.GetStatus() != turnsv1.TurnStatus_TURN_STATUS_COMPLETED {
			t.Fatalf("turn %s: %v", id, c.GetStatus())
		}
		checkReplies(t, h.replies(id))
	}
	if m := h.maxIn.Load(); m != 1 {
		t.Errorf("model calls of one session overlapped: %d at once", m)
	}

	// A turn whose token does not own the lock is not run: while the
	// session is still at its generation it waits for the holder (a
	// router's grant, which gives the lock back on finding the turn's
	// lease), and once the holder's turn started it is stale.
	ctx := context.Background()
	ok, err := h.locker.Acquire(ctx, "s1", "someone-else", 10*time.Second)
	if err != nil || !ok {
		t.Fatal("take lock", err)
	}
	before := len(h.fake.Requests())
	req := h.requestTurn("s1", "intruder", turnOpts{noLock: true, token: "not-the-owner"})
	time.Sleep(time.Second)
	if c := h.completed(req.TurnId); c != nil || len(h.fake.Requests()) != before {
		t.Errorf("a turn without the lock ran or ended (%v) while its session was still at its generation", c.GetStatus())
	}
	h.setGeneration("s1", 2) // the holder's turn started
	if c := h.waitCompleted(req.TurnId); c.GetStatus() != turnsv1.TurnStatus_TURN_STATUS_STALE {
		t.Errorf("status %v, want STALE", c.GetStatus())
	}
	if len(h.fake.Requests()) != before || len(h.replies(req.TurnId)) != 0 {
		t.Error("a turn without the lock called the model or replied")
	}
	if owner, _ := h.locker.Owner(ctx, "s1"); owner != "someone-else" {
		t.Errorf("lock owner %q changed", owner)
	}
}

func TestWorkerKilledMidToolResumesElsewhere(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.setGeneration("s1", 1)

	var stepRuns, blockRuns atomic.Int32
	entered := make(chan struct{}, 4)
	stepA := tools.Tool{Name: "step_a", Run: func(context.Context, tools.Call, json.RawMessage) (string, error) {
		return "a-done-" + string(rune('0'+stepRuns.Add(1))), nil
	}}
	blocking := tools.Tool{Name: "block_b", Run: func(ctx context.Context, _ tools.Call, _ json.RawMessage) (string, error) {
		blockRuns.Add(1)
		entered <- struct{}{}
		<-ctx.Done() // the first worker dies here
		return "", ctx.Err()
	}}
	finishing := blocking
	finishing.Run = func(context.Context, tools.Call, json.RawMessage) (string, error) {
		blockRuns.Add(1)
		return "b-done", nil
	}
	w1 := h.startWorker("w1", func(c *worker.Config, d *worker.Deps) {
		c.DrainTimeout = 50 * time.Millisecond // "kill": handlers are cut off at once
		d.Tools = []tools.Tool{stepA, blocking}
	})
	req := h.requestTurn("s1", "[[tool:step_a {}]] [[tool:block_b {}]] go", turnOpts{})
	select {
	case <-entered:
	case <-time.After(30 * time.Second):
		t.Fatal("block_b never ran")
	}
	w1.stop(t)
	if h.completed(req.TurnId) != nil {
		t.Fatal("the killed worker completed the turn")
	}
	// Cut off, it handed the lock back to the router's grant, which keeps
	// the session as long as a grant does while the turn waits again.
	owner, err := h.locker.Owner(context.Background(), "s1")
	left := h.rdb.PTTL(context.Background(), h.locker.Key("s1")).Val()
	if err != nil || owner != req.LockToken || left <= 5*time.Second {
		t.Fatalf("lock after the hand-back: %q for %s (%v), want the grant for up to a minute", owner, left, err)
	}
	// The lock expired meanwhile (a real crash stops renewals): the next
	// worker re-acquires it with the turn's token.
	if err := h.rdb.Del(context.Background(), h.locker.Key("s1")).Err(); err != nil {
		t.Fatal(err)
	}
	h.startWorker("w2", func(_ *worker.Config, d *worker.Deps) { d.Tools = []tools.Tool{stepA, finishing} })
	done := h.waitCompleted(req.TurnId)
	if done.GetStatus() != turnsv1.TurnStatus_TURN_STATUS_COMPLETED || done.GetWorkerId() != "w2" {
		t.Fatalf("completed %v by %s", done.GetStatus(), done.GetWorkerId())
	}
	if n := stepRuns.Load(); n != 1 {
		t.Errorf("committed tool step_a ran %d times", n)
	}
	if n := blockRuns.Load(); n != 2 {
		t.Errorf("uncommitted tool block_b ran %d times, want 2 (once per worker)", n)
	}
	final := checkReplies(t, h.replies(req.TurnId))
	if got := final.GetFinalText().GetText(); got != "echo: go [a-done-1] [b-done]" {
		t.Errorf("final %q", got)
	}
}

func TestRedeliveredDecidedTurnRepublishesSameFinal(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.setGeneration("s1", 1)
	h.startWorker("w1", nil)
	req := h.requestTurn("s1", "once", turnOpts{})
	h.waitCompleted(req.TurnId)
	first := h.replies(req.TurnId)

	// The same turn again (a redelivery after the final was committed, say
	// the worker died before acking): no second answer, no model call.
	calls := len(h.fake.Requests())
	ok, _ := h.locker.Acquire(context.Background(), "s1", req.LockToken, 5*time.Second)
	if !ok {
		t.Fatal("lock")
	}
	if _, err := h.bus.Publish(context.Background(), h.bus.Topology().Subject("turns.turn.requested"), "turn:"+req.TurnId+":again", req); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 30*time.Second, "lock released", func() bool {
		o, _ := h.locker.Owner(context.Background(), "s1")
		return o == ""
	})
	if len(h.fake.Requests()) != calls {
		t.Error("redelivered decided turn called the model")
	}
	again := h.replies(req.TurnId)
	finals := 0
	for _, ev := range again {
		if ev.GetFinalText() != nil {
			finals++
		}
	}
	if finals != 1 || len(again) < len(first) {
		t.Errorf("finals %d, events %d→%d", finals, len(first), len(again))
	}
}

func TestStaleGenerationIsRefused(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.setGeneration("s1", 5)
	ctx := context.Background()

	st := store.New(h.db)
	turn := store.Turn{TurnID: "t-old", SessionKey: "s1", SessionID: "sid", Generation: 4}
	if _, err := st.Append(ctx, turn, store.Deferred, 0, store.Message{Role: "user", Content: "x"}); !errors.Is(err, store.ErrStaleGeneration) {
		t.Fatalf("append under stale generation: %v", err)
	}
	turn.Generation = 5
	if _, err := st.Append(ctx, turn, store.Deferred, 0, store.Message{Role: "user", Content: "x"}); err != nil {
		t.Fatalf("append under current generation: %v", err)
	}
	if _, err := st.Append(ctx, store.Turn{TurnID: "t-x", SessionKey: "nope", Generation: 1}, store.Deferred, 0, store.Message{Role: "user"}); !errors.Is(err, store.ErrStaleGeneration) {
		t.Fatalf("append for a missing session: %v", err)
	}

	// A whole turn under an old generation: STALE, nothing written, no reply.
	h.startWorker("w1", nil)
	req := h.requestTurn("s1", "late", turnOpts{generation: 4})
	if c := h.waitCompleted(req.TurnId); c.GetStatus() != turnsv1.TurnStatus_TURN_STATUS_STALE {
		t.Fatalf("status %v", c.GetStatus())
	}
	if evs := h.replies(req.TurnId); len(evs) != 0 {
		t.Errorf("stale turn published %d reply events", len(evs))
	}
	var n int
	_ = h.db.QueryRow(ctx, `SELECT count(*) FROM transcript_messages WHERE turn_id = $1`, req.TurnId).Scan(&n)
	if n != 0 {
		t.Errorf("stale turn wrote %d messages", n)
	}

	// The generation moves on while the turn runs: the next step is refused.
	g := newGate()
	h2 := newHarness(t)
	h2.setGeneration("s2", 1)
	h2.startWorker("w2", func(_ *worker.Config, d *worker.Deps) {
		d.Tools = []tools.Tool{{Name: "wait", Run: func(ctx context.Context, _ tools.Call, _ json.RawMessage) (string, error) {
			g.entered <- struct{}{}
			<-g.release
			return "ok", nil
		}}}
	})
	req = h2.requestTurn("s2", "[[tool:wait {}]] x", turnOpts{})
	<-g.entered
	h2.setGeneration("s2", 2) // /new or /stop in the router
	close(g.release)
	if c := h2.waitCompleted(req.TurnId); c.GetStatus() != turnsv1.TurnStatus_TURN_STATUS_STALE {
		t.Fatalf("status %v", c.GetStatus())
	}
	for _, ev := range h2.replies(req.TurnId) {
		if ev.GetFinalText() != nil || ev.GetError() != nil {
			t.Errorf("stale turn published a final: %v", ev)
		}
	}
}

func TestInterruptStopsWithinOneModelCall(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.setGeneration("s1", 1)
	g := newGate()
	var clockRuns atomic.Int32
	h.startWorker("w1", func(_ *worker.Config, d *worker.Deps) {
		d.Tools = []tools.Tool{
			{Name: "wait", Run: func(ctx context.Context, _ tools.Call, _ json.RawMessage) (string, error) {
				g.entered <- struct{}{}
				<-g.release
				return "waited", nil
			}},
			{Name: "after", Run: func(context.Context, tools.Call, json.RawMessage) (string, error) {
				clockRuns.Add(1)
				return "x", nil
			}},
		}
	})
	req := h.requestTurn("s1", "[[tool:wait {}]] [[tool:after {}]] long job", turnOpts{})
	<-g.entered
	h.control("s1", turnsv1.ControlAction_CONTROL_ACTION_INTERRUPT, "")
	close(g.release)
	c := h.waitCompleted(req.TurnId)
	if c.GetStatus() != turnsv1.TurnStatus_TURN_STATUS_INTERRUPTED {
		t.Fatalf("status %v", c.GetStatus())
	}
	if c.GetUsage().GetModelCalls() != 1 || clockRuns.Load() != 0 {
		t.Errorf("after interrupt: %d model calls, later tool ran %d times", c.GetUsage().GetModelCalls(), clockRuns.Load())
	}
	final := checkReplies(t, h.replies(req.TurnId))
	if final.GetError().GetCode() != "interrupted" || final.GetError().GetMessage() != "" {
		t.Errorf("final %v, want a silent interrupted error (the router acknowledged the interrupt)", final)
	}
	// The next turn's history is valid: the interrupted call has a result.
	req = h.requestTurn("s1", "next", turnOpts{})
	if c := h.waitCompleted(req.TurnId); c.GetStatus() != turnsv1.TurnStatus_TURN_STATUS_COMPLETED {
		t.Fatalf("next turn %v", c.GetStatus())
	}
}

func TestSteerIsInjectedAfterTheNextToolCall(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.setGeneration("s1", 1)
	g := newGate()
	h.startWorker("w1", func(_ *worker.Config, d *worker.Deps) {
		d.Tools = []tools.Tool{{Name: "wait", Run: func(ctx context.Context, _ tools.Call, _ json.RawMessage) (string, error) {
			g.entered <- struct{}{}
			<-g.release
			return "waited", nil
		}}}
	})
	req := h.requestTurn("s1", "[[tool:wait {}]] plan a trip", turnOpts{})
	<-g.entered
	h.control("s1", turnsv1.ControlAction_CONTROL_ACTION_STEER, "make it by train")
	close(g.release)
	c := h.waitCompleted(req.TurnId)
	if c.GetStatus() != turnsv1.TurnStatus_TURN_STATUS_COMPLETED || c.GetUsage().GetModelCalls() != 2 {
		t.Fatalf("status %v usage %v", c.GetStatus(), c.GetUsage())
	}
	reqs := h.fake.Requests()
	last := reqs[len(reqs)-1]
	found := false
	for _, m := range last.Messages {
		if m.Role == "tool" && strings.Contains(m.Content, "make it by train") {
			found = true
		}
	}
	if !found {
		t.Errorf("steer text not in the next model call: %+v", last.Messages)
	}
}

func TestApprovalForDangerousTools(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name   string
		action turnsv1.ControlAction // UNSPECIFIED: let it time out
		ran    bool
	}{
		{"approve", turnsv1.ControlAction_CONTROL_ACTION_APPROVE, true},
		{"deny", turnsv1.ControlAction_CONTROL_ACTION_DENY, false},
		{"timeout", turnsv1.ControlAction_CONTROL_ACTION_UNSPECIFIED, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			h := newHarness(t)
			h.setGeneration("s1", 1)
			var runs atomic.Int32
			h.startWorker("w1", func(c *worker.Config, d *worker.Deps) {
				c.Agent.ApprovalTimeout = 500 * time.Millisecond
				if tc.action != turnsv1.ControlAction_CONTROL_ACTION_UNSPECIFIED {
					c.Agent.ApprovalTimeout = time.Minute
				}
				c.Agent.DangerousTools = []string{"rm"}
				d.Tools = []tools.Tool{{Name: "rm", Description: "Remove a file.", Emoji: "🗑️",
					Run: func(context.Context, tools.Call, json.RawMessage) (string, error) {
						runs.Add(1)
						return "removed", nil
					}}}
			})
			req := h.requestTurn("s1", `[[tool:rm {"path": "/tmp/x"}]] clean up`, turnOpts{})
			var ask *repliesv1.ToolProgress
			waitFor(t, 30*time.Second, "approval request", func() bool {
				for _, ev := range h.replies(req.TurnId) {
					if ev.GetToolProgress().GetPhase() == repliesv1.ToolPhase_TOOL_PHASE_AWAITING_APPROVAL {
						ask = ev.GetToolProgress()
						return true
					}
				}
				return false
			})
			// What the chat's approval prompt is made of.
			if ask.GetCommand() != `rm {"path":"/tmp/x"}` || ask.GetReason() != "dangerous tool (agent.dangerous_tools): Remove a file." ||
				ask.GetEmoji() != "🗑️" || ask.GetPreview() != "/tmp/x" || ask.GetDetail() != `rm {"path": "/tmp/x"} — reply /approve or /deny` {
				t.Errorf("approval request %v", ask)
			}
			if tc.action != turnsv1.ControlAction_CONTROL_ACTION_UNSPECIFIED {
				h.control("s1", tc.action, "")
			}
			h.waitCompleted(req.TurnId)
			if (runs.Load() == 1) != tc.ran {
				t.Errorf("tool ran %d times", runs.Load())
			}
			final := checkReplies(t, h.replies(req.TurnId)).GetFinalText().GetText()
			if tc.ran != strings.Contains(final, "removed") {
				t.Errorf("final %q", final)
			}
			for _, ev := range h.replies(req.TurnId) {
				if st := ev.GetToolProgress(); st.GetPhase() == repliesv1.ToolPhase_TOOL_PHASE_STARTED &&
					(st.GetPreview() != "/tmp/x" || st.GetArguments() != `{"path":"/tmp/x"}` || st.GetEmoji() != "🗑️") {
					t.Errorf("started %v", st)
				}
			}
		})
	}
}

// "/approve session" lets the tool run again without asking for the rest
// of the conversation, "/approve always" in every conversation of the
// user; a plain /approve covers one call.
func TestStandingApprovals(t *testing.T) {
	t.Parallel()
	tests := []struct {
		scope          string // /approve's argument
		askSameSession bool   // asked again in the same conversation
		askNewSession  bool   // asked again in the user's next conversation
	}{
		{"", true, true},
		{"session", false, true},
		{"always", false, false},
	}
	for _, tt := range tests {
		t.Run("approve "+tt.scope, func(t *testing.T) {
			t.Parallel()
			h := newHarness(t)
			h.setGeneration("s1", 1)
			var runs atomic.Int32
			h.startWorker("w1", func(c *worker.Config, d *worker.Deps) {
				c.Agent.ApprovalTimeout = 5 * time.Second // unanswered (not asked for by the test): denied
				c.Agent.DangerousTools = []string{"rm"}
				d.Tools = []tools.Tool{{Name: "rm", Run: func(context.Context, tools.Call, json.RawMessage) (string, error) {
					runs.Add(1)
					return "removed", nil
				}}}
			})
			asked := func(req *turnsv1.TurnRequested) bool {
				for _, ev := range h.replies(req.TurnId) {
					if ev.GetToolProgress().GetPhase() == repliesv1.ToolPhase_TOOL_PHASE_AWAITING_APPROVAL {
						return true
					}
				}
				return false
			}
			first := h.requestTurn("s1", "[[tool:rm {}]] clean up", turnOpts{})
			waitFor(t, 30*time.Second, "approval request", func() bool { return asked(first) })
			h.control("s1", turnsv1.ControlAction_CONTROL_ACTION_APPROVE, tt.scope)
			h.waitCompleted(first.TurnId)
			for _, next := range []struct {
				name      string
				sessionID string
				ask       bool
			}{{"same conversation", "", tt.askSameSession}, {"next conversation", "sid-next", tt.askNewSession}} {
				before := runs.Load()
				req := h.requestTurn("s1", "[[tool:rm {}]] again", turnOpts{sessionID: next.sessionID})
				if next.ask {
					waitFor(t, 30*time.Second, next.name+": approval request", func() bool { return asked(req) })
					h.control("s1", turnsv1.ControlAction_CONTROL_ACTION_DENY, "")
				}
				h.waitCompleted(req.TurnId)
				if got := asked(req); got != next.ask {
					t.Errorf("%s: asked %v, want %v", next.name, got, next.ask)
				}
				if ran := runs.Load() > before; ran == next.ask {
					t.Errorf("%s: the tool ran %v (a denied call does not run)", next.name, ran)
				}
			}
		})
	}
}

func TestPromptByteIdenticalAcrossWorkers(t *testing.T) {
	t.Parallel()
	for _, provider := range []string{"openai", "anthropic"} {
		t.Run(provider, func(t *testing.T) {
			t.Parallel()
			h := newHarness(t)
			h.setGeneration("s1", 1)
			backend := h.openAI()
			if provider == "anthropic" {
				backend = h.anthropic()
			}
			now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
			for i, id := range []string{"w1", "w2"} {
				w := h.startWorker(id, func(c *worker.Config, d *worker.Deps) {
					d.LLM = backend
					d.Now = func() time.Time { return now.Add(time.Duration(i) * 48 * time.Hour) }
					c.RedactPII = true
				})
				req := h.requestTurn("s1", "turn "+id, turnOpts{})
				if c := h.waitCompleted(req.TurnId); c.GetWorkerId() != id {
					t.Fatalf("turn ran on %s", c.GetWorkerId())
				}
				w.stop(t)
			}
			reqs := h.fake.Requests()
			if len(reqs) != 2 {
				t.Fatalf("%d model requests", len(reqs))
			}
			if reqs[0].System == "" || reqs[0].System != reqs[1].System {
				t.Fatalf("system prompts differ:\n%q\n%q", reqs[0].System, reqs[1].System)
			}
			if strings.Contains(reqs[0].System, "u-s1") || !strings.Contains(reqs[0].System, worker.RedactID("u-s1")) {
				t.Errorf("user id not redacted: %q", reqs[0].System)
			}
			if provider == "anthropic" && !reqs[1].SystemCached {
				t.Error("no cache_control on the anthropic system prompt")
			}

			// A config change (the ephemeral prompt) re-renders it.
			w := h.startWorker("w3", func(c *worker.Config, d *worker.Deps) {
				d.LLM = backend
				c.RedactPII = true
				c.Agent.EphemeralPrompt = "Be brief."
			})
			defer w.stop(t)
			req := h.requestTurn("s1", "turn w3", turnOpts{})
			h.waitCompleted(req.TurnId)
			reqs = h.fake.Requests()
			if got := reqs[len(reqs)-1].System; got == reqs[0].System || !strings.Contains(got, "Be brief.") {
				t.Errorf("signature change did not re-render: %q", got)
			}
		})
	}
}

// An API client's system messages join the system prompt of its own
// turn's model calls, after the stored prompt, which they leave alone;
// agent.client_system: ignore leaves them out.
func TestClientSystemMessagesJoinTheTurnsPrompt(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ provider, mode, want string }{
		{"openai", "", "\n\nAnswer in French.\n\nBe brief."},
		{"anthropic", worker.ClientSystemAppend, "\n\nAnswer in French.\n\nBe brief."},
		{"openai", worker.ClientSystemIgnore, ""},
	} {
		t.Run(tc.provider+" "+tc.mode, func(t *testing.T) {
			t.Parallel()
			h := newHarness(t)
			h.setGeneration("s1", 1)
			backend := h.openAI()
			if tc.provider == "anthropic" {
				backend = h.anthropic()
			}
			w := h.startWorker("w1", func(c *worker.Config, d *worker.Deps) {
				d.LLM = backend
				c.Agent.ClientSystem = tc.mode
			})
			defer w.stop(t)
			req := h.requestTurn("s1", "bonjour", turnOpts{context: []*eventsv1.ContextMessage{
				{Role: "system", Content: "Answer in French."}, {Role: "user", Content: "earlier"},
				{Role: "assistant", Content: "earlier answer"}, {Role: "system", Content: " Be brief. "},
				{Role: "system", Content: "Answer in French."}}})
			h.waitCompleted(req.TurnId)
			req = h.requestTurn("s1", "again", turnOpts{})
			h.waitCompleted(req.TurnId)
			reqs := h.fake.Requests()
			if len(reqs) != 2 {
				t.Fatalf("%d model requests", len(reqs))
			}
			stored, with := reqs[1].System, reqs[0].System
			if want := stored + tc.want; with != want {
				t.Fatalf("the first turn's system prompt\n%q\nwant the stored one and\n%q", with, tc.want)
			}
			for _, m := range reqs[1].Messages {
				if strings.Contains(m.Content, "French") {
					t.Fatalf("the client's system message was stored in the conversation: %+v", m)
				}
			}
		})
	}
}

func TestLLMErrorClassesEndTheTurnWithAClearMessage(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.startWorker("w1", nil)
	cases := []struct {
		text string
		code string
		want string
	}{
		{"[[fail:402]] hi", "quota", "quota"},
		{"[[fail:quota]] hi", "quota", "quota"},
		{"[[fail:401]] hi", "auth", "credentials"},
		{"[[fail:overflow]] hi", "context_overflow", "too long"},
		{"[[fail:500]] hi", "provider", "having trouble"},
		{"[[fail:429 retry=0]] hi", "rate_limited", "busy"},
		{"[[drop:1]] hi", "provider", ""},
		{"[[latency:1m]] hi", "timeout", "took too long"},
		{"[[slow:1m]] hi", "timeout", "took too long"},
	}
	for i, tc := range cases {
		key := "err" + string(rune('a'+i))
		h.setGeneration(key, 1)
		req := h.requestTurn(key, tc.text, turnOpts{})
		c := h.waitCompleted(req.TurnId)
		if c.GetStatus() != turnsv1.TurnStatus_TURN_STATUS_FAILED {
			t.Errorf("%s: status %v", tc.text, c.GetStatus())
			continue
		}
		final := checkReplies(t, h.replies(req.TurnId))
		e := final.GetError()
		if e.GetCode() != tc.code || !strings.Contains(e.GetMessage(), tc.want) {
			t.Errorf("%s: error reply %q %q", tc.text, e.GetCode(), e.GetMessage())
		}
	}
	// The worker is still healthy afterwards.
	h.setGeneration("ok", 1)
	req := h.requestTurn("ok", "fine", turnOpts{})
	if c := h.waitCompleted(req.TurnId); c.GetStatus() != turnsv1.TurnStatus_TURN_STATUS_COMPLETED {
		t.Errorf("after errors: %v", c.GetStatus())
	}
}

func TestRetryableErrorIsRetried(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.setGeneration("s1", 1)
	h.startWorker("w1", nil)
	h.fake.FailNext(1, fakellm.Failure{Status: 429, RetryAfter: time.Millisecond})
	req := h.requestTurn("s1", "patience", turnOpts{})
	if c := h.waitCompleted(req.TurnId); c.GetStatus() != turnsv1.TurnStatus_TURN_STATUS_COMPLETED {
		t.Fatalf("status %v", c.GetStatus())
	}
	if got := checkReplies(t, h.replies(req.TurnId)).GetFinalText().GetText(); got != "echo: patience" {
		t.Errorf("final %q", got)
	}
}

func TestMemoryAndSessionSearchTools(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.setGeneration("s1", 1)
	h.setGeneration("s2", 1)
	h.startWorker("w1", nil)
	alice := &eventsv1.SessionSource{Platform: "telegram", ChatId: "99", ChatType: "dm", UserId: "alice"}
	req := h.requestTurn("s1", `[[tool:memory {"action":"add","content":"likes green tea"}]] the zanzibar plan`, turnOpts{origin: alice})
	h.waitCompleted(req.TurnId)
	// Another session of the same user finds both the note and the transcript.
	o := turnOpts{sessionID: "other", origin: alice}
	req = h.requestTurn("s2", `[[tool:memory {"action":"list"}]] [[tool:session_search {"query":"zanzibar"}]] recall`, o)
	h.waitCompleted(req.TurnId)
	final := checkReplies(t, h.replies(req.TurnId)).GetFinalText().GetText()
	if !strings.Contains(final, "likes green tea") {
		t.Errorf("memory not recalled: %q", final)
	}
	if !strings.Contains(final, "zanzibar") || !strings.Contains(final, "sid-s1") {
		t.Errorf("session_search found nothing: %q", final)
	}
}

// send_message posts to the turn's own chat and to the targets the
// operator allowed at once; any other target waits for the user's
// approval, so a prompt injection cannot post wherever it likes.
func TestSendMessagePublishesNotice(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, target string
		approval     turnsv1.ControlAction // UNSPECIFIED: none asked
		sent         bool
		to           *deliveryv1.Target // nil: the target as given
	}{
		{"allowed target", "slack:C123", turnsv1.ControlAction_CONTROL_ACTION_UNSPECIFIED, true, nil},
		{"the turn's own chat", "telegram:99", turnsv1.ControlAction_CONTROL_ACTION_UNSPECIFIED, true, nil},
		{"another chat, approved", "slack:C999", turnsv1.ControlAction_CONTROL_ACTION_APPROVE, true, nil},
		{"another chat, denied", "slack:C999", turnsv1.ControlAction_CONTROL_ACTION_DENY, false, nil},
		{"the home /sethome chose", "telegram", turnsv1.ControlAction_CONTROL_ACTION_UNSPECIFIED, true,
			&deliveryv1.Target{Platform: "telegram", Account: "bot", ChatId: "-100", ThreadId: "7"}},
		{"the configured home", "discord", turnsv1.ControlAction_CONTROL_ACTION_UNSPECIFIED, true,
			&deliveryv1.Target{Platform: "discord", ChatId: "55"}},
		{"agent.home_channel", "home", turnsv1.ControlAction_CONTROL_ACTION_UNSPECIFIED, true,
			&deliveryv1.Target{Platform: "slack", ChatId: "C7"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			h := newHarness(t)
			h.setGeneration("s1", 1)
			home := &eventsv1.SessionSource{Platform: "telegram", Account: "bot", ChatId: "-100", ThreadId: "7"}
			if err := sessionstore.New(h.db).SetHome(context.Background(), home, "alice"); err != nil {
				t.Fatal(err)
			}
			h.startWorker("w1", func(c *worker.Config, d *worker.Deps) {
				c.Agent.SendMessageTargets = []string{"slack:C123"}
				c.Agent.ApprovalTimeout = time.Minute
				c.Agent.HomeChannel = "slack:C7"
				d.Homes = func(platform string) string { return map[string]string{"discord": "55"}[platform] }
			})
			req := h.requestTurn("s1", `[[tool:send_message {"target":"`+tt.target+`","text":"deploy done"}]] tell them`, turnOpts{})
			if tt.approval != turnsv1.ControlAction_CONTROL_ACTION_UNSPECIFIED {
				waitFor(t, 30*time.Second, "approval request", func() bool {
					for _, ev := range h.replies(req.TurnId) {
						if ev.GetToolProgress().GetPhase() == repliesv1.ToolPhase_TOOL_PHASE_AWAITING_APPROVAL {
							return true
						}
					}
					return false
				})
				h.control("s1", tt.approval, "")
			}
			h.waitCompleted(req.TurnId)
			var notices []*repliesv1.ReplyEvent
			for _, ev := range streamMsgs[repliesv1.ReplyEvent](t, h.bus, "REPLIES", "") {
				if ev.GetNotice().GetKind() == "send_message" {
					notices = append(notices, ev)
				}
			}
			switch {
			case !tt.sent && len(notices) != 0:
				t.Fatalf("sent %v without approval", notices)
			case tt.sent && (len(notices) != 1 || notices[0].GetNotice().GetText() != "deploy done"):
				t.Fatalf("notices %v", notices)
			case tt.to != nil && !proto.Equal(notices[0].GetTarget(), tt.to):
				t.Fatalf("sent to %v, want %v", notices[0].GetTarget(), tt.to)
			case tt.sent && tt.approval == turnsv1.ControlAction_CONTROL_ACTION_UNSPECIFIED:
				for _, ev := range h.replies(req.TurnId) {
					if ev.GetToolProgress().GetPhase() == repliesv1.ToolPhase_TOOL_PHASE_AWAITING_APPROVAL {
						t.Fatal("asked for approval to send to an allowed target")
					}
				}
			}
		})
	}
}

func TestContextCompression(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.setGeneration("s1", 1)
	h.startWorker("w1", func(c *worker.Config, _ *worker.Deps) {
		c.Agent.ContextWindow = 200 // tokens: a few turns overflow it
		c.Agent.ProtectLast = 2
	})
	// Every call costs 30 tokens in and 7 out, the summary's included.
	h.fake.SetScript(func(req *fakellm.Request) (fakellm.Reply, bool) {
		text := "echo: " + req.Messages[len(req.Messages)-1].Content
		return fakellm.Reply{Text: text[:min(len(text), 60)], Usage: &fakellm.Usage{InputTokens: 30, OutputTokens: 7}}, true
	})
	compressed := 0
	for i := range 4 {
		req := h.requestTurn("s1", strings.Repeat("word ", 40)+string(rune('a'+i)), turnOpts{})
		c := h.waitCompleted(req.TurnId)
		if c.GetStatus() != turnsv1.TurnStatus_TURN_STATUS_COMPLETED {
			t.Fatalf("turn %d: %v", i, c.GetStatus())
		}
		u := c.GetUsage()
		if calls := u.GetModelCalls(); u.GetInputTokens() != 30*int64(calls) || u.GetOutputTokens() != 7*int64(calls) {
			t.Errorf("turn %d: %d model calls counted %d/%d tokens", i, calls, u.GetInputTokens(), u.GetOutputTokens())
		}
		if u.GetModelCalls() > 1 {
			compressed++
		}
	}
	if compressed == 0 {
		t.Error("no turn made a summary call")
	}
	var n int
	if err := h.db.QueryRow(context.Background(), `SELECT count(*) FROM transcript_summaries WHERE session_id = 'sid-s1'`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n == 0 {
		t.Fatal("no summary stored")
	}
	reqs := h.fake.Requests()
	last := reqs[len(reqs)-1]
	if !strings.Contains(last.Messages[0].Content, "[Summary of the earlier conversation]") {
		t.Errorf("last request does not start with the summary: %+v", last.Messages[0])
	}
	if len(last.Messages) > 4 {
		t.Errorf("last request still has %d messages", len(last.Messages))
	}
}

// A worker dies mid-turn, its lock expires and the router starts the
// session's next message under a new lock and generation before the dead
// turn is redelivered. The redelivered turn cannot run any more (fencing),
// but its user must not be left without an answer: they are told it was
// interrupted, exactly once.
func TestSupersededTurnAfterCrashTellsTheUser(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.setGeneration("s1", 1)
	entered := make(chan struct{}, 2)
	blocking := tools.Tool{Name: "block", Run: func(ctx context.Context, _ tools.Call, _ json.RawMessage) (string, error) {
		entered <- struct{}{}
		<-ctx.Done()
		return "", ctx.Err()
	}}
	w1 := h.startWorker("w1", func(c *worker.Config, d *worker.Deps) {
		c.DrainTimeout = 50 * time.Millisecond
		d.Tools = []tools.Tool{blocking}
	})
	req := h.requestTurn("s1", "[[tool:block {}]] first", turnOpts{})
	select {
	case <-entered:
	case <-time.After(30 * time.Second):
		t.Fatal("tool never ran")
	}
	w1.stop(t)
	// The lock expired and the router started the next message.
	ctx := context.Background()
	if err := h.rdb.Del(ctx, h.locker.Key("s1")).Err(); err != nil {
		t.Fatal(err)
	}
	if ok, err := h.locker.Acquire(ctx, "s1", "next-turn-token", time.Minute); err != nil || !ok {
		t.Fatalf("take lock for the next turn: %v %v", ok, err)
	}
	h.setGeneration("s1", 2)

	h.startWorker("w2", nil)
	done := h.waitCompleted(req.TurnId)
	if done.GetStatus() != turnsv1.TurnStatus_TURN_STATUS_STALE {
		t.Fatalf("status %v, want STALE", done.GetStatus())
	}
	var errs []*repliesv1.ReplyEvent
	for _, ev := range h.replies(req.TurnId) {
		if ev.GetError() != nil || ev.GetFinalText() != nil {
			errs = append(errs, ev)
		}
	}
	if len(errs) != 1 || errs[0].GetError().GetCode() != "interrupted" {
		t.Fatalf("final events %v, want one interrupted error", errs)
	}
	if owner, _ := h.locker.Owner(ctx, "s1"); owner != "next-turn-token" {
		t.Fatalf("the superseded turn touched the next turn's lock (owner %q)", owner)
	}
}

// A turn delivered again while an earlier attempt still holds the session
// lock (its acks were lost, say, in a NATS restart) waits for that attempt
// instead of running beside it.
func TestSecondAttemptWaitsForTheHolderOfTheTurn(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.setGeneration("s1", 1)
	ctx := context.Background()
	token := redisx.NewToken()
	earlier := redisx.Holder(token, "crashed-or-slow.1")
	if ok, err := h.locker.Acquire(ctx, "s1", earlier, 5*time.Second); err != nil || !ok {
		t.Fatal("take lock", err)
	}
	h.startWorker("w1", nil)
	before := len(h.fake.Requests())
	req := h.requestTurn("s1", "hello", turnOpts{noLock: true, token: token})
	// The earlier attempt keeps renewing: the new delivery must not start.
	for range 4 {
		time.Sleep(300 * time.Millisecond)
		if err := h.locker.Renew(ctx, "s1", earlier, 5*time.Second); err != nil {
			t.Fatalf("the new attempt took the lock from a live holder: %v", err)
		}
		if len(h.fake.Requests()) != before || h.completed(req.TurnId) != nil {
			t.Fatal("the turn ran while an earlier attempt held it")
		}
	}
	// The earlier attempt hands the lock back: the new one runs the turn.
	if err := h.locker.Swap(ctx, "s1", earlier, token, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	if c := h.waitCompleted(req.TurnId); c.GetStatus() != turnsv1.TurnStatus_TURN_STATUS_COMPLETED {
		t.Fatalf("status %v", c.GetStatus())
	}
	checkReplies(t, h.replies(req.TurnId))
	if owner, _ := h.locker.Owner(ctx, "s1"); owner != "" {
		t.Errorf("lock still held by %q", owner)
	}
}

// startBlockedTurn runs a turn of session s1 (generation 1) on worker w1
// and returns once the turn is inside its tool, which answers
// "unblocked" when release is closed. Its lock has the short TTL: the
// tests that block a turn wait for its lock's next renewal.
func startBlockedTurn(t *testing.T, h *harness) (*turnsv1.TurnRequested, chan struct{}) {
	t.Helper()
	h.setGeneration("s1", 1)
	entered, release := make(chan struct{}, 1), make(chan struct{})
	blocking := tools.Tool{Name: "block", Run: func(ctx context.Context, _ tools.Call, _ json.RawMessage) (string, error) {
		entered <- struct{}{}
		select {
		case <-release:
			return "unblocked", nil
		case <-ctx.Done():
			return "", ctx.Err()
		}
	}}
	h.startWorker("w1", func(_ *worker.Config, d *worker.Deps) { d.Tools = []tools.Tool{blocking} })
	req := h.requestTurn("s1", "[[tool:block {}]] go", turnOpts{lockTTL: shortLockTTL})
	select {
	case <-entered:
	case <-time.After(30 * time.Second):
		t.Fatal("tool never ran")
	}
	return req, release
}

// reclaimedAndAnswered waits until the blocked turn of session s1
// (startBlockedTurn) holds its lock again, its renewal having claimed it
// back, then lets its tool finish and checks that the turn completed
// with its answer.
func reclaimedAndAnswered(t *testing.T, h *harness, req *turnsv1.TurnRequested, release chan struct{}) {
	t.Helper()
	waitFor(t, 10*time.Second, "the turn's lock claimed again", func() bool {
		owner, err := h.locker.Owner(context.Background(), "s1")
		return err == nil && redisx.GrantOf(owner) == req.LockToken
	})
	close(release)
	done := h.waitCompleted(req.TurnId)
	if done.GetStatus() != turnsv1.TurnStatus_TURN_STATUS_COMPLETED {
		t.Fatalf("status %v, want COMPLETED", done.GetStatus())
	}
	final := checkReplies(t, h.replies(req.TurnId))
	if got := final.GetFinalText().GetText(); got != "echo: go [unblocked]" {
		t.Errorf("final %q", got)
	}
}

// Redis lost the session lock mid-turn (a restart without persistence):
// nobody else holds it, so the worker takes it again at its next renewal
// and answers, instead of abandoning a message nobody else will answer.
func TestVanishedLockIsTakenAgain(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	req, release := startBlockedTurn(t, h)
	ctx := context.Background()
	if err := h.rdb.Del(ctx, h.locker.Key("s1")).Err(); err != nil {
		t.Fatal(err)
	}
	// The next renewal (every TTL/3, 2 s / 3 here) finds the lock gone.
	reclaimedAndAnswered(t, h, req, release)
	if owner, _ := h.locker.Owner(ctx, "s1"); owner != "" {
		t.Errorf("lock left held by %q after the turn", owner)
	}
}

// A lock dropped by /stop or /new (the session already at a newer
// generation) is not claimed again: the turn stops at its next safe point
// and leaves the lock free for the session's next turn.
func TestDroppedLockOfAMovedSessionIsNotTakenAgain(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	req, release := startBlockedTurn(t, h)
	ctx := context.Background()
	h.setGeneration("s1", 2)
	if err := h.rdb.Del(ctx, h.locker.Key("s1")).Err(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(shortLockTTL) // past a renewal (every 2 s / 3), with a margin
	if owner, _ := h.locker.Owner(ctx, "s1"); owner != "" {
		t.Fatalf("the lock of a session that moved on was taken again by %q", owner)
	}
	close(release)
	if c := h.waitCompleted(req.TurnId); c.GetStatus() != turnsv1.TurnStatus_TURN_STATUS_STALE {
		t.Fatalf("status %v, want STALE", c.GetStatus())
	}
}

// A worker frozen past its lock's TTL (SIGSTOP, a VM pause) while the bus
// gave its turn to another attempt, which claimed the lock, wakes up
// between the model's answer and the tool the answer asked for, before
// its next renewal would notice. It runs nothing: the write of the
// tool's result would be refused, but not its side effect. The lock's
// TTL is long here, so that no renewal notices the takeover first.
func TestTakenOverTurnRunsNoTool(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.setGeneration("s1", 1)
	var runs atomic.Int32
	h.startWorker("w1", func(_ *worker.Config, d *worker.Deps) {
		d.Tools = []tools.Tool{{Name: "send", Run: func(context.Context, tools.Call, json.RawMessage) (string, error) {
			runs.Add(1)
			return "sent", nil
		}}}
	})
	token := redisx.NewToken()
	var took atomic.Bool
	h.fake.SetScript(func(*fakellm.Request) (fakellm.Reply, bool) {
		// While the model answers, the other attempt claims the turn.
		if took.CompareAndSwap(false, true) {
			if err := h.rdb.Set(context.Background(), h.locker.Key("s1"), redisx.Holder(token, "w2.2"), time.Minute).Err(); err != nil {
				t.Error(err)
			}
		}
		return fakellm.Reply{}, false
	})
	req := h.requestTurn("s1", "[[tool:send {}]] tell them", turnOpts{token: token, lockTTL: time.Minute})
	if c := h.waitCompleted(req.TurnId); c.GetStatus() != turnsv1.TurnStatus_TURN_STATUS_STALE {
		t.Errorf("status %v, want STALE", c.GetStatus())
	}
	if n := runs.Load(); n != 0 {
		t.Errorf("the tool ran %d times after the takeover", n)
	}
	for _, ev := range h.replies(req.TurnId) {
		if ev.GetToolProgress().GetPhase() == repliesv1.ToolPhase_TOOL_PHASE_STARTED {
			t.Errorf("the superseded attempt announced the tool: %v", ev)
		}
	}
	if owner, _ := h.locker.Owner(context.Background(), "s1"); owner != redisx.Holder(token, "w2.2") {
		t.Errorf("lock held by %q, want the attempt that took over", owner)
	}
}

// /stop while a dangerous tool waits for approval: the router moved the
// session on (a new generation) and dropped the lock before its STOP
// arrived. The turn ends superseded, once: it is not retried, so the user
// is not asked to approve again and the tool never runs.
func TestStopDuringApprovalEndsTheTurnOnce(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.setGeneration("s1", 1)
	var runs atomic.Int32
	h.startWorker("w1", func(c *worker.Config, d *worker.Deps) {
		c.Agent.ApprovalTimeout = time.Minute
		c.Agent.DangerousTools = []string{"rm"}
		d.Tools = []tools.Tool{{Name: "rm", Run: func(context.Context, tools.Call, json.RawMessage) (string, error) {
			runs.Add(1)
			return "removed", nil
		}}}
	})
	req := h.requestTurn("s1", "[[tool:rm {}]] clean up", turnOpts{})
	approvals := func() int {
		n := 0
		for _, ev := range h.replies(req.TurnId) {
			if ev.GetToolProgress().GetPhase() == repliesv1.ToolPhase_TOOL_PHASE_AWAITING_APPROVAL {
				n++
			}
		}
		return n
	}
	waitFor(t, 30*time.Second, "approval request", func() bool { return approvals() > 0 })
	// What the router's /stop does: a new generation, the lock dropped,
	// then STOP to the running turn.
	h.setGeneration("s1", 2)
	if err := h.rdb.Del(context.Background(), h.locker.Key("s1")).Err(); err != nil {
		t.Fatal(err)
	}
	h.control("s1", turnsv1.ControlAction_CONTROL_ACTION_STOP, "")
	done := h.waitCompleted(req.TurnId)
	if done.GetStatus() != turnsv1.TurnStatus_TURN_STATUS_STALE {
		t.Errorf("status %v, want STALE", done.GetStatus())
	}
	time.Sleep(2 * time.Second) // a retried delivery would ask again by now
	if n := approvals(); n != 1 {
		t.Errorf("asked for approval %d times, want once", n)
	}
	if n := runs.Load(); n != 0 {
		t.Errorf("the tool ran %d times after /stop", n)
	}
}

// A streamed turn that ran a tool: the client was streamed the first
// step's text, so the answer's own text cannot be found after it by
// prefix, and the answer's tail still buffered when the model finished is
// streamed before the final (a turn of one step leaves the tail to the
// final, whose text starts with everything streamed). The answer's text
// streams after Hermes's paragraph break, a delta marked restart: the
// final continues what streamed after it.
func TestStreamedToolTurnStreamsTheWholeAnswer(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.setGeneration("s1", 1)
	h.fake.Enqueue(
		fakellm.Reply{Text: "Let me check. ", ToolCalls: []fakellm.ToolCall{{ID: "c1", Name: "clock", Arguments: `{}`}}},
		fakellm.Reply{Text: "The answer is 42."},
	)
	h.startWorker("w1", func(c *worker.Config, d *worker.Deps) {
		c.DeltaInterval = time.Hour // nothing goes out before a step ends
		d.Tools = []tools.Tool{{Name: "clock", Run: func(context.Context, tools.Call, json.RawMessage) (string, error) {
			return "12:00", nil
		}}}
	})
	req := h.requestTurn("s1", "what is the answer?", turnOpts{})
	h.waitCompleted(req.TurnId)
	var streamed, after strings.Builder
	restarts := 0
	evs := h.replies(req.TurnId)
	for _, ev := range evs {
		d := ev.GetTextDelta()
		streamed.WriteString(d.GetText())
		if d.GetRestart() {
			restarts++
			after.Reset()
			continue
		}
		after.WriteString(d.GetText())
	}
	final := checkReplies(t, evs).GetFinalText().GetText()
	if final != "The answer is 42." {
		t.Fatalf("final %q", final)
	}
	if got := streamed.String(); got != "Let me check. \n\nThe answer is 42." {
		t.Errorf("streamed %q, want both steps' text, a paragraph break between", got)
	}
	if restarts != 1 || after.String() != final {
		t.Errorf("%d restart deltas, then %q streamed: want one, then the final's text", restarts, after.String())
	}
}

// An answer after a tool call that the output limit cut goes on in the
// next call: its text continues the answer (the final joins both), so
// only the first of the two calls streams the break marked restart.
func TestStreamedToolTurnCutAnswerStreamsOneBreak(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.setGeneration("s1", 1)
	h.fake.Enqueue(
		fakellm.Reply{Text: "Let me check.", ToolCalls: []fakellm.ToolCall{{ID: "c1", Name: "clock", Arguments: `{}`}}},
		fakellm.Reply{Text: "It's 5", Truncated: true},
		fakellm.Reply{Text: "pm."},
	)
	h.startWorker("w1", func(c *worker.Config, d *worker.Deps) {
		d.Tools = []tools.Tool{{Name: "clock", Run: func(context.Context, tools.Call, json.RawMessage) (string, error) {
			return "17:00", nil
		}}}
	})
	req := h.requestTurn("s1", "what time is it?", turnOpts{})
	h.waitCompleted(req.TurnId)
	var after strings.Builder
	restarts := 0
	evs := h.replies(req.TurnId)
	for _, ev := range evs {
		d := ev.GetTextDelta()
		if d.GetRestart() {
			restarts++
			after.Reset()
			continue
		}
		after.WriteString(d.GetText())
	}
	final := checkReplies(t, evs).GetFinalText().GetText()
	if restarts != 1 || after.String() != final {
		t.Errorf("%d restart deltas, then %q streamed, final %q: want one, then the final's text", restarts, after.String(), final)
	}
}

// A turn stopped (/stop, /new) while it waited for a worker finds the
// session lock free when a worker takes it: it must not run, nor keep the
// lock. A turn whose grant merely vanished (Redis lost it) runs.
func TestTurnStoppedWhileWaitingDoesNotRun(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.setGeneration("s1", 1)
	h.setGeneration("s2", 1)
	h.startWorker("w1", nil)
	// An earlier turn stored the session's prompt: a stale turn has
	// nothing to write before its model call.
	h.waitCompleted(h.requestTurn("s1", "hello", turnOpts{}).TurnId)
	h.setGeneration("s1", 2) // /stop advanced the session and released the grant
	stopped := h.requestTurn("s1", "never mind", turnOpts{noLock: true, generation: 1})
	vanished := h.requestTurn("s2", "still wanted", turnOpts{noLock: true, generation: 1})

	if c := h.waitCompleted(stopped.TurnId); c.GetStatus() != turnsv1.TurnStatus_TURN_STATUS_STALE {
		t.Fatalf("stopped turn: status %v, want STALE", c.GetStatus())
	}
	if c := h.waitCompleted(vanished.TurnId); c.GetStatus() != turnsv1.TurnStatus_TURN_STATUS_COMPLETED {
		t.Fatalf("turn whose grant vanished: status %v, want COMPLETED", c.GetStatus())
	}
	for _, r := range h.fake.Requests() {
		for _, m := range r.Messages {
			if strings.Contains(m.Content, "never mind") {
				t.Fatal("the stopped turn called the model")
			}
		}
	}
	if n := len(h.replies(stopped.TurnId)); n != 0 {
		t.Fatalf("the stopped turn published %d replies", n)
	}
	if owner, _ := h.locker.Owner(context.Background(), "s1"); owner != "" {
		t.Fatalf("the stopped turn kept the session lock (%q)", owner)
	}
}

// story is a question whose answer the fake model streams word by word.
const story = "tell me a long story about the sea and the ships on it"

// streamingTurn requests a turn on s1 whose answer streams a word every
// slow, and waits until its first text delta is out.
func (h *harness) streamingTurn(t *testing.T, slow string) *turnsv1.TurnRequested {
	t.Helper()
	req := h.requestTurn("s1", "[[slow:"+slow+"]] "+story, turnOpts{})
	waitFor(t, 30*time.Second, "the answer starts streaming", func() bool { return h.deltas(req.TurnId) > 0 })
	return req
}

// deltas counts the text deltas the turn published.
func (h *harness) deltas(turnID string) int {
	n := 0
	for _, ev := range h.replies(turnID) {
		if ev.GetTextDelta() != nil {
			n++
		}
	}
	return n
}

// A stop or an interrupt ends a model call in progress: a slow stream does
// not go on into the chat while the next turn runs. What it streamed is
// the turn's answer and stays in the transcript.
func TestInterruptEndsAStreamingModelCall(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.setGeneration("s1", 1)
	h.startWorker("w1", nil)
	req := h.streamingTurn(t, "1s")
	h.control("s1", turnsv1.ControlAction_CONTROL_ACTION_INTERRUPT, "")
	c := h.waitCompleted(req.TurnId)
	if c.GetStatus() != turnsv1.TurnStatus_TURN_STATUS_INTERRUPTED {
		t.Fatalf("status %v, want INTERRUPTED", c.GetStatus())
	}
	var streamed string
	var final *repliesv1.ReplyEvent
	for _, ev := range h.replies(req.TurnId) {
		streamed += ev.GetTextDelta().GetText()
		if ev.GetFinalText() != nil || ev.GetError() != nil {
			final = ev
		}
	}
	if final == nil || final.GetFinalText().GetText() != streamed || streamed == "" {
		t.Fatalf("final %v, want the streamed part %q", final, streamed)
	}
	if full := "echo: " + story; !strings.HasPrefix(full, streamed) || streamed == full {
		t.Fatalf("streamed %q: want a cut-short part of the answer", streamed)
	}
}

// An interrupt that names another turn (one that ended before the control
// arrived) leaves the running turn alone: it answers in full.
func TestInterruptForAnotherTurnIsIgnored(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.setGeneration("s1", 1)
	h.startWorker("w1", nil)
	req := h.streamingTurn(t, "200ms")
	data, err := proto.Marshal(&turnsv1.TurnControlRequested{SessionKey: "s1", TurnId: "an-earlier-turn",
		Action: turnsv1.ControlAction_CONTROL_ACTION_INTERRUPT})
	if err != nil {
		t.Fatal(err)
	}
	if err := h.bus.Conn().Publish(h.bus.Topology().ControlSubject("s1"), data); err != nil {
		t.Fatal(err)
	}
	if c := h.waitCompleted(req.TurnId); c.GetStatus() != turnsv1.TurnStatus_TURN_STATUS_COMPLETED {
		t.Fatalf("status %v, want COMPLETED", c.GetStatus())
	}
	if final := checkReplies(t, h.replies(req.TurnId)); final.GetFinalText().GetText() != "echo: "+story {
		t.Fatalf("final %v, want the whole answer", final)
	}
}

// A turn run again after its worker died mid-stream streams nothing: its
// deltas would be spliced onto the first attempt's part of another
// answer. Its final carries the whole answer.
func TestRedeliveredTurnStreamsNoDeltas(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.setGeneration("s1", 1)
	w1 := h.startWorker("w1", func(c *worker.Config, _ *worker.Deps) { c.DrainTimeout = 50 * time.Millisecond })
	req := h.streamingTurn(t, "300ms")
	w1.stop(t)
	before := h.deltas(req.TurnId)
	if err := h.rdb.Del(context.Background(), h.locker.Key("s1")).Err(); err != nil {
		t.Fatal(err)
	}
	h.startWorker("w2", nil)
	if c := h.waitCompleted(req.TurnId); c.GetStatus() != turnsv1.TurnStatus_TURN_STATUS_COMPLETED {
		t.Fatalf("status %v", c.GetStatus())
	}
	if after := h.deltas(req.TurnId); after != before {
		t.Fatalf("the second attempt streamed %d deltas", after-before)
	}
	if final := checkReplies(t, h.replies(req.TurnId)); final.GetFinalText().GetText() != "echo: "+story {
		t.Fatalf("final %v", final)
	}
}

// /stop while the answer streams: the turn is fenced off, and its stream
// message loses its cursor (an interrupted error without text), or it
// would show one for good on platforms that stream by editing.
func TestStopMidStreamEndsTheStream(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.setGeneration("s1", 1)
	h.startWorker("w1", nil)
	req := h.streamingTurn(t, "1s")
	h.setGeneration("s1", 2) // the router's /stop: the next generation, then the control
	h.control("s1", turnsv1.ControlAction_CONTROL_ACTION_STOP, "")
	if c := h.waitCompleted(req.TurnId); c.GetStatus() != turnsv1.TurnStatus_TURN_STATUS_STALE {
		t.Fatalf("status %v, want STALE", c.GetStatus())
	}
	evs := h.replies(req.TurnId)
	last := evs[len(evs)-1]
	if last.GetError().GetCode() != "interrupted" || last.GetError().GetMessage() != "" {
		t.Fatalf("last reply %v, want an interrupted error without text", last)
	}
}

// The worker running a session's turn answers every control request at
// once: empty when the turn took it, "declined" when it did not (an
// approval nobody asked for), so the router never waits out its timeout.
func TestControlRequestsAreAnsweredAtOnce(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	_, release := startBlockedTurn(t, h)
	defer close(release)
	ask := func(action turnsv1.ControlAction, v2 bool) (answered, declined bool) {
		t.Helper()
		data, err := proto.Marshal(&turnsv1.TurnControlRequested{SessionKey: "s1", Action: action, Text: "x"})
		if err != nil {
			t.Fatal(err)
		}
		req := nats.NewMsg(h.bus.Topology().ControlSubject("s1"))
		req.Data = data
		if v2 {
			req.Header.Set(bus.HeaderControl, bus.ControlVersion)
		}
		reply, err := h.bus.Conn().RequestMsg(req, 2*time.Second)
		if errors.Is(err, nats.ErrTimeout) {
			return false, false
		}
		if err != nil {
			t.Fatal(err)
		}
		if got := reply.Header.Get(bus.HeaderControl); (got == bus.ControlVersion) != v2 {
			t.Errorf("reply's control version %q to a request of version 2: %v", got, v2)
		}
		var v wrapperspb.BoolValue
		if err := proto.Unmarshal(reply.Data, &v); err != nil {
			t.Fatal(err)
		}
		return true, v.GetValue()
	}
	approve, steer := turnsv1.ControlAction_CONTROL_ACTION_APPROVE, turnsv1.ControlAction_CONTROL_ACTION_STEER
	if answered, declined := ask(approve, true); !answered || !declined {
		t.Error("an approval no tool call waits for was not declined at once")
	}
	if answered, declined := ask(steer, true); !answered || declined {
		t.Error("steering of a running turn was not taken")
	}
	// A router of an older release reads any answer as "taken".
	if answered, _ := ask(approve, false); answered {
		t.Error("a decline was sent to a router that reads it as taken")
	}
	if answered, declined := ask(steer, false); !answered || declined {
		t.Error("steering from an older router was not answered as taken")
	}
	if _, err := h.bus.Conn().Request(h.bus.Topology().ControlSubject("nobody"), []byte{}, 300*time.Millisecond); err == nil {
		t.Error("a request for a session no turn here runs was answered")
	}
}

// /stop before the model answered a word: an API request waits for its
// own answer, which the stopped turn will never give, so it gets the
// interrupted error with why; a chat heard the router's "⚡ Stopped." and
// hears nothing more. The admin API's reset stops the turn too (its stop
// names the event "admin-reset:<session id>"): the request is told an
// operator reset the conversation, not that a /stop or /new did.
func TestStopBeforeAnyTextAnswersOnlyTheAPI(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		platform string
		event    string // the stop's event id
		want     string // the error's text; "" for no reply at all
	}{
		{"api request", "api", "tg-1", "Stopped before it answered: a /stop or /new in its conversation ended its turn."},
		{"chat", "telegram", "tg-1", ""},
		{"api request, admin reset", "api", "admin-reset:20261206_174200_abcd1234", "Stopped before it answered: an operator reset this conversation and ended its turn."},
		{"chat, admin reset", "telegram", "admin-reset:20261206_174200_abcd1234", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			h := newHarness(t)
			h.setGeneration("s1", 1)
			h.startWorker("w1", nil)
			origin := &eventsv1.SessionSource{Platform: tt.platform, Account: "a1", ChatId: "99", ChatType: "dm", UserId: "u1"}
			req := h.requestTurn("s1", "think long [[latency:40s]]", turnOpts{origin: origin})
			waitFor(t, 30*time.Second, "the model call starts", func() bool { return len(h.fake.Requests()) > 0 })
			h.setGeneration("s1", 2) // the router's /stop: the next generation, then the control
			h.controlEvent("s1", turnsv1.ControlAction_CONTROL_ACTION_STOP, "", tt.event)
			if c := h.waitCompleted(req.TurnId); c.GetStatus() != turnsv1.TurnStatus_TURN_STATUS_STALE {
				t.Fatalf("status %v, want STALE", c.GetStatus())
			}
			var errs []*repliesv1.ReplyError
			for _, ev := range h.replies(req.TurnId) {
				if ev.GetError() != nil {
					errs = append(errs, ev.GetError())
				}
			}
			switch {
			case tt.want == "" && len(errs) > 0:
				t.Fatalf("replies %v, want none", errs)
			case tt.want != "" && (len(errs) != 1 || errs[0].GetCode() != "interrupted" || errs[0].GetMessage() != tt.want):
				t.Fatalf("replies %v, want one interrupted error saying %q", errs, tt.want)
			}
		})
	}
}

// "/deny <reason>" relays the reason to the model in the denied call's
// result, as Hermes's BLOCKED message does; "/deny all" denies the other
// calls of the model's answer that would ask too, without asking, while
// a plain /deny covers one call.
// TestDenyAllSurvivesARestart: a "/deny all" given to the first call of
// an answer still denies the answer's later calls when the worker dies
// between them and another resumes the turn: without asking again, with
// the same reason.
func TestDenyAllSurvivesARestart(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.setGeneration("s1", 1)
	var rmRuns atomic.Int32
	rm := tools.Tool{Name: "rm", Run: func(context.Context, tools.Call, json.RawMessage) (string, error) {
		rmRuns.Add(1)
		return "removed", nil
	}}
	entered := make(chan struct{}, 4)
	blocking := tools.Tool{Name: "block_b", Run: func(ctx context.Context, _ tools.Call, _ json.RawMessage) (string, error) {
		entered <- struct{}{}
		<-ctx.Done() // the first worker dies here
		return "", ctx.Err()
	}}
	finishing := blocking
	finishing.Run = func(context.Context, tools.Call, json.RawMessage) (string, error) { return "b-done", nil }
	w1 := h.startWorker("w1", func(c *worker.Config, d *worker.Deps) {
		c.DrainTimeout = 50 * time.Millisecond // "kill": handlers are cut off at once
		c.Agent.ApprovalTimeout = time.Minute
		c.Agent.DangerousTools = []string{"rm"}
		d.Tools = []tools.Tool{rm, blocking}
	})
	h.fake.Enqueue(fakellm.Reply{ToolCalls: []fakellm.ToolCall{
		{ID: "call-0", Name: "rm", Arguments: `{"path": "/tmp/0"}`},
		{ID: "call-1", Name: "block_b", Arguments: `{}`},
		{ID: "call-2", Name: "rm", Arguments: `{"path": "/tmp/2"}`},
	}})
	req := h.requestTurn("s1", "clean up", turnOpts{})
	asks := func() int {
		n := 0
		for _, ev := range h.replies(req.TurnId) {
			if ev.GetToolProgress().GetPhase() == repliesv1.ToolPhase_TOOL_PHASE_AWAITING_APPROVAL {
				n++
			}
		}
		return n
	}
	waitFor(t, 30*time.Second, "the approval request", func() bool { return asks() == 1 })
	h.control("s1", turnsv1.ControlAction_CONTROL_ACTION_DENY, "all keep my files")
	select {
	case <-entered:
	case <-time.After(30 * time.Second):
		t.Fatal("block_b never ran")
	}
	w1.stop(t)
	if h.completed(req.TurnId) != nil {
		t.Fatal("the killed worker completed the turn")
	}
	// The lock expired meanwhile (a real crash stops renewals).
	if err := h.rdb.Del(context.Background(), h.locker.Key("s1")).Err(); err != nil {
		t.Fatal(err)
	}
	h.startWorker("w2", func(c *worker.Config, d *worker.Deps) {
		// Asked again, the old code waited for this and denied without
		// the reason.
		c.Agent.ApprovalTimeout = 2 * time.Second
		c.Agent.DangerousTools = []string{"rm"}
		d.Tools = []tools.Tool{rm, finishing}
	})
	done := h.waitCompleted(req.TurnId)
	if done.GetStatus() != turnsv1.TurnStatus_TURN_STATUS_COMPLETED || done.GetWorkerId() != "w2" {
		t.Fatalf("completed %v by %s", done.GetStatus(), done.GetWorkerId())
	}
	if n := asks(); n != 1 || rmRuns.Load() != 0 {
		t.Errorf("%d prompts, rm ran %d times; want 1, 0", n, rmRuns.Load())
	}
	reqs := h.fake.Requests()
	var results []string
	for _, m := range reqs[len(reqs)-1].Messages {
		if m.Role == "tool" {
			results = append(results, m.Content)
		}
	}
	denied := `The user denied this tool call. Reason given by the user: "keep my files". Do not retry it; continue without it, taking the reason into account.`
	if want := []string{denied, "b-done", denied}; !slices.Equal(results, want) {
		t.Errorf("tool results in the model's last request:\n%q\nwant\n%q", results, want)
	}
}

func TestDenyReasonAndAllReachTheModel(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		calls   int      // rm calls in the model's one answer
		answers []string // /deny's argument for each prompt, in order
		asks    int      // prompts shown
		reason  string   // in every result ("" none)
	}{
		{"reason", 1, []string{"use the trash instead"}, 1, "use the trash instead"},
		{"all with a reason", 2, []string{"ALL not now, I am backing up"}, 1, "not now, I am backing up"},
		{"all", 2, []string{"all"}, 1, ""},
		{"one at a time", 2, []string{"", "wrong folder"}, 2, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			h := newHarness(t)
			h.setGeneration("s1", 1)
			var runs atomic.Int32
			h.startWorker("w1", func(c *worker.Config, d *worker.Deps) {
				c.Agent.ApprovalTimeout = time.Minute
				c.Agent.DangerousTools = []string{"rm"}
				d.Tools = []tools.Tool{{Name: "rm", Run: func(context.Context, tools.Call, json.RawMessage) (string, error) {
					runs.Add(1)
					return "removed", nil
				}}}
			})
			var calls []fakellm.ToolCall
			for i := range tt.calls {
				calls = append(calls, fakellm.ToolCall{ID: "call-" + strconv.Itoa(i), Name: "rm", Arguments: `{"path": "/tmp/` + strconv.Itoa(i) + `"}`})
			}
			h.fake.Enqueue(fakellm.Reply{ToolCalls: calls})
			req := h.requestTurn("s1", "clean up", turnOpts{})
			asks := func() int {
				n := 0
				for _, ev := range h.replies(req.TurnId) {
					if ev.GetToolProgress().GetPhase() == repliesv1.ToolPhase_TOOL_PHASE_AWAITING_APPROVAL {
						n++
					}
				}
				return n
			}
			for i, a := range tt.answers {
				waitFor(t, 30*time.Second, "approval request "+strconv.Itoa(i+1), func() bool { return asks() == i+1 })
				h.control("s1", turnsv1.ControlAction_CONTROL_ACTION_DENY, a)
			}
			if c := h.waitCompleted(req.TurnId); c.GetStatus() != turnsv1.TurnStatus_TURN_STATUS_COMPLETED {
				t.Fatalf("turn %v", c.GetStatus())
			}
			if n := asks(); n != tt.asks || runs.Load() != 0 {
				t.Errorf("%d prompts, the tool ran %d times; want %d, 0", n, runs.Load(), tt.asks)
			}
			reqs := h.fake.Requests()
			var results []string
			for _, m := range reqs[len(reqs)-1].Messages {
				if m.Role == "tool" {
					results = append(results, m.Content)
				}
			}
			if len(results) != tt.calls {
				t.Fatalf("tool results in the model's last request: %q", results)
			}
			for i, r := range results {
				want := "The user denied this tool call. Do not retry it; continue without it."
				switch {
				case tt.reason != "":
					want = `The user denied this tool call. Reason given by the user: "` + tt.reason + `". Do not retry it; continue without it, taking the reason into account.`
				case tt.name == "one at a time" && i == 1:
					want = `The user denied this tool call. Reason given by the user: "wrong folder". Do not retry it; continue without it, taking the reason into account.`
				}
				if r != want {
					t.Errorf("result %d = %q, want %q", i, r, want)
				}
			}
		})
	}
}
