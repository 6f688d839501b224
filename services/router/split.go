package router

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/switchboard-chat/switchboard/pkg/chunk"
)

// A user's one message sometimes reaches the bot as several: a chat
// client splits a text longer than its platform allows into messages
// sent one after another (Telegram's at 4,096 characters), and Telegram
// delivers an album as one message per picture, the caption on one of
// them. Started at once, the first part's turn would answer half of it
// and be interrupted by the rest. As Hermes batches such parts, the
// router holds a part that reaches an idle session: a message about as
// long as its platform's limit (router.split_messages) for
// router.split_wait, an album's picture (media_group_id) for
// router.album_wait. The message is queued durably and handled, and a
// hold key in Redis (<prefix>hold:<session key>, expiring with the wait)
// keeps the session from being started by anything that starts waiting
// sessions (the sweep, the restarts after commands and duplicates) on
// any replica; each part sets it again. When the wait ends, a timer in
// the router that held the last part starts the session (one that finds
// the key extended by a part another replica held waits again). A
// message that arrives meanwhile and is no part finds the parts waiting
// and starts one turn for all of them. A message that was simply long
// starts when the wait ends. Other messages are never held, and neither
// is a message to a busy session: it waits for the running turn anyway.
// Should the router stop during a wait, the sweep starts the session once
// the key has expired.

// holdFor is how long m, as one part of a message the user sent at once,
// holds an idle session for the rest; 0 for a message that is not one
// (a skill's invocation is long for the skill's sake: never a part).
func (s *Service) holdFor(m *msgCtx) time.Duration {
	if !m.decision.Allowed || m.isCmd || len(m.skills) > 0 || m.ev.GetInternal() || ownsTurn(m) {
		return 0
	}
	if m.ev.GetMediaGroupId() != "" {
		return s.cfg.AlbumWait
	}
	limit := s.cfg.SplitMessages[m.platform]
	text := m.ev.GetText()
	// Telegram's and Discord's clients count UTF-16 code units, never
	// more than the bytes.
	if limit <= 0 || len(text) < limit || chunk.UTF16.Len(text) < limit {
		return 0
	}
	return s.cfg.SplitWait
}

// holdForRest ends the handling of a part queued in its free session
// without starting a turn: the session starts m.hold after its last part,
// unless a later message started it first.
func (s *Service) holdForRest(ctx context.Context, m *msgCtx) error {
	if err := s.rdb.Set(ctx, s.holdKey(m.key), m.dedupeID, m.hold).Err(); err != nil {
		return fmt.Errorf("hold session for the rest of a message: %w", err)
	}
	inbound.WithLabelValues("held").Inc()
	s.log.DebugContext(ctx, "message held for the rest of what the user sent", "session_key", m.key, "event", m.dedupeID, "wait", m.hold)
	s.holds.arm(m.key, m.hold)
	return nil
}

func (s *Service) holdKey(key string) string { return s.prefix + "hold:" + key }

// held reports whether a part holds the session key for the rest of a
// message.
func (s *Service) held(ctx context.Context, key string) (bool, error) {
	n, err := s.rdb.Exists(ctx, s.holdKey(key)).Result()
	if err != nil {
		return false, fmt.Errorf("read hold: %w", err)
	}
	return n > 0, nil
}

// holds are the sessions whose parts wait for the rest, each with the
// timer that ends the wait.
type holds struct {
	mu     sync.Mutex
	timers map[string]*time.Timer
	// due receives the sessions whose wait ended; a full channel leaves
	// one to the sweep.
	due chan string
}

func newHolds() *holds {
	return &holds{timers: map[string]*time.Timer{}, due: make(chan string, 256)}
}

// arm (re)starts the timer that ends the wait of the session key.
func (h *holds) arm(key string, wait time.Duration) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if old := h.timers[key]; old != nil {
		old.Stop() // one already firing finds itself replaced
	}
	var t *time.Timer
	t = time.AfterFunc(wait, func() {
		h.mu.Lock()
		mine := h.timers[key] == t
		if mine {
			delete(h.timers, key)
		}
		h.mu.Unlock()
		if !mine {
			return
		}
		select {
		case h.due <- key:
		default:
		}
	})
	h.timers[key] = t
}

// startHeld starts the sessions whose wait ended, until ctx ends.
func (s *Service) startHeld(ctx context.Context) error {
	for {
		select {
		case <-ctx.Done():
			return nil
		case key := <-s.holds.due:
			// Another replica's part may have set the hold again.
			left, err := s.rdb.PTTL(ctx, s.holdKey(key)).Result()
			if err == nil && left > 0 {
				s.holds.arm(key, left)
				continue
			}
			var n int
			if err == nil { // the hold has just ended
				n, err = s.store.QueueLen(ctx, key)
			}
			if err == nil && n > 0 {
				_, err = s.startQueued(ctx, key)
			}
			if err != nil && ctx.Err() == nil {
				s.log.Warn("start a session held for the rest of a message; the sweep will", "session_key", key, "err", err)
			}
		}
	}
}
