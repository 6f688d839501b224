package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/switchboard-chat/switchboard/pkg/gatewaystatus"
	"github.com/switchboard-chat/switchboard/pkg/pseudonym"
	"github.com/switchboard-chat/switchboard/pkg/telemetry"
)

func init() {
	register(command{name: "pseudonym", summary: "pseudonym <session key | user or chat id | chat key | message or turn id>...: what the logs call it (log.pseudonymize), under this configuration's log.pseudonym_key",
		run: runPseudonym})
}

// runPseudonym prints, for each argument, the pseudonym the logs of a
// process with the same configuration show in its place, so an operator
// can find one conversation's or one person's log lines.
func runPseudonym(_ context.Context, args []string) error {
	return pseudonyms(args, os.Stdout, os.Stderr)
}

// pseudonyms is runPseudonym writing to out, and its notes to errOut.
func pseudonyms(args []string, out, errOut io.Writer) error {
	var cf commonFlags
	fs := newFlagSet("pseudonym", &cf)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() == 0 {
		fmt.Fprintln(errOut, "usage: switchboard pseudonym [--config FILE] <session key | user or chat id | chat key | message or turn id>...")
		return errUsage
	}
	cfg, warnings, err := loadConfig(cf.configPath)
	if err != nil {
		return err
	}
	// Reported as the services report them: a misspelt
	// log.pseudonym_key would otherwise print pseudonyms under the
	// default key, which the logs do not show, without a word.
	for _, w := range warnings {
		fmt.Fprintln(errOut, "warning:", w.String())
	}
	printPseudonyms(out, errOut, cfg.Log, fs.Args())
	return nil
}

// printPseudonyms writes one line per value, as the logs show it: a
// session key ("agent:…", "send:…") as its pseudonymized key; a router
// notice's turn id or a button press's delivery key ("notice:…",
// "press:…") as its MsgID; a chat key or a bus message id
// ("<platform>:<account>:<chat or event id>", of a platform this release
// runs) with its last part replaced, as chat_key shows it and as msg_id
// and event do on the platforms whose event ids name someone (the others'
// message ids are logged as they are); anything else as one id (a user_id
// or chat_id attribute; in a user key such as by's "telegram:42", the
// part after the platform).
func printPseudonyms(out, errOut io.Writer, cfg telemetry.LogConfig, values []string) {
	if !cfg.Pseudonymize {
		fmt.Fprintln(errOut, "note: log.pseudonymize is off: the logs show these values as they are")
	}
	p := pseudonym.New(cfg.PseudonymKey)
	for _, v := range values {
		fmt.Fprintln(out, pseudonymOf(p, v))
	}
}

// pseudonymOf is what the logs show for v (printPseudonyms).
func pseudonymOf(p *pseudonym.Pseudonymizer, v string) string {
	switch {
	case strings.HasPrefix(v, "agent:") || strings.HasPrefix(v, "send:"):
		return p.Key(v)
	case strings.HasPrefix(v, "notice:") || strings.HasPrefix(v, "press:"):
		return p.MsgID(v)
	}
	// A chat key's or a message id's platform is one a gateway runs: a
	// Matrix room ("!r:example.org") or a Signal event id
	// ("+1555…:1700…") is an id, colons and all.
	if platform, rest, ok := strings.Cut(v, ":"); ok && gatewaystatus.Known(platform) && strings.Contains(rest, ":") {
		return p.ChatKey(v)
	}
	return p.ID(v)
}
