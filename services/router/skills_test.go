package router

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	eventsv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/events/v1"
	"github.com/switchboard-chat/switchboard/pkg/skill"
)

// testSkills loads skills from a temporary directory: name → SKILL.md.
func testSkills(t *testing.T, cfg skill.Config, files map[string]string) *skill.Set {
	t.Helper()
	dir := t.TempDir()
	for name, text := range files {
		if err := os.MkdirAll(filepath.Join(dir, name), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, name, skill.File), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	cfg.Dirs = []string{dir}
	if cfg.MaxBytes == 0 {
		cfg.MaxBytes = skill.DefaultMaxBytes
	}
	set, problems := skill.Load(cfg, nil)
	if len(problems) > 0 {
		t.Fatal(problems)
	}
	return set
}

const reviewSkill = "---\nname: code-review\ndescription: Review a diff\n---\n\n# Review\nRead the diff twice.\n"

// "/<skill> [instruction]" reaches the worker as an ordinary message
// whose text is Hermes's invocation — from a user who is no admin too, as
// a typed message — while an unknown command, a disabled skill and one
// disabled for the platform are answered.
func TestSkillCommands(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.skills = testSkills(t, skill.Config{Disabled: []string{"off"}, PlatformDisabled: map[string][]string{"telegram": {"tg-off"}}},
		map[string]string{
			"review": reviewSkill,
			"off":    "---\nname: off\n---\nnever\n",
			"tg-off": "---\nname: tg-off\n---\nnot on telegram\n",
		})
	cfg := testConfig()
	cfg.Admins = map[string][]string{"telegram": {"alice"}}
	e.startRouter(cfg, nil, nil)
	w := e.startWorker(nil)

	answers := []struct{ user, text, want string }{
		{"alice", "/foo bar", "Unknown command /foo."},
		{"alice", "/off now", "The **off** skill is installed but disabled."},
		{"alice", "/tg_off now", "The **tg-off** skill is disabled for telegram."},
		{"bob", "/model x", "/model is reserved for admins here."},
		{"alice", "/help", "⚡ **Skill Commands** (1 active):\n/code-review — Review a diff"},
		{"bob", "/help", "/code-review — Review a diff"},
		{"alice", "/commands 99", "⚡ **Skill Commands**:\n/code-review — Review a diff"},
	}
	for _, a := range answers {
		if got := e.ask(a.user, a.text); !strings.Contains(got, a.want) {
			t.Errorf("%s %q: got %q, want it to contain %q", a.user, a.text, got, a.want)
		}
	}
	if got := e.ask("alice", "/help"); strings.Contains(got, "/off") || strings.Contains(got, "/tg-off") {
		t.Errorf("/help on telegram lists a disabled skill: %q", got)
	}

	sk, _ := e.skills.Lookup("code-review", "telegram")
	// Telegram's menu shows /code_review: it arrives so.
	e.publish(dm("bob", "/code_review fix the bug — carefully"))
	want := sk.Invocation("fix the bug — carefully")
	waitFor(t, "the skill's turn", func() bool {
		turns, _ := w.snapshot()
		return slices.Contains(inputsText(turns, "agent:main:telegram:dm:chat-bob"), want)
	})
	if !strings.HasPrefix(want, `[IMPORTANT: The user has invoked the "code-review" skill`) ||
		!strings.HasSuffix(want, "\n\nThe user has provided the following instruction alongside the skill invocation: fix the bug — carefully") ||
		!strings.Contains(want, "Read the diff twice.") {
		t.Fatalf("invocation:\n%s", want)
	}
	// A bare invocation has no instruction line; "!" starts a skill on Slack.
	src := &eventsv1.SessionSource{Platform: "slack", Account: "T1", ChatId: "D1", ChatType: "dm", UserId: "bob", UserName: "bob"}
	e.publish(&eventsv1.MessageReceived{EventId: nextEventID(), Text: "!code-review", Source: src})
	waitFor(t, "the bare invocation's turn", func() bool {
		var got []string
		turns, _ := w.snapshot()
		for _, tr := range turns {
			if tr.GetOrigin().GetPlatform() == "slack" {
				for _, in := range tr.GetInputs() {
					got = append(got, in.GetText())
				}
			}
		}
		return slices.Equal(got, []string{sk.Invocation("")})
	})
	turns, _ := w.snapshot()
	for _, tr := range turns {
		for _, in := range tr.GetInputs() {
			if strings.Contains(in.GetText(), "never") || strings.Contains(in.GetText(), "not on telegram") || strings.HasPrefix(in.GetText(), "/foo") {
				t.Fatalf("a refused command reached the worker: %q", in.GetText())
			}
		}
	}
}

func TestShownText(t *testing.T) {
	set := testSkills(t, skill.Config{}, map[string]string{"review": reviewSkill})
	sk, _ := set.Lookup("code-review", "")
	for in, want := range map[string]string{
		sk.Invocation("do x\nnow"): "/code-review do x now",
		sk.Invocation(""):          "/code-review",
		"plain text":               "plain text",
	} {
		if got := shownText(in); got != want {
			t.Errorf("shownText = %q, want %q", got, want)
		}
	}
	if skillInstruction("  /code-review   fix  it — now ") != "fix  it — now" || skillInstruction("/code-review") != "" {
		t.Error("skillInstruction")
	}
}

// Hermes's skill bundles and stacked skill invocations through the real
// bus and stores: "/<bundle> [instruction]" and "/<a> /<b> instruction"
// reach the worker as one message whose text is Hermes's invocation of
// the skills that run on the platform (a bundle wins over a skill of its
// command); /bundles lists the bundles; a bundle none of whose skills
// runs here, and a stack holding a skill disabled here, are answered and
// never reach the worker.
func TestSkillBundles(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	backend := skill.Bundle{Name: "backend-dev", Description: "Backend work", Instruction: "Ship small.",
		Skills: []string{"code-review", "tests", "tg-off", "nowhere"}}
	e.skills = testSkills(t, skill.Config{Disabled: []string{"docs"}, PlatformDisabled: map[string][]string{"telegram": {"tg-off"}},
		Bundles: []skill.Bundle{backend, {Name: "broken", Skills: []string{"docs", "nowhere"}}, {Name: "deploy", Skills: []string{"tests"}}}},
		map[string]string{
			"review": reviewSkill,
			"tests":  "---\nname: tests\ndescription: Write tests\n---\nTest first.\n",
			"docs":   "---\nname: docs\n---\nnever\n",
			"tg-off": "---\nname: tg-off\n---\nnot on telegram\n",
			"deploy": "---\nname: deploy\n---\nthe skill, not the bundle\n",
		})
	cfg := testConfig()
	cfg.Admins = map[string][]string{"telegram": {"alice"}}
	cfg.Auth.GatewayAllowedUsers = append(cfg.Auth.GatewayAllowedUsers, "carol", "dave", "erin")
	e.startRouter(cfg, nil, nil)
	w := e.startWorker(nil)

	answers := []struct{ user, text, want string }{
		{"alice", "/bundles", "**Skill Bundles** (3 installed):\n\n" +
			"• `/backend-dev` — Backend work _(4 skills)_\n    · code-review\n    · tests\n    · tg-off\n    · nowhere\n" +
			"• `/broken` — Load 2 skills as a bundle _(2 skills)_\n    · docs\n    · nowhere\n" +
			"• `/deploy` — Load 1 skills as a bundle _(1 skills)_\n    · tests\n\n" +
			"Invoke a bundle with `/<slug>` to load all its skills."},
		{"alice", "/broken now", "None of the skills of the **broken** bundle runs on telegram.\nNot installed: nowhere\nDisabled: docs"},
		{"alice", "/code-review /tg_off now", "The **tg-off** skill(s) in this stacked invocation are disabled for telegram.\nAn operator enables them in the configuration (skills.platform_disabled.telegram)."},
		{"alice", "/help", "/bundles — list skill bundles (aliases /<name> for multiple skills)"},
		{"bob", "/bundles", "/bundles is reserved for admins here."},
	}
	for _, a := range answers {
		if got := e.ask(a.user, a.text); got != a.want && !strings.Contains(got, a.want) {
			t.Errorf("%s %q: got %q, want %q", a.user, a.text, got, a.want)
		}
	}

	set := e.skills
	review, _ := set.Lookup("code-review", "telegram")
	tests, _ := set.Lookup("tests", "telegram")
	// A user who is no admin runs them, as a typed message; Telegram's
	// menu form arrives with "_".
	for _, c := range []struct{ user, text, want string }{
		{"carol", "/backend_dev fix the login — now", set.BundleInvocation(set.Bundle("backend-dev"), "telegram", "fix the login — now").Text},
		{"dave", "/code-review /tests  go on", skill.StackedInvocation([]*skill.Skill{review, tests}, "go on")},
		{"erin", "/deploy", set.BundleInvocation(set.Bundle("deploy"), "telegram", "").Text},
	} {
		key := "agent:main:telegram:dm:chat-" + c.user
		e.publish(dm(c.user, c.text))
		waitFor(t, c.text+"'s turn", func() bool {
			turns, _ := w.snapshot()
			return slices.Equal(inputsText(turns, key), []string{c.want})
		})
	}
	turns, _ := w.snapshot()
	for _, tr := range turns {
		for _, in := range tr.GetInputs() {
			if text := in.GetText(); strings.Contains(text, "never") || strings.Contains(text, "not on telegram") ||
				strings.Contains(text, "the skill, not the bundle") || strings.HasPrefix(text, "/") {
				t.Fatalf("a refused command, or a skill not to load, reached the worker: %q", text)
			}
		}
	}
	if inv := set.BundleInvocation(set.Bundle("backend-dev"), "telegram", "x").Text; !strings.Contains(inv, "Skills loaded: code-review, tests\nSkills missing (skipped): nowhere\nSkills disabled for this platform (skipped): tg-off\n\nBundle instruction: Ship small.\n\nUser instruction: x") {
		t.Fatalf("bundle invocation:\n%s", inv)
	}
}
