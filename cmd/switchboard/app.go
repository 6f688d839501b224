package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go"
	"github.com/redis/go-redis/v9"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"golang.org/x/sync/errgroup"

	"github.com/switchboard-chat/switchboard/pkg/bus"
	"github.com/switchboard-chat/switchboard/pkg/fakellm"
	"github.com/switchboard-chat/switchboard/pkg/pg"
	"github.com/switchboard-chat/switchboard/pkg/redisx"
	"github.com/switchboard-chat/switchboard/pkg/skill"
	"github.com/switchboard-chat/switchboard/pkg/telemetry"
)

// app holds what one process shares between the services it runs: config,
// logger, health, and the clients, opened on first use and closed in
// reverse order.
type app struct {
	name   string
	cfg    *Config
	log    *slog.Logger
	health *telemetry.Health
	// traceExporter, when set, receives every span (tests use an
	// in-memory one); otherwise OTEL_EXPORTER_OTLP_ENDPOINT decides.
	traceExporter sdktrace.SpanExporter
	// natsOptions are added to the NATS connection's (dev connects to
	// its embedded server in-process).
	natsOptions []nats.Option
	// skills are loaded once (loadSkills), reloaded by /reload-skills.
	skillsOnce sync.Once
	skills     *skill.Library
	// hupOnce: one process listens for SIGHUP (skillSignals).
	hupOnce sync.Once

	mu        sync.Mutex
	closers   []func()
	endpoints [][2]string
	// off are the services dev skips, with why (a platform's token unset).
	off map[string]string
	bus *bus.Bus
	db  *pgxpool.Pool
	rdb *redis.Client
	// migrated: this process applied the migrations itself (dev).
	migrated bool
	// fake is the fake model this process runs, if any.
	fake *fakellm.Server
}

func newApp(name string, cfg *Config) *app {
	return &app{
		name:   name,
		cfg:    cfg,
		log:    telemetry.NewLogger(cfg.Log, os.Stderr).With("process", name),
		health: telemetry.NewHealth(),
	}
}

func (a *app) onClose(f func()) { a.closers = append(a.closers, f) }

// announce records an endpoint a person can use; dev prints them.
func (a *app) announce(label, url string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.endpoints = append(a.endpoints, [2]string{label, url})
}

// switchedOff records a service this process does not run, and why.
func (a *app) switchedOff(service, why string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.off == nil {
		a.off = map[string]string{}
	}
	a.off[service] = why
}

// close releases clients in reverse order of opening.
func (a *app) close() {
	a.mu.Lock()
	defer a.mu.Unlock()
	for i := len(a.closers) - 1; i >= 0; i-- {
		a.closers[i]()
	}
	a.closers = nil
}

func (a *app) topology() bus.Topology {
	return bus.Topology{
		Prefix:       a.cfg.NATS.Prefix,
		Replicas:     a.cfg.NATS.Replicas,
		DedupeWindow: a.cfg.NATS.DedupeWindow,
		Retention:    a.cfg.NATS.Retention,
		Partitions:   a.cfg.NATS.Partitions,
	}
}

// Bus connects to NATS and makes sure every stream exists.
func (a *app) Bus(ctx context.Context) (*bus.Bus, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.bus != nil {
		return a.bus, nil
	}
	b, err := bus.Connect(a.cfg.NATS.URL, "switchboard-"+a.name, a.topology(), a.log, a.natsOptions...)
	if err != nil {
		return nil, err
	}
	if err := b.EnsureStreams(ctx); err != nil {
		_ = b.Close()
		return nil, err
	}
	a.bus = b
	a.health.Add("nats", b.Ready)
	a.onClose(func() {
		if err := b.Close(); err != nil {
			a.log.Warn("close nats", "err", err)
		}
	})
	return b, nil
}

// DB opens the Postgres pool.
func (a *app) DB(ctx context.Context) (*pgxpool.Pool, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.db != nil {
		return a.db, nil
	}
	pcfg, err := pgxpool.ParseConfig(a.cfg.Postgres.URL)
	if err != nil {
		return nil, fmt.Errorf("parse postgres url: %w", err)
	}
	if a.cfg.Postgres.MaxConns > 0 && !strings.Contains(a.cfg.Postgres.URL, "pool_max_conns=") {
		pcfg.MaxConns = a.cfg.Postgres.MaxConns
	}
	db, err := pg.OpenConfig(ctx, pcfg)
	if err != nil {
		return nil, err
	}
	a.db = db
	a.health.Add("postgres", pg.Reachable(db))
	a.onClose(db.Close)
	return db, nil
}

// Redis opens the Redis client.
func (a *app) Redis(ctx context.Context) (*redis.Client, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.rdb != nil {
		return a.rdb, nil
	}
	rdb, err := redisx.Open(ctx, a.cfg.Redis.URL)
	if err != nil {
		return nil, err
	}
	a.rdb = rdb
	a.health.Add("redis", func(ctx context.Context) error { return rdb.Ping(ctx).Err() })
	a.onClose(func() { _ = rdb.Close() })
	return rdb, nil
}

// clients opens the bus, Postgres and Redis, for services that use all three.
func (a *app) clients(ctx context.Context) (*bus.Bus, *pgxpool.Pool, *redis.Client, error) {
	b, err := a.Bus(ctx)
	if err != nil {
		return nil, nil, nil, err
	}
	db, err := a.DB(ctx)
	if err != nil {
		return nil, nil, nil, err
	}
	rdb, err := a.Redis(ctx)
	if err != nil {
		return nil, nil, nil, err
	}
	return b, db, rdb, nil
}

// service is one long-running part a process can run.
type service struct {
	name string
	// start builds the service from the app's config and clients and
	// returns its Run.
	start func(ctx context.Context, a *app) (run func(context.Context) error, err error)
}

// services are registered by the files that wire them; devServices lists,
// in start order, the ones `switchboard dev` runs.
var (
	services    = map[string]service{}
	devServices []string
)

func registerService(s service, inDev bool) {
	services[s.name] = s
	if inDev {
		devServices = append(devServices, s.name)
	}
}

// runServices starts the named services and the operations server, runs
// them until ctx ends (SIGTERM), then drains: readiness fails first, the
// services finish or hand back their work, and clients close.
func (a *app) runServices(ctx context.Context, opsAddr string, names []string, ready func(ops string)) error {
	defer a.close()
	shutdownTracing, err := telemetry.SetupTracing(ctx, telemetry.TraceConfig{Service: "switchboard-" + a.name, Version: version, Exporter: a.traceExporter, Log: a.log,
		Pseudonyms: a.cfg.Log.Pseudonyms()})
	if err != nil {
		return a.startFailed(ctx, "tracing", err)
	}
	defer func() { _ = shutdownTracing(context.Background()) }()

	if opsAddr == "" {
		opsAddr = a.cfg.Ops.Addr
	}
	ops := telemetry.NewServer(opsAddr, a.health, a.cfg.Ops.Pprof, a.log)
	if err := ops.Listen(); err != nil {
		return a.startFailed(ctx, "ops server", err)
	}
	runs := make([]func(context.Context) error, 0, len(names))
	for _, n := range names {
		s, ok := services[n]
		if !ok {
			return fmt.Errorf("no service %q in this build", n)
		}
		run, err := s.start(ctx, a)
		if err != nil {
			return a.startFailed(ctx, n, fmt.Errorf("start %s: %w", n, err))
		}
		runs = append(runs, run)
	}
	if a.bus != nil {
		b := a.bus
		runs = append(runs, b.WatchAdvisories)
	}
	if a.db != nil && !a.migrated {
		// Services started against a schema their migration has not
		// reached yet would fail every message they touch.
		if err := pg.CheckSchema(ctx, a.db); err != nil {
			return a.startFailed(ctx, "schema check", err)
		}
	}

	g, gctx := errgroup.WithContext(ctx)
	opsCtx, stopOps := context.WithCancel(context.WithoutCancel(ctx))
	defer stopOps()
	opsDone := make(chan error, 1)
	go func() { opsDone <- ops.Run(opsCtx) }()
	for i, run := range runs {
		g.Go(func() error {
			if err := run(gctx); err != nil {
				if i < len(names) {
					return fmt.Errorf("%s: %w", names[i], err)
				}
				return err
			}
			return nil
		})
	}
	go func() {
		<-gctx.Done()
		a.health.SetDraining()
	}()
	if ready != nil {
		ready(ops.Addr())
	}
	a.log.Info("started", "services", names, "ops", ops.Addr(), "version", version)
	err = g.Wait()
	a.health.SetDraining()
	stopOps()
	<-opsDone
	if err != nil && !stoppedBy(ctx, err) {
		return err
	}
	a.log.Info("stopped")
	return nil
}

// startFailed is what a start-up step's failure makes of the process:
// where the stop signal came meanwhile (ctx ended), the step failed for
// it, as every step that waits (stream, bucket and consumer creation,
// connecting, pinging, migrating) ends with the context's error, and the
// process stops cleanly; else it is the failure.
func (a *app) startFailed(ctx context.Context, step string, err error) error {
	if ctx.Err() == nil {
		return err
	}
	a.log.Info("stopped during start-up", "step", step, "err", err)
	return nil
}

// stoppedBy reports whether err, a service's, is the end of its start-up
// or its work by the stop signal (ctx): a service still setting up when
// it comes (opening a bucket, creating a consumer) ends with the
// context's error, not a failure.
func stoppedBy(ctx context.Context, err error) bool {
	return ctx.Err() != nil && errors.Is(err, context.Canceled)
}

// runServiceCommand is the body of `switchboard <service>` commands.
func runServiceCommand(ctx context.Context, name string, args []string, names ...string) error {
	var cf commonFlags
	fs := newFlagSet(name, &cf)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	cfg, warnings, err := loadConfig(cf.configPath)
	if err != nil {
		return err
	}
	hangups.decide(holdsSkills(cfg, names))
	a := newApp(name, cfg)
	for _, w := range warnings {
		a.log.Warn(w.String())
	}
	return a.runServices(ctx, cf.opsAddr, names, nil)
}
