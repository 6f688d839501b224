// Package estop is the global emergency stop (/pause, Hermes's ESTOP
// sentinel): one entry in a NATS KV bucket that every router replica
// watches into memory, so that checking it costs no round trip.
//
// The bucket ESTOP has no max age and is stored as the bus's streams are
// (file by default): a pause outlives every restart until /pause off
// deletes it, or until its expiry (Hermes's deadman, expires_at) when it
// was engaged with a TTL. As Hermes's sentinel, an entry that cannot be
// read still pauses (fail safe).
//
// An expiry is a time in the entry, not a TTL of the KV message: every
// reader (Get, each router's View) compares it with its own clock, so
// every replica lifts the pause at the same instant (give or take clock
// skew); a View's timer tells its owner when that instant passes. The
// expired entry is then deleted (DeleteExpired), by every View that saw
// it expire (each router replica's, at the expiry or, for one that
// starts later, when it reads it): the delete is conditional on the
// revision of the entry read as expired, so one replica deletes it and
// the others' deletes are no-ops, and a pause re-armed meanwhile (a new
// revision) is never removed.
package estop

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/switchboard-chat/switchboard/pkg/bus"
	"github.com/switchboard-chat/switchboard/pkg/kvwatch"
)

// Bucket is the bucket's name (before the topology prefix).
const Bucket = "ESTOP"

// key is the one entry's key.
const key = "global"

// State is an engaged pause.
type State struct {
	// Reason is the operator's, "" for none.
	Reason string `json:"reason,omitempty"`
	// By is who paused: <platform>:<user id> from a chat; admin, or
	// admin:<operator> when the caller names one, from the admin API.
	By string    `json:"by,omitempty"`
	At time.Time `json:"at"`
	// Until is when the pause lifts by itself (Hermes's expires_at); zero
	// for a pause that holds until it is lifted.
	Until time.Time `json:"until,omitzero"`
	// Allow is who keeps working through the pause (Hermes's allow); nil:
	// nobody.
	Allow *Allow `json:"allow,omitempty"`
}

// Allow is Hermes's allowlist of a pause: UserIDs (the sender's user id
// on its platform) is the only grant; Profiles, when set, narrows it to
// routers serving those profiles and never grants on its own.
type Allow struct {
	UserIDs  IDs `json:"user_ids,omitempty"`
	Profiles IDs `json:"profiles,omitempty"`
}

// IDs is a list of ids as Hermes normalizes them: a single string or
// number reads as a list of one, numbers as their decimal text (an
// integer as written, however long: a Discord id is past float64's
// exact integers), blanks trimmed and empty ones dropped.
type IDs []string

// UnmarshalJSON reads a list, a string or a number.
func (l *IDs) UnmarshalJSON(data []byte) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	var raw any
	if err := dec.Decode(&raw); err != nil {
		return err
	}
	items, ok := raw.([]any)
	if !ok {
		items = []any{raw}
	}
	var raws []string
	for _, it := range items {
		switch x := it.(type) {
		case string:
			raws = append(raws, x)
		case json.Number:
			raws = append(raws, numberText(x))
		}
	}
	*l = NormalizeIDs(raws)
	return nil
}

// NormalizeIDs reads ids given as text (the admin API's, the CLI's) as
// an entry's are read: blanks trimmed, empty ones dropped; nil for none.
func NormalizeIDs(raw []string) IDs {
	var l IDs
	for _, v := range raw {
		if v = strings.TrimSpace(v); v != "" {
			l = append(l, v)
		}
	}
	return l
}

// numberText is a JSON number as an id: an integer literal as written,
// any other number in its shortest decimal form (1e3 is "1000").
func numberText(n json.Number) string {
	if strings.Trim(strings.TrimPrefix(string(n), "-"), "0123456789") == "" {
		return string(n)
	}
	f, err := n.Float64()
	if err != nil {
		return string(n)
	}
	return strconv.FormatFloat(f, 'f', -1, 64)
}

// Admits reports whether the pause lets userID's new work through on a
// router serving profile (Hermes's is_allowed): userID must be listed,
// and profile too when profiles are. No allowlist admits nobody.
func (st *State) Admits(userID, profile string) bool {
	if st == nil || st.Allow == nil || userID == "" || !slices.Contains(st.Allow.UserIDs, userID) {
		return false
	}
	return len(st.Allow.Profiles) == 0 || slices.Contains(st.Allow.Profiles, profile)
}

// Expired reports whether the pause lifted by itself at now.
func (st *State) Expired(now time.Time) bool {
	return !st.Until.IsZero() && !now.Before(st.Until)
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

// Get returns the pause, nil when none is engaged (an expired one is not).
func Get(ctx context.Context, kv jetstream.KeyValue) (*State, error) {
	st, err := stored(ctx, kv)
	if st != nil && st.Expired(time.Now()) {
		return nil, err
	}
	return st, err
}

// stored returns the entry, expired or not; nil when there is none.
func stored(ctx context.Context, kv jetstream.KeyValue) (*State, error) {
	st, _, err := read(ctx, kv)
	return st, err
}

// Engage records st, replacing a pause engaged already (Hermes re-arms
// with the new reason). It reads nothing: a change that must keep parts
// of the pause engaged (a re-arm keeps its expiry and allowlist) is an
// Update.
func Engage(ctx context.Context, kv jetstream.KeyValue, st State) error {
	data, err := encode(&st)
	if err != nil {
		return err
	}
	if _, err := kv.Put(ctx, key, data); err != nil {
		return fmt.Errorf("engage pause: %w", err)
	}
	return nil
}

// encode is st as an entry's value, stamped now when it has no time.
func encode(st *State) ([]byte, error) {
	if st.At.IsZero() {
		st.At = time.Now().UTC()
	}
	data, err := json.Marshal(st)
	if err != nil {
		return nil, fmt.Errorf("encode pause: %w", err)
	}
	return data, nil
}

// updateAttempts bounds Update's reads: each lost race is another
// writer's change landing, which a person or an expiry makes, so a few
// suffice.
const updateAttempts = 8

// ErrContended is Update's error when the entry changed under each of
// its attempts.
var ErrContended = errors.New("the pause kept changing under the update")

// Update engages the pause decide makes of the one engaged, losing no
// change made meanwhile: decide gets the pause as Get reads it (nil for
// none, an expired one included) and returns the pause to store, or nil
// to store nothing; the write is conditional on the entry still being
// the revision read (kv.Update; kv.Create when there was none). When
// another write landed between the read and the write (a /pause off, the
// admin API's SetPause, the delete of an expired entry), the write is
// refused, and the entry is read and decide asked again, at most
// updateAttempts times (ErrContended). A plain read-then-Put would bring
// back a pause lifted meanwhile, or revert an allowlist changed
// meanwhile. decide may run more than once: what its last run saw is
// what was decided on. The pause stored is stamped now when it has no
// time.
func Update(ctx context.Context, kv jetstream.KeyValue, decide func(cur *State) (*State, error)) error {
	for range updateAttempts {
		cur, rev, err := read(ctx, kv)
		if err != nil {
			return err
		}
		if cur != nil && cur.Expired(time.Now()) {
			cur = nil
		}
		next, err := decide(cur)
		if err != nil || next == nil {
			return err
		}
		if cur != nil && next.Expired(time.Now()) {
			// The standing expiry decide kept passed meanwhile: the
			// pause it re-armed has lifted; decide again on none.
			continue
		}
		data, err := encode(next)
		if err != nil {
			return err
		}
		if rev == 0 {
			_, err = kv.Create(ctx, key, data)
		} else {
			_, err = kv.Update(ctx, key, data, rev)
		}
		if err == nil {
			return nil
		}
		if !bus.LostRace(err) {
			return fmt.Errorf("engage pause: %w", err)
		}
	}
	return fmt.Errorf("engage pause: %w", ErrContended)
}

// read returns the entry, expired or not, and its revision; nil and 0
// when there is none (never written, or deleted).
func read(ctx context.Context, kv jetstream.KeyValue) (*State, uint64, error) {
	e, err := kv.Get(ctx, key)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil, 0, nil
	}
	if err != nil {
		return nil, 0, fmt.Errorf("read pause: %w", err)
	}
	return Decode(e.Value()), e.Revision(), nil
}

// Disengage deletes the pause and returns the one it lifted; nil when
// none was engaged (an expired entry is deleted all the same). The
// delete is conditional on the revision read, as Update's write: a pause
// engaged between the read and the delete is read again, so that what
// it returns is the pause deleted (an expired entry re-armed meanwhile
// is a pause lifted, not "none was engaged"), which the admin API
// audits.
func Disengage(ctx context.Context, kv jetstream.KeyValue) (*State, error) {
	for range updateAttempts {
		st, rev, err := read(ctx, kv)
		if err != nil || st == nil {
			return nil, err
		}
		err = kv.Delete(ctx, key, jetstream.LastRevision(rev))
		if err == nil {
			if st.Expired(time.Now()) {
				return nil, nil
			}
			return st, nil
		}
		if !bus.LostRace(err) {
			return nil, fmt.Errorf("disengage pause: %w", err)
		}
	}
	return nil, fmt.Errorf("disengage pause: %w", ErrContended)
}

// DeleteExpired deletes the stored entry if it expired at now, on the
// condition that it is still the revision read (jetstream.LastRevision):
// an entry engaged or re-armed since, or deleted already (by another
// replica, by /pause off), stays as it is. It reports whether it deleted
// the entry; an unreadable entry never expires (fail safe).
func DeleteExpired(ctx context.Context, kv jetstream.KeyValue, now time.Time) (bool, error) {
	e, err := kv.Get(ctx, key)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("read pause: %w", err)
	}
	if !Decode(e.Value()).Expired(now) {
		return false, nil
	}
	err = kv.Delete(ctx, key, jetstream.LastRevision(e.Revision()))
	if bus.LostRace(err) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("delete expired pause: %w", err)
	}
	return true, nil
}

// retireTimeout bounds a View's delete of an expired entry.
const retireTimeout = 10 * time.Second

// View is the pause as a watch keeps it in memory.
type View struct {
	// cur is the stored entry, expired or not; nil for none.
	cur     atomic.Pointer[State]
	log     *slog.Logger
	changed func(*State)
	// kv is where an expired entry is deleted (nil: left as it is).
	kv jetstream.KeyValue
	// ctx is the watch's: a delete started after it ended is not made.
	ctx context.Context

	mu sync.Mutex // serializes set and expire, and guards timer
	// timer fires at cur's expiry.
	timer *time.Timer
}

// Current returns the pause, nil when none is engaged (or it expired).
func (v *View) Current() *State {
	st := v.cur.Load()
	if st == nil || st.Expired(time.Now()) {
		return nil
	}
	return st
}

// Watch reads the pause and keeps a View of it current until ctx ends.
// It returns once the stored value is in the view, so a process that
// starts while paused is paused from its first message. changed, when
// not nil, is called with each value the view takes (nil: resumed),
// the lifting of a pause at its expiry included. A watcher that closes
// is replaced by a new watch whose stored value replaces the view's, a
// value purged meanwhile included (pkg/kvwatch).
func Watch(ctx context.Context, kv jetstream.KeyValue, log *slog.Logger, changed func(*State)) (*View, error) {
	v := &View{log: log, changed: changed, kv: kv, ctx: ctx}
	done, err := kvwatch.Follow(ctx, kv, key, kvwatch.Options{Log: log}, func(value []byte, ok bool) {
		if ok {
			v.set(Decode(value))
			return
		}
		v.set(nil)
	})
	if err != nil {
		return nil, fmt.Errorf("watch pause: %w", err)
	}
	go func() {
		<-done
		v.mu.Lock()
		defer v.mu.Unlock()
		if v.timer != nil {
			v.timer.Stop()
		}
	}()
	return v, nil
}

// set takes the stored entry st (nil: none) and tells changed; a pause
// with an expiry to come arms the timer that tells it again then.
func (v *View) set(st *State) {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.cur.Store(st)
	v.arm(st)
	v.notify()
	if st != nil && st.Expired(time.Now()) {
		go v.retire()
	}
}

// retire deletes the entry that expired (DeleteExpired), outside v.mu:
// the watch then brings the delete back as no pause. A failed delete
// leaves the entry inert (it reads as lifted); the next View to read
// it, or the next /pause, replaces it.
func (v *View) retire() {
	if v.kv == nil || v.ctx == nil || v.ctx.Err() != nil {
		return
	}
	ctx, cancel := context.WithTimeout(v.ctx, retireTimeout)
	defer cancel()
	deleted, err := DeleteExpired(ctx, v.kv, time.Now())
	switch {
	case err != nil && ctx.Err() == nil && v.log != nil:
		v.log.Warn("delete expired emergency stop; it stays, inert", "err", err)
	case deleted && v.log != nil:
		v.log.Info("expired emergency stop deleted")
	}
}

// arm sets the timer for st's expiry, stopping the one of the entry it
// replaces. v.mu is held.
func (v *View) arm(st *State) {
	if v.timer != nil {
		v.timer.Stop()
		v.timer = nil
	}
	if st == nil || st.Until.IsZero() || st.Expired(time.Now()) {
		return
	}
	v.timer = time.AfterFunc(time.Until(st.Until), func() { v.expire(st) })
}

// expire is st's timer: unless another entry replaced it, the pause has
// lifted (or, after the wall clock moved back, the timer is armed again).
func (v *View) expire(st *State) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.cur.Load() != st {
		return
	}
	if !st.Expired(time.Now()) {
		v.arm(st)
		return
	}
	v.timer = nil
	if v.log != nil {
		v.log.Warn("emergency stop expired: new work accepted again", "reason", st.Reason, "by", st.By, "until", st.Until)
	}
	v.notify()
	go v.retire()
}

// notify tells changed the view's pause. v.mu is held.
func (v *View) notify() {
	if v.changed != nil {
		v.changed(v.Current())
	}
}
