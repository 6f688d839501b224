package router

import (
	"fmt"
	"strconv"
	"strings"
	"testing"

	"github.com/switchboard-chat/switchboard/pkg/command"
)

// /commands pages /help's lines as Hermes does: 15 a page on Telegram,
// 20 elsewhere, links to the neighbouring pages ("!" on Slack), the last
// page for one past the end (said so), the usage for a page that is no
// number; the quick commands come after the built-in ones.
func TestCommandsText(t *testing.T) {
	t.Parallel()
	entries := strings.Split(helpText, "\n")[1:]
	n := len(entries)
	// More than one page, and page 9 past the end on Telegram.
	if n <= 20 || n > 8*15 {
		t.Fatalf("/help has %d lines; the cases below assume 21 to 120", n)
	}
	telegramPages := (n + 14) / 15
	// The second page's links: back to the first, and on to the third
	// when there is one.
	secondNav := "`/commands 1` ← prev"
	if telegramPages > 2 {
		secondNav += " | next → `/commands 3`"
	}
	tests := []struct {
		name, platform, args, quick string
		want                        []string // lines the answer has, in order
		not                         []string // and lines it must not have
	}{
		{name: "first page", platform: "telegram",
			want: []string{fmt.Sprintf("📚 **Commands** (%d total, page 1/%d)", n, telegramPages), "", entries[0], entries[14], "", "next → `/commands 2`"},
			not:  []string{entries[15]}},
		{name: "second page", platform: "telegram", args: "2",
			want: []string{fmt.Sprintf("📚 **Commands** (%d total, page 2/%d)", n, telegramPages), entries[15], secondNav},
			not:  []string{entries[14]}},
		{name: "past the end", platform: "telegram", args: "9",
			want: []string{fmt.Sprintf("📚 **Commands** (%d total, page %d/%d)", n, telegramPages, telegramPages), entries[n-1],
				fmt.Sprintf("_(Requested page 9 was out of range, showing page %d.)_", telegramPages)}},
		{name: "below the start", platform: "telegram", args: "0",
			want: []string{fmt.Sprintf("📚 **Commands** (%d total, page 1/%d)", n, telegramPages), "_(Requested page 0 was out of range, showing page 1.)_"}},
		{name: "slack pages by 20 and says !", platform: "slack",
			want: []string{fmt.Sprintf("📚 **Commands** (%d total, page 1/%d)", n, (n+19)/20), entries[19], "next → `!commands 2`"}},
		{name: "not a number", platform: "telegram", args: "two", want: []string{"Usage: `/commands [page]`"}},
		{name: "quick commands last", platform: "discord", args: strconv.Itoa((n + 3 + 19) / 20), quick: "\nQuick commands:\n/gpt — /model gpt-4o",
			want: []string{fmt.Sprintf("📚 **Commands** (%d total, page %d/%d)", n+3, (n+3+19)/20, (n+3+19)/20), "/gpt — /model gpt-4o"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := strings.Split(commandsText(tt.platform, tt.args, tt.quick), "\n")
			i := 0
			for _, line := range got {
				if i < len(tt.want) && line == tt.want[i] {
					i++
				}
				for _, bad := range tt.not {
					if line == bad {
						t.Errorf("has %q", bad)
					}
				}
			}
			if i < len(tt.want) {
				t.Errorf("answer lacks %q (in order):\n%s", tt.want[i], strings.Join(got, "\n"))
			}
		})
	}
}

// /commands, /profile, /version and /v answer through the router.
func TestInfoCommands(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	cfg := testConfig()
	cfg.Profile = "coder"
	e.startRouterWith(cfg, nil, func(d *Deps) { d.Version = "v1.2.3" })
	e.startWorker(nil)
	key := "agent:coder:telegram:dm:chat-alice"
	for _, tt := range []struct{ send, want string }{
		{"/profile", "👤 **Profile:** `coder`\n🔑 **Session key:** `" + key + "`"},
		{"/version", "Switchboard v1.2.3"},
		{"/v", "Switchboard v1.2.3"},
		{"/commands 2", commandsText("telegram", "2", "")},
	} {
		if got := e.ask("alice", tt.send); got != tt.want {
			t.Errorf("%s answered %q, want %q", tt.send, got, tt.want)
		}
	}
	if got := profileText("", "agent:main:x"); !strings.HasPrefix(got, "👤 **Profile:** `default`\n") {
		t.Errorf("the default profile shows as %q", got)
	}
}

// /help (and /commands, which pages its lines) lists every command
// pkg/command parses, one line each; the commands added beside Hermes's
// (/voice, /fast, /btw, /agents, /topic) are described in Hermes's words
// (hermes_cli/commands.py) before what is this gateway's own.
func TestHelpListsEveryCommand(t *testing.T) {
	t.Parallel()
	lines := strings.Split(helpText, "\n")[1:]
	lineOf := func(name string) string {
		for _, l := range lines {
			if rest, ok := strings.CutPrefix(l, "/"+name); ok && (rest == "" || rest[0] == ' ') {
				return l
			}
		}
		return ""
	}
	for _, name := range command.Names() {
		if name == "start" { // Telegram's, answered with nothing
			continue
		}
		if lineOf(name) == "" {
			t.Errorf("/help has no line for /%s", name)
		}
	}
	for name, hermes := range map[string]string{
		"voice":  "toggle voice mode",
		"fast":   "fast mode: OpenAI Priority Processing / Anthropic Fast Mode",
		"btw":    "ask a side question about the current conversation without interrupting it",
		"agents": "show active agents and running tasks",
		"topic":  "enable or inspect Telegram DM topic sessions",
		"save":   "export the current conversation (bare /save shows usage)",
	} {
		l := lineOf(name)
		if _, desc, _ := strings.Cut(l, " — "); !strings.HasPrefix(desc, hermes) {
			t.Errorf("/help's /%s line %q does not start with Hermes's %q", name, l, hermes)
		}
	}
}

// The quick commands' heading never ends a /commands page: wherever the
// page boundary falls (just after the heading, or between the blank line
// before it and the heading), the heading starts a page with its first
// entry. Every entry is listed once, in order, and the pages link up.
func TestCommandsQuickHeadingKeepsItsEntries(t *testing.T) {
	t.Parallel()
	quick := []string{"", quickHeading, "/a — /model a", "/b — /model b", "/c — /model c"}
	for _, tt := range []struct {
		platform string
		size     int
	}{{"telegram", 15}, {"discord", 20}} {
		// filler lines before the quick commands: the heading as the last
		// line of page 1, the blank line before it as the last, and both
		// well inside a page.
		for _, filler := range []int{tt.size - 2, tt.size - 1, tt.size - 3, 2*tt.size - 2, 3} {
			t.Run(fmt.Sprintf("%s/%d", tt.platform, filler), func(t *testing.T) {
				var entries []string
				for i := range filler {
					entries = append(entries, fmt.Sprintf("/cmd%d — built in", i))
				}
				entries = append(entries, quick...)
				var listed []string
				pages := 0
				for page := 1; ; page++ {
					lines := strings.Split(commandsPage(tt.platform, page, entries), "\n")
					if page == 1 {
						if _, err := fmt.Sscanf(lines[0], "📚 **Commands** (%d total, page 1/%d)", new(int), &pages); err != nil {
							t.Fatalf("header %q: %v", lines[0], err)
						}
					}
					if want := fmt.Sprintf("📚 **Commands** (%d total, page %d/%d)", len(entries), page, pages); lines[0] != want {
						t.Errorf("page %d header %q, want %q", page, lines[0], want)
					}
					body := lines[2:]
					if pages > 1 {
						body = body[:len(body)-2] // the blank line and the links
					}
					if len(body) > tt.size {
						t.Errorf("page %d has %d lines, more than %d", page, len(body), tt.size)
					}
					for i, l := range body {
						if l == quickHeading && (i == len(body)-1 || body[i+1] != quick[2]) {
							t.Errorf("page %d: the heading without its first entry after it:\n%s", page, strings.Join(body, "\n"))
						}
						if l != "" {
							listed = append(listed, l)
						}
					}
					if len(body) > 0 && (body[len(body)-1] == "" || body[0] == "") {
						t.Errorf("page %d begins or ends with a blank line:\n%s", page, strings.Join(body, "\n"))
					}
					if page >= pages {
						break
					}
				}
				var want []string
				for _, e := range entries {
					if e != "" {
						want = append(want, e)
					}
				}
				if strings.Join(listed, "\n") != strings.Join(want, "\n") {
					t.Errorf("listed across %d pages:\n%s\nwant:\n%s", pages, strings.Join(listed, "\n"), strings.Join(want, "\n"))
				}
			})
		}
	}
}
