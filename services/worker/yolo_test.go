package worker_test

import (
	"context"
	"encoding/json"
	"sync/atomic"
	"testing"
	"time"

	repliesv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/replies/v1"
	turnsv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/turns/v1"
	"github.com/switchboard-chat/switchboard/services/worker"
	"github.com/switchboard-chat/switchboard/services/worker/internal/tools"
)

// /yolo (a session_yolo row for the chat's key, migration 00115): the
// worker runs the chat's dangerous calls without asking, in every
// conversation of the chat, and records no standing approval; the turn
// of a router whose router.yolo_command is off (yolo_disabled) asks
// anyway; another chat asks; turned off (row gone), it asks again.
func TestYoloRunsDangerousCallsWithoutAsking(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.setGeneration("s1", 1)
	h.setGeneration("s2", 1)
	var runs atomic.Int32
	h.startWorker("w1", func(c *worker.Config, d *worker.Deps) {
		c.Agent.ApprovalTimeout = time.Minute
		c.Agent.DangerousTools = []string{"rm"}
		d.Tools = []tools.Tool{{Name: "rm", Run: func(context.Context, tools.Call, json.RawMessage) (string, error) {
			runs.Add(1)
			return "removed", nil
		}}}
	})
	ctx := context.Background()
	if _, err := h.db.Exec(ctx, `INSERT INTO session_yolo (session_key, set_by) VALUES ('s1', 'telegram:alice')`); err != nil {
		t.Fatal(err)
	}
	asked := func(req *turnsv1.TurnRequested) bool {
		for _, ev := range h.replies(req.TurnId) {
			if ev.GetToolProgress().GetPhase() == repliesv1.ToolPhase_TOOL_PHASE_AWAITING_APPROVAL {
				return true
			}
		}
		return false
	}
	for _, tt := range []struct {
		name, key string
		o         turnOpts
		ask       bool
	}{
		{"yolo chat", "s1", turnOpts{}, false},
		{"yolo chat, its next conversation", "s1", turnOpts{sessionID: "sid-next"}, false},
		{"yolo chat, router.yolo_command off", "s1", turnOpts{noYolo: true}, true},
		{"another chat", "s2", turnOpts{}, true},
	} {
		before := runs.Load()
		req := h.requestTurn(tt.key, "[[tool:rm {}]] clean up", tt.o)
		if tt.ask {
			waitFor(t, 30*time.Second, tt.name+": approval request", func() bool { return asked(req) })
			h.control(tt.key, turnsv1.ControlAction_CONTROL_ACTION_DENY, "")
		}
		h.waitCompleted(req.TurnId)
		if got := asked(req); got != tt.ask {
			t.Errorf("%s: asked %v, want %v", tt.name, got, tt.ask)
		}
		if ran := runs.Load() > before; ran == tt.ask {
			t.Errorf("%s: the tool ran %v", tt.name, ran)
		}
	}
	var standing int
	if err := h.db.QueryRow(ctx, `SELECT count(*) FROM agent_tool_approvals`).Scan(&standing); err != nil || standing != 0 {
		t.Errorf("standing approvals %d (%v), want none: yolo grants nothing", standing, err)
	}

	// Turned off: the next call of the chat asks.
	if _, err := h.db.Exec(ctx, `DELETE FROM session_yolo WHERE session_key = 's1'`); err != nil {
		t.Fatal(err)
	}
	req := h.requestTurn("s1", "[[tool:rm {}]] once more", turnOpts{})
	waitFor(t, 30*time.Second, "approval request after /yolo off", func() bool { return asked(req) })
	h.control("s1", turnsv1.ControlAction_CONTROL_ACTION_DENY, "")
	h.waitCompleted(req.TurnId)
}
