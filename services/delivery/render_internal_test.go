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
