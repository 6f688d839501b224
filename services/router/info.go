package router

import (
	"fmt"
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
		return commandsText(m.platform, cmd.Args, s.quickHelp())
	case "profile":
		return profileText(s.cfg.Profile, m.key)
	}
	return versionText(s.version)
}

// commandsText answers /commands [page] on platform: Hermes's paginated
// list of every command (here /help's lines, then the quick commands),
// 15 a page on Telegram (shorter messages), 20 elsewhere, with links to
// the pages before and after. A page past the end shows the last, and
// says so; a page that is no number gets the usage.
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
	size := 20
	if strings.EqualFold(platform, "telegram") {
		size = 15
	}
	pages := max(1, (len(entries)+size-1)/size)
	page := max(1, min(requested, pages))
	lines := []string{fmt.Sprintf("📚 **Commands** (%d total, page %d/%d)", len(entries), page, pages), ""}
	lines = append(lines, entries[(page-1)*size:min(page*size, len(entries))]...)
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
