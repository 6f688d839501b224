package worker

import (
	"context"
	"strings"

	"github.com/switchboard-chat/switchboard/pkg/approvalmode"
	"github.com/switchboard-chat/switchboard/pkg/llm"
	"github.com/switchboard-chat/switchboard/services/worker/internal/store"
)

// The approval mode (/approvals, Hermes's approvals.mode) decides what a
// dangerous tool call does that no /yolo and no standing approval lets
// run (approveOnce):
//   - manual asks the user;
//   - off runs it, as /yolo in every chat;
//   - smart asks the judge model first (one call, agent.approval_judge
//     _model): APPROVE runs it, this call only; anything else asks the
//     user: ESCALATE, DENY (the user is told the judge found it
//     dangerous, and an /approve runs it this once: no approval stands
//     for later calls), an answer that is no verdict, a judge that
//     failed or could not be asked (fail safe). The operator's rules
//     (approvals.smart_policy) follow the judge's system prompt, never
//     the call; consecutive DENY verdicts trip the circuit breaker
//     (breaker.go).
//
// A /stop, a newer message that interrupts or the lock's loss ends the
// judge's call at once, as it ends a model call: the turn stops, the
// user is not asked and the call does not run.
//
// Hermes's order: /yolo and off first, then the standing approvals, then
// the judge, then the user. The mode is read at each call from the
// watch of the KV entry every replica follows, so a change counts from
// the next dangerous call, mid-turn too, as Hermes re-reads its config.

// approvalJudgeMaxTokens is the judge's output budget (Hermes's: one word).
const approvalJudgeMaxTokens = 16

// watchApprovals reads the mode and keeps it current until ctx ends.
func (s *Service) watchApprovals(ctx context.Context) error {
	kv, err := approvalmode.Open(ctx, s.bus.JetStream(), s.bus.Topology())
	if err != nil {
		return err
	}
	v, err := approvalmode.Watch(ctx, kv, s.approvalsDefault, s.log)
	if err != nil {
		return err
	}
	s.approvals.Store(v)
	return nil
}

// approvalMode is the mode in force.
func (s *Service) approvalMode() approvalmode.Mode {
	if v := s.approvals.Load(); v != nil {
		return v.Mode()
	}
	return s.approvalsDefault
}

// judgeCall asks the smart-approval judge about tc, flagged for reason,
// and returns its verdict and the label it is counted under
// (switchboard_worker_approval_judge_verdicts_total): approve, deny,
// escalate, unclear (no verdict: escalate) or error (not asked or the
// call failed: escalate). The call ends at once on a /stop, a newer
// message that interrupts or the lock's loss, as a model call does
// (cancellable): err is then that cause, for the turn to stop on, and
// there is no verdict to count or to ask the user about.
func (r *turnRun) judgeCall(ctx context.Context, tc store.ToolCall, reason string) (v approvalmode.Verdict, label string, err error) {
	prompt, ok := approvalmode.JudgePrompt(tc.Name+" "+compact(tc.Arguments), reason)
	if !ok {
		r.log.Warn("smart approval: the call cannot be shown to the judge whole; asking the user", "tool", tc.Name)
		return approvalmode.Escalate, "error", nil
	}
	override := r.s.cfg.Agent.ApprovalJudgeModel
	if override == "" {
		override = r.req.GetModelOverride()
	}
	backend, model := r.s.backendFor(override)
	if backend.Provider == nil {
		r.log.Warn("smart approval: no model provider for the judge; asking the user", "tool", tc.Name)
		return approvalmode.Escalate, "error", nil
	}
	zero := 0.0
	var resp *llm.Response
	var cerr error
	if stop := r.cancellable(ctx, func(ctx context.Context) error {
		cctx, cancel := context.WithTimeout(ctx, judgeTimeout)
		defer cancel()
		resp, cerr = llm.Complete(cctx, backend.Provider, llm.Request{Model: model, System: approvalmode.JudgeSystemWith(r.s.cfg.ApprovalsSmartPolicy),
			Messages:  []llm.Message{{Role: llm.RoleUser, Content: prompt}},
			MaxTokens: approvalJudgeMaxTokens, Temperature: &zero})
		if stoppedByUser(ctx) {
			return context.Cause(ctx)
		}
		return nil
	}); stop != nil {
		r.log.Info("smart approval: the turn was stopped while the judge was asked", "tool", tc.Name, "reason", stop)
		return approvalmode.Escalate, "", stop
	}
	if cerr != nil {
		r.log.Warn("smart approval: the judge call failed; asking the user", "tool", tc.Name,
			"class", judgeErrorName(cerr), "err", cerr)
		return approvalmode.Escalate, "error", nil
	}
	v, clear := approvalmode.ParseVerdict(resp.Text)
	if !clear {
		r.log.Warn("smart approval: the judge's answer is no verdict; asking the user", "tool", tc.Name,
			"answer", truncate(strings.TrimSpace(resp.Text), 80))
		return v, "unclear", nil
	}
	return v, string(v), nil
}
