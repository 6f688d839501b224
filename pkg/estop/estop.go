// Package estop is the global emergency stop (/pause, Hermes's ESTOP
// sentinel): one entry in a NATS KV bucket that every router replica
// watches into memory, so that checking it costs no round trip.
//
// The bucket ESTOP has no max age and is stored as the bus's streams are
// (file by default): a pause outlives every restart until /pause off
// deletes it. As Hermes's sentinel, an entry that cannot be read still
// pauses (fail safe).
package estop

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/switchboard-chat/switchboard/pkg/bus"
)

// Bucket is the bucket's name (before the topology prefix).
const Bucket = "ESTOP"

// key is the one entry's key.
const key = "global"

// State is an engaged pause.
type State struct {
	// Reason is the operator's, "" for none.
	Reason string `json:"reason,omitempty"`
	// By is who paused: <platform>:<user id>, or admin for the admin API.
	By string    `json:"by,omitempty"`
	At time.Time `json:"at"`
}

// Open opens the bucket, creating it when absent.
func Open(ctx context.Context, js jetstream.JetStream, topo bus.Topology) (jetstream.KeyValue, error) {
	kv, err := js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{
		Bucket: topo.Stream(Bucket), Description: "the global emergency stop (/pause)",
		History: 1, Replicas: max(topo.Replicas, 1), Storage: topo.Storage,
	})
	if err != nil {
		return nil, fmt.Errorf("estop bucket: %w", err)
	}
	return kv, nil
}

// Decode reads an entry's value; an unreadable one is an engaged pause
// without a reason (fail safe, as Hermes's corrupt sentinel).
func Decode(data []byte) *State {
	var st State
	if json.Unmarshal(data, &st) != nil {
		return &State{}
	}
	return &st
}

// Get returns the pause, nil when none is engaged.
func Get(ctx context.Context, kv jetstream.KeyValue) (*State, error) {
	e, err := kv.Get(ctx, key)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read pause: %w", err)
	}
	return Decode(e.Value()), nil
}

// Engage records st, replacing a pause engaged already (Hermes re-arms
// with the new reason).
func Engage(ctx context.Context, kv jetstream.KeyValue, st State) error {
	if st.At.IsZero() {
		st.At = time.Now().UTC()
	}
	data, err := json.Marshal(st)
	if err != nil {
		return fmt.Errorf("encode pause: %w", err)
	}
	if _, err := kv.Put(ctx, key, data); err != nil {
		return fmt.Errorf("engage pause: %w", err)
	}
	return nil
}

// Disengage deletes the pause; it reports false when none was engaged.
func Disengage(ctx context.Context, kv jetstream.KeyValue) (bool, error) {
	st, err := Get(ctx, kv)
	if err != nil || st == nil {
		return false, err
	}
	if err := kv.Delete(ctx, key); err != nil {
		return false, fmt.Errorf("disengage pause: %w", err)
	}
	return true, nil
}

// View is the pause as a watch keeps it in memory.
type View struct {
	cur     atomic.Pointer[State]
	changed func(*State)
}

// Current returns the pause, nil when none is engaged.
func (v *View) Current() *State { return v.cur.Load() }

// Watch reads the pause and keeps a View of it current until ctx ends.
// It returns once the stored value is in the view, so a process that
// starts while paused is paused from its first message. changed, when
// not nil, is called with each value the view takes (nil: resumed).
func Watch(ctx context.Context, kv jetstream.KeyValue, log *slog.Logger, changed func(*State)) (*View, error) {
	w, err := kv.Watch(ctx, key)
	if err != nil {
		return nil, fmt.Errorf("watch pause: %w", err)
	}
	v := &View{changed: changed}
	for {
		select {
		case <-ctx.Done():
			_ = w.Stop()
			return nil, ctx.Err()
		case e, ok := <-w.Updates():
			if !ok {
				return nil, errors.New("watch pause: watcher closed")
			}
			if e == nil { // the stored value is in
				v.notify()
				go v.follow(ctx, kv, w, log)
				return v, nil
			}
			v.apply(e)
		}
	}
}

// follow applies the watch's updates until ctx ends. A watcher that
// closes (its consumer lost for good) is replaced by a new watch, which
// replays the stored value first: the view never stops following.
func (v *View) follow(ctx context.Context, kv jetstream.KeyValue, w jetstream.KeyWatcher, log *slog.Logger) {
	defer func() { _ = w.Stop() }()
	for {
		select {
		case <-ctx.Done():
			return
		case e, ok := <-w.Updates():
			if ok {
				if e != nil {
					v.apply(e)
					v.notify()
				}
				continue
			}
			if log != nil {
				log.Warn("pause watcher closed; watching again")
			}
			for {
				select {
				case <-ctx.Done():
					return
				case <-time.After(time.Second):
				}
				nw, err := kv.Watch(ctx, key)
				if err == nil {
					w = nw
					break
				}
				if ctx.Err() == nil && log != nil {
					log.Warn("watch pause again", "err", err)
				}
			}
		}
	}
}

// apply takes the entry e: a put engages, a delete or purge resumes.
func (v *View) apply(e jetstream.KeyValueEntry) {
	if e.Operation() == jetstream.KeyValuePut {
		v.cur.Store(Decode(e.Value()))
		return
	}
	v.cur.Store(nil)
}

func (v *View) notify() {
	if v.changed != nil {
		v.changed(v.cur.Load())
	}
}
