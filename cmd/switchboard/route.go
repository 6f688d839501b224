package main

import (
	"context"
	"errors"
	"fmt"
	"os"

	"github.com/switchboard-chat/switchboard/pkg/sessionkey"
)

func init() {
	register(command{name: "route", summary: "routing tools: `route key` prints session keys for JSON lines on stdin", run: runRoute})
}

func runRoute(_ context.Context, args []string) error {
	sub, _ := subcommandOf(args)
	switch sub {
	case "key":
		// Bad lines are reported on stderr with an empty output line and do
		// not change the exit status; only I/O failures do.
		err := sessionkey.RunKeyTool(os.Stdin, os.Stdout, os.Stderr)
		if errors.Is(err, sessionkey.ErrBadInput) {
			return nil
		}
		return err
	default:
		fmt.Fprintln(os.Stderr, "usage: switchboard route key < lines.jsonl")
		return errUsage
	}
}
