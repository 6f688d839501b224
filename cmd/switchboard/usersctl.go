package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	adminv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/admin/v1"
)

func init() {
	register(command{name: "users", summary: "users forget <platform> <user id> [--dry-run] | export <platform> <user id> [--out file]: delete or export what Switchboard holds of one user (admin API)",
		run: func(ctx context.Context, args []string) error { return runUsers(ctx, args, os.Stdout, os.Stderr) }})
}

// exitBusy is the status of a forget that left busy sessions: run it
// again.
const exitBusy = exitCode(3)

// runUsers is `switchboard users forget|export <platform> <user id>`.
// forget is a right-to-erasure request over the admin API (ForgetUser):
// it prints the sessions deleted, those left busy (run it again; the
// status is then exitBusy) and the shared ones kept, then the rows
// deleted by table. export is an access request (exportUser).
func runUsers(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs, c := adminFlags("users")
	fs.SetOutput(stderr)
	dryRun := fs.Bool("dry-run", false, "forget: report what would be deleted, delete nothing")
	outFile := fs.String("out", "", "export: write the JSON document to this file (created, never overwritten) instead of stdout")
	usage := func() error {
		fmt.Fprintln(stderr, "usage: switchboard users forget <platform> <user id> [--dry-run] [--admin-addr host:port]")
		fmt.Fprintln(stderr, "       switchboard users export <platform> <user id> [--out file] [--admin-addr host:port]")
		fmt.Fprintln(stderr, "forget deletes the user's own sessions (direct chats, their sessions in groups) and what they own:")
		fmt.Fprintln(stderr, "memories, standing approvals, cron jobs, pairing; export writes all of it as JSON.")
		fmt.Fprintln(stderr, "The user id is the one /whoami shows.")
		return errUsage
	}
	pos, err := parseInterleaved(fs, args)
	if err != nil {
		_ = usage()
		return err
	}
	if len(pos) != 3 || (pos[0] != "forget" && pos[0] != "export") || strings.TrimSpace(pos[1]) == "" || strings.TrimSpace(pos[2]) == "" ||
		pos[0] == "forget" && *outFile != "" || pos[0] == "export" && *dryRun {
		return usage()
	}
	c.timeout = time.Minute
	cl, cctx, closeFn, err := c.dial(ctx)
	if err != nil {
		return err
	}
	defer closeFn()
	if pos[0] == "export" {
		return exportUser(cctx, cl, pos[1], pos[2], *outFile, stdout)
	}
	resp, err := cl.ForgetUser(cctx, &adminv1.ForgetUserRequest{Platform: pos[1], UserId: pos[2], DryRun: *dryRun})
	if err != nil {
		return fmt.Errorf("users forget: %w", err)
	}
	verb := "Deleted"
	if resp.GetDryRun() {
		verb = "Would delete"
	}
	fmt.Fprintf(stdout, "%s %d sessions of %s user %s.\n", verb, len(resp.GetSessions()), pos[1], pos[2])
	for _, k := range resp.GetSessions() {
		fmt.Fprintf(stdout, "    %s\n", k)
	}
	if busy := resp.GetBusySessions(); len(busy) > 0 {
		fmt.Fprintf(stdout, "Left %d busy sessions (a turn runs, a message waits or a reply is to be sent): run this again once they are idle.\n", len(busy))
		for _, k := range busy {
			fmt.Fprintf(stdout, "    %s\n", k)
		}
	}
	if shared := resp.GetSharedSessions(); len(shared) > 0 {
		fmt.Fprintf(stdout, "Kept %d sessions others share, where the user wrote last:\n", len(shared))
		for _, k := range shared {
			fmt.Fprintf(stdout, "    %s\n", k)
		}
	}
	if err := printRows(stdout, resp.GetRows()); err != nil {
		return err
	}
	if len(resp.GetBusySessions()) > 0 && !resp.GetDryRun() {
		return exitBusy
	}
	return nil
}

// exportUser is `switchboard users export`: the user's JSON document
// (writeExport).
func exportUser(ctx context.Context, cl adminv1.AdminServiceClient, platform, id, outFile string, stdout io.Writer) error {
	stream, err := cl.ExportUser(ctx, &adminv1.ExportUserRequest{Platform: platform, UserId: id})
	if err != nil {
		return fmt.Errorf("users export: %w", err)
	}
	if err := writeExport(outFile, stdout, func() ([]byte, error) {
		chunk, err := stream.Recv()
		return chunk.GetData(), err
	}); err != nil {
		return fmt.Errorf("users export: %w", err)
	}
	return nil
}

// writeExport writes what recv returns, until io.EOF, to stdout, or to
// outFile, which it creates (an export is personal data: never over
// another file, readable by its owner only); a file whose export failed
// midway is removed.
func writeExport(outFile string, stdout io.Writer, recv func() ([]byte, error)) (err error) {
	out := stdout
	if outFile != "" {
		f, ferr := os.OpenFile(outFile, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
		if ferr != nil {
			return ferr
		}
		// err is the function's result here: a failure anywhere below
		// removes the file.
		defer func() {
			if cerr := f.Close(); err == nil {
				err = cerr
			}
			if err != nil {
				_ = os.Remove(outFile)
			}
		}()
		out = f
	}
	for {
		data, err := recv()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		if _, err := out.Write(data); err != nil {
			return err
		}
	}
}
