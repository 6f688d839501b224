package command

import (
	"strings"
	"testing"
	"unicode"
	"unicode/utf8"
)

// FuzzCompressFocus: the focus of /compress <focus> is one line of
// single-spaced words taken from the text in order, at most
// CompressFocusMax characters, the same when normalised again, and
// nothing panics.
func FuzzCompressFocus(f *testing.F) {
	for _, s := range []string{"travel plans", "  the\tdatabase\nmigration  ", "", " \n ", strings.Repeat("é", 300),
		strings.Repeat("word ", 60), "\"quoted\" focus", "a\u2028b\u0085c", "\xff\xfe bad"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, args string) {
		focus := CompressFocus(args)
		if n := utf8.RuneCountInString(focus); n > CompressFocusMax {
			t.Fatalf("CompressFocus(%q): %d characters, want at most %d", args, n, CompressFocusMax)
		}
		if strings.IndexFunc(focus, func(r rune) bool { return unicode.IsSpace(r) && r != ' ' }) >= 0 ||
			strings.Contains(focus, "  ") || focus != strings.TrimSpace(focus) {
			t.Fatalf("CompressFocus(%q) = %q: not one line of single-spaced words", args, focus)
		}
		if again := CompressFocus(focus); again != focus {
			t.Fatalf("CompressFocus(%q) = %q, normalised again %q", args, focus, again)
		}
		if utf8.ValidString(args) {
			words, from := strings.Fields(focus), strings.Fields(args)
			for i, w := range words {
				if i >= len(from) || (w != from[i] && (i != len(words)-1 || !strings.HasPrefix(from[i], w))) {
					t.Fatalf("CompressFocus(%q) = %q: word %q is not the text's", args, focus, w)
				}
			}
		}
	})
}

func TestCompressFocus(t *testing.T) {
	long := strings.Repeat("ab ", 100)
	for _, tt := range []struct{ args, want string }{
		{"", ""},
		{"  \n\t ", ""},
		{"travel plans", "travel plans"},
		{" the\tdatabase\n\nmigration ", "the database migration"},
		{long, strings.TrimSpace(long[:CompressFocusMax])},
		{strings.Repeat("é", 250), strings.Repeat("é", CompressFocusMax)},
	} {
		if got := CompressFocus(tt.args); got != tt.want {
			t.Errorf("CompressFocus(%q) = %q, want %q", tt.args, got, tt.want)
		}
	}
}
