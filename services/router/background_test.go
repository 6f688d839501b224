package router

import (
	"context"
	"regexp"
	"strings"
	"testing"

	eventsv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/events/v1"
	turnsv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/turns/v1"
	"github.com/switchboard-chat/switchboard/pkg/redisx"
	"github.com/switchboard-chat/switchboard/pkg/sessionkey"
	"github.com/switchboard-chat/switchboard/pkg/sessionstore"
)

var startedRe = regexp.MustCompile(`^🔄 Background task started: "(.*)"\nTask ID: (bg_\d{6}_[0-9a-f]{6})\nYou can keep chatting — results will appear when done\.$`)

// /background (and /bg) runs its prompt as a turn of a session of its
// own, beside the chat's running turn: Hermes's acknowledgement at once,
// a fresh session under a key derived from the chat's, the chat's model,
// answer only, the task's id on the turn; the chat's turn is neither
// interrupted nor queued behind, a redelivery starts nothing more, /stop
// in the chat leaves the task running, and the task's session is none of
// the chat's conversations (/sessions).
func TestBackgroundTaskRunsBesideTheChat(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.startRouter(testConfig(), nil, nil)
	g := newGate(t, "long job")
	defer g.open()
	release := make(chan struct{})
	defer close(release)
	// The chat's first turn and the task's run until the test lets them end.
	w := e.startWorker(func(t *turnsv1.TurnRequested) {
		if t.GetBackgroundTaskId() != "" {
			<-release
			return
		}
		g.hold(t)
	})
	e.publish(dm("alice", "long job"))
	waitFor(t, "the chat's turn runs", func() bool { turns, _ := w.snapshot(); return len(turns) == 1 })
	ctx := context.Background()
	store := sessionstore.New(e.db)
	chatKey := "agent:main:telegram:dm:chat-alice"
	// The free start commits the session after its turn is published.
	waitFor(t, "the chat's session", func() bool { _, err := store.Get(ctx, chatKey); return err == nil })
	if err := store.SetModel(ctx, chatKey, "gpt-fast"); err != nil {
		t.Fatal(err)
	}

	if got := e.ask("alice", "/background"); got != backgroundUsage {
		t.Fatalf("/background alone: %q", got)
	}
	prompt := "Summarize the top HN stories today and tell me which ones matter for our team"
	ev := dm("alice", "/bg "+prompt)
	e.publish(ev)
	waitFor(t, "the acknowledgement", func() bool { return e.countNotices("alice", "Background task started") == 1 })
	var ack string
	for _, n := range e.noticesTo("alice") {
		if strings.Contains(n, "Background task started") {
			ack = n
		}
	}
	mt := startedRe.FindStringSubmatch(ack)
	if mt == nil || mt[1] != prompt[:60]+"..." {
		t.Fatalf("acknowledgement %q", ack)
	}
	id := mt[2]
	taskKey := sessionkey.Background(chatKey, "", id)
	waitFor(t, "the task's turn", func() bool { turns, _ := w.snapshot(); return len(inputsText(turns, taskKey)) == 1 })
	turns, overlap := w.snapshot()
	var task *turnsv1.TurnRequested
	for _, tr := range turns {
		if tr.SessionKey == taskKey {
			task = tr
		}
	}
	in := task.GetInputs()[0]
	if task.GetBackgroundTaskId() != id || in.GetText() != prompt || !in.GetAnswerOnly() || task.GetModelOverride() != "gpt-fast" ||
		task.GetOrigin().GetChatId() != "chat-alice" || in.GetMessageId() != ev.GetMessageId() {
		t.Fatalf("the task's turn: id %q, input %q answer only %v, model %q, origin %v, message %q",
			task.GetBackgroundTaskId(), in.GetText(), in.GetAnswerOnly(), task.GetModelOverride(), task.GetOrigin(), in.GetMessageId())
	}
	sess, err := store.Get(ctx, chatKey)
	if err != nil {
		t.Fatal(err)
	}
	if task.GetSessionId() == sess.ID || len(overlap) != 0 {
		t.Fatalf("the task runs in the chat's conversation %s (overlaps %v)", sess.ID, overlap)
	}
	// The chat's turn was not interrupted, nothing waits behind it, and
	// its turns are the chat's own.
	if c := e.controls(controlInterrupt); len(c) != 0 {
		t.Fatalf("controls %v: /background interrupted the chat's turn", c)
	}
	if n, _ := store.QueueLen(ctx, chatKey); n != 0 {
		t.Fatalf("%d messages wait in the chat's session", n)
	}
	for _, tr := range turns {
		if tr.SessionKey != taskKey && tr.GetBackgroundTaskId() != "" {
			t.Fatalf("the chat's turn %s carries a task id", tr.TurnId)
		}
	}

	// A redelivery, after a crash that lost the dedupe record: no second
	// turn, the same task.
	if err := e.rdb.Del(ctx, e.dedupeKeyOf(ev)).Err(); err != nil {
		t.Fatal(err)
	}
	e.publishID(ev, "redelivered-"+ev.EventId)
	waitFor(t, "inbound drained", e.inboundDrained)
	if turns, _ := w.snapshot(); len(inputsText(turns, taskKey)) != 1 {
		t.Fatalf("the redelivery started the task again: %q", inputsText(turns, taskKey))
	}

	// /stop stops the chat's turn, not the task (as Hermes's).
	if got := e.ask("alice", "/stop"); !strings.HasPrefix(got, "⚡ Stopped.") {
		t.Fatalf("/stop: %q", got)
	}
	e.mu.Lock()
	for _, c := range e.control {
		if c.SessionKey == taskKey {
			t.Errorf("control %v reached the task", c)
		}
	}
	e.mu.Unlock()
	if owner, err := redisx.NewLocker(e.rdb, e.prefix).Owner(ctx, taskKey); err != nil || owner == "" {
		t.Fatalf("the task's lock after /stop: %q, %v", owner, err)
	}
	// The chat answers while the task runs.
	e.publish(dm("alice", "and now?"))
	waitFor(t, "the chat's next turn", func() bool {
		turns, _ := w.snapshot()
		return len(inputsText(turns, chatKey)) == 2
	})
	waitFor(t, "the chat's turn ends", func() bool {
		owner, err := redisx.NewLocker(e.rdb, e.prefix).Owner(ctx, chatKey)
		return err == nil && owner == ""
	})
	// /sessions lists the chat's conversation alone.
	if got := e.ask("alice", "/sessions"); strings.Contains(got, "2.") || !strings.Contains(got, "1. ") {
		t.Fatalf("/sessions: %q", got)
	}

	// An inbound event that claims the reserved platform is dropped.
	forged := dm("mallory", "hi")
	forged.Source.Platform = sessionkey.BackgroundPlatform
	e.publish(forged)
	waitFor(t, "inbound drained", e.inboundDrained)
	for _, tr := range func() []*turnsv1.TurnRequested { t, _ := w.snapshot(); return t }() {
		if strings.Contains(tr.SessionKey, "mallory") {
			t.Fatalf("a turn for the reserved platform: %s", tr.SessionKey)
		}
	}
}

func (e *env) dedupeKeyOf(ev *eventsv1.MessageReceived) string {
	return e.prefix + "inbound:" + ev.Source.Platform + ":" + ev.Source.Account + ":" + ev.EventId
}

// A task runs with the personality and reasoning effort its chat had when
// it was asked for (Hermes's are the agent's, so its task has them), not
// with /reasoning show (a task answers with its final answer alone, as
// Hermes's), and a later change in the chat leaves an asked-for task as
// it was.
func TestBackgroundTaskTakesTheChatsSettings(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	cfg := testConfig()
	cfg.Personalities["coder"] = "You are an expert programmer."
	e.startRouter(cfg, nil, nil)
	w := e.startWorker(nil)
	const chatKey = "agent:main:telegram:dm:chat-alice"
	for _, cmd := range []string{"/personality coder", "/reasoning high", "/reasoning show"} {
		if got := e.ask("alice", cmd); !strings.Contains(got, "✓") && !strings.Contains(got, "set to") {
			t.Fatalf("%s: %q", cmd, got)
		}
	}
	task := func(prompt string) (*turnsv1.TurnRequested, string) {
		t.Helper()
		e.publish(dm("alice", "/bg "+prompt))
		var turn *turnsv1.TurnRequested
		waitFor(t, "the task of "+prompt, func() bool {
			turns, _ := w.snapshot()
			for _, tt := range turns {
				if tt.GetBackgroundTaskId() != "" && tt.GetInputs()[0].GetText() == prompt {
					turn = tt
					return true
				}
			}
			return false
		})
		return turn, turn.SessionKey
	}
	turn, taskKey := task("first task")
	if turn.PersonalityPrompt != "You are an expert programmer." || turn.ReasoningEffort != "high" || turn.ShowReasoning {
		t.Fatalf("the task's turn: personality %q, effort %q, show %v", turn.PersonalityPrompt, turn.ReasoningEffort, turn.ShowReasoning)
	}
	// The chat changes its mind: the task asked for keeps what it had.
	e.ask("alice", "/personality none")
	e.ask("alice", "/reasoning reset")
	store := sessionstore.New(e.db)
	sess, err := store.Get(context.Background(), taskKey)
	if err != nil {
		t.Fatal(err)
	}
	if sess.Personality != "coder" || sess.ReasoningEffort != "high" || sess.ShowReasoning {
		t.Fatalf("the task's session after the chat's change: %q, %q, %v", sess.Personality, sess.ReasoningEffort, sess.ShowReasoning)
	}
	// A task asked for after it takes the chat's new (no) settings.
	turn, _ = task("second task")
	if turn.PersonalityPrompt != "" || turn.ReasoningEffort != "" || turn.ShowReasoning {
		t.Fatalf("the second task's turn: personality %q, effort %q, show %v", turn.PersonalityPrompt, turn.ReasoningEffort, turn.ShowReasoning)
	}
	if s, err := store.Get(context.Background(), chatKey); err != nil || !s.ShowReasoning {
		t.Fatalf("the chat's display: %v, %v", s.ShowReasoning, err)
	}
}
