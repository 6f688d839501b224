package router

import (
	"context"
	"sync"
	"time"
	"unicode/utf16"
)

// Chat clients split a text longer than their platform allows into
// several messages sent one after another: Telegram's at 4,096
// characters. Started at once, the first part's turn would answer half a
// text and be interrupted by the second. As Hermes batches such parts,
// the router holds a message about as long as its platform's limit
// (router.split_messages), arriving at an idle session, for
// router.split_wait: the message is queued durably and handled, and its
// session starts when the wait ends. A part that arrives meanwhile finds
// it waiting and starts one turn for both, unless it is a long part
// itself, which holds the session for another wait. A message that was
// simply long starts when the wait ends. Shorter messages are never held,
// and neither is a message to a busy session: it waits for the running
// turn anyway. Should the router stop during a wait, the sweep starts
// the session.

// splitPart reports whether m looks like one part of a longer text its
// client split: it is at least router.split_messages long for its
// platform.
func (s *Service) splitPart(m *msgCtx) bool {
	limit := s.cfg.SplitMessages[m.platform]
	text := m.ev.GetText()
	if limit <= 0 || s.cfg.SplitWait <= 0 || len(text) < limit {
		return false
	}
	if !m.decision.Allowed || m.isCmd || m.ev.GetInternal() || ownsTurn(m) {
		return false
	}
	return utf16Len(text) >= limit
}

// utf16Len is the length of text as Telegram's and Discord's clients count
// it: in UTF-16 code units (never more than its bytes).
func utf16Len(text string) int {
	n := 0
	for _, r := range text {
		n += utf16.RuneLen(r)
	}
	return n
}

// holdForRest ends the handling of a split part queued in its free
// session without starting a turn: the session starts router.split_wait
// after its last split part, unless a later message started it first.
func (s *Service) holdForRest(ctx context.Context, m *msgCtx) error {
	inbound.WithLabelValues("held").Inc()
	s.log.DebugContext(ctx, "message held for the rest of a split text", "session_key", m.key, "event", m.dedupeID, "wait", s.cfg.SplitWait)
	s.holds.hold(m.key, s.cfg.SplitWait)
	return nil
}

// holds are the sessions whose split parts wait for the rest of their
// text, each with the timer that ends the wait.
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

// hold (re)starts the wait of the session key.
func (h *holds) hold(key string, wait time.Duration) {
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
			if _, err := s.tryStart(ctx, key); err != nil && ctx.Err() == nil {
				s.log.Warn("start a session held for a split text; the sweep will", "session_key", key, "err", err)
			}
		}
	}
}
