package skill

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/switchboard-chat/switchboard/pkg/bus"
	"github.com/switchboard-chat/switchboard/pkg/kvwatch"
)

// Every process that holds skills (each router replica, the Telegram and
// Discord gateways for their command menus) follows one key of the
// SKILLS bucket: a reload's announcement. /reload-skills, the admin API
// and a SIGHUP put a new one; each process that sees a value it has not
// acted on scans skills.dirs again. A watch that is replaced replays the
// stored value (pkg/kvwatch), so a process that missed an announcement
// while its watcher was down still converges; a process that starts
// scans anyway.

// Bucket is the bucket's name (before the topology prefix).
const Bucket = "SKILLS"

// reloadKey is the announcement's key.
const reloadKey = "reload"

// Announcement is a reload's record: who asked, when, and an id that
// makes each one a new value.
type Announcement struct {
	By string    `json:"by,omitempty"`
	At time.Time `json:"at"`
	ID string    `json:"id"`
}

// OpenBucket opens the bucket, creating it when absent.
func OpenBucket(ctx context.Context, js jetstream.JetStream, topo bus.Topology) (jetstream.KeyValue, error) {
	kv, err := js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{
		Bucket: topo.Stream(Bucket), Description: "skill reload announcements (/reload-skills)",
		History: 1, Replicas: max(topo.Replicas, 1), Storage: topo.Storage,
	})
	if err != nil {
		return nil, fmt.Errorf("skills bucket: %w", err)
	}
	return kv, nil
}

// newAnnouncement makes a new announcement by by, and its encoding.
func newAnnouncement(by string) (Announcement, []byte, error) {
	id := make([]byte, 8)
	if _, err := rand.Read(id); err != nil {
		return Announcement{}, nil, fmt.Errorf("announcement id: %w", err)
	}
	a := Announcement{By: by, At: time.Now().UTC(), ID: hex.EncodeToString(id)}
	data, err := json.Marshal(a)
	if err != nil {
		return Announcement{}, nil, fmt.Errorf("encode announcement: %w", err)
	}
	return a, data, nil
}

// Announce asks every process following kv to scan skills.dirs again; by
// names who asked (<platform>:<user id>, admin[:operator], signal). It
// returns the announcement as stored and its revision.
func Announce(ctx context.Context, kv jetstream.KeyValue, by string) (Announcement, uint64, error) {
	a, data, err := newAnnouncement(by)
	if err != nil {
		return Announcement{}, 0, err
	}
	rev, err := kv.Put(ctx, reloadKey, data)
	if err != nil {
		return Announcement{}, 0, fmt.Errorf("announce skill reload: %w", err)
	}
	return a, rev, nil
}

// Announce is Announce by a process that reloads by itself (the replica
// that answers /reload-skills): its own Follow does not scan again for
// this announcement.
func (l *Library) Announce(ctx context.Context, kv jetstream.KeyValue, by string) error {
	_, data, err := newAnnouncement(by)
	if err != nil {
		return err
	}
	l.seenMu.Lock()
	l.seen = data
	l.seenMu.Unlock()
	if _, err := kv.Put(ctx, reloadKey, data); err != nil {
		return fmt.Errorf("announce skill reload: %w", err)
	}
	return nil
}

// Follow reloads the Library for each announcement in kv it has not acted
// on, until ctx ends; it returns once the stored announcement was read
// (an announcement made after this process's last scan began is acted
// on then). One Follow runs per Library: a second call while one runs
// returns nil at once.
func (l *Library) Follow(ctx context.Context, kv jetstream.KeyValue) error {
	if !l.following.CompareAndSwap(false, true) {
		return nil
	}
	first := true
	done, err := kvwatch.Follow(ctx, kv, reloadKey, kvwatch.Options{Log: l.log}, func(value []byte, ok bool) {
		replay := first
		first = false
		if !ok || !l.unseen(value, replay) {
			return
		}
		l.log.Info("skill reload announced; scanning skills.dirs again")
		l.Reload(SourceAnnounced)
	})
	if err != nil {
		l.following.Store(false)
		return fmt.Errorf("follow skill reloads: %w", err)
	}
	go func() {
		<-done
		l.following.Store(false)
	}()
	return nil
}

// unseen records value as seen and reports whether it is to be acted on:
// a value other than the last seen; the first one a watch replays only
// when it was announced after the last scan began.
func (l *Library) unseen(value []byte, replay bool) bool {
	l.seenMu.Lock()
	defer l.seenMu.Unlock()
	if bytes.Equal(value, l.seen) {
		return false
	}
	l.seen = bytes.Clone(value)
	if replay {
		var a Announcement
		if json.Unmarshal(value, &a) == nil && a.At.Before(l.scanned) {
			return false
		}
	}
	return true
}
