package teams

import (
	"container/list"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"sync"
	"sync/atomic"
	"time"

	deliveryv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/delivery/v1"
	"github.com/switchboard-chat/switchboard/pkg/platform"
)

// A press's invoke is held for the router's answer under an
// interaction id made from the press's own identity (the app, the
// conversation and the activity id: its bus dedupe id), not a random
// one, so that the Bot Framework's retry of the invoke (the first HTTP
// request timed out, or its replica died), whose press the bus says it
// has already, holds the very press the router decides: on this
// replica it shares the first delivery's hold (heldInvoke), on another
// it subscribes to the same subject, and the router's answer, or its
// refusal through delivery, reaches every replica that holds it; one
// that came before the retry held it is asked of the replicas holding
// it on (askElsewhere). The
// retry is answered with it when it comes within the retry's own hold.
// The router also keeps its word where every replica reads it
// (platform.KeepPressAnswer), and a replica marks there the press it
// published (markPublished): a retry the bus calls a duplicate reads
// that first (answerAlone). The word there is the retry's answer at
// once, whether the replicas that held the press live or not, and
// however many retries come together. The mark without the word is a
// press not decided yet, whose first replica may have died: the retry
// holds it and waits for the word. Neither there (the press was
// decided longer ago than the bucket keeps it, or the bucket could not
// be read), a retry whose replica finds no other replica holding the
// press (the replica whose delivery the bus stored held it before
// publishing it) is of a press decided long before, every hold of it
// ended: no holder has the word to give, and the retry is answered at
// once, with the word only if this replica's hold has it already.
// A press stays held for a while after a delivery of it ended, its
// publish failed or its answer maybe not taken (keepForRetry).

// heldInvoke is a press held on this replica for the router's answer,
// shared by every delivery of its invoke this replica answers.
type heldInvoke struct {
	id string
	// ready is closed once hold is set: nil when the press could not be
	// held.
	ready chan struct{}
	hold  *platform.PressHold
	// answered is closed once the router's answer is in (settle), with
	// text.
	answered chan struct{}
	text     string
	settled  sync.Once
	// released is closed when the last user lets go.
	released chan struct{}
	// alone is set once a delivery the bus called a duplicate created
	// this hold and found no other replica holding the press
	// (answerAlone).
	alone atomic.Bool
	// users are the deliveries waiting on it (guarded by invokesMu).
	users int
}

// interactionID names the press of the invoke whose event id is
// eventID (its conversation and activity id): the same for every
// delivery of the invoke.
func interactionID(account, eventID string) string {
	sum := sha256.Sum256([]byte("teams:" + account + ":" + eventID))
	return hex.EncodeToString(sum[:16])
}

// holdInvoke holds the press with interaction id for the router's
// answer, or joins this replica's hold of it (a retry while the first
// delivery waits; created is false): the hold is in place when it
// returns, before the press is published. The caller lets go with
// releaseInvoke.
func (p *Platform) holdInvoke(h platform.PressHolder, id string) (inv *heldInvoke, created bool) {
	p.invokesMu.Lock()
	if held := p.invokes[id]; held != nil {
		held.users++
		p.invokesMu.Unlock()
		<-held.ready
		return held, false
	}
	inv = &heldInvoke{id: id, ready: make(chan struct{}), answered: make(chan struct{}), released: make(chan struct{}), users: 1}
	if p.invokes == nil {
		p.invokes = map[string]*heldInvoke{}
	}
	p.invokes[id] = inv
	p.invokesMu.Unlock()
	hold, err := h.HoldPress(id)
	if err != nil {
		p.log.Warn("hold teams button press for the router's answer; answered without it", "err", err)
		// Not kept: a later delivery tries anew.
		p.invokesMu.Lock()
		if p.invokes[id] == inv {
			delete(p.invokes, id)
		}
		p.invokesMu.Unlock()
		close(inv.ready)
		return inv, true
	}
	inv.hold = hold
	close(inv.ready)
	go func() {
		select {
		case req := <-hold.Answer():
			inv.settle(req.GetText())
		case <-inv.released:
		}
	}()
	return inv, true
}

// answerAlone reports whether a delivery of inv's press that the bus
// called a duplicate is answered at once (awaitAnswer): when this
// delivery created the hold (created) and no other replica holds the
// press now, the press was decided long ago and every hold of it
// ended, so no holder has the router's word to give; a later duplicate
// that joins this hold is answered at once too. Asked after the
// publish, not before this replica's hold: the replica whose delivery
// the bus stored held the press before publishing it, so a first
// delivery racing this one is found, where a question asked before
// could come before its hold. A hold created by a delivery the bus
// stored (the first, still waiting), one held elsewhere too, or one
// whose question has no answer (the bus is slow or out of reach) waits
// for the word (askElsewhere).
//
// The router's word kept for the press (keptWord) comes first: with it
// the delivery is answered at once, with the word; with the press's
// mark alone (markPublished) it waits for the word, the press not
// decided yet, whether a replica holds it or its holder died. Only with
// neither (or when the bucket cannot be read) is another replica asked.
func (p *Platform) answerAlone(ctx context.Context, inv *heldInvoke, created bool) bool {
	if inv == nil || inv.hold == nil {
		return false
	}
	switch word, published, ok := p.keptWord(ctx, inv.id); {
	case word != nil:
		inv.settle(word.GetText())
		return true
	case ok && published:
		return false
	}
	if created {
		ctx, cancel := context.WithTimeout(ctx, p.cfg.PressHold)
		defer cancel()
		held, err := inv.hold.HeldElsewhere(ctx, p.bus, p.Name(), inv.id)
		if err != nil {
			p.log.Debug("ask whether another replica holds a teams press", "err", err)
		}
		if err == nil && !held {
			inv.alone.Store(true)
		}
	}
	return inv.alone.Load()
}

// settle takes the router's answer to the press, the first that comes
// in (its own hold's, or another replica's that askElsewhere got).
func (inv *heldInvoke) settle(text string) {
	inv.settled.Do(func() {
		inv.text = text
		close(inv.answered)
	})
}

// askElsewhere asks the replicas that hold inv's press for the router's
// answer they have (platform.AskPress), for a delivery the bus says is
// a duplicate: the answer may have come to the replica of an earlier
// delivery (its publish failed, or its request ended, keepForRetry)
// before this replica held the press. Off the handler: an answer that
// comes to the hold meanwhile is not kept waiting. Bounded by
// Config.PressHold, as the wait for it is.
func (p *Platform) askElsewhere(inv *heldInvoke) {
	if inv == nil || inv.hold == nil {
		return
	}
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), p.cfg.PressHold)
		defer cancel()
		go func() {
			select {
			case <-inv.answered:
			case <-inv.released:
			}
			cancel()
		}()
		req, err := platform.AskPress(ctx, p.bus, p.Name(), inv.id)
		if err != nil {
			p.log.Debug("ask other replicas for the router's answer to a press handed again", "err", err)
			return
		}
		if req != nil {
			inv.settle(req.GetText())
		}
	}()
}

// retryHold is how long a press stays held for the Bot Framework's
// retry of its invoke after a delivery of it ended (keepForRetry): one
// whose publish failed (the bus may have stored the press, its
// acknowledgement lost, and the router then decides it), or one whose
// answer may not have reached the Bot Framework (it gave up waiting:
// the router's word came after its request ended). Either is retried
// within seconds; a retry later than this finds no hold here and is
// answered without the router's word if that came before it.
const retryHold = 30 * time.Second

// maxKeeps bounds the presses a replica keeps holding for a retry
// (keepForRetry): each is a subscription on the bus, a goroutine and a
// timer for retryHold, so a flood of presses (signed ones: the Bot
// Framework's token is checked first) would otherwise hold about
// presses/s × retryHold of them. Past it the oldest kept press is let
// go: its retry, if one still comes, is the least likely.
const maxKeeps = 1024

// keepForRetry keeps holding inv, the press of an invoke whose delivery
// ends, for retryHold: a retry on this replica joins the hold
// (holdInvoke) and gets the router's answer, or its refusal, that came
// meanwhile, or comes. At the cap (maxKeeps) the oldest kept press is
// let go first. The caller still releases its own use of inv.
func (p *Platform) keepForRetry(inv *heldInvoke) {
	if inv == nil || inv.hold == nil {
		return
	}
	p.invokesMu.Lock()
	if p.stopped {
		p.invokesMu.Unlock()
		return // the endpoint serves no retry any more
	}
	inv.users++
	k := &keptInvoke{inv: inv}
	if p.keeps == nil {
		p.keeps = list.New()
	}
	k.elem = p.keeps.PushBack(k)
	k.timer = time.AfterFunc(p.keepTime(), func() { p.endKeep(k) })
	oldest := p.overCap()
	p.invokesMu.Unlock()
	if oldest != nil {
		p.letGoEarly(oldest)
	}
}

// keptInvoke is one keepForRetry's use of a press, let go by its timer,
// by endKeeps or by the cap (letGoEarly), whichever comes first: the
// one that takes it off keeps (elem nil after) releases it.
type keptInvoke struct {
	inv   *heldInvoke
	timer *time.Timer
	elem  *list.Element // in Platform.keeps, nil once taken off
}

// keepCap is how many presses keepForRetry holds on at most: maxKeeps
// unless a test says otherwise.
func (p *Platform) keepCap() int {
	if p.maxKeeps > 0 {
		return p.maxKeeps
	}
	return maxKeeps
}

// keepTime is how long keepForRetry holds a press on: retryHold unless
// a test says otherwise.
func (p *Platform) keepTime() time.Duration {
	if p.keepFor > 0 {
		return p.keepFor
	}
	return retryHold
}

// overCap takes the oldest kept press off keeps when there are more
// than the cap (maxKeeps unless a test says otherwise), for the caller
// to let go once the lock is released. Called with invokesMu held.
func (p *Platform) overCap() *keptInvoke {
	if p.keeps.Len() <= p.keepCap() {
		return nil
	}
	k := p.keeps.Remove(p.keeps.Front()).(*keptInvoke)
	k.elem = nil
	return k
}

// letGoEarly lets go of k, taken off keeps at the cap, before its time:
// its timer, if already running, finds it taken and releases nothing.
// Counted, and logged once per burst (at most once each retryHold), not
// for each press.
func (p *Platform) letGoEarly(k *keptInvoke) {
	k.timer.Stop()
	p.releaseInvoke(k.inv)
	keepsLetGo.Inc()
	now := time.Now()
	p.invokesMu.Lock()
	quiet := now.Sub(p.capLogged) >= retryHold
	if quiet {
		p.capLogged = now
	}
	p.invokesMu.Unlock()
	if quiet {
		p.log.Warn("teams presses held for a retry at the cap; letting go of the oldest first",
			"cap", p.keepCap(), "metric", "switchboard_teams_kept_presses_let_go_total")
	}
}

// endKeep lets go of k when its time is up, unless endKeeps or the cap
// did.
func (p *Platform) endKeep(k *keptInvoke) {
	p.invokesMu.Lock()
	ok := k.elem != nil
	if ok {
		p.keeps.Remove(k.elem)
		k.elem = nil
	}
	p.invokesMu.Unlock()
	if ok {
		p.releaseInvoke(k.inv)
	}
}

// startKeeps lets keepForRetry hold presses on (Connect, serving again).
func (p *Platform) startKeeps() {
	p.invokesMu.Lock()
	p.stopped = false
	p.invokesMu.Unlock()
}

// endKeeps lets go at once of every press held on for a retry, as the
// endpoint stops serving (Connect returns): the Run that returns leaves
// no hold on the bus, nor a goroutine waiting for its answer, for
// retryHold after.
func (p *Platform) endKeeps() {
	p.invokesMu.Lock()
	p.stopped = true
	var keeps []*keptInvoke
	if p.keeps != nil {
		for e := p.keeps.Front(); e != nil; e = e.Next() {
			k := e.Value.(*keptInvoke)
			k.elem = nil
			keeps = append(keeps, k)
		}
		p.keeps.Init()
	}
	p.invokesMu.Unlock()
	for _, k := range keeps {
		k.timer.Stop()
		p.releaseInvoke(k.inv)
	}
}

// releaseInvoke lets go of inv, held by holdInvoke; the last to let go
// ends the hold. A nil inv releases nothing.
func (p *Platform) releaseInvoke(inv *heldInvoke) {
	if inv == nil {
		return
	}
	p.invokesMu.Lock()
	inv.users--
	last := inv.users == 0
	if last && p.invokes[inv.id] == inv {
		delete(p.invokes, inv.id)
	}
	p.invokesMu.Unlock()
	if last && inv.hold != nil {
		close(inv.released)
		inv.hold.Close()
	}
}

// awaitAnswer waits for the router's answer to a held press, up to
// Config.PressHold, and returns its text ("" for none, or when the
// press is not held), or, when none came by then, the word the router
// kept for the press (keptWord). alone (answerAlone) waits for
// nothing: the word if this replica's hold has it, else none.
func (p *Platform) awaitAnswer(ctx context.Context, inv *heldInvoke, alone bool) string {
	if inv == nil || inv.hold == nil {
		return ""
	}
	if alone {
		select {
		case <-inv.answered:
			return inv.text
		default:
			return ""
		}
	}
	t := time.NewTimer(p.cfg.PressHold)
	defer t.Stop()
	select {
	case <-inv.answered:
		return inv.text
	case <-t.C:
		// The word may have been published before this hold (a retry's
		// whose first replica died) and then kept: the router keeps it
		// after the publish, so a retry may read the bucket before it.
		if word, _, _ := p.keptWord(ctx, inv.id); word != nil {
			inv.settle(word.GetText())
			return inv.text
		}
	case <-ctx.Done():
	}
	return ""
}

// pressWordRead bounds a read of the router's word kept for a press
// (keptWord), or the write of its mark (markPublished): an invoke waits
// on it.
const pressWordRead = time.Second

// keptWord reads the router's word kept for the press with interaction
// id, where every replica reads it (platform.PressWord): word is nil
// without it, and published tells whether the press was marked
// published (markPublished). ok is false when the bucket could not be
// read: logged, and the caller goes on as without the bucket.
func (p *Platform) keptWord(ctx context.Context, id string) (word *deliveryv1.SendRequested, published, ok bool) {
	if p.bus == nil {
		return nil, false, false
	}
	ctx, cancel := context.WithTimeout(ctx, pressWordRead)
	defer cancel()
	word, published, err := platform.PressWord(ctx, p.bus, p.Name(), id)
	if err != nil {
		p.log.Warn("read the router's word on a teams button press; answering as without it", "err", err)
		return nil, false, false
	}
	return word, published, true
}

// markPublished marks inv's press published (platform.MarkPress), once
// its delivery put it on the bus or may have (a failed publish may have
// stored it): a retry the bus calls a duplicate and finds the mark
// without the router's word then waits for the word, also when no
// replica holds the press any more (answerAlone). Best effort: without
// the mark, such a retry is answered at once without the word.
func (p *Platform) markPublished(ctx context.Context, inv *heldInvoke) {
	if inv == nil || inv.hold == nil || p.bus == nil {
		return
	}
	// Also when the request has ended (a failed publish's ctx may be
	// over): its retry is the one that reads the mark.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), pressWordRead)
	defer cancel()
	if err := platform.MarkPress(ctx, p.bus, p.Name(), inv.id); err != nil {
		p.log.Warn("mark a teams button press published", "err", err)
	}
}
