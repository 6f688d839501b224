package sessionstore

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// ErrNothingToBranch is Branch's refusal of a conversation with no
// message yet.
var ErrNothingToBranch = errors.New("no conversation to branch")

// Branched is what Branch made: the key's new current conversation and
// the one it copies, which stays in the key's history.
type Branched struct {
	Session  Session // the branch, now current
	ParentID string  // the conversation copied
	Messages int     // the user messages copied
}

// Branch is Hermes's /branch: the key switches to a new conversation
// whose transcript is a copy of the current one, which stays resumable.
// The copy is titled title or, empty, the current title (or "branch");
// one another of the key's conversations has continues its lineage
// ("Plan" → "Plan #2"), cut to at most maxRunes characters (0: no
// limit). Copied are the messages (with turn ids "<id>@<branch id>", as
// forkSQL, so no turn of the branch takes them for its own steps), the
// summaries of them (pointing at the copies) and the stored system
// prompt, so the branch's next turn sees what the original's would; the
// model and the other settings of the key are kept. As Reset, the
// generation advances (a turn of the original still running is fenced)
// and waiting messages are dropped. One transaction, under the session's
// row lock: nothing or all of it is written. A conversation without a
// user message is refused with ErrNothingToBranch.
func (s *Store) Branch(ctx context.Context, key, title string, maxRunes int) (Branched, error) {
	now := s.now()
	var out Branched
	err := pgx.BeginFunc(ctx, s.db, func(tx pgx.Tx) error {
		out = Branched{}
		var cur, curTitle string
		if err := tx.QueryRow(ctx, `SELECT session_id, title FROM sessions WHERE session_key = $1 FOR UPDATE`, key).Scan(&cur, &curTitle); err != nil {
			if errors.Is(err, pgx.ErrNoRows) {
				return ErrNotFound
			}
			return fmt.Errorf("lock session: %w", err)
		}
		if err := tx.QueryRow(ctx, `SELECT count(*) FROM transcript_messages WHERE session_id = $1 AND role = 'user'`, cur).Scan(&out.Messages); err != nil {
			return fmt.Errorf("count messages: %w", err)
		}
		if out.Messages == 0 {
			return ErrNothingToBranch
		}
		id := NewSessionID(now)
		if title == "" {
			title = curTitle
		}
		if title == "" {
			title = "branch"
		}
		lineage := maxRunes
		if lineage <= 0 {
			lineage = -1
		}
		var taken bool
		if err := tx.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM session_history WHERE session_key = $1 AND lower(title) = lower($2))`,
			key, title).Scan(&taken); err != nil {
			return fmt.Errorf("check title: %w", err)
		}
		if taken {
			var err error
			if title, err = nextInLineage(ctx, tx, key, id, title, lineage); err != nil {
				return err
			}
		}
		if _, err := tx.Exec(ctx, `UPDATE session_history SET ended_at = $3, end_reason = 'branched'
			WHERE session_key = $1 AND session_id = $2 AND ended_at IS NULL`, key, cur, now); err != nil {
			return fmt.Errorf("end session history: %w", err)
		}
		if _, err := tx.Exec(ctx, `INSERT INTO session_history (session_key, session_id, started_at, title) VALUES ($1, $2, $3, $4)`,
			key, id, now, title); err != nil {
			return fmt.Errorf("record session history: %w", err)
		}
		if _, err := tx.Exec(ctx, `DELETE FROM session_queue WHERE session_key = $1`, key); err != nil {
			return fmt.Errorf("clear queue: %w", err)
		}
		sess, err := scanSession(tx.QueryRow(ctx, `UPDATE sessions SET session_id = $2, generation = generation + 1, title = $3,
			input_tokens = 0, output_tokens = 0, cache_read_tokens = 0, cache_write_tokens = 0,
			resume_pending = false, suspended = false, updated_at = $4, last_activity_at = $4, arrival_prev_at = $4
			WHERE session_key = $1 RETURNING `+sessionCols, key, id, title, now))
		if err != nil {
			return fmt.Errorf("branch session: %w", err)
		}
		if _, err := tx.Exec(ctx, branchCopySQL, key, cur, id, sess.Generation); err != nil {
			return fmt.Errorf("copy transcript: %w", err)
		}
		out.Session, out.ParentID = sess, cur
		return nil
	})
	return out, err
}

// branchCopySQL copies the conversation $2 of the key $1 into the
// conversation $3 (generation $4): its messages, its summaries (their
// upto_id moved to the copy of the message they end at) and its stored
// system prompt.
const branchCopySQL = `WITH
	fm AS (
		SELECT m.id, m.user_key, m.turn_id || '@' || $3 AS turn_id, m.step, m.role, m.content, m.tool_calls,
			m.tool_call_id, m.tool_name, m.created_at, m.compacted
		FROM transcript_messages m WHERE m.session_id = $2),
	fc AS (
		INSERT INTO transcript_messages (session_key, session_id, user_key, turn_id, generation, step, role, content,
			tool_calls, tool_call_id, tool_name, created_at, compacted)
		SELECT $1, $3, fm.user_key, fm.turn_id, $4, fm.step, fm.role, fm.content, fm.tool_calls,
			fm.tool_call_id, fm.tool_name, fm.created_at, fm.compacted
		FROM fm ORDER BY fm.id
		RETURNING id, turn_id, step),
	fs AS (
		INSERT INTO transcript_summaries (session_id, session_key, upto_id, summary, turn_id, generation, created_at)
		SELECT $3, $1,
			coalesce((SELECT max(fc.id) FROM fc JOIN fm ON fm.turn_id = fc.turn_id AND fm.step = fc.step WHERE fm.id <= x.upto_id), 0),
			x.summary, x.turn_id || '@' || $3, $4, x.created_at
		FROM transcript_summaries x WHERE x.session_id = $2)
	INSERT INTO session_prompts (session_id, session_key, signature, prompt)
	SELECT $3, $1, p.signature, p.prompt FROM session_prompts p WHERE p.session_id = $2
	ON CONFLICT (session_id) DO NOTHING`
