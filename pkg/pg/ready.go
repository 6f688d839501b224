package pg

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Reachable is the readiness check of a pool: whether the server answers,
// not whether the pool has a connection free. A pool whose connections
// are all in use (a worker has 4, all busy with turns) is busy, not
// broken: pinging through it waited for a free connection up to the
// check's 2 s and failed /readyz, taking every loaded replica out of its
// Service at once (the API gateway, admin), which moves nothing forward.
// So when the pool is saturated the check opens one short connection of
// its own, outside the pool, pings and closes it: the server up is ready,
// the server down or refusing connections (max_connections reached) is
// not. Otherwise it pings through the pool as before, an idle connection
// or a new one.
func Reachable(pool *pgxpool.Pool) func(context.Context) error {
	return func(ctx context.Context) error {
		if st := pool.Stat(); st.IdleConns() > 0 || st.TotalConns() < st.MaxConns() {
			return pool.Ping(ctx)
		}
		cc := pool.Config().ConnConfig
		conn, err := pgconn.ConnectConfig(ctx, &cc.Config)
		if err != nil {
			return fmt.Errorf("pool busy, and a connection of its own failed: %w", err)
		}
		defer conn.Close(context.WithoutCancel(ctx))
		if err := conn.Ping(ctx); err != nil {
			return fmt.Errorf("pool busy, and a ping of its own failed: %w", err)
		}
		return nil
	}
}
