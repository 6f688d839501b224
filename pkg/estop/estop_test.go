package estop

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
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
	if st, err := Disengage(ctx, kv); err != nil || st == nil || st.Reason != "deploy window" {
		t.Fatalf("disengage: %+v, %v; want the pause lifted", st, err)
	}
	waitFor(t, "the views to resume", func() bool { return v.Current() == nil && v2.Current() == nil })
	if st, err := Disengage(ctx, kv); err != nil || st != nil {
		t.Errorf("second disengage: %+v, %v; want none lifted", st, err)
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
	if st, err := Get(ctx, kv); err != nil || st != nil {
		t.Errorf("get after expiry: %+v, %v", st, err)
	}
	// The view deletes the expired entry; the watch brings the delete
	// back as no pause again.
	waitFor(t, "the expired entry to be deleted", func() bool {
		_, err := kv.Get(ctx, key)
		return errors.Is(err, jetstream.ErrKeyNotFound)
	})
	mu.Lock()
	if len(seen) < 3 || seen[0] != nil || seen[1] == nil {
		t.Errorf("changes %v: want none, the pause, none", seen)
	}
	for _, st := range seen[2:] {
		if st != nil {
			t.Errorf("changes %v: a pause after the expiry", seen)
		}
	}
	mu.Unlock()
	// An expired entry a new view finds (written while no view ran) is
	// read as resumed and deleted too.
	if err := Engage(ctx, kv, State{Reason: "old", Until: time.Now().Add(-time.Minute)}); err != nil {
		t.Fatal(err)
	}
	v2, err := Watch(ctx, kv, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if v2.Current() != nil {
		t.Error("a new view of an expired pause is paused")
	}
	waitFor(t, "the stale expired entry to be deleted", func() bool {
		_, err := kv.Get(ctx, key)
		return errors.Is(err, jetstream.ErrKeyNotFound)
	})
	if st, err := Disengage(ctx, kv); err != nil || st != nil {
		t.Errorf("disengage after the expiry: %+v, %v; want none lifted", st, err)
	}
}

// DeleteExpired deletes only an entry that expired, once however many
// replicas try at once, and never a pause re-armed after the read: the
// delete is conditional on the revision read as expired.
func TestDeleteExpired(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	b := bustest.New(t, bustest.EmbeddedURL(t))
	kv, err := Open(ctx, b.JetStream(), b.Topology())
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	for _, tt := range []struct {
		name    string
		put     []byte // nil: no entry
		deleted bool
	}{
		{name: "no pause"},
		{name: "no expiry", put: []byte(`{"reason":"hold"}`)},
		{name: "expiry to come", put: []byte(`{"until":"` + now.Add(time.Hour).UTC().Format(time.RFC3339Nano) + `"}`)},
		{name: "unreadable", put: []byte("not json")},
		{name: "expired", put: []byte(`{"reason":"window","until":"` + now.Add(-time.Second).UTC().Format(time.RFC3339Nano) + `"}`), deleted: true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_ = kv.Purge(ctx, key)
			if tt.put != nil {
				if _, err := kv.Put(ctx, key, tt.put); err != nil {
					t.Fatal(err)
				}
			}
			const replicas = 5
			var wg sync.WaitGroup
			var n atomic.Int32
			for range replicas {
				wg.Add(1)
				go func() {
					defer wg.Done()
					ok, err := DeleteExpired(ctx, kv, now)
					if err != nil {
						t.Error(err)
					}
					if ok {
						n.Add(1)
					}
				}()
			}
			wg.Wait()
			if want := map[bool]int32{true: 1, false: 0}[tt.deleted]; n.Load() != want {
				t.Errorf("%d replicas deleted the entry, want %d", n.Load(), want)
			}
			_, err := kv.Get(ctx, key)
			if gone := errors.Is(err, jetstream.ErrKeyNotFound); gone != (tt.deleted || tt.put == nil) {
				t.Errorf("entry gone %v (%v), want %v", gone, err, tt.deleted || tt.put == nil)
			}
		})
	}
	// A re-arm racing the deletes of the expired entry always survives.
	for i := range 20 {
		if err := Engage(ctx, kv, State{Reason: "expired", Until: now.Add(-time.Second)}); err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		for range 3 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if _, err := DeleteExpired(ctx, kv, now); err != nil {
					t.Error(err)
				}
			}()
		}
		if err := Engage(ctx, kv, State{Reason: "re-armed"}); err != nil {
			t.Fatal(err)
		}
		wg.Wait()
		if st, err := Get(ctx, kv); err != nil || st == nil || st.Reason != "re-armed" {
			t.Fatalf("round %d: after the re-arm %+v, %v; want the re-armed pause", i, st, err)
		}
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

// Hermes's allowlist, as an entry written by hand may hold it: ids as
// a list, a string or numbers, blanks dropped; user ids grant, profiles
// narrow, nothing else admits.
func TestAdmits(t *testing.T) {
	for _, tt := range []struct {
		name, entry, user, profile string
		want                       bool
	}{
		{"no allowlist", `{"reason":"r"}`, "42", "default", false},
		{"listed", `{"allow":{"user_ids":["42","7"]}}`, "42", "default", true},
		{"not listed", `{"allow":{"user_ids":["42"]}}`, "7", "default", false},
		{"no user id", `{"allow":{"user_ids":["42"]}}`, "", "default", false},
		{"a string", `{"allow":{"user_ids":"42"}}`, "42", "default", true},
		{"a number", `{"allow":{"user_ids":[42, 1e3]}}`, "1000", "default", true},
		// A Discord id is past float64's exact integers (2^53): read as
		// written, as Python's int reads it, never rounded.
		{"a snowflake", `{"allow":{"user_ids":[123456789012345678]}}`, "123456789012345678", "default", true},
		{"a snowflake alone", `{"allow":{"user_ids":1234567890123456789}}`, "1234567890123456789", "default", true},
		{"a rounded snowflake is not it", `{"allow":{"user_ids":[123456789012345678]}}`, "123456789012345680", "default", false},
		{"blanks", `{"allow":{"user_ids":["  ", " 42 "]}}`, "42", "default", true},
		{"blank user never", `{"allow":{"user_ids":["", " "]}}`, "", "default", false},
		{"profile narrows in", `{"allow":{"user_ids":["42"],"profiles":["default"]}}`, "42", "default", true},
		{"profile narrows out", `{"allow":{"user_ids":["42"],"profiles":["coder"]}}`, "42", "default", false},
		{"profile alone grants nothing", `{"allow":{"profiles":["default"]}}`, "42", "default", false},
		{"unreadable entry", `not json`, "42", "default", false},
		{"unreadable allowlist", `{"allow":{"user_ids":{"a":1}}}`, "42", "default", false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if got := Decode([]byte(tt.entry)).Admits(tt.user, tt.profile); got != tt.want {
				t.Errorf("%s admits %q on %q: %v, want %v", tt.entry, tt.user, tt.profile, got, tt.want)
			}
		})
	}
}

// Ids given as text (the admin API's) read as an entry's: trimmed,
// empty ones dropped, nothing else changed; the same list written in an
// entry decodes to the same ids.
func TestNormalizeIDs(t *testing.T) {
	for _, tt := range []struct {
		name string
		in   []string
		want IDs
	}{
		{"none", nil, nil},
		{"only blanks", []string{"", " ", "\t"}, nil},
		{"trimmed", []string{" 42 ", "alice\n"}, IDs{"42", "alice"}},
		{"kept as given", []string{"U0ABC", "+15551234567", "42", "42"}, IDs{"U0ABC", "+15551234567", "42", "42"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got := NormalizeIDs(tt.in)
			if !slices.Equal(got, tt.want) || (got == nil) != (tt.want == nil) {
				t.Errorf("NormalizeIDs(%q) = %q, want %q", tt.in, got, tt.want)
			}
			entry, err := json.Marshal(map[string]any{"allow": map[string]any{"user_ids": tt.in}})
			if err != nil {
				t.Fatal(err)
			}
			var decoded IDs
			if st := Decode(entry); st.Allow != nil {
				decoded = st.Allow.UserIDs
			}
			if !slices.Equal(decoded, got) {
				t.Errorf("the entry %s decodes to %q, the API's ids to %q", entry, decoded, got)
			}
		})
	}
}

// An entry is outside input (an operator may write it by hand): any
// bytes decode to a pause, and only a listed, non-empty user id is
// admitted.
func FuzzDecode(f *testing.F) {
	for _, s := range []string{`{"reason":"r"}`, `{"allow":{"user_ids":["42"],"profiles":"p"}}`, `{"allow":{"user_ids":[1,"x",null,true]}}`, `not json`, `{"until":"2026-12-04T05:00:00Z"}`, ``} {
		f.Add([]byte(s), "42", "p")
	}
	f.Fuzz(func(t *testing.T, data []byte, user, profile string) {
		st := Decode(data)
		if st == nil {
			t.Fatal("decoded to no pause")
		}
		if st.Admits(user, profile) && (user == "" || st.Allow == nil || !slices.Contains(st.Allow.UserIDs, user)) {
			t.Fatalf("%q admits %q on %q", data, user, profile)
		}
	})
}

// Update against a change landing between its read and its write (made
// by decide's first run, the seam between the two): the write is
// refused, decide runs again on what is stored then, and the change
// is kept; a re-arm (keep the standing expiry and allowlist, as the
// router's /pause <reason> and the admin API's SetPause) never brings
// back a pause lifted meanwhile nor an allowlist replaced meanwhile.
func TestUpdateLosesNoInterleavedChange(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	b := bustest.New(t, bustest.EmbeddedURL(t))
	soon := time.Now().Add(time.Hour).UTC().Truncate(time.Second)
	alice := &Allow{UserIDs: IDs{"alice"}}
	bob := &Allow{UserIDs: IDs{"bob"}}
	for i, tt := range []struct {
		name string
		// stored before Update: nil for nothing, deleted for a delete
		// marker.
		stored  *State
		deleted bool
		// between is the change landing between the first read and write.
		between func(kv jetstream.KeyValue) error
		// want is what is stored afterwards (nil: nothing); saw what
		// decide's runs got (nil entries: none engaged).
		want *State
		saw  []*State
	}{
		{name: "no change between: one run",
			stored: &State{Reason: "old", Until: soon, Allow: alice},
			want:   &State{Reason: "new", Until: soon, Allow: alice},
			saw:    []*State{{Reason: "old"}}},
		{name: "a /pause off between: the re-arm engages a pause of its own, without the lifted one's expiry and allowlist",
			stored:  &State{Reason: "old", Until: soon, Allow: alice},
			between: func(kv jetstream.KeyValue) error { _, err := Disengage(ctx, kv); return err },
			want:    &State{Reason: "new"},
			saw:     []*State{{Reason: "old"}, nil}},
		{name: "an allowlist replaced between is kept",
			stored: &State{Reason: "old", Until: soon, Allow: alice},
			between: func(kv jetstream.KeyValue) error {
				return Engage(ctx, kv, State{Reason: "admin", Until: soon, Allow: bob})
			},
			want: &State{Reason: "new", Until: soon, Allow: bob},
			saw:  []*State{{Reason: "old"}, {Reason: "admin"}}},
		{name: "a pause engaged between over nothing stored",
			between: func(kv jetstream.KeyValue) error { return Engage(ctx, kv, State{Reason: "admin", Allow: bob}) },
			want:    &State{Reason: "new", Allow: bob},
			saw:     []*State{nil, {Reason: "admin"}}},
		{name: "a pause engaged between over a deleted one",
			stored: &State{Reason: "old"}, deleted: true,
			between: func(kv jetstream.KeyValue) error { return Engage(ctx, kv, State{Reason: "admin", Allow: bob}) },
			want:    &State{Reason: "new", Allow: bob},
			saw:     []*State{nil, {Reason: "admin"}}},
		{name: "an expired entry deleted between",
			stored:  &State{Reason: "old", Until: time.Now().Add(-time.Minute)},
			between: func(kv jetstream.KeyValue) error { _, err := DeleteExpired(ctx, kv, time.Now()); return err },
			want:    &State{Reason: "new"},
			saw:     []*State{nil, nil}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			topo := b.Topology()
			topo.Prefix = fmt.Sprintf("%supd%d", topo.Prefix, i)
			kv, err := Open(ctx, b.JetStream(), topo)
			if err != nil {
				t.Fatal(err)
			}
			if tt.stored != nil {
				if err := Engage(ctx, kv, *tt.stored); err != nil {
					t.Fatal(err)
				}
			}
			if tt.deleted {
				if _, err := Disengage(ctx, kv); err != nil {
					t.Fatal(err)
				}
			}
			var saw []*State
			err = Update(ctx, kv, func(cur *State) (*State, error) {
				saw = append(saw, cur)
				if len(saw) == 1 && tt.between != nil {
					if err := tt.between(kv); err != nil {
						t.Fatal(err)
					}
				}
				next := &State{Reason: "new", By: "telegram:carol"}
				if cur != nil {
					next.Until, next.Allow = cur.Until, cur.Allow
				}
				return next, nil
			})
			if err != nil {
				t.Fatal(err)
			}
			if len(saw) != len(tt.saw) {
				t.Fatalf("decide ran %d times, want %d", len(saw), len(tt.saw))
			}
			for j := range saw {
				if (saw[j] == nil) != (tt.saw[j] == nil) || saw[j] != nil && saw[j].Reason != tt.saw[j].Reason {
					t.Errorf("run %d saw %+v, want %+v", j, saw[j], tt.saw[j])
				}
			}
			got, err := Get(ctx, kv)
			if err != nil {
				t.Fatal(err)
			}
			if got == nil || got.Reason != tt.want.Reason || !got.Until.Equal(tt.want.Until) || !slices.Equal(allowIDs(got.Allow), allowIDs(tt.want.Allow)) {
				t.Errorf("stored %+v, want %+v", got, tt.want)
			}
		})
	}
}

// allowIDs are an allowlist's user ids (nil for none).
func allowIDs(a *Allow) []string {
	if a == nil {
		return nil
	}
	return a.UserIDs
}

// A re-arm whose standing expiry passes between the read and the write
// does not store a pause that lifted already: Update reads again, and
// decide engages a pause of its own.
func TestUpdateReadsAgainWhenTheKeptExpiryPassed(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	b := bustest.New(t, bustest.EmbeddedURL(t))
	kv, err := Open(ctx, b.JetStream(), b.Topology())
	if err != nil {
		t.Fatal(err)
	}
	until := time.Now().Add(300 * time.Millisecond)
	if err := Engage(ctx, kv, State{Reason: "old", Until: until}); err != nil {
		t.Fatal(err)
	}
	runs := 0
	err = Update(ctx, kv, func(cur *State) (*State, error) {
		runs++
		next := &State{Reason: "new"}
		if cur != nil {
			next.Until = cur.Until
			time.Sleep(time.Until(cur.Until) + 50*time.Millisecond)
		}
		return next, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	got, err := Get(ctx, kv)
	if err != nil {
		t.Fatal(err)
	}
	if runs != 2 || got == nil || got.Reason != "new" || !got.Until.IsZero() {
		t.Errorf("%d runs stored %+v; want 2 and a pause without the expiry that passed", runs, got)
	}
}

// Update gives up after updateAttempts writes lost to another writer.
func TestUpdateBoundsItsRetries(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	b := bustest.New(t, bustest.EmbeddedURL(t))
	kv, err := Open(ctx, b.JetStream(), b.Topology())
	if err != nil {
		t.Fatal(err)
	}
	runs := 0
	err = Update(ctx, kv, func(cur *State) (*State, error) {
		runs++
		if err := Engage(ctx, kv, State{Reason: fmt.Sprint("other ", runs)}); err != nil {
			t.Fatal(err)
		}
		return &State{Reason: "mine"}, nil
	})
	if !errors.Is(err, ErrContended) || runs != updateAttempts {
		t.Errorf("err %v after %d runs, want ErrContended after %d", err, runs, updateAttempts)
	}
	if got, _ := Get(ctx, kv); got == nil || got.Reason != fmt.Sprint("other ", updateAttempts) {
		t.Errorf("stored %+v, want the other writer's last", got)
	}
	// decide's nil stores nothing.
	if err := Update(ctx, kv, func(*State) (*State, error) { return nil, nil }); err != nil {
		t.Fatal(err)
	}
	if got, _ := Get(ctx, kv); got == nil || got.Reason != fmt.Sprint("other ", updateAttempts) {
		t.Errorf("a nil decision stored %+v", got)
	}
}
