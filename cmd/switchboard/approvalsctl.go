package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"

	"github.com/switchboard-chat/switchboard/pkg/approvalmode"
	adminv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/admin/v1"
	"github.com/switchboard-chat/switchboard/pkg/toolapproval"
)

func init() {
	register(command{name: "approvals", summary: "approvals [manual|smart|off|default] | list | revoke <user|session> <subject> [pattern]: the gateway-wide dangerous-command approval mode (/approvals), and the standing approvals /approve session and /approve always granted, over the admin API",
		run: func(ctx context.Context, args []string) error {
			return approvalsCommand(ctx, args, os.Stdout, os.Stderr)
		}})
}

// approvalsCommand is `switchboard approvals [manual|smart|off|default]`,
// Hermes's approval mode command (hermes_cli/approval_mode.py) over the
// admin API: the entry it sets is the one /approvals sets from a chat,
// which every worker follows from its next dangerous tool call.
// `default` removes it (ResetApprovalMode): approvals.mode of the
// configuration applies again. Hermes has no such verb: its mode is a
// line of its config file, which an operator edits back; here the
// configured default lives apart from the mode set, and nothing else
// returns to it.
func approvalsCommand(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs, c := adminFlags("approvals")
	fs.SetOutput(stderr)
	var f toolapproval.Filter
	fs.StringVar(&f.Scope, "scope", "", "list: only this scope (user: /approve always, session: /approve session)")
	fs.StringVar(&f.Subject, "subject", "", "list: only this subject (a user key such as telegram:42, or a conversation's session id)")
	fs.StringVar(&f.Pattern, "pattern", "", "list: only this pattern (a tool's name)")
	fs.StringVar(&f.SessionKey, "session-key", "", "list: only the approvals of this session key's conversations and of the user its turns run as")
	usage := func() error {
		fmt.Fprintln(stderr, "usage: switchboard approvals                     show the dangerous-command approval mode")
		fmt.Fprintln(stderr, "       switchboard approvals manual|smart|off    set it for the whole gateway")
		fmt.Fprintln(stderr, "       switchboard approvals default             go back to approvals.mode of the configuration")
		fmt.Fprintln(stderr, "       switchboard approvals list [--scope user|session] [--subject s] [--pattern p] [--session-key k]")
		fmt.Fprintln(stderr, "                                                 list the standing approvals (/approve always, /approve session)")
		fmt.Fprintln(stderr, "       switchboard approvals revoke user|session <subject> [pattern]")
		fmt.Fprintln(stderr, "                                                 revoke one of a subject's, or all of them in the scope")
		fmt.Fprintln(stderr, "manual asks before every dangerous tool call, smart lets a judge model approve the harmless ones, off never asks.")
		fmt.Fprintln(stderr, "flags: --admin-addr host:port (default 127.0.0.1:7070); token from SWITCHBOARD_ADMIN_TOKEN")
		return errUsage
	}
	pos, err := parseInterleaved(fs, args)
	if err != nil {
		_ = usage()
		return err
	}
	if len(pos) > 0 && (pos[0] == "list" || pos[0] == "revoke") {
		return standingApprovals(ctx, c, f, pos, stdout, stderr, usage)
	}
	if len(pos) > 1 || f != (toolapproval.Filter{}) {
		return usage()
	}
	var mode approvalmode.Mode
	reset := false
	if len(pos) == 1 {
		m, ok := approvalmode.Parse(pos[0])
		reset = strings.EqualFold(strings.TrimSpace(pos[0]), "default")
		if !ok && !reset {
			fmt.Fprintf(stderr, "%q is no approval mode: want manual, smart, off or default\n", pos[0])
			return usage()
		}
		mode = m
	}
	cl, cctx, closeFn, err := c.dial(ctx)
	if err != nil {
		return err
	}
	defer closeFn()
	if reset {
		return approvalsReset(cctx, cl, stdout)
	}
	if mode == "" {
		resp, err := cl.GetApprovalMode(cctx, &adminv1.GetApprovalModeRequest{})
		if err != nil {
			return fmt.Errorf("approvals: %w", err)
		}
		printApprovalMode(stdout, resp.GetApprovalMode())
		return nil
	}
	resp, err := cl.SetApprovalMode(cctx, &adminv1.SetApprovalModeRequest{Mode: string(mode)})
	if err != nil {
		return fmt.Errorf("approvals %s: %w", mode, err)
	}
	printApprovalMode(stdout, resp.GetApprovalMode())
	fmt.Fprintf(stdout, "    It was %s; every worker follows the new mode from its next dangerous tool call.\n", resp.GetPreviousMode())
	return nil
}

// approvalsReset is `switchboard approvals default`: it prints the mode
// in force afterwards, the configured default, and what it replaced.
func approvalsReset(ctx context.Context, cl adminv1.AdminServiceClient, stdout io.Writer) error {
	resp, err := cl.ResetApprovalMode(ctx, &adminv1.ResetApprovalModeRequest{})
	if err != nil {
		return fmt.Errorf("approvals default: %w", err)
	}
	printApprovalMode(stdout, resp.GetApprovalMode())
	if !resp.GetCleared() {
		fmt.Fprintln(stdout, "    Nothing changed: no one had set a mode.")
		return nil
	}
	fmt.Fprintf(stdout, "    It was %s; every worker follows the configured default from its next dangerous tool call.\n", resp.GetPreviousMode())
	return nil
}

// printApprovalMode prints Hermes's line for the mode, then where it
// comes from.
func printApprovalMode(out io.Writer, m *adminv1.ApprovalMode) {
	fmt.Fprintf(out, "Approval mode: %s (persistent gateway-wide setting).\n", m.GetMode())
	if m.GetConfiguredDefault() {
		fmt.Fprintln(out, "    No one has set one: this is approvals.mode of the configuration.")
		return
	}
	fmt.Fprintf(out, "    Set by %s at %s.\n", m.GetBy(), stamp(m.GetSetAt()))
}

// standingApprovals is `switchboard approvals list` and `switchboard
// approvals revoke`: the standing approvals of dangerous tool calls that
// /approve session and /approve always granted (ListToolApprovals,
// RevokeToolApprovals). Hermes keeps its "always" in the config file's
// command allowlist, which an operator edits; these are rows of
// Postgres. pos starts with the verb.
func standingApprovals(ctx context.Context, c *adminClient, f toolapproval.Filter, pos []string, stdout, stderr io.Writer, usage func() error) error {
	verb := pos[0]
	if verb == "list" && len(pos) != 1 || verb == "revoke" && (len(pos) < 3 || len(pos) > 4 || f != (toolapproval.Filter{})) {
		return usage()
	}
	scope := f.Scope
	if verb == "revoke" {
		scope = pos[1]
	}
	if _, err := toolapproval.ParseScope(scope); err != nil || verb == "revoke" && scope == "" {
		fmt.Fprintf(stderr, "%q is no scope: want user (/approve always) or session (/approve session)\n", scope)
		return usage()
	}
	cl, cctx, closeFn, err := c.dial(ctx)
	if err != nil {
		return err
	}
	defer closeFn()
	if verb == "revoke" {
		req := &adminv1.RevokeToolApprovalsRequest{Scope: pos[1], Subject: pos[2]}
		if len(pos) == 4 {
			req.Pattern = pos[3]
		}
		resp, err := cl.RevokeToolApprovals(cctx, req)
		if err != nil {
			return fmt.Errorf("approvals revoke: %w", err)
		}
		if len(resp.GetRevoked()) == 0 {
			fmt.Fprintln(stdout, "Nothing revoked: no such standing approval.")
			return nil
		}
		for _, a := range resp.GetRevoked() {
			fmt.Fprintf(stdout, "Revoked %s approval of %s for %s.\n", a.GetScope(), a.GetPattern(), a.GetSubject())
		}
		fmt.Fprintln(stdout, "    Every worker asks again from the next such call.")
		return nil
	}
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "SCOPE\tSUBJECT\tPATTERN\tSESSION KEY\tGRANTED")
	token := ""
	n := 0
	for {
		resp, err := cl.ListToolApprovals(cctx, &adminv1.ListToolApprovalsRequest{Scope: f.Scope, Subject: f.Subject,
			Pattern: f.Pattern, SessionKey: f.SessionKey, PageSize: 200, PageToken: token})
		if err != nil {
			return fmt.Errorf("approvals list: %w", err)
		}
		for _, a := range resp.GetApprovals() {
			key := a.GetSessionKey()
			if key == "" {
				key = "-"
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", a.GetScope(), a.GetSubject(), a.GetPattern(), key, ts(a.GetCreatedAt()))
			n++
		}
		if token = resp.GetNextPageToken(); token == "" {
			break
		}
	}
	if n == 0 {
		fmt.Fprintln(stdout, "No standing approvals.")
		return nil
	}
	return tw.Flush()
}
