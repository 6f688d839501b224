package skill

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
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
//
// The router replica that answers /reload-skills scans first and
// announces with its inbound event's id and what its scan found
// (Announcement.Event, Report), and only then holds the new skills
// (ReloadAnnounced). The bucket keeps the key's last History values, so
// a redelivery of that event (its first attempt's transaction failed
// after the announcement) finds the report there (Answered), on
// whichever replica it lands, instead of scanning skills every replica
// holds already.

// Bucket is the bucket's name (before the topology prefix).
const Bucket = "SKILLS"

// History is how many announcements the bucket keeps: a /reload-skills
// redelivered after this many later reloads answers from a scan of its
// own.
const History = 16

// reloadKey is the announcement's key.
const reloadKey = "reload"

// Announcement is a reload's record: who asked, when, and an id that
// makes each one a new value.
type Announcement struct {
	By string    `json:"by,omitempty"`
	At time.Time `json:"at"`
	ID string    `json:"id"`
	// Event is the inbound event of the /reload-skills that made it
	// (<platform>:<account>:<event id>), with Report, what the
	// answering replica's scan changed for the chat's platform; both
	// empty for the admin API's and a SIGHUP's.
	Event  string  `json:"event,omitempty"`
	Report *Report `json:"report,omitempty"`
}

// Report is what a reload changed for one platform (Diff).
type Report struct {
	Added   []Item `json:"added,omitempty"`
	Removed []Item `json:"removed,omitempty"`
	Total   int    `json:"total"`
}

// OpenBucket opens the bucket, creating it when absent (and keeping
// History values of its key when it kept fewer).
func OpenBucket(ctx context.Context, js jetstream.JetStream, topo bus.Topology) (jetstream.KeyValue, error) {
	kv, err := js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{
		Bucket: topo.Stream(Bucket), Description: "skill reload announcements (/reload-skills)",
		History: History, Replicas: max(topo.Replicas, 1), Storage: topo.Storage,
	})
	if err != nil {
		return nil, fmt.Errorf("skills bucket: %w", err)
	}
	return kv, nil
}

// newAnnouncement makes a, made now under a new id, and its encoding.
func newAnnouncement(a Announcement) (Announcement, []byte, error) {
	id := make([]byte, 8)
	if _, err := rand.Read(id); err != nil {
		return Announcement{}, nil, fmt.Errorf("announcement id: %w", err)
	}
	a.At, a.ID = time.Now().UTC(), hex.EncodeToString(id)
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
	a, data, err := newAnnouncement(Announcement{By: by})
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
	_, data, err := newAnnouncement(Announcement{By: by})
	if err != nil {
		return err
	}
	return l.put(ctx, kv, data)
}

// put stores the announcement data as this Library's own.
func (l *Library) put(ctx context.Context, kv jetstream.KeyValue, data []byte) error {
	l.seenMu.Lock()
	l.seen = data
	l.seenMu.Unlock()
	if _, err := kv.Put(ctx, reloadKey, data); err != nil {
		return fmt.Errorf("announce skill reload: %w", err)
	}
	return nil
}

// ReloadAnnounced is the reload of the replica that answers the
// /reload-skills of inbound event event: it scans skills.dirs, announces
// the reload in kv with event and the Report of the scan for platform
// (Diff of the Set held and the one read), and only then makes the new
// Set Current (as Reload, SourceCommand). When the announcement fails,
// nothing changes anywhere: the scan is dropped and the error returned.
func (l *Library) ReloadAnnounced(ctx context.Context, kv jetstream.KeyValue, by, event, platform string) (Report, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	before, after, began := l.rescan()
	var r Report
	r.Added, r.Removed, r.Total = Diff(before, after, platform)
	_, data, err := newAnnouncement(Announcement{By: by, Event: event, Report: &r})
	if err != nil {
		return Report{}, err
	}
	if err := l.put(ctx, kv, data); err != nil {
		return Report{}, err
	}
	l.install(after, began, SourceCommand)
	return r, nil
}

// Answered is the Report of the reload announced for inbound event
// event, when kv still holds its announcement (a /reload-skills
// redelivered after its first attempt announced); false when it does
// not.
func Answered(ctx context.Context, kv jetstream.KeyValue, event string) (Report, bool, error) {
	if event == "" {
		return Report{}, false, nil
	}
	entries, err := kv.History(ctx, reloadKey)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return Report{}, false, nil
	}
	if err != nil {
		return Report{}, false, fmt.Errorf("read skill reload announcements: %w", err)
	}
	for i := len(entries) - 1; i >= 0; i-- {
		var a Announcement
		if entries[i].Operation() != jetstream.KeyValuePut || json.Unmarshal(entries[i].Value(), &a) != nil {
			continue
		}
		if a.Event == event && a.Report != nil {
			return *a.Report, true, nil
		}
	}
	return Report{}, false, nil
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
