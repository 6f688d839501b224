package command

import (
	"strings"
	"testing"
	"unicode/utf8"
)

func TestPause(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args string
		want PauseArgs
	}{
		{"", PauseArgs{}},
		{"   ", PauseArgs{}},
		{"off", PauseArgs{Off: true}},
		{" OFF ", PauseArgs{Off: true}},
		{"resume", PauseArgs{Off: true}},
		{"Stop", PauseArgs{Off: true}},
		{"disengage", PauseArgs{Off: true}},
		{"off now", PauseArgs{Reason: "off now"}},
		{"deploy window", PauseArgs{Reason: "deploy window"}},
		{"runaway\ncron  fan-out", PauseArgs{Reason: "runaway cron fan-out"}},
		{strings.Repeat("é", 300), PauseArgs{Reason: strings.Repeat("é", PauseReasonMax)}},
	} {
		if got := Pause(tc.args); got != tc.want {
			t.Errorf("Pause(%q) = %+v, want %+v", tc.args, got, tc.want)
		}
	}
}

// FuzzPause: an argument resumes only when it is one of Hermes's words;
// otherwise the reason is the argument's words on one line of valid
// UTF-8, at most PauseReasonMax characters.
func FuzzPause(f *testing.F) {
	for _, s := range []string{"", "off", "RESUME", "deploy window", "off now", "a\x00\u00a0b", strings.Repeat("x ", 150)} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, args string) {
		a := Pause(args)
		words := strings.Join(strings.Fields(strings.ToValidUTF8(args, "\uFFFD")), " ")
		switch strings.ToLower(words) {
		case "off", "resume", "stop", "disengage":
			if !a.Off || a.Reason != "" {
				t.Fatalf("Pause(%q) = %+v, want off", args, a)
			}
			return
		}
		if a.Off {
			t.Fatalf("Pause(%q): off", args)
		}
		if n := utf8.RuneCountInString(a.Reason); n > PauseReasonMax {
			t.Fatalf("Pause(%q): reason of %d characters", args, n)
		}
		if !utf8.ValidString(a.Reason) || a.Reason != strings.Join(strings.Fields(a.Reason), " ") {
			t.Fatalf("Pause(%q): reason %q is not one line", args, a.Reason)
		}
		if !strings.HasPrefix(words, a.Reason) {
			t.Fatalf("Pause(%q): reason %q is not the argument's beginning", args, a.Reason)
		}
	})
}
