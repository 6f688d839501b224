package delivery

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/switchboard-chat/switchboard/pkg/bus"
	deliveryv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/delivery/v1"
	repliesv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/replies/v1"
	"github.com/switchboard-chat/switchboard/pkg/panics"
)

// typing keeps typing indicators up while turns run: SEND_OP_TYPING every
// TypingInterval until the final answer, an error or an interrupt, and at
// most TypingMax.
type typing struct {
	s  *Service
	mu sync.Mutex
	m  map[string]*indicator
	// paused are turns whose indicator is paused while a tool call waits
	// for the user's approval, with when it was paused; housekeeping
	// forgets those whose end never reached this replica (prunePaused).
	paused map[string]time.Time
	wg     sync.WaitGroup
}

// indicator is one turn's running typing indicator.
type indicator struct {
	cancel context.CancelFunc
	// sent is closed once the indicator's first request was made (or
	// will never be): the turn's end waits for it (halt).
	sent chan struct{}
	mu   sync.Mutex
	// answered is closed once the request last made was answered (or
	// given up on): the turn's end waits for it too, a moment at most.
	answered chan struct{}
	// halting: the turn's end is waiting; no request is made after it.
	halting bool
}

// begin marks a request about to be made; the returned channel is
// closed once it is answered. ok is false once the indicator halts:
// the request is not to be made.
func (in *indicator) begin() (answered chan struct{}, ok bool) {
	in.mu.Lock()
	defer in.mu.Unlock()
	if in.halting {
		return nil, false
	}
	in.answered = make(chan struct{})
	return in.answered, true
}

// halted makes no more requests begin, and returns the channel of the
// request last made (nil: none).
func (in *indicator) halted() chan struct{} {
	in.mu.Lock()
	defer in.mu.Unlock()
	in.halting = true
	return in.answered
}

// typingStartWithin is how long after a gateway got a typing request it
// may still start it (bus.HeaderStartWithin): past it, the gateway gives
// it up. A typing request carried out after the answer shows
// "typing…" under it for 5–10 s.
const typingStartWithin = 750 * time.Millisecond

// typingAnswerWait bounds how long a turn's end waits for the answer to
// its indicator's request in flight, once its first request was made.
// It is only typing: a gateway that hangs on it must not hold the
// turn's end, and its partition, for the send timeout. Longer than
// typingStartWithin by the request's way to the gateway: a request not
// answered by then was given up, or started in time and is slow at the
// platform (carried out, or a slow platform would never show typing).
const typingAnswerWait = time.Second

// halt stops the indicator once its request in flight (the first, or a
// later one the indicator repeats) is done: the gateway gets that
// request before anything that follows the turn's end (the answer, the
// final typing request of an interrupted turn), which a stop cutting it
// short on a busy machine (the request not yet made) left the gateway
// without, and which a request answered late (a slow gateway) would
// follow. The wait for the first request to be made needs only this
// machine to run the indicator; the wait for its answer is bounded by
// typingAnswerWait, by which time a gateway that did not answer gave
// the request up or has it under way at the platform (typingStartWithin).
func (in *indicator) halt() {
	<-in.sent
	if answered := in.halted(); answered != nil {
		t := time.NewTimer(typingAnswerWait)
		defer t.Stop()
		select {
		case <-answered:
		case <-t.C:
		}
	}
	in.cancel()
}

func newTyping(s *Service) *typing {
	return &typing{s: s, m: map[string]*indicator{}, paused: map[string]time.Time{}}
}

// typingHook, when set (tests only), runs before an indicator's first
// request, with the indicator's context.
var typingHook atomic.Pointer[func(ctx context.Context, turn string)]

// pause stops the turn's indicator until resume, as Hermes does while an
// approval is awaited: Slack's status hides the box the user types
// /approve in.
func (t *typing) pause(turn string) {
	t.mu.Lock()
	in, ok := t.m[turn]
	if ok {
		delete(t.m, turn)
		t.paused[turn] = time.Now()
	}
	t.mu.Unlock()
	if ok {
		in.halt()
	}
}

// resume starts a paused indicator again (the turn went on).
func (t *typing) resume(ctx context.Context, ev *repliesv1.ReplyEvent) {
	t.mu.Lock()
	_, paused := t.paused[ev.GetTurnId()]
	delete(t.paused, ev.GetTurnId())
	t.mu.Unlock()
	if paused {
		t.start(ctx, ev)
	}
}

// done stops the indicator for good: the turn ended.
func (t *typing) done(turn string) {
	t.stop(turn)
	t.mu.Lock()
	delete(t.paused, turn)
	t.mu.Unlock()
}

// start begins the indicator; its sends stay in the trace of ctx (the
// reply that started the turn) but outlive ctx.
func (t *typing) start(ctx context.Context, ev *repliesv1.ReplyEvent) {
	turn := ev.GetTurnId()
	t.mu.Lock()
	defer t.mu.Unlock()
	if _, ok := t.m[turn]; ok || turn == "" {
		return
	}
	// ctx is the reply consumer's: it ends when this replica lets go of
	// the partition, and the indicator stops with it (the next owner
	// shows its own). It outlives the event's handler.
	ctx, cancel := context.WithTimeout(ctx, t.s.cfg.TypingMax)
	in := &indicator{cancel: cancel, sent: make(chan struct{})}
	t.m[turn] = in
	var sent sync.Once
	sentDone := func() { sent.Do(func() { close(in.sent) }) }
	t.wg.Add(1)
	go func() {
		defer t.wg.Done()
		defer t.forget(turn, in)
		defer sentDone()
		// Best effort: a panic stops this turn's indicator (recovered,
		// logged and counted), not the replica.
		_ = panics.Recover(t.s.log, "delivery_typing", func() error {
			if h := typingHook.Load(); h != nil {
				(*h)(ctx, turn)
			}
			tick := time.NewTicker(t.s.cfg.TypingInterval)
			defer tick.Stop()
			// reasked: a request given up was asked again since the
			// last tick waited for.
			reasked := false
			for n := 0; ; n++ {
				req := t.s.request(ev, fmt.Sprintf("%s:typing:%d", turn, n), deliveryv1.SendOp_SEND_OP_TYPING)
				sent, late := t.send(ctx, in, req, sentDone)
				if !sent {
					return nil // halted: the turn's end is on its way
				}
				if late && !reasked {
					// The gateway gave the request up: it waited for a
					// send slot past its bound (a busy chat), and the
					// indicator would lapse until the next refresh.
					// Asked again at once (a slot just freed), with a
					// bound of its own, so it still never shows after
					// the answer; a tick due meanwhile is this request.
					// Once per interval only: a gateway that stays
					// saturated gives every request up, and asking again
					// on each would send them several times as often as
					// the interval, to a gateway already short of slots.
					reasked = true
					select {
					case <-ctx.Done():
						return nil
					case <-tick.C:
					default:
					}
					continue
				}
				select {
				case <-ctx.Done():
					return nil
				case <-tick.C:
				}
				reasked = false
			}
		}, "turn_id", turn)
	}()
}

// send makes one of in's typing requests, to start within
// typingStartWithin at the gateway, unless in halts (sent false); made
// runs as it goes. late reports that the gateway gave it up, not
// started within that time (bus.LateTyping).
func (t *typing) send(ctx context.Context, in *indicator, req *deliveryv1.SendRequested, made func()) (sent, late bool) {
	answered, ok := in.begin()
	if !ok {
		return false, false
	}
	defer close(answered)
	made()
	hdr := nats.Header{bus.HeaderStartWithin: []string{strconv.FormatInt(typingStartWithin.Milliseconds(), 10)}}
	rec, err := t.s.progressWith(ctx, req, hdr)
	return true, err == nil && !rec.GetOk() && strings.HasPrefix(rec.GetError(), bus.LateTyping)
}

// forget takes in, which ended (its turn's indicator ran out or was
// stopped), out of the running indicators, unless another took its
// place since (the turn went on after a pause).
func (t *typing) forget(turn string, in *indicator) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.m[turn] == in {
		delete(t.m, turn)
	}
	in.cancel()
}

func (t *typing) stop(turn string) {
	t.mu.Lock()
	in, ok := t.m[turn]
	delete(t.m, turn)
	t.mu.Unlock()
	if ok {
		in.halt()
	}
}

// prunePaused forgets turns paused before cutoff: their end (the answer,
// an error) went to another replica after the partition moved, or never
// came, and nothing else would take them out.
func (t *typing) prunePaused(cutoff time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for turn, at := range t.paused {
		if at.Before(cutoff) {
			delete(t.paused, turn)
		}
	}
}

// pausedLen is how many turns are paused.
func (t *typing) pausedLen() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.paused)
}

func (t *typing) stopAll() {
	t.mu.Lock()
	for turn, in := range t.m {
		in.cancel() // the replica stops: no wait for a first request
		delete(t.m, turn)
	}
	clear(t.paused)
	t.mu.Unlock()
	t.wg.Wait()
}
