// Package router is the gateway's brain: it turns each inbound message into
// a handled command, a refusal, or a turn that exactly one worker runs.
//
// Any number of replicas run at once. Order within a chat holds because
// each inbound partition has one durable with MaxAckPending 1; one turn per
// session holds because a turn starts only under the session's Redis lock;
// waiting messages live in Postgres so they survive restarts.
package router

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"
	"golang.org/x/sync/errgroup"

	"github.com/switchboard-chat/switchboard/pkg/approvalmode"
	"github.com/switchboard-chat/switchboard/pkg/attachment"
	"github.com/switchboard-chat/switchboard/pkg/bus"
	"github.com/switchboard-chat/switchboard/pkg/cron"
	"github.com/switchboard-chat/switchboard/pkg/estop"
	eventsv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/events/v1"
	turnsv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/turns/v1"
	"github.com/switchboard-chat/switchboard/pkg/goal"
	"github.com/switchboard-chat/switchboard/pkg/loop"
	"github.com/switchboard-chat/switchboard/pkg/memorygate"
	"github.com/switchboard-chat/switchboard/pkg/outbox"
	"github.com/switchboard-chat/switchboard/pkg/pairing"
	"github.com/switchboard-chat/switchboard/pkg/personality"
	"github.com/switchboard-chat/switchboard/pkg/pg"
	"github.com/switchboard-chat/switchboard/pkg/redisx"
	"github.com/switchboard-chat/switchboard/pkg/sessionkey"
	"github.com/switchboard-chat/switchboard/pkg/sessionstore"
	"github.com/switchboard-chat/switchboard/pkg/skill"
	"github.com/switchboard-chat/switchboard/services/router/internal/auth"
)

// Busy modes: what a message does while its session runs a turn.
const (
	BusyInterrupt = "interrupt"
	BusyQueue     = "queue"
	BusySteer     = "steer"
)

// Config is the router section of the config file.
type Config struct {
	// Profile namespaces session keys ("" → agent:main).
	Profile string `koanf:"profile"`
	// GroupSessionsPerUser gives each group member their own session.
	GroupSessionsPerUser bool `koanf:"group_sessions_per_user"`
	// ThreadSessionsPerUser gives each thread member their own session.
	ThreadSessionsPerUser bool `koanf:"thread_sessions_per_user"`
	// BotNames per platform: "/cmd@other_bot" is ignored.
	BotNames map[string]string `koanf:"bot_names"`
	// LockTTL of the session lock; the worker renews at a third of it.
	LockTTL time.Duration `koanf:"lock_ttl"`
	// GrantTTL bounds how long a started turn keeps its session while it
	// waits for a worker (all of them busy or down): the router's grant
	// of the lock lives this long until a worker claims it under LockTTL.
	// A grant whose start never committed (its router died) is taken
	// over by the sweep once it is LockTTL old.
	GrantTTL time.Duration `koanf:"grant_ttl"`
	// BusyMode is interrupt, queue or steer.
	BusyMode string `koanf:"busy_mode"`
	// PlatformBusyModes override BusyMode per platform.
	PlatformBusyModes map[string]string `koanf:"platform_busy_modes"`
	// ChatBusyModes override per chat, keyed "<platform>:<chat_id>".
	ChatBusyModes map[string]string `koanf:"chat_busy_modes"`
	// QueueCap bounds each session's waiting messages.
	QueueCap int `koanf:"queue_cap"`
	// GoalMaxTurns is a standing goal's turn budget (/goal; Hermes's
	// goals.max_turns, default 20; below 1: the default).
	GoalMaxTurns int `koanf:"goal_max_turns"`
	// LoopMinInterval is the floor of a /loop's interval (Hermes's
	// loops.min_interval_seconds, 30s; no less than 5s).
	LoopMinInterval time.Duration `koanf:"loop_min_interval"`
	// LoopMaxTicks is a /loop's backstop budget: after that many
	// wakeups it pauses (Hermes's loops.max_ticks, 100; 0 unlimited).
	LoopMaxTicks int `koanf:"loop_max_ticks"`
	// LoopPollInterval is how often each replica fires the due /loop
	// and /heartbeat ticks (Hermes polls every 5s).
	LoopPollInterval time.Duration `koanf:"loop_poll_interval"`
	// SplitMessages per platform: the length in characters (UTF-16 code
	// units, as the clients count them) from which a message is taken as
	// one part of a longer text its client split (Telegram's splits at
	// 4,096; Hermes's threshold there is 4,000; Discord's limit is
	// 2,000); 0 turns it off. Such a part waits SplitWait for the rest
	// before a turn starts (split.go).
	SplitMessages map[string]int `koanf:"split_messages"`
	// SplitWait is how long a split part waits for the rest; 0 turns
	// the wait off everywhere.
	SplitWait time.Duration `koanf:"split_wait"`
	// AlbumWait is how long a picture of an album (a media group) waits
	// for the album's other pictures; 0 turns it off.
	AlbumWait time.Duration `koanf:"album_wait"`
	// BusyAckInterval: at most one busy acknowledgement per session per it.
	BusyAckInterval time.Duration `koanf:"busy_ack_interval"`
	// DedupeTTL is how long a handled inbound event id is remembered
	// (longer than the bus dedupe window).
	DedupeTTL time.Duration `koanf:"dedupe_ttl"`
	// SweepInterval is how often waiting sessions with a free lock are
	// started (a crashed worker's lock expired).
	SweepInterval time.Duration `koanf:"sweep_interval"`
	// Admins per platform: when a platform has a list, only those users
	// run commands other than /help and /whoami.
	Admins map[string][]string `koanf:"admins"`
	// QuickCommands are the operator's own slash commands, keyed by
	// name, as Hermes's quick_commands (quick.go).
	QuickCommands map[string]QuickCommand `koanf:"quick_commands"`
	// Auth is the allowlist configuration; environment variables add to it.
	Auth auth.Config `koanf:"auth"`
	// SessionReset is the reset policy.
	SessionReset ResetConfig `koanf:"session_reset"`
	// DrainTimeout bounds finishing the message in hand on shutdown.
	DrainTimeout time.Duration `koanf:"drain_timeout"`
	// HomeNotice tells the user, on the first message of each new
	// conversation, that the platform has no home channel, as Hermes
	// does (home.go). Hermes has no switch for it (a home channel is
	// what stops it); this is one for operators without scheduled jobs.
	HomeNotice bool `koanf:"home_notice"`
	// Background is /background's section (background.go).
	Background BackgroundConfig `koanf:"background"`
	// ToolProgressCommand turns /verbose on (Hermes's
	// display.tool_progress_command, off by default): it sets the tool
	// progress mode of the platform it is sent from (verbose.go).
	ToolProgressCommand bool `koanf:"tool_progress_command"`
	// YoloCommand allows /yolo (on by default: Hermes offers it to
	// whoever may run commands, here router.admins where a platform
	// has a list). Off, /yolo says it is disabled and every turn asks
	// before dangerous tool calls whatever a chat chose (yolo.go).
	YoloCommand bool `koanf:"yolo_command"`
	// RuntimeFooter appends Hermes's runtime footer (the model and how
	// full its context window is) to the final answers of chats that did
	// not choose with /footer (off by default, as Hermes's
	// display.runtime_footer.enabled; footer.go).
	RuntimeFooter bool `koanf:"runtime_footer"`
	// AckWait is how long a delivered inbound or turn-completed message may
	// go unacknowledged before redelivery (handlers extend it while they
	// run). After a NATS crash that lost recent acks, an inbound partition
	// (MaxAckPending 1) waits this long before it moves again.
	AckWait time.Duration `koanf:"ack_wait"`
	// PollWait bounds one pull of the router's consumers, and so how
	// long a stop waits for an idle one (0: the bus's default, 1 s).
	// Not configurable: tests shorten it so that stopping a router does
	// not take a second.
	PollWait time.Duration `koanf:"-"`
	// ApprovalsMode is the dangerous-command approval mode while no one
	// has set one with /approvals (approvals.mode: manual, the default,
	// smart or off); /approvals shows it (approvals.go).
	ApprovalsMode string `koanf:"-"`
	// Personalities are what /personality picks from, name → prompt
	// (agent.personalities); a turn carries the prompt of its session's.
	Personalities map[string]string `koanf:"-"`
	// ReasoningEffort is the effort of sessions without their own
	// (agent.reasoning_effort, "" the provider's default); /reasoning
	// shows it.
	ReasoningEffort string `koanf:"-"`
	// VoiceReplies is set when a text-to-speech provider is configured
	// (the tts section): /voice then chooses a chat's voice reply mode
	// and turns carry it; without one /voice says voice replies are not
	// configured and turns carry none (voice.go).
	VoiceReplies bool `koanf:"-"`
	// ServiceTier is the fast mode of sessions that did not choose with
	// /fast (agent.service_tier: normal, the default, or fast); /fast
	// shows it (fast.go).
	ServiceTier string `koanf:"-"`
	// Models are the model ids a bare /model offers (agent.models): a
	// picker of buttons on the platforms that render one, a list
	// elsewhere (picker.go); empty offers none.
	Models []string `koanf:"-"`
	// MoAReferences and MoAAggregator are the Mixture of Agents preset
	// /moa runs one prompt through (agent.moa's reference_models and
	// aggregator_model, the latter empty for the session's own model);
	// without references /moa says it is not configured (moa.go).
	MoAReferences []string `koanf:"-"`
	MoAAggregator string   `koanf:"-"`
	// ContextWindow, CompressAt and ProtectLast are the workers'
	// agent.context_window, agent.compress_at and agent.protect_last as
	// they apply them (defaults for unset or invalid values); /context
	// shows them (context.go). ContextWindow is 0 when an external agent
	// (agent.backend) runs the turns: it has its own window.
	ContextWindow int     `koanf:"-"`
	CompressAt    float64 `koanf:"-"`
	ProtectLast   int     `koanf:"-"`
	// MemoryWriteApproval is memory.write_approval, the gate of a memory
	// owner who did not choose with /memory approval; MemoryCharLimit is
	// agent.memory_char_limit, which a write /memory approve applies
	// passes as the memory tool's own writes do (memory.go).
	MemoryWriteApproval bool `koanf:"-"`
	MemoryCharLimit     int  `koanf:"-"`
	// MemoryFlush queues Hermes's pre-reset memory flush when a
	// conversation that had a turn ends (/new, an idle or daily reset):
	// a turn, ahead of the new conversation's first, in which the model
	// saves what is worth remembering with the memory tool alone
	// (flush.go). Set when the workers' built-in loop has the memory
	// tool (agent.toolsets empty or naming memory, no agent.backend).
	MemoryFlush bool `koanf:"-"`
	// SaveMaxBytes bounds a /save export (default 8 MiB: under the
	// Discord gateway's 10 MiB uploads): a conversation whose stored text, or
	// whose rendered file, is larger is not sent (save.go).
	SaveMaxBytes int64 `koanf:"save_max_bytes"`
}

// BackgroundConfig is router.background.
type BackgroundConfig struct {
	// MaxRunning bounds the background tasks running at once per chat
	// (0: no bound, as Hermes); a /background over it starts nothing.
	MaxRunning int `koanf:"max_running"`
}

// DefaultConfig returns the defaults.
func DefaultConfig() Config {
	return Config{
		GroupSessionsPerUser: true,
		LockTTL:              30 * time.Second,
		GrantTTL:             time.Hour,
		BusyMode:             BusyInterrupt,
		QueueCap:             32,
		GoalMaxTurns:         goal.DefaultMaxTurns,
		LoopMinInterval:      loop.DefaultMinInterval,
		LoopMaxTicks:         loop.DefaultMaxTicks,
		LoopPollInterval:     5 * time.Second,
		SplitMessages:        map[string]int{"telegram": 4000, "discord": 1900},
		SplitWait:            2 * time.Second,
		AlbumWait:            800 * time.Millisecond,
		BusyAckInterval:      30 * time.Second,
		DedupeTTL:            24 * time.Hour,
		SweepInterval:        5 * time.Second,
		SessionReset:         ResetConfig{Mode: ResetNone, IdleMinutes: 1440, AtHour: 4, Timezone: "UTC"},
		DrainTimeout:         10 * time.Second,
		HomeNotice:           true,
		Background:           BackgroundConfig{MaxRunning: 3},
		YoloCommand:          true,
		AckWait:              30 * time.Second,
		Personalities:        personality.Builtins(),
		SaveMaxBytes:         defaultSaveMaxBytes,
	}
}

// Validate reports the first invalid value, naming its key under router.
func (c Config) Validate() error {
	check := func(key, mode string) error {
		switch mode {
		case BusyInterrupt, BusyQueue, BusySteer:
			return nil
		}
		return fmt.Errorf("%s: %q is not interrupt, queue or steer", key, mode)
	}
	if err := check("busy_mode", c.BusyMode); err != nil {
		return err
	}
	for p, m := range c.PlatformBusyModes {
		if err := check("platform_busy_modes."+p, m); err != nil {
			return err
		}
	}
	for p, m := range c.ChatBusyModes {
		if err := check("chat_busy_modes."+p, m); err != nil {
			return err
		}
	}
	if c.LockTTL < time.Second {
		return fmt.Errorf("lock_ttl: %s is shorter than 1s", c.LockTTL)
	}
	if c.GrantTTL < 2*c.LockTTL {
		return fmt.Errorf("grant_ttl: %s is shorter than twice lock_ttl (%s)", c.GrantTTL, c.LockTTL)
	}
	if c.Background.MaxRunning < 0 {
		return fmt.Errorf("background.max_running: %d is negative", c.Background.MaxRunning)
	}
	if c.SaveMaxBytes < 0 {
		return fmt.Errorf("save_max_bytes: %d is negative", c.SaveMaxBytes)
	}
	if c.QueueCap < 1 {
		return fmt.Errorf("queue_cap: %d is below 1", c.QueueCap)
	}
	if _, err := approvalmode.FromConfig(c.ApprovalsMode); err != nil {
		return err
	}
	for p, n := range c.SplitMessages {
		if n < 0 {
			return fmt.Errorf("split_messages.%s: %d is negative", p, n)
		}
	}
	if c.SplitWait < 0 || c.SplitWait > time.Minute {
		return fmt.Errorf("split_wait: %s is not between 0 and 1m", c.SplitWait)
	}
	if c.AlbumWait < 0 || c.AlbumWait > time.Minute {
		return fmt.Errorf("album_wait: %s is not between 0 and 1m", c.AlbumWait)
	}
	if err := validateQuickCommands(c.QuickCommands); err != nil {
		return err
	}
	if err := c.Auth.Validate(); err != nil {
		return err
	}
	return c.SessionReset.validate()
}

// Deps are the clients the router uses.
type Deps struct {
	Log   *slog.Logger
	Bus   *bus.Bus
	DB    *pgxpool.Pool
	Redis *redis.Client
	// RedisPrefix is redis.prefix ("sb:").
	RedisPrefix string
	// Environ supplies the allowlist environment variables; nil reads
	// the process environment.
	Environ []string
	// Now is the clock; nil is time.Now.
	Now func() time.Time
	// Partitions limits which inbound partitions this process consumes
	// (nil: all). Every partition must be consumed by some replica.
	Partitions []int
	// Homes is the home channel the operator configured for a platform
	// (delivery.platforms.<p>.home), which /sethome cannot move; nil: none.
	Homes func(platform string) string
	// ToolProgress is the tool progress mode delivery is configured with
	// for a platform, which /verbose cycles from; nil: all.
	ToolProgress func(platform string) string
	// Version is the running release, which /version names; "": dev.
	Version string
	// Cron keeps the cron jobs /cron manages; nil: a store whose time
	// zone is UTC.
	Cron *cron.Store
	// Provider is the model provider /provider tells of (no key).
	Provider Provider
	// Models lists the provider's models for a bare /model where
	// agent.models is empty (models.go); nil: none are listed.
	Models ModelLister
	// Skills are the skills "/<skill> [instruction]" invokes (skills.go),
	// loaded with the quick commands reserved; nil: none. /reload-skills
	// and the reloads other processes announce scan them again.
	Skills *skill.Library
}

// Service is a running router.
type Service struct {
	cfg    Config
	log    *slog.Logger
	bus    *bus.Bus
	topo   bus.Topology
	rdb    *redis.Client
	prefix string
	locker *redisx.Locker
	store  *sessionstore.Store
	// memory is the memory write-approval gate (/memory).
	memory  *memorygate.Store
	pairing *pairing.Store
	rules   *auth.Rules
	keyOpts sessionkey.Options
	now     func() time.Time
	parts   []int
	// homes are the configured home channels (Deps.Homes).
	homes    func(platform string) string
	maxInput int
	// maxInputBytes bounds the encoded inputs merged into one turn, so
	// the turn fits a bus message (half the server's maximum payload).
	maxInputBytes int
	// holds are the sessions whose split parts wait (split.go).
	holds *holds
	// directory reads the home channels users chose (/sethome).
	directory *outbox.Store
	// cron keeps the cron jobs (/cron, and the outcome of their runs).
	cron *cron.Store
	// provider is Deps.Provider (/provider).
	provider Provider
	// lister is Deps.Models.
	lister ModelLister
	// homeKnown holds the platforms found to have a home channel: one
	// is never unset, so their messages skip the home notice's reads.
	homeKnown sync.Map
	// toolProgress is Deps.ToolProgress.
	toolProgress func(platform string) string
	// version is Deps.Version.
	version string
	// pause is the emergency stop as Run watches it (pause.go), set
	// before pauseReady closes.
	pause      atomic.Pointer[estop.View]
	pauseReady chan struct{}
	// pauseRead, when set (by a test, before Run), runs between /pause's
	// read of the pause and its conditional write: the seam where a
	// change made elsewhere lands.
	pauseRead func(context.Context)
	// stopSent, when set (by a test, before Run), runs between the stop
	// of the running turn by /new or /stop (command) and the commit of
	// its transaction (tx): the seam where a turn start lands.
	stopSent func(ctx context.Context, command string, tx pgx.Tx)
	// busyQueued, when set (by a test, before Run), runs once a message
	// (the event eventID) that met a running turn is queued and, in
	// interrupt mode, the turn asked to stop: the seam where the next
	// turn, which may answer it, can start.
	busyQueued func(ctx context.Context, eventID string)
	// files keeps the files commands send (/save) in the attachment
	// store the gateways read them from.
	files *attachment.Store
	// skills is Deps.Skills.
	skills *skill.Library
	// teamsNoAllowlistLog spaces the warning of a Teams press refused
	// because no allowlist applies to Teams (pressRefused).
	teamsNoAllowlistLog logEvery
}

// New builds a router.
func New(cfg Config, deps Deps) (*Service, error) {
	if deps.Bus == nil || deps.DB == nil || deps.Redis == nil {
		return nil, errors.New("router: bus, database and redis are required")
	}
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("router config: %w", err)
	}
	if err := cfg.SessionReset.load(); err != nil {
		return nil, fmt.Errorf("router config: %w", err)
	}
	log := deps.Log
	if log == nil {
		log = slog.Default()
	}
	now := deps.Now
	if now == nil {
		now = time.Now
	}
	env := deps.Environ
	if env == nil {
		env = os.Environ()
	}
	homes := deps.Homes
	if homes == nil {
		homes = func(string) string { return "" }
	}
	parts := deps.Partitions
	if parts == nil {
		for p := range deps.Bus.Topology().PartitionCount() {
			parts = append(parts, p)
		}
	}
	s := &Service{
		cfg:        cfg,
		log:        log.With("service", "router"),
		bus:        deps.Bus,
		topo:       deps.Bus.Topology(),
		rdb:        deps.Redis,
		prefix:     deps.RedisPrefix,
		locker:     redisx.NewLocker(deps.Redis, deps.RedisPrefix),
		store:      sessionstore.New(deps.DB).WithClock(now).WithTurnLease(cfg.GrantTTL),
		memory:     memorygate.New(deps.DB, cfg.MemoryWriteApproval, cfg.MemoryCharLimit),
		pairing:    pairing.NewStore(deps.DB).WithClock(now),
		rules:      auth.New(cfg.Auth, env),
		keyOpts:    sessionkey.Options{Profile: cfg.Profile, GroupSessionsPerUser: cfg.GroupSessionsPerUser, ThreadSessionsPerUser: cfg.ThreadSessionsPerUser},
		now:        now,
		parts:      parts,
		homes:      homes,
		maxInput:   cfg.QueueCap,
		holds:      newHolds(),
		provider:   deps.Provider,
		lister:     deps.Models,
		pauseReady: make(chan struct{}),
		skills:     deps.Skills,
	}
	for name := range cfg.QuickCommands {
		if s.skillSet().Has(name) {
			// Built-ins and quick commands win over skills (skills.go).
			s.log.Warn("a quick command shadows a skill of the same command", "command", name)
		}
	}
	s.directory = outbox.New(deps.DB)
	// Opened, never created: the gateways, which read the files back,
	// create the store with its bounds (save.go falls back on a data:
	// URL when there is none).
	s.files = attachment.Open(deps.Bus.JetStream(), deps.Bus.Topology(), attachment.Config{})
	s.toolProgress = deps.ToolProgress
	s.version = deps.Version
	if s.toolProgress == nil {
		s.toolProgress = func(string) string { return toolProgressDefault }
	}
	s.cron = deps.Cron
	if s.cron == nil {
		s.cron = cron.New(deps.DB, time.UTC, now)
	}
	s.maxInputBytes = 512 << 10 // NATS's default maximum payload is 1 MiB
	if n := deps.Bus.Conn().MaxPayload(); n > 0 {
		s.maxInputBytes = int(n / 2)
	}
	if s.rules.NoAllowlist() {
		s.log.Warn("no allowlist configured: every user is denied unless approved by pairing; set <PLATFORM>_ALLOWED_USERS, GATEWAY_ALLOWED_USERS or an allow-all flag")
	}
	return s, nil
}

// Run consumes inbound partitions and turn completions and sweeps for
// stranded queues until ctx ends. On shutdown it stops pulling and lets the
// message in hand finish.
func (s *Service) Run(ctx context.Context) error {
	// The pause is in memory before the first message is handled.
	if err := s.watchPause(ctx); err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return err
	}
	// So are the reloads announced while this replica was away.
	if err := s.followSkills(ctx); err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return err
	}
	g, gctx := errgroup.WithContext(ctx)
	for _, p := range s.parts {
		c := bus.NewConsumer(s.bus, bus.ConsumerSpec{
			Stream:         bus.StreamInbound,
			Durable:        fmt.Sprintf("router-inbound-%d", p),
			FilterSubjects: []string{fmt.Sprintf("%s.%d", bus.SubjectInbound, p)},
			MaxAckPending:  1,
			AckWait:        s.cfg.AckWait,
			DrainTimeout:   s.cfg.DrainTimeout,
			PollWait:       s.cfg.PollWait,
			Unavailable:    pg.IsUnavailable,
		}, s.handleInbound)
		g.Go(func() error { return c.Run(gctx) })
	}
	done := bus.NewConsumer(s.bus, bus.ConsumerSpec{
		Stream:         bus.StreamTurnEvents,
		Durable:        "router-turn-completed",
		FilterSubjects: []string{bus.SubjectTurnCompleted},
		// At least as many as the inbound partitions: bookkeeping must keep
		// up with the turns, or a backlog of usage updates grows under load.
		Concurrency:  max(16, s.topo.PartitionCount()),
		AckWait:      s.cfg.AckWait,
		DrainTimeout: s.cfg.DrainTimeout,
		PollWait:     s.cfg.PollWait,
		Unavailable:  pg.IsUnavailable,
	}, s.handleTurnCompleted)
	g.Go(func() error { return done.Run(gctx) })
	g.Go(func() error { return s.sweep(gctx) })
	g.Go(func() error { return s.startHeld(gctx) })
	g.Go(func() error { return s.scheduleLoops(gctx) })
	if err := g.Wait(); err != nil && ctx.Err() == nil {
		return err
	}
	return nil
}

// sweep starts sessions whose messages wait while nobody holds the lock
// (the worker crashed and its lock expired, or a completion was missed)
// or while an orphaned grant holds it.
func (s *Service) sweep(ctx context.Context) error {
	t := time.NewTicker(s.cfg.SweepInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		s.sweepAll(ctx, s.now().Add(-s.cfg.SweepInterval/2))
	}
}

// sweepPage is how many waiting sessions the sweep reads at a time.
const sweepPage = 100

// sweepAll visits every session with messages queued before olderThan,
// a page at a time: most wait behind running turns, and the ones that
// need the sweep may be anywhere in the list.
func (s *Service) sweepAll(ctx context.Context, olderThan time.Time) {
	var after sessionstore.Waiting
	for ctx.Err() == nil {
		page, err := s.store.WaitingKeys(ctx, olderThan, after, sweepPage)
		if err != nil {
			if ctx.Err() == nil {
				s.log.Warn("sweep failed", "err", err)
			}
			return
		}
		for _, w := range page {
			started, err := s.sweepOne(ctx, w.Key)
			if err != nil {
				s.log.Warn("sweep could not start turn", "session_key", w.Key, "err", err)
				continue
			}
			if started {
				sweptTurns.Inc()
				s.log.Info("swept waiting session", "session_key", w.Key)
			}
		}
		if len(page) < sweepPage {
			return
		}
		after = page[len(page)-1]
	}
}

// sweepOne starts the waiting messages of the session key when its lock
// is free and no turn holds its lease, or when an orphaned grant holds
// the lock, which it takes over.
func (s *Service) sweepOne(ctx context.Context, key string) (bool, error) {
	owner, err := s.locker.Owner(ctx, key)
	if err != nil {
		return false, err
	}
	if owner == "" {
		// Redis may have lost the lock of a turn that still runs: while
		// it holds its lease (migration 00148) a start only takes the
		// lock to give it back (StartTurn refuses), and the turn's
		// worker, claiming its lock again in that moment, meets another
		// grant there (its lock check before a tool fails after three
		// such). Its end starts the messages (its completion; or this
		// sweep, once its lease has ended or expired).
		if running, err := s.store.TurnRunning(ctx, key); err != nil || running {
			return false, err
		}
		started, err := s.tryStart(ctx, key)
		if started {
			lockTakeovers.WithLabelValues("expired").Inc()
		}
		return started, err
	}
	orphan, err := s.orphaned(ctx, key, owner)
	if err != nil || !orphan {
		return false, err
	}
	token := redisx.NewGrant(s.now())
	if err := s.locker.Swap(ctx, key, owner, token, s.cfg.GrantTTL); err != nil {
		if errors.Is(err, redisx.ErrNotOwner) {
			return false, nil // it moved on meanwhile
		}
		return false, err
	}
	lockTakeovers.WithLabelValues("orphaned_grant").Inc()
	s.log.Warn("took over an orphaned session lock", "session_key", key, "grant", owner)
	return s.startLocked(ctx, key, token)
}

// orphaned reports whether owner, holding the session lock of key, is a
// router's grant whose turn start never committed (the router died
// between taking the lock and committing). A grant lives GrantTTL, so that
// a started turn keeps its session however long it waits for a worker; it
// names the turn it started (the session's last turn id) and the time it
// was made (redisx.GrantTime), and a start takes less than LockTTL, so an
// older grant that names another turn started nothing. A worker's claim
// (token/holder), and any value that is not such a grant (a router's from
// before grants named their turns, during a rolling upgrade), is never an
// orphan: it expires by its TTL. Routers' clocks must agree to well within
// LockTTL.
func (s *Service) orphaned(ctx context.Context, key, owner string) (bool, error) {
	at, ok := redisx.GrantTime(owner)
	if !ok || s.now().Sub(at) < s.cfg.LockTTL {
		return false, nil
	}
	sess, err := s.store.Get(ctx, key)
	if errors.Is(err, sessionstore.ErrNotFound) {
		return true, nil
	}
	if err != nil {
		return false, err
	}
	return sess.LastTurnID != owner, nil
}

// handleTurnCompleted books usage and starts the next waiting message.
// A message queued while the turn held the lock marked it; a completion
// whose worker found no mark reads no queue.
func (s *Service) handleTurnCompleted(ctx context.Context, ev *turnsv1.TurnCompleted) error {
	key := ev.GetSessionKey()
	if key == "" {
		return bus.Permanent(errors.New("turn completed without session key"))
	}
	if err := s.cronOutcome(ctx, ev); err != nil {
		return err
	}
	if err := s.flushTypingEnded(ctx, ev); err != nil {
		return err
	}
	var usage *sessionstore.Usage
	doneKey := s.prefix + "turndone:" + ev.GetTurnId()
	if u := ev.GetUsage(); u != nil && !ev.GetUsageRecorded() {
		// A turn that ended without a final (the worker stores a final's
		// usage with it). Once per turn: the dedupe record guards
		// redeliveries.
		ok, err := s.rdb.SetNX(ctx, doneKey, "1", s.cfg.DedupeTTL).Result()
		if err != nil {
			return fmt.Errorf("record turn completion: %w", err)
		}
		if ok {
			usage = &sessionstore.Usage{Input: u.GetInputTokens(), Output: u.GetOutputTokens(),
				CacheRead: u.GetCacheReadTokens(), CacheWrite: u.GetCacheWriteTokens()}
		}
	}
	if usage == nil && ev.GetNothingWaiting() {
		// The worker let go of the lock and no start had marked it
		// (redisx.Locker.AcquireOrMark): the queue was empty.
		return nil
	}
	waiting, err := s.store.TurnDone(ctx, key, usage)
	if err != nil {
		if usage != nil {
			// Not booked: the redelivery must book it.
			if derr := s.rdb.Del(context.WithoutCancel(ctx), doneKey).Err(); derr != nil {
				s.log.Warn("forget turn completion record; its usage is lost", "turn_id", ev.GetTurnId(), "err", derr)
			}
		}
		return err
	}
	if waiting == 0 {
		return nil
	}
	if _, err := s.startQueued(ctx, key); err != nil {
		return fmt.Errorf("start next turn: %w", err)
	}
	return nil
}

// sourceOf returns ev's source, never nil.
func sourceOf(ev *eventsv1.MessageReceived) *eventsv1.SessionSource {
	if ev.GetSource() == nil {
		return &eventsv1.SessionSource{}
	}
	return ev.GetSource()
}
