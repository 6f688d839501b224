package pg_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/pressly/goose/v3"
	"github.com/pressly/goose/v3/lock"

	"github.com/switchboard-chat/switchboard/pkg/pg"
	"github.com/switchboard-chat/switchboard/pkg/pg/pgtest"
)

func TestMigrationsApplyAndAreIdempotent(t *testing.T) {
	t.Parallel()
	pool, url := pgtest.NewWithURL(t)
	ctx := context.Background()
	v, err := pg.Version(ctx, pool)
	if err != nil {
		t.Fatal(err)
	}
	if v < 1 {
		t.Fatalf("schema version %d after migrate", v)
	}
	if err := pg.Migrate(ctx, pool, nil); err != nil {
		t.Fatalf("second migrate: %v", err)
	}
	if _, err := pool.Exec(ctx, `INSERT INTO audit_log (actor, action) VALUES ('test', 'check')`); err != nil {
		t.Fatalf("audit_log missing: %v", err)
	}
	// The URL form reaches the same schema (for subprocesses and CLIs).
	other, err := pg.Open(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	var n int
	if err := other.QueryRow(ctx, `SELECT count(*) FROM audit_log`).Scan(&n); err != nil || n != 1 {
		t.Fatalf("count via url = %d, %v", n, err)
	}
}

// A release may add a migration numbered below one a database already
// has (numbers are per owning service): upgrading applies it.
func TestMigrateAppliesAMigrationNumberedBelowTheNewest(t *testing.T) {
	t.Parallel()
	pool := pgtest.New(t)
	ctx := context.Background()
	db := stdlib.OpenDBFromPool(pool)
	defer db.Close()
	p, err := goose.NewProvider(goose.DialectPostgres, db, pg.Migrations())
	if err != nil {
		t.Fatal(err)
	}
	newest, err := pg.Version(ctx, pool)
	if err != nil {
		t.Fatal(err)
	}
	const older = 102 // router's range, below the worker's and delivery's
	if older >= newest {
		t.Fatalf("newest migration %d is not above %d", newest, older)
	}
	if err := pg.CheckSchema(ctx, pool); err != nil {
		t.Fatalf("a migrated schema: %v", err)
	}
	// The database as an earlier release left it: everything but 00102.
	if _, err := p.ApplyVersion(ctx, older, false); err != nil {
		t.Fatalf("undo %d: %v", older, err)
	}
	// Services of this build refuse to serve it until it is migrated.
	if err := pg.CheckSchema(ctx, pool); !errors.Is(err, pg.ErrSchemaBehind) {
		t.Fatalf("a schema missing %d: CheckSchema = %v, want ErrSchemaBehind", older, err)
	}
	// Under the schema's own lock: goose's default one, here held as
	// another binary's migration of the database holds it, would make
	// the test wait for that (and that for the test).
	release := holdMigrationLock(t)
	upgrade, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	if err := pg.Migrate(upgrade, pool, nil, pgtest.MigrateLock(t, pool)); err != nil {
		t.Fatalf("upgrade: %v", err)
	}
	release()
	var ok bool
	if err := pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM goose_db_version WHERE version_id = $1 AND is_applied)`, older).Scan(&ok); err != nil || !ok {
		t.Fatalf("migration %d not applied on upgrade (%v)", older, err)
	}
	if err := pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_indexes WHERE schemaname = current_schema() AND indexname = 'sessions_platform_key_idx')`).Scan(&ok); err != nil || !ok {
		t.Fatalf("its index is missing (%v)", err)
	}
}

// A migration with nothing to apply (a replica's start, a restart of
// `switchboard dev`, the `switchboard dev` a test starts on a schema
// pgtest migrated) takes no lock (goose's Up asks HasPending first,
// without it): it does not wait for another process migrating the
// database meanwhile under goose's database-wide lock. The tests that
// start dev processes rely on it; a goose upgrade that changed it would
// queue them behind each other again.
func TestMigrateWithNothingPendingTakesNoLock(t *testing.T) {
	t.Parallel()
	pool := pgtest.New(t)
	release := holdMigrationLock(t)
	defer release()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := pg.Migrate(ctx, pool, nil); err != nil {
		t.Fatalf("migrate an up-to-date schema while another process holds the migration lock: %v", err)
	}
}

// holdMigrationLock takes goose's default migration lock, as another
// process migrating the database does, until release (or the test's
// end). It is tried until taken, not waited for in Postgres: a process
// elsewhere may be migrating under it; it holds it briefly.
func holdMigrationLock(t *testing.T) (release func()) {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, pgtest.URL())
	if err != nil {
		t.Fatal(err)
	}
	for locked := false; !locked; {
		if err := conn.QueryRow(ctx, `SELECT pg_try_advisory_lock($1)`, lock.DefaultLockID).Scan(&locked); err != nil {
			t.Fatal(err)
		}
		if !locked {
			time.Sleep(50 * time.Millisecond)
		}
	}
	var once sync.Once
	release = func() {
		once.Do(func() {
			_, _ = conn.Exec(ctx, `SELECT pg_advisory_unlock($1)`, lock.DefaultLockID)
			_ = conn.Close(ctx)
		})
	}
	t.Cleanup(release)
	return release
}

func TestSchemasAreIsolated(t *testing.T) {
	t.Parallel()
	a, b := pgtest.New(t), pgtest.New(t)
	ctx := context.Background()
	if _, err := a.Exec(ctx, `INSERT INTO audit_log (actor, action) VALUES ('a', 'x')`); err != nil {
		t.Fatal(err)
	}
	for name, p := range map[string]*pgxpool.Pool{"a": a, "b": b} {
		var n int
		if err := p.QueryRow(ctx, `SELECT count(*) FROM audit_log`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		want := map[string]int{"a": 1, "b": 0}[name]
		if n != want {
			t.Errorf("schema %s has %d rows, want %d", name, n, want)
		}
	}
}

func TestOpenReportsUnreachableServer(t *testing.T) {
	t.Parallel()
	_, err := pg.Open(context.Background(), "postgres://nobody@127.0.0.1:1/none?connect_timeout=1")
	if err == nil {
		t.Fatal("open succeeded against a closed port")
	}
}

// AsyncCommit applies to its batch's transaction only.
func TestAsyncCommitIsLocalToItsTransaction(t *testing.T) {
	t.Parallel()
	pool := pgtest.New(t)
	ctx := context.Background()
	conn, err := pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	b := &pgx.Batch{}
	b.Queue(pg.AsyncCommit)
	b.Queue(`SHOW synchronous_commit`)
	br := conn.SendBatch(ctx, b)
	if _, err := br.Exec(); err != nil {
		t.Fatal(err)
	}
	var inside, after string
	if err := br.QueryRow().Scan(&inside); err != nil {
		t.Fatal(err)
	}
	if err := br.Close(); err != nil {
		t.Fatal(err)
	}
	if err := conn.QueryRow(ctx, `SHOW synchronous_commit`).Scan(&after); err != nil {
		t.Fatal(err)
	}
	if inside != "off" || after == "off" {
		t.Fatalf("synchronous_commit %q in the batch, %q after it; want off, then the session's setting", inside, after)
	}
}
