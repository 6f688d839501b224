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
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/switchboard-chat/switchboard/pkg/llm"
	"github.com/switchboard-chat/switchboard/pkg/memorygate"
	"github.com/switchboard-chat/switchboard/pkg/pg"
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
	// Attempt is the attempt's number among the turn's deliveries (the
	// bus's delivery count): one after the first claims the turn in
	// BeginTurn (migration 00217). The count does not order the attempts
	// (it starts again when the bus's consumer is recreated); LockedAt
	// does.
	Attempt int
	// LockedAt is when the attempt took the session lock, by Redis's
	// clock (redisx.Locker.ClaimAt): the lock's holders take it one after
	// the other. Every fenced write of the turn is refused
	// (ErrStaleGeneration) once an attempt that took the lock later
	// claimed the turn: the generation alone does not tell a frozen
	// attempt from the one that took its turn over, since both run the
	// same turn. Zero writes unfenced by attempt and claims nothing, as a
	// worker from before the claim did.
	LockedAt time.Time
	UserKey  string
	// StartedAt is when the attempt that decides the turn began: the
	// turn's row, written once the turn is decided, keeps it.
	StartedAt time.Time
	// Cut, when set, is the id of the first message of the conversation
	// that the turn removes, with every later one of other turns (/undo,
	// /retry). The turn's first write removes them in its transaction:
	// once, since a later write (of a step, or of the final) finds the
	// turn's own rows and removes nothing.
	Cut int64
	// Usage is what the attempt's model calls used; the final's write
	// stores it with the turn (the usage of the attempt that decides it).
	Usage Usage
	// LockTTL is the session lock's TTL: an attempt after the first
	// renews the turn's lease in Postgres for it when it claims the turn
	// (BeginTurn, RenewLease), and the write of the turn's answer
	// (Finish) unless it ends the lease (EndLease). Zero renews nothing.
	LockTTL time.Duration
	// EndLease: the write of the turn's answer (Finish) ends its lease,
	// in its transaction: nothing follows the answer under the session
	// lock but its publishing and the release. Otherwise the turn ends
	// it as it lets go of the lock (Store.EndLease).
	EndLease bool
	// Steered are the event ids of the queued messages that carry the
	// steering a write gives to the model (TurnControlRequested's
	// queued_event_id): Append and Finish remove them in the write's
	// transaction, after the fence, and are refused (ErrStaleGeneration)
	// when one is no longer queued for the turn (migration 00216). Set
	// only on the write that carries the text.
	Steered []string
}

// Usage is a turn's token counts.
type Usage struct {
	Input, Output, CacheRead, CacheWrite int64
	// Context is the prompt of the attempt's latest model call (input,
	// cache read and cache write): how full the context window is, as
	// the runtime footer shows it. Finish stores it in session_context
	// (migration 00125) for /context; 0 (no model call) stores nothing.
	Context int64
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
	// Images are the pictures of a turn's input, read from the attachment
	// store for each attempt and shown to the model with it; they are not
	// stored (the stored content names them).
	Images []llm.Image
	// Thinking is an assistant tool-use step's signed thinking
	// (Anthropic), which the turn's next model call must send back,
	// unchanged, with the calls' results. It is stored with the step
	// (transcript_messages.thinking), so a turn resumed from the
	// transcript sends it back too; an answer without tool calls keeps
	// none (Anthropic drops earlier turns' thinking anyway).
	Thinking []llm.Thinking
	// Compacted, when set, is what the model reads instead of a tool
	// result's Content: the worker cleared the result to keep a long turn
	// within the context window (Compact). Content keeps the whole output.
	Compacted string
	// Read is how the turn's first attempt read the attachments of the
	// input this step holds (transcript_messages.read_attachments,
	// migration 00218), one per attachment of the message: an attempt
	// that resumes the turn decides from it as that attempt did. Nil for
	// other steps, and for inputs an older worker wrote.
	Read []ReadAttachment
}

// ReadAttachment is how a turn's first attempt left one attachment of an
// input: downloaded (BytesRef), or not with why (Unavailable: the
// download failed, or it cannot be shown), or neither (not read).
type ReadAttachment struct {
	Index       int    `json:"index"`
	BytesRef    string `json:"bytes_ref,omitempty"`
	Unavailable string `json:"unavailable,omitempty"`
	MimeType    string `json:"mime_type,omitempty"`
	SizeBytes   int64  `json:"size_bytes,omitempty"`
}

// Turn statuses as stored. A turn's row is written when the turn is
// decided, so it never reads "running" (the column's old default).
const (
	StatusCompleted   = "completed"
	StatusInterrupted = "interrupted"
	StatusStopped     = "stopped"
	StatusFailed      = "failed"
	// StatusStale: a memory flush that ended without a final (BookUsage).
	StatusStale = "stale"
	// StatusFenced: a turn the session moved on from (a /stop, a /new, a
	// reset, a newer turn's start) that ended without a final
	// (RecordFenced): the record that it no longer runs.
	StatusFenced = "fenced"
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
	// Usage is what the attempt that decided the turn used.
	Usage Usage
	// ReturnNote, when set, is the one-shot /reload-skills note the turn
	// took (TurnRequested.skills_note) and gives back because no model
	// read it: Finish leaves it pending on the session again, in the
	// transaction that decides the turn (see Finish). Not stored.
	ReturnNote string
	// NoteReturned: Finish gave ReturnNote back (not when a newer note
	// waited, or the conversation had changed).
	NoteReturned bool
}

// TurnState is what a (re)started turn finds.
type TurnState struct {
	// Final is set when an earlier attempt already decided the turn.
	Final *Final
	// Booked: an earlier attempt booked the turn's usage without
	// deciding it (BookUsage: a memory flush that ended without a
	// final). The row holds that usage; the turn's later attempts must
	// not decide it over that row (Finish would replace its counts).
	Booked bool
	// Summary and History are the conversation so far (History holds the
	// messages after the latest summary, oldest first, including steps an
	// earlier attempt of this turn committed).
	Summary string
	History []Message
	// Prompt is the conversation's stored system prompt, nil when none.
	Prompt *Prompt
}

// Prompt is a stored system prompt and the signature it was rendered for.
type Prompt struct {
	Signature string
	Text      string
}

// Store is the worker's Postgres store.
type Store struct{ db *pgxpool.Pool }

// New wraps a pool whose schema has the worker migrations.
func New(db *pgxpool.Pool) *Store { return &Store{db: db} }

// Durability of a write. A Deferred commit returns without waiting for
// the WAL flush; it can be lost only if Postgres itself crashes, and it is
// made durable by the next Durable commit (the WAL is flushed in order).
// Writes a redelivered turn simply redoes (the turn's row, the stored
// prompt, summaries) are Deferred; transcript steps and the turn's decided
// end are Durable, so everything before them is durable once they are.
type Durability bool

const (
	Deferred Durability = false
	Durable  Durability = true
)

const (
	fenceSQL = `SELECT switchboard_fence($1, $2)`
	// fenceAttemptSQL is fenceSQL for a turn's attempt (Turn.LockedAt):
	// it also raises fenceCode once an attempt that took the lock later
	// claimed the turn (claimAttemptSQL, migration 00217).
	fenceAttemptSQL = `SELECT switchboard_fence_attempt($1, $2, $3, $4)`
	// claimAttemptSQL makes the attempt the turn's, fencing the earlier
	// ones; it raises fenceCode when a later one claimed it already.
	claimAttemptSQL = `SELECT switchboard_claim_attempt($1, $2, $3, $4)`
	// takeSteeringSQL removes the queued messages of the steering a write
	// gives to the model (Turn.Steered), raising fenceCode when one is
	// gone (migration 00216).
	takeSteeringSQL = `SELECT switchboard_take_steering($1, $2)`
	// fenceCode is the SQLSTATE switchboard_fence raises (migrations 00202, 00203).
	fenceCode = "SB409"
)

// write sends the fence and the statements queue adds as one pipelined
// batch: one round trip and one implicit transaction, which commits only
// if the fence holds and every statement succeeds. read consumes the
// results of the queued statements, in order.
func (s *Store) write(ctx context.Context, t Turn, d Durability, queue func(*pgx.Batch), read func(pgx.BatchResults) error) error {
	return s.writeLocking(ctx, t, d, false, queue, read)
}

// lockSessionSQL locks the session's row for an update, before the fence.
const lockSessionSQL = `SELECT 1 FROM sessions WHERE session_key = $1 FOR NO KEY UPDATE`

// writeLocking is write, with the session's row locked first when
// lockSession, for a write that updates it. A fenced write must not
// touch the row after its fence (migration 00203): a generation bump
// holds the row while it waits for the fence's lock, so the write would
// wait for the bump and the bump for the write. Locking the row before
// the fence takes the two locks in the bump's order: the write waits for
// a bump in flight, then its fence sees the bumped generation.
func (s *Store) writeLocking(ctx context.Context, t Turn, d Durability, lockSession bool, queue func(*pgx.Batch), read func(pgx.BatchResults) error) error {
	b := &pgx.Batch{}
	if d == Deferred {
		b.Queue(pg.AsyncCommit)
	}
	if lockSession {
		b.Queue(lockSessionSQL, t.SessionKey)
	}
	queueFence(b, t)
	if len(t.Steered) > 0 {
		b.Queue(takeSteeringSQL, t.SessionKey, t.Steered)
	}
	preamble := b.Len()
	queue(b)
	br := s.db.SendBatch(ctx, b)
	err := func() error {
		for range preamble {
			if _, err := br.Exec(); err != nil {
				return err
			}
		}
		if read != nil {
			return read(br)
		}
		return nil
	}()
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	return fenceError(err)
}

// queueFence queues the fence of t's write: of its generation, and of
// its attempt when t knows it.
func queueFence(b *pgx.Batch, t Turn) {
	if !t.LockedAt.IsZero() && t.TurnID != "" {
		b.Queue(fenceAttemptSQL, t.SessionKey, t.Generation, t.TurnID, t.LockedAt)
		return
	}
	b.Queue(fenceSQL, t.SessionKey, t.Generation)
}

// queueCut queues the removal of t.Cut and what follows it, unless the
// turn wrote anything already. Only the writes of a turn's steps and
// final carry it (they write its inputs), before their inserts. It
// reports whether it queued anything.
func queueCut(b *pgx.Batch, t Turn) bool {
	if t.Cut <= 0 {
		return false
	}
	b.Queue(`DELETE FROM transcript_messages
		WHERE session_id = $1 AND id >= $2 AND turn_id <> $3
		  AND NOT EXISTS (SELECT 1 FROM transcript_messages WHERE turn_id = $3)
		  AND NOT EXISTS (SELECT 1 FROM worker_turns WHERE turn_id = $3)`, t.SessionID, t.Cut, t.TurnID)
	return true
}

// readCut reads what queueCut queued, when it did.
func readCut(br pgx.BatchResults, cut bool) error {
	if !cut {
		return nil
	}
	if _, err := br.Exec(); err != nil {
		return fmt.Errorf("remove messages: %w", err)
	}
	return nil
}

// fenceError turns switchboard_fence's error into ErrStaleGeneration.
func fenceError(err error) error {
	var pe *pgconn.PgError
	if errors.As(err, &pe) && pe.Code == fenceCode {
		return fmt.Errorf("%s: %w", pe.Message, ErrStaleGeneration)
	}
	return err
}

// CheckGeneration reports ErrStaleGeneration when the turn is no longer
// current, without writing.
func (s *Store) CheckGeneration(ctx context.Context, t Turn) error {
	return s.write(ctx, t, Deferred, func(*pgx.Batch) {}, nil)
}

const finalCols = `status, final_kind, final_text, error_code, final_seq, model,
	input_tokens, output_tokens, cache_read_tokens, cache_write_tokens`

func scanFinal(r pgx.Row) (Final, error) {
	var f Final
	err := r.Scan(&f.Status, &f.Kind, &f.Text, &f.ErrorCode, &f.Seq, &f.Model,
		&f.Usage.Input, &f.Usage.Output, &f.Usage.CacheRead, &f.Usage.CacheWrite)
	return f, err
}

const messageCols = `id, turn_id, step, role, content, tool_calls, tool_call_id, tool_name, created_at, thinking, coalesce(compacted, ''), read_attachments`

// summarySQL reads a conversation's latest summary; historySQL its
// messages after that summary, oldest first.
const (
	summarySQL = `SELECT summary FROM transcript_summaries WHERE session_id = $1 ORDER BY upto_id DESC LIMIT 1`
	historySQL = `SELECT ` + messageCols + ` FROM transcript_messages WHERE session_id = $1
		AND id > COALESCE((SELECT max(upto_id) FROM transcript_summaries WHERE session_id = $1), 0) ORDER BY id`
)

// beginSQL reads, in one row, what a (re)started turn $1 of the
// conversation $2 finds besides its messages: whether an attempt decided
// it (and its final), the latest summary, and the stored system prompt.
const beginSQL = `SELECT f.turn_id IS NOT NULL,
		coalesce(f.status, ''), coalesce(f.final_kind, ''), coalesce(f.final_text, ''), coalesce(f.error_code, ''),
		coalesce(f.final_seq, 0), coalesce(f.model, ''),
		coalesce(f.input_tokens, 0), coalesce(f.output_tokens, 0), coalesce(f.cache_read_tokens, 0), coalesce(f.cache_write_tokens, 0),
		coalesce(s.summary, ''), p.session_id IS NOT NULL, coalesce(p.signature, ''), coalesce(p.prompt, '')
	FROM (SELECT) AS one
	LEFT JOIN worker_turns f ON f.turn_id = $1
	LEFT JOIN LATERAL (SELECT summary FROM transcript_summaries WHERE session_id = $2 ORDER BY upto_id DESC LIMIT 1) s ON true
	LEFT JOIN session_prompts p ON p.session_id = $2`

func scanMessage(r pgx.Row) (Message, error) {
	var m Message
	var calls, thinking, read []byte
	if err := r.Scan(&m.ID, &m.TurnID, &m.Step, &m.Role, &m.Content, &calls, &m.ToolCallID, &m.ToolName, &m.CreatedAt, &thinking, &m.Compacted, &read); err != nil {
		return m, fmt.Errorf("scan transcript: %w", err)
	}
	if len(calls) > 0 {
		if err := json.Unmarshal(calls, &m.ToolCalls); err != nil {
			return m, fmt.Errorf("decode tool calls of message %d: %w", m.ID, err)
		}
	}
	if len(thinking) > 0 {
		var ts []storedThinking
		if err := json.Unmarshal(thinking, &ts); err != nil {
			return m, fmt.Errorf("decode thinking of message %d: %w", m.ID, err)
		}
		m.Thinking = make([]llm.Thinking, len(ts))
		for i, t := range ts {
			m.Thinking[i] = llm.Thinking(t)
		}
	}
	if len(read) > 0 {
		if err := json.Unmarshal(read, &m.Read); err != nil {
			return m, fmt.Errorf("decode read attachments of message %d: %w", m.ID, err)
		}
	}
	return m, nil
}

// BeginTurn returns, in one round trip, what earlier attempts of the turn
// left (its decided final, if any), the conversation so far and the
// stored system prompt. It is not fenced by generation: a turn that is no
// longer current learns it at its first write, and its lock claim (the
// session lock names the turn) stops most such turns before this.
// The turn's row is written once, when the turn is decided (Finish).
//
// An attempt after the first (t.Attempt > 1) claims the turn first, in
// the same round trip, and so fences every earlier attempt's writes for
// good (Turn.LockedAt); the claim of an attempt that took the lock later
// refuses this one (ErrStaleGeneration). Such an attempt calls it only
// once it holds the session lock: an attempt that waits for an earlier
// one still holding it must not fence that one. Its reads see every write of an
// earlier attempt that the claim fenced out of the turn's future.
func (s *Store) BeginTurn(ctx context.Context, t Turn) (TurnState, error) {
	var st TurnState
	b := &pgx.Batch{}
	claim := t.Attempt > 1 && !t.LockedAt.IsZero()
	if claim {
		b.Queue(claimAttemptSQL, t.SessionKey, t.TurnID, t.Attempt, t.LockedAt)
	}
	b.Queue(beginSQL, t.TurnID, t.SessionID)
	b.Queue(historySQL, t.SessionID)
	// A claim writes anyway: it renews the turn's lease too, so that a
	// turn whose attempts keep dying holds its session a lock's TTL from
	// the last one, not the start's grant. Last: the lease's row is held
	// only by a transaction that waits for nothing more (migration 00148).
	lease := claim && t.LockTTL > 0
	if lease {
		b.Queue(renewLeaseSQL, t.SessionKey, t.TurnID, t.LockTTL.Milliseconds())
	}
	br := s.db.SendBatch(ctx, b)
	err := func() error {
		if claim {
			if _, err := br.Exec(); err != nil {
				return fmt.Errorf("claim turn %s for attempt %d: %w", t.TurnID, t.Attempt, fenceError(err))
			}
		}
		var f Final
		var decided, prompted bool
		var p Prompt
		if err := br.QueryRow().Scan(&decided, &f.Status, &f.Kind, &f.Text, &f.ErrorCode, &f.Seq, &f.Model,
			&f.Usage.Input, &f.Usage.Output, &f.Usage.CacheRead, &f.Usage.CacheWrite,
			&st.Summary, &prompted, &p.Signature, &p.Text); err != nil {
			return fmt.Errorf("read turn: %w", err)
		}
		switch {
		case decided && f.Kind != "":
			st.Final = &f
		case decided:
			st.Booked = true
		}
		if prompted {
			st.Prompt = &p
		}
		rows, err := br.Query()
		if err != nil {
			return fmt.Errorf("read transcript: %w", err)
		}
		st.History, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (Message, error) { return scanMessage(r) })
		if err != nil {
			return fmt.Errorf("read transcript: %w", err)
		}
		if lease {
			if _, err := br.Exec(); err != nil {
				return fmt.Errorf("renew turn lease: %w", err)
			}
		}
		return nil
	}()
	if cerr := br.Close(); err == nil && cerr != nil {
		err = fmt.Errorf("begin turn %s: %w", t.TurnID, cerr)
	}
	return st, err
}

// renewLeaseSQL renews the lease of the turn $2 on the session $1 for $3
// milliseconds from now (migration 00148): nothing when the session's
// lease is another turn's (a later start took it).
const renewLeaseSQL = `UPDATE turn_leases SET expires_at = now() + $3::bigint * interval '1 millisecond'
	WHERE session_key = $1 AND turn_id = $2`

// RenewLease renews the turn's lease on its session for ttl, as its
// session lock is renewed: while the lease holds, no turn of the session
// starts, even should Redis lose the lock (migration 00148). Its commit
// does not wait for the WAL flush: a lease lost with a Postgres crash
// costs what losing the lock costs. The statement waits for nothing while
// it holds the lease's row.
func (s *Store) RenewLease(ctx context.Context, t Turn, ttl time.Duration) error {
	b := &pgx.Batch{}
	b.Queue(pg.AsyncCommit)
	b.Queue(renewLeaseSQL, t.SessionKey, t.TurnID, ttl.Milliseconds())
	if err := s.db.SendBatch(ctx, b).Close(); err != nil {
		return fmt.Errorf("renew turn lease: %w", err)
	}
	return nil
}

// endLeaseSQL ends the lease of the turn $2 on the session $1 (migration
// 00148): nothing when the session's lease is another turn's.
const endLeaseSQL = `DELETE FROM turn_leases WHERE session_key = $1 AND turn_id = $2`

// EndLease ends the turn's lease on its session as the turn lets go of
// its session lock, its last step (after its answer, its voice reply,
// its goal and loop steps): from then on a start may start the session's
// next turn though Redis lost the lock. Fenced as the turn's writes: an
// attempt the session moved past (its lease no longer holds the session)
// or whose turn a later attempt claimed (whose lease it is now) ends
// nothing, and reports no error. Its commit does not wait for the WAL
// flush, as RenewLease's; the statement comes last, holding the lease's
// row while it waits for nothing (migration 00148). A renewal that
// follows it finds no row and renews nothing.
func (s *Store) EndLease(ctx context.Context, t Turn) error {
	t.Steered = nil
	err := s.write(ctx, t, Deferred, func(b *pgx.Batch) { b.Queue(endLeaseSQL, t.SessionKey, t.TurnID) },
		func(br pgx.BatchResults) error { return execOne(br, "end turn lease") })
	if err != nil && !errors.Is(err, ErrStaleGeneration) {
		return fmt.Errorf("end turn lease: %w", err)
	}
	return nil
}

// Decided returns the turn's final reply if an attempt committed one, read
// without fencing (a superseded turn may still have answered).
func (s *Store) Decided(ctx context.Context, turnID string) (*Final, error) {
	f, err := scanFinal(s.db.QueryRow(ctx, `SELECT `+finalCols+` FROM worker_turns WHERE turn_id = $1`, turnID))
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
func (s *Store) Append(ctx context.Context, t Turn, d Durability, first int, msgs ...Message) ([]Message, error) {
	out := make([]Message, len(msgs))
	cut := false
	err := s.write(ctx, t, d, func(b *pgx.Batch) {
		cut = queueCut(b, t)
		for i, m := range msgs {
			m.Step = first + i
			m.TurnID = t.TurnID
			out[i] = m
			queueInsert(b, t, &out[i])
		}
	}, func(br pgx.BatchResults) error {
		if err := readCut(br, cut); err != nil {
			return err
		}
		for i := range out {
			if err := br.QueryRow().Scan(&out[i].ID, &out[i].CreatedAt); err != nil {
				return fmt.Errorf("insert transcript step %d: %w", out[i].Step, err)
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

const insertMessageSQL = `INSERT INTO transcript_messages
		(session_key, session_id, user_key, turn_id, generation, step, role, content, tool_calls, tool_call_id, tool_name, thinking, read_attachments)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13) RETURNING id, created_at`

func toolCallsJSON(m *Message) []byte {
	if len(m.ToolCalls) == 0 {
		return nil
	}
	b, _ := json.Marshal(m.ToolCalls) // strings only: cannot fail
	return b
}

// storedThinking is a thinking block as transcript_messages.thinking
// keeps it (llm.Thinking with stable names).
type storedThinking struct {
	Text      string `json:"text,omitempty"`
	Signature string `json:"signature,omitempty"`
	Redacted  string `json:"redacted,omitempty"`
}

// thinkingJSON is m's thinking as stored: NULL unless a step that called
// tools came with thinking (only that step's thinking is sent back).
func thinkingJSON(m *Message) []byte {
	if len(m.Thinking) == 0 || len(m.ToolCalls) == 0 {
		return nil
	}
	ts := make([]storedThinking, len(m.Thinking))
	for i, t := range m.Thinking {
		ts[i] = storedThinking(t)
	}
	b, _ := json.Marshal(ts) // strings only: cannot fail
	return b
}

// readJSON is m's read attachments as stored: NULL when none were read
// (every step but an input with attachments).
func readJSON(m *Message) []byte {
	if len(m.Read) == 0 {
		return nil
	}
	b, _ := json.Marshal(m.Read) // strings and numbers only: cannot fail
	return b
}

// startedAt is t's start for the database: NULL (now) when unset.
func startedAt(t Turn) *time.Time {
	if t.StartedAt.IsZero() {
		return nil
	}
	return &t.StartedAt
}

func queueInsert(b *pgx.Batch, t Turn, m *Message) {
	b.Queue(insertMessageSQL, t.SessionKey, t.SessionID, t.UserKey, t.TurnID, t.Generation, m.Step, m.Role, m.Content,
		toolCallsJSON(m), m.ToolCallID, m.ToolName, thinkingJSON(m), readJSON(m))
}

// Finish durably commits the turn's decided end — after the steps in
// before (with their Step set; the turn's inputs when nothing was written
// yet) and with its last message, when there is one — under the turn's
// generation, in one round trip. A turn finishes once: a second call keeps
// the first final and returns it.
//
// f.ReturnNote gives the turn's /reload-skills note back to the session
// in the same transaction, only when this call decides the turn, so a
// redelivered turn gives it back once (one that finds the turn decided
// does not call Finish; one whose Finish did not commit gave nothing
// back); and only while the turn's conversation is the session's
// current one (the fence already refuses a turn /new moved on from) and
// no newer note waits for it: a /reload-skills since the turn started
// left the one Hermes keeps, the last.
//
// Its transaction ends the turn's lease (t.EndLease), or renews it for
// the lock's TTL (t.LockTTL): a turn that then ends without letting go
// of its lock (a panic past its answer, a crash on a last delivery)
// leaves a lease that lapses with the lock, not the start's grant.
func (s *Store) Finish(ctx context.Context, t Turn, before []Message, step int, last *Message, f Final) (Final, error) {
	f.Usage = t.Usage
	var m Message
	if last != nil {
		m = *last
		m.Step = step
		m.TurnID = t.TurnID
	}
	decided := false
	cut := false
	lease := false
	args := []any{t.TurnID, t.SessionKey, t.SessionID, t.Generation, f.Status, f.Kind, f.Text, f.ErrorCode, f.Seq, f.Model,
		last != nil, t.UserKey, m.Step, m.Role, m.Content, toolCallsJSON(&m), m.ToolCallID, m.ToolName, startedAt(t),
		t.Usage.Input, t.Usage.Output, t.Usage.CacheRead, t.Usage.CacheWrite, t.Usage.Context}
	returnNote, returned := "", "false"
	if f.ReturnNote != "" {
		returnNote, returned = returnNoteSQL, "EXISTS (SELECT 1 FROM n)"
		args = append(args, f.ReturnNote)
	}
	err := s.writeLocking(ctx, t, Durable, f.ReturnNote != "", func(b *pgx.Batch) {
		cut = queueCut(b, t)
		for i := range before {
			before[i].TurnID = t.TurnID
			queueInsert(b, t, &before[i])
		}
		b.Queue(`WITH t AS (
				INSERT INTO worker_turns (turn_id, session_key, session_id, generation, status, final_kind, final_text, error_code, final_seq, model, started_at,
					input_tokens, output_tokens, cache_read_tokens, cache_write_tokens)
				VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, COALESCE($19, now()), $20, $21, $22, $23)
				ON CONFLICT (turn_id) DO UPDATE SET status = EXCLUDED.status, final_kind = EXCLUDED.final_kind,
					final_text = EXCLUDED.final_text, error_code = EXCLUDED.error_code, final_seq = EXCLUDED.final_seq,
					model = EXCLUDED.model, updated_at = now(), input_tokens = EXCLUDED.input_tokens,
					output_tokens = EXCLUDED.output_tokens, cache_read_tokens = EXCLUDED.cache_read_tokens,
					cache_write_tokens = EXCLUDED.cache_write_tokens
				WHERE worker_turns.final_kind = ''
				RETURNING 1),
			m AS (
				INSERT INTO transcript_messages
					(session_key, session_id, user_key, turn_id, generation, step, role, content, tool_calls, tool_call_id, tool_name)
				SELECT $2, $3, $12, $1, $4, $13, $14, $15, $16, $17, $18 WHERE $11 AND EXISTS (SELECT 1 FROM t)
				RETURNING 1),
			c AS (
				INSERT INTO session_context (session_key, session_id, turn_id, context_tokens, model)
				SELECT $2, $3, $1, $24::bigint, $10 WHERE $24::bigint > 0 AND EXISTS (SELECT 1 FROM t)
				ON CONFLICT (session_key) DO UPDATE SET session_id = EXCLUDED.session_id, turn_id = EXCLUDED.turn_id,
					context_tokens = EXCLUDED.context_tokens, model = EXCLUDED.model, updated_at = now())`+returnNote+`
			SELECT EXISTS (SELECT 1 FROM t), (SELECT count(*) FROM m), `+returned, args...)
		// Last: the lease's row is held only by a transaction that waits
		// for nothing more (migration 00148).
		switch {
		case t.EndLease:
			b.Queue(endLeaseSQL, t.SessionKey, t.TurnID)
			lease = true
		case t.LockTTL > 0:
			b.Queue(renewLeaseSQL, t.SessionKey, t.TurnID, t.LockTTL.Milliseconds())
			lease = true
		}
	}, func(br pgx.BatchResults) error {
		if err := readCut(br, cut); err != nil {
			return err
		}
		for i := range before {
			if err := br.QueryRow().Scan(&before[i].ID, &before[i].CreatedAt); err != nil {
				return fmt.Errorf("insert transcript step %d: %w", before[i].Step, err)
			}
		}
		var n int
		if err := br.QueryRow().Scan(&decided, &n, &f.NoteReturned); err != nil {
			return fmt.Errorf("finish turn: %w", err)
		}
		if lease {
			return execOne(br, "finish turn: end or renew its lease")
		}
		return nil
	})
	if err != nil || decided {
		return f, err
	}
	// An earlier attempt decided the turn: its final stands.
	prev, err := s.Decided(ctx, t.TurnID)
	if err != nil {
		return f, err
	}
	if prev == nil {
		return f, fmt.Errorf("turn %s was neither decided now nor before", t.TurnID)
	}
	return *prev, nil
}

// returnNoteSQL is the part of Finish's statement that gives the
// turn's /reload-skills note ($25) back (Final.ReturnNote): when this
// call decides the turn (t), to the turn's conversation if it is still
// the session's, unless a newer note for it waits there.
const returnNoteSQL = `,
			n AS (
				UPDATE sessions SET skills_note = $25, skills_note_session = session_id
				WHERE session_key = $2 AND session_id = $3
				  AND (skills_note IS NULL OR skills_note_session IS DISTINCT FROM session_id)
				  AND EXISTS (SELECT 1 FROM t)
				RETURNING 1)`

// BookUsage records, for turn t that ended without a final (a memory
// flush superseded or failed), its usage with its own conversation,
// t.SessionID: a row of worker_turns, which a conversation's usage is
// summed from, with no final (status, and no final kind: not decided).
// A memory flush runs on a conversation that already ended, so its
// usage must not go to the session's row, which counts the current
// conversation's. Unfenced: the session moved on, and the row only
// counts. Once: a row the turn has already (it was decided) is kept.
func (s *Store) BookUsage(ctx context.Context, t Turn, status, model string) error {
	if _, err := s.db.Exec(ctx, `INSERT INTO worker_turns (turn_id, session_key, session_id, generation, status, model, started_at,
			input_tokens, output_tokens, cache_read_tokens, cache_write_tokens)
		VALUES ($1, $2, $3, $4, $5, $6, COALESCE($7, now()), $8, $9, $10, $11)
		ON CONFLICT (turn_id) DO NOTHING`, t.TurnID, t.SessionKey, t.SessionID, t.Generation, status, model, startedAt(t),
		t.Usage.Input, t.Usage.Output, t.Usage.CacheRead, t.Usage.CacheWrite); err != nil {
		return fmt.Errorf("book turn usage: %w", err)
	}
	return nil
}

// RecordFenced records the end of turn t, which ended without a final
// because the session moved past its generation (a /stop or /new, the
// admin reset, a newer turn's start fenced it off), with what the
// attempt used (t.Usage) and its model: a row of worker_turns, as a
// decided turn's, with no final (status fenced). Its caller calls it
// only once the attempt runs nothing more. The row tells that the turn
// no longer runs (sessionstore TurnMayRun: an operator's reset of the
// session then needs no stop, so no bus) and books its usage with its
// own conversation, which a /new had ended.
//
// Only a turn the session's generation moved past is recorded, checked
// in the statement: no attempt of it can run any more (a claim checks
// the generation once the grant is gone, every write is fenced, and a
// running attempt's lock renewal fails), so the record never says a
// turn that still runs has ended. One that only lost its lock (another
// attempt of the same turn holds it) is not. Unfenced, and once: a
// row the turn has already (decided, or recorded by an earlier
// attempt) is kept; recorded reports whether this call wrote it.
func (s *Store) RecordFenced(ctx context.Context, t Turn, model string) (recorded bool, err error) {
	tag, err := s.db.Exec(ctx, `INSERT INTO worker_turns (turn_id, session_key, session_id, generation, status, model, started_at,
			input_tokens, output_tokens, cache_read_tokens, cache_write_tokens)
		SELECT $1, $2, $3, $4, $5, $6, COALESCE($7, now()), $8, $9, $10, $11
		WHERE EXISTS (SELECT 1 FROM sessions WHERE session_key = $2 AND generation > $4)
		ON CONFLICT (turn_id) DO NOTHING`, t.TurnID, t.SessionKey, t.SessionID, t.Generation, StatusFenced, model, startedAt(t),
		t.Usage.Input, t.Usage.Output, t.Usage.CacheRead, t.Usage.CacheWrite)
	if err != nil {
		return false, fmt.Errorf("record fenced turn: %w", err)
	}
	return tag.RowsAffected() == 1, nil
}

// History returns the conversation's latest summary (empty when none) and
// the messages after it, oldest first.
func (s *Store) History(ctx context.Context, sessionID string) (summary string, msgs []Message, err error) {
	err = s.db.QueryRow(ctx, summarySQL, sessionID).Scan(&summary)
	if err != nil && !errors.Is(err, pgx.ErrNoRows) {
		return "", nil, fmt.Errorf("read summary: %w", err)
	}
	rows, err := s.db.Query(ctx, historySQL, sessionID)
	if err != nil {
		return "", nil, fmt.Errorf("read transcript: %w", err)
	}
	msgs, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (Message, error) { return scanMessage(r) })
	if err != nil {
		return "", nil, fmt.Errorf("read transcript: %w", err)
	}
	return summary, msgs, nil
}

func execOne(br pgx.BatchResults, what string) error {
	if _, err := br.Exec(); err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	return nil
}

// Compact stores, under the turn's generation, what the model reads from
// now on instead of each of the tool results texts names (by message id):
// the results of the turn t that it cleared to keep the turn within the
// context window (mid-turn compression). A result of another turn, or
// not a tool result, is left alone. Deferred, as summaries are: a turn
// run again after losing it clears the same results again.
func (s *Store) Compact(ctx context.Context, t Turn, texts map[int64]string) error {
	if len(texts) == 0 {
		return nil
	}
	return s.write(ctx, t, Deferred, func(b *pgx.Batch) {
		for id, text := range texts {
			b.Queue(`UPDATE transcript_messages SET compacted = $3
				WHERE id = $1 AND session_id = $2 AND turn_id = $4 AND role = 'tool'`, id, t.SessionID, text, t.TurnID)
		}
	}, func(br pgx.BatchResults) error {
		for range texts {
			if _, err := br.Exec(); err != nil {
				return fmt.Errorf("compact tool result: %w", err)
			}
		}
		return nil
	})
}

// SaveSummary stores a summary replacing the messages up to uptoID.
func (s *Store) SaveSummary(ctx context.Context, t Turn, uptoID int64, summary string) error {
	return s.write(ctx, t, Deferred, func(b *pgx.Batch) {
		b.Queue(`INSERT INTO transcript_summaries (session_id, session_key, upto_id, summary, turn_id, generation)
			VALUES ($1, $2, $3, $4, $5, $6)`, t.SessionID, t.SessionKey, uptoID, summary, t.TurnID, t.Generation)
	}, func(br pgx.BatchResults) error { return execOne(br, "insert summary") })
}

// SavePrompt stores the rendered system prompt under the turn's generation.
func (s *Store) SavePrompt(ctx context.Context, t Turn, signature, prompt string) error {
	return s.write(ctx, t, Deferred, func(b *pgx.Batch) {
		b.Queue(`INSERT INTO session_prompts (session_id, session_key, signature, prompt) VALUES ($1, $2, $3, $4)
			ON CONFLICT (session_id) DO UPDATE SET signature = EXCLUDED.signature, prompt = EXCLUDED.prompt, updated_at = now()`,
			t.SessionID, t.SessionKey, signature, prompt)
	}, func(br pgx.BatchResults) error { return execOne(br, "save system prompt") })
}

// Memory is one durable note.
type Memory struct {
	ID        int64     `json:"id"`
	Content   string    `json:"content"`
	CreatedAt time.Time `json:"created_at"`
}

// Scopes of a standing approval.
const (
	ApproveSession = "session" // the rest of the conversation (subject: its session id)
	ApproveUser    = "user"    // the user from now on (subject: the user key)
)

// GrantApproval records a standing approval of pattern in scope for
// subject; granting it again changes nothing.
func (s *Store) GrantApproval(ctx context.Context, scope, subject, pattern string) error {
	if _, err := s.db.Exec(ctx, `INSERT INTO agent_tool_approvals (scope, subject, pattern) VALUES ($1, $2, $3)
ON CONFLICT DO NOTHING`, scope, subject, pattern); err != nil {
		return fmt.Errorf("grant approval: %w", err)
	}
	return nil
}

// ApprovedOrYolo reports whether pattern stands approved for the
// conversation sessionID or for the user userKey, and in the same query
// whether /yolo turned YOLO mode on for the chat yoloKey (a session_yolo
// row, migration 00115; "" reads none): the call then runs without
// asking, whatever stands approved.
func (s *Store) ApprovedOrYolo(ctx context.Context, sessionID, userKey, pattern, yoloKey string) (approved, yolo bool, err error) {
	err = s.db.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM agent_tool_approvals WHERE pattern = $3
AND ((scope = 'session' AND subject = $1) OR (scope = 'user' AND subject = $2))),
EXISTS (SELECT 1 FROM session_yolo WHERE session_key = $4 AND $4 <> '')`, sessionID, userKey, pattern, yoloKey).Scan(&approved, &yolo)
	if err != nil {
		return false, false, fmt.Errorf("read approvals: %w", err)
	}
	return approved, yolo, nil
}

// DenyAll records a "/deny all" answer given in turn turnID: every call
// of callIDs (the calls of the model's answer not yet run) is denied
// with reason without asking, by this worker and by one that resumes
// the turn after it. Recording it again changes nothing.
func (s *Store) DenyAll(ctx context.Context, turnID, sessionID, reason string, callIDs []string) error {
	if _, err := s.db.Exec(ctx, `INSERT INTO agent_tool_denials (turn_id, call_id, session_id, reason)
SELECT $1, c, $2, $3 FROM unnest($4::text[]) AS c ON CONFLICT DO NOTHING`, turnID, sessionID, reason, callIDs); err != nil {
		return fmt.Errorf("record deny all: %w", err)
	}
	return nil
}

// DeniedAll reports whether a "/deny all" of turn turnID covers call
// callID, and its reason.
func (s *Store) DeniedAll(ctx context.Context, turnID, callID string) (denied bool, reason string, err error) {
	err = s.db.QueryRow(ctx, `SELECT reason FROM agent_tool_denials WHERE turn_id = $1 AND call_id = $2`, turnID, callID).Scan(&reason)
	if errors.Is(err, pgx.ErrNoRows) {
		return false, "", nil
	}
	if err != nil {
		return false, "", fmt.Errorf("read deny all: %w", err)
	}
	return true, reason, nil
}

// RecordJudgeDenial counts the smart-approval judge's DENY of call
// callID of turn turnID in conversation sessionID (agent_denial_breaker,
// migration 00213) and returns the conversation's consecutive denials.
// The same call counted last is not counted again: a worker that
// resumes the turn asks the judge about the call anew.
func (s *Store) RecordJudgeDenial(ctx context.Context, sessionID, turnID, callID string) (int, error) {
	var n int
	err := s.db.QueryRow(ctx, `INSERT INTO agent_denial_breaker AS b (session_id, denials, turn_id, call_id) VALUES ($1, 1, $2, $3)
ON CONFLICT (session_id) DO UPDATE SET
    denials = b.denials + CASE WHEN b.turn_id = EXCLUDED.turn_id AND b.call_id = EXCLUDED.call_id THEN 0 ELSE 1 END,
    turn_id = EXCLUDED.turn_id, call_id = EXCLUDED.call_id, updated_at = now()
RETURNING denials`, sessionID, turnID, callID).Scan(&n)
	if err != nil {
		return 0, fmt.Errorf("record judge denial: %w", err)
	}
	return n, nil
}

// ResetJudgeDenials ends conversation sessionID's run of judge denials
// (an approval: the judge's or the user's).
func (s *Store) ResetJudgeDenials(ctx context.Context, sessionID string) error {
	if _, err := s.db.Exec(ctx, `DELETE FROM agent_denial_breaker WHERE session_id = $1`, sessionID); err != nil {
		return fmt.Errorf("reset judge denials: %w", err)
	}
	return nil
}

// JudgeDenials is conversation sessionID's count of consecutive judge
// denials (0 for none).
func (s *Store) JudgeDenials(ctx context.Context, sessionID string) (int, error) {
	var n int
	err := s.db.QueryRow(ctx, `SELECT denials FROM agent_denial_breaker WHERE session_id = $1`, sessionID).Scan(&n)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("read judge denials: %w", err)
	}
	return n, nil
}

// ErrMemoryFull refuses a note that would take a user's notes past their
// limit.
var ErrMemoryFull = memorygate.ErrFull

// AddMemory stores a note for a user, unless the user's notes would then
// hold more than limit characters (0: no limit). Adds of one user take
// turns, so two turns at once cannot both fill the last room; an add
// /memory approve applies takes its turn the same way (memorygate).
func (s *Store) AddMemory(ctx context.Context, userKey, content string, limit int) (int64, error) {
	return memorygate.AddNote(ctx, s.db, userKey, content, limit)
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
		WHERE user_key = $1 AND session_id <> $4 AND role IN ('user', 'assistant')
			AND to_tsvector('simple', content) @@ q -- transcript_messages_content_search_idx (migration 00204)
		ORDER BY ts_rank(to_tsvector('simple', content), q) DESC, id DESC LIMIT $3`, userKey, query, limit, exceptSession)
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
