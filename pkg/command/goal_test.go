package command

import (
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"
)

func TestParseGoal(t *testing.T) {
	tests := []struct {
		args string
		want Goal
	}{
		{"", Goal{Action: "status"}},
		{"  status ", Goal{Action: "status"}},
		{"STATUS", Goal{Action: "status"}},
		{"show", Goal{Action: "show"}},
		{"pause", Goal{Action: "pause"}},
		{"Resume", Goal{Action: "resume"}},
		{"clear", Goal{Action: "clear"}},
		{"stop", Goal{Action: "clear"}},
		{"done", Goal{Action: "clear"}},
		{"draft a plan for the launch", Goal{Action: "unsupported", Word: "draft"}},
		{"gate add make test", Goal{Action: "unsupported", Word: "gate"}},
		{"wait 1234", Goal{Action: "unsupported", Word: "wait"}},
		{"unwait", Goal{Action: "unsupported", Word: "unwait"}},
		{"complete tests pass", Goal{Action: "unsupported", Word: "complete"}},
		// Only a whole-word subcommand: a goal may start with one's letters.
		{"pause the build and write the report", Goal{Action: "set", Text: "pause the build and write the report"}},
		{"drafting a blog post", Goal{Action: "set", Text: "drafting a blog post"}},
		{"  fix every failing test\nand make CI green  ", Goal{Action: "set", Text: "fix every failing test\nand make CI green"}},
		{strings.Repeat("é", GoalTextMax+10), Goal{Action: "set", Text: strings.Repeat("é", GoalTextMax)}},
	}
	for _, tt := range tests {
		if got := ParseGoal(tt.args); got != tt.want {
			t.Errorf("ParseGoal(%q) = %+v, want %+v", tt.args, got, tt.want)
		}
	}
}

func TestParseSubgoal(t *testing.T) {
	tests := []struct {
		args string
		want Subgoal
	}{
		{"", Subgoal{Action: "list"}},
		{"   ", Subgoal{Action: "list"}},
		{"clear", Subgoal{Action: "clear"}},
		{"CLEAR", Subgoal{Action: "clear"}},
		{"remove 2", Subgoal{Action: "remove", Index: 2}},
		{"remove\t3 please", Subgoal{Action: "remove", Index: 3}},
		{"remove", Subgoal{Action: "remove", Problem: "Usage: /subgoal remove <n>"}},
		{"remove two", Subgoal{Action: "remove", Problem: "/subgoal remove: <n> must be an integer (1-based index)."}},
		{"tests must pass on CI", Subgoal{Action: "add", Text: "tests must pass on CI"}},
		{"removed files stay removed", Subgoal{Action: "add", Text: "removed files stay removed"}},
		{"clear the cache first", Subgoal{Action: "clear"}},
	}
	for _, tt := range tests {
		if got := ParseSubgoal(tt.args); got != tt.want {
			t.Errorf("ParseSubgoal(%q) = %+v, want %+v", tt.args, got, tt.want)
		}
	}
}

// FuzzParseGoal: every argument gets one of the actions; a goal's text
// is the trimmed argument, never empty, at most GoalTextMax characters.
func FuzzParseGoal(f *testing.F) {
	for _, s := range []string{"", "status", "pause", "wait 12", "ship it", "  \n", "draft x", strings.Repeat("a ", 3000)} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, args string) {
		g := ParseGoal(args)
		switch g.Action {
		case "status", "show", "pause", "resume", "clear":
			if g.Text != "" || g.Word != "" {
				t.Fatalf("ParseGoal(%q) = %+v: text with a subcommand", args, g)
			}
		case "unsupported":
			if !unsupportedGoal[g.Word] {
				t.Fatalf("ParseGoal(%q) = %+v: unknown subcommand", args, g)
			}
		case "set":
			if strings.TrimSpace(g.Text) == "" || utf8.RuneCountInString(g.Text) > GoalTextMax {
				t.Fatalf("ParseGoal(%q): goal %q", args, g.Text)
			}
			if utf8.ValidString(args) && !strings.HasPrefix(strings.TrimSpace(args), g.Text) {
				t.Fatalf("ParseGoal(%q): goal %q is not the argument's", args, g.Text)
			}
		default:
			t.Fatalf("ParseGoal(%q): action %q", args, g.Action)
		}
	})
}

// FuzzParseSubgoal: a criterion is the trimmed argument, never empty; a
// remove has an index or a problem.
func FuzzParseSubgoal(f *testing.F) {
	for _, s := range []string{"", "clear", "remove 1", "remove", "remove x", "must pass", "remove -3", "remove 99999999999999999999"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, args string) {
		sg := ParseSubgoal(args)
		switch sg.Action {
		case "list", "clear":
		case "remove":
			if sg.Problem != "" {
				return
			}
			fields := strings.Fields(args)
			if len(fields) < 2 || !strings.EqualFold(fields[0], "remove") {
				t.Fatalf("ParseSubgoal(%q) = %+v: no index given", args, sg)
			}
			if n, err := strconv.Atoi(fields[1]); err != nil || n != sg.Index {
				t.Fatalf("ParseSubgoal(%q) = %+v: index is not %q", args, sg, fields[1])
			}
		case "add":
			if strings.TrimSpace(sg.Text) == "" || utf8.RuneCountInString(sg.Text) > GoalTextMax {
				t.Fatalf("ParseSubgoal(%q): criterion %q", args, sg.Text)
			}
		default:
			t.Fatalf("ParseSubgoal(%q): action %q", args, sg.Action)
		}
	})
}
