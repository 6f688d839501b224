package delivery

import (
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/switchboard-chat/switchboard/pkg/chunk"
	"github.com/switchboard-chat/switchboard/pkg/reasoning"
)

func TestTurnsPruneKeepsStreamsLongerThanSentFinals(t *testing.T) {
	tr := newTurns()
	tr.put("streaming", &turnState{ids: map[int]string{0: "m1"}})
	tr.put("sent", &turnState{done: true})
	now := time.Now()
	for _, tc := range []struct {
		streaming, done time.Time
		want            int
	}{
		{now.Add(-time.Hour), now.Add(-time.Minute), 2}, // both recent
		{now.Add(-time.Hour), now.Add(time.Second), 1},  // the sent final's marker is old enough
		{now.Add(time.Second), now.Add(time.Second), 0}, // the stream too
	} {
		tr.prune(tc.streaming, tc.done)
		if got := tr.len(); got != tc.want {
			t.Fatalf("prune(%v, %v): %d turns left, want %d", tc.streaming.Sub(now), tc.done.Sub(now), got, tc.want)
		}
	}
}

// A turn paused for an approval whose end never reaches this replica (its
// partition moved on) is forgotten by housekeeping, not kept for the
// life of the process.
func TestTypingForgetsPausedTurnsItNeverSawEnd(t *testing.T) {
	s := &Service{}
	ty := newTyping(s)
	for _, turn := range []string{"old", "recent"} {
		done := make(chan struct{})
		close(done) // its first request went out
		ty.m[turn] = &indicator{cancel: func() {}, sent: done, answered: done}
		ty.pause(turn)
	}
	ty.paused["old"] = time.Now().Add(-3 * time.Hour)
	ty.prunePaused(time.Now().Add(-2 * time.Hour))
	if n := ty.pausedLen(); n != 1 {
		t.Fatalf("%d paused turns left, want 1", n)
	}
	if _, ok := ty.paused["recent"]; !ok {
		t.Error("the recently paused turn was forgotten")
	}
}

func TestIsSegmentMessageKey(t *testing.T) {
	for _, tt := range []struct {
		key  string
		want bool
	}{
		{segmentMessageKey("t1", 0, 0), true},
		{segmentMessageKey("t1", 12, 3), true},
		{"t1:4:s0", false},
		{"t1:4:0", false},
		{"t1:4:g:0", false},
		{"t1:4:m", false},
		{"t1:4:", false},
		{"t1:undelivered", false},
		{"t1:4:img0", false},
	} {
		if got := isSegmentMessageKey(tt.key); got != tt.want {
			t.Errorf("isSegmentMessageKey(%q) = %v, want %v", tt.key, got, tt.want)
		}
	}
}

// A takeover's whole reasoning block cut to fit its messages (fitBlock)
// says it was cut, and keeps the thought's start as it was: a thought of
// more lines than a block shows (reasoning.MaxLines) cut in its first
// lines lost its note, and said "(1 more lines)" where more were left
// out and its last line shown was cut short.
func TestFitBlockSaysWhereItCut(t *testing.T) {
	lines := func(n int, line string) string {
		return strings.TrimSpace(strings.Repeat(line+"\n", n))
	}
	long := strings.TrimSpace(strings.Repeat("word ", 56)) // 15 of them are more than a Telegram message
	for _, tt := range []struct {
		name     string
		thought  string
		n        int
		platform string
		cut      bool
	}{
		{"more lines than shown, cut in them", lines(20, long), 1, "telegram", true},
		{"more lines than shown, cut in them, two messages", lines(40, long+" "+long+" "+long), 2, "telegram", true},
		{"more lines than shown, that fit", lines(20, "word word"), 1, "telegram", false},
		{"one long line", strings.Repeat("a thought that goes on ", 400), 1, "discord", true},
		{"multi-byte", strings.Repeat("日本語の考え 😀 ", 500), 1, "telegram", true},
		{"multi-byte, more lines than shown", lines(20, strings.Repeat("考え😀 ", 60)), 1, "sms", true},
		{"no spaces", strings.Repeat("😀", 3000), 1, "telegram", true},
		{"one message", "a short thought", 1, "telegram", false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got := fitBlock(tt.thought, tt.n, tt.platform)
			if parts := len(chunk.Split(got, tt.platform)); parts > tt.n {
				t.Errorf("the block takes %d messages, want %d at most", parts, tt.n)
			}
			if !utf8.ValidString(got) || !chunk.Balanced(got) || !strings.HasPrefix(got, reasoning.Header+"\n```\n") || !strings.HasSuffix(got, "\n```") {
				t.Errorf("not a reasoning block: %q", got)
			}
			if !tt.cut {
				if got != reasoning.Block(tt.thought) {
					t.Errorf("got %q, want the whole block", got)
				}
				return
			}
			start, ok := strings.CutSuffix(strings.TrimPrefix(got, reasoning.Header+"\n```\n"), blockCut+"\n```")
			if !ok || strings.Contains(got, "more lines") {
				t.Fatalf("the block ends %q, want it to end with %q", got[max(0, len(got)-80):], blockCut)
			}
			if start == "" || !strings.HasPrefix(strings.TrimSpace(tt.thought), start) {
				t.Errorf("the block keeps %q, not the thought's start", start)
			}
			if end := len(start); end < len(tt.thought) && strings.Contains(tt.thought, " ") && tt.thought[end] != ' ' && tt.thought[end] != '\n' {
				t.Errorf("the block is cut in a word: %q", start[max(0, end-40):])
			}
		})
	}
}
