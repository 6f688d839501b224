package main

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"github.com/switchboard-chat/switchboard/services/router"
)

// A skill of skills.dirs, invoked through the OpenAI-compatible API:
// `switchboard dev` loads it, the router makes "/code-review ..." a turn
// whose text is Hermes's invocation, and the fake model, which echoes
// the last user message, answers with it.
func TestWholeSystemRunsASkill(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the whole system")
	}
	t.Parallel()
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "review"), 0o755); err != nil {
		t.Fatal(err)
	}
	md := "---\nname: code-review\ndescription: Review a diff\n---\nRead the diff twice.\n"
	if err := os.WriteFile(filepath.Join(dir, "review", "SKILL.md"), []byte(md), 0o644); err != nil {
		t.Fatal(err)
	}
	d := startDev(t, "SWITCHBOARD_SKILLS__DIRS="+dir)
	defer d.stop(t)

	c := openai.NewClient(option.WithBaseURL("http://"+d.apiAddr+"/v1"), option.WithMaxRetries(0),
		option.WithHeader("X-Session-Id", randomID()))
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	resp, err := c.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{Model: "switchboard",
		Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("/code-review fix the bug")}})
	if err != nil {
		t.Fatalf("completion: %v\nstderr:\n%s", err, d.stderr.String())
	}
	got := resp.Choices[0].Message.Content
	want := "echo: [IMPORTANT: The user has invoked the \"code-review\" skill, indicating they want you to follow its instructions. The full skill content is loaded below.]\n\n" +
		strings.TrimSpace(md) + "\n\nThe user has provided the following instruction alongside the skill invocation: fix the bug"
	if got != want {
		t.Fatalf("answer:\n%s\nwant:\n%s", got, want)
	}
}

// The Telegram and Discord menus are the built-in commands, then the
// skills that run there; a skill named like a quick command is not loaded.
func TestSkillMenus(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	for name, text := range map[string]string{
		"review": "---\nname: code-review\ndescription: Review a diff\n---\nx\n",
		"gpt":    "---\nname: gpt\n---\nshadowed by the quick command\n",
		"tg":     "---\nname: web-only\n---\nnot on telegram\n",
	} {
		if err := os.MkdirAll(filepath.Join(dir, name), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, name, "SKILL.md"), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	cfg := defaultConfig()
	if (&app{cfg: cfg, log: slog.New(slog.DiscardHandler)}).menu("telegram") != nil {
		t.Fatal("a menu without skills.dirs")
	}
	cfg.Skills.Dirs = []string{dir}
	cfg.Skills.PlatformDisabled = map[string][]string{"telegram": {"web-only"}}
	cfg.Router.QuickCommands = map[string]router.QuickCommand{"gpt": {Type: "alias", Target: "/model gpt-4o"}}
	a := &app{cfg: cfg, log: slog.New(slog.DiscardHandler)}
	names := func(platform string) []string {
		var out []string
		for _, e := range a.menu(platform) {
			out = append(out, e.Name)
		}
		return out
	}
	tg, dc := names("telegram"), names("discord")
	if tg[len(tg)-1] != "code_review" || slices.Contains(tg, "gpt") || slices.Contains(tg, "web-only") {
		t.Errorf("telegram menu ends %v", tg[len(tg)-3:])
	}
	if !slices.Equal(dc[len(dc)-2:], []string{"code-review", "web-only"}) || slices.Contains(dc, "gpt") {
		t.Errorf("discord menu ends %v", dc[len(dc)-3:])
	}
}
