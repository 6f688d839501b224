package loop

import (
	"strings"
	"testing"
	"time"
)

func TestParseIntervalToken(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want time.Duration
		ok   bool
	}{
		{"30s", 30 * time.Second, true},
		{"5m", 5 * time.Minute, true},
		{"2h", 2 * time.Hour, true},
		{"1h30m", 90 * time.Minute, true},
		{"1H30M10S", 90*time.Minute + 10*time.Second, true},
		{"3", 0, false}, // a bare number is prompt text
		{"0m", 0, false},
		{"m", 0, false},
		{"5x", 0, false},
		{"30m1h", 0, false},
		{"9999999h", 0, false}, // beyond MaxInterval
		{"", 0, false},
	} {
		got, ok := ParseIntervalToken(tc.in)
		if got != tc.want || ok != tc.ok {
			t.Errorf("ParseIntervalToken(%q) = %v, %v; want %v, %v", tc.in, got, ok, tc.want, tc.ok)
		}
	}
}

func TestParseSpec(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want Spec
	}{
		{"5m check the deploy status", Spec{Interval: 5 * time.Minute, Prompt: "check the deploy status"}},
		{"every 10m /recap", Spec{Interval: 10 * time.Minute, Prompt: "/recap"}},
		{"keep fixing tests until green", Spec{Prompt: "keep fixing tests until green"}},
		{"2m poll CI --times 30", Spec{Interval: 2 * time.Minute, Prompt: "poll CI", Times: 30}},
		{"5m watch the queue --until queue is empty", Spec{Interval: 5 * time.Minute, Prompt: "watch the queue", Until: "queue is empty"}},
		{"5m watch --until done in 5m --times 2", Spec{Interval: 5 * time.Minute, Prompt: "watch", Until: "done in 5m", Times: 2}},
		{"3 things to do", Spec{Prompt: "3 things to do"}},
		{"every", Spec{Prompt: "every"}},
		{"", Spec{Problem: Usage}},
		{"5m", Spec{Problem: "/loop: missing prompt (usage: /loop [interval] <prompt>)"}},
		{"5m --times 3", Spec{Problem: "/loop: missing prompt (usage: /loop [interval] <prompt>)"}},
		{"5m x --times 0", Spec{Problem: "/loop: --times expects a positive integer, got '0'"}},
		{"5m x --times many", Spec{Problem: "/loop: --times expects a positive integer, got 'many'"}},
	} {
		if got := ParseSpec(tc.in); got != tc.want {
			t.Errorf("ParseSpec(%q) = %+v; want %+v", tc.in, got, tc.want)
		}
	}
}

func TestParseHeartbeat(t *testing.T) {
	for _, tc := range []struct {
		in      string
		d       time.Duration
		prompt  string
		problem string
	}{
		{"every 10m Check CI", 10 * time.Minute, "Check CI", ""},
		{"10m Check CI", 10 * time.Minute, "Check CI", ""},
		{"every 2h look", 2 * time.Hour, "look", ""},
		{"1.5h look", 90 * time.Minute, "look", ""},
		{"every 30s x", 0, "", "Interval too small — minimum is 60s."},
		{"every 10m", 0, "", "Usage: /heartbeat every <interval> <prompt> — the prompt is required."},
		{"sometimes x", 0, "", HeartbeatUsage},
		{"", 0, "", HeartbeatUsage},
	} {
		d, p, problem := ParseHeartbeat(tc.in)
		if d != tc.d || p != tc.prompt || problem != tc.problem {
			t.Errorf("ParseHeartbeat(%q) = %v, %q, %q", tc.in, d, p, problem)
		}
	}
}

func TestControl(t *testing.T) {
	for _, tc := range []struct{ kind, in, want string }{
		{KindLoop, "", "status"}, {KindLoop, "STATUS", "status"}, {KindLoop, "cancel", "stop"}, {KindLoop, "-h", "help"},
		{KindLoop, "off", ""}, {KindHeartbeat, "off", "stop"}, {KindHeartbeat, "help", ""}, {KindHeartbeat, "resume", "resume"},
		{KindLoop, "5m x", ""},
	} {
		if got := Control(tc.kind, tc.in); got != tc.want {
			t.Errorf("Control(%s, %q) = %q; want %q", tc.kind, tc.in, got, tc.want)
		}
	}
}

func TestFormatInterval(t *testing.T) {
	for d, want := range map[time.Duration]string{90 * time.Second: "1m30s", 0: "0s", time.Hour: "1h", 3725 * time.Second: "1h2m5s"} {
		if got := FormatInterval(d); got != want {
			t.Errorf("FormatInterval(%v) = %q; want %q", d, got, want)
		}
	}
	for d, want := range map[time.Duration]string{10 * time.Minute: "10m", 90 * time.Second: "90s", 48 * time.Hour: "2d", 2 * time.Hour: "2h"} {
		if got := FormatHeartbeatInterval(d); got != want {
			t.Errorf("FormatHeartbeatInterval(%v) = %q; want %q", d, got, want)
		}
	}
}

func TestStatusLines(t *testing.T) {
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	l := &State{Kind: KindLoop, Prompt: "check", Status: Active, Interval: 5 * time.Minute, MaxTicks: 100, Ticks: 2, NextDue: now.Add(90 * time.Second)}
	if got, want := l.StatusLine(now), "↻ Loop (active, every 5m, 2/100 budget, next in 1m30s): check"; got != want {
		t.Errorf("status %q; want %q", got, want)
	}
	l.Times, l.Until, l.Status, l.PausedReason = 3, "green", Paused, "user-paused"
	if got, want := l.StatusLine(now), "⏸ Loop (paused, every 5m, 2/3 runs, until: green — user-paused): check"; got != want {
		t.Errorf("status %q; want %q", got, want)
	}
	l.Status, l.LastStopReason = Done, "completed the requested 3 runs"
	if got, want := l.StatusLine(now), "✓ Loop finished (2 ticks — completed the requested 3 runs): check"; got != want {
		t.Errorf("status %q; want %q", got, want)
	}
	var none *State
	if none.StatusLine(now) != NoLoop || none.HeartbeatStatusLine(now) != NoHeartbeat {
		t.Error("no loop's status")
	}
	h := &State{Kind: KindHeartbeat, Prompt: "ci", Status: Active, Interval: 10 * time.Minute, Ticks: 1, NextDue: now.Add(30 * time.Second)}
	if got, want := h.HeartbeatStatusLine(now), "♥ Heartbeat (every 10m, next in ~30s, fired 1×): ci"; got != want {
		t.Errorf("heartbeat %q; want %q", got, want)
	}
	h.Status = Paused
	if got, want := h.HeartbeatStatusLine(now), "⏸ Heartbeat (paused, every 10m, fired 1×): ci"; got != want {
		t.Errorf("heartbeat %q; want %q", got, want)
	}
}

func TestSetText(t *testing.T) {
	s := State{Kind: KindLoop, Prompt: "poll CI", Status: Active, Interval: 30 * time.Second, Delay: 30 * time.Second, Times: 2}
	got := SetText(s, Spec{Interval: 10 * time.Second, Prompt: "poll CI", Times: 2}, true)
	want := "↻ Loop set (every 30s): poll CI\n(replaced the previous loop for this session)\n" +
		"(interval raised to the 30s minimum — router.loop_min_interval)\nRuns 2 times, then stops.\n" +
		"First wakeup fires now, then on the cadence above. Controls: /loop status · pause · resume · stop."
	if got != want {
		t.Errorf("SetText:\n%s\nwant\n%s", got, want)
	}
	sp := State{Kind: KindLoop, Prompt: "x", Status: Active, Delay: SelfPacedFloor, MaxTicks: 100, Until: "green"}
	got = SetText(sp, Spec{Prompt: "x"}, false)
	for _, w := range []string{"↻ Loop set (self-paced, currently 1m): x", "Self-paced: first check in 1m; backs off up to 15m while nothing changes.",
		"Stops when: green", "Backstop budget: 100 ticks"} {
		if !strings.Contains(got, w) {
			t.Errorf("SetText %q lacks %q", got, w)
		}
	}
}

func TestFireAndPrompts(t *testing.T) {
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	l := State{Kind: KindLoop, Prompt: "check the deploy", Status: Active, Interval: 5 * time.Minute, Delay: 5 * time.Minute}
	next, text := Fire(l, now)
	if next.Ticks != 1 || !next.NextDue.Equal(now.Add(5*time.Minute)) || !next.LastFired.Equal(now) {
		t.Errorf("fired state %+v", next)
	}
	if !strings.HasPrefix(text, "[/loop wakeup #1, every 5m]\nRecurring task: check the deploy\n\n") || !strings.Contains(text, "LOOP_COMPLETE on its own line") {
		t.Errorf("wakeup %q", text)
	}
	l.Until = "deploy is green"
	_, text = Fire(l, now)
	if !strings.Contains(text, "Stop condition: deploy is green\n\n") {
		t.Errorf("wakeup with until %q", text)
	}
	l.Prompt = "/recap"
	if _, text = Fire(l, now); !strings.Contains(text, "Recurring task: /recap\n") {
		t.Errorf("a slash command's wakeup: %q", text)
	}
	h := State{Kind: KindHeartbeat, Prompt: "Check CI", Status: Active, Interval: 10 * time.Minute}
	hn, text := Fire(h, now)
	if hn.Ticks != 1 || !hn.NextDue.Equal(now.Add(10*time.Minute)) {
		t.Errorf("heartbeat fired %+v", hn)
	}
	if !strings.HasPrefix(text, "[Heartbeat — recurring instruction, fires every 10m]\nCheck CI\n\n") {
		t.Errorf("heartbeat prompt %q", text)
	}
}

func TestComplete(t *testing.T) {
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	base := State{Kind: KindLoop, Prompt: "p", Status: Active, Interval: time.Minute, Delay: time.Minute, MaxTicks: 100, Ticks: 1}
	for _, tc := range []struct {
		name     string
		s        func(State) State
		response string
		v        Verdict
		status   string
		label    string
		msg      string
	}{
		{"continues", nil, "still red", Verdict{}, Active, "continued", ""},
		{"marker", nil, "all good\nLOOP_COMPLETE.\n", Verdict{}, Done, "complete", "✓ Loop finished after 1 tick — task complete."},
		{"marker inline does not count", nil, "I will say LOOP_COMPLETE later", Verdict{}, Active, "continued", ""},
		{"until met", func(s State) State { s.Until = "green"; return s }, "green now", Verdict{"done", "CI is green"}, Done, "condition_met", "✓ Loop finished after 1 tick — CI is green"},
		{"until blocked", func(s State) State { s.Until = "green"; return s }, "repo gone", Verdict{"blocked", "no repo"}, Paused, "blocked",
			"⏸ Loop paused — stop condition judged unachievable: no repo. /loop resume to keep going, /loop stop to end it."},
		{"until continue", func(s State) State { s.Until = "green"; return s }, "red", Verdict{"continue", "red"}, Active, "continued", ""},
		{"times", func(s State) State { s.Times, s.Ticks = 3, 3; return s }, "ok", Verdict{}, Done, "times", "✓ Loop finished — ran 3/3 times."},
		{"budget", func(s State) State { s.Ticks = 100; return s }, "ok", Verdict{}, Paused, "budget",
			"⏸ Loop paused — 100/100 ticks used (router.loop_max_ticks). /loop resume to keep going, /loop stop to end it."},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := base
			if tc.s != nil {
				s = tc.s(s)
			}
			o := Complete(s, tc.response, tc.v, now)
			if o.State.Status != tc.status || o.Label != tc.label || o.Message != tc.msg {
				t.Errorf("Complete = %s %s %q", o.State.Status, o.Label, o.Message)
			}
			if tc.status == Active && !o.State.NextDue.Equal(now.Add(time.Minute)) {
				t.Errorf("next due %v", o.State.NextDue)
			}
		})
	}
}

func TestSelfPacedBacksOff(t *testing.T) {
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	s := State{Kind: KindLoop, Prompt: "p", Status: Active, Delay: SelfPacedFloor}
	want := []time.Duration{time.Minute, 2 * time.Minute, 4 * time.Minute, 8 * time.Minute, 15 * time.Minute, 15 * time.Minute}
	for i, w := range want {
		// The same answer but for the time in it: unchanged.
		o := Complete(s, "nothing new at 12:0"+string(rune('0'+i)), Verdict{}, now)
		if o.State.Delay != w {
			t.Fatalf("step %d: delay %v, want %v", i, o.State.Delay, w)
		}
		s = o.State
	}
	if o := Complete(s, "something changed", Verdict{}, now); o.State.Delay != SelfPacedFloor {
		t.Errorf("a change snaps back: %v", o.State.Delay)
	}
}
