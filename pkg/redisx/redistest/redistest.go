// Package redistest gives tests the real Redis (REDIS_URL, default the
// local server) and a key prefix of their own, cleaned up afterwards.
package redistest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"os"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/switchboard-chat/switchboard/pkg/redisx"
)

// URL is the Redis tests use.
func URL() string {
	if u := os.Getenv("REDIS_URL"); u != "" {
		return u
	}
	return redisx.DefaultURL
}

// New returns a client and a fresh key prefix ("t<hex>:"); keys under the
// prefix are deleted when the test ends.
func New(t testing.TB) (*redis.Client, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	rdb, err := redisx.Open(ctx, URL())
	if err != nil {
		t.Fatal(err)
	}
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	prefix := "t" + hex.EncodeToString(b) + ":"
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := deletePrefix(ctx, rdb, prefix); err != nil {
			t.Logf("delete the keys of %s: %v", prefix, err)
		}
		_ = rdb.Close()
	})
	return rdb, prefix
}

// scanCount is how many keys one SCAN visits. The shared server holds
// every other user's keys too (a benchmark leaves some 200,000): at 500
// a page, each test's cleanup took some 400 round trips to find its own.
const scanCount = 10000

// deletePrefix deletes every key under prefix, a page of them per command.
func deletePrefix(ctx context.Context, rdb *redis.Client, prefix string) error {
	var cursor uint64
	for {
		keys, next, err := rdb.Scan(ctx, cursor, prefix+"*", scanCount).Result()
		if err != nil {
			return err
		}
		if len(keys) > 0 {
			if err := rdb.Unlink(ctx, keys...).Err(); err != nil {
				return err
			}
		}
		if next == 0 {
			return nil
		}
		cursor = next
	}
}
