package matrix

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/switchboard-chat/switchboard/pkg/bus"
)

// BucketCursors is the KV bucket (before the topology prefix) that keeps
// each account's /sync next_batch token.
const BucketCursors = "GATEWAY_CURSORS"

// errCursorMoved: the stored token changed under the syncing replica
// (another replica holds the lease now); it stops syncing.
var errCursorMoved = errors.New("matrix sync token moved by another replica")

// cursor is one account's stored sync token. The holder reads it once
// when it starts syncing and then moves it with compare-and-set on the
// revision it read, so a replica that lost the lease without noticing
// cannot move it back.
type cursor struct {
	bus *bus.Bus
	key string

	kv  jetstream.KeyValue
	rev uint64
	// at is when the token held was stored (zero: none is).
	at time.Time
}

func cursorKey(account string) string {
	sum := sha256.Sum256([]byte(account))
	return "matrix." + hex.EncodeToString(sum[:16])
}

func (c *cursor) open(ctx context.Context) error {
	if c.kv != nil {
		return nil
	}
	kv, err := c.bus.JetStream().CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{
		Bucket: c.bus.Topology().Stream(BucketCursors), Description: "sync position per platform account (Matrix next_batch)",
		History: 1, Replicas: max(c.bus.Topology().Replicas, 1), Storage: c.bus.Topology().Storage,
	})
	if err != nil {
		return fmt.Errorf("cursors bucket: %w", err)
	}
	c.kv = kv
	return nil
}

// load returns the stored token, "" when none was stored.
func (c *cursor) load(ctx context.Context) (string, error) {
	if err := c.open(ctx); err != nil {
		return "", err
	}
	e, err := c.kv.Get(ctx, c.key)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		c.rev, c.at = 0, time.Time{}
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("read matrix sync token: %w", err)
	}
	c.rev, c.at = e.Revision(), e.Created()
	return string(e.Value()), nil
}

// store moves the token to next, only from the revision last read or
// written.
func (c *cursor) store(ctx context.Context, next string) error {
	var rev uint64
	var err error
	if c.rev == 0 {
		rev, err = c.kv.Create(ctx, c.key, []byte(next))
	} else {
		rev, err = c.kv.Update(ctx, c.key, []byte(next), c.rev)
	}
	if bus.LostRace(err) {
		return errCursorMoved
	}
	if err != nil {
		return fmt.Errorf("store matrix sync token: %w", err)
	}
	c.rev, c.at = rev, time.Now()
	return nil
}
