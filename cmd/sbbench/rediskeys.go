package main

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
)

// deleteKeys removes the keys a run left on the shared Redis server under
// prefix: the services' dedupe marks and turn counters outlive the run by
// up to a day, and a server holding hundreds of thousands of them slows
// every later SCAN on it (the tests' cleanups among them). It pages
// through the keyspace 10,000 keys a call and unlinks each page with one
// command.
func deleteKeys(redisURL, prefix string) (int, error) {
	opts, err := redis.ParseURL(redisURL)
	if err != nil {
		return 0, fmt.Errorf("redis url: %w", err)
	}
	rdb := redis.NewClient(opts)
	defer rdb.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var cursor uint64
	deleted := 0
	for {
		keys, next, err := rdb.Scan(ctx, cursor, prefix+"*", 10000).Result()
		if err != nil {
			return deleted, fmt.Errorf("scan %s*: %w", prefix, err)
		}
		if len(keys) > 0 {
			if err := rdb.Unlink(ctx, keys...).Err(); err != nil {
				return deleted, fmt.Errorf("unlink %d keys under %s: %w", len(keys), prefix, err)
			}
			deleted += len(keys)
		}
		if cursor = next; cursor == 0 {
			return deleted, nil
		}
	}
}
