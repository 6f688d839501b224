package router

import (
	"context"
	"fmt"

	"github.com/switchboard-chat/switchboard/pkg/approvalmode"
	"github.com/switchboard-chat/switchboard/pkg/command"
	"github.com/switchboard-chat/switchboard/pkg/sessionstore"
)

// /approvals [manual|smart|off] is Hermes's "Show or set the persistent
// dangerous-command approval mode" (gateway _handle_approvals_command,
// hermes_cli/approval_mode.py run_approval_mode_command). Hermes writes
// approvals.mode to its profile's config, which its approval check
// re-reads at every dangerous command; here the mode is one entry of a
// NATS KV bucket (pkg/approvalmode) that every worker watches, so a
// change counts from the next dangerous call on every replica, and it
// outlives restarts. While no one has set it, approvals.mode of the
// configuration applies.
//
// As in Hermes:
//   - without an argument it shows the mode, to anyone who may talk to
//     the agent (it is one of openCommands);
//   - a change, even to a word that is no mode, is refused to whoever is
//     not an admin (router.admins of the platform); where the platform
//     lists no admins, everyone may change it ("unconfigured policies
//     remain unrestricted");
//   - an argument that is none of manual, smart or off gets the usage;
//   - it is refused mid-turn (Hermes's default busy_policy, reject), with
//     the text of the other commands that wait for the running task.
//
// A change is logged (by whom, from and to what) and counted
// (switchboard_router_approval_mode_changes_total{mode}).

// approvalsRefused is Hermes's answer to a non-admin's change.
const approvalsRefused = "Only gateway admins can change the persistent approval mode."

// approvalsText is Hermes's answer: the mode in force, persistent. Here
// the mode is the whole gateway's rather than a profile's.
func approvalsText(mode approvalmode.Mode) string {
	return fmt.Sprintf("Approval mode: %s (persistent gateway-wide setting).", mode)
}

// approvalsDefault is approvals.mode, checked by Config.Validate.
func (s *Service) approvalsDefault() approvalmode.Mode {
	m, err := approvalmode.FromConfig(s.cfg.ApprovalsMode)
	if err != nil {
		return approvalmode.Manual
	}
	return m
}

// approvalsCommand answers /approvals, a change exactly once per
// inbound event (once). The mode records the event that set it, and the
// bucket keeps the last approvalmode.History changes: when the answer's
// transaction fails after the set (Postgres lost before the commit),
// the redelivery, on any replica, finds the first attempt's change
// there (approvalmode.Answered) and answers as it did without setting
// the mode again, so a change made in between (another /approvals, the
// admin API's SetApprovalMode or ResetApprovalMode) is not overwritten
// (as /reload-skills answers from its announcement, reload.go).
func (s *Service) approvalsCommand(ctx context.Context, m *msgCtx, args string) error {
	a := command.Approvals(args)
	reply := func(text string) error { return s.notice(ctx, m, 0, text, "command") }
	if admin, _ := s.isAdmin(m); a.Set && !admin {
		s.log.InfoContext(ctx, "approval mode change refused: not an admin", "platform", m.platform, "user_id", m.src.GetUserId())
		return reply(approvalsRefused)
	}
	kv, err := approvalmode.Open(ctx, s.bus.JetStream(), s.topo)
	if err != nil {
		return err
	}
	if !a.Set {
		cur, err := approvalmode.Get(ctx, kv)
		if err != nil {
			return err
		}
		return reply(approvalsText(approvalmode.Effective(cur, s.approvalsDefault())))
	}
	if a.Mode == "" {
		return reply(command.ApprovalsUsage)
	}
	mode := approvalmode.Mode(a.Mode)
	by := m.platform + ":" + m.src.GetUserId()
	return s.once(ctx, m, "approvals", func(ctx context.Context, _ *sessionstore.Store) (string, int64, error) {
		// A redelivery of this event whose first attempt set the mode
		// (then failed to commit its answer) sets nothing again: a
		// change made since, by /approvals elsewhere or the admin
		// API, stands, and the answer is the first attempt's.
		if done, found, err := approvalmode.Answered(ctx, kv, m.dedupeID); err != nil {
			return "", 0, err
		} else if found {
			s.log.InfoContext(ctx, "approval mode set by an earlier attempt; answering from its change", "mode", done.Mode, "by", by, "event", m.dedupeID)
			return approvalsText(done.Mode), 0, nil
		}
		prev, err := approvalmode.Set(ctx, kv, approvalmode.State{Mode: mode, By: by, At: s.now().UTC(), Event: m.dedupeID})
		if err != nil {
			return "", 0, err
		}
		approvalModeChanges.WithLabelValues(string(mode)).Inc()
		s.log.WarnContext(ctx, "approval mode set", "mode", mode, "was", approvalmode.Effective(prev, s.approvalsDefault()), "by", by)
		return approvalsText(mode), 0, nil
	})
}
