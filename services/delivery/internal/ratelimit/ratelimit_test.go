package ratelimit_test

import (
	"context"
	"testing"
	"time"

	"github.com/switchboard-chat/switchboard/pkg/redisx/redistest"
	"github.com/switchboard-chat/switchboard/services/delivery/internal/ratelimit"
)

func TestGCRA(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	rdb, prefix := redistest.New(t)
	// Two limiters on one Redis stand for two replicas.
	a, b := ratelimit.New(rdb, prefix), ratelimit.New(rdb, prefix)
	now := time.UnixMilli(1_000_000)
	bot := ratelimit.Bucket{Key: "telegram:bot", Rate: ratelimit.Rate{Count: 30, Per: time.Second}}
	chat := ratelimit.Bucket{Key: "telegram:chat:1", Rate: ratelimit.Rate{Count: 1, Per: time.Second}}
	discord := ratelimit.Bucket{Key: "discord:chan", Rate: ratelimit.Rate{Count: 5, Per: 5 * time.Second}}

	steps := []struct {
		lim     *ratelimit.Limiter
		at      time.Duration
		buckets []ratelimit.Bucket
		wait    time.Duration
	}{
		{a, 0, []ratelimit.Bucket{bot, chat}, 0},
		{b, 0, []ratelimit.Bucket{bot, chat}, time.Second},
		{b, 400 * time.Millisecond, []ratelimit.Bucket{bot, chat}, 600 * time.Millisecond},
		{a, time.Second, []ratelimit.Bucket{bot, chat}, 0},
		// Discord: a burst of 5, then one per second.
		{a, 0, []ratelimit.Bucket{discord}, 0},
		{b, 0, []ratelimit.Bucket{discord}, 0},
		{a, 0, []ratelimit.Bucket{discord}, 0},
		{b, 0, []ratelimit.Bucket{discord}, 0},
		{a, 0, []ratelimit.Bucket{discord}, 0},
		{b, 0, []ratelimit.Bucket{discord}, time.Second},
		{b, time.Second, []ratelimit.Bucket{discord}, 0},
		// No limit configured: always allowed.
		{a, 0, []ratelimit.Bucket{{Key: "x"}}, 0},
	}
	for i, s := range steps {
		wait, err := s.lim.Take(ctx, now.Add(s.at), s.buckets...)
		if err != nil {
			t.Fatal(err)
		}
		if wait != s.wait {
			t.Fatalf("step %d: wait %v, want %v", i, wait, s.wait)
		}
	}
}
