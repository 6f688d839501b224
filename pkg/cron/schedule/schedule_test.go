package schedule_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/switchboard-chat/switchboard/pkg/cron/schedule"
)

var (
	now    = time.Date(2026, 3, 10, 8, 30, 0, 0, time.UTC)
	berlin = mustLoad("Europe/Berlin")
)

func mustLoad(name string) *time.Location {
	l, err := time.LoadLocation(name)
	if err != nil {
		panic(err)
	}
	return l
}

func TestParse(t *testing.T) {
	cases := []struct {
		in      string
		loc     *time.Location
		kind    string
		expr    string
		display string
		first   time.Time
		repeat  int
	}{
		{"30m", nil, schedule.Once, "2026-03-10T09:00:00Z", "once in 30m", now.Add(30 * time.Minute), 1},
		{"2h", nil, schedule.Once, "2026-03-10T10:30:00Z", "once in 2h", now.Add(2 * time.Hour), 1},
		{"1d", nil, schedule.Once, "2026-03-11T08:30:00Z", "once in 1d", now.Add(24 * time.Hour), 1},
		{"in 45 minutes", nil, schedule.Once, "2026-03-10T09:15:00Z", "once in 45 minutes", now.Add(45 * time.Minute), 1},
		{"  IN 1H ", nil, schedule.Once, "2026-03-10T09:30:00Z", "once in 1H", now.Add(time.Hour), 1},
		{"every 30m", nil, schedule.Interval, "every 30m", "every 30m", now.Add(30 * time.Minute), 0},
		{"every 2h", nil, schedule.Interval, "every 120m", "every 120m", now.Add(2 * time.Hour), 0},
		{"Every hour", nil, schedule.Interval, "every 60m", "every 60m", now.Add(time.Hour), 0},
		{"every 1d", nil, schedule.Interval, "every 1440m", "every 1440m", now.Add(24 * time.Hour), 0},
		{"0 9 * * *", nil, schedule.Cron, "0 9 * * *", "0 9 * * *", time.Date(2026, 3, 10, 9, 0, 0, 0, time.UTC), 0},
		{"0  9 * *   *", nil, schedule.Cron, "0 9 * * *", "0 9 * * *", time.Date(2026, 3, 10, 9, 0, 0, 0, time.UTC), 0},
		{"*/15 * * * *", nil, schedule.Cron, "*/15 * * * *", "*/15 * * * *", time.Date(2026, 3, 10, 8, 45, 0, 0, time.UTC), 0},
		{"0 9 * * MON-FRI", nil, schedule.Cron, "0 9 * * MON-FRI", "0 9 * * MON-FRI", time.Date(2026, 3, 10, 9, 0, 0, 0, time.UTC), 0},
		{"0 0 * * 0", nil, schedule.Cron, "0 0 * * 0", "0 0 * * 0", time.Date(2026, 3, 15, 0, 0, 0, 0, time.UTC), 0},
		// 7 is Sunday too, as in croniter (Hermes).
		{"0 0 * * 7", nil, schedule.Cron, "0 0 * * 7", "0 0 * * 7", time.Date(2026, 3, 15, 0, 0, 0, 0, time.UTC), 0},
		{"0 9 * * 5-7", nil, schedule.Cron, "0 9 * * 5-7", "0 9 * * 5-7", time.Date(2026, 3, 13, 9, 0, 0, 0, time.UTC), 0},
		{"0 9 * * 1-7/2", nil, schedule.Cron, "0 9 * * 1-7/2", "0 9 * * 1-7/2", time.Date(2026, 3, 11, 9, 0, 0, 0, time.UTC), 0},
		{"0 9 * * 6/1", nil, schedule.Cron, "0 9 * * 6/1", "0 9 * * 6/1", time.Date(2026, 3, 14, 9, 0, 0, 0, time.UTC), 0},
		// 9:00 in Berlin is 8:00 UTC in March (CET): tomorrow's.
		{"0 9 * * *", berlin, schedule.Cron, "0 9 * * *", "0 9 * * *", time.Date(2026, 3, 11, 8, 0, 0, 0, time.UTC), 0},
		{"2026-03-15T09:00:00", nil, schedule.Once, "2026-03-15T09:00:00Z", "once at 2026-03-15 09:00", time.Date(2026, 3, 15, 9, 0, 0, 0, time.UTC), 1},
		{"2026-03-15T09:00:00", berlin, schedule.Once, "2026-03-15T08:00:00Z", "once at 2026-03-15 09:00", time.Date(2026, 3, 15, 8, 0, 0, 0, time.UTC), 1},
		{"2026-03-15T09:00:00+02:00", nil, schedule.Once, "2026-03-15T07:00:00Z", "once at 2026-03-15 07:00", time.Date(2026, 3, 15, 7, 0, 0, 0, time.UTC), 1},
		{"2026-03-15T09:00:00Z", nil, schedule.Once, "2026-03-15T09:00:00Z", "once at 2026-03-15 09:00", time.Date(2026, 3, 15, 9, 0, 0, 0, time.UTC), 1},
		{"2026-03-15 09:00", nil, schedule.Once, "2026-03-15T09:00:00Z", "once at 2026-03-15 09:00", time.Date(2026, 3, 15, 9, 0, 0, 0, time.UTC), 1},
		// A minute late is within the one-shot grace.
		{"2026-03-10T08:29:00Z", nil, schedule.Once, "2026-03-10T08:29:00Z", "once at 2026-03-10 08:29", now.Add(-time.Minute), 1},
	}
	for _, c := range cases {
		t.Run(c.in, func(t *testing.T) {
			s, err := schedule.Parse(c.in, now, c.loc)
			if err != nil {
				t.Fatalf("Parse: %v", err)
			}
			if s.Kind != c.kind || s.Expr != c.expr || s.Display != c.display {
				t.Errorf("got %s %q %q, want %s %q %q", s.Kind, s.Expr, s.Display, c.kind, c.expr, c.display)
			}
			if got := s.First(now); !got.Equal(c.first) {
				t.Errorf("first run %v, want %v", got, c.first)
			}
			if s.DefaultRepeat() != c.repeat {
				t.Errorf("default repeat %d, want %d", s.DefaultRepeat(), c.repeat)
			}
			// What is stored loads back to the same schedule.
			l, err := schedule.Load(s.Kind, s.Expr, c.loc)
			if err != nil {
				t.Fatalf("Load: %v", err)
			}
			if got := l.First(now); s.Kind != schedule.Once && !got.Equal(c.first) || s.Kind == schedule.Once && !l.At.Equal(s.At) {
				t.Errorf("loaded schedule's first run %v, want %v", got, c.first)
			}
		})
	}
}

// TestParseDayAndTimePhrases: as Hermes's parse_schedule
// (_natural_every_to_cron), days and a time of day, with or without
// "every", are the cron expression of that time on those days, listed
// as typed; days without a time, or a time no clock shows, are refused.
func TestParseDayAndTimePhrases(t *testing.T) {
	day := func(d, h, m int) time.Time { return time.Date(2026, 3, d, h, m, 0, 0, time.UTC) } // the 10th is a Tuesday
	for _, c := range []struct {
		in    string
		loc   *time.Location
		expr  string
		first time.Time
	}{
		{"every monday 9am", nil, "0 9 * * 1", day(16, 9, 0)},
		{"every day at 9:30pm", nil, "30 21 * * *", day(10, 21, 30)},
		{"weekdays at 9am", nil, "0 9 * * 1-5", day(10, 9, 0)},
		{"Every Mon, Wed and Fri at noon", nil, "0 12 * * 1,3,5", day(11, 12, 0)},
		{"weekend midnight", nil, "0 0 * * 0,6", day(14, 0, 0)},
		{"daily at 7", nil, "0 7 * * *", day(11, 7, 0)},
		{"every sunday, sun at 12am", nil, "0 0 * * 0", day(15, 0, 0)},
		{"every tuesday 14:05", nil, "5 14 * * 2", day(10, 14, 5)},
		// 9:00 in Berlin is 8:00 UTC in March (CET).
		{"every friday 9am", berlin, "0 9 * * 5", day(13, 8, 0)},
	} {
		t.Run(c.in, func(t *testing.T) {
			s, err := schedule.Parse(c.in, now, c.loc)
			if err != nil {
				t.Fatalf("Parse: %v", err)
			}
			if s.Kind != schedule.Cron || s.Expr != c.expr || s.Display != strings.TrimSpace(c.in) {
				t.Errorf("got %s %q %q, want cron %q listed as %q", s.Kind, s.Expr, s.Display, c.expr, c.in)
			}
			if got := s.First(now); !got.Equal(c.first) {
				t.Errorf("first run %v, want %v", got, c.first)
			}
			l, err := schedule.Load(s.Kind, s.Expr, c.loc)
			if err != nil || !l.First(now).Equal(c.first) {
				t.Errorf("loaded back: %v, first run %v", err, l.First(now))
			}
		})
	}
	for in, want := range map[string]string{
		"every day":   "every 1440m", // an interval, as before
		"every 2 hrs": "every 120m",
	} {
		if s, err := schedule.Parse(in, now, nil); err != nil || s.Kind != schedule.Interval || s.Expr != want {
			t.Errorf("Parse(%q) = %s %q, %v; want the interval %q", in, s.Kind, s.Expr, err, want)
		}
	}
	for _, in := range []string{"every monday", "every monday 13pm", "every monday 9:75", "mondays 9am", "every weekday monday 9am", "at 9am"} {
		if s, err := schedule.Parse(in, now, nil); !errors.Is(err, schedule.ErrInvalid) {
			t.Errorf("Parse(%q) = %s %q, %v; want ErrInvalid", in, s.Kind, s.Expr, err)
		}
	}
}

func TestParseRefuses(t *testing.T) {
	cases := map[string]string{
		"":                                     "empty",
		"   ":                                  "empty",
		"soon":                                 "Use:",
		"every":                                "Use:",
		"every fortnight":                      "not a duration",
		"in 0m":                                "not a positive duration",
		"0m":                                   "Use:",
		"in 99999999999999m":                   "too long",
		"every 9999999d":                       "too long",
		"61 * * * *":                           "cron expression",
		"0 0 30 2 *":                           "never comes",
		"0 9 31 4,6,9,11 *":                    "never comes",
		"* * * *":                              "Use:",
		"0 9 * * * *":                          "Use:",
		"@daily":                               "Use:",
		"2026-13-45T09:00:00":                  "invalid timestamp",
		"2026-03-01T09:00:00Z":                 "in the past",
		"Tomorrow":                             "invalid timestamp",
		strings.Repeat("1", schedule.MaxLen+1): "short line",
		"every 2h\xff":                         "short line",
		// A unit without its digits is no delay (Hermes's parse_duration
		// wants them); only an interval takes it ("every day").
		"day":     "Use:",
		"Hours":   "Use:",
		"in day":  "not a duration",
		"in hour": "not a duration",
	}
	for in, want := range cases {
		t.Run(in, func(t *testing.T) {
			_, err := schedule.Parse(in, now, nil)
			if !errors.Is(err, schedule.ErrInvalid) || !strings.Contains(err.Error(), want) {
				t.Errorf("Parse(%q) = %v, want an ErrInvalid saying %q", in, err, want)
			}
		})
	}
}

func TestNext(t *testing.T) {
	iv, _ := schedule.Parse("every 2h", now, nil)
	if got, ok := iv.Next(now); !ok || !got.Equal(now.Add(2*time.Hour)) {
		t.Errorf("interval next %v %v", got, ok)
	}
	cr, _ := schedule.Parse("0 9 * * *", now, nil)
	nine := time.Date(2026, 3, 10, 9, 0, 0, 0, time.UTC)
	// Strictly after: a run at 9:00 is followed by tomorrow's.
	if got, ok := cr.Next(nine); !ok || !got.Equal(nine.Add(24*time.Hour)) {
		t.Errorf("cron next after 9:00 = %v %v", got, ok)
	}
	// Days of downtime collapse: the next run after now is one run.
	if got, _ := cr.Next(nine.Add(72*time.Hour + time.Minute)); !got.Equal(nine.Add(96 * time.Hour)) {
		t.Errorf("cron next after downtime = %v", got)
	}
	one, _ := schedule.Parse("30m", now, nil)
	if _, ok := one.Next(now); ok {
		t.Error("a one-shot has a next run")
	}
	if g := cr.Grace(now); g != 2*time.Hour {
		t.Errorf("daily grace %v, want 2h", g)
	}
	if g := iv.Grace(now); g != time.Hour {
		t.Errorf("2h interval grace %v, want 1h", g)
	}
	q, _ := schedule.Parse("* * * * *", now, nil)
	if g := q.Grace(now); g != 2*time.Minute {
		t.Errorf("minutely grace %v, want 2m", g)
	}
	if g := one.Grace(now); g != schedule.OnceGrace {
		t.Errorf("one-shot grace %v", g)
	}
}

func TestLoadRefuses(t *testing.T) {
	for _, c := range [][2]string{{"once", "yesterday"}, {"interval", "30m"}, {"interval", "every x"}, {"cron", "nope"}, {"weekly", "x"}} {
		if _, err := schedule.Load(c[0], c[1], nil); !errors.Is(err, schedule.ErrInvalid) {
			t.Errorf("Load(%q, %q) = %v", c[0], c[1], err)
		}
	}
}

// TestCronDST: a job at a fixed time of day (neither minute nor hour a
// wildcard) runs once on the day clocks fall back, although its time
// occurs twice, and on the day they spring forward over its time runs
// at that time by the clock before the jump (an hour later by the new
// one) rather than skipping the day;
// a wildcard job runs at every real instant that matches.
func TestCronDST(t *testing.T) {
	ny := mustLoad("America/New_York")
	cases := []struct {
		name, expr string
		from       time.Time
		want       []time.Time
	}{
		{"fixed time falls back: once", "30 1 * * *", time.Date(2026, 11, 1, 0, 0, 0, 0, ny), []time.Time{
			time.Date(2026, 11, 1, 5, 30, 0, 0, time.UTC), // 01:30 EDT
			time.Date(2026, 11, 2, 6, 30, 0, 0, time.UTC), // 01:30 EST the next day
		}},
		{"fixed time in the gap: that day an hour later", "30 2 * * *", time.Date(2026, 3, 8, 0, 0, 0, 0, ny), []time.Time{
			time.Date(2026, 3, 8, 7, 30, 0, 0, time.UTC), // 03:30 EDT: 02:30 by the clock before it jumped
			time.Date(2026, 3, 9, 6, 30, 0, 0, time.UTC),
		}},
		{"made in the repeated hour, due at a reading that passed", "45 1 * * *", time.Date(2026, 11, 1, 6, 30, 0, 0, time.UTC), []time.Time{
			time.Date(2026, 11, 2, 6, 45, 0, 0, time.UTC),
		}},
		{"made in the repeated hour, due later that day", "0 2 * * *", time.Date(2026, 11, 1, 6, 30, 0, 0, time.UTC), []time.Time{
			time.Date(2026, 11, 1, 7, 0, 0, 0, time.UTC),
		}},
		{"every minute of a fixed hour, from the repeated hour", "0-59 1 * * *", time.Date(2026, 11, 1, 6, 10, 0, 0, time.UTC), []time.Time{
			time.Date(2026, 11, 2, 6, 0, 0, 0, time.UTC),
			time.Date(2026, 11, 2, 6, 1, 0, 0, time.UTC),
		}},
		{"fixed time outside the change", "0 9 * * *", time.Date(2026, 10, 31, 12, 0, 0, 0, ny), []time.Time{
			time.Date(2026, 11, 1, 14, 0, 0, 0, time.UTC),
			time.Date(2026, 11, 2, 14, 0, 0, 0, time.UTC),
		}},
		{"hourly: both 01:00s", "0 * * * *", time.Date(2026, 11, 1, 0, 30, 0, 0, ny), []time.Time{
			time.Date(2026, 11, 1, 5, 0, 0, 0, time.UTC),
			time.Date(2026, 11, 1, 6, 0, 0, 0, time.UTC),
			time.Date(2026, 11, 1, 7, 0, 0, 0, time.UTC),
		}},
		{"every 30 minutes: real time", "*/30 1 * * *", time.Date(2026, 11, 1, 0, 50, 0, 0, ny), []time.Time{
			time.Date(2026, 11, 1, 5, 0, 0, 0, time.UTC),
			time.Date(2026, 11, 1, 5, 30, 0, 0, time.UTC),
			time.Date(2026, 11, 1, 6, 0, 0, 0, time.UTC),
			time.Date(2026, 11, 1, 6, 30, 0, 0, time.UTC),
			time.Date(2026, 11, 2, 6, 0, 0, 0, time.UTC),
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s, err := schedule.Parse(c.expr, c.from, ny)
			if err != nil {
				t.Fatal(err)
			}
			from := c.from
			for i, want := range c.want {
				got, ok := s.Next(from)
				if !ok || !got.Equal(want) {
					t.Fatalf("run %d after %s: got %s, want %s", i, from.In(ny), got.In(ny), want.In(ny))
				}
				from = got
			}
		})
	}
}

// A time zone change moves a cron expression's next run to the run that
// stands for it in the new zone: the first after the one the old zone's
// last run stood for, read on the new zone's calendar. A large westward
// move left one day of the new zone without its run (the old zone's date
// of the next run was kept: Tokyo's 09:00 of the 6th became 09:00 of the
// 6th in Los Angeles, whose 5th had none, Tokyo's 09:00 of the 5th being
// 16:00 of the 4th there); a large eastward one ran twice on one day.
// next is the old zone's next run and want the new zone's, each read on
// its own zone's clock.
func TestInZoneOf(t *testing.T) {
	cases := []struct {
		name, expr, from, to string
		next, want           string
	}{
		{"west far: Los Angeles's 5th keeps its run", "0 9 * * *", "Asia/Tokyo", "America/Los_Angeles",
			"2026-12-06 09:00", "2026-12-05 09:00"},
		{"west near: New York's 5th had its run at 04:00", "0 9 * * *", "UTC", "America/New_York",
			"2026-12-06 09:00", "2026-12-06 09:00"},
		{"east far: Tokyo's 5th had its run at 02:00, not again at 09:00", "0 9 * * *", "America/Los_Angeles", "Asia/Tokyo",
			"2026-12-05 09:00", "2026-12-06 09:00"},
		{"east near: Berlin's 5th had its run at 10:00", "0 9 * * *", "UTC", "Europe/Berlin",
			"2026-12-06 09:00", "2026-12-06 09:00"},
		{"east far, the last run late on the new zone's day", "0 9 * * *", "UTC", "Pacific/Kiritimati",
			"2026-12-06 09:00", "2026-12-06 09:00"},
		{"across midnight, west: 00:30 of the 5th in Los Angeles still runs", "30 0 * * *", "Asia/Tokyo", "America/Los_Angeles",
			"2026-12-06 00:30", "2026-12-05 00:30"},
		{"across midnight, east: Tokyo's 5th had its run at 13:30, not again at 23:30", "30 23 * * *", "America/New_York", "Asia/Tokyo",
			"2026-12-05 23:30", "2026-12-06 23:30"},
		{"weekly, west far: Tokyo's Monday ran on Los Angeles's Sunday", "0 9 * * 1", "Asia/Tokyo", "America/Los_Angeles",
			"2026-12-14 09:00", "2026-12-14 09:00"},
		{"weekly, east far: Los Angeles's Monday ran on Tokyo's Tuesday", "0 9 * * 1", "America/Los_Angeles", "Asia/Tokyo",
			"2026-12-14 09:00", "2026-12-14 09:00"},
		{"DST: New York's 8th springs forward over 02:30, its run that day an hour later", "30 2 * * *", "UTC", "America/New_York",
			"2026-03-09 02:30", "2026-03-08 03:30"},
		{"DST: the old zone's last run after it fell back", "0 9 * * *", "America/New_York", "Europe/London",
			"2026-11-02 09:00", "2026-11-02 09:00"},
		{"twice a day, west far: Los Angeles's 5th had one run (04:00), its 21:00 still runs", "0 9,21 * * *", "Asia/Tokyo", "America/Los_Angeles",
			"2026-12-06 09:00", "2026-12-05 21:00"},
		{"twice a day, west far, the old zone's morning next", "0 9,21 * * *", "Asia/Tokyo", "America/Los_Angeles",
			"2026-12-05 21:00", "2026-12-05 09:00"},
		{"twice a day, east far: Tokyo's 5th had its two runs (02:00, 14:00)", "0 9,21 * * *", "America/Los_Angeles", "Asia/Tokyo",
			"2026-12-05 09:00", "2026-12-06 09:00"},
		{"twice a day, west near: New York's 5th had its 21:00 at 16:00", "0 9,21 * * *", "UTC", "America/New_York",
			"2026-12-06 09:00", "2026-12-06 09:00"},
		{"twice a day, west far: Honolulu's 10th had one run (11:00), its 21:00 still runs", "0 9,21 * * *", "UTC", "Pacific/Honolulu",
			"2026-12-11 09:00", "2026-12-10 21:00"},
		{"hourly goes on from the last run", "0 * * * *", "UTC", "Asia/Kolkata",
			"2026-12-05 10:00", "2026-12-05 15:00"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			from, to := mustLoad(tc.from), mustLoad(tc.to)
			old, err := schedule.Load(schedule.Cron, tc.expr, from)
			if err != nil {
				t.Fatal(err)
			}
			s, err := schedule.Load(schedule.Cron, tc.expr, to)
			if err != nil {
				t.Fatal(err)
			}
			next, err := time.ParseInLocation("2006-01-02 15:04", tc.next, from)
			if err != nil {
				t.Fatal(err)
			}
			got := s.InZoneOf(old, next)
			if r := got.In(to).Format("2006-01-02 15:04"); r != tc.want {
				t.Fatalf("next run %s in %s, want %s (was %s in %s)", r, tc.to, tc.want, tc.next, tc.from)
			}
		})
	}
}
