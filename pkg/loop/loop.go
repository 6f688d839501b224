// Package loop is Hermes's recurring in-session prompts: /loop
// (hermes_cli/loops.py), a prompt re-run on an interval with optional
// run count and judged stop condition, and /heartbeat
// (hermes_cli/heartbeat.py), a prompt that re-enters the session when it
// is idle and its interval has elapsed. It parses the commands' words,
// renders Hermes's texts and prompts, and decides what a finished
// wakeup does to a loop. It does no I/O: the router keeps the state
// (sessionstore) and fires it, the worker evaluates a wakeup's answer.
package loop

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"math"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// Kinds: one of each per session key.
const (
	KindLoop      = "loop"
	KindHeartbeat = "heartbeat"
)

// Statuses, Hermes's.
const (
	Active  = "active"
	Paused  = "paused"
	Done    = "done"
	Cleared = "cleared"
)

// Hermes's defaults.
const (
	// DefaultMinInterval is the floor of a loop's fixed interval
	// (loops.min_interval_seconds; router.loop_min_interval here).
	DefaultMinInterval = 30 * time.Second
	// MinIntervalFloor is the least a configured floor may be.
	MinIntervalFloor = 5 * time.Second
	// DefaultMaxTicks is a loop's backstop budget (loops.max_ticks;
	// router.loop_max_ticks here; 0 unlimited).
	DefaultMaxTicks = 100
	// SelfPacedFloor and SelfPacedCeiling bound a self-paced loop's
	// delay: it starts at the floor, doubles while the answers do not
	// change, and snaps back on a change.
	SelfPacedFloor   = 60 * time.Second
	SelfPacedCeiling = 15 * time.Minute
	// HeartbeatMinInterval is a heartbeat's floor.
	HeartbeatMinInterval = 60 * time.Second
	// MaxInterval bounds any interval (not Hermes's: a bound keeps the
	// arithmetic on times sane).
	MaxInterval = 366 * 24 * time.Hour
)

// CompleteMarker ends a loop when the agent ends a wakeup's answer with
// it on its own line.
const CompleteMarker = "LOOP_COMPLETE"

var completeRE = regexp.MustCompile(`(?im)^\s*` + CompleteMarker + `\s*[.!]?\s*$`)

// SignalsComplete reports whether response carries CompleteMarker on a
// line of its own.
func SignalsComplete(response string) bool { return completeRE.MatchString(response) }

var tokenRE = regexp.MustCompile(`(?i)^(?:(\d{1,9})h)?(?:(\d{1,9})m)?(?:(\d{1,9})s)?$`)

// ParseIntervalToken reads a loop interval token: 30s, 5m, 2h, 1h30m.
// A bare number is no interval (it would eat prompt text like "3
// things").
func ParseIntervalToken(tok string) (time.Duration, bool) {
	tok = strings.TrimSpace(tok)
	if tok == "" || tok[0] < '0' || tok[0] > '9' {
		return 0, false
	}
	m := tokenRE.FindStringSubmatch(tok)
	if m == nil {
		return 0, false
	}
	var total int64
	for i, unit := range []int64{3600, 60, 1} {
		if m[i+1] == "" {
			continue
		}
		n, _ := strconv.ParseInt(m[i+1], 10, 64)
		total += n * unit
	}
	if total <= 0 || total > int64(MaxInterval/time.Second) {
		return 0, false
	}
	return time.Duration(total) * time.Second, true
}

// Spec is a parsed /loop [interval] <prompt> [--times N] [--until ...].
type Spec struct {
	// Interval is the fixed cadence; 0 is self-paced.
	Interval time.Duration
	Prompt   string
	Times    int
	Until    string
	// Problem is Hermes's answer to unusable input ("" none).
	Problem string
}

var (
	timesRE = regexp.MustCompile(`\s--times\s+(\S+)`)
	untilRE = regexp.MustCompile(`(?s)\s--until\s+(.+)$`)
)

// Usage is the answer to /loop with a bad or empty spec.
const Usage = "Usage: /loop [interval] <prompt> — see /loop help."

// ParseSpec parses a new loop's words as Hermes's parse_loop_args.
func ParseSpec(text string) Spec {
	raw := strings.TrimSpace(text)
	if raw == "" {
		return Spec{Problem: Usage}
	}
	var s Spec
	if m := timesRE.FindStringSubmatchIndex(raw); m != nil {
		word := raw[m[2]:m[3]]
		n, err := strconv.Atoi(word)
		if err != nil || n < 1 {
			return Spec{Problem: fmt.Sprintf("/loop: --times expects a positive integer, got %s", pyRepr(word))}
		}
		s.Times = n
		raw = strings.TrimSpace(raw[:m[0]] + raw[m[1]:])
	}
	if m := untilRE.FindStringSubmatchIndex(raw); m != nil {
		s.Until = strings.TrimSpace(raw[m[2]:m[3]])
		raw = strings.TrimSpace(raw[:m[0]])
	}
	first, rest := splitWord(raw)
	if strings.EqualFold(first, "every") && rest != "" {
		raw = rest
		first, rest = splitWord(raw)
	}
	if d, ok := ParseIntervalToken(first); ok {
		s.Interval = d
		raw = rest
	}
	if raw == "" {
		return Spec{Problem: "/loop: missing prompt (usage: /loop [interval] <prompt>)"}
	}
	s.Prompt = raw
	return s
}

// splitWord cuts text at its first run of white space.
func splitWord(text string) (first, rest string) {
	text = strings.TrimSpace(text)
	i := strings.IndexFunc(text, isSpace)
	if i < 0 {
		return text, ""
	}
	return text[:i], strings.TrimSpace(text[i:])
}

func isSpace(r rune) bool {
	return r == ' ' || r == '\t' || r == '\n' || r == '\r' || r == '\v' || r == '\f'
}

// pyRepr quotes s as Python's repr of a str does for plain text.
func pyRepr(s string) string {
	if strings.Contains(s, "'") && !strings.Contains(s, `"`) {
		return `"` + s + `"`
	}
	return "'" + strings.ReplaceAll(s, "'", `\'`) + "'"
}

// Control is a /loop or /heartbeat control word's action ("" none: the
// words are a new spec).
func Control(kind, args string) string {
	w := strings.ToLower(strings.TrimSpace(args))
	switch w {
	case "", "status":
		return "status"
	case "pause", "resume":
		return w
	}
	if kind == KindLoop {
		switch w {
		case "stop", "clear", "cancel":
			return "stop"
		case "help", "--help", "-h":
			return "help"
		}
		return ""
	}
	switch w {
	case "clear", "stop", "off":
		return "stop"
	}
	return ""
}

// FormatInterval renders d as a loop's compact interval (90s → 1m30s).
func FormatInterval(d time.Duration) string {
	secs := int64(math.Round(max(0, d.Seconds())))
	h, rem := secs/3600, secs%3600
	m, s := rem/60, rem%60
	var b strings.Builder
	if h > 0 {
		fmt.Fprintf(&b, "%dh", h)
	}
	if m > 0 {
		fmt.Fprintf(&b, "%dm", m)
	}
	if s > 0 || b.Len() == 0 {
		fmt.Fprintf(&b, "%ds", s)
	}
	return b.String()
}

// FormatHeartbeatInterval renders d as a heartbeat's interval (600s →
// 10m; in the largest whole unit, else seconds).
func FormatHeartbeatInterval(d time.Duration) string {
	secs := int64(d / time.Second)
	for _, u := range []struct {
		n      int64
		suffix string
	}{{86400, "d"}, {3600, "h"}, {60, "m"}} {
		if secs%u.n == 0 && secs > 0 {
			return fmt.Sprintf("%d%s", secs/u.n, u.suffix)
		}
	}
	return fmt.Sprintf("%ds", secs)
}

var heartbeatIntervalRE = regexp.MustCompile(`(?i)^\s*(?:every\s+)?(\d{1,9}(?:\.\d{1,9})?)\s*(s|sec|secs|seconds?|m|min|mins|minutes?|h|hr|hrs|hours?|d|days?)\s*$`)

// ParseHeartbeatInterval reads 10m, every 2h, every 90 minutes; ok
// false when it is no interval.
func ParseHeartbeatInterval(text string) (d time.Duration, ok bool) {
	m := heartbeatIntervalRE.FindStringSubmatch(text)
	if m == nil {
		return 0, false
	}
	n, err := strconv.ParseFloat(m[1], 64)
	if err != nil {
		return 0, false
	}
	unit := 1.0
	switch u := strings.ToLower(m[2]); {
	case strings.HasPrefix(u, "s"):
	case strings.HasPrefix(u, "m"):
		unit = 60
	case strings.HasPrefix(u, "h"):
		unit = 3600
	case strings.HasPrefix(u, "d"):
		unit = 86400
	}
	secs := math.Floor(n * unit)
	if secs > MaxInterval.Seconds() {
		return 0, false
	}
	return time.Duration(secs) * time.Second, true
}

// HeartbeatUsage is /heartbeat's usage.
const HeartbeatUsage = "Usage: /heartbeat every <interval> <prompt>  (e.g. /heartbeat every 10m Check CI)\nAlso: /heartbeat status | pause | resume | clear"

// ParseHeartbeat parses /heartbeat [every] <interval> <prompt>: the
// interval and prompt, or Hermes's answer to unusable words.
func ParseHeartbeat(args string) (time.Duration, string, string) {
	tok0, rest := splitWord(args)
	var d time.Duration
	var ok bool
	if strings.EqualFold(tok0, "every") {
		var tok1 string
		tok1, rest = splitWord(rest)
		d, ok = ParseHeartbeatInterval("every " + tok1)
	} else {
		d, ok = ParseHeartbeatInterval(tok0)
	}
	if !ok {
		return 0, "", HeartbeatUsage
	}
	if d < HeartbeatMinInterval {
		return 0, "", fmt.Sprintf("Interval too small — minimum is %ds.", int(HeartbeatMinInterval.Seconds()))
	}
	if rest == "" {
		return 0, "", "Usage: /heartbeat every <interval> <prompt> — the prompt is required."
	}
	return d, rest, ""
}

// State is a session's loop or heartbeat.
type State struct {
	Kind   string
	ID     string
	Prompt string
	Status string
	// Interval is a loop's fixed cadence (0 self-paced) or the
	// heartbeat's.
	Interval time.Duration
	// Delay is the cadence now (a self-paced loop's backoff).
	Delay          time.Duration
	Times          int
	Until          string
	MaxTicks       int
	Ticks          int
	NextDue        time.Time
	LastFired      time.Time
	PausedReason   string
	LastStopReason string
	LastDigest     string
}

// Has reports whether there is a loop or heartbeat to show or change.
func (s *State) Has() bool { return s != nil && (s.Status == Active || s.Status == Paused) }

// SelfPaced reports whether the loop has no fixed interval.
func (s *State) SelfPaced() bool { return s.Kind == KindLoop && s.Interval == 0 }

// Cadence is Hermes's cadence label.
func (s *State) Cadence() string {
	if s.SelfPaced() {
		if s.Delay > 0 {
			return "self-paced, currently " + FormatInterval(s.Delay)
		}
		return "self-paced"
	}
	return "every " + FormatInterval(s.Interval)
}

func ticks(n int) string {
	if n == 1 {
		return "1 tick"
	}
	return fmt.Sprintf("%d ticks", n)
}

func dash(reason string) string {
	if reason == "" {
		return ""
	}
	return " — " + reason
}

// NoLoop is Hermes's status without a loop.
const NoLoop = "No loop set. Start one with /loop [interval] <prompt>."

// NoHeartbeat is Hermes's status without a heartbeat.
const NoHeartbeat = "No heartbeat. Set one with /heartbeat every <interval> <prompt>."

// StatusLine is Hermes's one-line view of a loop at now.
func (s *State) StatusLine(now time.Time) string {
	if s == nil || s.Status == Cleared {
		return NoLoop
	}
	var caps []string
	switch {
	case s.Times > 0:
		caps = append(caps, fmt.Sprintf("%d/%d runs", s.Ticks, s.Times))
	case s.MaxTicks > 0:
		caps = append(caps, fmt.Sprintf("%d/%d budget", s.Ticks, s.MaxTicks))
	default:
		caps = append(caps, ticks(s.Ticks))
	}
	if s.Until != "" {
		caps = append(caps, "until: "+s.Until)
	}
	meta := s.Cadence() + ", " + strings.Join(caps, ", ")
	switch s.Status {
	case Active:
		tail := ""
		if r := s.Remaining(now); r != "" {
			tail = ", " + r
		}
		return fmt.Sprintf("↻ Loop (active, %s%s): %s", meta, tail, s.Prompt)
	case Paused:
		return fmt.Sprintf("⏸ Loop (paused, %s%s): %s", meta, dash(s.PausedReason), s.Prompt)
	case Done:
		return fmt.Sprintf("✓ Loop finished (%s%s): %s", ticks(s.Ticks), dash(s.LastStopReason), s.Prompt)
	}
	return fmt.Sprintf("Loop (%s, %s): %s", s.Status, meta, s.Prompt)
}

// Remaining is "due now" or "next in <interval>" for an active loop.
func (s *State) Remaining(now time.Time) string {
	if s.Status != Active {
		return ""
	}
	left := s.NextDue.Sub(now)
	if left <= 0 {
		return "due now"
	}
	return "next in " + FormatInterval(left)
}

// HeartbeatStatusLine is Hermes's one-line view of a heartbeat at now.
func (s *State) HeartbeatStatusLine(now time.Time) string {
	if s == nil || s.Status == Cleared {
		return NoHeartbeat
	}
	every := FormatHeartbeatInterval(s.Interval)
	fired := ""
	if s.Ticks > 0 {
		fired = fmt.Sprintf(", fired %d×", s.Ticks)
	}
	if s.Status == Active {
		next := max(0, int(s.NextDue.Sub(now)/time.Second))
		return fmt.Sprintf("♥ Heartbeat (every %s, next in ~%ds%s): %s", every, next, fired, s.Prompt)
	}
	icon := ""
	if s.Status == Paused {
		icon = "⏸ "
	}
	return fmt.Sprintf("%sHeartbeat (%s, every %s%s): %s", icon, s.Status, every, fired, s.Prompt)
}

// Help is Hermes's /loop help, but for its line about looping a slash
// command (see WakeupPrompt).
const Help = "Usage: /loop [interval] <prompt> [--times N] [--until <condition>]\n" +
	"  /loop 5m check the deploy status      — first run now, then every 5m\n" +
	"  /loop every 10m check the inbox       — the same, with every\n" +
	"  /loop keep fixing tests until green   — self-paced (backs off while output is unchanged)\n" +
	"  /loop 2m poll CI --times 30           — stop after 30 runs\n" +
	"  /loop 5m watch the queue --until queue is empty\n" +
	"Controls: /loop status · /loop pause · /loop resume · /loop stop\n" +
	"The loop also stops itself when the agent replies with " + CompleteMarker + "."

// SetText is Hermes's answer to a new loop: s as set, asked as spec,
// replacing whether it replaced one.
func SetText(s State, spec Spec, replacing bool) string {
	lines := []string{fmt.Sprintf("↻ Loop set (%s): %s", s.Cadence(), s.Prompt)}
	if replacing {
		lines = append(lines, "(replaced the previous loop for this session)")
	}
	if spec.Interval > 0 && spec.Interval < s.Interval {
		lines = append(lines, fmt.Sprintf("(interval raised to the %s minimum — router.loop_min_interval)", FormatInterval(s.Interval)))
	}
	if s.SelfPaced() {
		lines = append(lines, fmt.Sprintf("Self-paced: first check in %s; backs off up to %s while nothing changes.",
			FormatInterval(s.Delay), FormatInterval(SelfPacedCeiling)))
	}
	if s.Times > 0 {
		plural := "s"
		if s.Times == 1 {
			plural = ""
		}
		lines = append(lines, fmt.Sprintf("Runs %d time%s, then stops.", s.Times, plural))
	}
	if s.Until != "" {
		lines = append(lines, "Stops when: "+s.Until)
	}
	if s.Times == 0 && s.MaxTicks > 0 {
		lines = append(lines, fmt.Sprintf("Backstop budget: %d ticks (router.loop_max_ticks; 0 = unlimited).", s.MaxTicks))
	}
	lines = append(lines, "First wakeup fires now, then on the cadence above. Controls: /loop status · pause · resume · stop.")
	return strings.Join(lines, "\n")
}

// HeartbeatSetText is the answer to a new heartbeat.
func HeartbeatSetText(s State) string {
	return fmt.Sprintf("♥ Heartbeat set (every %s): %s\nFires as a normal turn whenever this session is idle and the interval has elapsed.",
		FormatHeartbeatInterval(s.Interval), s.Prompt)
}

// WakeupPrompt is the message a loop's tick runs as: Hermes's wakeup
// frame. Hermes injects a prompt that is a slash command as the command
// itself; here a wakeup is queued as a turn's input, which no command
// handler reads, so every prompt is framed (the agent reads it).
func (s *State) WakeupPrompt() string {
	cadence := ", self-paced"
	if !s.SelfPaced() {
		cadence = ", " + s.Cadence()
	}
	head := fmt.Sprintf("[/loop wakeup #%d%s]\nRecurring task: %s\n\n", s.Ticks, cadence, s.Prompt)
	const fresh = "This is an automatic wakeup from the /loop the user set. Perform the " +
		"task now against the CURRENT state (re-check files, processes, or " +
		"services fresh — do not assume anything from earlier iterations still " +
		"holds). Report concisely what you found or did this iteration"
	if s.Until == "" {
		return head + fresh + ".\n" +
			"If the task is now complete, no longer applicable, or the thing you " +
			"were watching has finished, say so and end your reply with " +
			CompleteMarker + " on its own line — that stops the loop."
	}
	return head + "Stop condition: " + s.Until + "\n\n" + fresh + ", and " +
		"show concrete evidence of the stop condition's status.\n" +
		"If the stop condition is met, or the task is no longer applicable, say " +
		"so and end your reply with " + CompleteMarker + " on its own line — " +
		"that stops the loop."
}

// HeartbeatPrompt is the message a heartbeat fires as.
func (s *State) HeartbeatPrompt() string {
	return fmt.Sprintf("[Heartbeat — recurring instruction, fires every %s]\n%s\n\n"+
		"If there is nothing meaningful to do or report for this instruction "+
		"right now, reply briefly that nothing has changed and stop — do not invent work.",
		FormatHeartbeatInterval(s.Interval), s.Prompt)
}

// Fire is a due tick claimed at now: the state after it and the
// message to queue.
func Fire(s State, now time.Time) (State, string) {
	s.Ticks++
	s.LastFired = now
	if s.Kind == KindHeartbeat {
		// Missed ticks coalesce: the anchor is now.
		s.NextDue = now.Add(s.Interval)
		return s, s.HeartbeatPrompt()
	}
	// Provisional: the tick's completion schedules from the turn's end;
	// a turn that never completes leaves this.
	s.NextDue = now.Add(s.delay())
	return s, s.WakeupPrompt()
}

func (s *State) delay() time.Duration {
	switch {
	case s.Delay > 0:
		return s.Delay
	case s.Interval > 0:
		return s.Interval
	}
	return SelfPacedFloor
}

// Verdict is the --until judge's word on a wakeup ("" not asked).
type Verdict struct {
	Verdict, Reason string
}

// Outcome is what a finished wakeup did to its loop.
type Outcome struct {
	State State
	// Message is the status line for the chat ("" the loop goes on).
	Message string
	// Label names the outcome for metrics: continued, complete,
	// condition_met, blocked, times, budget.
	Label string
}

// Complete evaluates the answer to the loop's latest wakeup at now
// (Hermes's complete_tick): the agent's marker, the --until judge's
// verdict, the --times cap and the backstop budget stop or pause it;
// else the next tick is scheduled from now.
func Complete(s State, response string, judged Verdict, now time.Time) Outcome {
	stop := func(status, reason, msg, label string) Outcome {
		s.Status = status
		if status == Done {
			s.LastStopReason = reason
		} else {
			s.PausedReason = reason
		}
		return Outcome{State: s, Message: msg, Label: label}
	}
	t := ticks(s.Ticks)
	if SignalsComplete(response) {
		return stop(Done, "agent signaled the task is complete", fmt.Sprintf("✓ Loop finished after %s — task complete.", t), "complete")
	}
	if s.Until != "" && strings.TrimSpace(response) != "" {
		switch judged.Verdict {
		case "done":
			return stop(Done, "stop condition met: "+judged.Reason, fmt.Sprintf("✓ Loop finished after %s — %s", t, judged.Reason), "condition_met")
		case "blocked":
			why := "stop condition judged unachievable: " + judged.Reason
			return stop(Paused, why, fmt.Sprintf("⏸ Loop paused — %s. /loop resume to keep going, /loop stop to end it.", why), "blocked")
		}
	}
	if s.Times > 0 && s.Ticks >= s.Times {
		return stop(Done, fmt.Sprintf("completed the requested %d runs", s.Times),
			fmt.Sprintf("✓ Loop finished — ran %d/%d times.", s.Times, s.Times), "times")
	}
	if s.MaxTicks > 0 && s.Ticks >= s.MaxTicks {
		return stop(Paused, fmt.Sprintf("tick budget exhausted (%d/%d)", s.Ticks, s.MaxTicks),
			fmt.Sprintf("⏸ Loop paused — %d/%d ticks used (router.loop_max_ticks). /loop resume to keep going, /loop stop to end it.", s.Ticks, s.MaxTicks), "budget")
	}
	if s.SelfPaced() {
		d := Digest(response)
		if d != "" && d == s.LastDigest {
			s.Delay = min(max(s.Delay, SelfPacedFloor)*2, SelfPacedCeiling)
		} else {
			s.Delay = SelfPacedFloor
		}
		s.LastDigest = d
	} else {
		s.Delay = s.Interval
	}
	s.NextDue = now.Add(s.Delay)
	return Outcome{State: s, Label: "continued"}
}

var (
	clockRE    = regexp.MustCompile(`\d{1,2}:\d{2}(:\d{2})?`)
	dateRE     = regexp.MustCompile(`\d{4}-\d{2}-\d{2}`)
	durationRE = regexp.MustCompile(`\b\d+(\.\d+)?\s*(s|sec|secs|seconds|m|min|mins|minutes|h|hr|hrs|hours)\b`)
	spaceRE    = regexp.MustCompile(`\s+`)
)

// Digest is a self-paced loop's change detector: the answer with
// clock times, dates and durations taken out, so "checked at 14:02"
// does not count as a change.
func Digest(response string) string {
	t := strings.ToLower(strings.TrimSpace(response))
	t = clockRE.ReplaceAllString(t, "")
	t = dateRE.ReplaceAllString(t, "")
	t = durationRE.ReplaceAllString(t, "")
	t = spaceRE.ReplaceAllString(t, " ")
	sum := sha256.Sum256([]byte(t))
	return hex.EncodeToString(sum[:])
}
