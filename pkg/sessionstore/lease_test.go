package sessionstore

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	eventsv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/events/v1"
	"github.com/switchboard-chat/switchboard/pkg/pg/pgtest"
)

// recordEnd records the end of the turn id as its worker does with its
// answer (its worker_turns row), which does not end the turn's lease:
// the turn may still run under its lock (a voice reply, a goal step).
func recordEnd(t *testing.T, s *Store, id string) {
	t.Helper()
	if _, err := s.pool.Exec(context.Background(), `INSERT INTO worker_turns (turn_id, session_key, session_id, generation)
		VALUES ($1, '', '', 0) ON CONFLICT (turn_id) DO NOTHING`, id); err != nil {
		t.Fatal(err)
	}
}

// endTurn ends the turn id as its worker does as it lets go of the
// session lock: its end recorded, then its lease ended. Once its start
// committed: until then the lease's row is the start's, which a publish
// callback cannot end (the worker's end waits for that commit).
func endTurn(t *testing.T, s *Store, id string) {
	t.Helper()
	recordEnd(t, s, id)
	if _, err := s.pool.Exec(context.Background(), `DELETE FROM turn_leases WHERE turn_id = $1`, id); err != nil {
		t.Fatal(err)
	}
}

// A started turn holds its session in Postgres (migration 00148) until
// its worker ends its lease as it lets go of its lock, the session moves
// on (/stop, /new), or the lease expires: meanwhile no start, free or
// from the queue, starts another turn, whatever the Redis lock says
// (Redis may have lost it while the turn ran). Its recorded end (its
// answer) does not end it: the turn runs on under its lock (a voice
// reply, a goal step). The messages stay queued for the turn's end.
func TestTurnStartsWaitForTheLeasedTurn(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := New(pgtest.New(t)).WithTurnLease(time.Hour)
	src := &eventsv1.SessionSource{Platform: "telegram", ChatId: "1"}
	tests := []struct {
		name string
		// free: the first turn is a free start (BeginFree), not one
		// from the queue.
		free bool
		// after the first turn started, before the next message.
		after func(t *testing.T, key, turn string)
		// whether the next message starts.
		starts bool
	}{
		{"running, free start", true, func(*testing.T, string, string) {}, false},
		{"running, queued start", false, func(*testing.T, string, string) {}, false},
		{"answered, still under its lock", true, func(t *testing.T, _, turn string) { recordEnd(t, s, turn) }, false},
		{"ended", false, func(t *testing.T, _, turn string) { endTurn(t, s, turn) }, true},
		{"stopped", true, func(t *testing.T, key, _ string) {
			if _, _, _, err := s.Stop(ctx, key); err != nil {
				t.Fatal(err)
			}
		}, true},
		{"new conversation", false, func(t *testing.T, key, _ string) {
			if _, err := s.Reset(ctx, key, "new"); err != nil {
				t.Fatal(err)
			}
		}, true},
		{"expired", true, func(t *testing.T, key, _ string) {
			if _, err := s.pool.Exec(ctx, `UPDATE turn_leases SET expires_at = now() - interval '1 second' WHERE session_key = $1`, key); err != nil {
				t.Fatal(err)
			}
		}, true},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			key := fmt.Sprintf("agent:main:telegram:dm:lease-%d", i)
			first := &eventsv1.MessageReceived{EventId: "a", Text: "first", Source: src}
			firstTurn := "turn-a-" + key
			publish := func(context.Context, Turn) error { return nil }
			var err error
			started := false
			if tt.free {
				_, started, err = s.BeginFree(ctx, key, "", src, first, firstTurn).Start(ctx, func(Arrival) bool { return true }, publish)
			} else {
				if _, _, err := s.ArriveAndEnqueue(ctx, key, "", src, 1, false, first, 32); err != nil {
					t.Fatal(err)
				}
				started, err = s.StartTurn(ctx, key, firstTurn, 32, 0, publish)
			}
			if err != nil || !started {
				t.Fatalf("first turn: started %v, %v", started, err)
			}
			var leased string
			var gen int64
			var secs float64
			if err := s.pool.QueryRow(ctx, `SELECT turn_id, generation, extract(epoch FROM expires_at - now()) FROM turn_leases WHERE session_key = $1`, key).
				Scan(&leased, &gen, &secs); err != nil {
				t.Fatal(err)
			}
			left := time.Duration(secs * float64(time.Second))
			if cur, _ := s.Generation(ctx, key); leased != firstTurn || gen != cur || left < 59*time.Minute || left > time.Hour {
				t.Fatalf("lease of turn %q, generation %d (session at %d), %s left; want the first turn's, at its generation, for the hour",
					leased, gen, cur, left)
			}
			tt.after(t, key, firstTurn)
			want := firstTurn
			if tt.starts {
				want = ""
			}
			if running, err := s.RunningTurn(ctx, key); err != nil || running != want {
				t.Fatalf("running turn %q (%v), want %q", running, err, want)
			}
			// What a /stop or /new that moved the session past the
			// lease's generation reads of the turn it fenced (FencedTurn):
			// the turn, unless it ended or its lease expired.
			wantFenced := firstTurn
			if tt.name == "ended" || tt.name == "expired" {
				wantFenced = ""
			}
			if fenced, err := s.FencedTurn(ctx, key, gen); err != nil || fenced != wantFenced {
				t.Fatalf("fenced turn of generation %d %q (%v), want %q", gen, fenced, err, wantFenced)
			}
			before, err := s.Generation(ctx, key)
			if err != nil {
				t.Fatal(err)
			}

			// The next message, as a free start: refused while the lease
			// holds (the router then queues it).
			next := &eventsv1.MessageReceived{EventId: "b", Text: "next", Source: src}
			var published []string
			record := func(_ context.Context, turn Turn) error {
				for _, q := range turn.Inputs {
					published = append(published, q.Event.GetText())
				}
				return nil
			}
			_, started, err = s.BeginFree(ctx, key, "", src, next, "turn-b-"+key).Start(ctx, func(Arrival) bool { return true }, record)
			if err != nil || started != tt.starts {
				t.Fatalf("free start of the next message: started %v, %v; want started %v", started, err, tt.starts)
			}
			if tt.starts {
				return
			}
			if gen, _ := s.Generation(ctx, key); gen != before || len(published) > 0 {
				t.Fatalf("a refused free start published %q and left the session at generation %d (was %d)", published, gen, before)
			}
			// A start from the empty queue (a completion, the sweep, a
			// message started by a start before it) finds nothing to
			// start: no turn waits for the lease.
			started, err = s.StartTurn(ctx, key, "turn-e-"+key, 32, 0, record)
			if err != nil || started {
				t.Fatalf("start from the empty queue: started %v, %v; want neither", started, err)
			}
			// Queued, its start finds the turn running and takes nothing.
			if _, err := s.Enqueue(ctx, key, 2, false, next, 32); err != nil {
				t.Fatal(err)
			}
			started, err = s.StartTurn(ctx, key, "turn-c-"+key, 32, 0, record)
			if !errors.Is(err, ErrTurnRunning) || started {
				t.Fatalf("queued start: started %v, %v; want ErrTurnRunning", started, err)
			}
			if n, _ := s.QueueLen(ctx, key); n != 1 || len(published) > 0 {
				t.Fatalf("%d queued after a refused start that published %q, want the message kept", n, published)
			}
			// The turn ends: its completion starts the message.
			endTurn(t, s, firstTurn)
			started, err = s.StartTurn(ctx, key, "turn-d-"+key, 32, 0, record)
			if err != nil || !started || len(published) != 1 || published[0] != "next" {
				t.Fatalf("start after the turn ended: started %v, %v, published %q", started, err, published)
			}
		})
	}
}

// FlushTurn tells a memory flush's lease from any other turn's: the
// router's mark of a running flush is in Redis, lost with the lock, and
// a message or a command then meets the flush as with the lock held.
func TestFlushTurnTellsAMemoryFlush(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := New(pgtest.New(t)).WithTurnLease(time.Hour)
	const key = "agent:main:telegram:dm:flushing"
	src := &eventsv1.SessionSource{Platform: "telegram", ChatId: "1", UserId: "alice"}
	publish := func(context.Context, Turn) error { return nil }
	leased := func(want, turnID string, flush bool) {
		t.Helper()
		running, err := s.RunningTurn(ctx, key)
		if err != nil || running != turnID {
			t.Fatalf("%s: running turn %q (%v), want %q", want, running, err, turnID)
		}
		if f, err := s.FlushTurn(ctx, key, turnID); err != nil || f != flush {
			t.Fatalf("%s: flush %v (%v), want %v", want, f, err, flush)
		}
	}
	if _, _, err := s.ArriveAndEnqueue(ctx, key, "", src, 1, false, &eventsv1.MessageReceived{EventId: "a", Text: "hi", Source: src}, 32); err != nil {
		t.Fatal(err)
	}
	if started, err := s.StartTurn(ctx, key, "turn-a", 32, 0, publish); err != nil || !started {
		t.Fatalf("message's turn: started %v, %v", started, err)
	}
	leased("a message's turn", "turn-a", false)
	sess, err := s.Get(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.pool.Exec(ctx, `INSERT INTO worker_turns (turn_id, session_key, session_id, generation, status)
		VALUES ('turn-a', $1, $2, $3, 'completed')`, key, sess.ID, sess.Generation); err != nil {
		t.Fatal(err)
	}
	endTurn(t, s, "turn-a")
	if _, err := s.ResetKeepingQueue(ctx, key, "new", &eventsv1.MessageReceived{Source: src}); err != nil {
		t.Fatal(err)
	}
	if started, err := s.StartTurn(ctx, key, "turn-flush", 32, 0, publish); err != nil || !started {
		t.Fatalf("flush: started %v, %v", started, err)
	}
	leased("the flush", "turn-flush", true)
	if f, err := s.FlushTurn(ctx, key, "turn-a"); err != nil || f {
		t.Fatalf("an earlier turn read as the flush: %v, %v", f, err)
	}
}
