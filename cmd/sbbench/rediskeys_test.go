package main

import (
	"context"
	"fmt"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/switchboard-chat/switchboard/pkg/redisx/redistest"
)

// TestDeleteKeysRemovesOnlyTheRunsPrefix runs against the local Redis,
// as the other integration tests.
func TestDeleteKeysRemovesOnlyTheRunsPrefix(t *testing.T) {
	url := redistest.URL()
	opts, err := redis.ParseURL(url)
	if err != nil {
		t.Fatal(err)
	}
	rdb := redis.NewClient(opts)
	defer rdb.Close()
	ctx := context.Background()
	if err := rdb.Ping(ctx).Err(); err != nil {
		t.Fatalf("redis at %s: %v", url, err)
	}
	run := "sbbench-test:" + randomSuffix() + ":"
	other := run[:len(run)-1] + "x:" // shares the run's prefix but for the separator
	t.Cleanup(func() { deleteKeys(url, other) })
	const n = 25000 // more than one page
	for i := 0; i < n; i += 1000 {
		p := rdb.Pipeline()
		for j := i; j < i+1000; j++ {
			p.Set(ctx, fmt.Sprintf("%sinbound:%d", run, j), "1", 0)
		}
		if _, err := p.Exec(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if err := rdb.Set(ctx, other+"kept", "1", 0).Err(); err != nil {
		t.Fatal(err)
	}
	got, err := deleteKeys(url, run)
	if err != nil {
		t.Fatal(err)
	}
	if got != n {
		t.Errorf("deleted %d keys, want %d", got, n)
	}
	if left, _ := rdb.Keys(ctx, run+"*").Result(); len(left) != 0 {
		t.Errorf("%d keys of the run left", len(left))
	}
	if v, err := rdb.Get(ctx, other+"kept").Result(); err != nil || v != "1" {
		t.Errorf("a key outside the run's prefix: %q, %v", v, err)
	}
}
