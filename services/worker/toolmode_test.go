package worker_test

import (
	"testing"

	turnsv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/turns/v1"
)

// The tool progress mode /verbose chose, on the turn, goes on the turn's
// tool progress events, for delivery to show them by; the other events
// do not carry it, and a turn without one leaves it empty.
func TestToolProgressModeRidesOnToolSteps(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.setGeneration("s1", 1)
	h.setGeneration("s2", 1)
	h.startWorker("w1", nil)
	for _, tt := range []struct{ key, mode string }{{"s1", "verbose"}, {"s2", ""}} {
		req := h.requestTurn(tt.key, `look [[tool:clock {"tz":"UTC"}]]`, turnOpts{toolMode: tt.mode})
		if done := h.waitCompleted(req.TurnId); done.GetStatus() != turnsv1.TurnStatus_TURN_STATUS_COMPLETED {
			t.Fatalf("status %v (%s)", done.GetStatus(), done.GetError())
		}
		steps := 0
		for _, ev := range h.replies(req.TurnId) {
			want := ""
			if ev.GetToolProgress() != nil {
				steps++
				want = tt.mode
			}
			if got := ev.GetToolProgressMode(); got != want {
				t.Errorf("%s: event %d (%T) carries mode %q, want %q", tt.key, ev.GetSeq(), ev.GetBody(), got, want)
			}
		}
		if steps == 0 {
			t.Errorf("%s: no tool steps published", tt.key)
		}
	}
}
