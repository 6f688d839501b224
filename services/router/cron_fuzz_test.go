package router

import (
	"strings"
	"testing"
	"unicode/utf8"
)

// FuzzSplitSchedule: /cron add's arguments split into a schedule and a
// prompt that both come from the text, never invented; nothing panics.
func FuzzSplitSchedule(f *testing.F) {
	for _, s := range []string{`30m check`, `"every 2h" "Check server status"`, `0 9 * * * morning`, `every 2h x`,
		`'in 30m' stretch`, `"unclosed`, `"" x`, "in\t30m\nx", `0 9 * * *`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, args string) {
		sched, prompt := splitSchedule(args)
		if sched == "" && prompt != "" {
			t.Fatalf("splitSchedule(%q): a prompt %q without a schedule", args, prompt)
		}
		if utf8.ValidString(args) && (!utf8.ValidString(sched) || !utf8.ValidString(prompt)) {
			t.Fatalf("splitSchedule(%q) broke a character: %q %q", args, sched, prompt)
		}
		for _, w := range strings.Fields(sched) {
			if !strings.Contains(args, w) {
				t.Fatalf("splitSchedule(%q): schedule word %q is not in the text", args, w)
			}
		}
		if len(sched)+len(prompt) > len(args) {
			t.Fatalf("splitSchedule(%q) = %q, %q: longer than the text", args, sched, prompt)
		}
	})
}
