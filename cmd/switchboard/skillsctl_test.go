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

	"github.com/nats-io/nats.go/jetstream"

	"github.com/switchboard-chat/switchboard/pkg/bus/bustest"
	"github.com/switchboard-chat/switchboard/pkg/pg/pgtest"
	"github.com/switchboard-chat/switchboard/pkg/skill"
	"github.com/switchboard-chat/switchboard/services/admin"
)

// `switchboard skills reload` goes through the admin API (its token, its
// audit log), whose announcement a process holding skills (here a
// Library following the bucket on a connection of its own, as a router
// does) acts on.
func TestSkillsReloadVerb(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	url := bustest.EmbeddedURL(t)
	b := bustest.New(t, url)
	db := pgtest.New(t)
	addr := startAdminAPI(t, ctx, admin.Config{}, admin.Deps{DB: db,
		Skills: func(ctx context.Context) (jetstream.KeyValue, error) {
			return skill.OpenBucket(ctx, b.JetStream(), b.Topology())
		}})
	router := bustest.NewWith(t, url, b.Topology())
	kv, err := skill.OpenBucket(ctx, router.JetStream(), router.Topology())
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

	for _, tt := range []struct {
		args   []string
		wantBy string
	}{
		{[]string{"reload"}, "admin:tester"},
		{[]string{"reload", "--by", "ops"}, "admin:ops"},
	} {
		var out, errOut bytes.Buffer
		if err := runSkills(ctx, append(tt.args, "--admin-addr", addr), &out, &errOut); err != nil {
			t.Fatalf("%v: %v (stderr %s)", tt.args, err, errOut.String())
		}
		if !strings.HasPrefix(out.String(), "skill reload announced (revision ") || !strings.Contains(out.String(), ", by "+tt.wantBy+" at ") {
			t.Errorf("%v printed %q, want the announcement by %s", tt.args, out.String(), tt.wantBy)
		}
	}
	deadline := time.Now().Add(10 * time.Second)
	for !lib.Current().Has("deploy") {
		if time.Now().After(deadline) {
			t.Fatal("the follower did not reload")
		}
		time.Sleep(20 * time.Millisecond)
	}
	var audited int
	if err := db.QueryRow(ctx, `SELECT count(*) FROM audit_log WHERE action = 'skills.reload'`).Scan(&audited); err != nil || audited != 2 {
		t.Errorf("audited %d reloads (%v), want 2", audited, err)
	}
	for _, args := range [][]string{nil, {"load"}, {"reload", "extra"}} {
		var out, errOut bytes.Buffer
		if err := runSkills(ctx, append(args, "--admin-addr", addr), &out, &errOut); !errors.Is(err, errUsage) {
			t.Errorf("skills %v: %v, want a usage error", args, err)
		}
	}
	t.Setenv("SWITCHBOARD_ADMIN_TOKEN", "wrong")
	var out, errOut bytes.Buffer
	if err := runSkills(ctx, []string{"reload", "--admin-addr", addr}, &out, &errOut); err == nil || !strings.Contains(err.Error(), "Unauthenticated") {
		t.Errorf("wrong token: %v", err)
	}
}
