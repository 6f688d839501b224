package delivery

import (
	"testing"
	"time"
)

// The send loop sleeps until the earliest retry this replica queued
// comes due or a row being sent may be taken over, wakes at once for
// one that came due while its round ran, and never spins on a time
// already past.
func TestNextWake(t *testing.T) {
	round := time.Date(2026, 12, 4, 12, 0, 0, 0, time.UTC)
	now := round.Add(200 * time.Millisecond) // the round took 200 ms
	for _, tc := range []struct {
		name     string
		due      []time.Time
		takeover time.Time
		expiry   time.Time
		want     time.Duration
	}{
		{"nothing queued", nil, time.Time{}, time.Time{}, time.Hour},
		{"a retry ahead", []time.Time{now.Add(150 * time.Millisecond)}, time.Time{}, time.Time{}, 150 * time.Millisecond},
		{"the earliest of several", []time.Time{now.Add(time.Second), now.Add(300 * time.Millisecond)}, time.Time{}, time.Time{}, 300 * time.Millisecond},
		{"a retry due while the round ran", []time.Time{round.Add(50 * time.Millisecond), now.Add(time.Second)}, time.Time{}, time.Time{}, 0},
		{"a retry the round claimed", []time.Time{round.Add(-time.Millisecond)}, time.Time{}, time.Time{}, time.Hour},
		{"a retry past the poll", []time.Time{now.Add(2 * time.Hour)}, time.Time{}, time.Time{}, time.Hour},
		{"a takeover ahead", nil, now.Add(400 * time.Millisecond), time.Time{}, 400 * time.Millisecond},
		{"a takeover before a retry", []time.Time{now.Add(time.Second)}, now.Add(400 * time.Millisecond), time.Time{}, 400 * time.Millisecond},
		{"a retry before a takeover", []time.Time{now.Add(100 * time.Millisecond)}, now.Add(400 * time.Millisecond), time.Time{}, 100 * time.Millisecond},
		{"a lease that ran out while the round ran", nil, round.Add(100 * time.Millisecond), time.Time{}, 0},
		{"a takeover past the poll", nil, now.Add(2 * time.Hour), time.Time{}, time.Hour},
		{"an expiry pass ahead", nil, time.Time{}, now.Add(time.Minute), time.Minute},
		{"an expiry pass overdue", nil, time.Time{}, now.Add(-time.Minute), time.Hour},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := &Service{cfg: Config{PollInterval: time.Hour}, now: func() time.Time { return now }}
			s.expiry.next = tc.expiry
			for _, at := range tc.due {
				s.due.note(at)
			}
			if got := s.nextWake(round, tc.takeover); got != tc.want {
				t.Errorf("nextWake = %v, want %v", got, tc.want)
			}
			if len(tc.due) > 0 && tc.want == 0 {
				// The next round begins after the time: it is forgotten.
				if got := s.nextWake(now, time.Time{}); got == 0 {
					t.Errorf("the next round wakes at once again")
				}
			}
		})
	}
}
