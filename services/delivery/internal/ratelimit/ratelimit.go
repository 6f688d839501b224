// Package ratelimit paces sends with limits shared by every delivery
// replica: a GCRA (generic cell rate algorithm) per bucket, evaluated for
// all buckets of a send at once in one Redis script.
package ratelimit

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
)

// Rate allows Count sends per Per, with bursts of up to Burst (default
// Count).
type Rate struct {
	Count int           `koanf:"count"`
	Per   time.Duration `koanf:"per"`
	Burst int           `koanf:"burst"`
}

// Zero reports an unset rate (no limit).
func (r Rate) Zero() bool { return r.Count <= 0 || r.Per <= 0 }

// interval is the time one send uses up; tolerance how far ahead of its
// schedule a bucket may run (the burst).
func (r Rate) interval() time.Duration { return r.Per / time.Duration(r.Count) }

func (r Rate) tolerance() time.Duration {
	b := r.Burst
	if b <= 0 {
		b = r.Count
	}
	return r.interval() * time.Duration(b-1)
}

// Bucket is one limit to take from: a Redis key and its rate.
type Bucket struct {
	Key  string
	Rate Rate
}

// gcra checks every bucket and, only if all allow, charges each. It
// returns 0 (allowed) or the milliseconds to wait.
// KEYS: bucket keys. ARGV[1]: now in ms; then interval and tolerance in ms
// per key.
var gcra = redis.NewScript(`
local now = tonumber(ARGV[1])
local wait = 0
local tats = {}
for i, key in ipairs(KEYS) do
  local interval = tonumber(ARGV[i*2])
  local tol = tonumber(ARGV[i*2+1])
  local tat = tonumber(redis.call("GET", key) or now)
  if tat < now then tat = now end
  local allow_at = tat - tol
  if now < allow_at and allow_at - now > wait then wait = allow_at - now end
  tats[i] = tat + interval
end
if wait > 0 then return wait end
for i, key in ipairs(KEYS) do
  redis.call("SET", key, tats[i], "PX", math.ceil(tats[i] - now) + 1000)
end
return 0`)

// Limiter takes sends from shared buckets.
type Limiter struct {
	rdb    redis.Scripter
	prefix string
}

// New returns a Limiter whose keys start with prefix + "rl:".
func New(rdb redis.Scripter, prefix string) *Limiter {
	return &Limiter{rdb: rdb, prefix: prefix + "rl:"}
}

// Take charges one send to every bucket if all have room at now, and
// returns 0; otherwise it charges nothing and returns how long to wait.
// Buckets with a zero rate are ignored.
func (l *Limiter) Take(ctx context.Context, now time.Time, buckets ...Bucket) (time.Duration, error) {
	var keys []string
	args := []any{now.UnixMilli()}
	for _, b := range buckets {
		if b.Rate.Zero() {
			continue
		}
		keys = append(keys, l.prefix+b.Key)
		args = append(args, b.Rate.interval().Milliseconds(), b.Rate.tolerance().Milliseconds())
	}
	if len(keys) == 0 {
		return 0, nil
	}
	ms, err := gcra.Run(ctx, l.rdb, keys, args...).Int64()
	if err != nil {
		return 0, fmt.Errorf("rate limit: %w", err)
	}
	return time.Duration(ms) * time.Millisecond, nil
}
