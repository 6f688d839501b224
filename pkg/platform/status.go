package platform

import (
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
	h = strings.TrimSpace(h)
	if h == "" {
		return 0
	}
	if s, err := strconv.Atoi(h); err == nil {
		return time.Duration(max(s, 0)) * time.Second
	}
	if t, err := http.ParseTime(h); err == nil {
		return max(time.Until(t), 0)
	}
	return 0
}
