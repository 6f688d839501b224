package platform

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"google.golang.org/protobuf/proto"

	"github.com/switchboard-chat/switchboard/pkg/bus"
	deliveryv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/delivery/v1"
)

// A press of a button whose platform takes one answer, given by the
// gateway that received it (a Telegram callback query, which the client
// shows a spinner for until it is answered; a Teams invoke, answered in
// its HTTP response), is held by that gateway replica until the router
// has decided it: the replica subscribes to the press's subject
// (bus.Topology.PressSubject) before it publishes the press, and the
// router sends its answer there once it has handled the press (a
// SendRequested whose target carries the press's interaction and whose
// text, possibly empty, is what the presser is shown). A replica that
// gets the router's refusal of the press from delivery and does not hold
// it forwards it there too (AnswerPress). Core NATS: an answer lost, or
// one that comes after the hold ended, leaves the press to its
// gateway's answer without text when the hold ends, unless the gateway
// reads the answer the router also keeps (KeepPressAnswer, pressword.go).
// The hold's claim answers the platform once.
//
// A replica handed a press again (Telegram redelivers an update a poller
// whose lease moved did not confirm; a webhook delivery is retried) and
// told by the bus it is a duplicate cannot tell a press decided long
// ago from one the router has still to decide for another replica's
// hold: it asks (RetryPress), and a replica that holds the press keeps
// answering it.
//
// A platform whose press is answered by whichever replica the platform
// hands it again (a Teams invoke's retry, answered in its own HTTP
// response) holds the press again there, and asks the replicas that
// hold it for the router's answer they have (AskPress): an answer that
// came before the retry's hold is the retry's too.

// A replica told another holds the press leaves its answer to that
// holder, and watches it (WatchPress): whoever answers a press's query
// says so on the press's answered subject (PressHold.Answered,
// ConfirmPressAnswered), before its hold ends; a watch that finds the
// press held by no one without that word (the holder died, or lost its
// connection to the bus for longer than its grace), or has no word
// within its bound, leaves the query to its own replica to answer.

// PressHolder is implemented by the Runner's Conn: HoldPress starts
// holding the press with interaction id, until Close.
type PressHolder interface {
	HoldPress(id string) (*PressHold, error)
}

// PressHold is a press held for the router's answer.
type PressHold struct {
	nc *nats.Conn
	// answered is the press's answered subject (Answered); subject the
	// press's own, which handle listens on.
	answered, subject string
	handle            nats.MsgHandler
	// subMu guards sub, which HeldElsewhere replaces, and closed.
	subMu   sync.Mutex
	sub     *nats.Subscription
	closed  bool
	answer  chan *deliveryv1.SendRequested
	retried chan struct{}
	once    sync.Once
	// mu orders a retry's question (told the press is held, the asker
	// leaves it to this hold) and LetGo: once let go, no question is
	// told that. It also guards got.
	mu    sync.Mutex
	letGo bool
	// got is the router's answer as it came (AskPress), nil before.
	got []byte
	// since is when the hold began: a retry's question is told how long
	// ago (RetryPressSince).
	since time.Time
}

// Answer delivers the router's answer, once.
func (h *PressHold) Answer() <-chan *deliveryv1.SendRequested { return h.answer }

// Retried is signalled when another replica was handed the press again,
// found it on the bus already, and left it to this hold (RetryPress).
func (h *PressHold) Retried() <-chan struct{} { return h.retried }

// pressRetryHeader marks a message on a press's subject as another
// replica's retry of the press (RetryPress), not an answer.
const pressRetryHeader = "Switchboard-Press-Retry"

// pressHeldForHeader, on a hold's reply to a retry's question
// (RetryPressSince), is how long the press has been held (a Go duration,
// time.ParseDuration), on the holder's monotonic clock: the asker counts
// it back from its own clock. A time of day would be the holder's
// clock's, and one behind the asker's by seconds (a node whose time
// drifted) would make the hold look that much older, its watch ending
// early, as soon as the watch began for one behind by more than it.
const pressHeldForHeader = "Switchboard-Press-Held-For"

// pressAskHeader marks a message on a press's subject as another
// replica's question for the router's answer (AskPress), not an answer.
const pressAskHeader = "Switchboard-Press-Ask"

// Close stops holding the press: an answer that comes after finds no
// one. A nil hold closes nothing.
func (h *PressHold) Close() {
	if h == nil {
		return
	}
	h.once.Do(func() {
		h.subMu.Lock()
		defer h.subMu.Unlock()
		h.closed = true
		_ = h.sub.Unsubscribe()
	})
}

// HeldElsewhere reports whether a replica other than this hold's holds
// the press (RetryPress, which every hold answers, an older replica's
// too): asked with this hold off the press's subject, since this hold,
// which does not answer its own replica's question, would keep the bus
// from saying that no one else holds it. Asked after the press's
// publish (a duplicate), it finds the replica whose delivery the bus
// stored, which held the press before publishing it. What comes to the
// press's subject while the question is out misses this hold: the
// router's word then came to another holder too (AskPress gets it from
// it), or to none, the press being this replica's to answer. A closed
// hold asks nothing; an error is no answer. ctx, which bounds it, must
// have a deadline.
func (h *PressHold) HeldElsewhere(ctx context.Context, b *bus.Bus, platform, id string) (bool, error) {
	if h == nil {
		return false, errors.New("held elsewhere: no hold")
	}
	h.subMu.Lock()
	defer h.subMu.Unlock()
	if h.closed {
		return false, errors.New("held elsewhere: the hold is closed")
	}
	// The server has the unsubscription before the question: both go
	// on this connection, in order.
	if err := h.sub.Unsubscribe(); err != nil {
		return false, fmt.Errorf("held elsewhere: %w", err)
	}
	held, err := RetryPress(ctx, b, platform, id)
	sub, serr := h.nc.Subscribe(h.subject, h.handle)
	if serr == nil {
		h.sub = sub
		// Bounded by ctx as the question is, not by a flush's own 10 s:
		// an invoke waits on it. Unflushed, the hold is still the
		// subscriber the server gets next, and the error says to wait
		// for the word.
		serr = h.nc.FlushWithContext(ctx)
	}
	if serr != nil {
		return false, fmt.Errorf("held elsewhere: hold again: %w", serr)
	}
	return held, err
}

// Answered says on the press's answered subject that its query was
// answered, then closes the hold: a replica told the press is held here
// (RetryPress) and watching (PressWatch) leaves it answered. Said before
// the hold ends, on the connection the hold is on: a watch that finds
// the press held no more has the word already. A nil hold says nothing.
func (h *PressHold) Answered() {
	if h == nil {
		return
	}
	_ = h.nc.Publish(h.answered, nil)
	h.Close()
}

// LetGo stops holding the press without answering it, unless another
// replica was told meanwhile that this hold holds the press (a retry
// not taken from Retried): then the hold goes on, and retried is true,
// the press this hold's to answer. Decided under the lock the question
// is answered under, so that no replica is told the press is held by a
// hold that then lets it go. A nil hold lets go of nothing.
func (h *PressHold) LetGo() (retried bool) {
	if h == nil {
		return false
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	select {
	case <-h.retried:
		return true
	default:
	}
	h.letGo = true
	h.Close()
	return false
}

// HoldPress is PressHolder.HoldPress.
func (c *conn) HoldPress(id string) (*PressHold, error) { return HoldPress(c.r.bus, c.r.name, id) }

// HoldPress holds the press with interaction id on platform: it
// subscribes to the press's subject on b until the hold is closed.
func HoldPress(b *bus.Bus, platform, id string) (*PressHold, error) {
	if id == "" {
		return nil, errors.New("hold press: no interaction id")
	}
	h := &PressHold{nc: b.Conn(), answered: pressAnsweredSubject(b, platform, id), subject: b.Topology().PressSubject(platform, id),
		answer: make(chan *deliveryv1.SendRequested, 1), retried: make(chan struct{}, 1), since: time.Now()}
	h.handle = func(m *nats.Msg) {
		if m.Header.Get(pressRetryHeader) != "" {
			h.mu.Lock()
			defer h.mu.Unlock()
			if h.letGo {
				return // let go: the asker, told nothing, answers the press
			}
			select {
			case h.retried <- struct{}{}:
			default:
			}
			r := nats.NewMsg(m.Reply)
			r.Header.Set(pressHeldForHeader, time.Since(h.since).String())
			_ = m.RespondMsg(r)
			return
		}
		if m.Header.Get(pressAskHeader) != "" {
			// Only a hold with the answer replies: the asker takes the
			// first reply, and its own hold has none.
			h.mu.Lock()
			got := h.got
			h.mu.Unlock()
			if got != nil {
				_ = m.Respond(got)
			}
			return
		}
		req := &deliveryv1.SendRequested{}
		if err := proto.Unmarshal(m.Data, req); err != nil || req.GetTarget().GetInteraction().GetId() != id {
			return // not this press's answer (a hash collision) or not an answer
		}
		h.mu.Lock()
		if h.got == nil {
			h.got = m.Data
		}
		h.mu.Unlock()
		select {
		case h.answer <- req:
		default: // answered already: the first answer stands
		}
		if m.Reply != "" {
			_ = m.Respond(nil)
		}
	}
	sub, err := b.Conn().Subscribe(h.subject, h.handle)
	if err != nil {
		return nil, fmt.Errorf("hold press: %w", err)
	}
	h.sub = sub
	// The server has the subscription before the press is published (on
	// this connection too, after this).
	if err := b.Conn().Flush(); err != nil {
		h.Close()
		return nil, fmt.Errorf("hold press: %w", err)
	}
	return h, nil
}

// PublishPressAnswer sends req, the answer to the press its target's
// interaction names, to the replica that holds it, if one does; fire
// and forget (the router's answer to a press it decided, which it then
// keeps for replicas that hold the press later: KeepPressAnswer).
func PublishPressAnswer(b *bus.Bus, req *deliveryv1.SendRequested) error {
	ia := req.GetTarget().GetInteraction()
	data, err := proto.Marshal(req)
	if err != nil {
		return fmt.Errorf("encode press answer: %w", err)
	}
	if err := b.Conn().Publish(b.Topology().PressSubject(req.GetTarget().GetPlatform(), ia.GetId()), data); err != nil {
		return fmt.Errorf("publish press answer: %w", err)
	}
	return nil
}

// AnswerPress sends req, the answer to the press its target's
// interaction names (a refusal that delivery brought to a replica other
// than the press's holder), to the replica that holds it and waits for
// that replica to take it. held is false when no replica holds the
// press any more (its hold ended): the answer has nowhere to go.
func AnswerPress(ctx context.Context, b *bus.Bus, req *deliveryv1.SendRequested) (held bool, err error) {
	ia := req.GetTarget().GetInteraction()
	data, err := proto.Marshal(req)
	if err != nil {
		return false, fmt.Errorf("encode press answer: %w", err)
	}
	_, err = b.Conn().RequestWithContext(ctx, b.Topology().PressSubject(req.GetTarget().GetPlatform(), ia.GetId()), data)
	switch {
	case err == nil:
		return true, nil
	case errors.Is(err, nats.ErrNoResponders):
		return false, nil
	}
	return false, fmt.Errorf("answer press: %w", err)
}

// RetryPress tells the replica that holds the press with interaction id
// on platform, if one does, that this replica was handed the press
// again and the bus has it already (a duplicate): the holder keeps
// answering it (PressHold.Retried). held is false when no replica holds
// it: the press was decided, and is this replica's to answer. The
// caller's own hold of the press, if any, must be closed first.
func RetryPress(ctx context.Context, b *bus.Bus, platform, id string) (held bool, err error) {
	held, _, err = RetryPressSince(ctx, b, platform, id)
	return held, err
}

// RetryPressSince is RetryPress that also reports when the hold that
// answered began, on this replica's clock (zero when it does not say,
// an older replica's): a replica that leaves the press to it counts
// the time its platform still takes the press's answer from then, when
// that is earlier than when it was handed the press itself (the
// poller's lease moved, and the press came to it late). The holder says
// how long it has held the press (pressHeldForHeader), not since when,
// so that the replicas' clocks need not agree; counted back from the
// reply's arrival, the hold looks younger by the reply's way, never
// older.
func RetryPressSince(ctx context.Context, b *bus.Bus, platform, id string) (held bool, since time.Time, err error) {
	m := nats.NewMsg(b.Topology().PressSubject(platform, id))
	m.Header.Set(pressRetryHeader, "1")
	reply, err := b.Conn().RequestMsgWithContext(ctx, m)
	switch {
	case err == nil:
		if age, err := time.ParseDuration(reply.Header.Get(pressHeldForHeader)); err == nil && age > 0 {
			since = time.Now().Add(-age)
		}
		return true, since, nil
	case errors.Is(err, nats.ErrNoResponders):
		return false, time.Time{}, nil
	}
	return false, time.Time{}, fmt.Errorf("retry press: %w", err)
}

// pressAnsweredSubject is where whoever answers the press with
// interaction id on platform says so (ConfirmPressAnswered): a subject
// apart from the press's own, whose subscribers are its holders only,
// so that a question finds no responders once none holds it.
func pressAnsweredSubject(b *bus.Bus, platform, id string) string {
	return b.Topology().PressSubject(platform, id) + ".answered"
}

// ConfirmPressAnswered says that this replica answered the press with
// interaction id on platform, which it did not hold (PressHold.Answered
// is a holder's): replicas watching for the press's answer (PressWatch)
// leave it answered.
func ConfirmPressAnswered(b *bus.Bus, platform, id string) error {
	if err := b.Conn().Publish(pressAnsweredSubject(b, platform, id), nil); err != nil {
		return fmt.Errorf("confirm press answered: %w", err)
	}
	return nil
}

// PressWatch watches a press that another replica holds, for its
// holder's word that it answered it (WatchPress).
type PressWatch struct {
	b            *bus.Bus
	platform, id string
	sub          *nats.Subscription
	answered     chan *nats.Msg
}

// WatchPress starts watching the press with interaction id on platform
// for its holder's word that it answered it: started before the
// question whether one holds it (RetryPress), the word cannot come
// before the watch. The caller closes it.
func WatchPress(b *bus.Bus, platform, id string) (*PressWatch, error) {
	w := &PressWatch{b: b, platform: platform, id: id, answered: make(chan *nats.Msg, 1)}
	sub, err := b.Conn().ChanSubscribe(pressAnsweredSubject(b, platform, id), w.answered)
	if err != nil {
		return nil, fmt.Errorf("watch press: %w", err)
	}
	w.sub = sub
	return w, nil
}

// Close ends the watch. A nil watch closes nothing.
func (w *PressWatch) Close() {
	if w != nil {
		_ = w.sub.Unsubscribe()
	}
}

// Wait waits for the press's holder to say it answered the press, and
// reports whether it did: false when, asked every interval
// (RetryPress), no replica has held the press for grace and none said
// it answered it (its holder died, or lost its connection to the bus
// for longer than a reconnection takes, with the query unanswered), or
// when bound or ctx ends first. The caller then answers the query
// itself. A holder found absent and then holding the press again (it
// reconnected, and its subscription with it) is waited for on: taken
// over on one unanswered ask, its query was answered without its word.
func (w *PressWatch) Wait(ctx context.Context, bound, every, grace time.Duration) bool {
	end := time.NewTimer(bound)
	defer end.Stop()
	tick := time.NewTicker(every)
	defer tick.Stop()
	// gone is when the press was first found held by no one, since the
	// last ask that found it held; zero while it is held.
	var gone time.Time
	for {
		select {
		case <-w.answered:
			return true
		case <-end.C:
			return w.said()
		case <-ctx.Done():
			return w.said()
		case <-tick.C:
			if w.held(ctx, every) {
				gone = time.Time{}
				continue
			}
			// The holder's word comes before its hold ends, on one
			// connection, and this connection has it before the
			// question's reply that no one holds the press.
			if w.said() {
				return true
			}
			if gone.IsZero() {
				gone = time.Now()
			}
			if time.Since(gone) >= grace {
				return false
			}
		}
	}
}

// HandOn says on the press's answered subject that its query needs no
// answer from this replica's watchers: a replica whose hold of the
// press another replica was told holds it (PressHold.LetGo), and which
// leaves the query to the press's holder and watches it with w, says so
// to that replica, which leaves the query to it. w hears the word too,
// and drops it: it has it by the end of the round trip to the server,
// the word coming on w's connection. A holder's word that came in the
// meantime is dropped with it; the watch then takes the query over when
// the hold ends, and its answer is refused, the query answered already.
func (w *PressWatch) HandOn() error {
	if err := ConfirmPressAnswered(w.b, w.platform, w.id); err != nil {
		return err
	}
	if err := w.b.Conn().Flush(); err != nil {
		return fmt.Errorf("hand press on: %w", err)
	}
	w.said()
	return nil
}

// held asks whether a replica still holds the press; an error (no
// reply in time) is no answer, and the watch goes on.
func (w *PressWatch) held(ctx context.Context, timeout time.Duration) bool {
	rctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	held, err := RetryPress(rctx, w.b, w.platform, w.id)
	return held || err != nil
}

// Said reports whether the press's holder has said it answered the
// press, without waiting (a watch that ended on its own bound or
// context and asks once more).
func (w *PressWatch) Said() bool { return w.said() }

// said reports whether the holder's word came.
func (w *PressWatch) said() bool {
	select {
	case <-w.answered:
		return true
	default:
		return false
	}
}

// AskPress asks the replicas that hold the press with interaction id on
// platform for the router's answer one of them has (another replica's
// hold of a press this replica was handed again, which the bus has
// already). req is nil when none has it by the time ctx ends (none holds
// the press, or the router has not answered yet): the caller's own hold,
// in place before it asks, gets an answer that comes later.
func AskPress(ctx context.Context, b *bus.Bus, platform, id string) (*deliveryv1.SendRequested, error) {
	m := nats.NewMsg(b.Topology().PressSubject(platform, id))
	m.Header.Set(pressAskHeader, "1")
	reply, err := b.Conn().RequestMsgWithContext(ctx, m)
	switch {
	case errors.Is(err, nats.ErrNoResponders), errors.Is(err, context.DeadlineExceeded), errors.Is(err, context.Canceled), errors.Is(err, nats.ErrTimeout):
		return nil, nil
	case err != nil:
		return nil, fmt.Errorf("ask press: %w", err)
	}
	req := &deliveryv1.SendRequested{}
	if err := proto.Unmarshal(reply.Data, req); err != nil {
		return nil, fmt.Errorf("ask press: decode answer: %w", err)
	}
	if req.GetTarget().GetInteraction().GetId() != id {
		return nil, nil // another press's (a hash collision)
	}
	return req, nil
}
