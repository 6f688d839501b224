package platform

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/switchboard-chat/switchboard/pkg/gatewaystatus"
	"github.com/switchboard-chat/switchboard/pkg/kvwatch"
)

// pauseGate holds whether an operator paused this platform. changed is
// closed, and replaced, each time the platform is paused or resumed.
type pauseGate struct {
	mu      sync.Mutex
	paused  *gatewaystatus.Pause
	changed chan struct{}
}

func newPauseGate() *pauseGate { return &pauseGate{changed: make(chan struct{})} }

// set records p (nil: not paused) and reports whether the platform went
// from running to paused or back.
func (g *pauseGate) set(p *gatewaystatus.Pause) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	flipped := (g.paused == nil) != (p == nil)
	g.paused = p
	if flipped {
		close(g.changed)
		g.changed = make(chan struct{})
	}
	return flipped
}

func (g *pauseGate) get() (*gatewaystatus.Pause, <-chan struct{}) {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.paused, g.changed
}

// Paused reports whether an operator paused this platform, and why.
func (r *Runner) Paused() (bool, string) {
	p, _ := r.pause.get()
	if p == nil {
		return false, ""
	}
	return true, p.Reason
}

// unpaused runs f (the connection, or the lease and the connection) with
// a context that ends when the platform is paused, and while it is paused
// waits in StatePaused, until ctx ends. A paused holder's f returns after
// its connection stopped and its lease was released; a standby's before
// it took the lease; resumed, every replica starts over (a new lease
// election, the reconnect schedule from its start).
func (r *Runner) unpaused(ctx context.Context, f func(context.Context)) {
	for ctx.Err() == nil {
		p, changed := r.pause.get()
		if p != nil {
			r.setState(StatePaused, p.Reason)
			r.log.Warn("platform paused by an operator: not connecting", "reason", p.Reason, "by", p.By)
			select {
			case <-ctx.Done():
				return
			case <-changed:
			}
			if p, _ := r.pause.get(); p == nil {
				r.log.Info("platform resumed by an operator: connecting")
				r.setAttempts(0)
			}
			continue
		}
		runCtx, cancel := context.WithCancel(ctx)
		done := make(chan struct{})
		go func() {
			select {
			case <-changed:
				cancel()
			case <-done:
			}
		}()
		f(runCtx)
		close(done)
		cancel()
		if ctx.Err() == nil {
			if p, _ := r.pause.get(); p == nil {
				// f ended on its own (it does not, today): do not spin.
				sleep(ctx, time.Second)
			}
		}
	}
}

// startStatus opens the presence and pauses buckets, reads this
// platform's pause, and starts the presence writer and the pause
// watcher; stop ends both, deleting the replica's presence entry.
func (r *Runner) startStatus(ctx context.Context) (stop func(), err error) {
	js, topo := r.bus.JetStream(), r.bus.Topology()
	presence, err := gatewaystatus.PresenceWithTTL(ctx, js, topo, r.opts.PresenceTTL)
	if err != nil {
		return nil, err
	}
	pauses, err := gatewaystatus.Pauses(ctx, js, topo)
	if err != nil {
		return nil, err
	}
	sctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	// The watch returns once this platform's pause is read; ctx ending
	// meanwhile ends it.
	stopEarly := context.AfterFunc(ctx, cancel)
	defer stopEarly()
	watched, err := kvwatch.Follow(sctx, pauses, r.name, kvwatch.Options{Log: r.log}, func(value []byte, ok bool) {
		var p *gatewaystatus.Pause
		if ok {
			p = gatewaystatus.Decode(value)
		}
		r.pause.set(p)
	})
	if err != nil {
		cancel()
		return nil, fmt.Errorf("watch pause of %s: %w", r.name, err)
	}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); r.writePresence(sctx, presence, pauses) }()
	return func() { cancel(); wg.Wait(); <-watched }, nil
}

// writePresence keeps this replica's presence entry: at once, after every
// state change and every PresenceTTL/3, when it also reads the pause
// again (in case the watcher missed it); the entry is deleted when ctx
// ends.
func (r *Runner) writePresence(ctx context.Context, presence, pauses jetstream.KeyValue) {
	every := max(r.opts.PresenceTTL/3, 50*time.Millisecond)
	t := time.NewTicker(every)
	defer t.Stop()
	js, topo := r.bus.JetStream(), r.bus.Topology()
	for {
		wctx, cancel := context.WithTimeout(ctx, every)
		if err := gatewaystatus.Put(wctx, presence, r.replica()); err != nil && ctx.Err() == nil {
			r.log.Warn("write gateway presence failed", "err", err)
			if bucketGone(err) {
				if kv, err := gatewaystatus.PresenceWithTTL(wctx, js, topo, r.opts.PresenceTTL); err == nil {
					presence = kv
				}
			}
		}
		cancel()
		select {
		case <-ctx.Done():
			rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
			if err := gatewaystatus.Remove(rctx, presence, r.name, r.p.Account(), r.opts.Instance); err != nil {
				r.log.Debug("remove gateway presence", "err", err)
			}
			cancel()
			return
		case <-r.changed:
		case <-t.C:
			gctx, cancel := context.WithTimeout(ctx, every)
			if p, err := gatewaystatus.Get(gctx, pauses, r.name); err == nil {
				r.pause.set(p)
			}
			cancel()
		}
	}
}

// replica is this replica's presence entry.
func (r *Runner) replica() gatewaystatus.Replica {
	r.mu.Lock()
	defer r.mu.Unlock()
	return gatewaystatus.Replica{
		Platform: r.name, Account: r.p.Account(), Instance: r.opts.Instance,
		State: string(r.state), Reason: r.reason, Attempts: r.attempts, Since: r.since.UTC(),
	}
}
