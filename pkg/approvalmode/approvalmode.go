// Package approvalmode is the deployment-wide dangerous-command approval
// mode (Hermes's approvals.mode, set with /approvals): manual asks the
// user before every dangerous tool call, smart lets a judge model
// approve the calls it finds harmless and asks about the rest, off never
// asks (as /yolo in every chat).
//
// Hermes keeps the mode in its profile's config file, re-read at each
// check. Here it is one entry of a NATS KV bucket that every worker
// watches into memory (pkg/kvwatch), so a change counts from the next
// dangerous call on every replica, and the entry outlives restarts (no
// max age). While no one has set it, the configured default
// (approvals.mode) applies. An entry that cannot be read is manual: the
// mode that asks most (fail safe).
package approvalmode

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/switchboard-chat/switchboard/pkg/bus"
	"github.com/switchboard-chat/switchboard/pkg/kvwatch"
)

// Mode is an approval mode.
type Mode string

// The modes (Hermes's VALID_APPROVAL_MODES).
const (
	Manual Mode = "manual"
	Smart  Mode = "smart"
	Off    Mode = "off"
)

// Modes lists the modes in Hermes's order.
var Modes = []Mode{Manual, Smart, Off}

// Parse reads a mode as /approvals takes it: one of Modes, any case,
// surrounding spaces ignored.
func Parse(s string) (Mode, bool) {
	m := Mode(strings.ToLower(strings.TrimSpace(s)))
	for _, v := range Modes {
		if m == v {
			return m, true
		}
	}
	return "", false
}

// FromConfig reads approvals.mode: empty is manual (Hermes's default),
// and, as Hermes reads a YAML boolean, false is off and true manual.
// Anything else is an error: the operator named no mode.
func FromConfig(s string) (Mode, error) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "":
		return Manual, nil
	case "false":
		return Off, nil
	case "true":
		return Manual, nil
	}
	if m, ok := Parse(s); ok {
		return m, nil
	}
	return "", fmt.Errorf("approvals.mode %q: want manual, smart or off", s)
}

// Bucket is the bucket's name (before the topology prefix).
const Bucket = "APPROVALS"

// key is the one entry's key.
const key = "mode"

// History is how many values of the mode the bucket keeps: a
// redelivered /approvals finds its first attempt's change among them
// (Answered) as long as fewer than History changes came after it.
const History = 16

// State is a mode someone set.
type State struct {
	Mode Mode `json:"mode"`
	// By is who set it: <platform>:<user id> from a chat, admin or
	// admin:<operator> from the admin API.
	By string    `json:"by,omitempty"`
	At time.Time `json:"at"`
	// Event is the inbound event of the /approvals that set it
	// (<platform>:<account>:<event id>); empty from the admin API.
	Event string `json:"event,omitempty"`
}

// Open opens the bucket, creating it when absent (and keeping History
// values of its key when it kept fewer).
func Open(ctx context.Context, js jetstream.JetStream, topo bus.Topology) (jetstream.KeyValue, error) {
	kv, err := js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{
		Bucket: topo.Stream(Bucket), Description: "the dangerous-command approval mode (/approvals)",
		History: History, Replicas: max(topo.Replicas, 1), Storage: topo.Storage,
	})
	if err != nil {
		return nil, fmt.Errorf("approval mode bucket: %w", err)
	}
	return kv, nil
}

// Decode reads an entry's value; an unreadable one, or one naming no
// mode, is manual (fail safe).
func Decode(data []byte) *State {
	var st State
	if json.Unmarshal(data, &st) != nil {
		return &State{Mode: Manual}
	}
	m, ok := Parse(string(st.Mode))
	if !ok {
		return &State{Mode: Manual, By: st.By, At: st.At}
	}
	st.Mode = m
	return &st
}

// Get returns the mode set, nil when no one has set one.
func Get(ctx context.Context, kv jetstream.KeyValue) (*State, error) {
	st, _, err := read(ctx, kv)
	return st, err
}

// read returns the mode set and its revision; nil and 0 when none is
// (never set, or reset).
func read(ctx context.Context, kv jetstream.KeyValue) (*State, uint64, error) {
	e, err := kv.Get(ctx, key)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil, 0, nil
	}
	if err != nil {
		return nil, 0, fmt.Errorf("read approval mode: %w", err)
	}
	return Decode(e.Value()), e.Revision(), nil
}

// attempts bounds Set's and Reset's reads: each lost race is another
// change landing, which a person makes, so a few suffice.
const attempts = 8

// ErrContended is Set's and Reset's error when the mode changed under
// each of their attempts.
var ErrContended = errors.New("the approval mode kept changing")

// Set records st and returns the mode it replaced (nil: none was set).
// The write is conditional on the mode read (kv.Update with its
// revision, kv.Create when none was set), read again when another
// change landed between: what it returns is what it replaced, not a
// mode read before someone else's change.
func Set(ctx context.Context, kv jetstream.KeyValue, st State) (*State, error) {
	if _, ok := Parse(string(st.Mode)); !ok {
		return nil, fmt.Errorf("set approval mode: %q is no mode", st.Mode)
	}
	if st.At.IsZero() {
		st.At = time.Now().UTC()
	}
	data, err := json.Marshal(st)
	if err != nil {
		return nil, fmt.Errorf("encode approval mode: %w", err)
	}
	for range attempts {
		cur, rev, err := read(ctx, kv)
		if err != nil {
			return nil, err
		}
		if rev == 0 {
			_, err = kv.Create(ctx, key, data)
		} else {
			_, err = kv.Update(ctx, key, data, rev)
		}
		if err == nil {
			return cur, nil
		}
		if !bus.LostRace(err) {
			return nil, fmt.Errorf("set approval mode: %w", err)
		}
	}
	return nil, fmt.Errorf("set approval mode: %w", ErrContended)
}

// Reset returns the gateway to the configured default: it deletes the
// mode set, on the condition that it is still the one read (a mode set
// meanwhile is read again, and deleted), and returns it; nil when none
// was set (nothing is written then). The delete keeps the bucket's
// history, which Answered reads.
func Reset(ctx context.Context, kv jetstream.KeyValue) (*State, error) {
	for range attempts {
		cur, rev, err := read(ctx, kv)
		if err != nil || cur == nil {
			return nil, err
		}
		err = kv.Delete(ctx, key, jetstream.LastRevision(rev))
		if err == nil {
			return cur, nil
		}
		if !bus.LostRace(err) {
			return nil, fmt.Errorf("reset approval mode: %w", err)
		}
	}
	return nil, fmt.Errorf("reset approval mode: %w", ErrContended)
}

// Answered is the mode the /approvals of inbound event set, when the
// bucket still holds that change (a redelivery whose first attempt set
// the mode and then failed to commit its answer); false when it does
// not: that attempt set nothing, or History changes came after it.
func Answered(ctx context.Context, kv jetstream.KeyValue, event string) (*State, bool, error) {
	if event == "" {
		return nil, false, nil
	}
	entries, err := kv.History(ctx, key)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, fmt.Errorf("read approval mode history: %w", err)
	}
	for i := len(entries) - 1; i >= 0; i-- {
		if entries[i].Operation() != jetstream.KeyValuePut {
			continue
		}
		var st State
		if json.Unmarshal(entries[i].Value(), &st) != nil || st.Event != event {
			continue
		}
		return Decode(entries[i].Value()), true, nil
	}
	return nil, false, nil
}

// Effective is the mode in force: st's, or def while none is set.
func Effective(st *State, def Mode) Mode {
	if st == nil {
		return def
	}
	return st.Mode
}

// View is the mode as a watch keeps it in memory.
type View struct {
	cur atomic.Pointer[State] // nil: none set
	def Mode
}

// Mode returns the mode in force: the one set, or the default.
func (v *View) Mode() Mode {
	return Effective(v.cur.Load(), v.def)
}

// Watch reads the mode and keeps a View of it current until ctx ends;
// def is the mode while none is set. It returns once the stored value
// is in the view, so a process that starts after a change follows it
// from its first call.
func Watch(ctx context.Context, kv jetstream.KeyValue, def Mode, log *slog.Logger) (*View, error) {
	v := &View{def: def}
	_, err := kvwatch.Follow(ctx, kv, key, kvwatch.Options{Log: log}, func(value []byte, ok bool) {
		if !ok {
			v.cur.Store(nil)
			return
		}
		st := Decode(value)
		v.cur.Store(st)
		if log != nil {
			log.Info("approval mode set", "mode", st.Mode, "by", st.By)
		}
	})
	if err != nil {
		return nil, fmt.Errorf("watch approval mode: %w", err)
	}
	return v, nil
}
