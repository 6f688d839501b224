package delivery

import (
	"context"
	"fmt"
	"slices"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/switchboard-chat/switchboard/pkg/bus"
)

// A replica killed while it sends outbox rows (kill -9) leaves them
// claimed until their lease runs out (delivery.lease, 30 s), and every
// later row of their chats waits behind them: the chat's answers came
// that much late. So each replica answers on a core NATS subject of its
// own (bus.Topology.DeliveryAliveSubject) while it runs, and every
// goneEvery each replica asks the others that are sending rows under a
// lease: NATS's immediate "no responders" (the replica's connection
// closed) means it is gone, and its rows' leases end at once, so the next
// claim takes them over (sent again under the same idempotency keys,
// which the gateways answer once). A question not answered in time, as
// a replica whose NATS connection is down, counts as alive: its rows
// wait out their leases, as before. So does a replica whose questions
// got no responders for less than bus.GoneGrace, from the answer to the
// first (bus.Silence): NATS answers so for one whose connection dropped
// (its server restarted, its cluster node left) until it has
// reconnected, though it runs and its send goes on.

// goneEvery is how often a replica looks for rows being sent by a
// replica that is gone.
const goneEvery = time.Second

// serveAlive answers the other replicas' question whether this one still
// runs. Subscribed before the first send and unsubscribed after the last
// ended.
func (s *Service) serveAlive() (*nats.Subscription, error) {
	sub, err := s.bus.Conn().Subscribe(s.bus.Topology().DeliveryAliveSubject(s.owner), func(m *nats.Msg) {
		if err := m.Respond(nil); err != nil {
			s.log.Debug("answer alive question", "err", err)
		}
	})
	if err != nil {
		return nil, fmt.Errorf("subscribe delivery alive question: %w", err)
	}
	return sub, nil
}

// takeOverGone releases, every goneEvery until ctx ends, the rows of the
// replicas that are gone (releaseGone).
func (s *Service) takeOverGone(ctx context.Context) error {
	t := time.NewTicker(goneEvery)
	defer t.Stop()
	silent := map[string]bus.Silence{}
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
			s.releaseGone(ctx, silent)
		}
	}
}

// releaseGone ends the leases of the rows being sent by replicas that no
// longer answer (no responders for bus.GoneGrace), and wakes the send
// loop to take them. A replica is judged on the first round whose
// question goes out at or after GoneGrace from when the answer to its
// first silent question came back, whenever that question went out (a
// slow question to another replica before it) or reached the server
// (bus.Silence). silent holds the replicas whose last question got no
// responders: it is the caller's, from one round to the next.
func (s *Service) releaseGone(ctx context.Context, silent map[string]bus.Silence) {
	senders, err := s.store.Senders(ctx, s.now(), s.owner)
	if err != nil {
		if ctx.Err() == nil {
			s.log.Warn("look for gone delivery replicas failed", "err", err)
		}
		return
	}
	for r := range silent {
		if !slices.Contains(senders, r) {
			delete(silent, r) // no rows of its under a lease now
		}
	}
	for _, r := range senders {
		if h := goneHook.Load(); h != nil {
			(*h)(r)
		}
		asked := time.Now()
		actx, cancel := context.WithTimeout(ctx, time.Second)
		_, err := s.bus.Conn().RequestWithContext(actx, s.bus.Topology().DeliveryAliveSubject(r), nil)
		cancel()
		silence := silent[r]
		gone := silence.Answer(asked, time.Now(), err)
		if !gone && silence.Silent() {
			silent[r] = silence // maybe reconnecting
			continue
		}
		delete(silent, r)
		if !gone {
			continue
		}
		n, err := s.store.Release(ctx, s.now(), r)
		if err != nil {
			s.log.Warn("take over a gone replica's deliveries failed", "replica", r, "err", err)
			continue
		}
		if n > 0 {
			s.log.Info("deliveries of a gone replica taken over", "replica", r, "rows", n)
			s.kick()
		}
	}
}

// goneHook, when set (tests only), runs before each question whether a
// replica is still there, with the replica asked.
var goneHook atomic.Pointer[func(replica string)]
