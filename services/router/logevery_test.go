package router

import (
	"testing"
	"time"
)

// A warning is logged at its first event, then once an interval has
// passed since the last one logged, counting the events between.
func TestLogEvery(t *testing.T) {
	t.Parallel()
	start := time.Date(2026, 12, 6, 11, 0, 0, 0, time.UTC)
	const every = 10 * time.Minute
	var l logEvery
	for _, tc := range []struct {
		at     time.Duration // after start
		log    bool
		missed int
	}{
		{0, true, 0},
		{time.Second, false, 0},
		{every - time.Nanosecond, false, 0},
		{every, true, 2},
		{every + time.Minute, false, 0},
		{3 * every, true, 1},
		{3*every + time.Second, false, 0},
		// A clock set back logs at once.
		{every, true, 1},
	} {
		log, missed := l.due(start.Add(tc.at), every)
		if log != tc.log || missed != tc.missed {
			t.Errorf("at +%v: logged %v with %d missed, want %v with %d", tc.at, log, missed, tc.log, tc.missed)
		}
	}
}
