package worker

import (
	"context"

	"github.com/switchboard-chat/switchboard/pkg/approvalmode"
	"github.com/switchboard-chat/switchboard/services/worker/internal/store"
)

// The consecutive-denial circuit breaker of smart approvals (Hermes's
// _denial_tally; approvalmode/breaker.go): the judge's DENY verdicts in a
// row in one conversation are counted, an approval (the judge's APPROVE
// or the user's /approve) resets the count, and from approvals.denial
// _breaker_threshold on, the text the model reads for a denied call (the
// user denied it, did not answer in time, or a /background task could
// not ask) ends with Hermes's CIRCUIT BREAKER addendum. Nothing else
// changes: the calls are still judged and asked about as before.
//
// The tally is in Postgres (agent_denial_breaker, migration 00213), keyed
// by the conversation's session id, not in the worker's memory as
// Hermes's is: the calls of one conversation are judged by whichever
// worker runs its turn, and a turn moves to another worker when the
// first dies or loses the lock. Postgres rather than Redis because the
// turn's other approval state (standing approvals, "/deny all" answers)
// is there and the session retention already deletes it with the
// conversation; the few statements are one indexed row each, and only
// at a dangerous call. A conversation (session id) rather than the
// session key, as the standing "/approve session" approvals: /new starts
// a conversation whose model has not seen the earlier denials. The row
// records the call counted last, so a resumed turn that asks the judge
// again about the same call counts it once (RecordJudgeDenial).
//
// As Hermes's, a user's denial, a timeout, ESCALATE and a judge that
// failed count nothing and reset nothing. With the threshold 0 or less
// the worker neither reads nor writes the tally.

// countJudgeDenial counts the judge's DENY of tc.
func (r *turnRun) countJudgeDenial(ctx context.Context, tc store.ToolCall) error {
	if r.s.cfg.ApprovalsDenialBreakerThreshold <= 0 {
		return nil
	}
	n, err := r.s.store.RecordJudgeDenial(ctx, r.req.GetSessionId(), r.req.GetTurnId(), tc.ID)
	if err != nil {
		return err
	}
	r.log.Info("smart approval: judge denials in a row", "tool", tc.Name, "denials", n)
	return nil
}

// resetJudgeDenials ends the conversation's run of judge denials.
func (r *turnRun) resetJudgeDenials(ctx context.Context) error {
	if r.s.cfg.ApprovalsDenialBreakerThreshold <= 0 {
		return nil
	}
	return r.s.store.ResetJudgeDenials(ctx, r.req.GetSessionId())
}

// breakerAddendum is the text appended to the result of the denied call
// tc: Hermes's CIRCUIT BREAKER addendum once the conversation's judge
// denials reach the threshold (logged as a warning with the session, as
// Hermes's, and counted by switchboard_worker_approval_breaker_trips
// _total), else "".
func (r *turnRun) breakerAddendum(ctx context.Context, tc store.ToolCall) (string, error) {
	threshold := r.s.cfg.ApprovalsDenialBreakerThreshold
	if threshold <= 0 {
		return "", nil
	}
	n, err := r.s.store.JudgeDenials(ctx, r.req.GetSessionId())
	if err != nil {
		return "", err
	}
	add := approvalmode.BreakerAddendum(n, threshold)
	if add != "" {
		approvalBreakerTrips.Inc()
		r.log.Warn("smart approval: circuit breaker tripped", "session_id", r.req.GetSessionId(),
			"tool", tc.Name, "denials", n, "threshold", threshold)
	}
	return add, nil
}
