// Package goal is Hermes's standing goal (/goal, hermes_cli/goals.py):
// the state a chat's goal is in, the continuation prompt fed back as the
// next user turn, the judge's prompt and the reading of its verdict, and
// what a verdict does to the goal. It does no I/O: the router keeps the
// state (sessionstore), the worker asks the judge and records the
// verdict.
package goal

import (
	"encoding/json"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
)

// Hermes's defaults.
const (
	// DefaultMaxTurns is a goal's turn budget.
	DefaultMaxTurns = 20
	// ResponseChars of the agent's answer go to the judge.
	ResponseChars = 4000
	// GoalChars of the goal, and of the subgoals, go to the judge.
	GoalChars = 2000
	// MaxParseFailures in a row (the judge answered, but no JSON
	// verdict) pause the goal.
	MaxParseFailures = 3
	// MaxTransportFailures in a row (the judge could not be reached)
	// pause the goal.
	MaxTransportFailures = 5
)

// Statuses, Hermes's.
const (
	Active  = "active"
	Paused  = "paused"
	Done    = "done"
	Cleared = "cleared"
)

// Verdicts.
const (
	VerdictDone     = "done"
	VerdictBlocked  = "blocked"
	VerdictContinue = "continue"
)

// State is a chat's goal.
type State struct {
	Goal         string
	Status       string
	TurnsUsed    int
	MaxTurns     int
	Subgoals     []string
	LastVerdict  string
	LastReason   string
	PausedReason string
	// ParseFailures and TransportFailures count the judge's failures in
	// a row.
	ParseFailures     int
	TransportFailures int
}

// Has reports whether there is a goal to show or change: active or
// paused (Hermes's has_goal).
func (s *State) Has() bool { return s != nil && (s.Status == Active || s.Status == Paused) }

// NoGoal is Hermes's status line without a goal.
const NoGoal = "No active goal. Set one with /goal <text>."

// StatusLine is Hermes's one-line view of the goal.
func (s *State) StatusLine() string {
	if s == nil || s.Status == Cleared || s.Goal == "" {
		return NoGoal
	}
	meta := fmt.Sprintf("%d/%d turns", s.TurnsUsed, s.MaxTurns)
	if n := len(s.Subgoals); n > 0 {
		meta += fmt.Sprintf(", %d subgoal%s", n, plural(n))
	}
	switch s.Status {
	case Active:
		return fmt.Sprintf("⊙ Goal (active, %s): %s", meta, s.Goal)
	case Paused:
		extra := ""
		if s.PausedReason != "" {
			extra = " — " + s.PausedReason
		}
		return fmt.Sprintf("⏸ Goal (paused, %s%s): %s", meta, extra, s.Goal)
	case Done:
		return fmt.Sprintf("✓ Goal done (%s): %s", meta, s.Goal)
	}
	return fmt.Sprintf("Goal (%s, %s): %s", s.Status, meta, s.Goal)
}

// SubgoalsBlock lists the subgoals, "- 1. text" a line ("" none).
func SubgoalsBlock(subgoals []string) string {
	lines := make([]string, len(subgoals))
	for i, t := range subgoals {
		lines[i] = fmt.Sprintf("- %d. %s", i+1, t)
	}
	return strings.Join(lines, "\n")
}

// RenderSubgoals is /subgoal's list (Hermes's render_subgoals).
func (s *State) RenderSubgoals() string {
	if s == nil {
		return "(no active goal)"
	}
	if len(s.Subgoals) == 0 {
		return "(no subgoals — use /subgoal <text> to add criteria)"
	}
	return SubgoalsBlock(s.Subgoals)
}

// ContinuationPrefix starts every continuation prompt: a queued
// message that starts with it is a goal's continuation, not the user's.
const ContinuationPrefix = "[Continuing toward your standing goal]\nGoal: "

// ContinuationPrompt is the user turn that continues toward the goal
// (Hermes's CONTINUATION_PROMPT_TEMPLATE, or the one with subgoals).
func (s *State) ContinuationPrompt() string {
	if len(s.Subgoals) == 0 {
		return ContinuationPrefix + s.Goal + "\n\n" +
			"Continue working toward this goal. Take the next concrete step. " +
			"If you believe the goal is complete, state so explicitly and stop. " +
			"If you are blocked and need input from the user, say so clearly and stop."
	}
	return ContinuationPrefix + s.Goal + "\n\n" +
		"Additional criteria the user added mid-loop:\n" + SubgoalsBlock(s.Subgoals) + "\n\n" +
		"Continue working toward the goal AND all additional criteria. Take " +
		"the next concrete step. If you believe the goal and every " +
		"additional criterion are complete, state so explicitly and stop. " +
		"If you are blocked and need input from the user, say so clearly " +
		"and stop."
}

// JudgeSystem is the judge's instructions. Hermes's judge also knows a
// "wait" verdict, for background processes and delegated subagents the
// agent waits on; this gateway's agent starts none, so it has three.
const JudgeSystem = "You judge whether an autonomous agent has achieved the goal a user gave it. " +
	"You get the goal, any extra criteria the user added, and the agent's latest response. Pick one verdict.\n\n" +
	"done: the goal is fully achieved — the response says it was completed, or shows the finished deliverable. " +
	"The deliverable must actually exist: a response that only explains why the goal cannot be reached is blocked, not done.\n\n" +
	"blocked: the goal cannot be achieved as stated (impossible, out of scope, no way to the deliverable), " +
	"or the next step needs the user's input, or the agent has stopped and waits for the user " +
	"(including because the user told it to stop). Give what blocks it as the reason; quote an error verbatim. " +
	"Never answer blocked for a goal that was achieved.\n\n" +
	"continue: not done, and the agent has a concrete next step it can take now. When in doubt, continue.\n\n" +
	"Reply with one JSON object on one line and nothing else:\n" +
	`{"verdict": "done", "reason": "<one sentence>"}` + "\n" +
	`{"verdict": "blocked", "reason": "<one sentence>"}` + "\n" +
	`{"verdict": "continue", "reason": "<one sentence>"}`

// TimeLayout is how the judge's prompt gives the current time (Hermes's
// "%Y-%m-%d %H:%M:%S %Z", in the judging process's time zone).
const TimeLayout = "2006-01-02 15:04:05 MST"

// JudgePrompt is the judge's user message about response, the agent's
// latest answer, asked at now (the judge's clock: Hermes tells the
// judge the current time, so that a goal about time, such as "by 5 pm",
// can be judged).
func (s *State) JudgePrompt(response string, now time.Time) string {
	var b strings.Builder
	b.WriteString("Goal:\n")
	b.WriteString(Truncate(s.Goal, GoalChars))
	b.WriteString("\n\n")
	if len(s.Subgoals) > 0 {
		b.WriteString("Additional criteria the user added mid-loop (all must also be satisfied for the goal to be done):\n")
		b.WriteString(Truncate(SubgoalsBlock(s.Subgoals), GoalChars))
		b.WriteString("\n\n")
	}
	b.WriteString("Agent's most recent response:\n")
	b.WriteString(Truncate(response, ResponseChars))
	b.WriteString("\n\n")
	b.WriteString("Current time: ")
	b.WriteString(now.Format(TimeLayout))
	b.WriteString("\n\n")
	if len(s.Subgoals) > 0 {
		b.WriteString("For each numbered criterion, find concrete evidence in the response that it is met " +
			"(a file excerpt, an output line, a command result), not a general claim. " +
			"If any criterion lacks it, the goal is not done: continue.\n\n")
		b.WriteString("Is the goal AND every additional criterion satisfied?")
	} else {
		b.WriteString("Is the goal satisfied — done, blocked, or continue?")
	}
	return b.String()
}

// Truncate cuts text at limit characters, marking the cut as Hermes
// does.
func Truncate(text string, limit int) string {
	if utf8.RuneCountInString(text) <= limit {
		return text
	}
	return string([]rune(text)[:limit]) + "… [truncated]"
}

var jsonObject = regexp.MustCompile(`(?s)\{.*?\}`)

// ParseVerdict reads the judge's answer, failing open: anything it
// cannot read is "continue", with parseFailed set. It takes a JSON
// object alone, in a code fence, or the first one in other text; its
// "verdict" (done, blocked, continue; "wait" and unknown ones are
// continue), or the older {"done": true|false}.
func ParseVerdict(raw string) (verdict, reason string, parseFailed bool) {
	text := strings.TrimSpace(raw)
	if text == "" {
		return VerdictContinue, "judge returned empty response", true
	}
	if strings.HasPrefix(text, "```") {
		text = strings.Trim(text, "`")
		if i := strings.IndexByte(text, '\n'); i >= 0 {
			text = text[i+1:]
		}
	}
	var data map[string]any
	if err := json.Unmarshal([]byte(text), &data); err != nil || data == nil {
		m := jsonObject.FindString(text)
		data = nil
		if m == "" || json.Unmarshal([]byte(m), &data) != nil || data == nil {
			return VerdictContinue, "judge reply was not JSON: " + strconv.Quote(Truncate(raw, 200)), true
		}
	}
	reason, _ = data["reason"].(string)
	if reason = strings.TrimSpace(reason); reason == "" {
		reason = "no reason provided"
	}
	if v, ok := data["verdict"].(string); ok {
		verdict = strings.ToLower(strings.TrimSpace(v))
	} else {
		done := false
		switch d := data["done"].(type) {
		case bool:
			done = d
		case string:
			switch strings.ToLower(strings.TrimSpace(d)) {
			case "true", "yes", "1", "done":
				done = true
			}
		case float64:
			done = d != 0
		}
		verdict = VerdictContinue
		if done {
			verdict = VerdictDone
		}
	}
	switch verdict {
	case VerdictDone, VerdictBlocked, VerdictContinue:
	default:
		verdict = VerdictContinue
	}
	return verdict, reason, false
}

// Judged is what the judge said about a turn.
type Judged struct {
	Verdict, Reason string
	// ParseFailed: the judge answered something that is no verdict;
	// TransportFailed: it could not be asked (an error of the call).
	ParseFailed, TransportFailed bool
}

// Decision is what a verdict did to the goal.
type Decision struct {
	// State is the goal after the verdict.
	State State
	// Continue: queue the continuation prompt as the next turn.
	Continue bool
	// Message is the status line for the chat.
	Message string
}

// judgeConfigHint says where the judge's model is configured (Hermes
// points at auxiliary.goal_judge in its config.yaml).
const judgeConfigHint = "agent.goal_judge_model in the gateway's config. Then /goal resume to continue."

// Evaluate applies the judge's verdict on one more turn to the active
// goal s (Hermes's evaluate_after_turn): the turn counts against the
// budget; done ends the goal; blocked, the judge failing too often in a
// row and an exhausted budget pause it; else the loop continues.
func Evaluate(s State, j Judged) Decision {
	s.TurnsUsed++
	s.LastVerdict, s.LastReason = j.Verdict, j.Reason
	// A usable answer (a transport error included) resets the parse
	// failures; transport failures are counted apart (Hermes's rule).
	if j.ParseFailed {
		s.ParseFailures++
	} else {
		s.ParseFailures = 0
	}
	if j.TransportFailed {
		s.TransportFailures++
	} else {
		s.TransportFailures = 0
	}
	pause := func(why, msg string) Decision {
		s.Status, s.PausedReason = Paused, why
		return Decision{State: s, Message: msg}
	}
	switch {
	case j.Verdict == VerdictBlocked:
		return pause("judge blocked: "+j.Reason,
			fmt.Sprintf("⏸ Goal paused — blocked: %s Re-scope with /goal <text>, or resume with /goal resume.", j.Reason))
	case j.Verdict == VerdictDone:
		s.Status = Done
		return Decision{State: s, Message: "✓ Goal achieved: " + j.Reason}
	case s.TransportFailures >= MaxTransportFailures:
		return pause(fmt.Sprintf("judge API unreachable %d turns in a row (check agent.goal_judge_model)", s.TransportFailures),
			fmt.Sprintf("⏸ Goal paused — judge API returned errors (%d turns). Check the judge's model and provider: %s", s.TransportFailures, judgeConfigHint))
	case s.ParseFailures >= MaxParseFailures:
		return pause(fmt.Sprintf("judge model returned unparseable output %d turns in a row", s.ParseFailures),
			fmt.Sprintf("⏸ Goal paused — the judge model (%d turns) isn't returning the required JSON verdict. Route the judge to a stricter model with %s", s.ParseFailures, judgeConfigHint))
	case s.TurnsUsed >= s.MaxTurns:
		return pause(fmt.Sprintf("turn budget exhausted (%d/%d)", s.TurnsUsed, s.MaxTurns),
			fmt.Sprintf("⏸ Goal paused — %d/%d turns used. Use /goal resume to keep going, or /goal clear to stop.", s.TurnsUsed, s.MaxTurns))
	}
	return Decision{State: s, Continue: true,
		Message: fmt.Sprintf("↻ Continuing toward goal (%d/%d): %s", s.TurnsUsed, s.MaxTurns, j.Reason)}
}

func plural(n int) string {
	if n == 1 {
		return ""
	}
	return "s"
}
