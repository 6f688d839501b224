package pg_test

import (
	"context"
	"net"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/switchboard-chat/switchboard/pkg/pg"
	"github.com/switchboard-chat/switchboard/pkg/pg/pgtest"
)

// TestReachable: a pool whose every connection is taken is busy, not
// unready, while the server answers; a server that does not answer is
// unready, saturated pool or not. The check's context has no deadline:
// a check that waited for a pool connection would hang here instead of
// answering.
func TestReachable(t *testing.T) {
	t.Parallel()
	closed, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	deadAddr := closed.Addr().String()
	closed.Close() // nothing listens there now: connections are refused
	for _, tt := range []struct {
		name      string
		url       string
		saturated bool
		wantErr   bool
	}{
		{"idle pool", pgtest.URL(), false, false},
		{"saturated pool, server up", pgtest.URL(), true, false},
		{"server down", "postgres://postgres@" + deadAddr + "/test?sslmode=disable&connect_timeout=2", false, true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			cfg, err := pgxpool.ParseConfig(tt.url)
			if err != nil {
				t.Fatal(err)
			}
			cfg.MaxConns = 1
			pool, err := pgxpool.NewWithConfig(ctx, cfg)
			if err != nil {
				t.Fatal(err)
			}
			defer pool.Close()
			if tt.saturated {
				conn, err := pool.Acquire(ctx)
				if err != nil {
					t.Fatal(err)
				}
				defer conn.Release()
			}
			err = pg.Reachable(pool)(ctx)
			if (err != nil) != tt.wantErr {
				t.Fatalf("Reachable = %v, want error %v", err, tt.wantErr)
			}
		})
	}
}
