// Package pg opens Switchboard's Postgres pool and applies the schema
// migrations embedded in the binary.
package pg

import (
	"context"
	"database/sql"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/pressly/goose/v3"
	"github.com/pressly/goose/v3/lock"
)

// DefaultURL is used when no database URL is configured.
const DefaultURL = "postgres://postgres@127.0.0.1:5432/switchboard?sslmode=disable"

//go:embed migrations/*.sql
var migrations embed.FS

// Open connects a pool and checks the server answers.
func Open(ctx context.Context, url string) (*pgxpool.Pool, error) {
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, fmt.Errorf("parse postgres url: %w", err)
	}
	return OpenConfig(ctx, cfg)
}

// OpenConfig connects a pool from a parsed config.
func OpenConfig(ctx context.Context, cfg *pgxpool.Config) (*pgxpool.Pool, error) {
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("open postgres pool: %w", err)
	}
	if err := pool.Ping(ctx); err != nil {
		pool.Close()
		return nil, fmt.Errorf("ping postgres %s:%d: %w", cfg.ConnConfig.Host, cfg.ConnConfig.Port, err)
	}
	return pool, nil
}

// Migrations is the embedded migration tree (one directory of .sql files).
func Migrations() fs.FS {
	sub, err := fs.Sub(migrations, "migrations")
	if err != nil {
		panic(err) // the embed pattern guarantees the directory exists
	}
	return sub
}

// provider is goose over the embedded migrations. Out of order:
// migrations are numbered by owner (001xx router, 002xx worker, 003xx
// delivery), so a release can add one below a number a database already
// has; each only depends on lower numbers.
func provider(db *sql.DB, opts ...goose.ProviderOption) (*goose.Provider, error) {
	return providerOf(db, Migrations(), opts...)
}

func providerOf(db *sql.DB, fsys fs.FS, opts ...goose.ProviderOption) (*goose.Provider, error) {
	p, err := goose.NewProvider(goose.DialectPostgres, db, fsys, append(opts, goose.WithAllowOutofOrder(true))...)
	if err != nil {
		return nil, fmt.Errorf("migration provider: %w", err)
	}
	return p, nil
}

// MigrateOption changes how Migrate runs.
type MigrateOption func(*migrateConfig)

type migrateConfig struct {
	lockID int64
	source fs.FS
}

// MigrateSource makes Migrate apply the migrations of fsys, a tree of
// the embedded one's files (Migrations) changed for a purpose, instead:
// pgtest's fresh, empty schemas build their indexes without
// CONCURRENTLY.
func MigrateSource(fsys fs.FS) MigrateOption {
	return func(c *migrateConfig) { c.source = fsys }
}

// MigrateLockID makes Migrate serialize on advisory lock id instead of
// goose's default. The default lock is one per database, whatever the
// schema: pgtest, which migrates a fresh schema per test, takes one per
// schema so that parallel tests (and test binaries) do not queue behind
// each other's migrations.
func MigrateLockID(id int64) MigrateOption {
	return func(c *migrateConfig) { c.lockID = id }
}

// Migrate applies every pending migration. Replicas may run it at once: a
// Postgres advisory lock serializes them.
func Migrate(ctx context.Context, pool *pgxpool.Pool, log *slog.Logger, opts ...MigrateOption) error {
	cfg := migrateConfig{lockID: lock.DefaultLockID, source: Migrations()}
	for _, o := range opts {
		o(&cfg)
	}
	db := stdlib.OpenDBFromPool(pool)
	defer db.Close()
	// The lock is tried every second (goose's default: every 5 s) for up
	// to 5 minutes: a replica starts soon after the migration ahead of it
	// ends.
	locker, err := lock.NewPostgresSessionLocker(lock.WithLockID(cfg.lockID), lock.WithLockTimeout(1, 300))
	if err != nil {
		return fmt.Errorf("migration locker: %w", err)
	}
	p, err := providerOf(db, cfg.source, goose.WithSessionLocker(locker))
	if err != nil {
		return err
	}
	results, err := p.Up(ctx)
	for _, r := range results {
		if log != nil && r.Error == nil {
			log.Info("migration applied", "version", r.Source.Version, "file", r.Source.Path, "duration", r.Duration)
		}
	}
	if err != nil {
		var partial *goose.PartialError
		if errors.As(err, &partial) {
			return fmt.Errorf("migration %s failed: %w", partial.Failed.Source.Path, partial.Err)
		}
		return fmt.Errorf("migrate: %w", err)
	}
	return nil
}

// Version reports the schema version the database is at.
func Version(ctx context.Context, pool *pgxpool.Pool) (int64, error) {
	db := stdlib.OpenDBFromPool(pool)
	defer db.Close()
	p, err := provider(db)
	if err != nil {
		return 0, err
	}
	return p.GetDBVersion(ctx)
}

// ErrSchemaBehind: the database lacks migrations this build has.
var ErrSchemaBehind = errors.New("the database schema is behind this build: run `switchboard migrate` first")

// CheckSchema reports ErrSchemaBehind when migrations this build embeds
// are not applied to the database (a rollout that started before its
// migration finished): a service must not serve against it.
func CheckSchema(ctx context.Context, pool *pgxpool.Pool) error {
	db := stdlib.OpenDBFromPool(pool)
	defer db.Close()
	p, err := provider(db)
	if err != nil {
		return err
	}
	pending, err := p.HasPending(ctx)
	if err != nil {
		return fmt.Errorf("check the schema version: %w", err)
	}
	if pending {
		current, target, _ := p.GetVersions(ctx)
		return fmt.Errorf("%w (database at %d, this build has up to %d)", ErrSchemaBehind, current, target)
	}
	return nil
}

// EnsureDatabase creates the database named in url if it does not exist,
// connecting to the server's "postgres" database to do so. `switchboard
// dev` uses it so a first run needs no manual setup.
func EnsureDatabase(ctx context.Context, url string) error {
	cfg, err := pgx.ParseConfig(url)
	if err != nil {
		return fmt.Errorf("parse postgres url: %w", err)
	}
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err == nil {
		return conn.Close(ctx)
	}
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || pgErr.Code != "3D000" { // invalid_catalog_name
		return fmt.Errorf("connect postgres: %w", err)
	}
	name := cfg.Database
	cfg.Database = "postgres"
	conn, err = pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return fmt.Errorf("connect postgres to create %s: %w", name, err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()); err != nil {
		if errors.As(err, &pgErr) && pgErr.Code == "42P04" { // duplicate_database: a concurrent creator won
			return nil
		}
		return fmt.Errorf("create database %s: %w", name, err)
	}
	return nil
}
