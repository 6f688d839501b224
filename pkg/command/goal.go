package command

import (
	"strconv"
	"strings"
	"unicode/utf8"
)

// GoalTextMax bounds a goal's text and a subgoal's, in characters: a
// goal is an objective, not a document (the judge reads its first 2000
// characters anyway).
const GoalTextMax = 4000

// Goal is /goal's argument, read as Hermes's gateway reads it.
type Goal struct {
	// Action is one of: "status" (no argument, or status), "show",
	// "pause", "resume", "clear" (clear, stop, done), "set" (the
	// argument is the goal), or "unsupported" (Hermes's draft, gate,
	// wait, unwait, complete: Word names it).
	Action string
	// Text is the goal of "set": the argument with its whitespace runs
	// kept, trimmed, at most GoalTextMax characters.
	Text string
	// Word is the unsupported subcommand, lowercased.
	Word string
}

// goalWords are /goal's one-word subcommands.
var goalWords = map[string]string{
	"status": "status", "show": "show", "pause": "pause", "resume": "resume",
	"clear": "clear", "stop": "clear", "done": "clear",
}

// unsupportedGoal are Hermes's /goal subcommands this gateway does not
// offer (completion contracts, quality gates, wait barriers): their
// first word is taken as the subcommand, as Hermes takes it, rather than
// as a goal's text.
var unsupportedGoal = map[string]bool{"draft": true, "gate": true, "gates": true, "wait": true, "unwait": true, "complete": true}

// ParseGoal reads /goal's argument.
func ParseGoal(args string) Goal {
	args = strings.TrimSpace(args)
	if args == "" {
		return Goal{Action: "status"}
	}
	lower := strings.ToLower(args)
	if a, ok := goalWords[lower]; ok {
		return Goal{Action: a}
	}
	first := strings.ToLower(strings.Fields(args)[0])
	if unsupportedGoal[first] {
		return Goal{Action: "unsupported", Word: first}
	}
	return Goal{Action: "set", Text: clip(args, GoalTextMax)}
}

// Subgoal is /subgoal's argument, read as Hermes reads it.
type Subgoal struct {
	// Action is "list" (no argument), "add" (Text), "remove" (Index;
	// 0 with Problem set when it is missing or no number) or "clear".
	Action string
	Text   string
	Index  int
	// Problem is Hermes's answer to a malformed remove ("" none).
	Problem string
}

// ParseSubgoal reads /subgoal's argument.
func ParseSubgoal(args string) Subgoal {
	args = strings.TrimSpace(args)
	if args == "" {
		return Subgoal{Action: "list"}
	}
	var verb, rest string
	if i := strings.IndexAny(args, " \t\n\r"); i >= 0 {
		verb, rest = args[:i], args[i+1:]
	} else {
		verb, rest = args, ""
	}
	rest = strings.TrimSpace(rest)
	switch strings.ToLower(verb) {
	case "remove":
		if rest == "" {
			return Subgoal{Action: "remove", Problem: "Usage: /subgoal remove <n>"}
		}
		n, err := strconv.Atoi(strings.Fields(rest)[0])
		if err != nil {
			return Subgoal{Action: "remove", Problem: "/subgoal remove: <n> must be an integer (1-based index)."}
		}
		return Subgoal{Action: "remove", Index: n}
	case "clear":
		return Subgoal{Action: "clear"}
	}
	return Subgoal{Action: "add", Text: clip(args, GoalTextMax)}
}

// clip cuts s at n characters (invalid UTF-8 counts a byte as one).
func clip(s string, n int) string {
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	return strings.TrimSpace(string([]rune(s)[:n]))
}
