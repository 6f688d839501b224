// Package schedule parses the schedules of cron jobs, in Hermes's
// formats, and computes their next runs:
//
//   - a one-shot delay: "30m", "2h", "1d", also "in 30m" (fires once);
//   - an interval: "every 30m", "every 2h", "every day" (recurring);
//   - days and a time of day: "every monday 9am", "every day at 9:30pm",
//     "weekdays at 9am", "mon, wed at noon" (recurring: the cron
//     expression of that time on those days);
//   - a five-field cron expression: "0 9 * * *", "*/15 * * * MON-FRI";
//   - an ISO timestamp: "2026-03-15T09:00:00" (fires once; without an
//     offset it is read in the scheduler's time zone).
//
// Cron expressions are parsed by github.com/robfig/cron/v3 and evaluated
// in the scheduler's time zone.
package schedule

import (
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	robfig "github.com/robfig/cron/v3"
)

// Kinds of schedules.
const (
	Once     = "once"
	Interval = "interval"
	Cron     = "cron"
)

// MaxLen bounds a schedule's text.
const MaxLen = 200

// OnceGrace is how late a one-shot may still fire (Hermes's
// ONESHOT_GRACE_SECONDS); a later one is retired without running.
const OnceGrace = 2 * time.Minute

// ErrInvalid marks a schedule that cannot be parsed.
var ErrInvalid = errors.New("invalid schedule")

// ErrNever marks (with ErrInvalid) a well-formed cron expression that
// never comes: a date no calendar has, such as February 30th.
var ErrNever = errors.New("never comes (no such date in the next five years)")

// Schedule is a parsed schedule.
type Schedule struct {
	// Kind is Once, Interval or Cron.
	Kind string
	// Expr is the canonical form, which Load reads back: an RFC 3339
	// instant, "every <n>m", or the five cron fields.
	Expr string
	// Display is what job lists show ("once in 30m", "every 120m",
	// "0 9 * * *", "once at 2026-03-15 09:00").
	Display string
	// At is a one-shot's instant.
	At time.Time
	// Every is an interval's period.
	Every time.Duration

	cron robfig.Schedule
	loc  *time.Location
}

var (
	durationRe = regexp.MustCompile(`^(\d*)\s*(m|min|mins|minute|minutes|h|hr|hrs|hour|hours|d|day|days)$`)
	cronField  = regexp.MustCompile(`^[A-Za-z0-9*\-,/]+$`)
	isoDate    = regexp.MustCompile(`^\d{4}-\d{2}-\d{2}`)
	cronParser = robfig.NewParser(robfig.Minute | robfig.Hour | robfig.Dom | robfig.Month | robfig.Dow)
)

// maxMinutes bounds a delay or an interval (about ten years).
const maxMinutes = 10 * 366 * 24 * 60

// duration parses "30m", "2h", "1d" into minutes; with bare, a unit
// alone ("hour", "day") is 1 of it. Only an interval takes a bare unit
// ("every day", as before): Hermes's parse_duration wants the digits,
// and a one-shot "day" (what /cron add reads of "day 7 stretch") is
// refused, not made a run in 24 hours.
func duration(s string, bare bool) (int, error) {
	m := durationRe.FindStringSubmatch(strings.ToLower(strings.TrimSpace(s)))
	if m == nil || m[1] == "" && !bare {
		return 0, fmt.Errorf("%w: %q is not a duration such as 30m, 2h or 1d", ErrInvalid, s)
	}
	n := 1
	if m[1] != "" {
		v, err := strconv.Atoi(m[1])
		if err != nil || v > maxMinutes {
			return 0, fmt.Errorf("%w: %q is too long", ErrInvalid, s)
		}
		n = v
	}
	switch m[2][0] {
	case 'h':
		n *= 60
	case 'd':
		n *= 24 * 60
	}
	if n <= 0 {
		return 0, fmt.Errorf("%w: %q is not a positive duration", ErrInvalid, s)
	}
	if n > maxMinutes {
		return 0, fmt.Errorf("%w: %q is too long", ErrInvalid, s)
	}
	return n, nil
}

// Parse reads a schedule typed by a user or the agent at now; naive
// timestamps and cron expressions are read in loc (nil: UTC).
func Parse(text string, now time.Time, loc *time.Location) (Schedule, error) {
	if loc == nil {
		loc = time.UTC
	}
	s := strings.TrimSpace(text)
	if s == "" {
		return Schedule{}, fmt.Errorf("%w: the schedule is empty", ErrInvalid)
	}
	if len(s) > MaxLen || !utf8.ValidString(s) {
		return Schedule{}, fmt.Errorf("%w: the schedule is not a short line of text", ErrInvalid)
	}
	lower := strings.ToLower(s)
	// A day and time phrase, with or without "every", is the cron
	// expression of that time on those days; any other "every" is an
	// interval.
	if expr, ok := naturalCron(strings.TrimPrefix(lower, "every ")); ok {
		c, err := cronExpr(expr, loc)
		if err != nil {
			return Schedule{}, err
		}
		c.Display = s
		return c, nil
	}
	if rest, ok := strings.CutPrefix(lower, "every "); ok {
		n, err := duration(rest, true)
		if err != nil {
			return Schedule{}, err
		}
		return interval(n, loc), nil
	}
	if rest, ok := strings.CutPrefix(lower, "in "); ok {
		n, err := duration(rest, false)
		if err != nil {
			return Schedule{}, err
		}
		return delay(n, strings.TrimSpace(s[3:]), now, loc), nil
	}
	if fields := strings.Fields(s); len(fields) == 5 && allCronFields(fields) {
		c, err := cronExpr(strings.Join(fields, " "), loc)
		if err != nil {
			return Schedule{}, err
		}
		// A date no calendar has (February 30th) parses but never comes:
		// such a job would be listed as scheduled for good, run nothing,
		// and count towards its owner's jobs.
		if c.cronNext(now).IsZero() {
			return Schedule{}, fmt.Errorf("%w: cron expression %q %w", ErrInvalid, c.Expr, ErrNever)
		}
		return c, nil
	}
	if strings.Contains(s, "T") || isoDate.MatchString(s) {
		at, err := timestamp(s, loc)
		if err != nil {
			return Schedule{}, err
		}
		if at.Before(now.Add(-OnceGrace)) {
			return Schedule{}, fmt.Errorf("%w: %s is in the past", ErrInvalid, at.In(loc).Format(time.RFC3339))
		}
		return once(at, loc), nil
	}
	if n, err := duration(s, false); err == nil {
		return delay(n, s, now, loc), nil
	}
	return Schedule{}, fmt.Errorf("%w: %q. Use:\n"+
		"  - One-shot delay: '30m', '2h', '1d' (fires once)\n"+
		"  - Interval: 'every 30m', 'every 2h' (recurring)\n"+
		"  - Weekly/daily: 'every monday 9am', 'weekdays at 9am' (recurring)\n"+
		"  - Cron: '0 9 * * *' (cron expression)\n"+
		"  - Timestamp: '2026-02-03T14:00:00' (one-shot at time)", ErrInvalid, s)
}

// Load reads back a stored schedule (Kind and Expr).
func Load(kind, expr string, loc *time.Location) (Schedule, error) {
	if loc == nil {
		loc = time.UTC
	}
	switch kind {
	case Once:
		at, err := time.Parse(time.RFC3339Nano, expr)
		if err != nil {
			return Schedule{}, fmt.Errorf("%w: stored instant %q: %v", ErrInvalid, expr, err)
		}
		return once(at, loc), nil
	case Interval:
		rest, ok := strings.CutPrefix(expr, "every ")
		if !ok {
			return Schedule{}, fmt.Errorf("%w: stored interval %q", ErrInvalid, expr)
		}
		n, err := duration(rest, true)
		if err != nil {
			return Schedule{}, err
		}
		return interval(n, loc), nil
	case Cron:
		return cronExpr(expr, loc)
	}
	return Schedule{}, fmt.Errorf("%w: unknown kind %q", ErrInvalid, kind)
}

// The days of Hermes's day and time phrases, as cron's days of the week
// (0 is Sunday): a weekday's name, or a keyword for several.
var (
	weekdayDow = map[string]string{
		"sunday": "0", "sun": "0", "monday": "1", "mon": "1", "tuesday": "2", "tue": "2", "tues": "2",
		"wednesday": "3", "wed": "3", "weds": "3", "thursday": "4", "thu": "4", "thur": "4", "thurs": "4",
		"friday": "5", "fri": "5", "saturday": "6", "sat": "6",
	}
	daySpecDow = map[string]string{
		"day": "*", "daily": "*", "everyday": "*", "weekday": "1-5", "weekdays": "1-5", "weekend": "0,6", "weekends": "0,6",
	}
	clockRe = regexp.MustCompile(`^(\d{1,2})(?::(\d{2}))?(am|pm)?$`)
)

// naturalCron reads a day and time phrase, lower case and without its
// "every" (Hermes's _natural_every_to_cron): days ("monday", "mon, wed",
// "monday and friday", "weekdays", "weekend", "day", "daily"), then an
// optional "at", then a time of day ("9am", "9:30pm", "14:00", "7",
// "noon", "midnight"), as a five-field cron expression. False: not such
// a phrase ("30m", "day" without a time, "0 9 * * *").
func naturalCron(rest string) (string, bool) {
	tokens := strings.Fields(strings.ReplaceAll(rest, ",", " "))
	if len(tokens) == 0 {
		return "", false
	}
	dow, isSpec := daySpecDow[tokens[0]]
	idx := 1
	if !isSpec {
		var days []string
		idx = len(tokens)
		for i, tok := range tokens {
			if tok == "and" {
				continue
			}
			d, ok := weekdayDow[tok]
			if !ok {
				idx = i
				break
			}
			if !slices.Contains(days, d) {
				days = append(days, d)
			}
		}
		if len(days) == 0 {
			return "", false
		}
		dow = strings.Join(days, ",")
	}
	clock := tokens[idx:]
	if len(clock) > 0 && clock[0] == "at" {
		clock = clock[1:]
	}
	hour, minute, ok := clockTime(strings.Join(clock, ""))
	if !ok {
		return "", false
	}
	return fmt.Sprintf("%d %d * * %s", minute, hour, dow), true
}

// clockTime reads "9am", "9:30pm", "14:00", "7" (an hour of 24),
// "noon", "midday" or "midnight" as an hour and minute of 24 hours.
func clockTime(t string) (hour, minute int, ok bool) {
	switch t {
	case "noon", "midday":
		return 12, 0, true
	case "midnight":
		return 0, 0, true
	}
	m := clockRe.FindStringSubmatch(t)
	if m == nil {
		return 0, 0, false
	}
	hour, _ = strconv.Atoi(m[1])
	if m[2] != "" {
		minute, _ = strconv.Atoi(m[2])
	}
	if m[3] != "" {
		if hour < 1 || hour > 12 {
			return 0, 0, false
		}
		hour %= 12
		if m[3] == "pm" {
			hour += 12
		}
	}
	if hour > 23 || minute > 59 {
		return 0, 0, false
	}
	return hour, minute, true
}

func allCronFields(fields []string) bool {
	for _, f := range fields {
		if !cronField.MatchString(f) {
			return false
		}
	}
	return true
}

func interval(minutes int, loc *time.Location) Schedule {
	return Schedule{Kind: Interval, Expr: fmt.Sprintf("every %dm", minutes), Display: fmt.Sprintf("every %dm", minutes),
		Every: time.Duration(minutes) * time.Minute, loc: loc}
}

func delay(minutes int, typed string, now time.Time, loc *time.Location) Schedule {
	at := now.Add(time.Duration(minutes) * time.Minute)
	s := once(at, loc)
	s.Display = "once in " + typed
	return s
}

func once(at time.Time, loc *time.Location) Schedule {
	return Schedule{Kind: Once, Expr: at.UTC().Format(time.RFC3339Nano),
		Display: "once at " + at.In(loc).Format("2006-01-02 15:04"), At: at, loc: loc}
}

func cronExpr(expr string, loc *time.Location) (Schedule, error) {
	c, err := cronParser.Parse(sundaySeven(expr))
	if err != nil {
		return Schedule{}, fmt.Errorf("%w: cron expression %q: %v", ErrInvalid, expr, err)
	}
	return Schedule{Kind: Cron, Expr: expr, Display: expr, cron: c, loc: loc}, nil
}

// sundaySeven writes a day of the week 7 as 0: Sunday is either in cron
// (and in croniter, which Hermes's schedules go through), but the parser
// here takes 0-6 only. An item that names 7 ("7", "5-7", "1-7/2") becomes
// the list of its days; the rest of the expression is left as written.
func sundaySeven(expr string) string {
	f := strings.Fields(expr)
	if len(f) != 5 {
		return expr
	}
	items := strings.Split(f[4], ",")
	for i, item := range items {
		items[i] = daysOf(item)
	}
	f[4] = strings.Join(items, ",")
	return strings.Join(f, " ")
}

// daysOf lists the days of one numeric day-of-week item that reaches 7,
// with 7 as 0; any other item is returned as it is.
func daysOf(item string) string {
	rng, stepText, stepped := strings.Cut(item, "/")
	step := 1
	if stepped {
		n, err := strconv.Atoi(stepText)
		if err != nil || n <= 0 {
			return item
		}
		step = n
	}
	lo, hi, isRange := strings.Cut(rng, "-")
	a, errA := strconv.Atoi(lo)
	b := a
	var errB error
	switch {
	case isRange:
		b, errB = strconv.Atoi(hi)
	case stepped:
		b = 7 // "n/step": from n to the last day
	}
	if errA != nil || errB != nil || b != 7 || a < 0 || a > b {
		return item
	}
	var days []string
	for d := a; d <= b; d += step {
		days = append(days, strconv.Itoa(d%7))
	}
	return strings.Join(days, ",")
}

var timestampLayouts = []string{
	"2006-01-02T15:04:05", "2006-01-02T15:04", "2006-01-02 15:04:05", "2006-01-02 15:04", "2006-01-02",
}

func timestamp(s string, loc *time.Location) (time.Time, error) {
	norm := strings.Replace(s, "z", "Z", 1)
	if t, err := time.Parse(time.RFC3339Nano, norm); err == nil {
		return t, nil
	}
	for _, layout := range timestampLayouts {
		if t, err := time.ParseInLocation(layout, s, loc); err == nil {
			return t, nil
		}
	}
	return time.Time{}, fmt.Errorf("%w: invalid timestamp %q: use 2026-03-15T09:00:00, with an offset or Z if not local", ErrInvalid, s)
}

// First is the first run of a schedule parsed or loaded at now.
func (s Schedule) First(now time.Time) time.Time {
	switch s.Kind {
	case Once:
		return s.At
	case Interval:
		return now.Add(s.Every)
	}
	return s.cronNext(now)
}

// Next is the run after a run at (or a late run of) the instant from,
// or false when there is none: a one-shot has no next run; an interval
// counts from from (Hermes anchors on the last run); a cron expression
// gives its first occurrence strictly after from.
func (s Schedule) Next(from time.Time) (time.Time, bool) {
	switch s.Kind {
	case Once:
		return time.Time{}, false
	case Interval:
		return from.Add(s.Every), true
	}
	t := s.cronNext(from)
	return t, !t.IsZero()
}

func (s Schedule) cronNext(from time.Time) time.Time {
	if s.cron == nil {
		return time.Time{}
	}
	loc := s.loc
	if loc == nil {
		loc = time.UTC
	}
	if !s.fixedTime() {
		return s.cron.Next(from.In(loc))
	}
	// A job at a fixed time of day follows the wall clock, as cron does
	// across daylight saving changes: evaluated on the clock's readings
	// (as if UTC), its time runs once on the day the clock falls back
	// (at the first of the two instants that read so) and, on the day
	// it springs forward over that time, at that reading of the clock
	// before the jump, rather than twice or not at all.
	wall := func(t time.Time) time.Time {
		return time.Date(t.Year(), t.Month(), t.Day(), t.Hour(), t.Minute(), t.Second(), t.Nanosecond(), time.UTC)
	}
	w := wall(from.In(loc))
	// An instant that reads n twice is taken the first time; the first,
	// before from (which is in the repeated hour), means that reading
	// passed: the next one. At most an hour or two of readings repeat.
	for range 24 * 60 {
		n := s.cron.Next(w)
		if n.IsZero() {
			return n
		}
		t := time.Date(n.Year(), n.Month(), n.Day(), n.Hour(), n.Minute(), 0, 0, loc)
		if !wall(t).Equal(n) {
			// The clock jumped over n: read it with the offset before.
			t = n.Add(-time.Duration(zoneOffset(t.Add(-12*time.Hour))) * time.Second)
		}
		if t.After(from) {
			return t
		}
		w = n
	}
	return time.Time{}
}

// InZoneOf is the run of s, a cron expression in its zone, that stands
// for next, a run of old, the same expression in another zone (the time
// zone changed): so that no run is made twice and no day of the new
// zone goes without its runs. A job at set times of the day (fixedTime)
// keeps the wall clock's reading: each of old's runs stood for the run
// at its reading of old's clock on its date in s's zone (standsFor), so
// 09:00 in UTC becomes 09:00 in New York from the next day on, not
// 05:00. The date is the new zone's: Tokyo's 09:00 of the 5th is 16:00
// of the 4th in Los Angeles, whose 09:00 of the 5th is still to run (the
// old zone's date skipped it). The day of s that old's last run before
// next (made, or passed, in the old zone) stood for keeps as many runs
// as s has that day: the ones old's runs stood for count, and the rest
// are the last of the day's runs still to come. With two runs a day,
// UTC's 21:00 of the 10th (11:00 in Honolulu) stood for Honolulu's 21:00
// and nothing for its 09:00 (passed before the change): the 10th there
// still runs at 21:00, where going on after the run stood for left it
// one run. Then s goes on from the next day. Any other expression
// (every 15 minutes, every hour) goes on from that last run. Zero: s
// has no run then.
func (s Schedule) InZoneOf(old Schedule, next time.Time) time.Time {
	if s.Kind != Cron || old.Kind != Cron {
		return next
	}
	last := old.prev(next)
	if last.IsZero() {
		return s.cronNext(next.Add(-time.Second))
	}
	if !s.fixedTime() {
		return s.cronNext(last)
	}
	stood := s.standsFor(old, last)
	if stood.IsZero() {
		return s.cronNext(last)
	}
	day := s.runsOnDayOf(stood)
	left := len(day) - s.stoodForOnDayOf(old, last, stood, len(day))
	var ahead []time.Time
	for _, r := range day {
		if r.After(last) {
			ahead = append(ahead, r)
		}
	}
	if left > 0 && len(ahead) > 0 {
		return ahead[len(ahead)-min(left, len(ahead))]
	}
	// Runs of s before last that no run of old stood for were passed in
	// the old zone: none is made late for them.
	from := day[len(day)-1]
	if last.After(from) {
		from = last
	}
	return s.cronNext(from)
}

// runsOnDayOf are the runs of s on t's date in s's zone, in order (at
// most maxRunsADay of them).
func (s Schedule) runsOnDayOf(t time.Time) []time.Time {
	d := t.In(s.location())
	start := time.Date(d.Year(), d.Month(), d.Day(), 0, 0, 0, 0, s.location())
	end := time.Date(d.Year(), d.Month(), d.Day()+1, 0, 0, 0, 0, s.location())
	var out []time.Time
	for r := s.cronNext(start.Add(-time.Second)); !r.IsZero() && r.Before(end) && len(out) < maxRunsADay; r = s.cronNext(r) {
		out = append(out, r)
	}
	return out
}

// maxRunsADay bounds the runs of a day InZoneOf reads: every minute of
// the day, the most a fixed-time expression has.
const maxRunsADay = 24 * 60

// stoodForOnDayOf is how many of old's runs up to last stood for a run
// on stood's date in s's zone (stood is last's): the runs before last
// are read back while they do, at most limit of them and none more than
// two days before last (a run stands for one on its date, or the
// nearest).
func (s Schedule) stoodForOnDayOf(old Schedule, last, stood time.Time, limit int) int {
	sameDay := func(a, b time.Time) bool {
		a, b = a.In(s.location()), b.In(s.location())
		return a.Year() == b.Year() && a.YearDay() == b.YearDay()
	}
	n := 0
	for r := last; !r.IsZero() && n < limit && last.Sub(r) <= 48*time.Hour; r = old.prev(r) {
		if !sameDay(s.standsFor(old, r), stood) {
			break
		}
		n++
	}
	return n
}

// standsFor is the run of s that last, a run of old (the same expression
// at set times of the day, in another zone), stood for: s's run at last's
// reading of old's clock on last's date in s's zone, or, when s has no
// run then (a weekday or a day of the month that date is not), s's run
// nearest to that reading (the earlier of two as near).
func (s Schedule) standsFor(old Schedule, last time.Time) time.Time {
	r, d := last.In(old.location()), last.In(s.location())
	t := time.Date(d.Year(), d.Month(), d.Day(), r.Hour(), r.Minute(), 0, 0, s.location())
	before, after := s.prev(t.Add(time.Second)), s.cronNext(t)
	if !after.IsZero() && (before.IsZero() || after.Sub(t) < t.Sub(before)) {
		return after
	}
	return before
}

// location is s's zone, UTC when it has none.
func (s Schedule) location() *time.Location {
	if s.loc == nil {
		return time.UTC
	}
	return s.loc
}

// prev is the last run of s before t (zero: none in the five years
// before). Windows growing from minutes to years keep the scan short:
// the first that holds a run is walked, and the one before held none.
func (s Schedule) prev(t time.Time) time.Time {
	for _, w := range []time.Duration{2 * time.Minute, time.Hour, 25 * time.Hour, 8 * 24 * time.Hour,
		32 * 24 * time.Hour, 367 * 24 * time.Hour, 5 * 366 * 24 * time.Hour} {
		var last time.Time
		for n := s.cronNext(t.Add(-w)); !n.IsZero() && n.Before(t); n = s.cronNext(n) {
			last = n
		}
		if !last.IsZero() {
			return last
		}
	}
	return time.Time{}
}

func zoneOffset(t time.Time) int {
	_, off := t.Zone()
	return off
}

// fixedTime: neither the minute nor the hour field is a wildcard ("*",
// "*/15"): the job runs at set times of the day (cron's distinction for
// daylight saving changes).
func (s Schedule) fixedTime() bool {
	f := strings.Fields(s.Expr)
	return len(f) == 5 && !strings.HasPrefix(f[0], "*") && !strings.HasPrefix(f[1], "*")
}

// Period is the schedule's cadence near now (the gap between its next
// two runs); 0 for a one-shot.
func (s Schedule) Period(now time.Time) time.Duration {
	switch s.Kind {
	case Interval:
		return s.Every
	case Cron:
		a := s.cronNext(now)
		if a.IsZero() {
			return 0
		}
		b := s.cronNext(a)
		if b.IsZero() {
			return 0
		}
		return b.Sub(a)
	}
	return 0
}

// Grace is how late a recurring run may be and still count as on time
// (Hermes: half the period, clamped to [2 minutes, 2 hours]); beyond it
// a run is a catch-up after downtime. One-shots have OnceGrace.
func (s Schedule) Grace(now time.Time) time.Duration {
	if s.Kind == Once {
		return OnceGrace
	}
	return min(max(s.Period(now)/2, 2*time.Minute), 2*time.Hour)
}

// DefaultRepeat is how many times the schedule runs when the job does
// not say: once for a one-shot, 0 (forever) for the others.
func (s Schedule) DefaultRepeat() int {
	if s.Kind == Once {
		return 1
	}
	return 0
}
