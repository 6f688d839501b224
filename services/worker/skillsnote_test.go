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
	"github.com/switchboard-chat/switchboard/pkg/platform/platformtest"
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
// (noteChat).
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
			h := newHarness(t)
			chat := newNoteChat(t, h, "s1", &eventsv1.SessionSource{Platform: "telegram", Account: "bot1", ChatId: "99", ChatType: "dm", UserId: "u-s1", UserName: "Alice"}, note)
			start, pending := chat.start, chat.pending
			retry, took := start(1, "/retry", "retry", nil)
			if took != note || pending() != "" {
				t.Fatalf("the /retry turn took %q, %q left: want the note taken", took, pending())
			}
			if tc.newer != "" {
				if err := chat.ss.SetSkillsNote(context.Background(), chat.key, tc.newer); err != nil {
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

			next, took := start(2, "hello", "", nil)
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

// A turn interrupted before its first model call (here while its
// attachment downloads) gives its /reload-skills note back with its
// end: no model read it, and the transcript does not hold it, so the
// next message's turn takes it and its model call reads it.
func TestSkillsNoteSurvivesAnInterruptBeforeTheModel(t *testing.T) {
	t.Parallel()
	const note = "[USER INITIATED SKILLS RELOAD:\n\nAdded Skills:\n    - deploy: Ship the build]"
	h := newHarness(t)
	p := &fetchingPlatform{Memory: platformtest.NewMemory("bot1", false), entered: make(chan struct{}, 1), hangUp: make(chan struct{})}
	startGateway(t, h, p)
	t.Cleanup(func() { close(p.hangUp) }) // before the gateway stops
	chat := newNoteChat(t, h, "s1", &eventsv1.SessionSource{Platform: "memory", Account: "bot1", ChatId: "99", ChatType: "dm", UserId: "u1"}, note)
	start, pending := chat.start, chat.pending

	h.startWorker("w1", nil)
	look, took := start(1, "look", "", []*eventsv1.Attachment{
		{Kind: eventsv1.AttachmentKind_ATTACHMENT_KIND_IMAGE, PlatformFileId: "p1", MimeType: "image/png"}})
	if took != note || pending() != "" {
		t.Fatalf("the first turn took %q, %q left: want the note taken", took, pending())
	}
	<-p.entered
	h.control("s1", turnsv1.ControlAction_CONTROL_ACTION_INTERRUPT, "")
	if c := h.waitCompleted(look.TurnId); c.GetStatus() != turnsv1.TurnStatus_TURN_STATUS_INTERRUPTED || len(h.fake.Requests()) != 0 {
		t.Fatalf("status %v after %d model calls, want interrupted before any", c.GetStatus(), len(h.fake.Requests()))
	}
	if got := pending(); got != note {
		t.Fatalf("after the interrupt the note pending is %q, want it given back", got)
	}

	next, took := start(2, "hello", "", nil)
	if took != note {
		t.Fatalf("the next message's turn took %q, want the note", took)
	}
	if done := h.waitCompleted(next.TurnId); done.GetStatus() != turnsv1.TurnStatus_TURN_STATUS_COMPLETED {
		t.Fatalf("the next message: %v (%s)", done.GetStatus(), done.GetError())
	}
	reqs := h.fake.Requests()
	if len(reqs) != 1 {
		t.Fatalf("%d model calls, want the next message's one", len(reqs))
	}
	// The interrupted turn's message stays in the transcript as sent; the
	// note goes before the next message's text.
	if users := userTexts(reqs[0]); len(users) != 2 || strings.Contains(users[0], "RELOAD") || users[1] != note+"\n\nhello" {
		t.Fatalf("the next message's model call sent user messages %q, want look, then the note, a blank line and hello", users)
	}
	if got := pending(); got != "" {
		t.Fatalf("after the next message the note %q still waits", got)
	}
}

// noteChat is a chat whose /reload-skills note a test follows, its turns
// started as the router starts them (sessionstore), which takes the note
// and clears it.
type noteChat struct {
	t   *testing.T
	h   *harness
	ss  *sessionstore.Store
	key string
	src *eventsv1.SessionSource
}

// newNoteChat makes the session of key and leaves note pending in it.
func newNoteChat(t *testing.T, h *harness, key string, src *eventsv1.SessionSource, note string) *noteChat {
	t.Helper()
	c := &noteChat{t: t, h: h, ss: sessionstore.New(h.db), key: key, src: src}
	if _, _, _, err := c.ss.Arrive(context.Background(), key, "", src, ""); err != nil {
		t.Fatal(err)
	}
	if err := c.ss.SetSkillsNote(context.Background(), key, note); err != nil {
		t.Fatal(err)
	}
	return c
}

// start queues text as the router does and starts its turn, returning
// the turn and the note it took.
func (c *noteChat) start(seq int64, text, command string, attachments []*eventsv1.Attachment) (*turnsv1.TurnRequested, string) {
	c.t.Helper()
	ctx := context.Background()
	ev := &eventsv1.MessageReceived{EventId: fmt.Sprint("e", seq), Text: text, TranscriptCommand: command, Source: c.src, Attachments: attachments}
	if _, err := c.ss.Enqueue(ctx, c.key, seq, true, ev, 32); err != nil {
		c.t.Fatal(err)
	}
	var req *turnsv1.TurnRequested
	var took string
	turnID := fmt.Sprint("t", seq)
	started, err := c.ss.StartTurn(ctx, c.key, turnID, 32, 0, func(_ context.Context, turn sessionstore.Turn) error {
		took = turn.SkillsNote
		req = c.h.requestTurn(c.key, text, turnOpts{turnID: turnID, generation: turn.Generation, sessionID: turn.Session.ID,
			origin: c.src, command: command, skillsNote: turn.SkillsNote, attachments: attachments})
		return nil
	})
	if err != nil || !started {
		c.t.Fatalf("start %q: %v %v", text, started, err)
	}
	return req, took
}

// pending is the note that waits in the session ("" for none).
func (c *noteChat) pending() string {
	c.t.Helper()
	var n *string
	if err := c.h.db.QueryRow(context.Background(), `SELECT skills_note FROM sessions WHERE session_key = $1`, c.key).Scan(&n); err != nil {
		c.t.Fatal(err)
	}
	if n == nil {
		return ""
	}
	return *n
}
