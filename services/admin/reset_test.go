package admin

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/switchboard-chat/switchboard/pkg/bus"
	"github.com/switchboard-chat/switchboard/pkg/bus/bustest"
	adminv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/admin/v1"
	eventsv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/events/v1"
	repliesv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/replies/v1"
	turnsv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/turns/v1"
	"github.com/switchboard-chat/switchboard/pkg/pg/pgtest"
	"github.com/switchboard-chat/switchboard/pkg/redisx"
	"github.com/switchboard-chat/switchboard/pkg/redisx/redistest"
	"github.com/switchboard-chat/switchboard/pkg/sessionstore"
)

// The admin API's reset answers the API requests whose waiting messages
// it drops with an "interrupted" error at once, as the router's /new
// and /stop do (they waited for their reply timeout); a chat's dropped
// messages get nothing, as with /new. When the answers cannot go out
// (NATS unreachable) the reset fails and changes nothing: no request is
// dropped unanswered.
func TestResetSessionAnswersTheAPIRequestsItDrops(t *testing.T) {
	t.Parallel()
	b := bustest.New(t, bustest.EmbeddedURL(t))
	const text = "Stopped before it ran: an operator reset this conversation and dropped this waiting message."
	for _, tt := range []struct {
		name    string
		bus     func(context.Context) (*bus.Bus, error)
		reset   bool     // the reset is done
		answers []string // the requests answered
	}{
		{"answered", func(context.Context) (*bus.Bus, error) { return b, nil }, true, []string{"req-2", "req-3"}},
		{"NATS unreachable", func(context.Context) (*bus.Bus, error) { return nil, errors.New("nats: no servers available") }, false, nil},
	} {
		t.Run(tt.name, func(t *testing.T) {
			ctx := context.Background()
			db := pgtest.New(t)
			store := sessionstore.New(db)
			key := "agent:main:api:dm:conv-" + tt.name
			api := func(id, text string) *eventsv1.MessageReceived {
				return &eventsv1.MessageReceived{EventId: id, MessageId: id, Text: text,
					Source: &eventsv1.SessionSource{Platform: "api", Account: "default", ChatId: "conv", ChatType: "dm", UserId: "client"}}
			}
			chat := &eventsv1.MessageReceived{EventId: "tg-1", MessageId: "m1", Text: "hi",
				Source: &eventsv1.SessionSource{Platform: "telegram", Account: "bot", ChatId: "c", ChatType: "dm", UserId: "u"}}
			before, _, _, err := store.Arrive(ctx, key, "", api("req-1", "x").Source, "req-1")
			if err != nil {
				t.Fatal(err)
			}
			for i, ev := range []*eventsv1.MessageReceived{api("req-2", "next"), chat, api("req-3", "and next")} {
				if _, err := store.Enqueue(ctx, key, int64(i+1), true, ev, 10); err != nil {
					t.Fatal(err)
				}
			}

			replies := listen(t, b, b.Topology().ReplySubject(key), func() *repliesv1.ReplyEvent { return &repliesv1.ReplyEvent{} })
			answers := func() map[string]*repliesv1.ReplyEvent {
				got := map[string]*repliesv1.ReplyEvent{}
				for _, ev := range replies() {
					for _, id := range ev.GetInputMessageIds() {
						got[id] = ev
					}
				}
				return got
			}

			c, authed := serve(t, ctx, Config{}, Deps{DB: db, Bus: tt.bus})
			reset, err := c.ResetSession(authed, &adminv1.ResetSessionRequest{SessionKey: key})
			if (err == nil) != tt.reset {
				t.Fatalf("reset: %v, want done %v", err, tt.reset)
			}
			after, err := store.Get(ctx, key)
			if err != nil {
				t.Fatal(err)
			}
			waiting, err := store.QueueLen(ctx, key)
			if err != nil {
				t.Fatal(err)
			}
			if !tt.reset {
				if after.ID != before.ID || after.Generation != before.Generation || waiting != 3 {
					t.Errorf("a failed reset left session %s gen %d with %d waiting, want %s gen %d with 3", after.ID, after.Generation, waiting, before.ID, before.Generation)
				}
				return
			}
			if reset.GetSession().GetGeneration() != before.Generation+1 || waiting != 0 {
				t.Errorf("reset to generation %d with %d waiting, want %d with none", reset.GetSession().GetGeneration(), waiting, before.Generation+1)
			}
			waitFor(t, "the dropped requests answered", func() bool { return len(answers()) >= len(tt.answers) })
			got := answers()
			for _, id := range tt.answers {
				ev := got[id]
				if ev == nil || ev.GetError().GetCode() != "interrupted" || ev.GetError().GetMessage() != text ||
					ev.GetTurnId() != "stopped:"+id || ev.GetSessionKey() != key || ev.GetGeneration() != after.Generation ||
					ev.GetTarget().GetPlatform() != "api" || ev.GetTarget().GetChatId() != "conv" || ev.GetSeq() != 1 {
					t.Errorf("answer to %s: %v", id, ev)
				}
			}
			if len(got) != len(tt.answers) {
				t.Errorf("answers to %d messages, want %d (the chat's gets none)", len(got), len(tt.answers))
			}
		})
	}
}

// The admin API's reset stops the session's running turn, as the
// router's /new does (a stop control on the session's control subject,
// for whichever turn runs there, before the reset commits), instead of
// only fencing the turn's writes off by the new generation: the turn
// ends at once, its tools and model call cut short. When the stop
// cannot go out (NATS unreachable) the reset fails and changes nothing.
// A session with no turn that may run (none ever started, or its last
// turn decided: the worker's worker_turns row) needs no stop: its reset
// is a Postgres operation, done with NATS unreachable, and sends none.
func TestResetSessionStopsTheRunningTurn(t *testing.T) {
	t.Parallel()
	b := bustest.New(t, bustest.EmbeddedURL(t))
	up := func(context.Context) (*bus.Bus, error) { return b, nil }
	down := func(context.Context) (*bus.Bus, error) { return nil, errors.New("nats: no servers available") }
	for _, tt := range []struct {
		name  string
		turn  string // "", "running", "fenced" or "decided": the session's last turn
		bus   func(context.Context) (*bus.Bus, error)
		reset bool   // the reset is done
		stop  bool   // a stop went out
		lock  string // the session lock's value before the reset
		kept  bool   // the reset leaves the lock as it was
	}{
		{"running stopped", "running", up, true, true, redisx.Holder("turn-1", "worker-1"), false},
		{"running not yet claimed stopped", "running", up, true, true, "turn-1", false},
		{"running NATS unreachable", "running", down, false, false, redisx.Holder("turn-1", "worker-1"), true},
		// The last turn was stopped (fenced off, no worker_turns row: it
		// may run) and a router holds a new grant for a message whose
		// start waits for the reset's lock of the session row: that
		// turn of the new conversation keeps its lock.
		{"new turn's grant kept", "running", up, true, true, "turn-2", true},
		// The last turn was stopped by /stop and its worker recorded
		// its end once it stopped (worker_turns, status fenced): no
		// turn may run, and the reset needs no NATS.
		{"fenced and ended NATS unreachable", "fenced", down, true, false, "", true},
		{"decided", "decided", up, true, false, "", true},
		{"decided NATS unreachable", "decided", down, true, false, "", true},
		{"never a turn NATS unreachable", "", down, true, false, "", true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			ctx := context.Background()
			db := pgtest.New(t)
			store := sessionstore.New(db)
			key := "agent:main:telegram:dm:" + tt.name
			src := &eventsv1.SessionSource{Platform: "telegram", ChatId: tt.name, ChatType: "dm", UserId: "u"}
			if _, _, _, err := store.Arrive(ctx, key, "", src, "tg-1"); err != nil {
				t.Fatal(err)
			}
			if tt.turn != "" {
				// The router starts a turn of the message, as it does.
				if _, err := store.Enqueue(ctx, key, 1, true, &eventsv1.MessageReceived{EventId: "tg-1", MessageId: "m1", Text: "hi", Source: src}, 10); err != nil {
					t.Fatal(err)
				}
				started, err := store.StartTurn(ctx, key, "turn-1", 8, 0, func(context.Context, sessionstore.Turn) error { return nil })
				if err != nil || !started {
					t.Fatalf("start turn: %v, started %v", err, started)
				}
			}
			if tt.turn == "fenced" {
				// As the router's /stop, then the stopped worker's
				// record of the turn's end (store.RecordFenced).
				if _, _, _, err := store.Stop(ctx, key); err != nil {
					t.Fatal(err)
				}
				if _, err := db.Exec(ctx, `INSERT INTO worker_turns (turn_id, session_key, session_id, generation, status)
					SELECT 'turn-1', session_key, session_id, generation - 1, 'fenced' FROM sessions WHERE session_key = $1`, key); err != nil {
					t.Fatal(err)
				}
			}
			if tt.turn == "decided" {
				// As the worker's Finish records the turn's final.
				if _, err := db.Exec(ctx, `INSERT INTO worker_turns (turn_id, session_key, session_id, generation, status, final_kind, final_text)
					SELECT 'turn-1', session_key, session_id, generation, 'completed', 'text', 'hello' FROM sessions WHERE session_key = $1`, key); err != nil {
					t.Fatal(err)
				}
			}
			before, err := store.Get(ctx, key)
			if err != nil {
				t.Fatal(err)
			}
			// As a worker running the session's turn listens, and holds
			// its lock.
			controls := listen(t, b, b.Topology().ControlSubject(key), func() *turnsv1.TurnControlRequested { return &turnsv1.TurnControlRequested{} })
			rdb, prefix := redistest.New(t)
			locks := redisx.NewLocker(rdb, prefix)
			if tt.lock != "" {
				if err := rdb.Set(ctx, locks.Key(key), tt.lock, time.Minute).Err(); err != nil {
					t.Fatal(err)
				}
			}
			openLocks := func(context.Context) (SessionLocks, error) { return locks, nil }

			c, authed := serve(t, ctx, Config{}, Deps{DB: db, Bus: tt.bus, Locks: openLocks})
			reset, resetErr := c.ResetSession(authed, &adminv1.ResetSessionRequest{SessionKey: key})
			if (resetErr == nil) != tt.reset {
				t.Fatalf("reset: %v, want done %v", resetErr, tt.reset)
			}
			after, err := store.Get(ctx, key)
			if err != nil {
				t.Fatal(err)
			}
			if !tt.reset {
				if status.Code(resetErr) != codes.Unavailable {
					t.Errorf("reset: %v, want Unavailable", resetErr)
				}
				if after.ID != before.ID || after.Generation != before.Generation {
					t.Errorf("a failed reset left session %s gen %d, want %s gen %d", after.ID, after.Generation, before.ID, before.Generation)
				}
				if owner, err := locks.Owner(ctx, key); err != nil || owner != tt.lock {
					t.Errorf("a failed reset left the lock to %q (%v), want the turn's %q", owner, err, tt.lock)
				}
				return
			}
			// The stopped turn's lock is let go, as the router's /new
			// lets it go: a message sent while the turn winds down
			// starts a turn of the new conversation, no busy answer.
			// Only its lock: a grant of another turn is kept.
			want := ""
			if tt.kept {
				want = tt.lock
			}
			if owner, err := locks.Owner(ctx, key); err != nil || owner != want {
				t.Errorf("after the reset the lock is %q (%v), want %q", owner, err, want)
			}
			if reset.GetSession().GetGeneration() != before.Generation+1 || after.ID == before.ID {
				t.Errorf("reset to %s generation %d, want a new conversation at %d", after.ID, reset.GetSession().GetGeneration(), before.Generation+1)
			}
			// A control round trip after the reset: a stop, published
			// before it, has reached the subscription by then.
			if err := b.Conn().Flush(); err != nil {
				t.Fatal(err)
			}
			if tt.stop {
				waitFor(t, "the stop", func() bool { return len(controls()) > 0 })
			}
			got := controls()
			if !tt.stop {
				if len(got) != 0 {
					t.Errorf("controls %v to a session with no turn that may run, want none", got)
				}
				return
			}
			if len(got) != 1 || got[0].GetAction() != turnsv1.ControlAction_CONTROL_ACTION_STOP || got[0].GetSessionKey() != key || got[0].GetTurnId() != "" {
				t.Errorf("controls %v, want one stop of the session's running turn", got)
			}
		})
	}
}

// listen collects the messages of type M published on subject from now
// on (the subscription is flushed before it returns); the func it
// returns gives those received so far.
func listen[M proto.Message](t *testing.T, b *bus.Bus, subject string, newMsg func() M) func() []M {
	t.Helper()
	var mu sync.Mutex
	var got []M
	sub, err := b.Conn().Subscribe(subject, func(m *nats.Msg) {
		msg := newMsg()
		if err := proto.Unmarshal(m.Data, msg); err != nil {
			t.Error(err)
			return
		}
		mu.Lock()
		defer mu.Unlock()
		got = append(got, msg)
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	if err := b.Conn().Flush(); err != nil {
		t.Fatal(err)
	}
	return func() []M {
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(got)
	}
}
