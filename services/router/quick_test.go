package router

import (
	"slices"
	"strings"
	"testing"

	eventsv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/events/v1"
)

func TestQuickCommandConfig(t *testing.T) {
	tests := []struct {
		name string
		qc   map[string]QuickCommand
		want string // "" when valid
	}{
		{"alias", map[string]QuickCommand{"mini": {Type: "alias", Target: "/model gpt-4o-mini"}}, ""},
		{"target without slash", map[string]QuickCommand{"later": {Type: "alias", Target: "queue"}}, ""},
		{"target an alias of a built-in", map[string]QuickCommand{"fresh": {Type: "alias", Target: "/reset"}}, ""},
		{"exec", map[string]QuickCommand{"disk": {Type: "exec", Command: "df -h"}}, "type exec"},
		{"command without type", map[string]QuickCommand{"disk": {Command: "df -h"}}, "type exec"},
		{"unknown type", map[string]QuickCommand{"x": {Type: "macro", Target: "/new"}}, `type "macro" is not alias`},
		{"no target", map[string]QuickCommand{"x": {Type: "alias"}}, "is not a built-in command"},
		{"target not built in", map[string]QuickCommand{"x": {Type: "alias", Target: "/deploy"}}, `target "/deploy" is not a built-in command`},
		{"target a path", map[string]QuickCommand{"x": {Type: "alias", Target: "/usr/bin"}}, "is not a built-in command"},
		{"shadows a built-in", map[string]QuickCommand{"stop": {Type: "alias", Target: "/new"}}, "/stop is a built-in command"},
		{"shadows an alias", map[string]QuickCommand{"q": {Type: "alias", Target: "/new"}}, "/q is a built-in command"},
		{"uppercase name", map[string]QuickCommand{"Fast": {Type: "alias", Target: "/new"}}, "lowercase"},
		{"name with space", map[string]QuickCommand{"a b": {Type: "alias", Target: "/new"}}, "lowercase"},
		{"name with @", map[string]QuickCommand{"a@b": {Type: "alias", Target: "/new"}}, "lowercase"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := testConfig()
			cfg.QuickCommands = tt.qc
			err := cfg.Validate()
			switch {
			case tt.want == "" && err != nil:
				t.Fatalf("Validate: %v", err)
			case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
				t.Fatalf("Validate = %v, want an error containing %q", err, tt.want)
			case err != nil && !strings.Contains(err.Error(), "quick_commands."):
				t.Fatalf("Validate = %v, want the key named", err)
			}
		})
	}
}

// A quick command runs the built-in command it aliases, the user's words
// after the target's, under the target's rules (admins, mid-turn), and
// /help lists it.
func TestQuickCommands(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	cfg := testConfig()
	cfg.Admins = map[string][]string{"telegram": {"alice"}}
	cfg.QuickCommands = map[string]QuickCommand{
		"mini":  {Type: "alias", Target: "/model gpt-4o-mini"},
		"m":     {Type: "alias", Target: "model"},
		"later": {Type: "alias", Target: "/queue"},
	}
	e.startRouter(cfg, nil, nil)
	tests := []struct {
		user, text, want string
	}{
		{"alice", "/help", "Quick commands:\n/later — /queue\n/m — /model\n/mini — /model gpt-4o-mini"},
		{"alice", "/mini", "This session now uses gpt-4o-mini."},
		{"alice", "/status", "Model: gpt-4o-mini"},
		{"alice", "/M  claude-x", "This session now uses claude-x."},
		{"alice", "/m", "This session uses claude-x."},
		{"alice", "/later", "Usage: /queue <prompt>"},
		{"bob", "/mini", "/model is reserved for admins here."},
		{"alice", "/fats", "Unknown command /fats."},
	}
	for _, tt := range tests {
		if got := e.ask(tt.user, tt.text); !strings.Contains(got, tt.want) {
			t.Errorf("%s %s: got %q, want it to contain %q", tt.user, tt.text, got, tt.want)
		}
	}
}

// An alias of /queue runs its words as a turn, and "!" starts a quick
// command where it starts the built-in ones (Slack), while a "!" word
// that is no command stays text.
func TestQuickCommandRunsATurn(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	cfg := testConfig()
	cfg.QuickCommands = map[string]QuickCommand{"later": {Type: "alias", Target: "/queue"}}
	e.startRouter(cfg, nil, nil)
	w := e.startWorker(nil)
	src := &eventsv1.SessionSource{Platform: "slack", Account: "T1", ChatId: "D1", ChatType: "dm", UserId: "bob", UserName: "bob"}
	e.publish(&eventsv1.MessageReceived{EventId: nextEventID(), Text: "!later water the plants", Source: src})
	e.publish(&eventsv1.MessageReceived{EventId: nextEventID(), Text: "!laterr", Source: src})
	want := []string{"water the plants", "!laterr"}
	waitFor(t, "both messages run", func() bool {
		turns, _ := w.snapshot()
		var got []string
		for _, tr := range turns {
			for _, in := range tr.Inputs {
				got = append(got, in.Text)
			}
		}
		return slices.Equal(got, want)
	})
}
