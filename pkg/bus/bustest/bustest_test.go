package bustest

import (
	"context"
	"errors"
	"testing"

	"github.com/nats-io/nats.go/jetstream"
)

// A test's buckets, key-value and object, go with its bus when it ends,
// so that a test binary that makes many does not fill the server (every
// bucket of a bounded size reserves it).
func TestCleanupRemovesBuckets(t *testing.T) {
	t.Parallel()
	url := EmbeddedURL(t)
	var streams []string
	t.Run("test", func(t *testing.T) {
		b := New(t, url)
		ctx := context.Background()
		kv, err := b.JetStream().CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: b.Topology().Stream("THINGS"), MaxBytes: 1 << 20})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := b.JetStream().CreateObjectStore(ctx, jetstream.ObjectStoreConfig{Bucket: b.Topology().Stream("BLOBS")}); err != nil {
			t.Fatal(err)
		}
		streams = []string{"KV_" + kv.Bucket(), "OBJ_" + b.Topology().Stream("BLOBS")}
	})
	b := New(t, url)
	for _, name := range streams {
		if _, err := b.JetStream().Stream(context.Background(), name); !errors.Is(err, jetstream.ErrStreamNotFound) {
			t.Errorf("stream %s after its test ended: %v, want not found", name, err)
		}
	}
}
