package worker_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/switchboard-chat/switchboard/pkg/fakellm"
	eventsv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/events/v1"
	turnsv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/turns/v1"
	"github.com/switchboard-chat/switchboard/pkg/llm"
	"github.com/switchboard-chat/switchboard/pkg/sessionstore"
)

// Hermes's /reload-skills note rides on one turn (TurnRequested.
// skills_note): every model call of that turn reads it before the text
// of the turn's first user message, the transcript keeps what the user
// sent, and the next turn's model calls read the conversation without
// it.
func TestSkillsNoteReachesTheModelOnItsTurnOnly(t *testing.T) {
	t.Parallel()
	const note = "[USER INITIATED SKILLS RELOAD:\n\nAdded Skills:\n    - deploy: Ship the build\n\nThe user runs a skill by typing /<name>.]"
	for _, tc := range []struct {
		name    string
		text    string
		context []*eventsv1.ContextMessage // a stateless client's conversation so far
		calls   int                        // model calls of the noted turn
		at      int                        // the noted message among a call's user messages
	}{
		{name: "one call", text: "hello", calls: 1},
		{name: "every call of a tool turn", text: `hello [[tool:clock {"tz":"UTC"}]]`, calls: 2},
		{name: "after a stateless client's conversation", text: "hello",
			context: []*eventsv1.ContextMessage{{Role: "user", Content: "earlier"}, {Role: "assistant", Content: "earlier answer"}}, calls: 1, at: 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			h := newHarness(t)
			h.setGeneration("s1", 1)
			h.startWorker("w1", nil)

			req := h.requestTurn("s1", tc.text, turnOpts{skillsNote: note, context: tc.context})
			if done := h.waitCompleted(req.TurnId); done.GetStatus() != turnsv1.TurnStatus_TURN_STATUS_COMPLETED {
				t.Fatalf("the noted turn: %v (%s)", done.GetStatus(), done.GetError())
			}
			noted := h.fake.Requests()
			if len(noted) != tc.calls {
				t.Fatalf("%d model calls on the noted turn, want %d", len(noted), tc.calls)
			}
			for i, r := range noted {
				users := userTexts(r)
				if len(users) <= tc.at || users[tc.at] != note+"\n\n"+tc.text {
					t.Fatalf("call %d's user messages %q: want the note, a blank line and %q at %d", i, users, tc.text, tc.at)
				}
				for j, u := range users {
					if j != tc.at && strings.Contains(u, "SKILLS RELOAD") {
						t.Fatalf("call %d: the note on another user message %d: %q", i, j, u)
					}
				}
			}

			next := h.requestTurn("s1", "again", turnOpts{})
			if done := h.waitCompleted(next.TurnId); done.GetStatus() != turnsv1.TurnStatus_TURN_STATUS_COMPLETED {
				t.Fatalf("the next turn: %v (%s)", done.GetStatus(), done.GetError())
			}
			all := h.fake.Requests()
			if len(all) != len(noted)+1 {
				t.Fatalf("%d model calls on the next turn, want 1", len(all)-len(noted))
			}
			users := userTexts(all[len(all)-1])
			if !slices.Contains(users, tc.text) || users[len(users)-1] != "again" {
				t.Errorf("the next turn's user messages %q: want the noted turn's %q as sent, then again", users, tc.text)
			}
			for _, u := range users {
				if strings.Contains(u, "SKILLS RELOAD") {
					t.Errorf("the next turn's model call read the note: %q", u)
				}
			}

			rows, err := h.db.Query(ctx, `SELECT content FROM transcript_messages WHERE session_key = 's1' AND role = 'user' ORDER BY id`)
			if err != nil {
				t.Fatal(err)
			}
			stored, err := pgx.CollectRows(rows, pgx.RowTo[string])
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Contains(stored, tc.text) || stored[len(stored)-1] != "again" {
				t.Errorf("transcript user messages %q: want %q as sent, then again", stored, tc.text)
			}
			for _, s := range stored {
				if strings.Contains(s, "SKILLS RELOAD") {
					t.Errorf("the transcript holds the note: %q", s)
				}
			}
		})
	}
}

// userTexts are the contents of a model request's user messages.
func userTexts(r fakellm.Request) []string {
	var out []string
	for _, m := range r.Messages {
		if m.Role == llm.RoleUser {
			out = append(out, m.Content)
		}
	}
	return out
}

// A /retry with nothing to retry is answered without the model, so the
// /reload-skills note its turn took goes back to the session with the
// turn's final, as Hermes's stays pending when no agent run happened:
// the next message's turn takes it and its model call reads it. A note
// a newer /reload-skills left meanwhile is the one that waits (Hermes
// keeps the last). The turns are started as the router starts them
// (sessionstore), which takes the note and clears it.
func TestSkillsNoteSurvivesNothingToRetry(t *testing.T) {
	t.Parallel()
	const note = "[USER INITIATED SKILLS RELOAD:\n\nAdded Skills:\n    - deploy: Ship the build]"
	for _, tc := range []struct {
		name  string
		newer string // a note a /reload-skills leaves while the /retry waits for a worker
		want  string // the note the next message's turn carries
	}{
		{name: "pending again", want: note},
		{name: "a newer note meanwhile", newer: "[USER INITIATED SKILLS RELOAD: newer]", want: "[USER INITIATED SKILLS RELOAD: newer]"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			h := newHarness(t)
			ss := sessionstore.New(h.db)
			const key = "s1"
			src := &eventsv1.SessionSource{Platform: "telegram", Account: "bot1", ChatId: "99", ChatType: "dm", UserId: "u-s1", UserName: "Alice"}
			if _, _, _, err := ss.Arrive(ctx, key, "", src, ""); err != nil {
				t.Fatal(err)
			}
			if err := ss.SetSkillsNote(ctx, key, note); err != nil {
				t.Fatal(err)
			}
			// start queues text as the router does and starts its turn,
			// returning the turn and the note it took.
			start := func(seq int64, text, command string) (*turnsv1.TurnRequested, string) {
				t.Helper()
				ev := &eventsv1.MessageReceived{EventId: fmt.Sprint("e", seq), Text: text, TranscriptCommand: command, Source: src}
				if _, err := ss.Enqueue(ctx, key, seq, true, ev, 32); err != nil {
					t.Fatal(err)
				}
				var req *turnsv1.TurnRequested
				var took string
				started, err := ss.StartTurn(ctx, key, fmt.Sprint("t", seq), 32, 0, func(_ context.Context, turn sessionstore.Turn) error {
					took = turn.SkillsNote
					req = h.requestTurn(key, text, turnOpts{generation: turn.Generation, sessionID: turn.Session.ID,
						origin: src, command: command, skillsNote: turn.SkillsNote})
					return nil
				})
				if err != nil || !started {
					t.Fatalf("start %q: %v %v", text, started, err)
				}
				return req, took
			}
			pending := func() string {
				t.Helper()
				var n *string
				if err := h.db.QueryRow(ctx, `SELECT skills_note FROM sessions WHERE session_key = $1`, key).Scan(&n); err != nil {
					t.Fatal(err)
				}
				if n == nil {
					return ""
				}
				return *n
			}

			retry, took := start(1, "/retry", "retry")
			if took != note || pending() != "" {
				t.Fatalf("the /retry turn took %q, %q left: want the note taken", took, pending())
			}
			if tc.newer != "" {
				if err := ss.SetSkillsNote(ctx, key, tc.newer); err != nil {
					t.Fatal(err)
				}
			}
			h.startWorker("w1", nil)
			if done := h.waitCompleted(retry.TurnId); done.GetStatus() != turnsv1.TurnStatus_TURN_STATUS_COMPLETED {
				t.Fatalf("/retry: %v (%s)", done.GetStatus(), done.GetError())
			}
			if got := checkReplies(t, h.replies(retry.TurnId)).GetFinalText().GetText(); got != "Nothing to retry." {
				t.Fatalf("/retry answered %q", got)
			}
			if n := len(h.fake.Requests()); n != 0 {
				t.Fatalf("/retry with nothing to retry made %d model calls", n)
			}
			if got := pending(); got != tc.want {
				t.Fatalf("after /retry the note pending is %q, want %q", got, tc.want)
			}

			next, took := start(2, "hello", "")
			if took != tc.want {
				t.Fatalf("the next message's turn took %q, want %q", took, tc.want)
			}
			if done := h.waitCompleted(next.TurnId); done.GetStatus() != turnsv1.TurnStatus_TURN_STATUS_COMPLETED {
				t.Fatalf("the next message: %v (%s)", done.GetStatus(), done.GetError())
			}
			reqs := h.fake.Requests()
			if len(reqs) != 1 {
				t.Fatalf("%d model calls, want the next message's one", len(reqs))
			}
			if users := userTexts(reqs[0]); len(users) != 1 || users[0] != tc.want+"\n\nhello" {
				t.Fatalf("the next message's model call sent user messages %q, want the note, a blank line and hello", users)
			}
			if got := pending(); got != "" {
				t.Fatalf("after the next message the note %q still waits", got)
			}
		})
	}
}
