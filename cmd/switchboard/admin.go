package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/redis/go-redis/v9"

	"github.com/switchboard-chat/switchboard/pkg/approvalmode"
	"github.com/switchboard-chat/switchboard/pkg/bus"
	"github.com/switchboard-chat/switchboard/pkg/estop"
	"github.com/switchboard-chat/switchboard/pkg/outbox"
	"github.com/switchboard-chat/switchboard/pkg/redisx"
	"github.com/switchboard-chat/switchboard/pkg/retention"
	"github.com/switchboard-chat/switchboard/pkg/skill"
	"github.com/switchboard-chat/switchboard/pkg/userdata"
	"github.com/switchboard-chat/switchboard/services/admin"
)

func init() {
	registerService(service{name: "admin", start: startAdmin}, true)
	register(command{name: "admin", summary: "run the admin gRPC API (sessions, users, pairing, deliveries, pause, approval mode, tool approvals, skill reloads) on admin.addr",
		run: func(ctx context.Context, args []string) error { return runServiceCommand(ctx, "admin", args, "admin") }})
}

func startAdmin(ctx context.Context, a *app) (func(context.Context) error, error) {
	db, err := a.DB(ctx)
	if err != nil {
		return nil, err
	}
	pruner := &lazyPruner{a: a, db: db}
	buckets := &lazyBuckets{a: a}
	deps := admin.Deps{Log: a.log, DB: db, Token: os.Getenv("SWITCHBOARD_ADMIN_TOKEN"), Health: a.health,
		Deliveries: &outbox.Admin{Store: outbox.New(db), TTL: a.cfg.Delivery.TTL}, Pruner: pruner, Forgetter: pruner,
		Pause: buckets.opener(estop.Open), Approvals: buckets.opener(approvalmode.Open), Skills: buckets.opener(skill.OpenBucket),
		Bus: buckets.openBus, Locks: pruner.locks}
	cfg := a.cfg.Admin
	// GetApprovalMode shows approvals.mode while no one has set one.
	cfg.ApprovalsMode = a.cfg.Approvals.Mode
	s, err := admin.New(cfg, deps)
	if err != nil {
		return nil, err
	}
	if err := s.Listen(); err != nil {
		return nil, err
	}
	a.announce("Admin API (gRPC)", s.Addr())
	return func(ctx context.Context) error {
		defer pruner.close()
		defer buckets.close()
		return s.Run(ctx)
	}, nil
}

// lazyPruner opens Redis (the session locks a prune or a forget must
// respect, and a reset lets go of) on the first call, so the admin API
// otherwise runs, and stays ready, without it.
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

func (p *lazyPruner) Forget(ctx context.Context, u userdata.User, dryRun bool) (retention.Erasure, error) {
	s, err := p.open(ctx)
	if err != nil {
		return retention.Erasure{}, err
	}
	return s.Forget(ctx, u, dryRun)
}

// locks is Deps.Locks: the session locks, on the same Redis connection,
// for a reset to let go of the lock of the turn it stops.
func (p *lazyPruner) locks(ctx context.Context) (admin.SessionLocks, error) {
	if _, err := p.open(ctx); err != nil {
		return nil, err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return redisx.NewLocker(p.rdb, p.a.cfg.Redis.Prefix), nil
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

// lazyBuckets connects to NATS on the first call that needs one of the
// operator controls' buckets (the pause, the approval mode, skill
// reloads) or a reset (its stop of the running turn, its answers to
// dropped API requests), so that the
// admin API otherwise runs, and stays ready, without it. One connection serves them all; each bucket is opened
// once.
type lazyBuckets struct {
	a  *app
	mu sync.Mutex // guards b and the openers' buckets
	b  *bus.Bus
}

// opener returns a Deps opener of the bucket that open creates.
func (p *lazyBuckets) opener(open func(context.Context, jetstream.JetStream, bus.Topology) (jetstream.KeyValue, error)) func(context.Context) (jetstream.KeyValue, error) {
	var kv jetstream.KeyValue
	return func(ctx context.Context) (jetstream.KeyValue, error) {
		p.mu.Lock()
		defer p.mu.Unlock()
		if kv != nil {
			return kv, nil
		}
		if err := p.connect(); err != nil {
			return nil, err
		}
		opened, err := open(ctx, p.b.JetStream(), p.b.Topology())
		if err != nil {
			return nil, err
		}
		kv = opened
		return kv, nil
	}
}

// openBus is Deps.Bus: the same connection, for a reset's answers to the
// API requests it drops.
func (p *lazyBuckets) openBus(context.Context) (*bus.Bus, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if err := p.connect(); err != nil {
		return nil, err
	}
	return p.b, nil
}

// connect opens the connection once; p.mu is held.
func (p *lazyBuckets) connect() error {
	if p.b != nil {
		return nil
	}
	b, err := bus.Connect(p.a.cfg.NATS.URL, "switchboard-"+p.a.name+"-controls", p.a.topology(), p.a.log, p.a.natsOptions...)
	if err != nil {
		return err
	}
	p.b = b
	return nil
}

func (p *lazyBuckets) close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.b != nil {
		if err := p.b.Close(); err != nil && !errors.Is(err, context.Canceled) {
			p.a.log.Warn("close nats", "err", err)
		}
	}
}

func (p *lazyPruner) close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.rdb != nil {
		_ = p.rdb.Close()
	}
}
