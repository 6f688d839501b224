package worker_test

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/switchboard-chat/switchboard/pkg/bus"
	"github.com/switchboard-chat/switchboard/pkg/fakellm"
	eventsv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/events/v1"
	turnsv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/turns/v1"
	"github.com/switchboard-chat/switchboard/services/worker"
)

// TestMemoryFlushSavesWithTheMemoryToolAlone: Hermes's pre-reset memory
// flush reads the conversation that ended, offers the model the memory
// tool alone, saves what it calls, and shows the chat nothing; the
// conversation's transcript is left as it was.
func TestMemoryFlushSavesWithTheMemoryToolAlone(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.setGeneration("s1", 1)
	h.startWorker("w1", nil)
	req, calls, alice := flushAConversation(t, h)
	if len(calls) != 2 {
		t.Fatalf("%d model calls, want 2 (the memory call, then its end)", len(calls))
	}
	for i, c := range calls {
		var names []string
		for _, tl := range c.Tools {
			names = append(names, tl.Name)
		}
		if strings.Join(names, ",") != "memory" {
			t.Errorf("call %d offered tools %v, want memory alone", i, names)
		}
		var seen []string
		for _, m := range c.Messages {
			seen = append(seen, m.Content)
		}
		if !strings.Contains(strings.Join(seen, "\n"), "and I live in Lisbon") {
			t.Errorf("call %d did not read the ended conversation: %q", i, seen)
		}
	}
	if evs := h.replies(req.TurnId); len(evs) != 0 {
		t.Errorf("the flush published %d reply events, want none", len(evs))
	}
	var n int
	if err := h.db.QueryRow(context.Background(), `SELECT count(*) FROM transcript_messages WHERE session_id = 'old'`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 4 {
		t.Errorf("the ended conversation has %d messages after the flush, want its 4", n)
	}
	h.fake.SetScript(nil)
	list := h.requestTurn("s1", `[[tool:memory {"action":"list"}]] notes?`, turnOpts{sessionID: "new", origin: alice})
	h.waitCompleted(list.TurnId)
	if final := checkReplies(t, h.replies(list.TurnId)).GetFinalText().GetText(); !strings.Contains(final, "drinks green tea only") {
		t.Errorf("the flush saved nothing: %q", final)
	}
}

// TestMemoryFlushRunsAtMostOnce: a worker that dies mid-flush leaves
// the flush to the bus, whose next delivery does not run it again (the
// dead attempt may have saved notes already) and lets the session go on.
func TestMemoryFlushRunsAtMostOnce(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.setGeneration("s1", 1)
	alice := &eventsv1.SessionSource{Platform: "telegram", ChatId: "99", ChatType: "dm", UserId: "alice"}
	w1 := h.startWorker("w1", func(c *worker.Config, _ *worker.Deps) {
		c.DrainTimeout = 50 * time.Millisecond // "kill": handlers are cut off at once
	})
	old := turnOpts{sessionID: "old", origin: alice}
	for _, text := range []string{"I only drink green tea", "and I live in Lisbon"} {
		h.waitCompleted(h.requestTurn("s1", text, old).TurnId)
	}
	var flushCalls atomic.Int32
	entered, release := make(chan struct{}, 4), make(chan struct{})
	t.Cleanup(func() { close(release) })
	h.fake.SetScript(func(req *fakellm.Request) (fakellm.Reply, bool) {
		last := req.Messages[len(req.Messages)-1]
		if last.Role == "user" && strings.Contains(last.Content, "about to be reset") {
			flushCalls.Add(1)
			entered <- struct{}{}
			<-release // the first worker dies here
		}
		return fakellm.Reply{}, false
	})
	req := h.requestTurn("s1", "", turnOpts{sessionID: "old", origin: alice, flush: true})
	select {
	case <-entered:
	case <-time.After(30 * time.Second):
		t.Fatal("the flush never called the model")
	}
	w1.stop(t)
	if h.completed(req.TurnId) != nil {
		t.Fatal("the killed worker completed the flush")
	}
	// A real crash stops renewals: the lock expires.
	if err := h.rdb.Del(context.Background(), h.locker.Key("s1")).Err(); err != nil {
		t.Fatal(err)
	}
	h.startWorker("w2", nil)
	if c := h.waitCompleted(req.TurnId); c.GetStatus() != turnsv1.TurnStatus_TURN_STATUS_COMPLETED || c.GetWorkerId() != "w2" {
		t.Fatalf("flush: %v by %s", c.GetStatus(), c.GetWorkerId())
	}
	if n := flushCalls.Load(); n != 1 {
		t.Errorf("the flush called the model %d times over two attempts, want 1", n)
	}
}

// TestMemoryFlushAsksNoApproval: a flush has no one to ask (it shows the
// chat nothing, and the chat's /approve meets an idle agent): a memory
// call that needs an approval (agent.dangerous_tools) is denied at once,
// as a /background task's, instead of holding the flush, and the new
// conversation's first message behind it, until its deadline.
func TestMemoryFlushAsksNoApproval(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.setGeneration("s1", 1)
	h.startWorker("w1", func(c *worker.Config, _ *worker.Deps) {
		c.Agent.ApprovalTimeout = time.Hour
		c.Agent.DangerousTools = []string{"memory"}
	})
	req, calls, _ := flushAConversation(t, h)
	if len(calls) != 2 {
		t.Fatalf("%d model calls, want 2 (the memory call, then its denial read)", len(calls))
	}
	if last := calls[1].Messages[len(calls[1].Messages)-1]; last.Role != "tool" || !strings.Contains(last.Content, "denied") {
		t.Errorf("the memory call's result: %s %q, want a denial", last.Role, last.Content)
	}
	if evs := h.replies(req.TurnId); len(evs) != 0 {
		t.Errorf("the flush published %d reply events, want none", len(evs))
	}
}

// flushAConversation runs, on h's worker, the memory flush of alice's
// conversation "old" of two turns under key s1, the model calling the
// memory tool once, then ending: the flush's turn, the model calls it
// made, and alice.
func flushAConversation(t *testing.T, h *harness) (*turnsv1.TurnRequested, []fakellm.Request, *eventsv1.SessionSource) {
	t.Helper()
	alice := &eventsv1.SessionSource{Platform: "telegram", ChatId: "99", ChatType: "dm", UserId: "alice"}
	old := turnOpts{sessionID: "old", origin: alice}
	for _, text := range []string{"I only drink green tea", "and I live in Lisbon"} {
		h.waitCompleted(h.requestTurn("s1", text, old).TurnId)
	}
	h.fake.SetScript(func(req *fakellm.Request) (fakellm.Reply, bool) {
		last := req.Messages[len(req.Messages)-1]
		switch {
		case last.Role == "user" && strings.Contains(last.Content, "about to be reset"):
			return fakellm.Reply{ToolCalls: []fakellm.ToolCall{{ID: "c1", Name: "memory",
				Arguments: `{"action":"add","content":"drinks green tea only"}`}}}, true
		case last.Role == "tool":
			return fakellm.Reply{Text: "done"}, true
		}
		return fakellm.Reply{}, false
	})
	before := len(h.fake.Requests())
	req := h.requestTurn("s1", "", turnOpts{sessionID: "old", origin: alice, flush: true})
	if c := h.waitCompleted(req.TurnId); c.GetStatus() != turnsv1.TurnStatus_TURN_STATUS_COMPLETED {
		t.Fatalf("flush: %v (%s)", c.GetStatus(), c.GetError())
	}
	return req, h.fake.Requests()[before:], alice
}

// TestMemoryFlushCountsEveryTranscriptEntry: as Hermes, a flush skips a
// conversation of fewer than four transcript entries, counting every
// one (a tool call and its result too), not only the user and assistant
// messages with text.
func TestMemoryFlushCountsEveryTranscriptEntry(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		text    string
		entries int // of the ended conversation
		texts   int // its user and assistant messages with text
		flushed bool
	}{
		{"a turn with a tool call", `[[tool:memory {"action":"list"}]] any notes?`, 4, 2, true},
		{"a turn without", "hello", 2, 2, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			h := newHarness(t)
			h.setGeneration("s1", 1)
			h.startWorker("w1", nil)
			alice := &eventsv1.SessionSource{Platform: "telegram", ChatId: "99", ChatType: "dm", UserId: "alice"}
			h.waitCompleted(h.requestTurn("s1", tc.text, turnOpts{sessionID: "old", origin: alice}).TurnId)
			var entries, texts int
			if err := h.db.QueryRow(context.Background(), `SELECT count(*), count(*) FILTER (WHERE role IN ('user', 'assistant') AND btrim(content) <> '')
				FROM transcript_messages WHERE session_id = 'old'`).Scan(&entries, &texts); err != nil {
				t.Fatal(err)
			}
			if entries != tc.entries || texts != tc.texts {
				t.Fatalf("the conversation has %d entries, %d with text; want %d, %d", entries, texts, tc.entries, tc.texts)
			}
			var flushCalls atomic.Int32
			h.fake.SetScript(func(req *fakellm.Request) (fakellm.Reply, bool) {
				last := req.Messages[len(req.Messages)-1]
				if last.Role == "user" && strings.Contains(last.Content, "about to be reset") {
					flushCalls.Add(1)
					return fakellm.Reply{Text: "nothing to save"}, true
				}
				return fakellm.Reply{}, false
			})
			req := h.requestTurn("s1", "", turnOpts{sessionID: "old", origin: alice, flush: true})
			if c := h.waitCompleted(req.TurnId); c.GetStatus() != turnsv1.TurnStatus_TURN_STATUS_COMPLETED {
				t.Fatalf("flush: %v (%s)", c.GetStatus(), c.GetError())
			}
			if got := flushCalls.Load() > 0; got != tc.flushed {
				t.Errorf("flush ran: %v, want %v", got, tc.flushed)
			}
		})
	}
}

// TestSupersededMemoryFlushBooksItsUsageWithTheEndedConversation: a
// flush the session moved on from while it ran (/stop, another /new)
// ends stale, and what its model calls used is booked with the
// conversation it ran on, the one that ended (a worker_turns row of
// it), not handed to the router, which would add it to the session's
// row: the new conversation's count.
func TestSupersededMemoryFlushBooksItsUsageWithTheEndedConversation(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.setGeneration("s1", 1)
	h.startWorker("w1", nil)
	alice := &eventsv1.SessionSource{Platform: "telegram", ChatId: "99", ChatType: "dm", UserId: "alice"}
	old := turnOpts{sessionID: "old", origin: alice}
	for _, text := range []string{"I only drink green tea", "and I live in Lisbon"} {
		h.waitCompleted(h.requestTurn("s1", text, old).TurnId)
	}
	h.fake.SetScript(func(req *fakellm.Request) (fakellm.Reply, bool) {
		last := req.Messages[len(req.Messages)-1]
		if last.Role == "user" && strings.Contains(last.Content, "about to be reset") {
			// The session moves on while the model answers (the fake's
			// goroutine: no t.Fatal here).
			if _, err := h.db.Exec(context.Background(), `UPDATE sessions SET generation = 2 WHERE session_key = 's1'`); err != nil {
				return fakellm.Reply{Text: "generation not moved on: " + err.Error()}, true
			}
			return fakellm.Reply{Text: "nothing to save"}, true
		}
		return fakellm.Reply{}, false
	})
	req := h.requestTurn("s1", "", turnOpts{sessionID: "old", origin: alice, flush: true})
	c := h.waitCompleted(req.TurnId)
	if c.GetStatus() != turnsv1.TurnStatus_TURN_STATUS_STALE {
		t.Fatalf("flush: %v (%s), want stale", c.GetStatus(), c.GetError())
	}
	if c.GetUsage().GetInputTokens() == 0 {
		t.Fatal("the flush's model call used nothing")
	}
	if !c.GetUsageRecorded() {
		t.Error("the flush's usage went to the router, which books it with the session's current conversation")
	}
	var sessionID string
	var in, out int64
	if err := h.db.QueryRow(context.Background(), `SELECT session_id, input_tokens, output_tokens FROM worker_turns WHERE turn_id = $1`,
		req.TurnId).Scan(&sessionID, &in, &out); err != nil {
		t.Fatalf("the flush's usage is not booked with its conversation: %v", err)
	}
	if sessionID != "old" || in != c.GetUsage().GetInputTokens() || out != c.GetUsage().GetOutputTokens() {
		t.Errorf("booked %d in, %d out with %q; want %d, %d with old", in, out, sessionID,
			c.GetUsage().GetInputTokens(), c.GetUsage().GetOutputTokens())
	}
}

// TestRedeliveredMemoryFlushKeepsItsBookedUsage: a flush that ended
// without a final booked its usage with the ended conversation
// (store.BookUsage); its completion failed to publish, so the bus
// delivered it again. The redelivery skips the flush (at most once) and
// must leave that booking as it is: deciding the turn over it recorded
// the flush finished with the redelivery's usage, none, and the usage
// the model spent was lost.
func TestRedeliveredMemoryFlushKeepsItsBookedUsage(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.setGeneration("s1", 1)
	// The stop below cuts the flush on its last attempt: it fails, and
	// books its usage, instead of being handed back unbooked.
	w1 := h.startWorker("w1", func(c *worker.Config, _ *worker.Deps) {
		c.DrainTimeout = 50 * time.Millisecond
		c.MaxDeliver = 1
	})
	req, calls := flushStoppedMidway(t, h, w1, true)
	var status string
	var in, out int
	if err := h.db.QueryRow(context.Background(), `SELECT status, input_tokens, output_tokens FROM worker_turns WHERE turn_id = $1`,
		req.TurnId).Scan(&status, &in, &out); err != nil {
		t.Fatalf("the failed flush booked no usage: %v", err)
	}
	if status != "failed" || in != flushCallUsage.InputTokens || out != flushCallUsage.OutputTokens {
		t.Fatalf("the failed flush booked %s, %d in, %d out; want failed, %d, %d", status, in, out,
			flushCallUsage.InputTokens, flushCallUsage.OutputTokens)
	}
	h.startWorker("w2", nil)
	c := h.waitCompleted(req.TurnId)
	if c.GetWorkerId() != "w2" {
		t.Fatalf("flush completed by %s, want the redelivery's w2", c.GetWorkerId())
	}
	if n := calls.Load(); n != 2 {
		t.Errorf("the flush called the model %d times, want the first attempt's 2", n)
	}
	if !c.GetUsageRecorded() {
		t.Error("the redelivery handed the router usage to add: the booked row counts the flush already")
	}
	if err := h.db.QueryRow(context.Background(), `SELECT input_tokens, output_tokens FROM worker_turns WHERE turn_id = $1`,
		req.TurnId).Scan(&in, &out); err != nil {
		t.Fatal(err)
	}
	if in != flushCallUsage.InputTokens || out != flushCallUsage.OutputTokens {
		t.Errorf("after the redelivery the flush's row holds %d in, %d out; want the booked %d, %d", in, out,
			flushCallUsage.InputTokens, flushCallUsage.OutputTokens)
	}
}

// A flush handed back at a worker's shutdown after a model call that
// reported no usage (a provider that sends none) books its row all the
// same: it began, and may have saved notes. It was handed back without
// one, so a delivery the bus numbered 1 again (the turn's message
// published anew, the first one lost) ran the flush a second time and
// saved its notes twice.
func TestHandedBackMemoryFlushWithoutUsageRunsOnce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	h := newHarness(t)
	h.setGeneration("s1", 1)
	w1 := h.startWorker("w1", func(c *worker.Config, _ *worker.Deps) {
		c.DrainTimeout = 50 * time.Millisecond
	})
	req, calls := flushStoppedMidwayUsing(t, h, w1, false, fakellm.Usage{})
	var status string
	if err := h.db.QueryRow(ctx, `SELECT status FROM worker_turns WHERE turn_id = $1`, req.TurnId).Scan(&status); err != nil {
		t.Errorf("the handed-back flush left no row: %v", err)
	}
	// The turn's message is lost and published anew: its next delivery
	// is numbered 1.
	js, topo := h.bus.JetStream(), h.bus.Topology()
	turns, err := js.Stream(ctx, topo.Stream(bus.StreamTurns))
	if err != nil {
		t.Fatal(err)
	}
	info, err := turns.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info.State.Msgs != 1 {
		t.Fatalf("%d turns waiting, want the handed-back flush alone", info.State.Msgs)
	}
	if err := turns.DeleteMsg(ctx, info.State.FirstSeq); err != nil {
		t.Fatal(err)
	}
	if _, err := h.bus.Publish(ctx, topo.Subject(bus.SubjectTurnRequested), "turn:"+req.TurnId+":anew", req); err != nil {
		t.Fatal(err)
	}
	h.startWorker("w2", nil)
	waitFor(t, 60*time.Second, "the flush completed or run again", func() bool { return h.completed(req.TurnId) != nil || calls.Load() > 2 })
	if n := calls.Load(); n != 2 {
		t.Fatalf("the flush called the model %d times, want the first attempt's 2: it ran again", n)
	}
	var notes int
	if err := h.db.QueryRow(ctx, `SELECT count(*) FROM agent_memories WHERE content = 'drinks green tea only'`).Scan(&notes); err != nil {
		t.Fatal(err)
	}
	if notes != 1 {
		t.Errorf("the flush's note saved %d times, want once", notes)
	}
}

// flushCallUsage is what the first model call of a flush
// flushStoppedMidway runs reports.
var flushCallUsage = fakellm.Usage{InputTokens: 1234, OutputTokens: 56}

// flushStoppedMidway runs the memory flush of a conversation of two
// turns under key s1 on w (started with a short drain timeout) and stops
// w while the flush waits for its second model call, after a first that
// called the memory tool and used flushCallUsage; with failCompletion,
// the stopping worker's completion of the turn fails to publish (the
// turn events stream takes no completions until w has stopped). It
// returns the flush's turn and a count of the flush's model calls.
func flushStoppedMidway(t *testing.T, h *harness, w *runningWorker, failCompletion bool) (*turnsv1.TurnRequested, *atomic.Int32) {
	t.Helper()
	return flushStoppedMidwayUsing(t, h, w, failCompletion, flushCallUsage)
}

// flushStoppedMidwayUsing is flushStoppedMidway with the usage the
// flush's first model call reports.
func flushStoppedMidwayUsing(t *testing.T, h *harness, w *runningWorker, failCompletion bool, usage fakellm.Usage) (*turnsv1.TurnRequested, *atomic.Int32) {
	t.Helper()
	alice := &eventsv1.SessionSource{Platform: "telegram", ChatId: "99", ChatType: "dm", UserId: "alice"}
	old := turnOpts{sessionID: "old", origin: alice}
	for _, text := range []string{"I only drink green tea", "and I live in Lisbon"} {
		h.waitCompleted(h.requestTurn("s1", text, old).TurnId)
	}
	calls := &atomic.Int32{}
	entered, release := make(chan struct{}, 4), make(chan struct{})
	t.Cleanup(func() { close(release) })
	h.fake.SetScript(func(req *fakellm.Request) (fakellm.Reply, bool) {
		flush := false
		for _, m := range req.Messages {
			flush = flush || m.Role == "user" && strings.Contains(m.Content, "about to be reset")
		}
		if !flush {
			return fakellm.Reply{}, false
		}
		if calls.Add(1) == 1 {
			u := usage
			return fakellm.Reply{Usage: &u, ToolCalls: []fakellm.ToolCall{{ID: "c1", Name: "memory",
				Arguments: `{"action":"add","content":"drinks green tea only"}`}}}, true
		}
		entered <- struct{}{}
		<-release // the worker stops here
		return fakellm.Reply{Text: "done"}, true
	})
	req := h.requestTurn("s1", "", turnOpts{sessionID: "old", origin: alice, flush: true})
	select {
	case <-entered:
	case <-time.After(30 * time.Second):
		t.Fatal("the flush never made its second model call")
	}
	var restore func()
	if failCompletion {
		restore = takeNoCompletions(t, h)
	}
	w.stop(t)
	if restore != nil {
		restore()
	}
	if h.completed(req.TurnId) != nil {
		t.Fatal("the stopped worker's completion of the flush was published")
	}
	return req, calls
}

// takeNoCompletions makes the turn events stream take no completions
// (their publish finds no stream) until the returned func restores it.
func takeNoCompletions(t *testing.T, h *harness) func() {
	t.Helper()
	ctx := context.Background()
	js, topo := h.bus.JetStream(), h.bus.Topology()
	s, err := js.Stream(ctx, topo.Stream(bus.StreamTurnEvents))
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	cfg := info.Config
	broken := cfg
	broken.Subjects = []string{topo.Subject(bus.SubjectTurnStarted)}
	if _, err := js.UpdateStream(ctx, broken); err != nil {
		t.Fatal(err)
	}
	return func() {
		if _, err := js.UpdateStream(ctx, cfg); err != nil {
			t.Fatal(err)
		}
	}
}

// TestHandedBackMemoryFlushBooksItsUsage: a worker stopping gracefully
// hands a running flush back to the bus, whose next delivery skips it
// (at most once). What the flush's model calls used before the stop is
// booked once, with the ended conversation: by the stopping worker, and
// not again, nor over it, by the redelivery.
func TestHandedBackMemoryFlushBooksItsUsage(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.setGeneration("s1", 1)
	w1 := h.startWorker("w1", func(c *worker.Config, _ *worker.Deps) {
		c.DrainTimeout = 50 * time.Millisecond
	})
	req, calls := flushStoppedMidway(t, h, w1, false)
	h.startWorker("w2", nil)
	c := h.waitCompleted(req.TurnId)
	if c.GetStatus() != turnsv1.TurnStatus_TURN_STATUS_COMPLETED || c.GetWorkerId() != "w2" {
		t.Fatalf("flush: %v by %s, want completed by the redelivery's w2", c.GetStatus(), c.GetWorkerId())
	}
	if n := calls.Load(); n != 2 {
		t.Errorf("the flush called the model %d times, want the first attempt's 2", n)
	}
	if !c.GetUsageRecorded() {
		t.Error("the redelivery handed the router usage to add to the session's row (the new conversation's)")
	}
	var sessionID string
	var in, out int
	if err := h.db.QueryRow(context.Background(), `SELECT session_id, input_tokens, output_tokens FROM worker_turns WHERE turn_id = $1`,
		req.TurnId).Scan(&sessionID, &in, &out); err != nil {
		t.Fatal(err)
	}
	if sessionID != "old" || in != flushCallUsage.InputTokens || out != flushCallUsage.OutputTokens {
		t.Errorf("the flush's row: %d in, %d out with %q; want the stopped attempt's %d, %d with old", in, out, sessionID,
			flushCallUsage.InputTokens, flushCallUsage.OutputTokens)
	}
}
