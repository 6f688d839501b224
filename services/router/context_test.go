package router

import (
	"context"
	"strings"
	"testing"

	"github.com/switchboard-chat/switchboard/pkg/footer"
	turnsv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/turns/v1"
	"github.com/switchboard-chat/switchboard/pkg/redisx"
	"github.com/switchboard-chat/switchboard/pkg/sessionstore"
)

// /context shows the footer's figure for the chat's current conversation
// against agent.context_window (gauge, bar, headroom), the compression
// threshold, the compressions and the conversation's throughput, and
// what the next prompt is made of; /ctx all adds the tool results by
// tool and each compression. A fresh conversation has nothing in its
// context (another conversation's figure is not its own), and mid-turn
// it answers at once, saying the figure is the last finished turn's.
func TestContextCommand(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	cfg := testConfig()
	cfg.ContextWindow, cfg.CompressAt, cfg.ProtectLast = 1000, 0.5, 4
	e.startRouter(cfg, nil, nil)
	release := make(chan struct{})
	w := e.startWorker(func(tr *turnsv1.TurnRequested) {
		if strings.Contains(strings.Join(inputsText([]*turnsv1.TurnRequested{tr}, tr.SessionKey), " "), "hold") {
			<-release
		}
	})
	ctx := context.Background()
	const alice = "agent:main:telegram:dm:chat-alice"

	// A fresh chat: the command's arrival starts an empty conversation.
	got := e.ask("alice", "/context")
	for _, want := range []string{"🧠 Context Window", "Window: 1,000 tokens", "Nothing in the context yet", "Auto-compression at 500 tokens (50% of the window)."} {
		if !strings.Contains(got, want) {
			t.Fatalf("/context of a fresh chat lacks %q:\n%s", want, got)
		}
	}

	// A few turns, then what the worker stored of them: the system
	// prompt, a compression summary of the first message, the messages
	// after it, each turn with its usage and the latest turn's figure.
	e.publish(dm("alice", "first"))
	e.publish(dm("alice", "second"))
	waitFor(t, "the turns", func() bool { turns, _ := w.snapshot(); return len(turns) == 2 })
	sess, err := sessionstore.New(e.db).Get(ctx, alice)
	if err != nil {
		t.Fatal(err)
	}
	exec := func(sql string, args ...any) {
		t.Helper()
		if _, err := e.db.Exec(ctx, sql, args...); err != nil {
			t.Fatal(err)
		}
	}
	exec(`INSERT INTO session_prompts (session_id, session_key, signature, prompt) VALUES ($1, $2, 'sig', $3)`, sess.ID, alice, strings.Repeat("p", 400))
	step := 0
	msg := func(role, content, calls, tool string) int64 {
		t.Helper()
		var tc any
		if calls != "" {
			tc = calls
		}
		step++
		var id int64
		if err := e.db.QueryRow(ctx, `INSERT INTO transcript_messages (session_key, session_id, turn_id, generation, step, role, content, tool_calls, tool_name)
			VALUES ($1, $2, 'turn-1', $3, $4, $5, $6, $7, $8) RETURNING id`, alice, sess.ID, sess.Generation, step, role, content, tc, tool).Scan(&id); err != nil {
			t.Fatal(err)
		}
		return id
	}
	old := msg("user", strings.Repeat("o", 1000), "", "")
	exec(`INSERT INTO transcript_summaries (session_id, session_key, upto_id, summary, turn_id, generation, created_at)
		VALUES ($1, $2, $3, $4, 'turn-1', $5, '2026-12-01 10:00:00+00')`, sess.ID, alice, old, strings.Repeat("s", 200), sess.Generation)
	// 100 bytes each with their framing: content + 16, a call's name and
	// arguments + 16.
	msg("user", strings.Repeat("u", 84), "", "")
	msg("assistant", "", `[{"id": "c1", "name": "web_search", "arguments": "`+strings.Repeat("a", 58)+`"}]`, "")
	msg("tool", strings.Repeat("r", 284), "", "web_search")
	msg("tool", strings.Repeat("r", 84), "", "read_file")
	msg("assistant", strings.Repeat("x", 84), "", "")
	msg("user", strings.Repeat("u", 84), "", "")
	for i, u := range [][2]int64{{300, 20}, {400, 30}} {
		exec(`INSERT INTO worker_turns (turn_id, session_key, session_id, generation, status, final_kind, model, input_tokens, output_tokens)
			VALUES ($1, $2, $3, $4, 'completed', 'final_text', 'openai/gpt-test', $5, $6)`,
			"turn-"+string(rune('a'+i)), alice, sess.ID, sess.Generation, u[0], u[1])
	}
	exec(`INSERT INTO session_context (session_key, session_id, turn_id, context_tokens, model) VALUES ($1, $2, 'turn-b', 420, 'openai/gpt-test')`, alice, sess.ID)

	got = e.ask("alice", "/context")
	for _, want := range []string{
		"Model: openai/gpt-test",
		"In use: 420 / 1,000 (42%)\n[██████████░░░░░░░░░░░░░░]\nHeadroom: 580 tokens",
		"🗜 Auto-compression at 500 tokens (50%): 80 to go",
		"Compressions in this conversation: 1",
		"Always kept verbatim: the last 4 messages (agent.protect_last)",
		"Throughput (tokens billed over all model calls, not context size): 700 in, 50 out",
		// 1,400 bytes: 400 + 200 + 200 (user) + 200 (assistant) + 400 (tool).
		"System prompt: ~100 tok (29%)\nSummary of earlier messages: ~50 tok (14%)\nYour messages (2): ~50 tok (14%)\nAgent's messages and tool calls (2): ~50 tok (14%)\nTool results (2): ~100 tok (29%)\nTotal: ~350 tok",
		"Use /context all",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("/context lacks %q:\n%s", want, got)
		}
	}
	if strings.Contains(got, "Tool results by tool") || strings.Contains(got, "⏳") {
		t.Errorf("/context without all, idle:\n%s", got)
	}
	// The footer's percentage, from the same numbers.
	if line := footer.Format("", 420, 1000); !strings.Contains(got, "("+line+")") {
		t.Errorf("/context and the footer (%q) disagree:\n%s", line, got)
	}

	got = e.ask("alice", "/ctx all")
	for _, want := range []string{
		"📎 Tool results by tool\nweb_search: 1 result, ~75 tok\nread_file: 1 result, ~25 tok",
		"🗜 Compressions\n1. 2026-12-01 10:00 UTC — summary ~50 tok",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("/ctx all lacks %q:\n%s", want, got)
		}
	}
	if strings.Contains(got, "Use /context all") {
		t.Errorf("/ctx all still offers itself:\n%s", got)
	}
	// A tool result the worker cleared to keep a turn within the window
	// counts as what the model reads of it.
	exec(`UPDATE transcript_messages SET compacted = $2 WHERE session_id = $1 AND tool_name = 'web_search'`, sess.ID, strings.Repeat("c", 84))
	if got := e.ask("alice", "/ctx all"); !strings.Contains(got, "web_search: 1 result, ~25 tok") {
		t.Errorf("/ctx all with a cleared result:\n%s", got)
	}
	if got := e.ask("alice", "/context everything"); got != "Usage: `/context [all]`" {
		t.Errorf("/context everything: %q", got)
	}

	// Mid-turn: answered at once, the figure the last finished turn's.
	e.publish(dm("alice", "hold on"))
	waitFor(t, "the held turn", func() bool { turns, _ := w.snapshot(); return len(turns) == 3 })
	got = e.ask("alice", "/context")
	if !strings.Contains(got, "In use: 420 / 1,000 (42%)") || !strings.Contains(got, "⏳ The agent is working: this is as of the last finished turn") {
		t.Errorf("/context mid-turn:\n%s", got)
	}
	close(release)

	// A new conversation: the last one's figure is not its own.
	waitFor(t, "the held turn's end", func() bool {
		owner, err := redisx.NewLocker(e.rdb, e.prefix).Owner(ctx, alice)
		return err == nil && owner == ""
	})
	if got := e.ask("alice", "/new"); !strings.Contains(got, "New session started") {
		t.Fatalf("/new: %q", got)
	}
	if got := e.ask("alice", "/context"); !strings.Contains(got, "Nothing in the context yet") {
		t.Errorf("/context after /new:\n%s", got)
	}
}

// contextText's other paths: a conversation no turn reported on (a
// /branch copy) gets the transcript's estimate, marked "~"; with an
// external agent there is no window, so no gauge; past the threshold it
// says so.
func TestContextText(t *testing.T) {
	t.Parallel()
	parts := []sessionstore.ContextPart{{Name: "user", Messages: 1, Bytes: 400}}
	for _, tt := range []struct {
		name      string
		in        contextInput
		want, not []string
	}{
		{"estimate", contextInput{view: sessionstore.ContextView{SystemBytes: 400, Parts: parts}, window: 1000, compressAt: 0.5},
			[]string{"In use: ~200 / 1,000 (20%)", "Headroom: ~800 tokens", "(estimated from the transcript", ": ~300 to go"}, nil},
		{"external agent", contextInput{view: sessionstore.ContextView{Tokens: 5000, Parts: parts}, compressAt: 0.5},
			[]string{"the external agent's own", "In use: 5,000 tokens"}, []string{"[█", "Auto-compression", "Headroom"}},
		{"over the threshold", contextInput{view: sessionstore.ContextView{Tokens: 900, Parts: parts}, window: 1000, compressAt: 0.85},
			[]string{"(90%)", "At or over the auto-compression threshold, 850 tokens (85%)"}, []string{"to go"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got := contextText(tt.in)
			for _, w := range tt.want {
				if !strings.Contains(got, w) {
					t.Errorf("lacks %q:\n%s", w, got)
				}
			}
			for _, n := range tt.not {
				if strings.Contains(got, n) {
					t.Errorf("has %q:\n%s", n, got)
				}
			}
		})
	}
}
