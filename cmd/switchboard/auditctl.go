package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"text/tabwriter"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	adminv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/admin/v1"
	"github.com/switchboard-chat/switchboard/pkg/retention"
)

func init() {
	register(command{name: "audit", summary: "audit [--action a] [--target t] [--actor x] [--since 7d] [--limit 50]: the admin API's audit log, newest first",
		run: func(ctx context.Context, args []string) error { return runAudit(ctx, args, os.Stdout, os.Stderr) }})
}

// runAudit is `switchboard audit`: the audit log (ListAuditLog), newest
// first, up to --limit entries.
func runAudit(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs, c := adminFlags("audit")
	fs.SetOutput(stderr)
	var req adminv1.ListAuditLogRequest
	fs.StringVar(&req.Action, "action", "", `only this action (users.forget), or those a prefix ending in "." begins (users.)`)
	fs.StringVar(&req.Target, "target", "", "only this target (a session key, platform:user)")
	fs.StringVar(&req.Actor, "actor", "", "only this actor (token:jane)")
	since := fs.String("since", "", "only entries this recent (24h, 7d)")
	limit := fs.Int("limit", 50, "at most this many entries")
	usage := func() error {
		fmt.Fprintln(stderr, "usage: switchboard audit [--action a] [--target t] [--actor x] [--since 7d] [--limit 50] [--admin-addr host:port]")
		return errUsage
	}
	pos, err := parseInterleaved(fs, args)
	if err != nil {
		_ = usage()
		return err
	}
	if len(pos) != 0 || *limit < 1 {
		return usage()
	}
	if *since != "" {
		age, err := retention.ParseAge(*since)
		if err != nil || age <= 0 {
			fmt.Fprintln(stderr, "--since: a positive age such as 24h or 7d")
			return usage()
		}
		req.Since = timestamppb.New(time.Now().Add(-age.Duration()))
	}
	cl, cctx, closeFn, err := c.dial(ctx)
	if err != nil {
		return err
	}
	defer closeFn()
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "AT\tACTOR\tACTION\tTARGET\tDETAIL")
	for n := 0; n < *limit; {
		req.PageSize = int32(min(*limit-n, 500))
		resp, err := cl.ListAuditLog(cctx, &req)
		if err != nil {
			return fmt.Errorf("audit: %w", err)
		}
		for _, e := range resp.GetEntries() {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", e.GetAt().AsTime().UTC().Format(time.RFC3339), e.GetActor(), e.GetAction(),
				e.GetTarget(), e.GetDetailJson())
			n++
		}
		if req.PageToken = resp.GetNextPageToken(); req.PageToken == "" {
			break
		}
	}
	return tw.Flush()
}
