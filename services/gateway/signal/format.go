package signal

import (
	"fmt"
	"regexp"
	"strings"
	"unicode/utf16"
)

// Signal shows formatting as style ranges over plain text (signal-cli's
// textStyle parameter, "start:length:STYLE", counted in UTF-16 code
// units), not as markup. styled converts the Markdown an agent writes the
// way Hermes does (gateway/platforms/signal_format.py): **bold**,
// __bold__ and # headings BOLD, *italic* and _italic_ ITALIC, ~~strike~~
// STRIKETHROUGH, `code` and fenced blocks MONOSPACE, "- item" bullets as
// "• item"; the markers are removed. Links and tables stay as written.

// style is one range.
type style struct {
	start, length int
	name          string
}

func (s style) String() string { return fmt.Sprintf("%d:%d:%s", s.start, s.length, s.name) }

// styler builds the plain text and its ranges.
type styler struct {
	b      strings.Builder
	u16    int // length of b in UTF-16 code units
	styles []style
}

func (s *styler) write(t string) {
	s.b.WriteString(t)
	s.u16 += utf16Len(t)
}

func (s *styler) add(start int, name string) {
	if n := s.u16 - start; n > 0 {
		s.styles = append(s.styles, style{start: start, length: n, name: name})
	}
}

func utf16Len(s string) int {
	n := 0
	for _, r := range s {
		n += utf16.RuneLen(r)
	}
	return n
}

var (
	blankRuns = regexp.MustCompile(`\n{3,}`)
	bulletRE  = regexp.MustCompile(`^( {0,3})[-*+][ \t]+`)
)

// styled converts md into Signal's plain text and style ranges.
func styled(md string) (string, []style) {
	// Offsets count what signal-cli receives: JSON carries no invalid UTF-8.
	md = strings.ToValidUTF8(md, "\uFFFD")
	md = strings.TrimSpace(blankRuns.ReplaceAllString(strings.ReplaceAll(md, "\r\n", "\n"), "\n\n"))
	lines := strings.Split(md, "\n")
	s := &styler{}
	for i := 0; i < len(lines); i++ {
		if i > 0 {
			s.write("\n")
		}
		line := lines[i]
		if t := strings.TrimLeft(line, " "); strings.HasPrefix(t, "```") && !strings.Contains(strings.TrimLeft(t, "`"), "`") {
			// A fence; a backtick after the opening run makes the line
			// code inline ("```npm install```", as CommonMark reads it).
			var body []string
			j := i + 1
			for ; j < len(lines); j++ {
				// Only blanks may follow a close's backticks (CommonMark,
				// as markup and chunk read it): "``` foo" is a line of
				// the code, not a close that would drop its text.
				if t := strings.TrimLeft(lines[j], " "); strings.HasPrefix(t, "```") && strings.TrimRight(strings.TrimLeft(t, "`"), " \t") == "" {
					break
				}
				body = append(body, lines[j])
			}
			start := s.u16
			s.write(strings.Join(body, "\n"))
			s.add(start, "MONOSPACE")
			i = j
			continue
		}
		trimmed := strings.TrimLeft(line, " ")
		if h := strings.TrimLeft(trimmed, "#"); len(h) < len(trimmed) && len(trimmed)-len(h) <= 6 && (h == "" || h[0] == ' ' || h[0] == '\t') {
			start := s.u16
			s.inline(strings.TrimSpace(h), "")
			s.add(start, "BOLD")
			continue
		}
		if m := bulletRE.FindStringSubmatch(line); m != nil {
			s.write(m[1] + "• ")
			line = line[len(m[0]):]
		}
		s.inline(line, "")
	}
	return s.b.String(), s.styles
}

// markdownPunct are the characters a backslash escapes.
const markdownPunct = "_*[]()~`>#+-=|{}.!\\"

// spans are the inline markers in the order they are tried.
var spans = []struct{ md, name string }{
	{"**", "BOLD"}, {"__", "BOLD"}, {"~~", "STRIKETHROUGH"}, {"*", "ITALIC"}, {"_", "ITALIC"},
}

// inline writes one line; inside names the styles already open around
// it, which are not opened again.
func (s *styler) inline(line, inside string) {
	for i := 0; i < len(line); {
		c := line[i]
		if c == '\\' && i+1 < len(line) && strings.IndexByte(markdownPunct, line[i+1]) >= 0 {
			s.write(line[i+1 : i+2])
			i += 2
			continue
		}
		if c == '`' && strings.HasPrefix(line[i:], "``") {
			// A span of n backticks ends at the next run of exactly n.
			n := len(line[i:]) - len(strings.TrimLeft(line[i:], "`"))
			if end := closingRun(line[i+n:], n); end > 0 {
				code := line[i+n : i+n+end]
				if len(code) >= 2 && code[0] == ' ' && code[len(code)-1] == ' ' && strings.Trim(code, " ") != "" {
					code = code[1 : len(code)-1]
				}
				start := s.u16
				s.write(code)
				s.add(start, "MONOSPACE")
				i += n + end + n
				continue
			}
			s.write(line[i : i+n]) // an unclosed run is text
			i += n
			continue
		}
		if c == '`' {
			if end := strings.IndexByte(line[i+1:], '`'); end > 0 {
				start := s.u16
				s.write(line[i+1 : i+1+end])
				s.add(start, "MONOSPACE")
				i += end + 2
				continue
			}
		}
		if n := s.span(line, i, inside); n > 0 {
			i += n
			continue
		}
		// Copy up to the next byte that may start markup.
		j := i + 1
		for j < len(line) && strings.IndexByte("\\`*_~", line[j]) < 0 {
			j++
		}
		s.write(line[i:j])
		i = j
	}
}

// closingRun is the index in s of the first run of exactly n backticks;
// -1 when there is none.
func closingRun(s string, n int) int {
	for i := 0; i < len(s); {
		j := strings.IndexByte(s[i:], '`')
		if j < 0 {
			return -1
		}
		start, end := i+j, i+j
		for end < len(s) && s[end] == '`' {
			end++
		}
		if end-start == n {
			return start
		}
		i = end
	}
	return -1
}

// span writes a styled span starting at line[i] and returns the bytes it
// took; 0 when none starts there.
func (s *styler) span(line string, i int, inside string) int {
	for _, sp := range spans {
		if !strings.HasPrefix(line[i:], sp.md) || strings.Contains(inside, sp.name) {
			continue
		}
		open := i + len(sp.md)
		if open >= len(line) || line[open] == ' ' {
			return 0
		}
		if sp.md == "_" && i > 0 && isWord(line[i-1]) {
			return 0 // snake_case
		}
		end := strings.Index(line[open:], sp.md)
		if end <= 0 || line[open+end-1] == ' ' {
			continue
		}
		closeAt := open + end
		if sp.md == "_" && closeAt+1 < len(line) && isWord(line[closeAt+1]) {
			continue
		}
		if sp.md == "*" && strings.HasPrefix(line[closeAt:], "**") {
			continue
		}
		start := s.u16
		s.inline(line[open:closeAt], inside+sp.name+" ")
		s.add(start, sp.name)
		return closeAt + len(sp.md) - i
	}
	return 0
}

func isWord(c byte) bool {
	return c == '_' || c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= 0x80
}
