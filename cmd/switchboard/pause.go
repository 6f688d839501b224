package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	chatcommand "github.com/switchboard-chat/switchboard/pkg/command"
	adminv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/admin/v1"
	"github.com/switchboard-chat/switchboard/pkg/retention"
)

func init() {
	register(command{name: "pause", summary: "pause [--ttl 2h] [--allow-user id]... [--allow-profile p]... [--clear-allow] [reason] | pause off | pause status: the global emergency stop (/pause) over the admin API",
		run: func(ctx context.Context, args []string) error { return pauseCommand(ctx, args, os.Stdout, os.Stderr) }})
}

// exitPaused is `switchboard pause status`'s exit status while paused,
// so that a script can test it (0: not paused; 1: an error; 2: usage).
const exitPaused = exitCode(3)

// exitCode ends the process with that status and prints nothing more.
type exitCode int

func (e exitCode) Error() string { return "exit status " + strconv.Itoa(int(e)) }

// pauseCommand is `switchboard pause`, Hermes's `hermes pause [--reason]
// [--ttl]` / `hermes resume` over the admin API: the entry it sets is the
// one /pause sets from a chat.
func pauseCommand(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs, c := adminFlags("pause")
	fs.SetOutput(stderr)
	ttlFlag := fs.String("ttl", "", "lift the pause by itself after this long (45m, 2h, 1d, or seconds); 0: never; unset: a pause engaged already keeps its expiry")
	var allowUsers, allowProfiles repeated
	fs.Var(&allowUsers, "allow-user", "a sender's user id that keeps working through the pause (repeatable); replaces the allowlist")
	fs.Var(&allowProfiles, "allow-profile", "with --allow-user: only on routers of this profile (repeatable; default for a router without one)")
	clearAllow := fs.Bool("clear-allow", false, "remove the allowlist: nobody works through the pause")
	usage := func() error {
		fmt.Fprintln(stderr, "usage: switchboard pause [--ttl 2h] [--allow-user id]... [--allow-profile p]... [--clear-allow] [reason]")
		fmt.Fprintln(stderr, "                                                pause new work on every router (or re-arm the pause)")
		fmt.Fprintln(stderr, "       switchboard pause off                    lift the pause")
		fmt.Fprintln(stderr, "       switchboard pause status                 exit status 0 when not paused, 3 when paused")
		fmt.Fprintln(stderr, "A re-arm keeps the reason, expiry and allowlist it is not given; --allow-user replaces the allowlist.")
		fmt.Fprintln(stderr, "flags: --admin-addr host:port (default 127.0.0.1:7070); token from SWITCHBOARD_ADMIN_TOKEN")
		return errUsage
	}
	pos, err := parseInterleaved(fs, args)
	if err != nil {
		_ = usage()
		return err
	}
	setFlags := *ttlFlag != "" || len(allowUsers) > 0 || len(allowProfiles) > 0 || *clearAllow
	text := strings.Join(pos, " ")
	switch {
	case text == "status":
		if setFlags {
			return usage()
		}
		return pauseStatus(ctx, c, stdout)
	case chatcommand.Pause(text).Off:
		if setFlags {
			return usage()
		}
		return pauseOff(ctx, c, stdout)
	}
	req := &adminv1.SetPauseRequest{Reason: text, ClearAllow: *clearAllow}
	switch {
	case *clearAllow && len(allowUsers)+len(allowProfiles) > 0:
		fmt.Fprintln(stderr, "--clear-allow removes the allowlist; --allow-user and --allow-profile set one: give one or the other")
		return usage()
	case len(allowProfiles) > 0 && len(allowUsers) == 0:
		fmt.Fprintln(stderr, "--allow-profile only narrows --allow-user (it lets nobody through alone): give the user ids too")
		return usage()
	case len(allowUsers) > 0:
		req.Allow = &adminv1.PauseAllowlist{UserIds: allowUsers, Profiles: allowProfiles}
	}
	if *ttlFlag != "" {
		ttl, err := parseTTL(*ttlFlag)
		if err != nil {
			fmt.Fprintln(stderr, "--ttl:", err)
			return usage()
		}
		secs := int64(ttl / time.Second)
		req.TtlSeconds = &secs
	}
	cl, cctx, closeFn, err := c.dial(ctx)
	if err != nil {
		return err
	}
	defer closeFn()
	resp, err := cl.SetPause(cctx, req)
	if err != nil {
		return fmt.Errorf("pause: %w", err)
	}
	p := resp.GetPause()
	verb := "Switchboard paused"
	if resp.GetAlreadyPaused() {
		verb = "Still paused"
	}
	detail := ""
	if p.GetReason() != "" {
		detail = " — reason: " + p.GetReason()
	}
	fmt.Fprintf(stdout, "⏸️  %s%s\n", verb, detail)
	if p.GetExpiresAt() != nil {
		fmt.Fprintf(stdout, "    Auto-resumes %s.\n", stamp(p.GetExpiresAt()))
	}
	if a := allowText(p.GetAllow()); a != "" {
		fmt.Fprintf(stdout, "    Allowed through: %s.\n", a)
	}
	fmt.Fprintln(stdout, "    New gateway turns, cron runs and goal continuations are on hold on every router.")
	fmt.Fprintln(stdout, "    In-flight work keeps running. Run `switchboard pause off` to lift the pause.")
	return nil
}

func pauseOff(ctx context.Context, c *adminClient, stdout io.Writer) error {
	cl, cctx, closeFn, err := c.dial(ctx)
	if err != nil {
		return err
	}
	defer closeFn()
	resp, err := cl.ClearPause(cctx, &adminv1.ClearPauseRequest{})
	if err != nil {
		return fmt.Errorf("pause off: %w", err)
	}
	if !resp.GetCleared() {
		fmt.Fprintln(stdout, "Switchboard is not paused.")
		return nil
	}
	fmt.Fprintln(stdout, "▶️  Switchboard resumed — new work is accepted again.")
	return nil
}

func pauseStatus(ctx context.Context, c *adminClient, stdout io.Writer) error {
	cl, cctx, closeFn, err := c.dial(ctx)
	if err != nil {
		return err
	}
	defer closeFn()
	resp, err := cl.GetPause(cctx, &adminv1.GetPauseRequest{})
	if err != nil {
		return fmt.Errorf("pause status: %w", err)
	}
	p := resp.GetPause()
	if p == nil {
		fmt.Fprintln(stdout, "Switchboard is not paused.")
		return nil
	}
	reason := ""
	if p.GetReason() != "" {
		reason = " — reason: " + p.GetReason()
	}
	fmt.Fprintf(stdout, "⏸️  PAUSED (global emergency stop%s; `switchboard pause off` to lift)\n", reason)
	fmt.Fprintf(stdout, "    by %s at %s", p.GetBy(), stamp(p.GetPausedAt()))
	if p.GetExpiresAt() != nil {
		fmt.Fprintf(stdout, "; auto-resumes %s", stamp(p.GetExpiresAt()))
	}
	fmt.Fprintln(stdout)
	if a := allowText(p.GetAllow()); a != "" {
		fmt.Fprintf(stdout, "    allowed through: %s\n", a)
	}
	return exitPaused
}

// allowText is a pause's allowlist in a line ("" for none).
func allowText(a *adminv1.PauseAllowlist) string {
	if len(a.GetUserIds()) == 0 {
		return ""
	}
	text := "user ids " + strings.Join(a.GetUserIds(), ", ")
	if len(a.GetProfiles()) > 0 {
		text += " (only on routers of profiles " + strings.Join(a.GetProfiles(), ", ") + ")"
	}
	return text
}

// repeated is a flag given once per value.
type repeated []string

func (r *repeated) String() string { return strings.Join(*r, ",") }

func (r *repeated) Set(v string) error {
	*r = append(*r, v)
	return nil
}

// parseTTL reads --ttl: a number of seconds (Hermes's `--ttl 90`) or an
// age as `sessions prune --older-than` takes it (45m, 2h, 1d, 2w).
func parseTTL(s string) (time.Duration, error) {
	if n, err := strconv.ParseInt(strings.TrimSpace(s), 10, 64); err == nil {
		if n < 0 || n > int64(retention.MaxAge/time.Second) {
			return 0, fmt.Errorf("%q: want 0 to 100 years", s)
		}
		return time.Duration(n) * time.Second, nil
	}
	a, err := retention.ParseAge(s)
	if err != nil {
		return 0, err
	}
	return a.Duration(), nil
}

func stamp(t *timestamppb.Timestamp) string {
	if t == nil || !t.IsValid() {
		return "-"
	}
	return t.AsTime().UTC().Format("2006-01-02 15:04:05 UTC")
}
