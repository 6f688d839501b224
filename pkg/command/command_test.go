package command_test

import (
	"slices"
	"strings"
	"testing"
	"unicode"

	"github.com/switchboard-chat/switchboard/pkg/command"
)

func TestForOtherBot(t *testing.T) {
	tests := []struct {
		text, platform, bot string
		want                bool
	}{
		{"/new@otherbot", "telegram", "switchbot", true},
		{"  /strat@OtherBot please", "telegram", "switchbot", true},
		{"/new@SwitchBot", "telegram", "@switchbot", false},
		{"/new@otherbot", "telegram", "", false}, // our name is unknown: every command is ours
		{"/new", "telegram", "switchbot", false},
		{"/new@", "telegram", "switchbot", false},
		{"/@otherbot", "telegram", "switchbot", false},
		{"/usr/bin@x", "telegram", "switchbot", false},
		{"mail me@otherbot", "telegram", "switchbot", false},
		{"!new@otherbot", "slack", "switchbot", true},
		{"!nice@work", "slack", "switchbot", false},
		{"!new@otherbot", "telegram", "switchbot", false},
	}
	for _, tt := range tests {
		if got := command.ForOtherBot(tt.text, tt.platform, tt.bot); got != tt.want {
			t.Errorf("ForOtherBot(%q, %s, %s) = %v, want %v", tt.text, tt.platform, tt.bot, got, tt.want)
		}
		if _, ok := command.Parse(tt.text, tt.platform, tt.bot); ok && tt.want {
			t.Errorf("Parse reads %q, for another bot, as a command", tt.text)
		}
	}
}

func TestParse(t *testing.T) {
	tests := []struct {
		name     string
		text     string
		platform string
		bot      string
		want     command.Command
		ok       bool
	}{
		{"plain", "/new", "telegram", "", command.Command{Name: "new", Typed: "new", Known: true}, true},
		{"uppercase", "/STATUS", "telegram", "", command.Command{Name: "status", Typed: "status", Known: true}, true},
		{"leading space", "  \t/help", "discord", "", command.Command{Name: "help", Typed: "help", Known: true}, true},
		{"alias reset", "/reset", "telegram", "", command.Command{Name: "new", Typed: "reset", Known: true}, true},
		{"alias q with args", "/q  do this next  ", "telegram", "", command.Command{Name: "queue", Typed: "q", Args: "do this next", Known: true}, true},
		{"args verbatim inside", "/steer  use  two   spaces\nand a line", "telegram", "", command.Command{Name: "steer", Typed: "steer", Args: "use  two   spaces\nand a line", Known: true}, true},
		{"newline ends the word", "/title\nMy chat", "telegram", "", command.Command{Name: "title", Typed: "title", Args: "My chat", Known: true}, true},
		{"ios dashes", "/model gpt —provider x – y", "telegram", "", command.Command{Name: "model", Typed: "model", Args: "gpt --provider x - y", Known: true}, true},
		{"bot suffix ours", "/new@SwitchBot now", "telegram", "switchbot", command.Command{Name: "new", Typed: "new", Args: "now", Known: true}, true},
		{"bot suffix with @ in config", "/new@switchbot", "telegram", "@SwitchBot", command.Command{Name: "new", Typed: "new", Known: true}, true},
		{"bot suffix other bot", "/new@otherbot", "telegram", "switchbot", command.Command{}, false},
		{"bot suffix any when bot unknown", "/new@otherbot", "telegram", "", command.Command{Name: "new", Typed: "new", Known: true}, true},
		{"empty suffix", "/new@", "telegram", "switchbot", command.Command{Name: "new", Typed: "new", Known: true}, true},
		{"telegram's start", "/start", "telegram", "", command.Command{Name: "start", Typed: "start", Known: true}, true},
		{"unknown", "/strat", "telegram", "", command.Command{Name: "strat", Typed: "strat"}, true},
		{"alias bg", "/bg  Summarize the top HN stories today ", "telegram", "", command.Command{Name: "background", Typed: "bg", Args: "Summarize the top HN stories today", Known: true}, true},
		{"bang bg on slack", "!bg later", "slack", "", command.Command{Name: "background", Typed: "bg", Args: "later", Known: true}, true},
		{"alias tasks", "/tasks", "telegram", "", command.Command{Name: "agents", Typed: "tasks", Known: true}, true},
		{"agents on slack", "!agents", "slack", "", command.Command{Name: "agents", Typed: "agents", Known: true}, true},
		{"alias ctx", "/ctx all", "telegram", "", command.Command{Name: "context", Typed: "ctx", Args: "all", Known: true}, true},
		{"btw is its own command", "/btw which file was it?", "telegram", "", command.Command{Name: "btw", Typed: "btw", Args: "which file was it?", Known: true}, true},
		{"moa takes the rest as its prompt", "/moa compare\nthese two", "telegram", "", command.Command{Name: "moa", Typed: "moa", Args: "compare\nthese two", Known: true}, true},
		{"bang moa on slack", "!moa why?", "slack", "", command.Command{Name: "moa", Typed: "moa", Args: "why?", Known: true}, true},
		{"alias fork", "/fork  Plan B ", "telegram", "", command.Command{Name: "branch", Typed: "fork", Args: "Plan B", Known: true}, true},
		{"yolo", "/yolo", "telegram", "", command.Command{Name: "yolo", Typed: "yolo", Known: true}, true},
		{"hermes alias", "/set-home", "telegram", "", command.Command{Name: "sethome", Typed: "set-home", Known: true}, true},
		{"unknown with args", "/stauts please", "telegram", "", command.Command{Name: "stauts", Typed: "stauts", Args: "please"}, true},
		{"slash only", "/", "telegram", "", command.Command{}, false},
		{"slash space word", "/ foo", "telegram", "", command.Command{}, false},
		{"path", "/usr/bin/env python", "telegram", "", command.Command{}, false},
		{"path with trailing slash", "/tmp/", "telegram", "", command.Command{}, false},
		{"not leading", "please /new", "telegram", "", command.Command{}, false},
		{"empty", "", "telegram", "", command.Command{}, false},
		{"spaces", "   ", "telegram", "", command.Command{}, false},
		{"bang on slack", "!stop", "slack", "", command.Command{Name: "stop", Typed: "stop", Known: true}, true},
		{"bang on matrix", "!Q later", "Matrix", "", command.Command{Name: "queue", Typed: "q", Args: "later", Known: true}, true},
		{"bang elsewhere is text", "!stop", "telegram", "", command.Command{}, false},
		{"bang alone", "!", "slack", "", command.Command{}, false},
		{"bang before a word that is no command is text", "!nice work", "slack", "", command.Command{}, false},
		{"bang before a typo is text", "!stpo", "slack", "", command.Command{}, false},
		{"slash still works on slack", "/undo", "slack", "", command.Command{Name: "undo", Typed: "undo", Known: true}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := command.Parse(tt.text, tt.platform, tt.bot)
			if ok != tt.ok || got != tt.want {
				t.Errorf("Parse(%q, %q, %q) = %+v, %v; want %+v, %v", tt.text, tt.platform, tt.bot, got, ok, tt.want, tt.ok)
			}
		})
	}
}

func TestKnownSet(t *testing.T) {
	want := []string{"new", "reset", "stop", "queue", "q", "steer", "status", "help", "whoami", "model",
		"approve", "deny", "resume", "sessions", "title", "retry", "undo", "sethome", "set-home", "cron", "usage", "compress", "insights", "provider", "personality", "reasoning", "start",
		"verbose", "commands", "profile", "version", "v", "background", "bg", "btw", "branch", "fork", "yolo", "approvals", "busy", "footer", "agents", "tasks", "voice", "fast", "context", "ctx", "platform", "goal", "subgoal", "loop", "proactive", "heartbeat", "hb", "topic", "pause", "save", "moa", "memory", "reload-skills", "reload_skills", "bundles"}
	for _, n := range want {
		c, ok := command.Parse("/"+n, "telegram", "")
		if !ok || !c.Known {
			t.Errorf("/%s: known=%v ok=%v", n, c.Known, ok)
		}
	}
	if got := len(command.Names()); got != len(want)-11 {
		t.Errorf("Names() has %d, want %d canonical names", got, len(want)-11)
	}
}

func TestSuggest(t *testing.T) {
	tests := []struct {
		in   string
		want []string
	}{
		{"stauts", []string{"status"}},
		{"/stop", []string{"stop"}},
		{"sto", []string{"stop"}},
		{"sess", []string{"sessions"}},
		{"session", []string{"sessions", "version"}}, // two letters from version: Hermes's close matches have it too
		{"approv", []string{"approvals", "approve"}},
		{"rest", []string{"new"}},          // reset is one letter away
		{"res", []string{"new", "resume"}}, // prefix of reset and resume
		{"modle", []string{"model"}},
		{"helpme", []string{"help"}},
		{"xyzzy", nil},
		{"", nil},
		{"strat", nil},
		{"queu", []string{"queue"}},
		{"personalty", []string{"personality"}},
		{"persona", []string{"personality"}},
		{"reason", []string{"reasoning"}},
		{"backgroud", []string{"background"}},
		{"agent", []string{"agents"}},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			got := command.Suggest(tt.in)
			if !slices.Equal(got, tt.want) {
				t.Errorf("Suggest(%q) = %q, want %q", tt.in, got, tt.want)
			}
		})
	}
}

func FuzzParse(f *testing.F) {
	f.Add("/new@bot args", "telegram", "bot")
	f.Add("!q  later ", "slack", "")
	f.Add("/usr/bin", "telegram", "")
	f.Add("/ foo", "discord", "")
	f.Add("\u00a0/Model — x", "matrix", "@Bot")
	f.Fuzz(func(t *testing.T, text, platform, bot string) {
		c, ok := command.Parse(text, platform, bot)
		trimmed := strings.TrimLeftFunc(text, unicode.IsSpace)
		if !ok {
			if c != (command.Command{}) {
				t.Fatalf("not ok but %+v", c)
			}
			return
		}
		if !strings.HasPrefix(trimmed, "/") && !strings.HasPrefix(trimmed, "!") {
			t.Fatalf("%q parsed without a prefix", text)
		}
		if c.Typed == "" || c.Name == "" {
			t.Fatalf("empty name from %q", text)
		}
		if strings.ContainsAny(c.Typed, "/@") || strings.IndexFunc(c.Typed, unicode.IsSpace) >= 0 {
			t.Fatalf("bad name %q from %q", c.Typed, text)
		}
		if c.Typed != strings.ToLower(c.Typed) {
			t.Fatalf("name %q not lowercased", c.Typed)
		}
		if c.Args != strings.TrimSpace(c.Args) {
			t.Fatalf("args %q not trimmed", c.Args)
		}
		if !strings.ContainsAny(text, "\u2013\u2014") && !strings.Contains(text, c.Args) {
			t.Fatalf("args %q not from %q", c.Args, text)
		}
		if name, known := command.Canonical(c.Typed); name != c.Name || known != c.Known {
			t.Fatalf("Canonical(%q) = %q,%v; got %q,%v", c.Typed, name, known, c.Name, c.Known)
		}
		for _, s := range command.Suggest(c.Typed) {
			if _, known := command.Canonical(s); !known {
				t.Fatalf("suggested unknown %q", s)
			}
		}
	})
}

func BenchmarkParse(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		command.Parse("  /Queue@SwitchBot look at the logs — then fix it", "telegram", "switchbot")
	}
}

func BenchmarkSuggest(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		command.Suggest("sesions")
	}
}

func TestApprovalScope(t *testing.T) {
	tests := map[string]string{
		"":                command.ApproveOnce,
		"please":          command.ApproveOnce,
		"session":         command.ApproveSession,
		"SES":             command.ApproveSession,
		"always":          command.ApproveAlways,
		"all permanently": command.ApproveAlways,
		"permanent":       command.ApproveAlways,
		// As Hermes: "always" beats "session" in either order.
		"session always":    command.ApproveAlways,
		"always session":    command.ApproveAlways,
		"all ses permanent": command.ApproveAlways,
		"all":               command.ApproveOnce,
	}
	for args, want := range tests {
		if got := command.ApprovalScope(args); got != want {
			t.Errorf("ApprovalScope(%q) = %q, want %q", args, got, want)
		}
	}
}

// The prefix a platform's users type is one Parse takes as a command.
func TestTypedPrefix(t *testing.T) {
	for platform, want := range map[string]string{"slack": "!", "Matrix": "!", "telegram": "/", "discord": "/", "": "/"} {
		got := command.TypedPrefix(platform)
		if got != want {
			t.Errorf("TypedPrefix(%q) = %q, want %q", platform, got, want)
		}
		if c, ok := command.Parse(got+"approve session", platform, ""); !ok || c.Name != "approve" {
			t.Errorf("%q: %q is not read as /approve: %+v %v", platform, got+"approve session", c, ok)
		}
	}
}

// ParseWith reads the operator's own commands as Parse reads an unknown
// word, except that "!" starts them too.
func TestParseWithExtra(t *testing.T) {
	extra := func(name string) bool { return name == "deploy" }
	tests := []struct {
		text, platform string
		want           command.Command
		ok             bool
	}{
		{"/deploy prod", "telegram", command.Command{Name: "deploy", Typed: "deploy", Args: "prod"}, true},
		{"!Deploy prod", "slack", command.Command{Name: "deploy", Typed: "deploy", Args: "prod"}, true},
		{"!deploys", "slack", command.Command{}, false},
		{"!stop", "slack", command.Command{Name: "stop", Typed: "stop", Known: true}, true},
		{"!deploy", "telegram", command.Command{}, false},
	}
	for _, tt := range tests {
		got, ok := command.ParseWith(tt.text, tt.platform, "", extra)
		if ok != tt.ok || got != tt.want {
			t.Errorf("ParseWith(%q, %s) = %+v, %v; want %+v, %v", tt.text, tt.platform, got, ok, tt.want, tt.ok)
		}
	}
}
