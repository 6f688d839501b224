package command

import (
	"regexp"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"
)

// The menu lists every command but /start, once, within every
// platform's limits (Telegram's setMyCommands: 100 commands, names of
// 1-32 [a-z0-9_], descriptions of 1-256 characters; Discord's: 100
// characters), and the commands added today in Hermes's words.
func TestMenu(t *testing.T) {
	t.Parallel()
	m := Menu()
	if len(m) > 100 {
		t.Fatalf("%d menu entries, platforms take 100", len(m))
	}
	name := regexp.MustCompile(`^[a-z0-9_]{1,32}$`)
	seen := map[string]bool{}
	for _, e := range m {
		if !name.MatchString(e.Name) {
			t.Errorf("menu name %q is not 1-32 of [a-z0-9_]", e.Name)
		}
		if n := utf8.RuneCountInString(e.Description); n < 1 || n > 100 {
			t.Errorf("/%s: description of %d characters, want 1-100", e.Name, n)
		}
		if seen[e.Name] {
			t.Errorf("/%s listed twice", e.Name)
		}
		seen[e.Name] = true
		if _, known := Canonical(e.Name); !known {
			t.Errorf("/%s in the menu is not a command", e.Name)
		}
	}
	for _, n := range Names() {
		if n != "start" && !seen[strings.ReplaceAll(n, "-", "_")] {
			t.Errorf("/%s missing from the menu", n)
		}
	}
	for name, want := range map[string]string{
		"voice":   "Toggle voice mode",
		"fast":    "Fast mode — OpenAI Priority Processing / Anthropic Fast Mode",
		"btw":     "Ask a side question about the current conversation without interrupting it",
		"agents":  "Show active agents and running tasks",
		"bundles": "List skill bundles (aliases /<name> for multiple skills)",
	} {
		i := slices.IndexFunc(m, func(e MenuEntry) bool { return e.Name == name })
		if i < 0 || m[i].Description != want {
			t.Errorf("/%s: menu entry %v, want Hermes's %q", name, m, want)
		}
	}
}
