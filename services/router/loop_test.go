package router

import (
	"context"
	"strings"
	"testing"
	"time"

	turnsv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/turns/v1"
	"github.com/switchboard-chat/switchboard/pkg/loop"
)

// loopTestConfig fires loops only when the test calls fireLoops.
func loopTestConfig() Config {
	cfg := testConfig()
	cfg.LoopPollInterval = time.Hour
	return cfg
}

// makeDue makes the key's loops and heartbeats due now.
func (e *env) makeDue(key string) {
	e.t.Helper()
	if _, err := e.db.Exec(context.Background(), `UPDATE session_loops SET next_due_at = now() - interval '1 second' WHERE session_key = $1`, key); err != nil {
		e.t.Fatal(err)
	}
}

// wakeupTurns are the turns whose input is a wakeup of kind.
func wakeupTurns(w *worker, kind string) []*turnsv1.TurnRequested {
	turns, _ := w.snapshot()
	var out []*turnsv1.TurnRequested
	for _, tr := range turns {
		for _, in := range tr.GetInputs() {
			if strings.HasPrefix(in.GetEventId(), kind+":") {
				out = append(out, tr)
			}
		}
	}
	return out
}

// Hermes's /loop: set, its first wakeup fires at once into this
// conversation (the same session key and id as the user's turns, the
// wakeup frame as the message, the session's settings), status, pause
// (a due tick does not fire), resume (it does), stop, help, a bad spec,
// a new loop refused mid-turn, and /new ends it.
func TestLoopCommands(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	s := e.startRouter(loopTestConfig(), nil, nil)
	w := e.startWorker(nil)
	ctx := context.Background()
	user := turnOf(t, w, func() string { e.publish(dm("alice", "hello")); return "hello" }())
	key, sid := user.GetSessionKey(), user.GetSessionId()

	if got := e.ask("alice", "/loop"); got != loop.NoLoop {
		t.Errorf("/loop: %q", got)
	}
	if got := e.ask("alice", "/loop help"); got != loop.Help {
		t.Errorf("/loop help: %q", got)
	}
	if got := e.ask("alice", "/loop 5m"); got != "/loop: missing prompt (usage: /loop [interval] <prompt>)" {
		t.Errorf("/loop 5m: %q", got)
	}
	got := e.ask("alice", "/loop 10s check the deploy --times 3")
	want := "↻ Loop set (every 30s): check the deploy\n(interval raised to the 30s minimum — router.loop_min_interval)\n" +
		"Runs 3 times, then stops.\nFirst wakeup fires now, then on the cadence above. Controls: /loop status · pause · resume · stop."
	if got != want {
		t.Errorf("/loop set:\n%s\nwant\n%s", got, want)
	}
	waitFor(t, "the first wakeup", func() bool { return len(wakeupTurns(w, "loop")) == 1 })
	first := wakeupTurns(w, "loop")[0]
	if first.GetSessionKey() != key || first.GetSessionId() != sid {
		t.Errorf("wakeup ran in %s/%s, not the conversation %s/%s", first.GetSessionKey(), first.GetSessionId(), key, sid)
	}
	if in := first.GetInputs()[0]; !strings.HasPrefix(in.GetText(), "[/loop wakeup #1, every 30s]\nRecurring task: check the deploy\n\n") ||
		in.GetSource().GetUserId() != "alice" || first.GetOrigin().GetChatId() != "chat-alice" {
		t.Errorf("wakeup input %+v", in)
	}
	if got := e.ask("alice", "/loop status"); !strings.HasPrefix(got, "↻ Loop (active, every 30s, 1/3 runs, next in ") || !strings.HasSuffix(got, "): check the deploy") {
		t.Errorf("/loop status: %q", got)
	}
	if got := e.ask("alice", "/status"); !strings.Contains(got, "\n↻ Loop (active, every 30s, 1/3 runs, next in ") {
		t.Errorf("/status: %q", got)
	}
	if got := e.ask("alice", "/loop pause"); got != "⏸ Loop paused: check the deploy\nUse /loop resume to continue." {
		t.Errorf("/loop pause: %q", got)
	}
	e.makeDue(key)
	s.fireLoops(ctx)
	if n := len(wakeupTurns(w, "loop")); n != 1 {
		t.Errorf("a paused loop fired: %d wakeups", n)
	}
	if got := e.ask("alice", "/loop status"); got != "⏸ Loop (paused, every 30s, 1/3 runs — user-paused): check the deploy" {
		t.Errorf("/loop status paused: %q", got)
	}
	if got := e.ask("alice", "/loop resume"); got != "▶ Loop resumed (every 30s): check the deploy" {
		t.Errorf("/loop resume: %q", got)
	}
	e.makeDue(key)
	s.fireLoops(ctx)
	waitFor(t, "the second wakeup", func() bool { return len(wakeupTurns(w, "loop")) == 2 })
	if in := wakeupTurns(w, "loop")[1].GetInputs()[0]; !strings.HasPrefix(in.GetText(), "[/loop wakeup #2, every 30s]") {
		t.Errorf("second wakeup %q", in.GetText())
	}
	if got := e.ask("alice", "/loop stop"); got != "✓ Loop stopped." {
		t.Errorf("/loop stop: %q", got)
	}
	if got := e.ask("alice", "/loop stop"); got != "No active loop." {
		t.Errorf("/loop stop again: %q", got)
	}
	e.makeDue(key)
	s.fireLoops(ctx)
	if got := e.ask("alice", "/loop"); got != loop.NoLoop {
		t.Errorf("/loop after stop: %q", got)
	}
	if n := len(wakeupTurns(w, "loop")); n != 2 {
		t.Errorf("a stopped loop fired: %d wakeups", n)
	}
	// A loop ends with its conversation.
	e.ask("alice", "/loop 1m look around")
	waitFor(t, "the new loop's wakeup", func() bool { return len(wakeupTurns(w, "loop")) == 3 })
	if got := e.ask("alice", "/loop"); !strings.Contains(got, "replaced") && !strings.HasPrefix(got, "↻ Loop (active, every 1m") {
		t.Errorf("/loop status: %q", got)
	}
	e.ask("alice", "/new")
	if got := e.ask("alice", "/loop"); got != loop.NoLoop {
		t.Errorf("/loop after /new: %q", got)
	}
	e.makeDue(key)
	s.fireLoops(ctx)
	if n := len(wakeupTurns(w, "loop")); n != 3 {
		t.Errorf("the loop of an ended conversation fired: %d wakeups", n)
	}
}

// A new loop is refused while a turn runs (Hermes's busy handler); the
// controls answer mid-turn.
func TestLoopMidTurn(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.startRouter(loopTestConfig(), nil, nil)
	release := make(chan struct{})
	w := e.startWorker(func(tr *turnsv1.TurnRequested) {
		if tr.GetInputs()[0].GetText() == "long task" {
			<-release
		}
	})
	defer close(release)
	e.publish(dm("alice", "long task"))
	turnOf(t, w, "long task")
	if got := e.ask("alice", "/loop 5m check"); got != loopBusy {
		t.Errorf("/loop mid-turn: %q", got)
	}
	if got := e.ask("alice", "/loop status"); got != loop.NoLoop {
		t.Errorf("/loop status mid-turn: %q", got)
	}
	if got := e.ask("alice", "/heartbeat every 1m ping"); !strings.HasPrefix(got, "♥ Heartbeat set (every 1m): ping") {
		t.Errorf("/heartbeat mid-turn: %q", got)
	}
}

// Hermes's /heartbeat: set, status, a due heartbeat does not fire while
// a turn runs, nor while the user's message waits (it goes first), and
// fires once the session is idle, into the same conversation; missed
// ticks coalesce into one; pause, resume, clear.
func TestHeartbeatFiresOnlyWhenIdle(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	s := e.startRouter(loopTestConfig(), nil, nil)
	release := make(chan struct{})
	w := e.startWorker(func(tr *turnsv1.TurnRequested) {
		if tr.GetInputs()[0].GetText() == "long task" {
			<-release
		}
	})
	ctx := context.Background()
	for _, st := range []struct{ in, want string }{
		{"/heartbeat", loop.NoHeartbeat},
		{"/hb every 30s x", "Interval too small — minimum is 60s."},
		{"/heartbeat every 10m", "Usage: /heartbeat every <interval> <prompt> — the prompt is required."},
		{"/heartbeat pause", "No heartbeat set."},
		{"/heartbeat every 10m Check CI", "♥ Heartbeat set (every 10m): Check CI\nFires as a normal turn whenever this session is idle and the interval has elapsed."},
		{"/heartbeat status", "♥ Heartbeat (every 10m, next in ~"},
	} {
		if got := e.ask("alice", st.in); !strings.HasPrefix(got, st.want) {
			t.Errorf("%s: %q, want %q", st.in, got, st.want)
		}
	}
	e.publish(dm("alice", "long task"))
	long := turnOf(t, w, "long task")
	key := long.GetSessionKey()
	e.makeDue(key)
	s.fireLoops(ctx)
	s.fireLoops(ctx)
	if n := len(wakeupTurns(w, "heartbeat")); n != 0 {
		t.Fatalf("a heartbeat fired into a busy session: %d", n)
	}
	// The user's message waits behind the running turn: still not idle.
	e.publish(dm("alice", "/queue after the long task"))
	waitFor(t, "the queued message", e.inboundDrained)
	s.fireLoops(ctx)
	close(release)
	queued := turnOf(t, w, "after the long task")
	waitFor(t, "the session to be idle", func() bool {
		owner, _ := s.locker.Owner(ctx, key)
		n, _ := s.store.QueueLen(ctx, key)
		return owner == "" && n == 0
	})
	if n := len(wakeupTurns(w, "heartbeat")); n != 0 {
		t.Fatalf("a heartbeat fired while busy: %d", n)
	}
	s.fireLoops(ctx)
	s.fireLoops(ctx)
	waitFor(t, "the heartbeat", func() bool { return len(wakeupTurns(w, "heartbeat")) == 1 })
	hb := wakeupTurns(w, "heartbeat")[0]
	if hb.GetSessionId() != queued.GetSessionId() || hb.GetInputs()[0].GetText() != "[Heartbeat — recurring instruction, fires every 10m]\nCheck CI\n\n"+
		"If there is nothing meaningful to do or report for this instruction right now, reply briefly that nothing has changed and stop — do not invent work." {
		t.Errorf("heartbeat turn %+v", hb)
	}
	if got := e.ask("alice", "/heartbeat"); !strings.HasPrefix(got, "♥ Heartbeat (every 10m, next in ~") || !strings.HasSuffix(got, ", fired 1×): Check CI") {
		t.Errorf("/heartbeat status: %q", got)
	}
	if got := e.ask("alice", "/heartbeat pause"); got != "⏸ Heartbeat paused: Check CI" {
		t.Errorf("pause: %q", got)
	}
	e.makeDue(key)
	s.fireLoops(ctx)
	if got := e.ask("alice", "/heartbeat resume"); got != "▶ Heartbeat resumed (every 10m): Check CI" {
		t.Errorf("resume: %q", got)
	}
	if got := e.ask("alice", "/heartbeat off"); got != "✓ Heartbeat cleared." {
		t.Errorf("clear: %q", got)
	}
	e.makeDue(key)
	s.fireLoops(ctx)
	if n := len(wakeupTurns(w, "heartbeat")); n != 1 {
		t.Errorf("%d heartbeats fired, want 1", n)
	}
}

// Two router replicas scheduling the same due loops fire each tick once.
func TestLoopNotDoubledByTwoSchedulers(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	cfg := loopTestConfig()
	cfg.LoopPollInterval = 10 * time.Millisecond
	e.startRouter(cfg, nil, nil)
	e.startRouter(cfg, e.secondBus(), []int{})
	w := e.startWorker(nil)
	e.ask("alice", "/loop 1m check")
	e.ask("bob", "/loop 1m check")
	waitFor(t, "the first wakeups", func() bool { return len(wakeupTurns(w, "loop")) == 2 })
	for round := 2; round <= 4; round++ {
		for _, u := range []string{"alice", "bob"} {
			e.makeDue("agent:main:telegram:dm:chat-" + u)
		}
		waitFor(t, "the next wakeups", func() bool { return len(wakeupTurns(w, "loop")) >= 2*round })
		time.Sleep(100 * time.Millisecond) // ten more passes of each scheduler
	}
	seen := map[string]int{}
	for _, tr := range wakeupTurns(w, "loop") {
		seen[tr.GetInputs()[0].GetEventId()]++
	}
	if len(seen) != 8 {
		t.Errorf("%d wakeups, want 8 (4 ticks of 2 loops): %v", len(seen), seen)
	}
	for id, n := range seen {
		if n != 1 {
			t.Errorf("wakeup %s ran %d times", id, n)
		}
	}
}

// /pause holds loops: a due tick does not fire and a new loop is
// answered with the paused notice; after /pause off the due tick fires,
// once.
func TestPauseHoldsLoops(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	s := e.startRouter(loopTestConfig(), nil, nil)
	w := e.startWorker(nil)
	ctx := context.Background()
	e.ask("alice", "/loop 1m check")
	waitFor(t, "the first wakeup", func() bool { return len(wakeupTurns(w, "loop")) == 1 })
	key := wakeupTurns(w, "loop")[0].GetSessionKey()
	e.ask("alice", "/pause")
	waitFor(t, "the pause", func() bool { return s.paused() != nil })
	e.makeDue(key)
	s.fireLoops(ctx)
	if got := e.ask("alice", "/loop 2m other"); !strings.Contains(got, "paused") {
		t.Errorf("/loop while paused: %q", got)
	}
	if n := len(wakeupTurns(w, "loop")); n != 1 {
		t.Fatalf("%d wakeups while paused, want 1", n)
	}
	e.ask("alice", "/pause off")
	waitFor(t, "the resume", func() bool { return s.paused() == nil })
	s.fireLoops(ctx)
	s.fireLoops(ctx)
	waitFor(t, "the held wakeup", func() bool { return len(wakeupTurns(w, "loop")) == 2 })
	if got := e.ask("alice", "/loop"); !strings.HasSuffix(got, "): check") {
		t.Errorf("the loop after /pause off: %q", got)
	}
}

// Hermes's /stop stops the loop's wakeup that runs, not the loop: the
// stopped wakeup counts as a run (the next is scheduled from the stop,
// --times ends the loop when it was the last), a heartbeat goes on,
// and a redelivered /stop counts nothing twice.
func TestStopStopsTheWakeupNotTheLoop(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	s := e.startRouter(loopTestConfig(), nil, nil)
	release := make(chan struct{})
	w := e.startWorker(func(tr *turnsv1.TurnRequested) {
		if strings.HasPrefix(tr.GetInputs()[0].GetEventId(), "loop:") {
			<-release
		}
	})
	defer close(release)
	ctx := context.Background()
	user := turnOf(t, w, func() string { e.publish(dm("alice", "hello")); return "hello" }())
	key := user.GetSessionKey()
	if got := e.ask("alice", "/heartbeat every 10m ping"); !strings.HasPrefix(got, "♥ Heartbeat set (every 10m): ping") {
		t.Fatalf("/heartbeat: %q", got)
	}
	e.ask("alice", "/loop 1m check the deploy --times 2")
	waitFor(t, "the first wakeup", func() bool { return len(wakeupTurns(w, "loop")) == 1 })

	stop := dm("alice", "/stop")
	for i, tc := range []struct {
		name, want, status string
	}{
		{"first wakeup stopped", "⚡ Stopped. You can continue this session.", "↻ Loop (active, every 1m, 1/2 runs, next in "},
		{"last wakeup stopped", "⚡ Stopped. You can continue this session.\n✓ Loop finished — ran 2/2 times.",
			"✓ Loop finished (2 ticks — completed the requested 2 runs): check the deploy"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if i == 1 {
				stop = dm("alice", "/stop")
				e.makeDue(key)
				s.fireLoops(ctx)
				waitFor(t, "the second wakeup", func() bool { return len(wakeupTurns(w, "loop")) == 2 })
			}
			before := len(e.noticesTo("alice"))
			e.publish(stop)
			waitFor(t, "/stop's answer", func() bool { return len(e.noticesTo("alice")) > before })
			if got := e.noticesTo("alice")[before]; got != tc.want {
				t.Errorf("/stop: %q, want %q", got, tc.want)
			}
			// A redelivered /stop (the router crashed before recording it
			// handled) counts the wakeup once.
			e.loseHandled(stop)
			e.publishID(stop, "redelivered-"+stop.EventId)
			waitFor(t, "inbound drained", e.inboundDrained)
			// The redelivery sends the recorded answer again; it is
			// published before the event is acknowledged but may reach
			// the test's subscriber after the drain, so wait for it, or
			// /loop status below would read it as its own answer.
			waitFor(t, "the redelivered /stop's answer", func() bool { return len(e.noticesTo("alice")) > before+1 })
			if got := e.noticesTo("alice")[before+1]; got != tc.want {
				t.Errorf("redelivered /stop: %q, want the first answer %q", got, tc.want)
			}
			if got := e.ask("alice", "/loop status"); !strings.HasPrefix(got, tc.status) {
				t.Errorf("/loop status: %q, want %q…", got, tc.status)
			}
			if got := e.ask("alice", "/heartbeat status"); !strings.HasPrefix(got, "♥ Heartbeat (every 10m, next in ~") {
				t.Errorf("/heartbeat status: %q", got)
			}
		})
	}
	// The stopped loop's first wakeup was rescheduled from the stop, not
	// fired again at once; the finished one fires no more.
	e.makeDue(key)
	s.fireLoops(ctx)
	if n := len(wakeupTurns(w, "loop")); n != 2 {
		t.Errorf("%d wakeups after the loop finished", n)
	}
}
