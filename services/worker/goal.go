package worker

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	eventsv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/events/v1"
	repliesv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/replies/v1"
	"github.com/switchboard-chat/switchboard/pkg/goal"
	"github.com/switchboard-chat/switchboard/pkg/llm"
	"github.com/switchboard-chat/switchboard/services/worker/internal/store"
)

// The goal judge (Hermes's judge_goal, hermes_cli/goals.py): after a
// turn of a conversation with an active standing goal (/goal; the
// router says so on the turn, TurnRequested.goal_active) completes with
// an answer, the worker asks the judge model whether the goal is done,
// blocked or to be continued, and records what that does — in one
// Postgres transaction (sessionstore.RecordVerdict): the verdict keyed
// by the turn, the goal's new state, and the continuation prompt queued
// in the session's queue, where the user's messages wait, as the
// message goal:<turn id>. It does so after the answer is published and
// before the session lock is released, then announces the verdict's
// status line and publishes the turn's completion, which starts the
// continuation as it starts any message queued behind a turn. A crash
// anywhere is a redelivery of the turn: its final is republished under
// its id, and its verdict, once committed, is found rather than asked
// for again, so the turn is counted once, one continuation is queued
// and one status line shown (the same bus id). Before the commit,
// nothing of it happened and the redelivery judges the turn.
//
// The judge fails open, as Hermes's: a call that fails or an answer
// that is no verdict is "continue", and only MaxTransportFailures or
// MaxParseFailures of them in a row pause the goal (the turn budget
// bounds the rest).

// judgeTimeout bounds the judge's call (Hermes's default).
const judgeTimeout = 30 * time.Second

// judgeMaxTokens is the judge's output budget (Hermes's default:
// reasoning models think before the one-line verdict).
const judgeMaxTokens = 4096

// goalStep judges the turn against the conversation's goal, when it has
// one, and reports whether a continuation waits in the queue. Like the
// turn's other writes it is fenced: a turn that lost its lock, or whose
// session moved past its generation, writes nothing (errLockLost,
// sessionstore.ErrStaleGeneration). Any other error is a database
// error: the turn is retried.
func (r *turnRun) goalStep(ctx context.Context, fin store.Final) error {
	if !r.judges(fin) {
		return nil
	}
	if r.lockLost.Load() {
		return errLockLost
	}
	key, sid, turnID := r.req.GetSessionKey(), r.req.GetSessionId(), r.req.GetTurnId()
	v, found, err := r.s.goals.TurnVerdict(ctx, turnID)
	if err != nil {
		return fmt.Errorf("read goal verdict: %w", err)
	}
	if !found {
		g, err := r.s.goals.Goal(ctx, key, sid)
		if err != nil {
			return fmt.Errorf("read goal: %w", err)
		}
		if g == nil || g.Status != goal.Active {
			return nil // paused or cleared while the turn ran
		}
		j := r.askJudge(ctx, g, fin.Text)
		if r.lockLost.Load() {
			return errLockLost
		}
		// Fenced: a session that moved on meanwhile (/stop, /new) takes
		// no verdict, and no continuation is queued for it.
		v, err = r.s.goals.Fenced(key, r.req.GetGeneration()).RecordVerdict(ctx, key, sid, turnID, j, r.continuation)
		if err != nil {
			return fmt.Errorf("record goal verdict: %w", err)
		}
		if v.Message != "" {
			goalVerdicts.WithLabelValues(verdictLabel(j)).Inc()
			r.log.Info("goal judged", "verdict", j.Verdict, "continued", v.Continued, "parse_failed", j.ParseFailed, "judge_failed", j.TransportFailed)
		}
	}
	r.goalQueued = v.Continued
	if v.Message == "" {
		return nil
	}
	// Its own turn id, as a router's notice: one status line per judged
	// turn, republished under the same id by a retry.
	err = r.publishGoalNotice(ctx, v.Message)
	if err != nil {
		return fmt.Errorf("announce goal verdict: %w", err)
	}
	return nil
}

// judges reports whether the turn's answer goes to the goal judge: a
// chat's turn that completed with a text answer, in a conversation with
// an active goal.
func (r *turnRun) judges(fin store.Final) bool {
	if !r.req.GetGoalActive() || r.s.goals == nil || fin.Status != store.StatusCompleted || fin.Kind != store.FinalText {
		return false
	}
	return r.req.GetBackgroundTaskId() == "" && r.req.GetSideQuestion() == nil && r.target != nil
}

// verdictLabel names a verdict for switchboard_worker_goal_verdicts_total.
func verdictLabel(j goal.Judged) string {
	switch {
	case j.TransportFailed:
		return "judge_error"
	case j.ParseFailed:
		return "unparsed"
	}
	return j.Verdict
}

// askJudge asks the judge model about response, the turn's answer
// (Hermes's judge_goal), failing open.
func (r *turnRun) askJudge(ctx context.Context, g *goal.State, response string) goal.Judged {
	if strings.TrimSpace(response) == "" {
		return goal.Judged{Verdict: goal.VerdictContinue, Reason: "empty response (nothing to evaluate)"}
	}
	override := r.s.cfg.Agent.GoalJudgeModel
	if override == "" {
		override = r.req.GetModelOverride()
	}
	backend, model := r.s.backendFor(override)
	if backend.Provider == nil {
		return goal.Judged{Verdict: goal.VerdictContinue, Reason: "goal judge unavailable: no model provider", TransportFailed: true}
	}
	zero := 0.0
	cctx, cancel := context.WithTimeout(ctx, judgeTimeout)
	defer cancel()
	resp, err := llm.Complete(cctx, backend.Provider, llm.Request{Model: model, System: goal.JudgeSystem,
		Messages:  []llm.Message{{Role: llm.RoleUser, Content: g.JudgePrompt(response, r.s.now())}},
		MaxTokens: judgeMaxTokens, Temperature: &zero})
	if err != nil {
		if ctx.Err() != nil {
			return goal.Judged{Verdict: goal.VerdictContinue, Reason: "judge error: " + ctx.Err().Error(), TransportFailed: true}
		}
		r.log.Info("goal judge call failed; continuing", "class", string(llm.ClassOf(err)), "err", err)
		return goal.Judged{Verdict: goal.VerdictContinue, Reason: "judge error: " + judgeErrorName(err), TransportFailed: true}
	}
	verdict, reason, parseFailed := goal.ParseVerdict(resp.Text)
	return goal.Judged{Verdict: verdict, Reason: reason, ParseFailed: parseFailed}
}

// judgeErrorName is a short name of the judge's failure (Hermes shows
// the exception's type).
func judgeErrorName(err error) string {
	if errors.Is(err, context.DeadlineExceeded) {
		return "timeout"
	}
	return string(llm.ClassOf(err))
}

// continuation is the message that continues toward g: Hermes's
// continuation prompt as the user's next message in this chat, from the
// source and reply route of the turn's last input.
func (r *turnRun) continuation(g goal.State) *eventsv1.MessageReceived {
	ev := &eventsv1.MessageReceived{Text: g.ContinuationPrompt(), Source: r.req.GetOrigin(), ReplyRoute: r.req.GetReplyRoute(),
		ReceivedAt: timestamppb.New(r.s.now())}
	if in := r.req.GetInputs(); len(in) > 0 {
		last := in[len(in)-1]
		if last.GetSource() != nil {
			ev.Source = last.GetSource()
		}
		if last.GetReplyRoute() != nil {
			ev.ReplyRoute = last.GetReplyRoute()
		}
	}
	ev.Source = proto.CloneOf(ev.Source)
	return ev
}

// publishGoalNotice sends the verdict's status line to the chat, as a
// notice of its own turn id (goal:<turn id>, seq 1), like a router's
// notice: after the turn's answer, before the next turn's replies.
func (r *turnRun) publishGoalNotice(ctx context.Context, text string) error {
	id := "goal:" + r.req.GetTurnId()
	ev := &repliesv1.ReplyEvent{TurnId: id, SessionKey: r.req.GetSessionKey(), Generation: r.req.GetGeneration(), Seq: 1,
		Target: r.target, CreatedAt: timestamppb.New(r.s.now()),
		Body: &repliesv1.ReplyEvent_Notice{Notice: &repliesv1.Notice{Text: text, Kind: "goal"}}}
	if _, err := r.s.bus.Publish(ctx, r.s.bus.Topology().ReplySubject(r.req.GetSessionKey()), id, ev); err != nil {
		return fmt.Errorf("publish goal notice: %w", err)
	}
	return nil
}
