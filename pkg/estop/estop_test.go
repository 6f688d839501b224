package estop

import (
	"context"
	"testing"
	"time"

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
	if ok, err := Disengage(ctx, kv); err != nil || !ok {
		t.Fatalf("disengage: %v, %v", ok, err)
	}
	waitFor(t, "the views to resume", func() bool { return v.Current() == nil && v2.Current() == nil })
	if ok, err := Disengage(ctx, kv); err != nil || ok {
		t.Errorf("second disengage: %v, %v; want false", ok, err)
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
