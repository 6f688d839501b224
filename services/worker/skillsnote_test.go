package worker_test

import (
	"context"
	"slices"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/switchboard-chat/switchboard/pkg/fakellm"
	eventsv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/events/v1"
	turnsv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/turns/v1"
	"github.com/switchboard-chat/switchboard/pkg/llm"
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
