// Package skill loads the operator's skills and turns "/<skill>
// [instruction]" into the message the agent reads, as Hermes's skill
// slash commands do (agent/skill_commands.py, agent/skill_utils.py).
//
// A skill is a folder holding SKILL.md: YAML frontmatter with a name and
// a description, then the instructions. Load reads the configured
// directories once; a Set is read-only after that and safe for
// concurrent use. Invocation and Describe do no I/O.
package skill

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"unicode"
	"unicode/utf8"

	"go.yaml.in/yaml/v3"

	"github.com/switchboard-chat/switchboard/pkg/command"
)

// Config is the skills section of the config file.
type Config struct {
	// Dirs are the directories skills load from, in precedence order:
	// where two skills claim one command, the first directory's wins.
	Dirs []string `koanf:"dirs"`
	// Disabled names skills (their frontmatter name) that are loaded but
	// never run, on any platform (Hermes's skills.disabled).
	Disabled []string `koanf:"disabled"`
	// PlatformDisabled names skills turned off on one platform, keyed by
	// platform (Hermes's skills.platform_disabled).
	PlatformDisabled map[string][]string `koanf:"platform_disabled"`
	// MaxBytes bounds a SKILL.md: a larger one is refused at load. Its
	// text travels in the turn (a bus message) and stays in the
	// transcript, so it is kept well under the bus's payload limit.
	MaxBytes int `koanf:"max_bytes"`
	// Bundles are Hermes's skill bundles: "/<bundle> [instruction]"
	// invokes several skills in one message (bundle.go).
	Bundles []Bundle `koanf:"bundles"`
}

// DefaultMaxBytes is skills.max_bytes's default; MaxMaxBytes its ceiling
// (a quarter of NATS's default 1 MiB payload: a turn carries the text
// with other inputs and the session's settings).
const (
	DefaultMaxBytes = 64 << 10
	MaxMaxBytes     = 256 << 10
)

// DefaultConfig returns the defaults: no directories, no skills.
func DefaultConfig() Config { return Config{MaxBytes: DefaultMaxBytes} }

// Validate reports the first invalid value, naming its key.
func (c Config) Validate() error {
	if c.MaxBytes < 1 || c.MaxBytes > MaxMaxBytes {
		return fmt.Errorf("skills.max_bytes: %d is not between 1 and %d", c.MaxBytes, MaxMaxBytes)
	}
	for i, d := range c.Dirs {
		if strings.TrimSpace(d) == "" {
			return fmt.Errorf("skills.dirs[%d]: empty path", i)
		}
	}
	return validateBundles(c.Bundles)
}

// Skill is one loaded skill.
type Skill struct {
	// Name is the frontmatter name, as the invocation names it.
	Name string
	// Command is the slash command that invokes it, without "/":
	// Slug(Name).
	Command string
	// Description is the frontmatter description, on one line (the
	// body's first line, or "Invoke the <name> skill", when it has none).
	Description string
	// Path is the SKILL.md it was read from.
	Path string
	// Content is SKILL.md as the model reads it: the whole file,
	// frontmatter included, as Hermes loads it.
	Content string
}

// Problem is a SKILL.md (or a directory) that was not loaded, and why.
type Problem struct {
	Path, Reason string
}

func (p Problem) String() string { return p.Path + ": " + p.Reason }

// Set is the loaded skills.
type Set struct {
	// enabled are the skills that run (somewhere), by command; disabled
	// are those skills.disabled names, by command too, so that typing one
	// is answered "installed but disabled", not "unknown".
	enabled, disabled map[string]*Skill
	// platformOff maps a platform to the names turned off there.
	platformOff map[string]map[string]bool
	// bundles are skills.bundles, by command.
	bundles map[string]*Bundle
}

// maxDepth bounds how deep Load looks for SKILL.md below a directory
// (categories, as Hermes's "mlops/axolotl"), and so any symlink loop.
const maxDepth = 6

// maxNameRunes bounds a skill's name (Hermes's MAX_NAME_LENGTH).
const maxNameRunes = 64

// File is the file that makes a directory a skill.
const File = "SKILL.md"

// Load reads the skills below cfg.Dirs. A directory holding SKILL.md is a
// skill (its subdirectories are its own files, never skills); other
// directories are searched for skills, to maxDepth, in name order.
// Hidden entries (a name starting with "."; a Kubernetes ConfigMap
// volume's "..data") are skipped, symlinks followed. reserved reports
// command names taken besides the built-in commands (the router's quick
// commands; nil: none).
//
// What cannot load is returned in problems, each skipped, in a
// deterministic order: a directory that cannot be read; a SKILL.md
// larger than cfg.MaxBytes, not UTF-8, holding a NUL, or whose
// frontmatter's name key has no text (a file without one is named after
// its folder, ParseIn); a name whose command is empty, a built-in or
// reserved one, or that of a skill loaded before it — the first
// directory of cfg.Dirs wins, and within one, the first path in byte
// order; a name loaded before (Hermes skips it without a word).
// cfg.Bundles are taken as they are (Validate checks them; a second
// bundle of a command is dropped); Problems names their skills not
// loaded.
func Load(cfg Config, reserved func(name string) bool) (*Set, []Problem) {
	s := &Set{enabled: map[string]*Skill{}, disabled: map[string]*Skill{}, platformOff: map[string]map[string]bool{},
		bundles: bundleTable(cfg.Bundles)}
	off := map[string]bool{}
	for _, n := range cfg.Disabled {
		if n = strings.TrimSpace(n); n != "" {
			off[n] = true
		}
	}
	for p, names := range cfg.PlatformDisabled {
		p = strings.ToLower(strings.TrimSpace(p))
		for _, n := range names {
			if n = strings.TrimSpace(n); n != "" {
				if s.platformOff[p] == nil {
					s.platformOff[p] = map[string]bool{}
				}
				s.platformOff[p][n] = true
			}
		}
	}
	maxBytes := cfg.MaxBytes
	if maxBytes <= 0 {
		maxBytes = DefaultMaxBytes
	}
	var problems []Problem
	// named maps each name loaded to its SKILL.md, per table: as in
	// Hermes, a disabled skill claims neither its name nor its command
	// from an enabled one.
	named := map[bool]map[string]string{false: {}, true: {}}
	for _, dir := range cfg.Dirs {
		var files []string
		problems = append(problems, find(dir, 0, &files)...)
		slices.Sort(files)
		for _, path := range files {
			sk, err := read(path, maxBytes)
			if err != nil {
				problems = append(problems, Problem{path, err.Error()})
				continue
			}
			isOff := off[sk.Name]
			table := s.enabled
			if isOff {
				table = s.disabled
			}
			if first, ok := named[isOff][sk.Name]; ok {
				problems = append(problems, Problem{path, fmt.Sprintf("skill %q was loaded before, from %s", sk.Name, first)})
				continue
			}
			switch prev := table[sk.Command]; {
			case sk.Command == "":
				problems = append(problems, Problem{path, fmt.Sprintf("name %q gives no command", sk.Name)})
				continue
			case builtin(sk.Command) || reserved != nil && reserved(sk.Command):
				problems = append(problems, Problem{path, fmt.Sprintf("/%s is a built-in or quick command", sk.Command)})
				continue
			case prev != nil:
				problems = append(problems, Problem{path, fmt.Sprintf("/%s is skill %q's, from %s", sk.Command, prev.Name, prev.Path)})
				continue
			}
			named[isOff][sk.Name] = path
			table[sk.Command] = sk
		}
	}
	return s, problems
}

// builtin reports whether name is a built-in command or alias.
func builtin(name string) bool {
	_, ok := command.Canonical(name)
	return ok
}

// find appends the SKILL.md files below dir to files.
func find(dir string, depth int, files *[]string) []Problem {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return []Problem{{dir, fmt.Sprintf("not read: %v", err)}}
	}
	for _, e := range entries {
		if e.Name() == File && !e.IsDir() {
			*files = append(*files, filepath.Join(dir, File))
			return nil
		}
	}
	if depth >= maxDepth {
		return nil
	}
	var problems []Problem
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), ".") {
			continue
		}
		path := filepath.Join(dir, e.Name())
		isDir := e.IsDir()
		if e.Type()&fs.ModeSymlink != 0 {
			fi, err := os.Stat(path)
			isDir = err == nil && fi.IsDir()
		}
		if isDir {
			problems = append(problems, find(path, depth+1, files)...)
		}
	}
	return problems
}

// read loads one SKILL.md.
func read(path string, maxBytes int) (*Skill, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("not read: %w", err)
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, int64(maxBytes)+1))
	if err != nil {
		return nil, fmt.Errorf("not read: %w", err)
	}
	if len(data) > maxBytes {
		return nil, fmt.Errorf("larger than skills.max_bytes (%d bytes)", maxBytes)
	}
	sk, err := parse(data, filepath.Base(filepath.Dir(path)))
	if err != nil {
		return nil, err
	}
	sk.Path = path
	return sk, nil
}

// Errors of Parse.
var (
	ErrNotUTF8 = errors.New("SKILL.md is not UTF-8")
	ErrNUL     = errors.New("SKILL.md holds a NUL byte")
	ErrNoName  = errors.New("frontmatter has no name")
	ErrBadName = errors.New("name is not text of one line without quotes, at most 64 characters")
	ErrBadDesc = errors.New("description is not text")
)

// Parse reads a SKILL.md: a leading byte order mark is dropped, then
// Hermes's frontmatter rules apply (parse_frontmatter): the file starts
// with "---", and the frontmatter runs to the next line that is "---"
// (trailing blanks allowed); it is YAML, or when that fails, lines of
// "key: value". name is required text; description is optional text.
// YAML 1.2 reads it: "name: off" is the text "off" (Hermes's YAML 1.1
// reader makes it false and drops the skill). Load reads a file whose
// frontmatter has no name key under its folder's name (ParseIn).
func Parse(data []byte) (*Skill, error) { return parse(data, "") }

// ParseIn is Parse for a SKILL.md in the folder named folder: as Hermes's
// scan_skill_commands (frontmatter.get("name", folder)), a frontmatter
// without a name key — or a file without frontmatter — names the skill
// after its folder. A name key with no text ("name:", "name: ”") is
// still ErrNoName: Hermes skips that file too.
func ParseIn(data []byte, folder string) (*Skill, error) { return parse(data, folder) }

func parse(data []byte, folder string) (*Skill, error) {
	if !utf8.Valid(data) {
		return nil, ErrNotUTF8
	}
	if bytes.IndexByte(data, 0) >= 0 {
		return nil, ErrNUL
	}
	content := strings.TrimPrefix(string(data), "\uFEFF")
	front, body := frontmatter(content)
	if _, has := front["name"]; !has && folder != "" && folder != "." && folder != string(filepath.Separator) {
		front["name"] = folder
	}
	name, ok := front["name"].(string)
	if !ok && front["name"] != nil {
		return nil, ErrBadName
	}
	name = strings.TrimSpace(name)
	if name == "" {
		return nil, ErrNoName
	}
	if utf8.RuneCountInString(name) > maxNameRunes || strings.ContainsAny(name, "\"\n\r") ||
		strings.IndexFunc(name, unicode.IsControl) >= 0 {
		return nil, ErrBadName
	}
	desc, ok := front["description"].(string)
	if !ok && front["description"] != nil {
		return nil, ErrBadDesc
	}
	desc = oneLine(desc)
	if desc == "" {
		// Hermes: the body's first line that is not a heading, cut to 80.
		for _, line := range strings.Split(strings.TrimSpace(body), "\n") {
			if l := strings.TrimSpace(line); l != "" && !strings.HasPrefix(l, "#") {
				desc = oneLine(string([]rune(l)[:min(80, utf8.RuneCountInString(l))]))
				break
			}
		}
	}
	if desc == "" {
		desc = "Invoke the " + name + " skill"
	}
	return &Skill{Name: name, Command: Slug(name), Description: desc, Content: content}, nil
}

var frontEnd = regexp.MustCompile(`\n---\s*\n`)

// frontmatter splits content into its frontmatter's fields and the body.
func frontmatter(content string) (map[string]any, string) {
	fields := map[string]any{}
	if !strings.HasPrefix(content, "---") {
		return fields, content
	}
	loc := frontEnd.FindStringIndex(content[3:])
	if loc == nil {
		return fields, content
	}
	raw, body := content[3:loc[0]+3], content[loc[1]+3:]
	var parsed any
	if err := yaml.Unmarshal([]byte(raw), &parsed); err == nil {
		if m, ok := parsed.(map[string]any); ok {
			return m, body
		}
		return fields, body
	}
	// Hermes's fallback for YAML that does not parse.
	for _, line := range strings.Split(strings.TrimSpace(raw), "\n") {
		k, v, ok := strings.Cut(line, ":")
		if ok {
			fields[strings.TrimSpace(k)] = strings.TrimSpace(v)
		}
	}
	return fields, body
}

// oneLine joins s's words with single spaces.
func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }

// Slug is a name's command, as Hermes's slugify_skill_name: lowercased,
// spaces become "-", everything but letters, digits, "_" and "-" goes,
// runs of "-" become one, and "-" is trimmed from both ends ("Code
// Review" → "code-review"; "小说拆条" stays).
func Slug(name string) string {
	var b strings.Builder
	dash := false
	for _, r := range strings.ToLower(name) {
		switch {
		case r == ' ':
			r = '-'
		case r == '_' || r == '-' || unicode.IsLetter(r) || unicode.IsNumber(r):
		default:
			continue
		}
		if r == '-' && dash {
			continue
		}
		dash = r == '-'
		b.WriteRune(r)
	}
	return strings.Trim(b.String(), "-")
}

// TelegramForm is a command as Telegram's menu shows it (Hermes's
// telegram_bot_command_form): "-" becomes "_", and it is "" when the name
// has letters or digits outside [a-z0-9] (Telegram takes no others).
func TelegramForm(name string) string {
	var b strings.Builder
	under := false
	for _, r := range strings.ReplaceAll(strings.ToLower(strings.TrimLeft(name, "/")), "-", "_") {
		switch {
		case r >= 'a' && r <= 'z', r >= '0' && r <= '9':
		case r == '_':
			if under {
				continue
			}
		case unicode.IsLetter(r) || unicode.IsNumber(r):
			return ""
		default:
			continue
		}
		under = r == '_'
		b.WriteRune(r)
	}
	return strings.Trim(b.String(), "_")
}

// resolve finds the command typed stands for in table, as Hermes's
// resolve_slash_key: among the commands whose Telegram form is typed's,
// the first in byte order (Telegram's menu turns "/claude-code" into
// "/claude_code"); else typed itself; else typed with "_" as "-".
func resolve[T any](table map[string]*T, typed string) *T {
	typed = strings.TrimLeft(typed, "/")
	if typed == "" {
		return nil
	}
	if tg := TelegramForm(typed); tg != "" {
		var win string
		for c := range table {
			if TelegramForm(c) == tg && (win == "" || c < win) {
				win = c
			}
		}
		if win != "" {
			return table[win]
		}
	}
	if v := table[typed]; v != nil {
		return v
	}
	return table[strings.ReplaceAll(typed, "_", "-")]
}

// Status is what a typed command is to a platform.
type Status int

const (
	// None: no skill has the command.
	None Status = iota
	// Enabled: the skill runs.
	Enabled
	// Disabled: skills.disabled names the skill.
	Disabled
	// PlatformDisabled: skills.platform_disabled names it for the platform.
	PlatformDisabled
)

// Lookup finds the skill a typed command (lowercase, without "/")
// invokes on platform, and whether it runs there.
func (s *Set) Lookup(typed, platform string) (*Skill, Status) {
	if s == nil {
		return nil, None
	}
	if sk := resolve(s.enabled, typed); sk != nil {
		if s.platformOff[strings.ToLower(platform)][sk.Name] {
			return sk, PlatformDisabled
		}
		return sk, Enabled
	}
	if sk := resolve(s.disabled, typed); sk != nil {
		return sk, Disabled
	}
	return nil, None
}

// Has reports whether a typed command names a skill, whatever its status.
func (s *Set) Has(typed string) bool {
	_, st := s.Lookup(typed, "")
	return st != None
}

// Enabled returns the skills that run on platform, by command ("" for
// every skill not disabled everywhere).
func (s *Set) Enabled(platform string) []*Skill {
	if s == nil {
		return nil
	}
	off := s.platformOff[strings.ToLower(platform)]
	out := make([]*Skill, 0, len(s.enabled))
	for _, sk := range s.enabled {
		if !off[sk.Name] {
			out = append(out, sk)
		}
	}
	slices.SortFunc(out, func(a, b *Skill) int { return strings.Compare(a.Command, b.Command) })
	return out
}

// Len is the number of skills loaded, disabled ones included.
func (s *Set) Len() int {
	if s == nil {
		return 0
	}
	return len(s.enabled) + len(s.disabled)
}

// The invocation's markers, byte for byte Hermes's (skill_commands.py),
// so that Describe, and Hermes's own tools, read it back.
const (
	invocationPrefix  = "[IMPORTANT: The user has invoked the "
	singleMarker      = "The full skill content is loaded below.]"
	instructionMarker = "The user has provided the following instruction alongside the skill invocation: "
	runtimeNote       = "\n\n[Runtime note:"
)

// Invocation is the user message "/<command> instruction" becomes, as
// Hermes's build_skill_invocation_message: the activation note, the
// skill's file, and the instruction line when there is one. Hermes then
// adds the skill's directory, "[Skill directory: …]" and a note to run
// its scripts "with the terminal tool"; Switchboard does not: the skill
// is read on a router replica, the agent runs on a worker that has
// neither that directory nor a terminal tool.
func (sk *Skill) Invocation(instruction string) string {
	parts := []string{
		`[IMPORTANT: The user has invoked the "` + sk.Name + `" skill, indicating they want you to follow its instructions. ` + singleMarker,
		"",
		strings.TrimSpace(sk.Content),
	}
	if instruction = strings.TrimSpace(instruction); instruction != "" {
		parts = append(parts, "", instructionMarker+instruction)
	}
	return strings.Join(parts, "\n")
}

var invokedName = regexp.MustCompile(`^` + regexp.QuoteMeta(invocationPrefix) + `"([^"]*)"`)

// The markers of a message loading several skills (multi), Hermes's.
const (
	bundleMarker      = " skill bundle,"
	bundleInstruction = "\nUser instruction: "
	bundleFirstBlock  = "\n\n[Loaded as part of the "
)

// Describe renders an invocation as the user typed it, as Hermes's
// describe_skill_invocation: "/<command><sep><instruction>", or
// "/<command>" for a bare one; ok is false when text is no invocation.
// The command is the name's Slug (Hermes shows the name itself, which is
// the command for most skills); a stacked invocation's is its commands
// as typed ("/a /b"), a bundle's its command.
func Describe(text, sep string) (string, bool) {
	if !strings.HasPrefix(text, invocationPrefix) {
		return "", false
	}
	m := invokedName.FindStringSubmatch(text)
	if m == nil || strings.TrimSpace(m[1]) == "" {
		return "", false
	}
	label := "/" + Slug(m[1])
	if strings.HasPrefix(m[1], "/") {
		label = m[1]
	}
	var rest string
	switch {
	case strings.Contains(text, bundleMarker):
		// The instruction comes before the skills: the first marker is
		// the user's.
		i := strings.Index(text, bundleInstruction)
		if i < 0 {
			return label, true
		}
		rest = text[i+len(bundleInstruction):]
		if j := strings.Index(rest, bundleFirstBlock); j >= 0 {
			rest = rest[:j]
		}
	case strings.Contains(text, singleMarker):
		// The body may quote the marker: the last one is the user's.
		i := strings.LastIndex(text, instructionMarker)
		if i < 0 {
			return label, true
		}
		rest = text[i+len(instructionMarker):]
		if j := strings.Index(rest, runtimeNote); j >= 0 {
			rest = rest[:j]
		}
	}
	if ins := oneLine(rest); ins != "" {
		return label + sep + ins, true
	}
	return label, true
}

// Menu is platform's command menu: base (the built-in commands), then the
// skills that run there, by command, while there is room for max entries
// (Telegram and Discord take 100). A skill's entry is named as the
// platform takes it: on Telegram its TelegramForm (a form two skills
// share is the first one's, in byte order, as Hermes's menu; a skill with
// none is left out), elsewhere its command when Discord's rules take it
// (at most 32 letters, digits, "-" and "_"); its description is cut to
// 100 characters.
func (s *Set) Menu(platform string, base []command.MenuEntry, max int) []command.MenuEntry {
	out := slices.Clone(base)
	taken := map[string]bool{}
	for _, e := range base {
		taken[e.Name] = true
	}
	telegram := strings.EqualFold(platform, "telegram")
	for _, sk := range s.Enabled(platform) {
		if len(out) >= max {
			break
		}
		name := sk.Command
		if telegram {
			name = TelegramForm(name)
		}
		if !menuName(name) || taken[name] {
			continue
		}
		taken[name] = true
		desc := sk.Description
		if utf8.RuneCountInString(desc) > 100 {
			desc = string([]rune(desc)[:97]) + "..."
		}
		out = append(out, command.MenuEntry{Name: name, Description: desc})
	}
	return out
}

// menuName reports whether name fits a command menu: 1 to 32 letters,
// digits, "-" and "_".
func menuName(name string) bool {
	n := 0
	for _, r := range name {
		if !(r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsNumber(r)) {
			return false
		}
		n++
	}
	return n >= 1 && n <= 32
}
