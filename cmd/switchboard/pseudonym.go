package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/switchboard-chat/switchboard/pkg/pseudonym"
	"github.com/switchboard-chat/switchboard/pkg/telemetry"
)

func init() {
	register(command{name: "pseudonym", summary: "pseudonym <session key | user or chat id>...: what the logs call it (log.pseudonymize), under this configuration's log.pseudonym_key",
		run: runPseudonym})
}

// runPseudonym prints, for each argument, the pseudonym the logs of a
// process with the same configuration show in its place, so an operator
// can find one conversation's or one person's log lines.
func runPseudonym(_ context.Context, args []string) error {
	var cf commonFlags
	fs := newFlagSet("pseudonym", &cf)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() == 0 {
		fmt.Fprintln(os.Stderr, "usage: switchboard pseudonym [--config FILE] <session key | user or chat id>...")
		return errUsage
	}
	cfg, _, err := loadConfig(cf.configPath)
	if err != nil {
		return err
	}
	printPseudonyms(os.Stdout, os.Stderr, cfg.Log, fs.Args())
	return nil
}

// printPseudonyms writes one line per value: a session key ("agent:…",
// "send:…") as its pseudonymized key, anything else as one id (a user_id
// or chat_id attribute; in a user key such as by's "telegram:42", the
// part after the platform).
func printPseudonyms(out, errOut io.Writer, cfg telemetry.LogConfig, values []string) {
	if !cfg.Pseudonymize {
		fmt.Fprintln(errOut, "note: log.pseudonymize is off: the logs show these values as they are")
	}
	p := pseudonym.New(cfg.PseudonymKey)
	for _, v := range values {
		if strings.HasPrefix(v, "agent:") || strings.HasPrefix(v, "send:") {
			fmt.Fprintln(out, p.Key(v))
			continue
		}
		fmt.Fprintln(out, p.ID(v))
	}
}
