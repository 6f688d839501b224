package jwks

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// keySet is a platform's published key set for the tests: the keys it
// answers with, a failure, a download that hangs, and the downloads.
type keySet struct {
	mu    sync.Mutex
	keys  map[string]string
	err   error
	hang  chan struct{} // when set, a download waits for it to close
	count atomic.Int32
}

func (s *keySet) fetch(ctx context.Context) (map[string]string, error) {
	s.count.Add(1)
	s.mu.Lock()
	keys, err, hang := s.keys, s.err, s.hang
	s.mu.Unlock()
	if hang != nil {
		select {
		case <-hang:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	if err != nil {
		return nil, err
	}
	return keys, nil
}

// hold makes the next downloads wait until the channel it returns is
// closed.
func (s *keySet) hold() chan struct{} {
	hang := make(chan struct{})
	s.mu.Lock()
	defer s.mu.Unlock()
	s.hang = hang
	return hang
}

func (s *keySet) publish(keys map[string]string, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.keys, s.err = keys, err
}

const minRefresh = 300 * time.Millisecond

func newCache(s *keySet) *Cache[string] {
	return New(Config{MaxAge: time.Hour, MinRefresh: minRefresh, FetchTimeout: 5 * time.Second, StaleWait: 200 * time.Millisecond}, s.fetch)
}

func TestKey(t *testing.T) {
	t.Parallel()
	stale := time.Now().Add(-2 * time.Hour)
	for _, tc := range []struct {
		name string
		run  func(t *testing.T, s *keySet, c *Cache[string])
	}{{
		// A key published after the last download, within MinRefresh of
		// it: the call waits for the next download and gets the key.
		name: "rotated within MinRefresh",
		run: func(t *testing.T, s *keySet, c *Cache[string]) {
			c.Seed(map[string]string{"a": "A"}, time.Now())
			s.publish(map[string]string{"a": "A", "b": "B"}, nil)
			begin := time.Now()
			if k, err := c.Key(context.Background(), "b"); err != nil || k != "B" {
				t.Fatalf("Key(b) = %q, %v", k, err)
			}
			if d := time.Since(begin); d < minRefresh/2 {
				t.Fatalf("downloaded after %v, within MinRefresh of the last", d)
			}
			want(t, s, 1)
		},
	}, {
		// Forged kids in a flood share one download and are unknown.
		// (The download is held until all of them wait: one that arrives
		// after it ended, a goroutine late under load, is promised
		// another download, not this one.)
		name: "forged kids share one download",
		run: func(t *testing.T, s *keySet, c *Cache[string]) {
			s.publish(map[string]string{"a": "A"}, nil)
			if _, err := c.Key(context.Background(), "a"); err != nil {
				t.Fatal(err)
			}
			hang := s.hold()
			errs := make(chan error, 50)
			for i := range cap(errs) {
				go func() {
					_, err := c.Key(context.Background(), fmt.Sprintf("forged-%d", i))
					errs <- err
				}()
			}
			waitFor(t, c, cap(errs))
			close(hang)
			for range cap(errs) {
				if err := <-errs; !errors.Is(err, ErrUnknownKey) {
					t.Fatalf("a forged kid: %v, want ErrUnknownKey", err)
				}
			}
			want(t, s, 2)
			if k, err := c.Key(context.Background(), "a"); err != nil || k != "A" {
				t.Fatalf("Key(a) after the flood = %q, %v", k, err)
			}
			want(t, s, 2)
		},
	}, {
		// Forged kids past MaxWaiting are not held for the next
		// download: each would keep its request (and its body) for
		// MinRefresh and the download's time. They are unavailable at
		// once; those waiting still get their answer, and a known key
		// serves throughout.
		name: "forged kids past MaxWaiting are not held",
		run: func(t *testing.T, s *keySet, _ *Cache[string]) {
			c := New(Config{MaxAge: time.Hour, MinRefresh: minRefresh, FetchTimeout: 5 * time.Second,
				StaleWait: 200 * time.Millisecond, MaxWaiting: 3}, s.fetch)
			s.publish(map[string]string{"a": "A"}, nil)
			if _, err := c.Key(context.Background(), "a"); err != nil {
				t.Fatal(err)
			}
			hang := s.hold() // until the flood waits, and its answers are checked
			held := make(chan error, 3)
			for i := range cap(held) {
				go func() {
					_, err := c.Key(context.Background(), fmt.Sprintf("forged-%d", i))
					held <- err
				}()
			}
			waitFor(t, c, cap(held))
			begin := time.Now()
			if _, err := c.Key(context.Background(), "forged-more"); !errors.Is(err, ErrUnavailable) {
				t.Fatalf("a forged kid past MaxWaiting: %v, want ErrUnavailable", err)
			}
			if d := time.Since(begin); d > minRefresh/2 {
				t.Fatalf("a forged kid past MaxWaiting was held %v", d)
			}
			if k, err := c.Key(context.Background(), "a"); err != nil || k != "A" {
				t.Fatalf("Key(a) during the flood = %q, %v", k, err)
			}
			close(hang)
			for range cap(held) {
				if err := <-held; !errors.Is(err, ErrUnknownKey) {
					t.Fatalf("a forged kid waiting: %v, want ErrUnknownKey", err)
				}
			}
			c.mu.Lock()
			n := c.waiting
			c.mu.Unlock()
			if n != 0 {
				t.Fatalf("%d calls counted waiting after their answers", n)
			}
			want(t, s, 2)
		},
	}, {
		// Before the first download every call waits for it, past
		// MaxWaiting too: the genuine requests of a gateway that just
		// started are not refused.
		name: "first download waited for past MaxWaiting",
		run: func(t *testing.T, s *keySet, _ *Cache[string]) {
			c := New(Config{MaxAge: time.Hour, MinRefresh: minRefresh, FetchTimeout: 5 * time.Second,
				StaleWait: 200 * time.Millisecond, MaxWaiting: 2}, s.fetch)
			hang := make(chan struct{})
			s.mu.Lock()
			s.keys, s.hang = map[string]string{"a": "A"}, hang
			s.mu.Unlock()
			errs := make(chan error, 5)
			for range cap(errs) {
				go func() {
					_, err := c.Key(context.Background(), "a")
					errs <- err
				}()
			}
			time.Sleep(50 * time.Millisecond)
			close(hang)
			for range cap(errs) {
				if err := <-errs; err != nil {
					t.Fatalf("Key(a) at the first download: %v", err)
				}
			}
			want(t, s, 1)
		},
	}, {
		// The platform out of reach: the keys at hand serve, old or not;
		// a kid they do not have is unavailable, not unknown, at once.
		name: "failed download keeps the keys at hand",
		run: func(t *testing.T, s *keySet, c *Cache[string]) {
			c.Seed(map[string]string{"a": "A"}, stale)
			s.publish(nil, errors.New("HTTP 503"))
			if k, err := c.Key(context.Background(), "a"); err != nil || k != "A" {
				t.Fatalf("Key(a) = %q, %v", k, err)
			}
			begin := time.Now()
			if _, err := c.Key(context.Background(), "b"); !errors.Is(err, ErrUnavailable) {
				t.Fatalf("Key(b) = %v, want ErrUnavailable", err)
			}
			if d := time.Since(begin); d > minRefresh/2 {
				t.Fatalf("waited %v for a platform out of reach", d)
			}
			want(t, s, 1)
		},
	}, {
		// Old keys are refreshed; a key the new set does not have is
		// retired.
		name: "retired key",
		run: func(t *testing.T, s *keySet, c *Cache[string]) {
			c.Seed(map[string]string{"a": "A"}, stale)
			s.publish(map[string]string{"b": "B"}, nil)
			if _, err := c.Key(context.Background(), "a"); !errors.Is(err, ErrUnknownKey) {
				t.Fatalf("Key(a) = %v, want ErrUnknownKey", err)
			}
		},
	}, {
		// A refresh of old keys that hangs holds their calls StaleWait at
		// most, then the key at hand serves.
		name: "hanging refresh of old keys",
		run: func(t *testing.T, s *keySet, c *Cache[string]) {
			hang := make(chan struct{})
			t.Cleanup(func() { close(hang) })
			s.mu.Lock()
			s.keys, s.hang = map[string]string{"a": "A2"}, hang
			s.mu.Unlock()
			c.Seed(map[string]string{"a": "A"}, stale)
			begin := time.Now()
			if k, err := c.Key(context.Background(), "a"); err != nil || k != "A" {
				t.Fatalf("Key(a) = %q, %v", k, err)
			}
			if d := time.Since(begin); d > time.Second {
				t.Fatalf("waited %v for a refresh that hangs", d)
			}
		},
	}, {
		// A caller that hangs up does not cancel the download.
		name: "download outlives its caller",
		run: func(t *testing.T, s *keySet, c *Cache[string]) {
			hang := make(chan struct{})
			s.mu.Lock()
			s.keys, s.hang = map[string]string{"a": "A"}, hang
			s.mu.Unlock()
			gone, cancel := context.WithCancel(context.Background())
			go func() { time.Sleep(50 * time.Millisecond); cancel() }()
			if _, err := c.Key(gone, "a"); !errors.Is(err, ErrUnavailable) {
				t.Fatalf("Key(a) for a caller gone = %v, want ErrUnavailable", err)
			}
			close(hang)
			if k, err := c.Key(context.Background(), "a"); err != nil || k != "A" {
				t.Fatalf("Key(a) = %q, %v", k, err)
			}
			want(t, s, 1)
		},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := &keySet{}
			tc.run(t, s, newCache(s))
		})
	}
}

// waitFor returns when n calls wait to look up a key id c does not have.
func waitFor(t *testing.T, c *Cache[string], n int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for c.Waiting() != n {
		if time.Now().After(deadline) {
			t.Fatalf("%d calls wait, want %d", c.Waiting(), n)
		}
		time.Sleep(time.Millisecond)
	}
}

func want(t *testing.T, s *keySet, downloads int32) {
	t.Helper()
	if n := s.count.Load(); n != downloads {
		t.Fatalf("%d downloads, want %d", n, downloads)
	}
}
