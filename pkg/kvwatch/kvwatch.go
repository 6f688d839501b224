// Package kvwatch follows one key of a NATS KV bucket into memory for as
// long as a process runs: the global emergency stop (pkg/estop) and a
// platform's pause (pkg/platform) are read this way.
package kvwatch

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// ErrClosed is a watcher that closed before it replayed the stored value.
var ErrClosed = errors.New("kv watcher closed")

// Options tune Follow.
type Options struct {
	// Log reports a lost watcher and a watch that failed; nil is silent.
	Log *slog.Logger
	// Retry is the wait before watching again; one second when zero.
	Retry time.Duration
}

// Set receives a value the key takes: the entry's value and true after a
// put; nil and false when the key was deleted or purged, or has no value.
type Set func(value []byte, ok bool)

// Follow watches key in kv and passes each value it takes to set, until
// ctx ends. It returns once the stored value was passed, so that the
// caller starts from it, or with the first watch's error; it follows in a
// goroutine afterwards, and done is closed when that goroutine ends.
//
// A watcher that closes (its consumer lost for good) is replaced by a
// new watch, retried every Options.Retry until one starts. Every watch,
// the first and each new one, begins by replaying the stored value, and
// a replay that finds none passes (nil, false): a key deleted or purged
// while no watch ran, whose marker is gone too (a purge of the bucket's
// deletes, a marker's TTL), is not left at its old value.
func Follow(ctx context.Context, kv jetstream.KeyValue, key string, o Options, set Set) (done <-chan struct{}, err error) {
	if o.Retry <= 0 {
		o.Retry = time.Second
	}
	w, err := kv.Watch(ctx, key)
	if err != nil {
		return nil, fmt.Errorf("watch %s: %w", key, err)
	}
	if err := replay(ctx, w, set); err != nil {
		_ = w.Stop()
		return nil, fmt.Errorf("watch %s: %w", key, err)
	}
	d := make(chan struct{})
	go func() {
		defer close(d)
		follow(ctx, kv, key, o, w, set)
	}()
	return d, nil
}

// follow applies w's updates, and those of the watches that replace it,
// until ctx ends.
func follow(ctx context.Context, kv jetstream.KeyValue, key string, o Options, w jetstream.KeyWatcher, set Set) {
	for {
		updates(ctx, w, set)
		_ = w.Stop()
		if ctx.Err() != nil {
			return
		}
		if o.Log != nil {
			o.Log.Warn("kv watcher closed; watching again", "bucket", kv.Bucket(), "key", key)
		}
		for w = nil; w == nil; {
			if !sleep(ctx, o.Retry) {
				return
			}
			nw, err := kv.Watch(ctx, key)
			if err == nil {
				if err = replay(ctx, nw, set); err != nil {
					_ = nw.Stop()
				} else {
					w = nw
				}
			}
			if err != nil && ctx.Err() == nil && o.Log != nil {
				o.Log.Warn("watch kv key again", "bucket", kv.Bucket(), "key", key, "err", err)
			}
		}
	}
}

// replay passes a new watch's stored value to set: the entries before
// the nil that ends a watch's initial values, or (nil, false) when there
// are none.
func replay(ctx context.Context, w jetstream.KeyWatcher, set Set) error {
	seen := false
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case e, ok := <-w.Updates():
			if !ok {
				return ErrClosed
			}
			if e == nil {
				if !seen {
					set(nil, false)
				}
				return nil
			}
			seen = true
			apply(e, set)
		}
	}
}

// updates applies w's updates until ctx ends or w closes.
func updates(ctx context.Context, w jetstream.KeyWatcher, set Set) {
	for {
		select {
		case <-ctx.Done():
			return
		case e, ok := <-w.Updates():
			if !ok {
				return
			}
			if e != nil {
				apply(e, set)
			}
		}
	}
}

// apply passes the entry e: a put's value, or none for a delete or purge.
func apply(e jetstream.KeyValueEntry, set Set) {
	if e.Operation() == jetstream.KeyValuePut {
		set(e.Value(), true)
		return
	}
	set(nil, false)
}

// sleep waits d; it reports false when ctx ended first.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
