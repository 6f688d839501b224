package goal

import (
	"strings"
	"testing"
	"time"
)

func TestParseVerdict(t *testing.T) {
	tests := []struct {
		raw          string
		verdict      string
		reason       string
		parseFailed  bool
		reasonPrefix bool
	}{
		{`{"verdict": "done", "reason": "tests pass"}`, VerdictDone, "tests pass", false, false},
		{`{"verdict": "BLOCKED", "reason": "needs the API key"}`, VerdictBlocked, "needs the API key", false, false},
		{`{"verdict": "continue", "reason": "two left"}`, VerdictContinue, "two left", false, false},
		{"```json\n{\"verdict\": \"done\", \"reason\": \"shipped\"}\n```", VerdictDone, "shipped", false, false},
		{`Sure! {"verdict": "blocked", "reason": "x"} hope that helps`, VerdictBlocked, "x", false, false},
		{`{"done": true, "reason": "ok"}`, VerdictDone, "ok", false, false},
		{`{"done": "yes"}`, VerdictDone, "no reason provided", false, false},
		{`{"done": false, "reason": "not yet"}`, VerdictContinue, "not yet", false, false},
		{`{"verdict": "wait", "reason": "ci"}`, VerdictContinue, "ci", false, false},
		{`{"verdict": "maybe"}`, VerdictContinue, "no reason provided", false, false},
		{"", VerdictContinue, "judge returned empty response", true, false},
		{"   ", VerdictContinue, "judge returned empty response", true, false},
		{"looks good to me", VerdictContinue, "judge reply was not JSON: ", true, true},
		{"[1, 2]", VerdictContinue, "judge reply was not JSON: ", true, true},
	}
	for _, tt := range tests {
		v, r, pf := ParseVerdict(tt.raw)
		if v != tt.verdict || pf != tt.parseFailed || (tt.reasonPrefix && !strings.HasPrefix(r, tt.reason)) || (!tt.reasonPrefix && r != tt.reason) {
			t.Errorf("ParseVerdict(%q) = %q, %q, %v; want %q, %q, %v", tt.raw, v, r, pf, tt.verdict, tt.reason, tt.parseFailed)
		}
	}
}

// FuzzParseVerdict: the judge's answer is outside text; it always gives
// one of the three verdicts and a reason.
func FuzzParseVerdict(f *testing.F) {
	for _, s := range []string{"", `{"verdict":"done","reason":"r"}`, "```\n{}\n```", `{"done":1}`, "{", "}{", `{"reason": 5}`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		v, r, _ := ParseVerdict(raw)
		if v != VerdictDone && v != VerdictBlocked && v != VerdictContinue {
			t.Fatalf("ParseVerdict(%q): verdict %q", raw, v)
		}
		if r == "" {
			t.Fatalf("ParseVerdict(%q): no reason", raw)
		}
	})
}

func TestEvaluate(t *testing.T) {
	active := State{Goal: "ship it", Status: Active, MaxTurns: 3}
	tests := []struct {
		name    string
		s       State
		j       Judged
		status  string
		turns   int
		cont    bool
		message string
		paused  string
		parseN  int
		transpN int
	}{
		{"continue", active, Judged{Verdict: VerdictContinue, Reason: "two left"}, Active, 1, true,
			"↻ Continuing toward goal (1/3): two left", "", 0, 0},
		{"done", active, Judged{Verdict: VerdictDone, Reason: "shipped"}, Done, 1, false, "✓ Goal achieved: shipped", "", 0, 0},
		{"blocked", active, Judged{Verdict: VerdictBlocked, Reason: "needs a key."}, Paused, 1, false,
			"⏸ Goal paused — blocked: needs a key. Re-scope with /goal <text>, or resume with /goal resume.", "judge blocked: needs a key.", 0, 0},
		{"budget", State{Goal: "g", Status: Active, MaxTurns: 3, TurnsUsed: 2}, Judged{Verdict: VerdictContinue, Reason: "r"}, Paused, 3, false,
			"⏸ Goal paused — 3/3 turns used. Use /goal resume to keep going, or /goal clear to stop.", "turn budget exhausted (3/3)", 0, 0},
		{"done on the last turn", State{Goal: "g", Status: Active, MaxTurns: 3, TurnsUsed: 2}, Judged{Verdict: VerdictDone, Reason: "r"}, Done, 3, false,
			"✓ Goal achieved: r", "", 0, 0},
		{"third parse failure", State{Goal: "g", Status: Active, MaxTurns: 20, ParseFailures: 2}, Judged{Verdict: VerdictContinue, Reason: "x", ParseFailed: true}, Paused, 1, false,
			"⏸ Goal paused — the judge model (3 turns) isn't returning the required JSON verdict. Route the judge to a stricter model with agent.goal_judge_model in the gateway's config. Then /goal resume to continue.",
			"judge model returned unparseable output 3 turns in a row", 3, 0},
		{"second parse failure continues", State{Goal: "g", Status: Active, MaxTurns: 20, ParseFailures: 1}, Judged{Verdict: VerdictContinue, Reason: "x", ParseFailed: true}, Active, 1, true,
			"↻ Continuing toward goal (1/20): x", "", 2, 0},
		{"fifth transport failure", State{Goal: "g", Status: Active, MaxTurns: 20, TransportFailures: 4, ParseFailures: 2}, Judged{Verdict: VerdictContinue, Reason: "judge error: auth", TransportFailed: true}, Paused, 1, false,
			"⏸ Goal paused — judge API returned errors (5 turns). Check the judge's model and provider: agent.goal_judge_model in the gateway's config. Then /goal resume to continue.",
			"judge API unreachable 5 turns in a row (check agent.goal_judge_model)", 0, 5},
		{"a verdict resets the failures", State{Goal: "g", Status: Active, MaxTurns: 20, TransportFailures: 4, ParseFailures: 2}, Judged{Verdict: VerdictContinue, Reason: "ok"}, Active, 1, true,
			"↻ Continuing toward goal (1/20): ok", "", 0, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := Evaluate(tt.s, tt.j)
			if d.State.Status != tt.status || d.State.TurnsUsed != tt.turns || d.Continue != tt.cont || d.Message != tt.message ||
				d.State.PausedReason != tt.paused || d.State.ParseFailures != tt.parseN || d.State.TransportFailures != tt.transpN {
				t.Errorf("Evaluate = %+v", d)
			}
		})
	}
}

func TestStatusLineAndPrompts(t *testing.T) {
	s := &State{Goal: "ship it", Status: Active, MaxTurns: 20}
	if got := s.StatusLine(); got != "⊙ Goal (active, 0/20 turns): ship it" {
		t.Errorf("active: %q", got)
	}
	s.Subgoals = []string{"tests pass"}
	s.Status, s.PausedReason, s.TurnsUsed = Paused, "user-paused", 4
	if got := s.StatusLine(); got != "⏸ Goal (paused, 4/20 turns, 1 subgoal — user-paused): ship it" {
		t.Errorf("paused: %q", got)
	}
	s.Status = Done
	if got := s.StatusLine(); got != "✓ Goal done (4/20 turns, 1 subgoal): ship it" {
		t.Errorf("done: %q", got)
	}
	var none *State
	if none.StatusLine() != NoGoal || (&State{Goal: "x", Status: Cleared}).StatusLine() != NoGoal {
		t.Error("no goal")
	}
	p := (&State{Goal: "ship it"}).ContinuationPrompt()
	if !strings.HasPrefix(p, "[Continuing toward your standing goal]\nGoal: ship it\n\nContinue working toward this goal.") {
		t.Errorf("prompt: %q", p)
	}
	p = s.ContinuationPrompt()
	if !strings.Contains(p, "Additional criteria the user added mid-loop:\n- 1. tests pass\n\n") {
		t.Errorf("prompt with subgoals: %q", p)
	}
	jp := s.JudgePrompt(strings.Repeat("x", ResponseChars+5), time.Now())
	if !strings.Contains(jp, strings.Repeat("x", ResponseChars)+"… [truncated]") || !strings.Contains(jp, "- 1. tests pass") {
		t.Errorf("judge prompt: %q", jp[:200])
	}
}

// The judge's prompt tells it the current time on the judge's clock, in
// its time zone, as Hermes's does ("Current time: 2026-12-03 17:58:35
// UTC"), after the response and before the question.
func TestJudgePromptCurrentTime(t *testing.T) {
	at := time.Date(2026, 12, 3, 17, 58, 35, 0, time.UTC)
	cases := []struct {
		name string
		s    State
		now  time.Time
		want string
	}{
		{name: "plain", s: State{Goal: "ship it"}, now: at,
			want: "Goal:\nship it\n\nAgent's most recent response:\nshipped\n\n" +
				"Current time: 2026-12-03 17:58:35 UTC\n\n" +
				"Is the goal satisfied — done, blocked, or continue?"},
		{name: "subgoals", s: State{Goal: "ship it", Subgoals: []string{"tests pass"}}, now: at,
			want: "Goal:\nship it\n\n" +
				"Additional criteria the user added mid-loop (all must also be satisfied for the goal to be done):\n- 1. tests pass\n\n" +
				"Agent's most recent response:\nshipped\n\n" +
				"Current time: 2026-12-03 17:58:35 UTC\n\n" +
				"For each numbered criterion, find concrete evidence in the response that it is met " +
				"(a file excerpt, an output line, a command result), not a general claim. " +
				"If any criterion lacks it, the goal is not done: continue.\n\n" +
				"Is the goal AND every additional criterion satisfied?"},
		{name: "the clock's zone", s: State{Goal: "ship it"}, now: at.In(time.FixedZone("CET", 3600)),
			want: "Goal:\nship it\n\nAgent's most recent response:\nshipped\n\n" +
				"Current time: 2026-12-03 18:58:35 CET\n\n" +
				"Is the goal satisfied — done, blocked, or continue?"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := c.s.JudgePrompt("shipped", c.now); got != c.want {
				t.Errorf("judge prompt:\n%s\nwant:\n%s", got, c.want)
			}
		})
	}
}
