package worker_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	turnsv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/turns/v1"
	"github.com/switchboard-chat/switchboard/pkg/redisx"
	"github.com/switchboard-chat/switchboard/pkg/sessionstore"
	"github.com/switchboard-chat/switchboard/services/worker"
	"github.com/switchboard-chat/switchboard/services/worker/internal/tools"
)

// A turn a /stop or /new fenced off (the session moved past its
// generation) records its end in worker_turns once its attempt has
// stopped, with what it used: the session then no longer counts as one
// whose turn may run (sessionstore TurnMayRun), so an operator's reset of
// it needs no stop, and no NATS. It recorded nothing, and counted as
// running until the session's next turn. A turn that only lost its lock
// to another attempt of itself (the session still at its generation)
// may still run there: it records nothing.
func TestFencedTurnRecordsItsEnd(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name string
		// fence ends the turn, whose tool is running (nil: the turn is
		// fenced before a worker claims it).
		fence   func(h *harness, req *turnsv1.TurnRequested)
		ended   bool // the turn's end is recorded, fenced
		modeled bool // the turn made a model call: its usage goes with the record
	}{
		{"stopped while its tool ran", func(h *harness, req *turnsv1.TurnRequested) {
			h.setGeneration(req.GetSessionKey(), req.GetGeneration()+1) // the router's /stop or /new
			h.control(req.GetSessionKey(), turnsv1.ControlAction_CONTROL_ACTION_STOP, "")
		}, true, true},
		{"fenced while its tool ran, no stop", func(h *harness, req *turnsv1.TurnRequested) {
			// The admin reset without a bus, or a stop that was lost:
			// the turn's next write is refused.
			h.setGeneration(req.GetSessionKey(), req.GetGeneration()+1)
			if err := h.rdb.Del(context.Background(), h.locker.Key(req.GetSessionKey())).Err(); err != nil {
				h.t.Error(err)
			}
		}, true, true},
		{"stopped before it was claimed", nil, true, false},
		{"lock taken by another attempt", func(h *harness, req *turnsv1.TurnRequested) {
			// Another attempt at the same turn (a redelivery after this
			// one was presumed dead) holds the lock now: the turn runs
			// there, and this attempt's loss is no end of it.
			if err := h.rdb.Set(context.Background(), h.locker.Key(req.GetSessionKey()), redisx.Holder(req.GetLockToken(), "w9.2"), time.Minute).Err(); err != nil {
				h.t.Error(err)
			}
		}, false, true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			h := newHarness(t)
			const key = "s1"
			h.setGeneration(key, 1)
			entered := make(chan struct{}, 1)
			h.startWorker("w1", func(_ *worker.Config, d *worker.Deps) {
				d.Tools = []tools.Tool{{Name: "wait", Run: func(ctx context.Context, _ tools.Call, _ json.RawMessage) (string, error) {
					entered <- struct{}{}
					<-ctx.Done() // a stop or the lock's loss ends it
					return "", ctx.Err()
				}}}
			})
			var req *turnsv1.TurnRequested
			if tt.fence == nil {
				// As the router's /stop of a turn waiting for a worker:
				// the next generation, and its grant released.
				h.setGeneration(key, 2)
				req = h.requestTurn(key, "[[tool:wait {}]] x", turnOpts{noLock: true, generation: 1})
			} else {
				req = h.requestTurn(key, "[[tool:wait {}]] x", turnOpts{lockTTL: 1500 * time.Millisecond})
				<-entered
				tt.fence(h, req)
			}
			c := h.waitCompleted(req.GetTurnId())
			if c.GetStatus() != turnsv1.TurnStatus_TURN_STATUS_STALE {
				t.Fatalf("status %v, want STALE", c.GetStatus())
			}

			var status string
			var input int64
			err := h.db.QueryRow(ctx, `SELECT status, input_tokens FROM worker_turns WHERE turn_id = $1`, req.GetTurnId()).Scan(&status, &input)
			switch {
			case !tt.ended:
				if !errors.Is(err, pgx.ErrNoRows) {
					t.Fatalf("the turn's row: %q, %v; want none (it may run in the attempt holding the lock)", status, err)
				}
			case err != nil:
				t.Fatalf("no record of the fenced turn's end: %v", err)
			case status != "fenced":
				t.Errorf("the fenced turn's row says %q, want fenced", status)
			}
			// Its usage is booked once: with the record, or by the router.
			if tt.ended && tt.modeled && (input == 0 || input != c.GetUsage().GetInputTokens()) {
				t.Errorf("recorded %d input tokens, the attempt used %d", input, c.GetUsage().GetInputTokens())
			}
			if c.GetUsageRecorded() != tt.ended {
				t.Errorf("usage_recorded %v, want %v", c.GetUsageRecorded(), tt.ended)
			}

			mayRun, err := sessionstore.New(h.db).TurnMayRun(ctx, sessionstore.Session{Key: key, LastTurnID: req.GetTurnId()})
			if err != nil {
				t.Fatal(err)
			}
			if mayRun == tt.ended {
				t.Errorf("TurnMayRun %v after the turn ended, want %v", mayRun, !tt.ended)
			}
		})
	}
}
