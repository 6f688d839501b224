package router

import (
	"context"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	eventsv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/events/v1"
	repliesv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/replies/v1"
	turnsv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/turns/v1"
	"github.com/switchboard-chat/switchboard/pkg/redisx"
	"github.com/switchboard-chat/switchboard/pkg/sessionstore"
)

// TestMemoryFlushBeforeTheNewConversation: a conversation that had a
// turn and ends (an idle reset, /new) gets exactly one memory flush turn,
// on the conversation that ended and with no input, before the new
// conversation's first turn; with memory off, none. A message that
// arrives while the flush runs waits for it, with no busy
// acknowledgement and no interrupt.
func TestMemoryFlushBeforeTheNewConversation(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		memory bool
		end    func(e *env, later func())
		flush  int
		during bool // "back again" arrives while the flush runs
	}{
		{"idle reset", true, func(e *env, later func()) { later() }, 1, false},
		{"new", true, func(e *env, _ func()) { e.ask("alice", "/new") }, 1, false},
		{"message during the flush", true, func(e *env, _ func()) { e.ask("alice", "/new") }, 1, true},
		{"new with memory off", false, func(e *env, _ func()) { e.ask("alice", "/new") }, 0, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			cfg := testConfig()
			cfg.SessionReset.Mode, cfg.SessionReset.IdleMinutes = ResetIdle, 60
			cfg.MemoryFlush = tc.memory
			clock := e.startRouterOnClock(cfg, time.Now())
			entered, release := make(chan struct{}, 1), make(chan struct{})
			w := e.startWorker(func(tr *turnsv1.TurnRequested) {
				if tc.during && tr.GetMemoryFlush() {
					entered <- struct{}{}
					<-release
				}
			})
			key := "agent:main:telegram:dm:chat-alice"
			idle := func() bool { return e.lockOf(key) == "" }

			e.publish(dm("alice", "hello"))
			waitFor(t, "first turn", func() bool { turns, _ := w.snapshot(); return len(turns) == 1 })
			waitFor(t, "first turn done", idle)
			first, err := sessionstore.New(e.db).Get(context.Background(), key)
			if err != nil {
				t.Fatal(err)
			}
			// The worker's record of the finished turn (this fake worker
			// writes none): the conversation had a turn.
			turns, _ := w.snapshot()
			if _, err := e.db.Exec(context.Background(), `INSERT INTO worker_turns (turn_id, session_key, session_id, generation, status, started_at, updated_at)
				VALUES ($1, $2, $3, $4, 'completed', $5, $5)`, turns[0].TurnId, key, turns[0].SessionId, turns[0].Generation, clock.Now()); err != nil {
				t.Fatal(err)
			}
			tc.end(e, func() { clock.advance(61 * time.Minute) })
			if tc.during {
				select {
				case <-entered:
				case <-time.After(30 * time.Second):
					t.Fatal("no flush turn")
				}
			}
			e.publish(dm("alice", "back again"))
			if tc.during {
				// Handled (queued, and anything it had to say said)
				// while the flush still runs.
				waitFor(t, "the message handled", e.inboundDrained)
				close(release)
			}
			want := 2 + tc.flush
			waitFor(t, "the new conversation's first turn", func() bool {
				turns, _ := w.snapshot()
				return len(turns) > 0 && len(turns[len(turns)-1].GetInputs()) == 1 && turns[len(turns)-1].GetInputs()[0].GetText() == "back again"
			})
			waitFor(t, "its end", idle)
			turns, _ = w.snapshot()
			if len(turns) != want {
				t.Fatalf("%d turns, want %d", len(turns), want)
			}
			var flushes []*turnsv1.TurnRequested
			for _, tr := range turns {
				if tr.GetMemoryFlush() {
					flushes = append(flushes, tr)
				}
			}
			if len(flushes) != tc.flush {
				t.Fatalf("%d memory flush turns, want %d", len(flushes), tc.flush)
			}
			last := turns[len(turns)-1]
			if last.GetMemoryFlush() || len(last.GetInputs()) != 1 || last.GetInputs()[0].GetText() != "back again" || last.GetSessionId() == first.ID {
				t.Fatalf("last turn: flush %v, inputs %v, session %s (old %s)", last.GetMemoryFlush(), last.GetInputs(), last.GetSessionId(), first.ID)
			}
			// Notices of the chat arrive in order: anything said about
			// "back again" comes before this answer.
			e.ask("alice", "/status")
			for _, n := range e.noticesTo("alice") {
				if strings.Contains(n, "Interrupting") || strings.Contains(n, "Queued for the next turn") {
					t.Errorf("the user was told of the flush: %q", n)
				}
			}
			if c := e.controls(turnsv1.ControlAction_CONTROL_ACTION_INTERRUPT); len(c) != 0 {
				t.Errorf("%d interrupts sent", len(c))
			}
			if tc.flush == 0 {
				return
			}
			f := turns[1]
			if !f.GetMemoryFlush() || f.GetSessionId() != first.ID || len(f.GetInputs()) != 0 {
				t.Fatalf("second turn: flush %v, session %s (old %s), inputs %v", f.GetMemoryFlush(), f.GetSessionId(), first.ID, f.GetInputs())
			}
			if f.GetGeneration() >= last.GetGeneration() {
				t.Fatalf("flush generation %d not before the new conversation's %d", f.GetGeneration(), last.GetGeneration())
			}
		})
	}
}

// TestCommandsDuringMemoryFlush: while the memory flush of a conversation
// /new ended runs, the agent runs no task of the user's (Hermes runs the
// flush beside the chat): a command refused mid-turn is not refused, and
// /status reads idle. So too when Redis lost the flush's lock (and its
// mark) while it ran: only the flush's lease in Postgres (migration
// 00148) says a turn runs, and it says the turn is a flush.
func TestCommandsDuringMemoryFlush(t *testing.T) {
	t.Parallel()
	for _, lockLost := range []bool{false, true} {
		t.Run(map[bool]string{false: "lock held", true: "lock lost with Redis's data"}[lockLost], func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			cfg := testConfig()
			cfg.MemoryFlush = true
			s, err := New(cfg, Deps{Bus: e.bus, DB: e.db, Redis: e.rdb, RedisPrefix: e.prefix, Environ: []string{}})
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			go func() { done <- s.Run(ctx) }()
			defer func() { cancel(); <-done }()
			entered, release := make(chan struct{}, 1), make(chan struct{})
			defer close(release)
			w := e.startWorker(func(tr *turnsv1.TurnRequested) {
				if tr.GetMemoryFlush() {
					entered <- struct{}{}
					<-release
				}
			})
			key := "agent:main:telegram:dm:chat-alice"
			e.publish(dm("alice", "hello"))
			waitFor(t, "first turn", func() bool { turns, _ := w.snapshot(); return len(turns) == 1 })
			waitFor(t, "first turn done", func() bool { return e.lockOf(key) == "" })
			turns, _ := w.snapshot()
			if _, err := e.db.Exec(context.Background(), `INSERT INTO worker_turns (turn_id, session_key, session_id, generation, status, started_at, updated_at)
				VALUES ($1, $2, $3, $4, 'completed', now(), now())`, turns[0].TurnId, key, turns[0].SessionId, turns[0].Generation); err != nil {
				t.Fatal(err)
			}
			e.ask("alice", "/new")
			select {
			case <-entered:
			case <-time.After(30 * time.Second):
				t.Fatal("no flush turn")
			}
			if lockLost {
				locker := redisx.NewLocker(e.rdb, e.prefix)
				if err := e.rdb.Del(context.Background(), locker.Key(key), e.prefix+"flushing:"+key, e.prefix+"waiting:"+key).Err(); err != nil {
					t.Fatal(err)
				}
			}
			for _, tc := range []struct{ cmd, want string }{
				{"/title Trip plans", "Trip plans"},
				{"/usage", ""},
				{"/status", "State: idle"},
			} {
				got := e.ask("alice", tc.cmd)
				if strings.Contains(got, "can't run mid-turn") || !strings.Contains(got, tc.want) {
					t.Errorf("%s during the flush: %q, want no mid-turn refusal and %q", tc.cmd, got, tc.want)
				}
			}
			// A message waits for the flush, with no busy
			// acknowledgement and no interrupt.
			e.publish(dm("alice", "back again"))
			waitFor(t, "the message handled", e.inboundDrained)
			for _, n := range e.noticesTo("alice") {
				if strings.Contains(n, "Interrupting") || strings.Contains(n, "Queued for the next turn") {
					t.Errorf("the user was told of the flush: %q", n)
				}
			}
			if c := e.controls(turnsv1.ControlAction_CONTROL_ACTION_INTERRUPT); len(c) != 0 {
				t.Errorf("%d interrupts sent", len(c))
			}
		})
	}
}

// TestTypingWhileWaitingForTheMemoryFlush: a message that waits for a
// memory flush (the one that found its conversation due, one sent while
// /new's flush runs) shows typing in its chat for the wait, as a turn
// does from its start, and the indicator ends with the flush, before the
// message's own turn.
func TestTypingWhileWaitingForTheMemoryFlush(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		end  func(e *env, later func())
	}{
		{"the message that found the conversation due", func(e *env, later func()) { later() }},
		{"a message during the flush of /new", func(e *env, _ func()) { e.ask("alice", "/new") }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			cfg := testConfig()
			cfg.SessionReset.Mode, cfg.SessionReset.IdleMinutes = ResetIdle, 60
			cfg.MemoryFlush = true
			clock := e.startRouterOnClock(cfg, time.Now())
			w, entered, unblock := e.holdMemoryFlushes(t)
			key := "agent:main:telegram:dm:chat-alice"
			e.publish(dm("alice", "hello"))
			e.firstTurnDecided(t, w, key, clock.Now())
			tc.end(e, func() { clock.advance(61 * time.Minute) })
			e.publish(dm("alice", "back again"))
			flush := flushEntered(t, entered)
			typing := func(active bool) func() bool {
				return func() bool {
					for _, ev := range e.typingOf(flush) {
						if ev.GetTyping().GetActive() == active {
							return true
						}
					}
					return false
				}
			}
			waitFor(t, "typing while the message waits", typing(true))
			if on := e.typingOf(flush)[0]; !on.GetTyping().GetActive() || on.GetTarget().GetChatId() != "chat-alice" || on.GetTarget().GetPlatform() != "telegram" {
				t.Fatalf("first typing event of the flush: active %v to %v, want active to chat-alice", on.GetTyping().GetActive(), on.GetTarget())
			}
			unblock()
			waitFor(t, "the typing ended with the flush", typing(false))
			waitFor(t, "the message's turn", func() bool {
				turns, _ := w.snapshot()
				last := turns[len(turns)-1]
				return len(last.GetInputs()) == 1 && last.GetInputs()[0].GetText() == "back again"
			})
			if evs := e.typingOf(flush); evs[len(evs)-1].GetTyping().GetActive() {
				t.Errorf("the flush's last typing event starts the indicator again")
			}
		})
	}
}

// holdMemoryFlushes starts a worker that holds every memory flush turn
// until unblock is called (or the test ends: a failed wait must not
// leave a flush blocked, or the worker's cleanup would wait for it until
// the test binary's timeout), and tells each flush's turn id on entered.
func (e *env) holdMemoryFlushes(t *testing.T) (w *worker, entered <-chan string, unblock func()) {
	t.Helper()
	in, release := make(chan string, 1), make(chan struct{})
	w = e.startWorker(func(tr *turnsv1.TurnRequested) {
		if tr.GetMemoryFlush() {
			in <- tr.GetTurnId()
			<-release
		}
	})
	var released sync.Once
	unblock = func() { released.Do(func() { close(release) }) }
	t.Cleanup(unblock)
	return w, in, unblock
}

// firstTurnDecided waits for w's first turn, of session key, to end and
// records it decided at at in worker_turns, as the worker does, so the
// conversation counts as having had a turn (what a memory flush needs).
func (e *env) firstTurnDecided(t *testing.T, w *worker, key string, at time.Time) {
	t.Helper()
	waitFor(t, "first turn", func() bool { turns, _ := w.snapshot(); return len(turns) == 1 })
	waitFor(t, "first turn done", func() bool { return e.lockOf(key) == "" })
	turns, _ := w.snapshot()
	if turns[0].GetSessionKey() != key {
		t.Fatalf("session key %q, want %q", turns[0].GetSessionKey(), key)
	}
	if _, err := e.db.Exec(context.Background(), `INSERT INTO worker_turns (turn_id, session_key, session_id, generation, status, started_at, updated_at)
		VALUES ($1, $2, $3, $4, 'completed', $5, $5)`, turns[0].TurnId, key, turns[0].SessionId, turns[0].Generation, at); err != nil {
		t.Fatal(err)
	}
}

// flushEntered is the turn id of the next memory flush a worker of
// holdMemoryFlushes holds.
func flushEntered(t *testing.T, entered <-chan string) string {
	t.Helper()
	select {
	case id := <-entered:
		return id
	case <-time.After(30 * time.Second):
		t.Fatal("no flush turn")
		return ""
	}
}

// typingOf is the Typing reply events of turn turnID, in their order:
// of a memory flush, those of the indicators of the chats that wait for
// it too (flushTypingID).
func (e *env) typingOf(turnID string) []*repliesv1.ReplyEvent {
	e.mu.Lock()
	defer e.mu.Unlock()
	var out []*repliesv1.ReplyEvent
	for _, n := range e.notices {
		if (n.GetTurnId() == turnID || strings.HasPrefix(n.GetTurnId(), turnID+":typing:")) && n.GetTyping() != nil {
			out = append(out, n)
		}
	}
	return out
}

// TestTypingInEveryChatWaitingForTheMemoryFlush: the chats of one
// session (a WhatsApp contact writing from two devices, whose chat ids
// differ but whose session is one) both wait for its memory flush, and
// each shows typing until the flush ends, as the first does. Delivery
// keeps one indicator per turn id: each chat's indicator has its own.
func TestTypingInEveryChatWaitingForTheMemoryFlush(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	cfg := testConfig()
	cfg.MemoryFlush = true
	e.startRouter(cfg, nil, nil)
	w, entered, unblock := e.holdMemoryFlushes(t)
	phone, laptop := "15551234567:11@s.whatsapp.net", "15551234567:12@s.whatsapp.net"
	wa := func(chat, text string) *eventsv1.MessageReceived {
		id := nextEventID()
		return &eventsv1.MessageReceived{EventId: id, MessageId: "m" + id, Text: text,
			Source: &eventsv1.SessionSource{Platform: "whatsapp", Account: "bot1", ChatId: chat, ChatType: "dm", UserId: "alice", UserName: "alice"}}
	}
	key := "agent:main:whatsapp:dm:15551234567"
	e.publish(wa(phone, "hello"))
	e.firstTurnDecided(t, w, key, time.Now())
	e.publish(wa(phone, "/new"))
	flush := flushEntered(t, entered)
	e.publish(wa(phone, "from the phone"))
	e.publish(wa(laptop, "from the laptop"))
	// The last typing event of each chat's indicator, by chat.
	last := func() map[string]*repliesv1.ReplyEvent {
		ids := map[string]string{}
		out := map[string]*repliesv1.ReplyEvent{}
		for _, ev := range e.typingOf(flush) {
			chat := ev.GetTarget().GetChatId()
			if id, ok := ids[chat]; ok && id != ev.GetTurnId() {
				t.Fatalf("chat %s has two indicators: %s and %s", chat, id, ev.GetTurnId())
			}
			ids[chat] = ev.GetTurnId()
			out[chat] = ev
		}
		return out
	}
	waitFor(t, "typing in both chats", func() bool {
		l := last()
		return l[phone].GetTyping().GetActive() && l[laptop].GetTyping().GetActive()
	})
	l := last()
	if l[phone].GetTurnId() == l[laptop].GetTurnId() {
		t.Fatalf("both chats' typing is indicator %s: delivery shows it in the first chat alone", l[phone].GetTurnId())
	}
	unblock()
	waitFor(t, "the typing ended in both chats with the flush", func() bool {
		l := last()
		return len(l) == 2 && !l[phone].GetTyping().GetActive() && !l[laptop].GetTyping().GetActive()
	})
}

// TestResumeFlushesTheConversationItLeaves: as Hermes's /resume, a
// switch to another conversation of the chat runs the memory flush of
// the one it leaves (on it, with no input), when that one had a turn; a
// /resume that switches nothing (the conversation is the current one,
// or bare /resume, which lists them) flushes nothing.
func TestResumeFlushesTheConversationItLeaves(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	cfg := testConfig()
	cfg.MemoryFlush = true
	e.startRouter(cfg, nil, nil)
	w := e.startWorker(nil)
	key := "agent:main:telegram:dm:chat-alice"
	st := sessionstore.New(e.db)
	// A turn in the current conversation, as a worker records it (this
	// fake worker writes no record).
	turn := func(text string) sessionstore.Session {
		t.Helper()
		before, _ := w.snapshot()
		e.publish(dm("alice", text))
		waitFor(t, text, func() bool { turns, _ := w.snapshot(); return len(turns) > len(before) })
		waitFor(t, text+" done", func() bool { return e.lockOf(key) == "" })
		turns, _ := w.snapshot()
		tr := turns[len(turns)-1]
		if _, err := e.db.Exec(context.Background(), `INSERT INTO worker_turns (turn_id, session_key, session_id, generation, status, started_at, updated_at)
			VALUES ($1, $2, $3, $4, 'completed', now(), now())`, tr.TurnId, key, tr.SessionId, tr.Generation); err != nil {
			t.Fatal(err)
		}
		sess, err := st.Get(context.Background(), key)
		if err != nil {
			t.Fatal(err)
		}
		return sess
	}
	flushes := func() []string {
		turns, _ := w.snapshot()
		var out []string
		for _, tr := range turns {
			if tr.GetMemoryFlush() {
				if len(tr.GetInputs()) != 0 {
					t.Errorf("a flush turn with inputs %v", tr.GetInputs())
				}
				out = append(out, tr.GetSessionId())
			}
		}
		return out
	}
	first := turn("hello")
	e.ask("alice", "/new")
	waitFor(t, "the flush of /new", func() bool { return len(flushes()) == 1 })
	second := turn("again")
	// Numbered newest first: 1 is the current conversation, 2 the first.
	if got := e.ask("alice", "/resume 2"); !strings.Contains(got, "Resumed") {
		t.Fatalf("/resume 2: %q", got)
	}
	waitFor(t, "the flush of /resume", func() bool { return len(flushes()) == 2 })
	waitFor(t, "its end", func() bool { return e.lockOf(key) == "" })
	if got := flushes(); got[0] != first.ID || got[1] != second.ID {
		t.Fatalf("flushed conversations %v, want %s then %s", got, first.ID, second.ID)
	}
	for _, cmd := range []string{"/resume 2", "/resume"} {
		e.ask("alice", cmd)
	}
	// A turn after them: a flush they queued would run before it.
	turn("still here")
	if got := flushes(); len(got) != 2 {
		t.Fatalf("flushed conversations %v after /resume of the current one and bare /resume, want 2", got)
	}
}

// TestStopAndNewLeaveTheMemoryFlushRunning: as Hermes's, whose flush
// runs beside the chat where /stop finds no agent of the session and a
// second /new only starts another flush, /stop and /new during the
// flush of the conversation /new ended do not end it: it keeps the
// session's lock, /stop says no task runs, and a message sent next
// waits for the flush, then runs.
func TestStopAndNewLeaveTheMemoryFlushRunning(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ cmd, want string }{
		{"/stop", "No active task to stop."},
		{"/new", "✨ New session started."},
	} {
		t.Run(tc.cmd, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			cfg := testConfig()
			cfg.MemoryFlush = true
			e.startRouter(cfg, nil, nil)
			w, entered, unblock := e.holdMemoryFlushes(t)
			key := "agent:main:telegram:dm:chat-alice"
			e.publish(dm("alice", "hello"))
			e.firstTurnDecided(t, w, key, time.Now())
			e.ask("alice", "/new")
			flushEntered(t, entered)
			holder := e.lockOf(key)
			if got := e.ask("alice", tc.cmd); got != tc.want {
				t.Errorf("%s during the flush: %q, want %q", tc.cmd, got, tc.want)
			}
			if now := e.lockOf(key); now != holder {
				t.Fatalf("%s during the flush: the session's lock is %q, want the flush's %q", tc.cmd, now, holder)
			}
			e.publish(dm("alice", "back again"))
			ran := func() bool {
				turns, _ := w.snapshot()
				last := turns[len(turns)-1]
				return len(last.GetInputs()) == 1 && last.GetInputs()[0].GetText() == "back again"
			}
			unblock()
			waitFor(t, "the message's turn after the flush", ran)
		})
	}
}

// TestStopAndNewEndTheTypingOfTheMessagesTheyDrop: a message waiting
// for the memory flush shows typing; /stop and a second /new leave the
// flush running but drop the message, so its chat stops showing typing
// then, not when the flush ends.
func TestStopAndNewEndTheTypingOfTheMessagesTheyDrop(t *testing.T) {
	t.Parallel()
	for _, cmd := range []string{"/stop", "/new"} {
		t.Run(cmd, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			cfg := testConfig()
			cfg.MemoryFlush = true
			e.startRouter(cfg, nil, nil)
			w, entered, _ := e.holdMemoryFlushes(t)
			key := "agent:main:telegram:dm:chat-alice"
			e.publish(dm("alice", "hello"))
			e.firstTurnDecided(t, w, key, time.Now())
			e.ask("alice", "/new")
			flush := flushEntered(t, entered)
			e.publish(dm("alice", "waiting"))
			typing := func(active bool) func() bool {
				return func() bool {
					evs := e.typingOf(flush)
					return len(evs) > 0 && evs[len(evs)-1].GetTyping().GetActive() == active
				}
			}
			waitFor(t, "typing while the message waits", typing(true))
			e.ask("alice", cmd)
			waitFor(t, "the typing ended by "+cmd+" while the flush still runs", typing(false))
		})
	}
}

// TestMessageWaitsForAMemoryFlushPastItsMark: a memory flush that waits
// in the workers' backlog (its router's grant holds the session) for
// longer than 5 minutes is still a flush to a message that arrives: the
// message waits for it unannounced, as during its first minutes, and is
// answered once, after it. The flush's mark lived 5 minutes: the message
// then met a busy session, was told "⏳ Queued for the next turn" about
// a task the user never started, and sent the flush an interrupt.
func TestMessageWaitsForAMemoryFlushPastItsMark(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	cfg := testConfig()
	cfg.MemoryFlush = true
	cfg.SweepInterval = time.Hour // nothing but the flush's completion starts the message
	entered, release := make(chan string, 1), make(chan struct{})
	var released sync.Once
	unblock := func() { released.Do(func() { close(release) }) }
	t.Cleanup(unblock)
	e.beforeClaim = func(tr *turnsv1.TurnRequested) {
		if tr.GetMemoryFlush() {
			entered <- tr.GetTurnId()
			<-release
		}
	}
	e.startRouter(cfg, nil, nil)
	w := e.startWorker(nil)
	key := "agent:main:telegram:dm:chat-alice"
	e.publish(dm("alice", "hello"))
	e.firstTurnDecided(t, w, key, time.Now())
	e.ask("alice", "/new")
	flush := flushEntered(t, entered)
	if got := e.lockOf(key); got != flush {
		t.Fatalf("lock %q, want the flush's grant %q: the flush waits for a worker", got, flush)
	}
	e.redisLater(t, 5*time.Minute+time.Second)
	back := dm("alice", "back again")
	e.publish(back)
	waitFor(t, "the message handled", e.inboundDrained)
	unblock()
	waitFor(t, "the message's turn", func() bool {
		turns, _ := w.snapshot()
		return slices.ContainsFunc(turns, func(tr *turnsv1.TurnRequested) bool {
			return len(tr.GetInputs()) == 1 && tr.GetInputs()[0].GetText() == "back again"
		})
	})
	waitFor(t, "the session idle", func() bool { return e.lockOf(key) == "" })
	turns, _ := w.snapshot()
	var order []string
	for _, tr := range turns {
		switch {
		case tr.GetMemoryFlush():
			order = append(order, "flush")
		default:
			order = append(order, inputsText([]*turnsv1.TurnRequested{tr}, key)...)
		}
	}
	if got := strings.Join(order, "|"); got != "hello|flush|back again" {
		t.Fatalf("turns %q, want the message answered once, after the flush", got)
	}
	for _, n := range e.answersTo(back) {
		t.Errorf("the user was told of the flush: %q", n.GetNotice().GetText())
	}
	if c := e.controls(turnsv1.ControlAction_CONTROL_ACTION_INTERRUPT); len(c) != 0 {
		t.Errorf("%d interrupts sent to the flush", len(c))
	}
}

// redisLater makes the test's Redis keys d older: each key's time to
// live is cut by d, and a key with less left is deleted, as Redis
// expires it.
func (e *env) redisLater(t *testing.T, d time.Duration) {
	t.Helper()
	ctx := context.Background()
	var cursor uint64
	for {
		keys, next, err := e.rdb.Scan(ctx, cursor, e.prefix+"*", 100).Result()
		if err != nil {
			t.Fatal(err)
		}
		for _, k := range keys {
			ttl, err := e.rdb.PTTL(ctx, k).Result()
			if err != nil {
				t.Fatal(err)
			}
			switch {
			case ttl < 0: // no expiry (or gone meanwhile)
			case ttl <= d:
				err = e.rdb.Del(ctx, k).Err()
			default:
				err = e.rdb.PExpire(ctx, k, ttl-d).Err()
			}
			if err != nil {
				t.Fatal(err)
			}
		}
		if cursor = next; cursor == 0 {
			return
		}
	}
}
