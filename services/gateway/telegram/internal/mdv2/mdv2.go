// Package mdv2 converts the Markdown an agent writes (CommonMark-ish:
// **bold**, *italic*, `code`, fenced blocks, [links](url), # headings,
// > quotes, ~~strike~~) into Telegram's MarkdownV2, escaping everything
// else. A marker without a partner on the same line is escaped as text.
// Telegram may still reject an odd input; the gateway then resends the
// original text without parse mode.
package mdv2

import (
	"strings"
)

const reserved = "_*[]()~`>#+-=|{}.!\\"

// Escape escapes every MarkdownV2 reserved character.
func Escape(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if strings.IndexByte(reserved, s[i]) >= 0 {
			b.WriteByte('\\')
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

func escapeCode(s string) string {
	s = strings.ReplaceAll(s, "\\", "\\\\")
	return strings.ReplaceAll(s, "`", "\\`")
}

func escapeURL(s string) string {
	s = strings.ReplaceAll(s, "\\", "\\\\")
	return strings.ReplaceAll(s, ")", "\\)")
}

// Convert turns Markdown into MarkdownV2.
func Convert(md string) string {
	lines := strings.Split(md, "\n")
	var out []string
	for i := 0; i < len(lines); i++ {
		line := lines[i]
		trimmed := strings.TrimLeft(line, " ")
		if strings.HasPrefix(trimmed, "```") {
			lang := strings.TrimSpace(strings.TrimPrefix(trimmed, "```"))
			if strings.ContainsAny(lang, "` \t") {
				lang = ""
			}
			var body []string
			j := i + 1
			for ; j < len(lines); j++ {
				if strings.HasPrefix(strings.TrimLeft(lines[j], " "), "```") {
					break
				}
				body = append(body, lines[j])
			}
			// An unclosed fence runs to the end, as in CommonMark.
			out = append(out, "```"+lang+"\n"+escapeCode(strings.Join(body, "\n"))+"\n```")
			i = j
			continue
		}
		out = append(out, convertLine(line))
	}
	return strings.Join(out, "\n")
}

func convertLine(line string) string {
	trimmed := strings.TrimLeft(line, " ")
	if h := strings.TrimLeft(trimmed, "#"); len(h) < len(trimmed) && len(trimmed)-len(h) <= 6 && strings.HasPrefix(h, " ") {
		inner := strings.TrimSpace(h)
		if inner == "" {
			return ""
		}
		return "*" + inline(inner, "*") + "*"
	}
	if strings.HasPrefix(trimmed, ">") {
		return ">" + inline(strings.TrimPrefix(strings.TrimPrefix(trimmed, ">"), " "), "")
	}
	return inline(line, "")
}

// span markers in the order they are tried; md is the Markdown marker,
// v2 the MarkdownV2 one.
var spans = []struct{ md, v2 string }{
	{"**", "*"}, {"__", "*"}, {"~~", "~"}, {"*", "_"}, {"_", "_"},
}

// inline converts one line; inside is the MarkdownV2 marker already open
// around it, which must not be opened again.
func inline(s, inside string) string {
	var b strings.Builder
	for i := 0; i < len(s); {
		c := s[i]
		switch {
		case c == '\\' && i+1 < len(s) && strings.IndexByte(reserved, s[i+1]) >= 0:
			b.WriteByte('\\')
			b.WriteByte(s[i+1])
			i += 2
			continue
		case c == '`':
			if end := strings.IndexByte(s[i+1:], '`'); end > 0 {
				b.WriteString("`" + escapeCode(s[i+1:i+1+end]) + "`")
				i += end + 2
				continue
			}
		case c == '[':
			if text, url, n, ok := link(s[i:]); ok {
				b.WriteString("[" + inline(text, inside+"[") + "](" + escapeURL(url) + ")")
				i += n
				continue
			}
		default:
			if done := trySpan(&b, s, &i, inside); done {
				continue
			}
		}
		if strings.IndexByte(reserved, c) >= 0 {
			b.WriteByte('\\')
		}
		b.WriteByte(c)
		i++
	}
	return b.String()
}

func trySpan(b *strings.Builder, s string, i *int, inside string) bool {
	for _, sp := range spans {
		if !strings.HasPrefix(s[*i:], sp.md) || strings.Contains(inside, sp.v2) {
			continue
		}
		start := *i + len(sp.md)
		if start >= len(s) || s[start] == ' ' {
			return false
		}
		// Single-underscore italics only at word boundaries (snake_case stays).
		if sp.md == "_" && *i > 0 && isWord(s[*i-1]) {
			return false
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
		b.WriteString(sp.v2 + inline(s[start:closeAt], inside+sp.v2) + sp.v2)
		*i = closeAt + len(sp.md)
		return true
	}
	return false
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
