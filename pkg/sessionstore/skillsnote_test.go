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
