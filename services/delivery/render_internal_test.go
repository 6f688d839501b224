package delivery

import (
	"testing"
	"time"
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
