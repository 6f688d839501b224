package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/switchboard-chat/switchboard/pkg/bus"
	chatcommand "github.com/switchboard-chat/switchboard/pkg/command"
	"github.com/switchboard-chat/switchboard/pkg/estop"
	adminv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/admin/v1"
	"github.com/switchboard-chat/switchboard/pkg/retention"
	"github.com/switchboard-chat/switchboard/services/admin"
)

func init() {
	register(command{name: "pause", summary: "pause [--ttl 2h] [reason] | pause off | pause status: the global emergency stop (/pause) over the admin API",
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
	c := &adminClient{}
	fs := flag.NewFlagSet("switchboard pause", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&c.addr, "admin-addr", envOr("SWITCHBOARD_ADMIN_ADDR", admin.DefaultAddr),
		"admin API address (or $SWITCHBOARD_ADMIN_ADDR); the token comes from $SWITCHBOARD_ADMIN_TOKEN")
	ttlFlag := fs.String("ttl", "", "lift the pause by itself after this long (45m, 2h, 1d, or seconds); 0: never; unset: a pause engaged already keeps its expiry")
	usage := func() error {
		fmt.Fprintln(stderr, "usage: switchboard pause [--ttl 2h] [reason]   pause new work on every router (or re-arm the pause)")
		fmt.Fprintln(stderr, "       switchboard pause off                    lift the pause")
		fmt.Fprintln(stderr, "       switchboard pause status                 exit status 0 when not paused, 3 when paused")
		fmt.Fprintln(stderr, "flags: --admin-addr host:port (default 127.0.0.1:7070); token from SWITCHBOARD_ADMIN_TOKEN")
		return errUsage
	}
	pos, err := parseInterleaved(fs, args)
	if err != nil {
		_ = usage()
		return err
	}
	text := strings.Join(pos, " ")
	switch {
	case text == "status":
		if *ttlFlag != "" {
			return usage()
		}
		return pauseStatus(ctx, c, stdout)
	case chatcommand.Pause(text).Off:
		if *ttlFlag != "" {
			return usage()
		}
		return pauseOff(ctx, c, stdout)
	}
	req := &adminv1.SetPauseRequest{Reason: text}
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
	return exitPaused
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

// lazyPause connects to NATS on the first pause call, so that the admin
// API otherwise runs, and stays ready, without it.
type lazyPause struct {
	a  *app
	mu sync.Mutex
	b  *bus.Bus
	kv jetstream.KeyValue
}

func (p *lazyPause) open(ctx context.Context) (jetstream.KeyValue, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.kv != nil {
		return p.kv, nil
	}
	if p.b == nil {
		b, err := bus.Connect(p.a.cfg.NATS.URL, "switchboard-"+p.a.name+"-pause", p.a.topology(), p.a.log, p.a.natsOptions...)
		if err != nil {
			return nil, err
		}
		p.b = b
	}
	kv, err := estop.Open(ctx, p.b.JetStream(), p.b.Topology())
	if err != nil {
		return nil, err
	}
	p.kv = kv
	return kv, nil
}

func (p *lazyPause) close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.b != nil {
		if err := p.b.Close(); err != nil && !errors.Is(err, context.Canceled) {
			p.a.log.Warn("close nats", "err", err)
		}
	}
}
