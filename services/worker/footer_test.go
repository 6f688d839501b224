package worker_test

import (
	"context"
	"strings"
	"testing"

	"github.com/switchboard-chat/switchboard/pkg/fakellm"
	"github.com/switchboard-chat/switchboard/pkg/footer"
	"github.com/switchboard-chat/switchboard/pkg/sessionstore"
)

// With the runtime footer on (TurnRequested.runtime_footer: /footer), the
// final answer ends with Hermes's footer after a blank line — the model
// and how full the context window was at the turn's last model call
// (agent.context_window, 128000 by default) — and nothing else carries
// it: not the streamed text, not the transcript the model reads back.
// Off, the answer is as it was.
func TestRuntimeFooterOnTheFinalAnswer(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.setGeneration("s1", 1)
	w := h.startWorker("w1", nil)
	defer w.stop(t)
	for _, tt := range []struct {
		name string
		on   bool
		want string
	}{
		{"on", true, "The answer is 42.\n\nfake-model · 25%"},
		{"off", false, "The answer is 42."},
	} {
		// A tool step first: the footer counts the last call's prompt.
		h.fake.Enqueue(fakellm.Reply{ToolCalls: []fakellm.ToolCall{{Name: "clock", Arguments: `{}`}},
			Usage: &fakellm.Usage{InputTokens: 1000, OutputTokens: 10}})
		h.fake.Enqueue(fakellm.Reply{Text: "The answer is 42.", Usage: &fakellm.Usage{InputTokens: 30000, CacheReadTokens: 2000, OutputTokens: 5}})
		req := h.requestTurn("s1", "what is six times seven? "+tt.name, turnOpts{footer: tt.on})
		if c := h.waitCompleted(req.TurnId); c.GetError() != "" {
			t.Fatalf("%s: %s", tt.name, c.GetError())
		}
		evs := h.replies(req.TurnId)
		final := checkReplies(t, evs)
		if got := final.GetFinalText().GetText(); got != tt.want {
			t.Errorf("%s: final %q, want %q", tt.name, got, tt.want)
		}
		for _, ev := range evs {
			if d := ev.GetTextDelta().GetText(); strings.Contains(d, "fake-model") {
				t.Errorf("%s: the footer in a text delta: %q", tt.name, d)
			}
		}
		var stored string
		if err := h.db.QueryRow(context.Background(), `SELECT content FROM transcript_messages WHERE turn_id = $1 AND role = 'assistant' AND content <> ''`, req.TurnId).Scan(&stored); err != nil {
			t.Fatal(err)
		}
		if stored != "The answer is 42." {
			t.Errorf("%s: transcript %q, want the answer alone", tt.name, stored)
		}
		// The same figure is stored with the final, on or off, for
		// /context (session_context, read by the router's store).
		view, err := sessionstore.New(h.db).Context(context.Background(), req.SessionKey, req.SessionId)
		if err != nil {
			t.Fatal(err)
		}
		if pct, _ := footer.Percent(view.Tokens, 128000); view.Tokens != 32000 || view.Model != "fake-model" || pct != 25 {
			t.Errorf("%s: /context reads %d tokens (%d%%) of %q, want the footer's 32000 (25%%) of fake-model", tt.name, view.Tokens, pct, view.Model)
		}
	}
}
