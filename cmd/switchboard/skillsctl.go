package main

import (
	"context"
	"fmt"
	"io"
	"os"

	"github.com/switchboard-chat/switchboard/pkg/skill"
)

func init() {
	register(command{name: "skills", summary: "`skills reload`: every router replica and the Telegram and Discord gateways scan skills.dirs again (as /reload-skills)",
		run: func(ctx context.Context, args []string) error { return runSkills(ctx, args, os.Stdout) }})
}

// runSkills announces a skill reload in the SKILLS bucket over NATS
// (pkg/skill), which every process holding skills follows: the operator's
// /reload-skills without a chat, and without the admin API (nothing is
// read back; the processes log `skills loaded`).
func runSkills(ctx context.Context, args []string, out io.Writer) error {
	var cf commonFlags
	fs := newFlagSet("skills", &cf)
	by := fs.String("by", "", "who asks, recorded in the announcement as cli:<by>")
	pos, err := parseInterleaved(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 || pos[0] != "reload" {
		fmt.Fprintln(os.Stderr, "usage: switchboard skills reload [--by name] [--config file]")
		return errUsage
	}
	cfg, _, err := loadConfig(cf.configPath)
	if err != nil {
		return err
	}
	a := newApp("skills", cfg)
	defer a.close()
	b, err := a.Bus(ctx)
	if err != nil {
		return err
	}
	kv, err := skill.OpenBucket(ctx, b.JetStream(), b.Topology())
	if err != nil {
		return err
	}
	who := "cli"
	if *by != "" {
		who += ":" + *by
	}
	rev, err := skill.Announce(ctx, kv, who)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "skill reload announced (revision %d): every router replica and the Telegram and Discord gateways scan skills.dirs again\n", rev)
	return nil
}
