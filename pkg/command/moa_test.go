package command

import (
	"errors"
	"strings"
	"testing"
)

func TestParseMoA(t *testing.T) {
	for _, tc := range []struct {
		name, args, want string
		err              error
	}{
		{"bare", "", "", ErrMoAUsage},
		{"white space only", " \t\n ", "", ErrMoAUsage},
		{"a prompt", "compare Go and Rust for a CLI", "compare Go and Rust for a CLI", nil},
		{"trimmed, line breaks kept", "  first line\nsecond line \n", "first line\nsecond line", nil},
		{"a preset's name is a prompt too", "default", "default", nil},
		{"words that look like subcommands", "list", "list", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseMoA(tc.args)
			if !errors.Is(err, tc.err) || got != tc.want {
				t.Fatalf("ParseMoA(%q) = %q, %v; want %q, %v", tc.args, got, err, tc.want, tc.err)
			}
		})
	}
	if !strings.HasPrefix(MoAUsage, "Usage: /moa <prompt>") {
		t.Fatalf("usage %q is not Hermes's", MoAUsage)
	}
}

func TestMoAMenuDescription(t *testing.T) {
	for _, e := range Menu() {
		if e.Name == "moa" {
			if want := "Run one prompt through the default Mixture of Agents preset, then restore your model"; e.Description != want {
				t.Fatalf("/moa: %q, want Hermes's %q", e.Description, want)
			}
			return
		}
	}
	t.Fatal("/moa is not in the menu")
}

// FuzzParseMoA: a typed "/moa …" parses as /moa, and its argument is
// either refused with the usage (nothing but white space) or taken
// whole as the prompt, trimmed and never empty.
func FuzzParseMoA(f *testing.F) {
	for _, s := range []string{"", " ", "hello", "  two\nlines  ", "default", "—provider x", "\u00a0\u2003", "\x00", "@bot hi"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, args string) {
		prompt, err := ParseMoA(args)
		if err != nil {
			if !errors.Is(err, ErrMoAUsage) || strings.TrimSpace(args) != "" || prompt != "" {
				t.Fatalf("ParseMoA(%q) = %q, %v", args, prompt, err)
			}
		} else if prompt == "" || prompt != strings.TrimSpace(prompt) || !strings.Contains(args, prompt) {
			t.Fatalf("ParseMoA(%q) = %q", args, prompt)
		}
		c, ok := Parse("/moa "+args, "telegram", "")
		if !ok || c.Name != "moa" || !c.Known {
			return // a line break or other text can make it no command
		}
		if p, err := ParseMoA(c.Args); err == nil && p == "" {
			t.Fatalf("ParseMoA(%q) gave an empty prompt", c.Args)
		}
	})
}
