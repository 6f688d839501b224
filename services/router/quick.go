package router

import (
	"fmt"
	"slices"
	"strings"
	"unicode"

	"github.com/switchboard-chat/switchboard/pkg/command"
)

// QuickCommand is one of the operator's own slash commands, Hermes's
// quick_commands entry. As Hermes's type alias, "/<name> <args>" runs
// "<target> <args>": target is a built-in command with any arguments
// ("/model gpt-4o-mini", "queue summarise the day").
//
// Where we differ from Hermes:
//   - Hermes's type exec runs a shell command on the gateway host and
//     answers with its output. A router replica is no place for an
//     operator's shell, and a config that needs one is refused at start
//     rather than answered "unsupported type" at every use.
//   - Hermes silently lets a built-in command win over a quick command of
//     the same name, and lets a target name a skill or plugin command;
//     both are config errors here (a target is a built-in command; a
//     skill is typed as itself, skills.go), so an alias never turns into
//     text for the agent.
type QuickCommand struct {
	// Type is "alias", the only type Switchboard runs.
	Type string `koanf:"type"`
	// Target is the built-in command the alias runs, "/" optional.
	Target string `koanf:"target"`
	// Command is Hermes's exec command line; set, the config is refused.
	Command string `koanf:"command"`
}

// validateQuickCommands reports the first quick command that cannot run.
func validateQuickCommands(qc map[string]QuickCommand) error {
	names := make([]string, 0, len(qc))
	for n := range qc {
		names = append(names, n)
	}
	slices.Sort(names)
	for _, name := range names {
		q := qc[name]
		key := "quick_commands." + name
		switch {
		case name == "" || name != strings.ToLower(name) || strings.ContainsAny(name, "/@!") ||
			strings.IndexFunc(name, func(r rune) bool { return unicode.IsSpace(r) || unicode.IsControl(r) }) >= 0:
			return fmt.Errorf("%s: a command name is lowercase, without spaces, '/', '@' or '!'", key)
		case q.Type == "exec" || q.Command != "":
			return fmt.Errorf("%s: type exec (a shell command on the gateway host) is not supported; use type alias", key)
		case q.Type != "alias":
			return fmt.Errorf("%s: type %q is not alias", key, q.Type)
		}
		if _, builtin := command.Canonical(name); builtin {
			return fmt.Errorf("%s: /%s is a built-in command", key, name)
		}
		cmd, ok := command.Parse(quickText(q.Target, ""), "", "")
		if !ok || !cmd.Known {
			return fmt.Errorf("%s: target %q is not a built-in command", key, q.Target)
		}
	}
	return nil
}

// quickText is the text an alias runs: its target, then what the user
// typed after the alias, as Hermes joins them.
func quickText(target, args string) string {
	t := strings.TrimSpace(target)
	if !strings.HasPrefix(t, "/") {
		t = "/" + t
	}
	return strings.TrimSpace(t + " " + args)
}

// isQuick reports whether name is one of the operator's quick commands.
func (s *Service) isQuick(name string) bool {
	_, ok := s.cfg.QuickCommands[name]
	return ok
}

// isQuickOrSkill reports whether name is a quick command or a skill's
// command: "!" starts them on Slack and Matrix, as it starts built-ins.
func (s *Service) isQuickOrSkill(name string) bool {
	return s.isQuick(name) || s.skillSet().Has(name)
}

// parseCommand reads a command from text, the operator's quick commands
// included: an alias comes back as the built-in command it runs, with
// the user's arguments after the target's.
func (s *Service) parseCommand(text, platform string) (command.Command, bool) {
	cmd, ok := command.ParseWith(text, platform, s.cfg.BotNames[platform], s.isQuickOrSkill)
	if !ok || cmd.Known {
		return cmd, ok
	}
	q, quick := s.cfg.QuickCommands[cmd.Typed]
	if !quick {
		return cmd, true
	}
	// Validate made sure the target parses to a built-in command.
	return command.Parse(quickText(q.Target, cmd.Args), "", "")
}

// quickHeading heads the quick commands in /help and /commands.
const quickHeading = "Quick commands:"

// quickHelp lists the quick commands for /help, by name.
func (s *Service) quickHelp() string {
	if len(s.cfg.QuickCommands) == 0 {
		return ""
	}
	names := make([]string, 0, len(s.cfg.QuickCommands))
	for n := range s.cfg.QuickCommands {
		names = append(names, n)
	}
	slices.Sort(names)
	lines := []string{"", quickHeading}
	for _, n := range names {
		lines = append(lines, fmt.Sprintf("/%s — %s", n, quickText(s.cfg.QuickCommands[n].Target, "")))
	}
	return strings.Join(lines, "\n")
}
