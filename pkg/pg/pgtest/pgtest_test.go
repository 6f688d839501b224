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

// A test's fresh schema does not wait for transactions elsewhere in the
// database: a concurrent index build (CREATE INDEX CONCURRENTLY, as the
// shipped migrations do) waits for every one holding a snapshot to end,
// whatever its schema, so each test's set-up waited on what other tests
// held. Here a transaction stays open until New returns; were New to
// wait for it, it would fail when its set-up deadline ran out (it did).
func TestNewDoesNotWaitForOpenTransactions(t *testing.T) {
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, pgtest.URL())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	// A snapshot held, as a statement waiting on a row lock or a
	// repeatable-read transaction holds one: a concurrent build waits
	// for it to go.
	tx, err := conn.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead})
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx) //nolint:errcheck
	if _, err := tx.Exec(ctx, `SELECT txid_current()`); err != nil {
		t.Fatal(err)
	}
	pool := pgtest.New(t)
	var ok bool
	if err := pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_indexes WHERE schemaname = current_schema() AND indexname = 'sessions_platform_key_idx')`).Scan(&ok); err != nil || !ok {
		t.Fatalf("the index of a migration that builds it concurrently is missing (%v)", err)
	}
}
