package pgtest_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/pressly/goose/v3/lock"

	"github.com/switchboard-chat/switchboard/pkg/pg/pgtest"
)

// A test's fresh schema migrates under a lock of its own: goose's
// database-wide migration lock, held meanwhile by a deploy or by another
// test binary, does not hold it up (it queued every parallel test's
// migration behind the others', and timed them out under load).
func TestNewDoesNotWaitForTheDatabaseMigrationLock(t *testing.T) {
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, pgtest.URL())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	// Tried until taken, not waited for in Postgres: another package's
	// test may be migrating with the default lock; it holds it briefly.
	for locked := false; !locked; {
		if err := conn.QueryRow(ctx, `SELECT pg_try_advisory_lock($1)`, lock.DefaultLockID).Scan(&locked); err != nil {
			t.Fatal(err)
		}
		if !locked {
			time.Sleep(50 * time.Millisecond)
		}
	}
	defer conn.Exec(ctx, `SELECT pg_advisory_unlock($1)`, lock.DefaultLockID) //nolint:errcheck
	pool := pgtest.New(t)
	var n int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM audit_log`).Scan(&n); err != nil {
		t.Fatalf("a migrated schema: %v", err)
	}
}
