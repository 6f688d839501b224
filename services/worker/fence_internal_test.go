package worker

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	turnsv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/turns/v1"
	"github.com/switchboard-chat/switchboard/pkg/pg/pgtest"
	"github.com/switchboard-chat/switchboard/pkg/redisx"
	"github.com/switchboard-chat/switchboard/pkg/redisx/redistest"
	"github.com/switchboard-chat/switchboard/services/worker/internal/store"
)

// lostDuringFence stands in for what happens to the session lock while
// the lock check before a tool waits for Redis: once armed, the next
// script run on lock (the check) does not reach Redis; meanwhile
// another attempt takes the lock, the turn's renewal (keepLock) finds
// it taken, and the other attempt gives it back (it ended). The check
// then fails as a blip does.
type lostDuringFence struct {
	lock   string
	armed  atomic.Bool
	during func(context.Context)
}

func (b *lostDuringFence) DialHook(next redis.DialHook) redis.DialHook { return next }
func (b *lostDuringFence) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}
func (b *lostDuringFence) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if name := cmd.Name(); (name == "evalsha" || name == "eval") && slices.Contains(cmd.Args(), any(b.lock)) && b.armed.CompareAndSwap(true, false) {
			b.during(ctx)
			err := errors.New("dial tcp 127.0.0.1:6379: connect: connection refused")
			cmd.SetErr(err)
			return err
		}
		return next(ctx, cmd)
	}
}

// A lock lost while the check before a tool is tried again stops the
// tool, even when the lock is free again by the retry (the attempt that
// took the turn over ended): the turn is stopping, and the tool's side
// effect would be done twice. Before, the retry claimed the free lock
// again and the tool ran.
func TestLockLostDuringTheFenceRetryRunsNoTool(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	rdb, prefix := redistest.New(t)
	locker := redisx.NewLocker(rdb, prefix)
	ctx := context.Background()
	if _, err := db.Exec(ctx, `INSERT INTO sessions (session_key, session_id, platform, generation)
		VALUES ('s1', 'sid-s1', 'telegram', 1)`); err != nil {
		t.Fatal(err)
	}
	token := redisx.NewToken()
	r := &turnRun{s: &Service{locker: locker, store: store.New(db)}, log: slog.New(slog.DiscardHandler),
		req: &turnsv1.TurnRequested{SessionKey: "s1", LockToken: token},
		st:  store.Turn{SessionKey: "s1", SessionID: "sid-s1", Generation: 1},
		ttl: time.Minute, holder: token + "/1", ctl: newControl(nil)}
	if c, err := locker.Claim(ctx, "s1", token, r.holder, r.ttl); err != nil || c != redisx.ClaimedFree {
		t.Fatalf("claim: %v %v", c, err)
	}
	other := token + "/2"
	hook := &lostDuringFence{lock: locker.Key("s1"), during: func(ctx context.Context) {
		if err := rdb.Set(ctx, locker.Key("s1"), other, time.Minute).Err(); err != nil {
			t.Error(err)
		}
		if err := r.renewLock(ctx); !errors.Is(err, errLockLost) {
			t.Errorf("the renewal found %v, want the lock lost", err)
		}
		if err := locker.Release(ctx, "s1", other); err != nil {
			t.Error(err)
		}
	}}
	rdb.AddHook(hook)
	hook.armed.Store(true)
	err := r.fenceTool(ctx)
	if hook.armed.Load() {
		t.Fatal("the check met no Redis error")
	}
	if !errors.Is(err, errLockLost) {
		t.Fatalf("fenceTool: %v, want the lock lost (no tool runs)", err)
	}
}

// redisDown fails every script run on lock (Redis out of reach),
// counting them; first runs at the first.
type redisDown struct {
	lock   string
	checks atomic.Int32
	first  func()
}

func (b *redisDown) DialHook(next redis.DialHook) redis.DialHook { return next }
func (b *redisDown) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}
func (b *redisDown) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if name := cmd.Name(); (name == "evalsha" || name == "eval") && slices.Contains(cmd.Args(), any(b.lock)) {
			if b.checks.Add(1) == 1 {
				b.first()
			}
			err := errors.New("dial tcp 127.0.0.1:6379: connect: connection refused")
			cmd.SetErr(err)
			return err
		}
		return next(ctx, cmd)
	}
}

// A /stop that comes while the check before a tool waits to be tried
// again ends the wait: the tool is not run, and the turn stops without
// trying Redis again. Before, the check went on through its retries
// (up to a third of the lock's TTL while Redis does not answer) and the
// attempt ended with Redis's error.
func TestStopDuringTheFenceRetryEndsIt(t *testing.T) {
	t.Parallel()
	rdb, prefix := redistest.New(t)
	locker := redisx.NewLocker(rdb, prefix)
	token := redisx.NewToken()
	r := &turnRun{s: &Service{locker: locker}, log: slog.New(slog.DiscardHandler),
		req: &turnsv1.TurnRequested{SessionKey: "s1", LockToken: token},
		st:  store.Turn{SessionKey: "s1", Generation: 1},
		ttl: time.Minute, holder: token + "/1", ctl: newControl(nil)}
	down := &redisDown{lock: locker.Key("s1"), first: func() {
		r.ctl.apply(&turnsv1.TurnControlRequested{Action: turnsv1.ControlAction_CONTROL_ACTION_STOP})
	}}
	rdb.AddHook(down)
	if err := r.fenceTool(context.Background()); !errors.Is(err, errStopped) {
		t.Fatalf("fenceTool: %v, want the turn stopped", err)
	}
	if n := down.checks.Load(); n != 1 {
		t.Errorf("the lock was checked %d times, want once (none after the stop)", n)
	}
}
