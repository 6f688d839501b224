package worker_test

import (
	"context"
	"strings"
	"testing"
	"time"

	turnsv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/turns/v1"
	"github.com/switchboard-chat/switchboard/services/worker"
)

// /undo and /retry edit the conversation in a turn of their own: /undo
// removes the last exchanges and says what went, /retry removes the last
// exchange and answers its user message again; neither reaches the model
// as text.
func TestUndoAndRetryEditTheConversation(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.setGeneration("s1", 1)
	// A fixed clock: the retried exchange calls the clock tool again, and
	// its answer must not depend on the second it runs in.
	at := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	h.startWorker("w1", func(_ *worker.Config, d *worker.Deps) { d.Now = func() time.Time { return at } })
	ctx := context.Background()
	// turn runs one turn and returns its answer.
	turn := func(text string, o turnOpts) string {
		t.Helper()
		req := h.requestTurn("s1", text, o)
		if done := h.waitCompleted(req.TurnId); done.GetStatus() != turnsv1.TurnStatus_TURN_STATUS_COMPLETED {
			t.Fatalf("%q: %v %s", text, done.GetStatus(), done.GetError())
		}
		return checkReplies(t, h.replies(req.TurnId)).GetFinalText().GetText()
	}
	// transcript is the conversation as stored: role:content per message.
	transcript := func() string {
		t.Helper()
		rows, err := h.db.Query(ctx, `SELECT role, content FROM transcript_messages WHERE session_key = 's1' ORDER BY id`)
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
		var out []string
		for rows.Next() {
			var role, content string
			if err := rows.Scan(&role, &content); err != nil {
				t.Fatal(err)
			}
			out = append(out, role+":"+content)
		}
		return strings.Join(out, " | ")
	}

	turn("one", turnOpts{})
	second := turn(`two [[tool:clock {"tz":"UTC"}]]`, turnOpts{})
	turn("three", turnOpts{})
	before := transcript()
	calls := len(h.fake.Requests())

	if got := turn("/undo", turnOpts{command: "undo"}); got != "↩️ Undid the last exchange (2 messages), from: “three”" {
		t.Errorf("/undo answered %q", got)
	}
	afterUndo := transcript()
	if want := strings.TrimSuffix(before, " | user:three | assistant:echo: three"); afterUndo != want {
		t.Errorf("after /undo the transcript is\n%s\nwant\n%s", afterUndo, want)
	}

	if got := turn("/retry", turnOpts{command: "retry"}); got != second {
		t.Errorf("/retry answered %q, want the second message's answer again %q", got, second)
	}
	if got := transcript(); got != afterUndo {
		t.Errorf("after /retry the transcript is\n%s\nwant it as before, the exchange run again:\n%s", got, afterUndo)
	}
	// The model saw the conversation without the removed exchange, and
	// never the commands.
	reqs := h.fake.Requests()[calls:]
	if len(reqs) != 2 {
		t.Fatalf("/undo and /retry made %d model calls, want the retried message's 2", len(reqs))
	}
	var seen []string
	for _, m := range reqs[0].Messages {
		if m.Role == "user" || m.Role == "assistant" {
			seen = append(seen, m.Role+":"+m.Content)
		}
	}
	if got := strings.Join(seen, " | "); got != `user:one | assistant:echo: one | user:two [[tool:clock {"tz":"UTC"}]]` {
		t.Errorf("the retried call sent %s", got)
	}

	if got := turn("/undo 5", turnOpts{command: "undo 5"}); !strings.HasPrefix(got, "↩️ Undid all 2 exchanges there were (6 messages), from: “one”") {
		t.Errorf("/undo 5 answered %q", got)
	}
	if got := transcript(); got != "" {
		t.Errorf("after undoing everything the transcript holds %s", got)
	}
	if got := turn("/undo", turnOpts{command: "undo"}); got != "Nothing to undo." {
		t.Errorf("/undo of nothing answered %q", got)
	}
	if got := turn("/retry", turnOpts{command: "retry"}); got != "Nothing to retry." {
		t.Errorf("/retry of nothing answered %q", got)
	}
	// A message that only looks like a command is the model's.
	if got := turn("/undo", turnOpts{}); got != "echo: /undo" {
		t.Errorf("an unmarked /undo answered %q", got)
	}
}
