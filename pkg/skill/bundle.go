package skill

import (
	"fmt"
	"slices"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Hermes's skill bundles (agent/skill_bundles.py) and stacked skill
// invocations (agent/skill_commands.py): one message that loads several
// skills. Hermes reads a bundle from a YAML file of its own
// (~/.hermes/skill-bundles/<name>.yaml: name, description, skills,
// instruction); Switchboard from skills.bundles, the same fields, so that
// every replica has the same bundles and a bad one stops the start.

// Bundle is one of skills.bundles.
type Bundle struct {
	// Name names the bundle; its command is Slug(Name), as a skill's.
	Name string `koanf:"name"`
	// Description is what /bundles says of it ("Load N skills as a
	// bundle" when empty, as Hermes).
	Description string `koanf:"description"`
	// Skills are the skills it loads, in order: each a skill's name or
	// command.
	Skills []string `koanf:"skills"`
	// Instruction is the operator's guidance, given above the skills.
	Instruction string `koanf:"instruction"`
}

// Command is the bundle's command, without "/".
func (b *Bundle) Command() string { return Slug(b.Name) }

// Describe is the bundle's description as /bundles shows it.
func (b *Bundle) Describe() string {
	if d := oneLine(b.Description); d != "" {
		return d
	}
	return fmt.Sprintf("Load %d skills as a bundle", len(b.Skills))
}

// MaxBundleSkills bounds a bundle's skills, and MaxStacked the skills of
// one stacked invocation (Hermes's _MAX_STACKED_SKILLS).
const (
	MaxBundleSkills = 16
	MaxStacked      = 5
)

// MaxInvocationBytes bounds the text of a message that loads several
// skills (a bundle, a stack): it travels in a turn, as one skill does
// (skills.max_bytes' ceiling).
const MaxInvocationBytes = MaxMaxBytes

// validateBundles reports the first bundle that cannot run: a name that
// is no text of one line (at most 64 characters, no quotes: the
// invocation quotes it), that gives no command or a built-in one, or the
// command of a bundle before it; no skills, more than MaxBundleSkills, an
// empty or repeated one.
func validateBundles(bundles []Bundle) error {
	seen := map[string]int{}
	for i, b := range bundles {
		key := fmt.Sprintf("skills.bundles[%d]", i)
		name := strings.TrimSpace(b.Name)
		switch {
		case name == "":
			return fmt.Errorf("%s.name: empty", key)
		case utf8.RuneCountInString(name) > maxNameRunes || strings.ContainsAny(name, "\"\n\r") || strings.IndexFunc(name, unicode.IsControl) >= 0:
			return fmt.Errorf("%s.name: %q is not text of one line without quotes, at most %d characters", key, name, maxNameRunes)
		}
		cmd := Slug(name)
		if cmd == "" {
			return fmt.Errorf("%s.name: %q gives no command (letters, digits, '-' and '_')", key, name)
		}
		if builtin(cmd) {
			return fmt.Errorf("%s.name: /%s is a built-in command", key, cmd)
		}
		if j, ok := seen[cmd]; ok {
			return fmt.Errorf("%s.name: /%s is skills.bundles[%d]'s command too", key, cmd, j)
		}
		seen[cmd] = i
		if len(b.Skills) == 0 {
			return fmt.Errorf("%s.skills: empty; a bundle loads at least one skill", key)
		}
		if len(b.Skills) > MaxBundleSkills {
			return fmt.Errorf("%s.skills: %d skills, at most %d", key, len(b.Skills), MaxBundleSkills)
		}
		names := map[string]bool{}
		for j, s := range b.Skills {
			s = strings.TrimSpace(s)
			if s == "" {
				return fmt.Errorf("%s.skills[%d]: empty", key, j)
			}
			if names[s] {
				return fmt.Errorf("%s.skills[%d]: %q is named twice", key, j, s)
			}
			names[s] = true
		}
	}
	return nil
}

// CheckReserved reports the first bundle whose command reserved takes
// (the router's quick commands, which win over bundles: it could never
// run).
func (c Config) CheckReserved(reserved func(name string) bool) error {
	for i, b := range c.Bundles {
		if cmd := Slug(b.Name); cmd != "" && reserved(cmd) {
			return fmt.Errorf("skills.bundles[%d].name: /%s is a quick command", i, cmd)
		}
	}
	return nil
}

// bundleTable indexes bundles by command, the first of a command kept
// (Validate refuses a second one), names and skills trimmed.
func bundleTable(bundles []Bundle) map[string]*Bundle {
	t := map[string]*Bundle{}
	for _, b := range bundles {
		b.Name = strings.TrimSpace(b.Name)
		b.Skills = slices.Clone(b.Skills)
		for i := range b.Skills {
			b.Skills[i] = strings.TrimSpace(b.Skills[i])
		}
		b.Instruction = strings.TrimSpace(b.Instruction)
		if cmd := b.Command(); cmd != "" && t[cmd] == nil {
			t[cmd] = &b
		}
	}
	return t
}

// Bundle finds the bundle a typed command (lowercase, without "/")
// names, as a skill's command is found (Telegram's "_" for "-"); nil when
// none does.
func (s *Set) Bundle(typed string) *Bundle {
	if s == nil {
		return nil
	}
	return resolve(s.bundles, typed)
}

// Bundles returns the bundles, by command.
func (s *Set) Bundles() []*Bundle {
	if s == nil {
		return nil
	}
	out := make([]*Bundle, 0, len(s.bundles))
	for _, b := range s.bundles {
		out = append(out, b)
	}
	slices.SortFunc(out, func(a, b *Bundle) int { return strings.Compare(a.Command(), b.Command()) })
	return out
}

// member finds the skill a bundle names (its name, else its command) and
// its status on platform.
func (s *Set) member(ident, platform string) (*Skill, Status) {
	for _, table := range []map[string]*Skill{s.enabled, s.disabled} {
		for _, sk := range table {
			if sk.Name == ident {
				return s.Lookup(sk.Command, platform)
			}
		}
	}
	return s.Lookup(Slug(ident), platform)
}

// Loaded is what a message loading several skills holds: its text (""
// when no skill could load), the skills loaded, in order, and the
// bundle's skills that are not there (Missing, as configured) or do not
// run on the platform (Disabled, by name).
type Loaded struct {
	Text              string
	Skills            []*Skill
	Missing, Disabled []string
}

// BundleProblems are what the log says of the bundles against the skills
// loaded, each Path a bundle's name: a skill it names that is not loaded
// (the bundle runs without it, and says so), a skill whose command it
// takes (as in Hermes, the bundle wins; the skill is still listed).
func (s *Set) BundleProblems() []Problem {
	var out []Problem
	for _, b := range s.Bundles() {
		if sk, st := s.Lookup(b.Command(), ""); st != None {
			out = append(out, Problem{b.Name, fmt.Sprintf("/%s is skill %q's command too: the bundle runs", b.Command(), sk.Name)})
		}
		for _, id := range b.Skills {
			if _, st := s.member(id, ""); st == None {
				out = append(out, Problem{b.Name, fmt.Sprintf("skill %q is not loaded", id)})
			}
		}
	}
	return out
}

// BundleInvocation is the user message "/<bundle> instruction" becomes on
// platform, as Hermes's build_bundle_invocation_message: a header naming
// the bundle and the skills loaded (those missing or disabled there,
// skipped, are named too), the bundle's instruction, the user's, then
// each skill's file under "[Loaded as part of the "<bundle>" skill
// bundle.]". A skill named twice (by name and by command) loads once.
// Text is "" when none of its skills runs there.
func (s *Set) BundleInvocation(b *Bundle, platform, instruction string) Loaded {
	var l Loaded
	if s == nil || b == nil {
		return l
	}
	for _, id := range b.Skills {
		sk, st := s.member(id, platform)
		switch {
		case st == None:
			l.Missing = append(l.Missing, id)
		case st != Enabled:
			l.Disabled = append(l.Disabled, sk.Name)
		case !slices.Contains(l.Skills, sk):
			l.Skills = append(l.Skills, sk)
		}
	}
	if len(l.Skills) == 0 {
		return l
	}
	l.Text = multi(`"`+b.Name+`" skill bundle`, []string{"Bundle: " + b.Name}, l, b.Instruction, instruction,
		`[Loaded as part of the "`+b.Name+`" skill bundle.]`, nil)
	return l
}

// SplitStack reads a stacked invocation, "/<first> /<b> /<c> instruction"
// (Hermes's split_stacked_skill_commands): rest is what follows the first
// command; each further leading "/<skill>" word that names a skill joins
// the stack, up to MaxStacked skills in all; the first word that names
// none (a disabled skill, a bundle, a word twice), and everything after
// it, is the instruction. A skill that does not run on platform but
// another would is returned in off, and stops nothing: Hermes refuses the
// whole message.
func (s *Set) SplitStack(first *Skill, rest, platform string) (extra, off []*Skill, instruction string) {
	remaining := rest
	for len(extra) < MaxStacked-1 {
		t := strings.TrimLeftFunc(remaining, unicode.IsSpace)
		if !strings.HasPrefix(t, "/") {
			break
		}
		word, tail := t, ""
		if i := strings.IndexFunc(t, unicode.IsSpace); i >= 0 {
			word, tail = t[:i], strings.TrimLeftFunc(t[i:], unicode.IsSpace)
		}
		sk, st := s.Lookup(strings.ToLower(strings.TrimLeft(word, "/")), platform)
		if st != Enabled && st != PlatformDisabled || sk == first || slices.Contains(extra, sk) {
			break
		}
		extra = append(extra, sk)
		if st == PlatformDisabled {
			off = append(off, sk)
		}
		remaining = tail
	}
	return extra, off, strings.TrimSpace(remaining)
}

// StackedInvocation is the user message of a stacked invocation of
// skills (at least two, as typed), as Hermes's
// build_stacked_skill_invocation_message: a header naming the commands as
// typed ("/a /b") and the skills, the instruction, then each skill's file
// under "[Loaded as part of the stacked skill invocation "<name>".]".
func StackedInvocation(skills []*Skill, instruction string) string {
	keys := make([]string, len(skills))
	for i, sk := range skills {
		keys[i] = "/" + sk.Command
	}
	return multi(`"`+strings.Join(keys, " ")+`" stacked skill bundle`, nil, Loaded{Skills: skills}, "", instruction, "",
		func(sk *Skill) string { return `[Loaded as part of the stacked skill invocation "` + sk.Name + `".]` })
}

// multi is Hermes's message of several skills (_scaffold_header, then the
// skills' blocks): subject ends in " skill bundle" so that Describe, and
// Hermes's own readers, find the instruction. Each skill's block is
// under note, or noteOf(skill).
func multi(subject string, lead []string, l Loaded, extra, instruction, note string, noteOf func(*Skill) string) string {
	names := make([]string, len(l.Skills))
	for i, sk := range l.Skills {
		names[i] = sk.Name
	}
	lines := []string{
		fmt.Sprintf("%s%s, loading %d skills together. Treat every skill below as active guidance for this turn.]", invocationPrefix, subject, len(l.Skills)),
		"",
	}
	lines = append(lines, lead...)
	lines = append(lines, "Skills loaded: "+strings.Join(names, ", "))
	if len(l.Missing) > 0 {
		lines = append(lines, "Skills missing (skipped): "+strings.Join(l.Missing, ", "))
	}
	if len(l.Disabled) > 0 {
		lines = append(lines, "Skills disabled for this platform (skipped): "+strings.Join(l.Disabled, ", "))
	}
	if extra = strings.TrimSpace(extra); extra != "" {
		lines = append(lines, "", "Bundle instruction: "+extra)
	}
	if instruction = strings.TrimSpace(instruction); instruction != "" {
		lines = append(lines, "", "User instruction: "+instruction)
	}
	parts := []string{strings.Join(lines, "\n")}
	for _, sk := range l.Skills {
		n := note
		if noteOf != nil {
			n = noteOf(sk)
		}
		parts = append(parts, n+"\n\n"+strings.TrimSpace(sk.Content))
	}
	return strings.Join(parts, "\n\n")
}
