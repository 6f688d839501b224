package delivery

import (
	"encoding/json"
	"strings"
	"testing"

	repliesv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/replies/v1"
)

// Hermes's prompt for a chat without buttons, with the prefix the
// platform's users type, the call cut at 200 characters.
func TestApprovalText(t *testing.T) {
	send := &repliesv1.ToolProgress{ToolName: "send_message", Command: `send_message {"target":"telegram:5","text":"hi"}`,
		Reason: "send_message to telegram:5, a chat nobody allowed"}
	want := "⚠️ **Dangerous command requires approval:**\n```\nsend_message {\"target\":\"telegram:5\",\"text\":\"hi\"}\n```\n" +
		"Reason: send_message to telegram:5, a chat nobody allowed\n\n" +
		"Reply `/approve` to execute, `/approve session` to approve this pattern for the session, " +
		"`/approve always` to approve permanently, or `/deny` to cancel."
	if got := approvalText("telegram", send); got != want {
		t.Errorf("telegram prompt:\n%s\nwant:\n%s", got, want)
	}
	if got := approvalText("slack", send); !strings.Contains(got, "Reply `!approve` to execute, `!approve session`") ||
		!strings.Contains(got, "`!approve always` to approve permanently, or `!deny` to cancel.") || strings.Contains(got, "`/") {
		t.Errorf("slack prompt: %s", got)
	}
	long := &repliesv1.ToolProgress{ToolName: "rm", Command: "rm " + strings.Repeat("é", 300)}
	got := approvalText("discord", long)
	if want := "```\nrm " + strings.Repeat("é", 197) + "...\n```\nReason: dangerous command\n"; !strings.Contains(got, want) {
		t.Errorf("long call: %s", got)
	}
	// An external agent's step says less: the tool and its preview.
	if got := approvalText("telegram", &repliesv1.ToolProgress{ToolName: "terminal", Preview: "ls"}); !strings.Contains(got, "```\nterminal ls\n```") {
		t.Errorf("external agent's prompt: %s", got)
	}
}

func TestProgressLine(t *testing.T) {
	search := &repliesv1.ToolProgress{ToolName: "session_search", Emoji: "🔍", Preview: "tea and biscuits",
		Arguments: `{"query":"tea and biscuits","limit":3}`}
	long := &repliesv1.ToolProgress{ToolName: "terminal", Preview: strings.Repeat("x", 50), Arguments: `{"command":"` + strings.Repeat("x", 50) + `"}`}
	tests := []struct {
		mode   string
		length int
		step   *repliesv1.ToolProgress
		want   string
	}{
		{ToolProgressAll, 0, search, `🔍 session_search: "tea and biscuits"`},
		{ToolProgressNew, 0, search, `🔍 session_search: "tea and biscuits"`},
		{ToolProgressAll, 0, long, `⚙️ terminal: "` + strings.Repeat("x", 37) + `..."`},
		{ToolProgressAll, 10, long, `⚙️ terminal: "xxxxxxx..."`},
		{ToolProgressAll, 0, &repliesv1.ToolProgress{ToolName: "clock", Emoji: "🕐"}, "🕐 clock..."},
		{ToolProgressAll, 0, &repliesv1.ToolProgress{ToolName: "remote", Detail: `{"a":1}`}, `⚙️ remote: "{"a":1}"`},
		{ToolProgressVerbose, 0, search, "🔍 session_search(['query', 'limit'])\n{\"query\": \"tea and biscuits\", \"limit\": 3}"},
		{ToolProgressVerbose, 0, long, "⚙️ terminal(['command'])\n{\"command\": \"" + strings.Repeat("x", 50) + "\"}"},
		{ToolProgressVerbose, 20, long, "⚙️ terminal(['command'])\n{\"command\": \"xxxx..."},
		{ToolProgressVerbose, 0, &repliesv1.ToolProgress{ToolName: "clock", Preview: "UTC", Arguments: "{}"}, `⚙️ clock: "UTC"`},
		{ToolProgressVerbose, 0, &repliesv1.ToolProgress{ToolName: "clock"}, "⚙️ clock..."},
	}
	for _, tt := range tests {
		if got := progressLine(tt.mode, tt.length, tt.step); got != tt.want {
			t.Errorf("%s/%d %s: %q, want %q", tt.mode, tt.length, tt.step.GetToolName(), got, tt.want)
		}
	}
}

// The mode of a platform: its own setting, delivery's, its default,
// all; true and false read as all and off.
func TestToolProgressResolution(t *testing.T) {
	tests := []struct {
		name     string
		cfg      Config
		platform string
		want     string
	}{
		{"telegram's default", Config{}, "telegram", ToolProgressOff},
		{"discord's default", Config{}, "discord", ToolProgressAll},
		{"matrix's default", Config{}, "matrix", ToolProgressNew},
		{"an unlisted platform", Config{}, "irc", ToolProgressAll},
		{"delivery's over the default", Config{ToolProgress: "verbose"}, "telegram", ToolProgressVerbose},
		{"the platform's over delivery's", Config{ToolProgress: "off", Platforms: map[string]Platform{"telegram": {ToolProgress: "New"}}}, "Telegram", ToolProgressNew},
		{"true", Config{Platforms: map[string]Platform{"slack": {ToolProgress: "true"}}}, "slack", ToolProgressAll},
		{"false", Config{ToolProgress: "false"}, "discord", ToolProgressOff},
	}
	for _, tt := range tests {
		if got, _ := tt.cfg.toolProgress(tt.platform); got != tt.want {
			t.Errorf("%s: %s, want %s", tt.name, got, tt.want)
		}
	}
	cfg := Config{ToolPreviewLength: 30, Platforms: map[string]Platform{"discord": {ToolPreviewLength: 80}}}
	if _, n := cfg.toolProgress("discord"); n != 80 {
		t.Errorf("discord's preview length %d", n)
	}
	if _, n := cfg.toolProgress("slack"); n != 30 {
		t.Errorf("slack's preview length %d", n)
	}
}

// FuzzArgumentsOf: any arguments (the model writes them) are read
// without panicking, and what has keys is spaced JSON of the same value.
func FuzzArgumentsOf(f *testing.F) {
	for _, s := range []string{`{"a":1}`, `{"q":"x, y: z","n":[1,2],"o":{"k":"\"v\""}}`, `{"cut":"abc…`, `[]`, ``, `{`, `{"a":"\\"}`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		keys, args := argumentsOf(raw)
		if len(keys) == 0 || !json.Valid([]byte(raw)) {
			return
		}
		var a, b any
		if json.Unmarshal([]byte(raw), &a) != nil || json.Unmarshal([]byte(args), &b) != nil {
			t.Fatalf("spaced %q of %q is not JSON", args, raw)
		}
		if ja, _ := json.Marshal(a); string(ja) != string(mustMarshal(b)) {
			t.Fatalf("spaced %q differs from %q", args, raw)
		}
	})
}

func mustMarshal(v any) []byte {
	b, _ := json.Marshal(v)
	return b
}
