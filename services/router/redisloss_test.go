package router

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	turnsv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/turns/v1"
	"github.com/switchboard-chat/switchboard/pkg/redisx"
)

// Redis restarted without its data while a turn ran: the session's lock
// (and its waiting mark) are gone, the turn's worker has not renewed yet.
// A message to the session then must wait for the running turn, as it
// does while the lock holds (queue mode here): a second turn started at
// once runs beside the first (invariant 3) and, by advancing the
// session's generation, fences the first one off, whose worker (a first
// attempt) then ends it stale without any answer to its message, which
// it may not even have written to the transcript yet. The turn's lease
// in Postgres (migration 00148) keeps the session.
func TestMessageAfterRedisLostTheLockWaitsForTheRunningTurn(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	cfg := testConfig()
	cfg.BusyMode = BusyQueue
	e.startRouter(cfg, nil, nil)
	w, free, t1 := e.lockLostMidTurn()
	key := t1.SessionKey
	ctx := context.Background()

	e.publish(dm("alice", "second"))
	waitFor(t, "inbound drained", e.inboundDrained)
	time.Sleep(5 * cfg.SweepInterval) // a sweep would have started it too
	turns, overlap := w.snapshot()
	if len(overlap) > 0 {
		t.Errorf("two turns ran at once in %v: %q", overlap, inputsText(turns, key))
	}
	if len(turns) != 1 {
		t.Errorf("%d turns requested while the first still ran, want 1: %q", len(turns), inputsText(turns, key))
	}
	var gen int64
	if err := e.db.QueryRow(ctx, `SELECT generation FROM sessions WHERE session_key = $1`, key).Scan(&gen); err != nil {
		t.Fatal(err)
	}
	if gen != t1.Generation {
		t.Errorf("session at generation %d while its turn of generation %d still ran: that turn's writes are refused and its message gets no answer",
			gen, t1.Generation)
	}

	// The first turn ends: the second message is answered after it.
	free()
	waitFor(t, "the second message's turn", func() bool {
		turns, _ := w.snapshot()
		return len(inputsText(turns, key)) == 2
	})
	turns, _ = w.snapshot()
	if got := inputsText(turns, key); got[0] != "first" || got[1] != "second" {
		t.Errorf("turn inputs %q, want first then second", got)
	}
}

// A message that arrives while Redis has lost the running turn's lock
// (its lease in Postgres holds the session) meets the turn as it would
// behind its lock, in each busy mode: it interrupts the turn (the control
// names it, for its worker), steers into it, or waits for it, each with
// its acknowledgement. The router used to learn that a turn ran only
// when the message's start was refused, and queued it unannounced
// whatever the mode.
func TestMessageWhileRedisLostTheLockFollowsTheBusyMode(t *testing.T) {
	t.Parallel()
	tests := []struct {
		mode string
		// control is the control the turn gets (0: none).
		control turnsv1.ControlAction
		ack     string
		// answered: the message gets a turn of its own after the first.
		answered bool
	}{
		{BusyInterrupt, controlInterrupt, "⚡ Interrupting current task", true},
		{BusyQueue, 0, "⏳ Queued for the next turn", true},
		// The test's worker answers as an older release's, whose
		// steering the router unqueues: the running turn took it.
		{BusySteer, controlSteer, "⏩ Steered into current run", false},
	}
	for _, tt := range tests {
		t.Run(tt.mode, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			cfg := testConfig()
			cfg.BusyMode = tt.mode
			e.startRouter(cfg, nil, nil)
			w, free, t1 := e.lockLostMidTurn()
			key := t1.SessionKey

			e.publish(dm("alice", "second"))
			waitFor(t, "inbound drained", e.inboundDrained)
			if n := settled(t, "the acknowledgement", 1, func() int { return len(e.noticesTo("alice")) }); n != 1 || !strings.HasPrefix(e.noticesTo("alice")[0], tt.ack) {
				t.Errorf("answered %q, want one %q", e.noticesTo("alice"), tt.ack)
			}
			for _, action := range []turnsv1.ControlAction{controlInterrupt, controlSteer} {
				got := e.controls(action)
				switch {
				case action != tt.control && len(got) > 0:
					t.Errorf("%d %s controls, want none", len(got), action)
				case action == tt.control && len(got) != 1:
					t.Errorf("%d %s controls, want 1", len(got), action)
				case action == controlInterrupt && len(got) == 1 && got[0].GetTurnId() != t1.TurnId:
					t.Errorf("interrupt names turn %q, want the running turn %q", got[0].GetTurnId(), t1.TurnId)
				}
			}
			turns, overlap := w.snapshot()
			if len(turns) != 1 || len(overlap) > 0 {
				t.Errorf("%d turns requested (overlapping in %v) while the first still ran, want 1", len(turns), overlap)
			}

			free()
			want := []string{"first"}
			if tt.answered {
				want = append(want, "second")
				waitFor(t, "the second message's turn", func() bool {
					turns, _ := w.snapshot()
					return len(inputsText(turns, key)) == 2
				})
			} else {
				waitFor(t, "the first turn's end", func() bool { return w.hasEnded(t1.TurnId) })
				time.Sleep(3 * cfg.SweepInterval)
			}
			turns, _ = w.snapshot()
			if got := inputsText(turns, key); !slices.Equal(got, want) {
				t.Errorf("turn inputs %q, want %q", got, want)
			}
		})
	}
}

// The commands that look at the running turn see it while Redis has lost
// its lock (its lease in Postgres holds the session), as behind its lock:
// /status showed the session idle and /steer said no agent ran.
func TestCommandsSeeTheTurnWhileRedisLostTheLock(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.startRouter(testConfig(), nil, nil)
	_, free, _ := e.lockLostMidTurn()
	defer free()
	tests := []struct {
		command string
		want    func(string) bool
	}{
		{"/status", func(got string) bool { return strings.Contains(got, "State: working") }},
		{"/steer", func(got string) bool { return got == "Usage: /steer <prompt>" }},
		// The test's worker takes the steering.
		{"/steer faster", func(got string) bool { return got == "⏩ Steer queued — arrives after the next tool call: 'faster'" }},
		{"/agents", func(got string) bool { return strings.Contains(got, "**Active agents:** 1") }},
	}
	for _, tt := range tests {
		t.Run(tt.command, func(t *testing.T) {
			if got := e.ask("alice", tt.command); !tt.want(got) {
				t.Errorf("%s answered %q", tt.command, got)
			}
		})
	}
	if n := len(e.controls(controlSteer)); n != 1 {
		t.Errorf("%d steering requests, want 1", n)
	}
}

// A command refused mid-turn that moves the session on (/branch: a new
// conversation, the next generation, the queue cleared) is refused too
// while Redis has lost the running turn's lock but its lease in
// Postgres (migration 00148) says it runs: run, it fences the turn off,
// whose first attempt then ends stale without answering its message.
func TestCommandRefusedMidTurnWhileRedisLostTheLock(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	cfg := testConfig()
	e.startRouter(cfg, nil, nil)
	_, free, t1 := e.lockLostMidTurn()
	key := t1.SessionKey
	ctx := context.Background()
	// What the worker wrote of the turn so far: a conversation to branch.
	if _, err := e.db.Exec(ctx, `INSERT INTO transcript_messages (session_key, session_id, user_key, turn_id, generation, step, role, content)
		VALUES ($1, $2, 'telegram:alice', $3, $4, 0, 'user', 'first')`, key, t1.SessionId, t1.TurnId, t1.Generation); err != nil {
		t.Fatal(err)
	}

	got := e.ask("alice", "/branch")
	var gen int64
	if err := e.db.QueryRow(ctx, `SELECT generation FROM sessions WHERE session_key = $1`, key).Scan(&gen); err != nil {
		t.Fatal(err)
	}
	if gen != t1.Generation {
		t.Errorf("/branch moved the session to generation %d while its turn of generation %d still ran (answered %q)", gen, t1.Generation, got)
	}
	if got != midTurnRefusal("branch") {
		t.Errorf("/branch answered %q, want the mid-turn refusal", got)
	}
	free()
}

// /stop and /new stop the running turn while Redis has lost its lock
// (its lease in Postgres holds the session), as behind its lock: the
// stop goes to the turn, named, and /stop answers as for a running task.
// They found the lock free and sent no stop, so the fenced turn ran on
// until its worker's next renewal, and /stop answered "No active task
// to stop." while /status said working.
func TestStopWhileRedisLostTheLockStopsTheRunningTurn(t *testing.T) {
	t.Parallel()
	tests := []struct{ command, answer string }{
		{"/stop", "⚡ Stopped. You can continue this session."},
		{"/new", "✨ New session started."},
	}
	for _, tt := range tests {
		t.Run(tt.command, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			e.startRouter(testConfig(), nil, nil)
			w, free, t1 := e.lockLostMidTurn()
			key := t1.SessionKey

			if got := e.ask("alice", tt.command); got != tt.answer {
				t.Errorf("%s answered %q, want %q", tt.command, got, tt.answer)
			}
			stops := e.controls(controlStop)
			if len(stops) != 1 || stops[0].GetTurnId() != t1.TurnId {
				t.Errorf("stop controls %v, want one naming the running turn %q", stops, t1.TurnId)
			}
			var gen int64
			if err := e.db.QueryRow(context.Background(), `SELECT generation FROM sessions WHERE session_key = $1`, key).Scan(&gen); err != nil {
				t.Fatal(err)
			}
			if gen != t1.Generation+1 {
				t.Errorf("session at generation %d, want %d: the turn fenced off", gen, t1.Generation+1)
			}

			// The stopped turn ends (its worker heeds the stop): the next
			// message is answered.
			free()
			e.publish(dm("alice", "next"))
			waitFor(t, "the next message's turn", func() bool {
				turns, _ := w.snapshot()
				return slices.Contains(inputsText(turns, key), "next")
			})
		})
	}
}

// Steering the running turn took is that turn's, not a message waiting
// for the next one, on both sides of Redis losing its lock: taken while
// the turn's lease stood in for the lock (marked as the lease's claim of
// the turn's grant) once the turn's worker has claimed the lock again,
// and taken from the worker's claim while the lease stands in for it.
// /status and /queue counted it as waiting in each case ("1 message
// waiting", "(2 queued)"), and the queue's cap gave it room.
func TestSteeringAcrossRedisLosingTheLockStaysTheTurns(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		// lost: Redis loses the lock before the steering (else after).
		lost bool
	}{
		{"steered while the lock is lost, the worker claims it again", true},
		{"steered before Redis lost the lock", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			cfg := testConfig()
			cfg.BusyMode = BusyQueue
			e.startRouter(cfg, nil, nil)
			e.steerQueue.Store(true)
			ctx := context.Background()
			locker := redisx.NewLocker(e.rdb, e.prefix)
			var w *worker
			var free func()
			var t1 *turnsv1.TurnRequested
			if tt.lost {
				w, free, t1 = e.lockLostMidTurn()
			} else {
				w, free = e.holdFirstTurn()
				e.publish(dm("alice", "first"))
				waitFor(t, "the first turn", func() bool { turns, _ := w.snapshot(); return len(turns) == 1 })
				turns, _ := w.snapshot()
				t1 = turns[0]
			}
			key := t1.SessionKey
			if got, want := e.ask("alice", "/steer go left"), "⏩ Steer queued — arrives after the next tool call: 'go left'"; got != want {
				t.Fatalf("/steer answered %q, want %q", got, want)
			}
			if tt.lost {
				// The turn's worker claims its lock again (its renewal).
				if err := e.rdb.Set(ctx, locker.Key(key), redisx.Holder(t1.LockToken, "test-worker.1"), time.Minute).Err(); err != nil {
					t.Fatal(err)
				}
			} else if err := e.rdb.Del(ctx, locker.Key(key), e.prefix+"waiting:"+key).Err(); err != nil {
				t.Fatal(err)
			}
			if got, want := e.ask("alice", "/status"), "State: working, 0 messages waiting, 1 steer not yet read by the agent\n"; !strings.Contains(got, want) {
				t.Errorf("/status answered %q, want %q", got, want)
			}
			if got, want := e.ask("alice", "/queue q1"), "Queued for the next turn."; got != want {
				t.Errorf("/queue answered %q, want %q", got, want)
			}

			// The test's worker never gives the steering to the model:
			// the next turn answers it, with what waited.
			free()
			waitFor(t, "the next turn", func() bool {
				turns, _ := w.snapshot()
				return len(inputsText(turns, key)) == 3
			})
			turns, _ := w.snapshot()
			if got, want := inputsText(turns, key), []string{"first", "go left", "q1"}; !slices.Equal(got, want) {
				t.Errorf("turn inputs %q, want %q", got, want)
			}
		})
	}
}

// A /stop whose generation bump meets the running turn's end in flight
// (its worker's fenced final, which ends its lease, and which the bump
// waits for) finds the turn ended, as it would find its lock released:
// no stop, and "No active task to stop.", since the turn answered. The
// turn's lease is read after the bump: read before it, the turn counted
// as running.
func TestStopMeetingTheTurnsEndWhileRedisLostTheLock(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.startRouter(testConfig(), nil, nil)
	_, free, t1 := e.lockLostMidTurn()
	defer free()
	key := t1.SessionKey
	ctx := context.Background()

	// The worker's final, fenced, not yet committed.
	tx, err := e.db.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	if _, err := tx.Exec(ctx, `SELECT switchboard_fence($1, $2)`, key, t1.Generation); err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, `INSERT INTO worker_turns (turn_id, session_key, session_id, generation, status, final_kind, final_text)
		VALUES ($1, $2, $3, $4, 'completed', 'text', 'done')`, t1.TurnId, key, t1.SessionId, t1.Generation); err != nil {
		t.Fatal(err)
	}
	// A plain turn's answer ends its lease in the same transaction.
	if _, err := tx.Exec(ctx, `DELETE FROM turn_leases WHERE session_key = $1 AND turn_id = $2`, key, t1.TurnId); err != nil {
		t.Fatal(err)
	}
	before := len(e.noticesTo("alice"))
	e.publish(dm("alice", "/stop"))
	waitFor(t, "the stop's bump waiting for the final", func() bool {
		var waiting bool
		err := e.db.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_locks WHERE locktype = 'advisory' AND NOT granted
			AND classid = 21314 AND objid = (hashtext($1)::bigint & 4294967295)::oid)`, key).Scan(&waiting)
		return err == nil && waiting
	})
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the answer to /stop", func() bool { return len(e.noticesTo("alice")) > before })
	if got := e.noticesTo("alice")[before]; got != "No active task to stop." {
		t.Errorf("/stop answered %q, want %q", got, "No active task to stop.")
	}
	if stops := e.controls(controlStop); len(stops) > 0 {
		t.Errorf("stop controls %v for a turn that had ended, want none", stops)
	}
}

// /topic <session-id> does not move the main view's conversation into
// a topic while a turn of it runs there and Redis has lost the turn's
// lock (its lease in Postgres holds the session), as it does not behind
// the lock: the move puts the main view on a new conversation, whose
// generation fences the running turn off, unanswered.
func TestTopicRestoreRefusedWhileRedisLostTheLock(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.startRouter(testConfig(), nil, nil)
	_, free, t1 := e.lockLostMidTurn()
	defer free()
	key := t1.SessionKey
	askIn := func(thread, text string) string {
		t.Helper()
		before := len(e.noticesTo("alice"))
		e.publish(topicMsg("alice", thread, text))
		waitFor(t, "reply to "+text, func() bool { return len(e.noticesTo("alice")) > before })
		return e.noticesTo("alice")[before]
	}
	askIn("", "/topic")
	askIn("30", "/topic")
	if got := askIn("30", "/topic "+t1.SessionId); got != midTurnRefusal("topic") {
		t.Errorf("/topic <id> of the running turn's conversation answered %q, want the mid-turn refusal", got)
	}
	var gen int64
	if err := e.db.QueryRow(context.Background(), `SELECT generation FROM sessions WHERE session_key = $1`, key).Scan(&gen); err != nil {
		t.Fatal(err)
	}
	if gen != t1.Generation {
		t.Errorf("main view at generation %d while its turn of generation %d still ran", gen, t1.Generation)
	}
}

// A due heartbeat does not fire while the session's turn runs and Redis
// has lost its lock (its lease in Postgres holds the session), as it
// does not behind the lock (Hermes fires a tick into an idle session
// only, missed ones coalescing): it fires once the turn has ended.
func TestHeartbeatWaitsWhileRedisLostTheLock(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	s := e.startRouter(loopTestConfig(), nil, nil)
	ctx := context.Background()
	if got := e.ask("alice", "/heartbeat every 10m Check CI"); !strings.HasPrefix(got, "♥ Heartbeat set") {
		t.Fatalf("/heartbeat answered %q", got)
	}
	w, free, t1 := e.lockLostMidTurn()
	key := t1.SessionKey
	e.makeDue(key)
	s.fireLoops(ctx)
	var queued int
	if err := e.db.QueryRow(ctx, `SELECT count(*) FROM session_queue WHERE session_key = $1`, key).Scan(&queued); err != nil {
		t.Fatal(err)
	}
	if queued != 0 {
		t.Errorf("a heartbeat fired into the session of a running turn: %d wakeups queued", queued)
	}

	free()
	waitFor(t, "the session to be idle", func() bool {
		running, _ := s.store.TurnRunning(ctx, key)
		owner, _ := s.locker.Owner(ctx, key)
		return !running && owner == ""
	})
	waitFor(t, "the heartbeat", func() bool {
		s.fireLoops(ctx)
		return len(wakeupTurns(w, "heartbeat")) == 1
	})
}

// The sweep leaves the lock of a session whose turn holds its lease
// alone while Redis has lost it: it took the lock each interval to start
// the waiting messages, only to give it back when the start found the
// turn running, and the turn's worker, claiming its lock again in that
// moment, met another grant there (a tool's lock check meeting it three
// times failed the attempt). The turn's end starts the messages.
func TestSweepLeavesTheLockOfATurnHoldingItsLeaseAlone(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	cfg := testConfig()
	cfg.BusyMode = BusyQueue
	writes := &lockWrites{}
	e.startRouterWith(cfg, nil, func(d *Deps) {
		rdb := redis.NewClient(e.rdb.Options())
		t.Cleanup(func() { _ = rdb.Close() })
		rdb.AddHook(writes)
		d.Redis = rdb
	})
	w, free, t1 := e.lockLostMidTurn()
	key := t1.SessionKey

	e.publish(dm("alice", "second"))
	waitFor(t, "inbound drained", e.inboundDrained)
	// From here on only the sweep looks at the session: it waits behind
	// the running turn.
	writes.watch(redisx.NewLocker(e.rdb, e.prefix).Key(key))
	time.Sleep(5 * cfg.SweepInterval)
	if cmds := writes.seen(); len(cmds) > 0 {
		t.Errorf("the router wrote the lock of a session whose turn holds its lease: %q", cmds)
	}

	free()
	waitFor(t, "the second message's turn", func() bool {
		turns, _ := w.snapshot()
		return len(inputsText(turns, key)) == 2
	})
}

// A message queued while Redis has lost the running turn's lock is
// started by the turn's completion even when that completion comes while
// the message's own start holds the lock for the moment it takes to find
// the turn running (its lease) and give the lock back: the completion's
// start then only marks the lock, which nobody holds after, and the
// message waited for the sweep (router.sweep_interval; here an hour).
// Likeliest in the interrupt mode, whose interrupt ends the turn just as
// the message's start looks.
func TestTurnEndingDuringARefusedStartStartsTheMessage(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	cfg := testConfig()
	cfg.BusyMode = BusyQueue
	cfg.SweepInterval = time.Hour
	race := &refusedStartRace{completionMarked: make(chan struct{})}
	e.startRouterWith(cfg, nil, func(d *Deps) {
		rdb := redis.NewClient(e.rdb.Options())
		t.Cleanup(func() { _ = rdb.Close() })
		rdb.AddHook(race)
		d.Redis = rdb
	})
	w, free, t1 := e.lockLostMidTurn()
	key := t1.SessionKey
	// The message's start takes the lock (the lease refuses it); before
	// it gives the lock back the turn ends and its completion's start
	// meets the lock held.
	race.arm(redisx.NewLocker(e.rdb, e.prefix).Key(key), free)

	e.publish(dm("alice", "second"))
	deadline := time.Now().Add(10 * time.Second)
	for {
		turns, _ := w.snapshot()
		if got := inputsText(turns, key); len(got) == 2 {
			if got[1] != "second" {
				t.Errorf("turn inputs %q, want first then second", got)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the second message did not start after the first turn ended (race played: %v)", race.played())
		}
		time.Sleep(20 * time.Millisecond)
	}
	if !race.played() {
		t.Error("the completion's start did not meet the refused start's lock")
	}
}

// refusedStartRace is a Redis hook of the router's client that, once
// armed, holds up the router giving back a session lock it took
// (AcquireOrMark) until the running turn has ended (end) and the
// router's start for its completion has met that lock (and marked it).
type refusedStartRace struct {
	mu               sync.Mutex
	key              string
	end              func()
	taken, released  bool
	met              bool
	completionMarked chan struct{}
}

func (h *refusedStartRace) arm(key string, end func()) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.key, h.end = key, end
}

func (h *refusedStartRace) played() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.met
}

func (h *refusedStartRace) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *refusedStartRace) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

func (h *refusedStartRace) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		name := strings.ToLower(cmd.Name())
		args := cmd.Args()
		if (name != "evalsha" && name != "eval") || len(args) < 4 {
			return next(ctx, cmd)
		}
		h.mu.Lock()
		key, end := h.key, h.end
		h.mu.Unlock()
		if key == "" || args[3] != any(key) {
			return next(ctx, cmd)
		}
		numKeys := fmt.Sprint(args[2])
		release := numKeys == "1" && len(args) == 5
		h.mu.Lock()
		hold := release && h.taken && !h.released
		if hold {
			h.released = true
		}
		h.mu.Unlock()
		if hold {
			end()
			select {
			case <-h.completionMarked:
			case <-time.After(10 * time.Second):
			}
		}
		err := next(ctx, cmd)
		if numKeys == "2" { // AcquireOrMark: 1 taken, 0 marked
			n, _ := cmd.(*redis.Cmd).Int()
			h.mu.Lock()
			switch {
			case n == 1 && !h.taken:
				h.taken = true
			case n == 0 && h.released && !h.met:
				h.met = true
				close(h.completionMarked)
			}
			h.mu.Unlock()
		}
		return err
	}
}

// lockWrites is a Redis hook that records the commands, other than
// reads, naming one key (watch).
type lockWrites struct {
	mu   sync.Mutex
	key  string
	cmds []string
}

func (h *lockWrites) watch(key string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.key = key
}

func (h *lockWrites) seen() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]string(nil), h.cmds...)
}

func (h *lockWrites) see(cmd redis.Cmder) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.key == "" || strings.EqualFold(cmd.Name(), "get") {
		return
	}
	if slices.Contains(cmd.Args(), any(h.key)) {
		h.cmds = append(h.cmds, cmd.String())
	}
}

func (h *lockWrites) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *lockWrites) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h.see(cmd)
		return next(ctx, cmd)
	}
}

func (h *lockWrites) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		for _, c := range cmds {
			h.see(c)
		}
		return next(ctx, cmds)
	}
}

// lockLostMidTurn starts alice's first turn on a worker that holds it
// (holdFirstTurn), then loses the session's keys as a Redis restarted
// without its data does: the turn's lock and its waiting mark. It
// returns the worker, what ends the held turn, and that turn.
func (e *env) lockLostMidTurn() (w *worker, free func(), t1 *turnsv1.TurnRequested) {
	t := e.t
	t.Helper()
	w, free = e.holdFirstTurn()
	e.publish(dm("alice", "first"))
	waitFor(t, "the first turn", func() bool { turns, _ := w.snapshot(); return len(turns) == 1 })
	turns, _ := w.snapshot()
	t1 = turns[0]
	ctx := context.Background()
	locker := redisx.NewLocker(e.rdb, e.prefix)
	if owner, err := locker.Owner(ctx, t1.SessionKey); err != nil || redisx.GrantOf(owner) != t1.LockToken {
		t.Fatalf("lock held by %q (%v), want the first turn's grant", owner, err)
	}
	if err := e.rdb.Del(ctx, locker.Key(t1.SessionKey), e.prefix+"waiting:"+t1.SessionKey).Err(); err != nil {
		t.Fatal(err)
	}
	return w, free, t1
}

// holdFirstTurn starts a worker that runs the first turn it is given
// until free is called (the test's cleanup calls it too, before the
// worker's own cleanup waits for the turn), and every later one at once.
func (e *env) holdFirstTurn() (w *worker, free func()) {
	release := make(chan struct{})
	var once, first sync.Once
	free = func() { once.Do(func() { close(release) }) }
	w = e.startWorker(func(*turnsv1.TurnRequested) {
		held := false
		first.Do(func() { held = true })
		if held {
			<-release
		}
	})
	e.t.Cleanup(free)
	return w, free
}
