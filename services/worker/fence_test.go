package worker_test

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/switchboard-chat/switchboard/pkg/fakellm"
	turnsv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/turns/v1"
	"github.com/switchboard-chat/switchboard/services/worker"
	"github.com/switchboard-chat/switchboard/services/worker/internal/store"
	"github.com/switchboard-chat/switchboard/services/worker/internal/tools"
)

// blipOnLock sends the next script run on lock, once armed, to a Redis
// that cannot be reached (a closed port) instead of the real one: one
// real connection error, as a blip or a failover gives, then the real
// server again.
type blipOnLock struct {
	lock    string
	armed   atomic.Bool
	refused *redis.Client
}

func (b *blipOnLock) DialHook(next redis.DialHook) redis.DialHook { return next }
func (b *blipOnLock) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}
func (b *blipOnLock) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if name := cmd.Name(); (name == "evalsha" || name == "eval") && slices.Contains(cmd.Args(), any(b.lock)) && b.armed.CompareAndSwap(true, false) {
			return b.refused.Process(ctx, cmd)
		}
		return next(ctx, cmd)
	}
}

// One Redis error at the lock check before a tool (a blip, a failover)
// does not end the attempt: the check is tried again, the tool runs once
// and the turn completes in the same run. Before, the run ended with the
// error and the turn ran again (in place, from its last committed step).
func TestRedisBlipAtTheToolFenceDoesNotEndTheAttempt(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.setGeneration("s1", 1)
	refused := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", MaxRetries: -1})
	t.Cleanup(func() { _ = refused.Close() })
	blip := &blipOnLock{lock: h.locker.Key("s1"), refused: refused}
	rdb := hookedRedis(t, blip)
	var runs atomic.Int32
	h.startWorker("w1", func(_ *worker.Config, d *worker.Deps) {
		d.Redis = rdb
		d.Tools = []tools.Tool{{Name: "send", Run: func(context.Context, tools.Call, json.RawMessage) (string, error) {
			runs.Add(1)
			return "sent", nil
		}}}
	})
	var first atomic.Bool
	h.fake.SetScript(func(*fakellm.Request) (fakellm.Reply, bool) {
		// While the model asks for the tool: the next lock check (the
		// one before the tool) fails once.
		if first.CompareAndSwap(false, true) {
			blip.armed.Store(true)
		}
		return fakellm.Reply{}, false
	})
	req := h.requestTurn("s1", "[[tool:send {}]] tell them", turnOpts{lockTTL: time.Minute})
	if c := h.waitCompleted(req.TurnId); c.GetStatus() != turnsv1.TurnStatus_TURN_STATUS_COMPLETED {
		t.Fatalf("status %v (%s), want COMPLETED", c.GetStatus(), c.GetError())
	}
	if blip.armed.Load() {
		t.Fatal("no lock check met the blip")
	}
	if n := runs.Load(); n != 1 {
		t.Errorf("the tool ran %d times, want once", n)
	}
	// Each run of the turn starts with a typing indicator: one, when the
	// attempt went on; two, when it ended and the turn ran again.
	typing := 0
	for _, ev := range h.replies(req.TurnId) {
		if ev.GetTyping() != nil {
			typing++
		}
	}
	if typing != 1 {
		t.Errorf("the turn ran %d times, want once", typing)
	}
}

// A first attempt frozen (SIGSTOP, a VM pause) while the model answers
// wakes up after the bus gave its turn to a second attempt, which
// claimed the turn as it read it (store.BeginTurn, attempt 2). The Redis
// checks are bypassed here: the session lock still names the first
// attempt, as it would in the few instructions between a lock check and
// a commit. Postgres refuses the first attempt's write all the same —
// its final, or the step that carries a tool's result — and the attempt
// ends superseded, committing nothing. Before, the generation fence let
// it commit: both attempts run the same turn at the same generation.
func TestFrozenAttemptsWriteIsRefusedOnceALaterAttemptClaimedTheTurn(t *testing.T) {
	t.Parallel()
	for name, text := range map[string]string{
		"final": "hello there",
		"step":  "[[tool:send {}]] tell them",
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			h := newHarness(t)
			h.setGeneration("s1", 1)
			h.startWorker("w1", func(_ *worker.Config, d *worker.Deps) {
				d.Tools = []tools.Tool{{Name: "send", Run: func(context.Context, tools.Call, json.RawMessage) (string, error) {
					return "sent", nil
				}}}
			})
			// requestTurn names the turn by the harness's next number.
			turnID := fmt.Sprintf("turn-s1-%d", h.seq.Load()+1)
			var froze atomic.Bool
			h.fake.SetScript(func(*fakellm.Request) (fakellm.Reply, bool) {
				if froze.CompareAndSwap(false, true) {
					// While the first attempt is frozen, the second starts.
					second := store.Turn{TurnID: turnID, SessionKey: "s1", SessionID: "sid-s1", Generation: 1, Attempt: 2, LockedAt: time.Now()}
					if _, err := store.New(h.db).BeginTurn(context.Background(), second); err != nil {
						t.Errorf("the second attempt's claim: %v", err)
					}
				}
				return fakellm.Reply{}, false
			})
			req := h.requestTurn("s1", text, turnOpts{lockTTL: time.Minute})
			if req.TurnId != turnID {
				t.Fatalf("turn %s, want %s", req.TurnId, turnID)
			}
			if c := h.waitCompleted(req.TurnId); c.GetStatus() != turnsv1.TurnStatus_TURN_STATUS_STALE {
				t.Errorf("the frozen attempt ended %v (%s), want STALE", c.GetStatus(), c.GetError())
			}
			if got := h.transcript(req.TurnId); len(got) != 0 {
				t.Errorf("the frozen attempt committed %q after the second attempt's claim", got)
			}
			if f, err := store.New(h.db).Decided(context.Background(), req.TurnId); err != nil || f != nil {
				t.Errorf("the frozen attempt decided the turn: %+v %v", f, err)
			}
			for _, ev := range h.replies(req.TurnId) {
				if ev.GetFinalText() != nil {
					t.Errorf("the frozen attempt published a final: %v", ev)
				}
			}
		})
	}
}

// The bus's delivery count starts again at 1 when the workers' consumer
// is recreated (an operator deleted it, a stream was restored) or the
// turn's message is published anew. An attempt of the turn that claimed
// it before (here its third delivery, whose worker then died) must not
// refuse the new first delivery, which took the session lock after it:
// the turn completes instead of ending stale with no answer.
func TestATurnDeliveredAgainFromOneAfterALaterAttemptsClaimCompletes(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.setGeneration("s1", 1)
	h.startWorker("w1", nil)
	turnID := fmt.Sprintf("turn-s1-%d", h.seq.Load()+1)
	before := store.Turn{TurnID: turnID, SessionKey: "s1", SessionID: "sid-s1", Generation: 1, Attempt: 3,
		LockedAt: time.Now().Add(-time.Minute)}
	if _, err := store.New(h.db).BeginTurn(context.Background(), before); err != nil {
		t.Fatal(err)
	}
	req := h.requestTurn("s1", "hello", turnOpts{})
	if req.TurnId != turnID {
		t.Fatalf("turn %s, want %s", req.TurnId, turnID)
	}
	if c := h.waitCompleted(req.TurnId); c.GetStatus() != turnsv1.TurnStatus_TURN_STATUS_COMPLETED {
		t.Errorf("the turn delivered again from 1 ended %v (%s), want COMPLETED", c.GetStatus(), c.GetError())
	}
}
