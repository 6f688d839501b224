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
// a skill bundle (skills.bundles), then a skill. Skills whose command is a
// built-in or a quick command are not loaded (skill.Load), bundles whose
// command is one refuse the start (skill.Config); the order of
// parseCommand (built-ins, then quick commands) and expandSkill (only a
// command neither of them knows) keeps it so.

// skillSet is the skills as last loaded (nil: none). A message reads
// it once per use; a reload replaces it whole (skill.Library).
func (s *Service) skillSet() *skill.Set { return s.skills.Current() }

// expandSkill makes m, a command no built-in or quick command knows, the
// invocation of the skill bundle or the skills it names when they run on
// m's platform: its text becomes the invocation and it is a command no
// more. As in Hermes (gateway/run.py), a bundle wins over a skill of its
// command, and a bundle none of whose skills runs here gives way to that
// skill; a skill's command followed by others' ("/a /b fix it") is a
// stacked invocation (skill.SplitStack). A command that cannot run as
// typed stays a command, which command answers (m.skillAnswer, or
// skillRefusal).
func (s *Service) expandSkill(m *msgCtx) {
	if !m.isCmd || m.cmd.Known {
		return
	}
	set := s.skillSet()
	instruction := skillInstruction(m.ev.GetText())
	typed := command.TypedPrefix(m.platform) + m.cmd.Typed
	if b := set.Bundle(m.cmd.Typed); b != nil {
		l := set.BundleInvocation(b, m.platform, instruction)
		if l.Text != "" {
			if len(l.Text) > skill.MaxInvocationBytes {
				m.skillAnswer = tooLarge(typed, len(l.Text))
				return
			}
			m.ev.Text = l.Text
			m.isCmd, m.cmd, m.bundle, m.skills = false, command.Command{}, b.Command(), commands(l.Skills)
			return
		}
		if _, st := set.Lookup(m.cmd.Typed, m.platform); st == skill.None {
			m.skillAnswer = bundleRefusal(b, l, m.platform)
			return
		}
	}
	sk, st := set.Lookup(m.cmd.Typed, m.platform)
	if st != skill.Enabled {
		return
	}
	extra, off, rest := set.SplitStack(sk, instruction, m.platform)
	if len(off) > 0 {
		names := make([]string, len(off))
		for i, o := range off {
			names[i] = o.Name
		}
		m.skillAnswer = fmt.Sprintf("The **%s** skill(s) in this stacked invocation are disabled for %s.\nAn operator enables them in the configuration (skills.platform_disabled.%s).",
			strings.Join(names, ", "), m.platform, m.platform)
		return
	}
	text, loaded := sk.Invocation(instruction), []*skill.Skill{sk}
	if len(extra) > 0 {
		loaded = append(loaded, extra...)
		text = skill.StackedInvocation(loaded, rest)
		if len(text) > skill.MaxInvocationBytes {
			m.skillAnswer = tooLarge(typed, len(text))
			return
		}
	}
	m.ev.Text = text
	m.isCmd, m.cmd, m.skills = false, command.Command{}, commands(loaded)
}

// commands are skills' commands.
func commands(sks []*skill.Skill) []string {
	out := make([]string, len(sks))
	for i, sk := range sks {
		out[i] = sk.Command
	}
	return out
}

// bundleRefusal answers a bundle none of whose skills runs on platform
// (Hermes falls through to "Unknown command"): which are missing and
// which are disabled there.
func bundleRefusal(b *skill.Bundle, l skill.Loaded, platform string) string {
	text := fmt.Sprintf("None of the skills of the **%s** bundle runs on %s.", b.Name, platform)
	if len(l.Missing) > 0 {
		text += "\nNot installed: " + strings.Join(l.Missing, ", ")
	}
	if len(l.Disabled) > 0 {
		text += "\nDisabled: " + strings.Join(l.Disabled, ", ")
	}
	return text
}

// tooLarge answers a bundle or a stack whose skills come to more than a
// turn carries.
func tooLarge(typed string, n int) string {
	return fmt.Sprintf("⚠️ %s loads %d KB of skills, more than one message to the agent carries (%d KB). Invoke fewer skills at once.",
		typed, (n+1023)/1024, skill.MaxInvocationBytes/1024)
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

// bundlesText answers /bundles, in Hermes's words (gateway/run.py
// _handle_bundles_command): each bundle with its description and its
// skills as configured, by command. Where Hermes says how to create one
// on its host, an operator's configuration is named.
func (s *Service) bundlesText() string {
	bundles := s.skillSet().Bundles()
	if len(bundles) == 0 {
		return "No skill bundles installed.\nAn operator defines them in the configuration (skills.bundles)."
	}
	lines := []string{fmt.Sprintf("**Skill Bundles** (%d installed):", len(bundles)), ""}
	for _, b := range bundles {
		lines = append(lines, fmt.Sprintf("• `/%s` — %s _(%d skills)_", b.Command(), b.Describe(), len(b.Skills)))
		for _, sk := range b.Skills {
			lines = append(lines, "    · "+sk)
		}
	}
	return strings.Join(append(lines, "", "Invoke a bundle with `/<slug>` to load all its skills."), "\n")
}
