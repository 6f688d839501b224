// Package redisx opens Switchboard's Redis client and provides the
// primitives built on it: owner-token locks with compare-and-delete release.
package redisx

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// DefaultURL is used when no Redis URL is configured.
const DefaultURL = "redis://127.0.0.1:6379/0"

// Open connects to Redis and checks that it answers.
func Open(ctx context.Context, url string) (*redis.Client, error) {
	opts, err := redis.ParseURL(url)
	if err != nil {
		return nil, fmt.Errorf("parse redis url: %w", err)
	}
	rdb := redis.NewClient(opts)
	if err := rdb.Ping(ctx).Err(); err != nil {
		_ = rdb.Close()
		return nil, fmt.Errorf("ping redis %s: %w", opts.Addr, err)
	}
	return rdb, nil
}

// ErrNotOwner is returned when a lock operation's token does not match the
// current owner (the lock expired and someone else took it, or it is gone).
var ErrNotOwner = errors.New("lock not held by this owner")

// Scripts run atomically on the server: check the owner, then act.
var (
	renewScript = redis.NewScript(`
if redis.call("GET", KEYS[1]) == ARGV[1] then
  return redis.call("PEXPIRE", KEYS[1], ARGV[2])
end
return 0`)
	// claimScript: KEYS[1] lock; ARGV[1] grant token, ARGV[2] holder,
	// ARGV[3] ttl ms. {code, seconds, microseconds}: code 0 claimed, 1
	// busy (another holder of the grant), 2 lost (another grant), 3
	// claimed a free lock; the rest is Redis's clock at the claim.
	claimScript = redis.NewScript(`
local now = redis.call("TIME")
local v = redis.call("GET", KEYS[1])
if (not v) or v == ARGV[1] or v == ARGV[2] then
  redis.call("SET", KEYS[1], ARGV[2], "PX", ARGV[3])
  if not v then
    return {3, now[1], now[2]}
  end
  return {0, now[1], now[2]}
end
if string.sub(v, 1, string.len(ARGV[1]) + 1) == ARGV[1] .. "/" then
  return {1, now[1], now[2]}
end
return {2, now[1], now[2]}`)
	swapScript = redis.NewScript(`
if redis.call("GET", KEYS[1]) == ARGV[1] then
  redis.call("SET", KEYS[1], ARGV[2], "PX", ARGV[3])
  return 1
end
return 0`)
	releaseScript = redis.NewScript(`
if redis.call("GET", KEYS[1]) == ARGV[1] then
  return redis.call("DEL", KEYS[1])
end
return 0`)
	// acquireOrMarkScript: KEYS[1] lock, KEYS[2] its waiting mark; ARGV[1]
	// token, ARGV[2] ttl ms, ARGV[3] mark ttl ms. 1 acquired, 0 marked.
	acquireOrMarkScript = redis.NewScript(`
if redis.call("SET", KEYS[1], ARGV[1], "NX", "PX", ARGV[2]) then
  return 1
end
redis.call("SET", KEYS[2], "1", "PX", ARGV[3])
return 0`)
	// releaseWaitingScript: KEYS[1] lock, KEYS[2] its waiting mark; ARGV[1]
	// token. 0 not the owner, 1 released, 2 released and a mark was set.
	releaseWaitingScript = redis.NewScript(`
if redis.call("GET", KEYS[1]) ~= ARGV[1] then
  return 0
end
redis.call("DEL", KEYS[1])
return 1 + redis.call("DEL", KEYS[2])`)
)

// waitingTTL bounds how long a waiting mark outlives the lock holder it
// was left for. A mark that expires first (a turn renewed past it) costs
// only time: the router's sweep starts sessions whose messages wait
// behind a free lock.
const waitingTTL = 24 * time.Hour

// Locker manages owner-token locks under a key prefix.
type Locker struct {
	rdb    redis.Cmdable
	prefix string
}

// NewLocker returns a Locker whose keys are "<prefix>lock:<name>".
func NewLocker(rdb redis.Cmdable, prefix string) *Locker {
	return &Locker{rdb: rdb, prefix: prefix}
}

// Key is the Redis key of the named lock.
func (l *Locker) Key(name string) string { return l.prefix + "lock:" + name }

// waitingKey marks the named lock: something waits for its holder to let
// go (see AcquireOrMark).
func (l *Locker) waitingKey(name string) string { return l.prefix + "waiting:" + name }

// IsUnavailable reports whether err means Redis could not be reached or
// cannot serve commands for now — down, restarting, loading its data,
// failing over, or out of pooled connections — rather than refused the
// command. The same command may succeed once it is back; consumers keep
// such a message in place instead of spending a delivery attempt on it.
// A canceled or expired context is not unavailability.
func IsUnavailable(err error) bool {
	if err == nil || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return false
	}
	if errors.Is(err, redis.ErrPoolTimeout) || errors.Is(err, redis.ErrClosed) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return true
	}
	var rerr redis.Error
	if errors.As(err, &rerr) {
		for _, p := range []string{"LOADING ", "READONLY ", "MASTERDOWN ", "TRYAGAIN ", "CLUSTERDOWN "} {
			if strings.HasPrefix(rerr.Error(), p) {
				return true
			}
		}
		return false
	}
	var netErr net.Error
	return errors.As(err, &netErr)
}

// NewGrant returns a random owner token that records when it was made
// ("g<unix ms, hex>.<random>"), so that whoever finds it holding a lock
// can tell its age whatever TTL it was set with (GrantTime).
func NewGrant(now time.Time) string {
	return "g" + strconv.FormatInt(now.UnixMilli(), 16) + "." + NewToken()
}

// GrantTime is when a NewGrant token was made; ok is false for any other
// value (a worker's holder value, a token of an older release).
func GrantTime(token string) (at time.Time, ok bool) {
	stamp, rest, found := strings.Cut(token, ".")
	if !found || len(stamp) < 2 || stamp[0] != 'g' || len(rest) != 32 || strings.Contains(rest, "/") {
		return time.Time{}, false
	}
	ms, err := strconv.ParseInt(stamp[1:], 16, 64)
	if err != nil || ms <= 0 {
		return time.Time{}, false
	}
	return time.UnixMilli(ms), true
}

// NewToken returns a random owner token.
func NewToken() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// Acquire takes the lock with token if nobody holds it. ok is false when
// another owner holds it.
func (l *Locker) Acquire(ctx context.Context, name, token string, ttl time.Duration) (ok bool, err error) {
	ok, err = l.rdb.SetNX(ctx, l.Key(name), token, ttl).Result()
	if err != nil {
		return false, fmt.Errorf("acquire lock %s: %w", name, err)
	}
	return ok, nil
}

// Renew extends the lock's TTL if token still owns it; ErrNotOwner if not.
func (l *Locker) Renew(ctx context.Context, name, token string, ttl time.Duration) error {
	n, err := renewScript.Run(ctx, l.rdb, []string{l.Key(name)}, token, ttl.Milliseconds()).Int()
	if err != nil {
		return fmt.Errorf("renew lock %s: %w", name, err)
	}
	if n == 0 {
		return ErrNotOwner
	}
	return nil
}

// Release deletes the lock if token still owns it; ErrNotOwner if not.
func (l *Locker) Release(ctx context.Context, name, token string) error {
	n, err := releaseScript.Run(ctx, l.rdb, []string{l.Key(name)}, token).Int()
	if err != nil {
		return fmt.Errorf("release lock %s: %w", name, err)
	}
	if n == 0 {
		return ErrNotOwner
	}
	return nil
}

// AcquireOrMark is Acquire that, when another owner holds the lock,
// marks it in the same atomic step: whoever lets go of it next with
// ReleaseWaiting learns that something waits for the lock (a queued
// message) and must look. Either the lock is taken here or its holder is
// told; there is no moment in between.
func (l *Locker) AcquireOrMark(ctx context.Context, name, token string, ttl time.Duration) (ok bool, err error) {
	n, err := acquireOrMarkScript.Run(ctx, l.rdb, []string{l.Key(name), l.waitingKey(name)},
		token, ttl.Milliseconds(), waitingTTL.Milliseconds()).Int()
	if err != nil {
		return false, fmt.Errorf("acquire lock %s: %w", name, err)
	}
	return n == 1, nil
}

// AcquireOrMarkIn queues AcquireOrMark on a pipeline; its value is 1 when
// the lock was taken. It sends the script's text, as a pipeline cannot
// fall back from EVALSHA after a Redis restart emptied the script cache.
func (l *Locker) AcquireOrMarkIn(ctx context.Context, pipe redis.Pipeliner, name, token string, ttl time.Duration) *redis.Cmd {
	return acquireOrMarkScript.Eval(ctx, pipe, []string{l.Key(name), l.waitingKey(name)}, token, ttl.Milliseconds(), waitingTTL.Milliseconds())
}

// MarkWaiting marks the named lock as AcquireOrMark does when it finds
// the lock held: its holder, on letting go, learns that something waits.
func (l *Locker) MarkWaiting(ctx context.Context, name string) error {
	if err := l.rdb.Set(ctx, l.waitingKey(name), "1", waitingTTL).Err(); err != nil {
		return fmt.Errorf("mark lock %s: %w", name, err)
	}
	return nil
}

// ReleaseWaiting is Release that also reports, and clears, the lock's
// waiting mark: waiting is true when something was marked as waiting for
// the lock while it was held (AcquireOrMark, MarkWaiting).
func (l *Locker) ReleaseWaiting(ctx context.Context, name, token string) (waiting bool, err error) {
	n, err := releaseWaitingScript.Run(ctx, l.rdb, []string{l.Key(name), l.waitingKey(name)}, token).Int()
	if err != nil {
		return false, fmt.Errorf("release lock %s: %w", name, err)
	}
	if n == 0 {
		return false, ErrNotOwner
	}
	return n == 2, nil
}

// Claim outcomes.
type Claim int

const (
	// Claimed: the lock now holds the holder's value.
	Claimed Claim = iota
	// ClaimBusy: another holder of the same grant holds it (an earlier
	// attempt that may still be running); try again after its TTL.
	ClaimBusy
	// ClaimLost: a different grant owns the lock.
	ClaimLost
	// ClaimedFree: the lock was free and now holds the holder's value. The
	// grant is gone — released by whoever moved the session on (/stop,
	// /new), expired, or lost with Redis's data — so the holder must check
	// that its work is still current before it does any.
	ClaimedFree
)

// Holder is the lock value of one holder of a grant: "<token>/<id>".
func Holder(token, id string) string { return token + "/" + id }

// GrantOf is the grant token of a lock value (the value itself when it was
// never claimed).
func GrantOf(value string) string {
	token, _, _ := strings.Cut(value, "/")
	return token
}

// Claim hands a lock granted under token to one holder (Holder(token,
// id)), in one round trip: it takes the lock when it holds the bare grant,
// the holder itself, or nothing (expired). Two holders of one grant — two
// attempts at the same turn — therefore never hold the lock at once.
func (l *Locker) Claim(ctx context.Context, name, token, holder string, ttl time.Duration) (Claim, error) {
	c, _, err := l.ClaimAt(ctx, name, token, holder, ttl)
	return c, err
}

// ClaimAt is Claim, also returning when it happened by Redis's clock.
// Holders of one lock take it one after the other, so the times of their
// claims order them: a fencing token that, unlike a count kept elsewhere
// (the bus's delivery count), does not start again when that count's
// keeper does.
func (l *Locker) ClaimAt(ctx context.Context, name, token, holder string, ttl time.Duration) (Claim, time.Time, error) {
	v, err := claimScript.Run(ctx, l.rdb, []string{l.Key(name)}, token, holder, ttl.Milliseconds()).Int64Slice()
	if err != nil {
		return ClaimLost, time.Time{}, fmt.Errorf("claim lock %s: %w", name, err)
	}
	if len(v) != 3 {
		return ClaimLost, time.Time{}, fmt.Errorf("claim lock %s: unexpected reply %v", name, v)
	}
	return Claim(v[0]), time.Unix(v[1], v[2]*int64(time.Microsecond)), nil
}

// Swap replaces the lock's value from with to (and resets its TTL) if from
// still holds it; ErrNotOwner if not. A holder handing its work back swaps
// its value for the bare grant so the next holder claims it at once.
func (l *Locker) Swap(ctx context.Context, name, from, to string, ttl time.Duration) error {
	n, err := swapScript.Run(ctx, l.rdb, []string{l.Key(name)}, from, to, ttl.Milliseconds()).Int()
	if err != nil {
		return fmt.Errorf("swap lock %s: %w", name, err)
	}
	if n == 0 {
		return ErrNotOwner
	}
	return nil
}

// Owner returns the token holding the lock, or "" when it is free.
func (l *Locker) Owner(ctx context.Context, name string) (string, error) {
	v, err := l.rdb.Get(ctx, l.Key(name)).Result()
	if errors.Is(err, redis.Nil) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("read lock %s: %w", name, err)
	}
	return v, nil
}
