package main

import (
	"context"
	"fmt"
	"os"
	"sync"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"

	"github.com/switchboard-chat/switchboard/pkg/outbox"
	"github.com/switchboard-chat/switchboard/pkg/redisx"
	"github.com/switchboard-chat/switchboard/pkg/retention"
	"github.com/switchboard-chat/switchboard/services/admin"
)

func init() {
	registerService(service{name: "admin", start: startAdmin}, true)
	register(command{name: "admin", summary: "run the admin gRPC API (sessions, pairing, deliveries, pause) on admin.addr",
		run: func(ctx context.Context, args []string) error { return runServiceCommand(ctx, "admin", args, "admin") }})
}

func startAdmin(ctx context.Context, a *app) (func(context.Context) error, error) {
	db, err := a.DB(ctx)
	if err != nil {
		return nil, err
	}
	pruner := &lazyPruner{a: a, db: db}
	pause := &lazyPause{a: a}
	deps := admin.Deps{Log: a.log, DB: db, Token: os.Getenv("SWITCHBOARD_ADMIN_TOKEN"), Health: a.health,
		Deliveries: &outbox.Admin{Store: outbox.New(db), TTL: a.cfg.Delivery.TTL}, Pruner: pruner, Pause: pause.open}
	s, err := admin.New(a.cfg.Admin, deps)
	if err != nil {
		return nil, err
	}
	if err := s.Listen(); err != nil {
		return nil, err
	}
	a.announce("Admin API (gRPC)", s.Addr())
	return func(ctx context.Context) error {
		defer pruner.close()
		defer pause.close()
		return s.Run(ctx)
	}, nil
}

// lazyPruner opens Redis (the session locks a prune must respect) on the
// first prune, so the admin API otherwise runs, and stays ready, without it.
type lazyPruner struct {
	a       *app
	db      *pgxpool.Pool
	mu      sync.Mutex
	rdb     *redis.Client
	sweeper *retention.Sweeper
}

func (p *lazyPruner) Prune(ctx context.Context, c retention.Criteria) (retention.Result, error) {
	s, err := p.open(ctx)
	if err != nil {
		return retention.Result{}, err
	}
	return s.Prune(ctx, c)
}

func (p *lazyPruner) open(ctx context.Context) (*retention.Sweeper, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.sweeper != nil {
		return p.sweeper, nil
	}
	rdb, err := redisx.Open(ctx, p.a.cfg.Redis.URL)
	if err != nil {
		return nil, fmt.Errorf("prune needs Redis (redis.url, REDIS_URL) to leave running turns alone: %w", err)
	}
	s, err := retention.New(p.a.cfg.Sessions, p.a.cfg.Cron.SessionRetention,
		retention.Deps{Log: p.a.log, DB: p.db, Redis: rdb, RedisPrefix: p.a.cfg.Redis.Prefix})
	if err != nil {
		_ = rdb.Close()
		return nil, err
	}
	p.rdb, p.sweeper = rdb, s
	return s, nil
}

func (p *lazyPruner) close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.rdb != nil {
		_ = p.rdb.Close()
	}
}
