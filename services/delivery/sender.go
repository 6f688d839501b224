package delivery

import (
	"container/heap"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/protobuf/proto"

	"github.com/switchboard-chat/switchboard/pkg/bus"
	"github.com/switchboard-chat/switchboard/pkg/cron"
	deliveryv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/delivery/v1"
	"github.com/switchboard-chat/switchboard/pkg/outbox"
	"github.com/switchboard-chat/switchboard/pkg/panics"
	"github.com/switchboard-chat/switchboard/pkg/telemetry"
	"github.com/switchboard-chat/switchboard/services/delivery/internal/ratelimit"
)

const tracerName = "github.com/switchboard-chat/switchboard/services/delivery"

// directSendTimeout bounds a send made straight from the reply consumer.
const directSendTimeout = 2 * time.Second

// sendLoop sends due outbox rows until ctx ends: woken by new rows and
// finished sends, when the earliest row this replica put back in the
// queue comes due (a retry, a deferral: dueClock), when the lease of a
// row being sent that its last round saw runs out (a sender that died:
// takeover), or the next expiry pass is due (expiryClock), and
// otherwise after PollInterval, for rows no clock of this replica knows
// (another replica's retries, rows claimed since its last round). It
// also expires rows older than their TTL, when one can be: not a query
// while nothing does. Sends in flight when ctx ends finish (within
// SendTimeout) before it returns.
func (s *Service) sendLoop(ctx context.Context) error {
	slots := make(chan struct{}, s.cfg.Senders)
	var wg sync.WaitGroup
	defer wg.Wait()
	// Sends outlive ctx by up to SendTimeout so their outcome is recorded.
	sctx := context.WithoutCancel(ctx)
	// The first round runs at once: a replica that starts sends what
	// waits.
	t := time.NewTimer(0)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-s.kickCh:
		case <-t.C:
		}
		round := s.now()
		if s.expiry.due(round) {
			s.expire(ctx, round)
		}
		// takeover is when a row being sent may be taken over, as the
		// round's last claim read it when it took every row it could
		// (zero: none; or the claim failed or no sender was free, and the
		// poll or a finished send wakes the loop).
		var takeover time.Time
		for ctx.Err() == nil {
			free := s.cfg.Senders - len(slots)
			if free <= 0 {
				break
			}
			rows, next, err := s.store.ClaimNext(ctx, s.now(), s.cfg.Lease, s.owner, free)
			if err != nil {
				if ctx.Err() == nil {
					s.log.Warn("claim deliveries failed", "err", err)
				}
				break
			}
			for _, r := range rows {
				slots <- struct{}{}
				wg.Add(1)
				go func() {
					defer wg.Done()
					defer func() { <-slots; s.kick() }()
					s.sendRecovered(sctx, ctx, r)
				}()
			}
			if len(rows) < free {
				takeover = next
				break
			}
		}
		// Reset on a timer that has not fired drops it (Go 1.23 timers).
		t.Reset(s.nextWake(round, takeover))
	}
}

// nextWake is how long the send loop may sleep after a round that began
// at round: until the earliest row this replica queued again comes due,
// a row being sent may be taken over (takeover: its lease ran out; zero:
// none) or the next expiry pass, and PollInterval at most. The round
// claimed what came due before it began, so those times are forgotten (a
// row that waited for a free sender is claimed when a send finishes). A
// row that came due while the round ran (a slow claim, a busy machine)
// was not claimed by it: the loop wakes at once, and the next round,
// which begins after that time, claims the row and forgets the time; so
// with a lease that ran out during the round, which the next round does
// not ask for again. An expiry pass already due (one that failed) is
// left to the poll: never a busy loop.
func (s *Service) nextWake(round, takeover time.Time) time.Duration {
	d := s.cfg.PollInterval
	now := s.now()
	if at := s.due.next(round); !at.IsZero() {
		d = min(d, max(at.Sub(now), 0))
	}
	if !takeover.IsZero() {
		d = min(d, max(takeover.Sub(now), 0))
	}
	if at := s.expiry.at(); at.After(now) {
		d = min(d, at.Sub(now))
	}
	return d
}

// maxDue bounds how many due times dueClock holds: beyond them (a long
// outage, thousands of rows retrying) a retry waits for the poll.
const maxDue = 4096

// dueClock holds when the rows this replica put back in the queue (a
// retry after a failed send, a deferral for a rate limit) come due, so
// the send loop wakes then rather than at its next poll.
type dueClock struct {
	mu sync.Mutex
	h  timeHeap
}

// note records that a row comes due at t.
func (c *dueClock) note(t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.h) < maxDue {
		heap.Push(&c.h, t)
	}
}

// next forgets the times up to round and returns the earliest later one
// (zero: none).
func (c *dueClock) next(round time.Time) time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	for len(c.h) > 0 && !c.h[0].After(round) {
		heap.Pop(&c.h)
	}
	if len(c.h) == 0 {
		return time.Time{}
	}
	return c.h[0]
}

// timeHeap is a min-heap of times (container/heap).
type timeHeap []time.Time

func (h timeHeap) Len() int           { return len(h) }
func (h timeHeap) Less(i, j int) bool { return h[i].Before(h[j]) }
func (h timeHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *timeHeap) Push(x any)        { *h = append(*h, x.(time.Time)) }
func (h *timeHeap) Pop() any {
	old := *h
	t := old[len(old)-1]
	*h = old[:len(old)-1]
	return t
}

// sendRecovered is send, with a panic recovered (logged with its stack and
// the row, counted in switchboard_panics_total{component="delivery_sender"}):
// the row is scheduled again like a failed attempt, and dead-lettered
// once its attempts are used up, so a row that makes the sender panic
// is neither lost nor the end of the process.
func (s *Service) sendRecovered(ctx, life context.Context, r outbox.Row) {
	err := panics.Recover(s.log, "delivery_sender", func() error {
		if h := sendHook.Load(); h != nil {
			(*h)(r)
		}
		s.send(ctx, life, r)
		return nil
	}, "delivery_id", r.ID, "key", r.Key, "platform", r.Platform, "attempt", r.Attempts)
	if err == nil {
		return
	}
	log := rowLog(ctx, s.log, r)
	s.retry(ctx, log, r, "panic", err.Error(), s.backoff(r.Attempts), nil)
}

// rowLog is log for the send of row r: its delivery id, key, platform,
// attempt, and chat (and thread), whose ids the log handler also takes out
// of a gateway's error text (a URL with the channel in its path, a phone
// number in Twilio's answer) as it pseudonymizes them.
func rowLog(ctx context.Context, log *slog.Logger, r outbox.Row) *slog.Logger {
	log = telemetry.WithTrace(ctx, log).With("delivery_id", r.ID, "key", r.Key, "platform", r.Platform, "attempt", r.Attempts,
		"chat_id", r.ChatID)
	if r.ThreadID != "" {
		log = log.With("thread_id", r.ThreadID)
	}
	return log
}

// sendHook, when set (tests only), runs before each outbox send.
var sendHook atomic.Pointer[func(outbox.Row)]

// expire runs an expiry pass (outbox.Store.Expire): an answer's image
// takes its link instead of expiring (expiringImage), in the same
// transaction that expires the other rows, so a pass that fails or
// dies midway changes nothing and the next one, on this replica or
// another, does it all again; the link replaces the image's row, so it
// is queued once however many passes tried. The pass also tells when
// the next row can expire.
func (s *Service) expire(ctx context.Context, now time.Time) {
	res, err := s.store.Expire(ctx, now, s.cfg.TTL, func(ctx context.Context, q outbox.Querier, r outbox.Row) (*deliveryv1.SendRequested, string, error) {
		return s.expiringImage(ctx, q, r, now)
	})
	if err != nil {
		if ctx.Err() == nil {
			s.log.Warn("expire deliveries failed; trying again", "err", err)
		}
		return // still due: the next round of the send loop tries again
	}
	s.expiry.passed(now, res.Next, s.cfg.TTL)
	for _, r := range res.Replaced {
		expired.WithLabelValues(r.Platform).Inc()
		s.log.Warn("image expired before it could be sent; its link takes its place", "delivery_id", r.ID, "key", r.Key,
			"chat_id", r.ChatID, "last_error", r.LastError)
	}
	if len(res.Replaced) > 0 {
		s.kick()
	}
	for _, r := range res.Expired {
		expired.WithLabelValues(r.Platform).Inc()
		deadLetters.WithLabelValues(r.Platform, "expired").Inc()
		s.log.Warn("delivery expired before it could be sent", "delivery_id", r.ID, "key", r.Key,
			"platform", r.Platform, "chat_id", r.ChatID, "attempts", r.Attempts,
			"age", now.Sub(r.CreatedAt).Round(time.Second), "last_error", r.LastError)
		s.cronUndelivered(ctx, s.log, r, r.LastError) // "expired: <the last attempt's error>"
	}
}

// expiryClock is when this replica runs its next expiry pass: when the
// earliest waiting row can expire, as the last pass read it from the
// rows, and at the latest delivery.ttl after that pass. Every row queued
// since (here or on another replica, or requeued by an operator) expires
// delivery.ttl after it was queued, so not before: no query runs to
// look for expired rows while none can be, and none is missed. A row
// whose sender put it back in the queue after its expiry (a retry, a
// deferral) is noted at once: the pass saw it sending under its lease.
// The zero value runs a pass at once (a replica that starts reads the
// rows), as does a pass that failed.
type expiryClock struct {
	mu   sync.Mutex
	next time.Time
	// noted is the earliest time noted since the pass under way began
	// (zero: none), which the pass may not have seen.
	noted time.Time
}

// due reports whether a pass is due at now; when it is, the pass begins.
func (c *expiryClock) due(now time.Time) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if now.Before(c.next) {
		return false
	}
	c.noted = time.Time{}
	return true
}

// passed records a pass at now that read next (zero: nothing waits).
func (c *expiryClock) passed(now, next time.Time, ttl time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.next = now.Add(ttl)
	for _, t := range []time.Time{next, c.noted} {
		if !t.IsZero() && t.Before(c.next) {
			c.next = t
		}
	}
}

// at is when the next pass is due (zero: at once).
func (c *expiryClock) at() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.next
}

// note brings the next pass forward to t, when earlier.
func (c *expiryClock) note(t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if t.Before(c.next) {
		c.next = t
	}
	if c.noted.IsZero() || t.Before(c.noted) {
		c.noted = t
	}
}

// buckets are the shared rate limits a send to t takes from.
func (s *Service) buckets(t *deliveryv1.Target) []ratelimit.Bucket {
	p := s.cfg.platform(t.GetPlatform())
	return []ratelimit.Bucket{
		{Key: t.GetPlatform() + ":bot:" + t.GetAccount(), Rate: p.BotRate},
		{Key: t.GetPlatform() + ":chat:" + t.GetAccount() + ":" + t.GetChatId(), Rate: p.ChatRate},
	}
}

// send performs one claimed row and records the outcome. life is the
// service's context: when it ends while the request is in flight (the
// process is being killed), nothing is recorded and the row's lease runs
// out, so another replica sends it again with the same idempotency key.
func (s *Service) send(ctx, life context.Context, r outbox.Row) {
	// The row carries the trace of the reply it was made from.
	ctx, span := otel.Tracer(tracerName).Start(r.Context(ctx), "delivery send "+r.Platform,
		trace.WithAttributes(attribute.Int64("delivery.id", r.ID), attribute.Int("delivery.attempt", r.Attempts)))
	defer span.End()
	log := rowLog(ctx, s.log, r)
	req := r.Request
	now := s.now()
	wait, err := s.limiter.Take(ctx, now, s.buckets(req.GetTarget())...)
	if err != nil {
		log.Warn("rate limiter unavailable; sending unpaced", "err", err)
	} else if wait > 0 {
		derr := s.store.Defer(ctx, r.ID, s.owner, now.Add(wait), now)
		s.record(log, "defer", derr)
		if derr == nil {
			s.due.note(now.Add(wait))
		}
		s.expiry.note(r.ExpiresAt)
		return
	}

	rctx, cancel := context.WithTimeout(ctx, s.cfg.SendTimeout)
	dispatched(req, s.now())
	var rec deliveryv1.SendReceipt
	err = s.bus.Request(rctx, s.bus.Topology().SendSubject(r.Platform), req, &rec)
	cancel()
	if life.Err() != nil && err != nil {
		return // killed mid-send: leave the row to its lease
	}
	s.outcome(ctx, log, r, &rec, err)
}

// outcome records the result of sending claimed row r: the receipt, or
// the error of the request to the gateway.
func (s *Service) outcome(ctx context.Context, log warner, r outbox.Row, rec *deliveryv1.SendReceipt, err error) {
	now := s.now()
	switch {
	case err == nil && rec.GetOk():
		result := "sent"
		if rec.GetDuplicate() {
			result = "duplicate"
		}
		sends.WithLabelValues(r.Platform, result).Inc()
		if err := s.overDuplicate(ctx, r.Request, rec); err != nil {
			// Sent again under the same key once the lease runs out:
			// the gateway answers as now.
			s.record(log, "queue the edit over a duplicate", err)
			return
		}
		if err := s.store.MarkSent(ctx, r.ID, s.owner, rec.GetPlatformMessageId(), now); err != nil {
			s.record(log, "mark sent", err)
			return
		}
		s.record(log, "forget interaction", s.store.ForgetInteraction(ctx, r.ID, r.Request))
	case errors.Is(err, nats.ErrNoResponders):
		s.retry(ctx, log, r, "no_gateway", fmt.Sprintf("no gateway serves %s", r.Platform), s.backoff(r.Attempts), nil)
	case errors.Is(err, context.DeadlineExceeded) || errors.Is(err, nats.ErrTimeout):
		// Maybe delivered: ask again with the same key; the gateway answers
		// a key it already sent with its first receipt.
		s.retry(ctx, log, r, "timeout", "gateway timed out; maybe delivered", s.backoff(r.Attempts), nil)
	case err != nil:
		s.retry(ctx, log, r, "retry", err.Error(), s.backoff(r.Attempts), nil)
	default:
		s.classify(ctx, log, r, rec)
	}
}

// sendThrough sends a lone request at once, from the reply consumer,
// when nothing of its chat waits in the outbox (not checked for a
// per-request platform, whose replies have no chat order and are taken
// once) and the rate limits allow it now; it reports whether it took
// care of the request. A send that went through is recorded as a sent
// row (without waiting for the WAL flush), except on a per-request
// platform, whose waiting request has the reply and would take a repeat
// of it once; a failed one becomes a claimed outbox row with its outcome
// recorded, exactly as if the outbox had tried it. When it does not take
// the request (a busy chat, a rate limit, a record that failed), the
// outbox sends it under the same idempotency key, so a send that went
// through is not repeated: the gateway answers the key with its first
// receipt. This saves the outbox's durable commit, claim and wake-up on
// the common path.
func (s *Service) sendThrough(ctx context.Context, req *deliveryv1.SendRequested) (bool, error) {
	t := req.GetTarget()
	perRequest := s.cfg.platform(t.GetPlatform()).PerRequest
	if !perRequest {
		if clear, err := s.store.Clear(ctx, outbox.ChatKey(t), req.GetIdempotencyKey()); err != nil || !clear {
			return false, nil //nolint:nilerr // the outbox path reports database errors
		}
	}
	now := s.now()
	if wait, err := s.limiter.Take(ctx, now, s.buckets(t)...); err != nil || wait > 0 {
		return false, nil //nolint:nilerr // the outbox path paces and retries
	}
	ctx, span := otel.Tracer(tracerName).Start(ctx, "delivery send "+t.GetPlatform(),
		trace.WithAttributes(attribute.String("delivery.key", req.GetIdempotencyKey()), attribute.Bool("delivery.direct", true)))
	defer span.End()
	// A short wait: the reply partition waits with it. A timeout is a
	// "maybe delivered" the outbox retries under the same key.
	rctx, cancel := context.WithTimeout(ctx, min(s.cfg.SendTimeout, directSendTimeout))
	dispatched(req, s.now())
	var rec deliveryv1.SendReceipt
	err := s.bus.Request(rctx, s.bus.Topology().SendSubject(t.GetPlatform()), req, &rec)
	cancel()
	if err == nil && rec.GetOk() {
		result := "sent"
		if rec.GetDuplicate() {
			result = "duplicate"
		}
		sends.WithLabelValues(t.GetPlatform(), result).Inc()
		if err := s.overDuplicate(ctx, req, &rec); err != nil {
			s.log.Warn("queue the edit over a duplicate failed; queueing the send", "key", req.GetIdempotencyKey(), "err", err)
			return false, nil
		}
		if perRequest {
			// Nothing to record: the waiting request took the reply,
			// and takes a repeat of its key once.
			return true, nil
		}
		if rerr := s.store.RecordSent(ctx, s.now(), s.cfg.TTL, req, s.owner, rec.GetPlatformMessageId()); rerr != nil {
			s.log.Warn("record a sent delivery failed; queueing it", "key", req.GetIdempotencyKey(), "err", rerr)
			return false, nil
		}
		return true, nil
	}
	if ctx.Err() != nil {
		return false, ctx.Err() // shutting down: the reply event comes back
	}
	row, ok, qerr := s.store.EnqueueClaimed(ctx, s.now(), s.cfg.TTL, s.cfg.Lease, s.owner, req)
	if qerr != nil {
		return true, fmt.Errorf("enqueue reply: %w", qerr)
	}
	if !ok {
		return false, nil // a row with the key exists: it goes its own way
	}
	log := rowLog(ctx, s.log, row)
	s.outcome(ctx, log, row, &rec, err)
	s.kick()
	return true, nil
}

// overDuplicate queues, for the send of a stream segment's message
// (segmentMessageKey) that the gateway answered with an earlier
// request's receipt, an edit that makes the message show what this send
// carries: the earlier request was most likely a stream update of a
// replica that stopped before it recorded the message, which showed a
// part of the text, with the cursor. Posting it again would leave that
// message beside the answer. After a retry of this same send the edit
// changes nothing. It carries the send's final mark: the turn's end
// reaches the gateway with it.
func (s *Service) overDuplicate(ctx context.Context, req *deliveryv1.SendRequested, rec *deliveryv1.SendReceipt) error {
	if !rec.GetDuplicate() || req.GetOp() != deliveryv1.SendOp_SEND_OP_SEND || rec.GetPlatformMessageId() == "" ||
		req.GetTurnId() == "" || !strings.HasPrefix(req.GetIdempotencyKey(), req.GetTurnId()+":") ||
		!isSegmentMessageKey(req.GetIdempotencyKey()) {
		return nil
	}
	edit := proto.Clone(req).(*deliveryv1.SendRequested)
	edit.IdempotencyKey = req.GetIdempotencyKey() + ":dup"
	edit.Op = deliveryv1.SendOp_SEND_OP_EDIT
	edit.MessageId = rec.GetPlatformMessageId()
	edit.HopTimes = nil
	if _, err := s.store.Enqueue(ctx, s.now(), s.cfg.TTL, edit); err != nil {
		return fmt.Errorf("queue the edit over duplicate %s: %w", req.GetIdempotencyKey(), err)
	}
	s.kick()
	return nil
}

// classify handles a receipt that reports a failure, by its error class.
func (s *Service) classify(ctx context.Context, l warner, r outbox.Row, rec *deliveryv1.SendReceipt) {
	switch rec.GetErrorClass() {
	case deliveryv1.ErrorClass_ERROR_CLASS_RATE_LIMITED:
		d := time.Duration(rec.GetRetryAfterMs()) * time.Millisecond
		if d <= 0 {
			d = s.backoff(r.Attempts)
		} else {
			d = afterRetryAfter(d)
		}
		s.retry(ctx, l, r, "rate_limited", "rate limited: "+rec.GetError(), d, nil)
	case deliveryv1.ErrorClass_ERROR_CLASS_PERMANENT:
		switch {
		case answerEdit(r.Request) && strings.HasPrefix(rec.GetError(), bus.EditPartDone):
			// The message shows the edit's text up to the part that was
			// refused (a Google Chat follow-on message): its text again
			// as a new message would show the answer twice. The rest is
			// lost; the user is told, as after the last attempt.
			s.fail(ctx, l, r, partRefused, rec.GetError())
		case answerEdit(r.Request):
			s.editAsNew(ctx, l, r, rec.GetError())
		default:
			s.fail(ctx, l, r, "permanent", rec.GetError())
		}
	case deliveryv1.ErrorClass_ERROR_CLASS_FORMAT:
		if r.Request.GetFormat() == deliveryv1.TextFormat_TEXT_FORMAT_PLAIN {
			s.fail(ctx, l, r, "format", "rejected as plain text too: "+rec.GetError())
			return
		}
		plain := proto.Clone(r.Request).(*deliveryv1.SendRequested)
		plain.Format = deliveryv1.TextFormat_TEXT_FORMAT_PLAIN
		s.retry(ctx, l, r, "format", "formatting rejected, retrying as plain text: "+rec.GetError(), 0, plain)
	default:
		// A gateway may say when to look again (an earlier request with
		// the key is still at the platform).
		d := time.Duration(rec.GetRetryAfterMs()) * time.Millisecond
		if d <= 0 {
			d = s.backoff(r.Attempts)
		} else {
			d = afterRetryAfter(d)
		}
		s.retry(ctx, l, r, "retry", rec.GetError(), d, nil)
	}
}

type warner interface{ Warn(string, ...any) }

// partRefused is the dead letter reason of an answer edit the platform
// carried out in part (bus.EditPartDone) and refused the rest of.
const partRefused = "edit_part_refused"

// newMessageSuffix ends the idempotency key of the send that posts an
// answer edit's text as a new message (editAsNew).
const newMessageSuffix = ":new"

// answerEdit reports whether req writes text of a turn's streamed answer
// over one of its messages: a stream's final or closing edit, or a
// rewrite of another replica's messages (keys "<turn>:<seq>:<i>"), the
// edit that closes a stream segment at a tool call, its text before
// the call ("<turn>:<seq>:g:<i>"), or the edit over a duplicate send of
// a segment's message ("<turn>:<segment>:m<i>:dup"). Tool progress, a
// button's answer and the like are not the answer.
func answerEdit(req *deliveryv1.SendRequested) bool {
	turn := req.GetTurnId()
	if req.GetOp() != deliveryv1.SendOp_SEND_OP_EDIT || turn == "" || req.GetText() == "" {
		return false
	}
	key := req.GetIdempotencyKey()
	rest, ok := strings.CutPrefix(key, turn+":")
	if !ok {
		return false
	}
	if k, ok := strings.CutSuffix(key, ":dup"); ok {
		return isSegmentMessageKey(k)
	}
	seq, i, ok := strings.Cut(rest, ":")
	if g, closing := strings.CutPrefix(i, "g:"); closing {
		i = g
	}
	return ok && isDigits(seq) && isDigits(i)
}

// isDigits reports whether s is a non-empty run of ASCII digits.
func isDigits(s string) bool {
	return s != "" && strings.Trim(s, "0123456789") == ""
}

// editAsNew sends, in place of answer edit r that the platform refused
// for good (the message was deleted: Telegram's "message to edit not
// found", Discord's Unknown Message; or it is too old to edit), its
// text as a new message, as Hermes does when a stream's final edit
// fails: the stream consumer leaves the final unsent and the gateway
// sends the whole response. The send takes the edit's row, and so its
// place in the chat's order (the answer's later pieces wait behind it),
// under the edit's key plus ":new": the gateway answers a retry of it
// with its first receipt, so it is posted once.
func (s *Service) editAsNew(ctx context.Context, log warner, r outbox.Row, reason string) {
	sends.WithLabelValues(r.Platform, "edit_refused").Inc()
	req := proto.Clone(r.Request).(*deliveryv1.SendRequested)
	req.Op = deliveryv1.SendOp_SEND_OP_SEND
	req.MessageId = ""
	req.IdempotencyKey = r.Request.GetIdempotencyKey() + newMessageSuffix
	msg := "edit refused, its text sent as a new message: " + reason
	var err error
	if keys := laterParts(r.Request); len(keys) > 0 {
		err = s.store.ReplaceWithLater(ctx, r.ID, s.owner, req, msg, s.now(), s.cfg.TTL, keys, afterRefusedEdit)
	} else {
		err = s.store.Replace(ctx, r.ID, s.owner, req, msg, s.now(), s.cfg.TTL)
	}
	if errors.Is(err, outbox.ErrLostClaim) {
		log.Warn("answer edit refused, but another sender has its row now", "err", reason)
		return
	}
	if err != nil {
		log.Warn("put a new message in place of a refused answer edit failed; the edit is tried again when its lease runs out", "err", err)
		s.expiry.note(r.ExpiresAt)
		return
	}
	log.Warn("answer edit refused; its text goes as a new message", "err", reason)
	s.kick()
}

// laterParts are the keys of the rows after req, a part of a rewrite
// of several messages (a final's, a segment's close: "<base>:<i>" of
// ChunkCount), that may edit the messages below req's.
func laterParts(req *deliveryv1.SendRequested) []string {
	i, n := int(req.GetChunkIndex()), int(req.GetChunkCount())
	base, ok := strings.CutSuffix(req.GetIdempotencyKey(), ":"+strconv.Itoa(i))
	if !ok || i+1 >= n {
		return nil
	}
	keys := make([]string, 0, n-i-1)
	for j := i + 1; j < n; j++ {
		keys = append(keys, base+":"+strconv.Itoa(j))
	}
	return keys
}

// afterRefusedEdit is what becomes of row r, a later part of the rewrite
// one of whose edits the platform refused for good and whose text goes
// as a new message (editAsNew): the message it edits shows the answer
// above that new message, so its text goes as a new message too, below
// it, and the message is deleted (after the chat's waiting rows), so
// that the answer's parts show in order. A row that edits no message
// (a send, a delete) stays as it is.
func afterRefusedEdit(r outbox.Row) []*deliveryv1.SendRequested {
	edit := r.Request
	if edit.GetOp() != deliveryv1.SendOp_SEND_OP_EDIT || edit.GetMessageId() == "" || edit.GetText() == "" {
		return nil
	}
	send := proto.Clone(edit).(*deliveryv1.SendRequested)
	send.Op, send.MessageId = deliveryv1.SendOp_SEND_OP_SEND, ""
	send.IdempotencyKey = edit.GetIdempotencyKey() + newMessageSuffix
	drop := &deliveryv1.SendRequested{
		IdempotencyKey: edit.GetIdempotencyKey() + dropSuffix,
		Op:             deliveryv1.SendOp_SEND_OP_DELETE,
		Target:         edit.GetTarget(),
		MessageId:      edit.GetMessageId(),
		TurnId:         edit.GetTurnId(),
		SessionKey:     edit.GetSessionKey(),
	}
	return []*deliveryv1.SendRequested{send, drop}
}

// dropSuffix ends the idempotency key of the delete of a message whose
// text a refused edit before it moved below (afterRefusedEdit).
const dropSuffix = ":drop"

// retry schedules the row again after delay, or dead-letters it once it
// used up MaxAttempts (rate limiting and format fallbacks included).
func (s *Service) retry(ctx context.Context, log warner, r outbox.Row, result, msg string, delay time.Duration, req *deliveryv1.SendRequested) {
	sends.WithLabelValues(r.Platform, result).Inc()
	if r.Attempts >= s.cfg.MaxAttempts {
		s.fail(ctx, log, r, "max_attempts", fmt.Sprintf("gave up after %d attempts: %s", r.Attempts, msg))
		return
	}
	now := s.now()
	log.Warn("send failed; will retry", "result", result, "retry_in", delay, "err", msg)
	err := s.store.Retry(ctx, r.ID, s.owner, now.Add(delay), msg, req, now)
	s.record(log, "retry", err)
	if err == nil {
		// The send loop wakes then: its caller's deferred kick (or
		// sendThrough's) makes it read the time.
		s.due.note(now.Add(delay))
	}
	s.expiry.note(r.ExpiresAt)
}

func (s *Service) fail(ctx context.Context, log warner, r outbox.Row, reason, msg string) {
	sends.WithLabelValues(r.Platform, "failed").Inc()
	if isImageRow(r) {
		// The answer's image goes as its link, in its place: no dead
		// letter of its own, which would be a second write.
		if s.imageFallback(ctx, log, r, msg) {
			s.cronUndelivered(ctx, log, r, msg)
		}
		return
	}
	deadLetters.WithLabelValues(r.Platform, reason).Inc()
	log.Warn("delivery dead-lettered", "reason", reason, "err", msg)
	err := s.store.Fail(ctx, r.ID, s.owner, msg, s.now())
	s.record(log, "fail", err)
	if err != nil {
		return
	}
	s.record(log, "forget interaction", s.store.ForgetInteraction(ctx, r.ID, r.Request))
	s.cronUndelivered(ctx, log, r, msg)
	if reason == "max_attempts" || reason == partRefused {
		s.undelivered(ctx, log, r)
	}
}

// cronUndelivered records on its cron job that a run's answer was given
// up (dead-lettered or expired), as Hermes's last_delivery_error: /cron
// list, the cronjob tool and /api/jobs show it. The reason names the
// deliver target the row went to, as Hermes's _deliver_result does
// ("delivery to <platform>:<chat> failed: <error>", cron/scheduler.py),
// so that the owner of a job with several targets (the answer's copies,
// services/worker/crontargets.go) can tell which one failed; with its
// thread, as a deliver value names one. Only the answer's own messages
// count (not typing, deletions or tool progress). Best effort: the row's
// state is the record of the failure.
func (s *Service) cronUndelivered(ctx context.Context, log warner, r outbox.Row, reason string) {
	switch r.Request.GetOp() {
	case deliveryv1.SendOp_SEND_OP_SEND, deliveryv1.SendOp_SEND_OP_EDIT:
	default:
		return
	}
	run, ok := cron.RunOfSession(r.SessionKey)
	if !ok {
		return
	}
	target := r.Platform + ":" + r.ChatID
	if r.ThreadID != "" {
		target += ":" + r.ThreadID
	}
	applied, err := cron.RecordDeliveryFailure(ctx, s.db, run, target, reason)
	if err != nil {
		log.Warn("record a cron run's delivery failure failed", "run", run, "err", err)
		return
	}
	if !applied {
		log.Warn("cron run's delivery failure not recorded: the job was removed or has run since", "run", run)
	}
}

// undeliveredNotice is what Hermes tells the user when its retries of a
// response all failed (BasePlatformAdapter._send_with_retry).
const undeliveredNotice = "⚠️ Message delivery failed after multiple attempts. " +
	"Please try again — your request was processed but the response could not be sent."

// undeliveredSuffix ends the idempotency key of an undelivered notice.
const undeliveredSuffix = ":undelivered"

// undelivered tells the user, as Hermes does, that part of an answer
// could not be sent after every attempt, so they do not wait for it: a
// notice queued to the same chat, one per turn (its key), marking the
// user's message as failed. Not for a notice that failed itself (no
// loop), not for an operation that shows no answer (typing, delete), and
// not on a per-request platform, whose request is gone by then.
func (s *Service) undelivered(ctx context.Context, log warner, r outbox.Row) {
	req := r.Request
	if strings.HasSuffix(r.Key, undeliveredSuffix) || s.cfg.platform(r.Platform).PerRequest {
		return
	}
	switch req.GetOp() {
	case deliveryv1.SendOp_SEND_OP_SEND, deliveryv1.SendOp_SEND_OP_EDIT:
	default:
		return
	}
	base := req.GetTurnId()
	if base == "" {
		base = r.Key
	}
	n := &deliveryv1.SendRequested{
		IdempotencyKey:       base + undeliveredSuffix,
		Op:                   deliveryv1.SendOp_SEND_OP_SEND,
		Target:               req.GetTarget(),
		TurnId:               req.GetTurnId(),
		SessionKey:           req.GetSessionKey(),
		InputMessageIds:      req.GetInputMessageIds(),
		NoReactionMessageIds: req.GetNoReactionMessageIds(),
		Text:                 undeliveredNotice,
		Format:               deliveryv1.TextFormat_TEXT_FORMAT_PLAIN,
		Final:                true,
		ErrorCode:            "undelivered",
	}
	if _, err := s.store.Enqueue(ctx, s.now(), s.cfg.TTL, n); err != nil {
		log.Warn("queue the undelivered notice failed", "err", err)
		return
	}
	s.kick()
}

func (s *Service) record(log warner, op string, err error) {
	if err != nil {
		log.Warn("record delivery outcome failed", "op", op, "err", err)
	}
}

// backoff is exponential in the attempt with full jitter in its upper
// half: RetryBase·2^(attempt-1) capped at RetryMax, times 0.5–1.
func (s *Service) backoff(attempt int) time.Duration {
	d := s.cfg.RetryBase
	for i := 1; i < attempt && d < s.cfg.RetryMax; i++ {
		d *= 2
	}
	d = min(d, s.cfg.RetryMax)
	return d/2 + time.Duration(rand.Int64N(int64(d/2)+1))
}

// Bounds of the jitter added to a gateway's retry-after.
const (
	retryAfterJitterMin = 500 * time.Millisecond
	retryAfterJitterMax = 30 * time.Second
)

// afterRetryAfter is when to try again after a gateway said "not before
// d" (a platform's Retry-After, or a key still being sent): d, which is
// honoured as a lower bound, plus a random part of up to half of d (at
// least 0.5 s, at most 30 s), so that the many rows one 429 stopped
// (a bot-wide or global limit) do not all come back in the same instant
// and trip it again in lockstep.
func afterRetryAfter(d time.Duration) time.Duration {
	spread := min(max(d/2, retryAfterJitterMin), retryAfterJitterMax)
	return d + time.Duration(rand.Int64N(int64(spread)+1))
}
