package webhook

import (
	"testing"
	"time"
)

func TestLimiterWindow(t *testing.T) {
	t0 := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	at := func(d time.Duration) time.Time { return t0.Add(d) }
	type hit struct {
		route string
		at    time.Duration
		ok    bool
		retry time.Duration // when refused
		log   bool          // when refused
		quiet int           // refusals unlogged before a logged one
	}
	cases := []struct {
		name   string
		limits map[string]int
		hits   []hit
	}{
		{"under the limit", map[string]int{"a": 3}, []hit{
			{route: "a", at: 0, ok: true}, {route: "a", at: time.Second, ok: true}, {route: "a", at: 2 * time.Second, ok: true},
		}},
		{"refused past the limit until the oldest hit leaves", map[string]int{"a": 2}, []hit{
			{route: "a", at: 0, ok: true},
			{route: "a", at: 10 * time.Second, ok: true},
			{route: "a", at: 20 * time.Second, retry: 40 * time.Second, log: true},
			{route: "a", at: 59 * time.Second, retry: time.Second},
			// A hit exactly a window old still counts (Hermes drops only
			// older ones).
			{route: "a", at: 60 * time.Second, retry: 0},
			{route: "a", at: 60*time.Second + time.Millisecond, ok: true},
			{route: "a", at: 61 * time.Second, retry: 9 * time.Second},
			{route: "a", at: 70*time.Second + time.Millisecond, ok: true},
		}},
		{"refusals are not recorded", map[string]int{"a": 1}, []hit{
			{route: "a", at: 0, ok: true},
			{route: "a", at: 30 * time.Second, retry: 30 * time.Second, log: true},
			{route: "a", at: 50 * time.Second, retry: 10 * time.Second},
			{route: "a", at: 61 * time.Second, ok: true},
		}},
		{"one log line a window, with the refusals it left out", map[string]int{"a": 1}, []hit{
			{route: "a", at: 0, ok: true},
			{route: "a", at: time.Second, retry: 59 * time.Second, log: true},
			{route: "a", at: 2 * time.Second, retry: 58 * time.Second},
			{route: "a", at: 3 * time.Second, retry: 57 * time.Second},
			{route: "a", at: 61 * time.Second, ok: true},
			{route: "a", at: 62 * time.Second, retry: 59 * time.Second, log: true, quiet: 2},
			{route: "a", at: 63 * time.Second, retry: 58 * time.Second},
		}},
		// Concurrent deliveries read the clock before the limiter's lock:
		// one may come with a time before the last one taken. It counts
		// as at that time: Retry-After never exceeds the window.
		{"a time before the last hit's", map[string]int{"a": 2}, []hit{
			{route: "a", at: 10 * time.Millisecond, ok: true},
			{route: "a", at: 5 * time.Millisecond, ok: true},
			{route: "a", at: 0, retry: 60 * time.Second, log: true},
			{route: "a", at: 60*time.Second + 11*time.Millisecond, ok: true},
		}},
		{"routes do not share a window", map[string]int{"a": 1, "b": 1}, []hit{
			{route: "a", at: 0, ok: true},
			{route: "a", at: time.Second, retry: 59 * time.Second, log: true},
			{route: "b", at: 2 * time.Second, ok: true},
			{route: "b", at: 3 * time.Second, retry: 59 * time.Second, log: true},
		}},
		{"0 is unlimited, unknown routes keep no state", map[string]int{"a": 0}, []hit{
			{route: "a", at: 0, ok: true}, {route: "a", at: 0, ok: true}, {route: "a", at: 0, ok: true},
			{route: "nope", at: 0, ok: true}, {route: "nope", at: 0, ok: true},
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			l := newLimiter(c.limits)
			for i, h := range c.hits {
				v := l.allow(h.route, at(h.at))
				if v.ok != h.ok {
					t.Fatalf("hit %d (%s at %s): ok %v, want %v", i, h.route, h.at, v.ok, h.ok)
				}
				if h.ok {
					continue
				}
				if v.retryAfter != h.retry || v.log != h.log || v.suppressed != h.quiet || v.limit != c.limits[h.route] {
					t.Fatalf("hit %d (%s at %s): %+v, want retry %s, log %v, suppressed %d, limit %d", i, h.route, h.at, v, h.retry, h.log, h.quiet, c.limits[h.route])
				}
			}
			if _, ok := l.routes["nope"]; ok {
				t.Fatal("an unknown route got a window")
			}
		})
	}
}

// TestLimiterMemoryBounded: however long a route is flooded, it keeps at
// most its limit of times.
func TestLimiterMemoryBounded(t *testing.T) {
	l := newLimiter(map[string]int{"a": 5})
	t0 := time.Unix(0, 0)
	for i := range 100_000 {
		l.allow("a", t0.Add(time.Duration(i)*time.Millisecond))
	}
	if w := l.routes["a"]; len(w.hits) > 5 || cap(w.hits) > 16 {
		t.Fatalf("window holds %d times in a slice of %d", len(w.hits), cap(w.hits))
	}
}

func TestRetryAfterSeconds(t *testing.T) {
	for _, c := range []struct {
		d    time.Duration
		want int
	}{{0, 1}, {-time.Second, 1}, {time.Millisecond, 1}, {time.Second, 1}, {time.Second + 1, 2}, {59 * time.Second, 59}, {time.Minute, 60}} {
		if got := retryAfterSeconds(c.d); got != c.want {
			t.Errorf("retryAfterSeconds(%s) = %d, want %d", c.d, got, c.want)
		}
	}
}
