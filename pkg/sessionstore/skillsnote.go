package sessionstore

import (
	"context"
	"fmt"
	"strings"

	eventsv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/events/v1"
)

// SetSkillsNote leaves note, Hermes's one-shot /reload-skills note, for
// the next turn of the session key's current conversation, replacing one
// left before (Hermes keeps the last). The transaction that starts that
// turn takes it (Turn.SkillsNote) and clears it, unless the turn's
// message leaves it for a later one (TakesSkillsNote); a new conversation
// (/new, /resume, /branch, a reset by policy) never sees it. A turn that
// took it and ends before any model read it (a /retry with nothing to
// retry) gives it back with its final, unless a newer one waits
// (services/worker noteToReturn, its store's Finish). ErrNotFound when
// the session does not exist.
func (s *Store) SetSkillsNote(ctx context.Context, key, note string) error {
	tag, err := s.db.Exec(ctx, `UPDATE sessions SET skills_note = $2, skills_note_session = session_id WHERE session_key = $1`, key, note)
	if err != nil {
		return fmt.Errorf("set skills note: %w", err)
	}
	if tag.RowsAffected() == 0 {
		return ErrNotFound
	}
	return nil
}

// TakesSkillsNote reports whether a turn of ev takes the conversation's
// /reload-skills note. Hermes consumes its pending note where it
// prepends it to the message of the next agent run, so a command
// answered without one leaves it pending: /undo and /compress, which
// the router queues as turns of their own for the worker to edit the
// transcript (transcript_command "undo [n]", "compress [args]"), send
// the model no user message, and a note they took would be lost. /retry
// sends the model the user's last message again, as Hermes's /retry
// runs the agent with it, and takes the note; so does /moa's prompt. A
// /retry with nothing to retry, answered without the model, gives it
// back as its turn ends (the worker knows, the router does not).
func TakesSkillsNote(ev *eventsv1.MessageReceived) bool {
	name, _, _ := strings.Cut(ev.GetTranscriptCommand(), " ")
	return name != "undo" && name != "compress"
}
