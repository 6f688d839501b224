package signal

import (
	"fmt"
	"strings"
	"testing"
)

func TestStyled(t *testing.T) {
	for _, tc := range []struct {
		name, md, text string
		styles         []string
	}{
		{"plain", "just text", "just text", nil},
		{"bold and italic", "**bold** and *it* and _it_", "bold and it and it", []string{"0:4:BOLD", "9:2:ITALIC", "16:2:ITALIC"}},
		{"nested", "**bold _both_**", "bold both", []string{"5:4:ITALIC", "0:9:BOLD"}},
		{"strike and code", "~~old~~ `x := 1`", "old x := 1", []string{"0:3:STRIKETHROUGH", "4:6:MONOSPACE"}},
		{"heading", "# Title\nbody", "Title\nbody", []string{"0:5:BOLD"}},
		{"fence", "see:\n```go\nfmt.Println(1)\n```\ndone", "see:\nfmt.Println(1)\ndone", []string{"5:14:MONOSPACE"}},
		{"markers inside code stay", "`**not bold**`", "**not bold**", []string{"0:12:MONOSPACE"}},
		{"bullets", "- one\n* two\n  + three", "• one\n• two\n  • three", nil},
		{"snake_case stays", "use snake_case_name here", "use snake_case_name here", nil},
		{"lone markers stay", "2 * 3 = 6 and a_b", "2 * 3 = 6 and a_b", nil},
		{"escapes", `\*not italic\*`, "*not italic*", nil},
		{"UTF-16 offsets after an emoji", "😀 **hi**", "😀 hi", []string{"3:2:BOLD"}},
		{"blank runs collapse", "a\n\n\n\nb", "a\n\nb", nil},
		// A backtick after the opening run: code inline, not a fence
		// that would take the line's text and the lines after it.
		{"inline triple backticks", "```npm install```\nthen **run** it", "npm install\nthen run it", []string{"0:11:MONOSPACE", "17:3:BOLD"}},
		{"double backticks", "``a`b`` ok", "a`b ok", []string{"0:3:MONOSPACE"}},
		// Only blanks may follow a closing fence's backticks
		// (CommonMark, as markup and chunk read it): "``` foo" in code
		// is a line of it, shown, not a close that drops its text.
		{"fence line with text in code", "```\nx\n``` foo\ny\n```\ndone", "x\n``` foo\ny\ndone", []string{"0:11:MONOSPACE"}},
		{"close with blanks after", "```\nx\n```  \ndone", "x\ndone", []string{"0:1:MONOSPACE"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			text, styles := styled(tc.md)
			var got []string
			for _, s := range styles {
				got = append(got, s.String())
			}
			if text != tc.text || strings.Join(got, " ") != strings.Join(tc.styles, " ") {
				t.Fatalf("styled(%q) = %q %q, want %q %q", tc.md, text, got, tc.text, tc.styles)
			}
			for _, s := range styles {
				if s.start < 0 || s.start+s.length > utf16Len(text) {
					t.Fatalf("style %s outside the text (%d UTF-16 units)", s, utf16Len(text))
				}
			}
		})
	}
}

func FuzzStyled(f *testing.F) {
	for _, s := range []string{"**a** _b_ ~~c~~ `d`", "# h\n- x\n```\ncode\n```", "😀 *é*", "\\*", "***x***", "__a__b_"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, md string) {
		text, styles := styled(md)
		n := utf16Len(text)
		for _, s := range styles {
			if s.start < 0 || s.length <= 0 || s.start+s.length > n {
				t.Fatalf("styled(%q): range %s outside %d units", md, s, n)
			}
			if !styleRE.MatchString(s.String()) {
				t.Fatalf("bad style %s", fmt.Sprint(s))
			}
		}
	})
}
