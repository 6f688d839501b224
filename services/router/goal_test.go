package router

import (
	"context"
	"strings"
	"testing"

	turnsv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/turns/v1"
	"github.com/switchboard-chat/switchboard/pkg/goal"
	"github.com/switchboard-chat/switchboard/pkg/sessionstore"
)

// Hermes's /goal and /subgoal: a goal is set and its text runs as the
// next turn, which carries goal_active for the worker's judge; status,
// pause, resume (which queues the continuation prompt as the next turn),
// clear; /subgoal adds, lists, removes and clears criteria; /status
// shows the goal; /new leaves it with the old conversation; an
// unsupported subcommand of Hermes's and the API get their answers.
func TestGoalCommands(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.startRouter(testConfig(), nil, nil)
	w := e.startWorker(nil)
	n := 0
	activeOnNext := func() bool {
		t.Helper()
		n++
		text := "next message " + string(rune('a'+n))
		e.publish(dm("alice", text))
		return turnOf(t, w, text).GetGoalActive()
	}
	steps := []struct {
		text string
		want []string
	}{
		{"/goal", []string{goal.NoGoal}},
		{"/subgoal tests pass", []string{goal.NoGoal}},
		{"/goal pause", []string{"No goal set."}},
		{"/goal resume", []string{"No goal to resume."}},
		{"/goal clear", []string{"No active goal."}},
		{"/goal ship the release", []string{"⊙ Goal set (20-turn budget): ship the release\nI'll keep working until the goal is done, you pause/clear it, or the budget is exhausted.\nControls: /goal status · /goal pause · /goal resume · /goal clear"}},
		{"/goal status", []string{"⊙ Goal (active, 0/20 turns): ship the release"}},
		{"/subgoal tests pass", []string{"✓ Added subgoal 1: tests pass"}},
		{"/subgoal docs updated", []string{"✓ Added subgoal 2: docs updated"}},
		{"/subgoal remove 1", []string{"✓ Removed subgoal 1: tests pass"}},
		{"/subgoal remove 5", []string{"/subgoal remove: index out of range (1..1)"}},
		{"/subgoal remove x", []string{"/subgoal remove: <n> must be an integer (1-based index)."}},
		{"/subgoal", []string{"⊙ Goal (active, 0/20 turns, 1 subgoal): ship the release\n- 1. docs updated"}},
		{"/goal show", []string{"⊙ Goal (active, 0/20 turns, 1 subgoal): ship the release\n- 1. docs updated"}},
		{"/status", []string{"\n⊙ Goal (active, 0/20 turns, 1 subgoal): ship the release\n"}},
		{"/goal draft a launch plan", []string{"/goal draft is not available on this gateway"}},
		{"/goal pause", []string{"⏸ Goal paused: ship the release"}},
		{"/goal status", []string{"⏸ Goal (paused, 0/20 turns, 1 subgoal — user-paused): ship the release"}},
	}
	for _, st := range steps {
		got := e.ask("alice", st.text)
		for _, want := range st.want {
			if !strings.Contains(got, want) {
				t.Errorf("%s: %q, want it to contain %q", st.text, got, want)
			}
		}
	}
	// The kickoff: the goal's text ran as a turn, with the goal.
	if kick := turnOf(t, w, "ship the release"); !kick.GetGoalActive() {
		t.Error("the goal's first turn does not carry goal_active")
	}
	if activeOnNext() {
		t.Error("a turn of a paused goal carries goal_active")
	}
	// Resume queues Hermes's continuation prompt as the next turn.
	if got := e.ask("alice", "/goal resume"); !strings.HasPrefix(got, "▶ Goal resumed: ship the release\n") {
		t.Errorf("/goal resume: %q", got)
	}
	cont := (&goal.State{Goal: "ship the release", Subgoals: []string{"docs updated"}}).ContinuationPrompt()
	if tr := turnOf(t, w, cont); !tr.GetGoalActive() {
		t.Error("the continuation's turn does not carry goal_active")
	}
	if !activeOnNext() {
		t.Error("a turn of an active goal does not carry goal_active")
	}
	if got := e.ask("alice", "/subgoal clear"); got != "✓ Cleared 1 subgoal." {
		t.Errorf("/subgoal clear: %q", got)
	}
	if got := e.ask("alice", "/subgoal clear"); got != "No subgoals to clear." {
		t.Errorf("/subgoal clear again: %q", got)
	}
	if got := e.ask("alice", "/goal clear"); got != "✓ Goal cleared." {
		t.Errorf("/goal clear: %q", got)
	}
	if got := e.ask("alice", "/goal"); got != goal.NoGoal {
		t.Errorf("/goal after clear: %q", got)
	}
	if activeOnNext() {
		t.Error("a turn after /goal clear carries goal_active")
	}
	// /new: the goal stays with the conversation it was set in.
	e.ask("alice", "/goal write the changelog")
	turnOf(t, w, "write the changelog")
	e.ask("alice", "/new")
	if got := e.ask("alice", "/goal status"); got != goal.NoGoal {
		t.Errorf("/goal status after /new: %q", got)
	}
	if activeOnNext() {
		t.Error("a turn of the new conversation carries the old one's goal")
	}
	// Another chat has none.
	if got := e.ask("bob", "/goal status"); got != goal.NoGoal {
		t.Errorf("bob's /goal status: %q", got)
	}
	// The API: no chat waits for a continuation's answer.
	api := dm("x", "/goal serve the api")
	api.Source.Platform, api.Source.ChatId, api.Source.UserId = "api", "conv-1", ""
	api.TransportAuthenticated = true
	e.publish(api)
	waitFor(t, "the API's answer", func() bool {
		e.mu.Lock()
		defer e.mu.Unlock()
		for _, n := range e.notices {
			if n.GetNotice().GetText() == goalUnavailable {
				return true
			}
		}
		return false
	})
}

// /stop pauses an active goal (its stopped turn is not judged, and the
// next message must not restart the loop) and drops its waiting
// continuation without counting it as the user's message.
func TestStopPausesGoal(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.startRouter(testConfig(), nil, nil)
	release := make(chan struct{})
	w := e.startWorker(func(tr *turnsv1.TurnRequested) {
		if tr.GetInputs()[0].GetText() == "hold" {
			<-release
		}
	})
	defer close(release)
	e.ask("alice", "/goal tidy the garden")
	turnOf(t, w, "tidy the garden")
	e.publish(dm("alice", "hold"))
	turnOf(t, w, "hold")
	// A continuation waits behind the held turn, as the judge queues it.
	st := sessionstore.New(e.db)
	key := "agent:main:telegram:dm:chat-alice"
	sess, err := st.Get(context.Background(), key)
	if err != nil {
		t.Fatal(err)
	}
	cont := dm("alice", "[Continuing toward your standing goal]\nGoal: tidy the garden")
	cont.EventId = sessionstore.GoalEventPrefix + "turn-1"
	if err := st.EnqueueContinuation(context.Background(), key, cont); err != nil {
		t.Fatal(err)
	}
	got := e.ask("alice", "/stop")
	if !strings.HasPrefix(got, "⚡ Stopped.") || strings.Contains(got, "dropped") || !strings.Contains(got, "⏸ Goal paused: tidy the garden") {
		t.Errorf("/stop: %q", got)
	}
	g, err := st.Goal(context.Background(), key, sess.ID)
	if err != nil || g == nil || g.Status != goal.Paused || g.PausedReason != "stopped by /stop" {
		t.Errorf("goal after /stop: %+v, %v", g, err)
	}
	if n, err := st.QueueLen(context.Background(), key); err != nil || n != 0 {
		t.Errorf("queue after /stop: %d, %v", n, err)
	}
}

// A redelivered /goal sets the goal and queues its first turn once.
func TestGoalCommandOnce(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.startRouter(testConfig(), nil, nil)
	w := e.startWorker(nil)
	ev := dm("alice", "/goal count the stars")
	e.publish(ev)
	turnOf(t, w, "count the stars")
	// The router died before it recorded the event as handled: the
	// redelivery finds the effect committed.
	dedupe := e.prefix + "inbound:telegram:bot1:" + ev.GetEventId()
	waitFor(t, "the event recorded as handled", func() bool { return e.rdb.Exists(context.Background(), dedupe).Val() == 1 })
	if err := e.rdb.Del(context.Background(), dedupe).Err(); err != nil {
		t.Fatal(err)
	}
	e.publishID(ev, "after-crash:"+ev.GetEventId())
	waitFor(t, "the replayed answer", func() bool { return len(e.noticesTo("alice")) >= 2 })
	e.settle()
	if got := e.noticesTo("alice"); len(got) != 2 || got[0] != got[1] {
		t.Errorf("answers %q, want the first one again", got)
	}
	turns, _ := w.snapshot()
	kicks := 0
	for _, tr := range turns {
		for _, in := range tr.GetInputs() {
			if in.GetText() == "count the stars" {
				kicks++
			}
		}
	}
	if kicks != 1 {
		t.Errorf("%d first turns, want 1", kicks)
	}
}
