// Package memorygate is Hermes's memory write-approval gate
// (tools/write_approval.py) over Postgres: the memory.write_approval
// switch of each memory owner, the memory tool's writes it holds
// (pending writes), and their approval, which applies a write exactly
// once, or rejection.
//
// The worker's memory tool stages writes; the router's /memory lists,
// approves and rejects them. Both reach the notes (agent_memories)
// through this package, so an approved add passes the same character
// limit as an add the tool makes itself.
package memorygate

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	eventsv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/events/v1"
)

// StagedText is what the tool tells the model when the gate holds a
// write (Hermes's words).
const StagedText = "Staged for approval (memory.write_approval is on). Not yet saved — review with /memory pending."

// Owner is the user key memories are filed under, for a message from
// src in the session sessionKey: "session:<session key>" outside a DM
// (the chat's notes are the chat's), "<platform>:<user>" in a DM (the
// participant: user_id_alt when set, else user_id); "" when a DM has no
// user.
func Owner(sessionKey string, src *eventsv1.SessionSource) string {
	if t := src.GetChatType(); t != "" && t != "dm" {
		return "session:" + sessionKey
	}
	user := src.GetUserIdAlt()
	if user == "" {
		user = src.GetUserId()
	}
	if user == "" {
		return ""
	}
	return src.GetPlatform() + ":" + user
}

// DB is a pool or a transaction; a Store on a transaction joins it
// (its own transactions are savepoints).
type DB interface {
	Begin(ctx context.Context) (pgx.Tx, error)
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// Store keeps the gate's switches and pending writes.
type Store struct {
	db DB
	// Default is memory.write_approval: the switch of an owner who never
	// set one.
	Default bool
	// Limit bounds the characters of one owner's notes
	// (agent.memory_char_limit); 0: none.
	Limit int
}

// New returns a Store on db.
func New(db DB, def bool, limit int) *Store { return &Store{db: db, Default: def, Limit: limit} }

// InTx is s joined to tx.
func (s *Store) InTx(tx pgx.Tx) *Store { return &Store{db: tx, Default: s.Default, Limit: s.Limit} }

// Enabled reports owner's memory.write_approval.
func (s *Store) Enabled(ctx context.Context, owner string) (bool, error) {
	on := s.Default
	err := s.db.QueryRow(ctx, `SELECT enabled FROM memory_write_approval WHERE user_key = $1`, owner).Scan(&on)
	if err != nil && !errors.Is(err, pgx.ErrNoRows) {
		return false, fmt.Errorf("read memory write approval: %w", err)
	}
	return on, nil
}

// SetEnabled sets owner's memory.write_approval.
func (s *Store) SetEnabled(ctx context.Context, owner string, on bool, by string) error {
	_, err := s.db.Exec(ctx, `INSERT INTO memory_write_approval (user_key, enabled, updated_by, updated_at) VALUES ($1, $2, $3, now())
		ON CONFLICT (user_key) DO UPDATE SET enabled = EXCLUDED.enabled, updated_by = EXCLUDED.updated_by, updated_at = now()`, owner, on, by)
	if err != nil {
		return fmt.Errorf("set memory write approval: %w", err)
	}
	return nil
}

// The actions a pending write replays.
const (
	ActionAdd    = "add"
	ActionRemove = "remove"
)

// Write is a memory write the gate holds.
type Write struct {
	Owner  string
	Action string // ActionAdd or ActionRemove
	// Content is the note to add; for a remove, the note's text (the
	// summary shows it).
	Content string
	NoteID  int64 // the note to remove
	// Where the write came from: a tool call that runs again (its turn
	// resumed by another worker) stages nothing new.
	SessionKey, TurnID, CallID string
}

// summaryMax bounds the text a summary shows, in characters (Hermes's
// detail[:120]).
const summaryMax = 120

// Summary is how /memory pending shows w (Hermes's summaries).
func (w Write) Summary() string {
	detail := w.Content
	if utf8.RuneCountInString(detail) > summaryMax {
		detail = string([]rune(detail)[:summaryMax])
	}
	if w.Action == ActionRemove {
		return "remove from memory: " + detail
	}
	return "add to memory: " + detail
}

// Stage holds w and returns its id, eight hex digits as Hermes's; the
// id of the first staging when w's tool call staged already.
func (s *Store) Stage(ctx context.Context, w Write) (string, error) {
	if w.Action != ActionAdd && w.Action != ActionRemove {
		return "", fmt.Errorf("stage memory write: unknown action %q", w.Action)
	}
	for range 5 {
		id, err := newID()
		if err != nil {
			return "", err
		}
		var got string
		err = s.db.QueryRow(ctx, `INSERT INTO memory_pending_writes (user_key, id, action, content, note_id, summary, session_key, turn_id, call_id)
			VALUES ($1, $2, $3, $4, nullif($5, 0), $6, $7, $8, $9) ON CONFLICT DO NOTHING RETURNING id`,
			w.Owner, id, w.Action, w.Content, w.NoteID, w.Summary(), w.SessionKey, w.TurnID, w.CallID).Scan(&got)
		if err == nil {
			return got, nil
		}
		if !errors.Is(err, pgx.ErrNoRows) {
			return "", fmt.Errorf("stage memory write: %w", err)
		}
		if w.TurnID != "" && w.CallID != "" {
			err = s.db.QueryRow(ctx, `SELECT id FROM memory_pending_writes WHERE user_key = $1 AND turn_id = $2 AND call_id = $3`,
				w.Owner, w.TurnID, w.CallID).Scan(&got)
			if err == nil {
				return got, nil
			}
			if !errors.Is(err, pgx.ErrNoRows) {
				return "", fmt.Errorf("stage memory write: %w", err)
			}
		}
		// The id was taken: draw another.
	}
	return "", errors.New("stage memory write: no free id")
}

func newID() (string, error) {
	b := make([]byte, 4)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("pending write id: %w", err)
	}
	return hex.EncodeToString(b), nil
}

// Pending is a held write as /memory pending lists it.
type Pending struct {
	ID        string
	Summary   string
	CreatedAt time.Time
}

// Pending lists owner's held writes, oldest first.
func (s *Store) Pending(ctx context.Context, owner string) ([]Pending, error) {
	rows, err := s.db.Query(ctx, `SELECT id, summary, created_at FROM memory_pending_writes
		WHERE user_key = $1 AND state = 'pending' ORDER BY created_at, id`, owner)
	if err != nil {
		return nil, fmt.Errorf("list pending memory writes: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Pending, error) {
		var p Pending
		err := r.Scan(&p.ID, &p.Summary, &p.CreatedAt)
		return p, err
	})
	if err != nil {
		return nil, fmt.Errorf("list pending memory writes: %w", err)
	}
	return out, nil
}

// Outcome is what became of one approval.
type Outcome int

const (
	// Applied: the write is done and the entry approved.
	Applied Outcome = iota
	// NotPending: another approval or rejection decided it first.
	NotPending
	// Retry: the write failed (the notes are full) and stays pending.
	Retry
	// Dropped: the write can never apply (its note is gone); the entry
	// is closed.
	Dropped
)

// ErrFull refuses a note that would take an owner's notes past the
// limit.
var ErrFull = errors.New("memory full")

// Approve applies owner's held write id and marks it approved, in one
// transaction: its claim is an UPDATE ... WHERE state = 'pending', which
// one caller wins, so the write is applied once however many approve it
// at once. A write that fails stays pending (Retry) or, when it never
// can apply, is closed (Dropped); msg says why.
func (s *Store) Approve(ctx context.Context, owner, id, by string) (o Outcome, msg string, err error) {
	err = pgx.BeginFunc(ctx, s.db, func(tx pgx.Tx) error {
		var action, content string
		var note *int64
		err := tx.QueryRow(ctx, `UPDATE memory_pending_writes SET state = 'approved', decided_by = $3, decided_at = now()
			WHERE user_key = $1 AND id = $2 AND state = 'pending' RETURNING action, content, note_id`, owner, id, by).Scan(&action, &content, &note)
		if errors.Is(err, pgx.ErrNoRows) {
			o = NotPending
			return nil
		}
		if err != nil {
			return fmt.Errorf("claim pending memory write: %w", err)
		}
		switch action {
		case ActionAdd:
			if _, err := AddNote(ctx, tx, owner, content, s.Limit); err != nil {
				if errors.Is(err, ErrFull) {
					o, msg = Retry, err.Error()
					return errRollback
				}
				return err
			}
		case ActionRemove:
			var n int64
			if note != nil {
				n = *note
			}
			tag, err := tx.Exec(ctx, `DELETE FROM agent_memories WHERE user_key = $1 AND id = $2`, owner, n)
			if err != nil {
				return fmt.Errorf("remove memory: %w", err)
			}
			if tag.RowsAffected() == 0 {
				o, msg = Dropped, fmt.Sprintf("no note %d", n)
				if _, err := tx.Exec(ctx, `UPDATE memory_pending_writes SET state = 'failed', result = $3 WHERE user_key = $1 AND id = $2`,
					owner, id, msg); err != nil {
					return fmt.Errorf("close pending memory write: %w", err)
				}
				return nil
			}
		default:
			o, msg = Dropped, fmt.Sprintf("unknown action %q", action)
			return nil
		}
		o = Applied
		return nil
	})
	if errors.Is(err, errRollback) {
		return o, msg, nil
	}
	if err != nil {
		return 0, "", err
	}
	return o, msg, nil
}

// errRollback undoes a claim whose write failed: the entry stays
// pending.
var errRollback = errors.New("rollback")

// Reject drops owner's held write id; false when it was not pending.
func (s *Store) Reject(ctx context.Context, owner, id, by string) (bool, error) {
	tag, err := s.db.Exec(ctx, `UPDATE memory_pending_writes SET state = 'rejected', decided_by = $3, decided_at = now()
		WHERE user_key = $1 AND id = $2 AND state = 'pending'`, owner, id, by)
	if err != nil {
		return false, fmt.Errorf("reject pending memory write: %w", err)
	}
	return tag.RowsAffected() > 0, nil
}

// AddNote stores a note for owner, unless owner's notes would then hold
// more than limit characters (0: no limit): ErrFull. Adds of one owner
// take turns, so two at once cannot both fill the last room.
func AddNote(ctx context.Context, db DB, owner, content string, limit int) (int64, error) {
	var id int64
	err := pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock(hashtextextended('agent_memories:' || $1, 0))`, owner); err != nil {
			return err
		}
		var used, adding int
		if err := tx.QueryRow(ctx, `SELECT coalesce(sum(length(content)), 0), length($2) FROM agent_memories WHERE user_key = $1`,
			owner, content).Scan(&used, &adding); err != nil {
			return err
		}
		if limit > 0 && used+adding > limit {
			return fmt.Errorf("%w: notes at %d/%d characters; this one (%d) would pass the limit", ErrFull, used, limit, adding)
		}
		return tx.QueryRow(ctx, `INSERT INTO agent_memories (user_key, content) VALUES ($1, $2) RETURNING id`, owner, content).Scan(&id)
	})
	if errors.Is(err, ErrFull) {
		return 0, err
	}
	if err != nil {
		return 0, fmt.Errorf("add memory: %w", err)
	}
	return id, nil
}

// Note is the text of owner's note id; false when there is none.
func (s *Store) Note(ctx context.Context, owner string, id int64) (string, bool, error) {
	var content string
	err := s.db.QueryRow(ctx, `SELECT content FROM agent_memories WHERE user_key = $1 AND id = $2`, owner, id).Scan(&content)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", false, nil
	}
	if err != nil {
		return "", false, fmt.Errorf("read memory: %w", err)
	}
	return content, true, nil
}

// ValidID reports whether s can be a pending write's id.
func ValidID(s string) bool {
	if len(s) != 8 {
		return false
	}
	return strings.Trim(s, "0123456789abcdef") == ""
}
