package main

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/switchboard-chat/switchboard/pkg/bus/bustest"
	pf "github.com/switchboard-chat/switchboard/pkg/platform"
	"github.com/switchboard-chat/switchboard/pkg/skill"
)

// A gateway whose SKILLS bucket cannot be opened as it starts (NATS down)
// keeps trying: once the bucket opens, an announcement made while it was
// failing is read and later ones are followed, so its menu catches up.
func TestFollowReloadsRetries(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	url := bustest.EmbeddedURL(t)
	b := bustest.New(t, url)
	kv, err := skill.OpenBucket(ctx, b.JetStream(), b.Topology())
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	lib := skill.NewLibrary(skill.Config{Dirs: []string{dir}, MaxBytes: skill.DefaultMaxBytes}, nil, nil)
	if lib.Current().Has("deploy") {
		t.Fatal("deploy loaded before it exists")
	}

	const failures = 3
	var opens atomic.Int32
	down := make(chan struct{})
	open := func(context.Context) (jetstream.KeyValue, error) {
		if n := opens.Add(1); n <= failures {
			if n == failures {
				close(down)
			}
			return nil, errors.New("nats: no servers available for connection")
		}
		return kv, nil
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		followReloads(ctx, slog.New(slog.NewTextHandler(io.Discard, nil)), lib, open, pf.Schedule(20*time.Millisecond))
	}()

	// Announced while the gateway cannot follow.
	<-down
	writeSkillFile(t, dir, "deploy", "Ship it")
	if _, _, err := skill.Announce(ctx, kv, "admin"); err != nil {
		t.Fatal(err)
	}
	select {
	case <-done:
	case <-ctx.Done():
		t.Fatal("followReloads never returned after the bucket opened")
	}
	if got := opens.Load(); got != failures+1 {
		t.Errorf("opened %d times, want %d", got, failures+1)
	}
	waitFor(t, 10*time.Second, "the missed announcement's scan", func() bool { return lib.Current().Has("deploy") })

	writeSkillFile(t, dir, "rollback", "Undo it")
	if _, _, err := skill.Announce(ctx, kv, "admin"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "the next announcement's scan", func() bool { return lib.Current().Has("rollback") })
}

// followReloads returns when ctx ends while the bucket stays unreachable.
func TestFollowReloadsStops(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	lib := skill.NewLibrary(skill.Config{Dirs: []string{t.TempDir()}, MaxBytes: skill.DefaultMaxBytes}, nil, nil)
	var opens atomic.Int32
	done := make(chan struct{})
	go func() {
		defer close(done)
		followReloads(ctx, slog.New(slog.NewTextHandler(io.Discard, nil)), lib, func(context.Context) (jetstream.KeyValue, error) {
			opens.Add(1)
			return nil, errors.New("nats: connection closed")
		}, pf.Schedule(time.Hour))
	}()
	time.Sleep(50 * time.Millisecond)
	if opens.Load() != 1 {
		t.Fatalf("opened %d times during an hour's backoff", opens.Load())
	}
	cancel()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("followReloads did not stop with its context")
	}
}

func writeSkillFile(t *testing.T, dir, name, desc string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Join(dir, name), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, name, skill.File), []byte("---\ndescription: "+desc+"\n---\n"), 0o644); err != nil {
		t.Fatal(err)
	}
}
