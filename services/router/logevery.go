package router

import (
	"sync"
	"time"
)

// logEvery lets a warning that every message of a kind would log (a
// press refused for the operator's configuration, say) be logged at
// most once each interval by this process, counting the ones it did not
// log, so that a busy chat cannot flood the logs while the operator
// still learns, once, what to fix. The zero value logs the first at
// once.
type logEvery struct {
	mu     sync.Mutex
	last   time.Time // the last one logged; zero before the first
	missed int       // not logged since last
}

// due reports whether the warning of an event at now is logged, an
// interval or more after the last one logged (or the first), and if so
// how many were not logged since that one.
func (l *logEvery) due(now time.Time, interval time.Duration) (ok bool, missed int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	// A clock set back logs at once rather than waiting for the time
	// it was at.
	if since := now.Sub(l.last); !l.last.IsZero() && since >= 0 && since < interval {
		l.missed++
		return false, 0
	}
	missed, l.last, l.missed = l.missed, now, 0
	return true, missed
}
