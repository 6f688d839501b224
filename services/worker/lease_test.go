package worker_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	turnsv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/turns/v1"
	"github.com/switchboard-chat/switchboard/pkg/llm"
	"github.com/switchboard-chat/switchboard/pkg/redisx"
	"github.com/switchboard-chat/switchboard/pkg/sessionstore"
	"github.com/switchboard-chat/switchboard/services/worker"
)

// Redis lost the session lock mid-turn and a router took it for a new
// message (a grant of its own) before the turn's renewal: the router
// finds the turn's lease (migration 00148), queues its message and gives
// the lock back. The turn, still its session's, runs on: it claims the
// lock again once the grant is gone and answers, instead of abandoning,
// as superseded, a message nothing else will answer.
func TestRenewalFindingARoutersGrantWhileTheSessionIsTheTurnsRunsOn(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	req, release := startBlockedTurn(t, h)
	ctx := context.Background()
	grant := redisx.NewGrant(time.Now())
	if err := h.rdb.Set(ctx, h.locker.Key("s1"), grant, time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(shortLockTTL) // renewals (every 2 s / 3) find the grant
	if owner, _ := h.locker.Owner(ctx, "s1"); owner != grant {
		t.Fatalf("lock held by %q, want the router's grant still", owner)
	}
	// The router gives the lock back.
	if err := h.locker.Release(ctx, "s1", grant); err != nil {
		t.Fatal(err)
	}
	reclaimedAndAnswered(t, h, req, release)
}

// A turn's first claim that finds another grant on the lock while the
// session is still at the turn's generation (Redis lost the turn's grant
// before a worker took it, and a router took the lock for a new message,
// which it will give back on finding the turn's lease) waits for the lock
// instead of dropping the turn as superseded. Once the session has moved
// on (TestTurnWhoseSessionMovedOnIsStale and the like), the grant is a
// newer turn's and the claim is lost.
func TestFirstClaimFindingAnotherGrantWhileTheSessionIsTheTurnsWaits(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.setGeneration("s1", 1)
	ctx := context.Background()
	grant := redisx.NewGrant(time.Now())
	if err := h.rdb.Set(ctx, h.locker.Key("s1"), grant, time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	h.startWorker("w1", nil)
	req := h.requestTurn("s1", "hello", turnOpts{noLock: true, lockTTL: shortLockTTL})
	time.Sleep(shortLockTTL / 2)
	if c := h.completed(req.TurnId); c != nil {
		t.Fatalf("turn ended (%v) while a router's grant held the lock of its session", c.GetStatus())
	}
	if err := h.locker.Release(ctx, "s1", grant); err != nil {
		t.Fatal(err)
	}
	if c := h.waitCompleted(req.TurnId); c.GetStatus() != turnsv1.TurnStatus_TURN_STATUS_COMPLETED {
		t.Fatalf("status %v, want COMPLETED", c.GetStatus())
	}
	checkReplies(t, h.replies(req.TurnId))
}

// The worker renews its turn's lease in Postgres with its lock: from the
// start's grant TTL down to the lock's TTL, and on while the turn runs.
// A lease of another turn (a later start's) is left alone.
func TestRenewalRenewsTheTurnsLease(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	req, release := startBlockedTurn(t, h)
	ctx := context.Background()
	// As the router's start wrote it: the grant's hour.
	if _, err := h.db.Exec(ctx, `INSERT INTO turn_leases (session_key, turn_id, generation, expires_at)
		VALUES ('s1', $1, 1, now() + interval '1 hour')`, req.TurnId); err != nil {
		t.Fatal(err)
	}
	leaseLeft := func() time.Duration {
		var ms float64
		if err := h.db.QueryRow(ctx, `SELECT extract(epoch FROM expires_at - now()) * 1000 FROM turn_leases WHERE session_key = 's1'`).Scan(&ms); err != nil {
			t.Fatal(err)
		}
		return time.Duration(ms) * time.Millisecond
	}
	deadline := time.Now().Add(10 * time.Second)
	for leaseLeft() > shortLockTTL && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	if left := leaseLeft(); left > shortLockTTL || left <= 0 {
		t.Fatalf("lease left %s after the renewals, want within the lock's TTL (%s)", left, shortLockTTL)
	}
	// Past several renewals it still holds: they keep it.
	time.Sleep(2 * shortLockTTL)
	if left := leaseLeft(); left <= 0 {
		t.Fatalf("lease expired %s ago while the turn ran", -left)
	}
	// Another turn's lease is not the running one's to renew.
	if _, err := h.db.Exec(ctx, `UPDATE turn_leases SET turn_id = 'a-later-turn', expires_at = now() + interval '1 hour'`); err != nil {
		t.Fatal(err)
	}
	time.Sleep(shortLockTTL)
	if left := leaseLeft(); left < 50*time.Minute {
		t.Errorf("a later turn's lease renewed down to %s by the running turn", left)
	}
	close(release)
	h.waitCompleted(req.TurnId)
}

// Every way a turn ends at its session's generation records its end
// (its worker_turns row) and ends its lease (migration 00148): without
// that the session's next start finds the turn still holding the session
// and waits, until the lease expires.
func TestEveryTurnEndingAtItsGenerationEndsItsLease(t *testing.T) {
	t.Parallel()
	noMemory := func(c *worker.Config, _ *worker.Deps) { c.Agent.Toolsets = []string{"todo"} }
	tests := []struct {
		name string
		mod  func(*worker.Config, *worker.Deps)
		text string
		opts turnOpts
	}{
		{"a message", nil, "hello", turnOpts{}},
		{"/undo", nil, "/undo", turnOpts{command: "undo"}},
		{"/compress", nil, "/compress", turnOpts{command: "compress"}},
		{"/btw", nil, "which file?", turnOpts{answerOnly: true, side: "sid-s1"}},
		{"memory flush of a short conversation", nil, "", turnOpts{sessionID: "old", flush: true}},
		{"memory flush on a worker without the memory tool", noMemory, "", turnOpts{sessionID: "old", flush: true}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			h := newHarness(t)
			h.setGeneration("s1", 1)
			h.startWorker("w1", tt.mod)
			tt.opts.turnID = "turn-ending"
			grantLease(t, h, tt.opts.turnID)
			req := h.requestTurn("s1", tt.text, tt.opts)
			if c := h.waitCompleted(req.TurnId); c.GetStatus() != turnsv1.TurnStatus_TURN_STATUS_COMPLETED {
				t.Fatalf("status %v (%s), want COMPLETED", c.GetStatus(), c.GetError())
			}
			var ended bool
			if err := h.db.QueryRow(context.Background(), `SELECT EXISTS (SELECT 1 FROM worker_turns WHERE turn_id = $1)`, req.TurnId).Scan(&ended); err != nil {
				t.Fatal(err)
			}
			if !ended {
				t.Errorf("the turn completed without recording its end")
			}
			if leaseHolds(t, h) {
				t.Errorf("the turn completed and its lease still holds the session")
			}
		})
	}
}

// grantLease writes the lease of the turn turnID on session s1 as the
// router's start does: for the grant's hour, at the session's generation.
func grantLease(t *testing.T, h *harness, turnID string) {
	t.Helper()
	if _, err := h.db.Exec(context.Background(), `INSERT INTO turn_leases (session_key, turn_id, generation, expires_at)
		SELECT session_key, $1, generation, now() + interval '1 hour' FROM sessions WHERE session_key = 's1'`, turnID); err != nil {
		t.Fatal(err)
	}
}

// leaseHolds reports whether the last turn of session s1 holds its lease,
// as a turn start reads it (sessionstore.TurnRunning).
func leaseHolds(t *testing.T, h *harness) bool {
	t.Helper()
	running, err := sessionstore.New(h.db).TurnRunning(context.Background(), "s1")
	if err != nil {
		t.Fatal(err)
	}
	return running
}

// A turn holds its lease (migration 00148) until it lets go of its
// session lock, not only until its recorded end (its worker_turns row,
// written with its answer): what follows the answer under the lock, here
// a voice reply whose speech takes its time (the goal judge's and a
// /loop wakeup's steps likewise), is the turn's still. Before, the row
// ended the lease: a message whose start found the lock lost with
// Redis's data in that stretch started the next turn beside it, whose
// replies could go before the voice message.
func TestLeaseHoldsUntilTheTurnLetsGoOfItsLock(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.setGeneration("s1", 1)
	entered, release := make(chan struct{}, 1), make(chan struct{})
	h.startWorker("w1", func(_ *worker.Config, d *worker.Deps) {
		d.Speaker = speakFunc(func(ctx context.Context, _ string) ([]byte, string, error) {
			entered <- struct{}{}
			select {
			case <-release:
				return []byte("OggS speech"), "audio/ogg", nil
			case <-ctx.Done():
				return nil, "", ctx.Err()
			}
		})
	})
	const turnID = "turn-spoken"
	grantLease(t, h, turnID)
	h.requestTurn("s1", "hello", turnOpts{turnID: turnID, voiceMode: "all"})
	select {
	case <-entered:
	case <-time.After(30 * time.Second):
		t.Fatal("no voice reply")
	}
	var recorded bool
	if err := h.db.QueryRow(context.Background(), `SELECT EXISTS (SELECT 1 FROM worker_turns WHERE turn_id = $1)`, turnID).Scan(&recorded); err != nil {
		t.Fatal(err)
	}
	if !recorded {
		t.Fatal("the turn speaks its answer before recording it")
	}
	if !leaseHolds(t, h) {
		t.Error("the turn's lease ended with its recorded answer while its voice reply still ran under its lock")
	}
	close(release)
	if c := h.waitCompleted(turnID); c.GetStatus() != turnsv1.TurnStatus_TURN_STATUS_COMPLETED {
		t.Fatalf("status %v (%s), want COMPLETED", c.GetStatus(), c.GetError())
	}
	if leaseHolds(t, h) {
		t.Error("the turn's lease still holds the session after the turn let go of its lock")
	}
}

// A turn that ends without letting go of its lock past its answer (a
// panic there, which the bus dead-letters; a worker that dies on a last
// delivery) leaves its lease to lapse with the lock, a lock's TTL after
// the last renewal, even when it ends before its first renewal: the
// write of its answer brings the lease down from the start's grant (an
// hour) to the lock's TTL. The session's next message waits that long,
// as it waits for the lock, not the hour.
func TestLeaseOfATurnEndedWithoutItsReleaseLapsesWithItsLock(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.setGeneration("s1", 1)
	entered := make(chan struct{}, 1)
	h.startWorker("w1", func(_ *worker.Config, d *worker.Deps) {
		d.Speaker = speakFunc(func(context.Context, string) ([]byte, string, error) {
			entered <- struct{}{}
			panic("the speech provider's client crashed")
		})
	})
	const turnID = "turn-panicked"
	grantLease(t, h, turnID)
	const ttl = 5 * time.Second // its first renewal comes long after the answer
	h.requestTurn("s1", "hello", turnOpts{turnID: turnID, voiceMode: "all", lockTTL: ttl})
	select {
	case <-entered:
	case <-time.After(30 * time.Second):
		t.Fatal("no voice reply")
	}
	waitFor(t, 2*ttl, "the lease to lapse with the lock", func() bool { return !leaseHolds(t, h) })
	if c := h.completed(turnID); c != nil {
		t.Fatalf("the turn completed (%v) after its panic", c.GetStatus())
	}
}

// panicsOnFlush panics on a memory flush's model call, as a provider SDK
// meeting an answer it did not expect might.
type panicsOnFlush struct{ llm.Provider }

func (p panicsOnFlush) Stream(ctx context.Context, req llm.Request, fn func(llm.Delta) error) (*llm.Response, error) {
	if strings.Contains(req.Messages[len(req.Messages)-1].Content, "about to be reset") {
		panic("unexpected answer shape")
	}
	return p.Provider.Stream(ctx, req, fn)
}

// A memory flush whose model call panics fails, as a turn whose agent
// call panics does: it completes, records its end and ends its lease,
// and the new conversation's first message, which waits behind it, goes
// on. Before, the bus dead-lettered it unfinished: no completion, and
// the session held by its lease until that lapsed.
func TestMemoryFlushThatPanicsFailsAndEndsItsLease(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.setGeneration("s1", 1)
	h.startWorker("w1", func(_ *worker.Config, d *worker.Deps) { d.LLM.Provider = panicsOnFlush{d.LLM.Provider} })
	old := turnOpts{sessionID: "old"}
	for _, text := range []string{"I only drink green tea", "and I live in Lisbon"} {
		h.waitCompleted(h.requestTurn("s1", text, old).TurnId)
	}
	grantLease(t, h, "turn-flush")
	req := h.requestTurn("s1", "", turnOpts{sessionID: "old", flush: true, turnID: "turn-flush"})
	if c := h.waitCompleted(req.TurnId); c.GetStatus() != turnsv1.TurnStatus_TURN_STATUS_FAILED {
		t.Fatalf("flush: %v (%s), want FAILED", c.GetStatus(), c.GetError())
	}
	if leaseHolds(t, h) {
		t.Error("the flush failed and its lease still holds the session")
	}
}

// seqRefused fails every script run on a turn's reply seq counter with
// an error that is not Redis's unavailability (the consumer does not
// keep the turn in place for it).
type seqRefused struct{}

func (seqRefused) DialHook(next redis.DialHook) redis.DialHook { return next }
func (seqRefused) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}
func (seqRefused) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if name := cmd.Name(); name == "evalsha" || name == "eval" {
			for _, a := range cmd.Args() {
				if s, ok := a.(string); ok && strings.Contains(s, "turnseq:") {
					err := errors.New("ERR the seq script failed")
					cmd.SetErr(err)
					return err
				}
			}
		}
		return next(ctx, cmd)
	}
}

// A turn that fails on its last attempt records its end, and ends its
// lease (migration 00148), even when its apology's seq or final cannot
// be had. Before, it completed with no row, which then ended the lease,
// and the session's next message waited for the lease to expire.
func TestTurnFailedOnItsLastAttemptEndsItsLease(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.setGeneration("s1", 1)
	rdb := hookedRedis(t, seqRefused{})
	h.startWorker("w1", func(c *worker.Config, d *worker.Deps) {
		c.MaxDeliver = 1
		d.Redis = rdb
	})
	grantLease(t, h, "turn-failing")
	req := h.requestTurn("s1", "hello", turnOpts{turnID: "turn-failing"})
	if c := h.waitCompleted(req.TurnId); c.GetStatus() != turnsv1.TurnStatus_TURN_STATUS_FAILED {
		t.Fatalf("status %v (%s), want FAILED", c.GetStatus(), c.GetError())
	}
	var ended bool
	if err := h.db.QueryRow(context.Background(), `SELECT EXISTS (SELECT 1 FROM worker_turns WHERE turn_id = $1)`, req.TurnId).Scan(&ended); err != nil {
		t.Fatal(err)
	}
	if !ended {
		t.Error("the turn failed on its last attempt without recording its end")
	}
	if leaseHolds(t, h) {
		t.Error("the turn failed on its last attempt and its lease still holds the session")
	}
}
