package approvalmode

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/switchboard-chat/switchboard/pkg/bus/bustest"
)

func TestParse(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		in   string
		want Mode
		ok   bool
	}{
		{"manual", Manual, true},
		{" SMART ", Smart, true},
		{"Off", Off, true},
		{"", "", false},
		{"auto", "", false},
		{"on", "", false},
		{"smart please", "", false},
	} {
		got, ok := Parse(tc.in)
		if got != tc.want || ok != tc.ok {
			t.Errorf("Parse(%q) = %q, %v; want %q, %v", tc.in, got, ok, tc.want, tc.ok)
		}
	}
}

func TestFromConfig(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		in      string
		want    Mode
		wantErr bool
	}{
		{"", Manual, false},
		{"smart", Smart, false},
		{"OFF", Off, false},
		{"false", Off, false},
		{"true", Manual, false},
		{"auto", "", true},
	} {
		got, err := FromConfig(tc.in)
		if got != tc.want || (err != nil) != tc.wantErr {
			t.Errorf("FromConfig(%q) = %q, %v", tc.in, got, err)
		}
	}
}

func TestDecodeFailsSafe(t *testing.T) {
	t.Parallel()
	for _, in := range []string{"not json", `{"mode":"auto"}`, `{}`} {
		if got := Decode([]byte(in)); got.Mode != Manual {
			t.Errorf("Decode(%q) = %+v, want manual", in, got)
		}
	}
	if got := Decode([]byte(`{"mode":"smart","by":"telegram:1"}`)); got.Mode != Smart || got.By != "telegram:1" {
		t.Errorf("Decode = %+v", got)
	}
}

// Set by one process, followed by another's watch; a watch started
// after the change starts from it; with none set the default applies;
// a corrupt entry is manual.
func TestWatchFollowsSet(t *testing.T) {
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
		t.Fatalf("fresh bucket: %+v, %v", st, err)
	}
	v, err := Watch(ctx, kv, Off, nil)
	if err != nil {
		t.Fatal(err)
	}
	if v.Mode() != Off {
		t.Fatalf("mode %q before any set, want the default", v.Mode())
	}
	if _, err := Set(ctx, kv, State{Mode: Smart, By: "telegram:alice"}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "smart", func() bool { return v.Mode() == Smart })
	other := bustest.NewWith(t, url, b.Topology())
	kv2, err := Open(ctx, other.JetStream(), other.Topology())
	if err != nil {
		t.Fatal(err)
	}
	v2, err := Watch(ctx, kv2, Manual, nil)
	if err != nil {
		t.Fatal(err)
	}
	if v2.Mode() != Smart {
		t.Errorf("a new watch sees %q, want smart", v2.Mode())
	}
	st, err := Get(ctx, kv2)
	if err != nil || st == nil || st.By != "telegram:alice" || st.At.IsZero() {
		t.Errorf("Get = %+v, %v", st, err)
	}
	if _, err := Set(ctx, kv, State{Mode: "auto"}); err == nil {
		t.Error("Set accepted a mode that is none")
	}
	if _, err := kv.Put(ctx, key, []byte("garbage")); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "manual on a corrupt entry", func() bool { return v.Mode() == Manual && v2.Mode() == Manual })
	if err := kv.Delete(ctx, key); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the defaults after a delete", func() bool { return v.Mode() == Off && v2.Mode() == Manual })
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

// Set returns the mode it replaced, Reset deletes the one set and
// returns it, and the bucket's history keeps the changes Answered looks
// for: a set with an event is found after later changes and a reset, a
// bucket made before History (one value) keeps History from its next
// Open.
func TestSetResetAnswered(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	b := bustest.New(t, bustest.EmbeddedURL(t))
	// As the bucket was created before it kept a history.
	if _, err := b.JetStream().CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: b.Topology().Stream(Bucket), History: 1, Storage: b.Topology().Storage}); err != nil {
		t.Fatal(err)
	}
	kv, err := Open(ctx, b.JetStream(), b.Topology())
	if err != nil {
		t.Fatal(err)
	}
	if st, err := kv.Status(ctx); err != nil || st.History() != History {
		t.Fatalf("history %v (%v), want %d", st, err, History)
	}
	if prev, err := Reset(ctx, kv); err != nil || prev != nil {
		t.Fatalf("reset with none set: %+v, %v", prev, err)
	}
	if _, found, err := Answered(ctx, kv, "telegram:bot:1"); err != nil || found {
		t.Fatalf("answered on an empty bucket: %v, %v", found, err)
	}
	steps := []struct {
		set   *State // nil: Reset
		prev  Mode   // what it replaced; "" none
		event string // an event Answered finds afterwards, with its mode
		mode  Mode
	}{
		{set: &State{Mode: Smart, By: "telegram:alice", Event: "telegram:bot:1"}, event: "telegram:bot:1", mode: Smart},
		{set: &State{Mode: Off, By: "admin"}, prev: Smart, event: "telegram:bot:1", mode: Smart},
		{set: nil, prev: Off, event: "telegram:bot:1", mode: Smart},
		{set: nil, prev: "", event: "telegram:bot:1", mode: Smart},
		{set: &State{Mode: Manual, By: "slack:bob", Event: "slack:bot:2"}, prev: "", event: "slack:bot:2", mode: Manual},
		{set: &State{Mode: Off, By: "slack:bob", Event: "slack:bot:3"}, prev: Manual, event: "telegram:bot:1", mode: Smart},
	}
	for i, st := range steps {
		var prev *State
		if st.set != nil {
			prev, err = Set(ctx, kv, *st.set)
		} else {
			prev, err = Reset(ctx, kv)
		}
		if err != nil {
			t.Fatalf("step %d: %v", i, err)
		}
		if got := Effective(prev, ""); got != st.prev {
			t.Errorf("step %d replaced %q, want %q", i, got, st.prev)
		}
		done, found, err := Answered(ctx, kv, st.event)
		if err != nil || !found || done.Mode != st.mode {
			t.Errorf("step %d: Answered(%s) = %+v, %v, %v; want %s", i, st.event, done, found, err, st.mode)
		}
	}
	if _, found, _ := Answered(ctx, kv, "telegram:bot:9"); found {
		t.Error("an event that set nothing is found")
	}
	if _, found, _ := Answered(ctx, kv, ""); found {
		t.Error("the empty event is found")
	}
	// History changes later, the first set is gone from the history.
	for range History {
		if _, err := Set(ctx, kv, State{Mode: Manual, By: "admin"}); err != nil {
			t.Fatal(err)
		}
	}
	if _, found, _ := Answered(ctx, kv, "telegram:bot:1"); found {
		t.Error("a set History changes ago is still found")
	}
}

// A change landing between Set's read and its write (another writer
// after the bucket's Get, through the seam of a bucket that makes one)
// is what Set reports it replaced.
func TestSetReportsAChangeMadeMeanwhile(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	b := bustest.New(t, bustest.EmbeddedURL(t))
	real, err := Open(ctx, b.JetStream(), b.Topology())
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		name    string
		before  Mode // "" none set
		between func() error
		reset   bool
		prev    Mode
		after   Mode // "" none set
	}{
		{name: "set over a set", before: Smart,
			between: func() error { _, err := real.Put(ctx, key, []byte(`{"mode":"off"}`)); return err },
			prev:    Off, after: Manual},
		{name: "set over a reset", before: Smart,
			between: func() error { return real.Delete(ctx, key) },
			prev:    "", after: Manual},
		{name: "set over a first set", before: "",
			between: func() error { _, err := real.Put(ctx, key, []byte(`{"mode":"off"}`)); return err },
			prev:    Off, after: Manual},
		{name: "reset over a set", before: Smart, reset: true,
			between: func() error { _, err := real.Put(ctx, key, []byte(`{"mode":"off"}`)); return err },
			prev:    Off, after: ""},
		{name: "reset over a reset", before: Smart, reset: true,
			between: func() error { return real.Delete(ctx, key) },
			prev:    "", after: ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if tt.before == "" {
				if err := real.Delete(ctx, key); err != nil {
					t.Fatal(err)
				}
			} else if _, err := Set(ctx, real, State{Mode: tt.before}); err != nil {
				t.Fatal(err)
			}
			kv := &interleaved{KeyValue: real, after: tt.between}
			var prev *State
			if tt.reset {
				prev, err = Reset(ctx, kv)
			} else {
				prev, err = Set(ctx, kv, State{Mode: Manual})
			}
			if err != nil {
				t.Fatal(err)
			}
			if kv.after != nil {
				t.Fatal("the change between was never made")
			}
			if got := Effective(prev, ""); got != tt.prev {
				t.Errorf("replaced %q, want %q", got, tt.prev)
			}
			st, err := Get(ctx, real)
			if err != nil || Effective(st, "") != tt.after {
				t.Errorf("stored %+v, %v; want %q", st, err, tt.after)
			}
		})
	}
}

// interleaved is the real bucket whose first Get is followed by
// another writer's change.
type interleaved struct {
	jetstream.KeyValue
	after func() error
}

func (kv *interleaved) Get(ctx context.Context, k string) (jetstream.KeyValueEntry, error) {
	e, err := kv.KeyValue.Get(ctx, k)
	if f := kv.after; f != nil {
		kv.after = nil
		if err := f(); err != nil {
			return nil, err
		}
	}
	return e, err
}
