// Package pgtest gives each test its own Postgres schema with every
// migration applied, on the real server (DATABASE_URL, default the local
// test database), dropped when the test ends.
package pgtest

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"hash/fnv"
	"io/fs"
	"os"
	"strings"
	"sync"
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
	b := make([]byte, 5)
	_, _ = rand.Read(b)
	schema := "t_" + hex.EncodeToString(b)

	admin, err := pgx.Connect(ctx, URL())
	if err != nil {
		t.Fatalf("connect postgres %s: %v", URL(), err)
	}
	defer admin.Close(ctx)
	if _, err := admin.Exec(ctx, "CREATE SCHEMA "+schema); err != nil {
		t.Fatalf("create schema: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		conn, err := pgx.Connect(ctx, URL())
		if err != nil {
			t.Logf("drop schema %s: %v", schema, err)
			return
		}
		defer conn.Close(ctx)
		if _, err := conn.Exec(ctx, "DROP SCHEMA "+schema+" CASCADE"); err != nil {
			t.Logf("drop schema %s: %v", schema, err)
		}
	})

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
	// The schema's own migration lock: goose's default is one per
	// database, which queued every parallel test's migrations (in every
	// test binary) behind each other's, a second's poll apiece.
	if err := pg.Migrate(ctx, pool, nil, pg.MigrateLockID(lockID(schema)), pg.MigrateSource(freshSchema())); err != nil {
		t.Fatalf("migrate schema %s: %v", schema, err)
	}
	return pool, withSearchPath(URL(), schema)
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
