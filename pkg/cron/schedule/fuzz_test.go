package schedule_test

import (
	"errors"
	"testing"
	"time"

	"github.com/switchboard-chat/switchboard/pkg/cron/schedule"
)

// FuzzParse: any text either parses to a schedule that loads back from
// what would be stored and has a first run, or is refused with
// ErrInvalid; nothing panics.
func FuzzParse(f *testing.F) {
	for _, s := range []string{"30m", "in 2h", "every 2h", "every hour", "0 9 * * *", "*/5 * * * MON-FRI",
		"2026-03-15T09:00:00", "2026-03-15T09:00:00+02:00", "1d", "every 0m", "60 * * * *", "@hourly", "T", "0 0 30 2 *",
		"every monday 9am", "weekdays at 9:30pm", "mon, wed and fri at noon", "every day at 13pm"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in string) {
		s, err := schedule.Parse(in, now, berlin)
		if err != nil {
			if !errors.Is(err, schedule.ErrInvalid) {
				t.Fatalf("Parse(%q) error %v is not ErrInvalid", in, err)
			}
			return
		}
		l, err := schedule.Load(s.Kind, s.Expr, berlin)
		if err != nil {
			t.Fatalf("Parse(%q) stored %s %q, which does not load: %v", in, s.Kind, s.Expr, err)
		}
		first := l.First(now)
		if s.Kind == schedule.Once {
			first = l.At
		}
		if first.IsZero() {
			t.Fatalf("Parse(%q): no first run", in)
		}
		if s.Kind == schedule.Interval && !first.After(now) {
			t.Fatalf("Parse(%q): first run %v not after now", in, first)
		}
		if s.Grace(now) < 2*time.Minute {
			t.Fatalf("Parse(%q): grace %v", in, s.Grace(now))
		}
	})
}
