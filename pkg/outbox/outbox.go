// Package outbox is the Postgres store of outgoing platform messages: one
// row per message with its delivery state, claimed for sending with
// FOR UPDATE SKIP LOCKED so that any number of delivery replicas share the
// work, and kept after failure as a dead letter an operator can list,
// requeue or purge.
//
// A row moves queued → sending → sent, or to failed (permanent error, too
// many attempts) or expired (older than its TTL). A sending row whose lease
// ran out (its sender died) is due again and is sent with the same
// idempotency key, which the gateway answers with its first receipt.
package outbox

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.opentelemetry.io/otel/propagation"
	"google.golang.org/protobuf/proto"

	deliveryv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/delivery/v1"
	"github.com/switchboard-chat/switchboard/pkg/pg"
)

// State is a row's delivery state.
type State string

const (
	Queued  State = "queued"
	Sending State = "sending"
	Sent    State = "sent"
	Failed  State = "failed"
	Expired State = "expired"
)

// Proto maps a state to the API enum.
func (s State) Proto() deliveryv1.DeliveryState {
	switch s {
	case Queued:
		return deliveryv1.DeliveryState_DELIVERY_STATE_QUEUED
	case Sending:
		return deliveryv1.DeliveryState_DELIVERY_STATE_SENDING
	case Sent:
		return deliveryv1.DeliveryState_DELIVERY_STATE_SENT
	case Failed:
		return deliveryv1.DeliveryState_DELIVERY_STATE_FAILED
	case Expired:
		return deliveryv1.DeliveryState_DELIVERY_STATE_EXPIRED
	}
	return deliveryv1.DeliveryState_DELIVERY_STATE_UNSPECIFIED
}

// StateFromProto maps the API enum to a state ("" for unspecified).
func StateFromProto(s deliveryv1.DeliveryState) State {
	switch s {
	case deliveryv1.DeliveryState_DELIVERY_STATE_QUEUED:
		return Queued
	case deliveryv1.DeliveryState_DELIVERY_STATE_SENDING:
		return Sending
	case deliveryv1.DeliveryState_DELIVERY_STATE_SENT:
		return Sent
	case deliveryv1.DeliveryState_DELIVERY_STATE_FAILED:
		return Failed
	case deliveryv1.DeliveryState_DELIVERY_STATE_EXPIRED:
		return Expired
	}
	return ""
}

// ErrNotFound is returned for an unknown row or channel.
var ErrNotFound = errors.New("outbox: not found")

// ErrLostClaim is returned when a row this sender claimed was taken over
// by another sender (its lease ran out) or changed by an operator.
var ErrLostClaim = errors.New("outbox: claim lost")

// Row is one outgoing message.
type Row struct {
	ID                int64
	Key               string
	State             State
	Platform          string
	Account           string
	ChatID            string
	ThreadID          string
	ChatKey           string
	SessionKey        string
	TurnID            string
	Request           *deliveryv1.SendRequested
	Attempts          int
	LastError         string
	PlatformMessageID string
	NextAttemptAt     time.Time
	ExpiresAt         time.Time
	CreatedAt         time.Time
	UpdatedAt         time.Time
	// TraceParent is the W3C trace context the row was enqueued under;
	// Context restores it for the send.
	TraceParent string
}

// Context returns ctx carrying the trace context the row was enqueued
// under, so the send joins the message's trace.
func (r Row) Context(ctx context.Context) context.Context {
	if r.TraceParent == "" {
		return ctx
	}
	return propagation.TraceContext{}.Extract(ctx, propagation.MapCarrier{"traceparent": r.TraceParent})
}

// traceParent is the W3C traceparent of ctx's span, or "".
func traceParent(ctx context.Context) string {
	c := propagation.MapCarrier{}
	propagation.TraceContext{}.Inject(ctx, c)
	return c["traceparent"]
}

// Proto is the row as the admin API shows it.
func (r Row) Proto() *deliveryv1.Delivery {
	return &deliveryv1.Delivery{
		Id:                strconv.FormatInt(r.ID, 10),
		IdempotencyKey:    r.Key,
		State:             r.State.Proto(),
		Target:            withoutInteraction(r.Request).GetTarget(), // never shown: a credential
		Attempts:          int32(r.Attempts),
		LastError:         r.LastError,
		PlatformMessageId: r.PlatformMessageID,
		CreatedAt:         timestamp(r.CreatedAt),
		UpdatedAt:         timestamp(r.UpdatedAt),
		TurnId:            r.TurnID,
	}
}

// ChatKey is the ordering key of a target: rows with the same key are sent
// one after another in id order.
func ChatKey(t *deliveryv1.Target) string {
	return t.GetPlatform() + ":" + t.GetAccount() + ":" + t.GetChatId()
}

// Store is the outbox in Postgres. Rows are queued with a durable commit
// (the reply event is acked after it); claims and send outcomes commit
// without waiting for the WAL flush (pg.AsyncCommit): if Postgres crashes
// and loses one, the row is claimed and sent again under the same
// idempotency key, which the gateway answers with its first receipt.
type Store struct {
	db *pgxpool.Pool
}

// New returns a Store on a migrated database.
func New(db *pgxpool.Pool) *Store { return &Store{db: db} }

const rowColumns = `id, idempotency_key, state, platform, account, chat_id, thread_id, chat_key,
	session_key, turn_id, payload, attempts, last_error, platform_message_id,
	next_attempt_at, expires_at, created_at, updated_at, traceparent`

func scanRow(row pgx.Row) (Row, error) {
	var r Row
	var payload []byte
	var state string
	err := row.Scan(&r.ID, &r.Key, &state, &r.Platform, &r.Account, &r.ChatID, &r.ThreadID, &r.ChatKey,
		&r.SessionKey, &r.TurnID, &payload, &r.Attempts, &r.LastError, &r.PlatformMessageID,
		&r.NextAttemptAt, &r.ExpiresAt, &r.CreatedAt, &r.UpdatedAt, &r.TraceParent)
	if err != nil {
		return Row{}, err
	}
	r.State = State(state)
	r.Request = &deliveryv1.SendRequested{}
	if err := proto.Unmarshal(payload, r.Request); err != nil {
		return Row{}, fmt.Errorf("decode payload of delivery %d: %w", r.ID, err)
	}
	return r, nil
}

func collect(rows pgx.Rows) ([]Row, error) {
	defer rows.Close()
	var out []Row
	for rows.Next() {
		r, err := scanRow(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	return out, rows.Err()
}

// newRow is how a request's row starts out: queued (the zero value), or
// already tried by owner — sending under a lease, or sent.
type newRow struct {
	state             State
	attempts          int
	owner             string
	lease             time.Duration // sending: the claim's lease
	platformMessageID string        // sent
}

// insertRow is the INSERT of one request's row (arguments from rowArgs);
// the caller adds the conflict and RETURNING clauses.
const insertRow = `
INSERT INTO delivery_outbox (idempotency_key, state, platform, account, chat_id, thread_id, chat_key,
	session_key, turn_id, payload, attempts, platform_message_id, next_attempt_at, expires_at, lease_until,
	claimed_by, created_at, updated_at, sent_at, traceparent)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $13, $13, $17, $18)`

// rowArgs are insertRow's arguments for req, due at now and expiring
// after ttl.
func rowArgs(ctx context.Context, now time.Time, ttl time.Duration, req *deliveryv1.SendRequested, nr newRow) ([]any, error) {
	if req.GetIdempotencyKey() == "" {
		return nil, errors.New("enqueue: empty idempotency key")
	}
	state := nr.state
	if state == "" {
		state = Queued
	}
	stored := req
	if state == Sent {
		stored = withoutInteraction(req) // sent: nothing needs it any more
	}
	payload, err := proto.Marshal(stored)
	if err != nil {
		return nil, fmt.Errorf("encode send request: %w", err)
	}
	var lease, sent *time.Time
	if state == Sending {
		l := now.Add(nr.lease)
		lease = &l
	}
	if state == Sent {
		sent = &now
	}
	t := req.GetTarget()
	return []any{req.GetIdempotencyKey(), string(state), t.GetPlatform(), t.GetAccount(), t.GetChatId(), t.GetThreadId(), ChatKey(t),
		req.GetSessionKey(), req.GetTurnId(), payload, nr.attempts, nr.platformMessageID, now, now.Add(ttl), lease,
		nr.owner, sent, traceParent(ctx)}, nil
}

// Enqueue stores requests as queued rows, due at now and expiring after
// ttl, in the given order (which is their send order within a chat). A
// request whose idempotency key is already stored is left as it is. It
// returns the id of every request's row, new or existing.
func (s *Store) Enqueue(ctx context.Context, now time.Time, ttl time.Duration, reqs ...*deliveryv1.SendRequested) ([]int64, error) {
	b := &pgx.Batch{}
	if err := queueRows(ctx, b, now, ttl, reqs); err != nil {
		return nil, err
	}
	return s.sendRows(ctx, b, reqs)
}

// queueRows adds the inserts of reqs' queued rows to b.
func queueRows(ctx context.Context, b *pgx.Batch, now time.Time, ttl time.Duration, reqs []*deliveryv1.SendRequested) error {
	for _, req := range reqs {
		args, err := rowArgs(ctx, now, ttl, req, newRow{})
		if err != nil {
			return err
		}
		b.Queue(insertRow+`
ON CONFLICT (idempotency_key) DO UPDATE SET idempotency_key = EXCLUDED.idempotency_key
RETURNING id`, args...)
	}
	return nil
}

// sendRows sends b, which starts with queueRows' inserts of reqs, as one
// pipelined batch: one round trip, one implicit transaction, one durable
// commit for all of it. It returns the id of every request's row.
func (s *Store) sendRows(ctx context.Context, b *pgx.Batch, reqs []*deliveryv1.SendRequested) ([]int64, error) {
	br := s.db.SendBatch(ctx, b)
	defer br.Close()
	ids := make([]int64, len(reqs))
	for i, req := range reqs {
		if err := br.QueryRow().Scan(&ids[i]); err != nil {
			return nil, fmt.Errorf("insert delivery %s: %w", req.GetIdempotencyKey(), err)
		}
	}
	if err := br.Close(); err != nil {
		return nil, fmt.Errorf("enqueue deliveries: %w", err)
	}
	return ids, nil
}

// Clear reports whether a request keyed key to chatKey may be sent at
// once, bypassing the queue: no row of the chat is queued or sending
// (which would have to go first) and no row has the key (a redelivered
// event whose row exists follows that row's course). A read: no commit.
func (s *Store) Clear(ctx context.Context, chatKey, key string) (bool, error) {
	var clear bool
	err := s.db.QueryRow(ctx, `SELECT NOT EXISTS (SELECT 1 FROM delivery_outbox WHERE chat_key = $1 AND state IN ('queued', 'sending'))
		AND NOT EXISTS (SELECT 1 FROM delivery_outbox WHERE idempotency_key = $2)`, chatKey, key).Scan(&clear)
	if err != nil {
		return false, fmt.Errorf("check chat: %w", err)
	}
	return clear, nil
}

// EnqueueClaimed stores a request that was tried at once and failed as a
// row already claimed by owner (attempt 1, leased until now+lease), so
// the caller records the attempt's outcome on it like any claimed row.
// Durable. ok is false when a row with the key exists already.
func (s *Store) EnqueueClaimed(ctx context.Context, now time.Time, ttl, lease time.Duration, owner string, req *deliveryv1.SendRequested) (r Row, ok bool, err error) {
	args, err := rowArgs(ctx, now, ttl, req, newRow{state: Sending, attempts: 1, owner: owner, lease: lease})
	if err != nil {
		return Row{}, false, err
	}
	r, err = scanRow(s.db.QueryRow(ctx, insertRow+`
ON CONFLICT (idempotency_key) DO NOTHING
RETURNING `+rowColumns, args...))
	if errors.Is(err, pgx.ErrNoRows) {
		return Row{}, false, nil
	}
	if err != nil {
		return Row{}, false, fmt.Errorf("insert delivery %s: %w", req.GetIdempotencyKey(), err)
	}
	return r, true, nil
}

// RecordSent stores a request that was sent at once as a sent row, for the
// record (admin listing, the gateways' channel directory). The commit does
// not wait for the WAL flush (pg.AsyncCommit): if Postgres loses it, the
// reply event, not yet acked, is handled again and the gateway answers
// the repeated key with its first receipt. A row already stored under the
// key is kept.
func (s *Store) RecordSent(ctx context.Context, now time.Time, ttl time.Duration, req *deliveryv1.SendRequested, owner, platformMessageID string) error {
	args, err := rowArgs(ctx, now, ttl, req, newRow{state: Sent, attempts: 1, owner: owner, platformMessageID: platformMessageID})
	if err != nil {
		return err
	}
	b := &pgx.Batch{}
	b.Queue(pg.AsyncCommit)
	b.Queue(insertRow+`
ON CONFLICT (idempotency_key) DO NOTHING`, args...)
	if err := s.db.SendBatch(ctx, b).Close(); err != nil {
		return fmt.Errorf("record sent delivery %s: %w", req.GetIdempotencyKey(), err)
	}
	return nil
}

// Claim marks up to limit due rows as sending for owner until now+lease
// and returns them. A row is due when it is queued, or sending with an
// expired lease, its next attempt time has come, it has not expired, and
// no older row of the same chat is still waiting. Rows other senders are
// claiming at the same moment are skipped, never waited for.
func (s *Store) Claim(ctx context.Context, now time.Time, lease time.Duration, owner string, limit int) ([]Row, error) {
	rows, _, err := s.claim(ctx, now, lease, owner, limit, false)
	return rows, err
}

// ClaimNext is Claim, and also reads, in the same round trip, when a
// claim may next take over a row being sent: the earliest lease that had
// not run out at now, plus a microsecond, since Claim takes a sending
// row once its lease_until (stored to the microsecond) is before the
// claim's time; zero when no row is being sent under such a lease. A
// row whose lease had run out by now is left out: this claim saw it, and
// a lapsed row a claim that took fewer than limit rows did not take (an
// older row of its chat waits, it expired, another claim held it) is not
// taken by a claim made again at once either, so a send loop that wakes
// for these times never spins. Leases are not renewed: a row whose lease
// ran out is taken over even from a sender that is only slow. The read
// uses the sending rows' lease index (migration 00305).
func (s *Store) ClaimNext(ctx context.Context, now time.Time, lease time.Duration, owner string, limit int) (rows []Row, takeover time.Time, err error) {
	return s.claim(ctx, now, lease, owner, limit, true)
}

// Senders returns the replicas other than owner that are sending rows
// under a lease that has not run out at now (the sending rows' lease
// index, migration 00305).
func (s *Store) Senders(ctx context.Context, now time.Time, owner string) ([]string, error) {
	rows, err := s.db.Query(ctx, `SELECT DISTINCT claimed_by FROM delivery_outbox
	WHERE state = 'sending' AND lease_until >= $1 AND claimed_by <> $2`, now, owner)
	if err != nil {
		return nil, fmt.Errorf("list delivery senders: %w", err)
	}
	senders, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("list delivery senders: %w", err)
	}
	return senders, nil
}

// Release ends the leases of the rows owner is sending, as if they had
// run out before now: owner is gone, and the next claim takes them over
// (sent again under the same idempotency key). It returns how many.
func (s *Store) Release(ctx context.Context, now time.Time, owner string) (int64, error) {
	tag, err := s.db.Exec(ctx, `UPDATE delivery_outbox SET lease_until = $1
	WHERE state = 'sending' AND claimed_by = $2 AND lease_until >= $1`, now.Add(-time.Microsecond), owner)
	if err != nil {
		return 0, fmt.Errorf("release a gone sender's deliveries: %w", err)
	}
	return tag.RowsAffected(), nil
}

// nextTakeoverSQL reads the earliest lease of a row being sent that has
// not run out at $1 (NULL: none), the first entry of the index from $1
// on.
const nextTakeoverSQL = `SELECT (SELECT lease_until FROM delivery_outbox
	WHERE state = 'sending' AND lease_until >= $1 ORDER BY lease_until LIMIT 1)`

// claim is Claim, and ClaimNext when next. The batch is one implicit
// transaction: when the read fails, nothing was claimed.
func (s *Store) claim(ctx context.Context, now time.Time, lease time.Duration, owner string, limit int, next bool) ([]Row, time.Time, error) {
	b := &pgx.Batch{}
	b.Queue(pg.AsyncCommit)
	b.Queue(`
WITH due AS (
	SELECT o.id AS due_id FROM delivery_outbox o
	WHERE o.state IN ('queued', 'sending')
	  AND (o.state = 'queued' OR o.lease_until < $1)
	  AND o.next_attempt_at <= $1
	  AND o.expires_at > $1
	  AND NOT EXISTS (
		SELECT 1 FROM delivery_outbox p
		WHERE p.chat_key = o.chat_key AND p.id < o.id AND p.state IN ('queued', 'sending'))
	ORDER BY o.next_attempt_at, o.id
	LIMIT $2
	FOR UPDATE OF o SKIP LOCKED)
UPDATE delivery_outbox o
SET state = 'sending', attempts = o.attempts + 1, lease_until = $3, claimed_by = $4, updated_at = $1
FROM due WHERE o.id = due.due_id
RETURNING `+rowColumns, now, limit, now.Add(lease), owner)
	if next {
		b.Queue(nextTakeoverSQL, now)
	}
	br := s.db.SendBatch(ctx, b)
	defer br.Close()
	if _, err := br.Exec(); err != nil {
		return nil, time.Time{}, fmt.Errorf("claim deliveries: %w", err)
	}
	rows, err := br.Query()
	if err != nil {
		return nil, time.Time{}, fmt.Errorf("claim deliveries: %w", err)
	}
	out, err := collect(rows)
	if err != nil {
		return nil, time.Time{}, fmt.Errorf("claim deliveries: %w", err)
	}
	var takeover time.Time
	if next {
		var at *time.Time
		if err := br.QueryRow().Scan(&at); err != nil {
			return nil, time.Time{}, fmt.Errorf("next delivery takeover: %w", err)
		}
		if at != nil {
			takeover = at.Add(time.Microsecond)
		}
	}
	if err := br.Close(); err != nil {
		return nil, time.Time{}, fmt.Errorf("claim deliveries: %w", err)
	}
	return out, takeover, nil
}

// update changes a row that owner still holds.
func (s *Store) update(ctx context.Context, op string, id int64, owner, set string, args ...any) error {
	args = append([]any{id, owner}, args...)
	b := &pgx.Batch{}
	b.Queue(pg.AsyncCommit)
	b.Queue(`UPDATE delivery_outbox SET `+set+`
WHERE id = $1 AND state = 'sending' AND claimed_by = $2`, args...)
	br := s.db.SendBatch(ctx, b)
	_, err := br.Exec()
	var tag pgconn.CommandTag
	if err == nil {
		tag, err = br.Exec()
	}
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("%s delivery %d: %w", op, id, err)
	}
	if tag.RowsAffected() == 0 {
		return fmt.Errorf("%s delivery %d: %w", op, id, ErrLostClaim)
	}
	return nil
}

// withoutInteraction is req without its interaction (Target.interaction:
// a short-lived credential for answering a native command privately),
// or req itself when it has none.
func withoutInteraction(req *deliveryv1.SendRequested) *deliveryv1.SendRequested {
	if req.GetTarget().GetInteraction() == nil {
		return req
	}
	c := proto.Clone(req).(*deliveryv1.SendRequested)
	c.Target.Interaction = nil
	return c
}

// ForgetInteraction drops the interaction of row id's request req (the
// row's Request), once the row no longer needs it: sent or
// dead-lettered. A row is kept for days (delivery.sent_retention); the
// token is good for minutes and answers only one retry, so it stays in
// a row only while the row may still be sent. A request without one is
// left as it is, without a round trip.
func (s *Store) ForgetInteraction(ctx context.Context, id int64, req *deliveryv1.SendRequested) error {
	if req.GetTarget().GetInteraction() == nil {
		return nil
	}
	payload, err := proto.Marshal(withoutInteraction(req))
	if err != nil {
		return fmt.Errorf("encode send request: %w", err)
	}
	if _, err := s.db.Exec(ctx, `
UPDATE delivery_outbox SET payload = $2 WHERE id = $1 AND state IN ('sent', 'failed', 'expired')`, id, payload); err != nil {
		return fmt.Errorf("forget interaction of delivery %d: %w", id, err)
	}
	return nil
}

// MarkSent records a successful send and the platform's message id.
func (s *Store) MarkSent(ctx context.Context, id int64, owner, platformMessageID string, now time.Time) error {
	return s.update(ctx, "mark sent", id, owner,
		`state = 'sent', platform_message_id = $3, sent_at = $4, updated_at = $4, lease_until = NULL, last_error = ''`,
		platformMessageID, now)
}

// Retry puts a claimed row back in the queue, due at next, with the error
// that made it fail. A non-nil req replaces the stored request (the plain
// text fallback).
func (s *Store) Retry(ctx context.Context, id int64, owner string, next time.Time, lastErr string, req *deliveryv1.SendRequested, now time.Time) error {
	if req == nil {
		return s.update(ctx, "retry", id, owner,
			`state = 'queued', next_attempt_at = $3, last_error = $4, updated_at = $5, lease_until = NULL`,
			next, lastErr, now)
	}
	payload, err := proto.Marshal(req)
	if err != nil {
		return fmt.Errorf("encode send request: %w", err)
	}
	return s.update(ctx, "retry", id, owner,
		`state = 'queued', next_attempt_at = $3, last_error = $4, updated_at = $5, lease_until = NULL, payload = $6`,
		next, lastErr, now, payload)
}

// Defer puts a claimed row back without counting the attempt: it was not
// tried (the shared rate limit said wait).
func (s *Store) Defer(ctx context.Context, id int64, owner string, next, now time.Time) error {
	return s.update(ctx, "defer", id, owner,
		`state = 'queued', next_attempt_at = $3, attempts = greatest(attempts - 1, 0), updated_at = $4, lease_until = NULL`,
		next, now)
}

// Fail dead-letters a claimed row.
func (s *Store) Fail(ctx context.Context, id int64, owner, lastErr string, now time.Time) error {
	return s.update(ctx, "fail", id, owner,
		`state = 'failed', last_error = $3, updated_at = $4, lease_until = NULL`, lastErr, now)
}

// Replace puts a claimed row that is being given up back in the queue as
// req, due at once, with its own expiry (now+ttl) and attempts from
// zero: req takes the row's place in its chat's order (its id), so
// nothing queued behind the row goes before it. The row keeps its
// idempotency key (a request enqueued again under it is still taken
// once); req's own key is what the gateway sees. lastErr records why the
// row's request was given up.
func (s *Store) Replace(ctx context.Context, id int64, owner string, req *deliveryv1.SendRequested, lastErr string, now time.Time, ttl time.Duration) error {
	payload, err := proto.Marshal(req)
	if err != nil {
		return fmt.Errorf("encode send request: %w", err)
	}
	return s.update(ctx, "replace", id, owner,
		`state = 'queued', payload = $3, last_error = $4, attempts = 0, next_attempt_at = $5, expires_at = $6,
	updated_at = $5, lease_until = NULL`, payload, lastErr, now, now.Add(ttl))
}

// ReplaceWithLater is Replace of row id, which owner holds, and, in the
// same transaction, of the rows keyed later that still wait in its chat
// (behind it): each is offered to later, and when it returns requests
// the first takes the row's place (its place in the chat's order) and
// the others are queued after every row of the chat. When the row is
// no longer owner's, nothing changes (ErrLostClaim).
func (s *Store) ReplaceWithLater(ctx context.Context, id int64, owner string, req *deliveryv1.SendRequested, lastErr string, now time.Time, ttl time.Duration,
	keys []string, later func(Row) []*deliveryv1.SendRequested) error {
	payload, err := proto.Marshal(req)
	if err != nil {
		return fmt.Errorf("encode send request: %w", err)
	}
	tx, err := s.db.Begin(ctx)
	if err != nil {
		return fmt.Errorf("replace delivery %d: %w", id, err)
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	var chatKey string
	err = tx.QueryRow(ctx, `UPDATE delivery_outbox SET state = 'queued', payload = $3, last_error = $4, attempts = 0,
	next_attempt_at = $5, expires_at = $6, updated_at = $5, lease_until = NULL
WHERE id = $1 AND state = 'sending' AND claimed_by = $2 RETURNING chat_key`, id, owner, payload, lastErr, now, now.Add(ttl)).Scan(&chatKey)
	if errors.Is(err, pgx.ErrNoRows) {
		return fmt.Errorf("replace delivery %d: %w", id, ErrLostClaim)
	}
	if err != nil {
		return fmt.Errorf("replace delivery %d: %w", id, err)
	}
	rows, err := tx.Query(ctx, `SELECT `+rowColumns+` FROM delivery_outbox
WHERE idempotency_key = ANY($1) AND chat_key = $2 AND state = 'queued' AND id > $3 ORDER BY id FOR UPDATE`, keys, chatKey, id)
	if err != nil {
		return fmt.Errorf("read the rows after delivery %d: %w", id, err)
	}
	waiting, err := collect(rows)
	if err != nil {
		return fmt.Errorf("read the rows after delivery %d: %w", id, err)
	}
	var after []*deliveryv1.SendRequested
	for _, r := range waiting {
		reqs := later(r)
		if len(reqs) == 0 {
			continue
		}
		p, err := proto.Marshal(reqs[0])
		if err != nil {
			return fmt.Errorf("encode send request: %w", err)
		}
		if _, err := tx.Exec(ctx, `UPDATE delivery_outbox SET payload = $2, updated_at = $3 WHERE id = $1`, r.ID, p, now); err != nil {
			return fmt.Errorf("replace delivery %d: %w", r.ID, err)
		}
		after = append(after, reqs[1:]...)
	}
	for _, req := range after {
		args, err := rowArgs(ctx, now, ttl, req, newRow{})
		if err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, insertRow+` ON CONFLICT (idempotency_key) DO NOTHING`, args...); err != nil {
			return fmt.Errorf("insert delivery %s: %w", req.GetIdempotencyKey(), err)
		}
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("replace delivery %d: %w", id, err)
	}
	return nil
}

// Querier runs a query (a transaction of the outbox's).
type Querier interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// Expiry is what one expiry pass did.
type Expiry struct {
	// Expired are the rows dead-lettered as expired.
	Expired []Row
	// Replaced are the rows whose request replace took the place of, as
	// they were before.
	Replaced []Row
	// Next is when the earliest row still waiting can expire (its
	// expiry, or its lease's end when later); zero when nothing waits.
	Next time.Time
}

// Expire dead-letters every row still waiting after its expiry time (a
// sending row once its lease ran out), except those replace takes over:
// replace (nil: none) is offered each such row, and the request it
// returns takes the row's place as Replace has it (queued at once, its
// own expiry now+ttl, attempts from zero, its place in the chat's
// order); nil expires the row. One transaction holds the rows (others
// claiming or expiring at the same moment skip them) and decides for
// all of them: when it fails (an error of replace's, a statement the
// database refused, a connection lost), nothing changed and every row
// is still due, for the next pass of any replica; no row is expired
// without replace having been asked, in the transaction that expires
// it. Until the commit the rows are still waiting, so no row of their
// chats behind them is claimed in between. replace may read the outbox
// through q; an error it returns aborts the pass. Next is read in the
// same transaction.
func (s *Store) Expire(ctx context.Context, now time.Time, ttl time.Duration,
	replace func(ctx context.Context, q Querier, r Row) (*deliveryv1.SendRequested, string, error)) (Expiry, error) {
	var out Expiry
	tx, err := s.db.Begin(ctx)
	if err != nil {
		return Expiry{}, fmt.Errorf("expire deliveries: %w", err)
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	rows, err := tx.Query(ctx, `
SELECT `+rowColumns+` FROM delivery_outbox
WHERE state IN ('queued', 'sending') AND expires_at <= $1
  AND (state = 'queued' OR lease_until < $1)
ORDER BY id
FOR UPDATE SKIP LOCKED`, now)
	if err != nil {
		return Expiry{}, fmt.Errorf("expire deliveries: %w", err)
	}
	due, err := collect(rows)
	if err != nil {
		return Expiry{}, fmt.Errorf("expire deliveries: %w", err)
	}
	var expire []int64
	for _, r := range due {
		var req *deliveryv1.SendRequested
		var lastErr string
		if replace != nil {
			if req, lastErr, err = replace(ctx, tx, r); err != nil {
				return Expiry{}, fmt.Errorf("expire delivery %d: %w", r.ID, err)
			}
		}
		if req == nil {
			expire = append(expire, r.ID)
			continue
		}
		payload, err := proto.Marshal(req)
		if err != nil {
			return Expiry{}, fmt.Errorf("encode send request: %w", err)
		}
		if _, err := tx.Exec(ctx, `
UPDATE delivery_outbox SET state = 'queued', payload = $2, last_error = $3, attempts = 0, next_attempt_at = $4,
	expires_at = $5, updated_at = $4, lease_until = NULL, claimed_by = ''
WHERE id = $1`, r.ID, payload, lastErr, now, now.Add(ttl)); err != nil {
			return Expiry{}, fmt.Errorf("replace delivery %d: %w", r.ID, err)
		}
		out.Replaced = append(out.Replaced, r)
	}
	if len(expire) > 0 {
		rows, err := tx.Query(ctx, `
UPDATE delivery_outbox
SET state = 'expired', updated_at = $1, lease_until = NULL,
	last_error = CASE WHEN last_error = '' THEN 'expired before it could be sent' ELSE 'expired: ' || last_error END
WHERE id = ANY($2)
RETURNING `+rowColumns, now, expire)
		if err != nil {
			return Expiry{}, fmt.Errorf("expire deliveries: %w", err)
		}
		if out.Expired, err = collect(rows); err != nil {
			return Expiry{}, fmt.Errorf("expire deliveries: %w", err)
		}
		for _, r := range out.Expired {
			if r.Request.GetTarget().GetInteraction() == nil {
				continue
			}
			// Expired: nothing sends it any more (ForgetInteraction).
			payload, err := proto.Marshal(withoutInteraction(r.Request))
			if err != nil {
				return Expiry{}, fmt.Errorf("encode send request: %w", err)
			}
			if _, err := tx.Exec(ctx, `UPDATE delivery_outbox SET payload = $2 WHERE id = $1`, r.ID, payload); err != nil {
				return Expiry{}, fmt.Errorf("forget interaction of delivery %d: %w", r.ID, err)
			}
		}
	}
	var next *time.Time
	if err := tx.QueryRow(ctx, `
SELECT min(CASE WHEN state = 'sending' AND lease_until > expires_at THEN lease_until ELSE expires_at END)
FROM delivery_outbox WHERE state IN ('queued', 'sending')`).Scan(&next); err != nil {
		return Expiry{}, fmt.Errorf("next expiry: %w", err)
	}
	if next != nil {
		out.Next = *next
	}
	if err := tx.Commit(ctx); err != nil {
		return Expiry{}, fmt.Errorf("expire deliveries: %w", err)
	}
	return out, nil
}

// Get returns one row.
func (s *Store) Get(ctx context.Context, id int64) (Row, error) {
	r, err := scanRow(s.db.QueryRow(ctx, `SELECT `+rowColumns+` FROM delivery_outbox WHERE id = $1`, id))
	if errors.Is(err, pgx.ErrNoRows) {
		return Row{}, fmt.Errorf("delivery %d: %w", id, ErrNotFound)
	}
	if err != nil {
		return Row{}, fmt.Errorf("get delivery %d: %w", id, err)
	}
	return r, nil
}

// GetByKey returns the row with an idempotency key.
func (s *Store) GetByKey(ctx context.Context, key string) (Row, error) {
	r, err := scanRow(s.db.QueryRow(ctx, `SELECT `+rowColumns+` FROM delivery_outbox WHERE idempotency_key = $1`, key))
	if errors.Is(err, pgx.ErrNoRows) {
		return Row{}, fmt.Errorf("delivery %s: %w", key, ErrNotFound)
	}
	if err != nil {
		return Row{}, fmt.Errorf("get delivery %s: %w", key, err)
	}
	return r, nil
}

// DeadStates are the states of dead letters.
var DeadStates = []State{Failed, Expired}

// List returns rows in the given states (dead letters when none), newest
// first, at most limit (default 100).
func (s *Store) List(ctx context.Context, states []State, limit int) ([]Row, error) {
	if len(states) == 0 {
		states = DeadStates
	}
	if limit <= 0 || limit > 10000 {
		limit = 100
	}
	names := make([]string, len(states))
	for i, st := range states {
		names[i] = string(st)
	}
	rows, err := s.db.Query(ctx, `SELECT `+rowColumns+` FROM delivery_outbox
WHERE state = ANY($1) ORDER BY updated_at DESC, id DESC LIMIT $2`, names, limit)
	if err != nil {
		return nil, fmt.Errorf("list deliveries: %w", err)
	}
	out, err := collect(rows)
	if err != nil {
		return nil, fmt.Errorf("list deliveries: %w", err)
	}
	return out, nil
}

// Requeue puts dead letters (the given ids, or all of them) back in the
// queue: due now, attempts reset, a fresh TTL. It keeps the idempotency
// key, so a message the platform did get is not posted again while the
// gateways still hold its receipt (a day by default); a dead letter
// requeued later than that, after a timeout that may have delivered it,
// can be posted twice.
func (s *Store) Requeue(ctx context.Context, ids []int64, all bool, now time.Time, ttl time.Duration) (int, error) {
	if len(ids) == 0 && !all {
		return 0, nil
	}
	tag, err := s.db.Exec(ctx, `
UPDATE delivery_outbox
SET state = 'queued', attempts = 0, next_attempt_at = $1, expires_at = $2, updated_at = $1, claimed_by = ''
WHERE state IN ('failed', 'expired') AND ($3 OR id = ANY($4))`, now, now.Add(ttl), all, ids)
	if err != nil {
		return 0, fmt.Errorf("requeue deliveries: %w", err)
	}
	return int(tag.RowsAffected()), nil
}

// Purge deletes dead letters (the given ids, or all of them).
func (s *Store) Purge(ctx context.Context, ids []int64, all bool) (int, error) {
	if len(ids) == 0 && !all {
		return 0, nil
	}
	tag, err := s.db.Exec(ctx, `DELETE FROM delivery_outbox
WHERE state IN ('failed', 'expired') AND ($1 OR id = ANY($2))`, all, ids)
	if err != nil {
		return 0, fmt.Errorf("purge deliveries: %w", err)
	}
	return int(tag.RowsAffected()), nil
}

// Counts returns how many rows wait to be sent (queued, sending) and how
// many are dead letters (failed, expired), by state. Sent rows are not
// counted. Each count reads its partial index.
func (s *Store) Counts(ctx context.Context) (map[State]int64, error) {
	rows, err := s.db.Query(ctx, `
SELECT state, count(*) FROM delivery_outbox WHERE state IN ('queued', 'sending') GROUP BY state
UNION ALL
SELECT state, count(*) FROM delivery_outbox WHERE state IN ('failed', 'expired') GROUP BY state`)
	if err != nil {
		return nil, fmt.Errorf("count deliveries: %w", err)
	}
	out := map[State]int64{Queued: 0, Sending: 0, Failed: 0, Expired: 0}
	var (
		st State
		n  int64
	)
	_, err = pgx.ForEachRow(rows, []any{&st, &n}, func() error {
		out[st] = n
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("count deliveries: %w", err)
	}
	return out, nil
}

// Prune deletes up to limit sent rows last updated before sentBefore and
// up to limit dead letters last updated before deadBefore (a zero time
// deletes none of that kind), and reports how many it deleted.
func (s *Store) Prune(ctx context.Context, sentBefore, deadBefore time.Time, limit int) (int, error) {
	// The conditions stand on the DELETE too: a row an admin requeued
	// after the subqueries read it is checked again, and kept.
	tag, err := s.db.Exec(ctx, `
DELETE FROM delivery_outbox WHERE id IN (
	(SELECT id FROM delivery_outbox WHERE state = 'sent' AND updated_at < $1 LIMIT $3)
	UNION ALL
	(SELECT id FROM delivery_outbox WHERE state IN ('failed', 'expired') AND updated_at < $2 LIMIT $3))
AND ((state = 'sent' AND updated_at < $1) OR (state IN ('failed', 'expired') AND updated_at < $2))`,
		sentBefore, deadBefore, limit)
	if err != nil {
		return 0, fmt.Errorf("prune deliveries: %w", err)
	}
	return int(tag.RowsAffected()), nil
}

// SaveStreamMessage remembers a platform message a streamed reply
// created: message index (unique in the turn) of the segment opened by
// the reply event of seq segment (0: the first; OpenStreamSegment).
func (s *Store) SaveStreamMessage(ctx context.Context, turnID string, segment int64, index int, platformMessageID string) error {
	_, err := s.db.Exec(ctx, `INSERT INTO delivery_stream_messages (turn_id, message_index, platform_message_id, segment)
VALUES ($1, $2, $3, $4) ON CONFLICT (turn_id, message_index) DO UPDATE SET platform_message_id = EXCLUDED.platform_message_id, segment = EXCLUDED.segment`,
		turnID, index, platformMessageID, segment)
	if err != nil {
		return fmt.Errorf("save stream message of turn %s: %w", turnID, err)
	}
	return nil
}

// OpenStreamSegment records that the streamed reply's text after the
// reply event of seq segment (a later model call's, after a tool call)
// goes into new messages: the messages before it keep what they show.
// Idempotent: a redelivered event, or another replica taking the same
// event, opens the same segment. The mark has a table of its own
// (delivery_stream_segments): replicas from before segments read every
// row of delivery_stream_messages as a message to write over.
func (s *Store) OpenStreamSegment(ctx context.Context, turnID string, segment int64) error {
	_, err := s.db.Exec(ctx, openSegment, turnID, segment)
	if err != nil {
		return fmt.Errorf("open stream segment %d of turn %s: %w", segment, turnID, err)
	}
	return nil
}

// CloseStreamSegment is OpenStreamSegment and Enqueue of the rows that
// leave the segment before it showing its text (its closing edits), in
// one transaction: a replica that stops in between cannot record the
// new segment without them, which would leave the closed messages
// showing their cursor for good (a replica that takes the turn over
// closes only a segment it finds not yet opened). Idempotent, as both
// are: rows already stored under their keys are kept.
func (s *Store) CloseStreamSegment(ctx context.Context, now time.Time, ttl time.Duration, turnID string, segment int64, closing ...*deliveryv1.SendRequested) error {
	b := &pgx.Batch{}
	if err := queueRows(ctx, b, now, ttl, closing); err != nil {
		return err
	}
	b.Queue(openSegment, turnID, segment)
	if _, err := s.sendRows(ctx, b, closing); err != nil {
		return fmt.Errorf("close stream segment before %d of turn %s: %w", segment, turnID, err)
	}
	return nil
}

// MarkStreamTools records that a message of a turn's tool calls (a
// progress message, an approval prompt) goes below the first messages
// messages of the turn's stream segment opened by seq segment (table
// delivery_stream_tools): a replica that takes the turn over reads it
// (LastStreamSegmentBelow) to put the answer below that message rather
// than on in the segment's messages above it. Idempotent.
func (s *Store) MarkStreamTools(ctx context.Context, turnID string, segment int64, messages int) error {
	_, err := s.db.Exec(ctx, `INSERT INTO delivery_stream_tools (turn_id, segment, messages)
VALUES ($1, $2, $3) ON CONFLICT DO NOTHING`, turnID, segment, messages)
	if err != nil {
		return fmt.Errorf("mark tools below stream segment %d of turn %s: %w", segment, turnID, err)
	}
	return nil
}

// LastStreamSegmentBelow is LastStreamSegment and whether a message of
// the turn's tool calls was marked below all of that segment's messages
// (MarkStreamTools), in one round trip.
func (s *Store) LastStreamSegmentBelow(ctx context.Context, turnID string) (StreamSegment, bool, error) {
	seg, below, err := s.lastSegmentAnd(ctx, turnID, "tools below the stream of turn "+turnID, toolsBelow, turnID)
	return seg, below && len(seg.IDs) > 0, err
}

// lastSegmentAnd is LastStreamSegment and the boolean query (what names
// it in an error), in one round trip.
func (s *Store) lastSegmentAnd(ctx context.Context, turnID, what, query string, args ...any) (StreamSegment, bool, error) {
	b := &pgx.Batch{}
	b.Queue(lastSegment, turnID)
	b.Queue(query, args...)
	br := s.db.SendBatch(ctx, b)
	defer br.Close()
	rows, err := br.Query()
	if err != nil {
		return StreamSegment{}, false, fmt.Errorf("stream messages of turn %s: %w", turnID, err)
	}
	seg, err := scanSegment(rows, turnID)
	if err != nil {
		return StreamSegment{}, false, err
	}
	var ok bool
	if err := br.QueryRow().Scan(&ok); err != nil {
		return StreamSegment{}, false, fmt.Errorf("%s: %w", what, err)
	}
	return seg, ok, nil
}

// toolsBelow selects whether a tools' message was marked below every
// message of the turn's last stream segment: a mark of that segment
// counting at least its messages (one counting fewer is above the later
// ones).
const toolsBelow = `SELECT EXISTS (SELECT 1 FROM delivery_stream_tools t
WHERE t.turn_id = $1
AND t.segment = (SELECT max(segment) FROM (
    SELECT segment FROM delivery_stream_messages WHERE turn_id = $1
    UNION ALL SELECT segment FROM delivery_stream_segments WHERE turn_id = $1) AS recorded)
AND t.messages >= (SELECT count(*) FROM delivery_stream_messages m
    WHERE m.turn_id = $1 AND m.segment = t.segment AND m.platform_message_id <> ''))`

// openSegment marks a stream segment opened (OpenStreamSegment).
const openSegment = `INSERT INTO delivery_stream_segments (turn_id, segment)
VALUES ($1, $2) ON CONFLICT (turn_id, segment) DO NOTHING`

// StreamSegment is what was recorded of a streamed reply's last segment.
type StreamSegment struct {
	// Recorded: a replica streamed the turn (a message or a segment was
	// recorded).
	Recorded bool
	// Segment is the seq of the reply event that opened the last
	// segment, 0 for the first.
	Segment int64
	// IDs are the last segment's platform messages, in order.
	IDs []string
}

// LastStreamSegment returns the last segment of a streamed reply: the
// messages a final writes over (the earlier segments' stay as they are).
func (s *Store) LastStreamSegment(ctx context.Context, turnID string) (StreamSegment, error) {
	rows, err := s.db.Query(ctx, lastSegment, turnID)
	if err != nil {
		return StreamSegment{}, fmt.Errorf("stream messages of turn %s: %w", turnID, err)
	}
	return scanSegment(rows, turnID)
}

// LastStreamSegmentAndKey is LastStreamSegment and whether a row with
// idempotency key key is stored, in one round trip: a final asks both
// (whether an older replica queued it under its former keys).
func (s *Store) LastStreamSegmentAndKey(ctx context.Context, turnID, key string) (StreamSegment, bool, error) {
	return s.lastSegmentAnd(ctx, turnID, "look up delivery "+key,
		`SELECT EXISTS (SELECT 1 FROM delivery_outbox WHERE idempotency_key = $1)`, key)
}

// lastSegment selects the platform messages of a turn's last stream
// segment, in order (one row with none of a segment without messages).
const lastSegment = `WITH last AS (
  SELECT max(segment) AS segment FROM (
    SELECT segment FROM delivery_stream_messages WHERE turn_id = $1
    UNION ALL SELECT segment FROM delivery_stream_segments WHERE turn_id = $1) AS recorded)
SELECT last.segment, coalesce(m.platform_message_id, '') FROM last
LEFT JOIN delivery_stream_messages m ON m.turn_id = $1 AND m.segment = last.segment
WHERE last.segment IS NOT NULL
ORDER BY m.message_index`

// scanSegment reads lastSegment's rows.
func scanSegment(rows pgx.Rows, turnID string) (StreamSegment, error) {
	var seg StreamSegment
	var id string
	_, err := pgx.ForEachRow(rows, []any{&seg.Segment, &id}, func() error {
		seg.Recorded = true
		if id != "" { // a segment opened before its first message has none
			seg.IDs = append(seg.IDs, id)
		}
		return nil
	})
	if err != nil {
		return StreamSegment{}, fmt.Errorf("stream messages of turn %s: %w", turnID, err)
	}
	return seg, nil
}

// PruneStreamMessages forgets stream messages, segments and tools marks
// recorded before cutoff.
func (s *Store) PruneStreamMessages(ctx context.Context, cutoff time.Time) error {
	if _, err := s.db.Exec(ctx, `DELETE FROM delivery_stream_messages WHERE created_at < $1`, cutoff); err != nil {
		return fmt.Errorf("prune stream messages: %w", err)
	}
	if _, err := s.db.Exec(ctx, `DELETE FROM delivery_stream_segments WHERE created_at < $1`, cutoff); err != nil {
		return fmt.Errorf("prune stream segments: %w", err)
	}
	if _, err := s.db.Exec(ctx, `DELETE FROM delivery_stream_tools WHERE created_at < $1`, cutoff); err != nil {
		return fmt.Errorf("prune stream tools marks: %w", err)
	}
	return nil
}
