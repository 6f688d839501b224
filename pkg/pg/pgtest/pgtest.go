// Package pgtest gives each test its own Postgres schema with every
// migration applied, on the real server (DATABASE_URL, default the local
// test database), dropped when the test ends or, under Main, emptied and
// kept for a later test of the binary.
package pgtest

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/fnv"
	"io/fs"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/fstest"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/switchboard-chat/switchboard/pkg/pg"
)

// URL is the database tests use.
func URL() string {
	if u := os.Getenv("DATABASE_URL"); u != "" {
		return u
	}
	return "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"
}

// New returns a pool whose search_path is a fresh, migrated schema.
func New(t testing.TB) *pgxpool.Pool {
	t.Helper()
	pool, _ := NewWithURL(t)
	return pool
}

// NewWithURL is New and also returns a URL that reaches the same schema,
// for code under test that opens its own pool (another process, a CLI).
func NewWithURL(t testing.TB) (*pgxpool.Pool, string) {
	t.Helper()
	// Generous: a loaded CI machine (two cores, -race, every package's
	// tests at once) must slow a test down, never fail it here.
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	schema, migrated := takeSpare()
	if !migrated {
		schema = newSchemaName()
		admin, err := pgx.Connect(ctx, URL())
		if err != nil {
			t.Fatalf("connect postgres %s: %v", URL(), err)
		}
		defer admin.Close(ctx)
		if _, err := admin.Exec(ctx, "CREATE SCHEMA "+schema); err != nil {
			t.Fatalf("create schema: %v", err)
		}
	}
	// Registered before the pool's Close, so it runs after it.
	t.Cleanup(func() { release(t, schema) })

	cfg, err := pgxpool.ParseConfig(URL())
	if err != nil {
		t.Fatal(err)
	}
	cfg.ConnConfig.RuntimeParams["search_path"] = schema
	cfg.MaxConns = 8
	pool, err := pg.OpenConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	if !migrated {
		// The schema's own migration lock: goose's default is one per
		// database, which queued every parallel test's migrations (in
		// every test binary) behind each other's, a second's poll apiece.
		if err := pg.Migrate(ctx, pool, nil, pg.MigrateLockID(lockID(schema)), pg.MigrateSource(freshSchema())); err != nil {
			t.Fatalf("migrate schema %s: %v", schema, err)
		}
		if pooled.Load() {
			noteFresh(ctx, t, pool, schema)
		}
	}
	return pool, withSearchPath(URL(), schema)
}

func newSchemaName() string {
	b := make([]byte, 5)
	_, _ = rand.Read(b)
	return "t_" + hex.EncodeToString(b)
}

// Main runs m's tests (from a package's TestMain: os.Exit(pgtest.Main(m)))
// with their schemas reused. Migrating a schema is seconds of Postgres
// work on a loaded two-core machine and dropping one most of a second,
// once per test; emptying one is milliseconds. So when a test ends its
// schema is emptied (every row deleted, every sequence restarted) and
// renamed, and a later test of the binary takes it instead of migrating
// its own. Renamed, the schema is out of reach of anything the ended test
// left connected, as a dropped one was. A schema whose tables, columns,
// indexes, constraints, functions or triggers the test changed, or whose
// rows it could not delete in time, is dropped instead. The schemas left
// over are dropped when the tests have ended. Without Main, New migrates
// a schema per test and drops it at the test's end.
func Main(m *testing.M) int {
	pooled.Store(true)
	if err := vacuumCatalogs(); err != nil {
		fmt.Fprintf(os.Stderr, "pgtest: vacuum the catalogs: %v\n", err)
	}
	code := m.Run()
	if err := dropSpares(); err != nil {
		fmt.Fprintf(os.Stderr, "pgtest: drop the spare schemas: %v\n", err)
	}
	return code
}

var (
	pooled atomic.Bool
	spare  struct {
		sync.Mutex
		schemas []string
		// fresh is what a freshly migrated schema holds: a released
		// schema of another shape is not reused.
		fresh *freshSchemaShape
	}
)

// freshSchemaShape is a freshly migrated schema's shape (its
// fingerprint), and the tables and sequences emptying one of that shape
// resets (not goose's: the next migration's row would take an id its
// table holds).
type freshSchemaShape struct {
	print     string
	tables    []string
	sequences []string
}

func takeSpare() (string, bool) {
	spare.Lock()
	defer spare.Unlock()
	if n := len(spare.schemas); n > 0 {
		schema := spare.schemas[n-1]
		spare.schemas = spare.schemas[:n-1]
		return schema, true
	}
	return "", false
}

// noteFresh records the shape of schema, just migrated, as the one a
// released schema must have to be reused.
func noteFresh(ctx context.Context, t testing.TB, pool *pgxpool.Pool, schema string) {
	t.Helper()
	conn, err := pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	print, err := shape(ctx, conn.Conn(), schema)
	if err != nil {
		t.Fatalf("the shape of schema %s: %v", schema, err)
	}
	fresh := &freshSchemaShape{print: print}
	rows, err := conn.Query(ctx, `SELECT tablename FROM pg_tables WHERE schemaname = $1 AND tablename <> 'goose_db_version'`, schema)
	if err == nil {
		fresh.tables, err = pgx.CollectRows(rows, pgx.RowTo[string])
	}
	if err == nil {
		rows, err = conn.Query(ctx, `SELECT s.relname FROM pg_class s JOIN pg_sequence q ON q.seqrelid = s.oid
			WHERE s.relnamespace = $1::regnamespace AND NOT EXISTS (
				SELECT 1 FROM pg_depend d JOIN pg_class t ON t.oid = d.refobjid
				WHERE d.classid = 'pg_class'::regclass AND d.objid = s.oid AND t.relname = 'goose_db_version')`, schema)
	}
	if err == nil {
		fresh.sequences, err = pgx.CollectRows(rows, pgx.RowTo[string])
	}
	if err != nil {
		t.Fatalf("the tables and sequences of schema %s: %v", schema, err)
	}
	spare.Lock()
	if spare.fresh == nil {
		spare.fresh = fresh
	}
	spare.Unlock()
}

// release ends a test's use of schema: reused (emptied and renamed) under
// Main when its shape is still a fresh one's, dropped otherwise.
func release(t testing.TB, schema string) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, URL())
	if err != nil {
		t.Logf("release schema %s: %v", schema, err)
		return
	}
	defer conn.Close(ctx)
	if pooled.Load() {
		next := newSchemaName()
		err := empty(ctx, conn, schema, next)
		if err == nil {
			spare.Lock()
			spare.schemas = append(spare.schemas, next)
			spare.Unlock()
			return
		}
		if !errors.Is(err, errChanged) {
			t.Logf("reuse schema %s: %v; dropping it", schema, err)
		}
	}
	if _, err := conn.Exec(ctx, "DROP SCHEMA "+schema+" CASCADE"); err != nil {
		t.Logf("drop schema %s: %v", schema, err)
	}
}

var errChanged = errors.New("the schema is not a fresh one's shape")

// empty deletes every row of schema's tables but goose's, restarts its
// sequences and renames it to next, in one transaction, if its shape is
// a fresh schema's.
func empty(ctx context.Context, conn *pgx.Conn, schema, next string) error {
	tx, err := conn.Begin(ctx)
	if err != nil {
		return err
	}
	defer func() { _ = tx.Rollback(ctx) }()
	// A row lock a test left held (a connection it never closed) must not
	// hold the release up for long: the schema is dropped instead.
	if _, err := tx.Exec(ctx, `SET LOCAL lock_timeout = '5s'`); err != nil {
		return err
	}
	print, err := shape(ctx, tx.Conn(), schema)
	if err != nil {
		return err
	}
	spare.Lock()
	fresh := spare.fresh
	spare.Unlock()
	if fresh == nil || print != fresh.print {
		return errChanged
	}
	batch := &pgx.Batch{}
	for _, table := range fresh.tables {
		batch.Queue(`DELETE FROM ` + pgx.Identifier{schema, table}.Sanitize())
	}
	for _, seq := range fresh.sequences {
		batch.Queue(`ALTER SEQUENCE ` + pgx.Identifier{schema, seq}.Sanitize() + ` RESTART`)
	}
	batch.Queue(fmt.Sprintf(`ALTER SCHEMA %s RENAME TO %s`, schema, next))
	if err := tx.SendBatch(ctx, batch).Close(); err != nil {
		return err
	}
	return tx.Commit(ctx)
}

// shape is a fingerprint of what schema holds besides rows: its relations,
// columns with their types and defaults, indexes, constraints, functions,
// triggers and applied migrations, with the schema's own name taken out.
func shape(ctx context.Context, conn *pgx.Conn, schema string) (string, error) {
	var print string
	err := conn.QueryRow(ctx, `
SELECT md5(replace(coalesce(string_agg(item, E'\n' ORDER BY item), ''), $2, '')) FROM (
	SELECT format('rel %s %s %s %s', c.relname, c.relkind, c.relpersistence, c.reloptions)
	FROM pg_class c WHERE c.relnamespace = $1::regnamespace
	UNION ALL
	SELECT format('col %s.%s %s %s %s', c.relname, a.attname, format_type(a.atttypid, a.atttypmod), a.attnotnull, pg_get_expr(d.adbin, d.adrelid))
	FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid
	LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
	WHERE c.relnamespace = $1::regnamespace AND a.attnum > 0 AND NOT a.attisdropped
	UNION ALL
	SELECT 'idx ' || pg_get_indexdef(i.indexrelid)
	FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid WHERE c.relnamespace = $1::regnamespace
	UNION ALL
	SELECT format('con %s %s', conname, pg_get_constraintdef(oid)) FROM pg_constraint WHERE connamespace = $1::regnamespace
	UNION ALL
	SELECT format('fn %s(%s) %s', p.proname, pg_get_function_identity_arguments(p.oid), md5(p.prosrc))
	FROM pg_proc p WHERE p.pronamespace = $1::regnamespace
	UNION ALL
	SELECT 'trg ' || pg_get_triggerdef(t.oid)
	FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid WHERE c.relnamespace = $1::regnamespace AND NOT t.tgisinternal
) s(item)`, schema, schema+".").Scan(&print)
	if err != nil {
		return "", fmt.Errorf("read the catalog: %w", err)
	}
	var applied, sum int64
	err = conn.QueryRow(ctx, fmt.Sprintf(`SELECT count(*), coalesce(sum(version_id), 0) FROM %s.goose_db_version WHERE is_applied`, schema)).Scan(&applied, &sum)
	if err != nil {
		return "", fmt.Errorf("read the applied migrations: %w", err)
	}
	return fmt.Sprintf("%s %d %d", print, applied, sum), nil
}

// vacuumCatalogs vacuums the system catalogs holding many dead rows,
// unless another test binary is at it. Every schema created and dropped
// leaves thousands of dead rows in pg_attribute, pg_class, pg_depend and
// the like; autovacuum clears them on a default server, but a server
// with it off (as on the machines this project's CI runs on) kept them
// run after run, until each catalog read a test's set-up does took a
// second. (A user without the right to vacuum the catalogs gets
// Postgres's warning and nothing done.)
func vacuumCatalogs() error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	conn, err := pgx.Connect(ctx, URL())
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	var mine bool
	if err := conn.QueryRow(ctx, `SELECT pg_try_advisory_lock($1)`, vacuumLockID).Scan(&mine); err != nil || !mine {
		return err
	}
	rows, err := conn.Query(ctx, `SELECT relname FROM pg_stat_sys_tables
		WHERE schemaname = 'pg_catalog' AND n_dead_tup > 10000 AND n_dead_tup > n_live_tup`)
	if err != nil {
		return err
	}
	bloated, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return err
	}
	for _, table := range bloated {
		if _, err := conn.Exec(ctx, `VACUUM `+pgx.Identifier{"pg_catalog", table}.Sanitize()); err != nil {
			return fmt.Errorf("vacuum %s: %w", table, err)
		}
	}
	return nil
}

// vacuumLockID is the advisory lock of vacuumCatalogs: one test binary
// vacuums, the others go on.
const vacuumLockID = 0x7067746573747661 // "pgtestva"

// dropSpares drops the schemas no test holds any more.
func dropSpares() error {
	spare.Lock()
	schemas := spare.schemas
	spare.schemas = nil
	spare.Unlock()
	if len(schemas) == 0 {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	conn, err := pgx.Connect(ctx, URL())
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	_, err = conn.Exec(ctx, "DROP SCHEMA "+strings.Join(schemas, ", ")+" CASCADE")
	return err
}

// freshSchema is the embedded migrations with every CREATE and DROP
// INDEX CONCURRENTLY made a plain one, which does the same to a fresh
// schema's empty tables. A concurrent build waits for every transaction
// in the database that holds a snapshot (a statement running or waiting
// on a lock, a repeatable-read transaction) to end, whatever its schema:
// each test's migration waited for what every other test binary's tests
// held meanwhile (seconds, for a test that holds a row lock on purpose
// while another statement waits for it). pkg/pg's tests apply the
// migrations as shipped.
var freshSchema = sync.OnceValue(func() fs.FS {
	out := fstest.MapFS{}
	err := fs.WalkDir(pg.Migrations(), ".", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := fs.ReadFile(pg.Migrations(), path)
		if err != nil {
			return err
		}
		out[path] = &fstest.MapFile{Data: bytes.ReplaceAll(b, []byte("INDEX CONCURRENTLY"), []byte("INDEX")), Mode: 0o444}
		return nil
	})
	if err != nil {
		panic(fmt.Sprintf("pgtest: read the embedded migrations: %v", err))
	}
	return out
})

// MigrateLock is the migration lock of pool's schema (a pool of New), the
// one New migrated it under, for a test that runs pg.Migrate on it
// itself and has something to apply: under goose's default lock, one
// per database, it would wait for any other process migrating the shared
// database meanwhile (another test binary's, a deploy's), and they for
// it. (With nothing to apply, Migrate takes no lock.)
func MigrateLock(t testing.TB, pool *pgxpool.Pool) pg.MigrateOption {
	t.Helper()
	var schema string
	if err := pool.QueryRow(context.Background(), `SELECT current_schema()`).Scan(&schema); err != nil {
		t.Fatalf("the pool's schema: %v", err)
	}
	return pg.MigrateLockID(lockID(schema))
}

// lockID is schema's migration advisory lock.
func lockID(schema string) int64 {
	h := fnv.New64a()
	h.Write([]byte(schema))
	return int64(h.Sum64())
}

func withSearchPath(url, schema string) string {
	sep := "?"
	for _, c := range url {
		if c == '?' {
			sep = "&"
		}
	}
	return url + sep + "search_path=" + schema
}

// EmptyTablePlan is Postgres's plan (EXPLAIN) of query with args, with
// sequential scans off for the plan's one transaction: the tables of a
// fresh schema are empty, and the planner would read an empty table
// whatever its indexes, so a test that checks a query finds its index
// asks for this plan.
func EmptyTablePlan(t testing.TB, pool *pgxpool.Pool, query string, args ...any) string {
	t.Helper()
	ctx := context.Background()
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	if _, err := tx.Exec(ctx, `SET LOCAL enable_seqscan = off`); err != nil {
		t.Fatal(err)
	}
	rows, err := tx.Query(ctx, `EXPLAIN `+query, args...)
	if err != nil {
		t.Fatalf("explain: %v", err)
	}
	plan, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatalf("explain: %v", err)
	}
	return strings.Join(plan, "\n")
}
