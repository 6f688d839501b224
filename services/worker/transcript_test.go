package worker_test

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/switchboard-chat/switchboard/pkg/command"
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

// /compress summarises the older messages at once, keeping the last
// protect_last, answers with what it did in Hermes's words, and reaches
// the model only for the summary; the next turn starts from the summary.
func TestCompressCommand(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.setGeneration("s1", 1)
	h.startWorker("w1", func(c *worker.Config, _ *worker.Deps) { c.Agent.ProtectLast = 2 })
	turn := func(text string, o turnOpts) string {
		t.Helper()
		req := h.requestTurn("s1", text, o)
		if done := h.waitCompleted(req.TurnId); done.GetStatus() != turnsv1.TurnStatus_TURN_STATUS_COMPLETED {
			t.Fatalf("%q: %v %s", text, done.GetStatus(), done.GetError())
		}
		return checkReplies(t, h.replies(req.TurnId)).GetFinalText().GetText()
	}
	summaries := func() int {
		t.Helper()
		var n int
		if err := h.db.QueryRow(context.Background(), `SELECT count(*) FROM transcript_summaries WHERE session_id = 'sid-s1'`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}

	if got, want := turn("/compress", turnOpts{command: "compress"}), "Not enough conversation to compress (need at least 4 messages)."; got != want {
		t.Errorf("/compress on an empty conversation answered %q, want %q", got, want)
	}
	turn("one", turnOpts{})
	turn("two", turnOpts{})
	calls := len(h.fake.Requests())
	got := turn("/compress", turnOpts{command: "compress"})
	if !strings.HasPrefix(got, "🗜️ Compressed: 4 → 3 messages\n~") {
		t.Errorf("/compress answered %q", got)
	}
	reqs := h.fake.Requests()[calls:]
	if len(reqs) != 1 || !strings.Contains(reqs[0].Messages[0].Content, "user: one") {
		t.Fatalf("/compress made %d model calls (%+v), want the summary's", len(reqs), reqs)
	}
	if n := summaries(); n != 1 {
		t.Fatalf("%d summaries stored, want 1", n)
	}
	// The summary and the two messages kept: as in Hermes, too little.
	if got, want := turn("/compress", turnOpts{command: "compress"}), "Not enough conversation to compress (need at least 4 messages)."; got != want {
		t.Errorf("a second /compress answered %q, want %q", got, want)
	}
	calls = len(h.fake.Requests())
	turn("three", turnOpts{})
	next := h.fake.Requests()[calls]
	if !strings.Contains(next.Messages[0].Content, "[Summary of the earlier conversation]") {
		t.Errorf("the turn after /compress does not start with the summary: %+v", next.Messages[0])
	}
	for _, m := range next.Messages {
		if strings.Contains(m.Content, "/compress") {
			t.Errorf("the model saw the command: %+v", m)
		}
	}
	// The summary and four messages: the summary is folded in again.
	if got := turn("/compress", turnOpts{command: "compress"}); !strings.HasPrefix(got, "🗜️ Compressed: 5 → 3 messages\n~") {
		t.Errorf("a third /compress answered %q", got)
	}
	if n := summaries(); n != 2 {
		t.Fatalf("%d summaries stored, want 2", n)
	}
}

// /compress keeps protect_last messages: with no more than those, there
// is nothing to fold in, and the model is not called.
func TestCompressCommandKeepsTheLastMessages(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.setGeneration("s1", 1)
	h.startWorker("w1", func(c *worker.Config, _ *worker.Deps) { c.Agent.ProtectLast = 6 })
	for _, text := range []string{"one", "two"} {
		req := h.requestTurn("s1", text, turnOpts{})
		h.waitCompleted(req.TurnId)
	}
	calls := len(h.fake.Requests())
	req := h.requestTurn("s1", "/compress", turnOpts{command: "compress"})
	if done := h.waitCompleted(req.TurnId); done.GetStatus() != turnsv1.TurnStatus_TURN_STATUS_COMPLETED {
		t.Fatalf("/compress: %v %s", done.GetStatus(), done.GetError())
	}
	got := checkReplies(t, h.replies(req.TurnId)).GetFinalText().GetText()
	if want := "Nothing to compress yet: the last 6 messages are always kept as they are."; got != want {
		t.Errorf("/compress answered %q, want %q", got, want)
	}
	if n := len(h.fake.Requests()) - calls; n != 0 {
		t.Errorf("/compress made %d model calls, want none", n)
	}
}

// /compress <focus> (TurnRequested.compress_focus), Hermes's focus
// topic: the summary request asks to keep what concerns it in full
// detail, the topic quoted so that it cannot end the quotes, on one line
// and cut to command.CompressFocusMax characters; the answer names it on
// Hermes's "Focus:" line. Without a focus the request has no such part.
func TestCompressCommandFocus(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.startWorker("w1", func(c *worker.Config, _ *worker.Deps) { c.Agent.ProtectLast = 2 })
	long := strings.Repeat("x", 250)
	for _, tt := range []struct {
		name, focus, inPrompt, answer string
	}{
		{"focus", "the database migration", `FOCUS TOPIC: "the database migration"`, "Focus: \"the database migration\"\n"},
		{"quotes and lines", "the \"db\"\nmigration", `FOCUS TOPIC: "the \"db\" migration"` + "\n", "Focus: \"the \"db\" migration\"\n"},
		{"too long", long, `FOCUS TOPIC: "` + long[:command.CompressFocusMax] + `"`, "Focus: \"" + long[:command.CompressFocusMax] + "\"\n"},
		{"none", "", "", ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			key := "s-" + strings.ReplaceAll(tt.name, " ", "-")
			h.setGeneration(key, 1)
			for _, text := range []string{"one", "two"} {
				h.waitCompleted(h.requestTurn(key, text, turnOpts{}).TurnId)
			}
			calls := len(h.fake.Requests())
			req := h.requestTurn(key, "/compress", turnOpts{command: "compress", focus: tt.focus})
			if done := h.waitCompleted(req.TurnId); done.GetStatus() != turnsv1.TurnStatus_TURN_STATUS_COMPLETED {
				t.Fatalf("/compress: %v %s", done.GetStatus(), done.GetError())
			}
			got := checkReplies(t, h.replies(req.TurnId)).GetFinalText().GetText()
			if want := "🗜️ Compressed: 4 → 3 messages\n" + tt.answer + "~"; !strings.HasPrefix(got, want) {
				t.Errorf("/compress answered %q, want it to start %q", got, want)
			}
			reqs := h.fake.Requests()[calls:]
			if len(reqs) != 1 {
				t.Fatalf("/compress made %d model calls, want the summary's", len(reqs))
			}
			system := reqs[0].System
			if tt.inPrompt == "" {
				if strings.Contains(system, "FOCUS TOPIC") {
					t.Errorf("the summary request has a focus topic without one asked for: %q", system)
				}
				return
			}
			if !strings.Contains(system, tt.inPrompt) || !strings.Contains(system, "PRIORITISE preserving all information related to the focus topic") {
				t.Errorf("the summary request's instructions %q, want %q and Hermes's focus instructions", system, tt.inPrompt)
			}
			if strings.Contains(system, long[:command.CompressFocusMax+1]) {
				t.Errorf("the summary request holds a focus longer than %d characters", command.CompressFocusMax)
			}
		})
	}
}

// "/compress here N" (compress_keep_last) keeps the last N exchanges
// verbatim and summarises everything before them, falling back to the
// full form when N exchanges are all there is; "/compress --preview"
// (compress_preview) answers what either would do in Hermes's words and
// changes nothing: no model call, no summary, the transcript as it was.
func TestCompressCommandHereAndPreview(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.setGeneration("s1", 1)
	h.startWorker("w1", func(c *worker.Config, _ *worker.Deps) { c.Agent.ProtectLast = 2 })
	turn := func(o turnOpts) string {
		t.Helper()
		req := h.requestTurn("s1", "/compress", o)
		if done := h.waitCompleted(req.TurnId); done.GetStatus() != turnsv1.TurnStatus_TURN_STATUS_COMPLETED {
			t.Fatalf("%+v: %v %s", o, done.GetStatus(), done.GetError())
		}
		return checkReplies(t, h.replies(req.TurnId)).GetFinalText().GetText()
	}
	state := func() string {
		t.Helper()
		var s string
		if err := h.db.QueryRow(context.Background(), `SELECT (SELECT count(*) FROM transcript_messages WHERE session_id = 'sid-s1') || ' ' ||
			(SELECT count(*) FROM transcript_summaries WHERE session_id = 'sid-s1')`).Scan(&s); err != nil {
			t.Fatal(err)
		}
		return s
	}
	for _, text := range []string{"one", "two", "three", "four"} {
		h.waitCompleted(h.requestTurn("s1", text, turnOpts{}).TurnId)
	}
	before, calls := state(), len(h.fake.Requests())
	const (
		head  = "🗜️ Preview — no changes made.\n🗜️ Would compress 6 of 8 message(s) (~"
		apply = "🗜️ Run the command again without --preview to apply."
	)
	for _, tt := range []struct {
		name  string
		o     turnOpts
		lines []string // after the head's line
	}{
		{"full", turnOpts{preview: true}, []string{apply}},
		{"focus", turnOpts{preview: true, focus: "auth bugs"}, []string{`🗜️ Focus topic: "auth bugs"`, apply}},
		{"here 1", turnOpts{preview: true, keep: 1}, []string{"🗜️ Boundary: keeping the last 1 exchange(s) (2 message(s)) verbatim.", apply}},
		{"here 4: everything", turnOpts{preview: true, keep: 4},
			[]string{"🗜️ Boundary: 'here' split would keep everything — falling back to full compression.", apply}},
	} {
		o := tt.o
		o.command = "compress"
		got := turn(o)
		lines := strings.Split(got, "\n")
		if !strings.HasPrefix(got, head) || len(lines) != 2+len(tt.lines) || !slices.Equal(lines[2:], tt.lines) ||
			!strings.HasSuffix(lines[1], " tokens currently in context).") {
			t.Errorf("%s: preview %q, want %q… then %q", tt.name, got, head, tt.lines)
		}
	}
	if after, n := state(), len(h.fake.Requests())-calls; after != before || n != 0 {
		t.Fatalf("the previews changed the transcript (%s → %s messages, summaries) or called the model %d times", before, after, n)
	}

	// here 3: the first exchange is summarised, the last three kept.
	got := turn(turnOpts{command: "compress", keep: 3})
	if want := "🗜️ Compressed: 8 → 7 messages\nKept the last 3 exchange(s) (6 message(s)) verbatim.\n~"; !strings.HasPrefix(got, want) {
		t.Errorf("/compress here 3 answered %q, want it to start %q", got, want)
	}
	reqs := h.fake.Requests()[calls:]
	if len(reqs) != 1 || !strings.Contains(reqs[0].Messages[0].Content, "user: one") || strings.Contains(reqs[0].Messages[0].Content, "two") {
		t.Fatalf("/compress here 3 made %d model calls (%+v), want the summary's of the first exchange alone", len(reqs), reqs)
	}
	calls = len(h.fake.Requests())
	h.waitCompleted(h.requestTurn("s1", "five", turnOpts{}).TurnId)
	next := h.fake.Requests()[calls]
	var users []string
	for _, m := range next.Messages {
		if m.Role == "user" {
			users = append(users, m.Content)
		}
	}
	if len(users) != 5 || !strings.HasPrefix(users[0], "[Summary of the earlier conversation]") || !slices.Equal(users[1:], []string{"two", "three", "four", "five"}) {
		t.Errorf("the turn after /compress here 3 sent the user messages %q, want the summary, then two to five verbatim", users)
	}
}
