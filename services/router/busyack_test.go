package router

import (
	"context"
	"fmt"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	repliesv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/replies/v1"
	turnsv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/turns/v1"
	"github.com/switchboard-chat/switchboard/pkg/redisx"
)

// A busy acknowledgement ("⏳ Queued for the next turn", "⚡ Interrupting
// current task") reaches the chat before anything of the turn that
// answers its message: on the session's reply subject, whose order
// delivery keeps, it is ahead of the first reply of that turn, though
// the running turn ends (in interrupt mode, on the message's interrupt)
// and the next one starts with the message at the seam right after the
// message is queued (busyQueued). A message before it marked the lock,
// so the turn's completion starts what waits at once.
func TestBusyAckGoesBeforeTheNextTurnsReply(t *testing.T) {
	t.Parallel()
	for _, mode := range []string{BusyQueue, BusyInterrupt} {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			const key = "agent:main:telegram:dm:chat-bob"
			e := newEnv(t)
			cfg := testConfig()
			cfg.BusyMode = mode
			cfg.SweepInterval = time.Hour // the completion alone starts the next turn
			s, err := New(cfg, Deps{Bus: e.bus, DB: e.db, Redis: e.rdb, RedisPrefix: e.prefix, Environ: []string{}})
			if err != nil {
				t.Fatal(err)
			}
			g := newGate(t, "long job")
			var w atomic.Pointer[worker]
			second := dm("bob", "and this")
			var nextTurn atomic.Value // the id of the turn that takes second
			s.busyQueued = func(ctx context.Context, eventID string) {
				if eventID != second.GetEventId() {
					return
				}
				// Not waitFor: this runs on the router's goroutine.
				until := func(what string, cond func() bool) bool {
					for deadline := time.Now().Add(30 * time.Second); !cond(); time.Sleep(20 * time.Millisecond) {
						if time.Now().After(deadline) {
							t.Errorf("timed out waiting for %s", what)
							return false
						}
					}
					return true
				}
				if mode == BusyInterrupt && !until("the interrupt", func() bool {
					return slices.ContainsFunc(e.controls(controlInterrupt), func(c *turnsv1.TurnControlRequested) bool {
						return c.GetEventId() == "telegram:bot1:"+second.GetEventId()
					})
				}) {
					return
				}
				// The running turn ends (in interrupt mode on the
				// interrupt, as a worker's does), and the next starts.
				g.open()
				if !until("the next turn", func() bool { turns, _ := w.Load().snapshot(); return len(turns) == 2 }) {
					return
				}
				turns, _ := w.Load().snapshot()
				next := turns[1]
				if got := inputsText(turns[1:], key); !slices.Contains(got, "and this") {
					t.Errorf("the next turn's inputs %q, want the message in them", got)
				}
				// Its worker's first reply.
				reply := &repliesv1.ReplyEvent{TurnId: next.GetTurnId(), SessionKey: key, Generation: next.GetGeneration(), Seq: 1,
					Target: target(second), Body: &repliesv1.ReplyEvent_TextDelta{TextDelta: &repliesv1.TextDelta{Text: "Here is"}}}
				if _, err := e.bus.Publish(ctx, e.bus.Topology().ReplySubject(key), fmt.Sprintf("reply:%s:1", next.GetTurnId()), reply); err != nil {
					t.Error(err)
				}
				nextTurn.Store(next.GetTurnId())
			}
			runRouter(ctx, t, s)
			w.Store(e.startWorker(g.hold))
			defer g.open()

			e.publish(dm("bob", "long job"))
			waitFor(t, "the turn runs", func() bool { turns, _ := w.Load().snapshot(); return len(turns) == 1 })
			first := dm("bob", "first")
			e.publish(first)
			waitFor(t, "the first message handled", func() bool { return len(e.answersTo(first)) == 1 && e.inboundDrained() })
			// The acknowledgement interval is over: the next message
			// is acknowledged too.
			if err := e.rdb.Del(ctx, e.prefix+"busyack:"+key).Err(); err != nil {
				t.Fatal(err)
			}
			e.publish(second)
			waitFor(t, "the message's acknowledgement", func() bool { return len(e.answersTo(second)) == 1 })
			// The acknowledgement may go out before the next turn starts
			// (it must): wait for that turn and its reply.
			var next string
			waitFor(t, "the next turn's reply", func() bool { next, _ = nextTurn.Load().(string); return next != "" })
			order := e.storedReplyTurns(key)
			ack, answer := slices.Index(order, "notice:telegram:bot1:"+second.GetEventId()), slices.Index(order, next)
			if ack < 0 || answer < 0 || ack > answer {
				t.Fatalf("replies stream %q: want the acknowledgement %q (at %d) ahead of the next turn's reply (at %d)",
					order, e.answersTo(second)[0].GetNotice().GetText(), ack, answer)
			}
		})
	}
}

// storedReplyTurns are the turn ids of the session key's events on the
// replies stream, in the stream's order: the order delivery reads them in.
func (e *env) storedReplyTurns(key string) []string {
	e.t.Helper()
	var out []string
	for _, ev := range e.storedReplies() {
		if ev.GetSessionKey() == key {
			out = append(out, ev.GetTurnId())
		}
	}
	return out
}

// TestBusyAckOnAPoolOfOneConnection: the busy acknowledgement goes out
// inside the transaction that queues its message, and what it reads (the
// session's generation) goes through that transaction. Read through the
// pool, it waited for a second connection, which a router whose
// connections were all held by such transactions never got: here, a
// pool of one.
func TestBusyAckOnAPoolOfOneConnection(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	pcfg := e.db.Config()
	pcfg.MaxConns = 1
	pool, err := pgxpool.NewWithConfig(context.Background(), pcfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	e.db = pool
	cfg := testConfig()
	cfg.BusyMode = BusyQueue
	cfg.SweepInterval = time.Hour // the grant stays the running turn's
	e.startRouter(cfg, nil, nil)
	key := "agent:main:telegram:dm:chat-bob"
	if err := e.rdb.Set(context.Background(), redisx.NewLocker(e.rdb, e.prefix).Key(key), redisx.NewGrant(time.Now()), time.Hour).Err(); err != nil {
		t.Fatal(err)
	}
	if got, want := e.ask("bob", "are you there?"), "⏳ Queued for the next turn. I'll respond once the current task finishes."; got != want {
		t.Fatalf("ack %q, want %q", got, want)
	}
}

// Steering no running turn takes is queued before the turn is asked
// (the turn takes it from the queue), and acknowledged after, by what
// became of it: the running turn may end in between, and its completion
// started the next turn with the message, whose replies reached the chat
// ahead of "⏳ Queued" (the user told "queued" after the message ran).
// The session's turn starts now wait for the acknowledgement. Here the
// running turn ends at the seam (busyQueued) and the test waits a while
// for the next turn: it must not start before the acknowledgement.
// Steering whose request failed (the answer could not be read) is
// queued and answered the same way: it went unanswered, the route
// failing with the error, and ran in the next turn.
func TestDeclinedSteerIsAcknowledgedBeforeTheNextTurn(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name string
		mode string
		text string // the steering message
		ack  string // its acknowledgement
		in   string // its text as the next turn's input
		fail bool   // the steering request fails (no answer to read), not declined
	}{
		{name: "busy mode steer", mode: BusySteer, text: "and this", in: "and this",
			ack: "⏳ Queued for the next turn. I'll respond once the current task finishes."},
		{name: "/steer", mode: BusyQueue, text: "/steer and this", in: "and this",
			ack: "⏳ The current task is finishing — /steer queued for the next turn."},
		// As Hermes falls back to its queue when steer() raises.
		{name: "busy mode steer whose request fails", mode: BusySteer, text: "and this", in: "and this", fail: true,
			ack: "⏳ Queued for the next turn. I'll respond once the current task finishes."},
		{name: "/steer whose request fails", mode: BusyQueue, text: "/steer and this", in: "and this", fail: true,
			ack: "⚠️ Steer failed — /steer queued for the next turn."},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			const key = "agent:main:telegram:dm:chat-bob"
			e := newEnv(t)
			e.refuseControl.Store(!tc.fail) // the running turn's answer is decided
			e.failControl.Store(tc.fail)
			cfg := testConfig()
			cfg.BusyMode = tc.mode
			cfg.SweepInterval = time.Hour // the completion alone starts the next turn
			s, err := New(cfg, Deps{Bus: e.bus, DB: e.db, Redis: e.rdb, RedisPrefix: e.prefix, Environ: []string{}})
			if err != nil {
				t.Fatal(err)
			}
			g := newGate(t, "long job")
			var w atomic.Pointer[worker]
			steer := dm("bob", tc.text)
			var early atomic.Value // the id of a next turn that started before the acknowledgement
			reply := func(next *turnsv1.TurnRequested) {
				// The next turn's first reply.
				ev := &repliesv1.ReplyEvent{TurnId: next.GetTurnId(), SessionKey: key, Generation: next.GetGeneration(), Seq: 1,
					Target: target(steer), Body: &repliesv1.ReplyEvent_TextDelta{TextDelta: &repliesv1.TextDelta{Text: "Here is"}}}
				if _, err := e.bus.Publish(ctx, e.bus.Topology().ReplySubject(key), fmt.Sprintf("reply:%s:1", next.GetTurnId()), ev); err != nil {
					t.Error(err)
				}
			}
			s.busyQueued = func(ctx context.Context, eventID string) {
				if eventID != steer.GetEventId() {
					return
				}
				// The running turn ends; the next may start. Not waitFor:
				// this runs on the router's goroutine, and the wait ends
				// without the next turn when the fix holds it back.
				g.open()
				for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
					if turns, _ := w.Load().snapshot(); len(turns) == 2 {
						reply(turns[1])
						early.Store(turns[1].GetTurnId())
						return
					}
				}
			}
			runRouter(ctx, t, s)
			w.Store(e.startWorker(g.hold))
			defer g.open()

			e.publish(dm("bob", "long job"))
			waitFor(t, "the turn runs", func() bool { turns, _ := w.Load().snapshot(); return len(turns) == 1 })
			// A message queued before marks the lock: the running turn's
			// completion starts what waits.
			first := dm("bob", "first")
			e.publish(first)
			waitFor(t, "the first message handled", func() bool { return len(e.answersTo(first)) == 1 && e.inboundDrained() })
			if err := e.rdb.Del(ctx, e.prefix+"busyack:"+key).Err(); err != nil {
				t.Fatal(err)
			}
			e.publish(steer)
			waitFor(t, "the steering's acknowledgement", func() bool { return len(e.answersTo(steer)) == 1 })
			if got := e.answersTo(steer)[0].GetNotice().GetText(); got != tc.ack {
				t.Fatalf("acknowledgement %q, want %q", got, tc.ack)
			}
			waitFor(t, "the next turn", func() bool { turns, _ := w.Load().snapshot(); return len(turns) == 2 })
			turns, _ := w.Load().snapshot()
			if got := inputsText(turns[1:], key); !slices.Contains(got, tc.in) {
				t.Fatalf("the next turn's inputs %q, want the steering in them", got)
			}
			if early.Load() == nil {
				reply(turns[1])
			}
			waitFor(t, "the next turn's reply", func() bool { return slices.Contains(e.storedReplyTurns(key), turns[1].GetTurnId()) })
			order := e.storedReplyTurns(key)
			ack, answer := slices.Index(order, "notice:telegram:bot1:"+steer.GetEventId()), slices.Index(order, turns[1].GetTurnId())
			if ack < 0 || answer < 0 || ack > answer {
				t.Fatalf("replies stream %q: want the acknowledgement (at %d) ahead of the next turn's reply (at %d)", order, ack, answer)
			}
		})
	}
}
