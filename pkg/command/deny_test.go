package command

import (
	"strings"
	"testing"
	"unicode/utf8"
)

func TestDeny(t *testing.T) {
	long := strings.Repeat("word ", 80) // 400 characters
	tests := []struct {
		args   string
		all    bool
		reason string
	}{
		{"", false, ""},
		{"   ", false, ""},
		{"all", true, ""},
		{"ALL", true, ""},
		{"All  ", true, ""},
		{"all use the trash instead", true, "use the trash instead"},
		{"use the trash instead", false, "use the trash instead"},
		// Only a first word "all" means every call.
		{"not all of them", false, "not all of them"},
		{"allow me to check first", false, "allow me to check first"},
		{"all all of it", true, "all of it"},
		// One line, single-spaced.
		{"wrong\n  folder\tplease", false, "wrong folder please"},
		{long, false, strings.TrimSpace(long[:DenyReasonMax])},
		{strings.Repeat("é", 300), false, strings.Repeat("é", DenyReasonMax)},
	}
	for _, tt := range tests {
		all, reason := Deny(tt.args)
		if all != tt.all || reason != tt.reason {
			t.Errorf("Deny(%q) = %v, %q; want %v, %q", tt.args, all, reason, tt.all, tt.reason)
		}
	}
}

// FuzzDeny: /deny's reason is one line of single-spaced words of the
// text, at most DenyReasonMax characters, and "all" is its first word.
func FuzzDeny(f *testing.F) {
	for _, s := range []string{"", "all", "all because", "because", "ALL\nwrong dir", "allx y", strings.Repeat("ü ", 200)} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, args string) {
		all, reason := Deny(args)
		if n := utf8.RuneCountInString(reason); n > DenyReasonMax {
			t.Fatalf("Deny(%q): reason of %d characters", args, n)
		}
		if reason != strings.Join(strings.Fields(reason), " ") {
			t.Fatalf("Deny(%q): reason %q is not one line of single-spaced words", args, reason)
		}
		words := strings.Fields(args)
		if want := len(words) > 0 && strings.EqualFold(words[0], "all"); all != want {
			t.Fatalf("Deny(%q): all = %v", args, all)
		}
		if utf8.ValidString(args) {
			if !strings.Contains(strings.Join(words, " "), reason) {
				t.Fatalf("Deny(%q): reason %q is not the text's", args, reason)
			}
		}
	})
}
