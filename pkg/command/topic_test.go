package command

import (
	"strings"
	"testing"
	"unicode"
)

func TestTopic(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		in   string
		want TopicArgs
	}{
		{"", TopicArgs{Action: TopicEnable}},
		{"   ", TopicArgs{Action: TopicEnable}},
		{"help", TopicArgs{Action: TopicHelp}},
		{"HELP", TopicArgs{Action: TopicHelp}},
		{"?", TopicArgs{Action: TopicHelp}},
		{"-h", TopicArgs{Action: TopicHelp}},
		{"--help", TopicArgs{Action: TopicHelp}},
		{"off", TopicArgs{Action: TopicOff}},
		{" Off ", TopicArgs{Action: TopicOff}},
		{"disable", TopicArgs{Action: TopicOff}},
		{"stop", TopicArgs{Action: TopicOff}},
		{"20260101_120000_abcdef12", TopicArgs{Action: TopicRestore, SessionID: "20260101_120000_abcdef12"}},
		{" 20260101_120000_abcdef12 trailing", TopicArgs{Action: TopicRestore, SessionID: "20260101_120000_abcdef12"}},
		{"off please", TopicArgs{Action: TopicRestore, SessionID: "off"}},
	} {
		if got := Topic(tt.in); got != tt.want {
			t.Errorf("Topic(%q) = %+v, want %+v", tt.in, got, tt.want)
		}
	}
}

// FuzzTopic: every argument reads as exactly one action; a restore's
// session id is one non-empty word of the argument, and only a restore
// has one.
func FuzzTopic(f *testing.F) {
	for _, s := range []string{"", "help", "OFF", "--help", "20260101_120000_abcdef12", " a b ", "\u00a0", "stop\n"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, args string) {
		got := Topic(args)
		switch got.Action {
		case TopicEnable:
			if strings.TrimSpace(args) != "" || got.SessionID != "" {
				t.Fatalf("Topic(%q) = %+v", args, got)
			}
		case TopicHelp, TopicOff:
			if got.SessionID != "" {
				t.Fatalf("Topic(%q) = %+v", args, got)
			}
		case TopicRestore:
			id := got.SessionID
			if id == "" || strings.IndexFunc(id, unicode.IsSpace) >= 0 || !strings.Contains(args, id) {
				t.Fatalf("Topic(%q): session id %q", args, id)
			}
		default:
			t.Fatalf("Topic(%q): action %d", args, got.Action)
		}
	})
}
