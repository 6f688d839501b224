package router

import (
	"context"
	"fmt"
	"time"

	eventsv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/events/v1"
)

// Hermes's pre-reset memory flush. Before a conversation is cleared (an
// idle or daily reset, /new or /reset), Hermes runs one more agent turn
// on it, with only the memory and skill tools, telling the model the
// conversation is about to end and to save what is worth remembering;
// nothing of it reaches the user. Here the reset queues that turn
// (sessionstore.ResetKeepingQueue, ResetDropping) in its own
// transaction, at the head of the session's queue, as a turn of its own:
// it runs under the session lock like any turn, so before the new
// conversation's first, and the queue keeps it across a crash (the sweep
// starts what a dead router left waiting). publishTurn sends it with
// TurnRequested.memory_flush on the conversation that ended; the worker
// runs it (services/worker/flush.go) at most once.

// flushFor is the template of the memory flush a reset of m's session
// queues: the source of the message that ended the conversation (whose
// memory it writes to), or nil when no flush is due: memory is off
// (Config.MemoryFlush), or the session is a cron job's (Hermes skips
// those: a job's run has nothing to remember). The store queues it only
// for a conversation that had a turn.
func (s *Service) flushFor(m *msgCtx) *eventsv1.MessageReceived {
	if !s.cfg.MemoryFlush || m.platform == "cron" {
		return nil
	}
	return &eventsv1.MessageReceived{Source: m.src}
}

// startFlush starts the memory flush /new queued, if any: no message
// waits behind it to start it.
func (s *Service) startFlush(ctx context.Context, m *msgCtx) error {
	if s.flushFor(m) == nil {
		return nil
	}
	if _, err := s.tryStart(ctx, m.key); err != nil {
		return fmt.Errorf("start memory flush: %w", err)
	}
	return nil
}

// flushMarkTTL outlives a flush: the worker's bound (90 s) with a lock
// expiry and a redelivery after a crash.
const flushMarkTTL = 5 * time.Minute

// markFlush records, before the flush turn turnID of key is published,
// that it is one: a message arriving while it runs is queued behind it
// without a busy acknowledgement or an interrupt (flushRunning).
func (s *Service) markFlush(ctx context.Context, key, turnID string) error {
	if err := s.rdb.Set(ctx, s.prefix+"flushing:"+key, turnID, flushMarkTTL).Err(); err != nil {
		return fmt.Errorf("mark memory flush: %w", err)
	}
	return nil
}

// flushRunning reports whether the turn holding key's lock (owner) is a
// memory flush. One Redis read, for a busy session only, where flushes
// are on; an unreadable mark counts as none (the message then meets a
// busy session, as any other turn's).
func (s *Service) flushRunning(ctx context.Context, key, owner string) bool {
	if !s.cfg.MemoryFlush {
		return false
	}
	grant := heldBy(owner)
	if grant == "" {
		return false
	}
	mark, err := s.rdb.Get(ctx, s.prefix+"flushing:"+key).Result()
	return err == nil && mark == grant
}
