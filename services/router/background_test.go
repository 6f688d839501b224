package router

import (
	"context"
	"fmt"
	"regexp"
	"strings"
	"sync"
	"testing"

	"github.com/redis/go-redis/v9"
	"google.golang.org/protobuf/types/known/timestamppb"

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
	e.loseHandled(ev)
	e.publishID(ev, "redelivered-"+ev.EventId)
	waitFor(t, "inbound drained", e.inboundDrained)
	if turns, _ := w.snapshot(); len(inputsText(turns, taskKey)) != 1 {
		t.Fatalf("the redelivery started the task again: %q", inputsText(turns, taskKey))
	}

	// /stop stops the chat's turn, not the task (as Hermes's). The
	// redelivery's replayed acknowledgement may reach the chat after the
	// inbound stream drained, so the answer is looked for, not taken as the
	// next notice.
	e.publish(dm("alice", "/stop"))
	waitFor(t, "the answer to /stop", func() bool { return e.countNotices("alice", "⚡ Stopped.") == 1 })
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

// loseHandled simulates a router that crashed after ev's effect committed
// but before the record that ev was handled (the Redis dedupe record) was
// kept: it waits for that record, then deletes it, so a republished ev is
// handled again. The record is written after the answer is published, so
// deleting it as soon as the answer arrives could race its write, and
// the "redelivery" would then be dropped as a duplicate.
func (e *env) loseHandled(ev *eventsv1.MessageReceived) {
	e.t.Helper()
	ctx := context.Background()
	key := e.dedupeKeyOf(ev)
	waitFor(e.t, "the event recorded as handled", func() bool { return e.rdb.Exists(ctx, key).Val() == 1 })
	if err := e.rdb.Del(ctx, key).Err(); err != nil {
		e.t.Fatal(err)
	}
}

// A task runs with the personality, reasoning effort and fast mode its chat had when
// it was asked for (Hermes's are the agent's, so its task has them), not
// with /reasoning show (a task answers with its final answer alone, as
// Hermes's), and a later change in the chat leaves an asked-for task as
// it was.
func TestBackgroundTaskTakesTheChatsSettings(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	cfg := testConfig()
	cfg.Personalities["coder"] = "You are an expert programmer."
	e.provider = Provider{Kind: "openai", Model: "gpt-5.4"}
	e.startRouter(cfg, nil, nil)
	w := e.startWorker(nil)
	const chatKey = "agent:main:telegram:dm:chat-alice"
	for _, cmd := range []string{"/personality coder", "/reasoning high", "/reasoning show", "/fast fast"} {
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
	if turn.PersonalityPrompt != "You are an expert programmer." || turn.ReasoningEffort != "high" || turn.ShowReasoning || turn.ServiceTier != "fast" {
		t.Fatalf("the task's turn: personality %q, effort %q, show %v, tier %q", turn.PersonalityPrompt, turn.ReasoningEffort, turn.ShowReasoning, turn.ServiceTier)
	}
	// The chat changes its mind: the task asked for keeps what it had.
	e.ask("alice", "/personality none")
	e.ask("alice", "/reasoning reset")
	e.ask("alice", "/fast normal")
	store := sessionstore.New(e.db)
	sess, err := store.Get(context.Background(), taskKey)
	if err != nil {
		t.Fatal(err)
	}
	if sess.Personality != "coder" || sess.ReasoningEffort != "high" || sess.ShowReasoning || sess.ServiceTier != "fast" {
		t.Fatalf("the task's session after the chat's change: %q, %q, %v, %q", sess.Personality, sess.ReasoningEffort, sess.ShowReasoning, sess.ServiceTier)
	}
	// A task asked for after it takes the chat's new (no) settings.
	turn, _ = task("second task")
	if turn.PersonalityPrompt != "" || turn.ReasoningEffort != "" || turn.ShowReasoning || turn.ServiceTier != "normal" {
		t.Fatalf("the second task's turn: personality %q, effort %q, show %v, tier %q", turn.PersonalityPrompt, turn.ReasoningEffort, turn.ShowReasoning, turn.ServiceTier)
	}
	if s, err := store.Get(context.Background(), chatKey); err != nil || !s.ShowReasoning {
		t.Fatalf("the chat's display: %v, %v", s.ShowReasoning, err)
	}
}

// router.background.max_running bounds the background tasks running at
// once in a chat, counted from stored state: a /background over it
// answers how many run and starts nothing; a task that ended, or whose
// worker died and let its lock expire, stops counting; a task whose
// message waits in its queue counts; another replica counts the same;
// a redelivered /background of an admitted task is not refused by it;
// 0 turns the bound off.
func TestBackgroundTasksCappedPerChat(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	cfg := testConfig()
	cfg.Background.MaxRunning = 2
	e.startRouter(cfg, nil, nil)
	var mu sync.Mutex
	release := map[string]chan struct{}{}
	ended := false // the test's body returned: no task is held from then on
	gate := func(prompt string) chan struct{} {
		mu.Lock()
		defer mu.Unlock()
		if release[prompt] == nil {
			release[prompt] = make(chan struct{})
			if ended {
				// A task handed to the worker after the body returned (a
				// redelivery) would hold the worker's stop, and the test,
				// for good.
				close(release[prompt])
			}
		}
		return release[prompt]
	}
	w := e.startWorker(func(tr *turnsv1.TurnRequested) {
		if tr.GetBackgroundTaskId() != "" {
			<-gate(tr.GetInputs()[0].GetText())
		}
	})
	defer func() {
		mu.Lock()
		defer mu.Unlock()
		ended = true
		for _, c := range release {
			select {
			case <-c:
			default:
				close(c)
			}
		}
	}()
	ctx := context.Background()
	const chatKey = "agent:main:telegram:dm:chat-alice"
	taskKeys := map[string]string{}
	started := func(prompt string) bool {
		turns, _ := w.snapshot()
		for _, tr := range turns {
			if tr.GetBackgroundTaskId() != "" && tr.GetInputs()[0].GetText() == prompt {
				taskKeys[prompt] = tr.SessionKey
				return true
			}
		}
		return false
	}
	refusals := func() int { return e.countNotices("alice", "already running in this chat") }
	ask := func(prompt string) *eventsv1.MessageReceived {
		t.Helper()
		ev := dm("alice", "/bg "+prompt)
		e.publish(ev)
		waitFor(t, "inbound drained", e.inboundDrained)
		return ev
	}
	mustStart := func(prompt string) *eventsv1.MessageReceived {
		t.Helper()
		ev := ask(prompt)
		waitFor(t, prompt+" starts", func() bool { return started(prompt) })
		return ev
	}
	mustRefuse := func(prompt string, want int) {
		t.Helper()
		ask(prompt)
		waitFor(t, prompt+" refused", func() bool { return refusals() == want })
		if started(prompt) {
			t.Fatalf("%s started over the cap", prompt)
		}
	}

	mustStart("task a")
	evB := dm("alice", "/bg task b")
	evB.ReceivedAt = timestamppb.Now() // as a gateway stamps it: the task's id
	e.publish(evB)
	waitFor(t, "task b starts", func() bool { return started("task b") })
	mustRefuse("task c", 1)
	var refusal string
	for _, n := range e.noticesTo("alice") {
		if strings.Contains(n, "already running") {
			refusal = n
		}
	}
	if refusal != "⏳ 2 background tasks already running in this chat (at most 2 at a time). Nothing was started: try again when one has finished (its result will appear here)." {
		t.Fatalf("refusal %q", refusal)
	}
	if e.countNotices("alice", "Background task started") != 2 {
		t.Fatalf("acknowledgements: %d", e.countNotices("alice", "Background task started"))
	}

	// A redelivery of an admitted task's command is not refused by it.
	e.loseHandled(evB)
	e.publishID(evB, "redelivered-"+evB.EventId)
	waitFor(t, "inbound drained", e.inboundDrained)
	if refusals() != 1 {
		t.Fatal("the redelivered /bg of an admitted task was refused")
	}

	// Task a ends: its lock is released and it stops counting.
	close(gate("task a"))
	waitFor(t, "task a ends", func() bool {
		owner, err := redisx.NewLocker(e.rdb, e.prefix).Owner(ctx, taskKeys["task a"])
		return err == nil && owner == ""
	})
	mustStart("task d")
	mustRefuse("task e", 2)

	// Task b's worker dies: its lock expires (deleted here) and nobody
	// takes its turn up; it stops counting. A second router replica, with
	// nothing in memory, counts the same.
	if err := e.rdb.Del(ctx, redisx.NewLocker(e.rdb, e.prefix).Key(taskKeys["task b"])).Err(); err != nil {
		t.Fatal(err)
	}
	e.startRouter(cfg, nil, nil)
	mustStart("task f")
	mustRefuse("task g", 3)

	// A task whose message waits in its queue counts.
	close(gate("task d"))
	waitFor(t, "task d ends", func() bool {
		owner, err := redisx.NewLocker(e.rdb, e.prefix).Owner(ctx, taskKeys["task d"])
		return err == nil && owner == ""
	})
	store := sessionstore.New(e.db)
	queuedKey := sessionkey.Background(chatKey, "", "bg_000000_queued")
	if _, _, _, err := store.Arrive(ctx, queuedKey, "", &eventsv1.SessionSource{Platform: "telegram", ChatId: "chat-alice"}, "ev-queued"); err != nil {
		t.Fatal(err)
	}
	if _, err := store.Enqueue(ctx, queuedKey, 1, true, dm("alice", "waiting task"), 8); err != nil {
		t.Fatal(err)
	}
	if err := e.rdb.ZAdd(ctx, e.prefix+"bgtasks:"+chatKey, redis.Z{Member: queuedKey}).Err(); err != nil {
		t.Fatal(err)
	}
	mustRefuse("task h", 4)

	// 0: no bound.
	cfg.Background.MaxRunning = 0
	e2 := newEnv(t)
	e2.startRouter(cfg, nil, nil)
	w2 := e2.startWorker(func(tr *turnsv1.TurnRequested) {
		if tr.GetBackgroundTaskId() != "" {
			<-gate("unbounded")
		}
	})
	for i := range 4 {
		e2.publish(dm("alice", fmt.Sprintf("/bg unbounded %d", i)))
	}
	waitFor(t, "four tasks run", func() bool {
		turns, _ := w2.snapshot()
		return len(turns) == 4
	})
	close(gate("unbounded"))
}

// A /background asked in a Responses request (whose message says its
// answer lists the turn's tool calls, lists_tool_calls) starts a task
// whose turn does not say so: the task's answer goes to the chat as a
// message of its own, which lists nothing, and a turn that said so would
// publish its tool calls' steps for nobody to list.
func TestBackgroundTaskListsNoToolCalls(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.startRouter(testConfig(), nil, nil)
	w := e.startWorker(nil)
	ev := dm("alice", "/background look it up")
	ev.AnswerOnly, ev.ListsToolCalls = true, true
	e.publish(ev)
	var task *turnsv1.TurnRequested
	waitFor(t, "the task's turn", func() bool {
		turns, _ := w.snapshot()
		for _, tr := range turns {
			if tr.GetBackgroundTaskId() != "" {
				task = tr
			}
		}
		return task != nil
	})
	in := task.GetInputs()[0]
	if in.GetText() != "look it up" || !in.GetAnswerOnly() || in.GetListsToolCalls() {
		t.Errorf("the task's input %q, answer only %v, lists tool calls %v; want answer only, listing none",
			in.GetText(), in.GetAnswerOnly(), in.GetListsToolCalls())
	}
}
