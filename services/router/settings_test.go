package router

import (
	"context"
	"strings"
	"testing"

	turnsv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/turns/v1"
	"github.com/switchboard-chat/switchboard/pkg/sessionstore"
)

// /personality and /reasoning answer in Hermes's words, keep the chat's
// choice on its session row across /new, and every turn of the chat
// carries it: the personality's prompt, the effort and the display.
func TestPersonalityAndReasoningCommands(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	cfg := testConfig()
	cfg.Personalities["coder"] = "You are an expert programmer."
	cfg.Personalities["pirate"] = "" // an operator removes a built-in
	cfg.ReasoningEffort = "low"
	cfg.Admins = map[string][]string{"telegram": {"alice"}}
	e.startRouter(cfg, nil, nil)
	w := e.startWorker(nil)
	const key = "agent:main:telegram:dm:chat-alice"
	lastTurn := func(text string) *turnsv1.TurnRequested {
		t.Helper()
		e.publish(dm("alice", text))
		var turn *turnsv1.TurnRequested
		waitFor(t, "the turn of "+text, func() bool {
			turns, _ := w.snapshot()
			for _, tt := range turns {
				if tt.SessionKey == key && len(tt.Inputs) > 0 && tt.Inputs[len(tt.Inputs)-1].GetText() == text {
					turn = tt
					return true
				}
			}
			return false
		})
		return turn
	}

	turn := lastTurn("hello")
	if turn.PersonalityPrompt != "" || turn.ReasoningEffort != "" || turn.ShowReasoning {
		t.Fatalf("a chat without settings: personality %q, effort %q, show %v", turn.PersonalityPrompt, turn.ReasoningEffort, turn.ShowReasoning)
	}

	tests := []struct {
		user, text, want string
	}{
		{"alice", "/personality", "🎭 **Available Personalities**\n\n• `none` — (no personality overlay)\n• `helpful` — You are a helpful, friendly AI assistant.\n• `concise` — You are a concise assistant. Keep responses brief ...\n"},
		{"alice", "/personality", "• `coder` — You are an expert programmer.\n\nUsage: `/personality <name>`"},
		{"alice", "/personality Pirate", "Unknown personality: `pirate`\n\nAvailable: `none`, `helpful`, `concise`"},
		{"alice", "/personality coder", "🎭 Personality set to **coder**\n_(takes effect on next message)_"},
		{"alice", "/reasoning", "🧠 **Reasoning Settings**\n\n**Effort:** `low`\n**Scope:** global config\n**Display:** off\n\n_Usage:_ `/reasoning <none|minimal|low|medium|high|xhigh|reset|show|hide>`"},
		{"alice", "/reasoning HIGH", "🧠 ✓ Reasoning effort set to `high` (this chat only)\n_(takes effect on next message)_"},
		{"alice", "/reasoning max", "⚠️ Unknown argument: `max`\n\n**Valid levels:** none, minimal, low, medium, high, xhigh\n**Display:** show, hide"},
		{"alice", "/reasoning low --global", "⚠️ `--global` is not available here"},
		{"alice", "/reasoning show", "🧠 ✓ Reasoning display: **ON**\nModel thinking will be shown before each response in this chat."},
		{"alice", "/reasoning", "**Effort:** `high`\n**Scope:** session override\n**Display:** on ✓"},
		{"bob", "/personality", "/personality is reserved for admins here."},
		{"bob", "/reasoning high", "/reasoning is reserved for admins here."},
		{"alice", "/help", "/personality [name]"},
		{"alice", "/help", "/reasoning [level|show|hide]"},
	}
	for _, tt := range tests {
		if got := e.ask(tt.user, tt.text); !strings.Contains(got, tt.want) {
			t.Errorf("%s %s: got %q, want it to contain %q", tt.user, tt.text, got, tt.want)
		}
	}
	if got := e.ask("alice", "/personality"); strings.Contains(got, "`pirate`") {
		t.Errorf("a removed built-in is listed: %q", got)
	}

	turn = lastTurn("and now?")
	if turn.PersonalityPrompt != "You are an expert programmer." || turn.ReasoningEffort != "high" || !turn.ShowReasoning {
		t.Fatalf("the chat's settings: personality %q, effort %q, show %v", turn.PersonalityPrompt, turn.ReasoningEffort, turn.ShowReasoning)
	}
	// A new conversation keeps them, as Hermes keeps them per session key.
	if got := e.ask("alice", "/new"); !strings.Contains(got, "New session started") {
		t.Fatalf("/new: %q", got)
	}
	turn = lastTurn("a fresh start")
	if turn.PersonalityPrompt != "You are an expert programmer." || turn.ReasoningEffort != "high" || !turn.ShowReasoning {
		t.Fatalf("after /new: personality %q, effort %q, show %v", turn.PersonalityPrompt, turn.ReasoningEffort, turn.ShowReasoning)
	}

	for _, tt := range []struct{ text, want string }{
		{"/personality neutral", "🎭 Personality cleared — using base agent behavior.\n_(takes effect on next message)_"},
		{"/reasoning reset", "🧠 ✓ Session reasoning override cleared; falling back to global config."},
		{"/reasoning hide", "🧠 ✓ Reasoning display: **OFF** for this chat"},
	} {
		if got := e.ask("alice", tt.text); got != tt.want {
			t.Errorf("%s: got %q, want %q", tt.text, got, tt.want)
		}
	}
	turn = lastTurn("plain again")
	if turn.PersonalityPrompt != "" || turn.ReasoningEffort != "" || turn.ShowReasoning {
		t.Fatalf("cleared: personality %q, effort %q, show %v", turn.PersonalityPrompt, turn.ReasoningEffort, turn.ShowReasoning)
	}
	if got := e.ask("alice", "/reasoning none"); !strings.Contains(got, "set to `none`") {
		t.Fatalf("/reasoning none: %q", got)
	}
	if got := e.ask("alice", "/reasoning"); !strings.Contains(got, "**Effort:** `none (disabled)`") {
		t.Errorf("/reasoning after none: %q", got)
	}
	if turn = lastTurn("no thinking"); turn.ReasoningEffort != "none" {
		t.Fatalf("effort %q, want none", turn.ReasoningEffort)
	}
}

// A personality removed from the config after a chat chose it is dropped
// from its turns (and logged), not an error.
func TestRemovedPersonalityIsNone(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	cfg := testConfig()
	cfg.ReasoningEffort = ""
	e.startRouter(cfg, nil, nil)
	w := e.startWorker(nil)
	if got := e.ask("alice", "/reasoning"); !strings.Contains(got, "**Effort:** `provider default`\n**Scope:** global config") {
		t.Errorf("/reasoning without a default: %q", got)
	}
	// As if the operator removed it since the chat chose it.
	if err := sessionstore.New(e.db).SetPersonality(context.Background(), "agent:main:telegram:dm:chat-alice", "retired"); err != nil {
		t.Fatal(err)
	}
	e.publish(dm("alice", "hi"))
	waitFor(t, "the turn", func() bool { turns, _ := w.snapshot(); return len(turns) == 1 })
	turns, _ := w.snapshot()
	if p := turns[0].PersonalityPrompt; p != "" {
		t.Fatalf("personality prompt %q, want none", p)
	}
}

// /status shows the chat's own /personality and /reasoning, each only
// while it is set, between its model and its tokens.
func TestStatusShowsChatSettings(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.startRouter(testConfig(), nil, nil)
	e.startWorker(nil)
	steps := []struct {
		cmd        string
		want, hide []string
	}{
		{"", []string{"Model: default\nTokens: "}, []string{"Personality:", "Reasoning"}},
		{"/personality concise", []string{"Model: default\nPersonality: concise\nTokens: "}, []string{"Reasoning"}},
		{"/reasoning xhigh", []string{"Personality: concise\nReasoning effort: xhigh\nTokens: "}, []string{"Reasoning display"}},
		{"/reasoning show", []string{"Reasoning effort: xhigh\nReasoning display: on\nTokens: "}, nil},
		{"/personality none", []string{"Model: default\nReasoning effort: xhigh\n"}, []string{"Personality:"}},
		{"/reasoning reset", []string{"Model: default\nReasoning display: on\nTokens: "}, []string{"Personality:", "Reasoning effort"}},
		{"/reasoning hide", []string{"Model: default\nTokens: "}, []string{"Personality:", "Reasoning"}},
	}
	for _, st := range steps {
		if st.cmd != "" {
			e.ask("alice", st.cmd)
		}
		got := e.ask("alice", "/status")
		for _, w := range st.want {
			if !strings.Contains(got, w) {
				t.Errorf("after %q: /status %q lacks %q", st.cmd, got, w)
			}
		}
		for _, h := range st.hide {
			if strings.Contains(got, h) {
				t.Errorf("after %q: /status %q shows %q", st.cmd, got, h)
			}
		}
	}
}

// /status shows the chat's /fast and /voice beside /personality and
// /reasoning, each only while set: the voice mode in /voice status's
// words (Hermes's), and only as the chat's turns carry it, so a chat on
// a gateway without voice replies configured shows none.
func TestStatusShowsFastAndVoice(t *testing.T) {
	t.Parallel()
	for _, configured := range []bool{true, false} {
		e := newEnv(t)
		e.provider = Provider{Kind: "openai", Model: "gpt-5.4"}
		cfg := testConfig()
		cfg.VoiceReplies = configured
		e.startRouter(cfg, nil, nil)
		e.startWorker(nil)
		steps := []struct {
			cmd        string
			want, hide []string
		}{
			{"", []string{"Model: default\nTokens: "}, []string{"Fast mode", "Voice mode"}},
			{"/voice on", []string{"Model: default\nVoice mode: On (voice reply to voice messages)\nTokens: "}, []string{"Fast mode"}},
			{"/fast fast", []string{"Fast mode: fast\nVoice mode: On (voice reply to voice messages)\nTokens: "}, nil},
			{"/voice tts", []string{"Fast mode: fast\nVoice mode: TTS (voice reply to all messages)\nTokens: "}, nil},
			{"/voice off", []string{"Fast mode: fast\nTokens: "}, []string{"Voice mode"}},
			{"/fast normal", []string{"Fast mode: normal\nTokens: "}, []string{"Voice mode"}},
			{"/voice", []string{"Voice mode: On (voice reply to voice messages)\nTokens: "}, nil},
		}
		for _, st := range steps {
			if st.cmd != "" {
				e.ask("alice", st.cmd)
			}
			got := e.ask("alice", "/status")
			want, hide := st.want, st.hide
			if !configured {
				// /voice stores nothing: no voice line ever.
				want, hide = nil, []string{"Voice mode"}
				for _, w := range st.want {
					if !strings.Contains(w, "Voice mode") {
						want = append(want, w)
					}
				}
			}
			for _, w := range want {
				if !strings.Contains(got, w) {
					t.Errorf("voice configured %v, after %q: /status %q lacks %q", configured, st.cmd, got, w)
				}
			}
			for _, h := range hide {
				if strings.Contains(got, h) {
					t.Errorf("voice configured %v, after %q: /status %q shows %q", configured, st.cmd, got, h)
				}
			}
		}
		if got := e.ask("bob", "/status"); strings.Contains(got, "Voice mode") || strings.Contains(got, "Fast mode") {
			t.Errorf("bob's /status shows alice's settings: %q", got)
		}
	}
}
