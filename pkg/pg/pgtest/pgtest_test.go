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

// Under Main a test's schema, once the test ended, is emptied and taken by
// a later test instead of a migrated one: its rows are gone, its sequences
// start again, and whatever the ended test left connected reaches it no
// more. A schema the test changed is dropped instead.
func TestEndedTestsSchemaIsReusedEmpty(t *testing.T) {
	ctx := context.Background()
	oid := func(t *testing.T, db interface {
		QueryRow(context.Context, string, ...any) pgx.Row
	}) uint32 {
		t.Helper()
		var id uint32
		if err := db.QueryRow(ctx, `SELECT oid FROM pg_namespace WHERE nspname = current_schema()`).Scan(&id); err != nil {
			t.Fatal(err)
		}
		return id
	}
	exists := func(t *testing.T, id uint32) bool {
		t.Helper()
		conn, err := pgx.Connect(ctx, pgtest.URL())
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close(ctx)
		var ok bool
		if err := conn.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_namespace WHERE oid = $1)`, id).Scan(&ok); err != nil {
			t.Fatal(err)
		}
		return ok
	}
	for _, tc := range []struct {
		name   string
		change string // what the first test does to its schema's shape
		reused bool
	}{
		{"rows only", "", true},
		{"a trigger added", `CREATE FUNCTION refuse() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN RAISE EXCEPTION 'no'; END $$;
			CREATE TRIGGER refuse BEFORE INSERT ON sessions FOR EACH ROW EXECUTE FUNCTION refuse()`, false},
		{"a table renamed", `ALTER TABLE sessions RENAME TO sessions_away`, false},
		{"a table added", `CREATE TABLE gate (open boolean)`, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var first uint32
			var left *pgx.Conn
			t.Run("first", func(t *testing.T) {
				pool, url := pgtest.NewWithURL(t)
				first = oid(t, pool)
				if _, err := pool.Exec(ctx, `INSERT INTO audit_log (actor, action) VALUES ('a', 'b'), ('c', 'd')`); err != nil {
					t.Fatal(err)
				}
				if tc.change != "" {
					if _, err := pool.Exec(ctx, tc.change); err != nil {
						t.Fatal(err)
					}
				}
				var err error
				if left, err = pgx.Connect(ctx, url); err != nil {
					t.Fatal(err)
				}
			})
			defer left.Close(ctx)
			var rerr error
			if _, rerr = left.Exec(ctx, `SELECT count(*) FROM audit_log`); rerr == nil {
				t.Error("a connection the ended test left still reaches its schema's tables")
			}
			pool := pgtest.New(t)
			if got := oid(t, pool) == first; got != tc.reused {
				t.Fatalf("schema reused: %v, want %v", got, tc.reused)
			}
			if !tc.reused && exists(t, first) {
				t.Fatal("the changed schema was kept")
			}
			var n int
			if err := pool.QueryRow(ctx, `SELECT count(*) FROM audit_log`).Scan(&n); err != nil || n != 0 {
				t.Fatalf("%d rows in the next test's audit_log (%v), want none", n, err)
			}
			var id int64
			if err := pool.QueryRow(ctx, `INSERT INTO audit_log (actor, action) VALUES ('e', 'f') RETURNING id`).Scan(&id); err != nil || id != 1 {
				t.Fatalf("the next test's first audit_log id is %d (%v), want 1", id, err)
			}
			if _, err := pool.Exec(ctx, `SELECT count(*) FROM sessions`); err != nil {
				t.Fatalf("the next test's schema: %v", err)
			}
			// A migration the next test applies is recorded: goose's
			// sequence goes on where it was.
			if _, err := pool.Exec(ctx, `INSERT INTO goose_db_version (version_id, is_applied) VALUES (999999, true)`); err != nil {
				t.Fatalf("record a migration in the next test's schema: %v", err)
			}
		})
	}
}
