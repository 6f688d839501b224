package sessionstore

import (
	"context"
	"errors"
	"fmt"
	"testing"

	eventsv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/events/v1"
	"github.com/switchboard-chat/switchboard/pkg/pg/pgtest"
)

// The /reload-skills note rides exactly one turn: the next one started
// (not one whose publish failed), and never one of a later conversation.
func TestSkillsNoteRidesOneTurn(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := New(pgtest.New(t))
	key := "agent:main:telegram:dm:1"
	if err := s.SetSkillsNote(ctx, key, "n"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("note for no session: %v, want ErrNotFound", err)
	}
	if _, _, _, err := s.Arrive(ctx, key, "", &eventsv1.SessionSource{Platform: "telegram", ChatId: "1"}, ""); err != nil {
		t.Fatal(err)
	}
	seq := int64(0)
	start := func(fail bool) (string, bool) {
		t.Helper()
		if n, _ := s.QueueLen(ctx, key); n == 0 {
			seq++
			if _, err := s.Enqueue(ctx, key, seq, true, &eventsv1.MessageReceived{EventId: fmt.Sprint("e", seq), Text: "hi"}, 32); err != nil {
				t.Fatal(err)
			}
		}
		var note string
		boom := errors.New("bus down")
		started, err := s.StartTurn(ctx, key, "t", 32, 0, func(_ context.Context, turn Turn) error {
			note = turn.SkillsNote
			if fail {
				return boom
			}
			return nil
		})
		if fail {
			if !errors.Is(err, boom) {
				t.Fatalf("err %v", err)
			}
			// The message stays queued: the next start takes it, and the note.
			return note, false
		}
		if err != nil || !started {
			t.Fatalf("start: %v %v", started, err)
		}
		endTurn(t, s, "t") // before the next start
		return note, true
	}
	if err := s.SetSkillsNote(ctx, key, "first"); err != nil {
		t.Fatal(err)
	}
	if err := s.SetSkillsNote(ctx, key, "second"); err != nil { // the last one wins
		t.Fatal(err)
	}
	if note, _ := start(true); note != "second" {
		t.Fatalf("failed start saw %q", note)
	}
	if note, _ := start(false); note != "second" {
		t.Fatalf("first turn took %q, want the note", note)
	}
	if note, _ := start(false); note != "" {
		t.Fatalf("second turn took %q, want none", note)
	}
	// A note left before /new is not the new conversation's.
	if err := s.SetSkillsNote(ctx, key, "stale"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Reset(ctx, key, "new"); err != nil {
		t.Fatal(err)
	}
	if note, _ := start(false); note != "" {
		t.Fatalf("after /new a turn took %q", note)
	}
}

// A /undo's or /compress's turn sends the model no user message, so it
// leaves the /reload-skills note waiting (as Hermes answers those
// commands without an agent run), for the next turn that has one;
// whether the turn starts from the queue or as a free start.
func TestSkillsNoteWaitsPastTranscriptEdits(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := New(pgtest.New(t))
	src := &eventsv1.SessionSource{Platform: "telegram", ChatId: "1"}
	for i, tc := range []struct {
		command string
		takes   bool
	}{
		{"undo", false},
		{"undo 3", false},
		{"compress", false},
		{"compress here 2", false},
		{"retry", true}, // sends the user's last message again
		{"moa", true},   // the prompt is the user's
		{"", true},
	} {
		for _, free := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/free=%v", tc.command, free), func(t *testing.T) {
				key := fmt.Sprintf("agent:main:telegram:dm:edit-%d-%v", i, free)
				if _, _, _, err := s.Arrive(ctx, key, "", src, ""); err != nil {
					t.Fatal(err)
				}
				if err := s.SetSkillsNote(ctx, key, "note"); err != nil {
					t.Fatal(err)
				}
				cmd := &eventsv1.MessageReceived{EventId: "c", Text: "/x", TranscriptCommand: tc.command, Source: src}
				if got := TakesSkillsNote(cmd); got != tc.takes {
					t.Fatalf("TakesSkillsNote = %v, want %v", got, tc.takes)
				}
				want := ""
				if tc.takes {
					want = "note"
				}
				if got := startOne(ctx, t, s, key, cmd, free, 1); got != want {
					t.Fatalf("the command's turn took %q, want %q", got, want)
				}
				// The next message takes what the command left, once.
				next := &eventsv1.MessageReceived{EventId: "m", Text: "hello", Source: src}
				want = "note"
				if tc.takes {
					want = ""
				}
				if got := startOne(ctx, t, s, key, next, free, 2); got != want {
					t.Fatalf("the next message's turn took %q, want %q", got, want)
				}
				if got := startOne(ctx, t, s, key, &eventsv1.MessageReceived{EventId: "m2", Text: "again", Source: src}, free, 3); got != "" {
					t.Fatalf("a later turn took %q", got)
				}
			})
		}
	}
}

// startOne starts ev as its own turn of key, as a free start or from the
// queue, and returns the note the turn took.
func startOne(ctx context.Context, t *testing.T, s *Store, key string, ev *eventsv1.MessageReceived, free bool, seq int64) string {
	t.Helper()
	var note string
	publish := func(_ context.Context, turn Turn) error {
		note = turn.SkillsNote
		return nil
	}
	turnID := fmt.Sprint("t", seq)
	if free {
		_, started, err := s.BeginFree(ctx, key, "", ev.GetSource(), ev, turnID).Start(ctx, func(Arrival) bool { return true }, publish)
		if err != nil || !started {
			t.Fatalf("free start: %v %v", started, err)
		}
		endTurn(t, s, turnID) // before the next start
		return note
	}
	if _, err := s.Enqueue(ctx, key, seq, true, ev, 32); err != nil {
		t.Fatal(err)
	}
	started, err := s.StartTurn(ctx, key, turnID, 32, 0, publish)
	if err != nil || !started {
		t.Fatalf("start: %v %v", started, err)
	}
	endTurn(t, s, turnID) // before the next start
	return note
}
