package webhook

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/switchboard-chat/switchboard/pkg/bus"
	eventsv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/events/v1"
)

// BucketBodies records, per route and body hash, when a delivery without
// a delivery id was first taken: a sender's retry within the route's
// body_dedupe window is that delivery again, the same body after it a
// new one. Without it the body's hash was the event id, which the seen
// record (7 days) and the router's dedupe kept: a recurring alert whose
// text does not change was answered "duplicate" and dropped for a week.
const BucketBodies = "WEBHOOK_BODIES"

// bodies gives deliveries without a delivery id their event ids.
type bodies struct {
	bus     *bus.Bus
	windows map[string]time.Duration // per route
	kv      jetstream.KeyValue
}

func newBodies(b *bus.Bus, windows map[string]time.Duration) *bodies {
	return &bodies{bus: b, windows: windows}
}

// open creates the bucket; its TTL is the longest route window, so a
// record lives as long as any route reads it.
func (b *bodies) open(ctx context.Context) error {
	if b.kv != nil {
		return nil
	}
	ttl := time.Minute
	for _, w := range b.windows {
		ttl = max(ttl, w)
	}
	kv, err := b.bus.JetStream().CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{
		Bucket: b.bus.Topology().Stream(BucketBodies), Description: "when a webhook body without a delivery id was first taken",
		TTL: ttl, History: 1, Replicas: max(b.bus.Topology().Replicas, 1), Storage: b.bus.Topology().Storage,
	})
	if err != nil {
		return fmt.Errorf("webhook bodies bucket: %w", err)
	}
	b.kv = kv
	return nil
}

// identify gives ev, whose id is its body's hash (hook.BodyID), the id
// of this body's delivery in the route's window: the hash and the time
// (Unix ms) the first delivery of the window came. Every replica agrees
// on it (a create or a compare-and-set on the record); with no window
// each delivery is new (a random suffix).
func (b *bodies) identify(ctx context.Context, route string, ev *eventsv1.MessageReceived, now time.Time) error {
	window := b.windows[route]
	first := rand.Text() // no window: this delivery alone
	if window > 0 {
		var err error
		if first, err = b.claim(ctx, route+"."+ev.GetMessageId(), window, now); err != nil {
			return err
		}
	}
	id := ev.GetMessageId() + "-" + first
	ev.MessageId, ev.EventId = id, route+"/"+id
	return nil
}

// claim returns when the window holding now began for key: the recorded
// start when now is within window of it, else now, recorded.
func (b *bodies) claim(ctx context.Context, key string, window time.Duration, now time.Time) (string, error) {
	if b.kv == nil {
		return "", errors.New("webhook bodies bucket not open")
	}
	start := strconv.FormatInt(now.UnixMilli(), 10)
	for range 3 {
		e, err := b.kv.Get(ctx, key)
		switch {
		case errors.Is(err, jetstream.ErrKeyNotFound):
			_, err = b.kv.Create(ctx, key, []byte(start))
			if errors.Is(err, jetstream.ErrKeyExists) {
				continue // another delivery of the body just now: read it
			}
		case err != nil:
		default:
			ms, perr := strconv.ParseInt(string(e.Value()), 10, 64)
			if perr == nil && now.Sub(time.UnixMilli(ms)) < window {
				return string(e.Value()), nil
			}
			_, err = b.kv.Update(ctx, key, []byte(start), e.Revision())
			if errors.Is(err, jetstream.ErrKeyRevisionMismatch) || errors.Is(err, jetstream.ErrKeyExists) {
				continue // another delivery just started a new window: read it
			}
		}
		if err != nil {
			return "", fmt.Errorf("record webhook body: %w", err)
		}
		return start, nil
	}
	return "", errors.New("record webhook body: too much contention")
}
