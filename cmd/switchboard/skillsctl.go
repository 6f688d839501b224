package main

import (
	"context"
	"fmt"
	"io"
	"os"

	adminv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/admin/v1"
)

func init() {
	register(command{name: "skills", summary: "`skills reload [--by name]`: every router replica and the Telegram and Discord gateways scan skills.dirs again (as /reload-skills), over the admin API",
		run: func(ctx context.Context, args []string) error { return runSkills(ctx, args, os.Stdout, os.Stderr) }})
}

// runSkills is `switchboard skills reload`: the admin API's ReloadSkills,
// as every other operator verb, so it carries the admin token and is
// audited. It announces a reload in the SKILLS bucket (pkg/skill), which
// every process holding skills follows: the operator's /reload-skills
// without a chat. What comes back is the stored announcement; the
// processes scan on their own and each logs `skills loaded`.
func runSkills(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs, c := adminFlags("skills")
	fs.SetOutput(stderr)
	usage := func() error {
		fmt.Fprintln(stderr, "usage: switchboard skills reload [--by name] [--admin-addr host:port]")
		fmt.Fprintln(stderr, "every router replica and the Telegram and Discord gateways scan skills.dirs again; token from SWITCHBOARD_ADMIN_TOKEN")
		return errUsage
	}
	pos, err := parseInterleaved(fs, args)
	if err != nil {
		_ = usage()
		return err
	}
	if len(pos) != 1 || pos[0] != "reload" {
		return usage()
	}
	cl, cctx, closeFn, err := c.dial(ctx)
	if err != nil {
		return err
	}
	defer closeFn()
	resp, err := cl.ReloadSkills(cctx, &adminv1.ReloadSkillsRequest{})
	if err != nil {
		return fmt.Errorf("skills reload: %w", err)
	}
	fmt.Fprintf(stdout, "skill reload announced (revision %d, by %s at %s): every router replica and the Telegram and Discord gateways scan skills.dirs again; each logs `skills loaded`\n",
		resp.GetRevision(), resp.GetBy(), stamp(resp.GetAnnouncedAt()))
	return nil
}
