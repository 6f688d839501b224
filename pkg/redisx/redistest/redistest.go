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
		iter := rdb.Scan(ctx, 0, prefix+"*", 500).Iterator()
		for iter.Next(ctx) {
			rdb.Del(ctx, iter.Val())
		}
		_ = rdb.Close()
	})
	return rdb, prefix
}
