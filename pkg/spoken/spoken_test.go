package spoken_test

import (
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/switchboard-chat/switchboard/pkg/spoken"
)

func TestText(t *testing.T) {
	tests := []struct {
		name, in, want string
	}{
		{"plain", "Hello there.", "Hello there."},
		{"bold and italic", "This is **very** *important*.", "This is very important."},
		{"link keeps its text", "See [the docs](https://example.com/docs) now.", "See the docs now."},
		{"bare url goes", "Open https://example.com/x?y=1 today", "Open  today"},
		{"inline code", "Run `make build` first.", "Run make build first."},
		{"code block becomes a space", "Try:\n```go\nfmt.Println(1)\n```\nDone.", "Try:\n \nDone."},
		{"headers and lists", "# Title\n## Sub\n- one\n* two\n  - nested", "Title\nSub\none\ntwo\nnested"},
		{"horizontal rule", "above\n---\nbelow", "above\n\nbelow"},
		{"blank lines collapse", "a\n\n\n\n\nb", "a\n\nb"},
		{"only code", "```\nls -la\n```", ""},
		{"whitespace only", "  \n\t ", ""},
		{"unicode kept", "¡Hola, **señor**! 👋", "¡Hola, señor! 👋"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := spoken.Text(tt.in); got != tt.want {
				t.Errorf("Text(%q) = %q, want %q", tt.in, got, tt.want)
			}
		})
	}
}

// An answer is cut at MaxChars characters (not bytes) before the
// Markdown comes off, as Hermes cuts it.
func TestTextCap(t *testing.T) {
	long := strings.Repeat("é", spoken.MaxChars+500)
	if got := utf8.RuneCountInString(spoken.Text(long)); got != spoken.MaxChars {
		t.Errorf("spoke %d characters, want %d", got, spoken.MaxChars)
	}
	if got := spoken.Text(strings.Repeat("**a** ", 1000)); utf8.RuneCountInString(got) > spoken.MaxChars {
		t.Errorf("spoke %d characters", utf8.RuneCountInString(got))
	}
}

// FuzzText: any answer (the model writes it) gives valid UTF-8 no longer
// than MaxChars characters, with no code fences left.
func FuzzText(f *testing.F) {
	for _, s := range []string{"Hello **there**", "```\ncode\n```", "[a](b) https://x", "# h\n- i\n---", "\xff\xfe", "é" + strings.Repeat("*", 10)} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in string) {
		got := spoken.Text(in)
		if utf8.ValidString(in) && !utf8.ValidString(got) {
			t.Fatalf("Text(%q) = %q: invalid UTF-8", in, got)
		}
		if n := utf8.RuneCountInString(got); n > spoken.MaxChars {
			t.Fatalf("Text gave %d characters", n)
		}
		if strings.TrimSpace(got) != got {
			t.Fatalf("Text(%q) = %q: not trimmed", in, got)
		}
	})
}
