package homeassistant

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/switchboard-chat/switchboard/pkg/bus"
)

// BucketStates is the KV bucket (before the topology prefix) that keeps,
// per Home Assistant instance and watched entity, the last state the
// gateway read: what a reconnect compares Home Assistant's current
// states with (get_states) to publish the changes made while no
// connection was subscribed. It is the gateway's cursor, as Matrix's
// sync token and email's last UID are theirs.
const BucketStates = "HA_STATES"

// seenState is an entity's state as the gateway last read it: in a
// state_changed event it handled or in a get_states answer.
type seenState struct {
	State       json.RawMessage `json:"state"`
	LastChanged string          `json:"last_changed,omitempty"`
	ContextID   string          `json:"context_id,omitempty"`
}

func seenOf(st *entityState) seenState {
	return seenState{State: st.State, LastChanged: st.LastChanged, ContextID: st.ContextID}
}

func (s seenState) equal(o seenState) bool {
	return bytes.Equal(s.State, o.State) && s.LastChanged == o.LastChanged && s.ContextID == o.ContextID
}

// stateStore keeps the watched entities' last states of one Home
// Assistant instance: in memory for the connection that reads them
// (only Connect's read loop touches it) and in the bucket for the next
// connection, replica or process. A write that fails is logged and kept
// in memory: the next connection of another process then publishes that
// change again under the same event id, which the kit's dedupe drops.
type stateStore struct {
	bus    *bus.Bus
	prefix string // the instance's keys: "<hash of the account>."

	kv   jetstream.KeyValue
	seen map[string]seenState
}

func newStateStore(b *bus.Bus, account string) *stateStore {
	sum := sha256.Sum256([]byte(account))
	return &stateStore{bus: b, prefix: hex.EncodeToString(sum[:12]) + ".", seen: map[string]seenState{}}
}

// plainEntityID is what Home Assistant allows in an entity id; anything
// else (which Home Assistant does not send) is hashed into a key.
var plainEntityID = regexp.MustCompile(`^[a-z0-9_]+\.[a-z0-9_]+$`)

func (s *stateStore) key(entityID string) string {
	if plainEntityID.MatchString(entityID) {
		return s.prefix + entityID
	}
	sum := sha256.Sum256([]byte(entityID))
	return s.prefix + "_." + hex.EncodeToString(sum[:16])
}

func (s *stateStore) open(ctx context.Context) error {
	if s.kv != nil {
		return nil
	}
	top := s.bus.Topology()
	kv, err := s.bus.JetStream().CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{
		Bucket: top.Stream(BucketStates), Description: "homeassistant: the last state read per watched entity",
		History: 1, Replicas: max(top.Replicas, 1), Storage: top.Storage,
	})
	if err != nil {
		return fmt.Errorf("homeassistant states bucket: %w", err)
	}
	s.kv = kv
	return nil
}

// load reads the instance's stored states, replacing what is in memory:
// another replica may have held the connection since this one last did.
// Without a bus (a platform outside a Service) the states are kept in
// memory only.
func (s *stateStore) load(ctx context.Context) error {
	if s.bus == nil {
		return nil
	}
	if err := s.open(ctx); err != nil {
		return err
	}
	w, err := s.kv.Watch(ctx, s.prefix+">", jetstream.IgnoreDeletes())
	if err != nil {
		return fmt.Errorf("read homeassistant states: %w", err)
	}
	defer func() { _ = w.Stop() }()
	seen := map[string]seenState{}
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case e, ok := <-w.Updates():
			if !ok {
				return errors.New("read homeassistant states: watcher stopped")
			}
			if e == nil { // the stored values are all read
				s.seen = seen
				return nil
			}
			var st storedState
			if json.Unmarshal(e.Value(), &st) != nil || st.EntityID == "" {
				continue // not one of ours: the entity starts afresh
			}
			seen[st.EntityID] = st.seenState
		}
	}
}

// storedState is a stored value: the state and the entity it is of (a
// hashed key does not say).
type storedState struct {
	EntityID string `json:"entity_id"`
	seenState
}

// remember records an entity's state as read; nil: the entity is gone.
func (s *stateStore) remember(ctx context.Context, entityID string, st *entityState) error {
	if st == nil {
		return s.forget(ctx, entityID)
	}
	next := seenOf(st)
	if prev, ok := s.seen[entityID]; ok && prev.equal(next) {
		return nil
	}
	s.seen[entityID] = next
	if s.kv == nil {
		return nil
	}
	b, err := json.Marshal(storedState{EntityID: entityID, seenState: next})
	if err != nil {
		return err
	}
	if _, err := s.kv.Put(ctx, s.key(entityID), b); err != nil {
		return fmt.Errorf("store the state of %s: %w", entityID, err)
	}
	return nil
}

func (s *stateStore) forget(ctx context.Context, entityID string) error {
	if _, ok := s.seen[entityID]; !ok {
		return nil
	}
	delete(s.seen, entityID)
	if s.kv == nil {
		return nil
	}
	if err := s.kv.Delete(ctx, s.key(entityID)); err != nil && !errors.Is(err, jetstream.ErrKeyNotFound) {
		return fmt.Errorf("forget the state of %s: %w", entityID, err)
	}
	return nil
}

// lookup is the state last read of an entity.
func (s *stateStore) lookup(entityID string) (seenState, bool) {
	st, ok := s.seen[entityID]
	return st, ok
}
