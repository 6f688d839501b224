package webhook

import (
	"sync"
	"time"
)

// rateWindow is the span a route's rate limit counts over (Hermes's 60 s).
const rateWindow = time.Minute

// limiter is Hermes's per-route rate limit: each route keeps the times
// of the deliveries it took in the last rateWindow and refuses one more
// once it holds its limit. State is per replica, in memory, and exists
// only for configured routes, so its size is bounded by the
// configuration (at most limit times per route), never by the senders.
type limiter struct {
	mu     sync.Mutex
	routes map[string]*routeWindow
}

// routeWindow is one route's sliding window.
type routeWindow struct {
	limit int
	// hits are the times of accepted deliveries, oldest first; at most
	// limit of them are live.
	hits []time.Time
	// logAfter is when a refusal may be logged again (once a window);
	// quiet counts the refusals not logged since the last line.
	logAfter time.Time
	quiet    int
}

// verdict is the limiter's answer for one delivery.
type verdict struct {
	ok    bool
	limit int // the route's limit (when refused)
	// retryAfter is how long until the oldest hit leaves the window
	// (when refused).
	retryAfter time.Duration
	// log is set on the first refusal of a window; suppressed is how
	// many refusals went unlogged before it.
	log        bool
	suppressed int
}

// newLimiter keeps a window for each route whose limit is above 0.
func newLimiter(limits map[string]int) *limiter {
	l := &limiter{routes: map[string]*routeWindow{}}
	for name, n := range limits {
		if n > 0 {
			l.routes[name] = &routeWindow{limit: n}
		}
	}
	return l
}

// allow records a delivery to route at now when the route is under its
// limit; a refused one is not recorded (as Hermes), so a sender that
// keeps retrying gets through as soon as the oldest hit expires.
func (l *limiter) allow(route string, now time.Time) verdict {
	l.mu.Lock()
	defer l.mu.Unlock()
	w := l.routes[route]
	if w == nil {
		return verdict{ok: true}
	}
	// Callers read the clock before they take the lock (and before a
	// signature check), so a delivery may come with a time earlier than
	// the last one recorded: it counts as at that time, which keeps the
	// hits in order and Retry-After within the window (a flood saw 61 s).
	if n := len(w.hits); n > 0 && now.Before(w.hits[n-1]) {
		now = w.hits[n-1]
	}
	cutoff := now.Add(-rateWindow)
	drop := 0
	for drop < len(w.hits) && w.hits[drop].Before(cutoff) {
		drop++
	}
	w.hits = w.hits[drop:]
	if len(w.hits) < w.limit {
		w.hits = append(w.hits, now)
		return verdict{ok: true}
	}
	v := verdict{limit: w.limit, retryAfter: w.hits[0].Add(rateWindow).Sub(now)}
	if now.Before(w.logAfter) {
		w.quiet++
		return v
	}
	v.log, v.suppressed = true, w.quiet
	w.logAfter, w.quiet = now.Add(rateWindow), 0
	return v
}

// retryAfterSeconds is a Retry-After value: whole seconds, rounded up,
// at least 1.
func retryAfterSeconds(d time.Duration) int {
	s := int((d + time.Second - 1) / time.Second)
	return max(s, 1)
}
