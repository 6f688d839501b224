package command

import (
	"strings"
	"testing"
	"unicode/utf8"
)

func TestPlatform(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args string
		want PlatformArgs
	}{
		{"", PlatformArgs{Action: "list"}},
		{"  ", PlatformArgs{Action: "list"}},
		{"LIST", PlatformArgs{Action: "list"}},
		{"list telegram", PlatformArgs{Action: "list", Target: "telegram"}},
		{"pause", PlatformArgs{Action: "pause"}},
		{"Pause WhatsApp", PlatformArgs{Action: "pause", Target: "whatsapp"}},
		{"pause telegram --force", PlatformArgs{Action: "pause", Target: "telegram", Force: true}},
		{"pause --force telegram", PlatformArgs{Action: "pause", Target: "telegram", Force: true}},
		{"pause -F discord token rotated\nat 3am", PlatformArgs{Action: "pause", Target: "discord", Force: true, Reason: "token rotated at 3am"}},
		{"resume slack", PlatformArgs{Action: "resume", Target: "slack"}},
		{"restart slack", PlatformArgs{}},
		{"stop", PlatformArgs{}},
		{"pause " + strings.Repeat("x", 5) + " " + strings.Repeat("é", 300), PlatformArgs{Action: "pause", Target: "xxxxx", Reason: strings.Repeat("é", PlatformReasonMax)}},
	} {
		if got := Platform(tc.args); got != tc.want {
			t.Errorf("Platform(%q) = %+v, want %+v", tc.args, got, tc.want)
		}
	}
}

// FuzzPlatform: the action is list, pause, resume or empty, the target
// one lowercased word of the text, the reason one line of at most
// PlatformReasonMax characters.
func FuzzPlatform(f *testing.F) {
	for _, s := range []string{"", "list", "pause telegram", "RESUME Discord", "pause telegram --force", "pause -f x why not", "nope", "pause\x00 \u00a0x"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, args string) {
		a := Platform(args)
		switch a.Action {
		case "list", "pause", "resume", "":
		default:
			t.Fatalf("Platform(%q): action %q", args, a.Action)
		}
		if a.Action == "" && (a.Target != "" || a.Force || a.Reason != "") {
			t.Fatalf("Platform(%q): %+v for an unknown action", args, a)
		}
		if strings.Fields(args) == nil && a.Action != "list" {
			t.Fatalf("Platform(%q): empty argument is not list", args)
		}
		if a.Target != "" && (a.Target != strings.ToLower(a.Target) || len(strings.Fields(a.Target)) != 1) {
			t.Fatalf("Platform(%q): target %q", args, a.Target)
		}
		if n := utf8.RuneCountInString(a.Reason); n > PlatformReasonMax {
			t.Fatalf("Platform(%q): reason of %d characters", args, n)
		}
		if a.Reason != strings.Join(strings.Fields(a.Reason), " ") {
			t.Fatalf("Platform(%q): reason %q is not one line", args, a.Reason)
		}
	})
}
