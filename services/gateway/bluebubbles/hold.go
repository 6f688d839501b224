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

// maxHeld bounds the messages a replica has not yet published; past it
// a call is answered 500 and its message is lost, as before there was a
// hold.
const maxHeld = 1000

// holdRetry is the pause between two attempts to publish a held message.
const holdRetry = time.Second

// drainWait is how long a stopping gateway, once its webhook no longer
// takes calls, keeps publishing the messages it holds. With the webhook
// server's 5 s shutdown grace (platform.ServeWebhook) it stays within
// the 10 s an HTTP gateway's stop is given before its sends' drain
// (deploy's gatewayDrain), well under Kubernetes' default 30 s.
const drainWait = 5 * time.Second

// hold publishes the webhook's messages, each chat's one at a time in
// the order their calls arrived, and keeps those the bus could not take
// until it can. BlueBubbles posts a webhook once and never again,
// whatever the answer: a message answered 500 was lost. A held one waits
// in the gateway until the bus is back (a replica that stops meanwhile
// keeps publishing up to drainWait, then loses what it still holds, and
// logs how much).
//
// Every message of a chat goes through the chat's one queue, not only
// those that follow a held one: two calls that each published for
// themselves could reach the bus in either order, a later one first when
// the bus came back while an earlier one's attempt was still failing,
// and a chat's messages must reach the bus in the order they were
// written. Chats do not wait for each other: each queue has its own
// publisher, so a slow publish in one chat delays no other.
type hold struct {
	conn    platform.Deliverer
	log     *slog.Logger
	ack     time.Duration
	max     int
	stopped <-chan struct{}
	// giveUp ends when the drain is over: publishing stops, an attempt
	// in flight included (giveUpNow ends it).
	giveUp    context.Context
	giveUpNow context.CancelFunc
	// publishers are the chats' publishers running.
	publishers sync.WaitGroup

	mu sync.Mutex
	// closed: close began; no message is taken any more.
	closed bool
	// chats are the queues by chat id, oldest first; a chat is in the
	// map while its publisher runs.
	chats map[string][]*heldMessage
	// n counts the messages of every queue, bounded by max.
	n int
	// failing: the last attempt failed (the bus is out of reach), so a
	// new message will wait: its call is answered at once.
	failing bool
}

// heldMessage is a message waiting for its turn; first gets the outcome of
// its first attempt (buffered: the call may have been answered already).
type heldMessage struct {
	ev    *eventsv1.MessageReceived
	first chan attemptResult
}

type attemptResult struct {
	acc platform.Accepted
	err error
}

// newHold is a hold that takes messages until ctx ends, and publishes
// them until close gives up.
func newHold(ctx context.Context, conn platform.Deliverer, log *slog.Logger, ack time.Duration, max int) *hold {
	giveUp, giveUpNow := context.WithCancel(context.Background())
	return &hold{conn: conn, log: log, ack: ack, max: max, stopped: ctx.Done(),
		giveUp: giveUp, giveUpNow: giveUpNow, chats: map[string][]*heldMessage{}}
}

// close waits, once the webhook no longer takes calls, up to limit for
// the held messages to be published, each chat's in order, then gives
// up what is left: each chat's publisher logs its loss, and close
// returns once all have.
func (h *hold) close(limit time.Duration) {
	h.mu.Lock()
	h.closed = true
	h.mu.Unlock()
	done := make(chan struct{})
	go func() {
		h.publishers.Wait()
		close(done)
	}()
	t := time.NewTimer(limit)
	defer t.Stop()
	select {
	case <-done:
	case <-t.C:
	}
	h.giveUpNow()
	<-done
}

// add queues ev behind its chat's messages not yet published. It returns
// nil when the hold is full or the webhook stopped serving, and whether
// the bus was out of reach at the last attempt (ev then waits an outage
// out).
func (h *hold) add(ev *eventsv1.MessageReceived) (q *heldMessage, behindHeld bool) {
	select {
	case <-h.stopped:
		return nil, false
	default:
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed || h.n >= h.max {
		return nil, false
	}
	chat := ev.GetSource().GetChatId()
	q = &heldMessage{ev: ev, first: make(chan attemptResult, 1)}
	queue, running := h.chats[chat]
	h.chats[chat] = append(queue, q)
	h.n++
	if !running {
		h.publishers.Add(1)
		go func() {
			defer h.publishers.Done()
			h.drain(chat)
		}()
	}
	return q, h.failing
}

// drain publishes chat's queued messages, oldest first, each until the
// bus takes it (or refuses it for good), and ends when none is left or
// the hold gives up (close).
func (h *hold) drain(chat string) {
	for {
		h.mu.Lock()
		queue := h.chats[chat]
		if len(queue) == 0 {
			delete(h.chats, chat)
			h.mu.Unlock()
			return
		}
		q := queue[0]
		h.mu.Unlock()
		if !h.publish(q) {
			h.mu.Lock()
			n := len(h.chats[chat])
			h.n -= n
			delete(h.chats, chat)
			h.mu.Unlock()
			h.log.Error("bluebubbles messages held for the bus lost: the gateway stopped before the bus took them",
				"chat", redact(chat), "count", n)
			return
		}
		h.mu.Lock()
		h.chats[chat] = h.chats[chat][1:]
		h.n--
		h.mu.Unlock()
	}
}

// publish delivers q until the bus takes it, telling q.first the
// outcome of the first attempt; false when the hold gave up first (an
// attempt in flight is cut short).
func (h *hold) publish(q *heldMessage) bool {
	for attempt := 0; ; attempt++ {
		ctx, cancel := context.WithTimeout(h.giveUp, h.ack)
		acc, err := h.conn.Deliver(ctx, q.ev)
		cancel()
		ok := err == nil || errors.Is(err, platform.ErrRejected)
		h.mu.Lock()
		h.failing = !ok
		h.mu.Unlock()
		if attempt == 0 {
			q.first <- attemptResult{acc: acc, err: err}
		}
		if ok {
			if attempt > 0 {
				h.log.Info("bluebubbles held message published", "guid", q.ev.GetEventId())
			}
			return true
		}
		if h.giveUp.Err() != nil {
			return false
		}
		select {
		case <-h.giveUp.Done():
			return false
		case <-time.After(holdRetry):
		}
	}
}
