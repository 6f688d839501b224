// Package sessionstore keeps sessions and their queues of waiting messages
// in Postgres: the state the router owns and the admin API reads. Every
// operation is safe to run from any number of processes at once.
package sessionstore

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.opentelemetry.io/otel/propagation"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	eventsv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/events/v1"
	"github.com/switchboard-chat/switchboard/pkg/pg"
)

// Errors returned by Store.
var (
	ErrNotFound  = errors.New("session not found")
	ErrQueueFull = errors.New("session queue is full")
	// ErrStarted: the message was started as a turn already (a free start
	// committed it); a redelivery of it must not be queued again.
	ErrStarted = errors.New("message started as a turn already")
	// ErrTurnRunning: the session's last turn still holds its lease
	// (migration 00148) though its lock was free: Redis lost the lock
	// while the turn ran. Nothing was started; the messages wait for the
	// turn's completion.
	ErrTurnRunning = errors.New("the session's turn still runs")
)

// Session is one session entry (one key; its current conversation).
type Session struct {
	Key               string
	ID                string
	Platform          string
	ChatType          string
	Origin            *eventsv1.SessionSource
	DisplayName       string
	Profile           string
	Title             string
	CreatedAt         time.Time
	UpdatedAt         time.Time
	LastActivityAt    time.Time
	InputTokens       int64
	OutputTokens      int64
	ModelOverride     string
	BusyMode          string
	Generation        int64
	ResetCount        int
	LastResetReason   string
	Suspended         bool
	ResumePending     bool
	PromptFingerprint string
	LastTurnID        string
	// Personality is the name set with /personality ("" none).
	Personality string
	// ReasoningEffort is the effort set with /reasoning ("" the default).
	ReasoningEffort string
	// ShowReasoning shows the model's reasoning before its answer
	// (/reasoning show).
	ShowReasoning bool
	// RuntimeFooter is what /footer chose: "on", "off", or "" (the
	// router's default, router.runtime_footer).
	RuntimeFooter string
	// VoiceMode is what /voice chose: "voice_only" (a spoken answer to
	// a voice message), "all" (every answer also spoken), "off" or ""
	// (text only).
	VoiceMode string
	// ServiceTier is what /fast chose: "fast", "normal", or "" (the
	// default, agent.service_tier).
	ServiceTier string
	// GoalSessionID is the conversation whose standing goal (/goal) is
	// active ("" none): the session has one when it is ID.
	GoalSessionID string
}

// GoalActive reports whether the session's current conversation has an
// active standing goal (/goal).
func (s Session) GoalActive() bool { return s.GoalSessionID != "" && s.GoalSessionID == s.ID }

// History is one past or current conversation of a key.
type History struct {
	SessionID string
	Title     string
	StartedAt time.Time
	EndedAt   time.Time
	EndReason string
}

// Queued is one waiting message.
type Queued struct {
	ID        int64
	StreamSeq int64
	EventID   string
	OwnTurn   bool
	Event     *eventsv1.MessageReceived
	// TraceParent is the W3C trace context the message was queued under
	// ("" for rows queued before migration 00108): the turn that takes
	// it continues that trace (router.publishTurn).
	TraceParent string
	// EnqueuedAt is when the message was queued (set by Peek only).
	EnqueuedAt time.Time
	// SteeredBy is the session lock's value when the running turn took
	// the message as steering (MarkSteering), "" for any other message
	// (set by Peek and Stop only).
	SteeredBy string
}

// IsSteeringOf reports whether q is steering the turn holding the
// session lock with value owner took and has not yet given to the
// model: to the user a part of that turn, not a message waiting for the
// next one. With owner "" (no turn runs) nothing is. Across Redis losing
// the lock, the value that stands in for it (LeaseHolder) and a claim of
// the same turn's grant name the same holder: steering taken while the
// lease stood in is the turn's once its worker claims the lock again,
// and steering taken under the worker's claim is the turn's while the
// lease stands in (steeringOfSQL).
func (q Queued) IsSteeringOf(owner string) bool {
	if owner == "" || q.SteeredBy == "" {
		return false
	}
	if q.SteeredBy == owner {
		return true
	}
	grant, _, claimed := strings.Cut(owner, "/")
	steeredGrant, _, steeredClaimed := strings.Cut(q.SteeredBy, "/")
	return claimed && steeredClaimed && grant == steeredGrant &&
		(owner == LeaseHolder(grant) || q.SteeredBy == LeaseHolder(grant))
}

// LeaseHolderID is the holder part of LeaseHolder's value.
const LeaseHolderID = "lease"

// LeaseHolder is the value that stands in for the session lock's while
// Redis has lost the lock of the turn turnID, which still holds its
// lease (RunningTurn): a claim of the turn's grant ("<grant>/<holder>",
// as redisx.Holder; a turn's id is its grant) by a holder nobody knows
// until the turn's worker claims the lock again. A worker's holder id
// ("<worker id>.<attempt>") is never LeaseHolderID.
func LeaseHolder(turnID string) string { return turnID + "/" + LeaseHolderID }

// steeringOfSQL is Queued.IsSteeringOf for a session_queue row, with
// owner the query's parameter p ("$2").
func steeringOfSQL(p string) string {
	return `(` + p + ` <> '' AND steered_by <> '' AND (steered_by = ` + p + `
		OR strpos(` + p + `, '/') > 0 AND steered_by = split_part(` + p + `, '/', 1) || '/` + LeaseHolderID + `'
		OR strpos(steered_by, '/') > 0 AND ` + p + ` = split_part(steered_by, '/', 1) || '/` + LeaseHolderID + `'))`
}

// Store reads and writes sessions.
type Store struct {
	// db is pool, or the transaction of Once's effect.
	db   dbtx
	pool *pgxpool.Pool
	// tx is the transaction of Once's effect; nil outside it.
	tx  pgx.Tx
	now func() time.Time
	// fence, when set, is the turn whose writes this is (Fenced).
	fence *fence
	// holdIdle is HoldTurnStarts' bound (0: holdIdleBound; tests).
	holdIdle time.Duration
	// lease is how long a started turn holds its session before a worker
	// renews its lease (WithTurnLease).
	lease time.Duration
}

// DefaultTurnLease is a started turn's lease until its worker renews it:
// the router's default grant TTL.
const DefaultTurnLease = time.Hour

// fence is a turn's session key and generation.
type fence struct {
	key string
	gen int64
}

// ErrStaleGeneration means the session moved past the generation of the
// turn a Fenced store writes for: nothing was written.
var ErrStaleGeneration = errors.New("stale generation")

// Fenced is s for the writes an agent worker makes for a turn at
// generation gen of the session key after its answer (RecordVerdict,
// CompleteWakeup): each transaction first takes the turn's fence, as
// the worker's transcript writes do (switchboard_fence, migration
// 00203), so it commits only while the session is still at gen, and a
// generation bump (/stop, /new, the next turn) waits for it. When the
// session moved on it writes nothing and fails with ErrStaleGeneration.
// The writes it fences never touch the sessions table, which keeps the
// fence's lock order deadlock-free.
func (s *Store) Fenced(key string, gen int64) *Store {
	c := *s
	c.fence = &fence{key: key, gen: gen}
	return &c
}

// fenceCode is the SQLSTATE switchboard_fence raises.
const fenceCode = "SB409"

// dbtx is what the store's statements run on: the pool, or a
// transaction (whose BeginFunc is a savepoint).
type dbtx interface {
	Begin(ctx context.Context) (pgx.Tx, error)
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
	SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults
}

// New returns a Store on db.
func New(db *pgxpool.Pool) *Store {
	return &Store{db: db, pool: db, now: time.Now, lease: DefaultTurnLease}
}

// WithClock returns a copy of s that reads the time from now (tests).
func (s *Store) WithClock(now func() time.Time) *Store {
	c := *s
	c.now = now
	return &c
}

// WithTurnLease returns a copy of s whose turn starts give the turn its
// session for d until a worker renews the turn's lease: the router's
// grant TTL, how long a started turn may wait for a worker.
func (s *Store) WithTurnLease(d time.Duration) *Store {
	c := *s
	c.lease = d
	return &c
}

// turnRunsSQL is true while the session $1's last turn holds its lease
// (migration 00148): the session is still at the turn's generation, and
// the lease has not expired nor been ended by the turn's worker, which
// ends it as it lets go of the session lock. Not at the turn's recorded
// end (its worker_turns row): the turn still runs under its lock after
// it (its voice reply, its goal and loop steps). It reads the sessions
// row in scope. A turn start refuses to start anything then, whatever
// the Redis lock says: the lock may have been lost with Redis's data
// while the turn ran.
const turnRunsSQL = `EXISTS (SELECT 1 FROM turn_leases l
	WHERE l.session_key = $1 AND l.generation = sessions.generation AND l.expires_at > now())`

// TurnRunning reports whether the session key's last turn holds its
// lease (turnRunsSQL): it may run though the Redis lock is free, lost
// with Redis's data. False when there is no session.
func (s *Store) TurnRunning(ctx context.Context, key string) (bool, error) {
	turn, err := s.RunningTurn(ctx, key)
	return turn != "", err
}

// RunningTurn is the id of the session key's last turn while it holds
// its lease (TurnRunning), "" otherwise: the turn a control for the
// session's running turn names when Redis lost its lock.
func (s *Store) RunningTurn(ctx context.Context, key string) (string, error) {
	var turn string
	err := s.db.QueryRow(ctx, `SELECT l.turn_id FROM sessions JOIN turn_leases l USING (session_key)
		WHERE sessions.session_key = $1 AND `+turnRunsSQL, key).Scan(&turn)
	if err != nil && !errors.Is(err, pgx.ErrNoRows) {
		return "", fmt.Errorf("read turn lease: %w", err)
	}
	return turn, nil
}

// FencedTurn is RunningTurn for a caller that has just advanced the
// session key's generation past fenced, in its transaction (Stop, a
// reset): the id of the turn of generation fenced that still held its
// lease, unended, as the bump took the generation's lock, "" when none
// did. Read after the bump, not before it: the bump waits for a fenced
// write in flight (migration 00203), so a turn whose end committed in
// that moment is seen ended, and no end of it can commit after (its
// fence now finds the generation moved on); read before, a turn that
// ended meanwhile would count as running.
func (s *Store) FencedTurn(ctx context.Context, key string, fenced int64) (string, error) {
	var turn string
	err := s.db.QueryRow(ctx, `SELECT l.turn_id FROM turn_leases l
		WHERE l.session_key = $1 AND l.generation = $2 AND l.expires_at > now()`, key, fenced).Scan(&turn)
	if err != nil && !errors.Is(err, pgx.ErrNoRows) {
		return "", fmt.Errorf("read fenced turn's lease: %w", err)
	}
	return turn, nil
}

// leaseSQL writes the lease of the turn $2 a start of the session $1
// just recorded as its last (nothing when it did not), for $3
// milliseconds. A start queues it after its generation bump: the bump's
// lock is taken before the lease's row (migration 00148).
const leaseSQL = `INSERT INTO turn_leases (session_key, turn_id, generation, expires_at)
	SELECT session_key, last_turn_id, generation, now() + $3::bigint * interval '1 millisecond'
	FROM sessions WHERE session_key = $1 AND last_turn_id = $2
	ON CONFLICT (session_key) DO UPDATE SET turn_id = EXCLUDED.turn_id, generation = EXCLUDED.generation,
		expires_at = EXCLUDED.expires_at`

// NewSessionID returns an id in the Hermes form YYYYMMDD_HHMMSS_<8 hex>.
func NewSessionID(now time.Time) string {
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	return now.UTC().Format("20060102_150405") + "_" + hex.EncodeToString(b)
}

const sessionCols = `session_key, session_id, platform, chat_type, origin, display_name, profile, title,
	created_at, updated_at, last_activity_at, input_tokens, output_tokens, model_override, busy_mode,
	generation, reset_count, last_reset_reason, suspended, resume_pending, system_prompt_fingerprint, last_turn_id,
	personality, reasoning_effort, show_reasoning, runtime_footer, voice_mode, service_tier, goal_session_id`

type rowScanner interface{ Scan(dest ...any) error }

// scanSession scans sessionCols, then extra columns into extra.
func scanSession(r rowScanner, extra ...any) (Session, error) {
	var s Session
	var origin []byte
	err := r.Scan(append([]any{&s.Key, &s.ID, &s.Platform, &s.ChatType, &origin, &s.DisplayName, &s.Profile, &s.Title,
		&s.CreatedAt, &s.UpdatedAt, &s.LastActivityAt, &s.InputTokens, &s.OutputTokens, &s.ModelOverride, &s.BusyMode,
		&s.Generation, &s.ResetCount, &s.LastResetReason, &s.Suspended, &s.ResumePending, &s.PromptFingerprint, &s.LastTurnID,
		&s.Personality, &s.ReasoningEffort, &s.ShowReasoning, &s.RuntimeFooter, &s.VoiceMode, &s.ServiceTier, &s.GoalSessionID},
		extra...)...)
	if err != nil {
		return Session{}, err
	}
	s.Origin = &eventsv1.SessionSource{}
	if len(origin) > 0 {
		_ = protojson.UnmarshalOptions{DiscardUnknown: true}.Unmarshal(origin, s.Origin)
	}
	return s, nil
}

func encodeOrigin(src *eventsv1.SessionSource) []byte {
	b, err := protojson.MarshalOptions{UseProtoNames: true}.Marshal(src)
	if err != nil || len(b) == 0 {
		return []byte("{}")
	}
	return b
}

func displayName(src *eventsv1.SessionSource) string {
	if n := src.GetChatName(); n != "" {
		return n
	}
	if n := src.GetUserName(); n != "" {
		return n
	}
	return src.GetChatId()
}

// Get returns the session of key.
func (s *Store) Get(ctx context.Context, key string) (Session, error) {
	sess, err := scanSession(s.db.QueryRow(ctx, `SELECT `+sessionCols+` FROM sessions WHERE session_key = $1`, key))
	if errors.Is(err, pgx.ErrNoRows) {
		return Session{}, ErrNotFound
	}
	if err != nil {
		return Session{}, fmt.Errorf("read session: %w", err)
	}
	return sess, nil
}

// AddTurnUsage adds to each session's token counts what its current
// conversation's turns stored with their finals (worker_turns, migration
// 00206): the session row holds only what turns that ended without a
// final used. One query for all of them.
func (s *Store) AddTurnUsage(ctx context.Context, sessions []Session) error {
	if len(sessions) == 0 {
		return nil
	}
	keys, ids := make([]string, len(sessions)), make([]string, len(sessions))
	at := make(map[[2]string]int, len(sessions))
	for i, sess := range sessions {
		keys[i], ids[i] = sess.Key, sess.ID
		at[[2]string{sess.Key, sess.ID}] = i
	}
	rows, err := s.db.Query(ctx, `SELECT t.session_key, t.session_id, sum(t.input_tokens)::bigint, sum(t.output_tokens)::bigint
		FROM worker_turns t JOIN unnest($1::text[], $2::text[]) AS s(key, id) ON t.session_key = s.key AND t.session_id = s.id
		GROUP BY t.session_key, t.session_id`, keys, ids)
	if err != nil {
		return fmt.Errorf("read turn usage: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var key, id string
		var in, out int64
		if err := rows.Scan(&key, &id, &in, &out); err != nil {
			return fmt.Errorf("read turn usage: %w", err)
		}
		if i, ok := at[[2]string{key, id}]; ok {
			sessions[i].InputTokens += in
			sessions[i].OutputTokens += out
		}
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("read turn usage: %w", err)
	}
	return nil
}

// Generation returns the session's current generation (0 when none).
func (s *Store) Generation(ctx context.Context, key string) (int64, error) {
	var gen int64
	err := s.db.QueryRow(ctx, `SELECT generation FROM sessions WHERE session_key = $1`, key).Scan(&gen)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("read generation: %w", err)
	}
	return gen, nil
}

// Arrive records the arrival of the message with event id eventID on the
// session of key in one round trip: it creates the session from src when
// there is none (with its history row) and otherwise refreshes its origin
// and last activity. prev is the last activity before this message (zero
// when created), for the reset policy; recorded again for the same
// message (its handler runs again), prev stays the activity before the
// message's first recording, or the reset that came after it. An empty
// eventID names no message. The commit does not wait for the WAL flush:
// the message is made durable by Enqueue.
func (s *Store) Arrive(ctx context.Context, key, profile string, src *eventsv1.SessionSource, eventID string) (sess Session, created bool, prev time.Time, err error) {
	return s.ArriveFork(ctx, key, profile, src, eventID, nil)
}

// ArriveFork is Arrive for a message that carries a fork point (its
// fork_from): a session it creates starts as a copy of that
// conversation (see queueArriveLocking); nil is Arrive.
func (s *Store) ArriveFork(ctx context.Context, key, profile string, src *eventsv1.SessionSource, eventID string, fork *eventsv1.ForkFrom) (sess Session, created bool, prev time.Time, err error) {
	b := &pgx.Batch{}
	b.Queue(pg.AsyncCommit)
	s.queueArriveLocking(b, key, profile, src, eventID, fork, false)
	br := s.db.SendBatch(ctx, b)
	defer br.Close()
	if _, err := br.Exec(); err != nil {
		return Session{}, false, prev, fmt.Errorf("record arrival: %w", err)
	}
	sess, created, prev, err = readArrival(br)
	if err != nil {
		return Session{}, false, prev, err
	}
	return sess, created, prev, br.Close()
}

// queueArriveLocking adds Arrive's statement to b. With lockQueue the
// statement also takes the transaction-level lock of the session's queue
// (as Enqueue does), so the transaction's next statement sees every
// enqueue that committed before it. With a fork point, a session the
// statement creates starts as a copy of that conversation (forkSQL), in
// the same statement: the copy is made once, with the session, however
// often the message arrives.
func (s *Store) queueArriveLocking(b *pgx.Batch, key, profile string, src *eventsv1.SessionSource, eventID string, fork *eventsv1.ForkFrom, lockQueue bool) {
	now := s.now()
	lock, from := "", "s"
	if lockQueue {
		lock = `,
		l AS (SELECT pg_advisory_xact_lock(hashtextextended('queue:' || $1, 0)))`
		from = "s, l"
	}
	args := []any{key, NewSessionID(now), src.GetPlatform(), src.GetChatType(), encodeOrigin(src), displayName(src), profile, now, eventID}
	if fork.GetTurnId() != "" {
		lock += forkSQL
		args = append(args, fork.GetSessionKey(), fork.GetTurnId())
	}
	b.Queue(`WITH s AS (
			INSERT INTO sessions (session_key, session_id, platform, chat_type, origin, display_name, profile,
				created_at, updated_at, last_activity_at, arrival_event_id)
			VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $8, $8, NULLIF($9, ''))
			ON CONFLICT (session_key) DO UPDATE SET origin = EXCLUDED.origin, display_name = EXCLUDED.display_name,
				last_activity_at = EXCLUDED.last_activity_at, updated_at = EXCLUDED.updated_at,
				arrival_prev_at = CASE WHEN sessions.arrival_event_id = EXCLUDED.arrival_event_id
					THEN sessions.arrival_prev_at ELSE sessions.last_activity_at END,
				arrival_event_id = EXCLUDED.arrival_event_id
			RETURNING `+sessionCols+`, (xmax = 0) AS created, arrival_prev_at AS prev),
		h AS (
			INSERT INTO session_history (session_key, session_id, started_at)
			SELECT session_key, session_id, created_at FROM s WHERE created)`+lock+`
		SELECT `+sessionCols+`, created, prev FROM `+from, args...)
}

// forkSQL is the part of the arrival statement that copies a
// conversation into the session it creates (s, when s.created): the
// conversation turn $11 ran in under the key $10 — only a session of
// the new one's platform — up to and including the turn's last message
// (or, if those were removed since, the messages written before the
// turn was decided). Copied are its messages, the summaries of them
// (pointing at the copies) and its stored system prompt; the copies'
// turn ids are the originals' with "@<new session id>", unique to the
// copy, so that no turn of the new conversation takes them for its
// own steps. One statement: nothing or all of it is written.
const forkSQL = `,
		f AS (
			SELECT s.session_key AS key, s.session_id AS id, s.generation AS gen, w.session_id AS src_id,
				coalesce(
					(SELECT max(m.id) FROM transcript_messages m WHERE m.turn_id = w.turn_id AND m.session_id = w.session_id),
					(SELECT max(m.id) FROM transcript_messages m WHERE m.session_id = w.session_id AND m.created_at <= w.updated_at),
					0) AS upto
			FROM s JOIN worker_turns w ON w.turn_id = $11 AND w.session_key = $10
			WHERE s.created AND EXISTS (SELECT 1 FROM sessions o WHERE o.session_key = $10 AND o.platform = s.platform)),
		fm AS (
			SELECT m.id, m.user_key, m.turn_id || '@' || f.id AS turn_id, m.step, m.role, m.content, m.tool_calls,
				m.tool_call_id, m.tool_name, m.created_at, m.compacted
			FROM transcript_messages m, f WHERE m.session_id = f.src_id AND m.id <= f.upto),
		fc AS (
			INSERT INTO transcript_messages (session_key, session_id, user_key, turn_id, generation, step, role, content,
				tool_calls, tool_call_id, tool_name, created_at, compacted)
			SELECT f.key, f.id, fm.user_key, fm.turn_id, f.gen, fm.step, fm.role, fm.content, fm.tool_calls,
				fm.tool_call_id, fm.tool_name, fm.created_at, fm.compacted
			FROM fm, f ORDER BY fm.id
			RETURNING id, turn_id, step),
		fs AS (
			INSERT INTO transcript_summaries (session_id, session_key, upto_id, summary, turn_id, generation, created_at)
			SELECT f.id, f.key,
				coalesce((SELECT max(fc.id) FROM fc JOIN fm ON fm.turn_id = fc.turn_id AND fm.step = fc.step WHERE fm.id <= x.upto_id), 0),
				x.summary, x.turn_id || '@' || f.id, f.gen, x.created_at
			FROM transcript_summaries x, f WHERE x.session_id = f.src_id AND x.upto_id <= f.upto),
		fp AS (
			INSERT INTO session_prompts (session_id, session_key, signature, prompt)
			SELECT f.id, f.key, p.signature, p.prompt FROM session_prompts p, f WHERE p.session_id = f.src_id
			ON CONFLICT (session_id) DO NOTHING)`

// readArrival reads the result of queueArriveLocking's statement.
func readArrival(br pgx.BatchResults) (sess Session, created bool, prev time.Time, err error) {
	var prevAt *time.Time
	sess, err = scanSession(br.QueryRow(), &created, &prevAt)
	if err != nil {
		return Session{}, false, prev, fmt.Errorf("record arrival: %w", err)
	}
	if prevAt != nil {
		prev = *prevAt
	}
	return sess, created, prev, nil
}

// Arrival is what ArriveAndEnqueue reports of the session: as Arrive.
type Arrival struct {
	Session Session
	Created bool
	Prev    time.Time
}

// ArriveAndEnqueue is Arrive and then Enqueue in one round trip and one
// durable commit, for a message to a session nobody holds (the common
// case: the router has no busy-session decision to make before queueing).
// A session it creates for a message with a fork point (ev.fork_from)
// starts as that copy, as with ArriveFork.
func (s *Store) ArriveAndEnqueue(ctx context.Context, key, profile string, src *eventsv1.SessionSource, streamSeq int64, ownTurn bool, ev *eventsv1.MessageReceived, max int) (a Arrival, inserted bool, err error) {
	data, err := proto.Marshal(ev)
	if err != nil {
		return a, false, fmt.Errorf("encode queued message: %w", err)
	}
	b := &pgx.Batch{}
	s.queueArriveLocking(b, key, profile, src, ev.GetEventId(), ev.GetForkFrom(), false)
	s.queueEnqueue(b, key, "", streamSeq, ownTurn, ev, data, max, traceParent(ctx))
	br := s.db.SendBatch(ctx, b)
	defer br.Close()
	if a.Session, a.Created, a.Prev, err = readArrival(br); err != nil {
		return a, false, err
	}
	if inserted, err = readEnqueue(br); err != nil {
		return a, false, err
	}
	return a, inserted, br.Close()
}

// Reset starts a new conversation under key: a new session id, the next
// generation, no waiting messages, zeroed counters, no /model override
// (as Hermes, an override belongs to its conversation). reason is
// recorded.
func (s *Store) Reset(ctx context.Context, key, reason string) (Session, error) {
	sess, _, err := s.reset(ctx, key, reason, false, nil, nil)
	return sess, err
}

// ResetDropping is Reset that also returns the waiting messages it
// dropped, in their queue order (Event and SteeredBy set), as Stop does,
// for the caller to answer those that wait for an answer of their own.
// With flush set, it queues the ended conversation's memory flush
// (queueFlush) in the same transaction.
func (s *Store) ResetDropping(ctx context.Context, key, reason string, flush *eventsv1.MessageReceived) (Session, []Queued, error) {
	return s.reset(ctx, key, reason, false, flush, nil)
}

// ResetAnswering is ResetDropping for a caller outside a transaction
// of its own (the admin API's reset): answer gets the new session and
// the dropped messages before the reset commits, so that an error of
// answer (a reply that could not be published) rolls the reset back
// and no waiting message is dropped unanswered. It queues no memory
// flush.
func (s *Store) ResetAnswering(ctx context.Context, key, reason string, answer func(ctx context.Context, sess Session, dropped []Queued) error) (Session, error) {
	sess, _, err := s.reset(ctx, key, reason, false, nil, answer)
	return sess, err
}

// ResetKeepingQueue is Reset that keeps the waiting messages: a reset by
// policy, with no turn running, finds only messages nobody answered yet
// (the one that found the session due, parts held for the rest of a
// message), which belong to the new conversation. With flush set, the
// ended conversation's memory flush goes ahead of them (queueFlush), in
// the same transaction.
func (s *Store) ResetKeepingQueue(ctx context.Context, key, reason string, flush *eventsv1.MessageReceived) (Session, error) {
	sess, _, err := s.reset(ctx, key, reason, true, flush, nil)
	return sess, err
}

func (s *Store) reset(ctx context.Context, key, reason string, keepQueue bool, flush *eventsv1.MessageReceived, answer func(context.Context, Session, []Queued) error) (Session, []Queued, error) {
	now := s.now()
	var sess Session
	var dropped []Queued
	err := pgx.BeginFunc(ctx, s.db, func(tx pgx.Tx) error {
		dropped = nil
		id := NewSessionID(now)
		var old string
		if err := tx.QueryRow(ctx, `SELECT session_id FROM sessions WHERE session_key = $1 FOR UPDATE`, key).Scan(&old); err != nil {
			if errors.Is(err, pgx.ErrNoRows) {
				return ErrNotFound
			}
			return fmt.Errorf("lock session: %w", err)
		}
		if _, err := tx.Exec(ctx, `UPDATE session_history SET ended_at = $3, end_reason = $4
			WHERE session_key = $1 AND session_id = $2 AND ended_at IS NULL`, key, old, now, reason); err != nil {
			return fmt.Errorf("end session history: %w", err)
		}
		if _, err := tx.Exec(ctx, `INSERT INTO session_history (session_key, session_id, started_at) VALUES ($1, $2, $3)`, key, id, now); err != nil {
			return fmt.Errorf("record session history: %w", err)
		}
		var err error
		if !keepQueue {
			if dropped, err = dropQueue(ctx, tx, key); err != nil {
				return err
			}
		}
		if flush != nil {
			if err := queueFlush(ctx, tx, key, old, flush, now); err != nil {
				return err
			}
		}
		sess, err = scanSession(tx.QueryRow(ctx, `UPDATE sessions SET session_id = $2, generation = generation + 1,
			reset_count = reset_count + 1, last_reset_at = $3, last_reset_reason = $4, title = '', model_override = '',
			input_tokens = 0, output_tokens = 0, cache_read_tokens = 0, cache_write_tokens = 0,
			system_prompt_fingerprint = '', resume_pending = false, suspended = false,
			updated_at = $3, last_activity_at = $3, arrival_prev_at = $3
			WHERE session_key = $1 RETURNING `+sessionCols, key, id, now, reason))
		if err != nil {
			return fmt.Errorf("reset session: %w", err)
		}
		if answer != nil {
			return answer(ctx, sess, dropped)
		}
		return nil
	})
	return sess, dropped, err
}

// LastTurnEnd is when the last turn of conversation sessionID under key
// ended (its worker's last write of it, worker_turns.updated_at); zero
// when it has none. A session's recorded activity is its messages'
// arrivals: the reset policy, which Hermes measures from the end of the
// last interaction, reads this where a reset looks due. spent reports
// whether the conversation used any tokens (its turns' rows, and the
// session row's counts of turns that ended without one): as Hermes's
// reset_had_activity (total_tokens > 0), only then is its reset worth a
// notice, so a turn /stop or /new fenced before any model call (its
// fenced row has no tokens) does not make it one.
func (s *Store) LastTurnEnd(ctx context.Context, key, sessionID string) (end time.Time, spent bool, err error) {
	var at *time.Time
	err = s.db.QueryRow(ctx, `SELECT
		(SELECT updated_at FROM worker_turns WHERE session_key = $1 AND session_id = $2 ORDER BY started_at DESC LIMIT 1),
		EXISTS (SELECT 1 FROM worker_turns WHERE session_key = $1 AND session_id = $2
			AND input_tokens + output_tokens + cache_read_tokens + cache_write_tokens > 0)
		OR EXISTS (SELECT 1 FROM sessions WHERE session_key = $1 AND session_id = $2
			AND input_tokens + output_tokens + cache_read_tokens + cache_write_tokens > 0)`, key, sessionID).Scan(&at, &spent)
	if err != nil {
		return time.Time{}, false, fmt.Errorf("read last turn end: %w", err)
	}
	if at != nil {
		end = *at
	}
	return end, spent, nil
}

// TurnMayRun reports whether the last turn started for sess
// (sess.LastTurnID) may still run: one was started and its worker has
// recorded no end of it in worker_turns (a final; a memory flush's
// usage booked without one; or, for a turn a later generation fenced
// off — a /new or /stop that stopped it —, the fenced end its worker
// records once its attempt has stopped and the session is past the
// turn's generation, so that no attempt of it can run again). The worker
// writes the row only as the turn ends, and it stays. A turn published
// and not yet taken, or running, has no row; so has a fenced one whose
// worker could not record its end (the database failed, the worker
// died, a worker of a release before the record), which therefore
// counts as one that may run: the answer errs towards a turn running.
// A turn started since sess was read is not seen: a caller compares
// LastTurnID under the session row's lock, which turn starts take.
func (s *Store) TurnMayRun(ctx context.Context, sess Session) (bool, error) {
	if sess.LastTurnID == "" {
		return false, nil
	}
	ended, err := s.TurnEnded(ctx, sess.LastTurnID)
	return !ended, err
}

// TurnEnded reports whether the worker of the turn turnID recorded its
// end in worker_turns (TurnMayRun): a final, whose answer may be in the
// chat already, a memory flush's usage, or a fenced end.
func (s *Store) TurnEnded(ctx context.Context, turnID string) (bool, error) {
	var ended bool
	if err := s.db.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM worker_turns WHERE turn_id = $1)`, turnID).Scan(&ended); err != nil {
		return false, fmt.Errorf("read turn %s: %w", turnID, err)
	}
	return ended, nil
}

// Stop fences the running turn (next generation) and drops the waiting
// messages, steering the turn has not given to the model with them; it
// returns the new generation, the session's last turn (the one it
// fenced, if it runs; read under the row's lock, which turn starts take)
// and the messages dropped, in their queue order (Event and SteeredBy
// set).
func (s *Store) Stop(ctx context.Context, key string) (gen int64, lastTurn string, dropped []Queued, err error) {
	err = pgx.BeginFunc(ctx, s.db, func(tx pgx.Tx) error {
		dropped = nil
		if err := tx.QueryRow(ctx, `UPDATE sessions SET generation = generation + 1, updated_at = $2
			WHERE session_key = $1 RETURNING generation, last_turn_id`, key, s.now()).Scan(&gen, &lastTurn); err != nil {
			if errors.Is(err, pgx.ErrNoRows) {
				return ErrNotFound
			}
			return fmt.Errorf("advance generation: %w", err)
		}
		dropped, err = dropQueue(ctx, tx, key)
		return err
	})
	return gen, lastTurn, dropped, err
}

// dropQueue deletes key's waiting messages in tx and returns them in
// their queue order (Event and SteeredBy set).
func dropQueue(ctx context.Context, tx pgx.Tx, key string) ([]Queued, error) {
	// A memory flush stays: it waits for no answer, and the conversation
	// it saves from has ended already (queueFlush).
	rows, err := tx.Query(ctx, `WITH d AS (DELETE FROM session_queue WHERE session_key = $1 AND NOT starts_with(event_id, '`+FlushEventPrefix+`')
		RETURNING stream_seq, id, event, steered_by)
		SELECT event, steered_by FROM d ORDER BY stream_seq, id`, key)
	if err != nil {
		return nil, fmt.Errorf("clear queue: %w", err)
	}
	defer rows.Close()
	var dropped []Queued
	for rows.Next() {
		var data []byte
		var q Queued
		if err := rows.Scan(&data, &q.SteeredBy); err != nil {
			return nil, fmt.Errorf("clear queue: %w", err)
		}
		q.Event = &eventsv1.MessageReceived{}
		if err := proto.Unmarshal(data, q.Event); err != nil {
			return nil, fmt.Errorf("decode dropped message: %w", err)
		}
		dropped = append(dropped, q)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("clear queue: %w", err)
	}
	return dropped, nil
}

// Enqueue appends a message to the session's FIFO and commits durably
// (after this the message cannot be lost), in one round trip. A message
// already queued (same event id) is not added twice: inserted is false.
// When the queue holds max messages it returns ErrQueueFull.
func (s *Store) Enqueue(ctx context.Context, key string, streamSeq int64, ownTurn bool, ev *eventsv1.MessageReceived, max int) (inserted bool, err error) {
	return s.EnqueueWhileHeld(ctx, key, "", streamSeq, ownTurn, ev, max)
}

// EnqueueWhileHeld is Enqueue for a session whose lock holds owner (""
// when no turn runs): max bounds the messages waiting as Waiting counts
// them, so steering the running turn took and has not yet given to the
// model (Queued.IsSteeringOf) takes no room. It is part of that turn to
// the user, and a user steering a long turn must not find the queue
// full with their own steering.
func (s *Store) EnqueueWhileHeld(ctx context.Context, key, owner string, streamSeq int64, ownTurn bool, ev *eventsv1.MessageReceived, max int) (inserted bool, err error) {
	data, err := proto.Marshal(ev)
	if err != nil {
		return false, fmt.Errorf("encode queued message: %w", err)
	}
	b := &pgx.Batch{}
	s.queueEnqueue(b, key, owner, streamSeq, ownTurn, ev, data, max, traceParent(ctx))
	br := s.db.SendBatch(ctx, b)
	defer br.Close()
	if inserted, err = readEnqueue(br); err != nil {
		return false, err
	}
	return inserted, br.Close()
}

// EnqueueWhileHeldThen is EnqueueWhileHeld that, when the message is
// inserted, runs then before the insert commits, on a Store of the
// transaction: what then publishes is out before any turn can take the
// message (the router's busy acknowledgement, ahead of the answer of
// the turn that takes it). An error of then rolls the insert back. A nil
// then is EnqueueWhileHeld: one round trip, no transaction of its own.
func (s *Store) EnqueueWhileHeldThen(ctx context.Context, key, owner string, streamSeq int64, ownTurn bool, ev *eventsv1.MessageReceived, max int,
	then func(ctx context.Context, tx *Store) error) (inserted bool, err error) {
	if then == nil {
		return s.EnqueueWhileHeld(ctx, key, owner, streamSeq, ownTurn, ev, max)
	}
	data, err := proto.Marshal(ev)
	if err != nil {
		return false, fmt.Errorf("encode queued message: %w", err)
	}
	err = pgx.BeginFunc(ctx, s.db, func(tx pgx.Tx) error {
		b := &pgx.Batch{}
		s.queueEnqueue(b, key, owner, streamSeq, ownTurn, ev, data, max, traceParent(ctx))
		br := tx.SendBatch(ctx, b)
		ins, err := readEnqueue(br)
		if cerr := br.Close(); err == nil {
			err = cerr
		}
		if err != nil || !ins {
			return err
		}
		c := *s
		c.db, c.pool, c.tx = tx, nil, tx
		if err := then(ctx, &c); err != nil {
			return err
		}
		inserted = true
		return nil
	})
	if err != nil {
		return false, err
	}
	return inserted, nil
}

// turnStartsLock is the advisory lock key of the turn starts of the
// session $1: StartTurn takes it shared, HoldTurnStarts exclusively.
const turnStartsLock = `hashtextextended('turn starts:' || $1, 0)`

// HoldTurnStarts holds back the turn starts of the session key
// (StartTurn waits) until release is called, and returns a Store whose
// statements run on the connection that holds them: what the holder
// reads and writes meanwhile must go through it, as a second connection
// of the pool may never come while every connection is held the same
// way. What held queues commits at once and is visible to others (a
// worker taking it as steering), but no turn can take it as an input
// before release: the router tells the user what became of a message
// (its busy acknowledgement) before the next turn may answer it.
//
// The hold is a session-level advisory lock: it ends with release, or
// with the connection if the holder dies. A holder the server cannot
// see die (its host lost, a network partition: no close reaches
// Postgres, which would keep the lock until TCP keepalive gives up,
// hours) is bounded too: the connection may sit idle between the
// holder's statements for holdIdleBound at most (idle_session_timeout),
// past which the server ends it, and the lock with it; the holder's
// next statement then fails. release must be called once; it never
// fails (a connection that could not let go is closed).
func (s *Store) HoldTurnStarts(ctx context.Context, key string) (held *Store, release func(), err error) {
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		return nil, nil, fmt.Errorf("hold turn starts: %w", err)
	}
	bound := s.holdIdle
	if bound <= 0 {
		bound = holdIdleBound
	}
	b := &pgx.Batch{}
	b.Queue(`SELECT pg_advisory_lock(`+turnStartsLock+`)`, key)
	b.Queue(`SELECT set_config('idle_session_timeout', $1, false)`, fmt.Sprintf("%dms", bound.Milliseconds()))
	if err := conn.SendBatch(ctx, b).Close(); err != nil {
		// The lock may be held if only the answer was lost.
		_ = conn.Conn().Close(context.WithoutCancel(ctx))
		conn.Release()
		return nil, nil, fmt.Errorf("hold turn starts: %w", err)
	}
	c := *s
	c.db, c.pool, c.tx = conn, nil, nil
	release = func() {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), releaseTimeout)
		defer cancel()
		b := &pgx.Batch{}
		b.Queue(`SELECT pg_advisory_unlock(`+turnStartsLock+`)`, key)
		b.Queue(`RESET idle_session_timeout`)
		br := conn.SendBatch(ctx, b)
		var unlocked bool
		err := br.QueryRow().Scan(&unlocked)
		if cerr := br.Close(); err == nil {
			err = cerr
		}
		if err != nil || !unlocked {
			// Back in the pool it would hold the session's starts for
			// ever: closed, the server lets go of the lock.
			_ = conn.Conn().Close(ctx)
		}
		conn.Release()
	}
	return &c, release, nil
}

// releaseTimeout bounds HoldTurnStarts' unlock; past it the connection
// is closed, which lets go of the lock as well.
const releaseTimeout = 5 * time.Second

// holdIdleBound is how long the connection of HoldTurnStarts may sit
// idle, waiting for its holder's next statement: far past the router's
// longest wait while it holds (a turn's control request, 2 s; a bus
// publish, 5 s), so that only a holder gone silent meets it.
const holdIdleBound = 30 * time.Second

// QueryRow runs a query of one row on the store's connection (the pool,
// a transaction, or the connection of HoldTurnStarts), for the stores of
// other packages to read through it.
func (s *Store) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	return s.db.QueryRow(ctx, sql, args...)
}

// QueuedOrStarted reports whether the message of event eventID
// (MessageReceived.event_id) waits in key's queue or was the last one
// started as its turn: a redelivery of a message queued already, found
// without queueing it (as Enqueue does, ErrStarted).
func (s *Store) QueuedOrStarted(ctx context.Context, key, eventID string) (bool, error) {
	var yes bool
	err := s.db.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM sessions WHERE session_key = $1 AND last_started_event_id = $2)
		OR EXISTS (SELECT 1 FROM session_queue WHERE session_key = $1 AND event_id = $2)`, key, eventID).Scan(&yes)
	if err != nil {
		return false, fmt.Errorf("read queued or started message: %w", err)
	}
	return yes, nil
}

// queueEnqueue adds EnqueueWhileHeld's statements to b.
func (s *Store) queueEnqueue(b *pgx.Batch, key, owner string, streamSeq int64, ownTurn bool, ev *eventsv1.MessageReceived, data []byte, max int, traceparent string) {
	// Serialise enqueues per session (until the batch commits) so the cap holds.
	b.Queue(`SELECT pg_advisory_xact_lock(hashtextextended('queue:' || $1, 0))`, key)
	b.Queue(`WITH n AS (SELECT count(*) AS c FROM session_queue WHERE session_key = $1 AND NOT `+steeringOfSQL("$10")+`),
		started AS (SELECT EXISTS (SELECT 1 FROM sessions WHERE session_key = $1 AND last_started_event_id = $3) AS yes),
		ins AS (
			INSERT INTO session_queue (session_key, stream_seq, event_id, own_turn, event, enqueued_at, traceparent, takes_skills_note)
			SELECT $1, $2, $3, $4, $5, $6, $8, $9 WHERE (SELECT c FROM n) < $7 AND NOT (SELECT yes FROM started)
			ON CONFLICT (session_key, event_id) DO NOTHING RETURNING 1)
		SELECT EXISTS (SELECT 1 FROM ins),
			EXISTS (SELECT 1 FROM session_queue WHERE session_key = $1 AND event_id = $3),
			(SELECT yes FROM started)`,
		key, streamSeq, ev.GetEventId(), ownTurn, data, s.now(), max, traceparent, TakesSkillsNote(ev), owner)
}

// traceParent is the W3C traceparent of ctx's span, or "".
func traceParent(ctx context.Context) string {
	c := propagation.MapCarrier{}
	propagation.TraceContext{}.Inject(ctx, c)
	return c["traceparent"]
}

// readEnqueue reads the results of queueEnqueue's statements; a message
// neither inserted nor already queued nor started found the queue full.
func readEnqueue(br pgx.BatchResults) (inserted bool, err error) {
	if _, err := br.Exec(); err != nil {
		return false, fmt.Errorf("lock queue: %w", err)
	}
	var queued, started bool
	if err := br.QueryRow().Scan(&inserted, &queued, &started); err != nil {
		return false, fmt.Errorf("enqueue: %w", err)
	}
	switch {
	case started:
		return false, ErrStarted
	case !inserted && !queued:
		return false, ErrQueueFull
	}
	return inserted, nil
}

// Unqueue removes the queued message eventID of the session, if it is
// still queued: steering a worker of an older release took, which would
// never remove it itself (the router's steer).
func (s *Store) Unqueue(ctx context.Context, key, eventID string) error {
	if _, err := s.db.Exec(ctx, `DELETE FROM session_queue WHERE session_key = $1 AND event_id = $2`, key, eventID); err != nil {
		return fmt.Errorf("unqueue %s: %w", eventID, err)
	}
	return nil
}

// MarkSteering records that the running turn holding the session lock
// with value owner took the queued message eventID as steering (it stays
// queued until the turn gives it to the model, migration 00216): while
// that turn holds the lock the message counts as steering, not as
// waiting (Waiting, Peek, Stop). A message no longer queued (the turn
// gave it to the model already) is left alone.
func (s *Store) MarkSteering(ctx context.Context, key, eventID, owner string) error {
	if _, err := s.db.Exec(ctx, `UPDATE session_queue SET steered_by = $3 WHERE session_key = $1 AND event_id = $2`,
		key, eventID, owner); err != nil {
		return fmt.Errorf("mark %s as steering: %w", eventID, err)
	}
	return nil
}

// Waiting is what the session's queue holds as the user sees it, with
// owner the session lock's value ("" when no turn runs): waiting, the
// messages for the next turns, and steering, the text the running turn
// took and has not yet given to the model (Queued.IsSteeringOf).
func (s *Store) Waiting(ctx context.Context, key, owner string) (waiting, steering int, err error) {
	if err := s.db.QueryRow(ctx, `SELECT count(*) FILTER (WHERE NOT `+steeringOfSQL("$2")+`),
			count(*) FILTER (WHERE `+steeringOfSQL("$2")+`)
		FROM session_queue WHERE session_key = $1`, key, owner).Scan(&waiting, &steering); err != nil {
		return 0, 0, fmt.Errorf("count queue: %w", err)
	}
	return waiting, steering, nil
}

// QueueLen is how many messages wait for the session, steering a running
// turn took and has not given to the model included (the next turn takes
// it when that turn ends without it): what a turn start may take.
func (s *Store) QueueLen(ctx context.Context, key string) (int, error) {
	var n int
	if err := s.db.QueryRow(ctx, `SELECT count(*) FROM session_queue WHERE session_key = $1`, key).Scan(&n); err != nil {
		return 0, fmt.Errorf("count queue: %w", err)
	}
	return n, nil
}

// Peek reads the session's queue without changing it: how many messages
// wait, and the first limit of them in the order their turns will take
// them, in one round trip. It takes no lock, so a turn starting meanwhile
// may already have taken some of them. limit must be at least 1 (the
// count rides on the rows read).
func (s *Store) Peek(ctx context.Context, key string, limit int) (total int, head []Queued, err error) {
	return s.PeekWaiting(ctx, key, "", limit)
}

// PeekWaiting is Peek as the user sees the queue: steering the turn
// holding the session lock with value owner took and has not given to
// the model is neither counted nor read (Queued.IsSteeringOf; owner "":
// nothing is left out).
func (s *Store) PeekWaiting(ctx context.Context, key, owner string, limit int) (total int, head []Queued, err error) {
	rows, err := s.db.Query(ctx, `SELECT id, stream_seq, event_id, own_turn, event, traceparent, enqueued_at, steered_by,
			count(*) OVER () FROM session_queue WHERE session_key = $1 AND NOT `+steeringOfSQL("$3")+`
			ORDER BY stream_seq, id LIMIT $2`, key, limit, owner)
	if err != nil {
		return 0, nil, fmt.Errorf("read queue: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var q Queued
		var data []byte
		if err := rows.Scan(&q.ID, &q.StreamSeq, &q.EventID, &q.OwnTurn, &data, &q.TraceParent, &q.EnqueuedAt, &q.SteeredBy, &total); err != nil {
			return 0, nil, fmt.Errorf("read queue: %w", err)
		}
		q.Event = &eventsv1.MessageReceived{}
		if err := proto.Unmarshal(data, q.Event); err != nil {
			return 0, nil, fmt.Errorf("decode queued message %d: %w", q.ID, err)
		}
		head = append(head, q)
	}
	if err := rows.Err(); err != nil {
		return 0, nil, fmt.Errorf("read queue: %w", err)
	}
	return total, head, nil
}

// FreeStart is a free start (BeginFree) whose transaction is open: it
// holds the session's row and queue locks until Start or Drop ends it.
type FreeStart struct {
	conn *pgxpool.Conn
	msg  *eventsv1.MessageReceived
	turn string
	a    Arrival
	gen  int64
	// note is the /reload-skills note the turn takes (SetSkillsNote).
	note string
	err  error
}

// BeginFree begins starting msg as a turn of its own without queueing it,
// for a session whose queue is empty (the common case: a message to an
// idle session) and whose last turn no longer holds its lease (a turn
// that still runs, though Redis lost its lock: the message waits for it
// in the queue). In one transaction it records the arrival (as Arrive),
// advances the generation, records turnID and msg's event id as the last
// started and gives the turn its lease; Start then publishes the turn
// and commits durably after it. A redelivery of msg after the commit finds its event id there
// (Enqueue reports ErrStarted). Two round trips: the statements with
// BEGIN, then COMMIT, which a publishing caller's critical path need not
// wait for: a worker's first fenced write waits for it (the generation's
// lock).
//
// BeginFree sends the statements and reads their results, leaving the
// transaction open, so a caller can send them while it waits for an
// answer from elsewhere (the router's dedupe read and lock, which decides
// whether the session is free); one that does not start the message must
// Drop it. Until then the session's row and queue are locked, and fenced
// writes of the session wait.
func (s *Store) BeginFree(ctx context.Context, key, profile string, src *eventsv1.SessionSource, msg *eventsv1.MessageReceived, turnID string) *FreeStart {
	f := &FreeStart{msg: msg, turn: turnID}
	f.conn, f.err = s.pool.Acquire(ctx)
	if f.err != nil {
		f.err = fmt.Errorf("start turn: %w", f.err)
		return f
	}
	now := s.now()
	b := &pgx.Batch{}
	b.Queue("BEGIN")
	// Enqueues of the session wait for this transaction (the queue's lock,
	// taken with the arrival), so the queue stays empty until the turn is
	// started; the update below, a statement of its own, sees every
	// enqueue that committed before.
	s.queueArriveLocking(b, key, profile, src, msg.GetEventId(), msg.GetForkFrom(), true)
	// The turn takes the conversation's /reload-skills note
	// (SetSkillsNote), unless its message leaves it for a later one
	// (TakesSkillsNote).
	b.Queue(`WITH note AS (
			SELECT CASE WHEN $5 AND skills_note_session = session_id THEN skills_note END AS text
			FROM sessions WHERE session_key = $1)
		UPDATE sessions SET generation = generation + 1, last_turn_id = $2, last_turn_at = $3, updated_at = $3,
			last_started_event_id = $4,
			skills_note = CASE WHEN $5 THEN NULL ELSE skills_note END,
			skills_note_session = CASE WHEN $5 THEN NULL ELSE skills_note_session END
		WHERE session_key = $1 AND last_started_event_id IS DISTINCT FROM $4
		  AND NOT EXISTS (SELECT 1 FROM session_queue WHERE session_key = $1)
		  AND NOT `+turnRunsSQL+`
		RETURNING generation, coalesce((SELECT text FROM note), '')`,
		key, turnID, now, msg.GetEventId(), TakesSkillsNote(msg))
	b.Queue(leaseSQL, key, turnID, s.lease.Milliseconds())
	f.gen, f.note, f.err = readFreeStart(f.conn.SendBatch(ctx, b), &f.a)
	return f
}

// Start finishes what BeginFree began: it publishes the turn and commits
// after it. Nothing is written and started is false when messages wait in
// the queue or the last turn holds its lease (the caller queues msg
// behind them, and its start finds that turn running), when msg is the last
// message started already (a redelivery: queueing it reports ErrStarted),
// or when proceed, given the arrival, says no (a reset is due): the
// caller then takes the queueing path. Either way the transaction is over
// when it returns.
func (f *FreeStart) Start(ctx context.Context, proceed func(Arrival) bool, publish func(context.Context, Turn) error) (a Arrival, started bool, err error) {
	defer f.Drop(ctx)
	if f.err != nil || f.gen == 0 || !proceed(f.a) {
		return f.a, false, f.err
	}
	a = f.a
	a.Session.Generation, a.Session.LastTurnID = f.gen, f.turn
	turn := Turn{Session: a.Session, Generation: f.gen, Inputs: []Queued{{EventID: f.msg.GetEventId(), Event: f.msg}}, SkillsNote: f.note, Tx: f.conn}
	if err := publish(ctx, turn); err != nil {
		return a, false, err
	}
	if _, err := f.conn.Exec(ctx, "COMMIT"); err != nil {
		return a, false, fmt.Errorf("commit turn start: %w", err)
	}
	f.release()
	return a, true, nil
}

// Drop rolls back a start that was not committed and gives its
// connection back; it does nothing after Start committed or once done.
func (f *FreeStart) Drop(ctx context.Context) {
	if f == nil || f.conn == nil {
		return
	}
	// Release closes a connection left inside a transaction.
	_, _ = f.conn.Exec(context.WithoutCancel(ctx), "ROLLBACK")
	f.release()
}

func (f *FreeStart) release() {
	f.conn.Release()
	f.conn = nil
}

// readFreeStart reads BeginFree's batch into a; gen is 0 when nothing
// could be started.
func readFreeStart(br pgx.BatchResults, a *Arrival) (gen int64, note string, err error) {
	defer br.Close()
	if _, err := br.Exec(); err != nil {
		return 0, "", fmt.Errorf("start turn: begin: %w", err)
	}
	if a.Session, a.Created, a.Prev, err = readArrival(br); err != nil {
		return 0, "", err
	}
	switch err := br.QueryRow().Scan(&gen, &note); {
	case errors.Is(err, pgx.ErrNoRows):
		gen = 0
	case err != nil:
		return 0, "", fmt.Errorf("start turn: %w", err)
	}
	if _, err := br.Exec(); err != nil {
		return 0, "", fmt.Errorf("start turn: write its lease: %w", err)
	}
	return gen, note, br.Close()
}

// Querier runs a query (a transaction's, Turn.Tx).
type Querier interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// Turn is what StartTurn hands to its publish callback.
type Turn struct {
	Session    Session
	Generation int64
	Inputs     []Queued
	// Tx is the start's transaction, for what the publish reads before
	// the turn goes out (FreeStart.Start sets it; valid during the
	// publish only): a read on another of the pool's connections, made
	// while the start holds one, could wait for ever once every
	// connection is held by a start that waits the same way.
	Tx Querier
	// SkillsNote is the /reload-skills note the turn takes (SetSkillsNote),
	// "" for none.
	SkillsNote string
	// More: messages stay queued behind the turn (StartTurn).
	More bool
}

// StartTurn takes the head of the session's queue — one own-turn message,
// or the run of mergeable messages at the head (at most maxInputs) —
// removes it, advances the generation, records turnID and gives the turn
// its lease (migration 00148), all in one transaction that commits only
// if publish succeeds. It reports false when nothing waits (whether or
// not a turn holds its lease), and ErrTurnRunning when messages wait
// while the session's last turn still holds its lease (Redis lost that
// turn's lock while it ran): its completion starts them. The caller
// holds the session lock.
//
// Two round trips: BEGIN with the session's lock and the dequeue, then
// COMMIT. The commit does not wait for the WAL flush: if Postgres crashes
// before the worker's durable Finish flushes it, the messages are back in
// the queue and the session at the old generation, so the published turn
// fails its fence and the sweep starts them again.
func (s *Store) StartTurn(ctx context.Context, key, turnID string, maxInputs, maxBytes int, publish func(context.Context, Turn) error) (started bool, err error) {
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		return false, fmt.Errorf("start turn: %w", err)
	}
	defer conn.Release()
	committed := false
	defer func() {
		if !committed {
			// Release closes a connection left inside a transaction.
			_, _ = conn.Exec(context.WithoutCancel(ctx), "ROLLBACK")
		}
	}()
	b := &pgx.Batch{}
	b.Queue("BEGIN")
	b.Queue(pg.AsyncCommit)
	// A start waits while a message of the session is being answered
	// under HoldTurnStarts; starts do not wait for each other here.
	b.Queue(`SELECT pg_advisory_xact_lock_shared(`+turnStartsLock+`)`, key)
	// The session row's lock serialises turn starts of the session (the
	// queue's rows need no lock of their own: enqueues only add).
	// A start takes nothing while the last turn holds its lease: whether
	// messages then wait for it (an empty queue waits for nothing).
	b.Queue(`SELECT `+sessionCols+`, `+turnRunsSQL+` AND EXISTS (SELECT 1 FROM session_queue WHERE session_key = $1)
		FROM sessions WHERE session_key = $1 FOR UPDATE`, key)
	if maxBytes <= 0 {
		maxBytes = math.MaxInt32
	}
	b.Queue(dequeueSQL, key, maxInputs, turnID, s.now(), maxBytes)
	b.Queue(leaseSQL, key, turnID, s.lease.Milliseconds())
	turn, err := readHead(conn.SendBatch(ctx, b), key)
	if err != nil || len(turn.Inputs) == 0 {
		return false, err
	}
	turn.Session.LastTurnID = turnID
	if err := publish(ctx, turn); err != nil {
		return false, err
	}
	if _, err := conn.Exec(ctx, "COMMIT"); err != nil {
		return false, fmt.Errorf("commit turn start: %w", err)
	}
	committed = true
	return true, nil
}

// dequeueSQL removes the head of a session's queue that makes one turn
// and advances the session's generation, returning the removed messages
// with the new generation (no rows: nothing waits, no session, or its
// last turn holds its lease). The
// head is the first message when it is an own-turn one, else the run of
// mergeable messages before the first own-turn one; at most $2 messages
// and, beyond the first, $5 bytes of encoded events (the turn must fit a
// bus message: a head too big to publish would be picked, and fail, for
// ever). The /reload-skills note made in the session's current
// conversation, if any, goes with them (SetSkillsNote) when one of them
// takes it (TakesSkillsNote: not a /undo's or /compress's turn, which
// leaves it waiting for the next); the turn that takes it clears it,
// one made in an earlier conversation too. The newest message taken becomes the last started: a redelivery
// of it (the router died after queueing it, before recording it as
// handled, and its partition delivers nothing newer until it is acked) is
// then recognised as started, by Enqueue and by BeginFree.
const dequeueSQL = `
WITH head AS (
	SELECT id, row_number() OVER (ORDER BY stream_seq, id) AS rn, own_turn,
		sum(octet_length(event)) OVER (ORDER BY stream_seq, id) AS bytes
	FROM session_queue WHERE session_key = $1
	ORDER BY stream_seq, id LIMIT $2),
first_own AS (SELECT min(rn) AS rn FROM head WHERE own_turn),
take AS (
	SELECT head.id FROM head, first_own
	WHERE EXISTS (SELECT 1 FROM sessions WHERE session_key = $1 AND NOT ` + turnRunsSQL + `)
	  AND CASE WHEN first_own.rn = 1 THEN head.rn = 1 ELSE head.rn < coalesce(first_own.rn, $2 + 1) END
	  AND (head.rn = 1 OR head.bytes <= $5)),
d AS (
	DELETE FROM session_queue q USING take WHERE q.id = take.id
	RETURNING q.id, q.stream_seq, q.event_id, q.own_turn, q.event, q.traceparent, q.takes_skills_note),
takes AS (SELECT EXISTS (SELECT 1 FROM d WHERE d.takes_skills_note) AS yes),
note AS (
	SELECT CASE WHEN (SELECT yes FROM takes) AND skills_note_session = session_id THEN skills_note END AS text
	FROM sessions WHERE session_key = $1),
u AS (
	UPDATE sessions SET generation = generation + 1, last_turn_id = $3, last_turn_at = $4, updated_at = $4,
		last_started_event_id = (SELECT event_id FROM d ORDER BY stream_seq DESC, id DESC LIMIT 1),
		skills_note = CASE WHEN (SELECT yes FROM takes) THEN NULL ELSE skills_note END,
		skills_note_session = CASE WHEN (SELECT yes FROM takes) THEN NULL ELSE skills_note_session END
	WHERE session_key = $1 AND EXISTS (SELECT 1 FROM take)
	RETURNING generation)
SELECT d.id, d.stream_seq, d.event_id, d.own_turn, d.event, d.traceparent, u.generation,
	EXISTS (SELECT 1 FROM session_queue q WHERE q.session_key = $1 AND q.id NOT IN (SELECT id FROM take)) AS more,
	coalesce((SELECT text FROM note), '')
FROM d, u
ORDER BY d.stream_seq, d.id`

// readHead reads StartTurn's batch: the locked session and the messages
// the dequeue took, as the turn to publish.
func readHead(br pgx.BatchResults, key string) (Turn, error) {
	defer br.Close()
	for _, what := range []string{"begin", "set commit mode", "wait for held starts"} {
		if _, err := br.Exec(); err != nil {
			return Turn{}, fmt.Errorf("start turn: %s: %w", what, err)
		}
	}
	var waitsForLease bool
	sess, err := scanSession(br.QueryRow(), &waitsForLease)
	if errors.Is(err, pgx.ErrNoRows) {
		return Turn{}, nil
	}
	if err != nil {
		return Turn{}, fmt.Errorf("lock session %s: %w", key, err)
	}
	rows, err := br.Query()
	if err != nil {
		return Turn{}, fmt.Errorf("dequeue: %w", err)
	}
	defer rows.Close()
	var take []Queued
	var more bool
	var note string
	for rows.Next() {
		var q Queued
		var data []byte
		if err := rows.Scan(&q.ID, &q.StreamSeq, &q.EventID, &q.OwnTurn, &data, &q.TraceParent, &sess.Generation, &more, &note); err != nil {
			return Turn{}, fmt.Errorf("scan queue: %w", err)
		}
		q.Event = &eventsv1.MessageReceived{}
		if err := proto.Unmarshal(data, q.Event); err != nil {
			return Turn{}, fmt.Errorf("decode queued message %d: %w", q.ID, err)
		}
		take = append(take, q)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return Turn{}, fmt.Errorf("dequeue: %w", err)
	}
	if _, err := br.Exec(); err != nil {
		return Turn{}, fmt.Errorf("start turn: write its lease: %w", err)
	}
	if len(take) == 0 && waitsForLease {
		// (The turn may have ended between the two reads: then the
		// dequeue took the messages, which start. A message queued
		// between them into a queue read as empty is started by its
		// enqueuer's start, which follows its commit.)
		return Turn{}, ErrTurnRunning
	}
	return Turn{Session: sess, Generation: sess.Generation, Inputs: take, More: more, SkillsNote: note}, br.Close()
}

// Waiting is a session with messages queued, by its oldest message.
type Waiting struct {
	Key    string
	Oldest time.Time
}

// WaitingKeys returns up to limit sessions with messages queued before
// olderThan, oldest first, after the one given (zero: from the start).
// Paging with the last one returned visits every waiting session, however
// many wait behind running turns ahead of it.
func (s *Store) WaitingKeys(ctx context.Context, olderThan time.Time, after Waiting, limit int) ([]Waiting, error) {
	rows, err := s.db.Query(ctx, `SELECT session_key, min(enqueued_at) AS oldest FROM session_queue WHERE enqueued_at < $1
		GROUP BY session_key HAVING (min(enqueued_at), session_key) > ($2, $3)
		ORDER BY oldest, session_key LIMIT $4`, olderThan, after.Oldest, after.Key, limit)
	if err != nil {
		return nil, fmt.Errorf("find waiting sessions: %w", err)
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (Waiting, error) {
		var w Waiting
		err := r.Scan(&w.Key, &w.Oldest)
		return w, err
	})
}

// Usage is one turn's token counts.
type Usage struct {
	Input, Output, CacheRead, CacheWrite int64
}

// TurnDone records a finished turn's usage (when u is not nil) and returns
// how many messages wait for the session, in one round trip. The usage
// commit does not wait for the WAL flush: a Postgres crash may lose the
// last turns' counts.
func (s *Store) TurnDone(ctx context.Context, key string, u *Usage) (waiting int, err error) {
	b := &pgx.Batch{}
	if u != nil {
		b.Queue(pg.AsyncCommit)
		b.Queue(`UPDATE sessions SET input_tokens = input_tokens + $2, output_tokens = output_tokens + $3,
			cache_read_tokens = cache_read_tokens + $4, cache_write_tokens = cache_write_tokens + $5, updated_at = $6
			WHERE session_key = $1`, key, u.Input, u.Output, u.CacheRead, u.CacheWrite, s.now())
	}
	b.Queue(`SELECT count(*) FROM session_queue WHERE session_key = $1`, key)
	br := s.db.SendBatch(ctx, b)
	defer br.Close()
	if u != nil {
		for range 2 {
			if _, err := br.Exec(); err != nil {
				return 0, fmt.Errorf("add usage: %w", err)
			}
		}
	}
	if err := br.QueryRow().Scan(&waiting); err != nil {
		return 0, fmt.Errorf("count queue: %w", err)
	}
	return waiting, br.Close()
}

func (s *Store) set(ctx context.Context, key, col string, v any) error {
	// col is one of a fixed set chosen by the caller, never user input.
	tag, err := s.db.Exec(ctx, `UPDATE sessions SET `+col+` = $2, updated_at = $3 WHERE session_key = $1`, key, v, s.now())
	if err != nil {
		return fmt.Errorf("update session %s: %w", col, err)
	}
	if tag.RowsAffected() == 0 {
		return ErrNotFound
	}
	return nil
}

// SetModel sets the per-session model override ("" for the default).
func (s *Store) SetModel(ctx context.Context, key, model string) error {
	return s.set(ctx, key, "model_override", model)
}

// SetTurnSettings sets the key's model override, personality and
// reasoning effort in one write (a /background task takes its chat's).
func (s *Store) SetTurnSettings(ctx context.Context, key, model, personality, effort string) error {
	tag, err := s.db.Exec(ctx, `UPDATE sessions SET model_override = $2, personality = $3, reasoning_effort = $4, updated_at = $5
		WHERE session_key = $1`, key, model, personality, effort, s.now())
	if err != nil {
		return fmt.Errorf("update session settings: %w", err)
	}
	if tag.RowsAffected() == 0 {
		return ErrNotFound
	}
	return nil
}

// QueuedKeys returns which of keys have messages waiting.
func (s *Store) QueuedKeys(ctx context.Context, keys []string) (map[string]bool, error) {
	rows, err := s.db.Query(ctx, `SELECT DISTINCT session_key FROM session_queue WHERE session_key = ANY($1)`, keys)
	if err != nil {
		return nil, fmt.Errorf("find queued sessions: %w", err)
	}
	found, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("find queued sessions: %w", err)
	}
	queued := make(map[string]bool, len(found))
	for _, k := range found {
		queued[k] = true
	}
	return queued, nil
}

// SetPersonality sets the key's personality (a name of
// agent.personalities, "" for none). It outlives /new and /resume.
func (s *Store) SetPersonality(ctx context.Context, key, name string) error {
	return s.set(ctx, key, "personality", name)
}

// SetReasoningEffort sets the key's reasoning effort ("" for the
// default). It outlives /new and /resume.
func (s *Store) SetReasoningEffort(ctx context.Context, key, effort string) error {
	return s.set(ctx, key, "reasoning_effort", effort)
}

// SetShowReasoning sets whether the key's answers show the model's
// reasoning. It outlives /new and /resume.
func (s *Store) SetShowReasoning(ctx context.Context, key string, show bool) error {
	return s.set(ctx, key, "show_reasoning", show)
}

// SetBusyMode sets the key's busy mode (/busy: interrupt, queue or
// steer; "" for the configured one). It is a column of the key's row,
// which no reset touches: it outlives /new, /branch and /resume.
func (s *Store) SetBusyMode(ctx context.Context, key, mode string) error {
	return s.set(ctx, key, "busy_mode", mode)
}

// SetServiceTier sets the key's fast mode (/fast): "fast", "normal", or
// "" for the default (agent.service_tier).
func (s *Store) SetServiceTier(ctx context.Context, key, tier string) error {
	return s.set(ctx, key, "service_tier", tier)
}

// SetRuntimeFooter sets the key's runtime footer (/footer): "on", "off",
// or "" for the configured default. It outlives /new, /branch and
// /resume.
func (s *Store) SetRuntimeFooter(ctx context.Context, key, state string) error {
	return s.set(ctx, key, "runtime_footer", state)
}

// SetVoiceMode sets the key's voice reply mode (/voice): "voice_only",
// "all" or "off". It outlives /new, /branch and /resume.
func (s *Store) SetVoiceMode(ctx context.Context, key, mode string) error {
	return s.set(ctx, key, "voice_mode", mode)
}

// TitleTakenError is SetTitle's refusal of a title another of the key's
// conversations has; errors.Is(err, ErrTitleTaken) holds.
type TitleTakenError struct {
	Title     string // as the other conversation has it
	SessionID string // the other conversation
}

// ErrTitleTaken is what a TitleTakenError is.
var ErrTitleTaken = errors.New("title already in use")

func (e *TitleTakenError) Error() string {
	return fmt.Sprintf("title %q is already in use by session %s", e.Title, e.SessionID)
}

// Is makes errors.Is(err, ErrTitleTaken) hold.
func (e *TitleTakenError) Is(target error) bool { return target == ErrTitleTaken }

// SetTitle names the current conversation. As in Hermes, a title is
// unique: one another conversation of the key has (compared without
// regard to case, as /resume finds titles) is refused with a
// *TitleTakenError. Hermes's titles are unique in its one session
// database; here they are unique among the conversations of one session
// key, the set /sessions lists and /resume searches (in a DM, the user's
// conversations).
func (s *Store) SetTitle(ctx context.Context, key, title string) error {
	_, err := s.setTitle(ctx, key, title, 0)
	return err
}

// SetTitleInLineage names the current conversation title, or, when
// another of the key's conversations has that title, the next free title
// of its lineage, as Hermes names a conversation it titles itself
// (get_next_title_in_lineage): "Plan" taken → "Plan #2"; "Plan" and
// "Plan #3" taken → "Plan #4". The base is cut so the title has at most
// maxRunes characters (0: no limit). It returns the title set.
func (s *Store) SetTitleInLineage(ctx context.Context, key, title string, maxRunes int) (string, error) {
	if maxRunes <= 0 {
		maxRunes = -1
	}
	return s.setTitle(ctx, key, title, maxRunes)
}

// lineageRE is a title's " #N" suffix.
var lineageRE = regexp.MustCompile(`^(.*?) #(\d+)$`)

// setTitle sets the title; lineage 0 refuses a taken one, otherwise it
// takes the next free title of the lineage, at most lineage runes long
// (-1: any length).
func (s *Store) setTitle(ctx context.Context, key, title string, lineage int) (string, error) {
	err := pgx.BeginFunc(ctx, s.db, func(tx pgx.Tx) error {
		// The session's row lock serialises the key's title changes (and
		// Resume), so two conversations cannot take one title at once.
		var id string
		if err := tx.QueryRow(ctx, `SELECT session_id FROM sessions WHERE session_key = $1 FOR UPDATE`, key).Scan(&id); err != nil {
			if errors.Is(err, pgx.ErrNoRows) {
				return ErrNotFound
			}
			return fmt.Errorf("lock session: %w", err)
		}
		var other, otherTitle string
		err := tx.QueryRow(ctx, `SELECT session_id, title FROM session_history
			WHERE session_key = $1 AND session_id <> $2 AND lower(title) = lower($3) LIMIT 1`, key, id, title).Scan(&other, &otherTitle)
		switch {
		case errors.Is(err, pgx.ErrNoRows):
		case err != nil:
			return fmt.Errorf("check title: %w", err)
		case lineage == 0:
			return &TitleTakenError{Title: otherTitle, SessionID: other}
		default:
			if title, err = nextInLineage(ctx, tx, key, id, title, lineage); err != nil {
				return err
			}
		}
		if _, err := tx.Exec(ctx, `UPDATE sessions SET title = $2, updated_at = $3 WHERE session_key = $1`, key, title, s.now()); err != nil {
			return fmt.Errorf("set title: %w", err)
		}
		if _, err := tx.Exec(ctx, `UPDATE session_history SET title = $3 WHERE session_key = $1 AND session_id = $2`, key, id, title); err != nil {
			return fmt.Errorf("set history title: %w", err)
		}
		return nil
	})
	return title, err
}

// nextInLineage is Hermes's get_next_title_in_lineage among the key's
// other conversations (cur excluded): the base (title without its " #N")
// with one more than the highest number its lineage has (a bare base
// counts as 1).
func nextInLineage(ctx context.Context, tx pgx.Tx, key, cur, title string, maxRunes int) (string, error) {
	base := title
	if m := lineageRE.FindStringSubmatch(title); m != nil {
		base = m[1]
	}
	rows, err := tx.Query(ctx, `SELECT title FROM session_history WHERE session_key = $1 AND session_id <> $2
		AND (lower(title) = lower($3) OR lower(left(title, length($3) + 2)) = (lower($3) || ' #'))`, key, cur, base)
	if err != nil {
		return "", fmt.Errorf("read title lineage: %w", err)
	}
	titles, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return "", fmt.Errorf("read title lineage: %w", err)
	}
	highest := 1
	for _, t := range titles {
		if m := lineageRE.FindStringSubmatch(t); m != nil && strings.EqualFold(m[1], base) {
			if n, err := strconv.Atoi(m[2]); err == nil && n > highest {
				highest = n
			}
		}
	}
	suffix := " #" + strconv.Itoa(highest+1)
	if r := []rune(base); maxRunes > 0 && len(r)+len(suffix) > maxRunes {
		base = strings.TrimSpace(string(r[:max(0, maxRunes-len(suffix))]))
	}
	return base + suffix, nil
}

// History lists the key's conversations, newest first.
func (s *Store) History(ctx context.Context, key string, limit int) ([]History, error) {
	return s.history(ctx, `SELECT session_id, title, started_at, ended_at, end_reason FROM session_history
		WHERE session_key = $1 ORDER BY started_at DESC, session_id DESC LIMIT $2`, key, limit)
}

// ChatHistory lists the conversations of the chat whose session key
// without a thread is rootKey: rootKey's and those of every thread of it
// (rootKey:<thread>), as a Slack DM whose top-level messages each start
// a conversation in their thread. A conversation two keys had (one
// resumed in another thread) is listed once, with the title the key it
// was started or resumed under last gives it, and when it began first:
// newest first by that, so that a resume does not renumber the list.
func (s *Store) ChatHistory(ctx context.Context, rootKey string, limit int) ([]History, error) {
	return s.history(ctx, `SELECT session_id, title, began, ended_at, end_reason FROM (
			SELECT DISTINCT ON (session_id) session_id, title, min(started_at) OVER (PARTITION BY session_id) AS began,
				ended_at, end_reason FROM session_history
			WHERE `+inChat+`
			ORDER BY session_id, started_at DESC) h
		ORDER BY began DESC, session_id DESC LIMIT $2`, rootKey, limit)
}

// inChat is the condition on session_history's session_key of the keys
// of $1's chat (ChatHistory): $1, or one that starts with $1 and ":",
// written as a range in byte order (";" follows ":") so that the index
// in that order (migration 00147) finds them without reading the table.
const inChat = `(session_key = $1 OR (session_key COLLATE "C" >= $1 || ':' AND session_key COLLATE "C" < $1 || ';'))`

func (s *Store) history(ctx context.Context, query string, args ...any) ([]History, error) {
	rows, err := s.db.Query(ctx, query, args...)
	if err != nil {
		return nil, fmt.Errorf("list session history: %w", err)
	}
	defer rows.Close()
	var out []History
	for rows.Next() {
		var h History
		var ended *time.Time
		if err := rows.Scan(&h.SessionID, &h.Title, &h.StartedAt, &ended, &h.EndReason); err != nil {
			return nil, fmt.Errorf("scan session history: %w", err)
		}
		if ended != nil {
			h.EndedAt = *ended
		}
		out = append(out, h)
	}
	return out, rows.Err()
}

// Resume switches the key back to an earlier conversation, found by title
// (case-insensitive) or session id. It advances the generation and drops
// waiting messages, as a reset does. With flush set, it queues the
// memory flush of the conversation it switches away from (queueFlush),
// as Hermes's /resume flushes it, in the same transaction.
func (s *Store) Resume(ctx context.Context, key, name string, flush *eventsv1.MessageReceived) (Session, error) {
	return s.resume(ctx, key, "", "", name, flush)
}

// ResumeInChat is Resume looking for the conversation among those of the
// key's chat (ChatHistory of rootKey) rather than the key's own: one
// another thread of the chat had joins the key's history. One that
// another key of the chat is on now is refused with a *HeldError, as
// ResumeOwn's.
func (s *Store) ResumeInChat(ctx context.Context, key, rootKey, name string, flush *eventsv1.MessageReceived) (Session, error) {
	return s.resume(ctx, key, rootKey, rootKey, name, flush)
}

// ResumeOwn is Resume refusing, with a *HeldError, a conversation of the
// key's that another key of its chat (rootKey, or a thread of it) is on
// now: one a Telegram topic took (/topic <session-id>) or another thread
// resumed (ResumeInChat). Turns are locked per session key, so two keys
// on one conversation could run two turns on it at once and interleave
// its transcript.
func (s *Store) ResumeOwn(ctx context.Context, key, rootKey, name string, flush *eventsv1.MessageReceived) (Session, error) {
	return s.resume(ctx, key, "", rootKey, name, flush)
}

// HeldError: the conversation asked for, ID, is the current one of
// another session key, Key, of the chat (ResumeInChat, ResumeOwn).
type HeldError struct{ Key, ID string }

func (e *HeldError) Error() string { return "the conversation is the current one of " + e.Key }

// resume is Resume, among rootKey's chat's conversations when rootKey is
// set (ResumeInChat), refusing one another key of chatKey's chat is on
// when chatKey is set.
func (s *Store) resume(ctx context.Context, key, rootKey, chatKey, name string, flush *eventsv1.MessageReceived) (Session, error) {
	now := s.now()
	var sess Session
	err := pgx.BeginFunc(ctx, s.db, func(tx pgx.Tx) error {
		var cur string
		if err := tx.QueryRow(ctx, `SELECT session_id FROM sessions WHERE session_key = $1 FOR UPDATE`, key).Scan(&cur); err != nil {
			if errors.Is(err, pgx.ErrNoRows) {
				return ErrNotFound
			}
			return fmt.Errorf("lock session: %w", err)
		}
		find, among := `SELECT session_id, title FROM session_history WHERE session_key = $1 AND session_id <> $3
			AND (lower(title) = lower($2) OR session_id = $2) ORDER BY started_at DESC LIMIT 1`, key
		if rootKey != "" {
			find, among = `SELECT session_id, title FROM session_history WHERE `+inChat+` AND session_id <> $3
			AND (lower(title) = lower($2) OR session_id = $2) ORDER BY started_at DESC LIMIT 1`, rootKey
		}
		var id, title string
		err := tx.QueryRow(ctx, find, among, name, cur).Scan(&id, &title)
		if errors.Is(err, pgx.ErrNoRows) {
			return ErrNotFound
		}
		if err != nil {
			return fmt.Errorf("find session to resume: %w", err)
		}
		if chatKey != "" {
			if err := heldElsewhere(ctx, tx, key, chatKey, id); err != nil {
				return err
			}
		}
		if _, err := tx.Exec(ctx, `UPDATE session_history SET ended_at = $3, end_reason = 'switched'
			WHERE session_key = $1 AND session_id = $2 AND ended_at IS NULL`, key, cur, now); err != nil {
			return fmt.Errorf("end session history: %w", err)
		}
		// The key's own conversation is reopened; another thread's joins
		// its history, from now.
		if _, err := tx.Exec(ctx, `INSERT INTO session_history (session_key, session_id, title, started_at) VALUES ($1, $2, $3, $4)
			ON CONFLICT (session_key, session_id) DO UPDATE SET ended_at = NULL, end_reason = ''`, key, id, title, now); err != nil {
			return fmt.Errorf("reopen session history: %w", err)
		}
		if _, err := tx.Exec(ctx, `DELETE FROM session_queue WHERE session_key = $1`, key); err != nil {
			return fmt.Errorf("clear queue: %w", err)
		}
		if flush != nil {
			if err := queueFlush(ctx, tx, key, cur, flush, now); err != nil {
				return err
			}
		}
		sess, err = scanSession(tx.QueryRow(ctx, `UPDATE sessions SET session_id = $2, title = $3, generation = generation + 1,
			model_override = '', resume_pending = true, system_prompt_fingerprint = '', updated_at = $4, last_activity_at = $4
			WHERE session_key = $1 RETURNING `+sessionCols, key, id, title, now))
		if err != nil {
			return fmt.Errorf("resume session: %w", err)
		}
		return nil
	})
	return sess, err
}

// heldElsewhere returns a *HeldError when another key of chatKey's chat
// (chatKey, or a thread of it) than key is on conversation id now. Every
// key that was put on a conversation has its row in session_history,
// which finds them by the chat (migration 00147's index) where sessions
// has no index of its conversations. It first takes the conversation's
// lock, which every switch to an earlier conversation (a resume, a
// topic's bind) takes before it looks: two threads resuming one
// conversation at once are taken in turn, and the second finds the
// first on it.
func heldElsewhere(ctx context.Context, tx pgx.Tx, key, chatKey, id string) error {
	if err := lockConversation(ctx, tx, id); err != nil {
		return err
	}
	var holder string
	err := tx.QueryRow(ctx, `SELECT s.session_key FROM session_history h JOIN sessions s ON s.session_key = h.session_key
		WHERE `+strings.ReplaceAll(inChat, "session_key", "h.session_key")+` AND h.session_id = $2 AND h.session_key <> $3
		AND s.session_id = $2 LIMIT 1`, chatKey, id, key).Scan(&holder)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return nil
	case err != nil:
		return fmt.Errorf("find the conversation's other keys: %w", err)
	}
	return &HeldError{Key: holder, ID: id}
}

// lockConversation takes the lock of conversation id for the rest of tx
// (heldElsewhere).
func lockConversation(ctx context.Context, tx pgx.Tx, id string) error {
	if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock(hashtextextended('session_id:' || $1, 0))`, id); err != nil {
		return fmt.Errorf("lock the conversation: %w", err)
	}
	return nil
}

// List returns sessions ordered by key, optionally of one platform.
// after is the key of the last row of the previous page ("" for the first).
func (s *Store) List(ctx context.Context, platform string, limit int, after string) ([]Session, error) {
	rows, err := s.db.Query(ctx, `SELECT `+sessionCols+` FROM sessions
		WHERE ($1 = '' OR platform = $1) AND ($3 = '' OR session_key > $3)
		ORDER BY session_key LIMIT $2`, platform, limit, after)
	if err != nil {
		return nil, fmt.Errorf("list sessions: %w", err)
	}
	defer rows.Close()
	var out []Session
	for rows.Next() {
		sess, err := scanSession(rows)
		if err != nil {
			return nil, fmt.Errorf("scan session: %w", err)
		}
		out = append(out, sess)
	}
	return out, rows.Err()
}

// SetHome makes src's chat the platform's home channel.
func (s *Store) SetHome(ctx context.Context, src *eventsv1.SessionSource, by string) error {
	_, err := s.db.Exec(ctx, `INSERT INTO home_channels (platform, account, chat_id, thread_id, chat_name, set_by, set_at)
		VALUES ($1, $2, $3, $4, $5, $6, $7)
		ON CONFLICT (platform) DO UPDATE SET account = EXCLUDED.account, chat_id = EXCLUDED.chat_id,
			thread_id = EXCLUDED.thread_id, chat_name = EXCLUDED.chat_name, set_by = EXCLUDED.set_by, set_at = EXCLUDED.set_at`,
		src.GetPlatform(), src.GetAccount(), src.GetChatId(), src.GetThreadId(), src.GetChatName(), by, s.now())
	if err != nil {
		return fmt.Errorf("set home channel: %w", err)
	}
	return nil
}
