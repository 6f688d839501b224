package kvwatch

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/switchboard-chat/switchboard/pkg/bus/bustest"
)

// value is what set was last told.
type value struct {
	mu  sync.Mutex
	v   string
	ok  bool
	set int
}

func (x *value) store(v []byte, ok bool) {
	x.mu.Lock()
	defer x.mu.Unlock()
	x.v, x.ok, x.set = string(v), ok, x.set+1
}

func (x *value) is(v string, ok bool) bool {
	x.mu.Lock()
	defer x.mu.Unlock()
	return x.v == v && x.ok == ok
}

// Follow starts from the stored value, then follows puts, deletes and
// purges, and stops when ctx ends.
func TestFollow(t *testing.T) {
	t.Parallel()
	ctx, cancelAll := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancelAll()
	b := bustest.New(t, bustest.EmbeddedURL(t))
	kv, err := b.JetStream().CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{
		Bucket: b.Topology().Stream("KVWATCH"), History: 1, Storage: jetstream.MemoryStorage})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Put(ctx, "k", []byte("one")); err != nil {
		t.Fatal(err)
	}
	if _, err := Follow(ctx, kv, "bad key!", Options{}, func([]byte, bool) {}); err == nil {
		t.Error("a watch of an invalid key started")
	}
	// A key with no value starts as none.
	var none value
	none.v, none.ok = "unset", true
	fctx, cancel := context.WithCancel(ctx)
	doneNone, err := Follow(fctx, kv, "absent", Options{}, none.store)
	if err != nil {
		t.Fatal(err)
	}
	if !none.is("", false) || none.set != 1 {
		t.Errorf("absent key: %+v", &none)
	}

	var x value
	done, err := Follow(fctx, kv, "k", Options{Retry: 10 * time.Millisecond}, x.store)
	if err != nil {
		t.Fatal(err)
	}
	if !x.is("one", true) {
		t.Fatalf("stored value: %+v", &x)
	}
	for _, step := range []struct {
		do     func() error
		v      string
		ok     bool
		stepOf string
	}{
		{func() error { _, err := kv.Put(ctx, "k", []byte("two")); return err }, "two", true, "put"},
		{func() error { return kv.Delete(ctx, "k") }, "", false, "delete"},
		{func() error { _, err := kv.Put(ctx, "k", []byte("three")); return err }, "three", true, "put again"},
		{func() error { return kv.Purge(ctx, "k") }, "", false, "purge"},
	} {
		if err := step.do(); err != nil {
			t.Fatal(err)
		}
		deadline := time.Now().Add(10 * time.Second)
		for !x.is(step.v, step.ok) {
			if time.Now().After(deadline) {
				t.Fatalf("%s: value %+v, want %q %v", step.stepOf, &x, step.v, step.ok)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	cancel()
	for _, d := range []<-chan struct{}{done, doneNone} {
		select {
		case <-d:
		case <-time.After(10 * time.Second):
			t.Fatal("Follow did not stop when its context ended")
		}
	}
}
