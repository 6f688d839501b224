package command

import (
	"strings"
	"testing"
)

func TestParseCompress(t *testing.T) {
	tests := []struct {
		args string
		want Compress
	}{
		{"", Compress{}},
		{"database schema", Compress{Focus: "database schema"}},
		{"  the   API\nkeys ", Compress{Focus: "the API keys"}},
		{"here", Compress{Keep: 2}},
		{"HERE 5", Compress{Keep: 5}},
		{"here 0", Compress{Keep: 1}},
		{"here -3", Compress{Keep: 1}},
		{"here 9999", Compress{Keep: 100}},
		{"here five", Compress{Keep: 2}},
		{"here 3 and the rest is ignored", Compress{Keep: 3}},
		{"up to here", Compress{Keep: 2}},
		{"Up To Here 4", Compress{Keep: 4}},
		{"--keep 7", Compress{Keep: 7}},
		{"-k 1", Compress{Keep: 1}},
		{"--keep=12", Compress{Keep: 12}},
		{"--keep=x", Compress{Keep: 2}},
		// A lone --keep or -k has no count: it is a focus topic.
		{"-k", Compress{Focus: "-k"}},
		// Hermes's precedence: a first word "here" is the "here" form, so
		// a focus topic that is literally "here" cannot be given.
		{"here and now", Compress{Keep: 2}},
		{"hereafter", Compress{Focus: "hereafter"}},
		{"what is here", Compress{Focus: "what is here"}},
		{"up to there", Compress{Focus: "up to there"}},
		// The flags, anywhere, in any case.
		{"--preview", Compress{Preview: true}},
		{"--dry-run here 3", Compress{Preview: true, Keep: 3}},
		{"here --DRYRUN 3", Compress{Preview: true, Keep: 3}},
		{"auth bugs --preview", Compress{Preview: true, Focus: "auth bugs"}},
		{"--aggressive", Compress{Aggressive: true}},
		{"--aggressive --preview here", Compress{Aggressive: true, Preview: true, Keep: 2}},
	}
	for _, tt := range tests {
		if got := ParseCompress(tt.args); got != tt.want {
			t.Errorf("ParseCompress(%q) = %+v, want %+v", tt.args, got, tt.want)
		}
	}
}

func TestCompressString(t *testing.T) {
	tests := map[Compress]string{
		{}:                                 "",
		{Focus: "auth bugs"}:               "auth bugs",
		{Keep: 3}:                          "here 3",
		{Preview: true}:                    "--preview",
		{Preview: true, Keep: 2}:           "--preview here 2",
		{Preview: true, Focus: "x y"}:      "--preview x y",
		{Aggressive: true, Focus: "topic"}: "topic",
	}
	for c, want := range tests {
		if got := c.String(); got != want {
			t.Errorf("%+v.String() = %q, want %q", c, got, want)
		}
	}
}

// FuzzParseCompress: what ParseCompress reads is within bounds, the
// focus only without the "here" form, and String gives an argument it
// reads back the same (the router queues the command so).
func FuzzParseCompress(f *testing.F) {
	for _, s := range []string{"", "here", "here 5", "up to here 3", "--keep=4", "-k", "--preview focus", "--dry-run here x", "--aggressive", "HERE", strings.Repeat("topic ", 60)} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, args string) {
		c := ParseCompress(args)
		if c.Keep < 0 || c.Keep > CompressKeepMax {
			t.Fatalf("ParseCompress(%q): keep %d", args, c.Keep)
		}
		if c.Keep > 0 && c.Focus != "" {
			t.Fatalf("ParseCompress(%q): keep %d and focus %q", args, c.Keep, c.Focus)
		}
		if c.Focus != CompressFocus(c.Focus) {
			t.Fatalf("ParseCompress(%q): focus %q is not normalised", args, c.Focus)
		}
		back := ParseCompress(c.String())
		c.Aggressive = false
		if back != c {
			t.Fatalf("ParseCompress(%q) = %+v; its String %q reads back as %+v", args, c, c.String(), back)
		}
	})
}
