package bluebubbles

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	eventsv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/events/v1"
	"github.com/switchboard-chat/switchboard/pkg/platform"
)

// maxHeld bounds the messages a replica holds while the bus is out of
// reach; past it a call is answered 500 and its message is lost, as
// before there was a hold.
const maxHeld = 1000

// holdRetry is the pause between two attempts to publish a held message.
const holdRetry = time.Second

// hold keeps the messages the bus could not take within ack_timeout and
// publishes them, in the order they came, once it can. BlueBubbles posts
// a webhook once and never again, whatever the answer: a message answered
// 500 was lost. A held one waits in the gateway until the bus is back (a
// replica that stops meanwhile loses what it holds, and logs how much).
// While messages are held, later ones queue behind them, so a chat's
// messages reach the bus in the order they were written.
type hold struct {
	conn    platform.Deliverer
	log     *slog.Logger
	ack     time.Duration
	max     int
	stopped <-chan struct{}

	mu      sync.Mutex
	queue   []*eventsv1.MessageReceived
	running bool
}

func newHold(ctx context.Context, conn platform.Deliverer, log *slog.Logger, ack time.Duration, max int) *hold {
	return &hold{conn: conn, log: log, ack: ack, max: max, stopped: ctx.Done()}
}

// waiting reports whether messages are held: a new one must queue behind
// them.
func (h *hold) waiting() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.queue) > 0
}

// add holds ev behind the messages held already; false when the hold is
// full or the webhook stopped serving.
func (h *hold) add(ev *eventsv1.MessageReceived) bool {
	select {
	case <-h.stopped:
		return false
	default:
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.queue) >= h.max {
		return false
	}
	h.queue = append(h.queue, ev)
	if !h.running {
		h.running = true
		go h.drain()
	}
	return true
}

// drain publishes the held messages, oldest first, each until the bus
// takes it (or refuses it for good), and ends when none is left or the
// webhook stops serving.
func (h *hold) drain() {
	for {
		h.mu.Lock()
		if len(h.queue) == 0 {
			h.running = false
			h.mu.Unlock()
			return
		}
		ev := h.queue[0]
		h.mu.Unlock()
		if !h.publish(ev) {
			h.mu.Lock()
			n := len(h.queue)
			h.queue, h.running = nil, false
			h.mu.Unlock()
			h.log.Error("bluebubbles messages held for the bus lost: the webhook stopped serving", "count", n)
			return
		}
		h.mu.Lock()
		h.queue = h.queue[1:]
		h.mu.Unlock()
	}
}

// publish delivers ev until the bus takes it; false when the webhook
// stopped serving first.
func (h *hold) publish(ev *eventsv1.MessageReceived) bool {
	for {
		ctx, cancel := context.WithTimeout(context.Background(), h.ack)
		_, err := h.conn.Deliver(ctx, ev)
		cancel()
		if err == nil || errors.Is(err, platform.ErrRejected) {
			h.log.Info("bluebubbles held message published", "guid", ev.GetEventId())
			return true
		}
		select {
		case <-h.stopped:
			return false
		case <-time.After(holdRetry):
		}
	}
}
