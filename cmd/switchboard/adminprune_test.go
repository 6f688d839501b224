package main

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"

	"github.com/switchboard-chat/switchboard/pkg/pg/pgtest"
	"github.com/switchboard-chat/switchboard/pkg/redisx/redistest"
	"github.com/switchboard-chat/switchboard/services/admin"
)

// testPruner is the admin process's sweeper on db, opening a Redis of
// the test's own on its first call; closed when the test ends.
func testPruner(t *testing.T, db *pgxpool.Pool) (*lazyPruner, *redis.Client, string) {
	t.Helper()
	rdb, prefix := redistest.New(t)
	cfg := defaultConfig()
	cfg.Redis.URL, cfg.Redis.Prefix = redistest.URL(), prefix
	pruner := &lazyPruner{a: newApp("admin", cfg), db: db}
	t.Cleanup(pruner.close)
	return pruner, rdb, prefix
}

// TestSessionsPruneVerb drives `switchboard sessions prune` against a real
// admin API whose pruner opens the real Redis on the first call.
func TestSessionsPruneVerb(t *testing.T) {
	ctx := context.Background()
	db := pgtest.New(t)
	pruner, rdb, prefix := testPruner(t, db)
	addr := startAdminAPI(t, ctx, admin.Config{}, admin.Deps{DB: db, Pruner: pruner})

	old := time.Now().Add(-100 * 24 * time.Hour)
	for _, row := range []struct {
		key, platform string
		at            time.Time
	}{
		{"agent:main:telegram:dm:1", "telegram", old},
		{"agent:main:telegram:dm:2", "telegram", old},
		{"agent:main:telegram:dm:3", "telegram", time.Now()},
		{"agent:main:discord:dm:1", "discord", old},
	} {
		if _, err := db.Exec(ctx, `INSERT INTO sessions (session_key, session_id, platform, created_at, updated_at, last_activity_at)
			VALUES ($1, $1, $2, $3, $3, $3)`, row.key, row.platform, row.at); err != nil {
			t.Fatal(err)
		}
	}
	// A turn runs in one of the old sessions.
	if err := rdb.Set(ctx, prefix+"lock:agent:main:telegram:dm:2", "worker", time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	sessions := func() int {
		var n int
		if err := db.QueryRow(ctx, `SELECT count(*) FROM sessions`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	run := func(args ...string) (string, error) {
		var out bytes.Buffer
		err := runSessions(ctx, append(args, "--admin-addr", addr), &out)
		return out.String(), err
	}

	out, err := run("prune", "--older-than", "90d", "--platform", "telegram", "--dry-run")
	if err != nil || !strings.Contains(out, "would delete 1 sessions idle for 90d or longer on telegram (1 busy") {
		t.Fatalf("dry run: %v\n%s", err, out)
	}
	if n := sessions(); n != 4 {
		t.Fatalf("dry run deleted: %d sessions left", n)
	}
	out, err = run("prune", "--platform", "telegram") // 90 days, as Hermes's default
	if err != nil || !strings.Contains(out, "deleted 1 sessions") || !strings.Contains(strings.Join(strings.Fields(out), " "), " sessions 1 ") {
		t.Fatalf("prune: %v\n%s", err, out)
	}
	if n := sessions(); n != 3 {
		t.Fatalf("%d sessions left, want 3 (busy, recent, discord)", n)
	}
	var audited int
	if err := db.QueryRow(ctx, `SELECT count(*) FROM audit_log WHERE action = 'sessions.prune' AND actor LIKE '%tester'`).Scan(&audited); err != nil || audited != 1 {
		t.Fatalf("audit rows %d, %v", audited, err)
	}
	for _, args := range [][]string{{"prune", "--older-than", ""}, {"prune", "--older-than", "-1d"}, {"prune", "--older-than", "soon"}, {"prune", "--older-than", "0"}} {
		if _, err := run(args...); !errors.Is(err, errUsage) {
			t.Errorf("%v: %v, want usage", args, err)
		}
	}
}
