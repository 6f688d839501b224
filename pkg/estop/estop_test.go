package estop

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/switchboard-chat/switchboard/pkg/bus/bustest"
)

// Engage, Disengage and a watch of another process: the view follows,
// starts paused when a pause is stored, and an unreadable entry pauses.
func TestWatchFollowsEngageAndDisengage(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	url := bustest.EmbeddedURL(t)
	b := bustest.New(t, url)
	kv, err := Open(ctx, b.JetStream(), b.Topology())
	if err != nil {
		t.Fatal(err)
	}
	if st, err := Get(ctx, kv); err != nil || st != nil {
		t.Fatalf("fresh bucket: %v, %v; want no pause", st, err)
	}
	v, err := Watch(ctx, kv, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if v.Current() != nil {
		t.Fatal("paused before any pause")
	}
	if err := Engage(ctx, kv, State{Reason: "deploy window", By: "telegram:alice"}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the view to pause", func() bool { return v.Current() != nil })
	if got := v.Current(); got.Reason != "deploy window" || got.By != "telegram:alice" || got.At.IsZero() {
		t.Errorf("view %+v", got)
	}
	// Another process starting now is paused from the start.
	other := bustest.NewWith(t, url, b.Topology())
	kv2, err := Open(ctx, other.JetStream(), other.Topology())
	if err != nil {
		t.Fatal(err)
	}
	v2, err := Watch(ctx, kv2, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := v2.Current(); got == nil || got.Reason != "deploy window" {
		t.Errorf("a new watch sees %+v, want the pause", got)
	}
	if ok, err := Disengage(ctx, kv); err != nil || !ok {
		t.Fatalf("disengage: %v, %v", ok, err)
	}
	waitFor(t, "the views to resume", func() bool { return v.Current() == nil && v2.Current() == nil })
	if ok, err := Disengage(ctx, kv); err != nil || ok {
		t.Errorf("second disengage: %v, %v; want false", ok, err)
	}
	// Fail safe: an entry that is not a pause still pauses.
	if _, err := kv.Put(ctx, key, []byte("not json")); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the view to pause on a corrupt entry", func() bool { return v.Current() != nil })
	if got := v.Current(); got.Reason != "" {
		t.Errorf("corrupt entry read as %+v", got)
	}
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// lossyKV is the real bucket, whose watchers the test can close as a lost
// consumer closes them, and whose next watch waits while hold is set.
type lossyKV struct {
	jetstream.KeyValue
	mu       sync.Mutex
	watchers []jetstream.KeyWatcher
	hold     chan struct{}
}

func (k *lossyKV) Watch(ctx context.Context, keys string, opts ...jetstream.WatchOpt) (jetstream.KeyWatcher, error) {
	k.mu.Lock()
	hold := k.hold
	k.mu.Unlock()
	if hold != nil {
		select {
		case <-hold:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	w, err := k.KeyValue.Watch(ctx, keys, opts...)
	if err == nil {
		k.mu.Lock()
		k.watchers = append(k.watchers, w)
		k.mu.Unlock()
	}
	return w, err
}

// lose closes the current watcher and holds the next watch until the
// returned function is called.
func (k *lossyKV) lose(t *testing.T) (release func()) {
	t.Helper()
	k.mu.Lock()
	hold := make(chan struct{})
	k.hold = hold
	w := k.watchers[len(k.watchers)-1]
	k.mu.Unlock()
	if err := w.Stop(); err != nil {
		t.Fatal(err)
	}
	return func() {
		k.mu.Lock()
		k.hold = nil
		k.mu.Unlock()
		close(hold)
	}
}

func (k *lossyKV) watches() int {
	k.mu.Lock()
	defer k.mu.Unlock()
	return len(k.watchers)
}

// A watcher lost while paused is replaced, and the new watch's stored
// value replaces the view's: a pause purged meanwhile, marker and all
// (nothing left to replay), resumes; one engaged meanwhile pauses.
func TestRewatchTakesTheStoredValue(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	b := bustest.New(t, bustest.EmbeddedURL(t))
	bucket, err := Open(ctx, b.JetStream(), b.Topology())
	if err != nil {
		t.Fatal(err)
	}
	kv := &lossyKV{KeyValue: bucket}
	var changes atomic.Int32
	v, err := Watch(ctx, kv, nil, func(*State) { changes.Add(1) })
	if err != nil {
		t.Fatal(err)
	}
	if err := Engage(ctx, bucket, State{Reason: "incident", By: "telegram:alice"}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the view to pause", func() bool { return v.Current() != nil })

	// Purged while no watch runs, and the purge's marker removed too.
	release := kv.lose(t)
	if err := bucket.Purge(ctx, key); err != nil {
		t.Fatal(err)
	}
	if err := bucket.PurgeDeletes(ctx, jetstream.DeleteMarkersOlderThan(-1)); err != nil {
		t.Fatal(err)
	}
	if e, err := bucket.Get(ctx, key); err == nil {
		t.Fatalf("entry left after the purge: %v", e.Operation())
	}
	if v.Current() == nil {
		t.Fatal("resumed before watching again")
	}
	before := changes.Load()
	release()
	waitFor(t, "the new watch to resume the view", func() bool { return v.Current() == nil })
	if kv.watches() != 2 || changes.Load() == before {
		t.Errorf("watches %d, changes %d→%d", kv.watches(), before, changes.Load())
	}

	// Engaged while no watch runs.
	release = kv.lose(t)
	if err := Engage(ctx, bucket, State{Reason: "again"}); err != nil {
		t.Fatal(err)
	}
	release()
	waitFor(t, "the new watch to pause the view", func() bool { return v.Current() != nil })
	if got := v.Current().Reason; got != "again" {
		t.Errorf("reason %q", got)
	}
	// And the third watch follows updates as the first did.
	if _, err := Disengage(ctx, bucket); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the view to resume", func() bool { return v.Current() == nil })
}

// A pause with an expiry lifts by itself: Get and every view read it as
// not engaged from then on, the view's changed hears it at that instant,
// and Disengage deletes the inert entry but reports it was not engaged.
func TestPauseExpires(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	b := bustest.New(t, bustest.EmbeddedURL(t))
	kv, err := Open(ctx, b.JetStream(), b.Topology())
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var seen []*State
	v, err := Watch(ctx, kv, nil, func(st *State) { mu.Lock(); seen = append(seen, st); mu.Unlock() })
	if err != nil {
		t.Fatal(err)
	}
	until := time.Now().Add(700 * time.Millisecond).UTC()
	if err := Engage(ctx, kv, State{Reason: "window", By: "admin", Until: until}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the view to pause", func() bool { return v.Current() != nil })
	if got := v.Current(); !got.Until.Equal(until) {
		t.Errorf("until %v, want %v", got.Until, until)
	}
	if st, err := Get(ctx, kv); err != nil || st == nil {
		t.Fatalf("get before expiry: %v, %v", st, err)
	}
	waitFor(t, "the pause to expire", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(seen) > 0 && seen[len(seen)-1] == nil && v.Current() == nil
	})
	if time.Now().Before(until) {
		t.Fatal("lifted before its expiry")
	}
	mu.Lock()
	if len(seen) != 3 || seen[0] != nil || seen[1] == nil {
		t.Errorf("changes %v: want none, the pause, none", seen)
	}
	mu.Unlock()
	if st, err := Get(ctx, kv); err != nil || st != nil {
		t.Errorf("get after expiry: %+v, %v", st, err)
	}
	// A new view of the expired entry starts resumed.
	v2, err := Watch(ctx, kv, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if v2.Current() != nil {
		t.Error("a new view of an expired pause is paused")
	}
	if ok, err := Disengage(ctx, kv); err != nil || ok {
		t.Errorf("disengage of an expired pause: %v, %v; want false", ok, err)
	}
	if _, err := kv.Get(ctx, key); !errors.Is(err, jetstream.ErrKeyNotFound) {
		t.Errorf("expired entry after disengage: %v", err)
	}
}

func TestExpired(t *testing.T) {
	now := time.Date(2026, 12, 3, 23, 0, 0, 0, time.UTC)
	for _, tt := range []struct {
		until time.Time
		want  bool
	}{
		{time.Time{}, false},
		{now.Add(time.Second), false},
		{now, true},
		{now.Add(-time.Hour), true},
	} {
		if got := (&State{Until: tt.until}).Expired(now); got != tt.want {
			t.Errorf("until %v: expired %v, want %v", tt.until, got, tt.want)
		}
	}
}
