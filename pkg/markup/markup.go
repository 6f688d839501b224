// Package markup converts the Markdown an agent writes (CommonMark-ish:
// **bold**, *italic*, `code`, fenced blocks, [links](url), # headings,
// > quotes, ~~strike~~) into a chat platform's markup: Telegram's
// MarkdownV2, Slack's mrkdwn, WhatsApp's or Google Chat's formatting or plain text, escaping
// everything else the platform would read as markup (where it can). A marker without a partner on the same line is
// text. A platform may still reject an odd input; the Telegram gateway
// then resends the text without parse mode, converted with Plain.
package markup

import (
	"strings"
)

// Dialect is a platform's markup. Its bold, italic and strike markers
// are *, _ and ~ on every platform supported.
type Dialect struct {
	// escape writes one byte of text so the platform shows it as is.
	escape func(b *strings.Builder, c byte)
	// literal writes a character the Markdown escaped with a backslash.
	literal func(b *strings.Builder, c byte)
	// code escapes the body of a code span or block.
	code func(s string) string
	// link writes a link; text is converted already.
	link func(text, url string) string
	// fence writes a fenced code block.
	fence func(lang, body string) string
	// codeSpan, when set, writes a code span whole, its backticks included
	// (Slack's and WhatsApp's: a backtick of the code beside one of the
	// span's must not make a fence, breakFences); nil: "`" + code + "`".
	codeSpan func(code string) string
	// quote starts a quoted line (">" when empty).
	quote string
	// plain drops the bold, italic, strike and code markers: the text
	// shows without formatting.
	plain bool
}

// markdownPunct are the characters Markdown lets a backslash escape
// (and, on Telegram, the ones MarkdownV2 reserves).
const markdownPunct = "_*[]()~`>#+-=|{}.!\\"

// Telegram is Telegram's MarkdownV2: every reserved character of text is
// escaped with a backslash.
var Telegram = Dialect{
	escape: func(b *strings.Builder, c byte) {
		if strings.IndexByte(markdownPunct, c) >= 0 {
			b.WriteByte('\\')
		}
		b.WriteByte(c)
	},
	literal: func(b *strings.Builder, c byte) { b.WriteByte('\\'); b.WriteByte(c) },
	code:    telegramCode,
	link: func(text, url string) string {
		url = strings.ReplaceAll(url, "\\", "\\\\")
		return "[" + text + "](" + strings.ReplaceAll(url, ")", "\\)") + ")"
	},
	fence: func(lang, body string) string { return "```" + lang + "\n" + telegramCode(body) + "\n```" },
}

func telegramCode(s string) string {
	s = strings.ReplaceAll(s, "\\", "\\\\")
	return strings.ReplaceAll(s, "`", "\\`")
}

// slackEntities escapes what Slack reads as markup in any text, code
// included (https://api.slack.com/reference/surfaces/formatting#escaping):
// left as is, <!channel> or <@U…> would ping people and <url|label> would
// disguise a link.
var slackEntities = strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;")

// Slack is Slack's mrkdwn: &, < and > become entities; a link is
// <url|text>. Slack has no escape for *, _ or ~, so a marker the
// Markdown escaped stays as it is.
var Slack = Dialect{
	escape:   slackEscape,
	literal:  slackEscape,
	code:     func(s string) string { return breakFences(slackEntities.Replace(s)) },
	codeSpan: func(s string) string { return breakFences("`" + slackEntities.Replace(s) + "`") },
	link:     slackLink,
	fence:    func(_, body string) string { return "```\n" + breakFences(slackEntities.Replace(body)) + "\n```" },
}

// Slack and WhatsApp show a code block without a language: a fence's
// info string ("```go") is dropped, or it would show as the code's
// first line. (Hermes's format_message keeps it, for both: its Slack
// and WhatsApp users see "go" atop the code; gateway/platforms/slack.py
// and whatsapp.py, format_message.)
//
// Neither has an escape for a backtick, and both end a code block at
// the next "```" wherever it stands, where CommonMark ends it only at a
// line of backticks alone: a line of code such as "```go" or
// "``` foo", or a string "```" in code, would end the block there and
// show the rest as formatted text. breakFences keeps any three
// backticks of code from standing together with a zero-width space
// (U+200B) after every second of a run, which shows nothing.

// zeroWidthSpace parts backticks that would otherwise make a fence.
const zeroWidthSpace = "\u200b"

// breakFences puts a zero-width space after every second backtick of a
// run of three or more in code, so that none reads as a fence.
func breakFences(code string) string {
	if !strings.Contains(code, "```") {
		return code
	}
	var b strings.Builder
	run := 0
	for i := 0; i < len(code); i++ {
		c := code[i]
		if c != '`' {
			run = 0
			b.WriteByte(c)
			continue
		}
		if run == 2 {
			b.WriteString(zeroWidthSpace)
			run = 0
		}
		run++
		b.WriteByte(c)
	}
	return b.String()
}

// slackLink writes <url|text> for a web or mail address only: in Slack's
// angle brackets "!channel", "@U…" or "#C…" would ping everyone, a user
// or link a channel. Any other target, and a label that names another
// address than the link's (a disguise), is shown as "text (url)".
func slackLink(text, url string) string {
	lower := strings.ToLower(url)
	web := strings.HasPrefix(lower, "https://") || strings.HasPrefix(lower, "http://") || strings.HasPrefix(lower, "mailto:")
	target := strings.ReplaceAll(slackEntities.Replace(url), "|", "%7C")
	switch {
	case !web:
		return text + " (" + slackEntities.Replace(url) + ")"
	case strings.Contains(text, "://") || strings.HasPrefix(strings.ToLower(text), "www."):
		if text == slackEntities.Replace(url) {
			return "<" + target + ">"
		}
		return text + " (<" + target + ">)"
	}
	return "<" + target + "|" + text + ">"
}

// WhatsApp is WhatsApp's formatting (*bold*, _italic_, ~strike~, `code`,
// ```blocks```, "> " quotes), as Hermes converts to it. WhatsApp has no
// escape character and no link syntax: text is written as it is, and a
// link shows as "text (url)", or the address alone when that is its text.
var WhatsApp = Dialect{
	escape:   func(b *strings.Builder, c byte) { b.WriteByte(c) },
	literal:  func(b *strings.Builder, c byte) { b.WriteByte(c) },
	code:     breakFences,
	codeSpan: func(s string) string { return breakFences("`" + s + "`") },
	link:     textLink,
	fence:    func(_, body string) string { return "```\n" + breakFences(body) + "\n```" },
	quote:    "> ",
}

// Plain is text without markup, for platforms that show none (email's
// text/plain): emphasis and code markers are dropped, a heading is its
// text, a link is "text (url)" or the address alone when that is its
// text, a fenced block is its body and quotes stay ">" lines as written.
// It is never longer than the Markdown: text delivery cut to a
// platform's limit still fits it.
var Plain = Dialect{
	escape:  func(b *strings.Builder, c byte) { b.WriteByte(c) },
	literal: func(b *strings.Builder, c byte) { b.WriteByte(c) },
	code:    func(s string) string { return s },
	link:    textLink,
	fence:   func(_, body string) string { return body },
	plain:   true,
}

// textLink shows a link as "text (url)", or the address alone when that
// is its text.
func textLink(text, url string) string {
	if text == url {
		return url
	}
	return text + " (" + url + ")"
}

func slackEscape(b *strings.Builder, c byte) {
	switch c {
	case '&':
		b.WriteString("&amp;")
	case '<':
		b.WriteString("&lt;")
	case '>':
		b.WriteString("&gt;")
	default:
		b.WriteByte(c)
	}
}

// Escape returns text that d shows exactly as s.
func (d Dialect) Escape(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		d.escape(&b, s[i])
	}
	return b.String()
}

// Convert turns Markdown into d's markup.
func (d Dialect) Convert(md string) string {
	lines := strings.Split(md, "\n")
	var out []string
	for i := 0; i < len(lines); i++ {
		line := lines[i]
		trimmed := strings.TrimLeft(line, " ")
		if opensFence(trimmed) {
			lang := strings.TrimSpace(strings.TrimPrefix(trimmed, "```"))
			if strings.ContainsAny(lang, "` \t") {
				lang = ""
			}
			var body []string
			j := i + 1
			for ; j < len(lines); j++ {
				if closesFence(strings.TrimLeft(lines[j], " ")) {
					break
				}
				body = append(body, lines[j])
			}
			// An unclosed fence runs to the end, as in CommonMark.
			out = append(out, d.fence(lang, strings.Join(body, "\n")))
			i = j
			continue
		}
		out = append(out, d.line(line))
	}
	return strings.Join(out, "\n")
}

// opensFence reports whether a line, its leading blanks trimmed, opens a
// fenced code block: ``` and no backtick after the opening run (CommonMark
// lets none into the info string). "```npm install```" is a code span
// (inline), not a block that would swallow the line and those after it.
func opensFence(trimmed string) bool {
	return strings.HasPrefix(trimmed, "```") && !strings.Contains(strings.TrimLeft(trimmed, "`"), "`")
}

// closesFence reports whether a line inside a fenced code block, its
// leading blanks trimmed, closes it: a run of backticks followed by
// nothing but blanks (CommonMark). "``` foo" is a line of the code, not
// a fence whose "foo" would be lost.
func closesFence(trimmed string) bool {
	return strings.HasPrefix(trimmed, "```") && strings.TrimRight(strings.TrimLeft(trimmed, "`"), " \t") == ""
}

// codeSpan reads a code span opened by a run of n >= 2 backticks at
// the start of s (code that holds a backtick): the code up to the next
// run of exactly n, with one space stripped from each end when both have one
// (CommonMark). ok is false when no run closes it.
func codeSpan(s string) (code string, size int, ok bool) {
	n := len(s) - len(strings.TrimLeft(s, "`"))
	for i := n; i < len(s); {
		j := strings.IndexByte(s[i:], '`')
		if j < 0 {
			break
		}
		start := i + j
		end := start
		for end < len(s) && s[end] == '`' {
			end++
		}
		if end-start == n {
			code = s[n:start]
			if len(code) >= 2 && code[0] == ' ' && code[len(code)-1] == ' ' && strings.Trim(code, " ") != "" {
				code = code[1 : len(code)-1]
			}
			return code, end, code != ""
		}
		i = end
	}
	return "", n, false
}

func (d Dialect) line(line string) string {
	trimmed := strings.TrimLeft(line, " ")
	if h := strings.TrimLeft(trimmed, "#"); len(h) < len(trimmed) && len(trimmed)-len(h) <= 6 && strings.HasPrefix(h, " ") {
		inner := strings.TrimSpace(h)
		if inner == "" {
			return ""
		}
		if d.plain {
			return d.inline(inner, "")
		}
		return "*" + d.inline(inner, "*") + "*"
	}
	if rest, ok := strings.CutPrefix(trimmed, ">"); ok {
		if d.plain {
			// As written: plain text is never longer than the Markdown,
			// which delivery cut to the platform's limit.
			return ">" + d.inline(rest, "")
		}
		q := d.quote
		if q == "" {
			q = ">"
		}
		return q + d.inline(strings.TrimPrefix(rest, " "), "")
	}
	return d.inline(line, "")
}

// spans are the Markdown markers in the order they are tried, and the
// markup's marker for each.
var spans = []struct{ md, to string }{
	{"**", "*"}, {"__", "*"}, {"~~", "~"}, {"*", "_"}, {"_", "_"},
}

// inline converts one line; inside is the markers already open around
// it, which must not be opened again. Two spans of the same marker that
// touch ("*a*_b_": italic, then italic) become one ("_ab_"), which shows
// the same: written one after the other, the closing marker and the
// opening one would make a double marker ("__"), which Telegram's
// MarkdownV2 reads as underline and refuses unbalanced.
func (d Dialect) inline(s, inside string) string {
	var b strings.Builder
	// spanEnd is where the last span's closing marker ended in b (-1:
	// none); joins are where a span's closing marker stands right before
	// the next one's opening marker, in b.
	spanEnd, lastMarker := -1, ""
	var joins []int
	for i := 0; i < len(s); {
		c := s[i]
		switch {
		case c == '\\' && i+1 < len(s) && strings.IndexByte(markdownPunct, s[i+1]) >= 0:
			d.literal(&b, s[i+1])
			i += 2
			continue
		case c == '`' && strings.HasPrefix(s[i:], "``"):
			code, size, ok := codeSpan(s[i:])
			if ok {
				d.writeCode(&b, code)
			} else {
				for range size {
					d.escape(&b, '`') // an unclosed run is text
				}
			}
			i += size
			continue
		case c == '`':
			if end := strings.IndexByte(s[i+1:], '`'); end > 0 {
				d.writeCode(&b, s[i+1:i+1+end])
				i += end + 2
				continue
			}
		case c == '[':
			if text, url, n, ok := link(s[i:]); ok {
				b.WriteString(d.link(d.inline(text, inside+"["), url))
				i += n
				continue
			}
		default:
			at := b.Len()
			if marker, done := d.span(&b, s, &i, inside); done {
				if marker != "" {
					if at == spanEnd && marker == lastMarker {
						joins = append(joins, at-len(marker))
					}
					spanEnd, lastMarker = b.Len(), marker
				}
				continue
			}
		}
		d.escape(&b, c)
		i++
	}
	out := b.String()
	for k := len(joins) - 1; k >= 0; k-- {
		// Every marker is one byte: the closing one at j, the opening
		// one after it.
		j := joins[k]
		out = out[:j] + out[j+2:]
	}
	return out
}

// writeCode writes inline code.
func (d Dialect) writeCode(b *strings.Builder, code string) {
	switch {
	case d.plain:
		b.WriteString(d.code(code))
	case d.codeSpan != nil:
		b.WriteString(d.codeSpan(code))
	default:
		b.WriteString("`" + d.code(code) + "`")
	}
}

// span writes the emphasis span that starts at s[*i], if one does, and
// moves *i past it; marker is the markup's marker written around it
// ("" when plain).
func (d Dialect) span(b *strings.Builder, s string, i *int, inside string) (marker string, ok bool) {
	for _, sp := range spans {
		if !strings.HasPrefix(s[*i:], sp.md) || strings.Contains(inside, sp.to) {
			continue
		}
		start := *i + len(sp.md)
		if start >= len(s) || s[start] == ' ' {
			return "", false
		}
		// Single-underscore italics only at word boundaries (snake_case stays).
		if sp.md == "_" && *i > 0 && isWord(s[*i-1]) {
			return "", false
		}
		end := strings.Index(s[start:], sp.md)
		if end <= 0 || s[start+end-1] == ' ' {
			continue
		}
		closeAt := start + end
		if sp.md == "_" && closeAt+1 < len(s) && isWord(s[closeAt+1]) {
			continue
		}
		if sp.md == "*" && strings.HasPrefix(s[closeAt:], "**") {
			continue
		}
		*i = closeAt + len(sp.md)
		if d.plain {
			b.WriteString(d.inline(s[start:closeAt], inside+sp.to))
			return "", true
		}
		b.WriteString(sp.to + d.inline(s[start:closeAt], inside+sp.to) + sp.to)
		return sp.to, true
	}
	return "", false
}

func isWord(c byte) bool {
	return c == '_' || c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= 0x80
}

// link parses [text](url) at the start of s.
func link(s string) (text, url string, n int, ok bool) {
	close := strings.Index(s, "](")
	if close < 1 || strings.ContainsAny(s[1:close], "[]") {
		return "", "", 0, false
	}
	end := strings.IndexByte(s[close+2:], ')')
	if end < 1 {
		return "", "", 0, false
	}
	url = s[close+2 : close+2+end]
	if strings.ContainsAny(url, " \n") {
		return "", "", 0, false
	}
	return s[1:close], url, close + 3 + end, true
}
