package pg_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/switchboard-chat/switchboard/pkg/pg"
	"github.com/switchboard-chat/switchboard/pkg/pg/pgtest"
)

func TestIsUnavailable(t *testing.T) {
	t.Parallel()
	refused := &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}
	cases := []struct {
		name string
		err  error
		want bool
	}{
		{"nil", nil, false},
		{"connection refused", fmt.Errorf("claim: %w", refused), true},
		{"connection reset mid-query", &net.OpError{Op: "read", Net: "tcp", Err: syscall.ECONNRESET}, true},
		{"unexpected EOF", fmt.Errorf("insert: %w", io.ErrUnexpectedEOF), true},
		{"conn closed", fmt.Errorf("query: %w", pgconn.ErrConnClosed), true},
		{"admin shutdown", &pgconn.PgError{Code: "57P01"}, true},
		{"crash of another backend", &pgconn.PgError{Code: "57P02"}, true},
		{"starting up", &pgconn.PgError{Code: "57P03"}, true},
		{"too many connections", &pgconn.PgError{Code: "53300"}, true},
		{"connection failure", &pgconn.PgError{Code: "08006"}, true},
		{"unique violation", &pgconn.PgError{Code: "23505"}, false},
		{"syntax error", &pgconn.PgError{Code: "42601"}, false},
		{"canceled", fmt.Errorf("query: %w", context.Canceled), false},
		{"deadline", context.DeadlineExceeded, false},
		{"other", errors.New("turn without a session"), false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := pg.IsUnavailable(c.err); got != c.want {
				t.Fatalf("IsUnavailable(%v) = %v, want %v", c.err, got, c.want)
			}
		})
	}
}

// TestIsUnavailableFromARealPool: what a pool returns for a server that
// is gone is unavailability; what it returns for a bad statement is not.
func TestIsUnavailableFromARealPool(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	db := pgtest.New(t)
	_, err := db.Exec(ctx, `SELEC 1`)
	if err == nil || pg.IsUnavailable(err) {
		t.Fatalf("a syntax error: %v, unavailable = %v", err, pg.IsUnavailable(err))
	}

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // nothing listens there now
	gone, err := pgxpool.New(ctx, "postgres://postgres@"+addr+"/test?sslmode=disable&connect_timeout=5")
	if err != nil {
		t.Fatal(err)
	}
	defer gone.Close()
	_, err = gone.Exec(ctx, `SELECT 1`)
	if err == nil || !pg.IsUnavailable(err) {
		t.Fatalf("a server that is gone: %v, unavailable = %v", err, pg.IsUnavailable(err))
	}
}
