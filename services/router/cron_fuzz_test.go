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

// FuzzParseCronEdit: /cron edit's words come from the text (never longer
// than it, never a broken character), words quoted back read back the
// same, and nothing panics.
func FuzzParseCronEdit(f *testing.F) {
	for _, s := range []string{`abc --schedule "every 4h"`, `--prompt 'a "b"' j`, `j --name=x --repeat once`, `j\ k --deliver telegram:1`,
		`"unclosed`, `j --prompt "a \"q\" C:\p"`, `--skill x`, `j --schedule`, "j\t--prompt\n'x y'", `\`, `""`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, args string) {
		words, err := shellWords(args)
		if err != nil {
			return
		}
		total := 0
		for _, w := range words {
			total += len(w)
			if utf8.ValidString(args) && !utf8.ValidString(w) {
				t.Fatalf("shellWords(%q) broke a character: %q", args, w)
			}
		}
		if total > len(args) {
			t.Fatalf("shellWords(%q) = %q: longer than the text", args, words)
		}
		quoted := make([]string, 0, len(words))
		for _, w := range words {
			if strings.Contains(w, "'") || !utf8.ValidString(w) {
				return
			}
			quoted = append(quoted, "'"+w+"'")
		}
		again, err := shellWords(strings.Join(quoted, " "))
		if err != nil || strings.Join(again, "\x00") != strings.Join(words, "\x00") || len(again) != len(words) {
			t.Fatalf("shellWords(%q) = %q; quoted back it reads %q, %v", args, words, again, err)
		}
		ref, _, err := parseCronEdit(args)
		if err == nil && len(ref) > len(args) {
			t.Fatalf("parseCronEdit(%q): job %q longer than the text", args, ref)
		}
	})
}
