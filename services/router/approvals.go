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
// inbound event (once).
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
	cur, err := approvalmode.Get(ctx, kv)
	if err != nil {
		return err
	}
	current := approvalmode.Effective(cur, s.approvalsDefault())
	if !a.Set {
		return reply(approvalsText(current))
	}
	if a.Mode == "" {
		return reply(command.ApprovalsUsage)
	}
	mode := approvalmode.Mode(a.Mode)
	by := m.platform + ":" + m.src.GetUserId()
	return s.once(ctx, m, "approvals", func(ctx context.Context, _ *sessionstore.Store) (string, int64, error) {
		if err := approvalmode.Set(ctx, kv, approvalmode.State{Mode: mode, By: by, At: s.now().UTC()}); err != nil {
			return "", 0, err
		}
		approvalModeChanges.WithLabelValues(string(mode)).Inc()
		s.log.WarnContext(ctx, "approval mode set", "mode", mode, "was", current, "by", by)
		return approvalsText(mode), 0, nil
	})
}
