package platform

import (
	"errors"
	"math"
	"net/http"
	"testing"
	"time"

	deliveryv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/delivery/v1"
)

func TestByStatus(t *testing.T) {
	t.Parallel()
	failed := errors.New("failed")
	tests := []struct {
		status     int
		retryAfter time.Duration
		class      deliveryv1.ErrorClass // UNSPECIFIED: returned as it is (retried)
		wait       time.Duration
	}{
		{http.StatusTooManyRequests, 7 * time.Second, deliveryv1.ErrorClass_ERROR_CLASS_RATE_LIMITED, 7 * time.Second},
		{http.StatusTooManyRequests, 0, deliveryv1.ErrorClass_ERROR_CLASS_RATE_LIMITED, 2 * time.Second},
		{http.StatusServiceUnavailable, 0, deliveryv1.ErrorClass_ERROR_CLASS_UNSPECIFIED, 0},
		{http.StatusRequestTimeout, 0, deliveryv1.ErrorClass_ERROR_CLASS_UNSPECIFIED, 0},
		{http.StatusForbidden, 0, deliveryv1.ErrorClass_ERROR_CLASS_PERMANENT, 0},
		{http.StatusNotFound, 0, deliveryv1.ErrorClass_ERROR_CLASS_PERMANENT, 0},
	}
	for _, tt := range tests {
		err := ByStatus(failed, tt.status, tt.retryAfter, 2*time.Second)
		var se *SendError
		class, wait := deliveryv1.ErrorClass_ERROR_CLASS_UNSPECIFIED, time.Duration(0)
		if errors.As(err, &se) {
			class, wait = se.Class, se.RetryAfter
		}
		if !errors.Is(err, failed) || class != tt.class || wait != tt.wait {
			t.Errorf("ByStatus(%d, %s) = %v (%s, %s), want %s after %s", tt.status, tt.retryAfter, err, class, wait, tt.class, tt.wait)
		}
	}
}

func TestRetryAfter(t *testing.T) {
	t.Parallel()
	tests := []struct {
		h        string
		min, max time.Duration
	}{
		{"", 0, 0},
		{"3", 3 * time.Second, 3 * time.Second},
		{" 10 ", 10 * time.Second, 10 * time.Second},
		{"-4", 0, 0},
		{"soon", 0, 0},
		{time.Now().Add(time.Minute).UTC().Format(http.TimeFormat), 58 * time.Second, time.Minute},
		{time.Now().Add(-time.Minute).UTC().Format(http.TimeFormat), 0, 0},
	}
	for _, tt := range tests {
		if got := RetryAfter(tt.h); got < tt.min || got > tt.max {
			t.Errorf("RetryAfter(%q) = %s, want %s to %s", tt.h, got, tt.min, tt.max)
		}
	}
}

// ParseRetryAfter tells a header that names no wait (none, or not a
// value) from one that names none left (0, a date passed).
func TestParseRetryAfter(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 12, 7, 17, 0, 0, 0, time.UTC)
	for _, tt := range []struct {
		h    string
		want time.Duration
		ok   bool
	}{
		{"", 0, false},
		{"soon", 0, false},
		{"0", 0, true},
		{" 7 ", 7 * time.Second, true},
		{now.Add(4 * time.Second).Format(http.TimeFormat), 4 * time.Second, true},
		{now.Add(-time.Minute).Format(http.TimeFormat), 0, true},
		// Seconds past what a Duration holds wait the longest it holds,
		// not a negative (no) wait.
		{"9300000000", math.MaxInt64 / time.Second * time.Second, true},
		{"9223372036854775807", math.MaxInt64 / time.Second * time.Second, true},
	} {
		if got, ok := ParseRetryAfter(tt.h, now); got != tt.want || ok != tt.ok {
			t.Errorf("ParseRetryAfter(%q) = %s, %v, want %s, %v", tt.h, got, ok, tt.want, tt.ok)
		}
	}
}
