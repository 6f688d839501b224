package platform

import (
	"math/rand/v2"
	"time"
)

// Backoff returns how long to wait before reconnect attempt n (0-based).
type Backoff func(attempt int) time.Duration

// hermesSchedule is Hermes's reconnect schedule; the last step repeats forever.
var hermesSchedule = []time.Duration{30 * time.Second, 60 * time.Second, 120 * time.Second, 240 * time.Second, 300 * time.Second}

// DefaultBackoff is 30 → 60 → 120 → 240 → 300 s, then 300 s forever, each
// with up to ±10 % jitter so replicas of many gateways do not reconnect in
// step.
func DefaultBackoff(attempt int) time.Duration {
	return Jitter(Schedule(hermesSchedule...)(attempt), 0.1)
}

// QuickBackoff is 2 s doubling to 60 s, then 60 s forever, each with up
// to ±20 % jitter: for a gateway whose reader retries a local daemon or
// its own server (signal-cli, a homeserver's /sync, a mailbox), where
// Hermes retries within seconds rather than after DefaultBackoff's 30 s.
func QuickBackoff(attempt int) time.Duration {
	return Jitter(Schedule(2*time.Second, 4*time.Second, 8*time.Second, 16*time.Second, 32*time.Second, 60*time.Second)(attempt), 0.2)
}

// Schedule returns a Backoff that walks steps and stays on the last one.
func Schedule(steps ...time.Duration) Backoff {
	return func(attempt int) time.Duration {
		if len(steps) == 0 {
			return 0
		}
		if attempt < 0 {
			attempt = 0
		}
		if attempt >= len(steps) {
			attempt = len(steps) - 1
		}
		return steps[attempt]
	}
}

// Jitter spreads d by up to ±frac of itself.
func Jitter(d time.Duration, frac float64) time.Duration {
	if d <= 0 || frac <= 0 {
		return d
	}
	delta := (rand.Float64()*2 - 1) * frac * float64(d)
	return d + time.Duration(delta)
}
