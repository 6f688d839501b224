package worker_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	turnsv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/turns/v1"
	"github.com/switchboard-chat/switchboard/pkg/redisx"
	"github.com/switchboard-chat/switchboard/pkg/telemetry/telemetrytest"
	"github.com/switchboard-chat/switchboard/services/worker"
	"github.com/switchboard-chat/switchboard/services/worker/internal/tools"
)

// The worker's metrics count what happened to its turns. The test is not
// parallel: it reads process-wide counters before and after.
func TestWorkerMetrics(t *testing.T) {
	metric := func(name string, labels map[string]string) float64 { return telemetrytest.Value(t, name, labels) }
	grew := func(name string, labels map[string]string, before, by float64) {
		t.Helper()
		if got := metric(name, labels); got != before+by {
			t.Errorf("%s%v = %v, want %v", name, labels, got, before+by)
		}
	}

	t.Run("tools and turn time", func(t *testing.T) {
		h := newHarness(t)
		h.setGeneration("s1", 1)
		h.startWorker("w1", func(_ *worker.Config, d *worker.Deps) {
			d.Tools = []tools.Tool{{Name: "lookup", Run: func(context.Context, tools.Call, json.RawMessage) (string, error) {
				return "found", nil
			}}}
		})
		ok := map[string]string{"tool": "lookup", "result": "ok"}
		unknown := map[string]string{"tool": "unknown", "result": "unknown"}
		completed := map[string]string{"status": "completed"}
		okBefore, unknownBefore, turnsBefore := metric("switchboard_worker_tool_calls_total", ok),
			metric("switchboard_worker_tool_calls_total", unknown), metric("switchboard_worker_turn_seconds", completed)

		req := h.requestTurn("s1", "[[tool:lookup {}]] [[tool:nosuchtool {}]] find it", turnOpts{})
		if c := h.waitCompleted(req.TurnId); c.GetStatus() != turnsv1.TurnStatus_TURN_STATUS_COMPLETED {
			t.Fatalf("status %v", c.GetStatus())
		}
		grew("switchboard_worker_tool_calls_total", ok, okBefore, 1)
		grew("switchboard_worker_tool_calls_total", unknown, unknownBefore, 1)
		// The turn's time is observed after its completion is published
		// (complete), so the completion's arrival does not mean it was.
		waitFor(t, 10*time.Second, "the turn's time observed", func() bool {
			return metric("switchboard_worker_turn_seconds", completed) >= turnsBefore+1
		})
		grew("switchboard_worker_turn_seconds", completed, turnsBefore, 1)
		waitFor(t, 10*time.Second, "no turn in flight", func() bool { return metric("switchboard_worker_turns_inflight", nil) == 0 })
	})

	t.Run("lock lost", func(t *testing.T) {
		for _, tc := range []struct {
			reason string
			lose   func(h *harness)
		}{
			{"moved_on", func(h *harness) { // what /stop and /new do
				h.setGeneration("s1", 2)
				if err := h.rdb.Del(context.Background(), h.locker.Key("s1")).Err(); err != nil {
					t.Fatal(err)
				}
			}},
			{"taken", func(h *harness) { // a stalled attempt's lock, taken over by another attempt of the turn
				owner, err := h.locker.Owner(context.Background(), "s1")
				if err != nil {
					t.Fatal(err)
				}
				if err := h.rdb.Set(context.Background(), h.locker.Key("s1"), redisx.Holder(redisx.GrantOf(owner), "w2.2"), time.Minute).Err(); err != nil {
					t.Fatal(err)
				}
			}},
		} {
			t.Run(tc.reason, func(t *testing.T) {
				labels := map[string]string{"reason": tc.reason}
				before := metric("switchboard_worker_lock_lost_total", labels)
				h := newHarness(t)
				req, release := startBlockedTurn(t, h)
				if metric("switchboard_worker_turns_inflight", nil) < 1 {
					t.Error("a running turn is not counted in flight")
				}
				tc.lose(h)
				waitFor(t, 10*time.Second, "the lock's loss", func() bool {
					return metric("switchboard_worker_lock_lost_total", labels) == before+1
				})
				close(release)
				if c := h.waitCompleted(req.TurnId); c.GetStatus() != turnsv1.TurnStatus_TURN_STATUS_STALE {
					t.Fatalf("status %v, want STALE", c.GetStatus())
				}
			})
		}
	})
}
