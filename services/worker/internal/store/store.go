// Package store keeps the worker's state in Postgres: transcripts (one
// committed step per message, fenced by the session's generation), turn
// progress and final replies, stored system prompts, summaries and memories.
package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// ErrStaleGeneration means the session moved on to a newer generation (or
// no longer exists): the turn must write nothing more.
var ErrStaleGeneration = errors.New("stale generation")

// Turn identifies the turn a write belongs to.
type Turn struct {
	TurnID     string
	SessionKey string
	SessionID  string
	Generation int64
	UserKey    string
}

// ToolCall is an assistant's tool invocation as stored.
type ToolCall struct {
	ID        string `json:"id"`
	Name      string `json:"name"`
	Arguments string `json:"arguments"`
}

// Message is one transcript message.
type Message struct {
	ID         int64
	TurnID     string
	Step       int
	Role       string
	Content    string
	ToolCalls  []ToolCall
	ToolCallID string
	ToolName   string
	CreatedAt  time.Time
}

// Turn statuses as stored.
const (
	StatusRunning     = "running"
	StatusCompleted   = "completed"
	StatusInterrupted = "interrupted"
	StatusStopped     = "stopped"
	StatusFailed      = "failed"
)

// Final kinds.
const (
	FinalText  = "final_text"
	FinalError = "error"
)

// Final is the decided end of a turn: the one reply the user gets.
type Final struct {
	Status    string
	Kind      string // FinalText or FinalError
	Text      string // answer, or the user-facing error message
	ErrorCode string
	Seq       int64
	Model     string
}

// TurnState is what a (re)started turn finds.
type TurnState struct {
	// Final is set when an earlier attempt already decided the turn.
	Final *Final
}

// Store is the worker's Postgres store.
type Store struct{ db *pgxpool.Pool }

// New wraps a pool whose schema has the worker migrations.
func New(db *pgxpool.Pool) *Store { return &Store{db: db} }

// checkGeneration locks the session row against a concurrent generation
// bump for the rest of tx and fails with ErrStaleGeneration on mismatch.
func checkGeneration(ctx context.Context, tx pgx.Tx, t Turn) error {
	var gen int64
	err := tx.QueryRow(ctx, `SELECT generation FROM sessions WHERE session_key = $1 FOR SHARE`, t.SessionKey).Scan(&gen)
	if errors.Is(err, pgx.ErrNoRows) {
		return fmt.Errorf("session %q not found: %w", t.SessionKey, ErrStaleGeneration)
	}
	if err != nil {
		return fmt.Errorf("read session generation: %w", err)
	}
	if gen != t.Generation {
		return fmt.Errorf("session at generation %d, turn at %d: %w", gen, t.Generation, ErrStaleGeneration)
	}
	return nil
}

// fenced runs fn in a transaction that first checks the turn's generation.
func (s *Store) fenced(ctx context.Context, t Turn, fn func(pgx.Tx) error) error {
	return pgx.BeginFunc(ctx, s.db, func(tx pgx.Tx) error {
		if err := checkGeneration(ctx, tx, t); err != nil {
			return err
		}
		return fn(tx)
	})
}

// CheckGeneration reports ErrStaleGeneration when the turn is no longer
// current, without writing.
func (s *Store) CheckGeneration(ctx context.Context, t Turn) error {
	return s.fenced(ctx, t, func(pgx.Tx) error { return nil })
}

// BeginTurn records the turn (once) and returns what earlier attempts left.
func (s *Store) BeginTurn(ctx context.Context, t Turn) (TurnState, error) {
	var st TurnState
	err := s.fenced(ctx, t, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `INSERT INTO worker_turns (turn_id, session_key, session_id, generation)
			VALUES ($1, $2, $3, $4) ON CONFLICT (turn_id) DO NOTHING`, t.TurnID, t.SessionKey, t.SessionID, t.Generation); err != nil {
			return fmt.Errorf("insert turn: %w", err)
		}
		var f Final
		if err := tx.QueryRow(ctx, `SELECT status, final_kind, final_text, error_code, final_seq, model
			FROM worker_turns WHERE turn_id = $1`, t.TurnID).Scan(&f.Status, &f.Kind, &f.Text, &f.ErrorCode, &f.Seq, &f.Model); err != nil {
			return fmt.Errorf("read turn: %w", err)
		}
		if f.Kind != "" {
			st.Final = &f
		}
		return nil
	})
	return st, err
}

// Decided returns the turn's final reply if an attempt committed one, read
// without fencing (a superseded turn may still have answered).
func (s *Store) Decided(ctx context.Context, turnID string) (*Final, error) {
	var f Final
	err := s.db.QueryRow(ctx, `SELECT status, final_kind, final_text, error_code, final_seq, model
		FROM worker_turns WHERE turn_id = $1`, turnID).Scan(&f.Status, &f.Kind, &f.Text, &f.ErrorCode, &f.Seq, &f.Model)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read turn %s: %w", turnID, err)
	}
	if f.Kind == "" {
		return nil, nil
	}
	return &f, nil
}

// Append commits msgs as steps first, first+1, … of the turn, under the
// turn's generation. Steps already committed (a duplicate attempt) are an
// error: the caller resumes from the transcript instead.
func (s *Store) Append(ctx context.Context, t Turn, first int, msgs ...Message) ([]Message, error) {
	out := make([]Message, len(msgs))
	err := s.fenced(ctx, t, func(tx pgx.Tx) error {
		for i, m := range msgs {
			m.Step = first + i
			m.TurnID = t.TurnID
			if err := insertMessage(ctx, tx, t, &m); err != nil {
				return err
			}
			out[i] = m
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

func insertMessage(ctx context.Context, tx pgx.Tx, t Turn, m *Message) error {
	var calls []byte
	if len(m.ToolCalls) > 0 {
		var err error
		if calls, err = json.Marshal(m.ToolCalls); err != nil {
			return fmt.Errorf("encode tool calls: %w", err)
		}
	}
	err := tx.QueryRow(ctx, `INSERT INTO transcript_messages
		(session_key, session_id, user_key, turn_id, generation, step, role, content, tool_calls, tool_call_id, tool_name)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11) RETURNING id, created_at`,
		t.SessionKey, t.SessionID, t.UserKey, t.TurnID, t.Generation, m.Step, m.Role, m.Content,
		calls, m.ToolCallID, m.ToolName).Scan(&m.ID, &m.CreatedAt)
	if err != nil {
		return fmt.Errorf("insert transcript step %d: %w", m.Step, err)
	}
	return nil
}

// Finish commits the turn's decided end (and its last message, when there
// is one) under the turn's generation. A turn finishes once: a second call
// keeps the first final and returns it.
func (s *Store) Finish(ctx context.Context, t Turn, step int, last *Message, f Final) (Final, error) {
	err := s.fenced(ctx, t, func(tx pgx.Tx) error {
		var kind string
		if err := tx.QueryRow(ctx, `SELECT final_kind FROM worker_turns WHERE turn_id = $1 FOR UPDATE`, t.TurnID).Scan(&kind); err != nil {
			return fmt.Errorf("read turn: %w", err)
		}
		if kind != "" {
			return tx.QueryRow(ctx, `SELECT status, final_kind, final_text, error_code, final_seq, model
				FROM worker_turns WHERE turn_id = $1`, t.TurnID).Scan(&f.Status, &f.Kind, &f.Text, &f.ErrorCode, &f.Seq, &f.Model)
		}
		if last != nil {
			m := *last
			m.Step = step
			m.TurnID = t.TurnID
			if err := insertMessage(ctx, tx, t, &m); err != nil {
				return err
			}
		}
		_, err := tx.Exec(ctx, `UPDATE worker_turns SET status = $2, final_kind = $3, final_text = $4,
			error_code = $5, final_seq = $6, model = $7, updated_at = now() WHERE turn_id = $1`,
			t.TurnID, f.Status, f.Kind, f.Text, f.ErrorCode, f.Seq, f.Model)
		if err != nil {
			return fmt.Errorf("finish turn: %w", err)
		}
		return nil
	})
	return f, err
}

// History returns the conversation's latest summary (empty when none) and
// the messages after it, oldest first.
func (s *Store) History(ctx context.Context, sessionID string) (summary string, msgs []Message, err error) {
	var upto int64
	err = s.db.QueryRow(ctx, `SELECT summary, upto_id FROM transcript_summaries WHERE session_id = $1
		ORDER BY upto_id DESC LIMIT 1`, sessionID).Scan(&summary, &upto)
	if err != nil && !errors.Is(err, pgx.ErrNoRows) {
		return "", nil, fmt.Errorf("read summary: %w", err)
	}
	rows, err := s.db.Query(ctx, `SELECT id, turn_id, step, role, content, tool_calls, tool_call_id, tool_name, created_at
		FROM transcript_messages WHERE session_id = $1 AND id > $2 ORDER BY id`, sessionID, upto)
	if err != nil {
		return "", nil, fmt.Errorf("read transcript: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var m Message
		var calls []byte
		if err := rows.Scan(&m.ID, &m.TurnID, &m.Step, &m.Role, &m.Content, &calls, &m.ToolCallID, &m.ToolName, &m.CreatedAt); err != nil {
			return "", nil, fmt.Errorf("scan transcript: %w", err)
		}
		if len(calls) > 0 {
			if err := json.Unmarshal(calls, &m.ToolCalls); err != nil {
				return "", nil, fmt.Errorf("decode tool calls of message %d: %w", m.ID, err)
			}
		}
		msgs = append(msgs, m)
	}
	if err := rows.Err(); err != nil {
		return "", nil, fmt.Errorf("read transcript: %w", err)
	}
	return summary, msgs, nil
}

// SaveSummary stores a summary replacing the messages up to uptoID.
func (s *Store) SaveSummary(ctx context.Context, t Turn, uptoID int64, summary string) error {
	return s.fenced(ctx, t, func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, `INSERT INTO transcript_summaries (session_id, session_key, upto_id, summary, turn_id, generation)
			VALUES ($1, $2, $3, $4, $5, $6)`, t.SessionID, t.SessionKey, uptoID, summary, t.TurnID, t.Generation)
		if err != nil {
			return fmt.Errorf("insert summary: %w", err)
		}
		return nil
	})
}

// Prompt returns the stored system prompt of a conversation and its
// signature; ok is false when none is stored.
func (s *Store) Prompt(ctx context.Context, sessionID string) (signature, prompt string, ok bool, err error) {
	err = s.db.QueryRow(ctx, `SELECT signature, prompt FROM session_prompts WHERE session_id = $1`, sessionID).Scan(&signature, &prompt)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", "", false, nil
	}
	if err != nil {
		return "", "", false, fmt.Errorf("read system prompt: %w", err)
	}
	return signature, prompt, true, nil
}

// SavePrompt stores the rendered system prompt under the turn's generation.
func (s *Store) SavePrompt(ctx context.Context, t Turn, signature, prompt string) error {
	return s.fenced(ctx, t, func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, `INSERT INTO session_prompts (session_id, session_key, signature, prompt) VALUES ($1, $2, $3, $4)
			ON CONFLICT (session_id) DO UPDATE SET signature = EXCLUDED.signature, prompt = EXCLUDED.prompt, updated_at = now()`,
			t.SessionID, t.SessionKey, signature, prompt)
		if err != nil {
			return fmt.Errorf("save system prompt: %w", err)
		}
		return nil
	})
}

// Memory is one durable note.
type Memory struct {
	ID        int64     `json:"id"`
	Content   string    `json:"content"`
	CreatedAt time.Time `json:"created_at"`
}

// AddMemory stores a note for a user.
func (s *Store) AddMemory(ctx context.Context, userKey, content string) (int64, error) {
	var id int64
	if err := s.db.QueryRow(ctx, `INSERT INTO agent_memories (user_key, content) VALUES ($1, $2) RETURNING id`, userKey, content).Scan(&id); err != nil {
		return 0, fmt.Errorf("add memory: %w", err)
	}
	return id, nil
}

// Memories lists a user's notes, oldest first.
func (s *Store) Memories(ctx context.Context, userKey string, limit int) ([]Memory, error) {
	rows, err := s.db.Query(ctx, `SELECT id, content, created_at FROM agent_memories WHERE user_key = $1 ORDER BY id LIMIT $2`, userKey, limit)
	if err != nil {
		return nil, fmt.Errorf("list memories: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Memory, error) {
		var m Memory
		err := r.Scan(&m.ID, &m.Content, &m.CreatedAt)
		return m, err
	})
	if err != nil {
		return nil, fmt.Errorf("list memories: %w", err)
	}
	return out, nil
}

// DeleteMemory removes one of a user's notes; false when it was not there.
func (s *Store) DeleteMemory(ctx context.Context, userKey string, id int64) (bool, error) {
	tag, err := s.db.Exec(ctx, `DELETE FROM agent_memories WHERE user_key = $1 AND id = $2`, userKey, id)
	if err != nil {
		return false, fmt.Errorf("delete memory: %w", err)
	}
	return tag.RowsAffected() > 0, nil
}

// Hit is one full-text search result.
type Hit struct {
	SessionID string    `json:"session_id"`
	Role      string    `json:"role"`
	Snippet   string    `json:"snippet"`
	At        time.Time `json:"at"`
}

// Search finds a user's transcript messages matching query (web search
// syntax) outside the conversation exceptSession, best first.
func (s *Store) Search(ctx context.Context, userKey, exceptSession, query string, limit int) ([]Hit, error) {
	rows, err := s.db.Query(ctx, `SELECT session_id, role,
			ts_headline('simple', content, q, 'MaxWords=30, MinWords=10, StartSel=**, StopSel=**'), created_at
		FROM transcript_messages, websearch_to_tsquery('simple', $2) q
		WHERE user_key = $1 AND session_id <> $4 AND role IN ('user', 'assistant') AND search @@ q
		ORDER BY ts_rank(search, q) DESC, id DESC LIMIT $3`, userKey, query, limit, exceptSession)
	if err != nil {
		return nil, fmt.Errorf("search transcripts: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Hit, error) {
		var h Hit
		err := r.Scan(&h.SessionID, &h.Role, &h.Snippet, &h.At)
		return h, err
	})
	if err != nil {
		return nil, fmt.Errorf("search transcripts: %w", err)
	}
	return out, nil
}
