package retention

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Age is a retention period in config: a Go duration ("720h") or a whole
// number of days or weeks ("90d", "2w"); "0" or "" is no period (keep).
type Age time.Duration

// MaxAge is the longest Age (and prune age), well inside time.Duration's range.
const MaxAge = 100 * 365 * 24 * time.Hour

// ParseAge reads an Age. Negative ages are refused: a negative retention
// would put the cutoff in the future and match every session.
func ParseAge(s string) (Age, error) {
	s = strings.TrimSpace(s)
	if s == "" || s == "0" {
		return 0, nil
	}
	unit := time.Duration(0)
	switch {
	case strings.HasSuffix(s, "d"):
		unit = 24 * time.Hour
	case strings.HasSuffix(s, "w"):
		unit = 7 * 24 * time.Hour
	}
	if unit != 0 {
		n, err := strconv.ParseInt(s[:len(s)-1], 10, 32)
		if err != nil || n < 0 {
			return 0, fmt.Errorf("age %q: want a whole number of days (90d) or weeks (2w), or a duration (720h)", s)
		}
		if n > int64(MaxAge/unit) {
			return 0, fmt.Errorf("age %q: more than 100 years", s)
		}
		return Age(time.Duration(n) * unit), nil
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		return 0, fmt.Errorf("age %q: want a whole number of days (90d) or weeks (2w), or a duration (720h)", s)
	}
	if d < 0 {
		return 0, fmt.Errorf("age %q is negative", s)
	}
	if d > MaxAge {
		return 0, fmt.Errorf("age %q: more than 100 years", s)
	}
	return Age(d), nil
}

// UnmarshalText reads the config and environment forms.
func (a *Age) UnmarshalText(b []byte) error {
	v, err := ParseAge(string(b))
	if err != nil {
		return err
	}
	*a = v
	return nil
}

// MarshalText writes whole days as "<n>d", anything else as a duration.
func (a Age) MarshalText() ([]byte, error) { return []byte(a.String()), nil }

// String is the Age as MarshalText writes it.
func (a Age) String() string {
	d := time.Duration(a)
	if d == 0 {
		return "0"
	}
	if d%(24*time.Hour) == 0 {
		return strconv.FormatInt(int64(d/(24*time.Hour)), 10) + "d"
	}
	return d.String()
}

// Duration is the Age as a time.Duration.
func (a Age) Duration() time.Duration { return time.Duration(a) }
