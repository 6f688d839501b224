package loop

import (
	"strings"
	"testing"
	"unicode/utf8"
)

// FuzzParseSpec: /loop's words parse into a prompt, interval, --times
// and --until that come from the text (never longer, never a broken
// character), or into a problem; nothing panics. As Hermes's
// parse_loop_args, ParseSpec takes "--times N" out wherever it stands,
// so the words on both sides of it join ("x --times 2 y": prompt "x y"):
// with --times the prompt and the condition are the text's words, not
// pieces of it.
func FuzzParseSpec(f *testing.F) {
	for _, s := range []string{"5m check", "every 10m /recap", "2m poll --times 30", "5m x --until y --times 2",
		"--times", "x --times -1", "1h30m", "every", "x\t--until\ny", "3 things"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, args string) {
		s := ParseSpec(args)
		if s.Problem != "" {
			if s.Prompt != "" {
				t.Fatalf("ParseSpec(%q): a problem and a prompt", args)
			}
			return
		}
		if s.Prompt == "" || s.Times < 0 || s.Interval < 0 || s.Interval > MaxInterval {
			t.Fatalf("ParseSpec(%q) = %+v", args, s)
		}
		if len(s.Prompt)+len(s.Until) > len(args) {
			t.Fatalf("ParseSpec(%q) = %+v: longer than the text", args, s)
		}
		if s.Times == 0 && (!strings.Contains(args, s.Prompt) || !strings.Contains(args, s.Until)) {
			t.Fatalf("ParseSpec(%q) = %+v: not from the text", args, s)
		}
		if s.Times > 0 && !strings.Contains(args, "--times") {
			t.Fatalf("ParseSpec(%q) = %+v: --times without the flag", args, s)
		}
		for _, w := range strings.Fields(s.Prompt + " " + s.Until) {
			if !strings.Contains(args, w) {
				t.Fatalf("ParseSpec(%q) = %+v: word %q not from the text", args, s, w)
			}
		}
		if utf8.ValidString(args) && (!utf8.ValidString(s.Prompt) || !utf8.ValidString(s.Until)) {
			t.Fatalf("ParseSpec(%q) broke a character", args)
		}
	})
}

// FuzzParseHeartbeat: an accepted heartbeat has an interval of at least
// the floor and a prompt from the text.
func FuzzParseHeartbeat(f *testing.F) {
	for _, s := range []string{"every 10m Check CI", "10m x", "every 30s x", "1.5h y", "every", "every 9999999999d x"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, args string) {
		d, prompt, problem := ParseHeartbeat(args)
		if problem != "" {
			return
		}
		if d < HeartbeatMinInterval || d > MaxInterval || prompt == "" || !strings.Contains(args, prompt) {
			t.Fatalf("ParseHeartbeat(%q) = %v, %q", args, d, prompt)
		}
	})
}
