package worker_test

import (
	"context"
	"strings"
	"testing"

	"github.com/switchboard-chat/switchboard/pkg/fakellm"
	turnsv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/turns/v1"
	"github.com/switchboard-chat/switchboard/pkg/sessionstore"
)

// The goal judge runs after the turn's answer, under its lock: a session
// that moved on meanwhile (/stop, /new: the generation advanced) gets no
// write from the superseded turn, as none of its other writes would land
// (DESIGN.md, fencing): no verdict counted, no continuation queued into
// the session's queue, no status line. Without a move the same turn
// records its verdict.
func TestGoalStepOfASupersededTurnWritesNothing(t *testing.T) {
	t.Parallel()
	for _, moved := range []bool{false, true} {
		name := map[bool]string{false: "current", true: "moved on"}[moved]
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			h := newHarness(t)
			ctx := context.Background()
			h.setGeneration("s1", 1)
			goals := sessionstore.New(h.db)
			if _, err := goals.SetGoal(ctx, "s1", "sid-s1", "ship it [[verdict:continue]]", 20); err != nil {
				t.Fatal(err)
			}
			h.fake.SetScript(func(req *fakellm.Request) (fakellm.Reply, bool) {
				if moved && len(req.Tools) == 0 && strings.Contains(req.System, `"verdict"`) {
					// A /new while the judge thinks.
					if _, err := h.db.Exec(ctx, `UPDATE sessions SET generation = generation + 1 WHERE session_key = 's1'`); err != nil {
						t.Error(err)
					}
				}
				return fakellm.Reply{}, false
			})
			h.startWorker("w1", nil)
			req := h.requestTurn("s1", "work on it", turnOpts{goal: true})
			if c := h.waitCompleted(req.TurnId); c.GetStatus() != turnsv1.TurnStatus_TURN_STATUS_COMPLETED {
				t.Fatalf("status %v", c.GetStatus())
			}
			if got := checkReplies(t, h.replies(req.TurnId)).GetFinalText().GetText(); got != "echo: work on it" {
				t.Errorf("final %q", got)
			}
			_, found, err := goals.TurnVerdict(ctx, req.TurnId)
			if err != nil {
				t.Fatal(err)
			}
			g, err := goals.Goal(ctx, "s1", "sid-s1")
			if err != nil {
				t.Fatal(err)
			}
			queued, err := goals.QueueLen(ctx, "s1")
			if err != nil {
				t.Fatal(err)
			}
			notices := len(h.replies("goal:" + req.TurnId))
			if moved {
				if found || g.TurnsUsed != 0 || queued != 0 || notices != 0 {
					t.Errorf("the superseded turn wrote: verdict %v, %d turns used, %d queued, %d notices", found, g.TurnsUsed, queued, notices)
				}
				return
			}
			if !found || g.TurnsUsed != 1 || queued != 1 || notices != 1 {
				t.Errorf("verdict %v, %d turns used, %d queued, %d notices; want the verdict recorded", found, g.TurnsUsed, queued, notices)
			}
		})
	}
}
