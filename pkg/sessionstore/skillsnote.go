package sessionstore

import (
	"context"
	"fmt"
)

// SetSkillsNote leaves note, Hermes's one-shot /reload-skills note, for
// the next turn of the session key's current conversation, replacing one
// left before (Hermes keeps the last). The transaction that starts that
// turn takes it (Turn.SkillsNote) and clears it; a new conversation
// (/new, /resume, /branch, a reset by policy) never sees it. ErrNotFound
// when the session does not exist.
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
