package worker_test

import (
	"strings"
	"testing"
	"time"

	turnsv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/turns/v1"
	"github.com/switchboard-chat/switchboard/pkg/sessionkey"
)

// A /btw side question (TurnRequested.side_question) answers while the
// chat's long turn runs, from the chat's conversation as committed, in
// one model call offered no tools; it writes nothing to any transcript,
// its answer comes under Hermes's "💬 /btw:" header, and the chat's turn
// runs on undisturbed and answers as it would have.
func TestSideQuestionAnswersBesideARunningTurn(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.startWorker("w1", nil)
	ctx := t.Context()
	const chat = "agent:main:telegram:dm:99"
	chatSession := "sid-" + chat
	h.setGeneration(chat, 1)
	first := h.requestTurn(chat, "The file was config/runtime.yaml.", turnOpts{})
	if c := h.waitCompleted(first.TurnId); c.GetStatus() != turnsv1.TurnStatus_TURN_STATUS_COMPLETED {
		t.Fatalf("the chat's first turn: %v (%s)", c.GetStatus(), c.GetError())
	}
	// The chat's next turn waits on a slow model.
	long := h.requestTurn(chat, "[[latency:2s]] now the long job", turnOpts{})
	waitFor(t, 10*time.Second, "the long turn's model call", func() bool {
		for _, r := range h.fake.Requests() {
			if strings.Contains(r.LastUserText(), "now the long job") {
				return true
			}
		}
		return false
	})
	count := func(where string, arg string) int {
		t.Helper()
		var n int
		if err := h.db.QueryRow(ctx, `SELECT count(*) FROM transcript_messages WHERE `+where+` = $1`, arg).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	before := count("session_id", chatSession)

	key := sessionkey.Background(chat, "", "btw_072011_a1b2c3")
	h.setGeneration(key, 1)
	side := h.requestTurn(key, "Which file was it?", turnOpts{answerOnly: true, side: chatSession})
	if c := h.waitCompleted(side.TurnId); c.GetStatus() != turnsv1.TurnStatus_TURN_STATUS_COMPLETED {
		t.Fatalf("the side question: %v (%s)", c.GetStatus(), c.GetError())
	}
	if h.completed(long.TurnId) != nil {
		t.Fatal("the side question waited for the chat's long turn")
	}
	evs := h.replies(side.TurnId)
	final := checkReplies(t, evs)
	if len(evs) != 1 {
		t.Errorf("%d events, want the answer alone: %v", len(evs), evs)
	}
	answer := final.GetFinalText().GetText()
	if !strings.HasPrefix(answer, "💬 /btw: \"Which file was it?\"\n\necho: ") || !strings.Contains(answer, "config/runtime.yaml") {
		t.Errorf("answer %q", answer)
	}
	var asked int
	for _, r := range h.fake.Requests() {
		text := r.LastUserText()
		if !strings.Contains(text, "Side question: Which file was it?") {
			continue
		}
		asked++
		if len(r.Tools) != 0 || len(r.Messages) != 1 || !strings.Contains(r.System, "/btw") ||
			!strings.Contains(text, "USER: The file was config/runtime.yaml.\nASSISTANT: echo: The file was config/runtime.yaml.") ||
			strings.Contains(text, "long job") {
			t.Errorf("the side question's request: %d tools, %d messages, system %q, text %q", len(r.Tools), len(r.Messages), r.System, text)
		}
	}
	if asked != 1 {
		t.Errorf("the model was asked the side question %d times", asked)
	}
	if after := count("session_id", chatSession); after != before {
		t.Errorf("the chat's transcript went from %d to %d messages", before, after)
	}
	if n := count("session_key", key); n != 0 {
		t.Errorf("the side question wrote %d transcript messages", n)
	}

	// The chat's turn was not disturbed.
	c := h.waitCompleted(long.TurnId)
	if c.GetStatus() != turnsv1.TurnStatus_TURN_STATUS_COMPLETED {
		t.Fatalf("the long turn: %v (%s)", c.GetStatus(), c.GetError())
	}
	if got := checkReplies(t, h.replies(long.TurnId)).GetFinalText().GetText(); got != "echo: now the long job" {
		t.Errorf("the long turn answered %q", got)
	}
	if n := count("session_id", chatSession); n != before+2 {
		t.Errorf("the chat's transcript has %d messages, want %d", n, before+2)
	}
}

// A side question that fails says so under Hermes's "/btw failed:"; one
// about a conversation with nothing in it asks the model with an empty
// transcript, as Hermes does.
func TestSideQuestionFailureAndEmptyConversation(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.startWorker("w1", nil)
	tests := []struct {
		name, task, question string
		status               turnsv1.TurnStatus
		want                 string
	}{
		{"provider refuses", "btw_072011_000001", "[[fail:401]] which file?", turnsv1.TurnStatus_TURN_STATUS_FAILED, "/btw failed: "},
		{"empty conversation", "btw_072011_000002", "which file?", turnsv1.TurnStatus_TURN_STATUS_COMPLETED,
			"💬 /btw: \"which file?\"\n\necho: Conversation transcript (snapshot):\n-----\n(no prior conversation)\n-----\n\nSide question: which file?"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			key := sessionkey.Background("agent:main:telegram:dm:7", "", tt.task)
			h.setGeneration(key, 1)
			req := h.requestTurn(key, tt.question, turnOpts{answerOnly: true, side: "sid-nothing-here"})
			if c := h.waitCompleted(req.TurnId); c.GetStatus() != tt.status {
				t.Fatalf("status %v (%s), want %v", c.GetStatus(), c.GetError(), tt.status)
			}
			final := checkReplies(t, h.replies(req.TurnId))
			if tt.status == turnsv1.TurnStatus_TURN_STATUS_FAILED {
				if m := final.GetError().GetMessage(); !strings.HasPrefix(m, tt.want) || !strings.Contains(m, "credentials") {
					t.Errorf("error %q, want %q and the reason", m, tt.want)
				}
				return
			}
			if got := final.GetFinalText().GetText(); got != tt.want {
				t.Errorf("answer %q, want %q", got, tt.want)
			}
		})
	}
}
