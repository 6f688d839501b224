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

// State is a mode someone set.
type State struct {
	Mode Mode `json:"mode"`
	// By is who set it: <platform>:<user id> from a chat.
	By string    `json:"by,omitempty"`
	At time.Time `json:"at"`
}

// Open opens the bucket, creating it when absent.
func Open(ctx context.Context, js jetstream.JetStream, topo bus.Topology) (jetstream.KeyValue, error) {
	kv, err := js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{
		Bucket: topo.Stream(Bucket), Description: "the dangerous-command approval mode (/approvals)",
		History: 1, Replicas: max(topo.Replicas, 1), Storage: topo.Storage,
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
	e, err := kv.Get(ctx, key)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read approval mode: %w", err)
	}
	return Decode(e.Value()), nil
}

// Set records st.
func Set(ctx context.Context, kv jetstream.KeyValue, st State) error {
	if _, ok := Parse(string(st.Mode)); !ok {
		return fmt.Errorf("set approval mode: %q is no mode", st.Mode)
	}
	if st.At.IsZero() {
		st.At = time.Now().UTC()
	}
	data, err := json.Marshal(st)
	if err != nil {
		return fmt.Errorf("encode approval mode: %w", err)
	}
	if _, err := kv.Put(ctx, key, data); err != nil {
		return fmt.Errorf("set approval mode: %w", err)
	}
	return nil
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
