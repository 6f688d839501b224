package router

import (
	"fmt"
	"strings"
	"unicode"

	"github.com/switchboard-chat/switchboard/pkg/command"
	"github.com/switchboard-chat/switchboard/pkg/skill"
)

// Hermes's skill slash commands (agent/skill_commands.py; gateway/run.py's
// dispatch): "/<skill> [instruction]" is a message to the agent whose text
// is the skill's invocation (pkg/skill), so it goes the way a typed
// message goes — authorization, the emergency stop, the session's queue
// and busy mode, exactly-once — and router.admins, which only restrict
// commands, do not restrict it.
//
// Precedence, as in Hermes: a built-in command, then a quick command, then
// a skill. Skills whose command is a built-in or a quick command are not
// loaded (skill.Load), so a skill never shadows either; the order of
// parseCommand (built-ins, then quick commands) and expandSkill (only a
// command neither of them knows) keeps it so.

// skillSet is the skills as last loaded (nil: none). A message reads
// it once per use; a reload replaces it whole (skill.Library).
func (s *Service) skillSet() *skill.Set { return s.skills.Current() }

// expandSkill makes m, a command no built-in or quick command knows, the
// invocation of the skill it names when that skill runs on m's platform:
// its text becomes the invocation and it is a command no more. A skill
// that does not run there stays a command, which command answers
// (skillRefusal).
func (s *Service) expandSkill(m *msgCtx) {
	if !m.isCmd || m.cmd.Known {
		return
	}
	sk, st := s.skillSet().Lookup(m.cmd.Typed, m.platform)
	if st != skill.Enabled {
		return
	}
	m.ev.Text = sk.Invocation(skillInstruction(m.ev.GetText()))
	m.isCmd, m.cmd, m.skill = false, command.Command{}, sk.Command
}

// skillInstruction is what the user typed after the command word, as
// typed: unlike a command's arguments, prose keeps its dashes.
func skillInstruction(text string) string {
	t := strings.TrimLeftFunc(text, unicode.IsSpace)
	i := strings.IndexFunc(t, unicode.IsSpace)
	if i < 0 {
		return ""
	}
	return strings.TrimSpace(t[i:])
}

// skillRefusal is the answer to a command naming a skill that does not
// run on platform, in Hermes's words (its "Enable it with: `hermes skills
// config`" is an operator's setting here); ok is false when no skill has
// the command.
func (s *Service) skillRefusal(typed, platform string) (string, bool) {
	sk, st := s.skillSet().Lookup(typed, platform)
	switch st {
	case skill.Disabled:
		return fmt.Sprintf("The **%s** skill is installed but disabled.\nAn operator enables it in the configuration (skills.disabled).", typed), true
	case skill.PlatformDisabled:
		return fmt.Sprintf("The **%s** skill is disabled for %s.\nAn operator enables it in the configuration (skills.platform_disabled.%s).", sk.Name, platform, platform), true
	}
	return "", false
}

// shownText is a message's text as lists show it to the user (/agents'
// waiting messages): a skill's invocation as it was typed,
// "/<skill> <instruction>", not the skill's whole file.
func shownText(text string) string {
	if typed, ok := skill.Describe(text, " "); ok {
		return typed
	}
	return text
}

// The skill commands' headings in /help and /commands (Hermes's), and how
// many /help lists before it points to /commands.
const (
	skillsHelpHeading = "⚡ **Skill Commands** (%d active):"
	skillsHeading     = "⚡ **Skill Commands**:"
	skillsInHelp      = 10
)

// skillLines are the skills that run on platform, one "/<command> —
// <description>" line each, by command.
func (s *Service) skillLines(platform string) []string {
	var lines []string
	for _, sk := range s.skillSet().Enabled(platform) {
		lines = append(lines, "/"+sk.Command+" — "+sk.Description)
	}
	return lines
}

// skillsHelp is /help's skills section: the first skillsInHelp, then how
// many more /commands lists, as Hermes's.
func (s *Service) skillsHelp(platform string) string {
	lines := s.skillLines(platform)
	if len(lines) == 0 {
		return ""
	}
	out := append([]string{"", fmt.Sprintf(skillsHelpHeading, len(lines))}, lines[:min(len(lines), skillsInHelp)]...)
	if n := len(lines) - skillsInHelp; n > 0 {
		out = append(out, "", fmt.Sprintf("... and %d more. Use `%scommands` for the full paginated list.", n, command.TypedPrefix(platform)))
	}
	return strings.Join(out, "\n")
}

// skillsCommands is /commands' skills section: every skill that runs on
// platform under its heading.
func (s *Service) skillsCommands(platform string) string {
	lines := s.skillLines(platform)
	if len(lines) == 0 {
		return ""
	}
	return strings.Join(append([]string{"", skillsHeading}, lines...), "\n")
}
