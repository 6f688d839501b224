// Package chunk splits a reply into messages that fit a chat platform's
// length limit, keeping fenced code blocks intact across the cuts.
//
// It does no I/O; the platform table is the only state.
package chunk

import (
	"math"
	"strconv"
	"strings"
	"unicode/utf8"
)

// Measure says how a platform counts a message's length.
type Measure int

const (
	// Runes counts Unicode code points (what most platforms call characters).
	Runes Measure = iota
	// UTF16 counts UTF-16 code units: a rune above U+FFFF counts twice
	// (Telegram).
	UTF16
	// Bytes counts UTF-8 bytes.
	Bytes
	// EscapedRunes counts code points after &, < and > are escaped as
	// &amp;, &lt; and &gt; (5, 4 and 4): Slack limits the text it is
	// sent, which the gateway escapes, so code full of < and > must not
	// be cut to a length it then outgrows.
	EscapedRunes
)

// Len returns the length of s in this measure. Invalid UTF-8 bytes count
// as one rune (U+FFFD) each.
func (m Measure) Len(s string) int {
	switch m {
	case Bytes:
		return len(s)
	case UTF16, EscapedRunes:
		n := 0
		for _, r := range s {
			n += runeLen(m, r)
		}
		return n
	default:
		return utf8.RuneCountInString(s)
	}
}

func (m Measure) String() string {
	switch m {
	case UTF16:
		return "utf16"
	case Bytes:
		return "bytes"
	case EscapedRunes:
		return "escaped-runes"
	default:
		return "runes"
	}
}

// Width is how much the rune r, size bytes long in UTF-8, counts in this
// measure.
func (m Measure) Width(r rune, size int) int {
	if m == Bytes {
		return size
	}
	return runeLen(m, r)
}

// Cut is the longest start of s at most n long in this measure, never
// half a rune ("" when its first rune is longer): a text cut to a field's
// limit, as Hermes cuts a button's label or a toast at Telegram's or
// Discord's count.
func (m Measure) Cut(s string, n int) string {
	end, used := 0, 0
	for end < len(s) {
		r, size := utf8.DecodeRuneInString(s[end:])
		w := m.Width(r, size)
		if used+w > n {
			break
		}
		used += w
		end += size
	}
	return s[:end]
}

func runeLen(m Measure, r rune) int {
	switch m {
	case UTF16:
		if r >= 0x10000 {
			return 2
		}
		return 1
	case EscapedRunes:
		switch r {
		case '&':
			return len("&amp;")
		case '<', '>':
			return len("&lt;")
		}
		return 1
	default:
		return 1
	}
}

// Limit is the longest message a platform accepts, in its own measure,
// and whether the messages of a split reply are numbered.
type Limit struct {
	Max     int
	Measure Measure
	// NoCounter leaves the "(i/N)" counter off the parts of a split
	// reply: on a platform whose messages flow on as one conversation
	// (iMessage bubbles), the counter is noise, and Hermes strips it.
	NoCounter bool
}

// Len measures s with the limit's measure.
func (l Limit) Len(s string) int { return l.Measure.Len(s) }

// Fits reports whether s is within the limit.
func (l Limit) Fits(s string) bool { return l.Measure.Len(s) <= l.Max }

// DefaultLimit applies to platforms missing from the table.
var DefaultLimit = Limit{Max: 4000, Measure: Runes}

// Unlimited is the limit of a platform that takes a reply of any length
// in one message: every text fits, so Parts returns it whole, without a
// counter.
var Unlimited = Limit{Max: math.MaxInt, Measure: Runes}

// MinMax is the smallest Max that Parts honours. A smaller Max is raised to
// MinMax: below it there is no room for a fence pair, a chunk counter and
// text, and no real platform is that small.
const MinMax = 64

var limits = map[string]Limit{
	// The OpenAI-compatible API (and the web chat on it) answers a request
	// with one response body or one stream: the client gets the whole
	// text as it was written.
	"api":        Unlimited,
	"telegram":   {Max: 4096, Measure: UTF16},
	"discord":    {Max: 2000, Measure: Runes},
	"slack":      {Max: 39000, Measure: EscapedRunes},
	"matrix":     {Max: 4000, Measure: Runes},
	"mattermost": {Max: 4000, Measure: Runes},
	"whatsapp":   {Max: 4096, Measure: Runes},
	"signal":     {Max: 8000, Measure: UTF16}, // Hermes counts UTF-16 units
	"sms":        {Max: 1600, Measure: UTF16}, // Twilio counts a character outside the BMP twice
	"email":      {Max: 50000, Measure: Runes},
	// A Home Assistant persistent notification takes any length, and
	// with Hermes's fixed notification id a second part would replace
	// the first: one answer is one notification (Hermes cuts at 4,096).
	"homeassistant": Unlimited,
	// iMessage through BlueBubbles: Hermes's 4,000 characters a message,
	// without counters (Hermes strips them: the bubbles flow on).
	"bluebubbles": {Max: 4000, Measure: Runes, NoCounter: true},
	// LINE: 5,000 characters a text message, counted in UTF-16 units to
	// stay under it whatever LINE counts, and five messages a call: the
	// gateway cuts an answer of up to 25,000 into the messages of one
	// reply (free with the reply token), as Hermes batches them.
	"line": {Max: 25000, Measure: UTF16},
	// Google Chat: 4,096 characters a message (Hermes cuts at 4,000).
	"google_chat": {Max: 4096, Measure: Runes},
	// Teams: Hermes's 28,000 characters an activity's text.
	"teams": {Max: 28000, Measure: Runes},
}

// Limits returns the message limit of a platform, named case-insensitively;
// unknown platforms get DefaultLimit.
func Limits(platform string) Limit {
	if l, ok := limits[strings.ToLower(strings.TrimSpace(platform))]; ok {
		return l
	}
	return DefaultLimit
}

// Split cuts text into messages for the named platform. See SplitLimit.
func Split(text, platform string) []string {
	return SplitLimit(text, Limits(platform))
}

// SplitLimit cuts text into messages that each fit l. Text that fits is
// returned unchanged as the only message. Otherwise each message is
// Part.String() of the parts described at Parts.
func SplitLimit(text string, l Limit) []string {
	parts := Parts(text, l)
	out := make([]string, len(parts))
	for i, p := range parts {
		out[i] = p.String()
	}
	return out
}

// Part is one message of a split reply, kept in pieces so that callers and
// tests can see exactly what was added to the original text.
//
// A message is Reopen + Body + Close + Suffix. Joining every Body with the
// Sep that follows it gives back the original text exactly.
type Part struct {
	// Reopen is "```lang\n" when the previous message was cut inside a code
	// fence (not just before its closing line), so the fence continues
	// here with the same language tag (the tag is dropped if it would not
	// leave room for text); else "".
	Reopen string
	// Body is a non-empty piece of the original text.
	Body string
	// Close is "\n```" when Reopen+Body ends inside a code fence; else "".
	Close string
	// Suffix is the counter " (i/N)", or "\n(i/N)" when the message's last
	// line is a fence line (so the counter does not become its info
	// string); "" when the reply is a single message or the limit has
	// NoCounter.
	Suffix string
	// Sep is the original text dropped at the cut after Body: "\n" when cut
	// at a newline, " " when cut at a space, "" for a hard cut and for the
	// last part. A cut at the newline before the closing line of the
	// fence Body ends inside drops that line too ("\n```\n"): Close
	// stands in for it, and the next part starts after it, not reopening
	// the fence (which would show an empty block).
	Sep string
}

// String is the message text.
func (p Part) String() string { return p.Reopen + p.Body + p.Close + p.Suffix }

// CloseFence closes the code fence a message is cut inside.
const CloseFence = "\n```"

// Reopen is how the message after text starts when text, read as one
// message by the rules Parts uses, ends inside a code fence: "```lang\n",
// with the fence's language tag, or "```\n" when the tag would leave less
// than half of l for text; "" when text ends outside any fence. A stream
// that continues a message in the next (streamedit) closes and reopens
// the fence with it, as Parts does.
func Reopen(text string, l Limit) string {
	st := scanFences(fenceState{}, text)
	if !st.open {
		return ""
	}
	r := "```" + st.lang + "\n"
	if l.Max-l.Len(r)-len(CloseFence) < l.Max/2 {
		r = "```\n"
	}
	return r
}

// Parts splits text like SplitLimit and returns the pieces of each message.
//
// Each cut is made in the longest prefix that fits the room left after the
// reopened fence, the close fence and the counter: at its last newline
// when that is in the prefix's second half (as Hermes cuts), else its last
// space (not one before backticks, which at the start of the next message
// would be a fence line), else its last newline (the separator is dropped), else hard at a
// rune boundary (which is never inside a UTF-8 sequence or a UTF-16
// surrogate pair). A separator at the very start of the window is not used, so no
// Body is empty.
//
// Fences are tracked per message, the way a platform renders each message
// on its own: a line whose first characters after spaces are ``` opens a
// fence, except a line with a backtick after its opening run
// ("```npm install```" is code inline), and in a fence closes it when
// only blanks follow the backticks ("``` foo" is a line of the code);
// when it opens one, the first word after the backticks is the
// language tag.
func Parts(text string, l Limit) []Part {
	if l.Max < MinMax {
		l.Max = MinMax
	}
	if l.Fits(text) {
		return []Part{{Body: text}}
	}
	if l.NoCounter {
		return split(text, l, 0)
	}
	// The counter's width depends on the number of parts, which depends on
	// the room the counter leaves. Grow the reserved digits until they hold.
	for digits := 1; ; digits++ {
		parts := split(text, l, 4+2*digits) // " (" + i + "/" + n + ")"
		if len(strconv.Itoa(len(parts))) <= digits {
			n := len(parts)
			for i := range parts {
				p := &parts[i]
				sep := " "
				if lastLineIsFence(p.Reopen + p.Body + p.Close) {
					sep = "\n"
				}
				p.Suffix = sep + "(" + strconv.Itoa(i+1) + "/" + strconv.Itoa(n) + ")"
			}
			return parts
		}
	}
}

// split cuts text leaving room for a counter suffix units long.
func split(text string, l Limit, suffix int) []Part {
	var parts []Part
	var fence fenceState
	rest := text
	for rest != "" {
		var p Part
		if fence.open {
			p.Reopen = "```" + fence.lang + "\n"
			// Keep the tag only if at least half the message is left for text.
			if l.Max-suffix-l.Len(p.Reopen)-len(CloseFence) < l.Max/2 {
				p.Reopen = "```\n"
			}
		}
		room := l.Max - suffix - l.Len(p.Reopen)
		body, sep, next := cutPart(rest, l.Measure, room, p.Reopen)
		end := scanFences(fenceState{}, p.Reopen+body)
		if end.open {
			// Cut again leaving room for the close fence. The new cut may
			// end outside the fence; then no close is needed.
			body, sep, next = cutPart(rest, l.Measure, room-len(CloseFence), p.Reopen)
			end = scanFences(fenceState{}, p.Reopen+body)
			if end.open {
				p.Close = CloseFence
				// Cut just before the fence's closing line: Close stands
				// in for it, and the next part starts after it, rather
				// than reopen the fence only to close it (an empty block).
				if line, ok := closingLine(next); ok && sep == "\n" {
					sep += line
					next = next[len(line):]
					end = fenceState{}
				}
			}
		}
		p.Body, p.Sep = body, sep
		parts = append(parts, p)
		fence = end
		rest = next
	}
	return parts
}

// cutPart cuts the body of a part that starts with reopen out of s
// (cut, spanSafe), never in or right after a line that opens a fence
// (openers): the part would show an empty code block, closed at once,
// and the next one reopen it for the code, or start with the rest of
// the line as text.
func cutPart(s string, m Measure, room int, reopen string) (body, sep, rest string) {
	return spanSafe(cut(s, m, room, openers(s, fit(s, m, room), reopen)))
}

// openers reports, of the byte positions of s up to end (the window a
// part is cut in), those that are in a line that opens a fence, at its
// newline or in the blanks after it (the indent of the code's first
// line, blank lines): a cut there too leaves the part ending in the
// opening line; and those in a fence line that opens none before the
// backtick after its run that makes it text, which a cut there leaves
// as the part's last line, one that opens a fence; the part starts
// with reopen.
func openers(s string, end int, reopen string) func(int) bool {
	st := scanFences(fenceState{}, reopen)
	var lines [][2]int // from the line's start to its newline or the last blank after it
	for pos := 0; pos < end; {
		nl := strings.IndexByte(s[pos:], '\n')
		next := len(s)
		if nl >= 0 {
			next = pos + nl + 1
		}
		if info, ok := fenceLine(s[pos:next]); ok && !st.open && opens(info) {
			last := pos + nl
			if nl >= 0 {
				for last+1 < len(s) && strings.IndexByte(" \t\r\n", s[last+1]) >= 0 {
					last++
				}
			}
			lines = append(lines, [2]int{pos, last})
		} else if ok && !st.open {
			// Backticks in its info make it text ("```npm i```"), but
			// cut before the first of them its head opens a fence.
			tick := next - len(info) + strings.IndexByte(info, '`')
			lines = append(lines, [2]int{pos, tick - 1})
		}
		st = scanFences(st, s[pos:next])
		pos = next
	}
	return func(i int) bool {
		for _, l := range lines {
			if i >= l[0] && (i <= l[1] || l[1] < l[0]) {
				return true
			}
		}
		return false
	}
}

// fit is the length of the longest prefix of s that fits room, one rune
// at least.
func fit(s string, m Measure, room int) int {
	n, end := 0, 0
	for end < len(s) {
		r, size := utf8.DecodeRuneInString(s[end:])
		w := m.Width(r, size)
		if n+w > room {
			break
		}
		n += w
		end += size
	}
	if end == 0 && s != "" {
		// room is smaller than one rune; MinMax makes this unreachable,
		// but never loop forever.
		_, end = utf8.DecodeRuneInString(s)
	}
	return end
}

// cut returns the longest prefix of s that fits room, cut as Parts
// describes at a separator that is not a position skip reports, the
// separator it dropped and the rest of s.
func cut(s string, m Measure, room int, skip func(int) bool) (body, sep, rest string) {
	end := fit(s, m, room)
	if end == len(s) {
		return s, "", ""
	}
	window := s[:end]
	// A newline in the first half would leave a short message (a lone
	// heading, "Here it is:") before a long paragraph: Hermes takes it only
	// in the second half, else the last space.
	nl := strings.LastIndexByte(window, '\n')
	for nl > 0 && skip(nl) {
		nl = strings.LastIndexByte(window[:nl], '\n')
	}
	if nl > 0 && nl >= len(window)/2 {
		return s[:nl], "\n", s[nl+1:]
	}
	if i := lastSpace(window, s, skip); i > 0 {
		return s[:i], " ", s[i+1:]
	}
	if nl > 0 {
		return s[:nl], "\n", s[nl+1:] // still better than a cut mid-word
	}
	return window, "", s[end:]
}

// lastSpace is the index of the last space in window, a prefix of s, that
// s may be cut at: one after which s goes on with backticks that would
// start a fence line (startsFence) is not, nor one skip reports; -1 when
// there is none.
func lastSpace(window, s string, skip func(int) bool) int {
	i := strings.LastIndexByte(window, ' ')
	for i > 0 && (startsFence(s[i+1:]) || skip(i)) {
		i = strings.LastIndexByte(window[:i], ' ')
	}
	return i
}

// startsFence reports whether text cut at a space before s would start
// the next message with a fence line: s, its spaces trimmed, starts with
// ```. Backticks in the middle of a line ("wrap it in ``` fences") are
// text, and a cut must not make them a fence.
func startsFence(s string) bool {
	return strings.HasPrefix(strings.TrimLeft(s, " "), "```")
}

// spanSafe moves a cut made inside an inline code span (`like this`) to
// the space or newline before the span, as Hermes does, when that keeps
// more than a quarter of the body: each message renders on its own, and
// a span cut in two shows as stray backticks around unformatted code.
// Backticks on fence lines and inside fences are not spans; the whole
// text is one (a cut in a fence is closed and reopened instead).
func spanSafe(body, sep, rest string) (string, string, string) {
	if rest == "" {
		return body, sep, rest
	}
	open, at := false, -1 // inside a span; where the open span starts
	inFence := false
	pos := 0
	for line := range strings.Lines(body) {
		if info, ok := fenceLine(line); ok && (inFence && closes(info) || !inFence && opens(info)) {
			inFence = !inFence
			open = false
		} else if !inFence {
			for i := 0; i < len(line); i++ {
				switch {
				case line[i] == '\\' && i+1 < len(line):
					i++ // an escaped character, backticks included
				case line[i] == '`':
					open = !open
					if open {
						at = pos + i
					}
				}
			}
		}
		pos += len(line)
	}
	if !open || inFence {
		return body, sep, rest
	}
	i := strings.LastIndexAny(body[:at], " \n")
	for i > 0 && body[i] == ' ' && startsFence(body[i+1:]) {
		i = strings.LastIndexAny(body[:i], " \n")
	}
	if i <= len(body)/4 {
		return body, sep, rest
	}
	return body[:i], body[i : i+1], body[i+1:] + sep + rest
}

// closingLine returns the first line of s, with its newline, when it is
// a line that closes a fence (closes).
func closingLine(s string) (string, bool) {
	line := s
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		line = s[:i+1]
	}
	info, ok := fenceLine(strings.TrimSuffix(line, "\n"))
	return line, ok && closes(info)
}

// fenceState is whether text so far is inside a ``` fence, and its tag.
type fenceState struct {
	open bool
	lang string
}

// scanFences returns the fence state after text, starting from st.
func scanFences(st fenceState, text string) fenceState {
	for line := range strings.Lines(text) {
		info, ok := fenceLine(line)
		if !ok || !st.open && !opens(info) {
			continue
		}
		if st.open {
			if closes(info) {
				st = fenceState{}
			}
			continue
		}
		st.open = true
		st.lang = ""
		if f := strings.Fields(info); len(f) > 0 {
			st.lang = f[0]
		}
	}
	return st
}

// fenceLine reports whether line opens or closes a fence, and returns the
// text after the backticks. Only spaces may indent it, as markup.Convert
// and Signal's formatter read fences: after a tab the line is an indented
// code line (CommonMark), and a fence closed or reopened around it would
// be read as one opened.
func fenceLine(line string) (info string, ok bool) {
	t := strings.TrimLeft(line, " ")
	if !strings.HasPrefix(t, "```") {
		return "", false
	}
	return strings.TrimLeft(t, "`"), true
}

// opens reports whether a fence line with info after its backticks opens
// a fence: CommonMark lets no backtick into the info string, so
// "```npm install```" is code inline, which the next ``` line does not
// close.
func opens(info string) bool { return !strings.Contains(info, "`") }

// closes reports whether a fence line with info after its backticks
// closes an open fence: only blanks may follow the backticks
// (CommonMark, as markup.Convert reads it); "``` foo" or "```go" in a
// fence is a line of its code.
func closes(info string) bool { return strings.TrimRight(info, " \t\r\n") == "" }

func lastLineIsFence(s string) bool {
	i := strings.LastIndexByte(s, '\n')
	_, ok := fenceLine(s[i+1:])
	return ok
}

// Balanced reports whether every fence opened in text is closed again,
// by the rules Parts uses.
func Balanced(text string) bool { return !scanFences(fenceState{}, text).open }
