package skill_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/switchboard-chat/switchboard/pkg/skill"
)

func TestValidateBundles(t *testing.T) {
	ok := skill.Bundle{Name: "Backend Dev", Skills: []string{"review", "tests"}}
	tests := []struct {
		name    string
		bundles []skill.Bundle
		err     string // "" valid; else a part of the error
	}{
		{"none", nil, ""},
		{"one", []skill.Bundle{ok}, ""},
		{"two", []skill.Bundle{ok, {Name: "docs", Skills: []string{"writer"}}}, ""},
		{"no name", []skill.Bundle{{Name: "  ", Skills: []string{"a"}}}, "skills.bundles[0].name: empty"},
		{"a quote in the name", []skill.Bundle{{Name: `say "hi"`, Skills: []string{"a"}}}, "skills.bundles[0].name"},
		{"a name of two lines", []skill.Bundle{{Name: "a\nb", Skills: []string{"a"}}}, "one line"},
		{"a name too long", []skill.Bundle{{Name: strings.Repeat("a", 65), Skills: []string{"a"}}}, "at most 64"},
		{"no command", []skill.Bundle{{Name: "!!!", Skills: []string{"a"}}}, "gives no command"},
		{"a built-in", []skill.Bundle{{Name: "Status", Skills: []string{"a"}}}, "/status is a built-in command"},
		{"a built-in alias", []skill.Bundle{{Name: "q", Skills: []string{"a"}}}, "/q is a built-in command"},
		{"/bundles itself", []skill.Bundle{{Name: "bundles", Skills: []string{"a"}}}, "/bundles is a built-in command"},
		{"one command twice", []skill.Bundle{ok, {Name: "backend-dev", Skills: []string{"a"}}}, "skills.bundles[1].name: /backend-dev is skills.bundles[0]'s command too"},
		{"no skills", []skill.Bundle{{Name: "x"}}, "skills.bundles[0].skills: empty"},
		{"too many skills", []skill.Bundle{{Name: "x", Skills: strings.Split(strings.Repeat("s,", skill.MaxBundleSkills)+"last", ",")}}, "at most 16"},
		{"an empty skill", []skill.Bundle{{Name: "x", Skills: []string{"a", " "}}}, "skills.bundles[0].skills[1]: empty"},
		{"a skill twice", []skill.Bundle{{Name: "x", Skills: []string{"a", " a"}}}, `skills.bundles[0].skills[1]: "a" is named twice`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := skill.DefaultConfig()
			c.Bundles = tt.bundles
			err := c.Validate()
			if tt.err == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.err) {
				t.Fatalf("err = %v, want it to say %q", err, tt.err)
			}
		})
	}
	c := skill.Config{Bundles: []skill.Bundle{ok, {Name: "gpt", Skills: []string{"a"}}}}
	if err := c.CheckReserved(func(n string) bool { return n == "gpt" }); err == nil || !strings.Contains(err.Error(), "skills.bundles[1].name: /gpt is a quick command") {
		t.Fatalf("a quick command's name: %v", err)
	}
	if err := c.CheckReserved(func(string) bool { return false }); err != nil {
		t.Fatal(err)
	}
}

// bundleSet loads review, tests, docs (disabled), tg-off (disabled on
// telegram) and deploy, with bundles.
func bundleSet(t *testing.T, bundles ...skill.Bundle) *skill.Set {
	t.Helper()
	dir := t.TempDir()
	writeSkill(t, filepath.Join(dir, "review"), md("Code Review", "Review a diff"))
	writeSkill(t, filepath.Join(dir, "tests"), md("tests", "Write tests"))
	writeSkill(t, filepath.Join(dir, "docs"), md("docs", "Write docs"))
	writeSkill(t, filepath.Join(dir, "tgoff"), md("tg-off", "Not on Telegram"))
	writeSkill(t, filepath.Join(dir, "deploy"), md("deploy", "Ship it"))
	cfg := skill.Config{Dirs: []string{dir}, MaxBytes: 4096, Disabled: []string{"docs"},
		PlatformDisabled: map[string][]string{"telegram": {"tg-off"}}, Bundles: bundles}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	set, problems := skill.Load(cfg, nil)
	if len(problems) > 0 {
		t.Fatal(problems)
	}
	return set
}

func TestBundleInvocation(t *testing.T) {
	backend := skill.Bundle{Name: "Backend Dev", Description: "Backend work", Instruction: " Ship small. ",
		Skills: []string{"Code Review", "code-review", "tests", "docs", "tg-off", "nowhere"}}
	set := bundleSet(t, backend, skill.Bundle{Name: "off", Skills: []string{"docs", "nowhere"}})

	b := set.Bundle("backend_dev")
	if b == nil || b.Command() != "backend-dev" || b.Describe() != "Backend work" {
		t.Fatalf("Bundle(backend_dev) = %+v", b)
	}
	if set.Bundle("nope") != nil || set.Bundle("") != nil {
		t.Fatal("an unknown bundle found")
	}
	if d := set.Bundle("off").Describe(); d != "Load 2 skills as a bundle" {
		t.Fatalf("default description %q", d)
	}

	got := set.BundleInvocation(b, "telegram", "  fix the login  ")
	want := "[IMPORTANT: The user has invoked the \"Backend Dev\" skill bundle, loading 2 skills together. Treat every skill below as active guidance for this turn.]\n\n" +
		"Bundle: Backend Dev\n" +
		"Skills loaded: Code Review, tests\n" +
		"Skills missing (skipped): nowhere\n" +
		"Skills disabled for this platform (skipped): docs, tg-off\n\n" +
		"Bundle instruction: Ship small.\n\n" +
		"User instruction: fix the login\n\n" +
		"[Loaded as part of the \"Backend Dev\" skill bundle.]\n\n---\nname: Code Review\ndescription: Review a diff\n---\nDo Code Review.\n\n" +
		"[Loaded as part of the \"Backend Dev\" skill bundle.]\n\n---\nname: tests\ndescription: Write tests\n---\nDo tests."
	if got.Text != want {
		t.Fatalf("invocation:\n%s\nwant:\n%s", got.Text, want)
	}
	if d, ok := skill.Describe(got.Text, " "); !ok || d != "/backend-dev fix the login" {
		t.Fatalf("Describe = %q %v", d, ok)
	}
	// Elsewhere tg-off runs; a bare invocation has no instruction line.
	bare := set.BundleInvocation(b, "discord", "")
	if len(bare.Skills) != 3 || strings.Contains(bare.Text, "User instruction:") || !strings.Contains(bare.Text, "Skills disabled for this platform (skipped): docs\n") {
		t.Fatalf("bare invocation on discord:\n%s", bare.Text)
	}
	if d, ok := skill.Describe(bare.Text, " "); !ok || d != "/backend-dev" {
		t.Fatalf("Describe(bare) = %q %v", d, ok)
	}
	// No skill of it runs: no text, and why.
	none := set.BundleInvocation(set.Bundle("off"), "telegram", "x")
	if none.Text != "" || strings.Join(none.Missing, ",") != "nowhere" || strings.Join(none.Disabled, ",") != "docs" {
		t.Fatalf("a bundle of nothing: %+v", none)
	}

	var names []string
	for _, b := range set.Bundles() {
		names = append(names, b.Command())
	}
	if strings.Join(names, " ") != "backend-dev off" {
		t.Fatalf("Bundles() = %v", names)
	}
	var probs []string
	for _, p := range set.BundleProblems() {
		probs = append(probs, p.String())
	}
	wantProbs := `Backend Dev: skill "nowhere" is not loaded|off: skill "nowhere" is not loaded`
	if strings.Join(probs, "|") != wantProbs {
		t.Fatalf("problems %q", probs)
	}
}

func TestBundleShadowsSkill(t *testing.T) {
	set := bundleSet(t, skill.Bundle{Name: "deploy", Skills: []string{"tests"}})
	if b := set.Bundle("deploy"); b == nil {
		t.Fatal("the bundle is not found")
	}
	if _, st := set.Lookup("deploy", ""); st != skill.Enabled {
		t.Fatal("the skill of the same command is no longer loaded")
	}
	if p := set.BundleProblems(); len(p) != 1 || !strings.Contains(p[0].Reason, `/deploy is skill "deploy"'s command too`) {
		t.Fatalf("problems %v", p)
	}
}

func TestSplitStack(t *testing.T) {
	set := bundleSet(t, skill.Bundle{Name: "bundle", Skills: []string{"tests"}})
	first, _ := set.Lookup("code-review", "")
	tests := []struct {
		name, rest, platform string
		extra, off           string
		instruction          string
	}{
		{"no stack", "fix it", "discord", "", "", "fix it"},
		{"empty", "", "discord", "", "", ""},
		{"two more", "/tests  /deploy fix it ", "discord", "tests deploy", "", "fix it"},
		{"any case; Telegram's form of the first skill stops", "/TESTS /Code_Review fix", "telegram", "tests", "", "/Code_Review fix"},
		{"stops at an unknown word", "/tests /nope /deploy x", "discord", "tests", "", "/nope /deploy x"},
		{"stops at a disabled skill", "/docs /tests x", "discord", "", "", "/docs /tests x"},
		{"stops at a bundle", "/bundle x", "discord", "", "", "/bundle x"},
		{"stops at a repeat", "/tests /tests x", "discord", "tests", "", "/tests x"},
		{"stops at the first skill again", "/code-review x", "discord", "", "", "/code-review x"},
		{"a word that is no command", "fix /tests", "discord", "", "", "fix /tests"},
		{"only stacked skills", "/tests /deploy", "discord", "tests deploy", "", ""},
		{"disabled on the platform: kept, reported", "/tg-off /tests x", "telegram", "tg-off tests", "tg-off", "x"},
		{"the same elsewhere", "/tg-off x", "discord", "tg-off", "", "x"},
		{"slashes", "//tests\tx\ny", "discord", "tests", "", "x\ny"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			extra, off, ins := set.SplitStack(first, tt.rest, tt.platform)
			cmds := func(sks []*skill.Skill) string {
				var out []string
				for _, sk := range sks {
					out = append(out, sk.Command)
				}
				return strings.Join(out, " ")
			}
			if cmds(extra) != tt.extra || cmds(off) != tt.off || ins != tt.instruction {
				t.Fatalf("SplitStack(%q) = %q, %q, %q; want %q, %q, %q", tt.rest, cmds(extra), cmds(off), ins, tt.extra, tt.off, tt.instruction)
			}
		})
	}
	// At most MaxStacked skills in all: the fifth extra word is the
	// instruction's.
	dir := t.TempDir()
	var rest []string
	for _, n := range []string{"a", "b", "c", "d", "e", "f"} {
		writeSkill(t, filepath.Join(dir, n), md(n, n))
		rest = append(rest, "/"+n)
	}
	many, _ := skill.Load(skill.Config{Dirs: []string{dir}, MaxBytes: 4096}, nil)
	a, _ := many.Lookup("a", "")
	extra, _, ins := many.SplitStack(a, strings.Join(rest[1:], " ")+" go", "slack")
	if len(extra) != skill.MaxStacked-1 || ins != "/f go" {
		t.Fatalf("%d stacked, instruction %q", len(extra), ins)
	}
}

func TestStackedInvocation(t *testing.T) {
	set := bundleSet(t)
	review, _ := set.Lookup("code-review", "")
	tests, _ := set.Lookup("tests", "")
	got := skill.StackedInvocation([]*skill.Skill{review, tests}, " fix it ")
	want := "[IMPORTANT: The user has invoked the \"/code-review /tests\" stacked skill bundle, loading 2 skills together. Treat every skill below as active guidance for this turn.]\n\n" +
		"Skills loaded: Code Review, tests\n\n" +
		"User instruction: fix it\n\n" +
		"[Loaded as part of the stacked skill invocation \"Code Review\".]\n\n---\nname: Code Review\ndescription: Review a diff\n---\nDo Code Review.\n\n" +
		"[Loaded as part of the stacked skill invocation \"tests\".]\n\n---\nname: tests\ndescription: Write tests\n---\nDo tests."
	if got != want {
		t.Fatalf("invocation:\n%s\nwant:\n%s", got, want)
	}
	if d, ok := skill.Describe(got, " — "); !ok || d != "/code-review /tests — fix it" {
		t.Fatalf("Describe = %q %v", d, ok)
	}
	if d, ok := skill.Describe(skill.StackedInvocation([]*skill.Skill{review, tests}, ""), " "); !ok || d != "/code-review /tests" {
		t.Fatalf("Describe(bare) = %q %v", d, ok)
	}
}

// FuzzSplitStack: whatever the user types after a skill's command, the
// stack holds distinct running skills, at most MaxStacked in all, and the
// instruction is the end of what was typed.
func FuzzSplitStack(f *testing.F) {
	for _, s := range []string{"/tests /deploy fix it", "", "/tg-off /tests", "//tests\t/deploy\nx", "/tests /tests", "/docs", "/ /tests", "/tests\u00a0/deploy x", "/\xff"} {
		f.Add(s)
	}
	dir := f.TempDir()
	for _, n := range []string{"review", "tests", "deploy", "docs", "tg-off"} {
		if err := writeFile(filepath.Join(dir, n, skill.File), md(n, n)); err != nil {
			f.Fatal(err)
		}
	}
	set, _ := skill.Load(skill.Config{Dirs: []string{dir}, MaxBytes: 4096, Disabled: []string{"docs"},
		PlatformDisabled: map[string][]string{"telegram": {"tg-off"}}}, nil)
	first, _ := set.Lookup("review", "")
	f.Fuzz(func(t *testing.T, rest string) {
		for _, platform := range []string{"telegram", "discord"} {
			extra, off, ins := set.SplitStack(first, rest, platform)
			if len(extra)+1 > skill.MaxStacked || len(off) > len(extra) {
				t.Fatalf("%d stacked, %d off", len(extra), len(off))
			}
			seen := map[*skill.Skill]bool{first: true}
			for _, sk := range extra {
				if seen[sk] || sk.Name == "docs" {
					t.Fatalf("%q stacked twice, or disabled", sk.Name)
				}
				seen[sk] = true
			}
			if ins != strings.TrimSpace(ins) || !strings.HasSuffix(strings.TrimSpace(rest), ins) {
				t.Fatalf("instruction %q is not the end of %q", ins, rest)
			}
			if len(extra) > 0 {
				inv := skill.StackedInvocation(append([]*skill.Skill{first}, extra...), ins)
				if d, ok := skill.Describe(inv, " "); !ok || !strings.HasPrefix(d, "/review /") {
					t.Fatalf("Describe = %q %v", d, ok)
				}
			}
		}
	})
}

func writeFile(path, text string) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	return os.WriteFile(path, []byte(text), 0o644)
}
