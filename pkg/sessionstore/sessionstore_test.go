package sessionstore

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	eventsv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/events/v1"
	"github.com/switchboard-chat/switchboard/pkg/pg/pgtest"
)

// TestStartTurnGrouping checks which waiting messages form one turn:
// the run of mergeable messages at the head, or one own-turn message.
func TestStartTurnGrouping(t *testing.T) {
	t.Parallel()
	tests := []struct {
		queue string // m = mergeable, o = own turn, in order
		max   int    // inputs per turn; 0: 32
		bytes int    // encoded bytes per turn beyond the first input (each about 105); 0: no bound
		want  []string
	}{
		{"m", 0, 0, []string{"0"}},
		{"mmm", 0, 0, []string{"0,1,2"}},
		{"oo", 0, 0, []string{"0", "1"}},
		{"mmomm", 0, 0, []string{"0,1", "2", "3,4"}},
		{"omo", 0, 0, []string{"0", "1", "2"}},
		{"mmmmm", 2, 0, []string{"0,1", "2,3", "4"}},
		{"mmmo", 2, 0, []string{"0,1", "2", "3"}},
		{"mmo", 1, 0, []string{"0", "1", "2"}},
		{"mmmmm", 0, 250, []string{"0,1", "2,3", "4"}},
		{"mmomm", 0, 400, []string{"0,1", "2", "3,4"}},
		{"mmm", 0, 50, []string{"0", "1", "2"}}, // the first input always goes
	}
	for _, tt := range tests {
		if tt.max == 0 {
			tt.max = 32
		}
		t.Run(fmt.Sprintf("%s/%d/%d", tt.queue, tt.max, tt.bytes), func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			s := New(pgtest.New(t))
			key := "agent:main:telegram:dm:1"
			if _, _, _, err := s.Arrive(ctx, key, "", &eventsv1.SessionSource{Platform: "telegram", ChatId: "1"}, ""); err != nil {
				t.Fatal(err)
			}
			// Enqueue in reverse seq order: the stream sequence decides.
			for i := len(tt.queue) - 1; i >= 0; i-- {
				ev := &eventsv1.MessageReceived{EventId: fmt.Sprint(i), Text: strings.Repeat("x", 100)}
				if _, err := s.Enqueue(ctx, key, int64(100+i), tt.queue[i] == 'o', ev, 32); err != nil {
					t.Fatal(err)
				}
			}
			var got []string
			var gens []int64
			var more []bool
			for {
				started, err := s.StartTurn(ctx, key, "t", tt.max, tt.bytes, func(_ context.Context, turn Turn) error {
					var texts []string
					for _, q := range turn.Inputs {
						texts = append(texts, q.Event.GetEventId())
					}
					got = append(got, strings.Join(texts, ","))
					gens = append(gens, turn.Generation)
					more = append(more, turn.More)
					return nil
				})
				if err != nil {
					t.Fatal(err)
				}
				if !started {
					break
				}
				endTurn(t, s, "t") // before the next start
			}
			if strings.Join(got, "|") != strings.Join(tt.want, "|") {
				t.Fatalf("turns %q, want %q", got, tt.want)
			}
			for i := 1; i < len(gens); i++ {
				if gens[i] != gens[i-1]+1 {
					t.Fatalf("generations %v not increasing by one per turn", gens)
				}
			}
			// Every turn but the last leaves messages queued behind it.
			for i, m := range more {
				if m != (i < len(more)-1) {
					t.Fatalf("turn %d of %d: More = %v", i+1, len(more), m)
				}
			}
		})
	}
}

func TestStartTurnRollsBackWhenPublishFails(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := New(pgtest.New(t))
	key := "k"
	if _, _, _, err := s.Arrive(ctx, key, "", &eventsv1.SessionSource{Platform: "x"}, ""); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Enqueue(ctx, key, 1, false, &eventsv1.MessageReceived{EventId: "e"}, 32); err != nil {
		t.Fatal(err)
	}
	boom := errors.New("bus down")
	if _, err := s.StartTurn(ctx, key, "t", 32, 0, func(context.Context, Turn) error { return boom }); !errors.Is(err, boom) {
		t.Fatalf("err %v", err)
	}
	sess, _ := s.Get(ctx, key)
	if n, _ := s.QueueLen(ctx, key); n != 1 || sess.Generation != 0 {
		t.Fatalf("after a failed publish: %d waiting, generation %d; want 1 and 0", n, sess.Generation)
	}
}

// A queued message started by a turn and then redelivered (the router
// died after queueing it, before it recorded the message as handled) is
// recognised as started: queueing it again or starting it free would
// answer it twice. The redelivery is the newest message the session has
// (its partition waits for it), so the last started event id catches it.
func TestDequeuedMessageIsStarted(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := New(pgtest.New(t))
	key := "k"
	src := &eventsv1.SessionSource{Platform: "x"}
	if _, _, _, err := s.Arrive(ctx, key, "", src, ""); err != nil {
		t.Fatal(err)
	}
	ev := func(id string) *eventsv1.MessageReceived { return &eventsv1.MessageReceived{EventId: id} }
	for i, id := range []string{"a", "b"} {
		if _, err := s.Enqueue(ctx, key, int64(i+1), false, ev(id), 32); err != nil {
			t.Fatal(err)
		}
	}
	started, err := s.StartTurn(ctx, key, "t1", 32, 0, func(context.Context, Turn) error { return nil })
	if err != nil || !started {
		t.Fatalf("start: %v %v", started, err)
	}
	if _, err := s.Enqueue(ctx, key, 2, false, ev("b"), 32); !errors.Is(err, ErrStarted) {
		t.Fatalf("queueing the redelivered message: %v, want ErrStarted", err)
	}
	_, started, err = s.BeginFree(ctx, key, "", src, ev("b"), "t2").Start(ctx, func(Arrival) bool { return true },
		func(context.Context, Turn) error { return nil })
	if err != nil || started {
		t.Fatalf("free start of the redelivered message: started %v, err %v", started, err)
	}
	if n, _ := s.QueueLen(ctx, key); n != 0 {
		t.Fatalf("%d queued after the redelivery", n)
	}
}

func TestEnqueueIsIdempotentAndCapped(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := New(pgtest.New(t))
	ev := func(id string) *eventsv1.MessageReceived { return &eventsv1.MessageReceived{EventId: id} }
	if ins, err := s.Enqueue(ctx, "k", 1, false, ev("a"), 2); err != nil || !ins {
		t.Fatal(ins, err)
	}
	if ins, err := s.Enqueue(ctx, "k", 1, false, ev("a"), 2); err != nil || ins {
		t.Fatalf("second enqueue of one event: %v %v", ins, err)
	}
	if _, err := s.Enqueue(ctx, "k", 2, false, ev("b"), 2); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Enqueue(ctx, "k", 3, false, ev("c"), 2); !errors.Is(err, ErrQueueFull) {
		t.Fatalf("over the cap: %v", err)
	}
	if ins, err := s.Enqueue(ctx, "k", 2, false, ev("b"), 2); err != nil || ins {
		t.Fatalf("redelivery at the cap: %v %v", ins, err)
	}
}

// The cap bounds the messages waiting as Waiting counts them: steering
// the turn holding the lock took takes no room while that turn holds it,
// and takes its room again once it does not (it waits for the next turn
// then, as any message).
func TestEnqueueCapLeavesOutSteering(t *testing.T) {
	t.Parallel()
	const turn = "g1.turn/worker-a"
	for _, tt := range []struct {
		name  string
		owner string
		full  bool
	}{
		{name: "the steered turn holds the lock", owner: turn},
		{name: "another turn holds it", owner: "g2.next/worker-b", full: true},
		{name: "no turn runs", full: true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			s := New(pgtest.New(t))
			ev := func(id string) *eventsv1.MessageReceived { return &eventsv1.MessageReceived{EventId: id} }
			for i, id := range []string{"s1", "s2"} {
				if _, err := s.EnqueueWhileHeld(ctx, "k", turn, int64(i+1), false, ev(id), 2); err != nil {
					t.Fatal(err)
				}
				if err := s.MarkSteering(ctx, "k", id, turn); err != nil {
					t.Fatal(err)
				}
			}
			ins, err := s.EnqueueWhileHeld(ctx, "k", tt.owner, 3, false, ev("m1"), 2)
			if tt.full {
				if !errors.Is(err, ErrQueueFull) {
					t.Fatalf("enqueue with two steering texts of another turn queued, cap 2: %v %v, want ErrQueueFull", ins, err)
				}
				return
			}
			if err != nil || !ins {
				t.Fatalf("enqueue beside the turn's steering: %v %v", ins, err)
			}
			if _, err := s.EnqueueWhileHeld(ctx, "k", tt.owner, 4, false, ev("m2"), 2); err != nil {
				t.Fatal(err)
			}
			if _, err := s.EnqueueWhileHeld(ctx, "k", tt.owner, 5, false, ev("m3"), 2); !errors.Is(err, ErrQueueFull) {
				t.Fatalf("third waiting message, cap 2: %v, want ErrQueueFull", err)
			}
		})
	}
}

func TestArriveCreatesOnceAndReportsThePreviousActivity(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := pgtest.New(t)
	clock := time.Date(2026, 11, 30, 8, 0, 0, 0, time.UTC)
	s := New(db).WithClock(func() time.Time { return clock })
	src := &eventsv1.SessionSource{Platform: "telegram", ChatId: "1", ChatType: "dm", UserName: "Alice"}

	steps := []struct {
		name        string
		at          time.Time
		userName    string
		wantCreated bool
		wantPrev    time.Time
	}{
		{"first message creates", clock, "Alice", true, time.Time{}},
		{"next message touches", clock.Add(time.Hour), "Alice B.", false, clock},
		{"and reports the last one", clock.Add(3 * time.Hour), "Alice B.", false, clock.Add(time.Hour)},
	}
	var id string
	for _, st := range steps {
		clock = st.at
		src.UserName = st.userName
		sess, created, prev, err := s.Arrive(ctx, "k", "main", src, "")
		if err != nil {
			t.Fatalf("%s: %v", st.name, err)
		}
		if created != st.wantCreated || !prev.Equal(st.wantPrev) {
			t.Fatalf("%s: created %v prev %v; want %v %v", st.name, created, prev, st.wantCreated, st.wantPrev)
		}
		if id == "" {
			id = sess.ID
		}
		if sess.ID != id || !sess.LastActivityAt.Equal(st.at) || sess.DisplayName != st.userName || sess.Profile != "main" {
			t.Fatalf("%s: session %+v", st.name, sess)
		}
	}
	hist, err := s.History(ctx, "k", 10)
	if err != nil || len(hist) != 1 || hist[0].SessionID != id {
		t.Fatalf("history %+v %v; want one conversation %s", hist, err, id)
	}
}

// A message recorded again (its handler failed after the arrival and runs
// again) sees the activity before its first recording, so the reset
// policy decides the same; after a reset it sees the reset, so it does
// not reset twice.
func TestArrivalAgainKeepsThePreviousActivity(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	clock := time.Date(2026, 11, 30, 8, 0, 0, 0, time.UTC)
	s := New(pgtest.New(t)).WithClock(func() time.Time { return clock })
	src := &eventsv1.SessionSource{Platform: "telegram", ChatId: "1", ChatType: "dm"}
	arrive := func(event string) time.Time {
		t.Helper()
		_, _, prev, err := s.Arrive(ctx, "k", "", src, event)
		if err != nil {
			t.Fatal(err)
		}
		return prev
	}
	start := clock
	arrive("x")
	clock = clock.Add(2 * time.Hour)
	if prev := arrive("m"); !prev.Equal(start) {
		t.Fatalf("first arrival of m: previous activity %v, want %v", prev, start)
	}
	clock = clock.Add(time.Second)
	if prev := arrive("m"); !prev.Equal(start) {
		t.Fatalf("m again: previous activity %v, want %v (before its first arrival)", prev, start)
	}
	clock = clock.Add(time.Second)
	if _, err := s.ResetKeepingQueue(ctx, "k", "idle", nil); err != nil {
		t.Fatal(err)
	}
	reset := clock
	clock = clock.Add(time.Second)
	if prev := arrive("m"); !prev.Equal(reset) {
		t.Fatalf("m again after its reset: previous activity %v, want the reset %v", prev, reset)
	}
	last := clock
	clock = clock.Add(time.Minute)
	if prev := arrive("n"); !prev.Equal(last) {
		t.Fatalf("the next message: previous activity %v, want %v", prev, last)
	}
	if prev := arrive(""); !prev.Equal(clock) {
		t.Fatalf("an arrival without an event id: previous activity %v, want %v", prev, clock)
	}
}

// ArriveAndEnqueue is Arrive and Enqueue in one transaction, with both
// answers; a reset keeping the queue leaves the messages queued for the
// new conversation, and a plain one drops them.
func TestArriveAndEnqueue(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	clock := time.Date(2026, 11, 30, 8, 0, 0, 0, time.UTC)
	s := New(pgtest.New(t)).WithClock(func() time.Time { return clock })
	src := &eventsv1.SessionSource{Platform: "telegram", ChatId: "1", ChatType: "dm", UserName: "Alice"}
	ev := func(id string) *eventsv1.MessageReceived { return &eventsv1.MessageReceived{EventId: id, Source: src} }

	steps := []struct {
		name         string
		event        string
		wantCreated  bool
		wantInserted bool
		wantErr      error
	}{
		{"first message creates and queues", "a", true, true, nil},
		{"a redelivery queues nothing", "a", false, false, nil},
		{"the next one queues", "b", false, true, nil},
		{"over the cap", "c", false, false, ErrQueueFull},
	}
	var first Arrival
	for i, st := range steps {
		clock = clock.Add(time.Minute)
		a, ins, err := s.ArriveAndEnqueue(ctx, "k", "main", src, int64(i+1), false, ev(st.event), 2)
		if !errors.Is(err, st.wantErr) || ins != st.wantInserted || a.Created != st.wantCreated {
			t.Fatalf("%s: created %v inserted %v err %v", st.name, a.Created, ins, err)
		}
		if i == 0 {
			first = a
			continue
		}
		// Every arrival is recorded, even one the full queue refused; a
		// redelivered message's previous activity is the one before its
		// first arrival (none: it created the session).
		wantPrev := clock.Add(-time.Minute)
		if st.event == "a" {
			wantPrev = time.Time{}
		}
		if a.Session.ID != first.Session.ID || !a.Session.LastActivityAt.Equal(clock) || !a.Prev.Equal(wantPrev) {
			t.Fatalf("%s: arrival %+v, want previous activity %v", st.name, a, wantPrev)
		}
	}
	sess, err := s.ResetKeepingQueue(ctx, "k", "idle", nil)
	if err != nil || sess.ID == first.Session.ID {
		t.Fatalf("reset: %+v %v", sess, err)
	}
	if n, err := s.QueueLen(ctx, "k"); err != nil || n != 2 {
		t.Fatalf("after a reset keeping the queue: %d waiting (%v), want a and b", n, err)
	}
	// /new's reset returns what it dropped, in queue order, for the
	// router to answer (as Stop's).
	_, dropped, err := s.ResetDropping(ctx, "k", "new", nil)
	var ids []string
	for _, q := range dropped {
		ids = append(ids, q.Event.GetEventId())
	}
	if err != nil || strings.Join(ids, ",") != "a,b" {
		t.Fatalf("reset dropped %v (%v), want a,b", ids, err)
	}
	if n, err := s.QueueLen(ctx, "k"); err != nil || n != 0 {
		t.Fatalf("after a reset: %d waiting (%v), want none", n, err)
	}
	if _, err := s.Reset(ctx, "k", "new"); err != nil {
		t.Fatal(err)
	}
}

// Messages queued under a key with no session row start nothing and stay.
func TestStartTurnWithoutSessionTakesNothing(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := New(pgtest.New(t))
	if _, err := s.Enqueue(ctx, "orphan", 1, false, &eventsv1.MessageReceived{EventId: "a"}, 8); err != nil {
		t.Fatal(err)
	}
	started, err := s.StartTurn(ctx, "orphan", "t", 8, 0, func(context.Context, Turn) error {
		t.Error("published a turn without a session")
		return nil
	})
	if err != nil || started {
		t.Fatalf("started %v err %v", started, err)
	}
	if n, err := s.QueueLen(ctx, "orphan"); err != nil || n != 1 {
		t.Fatalf("queue %d %v, want the message kept", n, err)
	}
}

// A free start (BeginFree, then Start) starts a message to an idle
// session as its own turn without queueing it, and only when that keeps
// the session's order and the caller's decision; a redelivery of a
// started message is refused.
func TestStartFree(t *testing.T) {
	t.Parallel()
	src := &eventsv1.SessionSource{Platform: "telegram", ChatId: "1"}
	type step struct {
		event   string
		queued  bool // the message waits in the queue before the start
		proceed bool
		failPub bool
		started bool
		gen     int64 // the session's generation afterwards
		enqueue error // Enqueue of the same message afterwards
	}
	tests := []struct {
		name  string
		steps []step
	}{
		{"new session", []step{{event: "a", proceed: true, started: true, gen: 1, enqueue: ErrStarted}}},
		{"next message", []step{
			{event: "a", proceed: true, started: true, gen: 1},
			{event: "b", proceed: true, started: true, gen: 2, enqueue: ErrStarted}}},
		{"redelivery of the started message", []step{
			{event: "a", proceed: true, started: true, gen: 1},
			{event: "a", proceed: true, started: false, gen: 1, enqueue: ErrStarted}}},
		{"messages wait", []step{
			{event: "a", queued: true, proceed: true, started: false, gen: 0}}},
		{"caller says no", []step{
			{event: "a", proceed: true, started: true, gen: 1},
			{event: "b", proceed: false, started: false, gen: 1}}},
		{"publish fails", []step{
			{event: "a", proceed: true, started: true, gen: 1},
			{event: "b", proceed: true, failPub: true, started: false, gen: 1}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			s := New(pgtest.New(t))
			key := "agent:main:telegram:dm:1"
			for i, st := range tt.steps {
				ev := &eventsv1.MessageReceived{EventId: st.event, Text: "text " + st.event}
				if st.queued {
					if _, _, err := s.ArriveAndEnqueue(ctx, key, "", src, 1, false, &eventsv1.MessageReceived{EventId: "earlier"}, 32); err != nil {
						t.Fatal(err)
					}
				}
				var published []Turn
				proceed := func(Arrival) bool { return st.proceed }
				errPub := errors.New("bus down")
				_, started, err := s.BeginFree(ctx, key, "", src, ev, fmt.Sprint("turn-", i)).Start(ctx, proceed, func(_ context.Context, turn Turn) error {
					published = append(published, turn)
					if st.failPub {
						return errPub
					}
					return nil
				})
				if st.failPub {
					if !errors.Is(err, errPub) {
						t.Fatalf("step %d: err %v, want the publish error", i, err)
					}
				} else if err != nil {
					t.Fatalf("step %d: %v", i, err)
				}
				if started != st.started {
					t.Fatalf("step %d: started %v, want %v", i, started, st.started)
				}
				if started {
					endTurn(t, s, fmt.Sprint("turn-", i)) // before the next start
				}
				if st.started {
					if len(published) != 1 || published[0].Generation != st.gen || len(published[0].Inputs) != 1 ||
						published[0].Inputs[0].Event.GetText() != "text "+st.event || published[0].Session.ID == "" {
						t.Fatalf("step %d: published %+v", i, published)
					}
				} else if st.proceed && !st.failPub && len(published) != 0 {
					t.Fatalf("step %d: published %+v for a message not started", i, published)
				}
				gen, err := s.Generation(ctx, key)
				if err != nil && !errors.Is(err, ErrNotFound) {
					t.Fatal(err)
				}
				if gen != st.gen {
					t.Fatalf("step %d: generation %d, want %d", i, gen, st.gen)
				}
				if st.enqueue != nil {
					if _, err := s.Enqueue(ctx, key, 2, false, ev, 32); !errors.Is(err, st.enqueue) {
						t.Fatalf("step %d: enqueue again: %v, want %v", i, err, st.enqueue)
					}
				}
			}
		})
	}
}

// What a free start holds until its commit, from its first round trip:
// the generation's lock (a worker's fenced write waits), and the queue's
// lock, taken with the arrival (an enqueue waits, so the start's check
// that nothing waits cannot miss a message queued meanwhile).
func TestStartFreeHoldsUntilCommit(t *testing.T) {
	t.Parallel()
	// Advisory locks are the database's, not a schema's: each case has a
	// key of its own, or the parallel cases would wait for each other.
	tests := []struct {
		name  string
		key   string
		wait  func(ctx context.Context, db *pgxpool.Pool, s *Store, key string, turn Turn) error
		after func(ctx context.Context, s *Store, key string) error
	}{
		{"a fenced write", "agent:main:telegram:dm:holds-fence", func(ctx context.Context, db *pgxpool.Pool, _ *Store, key string, turn Turn) error {
			_, err := db.Exec(ctx, `SELECT switchboard_fence($1, $2)`, key, turn.Generation)
			return err
		}, nil},
		{"an enqueue", "agent:main:telegram:dm:holds-queue", func(ctx context.Context, _ *pgxpool.Pool, s *Store, key string, _ Turn) error {
			_, err := s.Enqueue(ctx, key, 2, false, &eventsv1.MessageReceived{EventId: "b"}, 32)
			return err
		}, func(ctx context.Context, s *Store, key string) error {
			if n, err := s.QueueLen(ctx, key); err != nil || n != 1 {
				return fmt.Errorf("queue %d %v, want the later message waiting", n, err)
			}
			return nil
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			db := pgtest.New(t)
			s := New(db)
			src := &eventsv1.SessionSource{Platform: "telegram", ChatId: "1"}
			done := make(chan error, 1)
			_, started, err := s.BeginFree(ctx, tt.key, "", src, &eventsv1.MessageReceived{EventId: "a"}, "turn").Start(ctx, func(Arrival) bool { return true },
				func(ctx context.Context, turn Turn) error {
					go func() { done <- tt.wait(ctx, db, s, tt.key, turn) }()
					select {
					case err := <-done:
						return fmt.Errorf("%s went through before the commit: %v", tt.name, err)
					case <-time.After(300 * time.Millisecond):
						return nil
					}
				})
			if err != nil || !started {
				t.Fatal(started, err)
			}
			if err := <-done; err != nil {
				t.Fatalf("%s after the commit: %v", tt.name, err)
			}
			if tt.after != nil {
				if err := tt.after(ctx, s, tt.key); err != nil {
					t.Fatal(err)
				}
			}
		})
	}
}

// A free start begun and then dropped (the router's early start for a
// message that turns out busy or a duplicate) leaves nothing behind, and
// holds the session's queue only until it is dropped.
func TestBeginFreeDropped(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := pgtest.New(t)
	s := New(db)
	src := &eventsv1.SessionSource{Platform: "telegram", ChatId: "1"}
	state := func(key string) string {
		var gen int64
		var last *string
		err := db.QueryRow(ctx, `SELECT generation, last_started_event_id FROM sessions WHERE session_key = $1`, key).Scan(&gen, &last)
		if errors.Is(err, pgx.ErrNoRows) {
			return "none"
		}
		if err != nil {
			t.Fatal(err)
		}
		if last == nil {
			return fmt.Sprintf("gen %d", gen)
		}
		return fmt.Sprintf("gen %d, last %s", gen, *last)
	}
	for _, tt := range []struct {
		name, key string
		existing  bool
		want      string
	}{
		{"a new session", "agent:main:telegram:dm:begin-new", false, "none"},
		{"an idle session", "agent:main:telegram:dm:begin-idle", true, "gen 1, last a"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if tt.existing {
				if _, started, err := s.BeginFree(ctx, tt.key, "", src, &eventsv1.MessageReceived{EventId: "a"}, "turn-a").Start(ctx,
					func(Arrival) bool { return true }, func(context.Context, Turn) error { return nil }); err != nil || !started {
					t.Fatal(started, err)
				}
			}
			f := s.BeginFree(ctx, tt.key, "", src, &eventsv1.MessageReceived{EventId: "b"}, "turn-b")
			enqueued := make(chan error, 1)
			go func() {
				_, err := s.Enqueue(ctx, tt.key, 3, false, &eventsv1.MessageReceived{EventId: "c"}, 32)
				enqueued <- err
			}()
			select {
			case err := <-enqueued:
				t.Fatalf("an enqueue went through while the start was open: %v", err)
			case <-time.After(200 * time.Millisecond):
			}
			f.Drop(ctx)
			f.Drop(ctx) // twice is nothing
			if err := <-enqueued; err != nil {
				t.Fatal(err)
			}
			if got := state(tt.key); got != tt.want {
				t.Errorf("after the drop: %s, want %s", got, tt.want)
			}
		})
	}
}

// WaitingKeys pages through every waiting session, oldest first.
func TestWaitingKeysPages(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	now := time.Date(2026, 12, 2, 3, 0, 0, 0, time.UTC)
	clock := now
	s := New(pgtest.New(t)).WithClock(func() time.Time { return clock })
	var want []string
	for i := range 5 {
		key := fmt.Sprintf("agent:main:telegram:dm:%d", i)
		src := &eventsv1.SessionSource{Platform: "telegram", ChatId: strconv.Itoa(i)}
		clock = now.Add(time.Duration(i%3) * time.Second) // oldest-first order with ties
		if _, _, err := s.ArriveAndEnqueue(ctx, key, "", src, int64(i+1), false, &eventsv1.MessageReceived{EventId: "e" + strconv.Itoa(i)}, 32); err != nil {
			t.Fatal(err)
		}
		want = append(want, key)
	}
	slices.SortFunc(want, func(a, b string) int {
		ia, _ := strconv.Atoi(a[len(a)-1:])
		ib, _ := strconv.Atoi(b[len(b)-1:])
		if d := ia%3 - ib%3; d != 0 {
			return d
		}
		return strings.Compare(a, b)
	})
	var got []string
	var after Waiting
	for range 10 {
		page, err := s.WaitingKeys(ctx, now.Add(time.Minute), after, 2)
		if err != nil {
			t.Fatal(err)
		}
		for _, w := range page {
			got = append(got, w.Key)
		}
		if len(page) < 2 {
			break
		}
		after = page[len(page)-1]
	}
	if !slices.Equal(got, want) {
		t.Fatalf("visited %q, want %q", got, want)
	}
}

// Peek reads the queue in the order turns take it (the stream sequence,
// whatever order the messages were queued in), with the total however
// few it returns, and changes nothing: a turn started after it takes the
// same head.
func TestPeek(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	at := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	s := New(pgtest.New(t)).WithClock(func() time.Time { return at })
	key := "agent:main:telegram:dm:1"
	if total, head, err := s.Peek(ctx, key, 5); err != nil || total != 0 || len(head) != 0 {
		t.Fatalf("empty queue: %d, %v, %v", total, head, err)
	}
	if _, _, _, err := s.Arrive(ctx, key, "", &eventsv1.SessionSource{Platform: "telegram", ChatId: "1"}, ""); err != nil {
		t.Fatal(err)
	}
	for i := 2; i >= 0; i-- {
		ev := &eventsv1.MessageReceived{EventId: fmt.Sprint(i), Text: "message " + fmt.Sprint(i)}
		if _, err := s.Enqueue(ctx, key, int64(100+i), i == 1, ev, 32); err != nil {
			t.Fatal(err)
		}
	}
	for _, tt := range []struct {
		limit int
		want  []string
	}{{1, []string{"message 0"}}, {2, []string{"message 0", "message 1"}}, {10, []string{"message 0", "message 1", "message 2"}}} {
		total, head, err := s.Peek(ctx, key, tt.limit)
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, q := range head {
			got = append(got, q.Event.GetText())
			if !q.EnqueuedAt.Equal(at) {
				t.Errorf("enqueued at %v, want %v", q.EnqueuedAt, at)
			}
		}
		if total != 3 || !slices.Equal(got, tt.want) {
			t.Errorf("Peek(%d) = %d, %q; want 3, %q", tt.limit, total, got, tt.want)
		}
		if head[0].OwnTurn || (len(head) > 1 && !head[1].OwnTurn) {
			t.Errorf("own turn flags %v", head)
		}
	}
	started, err := s.StartTurn(ctx, key, "t1", 32, 0, func(ctx context.Context, tr Turn) error {
		if len(tr.Inputs) != 1 || tr.Inputs[0].Event.GetText() != "message 0" {
			t.Errorf("turn after Peek took %v", tr.Inputs)
		}
		return nil
	})
	if err != nil || !started {
		t.Fatalf("start turn: %v, %v", started, err)
	}
	if total, head, err := s.Peek(ctx, key, 10); err != nil || total != 2 || head[0].Event.GetText() != "message 1" {
		t.Fatalf("after the turn's start: %d, %v, %v", total, head, err)
	}
}

// Steering a running turn took counts as that turn's while the lock
// holds the value it was marked with, and as a waiting message once
// another turn holds the lock (the steered one ended without reading it)
// or none does; Stop drops it with the queue and says whose it was.
func TestWaitingLeavesOutSteering(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := New(pgtest.New(t))
	key := "agent:main:telegram:dm:1"
	if _, _, _, err := s.Arrive(ctx, key, "", &eventsv1.SessionSource{Platform: "telegram", ChatId: "1"}, ""); err != nil {
		t.Fatal(err)
	}
	for i, text := range []string{"steer", "next"} {
		if _, err := s.Enqueue(ctx, key, int64(100+i), false, &eventsv1.MessageReceived{EventId: text, Text: text}, 32); err != nil {
			t.Fatal(err)
		}
	}
	const turn = "g1.turn/worker-a"
	if err := s.MarkSteering(ctx, key, "steer", turn); err != nil {
		t.Fatal(err)
	}
	// A message no longer queued (the turn read it already) is no error.
	if err := s.MarkSteering(ctx, key, "gone", turn); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		owner             string
		waiting, steering int
		head              string
	}{
		{owner: turn, waiting: 1, steering: 1, head: "next"},
		{owner: "g2.next/worker-b", waiting: 2, head: "steer,next"},
		{owner: "", waiting: 2, head: "steer,next"},
	} {
		waiting, steering, err := s.Waiting(ctx, key, tt.owner)
		if err != nil || waiting != tt.waiting || steering != tt.steering {
			t.Fatalf("owner %q: %d waiting, %d steering (%v), want %d, %d", tt.owner, waiting, steering, err, tt.waiting, tt.steering)
		}
		total, head, err := s.PeekWaiting(ctx, key, tt.owner, 10)
		var texts []string
		for _, q := range head {
			texts = append(texts, q.Event.GetText())
		}
		if err != nil || total != tt.waiting || strings.Join(texts, ",") != tt.head {
			t.Fatalf("owner %q: peek %d %v (%v), want %d %s", tt.owner, total, texts, err, tt.waiting, tt.head)
		}
	}
	if n, err := s.QueueLen(ctx, key); err != nil || n != 2 {
		t.Fatalf("queue length %d (%v), want 2: a turn start takes the steering too", n, err)
	}
	_, _, dropped, err := s.Stop(ctx, key)
	if err != nil || len(dropped) != 2 || !dropped[0].IsSteeringOf(turn) || dropped[1].IsSteeringOf(turn) || dropped[0].IsSteeringOf("") {
		t.Fatalf("dropped %+v (%v), want the steering of %s, then next", dropped, err, turn)
	}
}

// Across Redis losing a running turn's lock, the value that stands in
// for the lock (LeaseHolder) and a claim of the same turn's grant name
// the same holder for its steering: steering marked under one is the
// turn's under the other (Waiting, PeekWaiting, the queue's cap,
// IsSteeringOf), while a claim of another attempt, the bare grant or
// another turn leaves it waiting as before.
func TestSteeringAcrossTheLeaseStandIn(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := New(pgtest.New(t))
	const grant = "g1.turn"
	lease, claim := LeaseHolder(grant), grant+"/worker-a.1"
	tests := []struct {
		marked, owner string
		steering      bool
	}{
		{marked: lease, owner: claim, steering: true},
		{marked: claim, owner: lease, steering: true},
		{marked: lease, owner: lease, steering: true},
		{marked: claim, owner: grant + "/worker-b.2"},
		{marked: lease, owner: grant},
		{marked: lease, owner: "g2.next/worker-a.1"},
		{marked: claim, owner: LeaseHolder("g2.next")},
		{marked: lease, owner: ""},
	}
	for i, tt := range tests {
		key := fmt.Sprintf("agent:main:telegram:dm:lease-%d", i)
		if _, _, _, err := s.Arrive(ctx, key, "", &eventsv1.SessionSource{Platform: "telegram", ChatId: "1"}, ""); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Enqueue(ctx, key, 100, false, &eventsv1.MessageReceived{EventId: "steer", Text: "steer"}, 32); err != nil {
			t.Fatal(err)
		}
		if err := s.MarkSteering(ctx, key, "steer", tt.marked); err != nil {
			t.Fatal(err)
		}
		want := 1
		if tt.steering {
			want = 0
		}
		waiting, steering, err := s.Waiting(ctx, key, tt.owner)
		if err != nil || waiting != want || steering != 1-want {
			t.Errorf("marked %q, owner %q: %d waiting, %d steering (%v), want %d waiting", tt.marked, tt.owner, waiting, steering, err, want)
		}
		if total, _, err := s.PeekWaiting(ctx, key, tt.owner, 10); err != nil || total != want {
			t.Errorf("marked %q, owner %q: peek %d (%v), want %d", tt.marked, tt.owner, total, err, want)
		}
		// A cap of one has room for a message only beside steering.
		_, err = s.EnqueueWhileHeld(ctx, key, tt.owner, 101, false, &eventsv1.MessageReceived{EventId: "next", Text: "next"}, 1)
		if full := errors.Is(err, ErrQueueFull); full != !tt.steering || (err != nil && !full) {
			t.Errorf("marked %q, owner %q: enqueue under a cap of 1: %v", tt.marked, tt.owner, err)
		}
		q := Queued{SteeredBy: tt.marked}
		if got := q.IsSteeringOf(tt.owner); got != tt.steering {
			t.Errorf("marked %q: IsSteeringOf(%q) = %v, want %v", tt.marked, tt.owner, got, tt.steering)
		}
	}
}

func TestLastTurnEnd(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := pgtest.New(t)
	s := New(db)
	at := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	if end, spent, err := s.LastTurnEnd(ctx, "k", "s1"); err != nil || !end.IsZero() || spent {
		t.Fatalf("no turns: %v %v %v, want zero, none spent", end, spent, err)
	}
	for _, r := range []struct {
		turn, session string
		start, end    time.Time
		tokens        int
	}{
		{"t1", "s1", at, at.Add(50 * time.Minute), 0},
		{"t2", "s1", at.Add(time.Hour), at.Add(70 * time.Minute), 0},
		{"t3", "s2", at.Add(2 * time.Hour), at.Add(3 * time.Hour), 40}, // another conversation of the key
	} {
		if _, err := db.Exec(ctx, `INSERT INTO worker_turns (turn_id, session_key, session_id, generation, started_at, updated_at, input_tokens)
			VALUES ($1, 'k', $2, 1, $3, $4, $5)`, r.turn, r.session, r.start, r.end, r.tokens); err != nil {
			t.Fatal(err)
		}
	}
	// Turns that used no tokens (stopped before a model call): ended,
	// but nothing spent.
	if end, spent, err := s.LastTurnEnd(ctx, "k", "s1"); err != nil || !end.Equal(at.Add(70*time.Minute)) || spent {
		t.Fatalf("last turn end %v, spent %v (%v), want the end of t2, none spent", end, spent, err)
	}
	if _, spent, err := s.LastTurnEnd(ctx, "k", "s2"); err != nil || !spent {
		t.Fatalf("spent %v (%v), want t3's tokens", spent, err)
	}
	// Tokens of a turn that ended without a row, counted on the session.
	if _, err := db.Exec(ctx, `INSERT INTO sessions (session_key, session_id, platform, cache_read_tokens) VALUES ('k', 's1', 'telegram', 7)`); err != nil {
		t.Fatal(err)
	}
	if _, spent, err := s.LastTurnEnd(ctx, "k", "s1"); err != nil || !spent {
		t.Fatalf("spent %v (%v), want the session row's tokens", spent, err)
	}
}

// ResetAnswering hands the new session and the dropped messages, in
// queue order, to its answer before the reset commits; an error of the
// answer rolls the reset back: the conversation, its generation and its
// waiting messages stay as they were.
func TestResetAnsweringCommitsWithItsAnswer(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	src := &eventsv1.SessionSource{Platform: "api", ChatId: "1", ChatType: "dm"}
	for _, tt := range []struct {
		name   string
		answer error
	}{
		{"answered", nil},
		{"not answered", errors.New("nats: no servers available")},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			s := New(pgtest.New(t))
			before, _, _, err := s.Arrive(ctx, "k", "", src, "")
			if err != nil {
				t.Fatal(err)
			}
			for i, id := range []string{"a", "b"} {
				if _, err := s.Enqueue(ctx, "k", int64(i+1), true, &eventsv1.MessageReceived{EventId: id, Source: src}, 10); err != nil {
					t.Fatal(err)
				}
			}
			var seen []string
			var seenGen int64
			sess, err := s.ResetAnswering(ctx, "k", "admin", func(_ context.Context, sess Session, dropped []Queued) error {
				seenGen = sess.Generation
				for _, q := range dropped {
					seen = append(seen, q.Event.GetEventId())
				}
				return tt.answer
			})
			if !errors.Is(err, tt.answer) {
				t.Fatalf("reset: %v, want %v", err, tt.answer)
			}
			if strings.Join(seen, ",") != "a,b" || seenGen != before.Generation+1 {
				t.Errorf("answer got %v at generation %d, want a,b at %d", seen, seenGen, before.Generation+1)
			}
			after, err := s.Get(ctx, "k")
			if err != nil {
				t.Fatal(err)
			}
			n, err := s.QueueLen(ctx, "k")
			if err != nil {
				t.Fatal(err)
			}
			if tt.answer == nil && (after.ID != sess.ID || after.Generation != before.Generation+1 || n != 0) {
				t.Errorf("after the reset: %s gen %d, %d waiting; want %s gen %d, none", after.ID, after.Generation, n, sess.ID, before.Generation+1)
			}
			if tt.answer != nil && (after.ID != before.ID || after.Generation != before.Generation || n != 2) {
				t.Errorf("after a reset rolled back: %s gen %d, %d waiting; want %s gen %d, 2", after.ID, after.Generation, n, before.ID, before.Generation)
			}
		})
	}
}
