package platform

import (
	"math"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// ByStatus classifies err, a platform API's answer of status, as most
// of them answer: 429 is RateLimited after retryAfter (def when the
// answer named no wait), 5xx and 408 are retried, any other 4xx is
// Permanent. Gateways check their platform's own codes first.
func ByStatus(err error, status int, retryAfter, def time.Duration) error {
	switch {
	case status == http.StatusTooManyRequests:
		if retryAfter <= 0 {
			retryAfter = def
		}
		return RateLimited(err, retryAfter)
	case status >= 500 || status == http.StatusRequestTimeout:
		return err
	case status >= 400:
		return Permanent(err)
	}
	return err
}

// RetryAfter reads a Retry-After header, seconds or an HTTP date; 0
// when there is none or it has passed.
func RetryAfter(h string) time.Duration {
	d, _ := ParseRetryAfter(h, time.Now())
	return d
}

// ParseRetryAfter reads a Retry-After header at now: the wait it names
// (seconds, or an HTTP date; 0 for one passed) and whether it named one
// (false for none, or a value neither).
func ParseRetryAfter(h string, now time.Time) (time.Duration, bool) {
	h = strings.TrimSpace(h)
	if s, err := strconv.Atoi(h); err == nil {
		// Past what a Duration holds (some 292 years), the longest
		// it holds: the product would wrap to a negative, no wait.
		return time.Duration(min(max(s, 0), math.MaxInt64/int(time.Second))) * time.Second, true
	}
	if t, err := http.ParseTime(h); err == nil {
		return max(t.Sub(now), 0), true
	}
	return 0, false
}
