package main

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/switchboard-chat/switchboard/pkg/bus/bustest"
	"github.com/switchboard-chat/switchboard/pkg/skill"
)

// `switchboard skills reload` announces a reload that a process holding
// skills (here a Library following the bucket, as a router does) acts on.
func TestSkillsReloadVerb(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	t.Setenv("NATS_URL", bustest.EmbeddedURL(t))
	t.Setenv("SWITCHBOARD_CONFIG", "")
	cfg, _, err := loadConfig("")
	if err != nil {
		t.Fatal(err)
	}
	a := newApp("test", cfg)
	defer a.close()
	b, err := a.Bus(ctx)
	if err != nil {
		t.Fatal(err)
	}
	kv, err := skill.OpenBucket(ctx, b.JetStream(), b.Topology())
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	lib := skill.NewLibrary(skill.Config{Dirs: []string{dir}, MaxBytes: skill.DefaultMaxBytes}, nil, nil)
	if err := lib.Follow(ctx, kv); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(dir, "deploy"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "deploy", skill.File), []byte("---\ndescription: Ship it\n---\n"), 0o644); err != nil {
		t.Fatal(err)
	}

	var out bytes.Buffer
	if err := runSkills(ctx, []string{"reload", "--by", "ops"}, &out); err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(out.String(), "skill reload announced (revision ") {
		t.Fatalf("output %q", out.String())
	}
	deadline := time.Now().Add(10 * time.Second)
	for !lib.Current().Has("deploy") {
		if time.Now().After(deadline) {
			t.Fatal("the follower did not reload")
		}
		time.Sleep(20 * time.Millisecond)
	}
	for _, args := range [][]string{nil, {"load"}, {"reload", "extra"}} {
		if err := runSkills(ctx, args, &out); !errors.Is(err, errUsage) {
			t.Errorf("skills %v: %v, want a usage error", args, err)
		}
	}
}
