// Package command parses the gateway's slash commands the way the Hermes
// gateway does, and suggests close matches for unknown ones.
//
// It does no I/O.
package command

import (
	"slices"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Command is a parsed slash command.
type Command struct {
	// Name is the canonical command name, lowercased, with aliases
	// resolved: "/Reset" gives "new".
	Name string
	// Typed is the name as typed, lowercased, without prefix or @bot.
	Typed string
	// Args is the text after the command word, trimmed, with the dashes
	// that phone keyboards substitute turned back: "—" → "--", "–" → "-".
	Args string
	// Known reports whether Name is one of Names().
	Known bool
}

// names are the commands the gateway handles, canonical names first.
var names = []string{
	"new", "stop", "queue", "steer", "status", "help", "whoami", "model",
	"approve", "deny", "resume", "sessions", "title", "retry", "undo", "sethome",
	"cron", "usage", "compress", "insights", "provider", "personality", "reasoning",
	"verbose", "commands", "profile", "version", "background", "btw", "branch", "yolo", "approvals", "memory",
	"busy", "footer", "agents", "voice", "fast", "context", "platform", "goal", "subgoal", "loop", "heartbeat", "topic", "pause", "save", "moa",
	"reload-skills", "bundles",
	// Telegram clients send /start when a user opens the bot; Hermes
	// acknowledges it with nothing.
	"start",
}

// aliases map a typed name to its canonical name.
var aliases = map[string]string{
	"reset":    "new",
	"q":        "queue",
	"set-home": "sethome",
	// Hermes's /v, /version's alias.
	"v":  "version",
	"bg": "background",
	// Hermes's /fork, /branch's alias.
	"fork": "branch",
	// Hermes's /tasks, /agents's alias.
	"tasks": "agents",
	// Hermes's /ctx, /context's alias.
	"ctx": "context",
	// Hermes's /proactive, /loop's alias, and /hb, /heartbeat's.
	"proactive": "loop",
	"hb":        "heartbeat",
	// Hermes's /reload_skills, the form Telegram's menu takes.
	"reload_skills": "reload-skills",
}

// Names returns the canonical command names.
func Names() []string { return slices.Clone(names) }

// Canonical resolves an alias ("reset" → "new") and reports whether the
// name is a known command. name must already be lowercased.
func Canonical(name string) (string, bool) {
	if c, ok := aliases[name]; ok {
		return c, true
	}
	return name, slices.Contains(names, name)
}

// bangPlatforms accept "!cmd" as well as "/cmd": their clients intercept
// messages that start with "/".
var bangPlatforms = map[string]bool{"slack": true, "matrix": true}

// TypedPrefix is how a user of platform types a command: "!" where the
// client keeps "/" for itself (Slack, Matrix), "/" elsewhere. Text that
// tells the user a command ("reply /approve") uses it.
func TypedPrefix(platform string) string {
	if bangPlatforms[strings.ToLower(strings.TrimSpace(platform))] {
		return "!"
	}
	return "/"
}

// Parse reads a command from a message. It returns false when the message
// is not a command:
//
//   - after leading whitespace it must start with "/" ("!" also on slack
//     and matrix);
//   - the command word runs to the first whitespace; it is lowercased and
//     an "@name" suffix is removed. When botName is set and the suffix
//     names another bot, the command is not ours and Parse returns false;
//   - an empty word ("/", "/ foo") is not a command;
//   - a word containing "/" is a path ("/usr/bin"), not a command.
//
// Unknown words ("/strat") are still commands, with Known false, so the
// caller can answer with Suggest. With "!" only known commands are: as in
// Hermes, "!nice work" is a message.
func Parse(text, platform, botName string) (Command, bool) {
	return ParseWith(text, platform, botName, nil)
}

// ParseWith is Parse where extra also names commands: operator-defined
// ones (the router's quick commands), which "!" starts as it starts the
// built-in ones. They come back with Known false, like any word that is
// not built in; extra may be nil.
func ParseWith(text, platform, botName string, extra func(name string) bool) (Command, bool) {
	t := strings.TrimLeftFunc(text, unicode.IsSpace)
	if t == "" {
		return Command{}, false
	}
	switch {
	case t[0] == '/':
	case t[0] == '!' && bangPlatforms[strings.ToLower(strings.TrimSpace(platform))]:
	default:
		return Command{}, false
	}
	word, rest := t[1:], ""
	if i := strings.IndexFunc(word, unicode.IsSpace); i >= 0 {
		word, rest = word[:i], word[i:]
	}
	word = strings.ToLower(word)
	if at := strings.IndexByte(word, '@'); at >= 0 {
		bot := word[at+1:]
		word = word[:at]
		want := strings.ToLower(strings.TrimPrefix(botName, "@"))
		if want != "" && bot != "" && bot != want {
			return Command{}, false
		}
	}
	if word == "" || strings.Contains(word, "/") || !utf8.ValidString(word) {
		return Command{}, false
	}
	name, known := Canonical(word)
	if !known && t[0] == '!' && (extra == nil || !extra(word)) {
		return Command{}, false
	}
	return Command{Name: name, Typed: word, Args: fixDashes(strings.TrimSpace(rest)), Known: known}, true
}

// ForOtherBot reports whether text is a command addressed to another bot
// ("/new@other_bot" when botName is "my_bot"), which Parse does not read
// as a command: in a group with several bots, it is not for this one.
func ForOtherBot(text, platform, botName string) bool {
	want := strings.ToLower(strings.TrimPrefix(botName, "@"))
	t := strings.TrimLeftFunc(text, unicode.IsSpace)
	if want == "" || t == "" || (t[0] != '/' && !(t[0] == '!' && bangPlatforms[strings.ToLower(strings.TrimSpace(platform))])) {
		return false
	}
	word := t[1:]
	if i := strings.IndexFunc(word, unicode.IsSpace); i >= 0 {
		word = word[:i]
	}
	name, bot, ok := strings.Cut(strings.ToLower(word), "@")
	if !ok || name == "" || bot == "" || bot == want || strings.Contains(name, "/") {
		return false
	}
	if t[0] == '!' {
		// As in Parse, "!" starts only known commands: "!nice@work" is talk.
		_, known := Canonical(name)
		return known
	}
	return true
}

var dashes = strings.NewReplacer("\u2014\u2014", "--", "\u2014", "--", "\u2013", "-")

// fixDashes undoes the em and en dashes that iOS substitutes for "--" and
// "-", as Hermes does.
func fixDashes(s string) string {
	if !strings.ContainsAny(s, "\u2013\u2014") {
		return s
	}
	return dashes.Replace(s)
}

// MaxSuggestions caps the length of Suggest's answer.
const MaxSuggestions = 3

// Suggest returns up to MaxSuggestions canonical command names close to an
// unknown name, best first: a known name or alias that starts with it or
// that it starts with, or one within a small edit distance (1 for names of
// up to 4 letters, else 2). A leading "/" or "!" is ignored.
func Suggest(name string) []string {
	name = strings.ToLower(strings.TrimLeft(strings.TrimSpace(name), "/!"))
	if name == "" {
		return nil
	}
	type cand struct {
		name string
		dist int
	}
	var cands []cand
	consider := func(typed, canonical string) {
		d := distance(name, typed)
		switch {
		case d == 0:
			// an exact match is not a suggestion, but keep it first
		case strings.HasPrefix(typed, name) || strings.HasPrefix(name, typed) && len(typed) >= 3:
			d = min(d, 1)
		case d <= 1 || d <= 2 && utf8.RuneCountInString(name) > 4:
		default:
			return
		}
		for i, c := range cands {
			if c.name == canonical {
				cands[i].dist = min(c.dist, d)
				return
			}
		}
		cands = append(cands, cand{canonical, d})
	}
	for _, n := range names {
		if n != "start" { // answered with nothing: never suggested
			consider(n, n)
		}
	}
	for a, c := range aliases {
		consider(a, c)
	}
	slices.SortFunc(cands, func(a, b cand) int {
		if a.dist != b.dist {
			return a.dist - b.dist
		}
		return strings.Compare(a.name, b.name)
	})
	if len(cands) == 0 {
		return nil
	}
	out := make([]string, 0, min(len(cands), MaxSuggestions))
	for _, c := range cands[:min(len(cands), MaxSuggestions)] {
		out = append(out, c.name)
	}
	return out
}

// distance is the optimal-string-alignment edit distance (insertions,
// deletions, substitutions and adjacent transpositions) over runes.
func distance(a, b string) int {
	ra, rb := []rune(a), []rune(b)
	// three rows: i-2, i-1, i
	prev2 := make([]int, len(rb)+1)
	prev := make([]int, len(rb)+1)
	cur := make([]int, len(rb)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(ra); i++ {
		cur[0] = i
		for j := 1; j <= len(rb); j++ {
			cost := 1
			if ra[i-1] == rb[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
			if i > 1 && j > 1 && ra[i-1] == rb[j-2] && ra[i-2] == rb[j-1] {
				cur[j] = min(cur[j], prev2[j-2]+1)
			}
		}
		prev2, prev, cur = prev, cur, prev2
	}
	return prev[len(rb)]
}

// How long an approval given with /approve stands (its argument, as
// Hermes reads it).
const (
	ApproveOnce    = ""        // this call alone
	ApproveSession = "session" // the rest of the conversation: "session", "ses"
	ApproveAlways  = "always"  // from now on: "always", "permanent", "permanently"
)

// ApprovalScope reads /approve's argument as Hermes does: "always"
// (or "permanent", "permanently") anywhere in it beats "session" (or
// "ses") anywhere, whatever their order; any other word, "all"
// included, approves the call alone.
func ApprovalScope(args string) string {
	scope := ApproveOnce
	for _, w := range strings.Fields(strings.ToLower(args)) {
		switch w {
		case "session", "ses":
			if scope == ApproveOnce {
				scope = ApproveSession
			}
		case "always", "permanent", "permanently":
			scope = ApproveAlways
		}
	}
	return scope
}
