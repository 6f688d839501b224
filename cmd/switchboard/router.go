package main

import (
	"context"
	"slices"

	"golang.org/x/sync/errgroup"

	"github.com/switchboard-chat/switchboard/pkg/cron"
	"github.com/switchboard-chat/switchboard/pkg/cron/scheduler"
	deliveryv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/delivery/v1"
	"github.com/switchboard-chat/switchboard/pkg/outbox"
	"github.com/switchboard-chat/switchboard/pkg/retention"
	"github.com/switchboard-chat/switchboard/services/router"
	"github.com/switchboard-chat/switchboard/services/worker"
)

func init() {
	registerService(service{name: "router", start: startRouter}, true)
	register(command{name: "router", summary: "run the router: sessions, authorization, pairing, commands, turn ownership, cron jobs",
		run: func(ctx context.Context, args []string) error {
			return runServiceCommand(ctx, "router", args, "router")
		}, serves: true})
}

func startRouter(ctx context.Context, a *app) (func(context.Context) error, error) {
	b, db, rdb, err := a.clients(ctx)
	if err != nil {
		return nil, err
	}
	loc, err := a.cfg.Cron.Location()
	if err != nil {
		return nil, err
	}
	jobs := cron.New(db, loc, nil)
	cfg := a.cfg.Router
	// /personality, /reasoning and /fast read the agent section.
	cfg.Personalities, cfg.ReasoningEffort = a.cfg.Agent.Personalities, a.cfg.Agent.ReasoningEffort
	// /voice is offered where the workers can speak (ttsSource).
	prov := a.routerProvider()
	cfg.VoiceReplies = a.cfg.Agent.Backend == "" && ttsSource(a.cfg.TTS, prov.Kind, a.cfg.LLM.Provider) != "" ||
		a.cfg.Agent.Backend != "" && ttsSource(a.cfg.TTS, "", "") != ""
	cfg.ServiceTier = a.cfg.Agent.ServiceTier
	// /approvals shows approvals.mode while no one has set one.
	cfg.ApprovalsMode = a.cfg.Approvals.Mode
	// A bare /model offers agent.models (a picker where buttons render),
	// else the provider's own list.
	cfg.Models = a.cfg.Agent.Models
	// /moa runs agent.moa's preset, which only the built-in loop has.
	if a.cfg.Agent.Backend == "" && a.cfg.Agent.MoA.Configured() {
		cfg.MoAReferences, cfg.MoAAggregator = a.cfg.Agent.MoA.ReferenceModels, a.cfg.Agent.MoA.AggregatorModel
	}
	// /context shows the window and compression settings the workers use.
	cfg.ContextWindow, cfg.CompressAt, cfg.ProtectLast = agentContext(a.cfg.Agent)
	// /memory: the gate's default, and the notes' limit an approved
	// write passes.
	cfg.MemoryWriteApproval, cfg.MemoryCharLimit = a.cfg.Memory.WriteApproval, a.cfg.Agent.MemoryCharLimit
	// The pre-reset memory flush: only where the workers' built-in
	// loop has the memory tool to flush with.
	cfg.MemoryFlush = a.cfg.Agent.Backend == "" && (len(a.cfg.Agent.Toolsets) == 0 || slices.Contains(a.cfg.Agent.Toolsets, "memory"))
	if cfg.MemoryCharLimit <= 0 {
		cfg.MemoryCharLimit = worker.DefaultConfig().Agent.MemoryCharLimit
	}
	s, err := router.New(cfg, router.Deps{Log: a.log, Bus: b, DB: db, Redis: rdb, RedisPrefix: a.cfg.Redis.Prefix,
		Homes: a.cfg.Delivery.HomeOf, ToolProgress: a.cfg.Delivery.ToolProgressOf, Version: version, Cron: jobs, Provider: prov,
		Models: a.modelLister(), Skills: a.loadSkills()})
	if err != nil {
		return nil, err
	}
	// Every router replica sweeps expired sessions: SKIP LOCKED gives
	// each batch to one of them.
	sweeper, err := retention.New(a.cfg.Sessions, a.cfg.Cron.SessionRetention,
		retention.Deps{Log: a.log, DB: db, Redis: rdb, RedisPrefix: a.cfg.Redis.Prefix})
	if err != nil {
		return nil, err
	}
	runs := []func(context.Context) error{s.Run, sweeper.Run, a.skillSignals(b)}
	if a.cfg.Cron.Enabled {
		// Every router replica runs the scheduler: SKIP LOCKED gives each
		// due job to one of them.
		directory := outbox.New(db)
		sched, err := scheduler.New(a.cfg.Cron, scheduler.Deps{Log: a.log, DB: db, Bus: b,
			Resolve: func(ctx context.Context, raw string) (*deliveryv1.Target, error) {
				return directory.ResolveTarget(ctx, raw, a.cfg.Delivery.HomeOf)
			},
			// A run held past cron.max_run_duration keeps its job while
			// its turn is alive.
			RunAlive: s.CronRunAlive,
			// The emergency stop (/pause) holds the fires.
			Paused: s.Paused})
		if err != nil {
			return nil, err
		}
		runs = append(runs, sched.Run)
	}
	return func(ctx context.Context) error {
		g, gctx := errgroup.WithContext(ctx)
		for _, run := range runs {
			g.Go(func() error { return run(gctx) })
		}
		return g.Wait()
	}, nil
}

// agentContext is agent.context_window, agent.compress_at and
// agent.protect_last as the workers apply them: an unset or invalid value
// is its default. The window is 0 when an external agent runs the turns
// (agent.backend), as the runtime footer then shows no percentage.
func agentContext(a worker.AgentConfig) (window int, compressAt float64, protectLast int) {
	d := worker.DefaultConfig().Agent
	window, compressAt, protectLast = a.ContextWindow, a.CompressAt, a.ProtectLast
	if window <= 0 {
		window = d.ContextWindow
	}
	if compressAt <= 0 || compressAt > 1 {
		compressAt = d.CompressAt
	}
	if protectLast <= 0 {
		protectLast = d.ProtectLast
	}
	if a.Backend != "" {
		window = 0
	}
	return window, compressAt, protectLast
}
