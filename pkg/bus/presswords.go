package bus

import (
	"context"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// BucketPressWords is the KV bucket (before the topology prefix) that
// keeps, for PressWordsAge, the router's answer to each button press
// that a gateway replica holds (its word: platform.KeepPressAnswer),
// and the mark that a held press was published (platform.MarkPress).
// The answer also goes to the press's holders over core NATS
// (Topology.PressSubject), which keeps nothing: the bucket is where a
// replica that holds the press only now, or takes over the press of a
// holder that died, finds the word that came before it.
const BucketPressWords = "GATEWAY_PRESS_WORDS"

// PressWordsAge is how long BucketPressWords keeps an entry: the
// bucket's MaxAge, the same for every key (a per-key TTL needs NATS
// 2.11). Longer than every use of it: a Teams press is held on for 30 s
// for the Bot Framework's retries of its invoke, and a Telegram
// callback query takes an answer for about 15 s.
const PressWordsAge = 5 * time.Minute

// PressWords creates or opens the bucket of the router's answers to
// held presses (BucketPressWords), once per Bus; a failure is tried
// again by the next caller.
func (b *Bus) PressWords(ctx context.Context) (jetstream.KeyValue, error) {
	b.pwMu.Lock()
	defer b.pwMu.Unlock()
	if b.pressWords != nil {
		return b.pressWords, nil
	}
	kv, err := b.js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{
		Bucket: b.topo.Stream(BucketPressWords), Description: "the router's answers to held button presses",
		TTL: PressWordsAge, History: 1, Storage: b.topo.Storage, Replicas: max(b.topo.Replicas, 1),
	})
	if err != nil {
		return nil, fmt.Errorf("press words bucket: %w", err)
	}
	b.pressWords = kv
	return kv, nil
}
