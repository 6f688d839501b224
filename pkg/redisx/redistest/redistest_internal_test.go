package redistest

import (
	"context"
	"fmt"
	"net"
	"sync/atomic"
	"testing"

	"github.com/redis/go-redis/v9"
)

// countCalls counts the commands a client sends.
type countCalls struct{ n atomic.Int64 }

func (c *countCalls) DialHook(next redis.DialHook) redis.DialHook {
	return func(ctx context.Context, network, addr string) (net.Conn, error) { return next(ctx, network, addr) }
}

func (c *countCalls) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		c.n.Add(1)
		return next(ctx, cmd)
	}
}

func (c *countCalls) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		c.n.Add(int64(len(cmds)))
		return next(ctx, cmds)
	}
}

// A test's cleanup deletes every key under its prefix, and not one
// command per key nor one SCAN per 500 keys of the shared server: it ran
// once per test, on a server holding other users' keys by the hundred
// thousand.
func TestCleanupDeletesThePrefixInFewCommands(t *testing.T) {
	t.Parallel()
	rdb, prefix := New(t)
	ctx := context.Background()
	other := prefix[:len(prefix)-1] + "x:" // not under the prefix
	const keys = 3000
	pipe := rdb.Pipeline()
	for i := range keys {
		pipe.Set(ctx, fmt.Sprintf("%sk%d", prefix, i), "v", 0)
		pipe.Set(ctx, fmt.Sprintf("%sk%d", other, i), "v", 0)
	}
	if _, err := pipe.Exec(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = deletePrefix(context.Background(), rdb, other) })
	size, err := rdb.DBSize(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	var calls countCalls
	rdb.AddHook(&calls)
	if err := deletePrefix(ctx, rdb, prefix); err != nil {
		t.Fatal(err)
	}
	sent := calls.n.Load()
	left, err := rdb.Keys(ctx, prefix+"*").Result()
	if err != nil {
		t.Fatal(err)
	}
	if len(left) != 0 {
		t.Errorf("%d keys of the prefix left, e.g. %q", len(left), left[0])
	}
	if n, err := rdb.Exists(ctx, other+"k0", other+"k2999").Result(); err != nil || n != 2 {
		t.Errorf("keys outside the prefix: %d of 2 left (%v)", n, err)
	}
	// A page visits scanCount keys and deletes what it found at once;
	// allow for SCAN's rehashing pages and what other tests add meanwhile.
	if want := 2*(size/scanCount+1) + 2; sent > want {
		t.Errorf("cleanup of %d keys on a server of %d sent %d commands, want at most %d", keys, size, sent, want)
	}
}
