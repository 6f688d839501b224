package router

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/switchboard-chat/switchboard/pkg/sessionstore"
)

// /insights reports on the asker's chat: its conversations of the
// window, their messages, tool calls, tokens by model and activity, in
// Hermes's gateway format; another user's conversations are not counted,
// and arguments it does not read get an answer saying why.
func TestInsightsCommand(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.startRouter(testConfig(), nil, nil)
	w := e.startWorker(nil)
	ctx := context.Background()
	const alice, bob = "agent:main:telegram:dm:chat-alice", "agent:main:telegram:dm:chat-bob"

	// The command's arrival starts the chat's first conversation, empty.
	if got := e.ask("alice", "/insights"); !strings.Contains(got, "Sessions: 1 | Messages: 0 | Tool calls: 0\nTokens: 0 (in: 0 / out: 0)") {
		t.Fatalf("/insights of a new chat: %q", got)
	}
	e.publish(dm("alice", "hello"))
	e.publish(dm("bob", "hello"))
	waitFor(t, "the turns", func() bool { turns, _ := w.snapshot(); return len(turns) == 2 })
	if got := e.ask("alice", "/new"); !strings.Contains(got, "New session started") {
		t.Fatalf("/new: %q", got)
	}
	hist, err := sessionstore.New(e.db).History(ctx, alice, 10)
	if err != nil || len(hist) != 2 {
		t.Fatalf("alice's conversations: %+v %v", hist, err)
	}
	first, second := hist[1].SessionID, hist[0].SessionID
	// Two consecutive days, at the same time of day, the second a few
	// minutes less than two days ago.
	start := time.Now().UTC().Truncate(time.Minute).Add(-3*24*time.Hour + 3*time.Minute)
	starts := map[string]time.Time{first: start, second: start.Add(24 * time.Hour)}
	for id, at := range starts {
		if _, err := e.db.Exec(ctx, `UPDATE session_history SET started_at = $3 WHERE session_key = $1 AND session_id = $2`, alice, id, at); err != nil {
			t.Fatal(err)
		}
	}
	// What workers store: each turn with its model and usage, ending five
	// minutes after its conversation started, and its messages.
	bobSess, err := sessionstore.New(e.db).Get(ctx, bob)
	if err != nil {
		t.Fatal(err)
	}
	for _, tr := range []struct {
		key, sid, model        string
		in, out, cacheRead     int64
		at                     time.Time
		toolCalls              string
		messages, toolMessages int
	}{
		{alice, first, "openai/gpt-4o", 1000, 200, 300, start,
			`[{"id": "1", "name": "web_search", "arguments": "{}"}, {"id": "2", "name": "read_file", "arguments": "{}"}, {"id": "3", "name": "web_search", "arguments": "{}"}]`, 1, 3},
		{alice, second, "claude-x", 10, 5, 0, start.Add(24 * time.Hour), "", 1, 0},
		{bob, bobSess.ID, "bobs-model", 9000, 900, 0, start, `[{"id": "1", "name": "terminal", "arguments": "{}"}]`, 1, 1},
	} {
		turn := "turn-" + tr.sid
		if _, err := e.db.Exec(ctx, `INSERT INTO worker_turns (turn_id, session_key, session_id, generation, status, final_kind, model,
			started_at, updated_at, input_tokens, output_tokens, cache_read_tokens)
			VALUES ($1, $2, $3, 1, 'completed', 'final_text', $4, $5, $6, $7, $8, $9)`,
			turn, tr.key, tr.sid, tr.model, tr.at, tr.at.Add(5*time.Minute), tr.in, tr.out, tr.cacheRead); err != nil {
			t.Fatal(err)
		}
		step := 0
		msg := func(role, calls, tool string) {
			t.Helper()
			var tc any
			if calls != "" {
				tc = calls
			}
			if _, err := e.db.Exec(ctx, `INSERT INTO transcript_messages (session_key, session_id, user_key, turn_id, generation, step, role, content, tool_calls, tool_name)
				VALUES ($1, $2, 'telegram:x', $3, 1, $4, $5, 'text', $6, $7)`, tr.key, tr.sid, turn, step, role, tc, tool); err != nil {
				t.Fatal(err)
			}
			step++
		}
		msg("user", "", "")
		if tr.toolCalls != "" {
			msg("assistant", tr.toolCalls, "")
		}
		for range tr.toolMessages {
			msg("tool", "", "some_tool")
		}
		msg("assistant", "", "")
	}

	busiest := start
	if start.Weekday() == time.Sunday { // then Monday, which comes first
		busiest = start.Add(24 * time.Hour)
	}
	want := strings.Join([]string{
		"📊 Insights — this chat, last 30 days",
		"",
		"Sessions: 2 | Messages: 8 | Tool calls: 3",
		"Tokens: 1,515 (in: 1,010 / out: 205)",
		"Active time: ~10m | Avg session: ~5m",
		"",
		"🤖 Models:",
		"  gpt-4o — 1 session, 1,500 tokens",
		"  claude-x — 1 session, 15 tokens",
		"",
		"🔧 Top Tools:",
		"  web_search — 2 calls (66.7%)",
		"  read_file — 1 calls (33.3%)",
		"",
		fmt.Sprintf("📅 Busiest: %ss (1 session), %s UTC (2 sessions)", busiest.Weekday().String()[:3], hour12(start.Hour())),
		"Active days: 2",
		"Best streak: 2 consecutive days",
	}, "\n")
	for _, args := range []string{"", " 30", " --days 30", "   30  "} {
		if got := e.ask("alice", "/insights"+args); got != want {
			t.Errorf("/insights%s:\n%s\nwant:\n%s", args, got, want)
		}
	}
	// Two days hold only the second conversation (a day later, at the
	// same time, so just within); one day, none.
	if got := e.ask("alice", "/insights 2"); !strings.Contains(got, "last 2 days\n\nSessions: 1 | Messages: 2 | Tool calls: 0\nTokens: 15 (in: 10 / out: 5)") {
		t.Errorf("/insights 2: %q", got)
	}
	if got := e.ask("alice", "/insights 1"); got != "No sessions found in this chat in the last 1 days." {
		t.Errorf("/insights 1: %q", got)
	}
	// Bob sees his own conversation, not Alice's.
	if got := e.ask("bob", "/insights"); !strings.Contains(got, "Sessions: 1 | Messages: 4 | Tool calls: 1\nTokens: 9,900 (in: 9,000 / out: 900)") ||
		strings.Contains(got, "gpt-4o") || strings.Contains(got, "web_search") {
		t.Errorf("bob's /insights: %q", got)
	}

	for _, tt := range []struct{ args, want string }{
		{"abc", `"abc" is not a number of days. ` + insightsUsage},
		{"-5", "The window must be at least 1 day. " + insightsUsage},
		{"0", "The window must be at least 1 day. " + insightsUsage},
		{"366", "366 days is too long a window. " + insightsUsage},
		{"99999999999999999999999", "99999999999999999999999 days is too long a window. " + insightsUsage},
		{"7 8", insightsUsage},
		{"--days", `"--days" is not a number of days. ` + insightsUsage},
		{"--source telegram", "/insights covers this chat's conversations; --source is not needed here."},
	} {
		if got := e.ask("alice", "/insights "+tt.args); got != tt.want {
			t.Errorf("/insights %s: %q, want %q", tt.args, got, tt.want)
		}
	}
}

func TestParseInsightsArgs(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		args    string
		days    int
		problem bool
	}{
		{"", 30, false}, {"7", 7, false}, {"--days 7", 7, false}, {"+7", 7, false}, {"365", 365, false}, {"1", 1, false},
		{"—days 7", 0, true}, // the command parser turns the dash back first
		{"x", 0, true}, {"7d", 0, true}, {"1.5", 0, true}, {"-1", 0, true}, {"366", 0, true}, {"7 7", 0, true}, {"--days 7 --days 8", 0, true},
	} {
		days, problem := parseInsightsArgs(tt.args)
		if (problem != "") != tt.problem || (!tt.problem && days != tt.days) {
			t.Errorf("parseInsightsArgs(%q) = %d, %q", tt.args, days, problem)
		}
	}
}

func FuzzParseInsightsArgs(f *testing.F) {
	for _, s := range []string{"", "7", "--days 7", "-3", "abc", "99999999999999999999", "--source x", "7 8"} {
		f.Add(s)
	}
	f.Add("--days")
	f.Add("+007")
	f.Add("--days --days 7")
	f.Add("\t--days\n365 ")
	f.Fuzz(func(t *testing.T, args string) {
		days, problem := parseInsightsArgs(args)
		if problem != "" {
			if days != 0 {
				t.Fatalf("%q: %d days and a problem %q", args, days, problem)
			}
			return
		}
		if days < 1 || days > maxInsightsDays {
			t.Fatalf("%q: %d days accepted", args, days)
		}
		// The days are the number the text ends with, or the default when
		// it has no words.
		words := strings.Fields(args)
		if len(words) == 0 {
			if days != defaultInsightsDays {
				t.Fatalf("%q: %d days, not the default", args, days)
			}
		} else if n, err := strconv.Atoi(strings.TrimPrefix(words[len(words)-1], "+")); err != nil || n != days {
			t.Fatalf("%q: %d days, not its last word", args, days)
		}
		// Written back in either form, they read back the same.
		for _, back := range []string{strconv.Itoa(days), "--days " + strconv.Itoa(days)} {
			if again, p := parseInsightsArgs(back); again != days || p != "" {
				t.Fatalf("%q: %d days; %q reads %d, %q", args, days, back, again, p)
			}
		}
	})
}

func TestFormatHelpers(t *testing.T) {
	t.Parallel()
	for d, want := range map[time.Duration]string{
		45 * time.Second: "45s", 12 * time.Minute: "12m", 3*time.Hour + 5*time.Minute: "3h 5m", 2 * time.Hour: "2h", 36 * time.Hour: "1.5d",
	} {
		if got := compactDuration(d); got != want {
			t.Errorf("compactDuration(%v) = %q, want %q", d, got, want)
		}
	}
	for h, want := range map[int]string{0: "12AM", 1: "1AM", 12: "12PM", 13: "1PM", 23: "11PM"} {
		if got := hour12(h); got != want {
			t.Errorf("hour12(%d) = %q, want %q", h, got, want)
		}
	}
	for in, want := range map[string]string{"": "unknown", "openai/gpt-4o": "gpt-4o", "a/b/c": "c", strings.Repeat("x", 30): strings.Repeat("x", 25)} {
		if got := shortModel(in); got != want {
			t.Errorf("shortModel(%q) = %q, want %q", in, got, want)
		}
	}
	dates := map[string]bool{"2026-01-01": true, "2026-01-02": true, "2026-01-03": true, "2026-01-05": true, "2025-12-31": true}
	if got := longestStreak(dates); got != 4 {
		t.Errorf("streak %d, want 4", got)
	}
}

// /provider tells the provider, its host, the default model and the
// session's own, and never the key or the rest of the URL.
func TestProviderCommand(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.provider = Provider{Kind: "openai", Model: "gpt-4o-mini", BaseURL: "https://user:sk-secret@llm.example.com:8443/v1/sk-path?key=sk-query"}
	e.startRouter(testConfig(), nil, nil)
	got := e.ask("alice", "/provider")
	for _, want := range []string{"🔌 Current provider: OpenAI-compatible (openai)\nEndpoint: llm.example.com:8443\nDefault model: gpt-4o-mini\nThis session: the default model",
		"✅ openai — OpenAI-compatible ← active", "❌ anthropic — Anthropic", "Switch: /model <name>"} {
		if !strings.Contains(got, want) {
			t.Errorf("/provider %q lacks %q", got, want)
		}
	}
	for _, secret := range []string{"sk-", "user", "/v1", "https"} {
		if strings.Contains(got, secret) {
			t.Errorf("/provider %q shows %q", got, secret)
		}
	}
	if got := e.ask("alice", "/model gpt-4.1"); got != "This session now uses gpt-4.1." {
		t.Fatalf("/model: %q", got)
	}
	if got := e.ask("alice", "/provider"); !strings.Contains(got, "This session: gpt-4.1 (set with /model)") {
		t.Errorf("/provider after /model: %q", got)
	}
}

func TestProviderText(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		p         Provider
		want, not string
	}{
		{Provider{Kind: "anthropic", Model: "claude-sonnet-4-5"}, "Anthropic (anthropic)\nEndpoint: api.anthropic.com\nDefault model: claude-sonnet-4-5", "✅ openai"},
		{Provider{Kind: "openai", BaseURL: "not a url"}, "Endpoint: a custom endpoint", "not a url"},
		{Provider{Kind: "fake", Model: "fake-model"}, "the built-in fake model", "✅"},
		{Provider{}, "none configured", "✅"},
		{Provider{Kind: "openai", Agent: "grpc://agent.internal:7000"}, "an external agent at agent.internal:7000", "grpc"},
	} {
		got := (&Service{provider: tt.p}).providerText(sessionstore.Session{})
		if !strings.Contains(got, tt.want) || strings.Contains(got, tt.not) {
			t.Errorf("%+v: %q, want %q and not %q", tt.p, got, tt.want, tt.not)
		}
	}
}
