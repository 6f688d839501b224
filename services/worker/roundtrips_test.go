package worker_test

import (
	"context"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	turnsv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/turns/v1"
	"github.com/switchboard-chat/switchboard/services/worker"
)

// roundTrips counts what the worker sends Postgres: each pipelined batch
// (one implicit transaction) and each statement sent alone.
type roundTrips struct {
	mu   sync.Mutex
	sent []string
}

func (c *roundTrips) add(what string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.sent = append(c.sent, what)
}

func (c *roundTrips) take() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := c.sent
	c.sent = nil
	return out
}

func (c *roundTrips) TraceQueryStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	c.add(d.SQL)
	return ctx
}
func (c *roundTrips) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}
func (c *roundTrips) TraceBatchStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceBatchStartData) context.Context {
	c.add("batch")
	return ctx
}
func (c *roundTrips) TraceBatchQuery(context.Context, *pgx.Conn, pgx.TraceBatchQueryData) {}
func (c *roundTrips) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData)     {}

// A plain turn (no tool, delivered once) costs the worker two Postgres
// round trips, each one implicit transaction: its first read
// (BeginTurn) and its end (Finish, with its input). The attempt fence
// (migration 00217) adds none: a first attempt claims nothing, and its
// writes call the fence with the attempt instead of without.
func TestPlainTurnMakesTwoPostgresRoundTrips(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.setGeneration("s1", 1)
	counted := &roundTrips{}
	cfg := h.db.Config()
	cfg.ConnConfig.Tracer = counted
	db, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(db.Close)
	h.startWorker("w1", func(_ *worker.Config, d *worker.Deps) { d.DB = db })
	// A first turn warms what a worker reads once.
	warm := h.requestTurn("s1", "hello", turnOpts{})
	if c := h.waitCompleted(warm.TurnId); c.GetStatus() != turnsv1.TurnStatus_TURN_STATUS_COMPLETED {
		t.Fatalf("status %v", c.GetStatus())
	}
	counted.take()
	req := h.requestTurn("s1", "hello again", turnOpts{})
	if c := h.waitCompleted(req.TurnId); c.GetStatus() != turnsv1.TurnStatus_TURN_STATUS_COMPLETED {
		t.Fatalf("status %v", c.GetStatus())
	}
	if got := counted.take(); len(got) != 2 {
		t.Errorf("a plain turn sent Postgres %d round trips, want 2: %q", len(got), got)
	}
}
