package platform

import (
	"testing"
	"time"
)

// TestMarksAreBounded: a turn is remembered until two rotations later; a
// generation rotates when full or ttl old.
func TestMarksAreBounded(t *testing.T) {
	for _, tc := range []struct {
		name string
		m    *marks
		adds []string
		want []bool
	}{
		{"full", &marks{max: 2, ttl: time.Hour},
			[]string{"a", "a", "b", "c", "a", "d", "e", "a"},
			[]bool{true, false, true, true, false, true, true, true}},
		{"expired", &marks{max: 100, ttl: time.Nanosecond},
			[]string{"a", "a", "b", "c", "a"},
			// every add rotates: a is in the old generation for one add
			[]bool{true, false, true, true, true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for i, turn := range tc.adds {
				if i > 0 && tc.m.ttl < time.Millisecond {
					time.Sleep(time.Millisecond)
				}
				if got := tc.m.add(turn); got != tc.want[i] {
					t.Fatalf("add %d (%s) = %v, want %v", i, turn, got, tc.want[i])
				}
			}
			if n := len(tc.m.cur) + len(tc.m.old); n > 2*tc.m.max {
				t.Fatalf("%d turns kept, bound %d", n, 2*tc.m.max)
			}
		})
	}
}
