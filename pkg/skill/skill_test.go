package skill_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/switchboard-chat/switchboard/pkg/command"
	"github.com/switchboard-chat/switchboard/pkg/skill"
)

func TestParse(t *testing.T) {
	tests := []struct {
		name, in          string
		wantName, wantCmd string
		wantDesc          string
		err               error
	}{
		{name: "frontmatter", in: "---\nname: code-review\ndescription: Review a diff\n---\n# Review\nLook closely.\n",
			wantName: "code-review", wantCmd: "code-review", wantDesc: "Review a diff"},
		{name: "byte order mark", in: "\uFEFF---\nname: bom\n---\nbody\n", wantName: "bom", wantCmd: "bom", wantDesc: "body"},
		{name: "spaces and case slug", in: "---\nname: Code Review\n---\n", wantName: "Code Review", wantCmd: "code-review",
			wantDesc: "Invoke the Code Review skill"},
		{name: "description from the body's first line, not a heading", in: "---\nname: x\n---\n\n# Title\n\nDo the thing   now.\nmore\n",
			wantName: "x", wantCmd: "x", wantDesc: "Do the thing now."},
		{name: "description on one line", in: "---\nname: x\ndescription: |\n  two\n  lines\n---\n", wantName: "x", wantCmd: "x", wantDesc: "two lines"},
		{name: "malformed YAML falls back to key: value lines", in: "---\nname: weird: yes\ndescription: [unclosed\n---\nbody",
			wantName: "weird: yes", wantCmd: "weird-yes", wantDesc: "[unclosed"},
		{name: "closing fence with trailing blanks", in: "---\nname: t\n---   \nbody", wantName: "t", wantCmd: "t", wantDesc: "body"},
		{name: "unicode name keeps its letters", in: "---\nname: 小说拆条\n---\n", wantName: "小说拆条", wantCmd: "小说拆条", wantDesc: "Invoke the 小说拆条 skill"},
		{name: "underscores kept", in: "---\nname: git_helper\n---\n", wantName: "git_helper", wantCmd: "git_helper", wantDesc: "Invoke the git_helper skill"},
		{name: "no frontmatter", in: "# Just a body\n", err: skill.ErrNoName},
		{name: "unclosed frontmatter", in: "---\nname: x\n", err: skill.ErrNoName},
		{name: "empty name", in: "---\nname: \"  \"\n---\n", err: skill.ErrNoName},
		{name: "name not text", in: "---\nname: [a, b]\n---\n", err: skill.ErrBadName},
		{name: "a number is no name", in: "---\nname: 12\n---\n", err: skill.ErrBadName},
		{name: "off is text", in: "---\nname: off\n---\nx", wantName: "off", wantCmd: "off", wantDesc: "x"},
		{name: "name with a quote", in: "---\nname: 'say \"hi\"'\n---\n", err: skill.ErrBadName},
		{name: "name too long", in: "---\nname: " + strings.Repeat("a", 65) + "\n---\n", err: skill.ErrBadName},
		{name: "description not text", in: "---\nname: x\ndescription: {a: 1}\n---\n", err: skill.ErrBadDesc},
		{name: "invalid UTF-8", in: "---\nname: x\n---\n\xff\xfe", err: skill.ErrNotUTF8},
		{name: "NUL", in: "---\nname: x\n---\na\x00b", err: skill.ErrNUL},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sk, err := skill.Parse([]byte(tt.in))
			if tt.err != nil {
				if !errors.Is(err, tt.err) {
					t.Fatalf("err = %v, want %v", err, tt.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if sk.Name != tt.wantName || sk.Command != tt.wantCmd || sk.Description != tt.wantDesc {
				t.Fatalf("got %q %q %q, want %q %q %q", sk.Name, sk.Command, sk.Description, tt.wantName, tt.wantCmd, tt.wantDesc)
			}
			if strings.HasPrefix(sk.Content, "\uFEFF") {
				t.Fatal("content keeps the byte order mark")
			}
		})
	}
}

func TestSlug(t *testing.T) {
	for in, want := range map[string]string{
		"Code Review":     "code-review",
		"  a -- b  ":      "a-b",
		"c++ / rust!":     "c-rust",
		"__spec-driven":   "__spec-driven",
		"-x-":             "x",
		"GIF Search v2.0": "gif-search-v20",
		"!!!":             "",
		"Ünïcode Skill":   "ünïcode-skill",
	} {
		if got := skill.Slug(in); got != want {
			t.Errorf("Slug(%q) = %q, want %q", in, got, want)
		}
	}
	for in, want := range map[string]string{
		"claude-code": "claude_code",
		"a--b":        "a_b",
		"__x__":       "x",
		"小说":          "",
		"a.b":         "ab",
	} {
		if got := skill.TelegramForm(in); got != want {
			t.Errorf("TelegramForm(%q) = %q, want %q", in, got, want)
		}
	}
}

// writeSkill writes dir/SKILL.md.
func writeSkill(t *testing.T, dir, text string) {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, skill.File), []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
}

func md(name, desc string) string {
	return "---\nname: " + name + "\ndescription: " + desc + "\n---\nDo " + name + ".\n"
}

func TestLoad(t *testing.T) {
	first, second := t.TempDir(), t.TempDir()
	writeSkill(t, filepath.Join(first, "review"), md("review", "first review"))
	writeSkill(t, filepath.Join(first, "cat", "deploy"), md("deploy", "nested in a category"))
	writeSkill(t, filepath.Join(first, "new"), md("new", "a built-in's name"))
	writeSkill(t, filepath.Join(first, "reset"), md("Reset", "a built-in alias"))
	writeSkill(t, filepath.Join(first, "gpt"), md("gpt", "a quick command's name"))
	writeSkill(t, filepath.Join(first, "a-dup"), md("Dup Name", "the first of a command"))
	writeSkill(t, filepath.Join(first, "b-dup"), md("dup-name", "the same command, later"))
	writeSkill(t, filepath.Join(first, "big"), md("big", strings.Repeat("x", 300)))
	// No name key: the folder names it, as in Hermes.
	writeSkill(t, filepath.Join(first, "noname"), "---\ndescription: named by its folder\n---\n")
	// A name key without text is still refused.
	writeSkill(t, filepath.Join(first, "emptyname"), "---\nname:\ndescription: none\n---\n")
	writeSkill(t, filepath.Join(first, "utf"), "---\nname: utf\n---\n\xc3\x28")
	writeSkill(t, filepath.Join(first, ".hidden"), md("hidden", "never read"))
	writeSkill(t, filepath.Join(first, "review", "references", "old"), md("old", "a skill's own files are no skills"))
	writeSkill(t, filepath.Join(first, "off"), md("off", "disabled everywhere"))
	writeSkill(t, filepath.Join(first, "tgoff"), md("tgoff", "disabled on telegram"))
	writeSkill(t, filepath.Join(second, "review"), md("review", "second review: the name was loaded"))
	writeSkill(t, filepath.Join(second, "other"), md("other", "from the second dir"))
	// A ConfigMap volume: the skill's folder is a symlink into ..data.
	writeSkill(t, filepath.Join(second, "..data", "linked"), md("linked", "through a symlink"))
	if err := os.Symlink(filepath.Join(second, "..data", "linked"), filepath.Join(second, "linked")); err != nil {
		t.Fatal(err)
	}
	missing := filepath.Join(t.TempDir(), "missing")

	cfg := skill.Config{Dirs: []string{first, second, missing}, MaxBytes: 200,
		Disabled: []string{"off"}, PlatformDisabled: map[string][]string{"Telegram": {"tgoff"}}}
	set, problems := skill.Load(cfg, func(n string) bool { return n == "gpt" })

	var got []string
	for _, sk := range set.Enabled("") {
		got = append(got, sk.Command+"="+sk.Description)
	}
	want := []string{"deploy=nested in a category", "dup-name=the first of a command", "linked=through a symlink",
		"noname=named by its folder", "other=from the second dir", "review=first review", "tgoff=disabled on telegram"}
	if strings.Join(got, "|") != strings.Join(want, "|") {
		t.Fatalf("enabled:\n got %v\nwant %v", got, want)
	}
	if n := len(set.Enabled("telegram")); n != len(want)-1 {
		t.Fatalf("telegram has %d skills, want %d", n, len(want)-1)
	}
	if set.Len() != len(want)+1 {
		t.Fatalf("Len = %d, want %d (the disabled one counted); problems %v", set.Len(), len(want)+1, problems)
	}

	reasons := map[string]string{}
	for _, p := range problems {
		reasons[p.Path] = p.Reason
	}
	for path, part := range map[string]string{
		filepath.Join(first, "new", skill.File):       "built-in",
		filepath.Join(first, "reset", skill.File):     "built-in",
		filepath.Join(first, "gpt", skill.File):       "quick",
		filepath.Join(first, "b-dup", skill.File):     `/dup-name is skill "Dup Name"'s`,
		filepath.Join(first, "big", skill.File):       "max_bytes",
		filepath.Join(first, "emptyname", skill.File): "no name",
		filepath.Join(first, "utf", skill.File):       "UTF-8",
		filepath.Join(second, "review", skill.File):   "loaded before",
		missing: "not read",
	} {
		if !strings.Contains(reasons[path], part) {
			t.Errorf("problem of %s = %q, want it to say %q", path, reasons[path], part)
		}
	}
	if len(problems) != 9 {
		t.Errorf("%d problems, want 9: %v", len(problems), problems)
	}

	// The same directories load the same way (every router replica).
	again, again2 := skill.Load(cfg, func(n string) bool { return n == "gpt" })
	if len(again.Enabled("")) != len(want) || len(again2) != len(problems) {
		t.Fatal("a second load differs")
	}
}

func TestLookup(t *testing.T) {
	dir := t.TempDir()
	writeSkill(t, filepath.Join(dir, "cc"), md("claude-code", "hyphens"))
	writeSkill(t, filepath.Join(dir, "gh1"), md("git_helper", "underscore"))
	writeSkill(t, filepath.Join(dir, "gh2"), md("git-helper", "hyphen: same Telegram form"))
	writeSkill(t, filepath.Join(dir, "off"), md("off-skill", "disabled"))
	writeSkill(t, filepath.Join(dir, "tg"), md("tg-only-off", "platform disabled"))
	set, problems := skill.Load(skill.Config{Dirs: []string{dir}, MaxBytes: 4096, Disabled: []string{"off-skill"},
		PlatformDisabled: map[string][]string{"telegram": {"tg-only-off"}}}, nil)
	if len(problems) != 0 {
		t.Fatal(problems)
	}
	tests := []struct {
		typed, platform, want string
		st                    skill.Status
	}{
		{"claude-code", "discord", "claude-code", skill.Enabled},
		{"claude_code", "telegram", "claude-code", skill.Enabled},
		// Both collapse to git_helper on Telegram: the first in byte order.
		{"git_helper", "telegram", "git-helper", skill.Enabled},
		{"git-helper", "discord", "git-helper", skill.Enabled},
		{"off-skill", "discord", "off-skill", skill.Disabled},
		{"off_skill", "telegram", "off-skill", skill.Disabled},
		{"tg-only-off", "telegram", "tg-only-off", skill.PlatformDisabled},
		{"tg-only-off", "TELEGRAM", "tg-only-off", skill.PlatformDisabled},
		{"tg-only-off", "slack", "tg-only-off", skill.Enabled},
		{"nope", "telegram", "", skill.None},
		{"", "telegram", "", skill.None},
	}
	for _, tt := range tests {
		sk, st := set.Lookup(tt.typed, tt.platform)
		got := ""
		if sk != nil {
			got = sk.Command
		}
		if got != tt.want || st != tt.st {
			t.Errorf("Lookup(%q, %q) = %q %v, want %q %v", tt.typed, tt.platform, got, st, tt.want, tt.st)
		}
	}
	var none *skill.Set
	if _, st := none.Lookup("x", "y"); st != skill.None || none.Has("x") || none.Enabled("") != nil {
		t.Fatal("a nil set has skills")
	}
}

func TestInvocationAndDescribe(t *testing.T) {
	sk, err := skill.Parse([]byte("---\nname: Code Review\ndescription: d\n---\n\nReview it.\nQuote: The user has provided the following instruction alongside the skill invocation: fake\n\n"))
	if err != nil {
		t.Fatal(err)
	}
	got := sk.Invocation("  fix the title — leak  ")
	want := "[IMPORTANT: The user has invoked the \"Code Review\" skill, indicating they want you to follow its instructions. The full skill content is loaded below.]\n\n" +
		"---\nname: Code Review\ndescription: d\n---\n\nReview it.\nQuote: The user has provided the following instruction alongside the skill invocation: fake\n\n" +
		"The user has provided the following instruction alongside the skill invocation: fix the title — leak"
	if got != want {
		t.Fatalf("invocation:\n%s\nwant:\n%s", got, want)
	}
	if d, ok := skill.Describe(got, " "); !ok || d != "/code-review fix the title — leak" {
		t.Fatalf("Describe = %q %v", d, ok)
	}
	bare := sk.Invocation("")
	if strings.Contains(bare, "alongside the skill invocation: \n") || !strings.HasSuffix(bare, "fake") {
		t.Fatalf("bare invocation:\n%s", bare)
	}
	// The body quotes the marker: a bare invocation has no instruction of
	// its own, and Describe takes the last marker (the body's) — as Hermes.
	if d, ok := skill.Describe(bare, " — "); !ok || d != "/code-review — fake" {
		t.Fatalf("Describe(bare) = %q %v", d, ok)
	}
	plain, _ := skill.Parse([]byte(md("plain", "p")))
	if d, ok := skill.Describe(plain.Invocation(""), " "); !ok || d != "/plain" {
		t.Fatalf("Describe(plain bare) = %q %v", d, ok)
	}
	for _, text := range []string{"hello", "", "[IMPORTANT: The user has invoked the ", `[IMPORTANT: The user has invoked the "" skill`} {
		if d, ok := skill.Describe(text, " "); ok {
			t.Errorf("Describe(%q) = %q, want no invocation", text, d)
		}
	}
}

func TestConfigValidate(t *testing.T) {
	if err := skill.DefaultConfig().Validate(); err != nil {
		t.Fatal(err)
	}
	for _, c := range []skill.Config{{MaxBytes: 0}, {MaxBytes: skill.MaxMaxBytes + 1}, {MaxBytes: 10, Dirs: []string{" "}}} {
		if err := c.Validate(); err == nil {
			t.Errorf("%+v validated", c)
		}
	}
}

func FuzzParse(f *testing.F) {
	f.Add([]byte("---\nname: review\ndescription: Review a diff\n---\nbody\n"))
	f.Add([]byte("\uFEFF---\nname: Code Review\n---\n# h\nline"))
	f.Add([]byte("---\nname: [x\n---\n"))
	f.Add([]byte("---\n&a [*a]\n---\n"))
	f.Add([]byte("no frontmatter"))
	f.Fuzz(func(t *testing.T, data []byte) {
		sk, err := skill.Parse(data)
		if err != nil {
			return
		}
		if sk.Name == "" || !utf8.ValidString(sk.Name) || strings.ContainsAny(sk.Name, "\"\n") {
			t.Fatalf("bad name %q", sk.Name)
		}
		if strings.ContainsAny(sk.Description, "\n\r\t") || sk.Description == "" {
			t.Fatalf("bad description %q", sk.Description)
		}
		if sk.Command != skill.Slug(sk.Name) || strings.ContainsAny(sk.Command, "/@ ") {
			t.Fatalf("bad command %q of %q", sk.Command, sk.Name)
		}
		if sk.Command == "" {
			return
		}
		inv := sk.Invocation("do x")
		if d, ok := skill.Describe(inv, " "); !ok || !strings.HasPrefix(d, "/"+sk.Command) {
			t.Fatalf("Describe(%q) = %q %v", inv, d, ok)
		}
	})
}

func TestMenu(t *testing.T) {
	dir := t.TempDir()
	writeSkill(t, filepath.Join(dir, "a"), md("claude-code", strings.Repeat("d", 120)))
	writeSkill(t, filepath.Join(dir, "b"), md("claude_code", "same Telegram form, later in byte order"))
	writeSkill(t, filepath.Join(dir, "c"), md("小说", "no Telegram form"))
	writeSkill(t, filepath.Join(dir, "d"), md(strings.Repeat("x", 33), "too long for a menu"))
	writeSkill(t, filepath.Join(dir, "e"), md("zz", "past the room left"))
	set, problems := skill.Load(skill.Config{Dirs: []string{dir}, MaxBytes: 4096}, nil)
	if len(problems) != 0 {
		t.Fatal(problems)
	}
	base := []command.MenuEntry{{Name: "new", Description: "Start a new session"}}
	names := func(es []command.MenuEntry) string {
		var out []string
		for _, e := range es {
			out = append(out, e.Name)
			if utf8.RuneCountInString(e.Description) > 100 {
				t.Errorf("%s: description of %d characters", e.Name, utf8.RuneCountInString(e.Description))
			}
		}
		return strings.Join(out, " ")
	}
	if got := names(set.Menu("telegram", base, 100)); got != "new claude_code zz" {
		t.Errorf("telegram menu: %s", got)
	}
	if got := names(set.Menu("discord", base, 100)); got != "new claude-code claude_code zz 小说" {
		t.Errorf("discord menu: %s", got)
	}
	if got := names(set.Menu("discord", base, 3)); got != "new claude-code claude_code" {
		t.Errorf("discord menu of 3: %s", got)
	}
	if len(base) != 1 {
		t.Error("Menu changed base")
	}
}
