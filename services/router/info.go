package router

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/switchboard-chat/switchboard/pkg/command"
)

// Hermes's read-only information commands: /commands, /profile and
// /version (gateway/run.py; hermes_cli/slash_exec.py). Each answers from
// the router's configuration alone: the same on every replica.

// infoCommand answers /commands, /profile and /version.
func (s *Service) infoCommand(m *msgCtx, cmd command.Command) string {
	switch cmd.Name {
	case "commands":
		return commandsText(m.platform, cmd.Args, s.quickHelp()+s.skillsCommands(m.platform))
	case "profile":
		return profileText(s.cfg.Profile, m.key)
	}
	return versionText(s.version)
}

// commandsText answers /commands [page] on platform: Hermes's paginated
// list of every command (here /help's lines, then the quick commands and
// the skills that run on platform),
// 15 a page on Telegram (shorter messages), 20 elsewhere, with links to
// the pages before and after (the quick commands' heading kept with its
// entries, commandsPages). A page past the end shows the last, and says
// so; a page that is no number gets the usage.
func commandsText(platform, args, quick string) string {
	requested := 1
	if a := strings.TrimSpace(args); a != "" {
		n, err := strconv.Atoi(a)
		if err != nil {
			return "Usage: `/commands [page]`"
		}
		requested = n
	}
	entries := strings.Split(helpText, "\n")[1:] // "Commands:" is the header's
	if quick != "" {
		entries = append(entries, strings.Split(quick, "\n")...)
	}
	return commandsPage(platform, requested, entries)
}

// commandsPage is page requested of /commands listing entries on
// platform.
func commandsPage(platform string, requested int, entries []string) string {
	size := 20
	if strings.EqualFold(platform, "telegram") {
		size = 15
	}
	bounds := commandsPages(entries, size)
	pages := len(bounds)
	page := max(1, min(requested, pages))
	lines := []string{fmt.Sprintf("📚 **Commands** (%d total, page %d/%d)", len(entries), page, pages), ""}
	body := entries[bounds[page-1][0]:bounds[page-1][1]]
	if len(body) > 0 && body[0] == "" { // the header's blank line is enough
		body = body[1:]
	}
	lines = append(lines, body...)
	if pages > 1 {
		p := command.TypedPrefix(platform)
		var nav []string
		if page > 1 {
			nav = append(nav, fmt.Sprintf("`%scommands %d` ← prev", p, page-1))
		}
		if page < pages {
			nav = append(nav, fmt.Sprintf("next → `%scommands %d`", p, page+1))
		}
		lines = append(lines, "", strings.Join(nav, " | "))
	}
	if page != requested {
		lines = append(lines, fmt.Sprintf("_(Requested page %d was out of range, showing page %d.)_", requested, page))
	}
	return strings.Join(lines, "\n")
}

// commandsPages cuts entries into pages of at most size lines, as
// Hermes's /commands, except that the quick commands' heading and the
// skills' (and the blank line before each) never end a page: a page that would end with
// either ends before the blank line, and the heading starts the next
// page with its entries. Each page is a [start, end) range; there is at
// least one.
func commandsPages(entries []string, size int) [][2]int {
	headings := []int{slices.Index(entries, quickHeading), slices.Index(entries, skillsHeading)}
	var pages [][2]int
	for start := 0; start < len(entries); {
		end := min(start+size, len(entries))
		for _, heading := range headings {
			if heading > 0 && end < len(entries) && (end == heading || end == heading+1) && heading-1 > start {
				end = heading - 1
			}
		}
		pages = append(pages, [2]int{start, end})
		start = end
	}
	if len(pages) == 0 {
		pages = append(pages, [2]int{0, 0})
	}
	return pages
}

// profileText answers /profile: Hermes's "👤 **Profile:** `name`" (the
// default profile is "default"), and instead of Hermes's home directory,
// which a replicated gateway has none of, the session key the profile
// namespaces.
func profileText(profile, key string) string {
	if profile == "" {
		profile = "default"
	}
	return "👤 **Profile:** `" + profile + "`\n🔑 **Session key:** `" + key + "`"
}

// versionText answers /version: the running release, as Hermes's banner
// label names its own.
func versionText(version string) string {
	if version == "" {
		version = "dev"
	}
	return "Switchboard " + version
}
