// Package gatewaystatus is where platform gateway replicas say what they
// are doing and where operators pause a platform (/platform): two NATS KV
// buckets any router replica reads.
//
//   - GATEWAY_PRESENCE: one entry per gateway replica (its platform,
//     account, instance, connection state, last error, failed attempts),
//     rewritten every PresenceTTL/3 and on each change. The bucket's max
//     age is PresenceTTL, so a replica that died without deleting its
//     entry disappears within it. Kept in memory: after a NATS restart
//     every live replica writes its entry again within a third of the TTL.
//   - GATEWAY_PAUSES: one entry per paused platform (who paused it, when,
//     why). No max age, stored as the bus's streams are (file by
//     default): a pause outlives gateway restarts until /platform resume
//     deletes it. Every replica of the platform watches its key.
//
// It does no more than read and write those records; the platform kit
// (pkg/platform) acts on them and the router answers /platform with them.
package gatewaystatus

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/switchboard-chat/switchboard/pkg/bus"
)

// Bucket names (before the topology prefix).
const (
	BucketPresence = "GATEWAY_PRESENCE"
	BucketPauses   = "GATEWAY_PAUSES"
)

// PresenceTTL is the presence bucket's max age: a replica rewrites its
// entry every PresenceTTL/3, and a dead one's is gone after PresenceTTL.
const PresenceTTL = 30 * time.Second

// Platforms are the platform names a gateway of this release runs.
var Platforms = []string{
	"api", "bluebubbles", "discord", "email", "google_chat", "homeassistant", "line", "matrix",
	"mattermost", "signal", "slack", "sms", "teams", "telegram", "webhook", "whatsapp",
}

// Known reports whether name is one of Platforms.
func Known(name string) bool { return slices.Contains(Platforms, name) }

// Replica is one gateway replica's presence entry.
type Replica struct {
	Platform string `json:"platform"`
	Account  string `json:"account,omitempty"`
	Instance string `json:"instance"`
	// State is the runner's: starting, connecting, connected, standby,
	// paused, fatal.
	State string `json:"state"`
	// Reason is the last error while connecting or fatal.
	Reason string `json:"reason,omitempty"`
	// Attempts counts the failed connections since the last success.
	Attempts int `json:"attempts,omitempty"`
	// Since is when State began; Updated when the entry was written.
	Since   time.Time `json:"since"`
	Updated time.Time `json:"updated"`
}

// Pause is a paused platform's entry.
type Pause struct {
	Platform string    `json:"platform"`
	Reason   string    `json:"reason,omitempty"`
	By       string    `json:"by,omitempty"`
	At       time.Time `json:"at"`
}

// Presence opens the presence bucket, creating it when absent.
func Presence(ctx context.Context, js jetstream.JetStream, topo bus.Topology) (jetstream.KeyValue, error) {
	return PresenceWithTTL(ctx, js, topo, PresenceTTL)
}

// PresenceWithTTL is Presence with another max age (tests); every user of
// one bucket must pass the same.
func PresenceWithTTL(ctx context.Context, js jetstream.JetStream, topo bus.Topology, ttl time.Duration) (jetstream.KeyValue, error) {
	kv, err := js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{
		Bucket: topo.Stream(BucketPresence), Description: "gateway replicas and their connection state",
		TTL: ttl, History: 1, Replicas: max(topo.Replicas, 1), Storage: jetstream.MemoryStorage,
	})
	if err != nil {
		return nil, fmt.Errorf("presence bucket: %w", err)
	}
	return kv, nil
}

// Pauses opens the pauses bucket, creating it when absent.
func Pauses(ctx context.Context, js jetstream.JetStream, topo bus.Topology) (jetstream.KeyValue, error) {
	kv, err := js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{
		Bucket: topo.Stream(BucketPauses), Description: "platforms paused with /platform pause",
		History: 1, Replicas: max(topo.Replicas, 1), Storage: topo.Storage,
	})
	if err != nil {
		return nil, fmt.Errorf("pauses bucket: %w", err)
	}
	return kv, nil
}

// ReplicaKey is a replica's key: the platform, then a digest-free token of
// its account and instance (KV keys take [-/_=.a-zA-Z0-9]).
func ReplicaKey(platform, account, instance string) string {
	return platform + "." + token(account) + "." + token(instance)
}

func token(s string) string {
	if s == "" {
		return "_"
	}
	var b strings.Builder
	for _, c := range s {
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9', c == '-', c == '_':
			b.WriteRune(c)
		default:
			fmt.Fprintf(&b, "=%X", c)
		}
	}
	return b.String()
}

// Put writes a replica's entry.
func Put(ctx context.Context, kv jetstream.KeyValue, r Replica) error {
	r.Updated = time.Now().UTC()
	data, err := json.Marshal(r)
	if err != nil {
		return fmt.Errorf("encode presence: %w", err)
	}
	if _, err := kv.Put(ctx, ReplicaKey(r.Platform, r.Account, r.Instance), data); err != nil {
		return fmt.Errorf("write presence: %w", err)
	}
	return nil
}

// Remove deletes a replica's entry (a replica that stops).
func Remove(ctx context.Context, kv jetstream.KeyValue, platform, account, instance string) error {
	if err := kv.Delete(ctx, ReplicaKey(platform, account, instance)); err != nil {
		return fmt.Errorf("remove presence: %w", err)
	}
	return nil
}

// Replicas lists the live replicas, by platform, account and instance.
func Replicas(ctx context.Context, kv jetstream.KeyValue) ([]Replica, error) {
	var out []Replica
	err := each(ctx, kv, func(data []byte) {
		var r Replica
		if json.Unmarshal(data, &r) == nil && r.Platform != "" {
			out = append(out, r)
		}
	})
	slices.SortFunc(out, func(a, b Replica) int {
		return strings.Compare(a.Platform+"\x00"+a.Account+"\x00"+a.Instance, b.Platform+"\x00"+b.Account+"\x00"+b.Instance)
	})
	return out, err
}

// Paused lists the paused platforms, by name.
func Paused(ctx context.Context, kv jetstream.KeyValue) ([]Pause, error) {
	var out []Pause
	err := each(ctx, kv, func(data []byte) {
		var p Pause
		if json.Unmarshal(data, &p) == nil && p.Platform != "" {
			out = append(out, p)
		}
	})
	slices.SortFunc(out, func(a, b Pause) int { return strings.Compare(a.Platform, b.Platform) })
	return out, err
}

// each calls f with every live entry's value.
func each(ctx context.Context, kv jetstream.KeyValue, f func([]byte)) error {
	w, err := kv.WatchAll(ctx, jetstream.IgnoreDeletes())
	if err != nil {
		return fmt.Errorf("list %s: %w", kv.Bucket(), err)
	}
	defer func() { _ = w.Stop() }()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case e, ok := <-w.Updates():
			if !ok {
				return fmt.Errorf("list %s: watcher closed", kv.Bucket())
			}
			if e == nil {
				return nil // the initial values are all in
			}
			f(e.Value())
		}
	}
}

// Get returns a platform's pause, nil when it is not paused.
func Get(ctx context.Context, kv jetstream.KeyValue, platform string) (*Pause, error) {
	e, err := kv.Get(ctx, platform)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read pause of %s: %w", platform, err)
	}
	return Decode(e.Value()), nil
}

// Decode reads a pause entry's value; nil when it is not one.
func Decode(data []byte) *Pause {
	var p Pause
	if json.Unmarshal(data, &p) != nil || p.Platform == "" {
		return nil
	}
	return &p
}

// SetPause records p; it reports false when the platform was paused already.
func SetPause(ctx context.Context, kv jetstream.KeyValue, p Pause) (bool, error) {
	if p.At.IsZero() {
		p.At = time.Now().UTC()
	}
	data, err := json.Marshal(p)
	if err != nil {
		return false, fmt.Errorf("encode pause: %w", err)
	}
	_, err = kv.Create(ctx, p.Platform, data)
	if errors.Is(err, jetstream.ErrKeyExists) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("pause %s: %w", p.Platform, err)
	}
	return true, nil
}

// clearAttempts bounds ClearPause's reads: each lost race is another
// pause or resume of the platform landing, which a person makes.
const clearAttempts = 8

// ClearPause deletes a platform's pause; it reports false when the
// platform was not paused. The delete is conditional on the entry read:
// a resume and a new pause landing between the read and the delete are
// read again, so what it reports is about the pause it deleted.
func ClearPause(ctx context.Context, kv jetstream.KeyValue, platform string) (bool, error) {
	for range clearAttempts {
		e, err := kv.Get(ctx, platform)
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			return false, nil
		}
		if err != nil {
			return false, fmt.Errorf("read pause of %s: %w", platform, err)
		}
		if Decode(e.Value()) == nil {
			return false, nil
		}
		err = kv.Delete(ctx, platform, jetstream.LastRevision(e.Revision()))
		if err == nil {
			return true, nil
		}
		if !bus.LostRace(err) {
			return false, fmt.Errorf("resume %s: %w", platform, err)
		}
	}
	return false, fmt.Errorf("resume %s: the pause kept changing", platform)
}
