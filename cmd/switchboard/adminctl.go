package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/types/known/timestamppb"

	adminv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/admin/v1"
	"github.com/switchboard-chat/switchboard/pkg/retention"
	"github.com/switchboard-chat/switchboard/services/admin"
)

func init() {
	register(command{name: "pairing", summary: "pairing list | approve <platform> <code> | revoke <platform> <user> (admin API)",
		run: func(ctx context.Context, args []string) error { return runPairing(ctx, args, os.Stdout) }})
	register(command{name: "sessions", summary: "sessions list [--platform p] | prune [--older-than 90d] [--platform p] [--dry-run] | export <key> [--format md] (admin API)",
		run: func(ctx context.Context, args []string) error { return runSessions(ctx, args, os.Stdout) }})
}

// adminClient holds the flags every admin verb takes.
type adminClient struct {
	addr     string
	platform string
	// actor names the operator for the audit log (--by); when empty,
	// $SWITCHBOARD_OPERATOR, else $USER (operator).
	actor string
	// timeout bounds the call; 15s unless a verb needs longer.
	timeout time.Duration
}

// operatorEnv names the operator where $USER is unset or someone
// else (kubectl exec, docker compose exec): --by comes first.
const operatorEnv = "SWITCHBOARD_OPERATOR"

// adminFlags is the flag set of an admin verb with the flags every one
// takes: the API's address and the operator's name.
func adminFlags(name string) (*flag.FlagSet, *adminClient) {
	c := &adminClient{}
	fs := flag.NewFlagSet("switchboard "+name, flag.ContinueOnError)
	fs.StringVar(&c.addr, "admin-addr", envOr("SWITCHBOARD_ADMIN_ADDR", admin.DefaultAddr),
		"admin API address (or $SWITCHBOARD_ADMIN_ADDR); the token comes from $SWITCHBOARD_ADMIN_TOKEN")
	fs.StringVar(&c.actor, "by", "", "the operator, named in the audit log (token:<by>) and on what the call sets (admin:<by>); default $"+operatorEnv+", else $USER")
	return fs, c
}

// operator is the operator's name the calls carry: --by, else
// $SWITCHBOARD_OPERATOR, else $USER; empty when none is set.
func (c *adminClient) operator() string {
	for _, v := range []string{c.actor, os.Getenv(operatorEnv), os.Getenv("USER")} {
		if v = strings.TrimSpace(v); v != "" {
			return v
		}
	}
	return ""
}

// platformFlag adds --platform, for the verbs that narrow to one.
func (c *adminClient) platformFlag(fs *flag.FlagSet, usage string) {
	fs.StringVar(&c.platform, "platform", "", usage)
}

// dial connects to the admin API and returns a context carrying the token
// and the operator's name for the audit log.
func (c *adminClient) dial(ctx context.Context) (adminv1.AdminServiceClient, context.Context, func(), error) {
	conn, err := grpc.NewClient(c.addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, nil, nil, fmt.Errorf("dial admin API %s: %w", c.addr, err)
	}
	md := metadata.Pairs(admin.ActorHeader, c.operator())
	if tok := os.Getenv("SWITCHBOARD_ADMIN_TOKEN"); tok != "" {
		md.Append("authorization", "Bearer "+tok)
	}
	timeout := c.timeout
	if timeout == 0 {
		timeout = 15 * time.Second
	}
	ctx, cancel := context.WithTimeout(metadata.NewOutgoingContext(ctx, md), timeout)
	return adminv1.NewAdminServiceClient(conn), ctx, func() { cancel(); _ = conn.Close() }, nil
}

// parseInterleaved parses flags that may come before or after positional
// arguments.
func parseInterleaved(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := parseFlags(fs, args); err != nil {
			return nil, err
		}
		args = fs.Args()
		if len(args) == 0 {
			return pos, nil
		}
		pos = append(pos, args[0])
		args = args[1:]
	}
}

func ts(t *timestamppb.Timestamp) string {
	if t == nil || !t.IsValid() || t.AsTime().IsZero() {
		return "-"
	}
	return t.AsTime().UTC().Format("2006-01-02 15:04")
}

func runPairing(ctx context.Context, args []string, out io.Writer) error {
	fs, c := adminFlags("pairing")
	c.platformFlag(fs, "only this platform (list)")
	pos, err := parseInterleaved(fs, args)
	if err != nil {
		return err
	}
	usage := func() error {
		fmt.Fprintln(os.Stderr, "usage: switchboard pairing list [--platform p] | approve <platform> <code> | revoke <platform> <user> [--admin-addr host:port]")
		return errUsage
	}
	if len(pos) == 0 {
		return usage()
	}
	cl, cctx, closeFn, err := c.dial(ctx)
	if err != nil {
		return err
	}
	defer closeFn()
	switch {
	case pos[0] == "list" && len(pos) <= 2:
		if len(pos) == 2 {
			c.platform = pos[1]
		}
		resp, err := cl.ListPairings(cctx, &adminv1.ListPairingsRequest{Platform: c.platform})
		if err != nil {
			return fmt.Errorf("list pairings: %w", err)
		}
		tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "PLATFORM\tUSER\tNAME\tSTATE\tCREATED\tEXPIRES\tAPPROVED")
		for _, p := range resp.GetPairings() {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", p.GetPlatform(), p.GetUserId(), p.GetUserName(), p.GetState(),
				ts(p.GetCreatedAt()), ts(p.GetExpiresAt()), ts(p.GetApprovedAt()))
		}
		return tw.Flush()
	case pos[0] == "approve" && len(pos) == 3:
		resp, err := cl.ApprovePairing(cctx, &adminv1.ApprovePairingRequest{Platform: pos[1], Code: pos[2]})
		if err != nil {
			return fmt.Errorf("approve pairing: %w", err)
		}
		p := resp.GetPairing()
		fmt.Fprintf(out, "approved %s user %s (%s)\n", p.GetPlatform(), p.GetUserId(), p.GetUserName())
		return nil
	case pos[0] == "revoke" && len(pos) == 3:
		resp, err := cl.RevokePairing(cctx, &adminv1.RevokePairingRequest{Platform: pos[1], UserId: pos[2]})
		if err != nil {
			return fmt.Errorf("revoke pairing: %w", err)
		}
		if resp.GetRevoked() {
			fmt.Fprintf(out, "revoked %s user %s\n", pos[1], pos[2])
		} else {
			fmt.Fprintf(out, "%s user %s was not approved\n", pos[1], pos[2])
		}
		return nil
	}
	return usage()
}

func runSessions(ctx context.Context, args []string, out io.Writer) error {
	fs, c := adminFlags("sessions")
	c.platformFlag(fs, "only this platform (list, prune)")
	olderThan := fs.String("older-than", "90d", "prune: sessions idle at least this long (90d, 2w, 720h; Hermes's `hermes sessions prune` default)")
	dryRun := fs.Bool("dry-run", false, "prune: count what would be deleted, delete nothing")
	var exp adminv1.ExportSessionRequest
	fs.StringVar(&exp.Format, "format", "json", "export: json, md or html (as /save writes them)")
	fs.StringVar(&exp.SessionId, "session-id", "", "export: a conversation the session left (default: its current one)")
	fs.BoolVar(&exp.Redact, "redact", false, "export: mask credentials in the text")
	outFile := fs.String("out", "", "export: write to this new file (readable by its owner only) instead of stdout")
	pos, err := parseInterleaved(fs, args)
	if err != nil {
		return err
	}
	usage := func() error {
		fmt.Fprintln(os.Stderr, "usage: switchboard sessions list [--platform p] [--admin-addr host:port]")
		fmt.Fprintln(os.Stderr, "       switchboard sessions prune [--older-than 90d] [--platform p] [--dry-run] [--admin-addr host:port]")
		fmt.Fprintln(os.Stderr, "       switchboard sessions export <session key> [--format json|md|html] [--session-id id] [--redact] [--out file]")
		return errUsage
	}
	// Each verb's flags belong to it alone.
	export := len(pos) > 0 && pos[0] == "export"
	misplaced := false
	fs.Visit(func(f *flag.Flag) {
		switch f.Name {
		case "format", "session-id", "redact", "out":
			misplaced = misplaced || !export
		case "older-than", "dry-run", "platform":
			misplaced = misplaced || export
		}
	})
	if misplaced {
		return usage()
	}
	if len(pos) == 1 && pos[0] == "prune" {
		return pruneSessions(ctx, c, *olderThan, *dryRun, out, usage)
	}
	if len(pos) == 2 && export {
		exp.SessionKey = pos[1]
		return exportSession(ctx, c, &exp, *outFile, out)
	}
	if len(pos) != 1 || pos[0] != "list" {
		return usage()
	}
	cl, cctx, closeFn, err := c.dial(ctx)
	if err != nil {
		return err
	}
	defer closeFn()
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "KEY\tSESSION\tTITLE\tGEN\tTOKENS IN/OUT\tUPDATED")
	token := ""
	for {
		resp, err := cl.ListSessions(cctx, &adminv1.ListSessionsRequest{Platform: c.platform, PageSize: 200, PageToken: token})
		if err != nil {
			return fmt.Errorf("list sessions: %w", err)
		}
		for _, s := range resp.GetSessions() {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%d/%d\t%s\n", s.GetSessionKey(), s.GetSessionId(), s.GetTitle(), s.GetGeneration(),
				s.GetInputTokens(), s.GetOutputTokens(), ts(s.GetUpdatedAt()))
		}
		if token = resp.GetNextPageToken(); token == "" {
			break
		}
	}
	return tw.Flush()
}

// exportSession is `switchboard sessions export <key>`: one
// conversation as /save writes it (writeExport).
func exportSession(ctx context.Context, c *adminClient, req *adminv1.ExportSessionRequest, outFile string, out io.Writer) error {
	c.timeout = time.Minute
	cl, cctx, closeFn, err := c.dial(ctx)
	if err != nil {
		return err
	}
	defer closeFn()
	stream, err := cl.ExportSession(cctx, req)
	if err != nil {
		return fmt.Errorf("sessions export: %w", err)
	}
	if err := writeExport(outFile, out, func() ([]byte, error) {
		chunk, err := stream.Recv()
		return chunk.GetData(), err
	}); err != nil {
		return fmt.Errorf("sessions export: %w", err)
	}
	return nil
}

// pruneSessions asks the admin API to delete sessions idle longer than
// olderThan and prints what it deleted, by table.
func pruneSessions(ctx context.Context, c *adminClient, olderThan string, dryRun bool, out io.Writer, usage func() error) error {
	age, err := retention.ParseAge(olderThan)
	if err != nil {
		fmt.Fprintln(os.Stderr, "--older-than:", err)
		return usage()
	}
	if age <= 0 {
		fmt.Fprintln(os.Stderr, "--older-than must be a positive age: how long a session must have been idle (90d, 2w, 720h)")
		return usage()
	}
	// A first prune of a large history takes a while; each batch that
	// finished stays deleted if the call is cut short.
	c.timeout = time.Hour
	cl, cctx, closeFn, err := c.dial(ctx)
	if err != nil {
		return err
	}
	defer closeFn()
	resp, err := cl.PruneSessions(cctx, &adminv1.PruneSessionsRequest{
		OlderThanSeconds: int64(age.Duration() / time.Second), Platform: c.platform, DryRun: dryRun})
	if err != nil {
		return fmt.Errorf("prune sessions: %w", err)
	}
	verb := "deleted"
	if resp.GetDryRun() {
		verb = "would delete"
	}
	fmt.Fprintf(out, "%s %d sessions idle for %s or longer", verb, resp.GetSessions(), age)
	if c.platform != "" {
		fmt.Fprintf(out, " on %s", c.platform)
	}
	fmt.Fprintf(out, " (%d busy, left for later)\n", resp.GetSkipped())
	return printRows(out, resp.GetRows())
}

// printRows prints deleted rows by table, tables in order.
func printRows(out io.Writer, rows map[string]int64) error {
	kinds := make([]string, 0, len(rows))
	for k := range rows {
		kinds = append(kinds, k)
	}
	sort.Strings(kinds)
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "TABLE\tROWS")
	for _, k := range kinds {
		fmt.Fprintf(tw, "%s\t%d\n", k, rows[k])
	}
	return tw.Flush()
}
