package worker

import (
	"context"
	"fmt"

	"google.golang.org/protobuf/types/known/timestamppb"

	repliesv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/replies/v1"
	"github.com/switchboard-chat/switchboard/pkg/goal"
	"github.com/switchboard-chat/switchboard/pkg/loop"
	"github.com/switchboard-chat/switchboard/pkg/sessionstore"
	"github.com/switchboard-chat/switchboard/services/worker/internal/store"
)

// A /loop wakeup's answer (Hermes's complete_tick, hermes_cli/loops.py):
// the router queued the wakeup as the message loop:<id>:<tick>
// (services/router/loop.go); after the turn that ran it answers, and
// before the session lock is released, the worker evaluates the answer
// — the agent's LOOP_COMPLETE, the --until condition asked of the goal
// judge (failing open, as Hermes's), the --times cap, the backstop
// budget — and records what that does to the loop in one transaction
// (sessionstore.CompleteWakeup), with the line it announces. A
// redelivered turn finds its wakeup evaluated and announces the same
// line under the same bus id; a loop replaced, paused or stopped while
// the wakeup ran takes no evaluation.

// loopWakeup is the event id of the turn's loop wakeup ("" none).
func (r *turnRun) loopWakeup() string {
	for _, in := range r.req.GetInputs() {
		if kind, _, ok := sessionstore.WakeupOf(in.GetEventId()); ok && kind == loop.KindLoop {
			return in.GetEventId()
		}
	}
	return ""
}

// loopStep evaluates the answer fin to the turn's loop wakeup, if it
// ran one. It is fenced as goalStep is (errLockLost,
// sessionstore.ErrStaleGeneration: nothing written); any other error is
// a database error: the turn is retried.
func (r *turnRun) loopStep(ctx context.Context, fin store.Final) error {
	if r.s.goals == nil || fin.Status != store.StatusCompleted || fin.Kind != store.FinalText || r.target == nil {
		return nil
	}
	eventID := r.loopWakeup()
	if eventID == "" {
		return nil
	}
	if r.lockLost.Load() {
		return errLockLost
	}
	key := r.req.GetSessionKey()
	l, err := r.s.goals.Loop(ctx, key, r.req.GetSessionId(), loop.KindLoop)
	if err != nil {
		return fmt.Errorf("read loop: %w", err)
	}
	var v loop.Verdict
	if l != nil && l.Status == loop.Active && l.Until != "" && !loop.SignalsComplete(fin.Text) {
		// The judge is asked outside the transaction; a retry that finds
		// the wakeup evaluated ignores its answer.
		j := r.askJudge(ctx, &goal.State{Goal: l.Until}, fin.Text)
		v = loop.Verdict{Verdict: j.Verdict, Reason: j.Reason}
	}
	if r.lockLost.Load() {
		return errLockLost
	}
	// Fenced, as goalStep's verdict.
	c, err := r.s.goals.Fenced(key, r.req.GetGeneration()).CompleteWakeup(ctx, key, eventID, fin.Text, v)
	if err != nil {
		return fmt.Errorf("complete loop wakeup: %w", err)
	}
	if c.Label != "" {
		loopTicks.WithLabelValues(c.Label).Inc()
		r.log.Info("loop wakeup evaluated", "outcome", c.Label)
	}
	if c.Message == "" {
		return nil
	}
	id := "loop:" + r.req.GetTurnId()
	ev := &repliesv1.ReplyEvent{TurnId: id, SessionKey: key, Generation: r.req.GetGeneration(), Seq: 1,
		Target: r.target, CreatedAt: timestamppb.New(r.s.now()),
		Body: &repliesv1.ReplyEvent_Notice{Notice: &repliesv1.Notice{Text: c.Message, Kind: "loop"}}}
	if _, err := r.s.bus.Publish(ctx, r.s.bus.Topology().ReplySubject(key), id, ev); err != nil {
		return fmt.Errorf("publish loop notice: %w", err)
	}
	return nil
}
