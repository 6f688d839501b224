// Package jwks keeps the signing keys a platform publishes as a JSON Web
// Key Set (Google Chat, the Bot Framework) to check the bearer tokens of
// the requests it sends: the keys are downloaded once, kept until they
// are old, and downloaded again at once when a token names a key id the
// set does not have, because the platform has just rotated its keys.
//
// That download is rate limited and shared: whatever the number of
// requests naming unknown key ids (anyone can forge one), at most one
// download runs at a time and one starts at most once per MinRefresh. A
// request that finds the keys downloaded within MinRefresh waits for the
// next download rather than being refused: a key published seconds ago
// must verify. A download that fails leaves the keys at hand in use.
package jwks

import (
	"context"
	"crypto/rsa"
	"encoding/base64"
	"errors"
	"fmt"
	"math/big"
	"strings"
	"sync"
	"time"
)

var (
	// ErrUnavailable is a key that could not be looked up: the key set
	// could not be downloaded. Nothing says the token is forged.
	ErrUnavailable = errors.New("signing keys out of reach")
	// ErrUnknownKey is a key id that a key set downloaded after the
	// request arrived does not have: the token is not the platform's.
	ErrUnknownKey = errors.New("unknown signing key")
)

// Config is how long keys are kept and how often they are downloaded.
type Config struct {
	// MaxAge is how long a downloaded set is used before a token signed
	// with one of its keys refreshes it.
	MaxAge time.Duration
	// MinRefresh is the least time between the starts of two downloads.
	MinRefresh time.Duration
	// FetchTimeout bounds one download.
	FetchTimeout time.Duration
	// StaleWait bounds the wait of a request whose key is old for the
	// download it started; then it is checked with the key it has.
	StaleWait time.Duration
	// MaxWaiting bounds the calls that wait for a download to look up a
	// key id the set does not have (0: DefaultMaxWaiting). Anyone can
	// send a token naming one, and each such request is held (its body
	// read already) until the next download, MinRefresh and the
	// download's time away: past the bound a call does not wait, it
	// gets ErrUnavailable at once (the platform retries a 503).
	MaxWaiting int
	// Now is the clock of MaxAge and MinRefresh (nil: time.Now).
	Now func() time.Time
}

// DefaultMaxWaiting is MaxWaiting when it is not set.
const DefaultMaxWaiting = 256

// FetchFunc downloads the key set: the keys by key id.
type FetchFunc[K any] func(ctx context.Context) (map[string]K, error)

// Cache is a platform's signing keys by key id. Its zero value is not
// usable; call New.
type Cache[K any] struct {
	cfg   Config
	fetch FetchFunc[K]

	mu      sync.Mutex
	keys    map[string]K
	fetched time.Time     // when the keys in use were downloaded
	started time.Time     // start of the last download
	starts  uint64        // downloads started so far
	lastErr error         // the last finished download's error
	waiting int           // calls waiting to look up an unknown key id
	flight  chan struct{} // closed when the running download ends; nil if none runs
}

// New returns an empty cache that downloads its keys with fetch.
func New[K any](cfg Config, fetch FetchFunc[K]) *Cache[K] {
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.MaxWaiting <= 0 {
		cfg.MaxWaiting = DefaultMaxWaiting
	}
	return &Cache[K]{cfg: cfg, fetch: fetch}
}

// Seed puts keys downloaded at at in use, as if fetched then.
func (c *Cache[K]) Seed(keys map[string]K, at time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.keys, c.fetched, c.started, c.lastErr = keys, at, at, nil
}

// Key returns the signing key kid. A key at hand that is old starts a
// download, waited for at most StaleWait. A key id the set does not have
// is looked up in a download that starts after the call: at once, or
// when MinRefresh since the last one has passed, shared with every other
// call waiting for one. It returns ErrUnknownKey when that download does
// not have kid, and ErrUnavailable when the keys cannot be downloaded
// (then it does not wait: the last download failed within MinRefresh).
func (c *Cache[K]) Key(ctx context.Context, kid string) (K, error) {
	c.mu.Lock()
	if k, ok := c.keys[kid]; ok {
		if c.cfg.Now().Sub(c.fetched) <= c.cfg.MaxAge {
			c.mu.Unlock()
			return k, nil
		}
		return c.stale(ctx, kid, k)
	}
	return c.unknown(ctx, kid)
}

// Waiting is the number of calls waiting now for a download to look up
// a key id the set does not have (at most MaxWaiting once a set is at
// hand). A call counts from its arrival, so a download that starts, or
// is running, while n calls wait serves all n.
func (c *Cache[K]) Waiting() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.waiting
}

// stale refreshes old keys for a call that has one (k); c.mu held.
func (c *Cache[K]) stale(ctx context.Context, kid string, k K) (K, error) {
	done := c.flight
	if done == nil {
		if !c.due() {
			c.mu.Unlock()
			return k, nil // the last download failed within MinRefresh
		}
		done = c.startLocked()
	}
	n := c.starts
	c.mu.Unlock()
	t := time.NewTimer(c.cfg.StaleWait)
	defer t.Stop()
	select {
	case <-done:
	case <-t.C:
	case <-ctx.Done():
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if nk, ok := c.keys[kid]; ok {
		return nk, nil
	}
	if c.flight == nil && c.starts == n && c.lastErr == nil {
		var zero K
		return zero, fmt.Errorf("%w %q: retired", ErrUnknownKey, kid)
	}
	return k, nil // the platform out of reach or slow: keep the key at hand
}

// unknown looks kid up in a download that starts after the call; c.mu
// held. Once a set is at hand, at most MaxWaiting calls wait for it:
// the others get ErrUnavailable at once.
func (c *Cache[K]) unknown(ctx context.Context, kid string) (K, error) {
	var zero K
	if c.keys != nil && c.waiting >= c.cfg.MaxWaiting {
		// (Before the first download every request waits for it, the
		// genuine ones too; that wait is the download's alone.)
		c.mu.Unlock()
		return zero, fmt.Errorf("%w: %d calls wait for the keys already", ErrUnavailable, c.cfg.MaxWaiting)
	}
	c.waiting++
	defer func() {
		c.mu.Lock()
		c.waiting--
		c.mu.Unlock()
	}()
	// Downloads started before the call do not count, but for the one
	// running: the platform publishes a key before it signs with it.
	arrived := c.starts
	if c.flight != nil {
		arrived--
	}
	for {
		if k, ok := c.keys[kid]; ok {
			c.mu.Unlock()
			return k, nil
		}
		if done := c.flight; done != nil {
			c.mu.Unlock()
			select {
			case <-done:
			case <-ctx.Done():
				return zero, fmt.Errorf("%w: %w", ErrUnavailable, ctx.Err())
			}
			c.mu.Lock()
			continue
		}
		// No download runs.
		if c.starts > arrived || c.lastErr != nil && !c.due() {
			err := c.lastErr
			c.mu.Unlock()
			switch {
			case err != nil:
				return zero, fmt.Errorf("%w: %w", ErrUnavailable, err)
			case c.keys == nil:
				return zero, fmt.Errorf("%w: not downloaded yet", ErrUnavailable)
			}
			return zero, fmt.Errorf("%w %q", ErrUnknownKey, kid)
		}
		if !c.due() {
			// Downloaded within MinRefresh: wait for the next download.
			wait := c.started.Add(c.cfg.MinRefresh).Sub(c.cfg.Now())
			before := c.starts
			c.mu.Unlock()
			t := time.NewTimer(wait)
			select {
			case <-t.C:
			case <-ctx.Done():
				t.Stop()
				return zero, fmt.Errorf("%w: %w", ErrUnavailable, ctx.Err())
			}
			c.mu.Lock()
			if c.flight == nil && c.starts == before {
				c.startLocked() // even if Now has not moved (a test's clock)
			}
			continue
		}
		c.startLocked()
	}
}

// due reports whether a download may start; c.mu held.
func (c *Cache[K]) due() bool {
	return c.started.IsZero() || c.cfg.Now().Sub(c.started) >= c.cfg.MinRefresh
}

// startLocked starts a download and returns the channel closed when it
// ends; c.mu held, no download running. It runs for the cache, not for
// the request that started it: a caller hanging up (anyone can send a
// token with an unknown key id) does not cancel it.
func (c *Cache[K]) startLocked() chan struct{} {
	done := make(chan struct{})
	c.flight, c.started = done, c.cfg.Now()
	c.starts++
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), c.cfg.FetchTimeout)
		keys, err := c.fetch(ctx)
		cancel()
		c.mu.Lock()
		if err == nil {
			c.keys, c.fetched = keys, c.cfg.Now()
		}
		c.lastErr, c.flight = err, nil
		c.mu.Unlock()
		close(done)
	}()
	return done
}

// RSAKey builds a public key from a JWK's base64url modulus and exponent:
// 2048 bits at least, an odd exponent that fits an int32.
func RSAKey(n64, e64 string) (*rsa.PublicKey, error) {
	nb, err := base64.RawURLEncoding.DecodeString(strings.TrimRight(n64, "="))
	if err != nil {
		return nil, fmt.Errorf("modulus: %w", err)
	}
	eb, err := base64.RawURLEncoding.DecodeString(strings.TrimRight(e64, "="))
	if err != nil {
		return nil, fmt.Errorf("exponent: %w", err)
	}
	n, e := new(big.Int).SetBytes(nb), new(big.Int).SetBytes(eb)
	if n.BitLen() < 2048 {
		return nil, fmt.Errorf("modulus of %d bits is too short", n.BitLen())
	}
	if !e.IsInt64() || e.Int64() < 3 || e.Int64() > 1<<31-1 || e.Int64()%2 == 0 {
		return nil, errors.New("bad exponent")
	}
	return &rsa.PublicKey{N: n, E: int(e.Int64())}, nil
}
