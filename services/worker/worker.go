// Package worker is the agent worker: it pulls turns from the TURNS work
// queue, runs each under the session's lock and generation (the built-in
// agent loop over an LLM provider, or an external AgentService), streams
// reply events, commits every step of the transcript, and reports the turn
// done.
package worker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"

	"github.com/switchboard-chat/switchboard/pkg/approvalmode"
	"github.com/switchboard-chat/switchboard/pkg/attachment"
	"github.com/switchboard-chat/switchboard/pkg/bus"
	"github.com/switchboard-chat/switchboard/pkg/cron"
	deliveryv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/delivery/v1"
	turnsv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/turns/v1"
	"github.com/switchboard-chat/switchboard/pkg/llm"
	"github.com/switchboard-chat/switchboard/pkg/memorygate"
	"github.com/switchboard-chat/switchboard/pkg/outbox"
	"github.com/switchboard-chat/switchboard/pkg/personality"
	"github.com/switchboard-chat/switchboard/pkg/pg"
	"github.com/switchboard-chat/switchboard/pkg/redisx"
	"github.com/switchboard-chat/switchboard/pkg/sessionstore"
	"github.com/switchboard-chat/switchboard/pkg/telemetry"
	"github.com/switchboard-chat/switchboard/services/worker/internal/store"
	"github.com/switchboard-chat/switchboard/services/worker/internal/tools"
)

// Config is the worker's configuration (YAML sections worker, agent and
// llm, and privacy.redact_pii).
type Config struct {
	// Concurrency is how many turns one process runs at once.
	Concurrency int `koanf:"concurrency"`
	// DrainTimeout is how long running turns may continue after SIGTERM
	// before they are handed back to the bus.
	DrainTimeout time.Duration `koanf:"drain_timeout"`
	// AckWait is how long a turn message may go without a heartbeat
	// before NATS redelivers it (a crashed worker's turn moves on after it).
	AckWait time.Duration `koanf:"ack_wait"`
	// PollWait bounds one pull of the turns consumer, and so how long a
	// stop waits for an idle one (0: the bus's default, 1 s). Not
	// configurable: tests shorten it so that stopping a worker does not
	// take a second.
	PollWait time.Duration `koanf:"-"`
	// SeqTTL is how long a turn's reply seq counter outlives its last
	// renewal (0: seqTTL, a day). Not configurable: tests shorten it to
	// show a turn outliving it.
	SeqTTL time.Duration `koanf:"-"`
	// MaxDeliver bounds deliveries of one turn; the last attempt tells the
	// user the turn was interrupted instead of failing silently.
	MaxDeliver int `koanf:"max_deliver"`
	// DeltaInterval coalesces streamed text into one reply event at most
	// this often.
	DeltaInterval time.Duration `koanf:"delta_interval"`
	// ID names this worker in events; default hostname-pid.
	ID string `koanf:"id"`

	Agent AgentConfig `koanf:"-"`
	// MaxAttachmentBytes bounds an attachment the worker streams to a
	// provider whole, a voice message or audio file it has transcribed
	// (attachments.max_bytes, what a gateway keeps; 0: its default,
	// 20 MiB); a larger one is named to the model as too large.
	MaxAttachmentBytes int64 `koanf:"-"`
	// TranscribeTimeout bounds one transcription whole: the audio's read
	// from the attachment store as much as its upload and the answer
	// (stt.timeout; 0: its default, Hermes's 30 s). A stuck store read
	// or a speech-to-text server that does not answer ends with it, not
	// with the turn, and the voice message is only named.
	TranscribeTimeout time.Duration `koanf:"-"`
	// FetchWait bounds the downloads of a turn's attachments by their
	// gateway (0: fetchWait, 70 s).
	FetchWait time.Duration `koanf:"-"`
	// RedisPrefix prefixes Redis keys (redis.prefix).
	RedisPrefix string `koanf:"-"`
	// RedactPII hashes user and chat ids in prompts (privacy.redact_pii).
	RedactPII bool `koanf:"-"`
	// MemoryWriteApproval is memory.write_approval, Hermes's gate: the
	// memory tool's writes of an owner who did not choose with /memory
	// approval are held for /memory approve when true.
	MemoryWriteApproval bool `koanf:"-"`
	// ApprovalsMode is the dangerous-command approval mode while no one
	// has set one with /approvals (approvals.mode: manual, the default,
	// smart or off; approvals.go).
	ApprovalsMode string `koanf:"-"`
	// ApprovalsSmartPolicy is approvals.smart_policy: the operator's
	// rules appended to the smart-approval judge's system prompt (""
	// for none; at most approvalmode.MaxSmartPolicyChars).
	ApprovalsSmartPolicy string `koanf:"-"`
	// ApprovalsDenialBreakerThreshold is approvals.denial_breaker
	// _threshold: from this many consecutive judge denials in a
	// conversation on, a denied call's result tells the model to stop
	// trying (3 by default; 0 or less turns the breaker off; breaker.go).
	ApprovalsDenialBreakerThreshold int `koanf:"-"`
}

// AgentConfig is the agent section.
type AgentConfig struct {
	// Backend is empty for the built-in loop, or grpc://host:port of an
	// AgentService.
	Backend string `koanf:"backend"`
	// Models are the model ids a bare /model offers, as buttons on
	// Telegram and Discord and as a list elsewhere (the router reads
	// them); empty offers none. The workers do not read it: a session's
	// model is whatever /model set.
	Models []string `koanf:"models"`
	// MaxIterations bounds model calls per turn.
	MaxIterations int `koanf:"max_iterations"`
	// SystemPrompt is the base of every session's system prompt.
	SystemPrompt string `koanf:"system_prompt"`
	// EphemeralPrompt is appended to the system prompt.
	EphemeralPrompt string `koanf:"ephemeral_prompt"`
	// Toolsets lists the enabled tools; empty enables every built-in.
	Toolsets []string `koanf:"toolsets"`
	// DangerousTools need the user's /approve before they run.
	DangerousTools []string `koanf:"dangerous_tools"`
	// ApprovalTimeout turns an unanswered approval into a denial.
	ApprovalTimeout time.Duration `koanf:"approval_timeout"`
	// ToolTimeout bounds one tool call.
	ToolTimeout time.Duration `koanf:"tool_timeout"`
	// MaxToolResultBytes of one tool's output go to the model and the
	// transcript (default 100000, Hermes's threshold); the rest is cut,
	// with a note saying so.
	MaxToolResultBytes int `koanf:"max_tool_result_bytes"`
	// MemoryCharLimit bounds the characters of one user's memory notes
	// (default 2200, Hermes's memory_char_limit): an add past it is
	// refused, with how full the notes are.
	MemoryCharLimit int `koanf:"memory_char_limit"`
	// ContextWindow is the model's window in tokens.
	ContextWindow int `koanf:"context_window"`
	// CompressAt is the fraction of the window above which older messages
	// are summarised before the turn runs.
	CompressAt float64 `koanf:"compress_at"`
	// ProtectLast messages are never summarised.
	ProtectLast int `koanf:"protect_last"`
	// MaxTokens per model answer (0: the provider's default).
	MaxTokens int `koanf:"max_tokens"`
	// CacheKeys are extra config values whose change must re-render the
	// system prompt (part of the prompt signature).
	CacheKeys map[string]string `koanf:"cache_keys"`
	// HomeChannel is where send_message's "home" target goes
	// ("platform:chat_id[:thread_id]").
	HomeChannel string `koanf:"home_channel"`
	// SendMessageTargets are the targets send_message reaches without the
	// user's approval besides the turn's own chat and the home channels:
	// "platform:chat_id[:thread_id]", "platform:#channel", or
	// "platform:*" for every chat (not channel name) of a platform.
	SendMessageTargets []string `koanf:"send_message_targets"`
	// Images is how the model sees the pictures users send: "native"
	// (the default: with the message, for models with vision; a model
	// that refuses them answers from the text, which names them) or
	// "off" (only named).
	Images string `koanf:"images"`
	// MaxImageBytes bounds one picture shown to the model (default
	// 3.75 MiB: Anthropic takes 5 MB of base64); a larger one is scaled
	// down and sent as a JPEG.
	MaxImageBytes int64 `koanf:"max_image_bytes"`
	// MaxImageEdge bounds the longer side of a picture shown to the
	// model, in pixels (default 2048: the providers scale larger ones
	// down themselves, so more pixels only cost upload time); a larger
	// one is scaled down.
	MaxImageEdge int `koanf:"max_image_edge"`
	// MaxImageSourceBytes bounds a picture the worker reads to scale it
	// down (default 20 MiB, as attachments.max_bytes); a larger one is
	// only named, with why.
	MaxImageSourceBytes int64 `koanf:"max_image_source_bytes"`
	// MaxDocumentBytes of a text document are read into the user's
	// message (default 64 KiB); the rest is cut, with a note saying so.
	MaxDocumentBytes int64 `koanf:"max_document_bytes"`
	// ClientSystem is what an API client's system messages may add to
	// its turn's system prompt (clientSystem): "append" (the default, as
	// Hermes's API server does) or "ignore".
	ClientSystem string `koanf:"client_system"`
	// Personalities are what /personality picks from, name → prompt,
	// added to the session's system prompt (default: Hermes's built-in
	// ones; a file's entries add to them, an empty prompt removes one).
	// The router reads them; a turn carries its session's prompt.
	Personalities map[string]string `koanf:"personalities"`
	// ReasoningEffort is sent with every model call of a session that
	// did not choose its own with /reasoning: none, minimal, low,
	// medium, high or xhigh; empty sends none (the provider's default).
	ReasoningEffort string `koanf:"reasoning_effort"`
	// ServiceTier is the fast mode of sessions that did not choose with
	// /fast (Hermes's agent.service_tier): normal (the default, also
	// "") or fast, which asks OpenAI for Priority Processing
	// (service_tier "priority") and Anthropic for fast mode (speed
	// "fast") on the models that have it. Hermes's aliases (priority,
	// on; standard, default, off, none) are read too.
	ServiceTier string `koanf:"service_tier"`
	// GoalJudgeModel is the model the goal judge (/goal) asks after each
	// turn of a goal, as a session's /model names one ("model", or
	// "kind:model" for another configured provider); empty: the
	// session's own model (Hermes's auxiliary.goal_judge).
	GoalJudgeModel string `koanf:"goal_judge_model"`
	// ApprovalJudgeModel is the model the smart-approval judge asks
	// about each dangerous tool call while the approval mode is smart
	// (/approvals), named as GoalJudgeModel; empty: the session's own
	// model (Hermes's auxiliary.approval).
	ApprovalJudgeModel string `koanf:"approval_judge_model"`
	// MoA is the Mixture of Agents preset /moa runs one prompt through.
	MoA MoAConfig `koanf:"moa"`
}

// MoAConfig is /moa's Mixture of Agents preset (Hermes's default moa
// preset): the reference models answer the prompt in parallel, then the
// aggregator model synthesises their answers into the turn's answer.
// Models are named as a session's /model names one: "model", or
// "kind:model" for another configured provider.
type MoAConfig struct {
	// ReferenceModels answer the prompt first, in parallel; empty: /moa
	// is not configured and says so.
	ReferenceModels []string `koanf:"reference_models"`
	// AggregatorModel writes the answer from theirs; empty: the
	// session's own model.
	AggregatorModel string `koanf:"aggregator_model"`
	// ReferenceTemperature and AggregatorTemperature are the sampling
	// temperatures of the two layers (Hermes's 0.6 and 0.4).
	ReferenceTemperature  float64 `koanf:"reference_temperature"`
	AggregatorTemperature float64 `koanf:"aggregator_temperature"`
	// MinSuccessfulReferences must answer for the aggregator to run
	// (Hermes's MIN_SUCCESSFUL_REFERENCES, 1); fewer fail the turn.
	MinSuccessfulReferences int `koanf:"min_successful_references"`
	// MaxConcurrency bounds the reference calls in flight at once
	// (Hermes's 8).
	MaxConcurrency int `koanf:"max_concurrency"`
	// ReferenceTimeout bounds one reference call (its retries included);
	// one that takes longer counts as failed. 0: no bound of its own
	// (llm.call_timeout still bounds each attempt).
	ReferenceTimeout time.Duration `koanf:"reference_timeout"`
	// ReferenceMaxTokens caps each reference's answer; 0:
	// agent.max_tokens.
	ReferenceMaxTokens int `koanf:"reference_max_tokens"`
}

// Configured reports whether /moa has a preset to run.
func (c MoAConfig) Configured() bool { return len(c.ReferenceModels) > 0 }

// DefaultMoAConfig is Hermes's tuning, with no models: an operator names
// them.
func DefaultMoAConfig() MoAConfig {
	return MoAConfig{ReferenceTemperature: 0.6, AggregatorTemperature: 0.4, MinSuccessfulReferences: 1,
		MaxConcurrency: 8, ReferenceTimeout: 5 * time.Minute}
}

// Client system modes (AgentConfig.ClientSystem).
const (
	ClientSystemAppend = "append"
	ClientSystemIgnore = "ignore"
)

// Image modes (AgentConfig.Images).
const (
	ImagesNative = "native"
	ImagesOff    = "off"
)

// DefaultConfig returns the defaults.
func DefaultConfig() Config {
	return Config{
		Concurrency:                     64,
		DrainTimeout:                    25 * time.Second,
		AckWait:                         30 * time.Second,
		MaxDeliver:                      5,
		DeltaInterval:                   250 * time.Millisecond,
		RedisPrefix:                     "sb:",
		ApprovalsDenialBreakerThreshold: approvalmode.DefaultBreakerThreshold,
		Agent: AgentConfig{
			MaxIterations:       20,
			SystemPrompt:        "You are a helpful assistant talking to people through a chat app. Answer concisely.",
			ApprovalTimeout:     5 * time.Minute,
			ToolTimeout:         2 * time.Minute,
			MaxToolResultBytes:  100000,
			MemoryCharLimit:     2200,
			ContextWindow:       128000,
			CompressAt:          0.85,
			ProtectLast:         6,
			Images:              ImagesNative,
			MaxImageBytes:       15 << 18, // 3.75 MiB
			MaxImageEdge:        2048,
			MaxImageSourceBytes: 20 << 20,
			MaxDocumentBytes:    64 << 10,
			ClientSystem:        ClientSystemAppend,
			Personalities:       personality.Builtins(),
			MoA:                 DefaultMoAConfig(),
		},
	}
}

// Backend is one configured LLM provider.
type Backend struct {
	Provider llm.Provider
	// Kind is openai, anthropic or fake.
	Kind    string
	Model   string
	BaseURL string
	// KeyHash is the hex SHA-256 of the API key (never the key itself).
	KeyHash string
}

// Deps are the worker's collaborators.
type Deps struct {
	Log   *slog.Logger
	Bus   *bus.Bus
	DB    *pgxpool.Pool
	Redis *redis.Client
	// LLM is the default provider (already wrapped in llm.WithRetry).
	LLM Backend
	// Providers by kind, for per-session overrides "kind:model".
	Providers map[string]Backend
	// Sender delivers send_message; nil publishes a notice reply event.
	Sender tools.Sender
	// Homes is the home channel configured for a platform
	// (delivery.platforms.<p>.home), where send_message's bare platform
	// goes (a user's /sethome applies only where none is configured);
	// nil: none.
	Homes func(platform string) string
	// Cron keeps the cronjob tool's jobs; nil: a store whose time zone
	// is UTC.
	Cron *cron.Store
	// Tools are extra tools (tests, plug-ins).
	Tools []tools.Tool
	// Transcriber turns voice messages into text (nil: they are only
	// named to the model).
	Transcriber Transcriber
	// Speaker speaks final answers for the chats that chose /voice (nil:
	// no text-to-speech provider, answers stay text).
	Speaker Speaker
	// Agent is the external agent for agent.backend (nil: dial it).
	Agent AgentClient
	Now   func() time.Time
}

// Service is the agent worker.
type Service struct {
	cfg    Config
	log    *slog.Logger
	bus    *bus.Bus
	rdb    *redis.Client
	locker *redisx.Locker
	store  *store.Store
	// goals are the standing goals (/goal) the router keeps, which the
	// goal judge reads and records its verdicts in (goal.go).
	goals  *sessionstore.Store
	llm    Backend
	byKind map[string]Backend
	tools  *tools.Registry
	agent  AgentClient
	// media reads the attachments the gateways kept, and keeps the
	// pictures scaled down for the model.
	media mediaSource
	// fitting admits one picture at a time to be scaled down (fit).
	fitting chan struct{}
	// stt transcribes voice messages; nil: none configured.
	stt Transcriber
	// tts speaks final answers (/voice); nil: none configured.
	tts    Speaker
	now    func() time.Time
	closer func() error
	// controls routes control messages to the running turns.
	controls *controls
	// jobs are the cron jobs; resolveTarget reads a target string as
	// delivery's API does: with them, the answer of a cron run whose job
	// names several deliver targets goes to each (crontargets.go).
	jobs          *cron.Store
	resolveTarget cron.Resolver
	// approvalsDefault is approvals.mode; approvals is the mode set with
	// /approvals as Run watches it (nil before Run: the default applies).
	approvalsDefault approvalmode.Mode
	approvals        atomic.Pointer[approvalmode.View]
}

// New builds the worker.
func New(cfg Config, deps Deps) (*Service, error) {
	def := DefaultConfig()
	if cfg.Concurrency <= 0 {
		cfg.Concurrency = def.Concurrency
	}
	if cfg.DrainTimeout <= 0 {
		cfg.DrainTimeout = def.DrainTimeout
	}
	if cfg.AckWait <= 0 {
		cfg.AckWait = def.AckWait
	}
	if cfg.MaxDeliver <= 0 {
		cfg.MaxDeliver = def.MaxDeliver
	}
	if cfg.DeltaInterval <= 0 {
		cfg.DeltaInterval = def.DeltaInterval
	}
	a, d := &cfg.Agent, def.Agent
	if a.MaxIterations <= 0 {
		a.MaxIterations = d.MaxIterations
	}
	if a.ApprovalTimeout <= 0 {
		a.ApprovalTimeout = d.ApprovalTimeout
	}
	if a.ToolTimeout <= 0 {
		a.ToolTimeout = d.ToolTimeout
	}
	if a.MemoryCharLimit <= 0 {
		a.MemoryCharLimit = d.MemoryCharLimit
	}
	if a.MaxToolResultBytes <= 0 {
		a.MaxToolResultBytes = d.MaxToolResultBytes
	}
	if a.ContextWindow <= 0 {
		a.ContextWindow = d.ContextWindow
	}
	if a.CompressAt <= 0 || a.CompressAt > 1 {
		a.CompressAt = d.CompressAt
	}
	if a.ProtectLast <= 0 {
		a.ProtectLast = d.ProtectLast
	}
	switch a.Images {
	case "":
		a.Images = d.Images
	case ImagesNative, ImagesOff:
	default:
		return nil, fmt.Errorf("agent.images %q: want %q or %q", a.Images, ImagesNative, ImagesOff)
	}
	if a.MaxImageBytes <= 0 {
		a.MaxImageBytes = d.MaxImageBytes
	}
	if a.MaxImageEdge <= 0 {
		a.MaxImageEdge = d.MaxImageEdge
	}
	if a.MaxImageSourceBytes <= 0 {
		a.MaxImageSourceBytes = d.MaxImageSourceBytes
	}
	a.MaxImageSourceBytes = max(a.MaxImageSourceBytes, a.MaxImageBytes)
	if a.MaxDocumentBytes <= 0 {
		a.MaxDocumentBytes = d.MaxDocumentBytes
	}
	switch a.ClientSystem {
	case "":
		a.ClientSystem = d.ClientSystem
	case ClientSystemAppend, ClientSystemIgnore:
	default:
		return nil, fmt.Errorf("agent.client_system %q: want %q or %q", a.ClientSystem, ClientSystemAppend, ClientSystemIgnore)
	}
	if cfg.MaxAttachmentBytes <= 0 {
		cfg.MaxAttachmentBytes = attachment.DefaultConfig().MaxBytes
	}
	if cfg.TranscribeTimeout <= 0 {
		cfg.TranscribeTimeout = defaultTranscribeTimeout
	}
	if cfg.FetchWait <= 0 {
		cfg.FetchWait = fetchWait
	}
	mode, err := approvalmode.FromConfig(cfg.ApprovalsMode)
	if err != nil {
		return nil, err
	}
	if err := approvalmode.CheckSmartPolicy(cfg.ApprovalsSmartPolicy); err != nil {
		return nil, err
	}
	if cfg.ID == "" {
		host, _ := os.Hostname()
		cfg.ID = fmt.Sprintf("%s-%d", host, os.Getpid())
	}
	if deps.Bus == nil || deps.DB == nil || deps.Redis == nil {
		return nil, errors.New("worker needs a bus, a database and redis")
	}
	if deps.Log == nil {
		deps.Log = slog.Default()
	}
	if deps.Now == nil {
		deps.Now = time.Now
	}
	s := &Service{
		cfg:    cfg,
		log:    deps.Log.With("service", "worker", "worker_id", cfg.ID),
		bus:    deps.Bus,
		rdb:    deps.Redis,
		locker: redisx.NewLocker(deps.Redis, cfg.RedisPrefix),
		store:  store.New(deps.DB),
		goals:  sessionstore.New(deps.DB),
		llm:    deps.LLM,
		byKind: deps.Providers,
		agent:  deps.Agent,
		now:    deps.Now,
		media:  attachment.Open(deps.Bus.JetStream(), deps.Bus.Topology(), attachment.Config{}),
		stt:    deps.Transcriber,
		tts:    deps.Speaker,
	}
	s.approvalsDefault = mode
	s.controls = newControls(s.log)
	s.fitting = make(chan struct{}, fitsAtOnce)
	if cfg.Agent.Backend != "" && s.agent == nil {
		addr, ok := strings.CutPrefix(cfg.Agent.Backend, "grpc://")
		if !ok {
			return nil, fmt.Errorf("agent.backend %q: want grpc://host:port", cfg.Agent.Backend)
		}
		c, closer, err := DialAgent(addr)
		if err != nil {
			return nil, err
		}
		s.agent, s.closer = c, closer
	}
	if cfg.Agent.Backend == "" && s.llm.Provider == nil {
		return nil, errors.New("worker needs an LLM provider or agent.backend")
	}
	reg, err := s.registry(deps)
	if err != nil {
		return nil, err
	}
	s.tools = reg
	return s, nil
}

func (s *Service) registry(deps Deps) (*tools.Registry, error) {
	reg := tools.NewRegistry()
	homes, directory := deps.Homes, outbox.New(deps.DB)
	if homes == nil {
		homes = func(string) string { return "" }
	}
	s.resolveTarget = func(ctx context.Context, raw string) (*deliveryv1.Target, error) {
		return directory.ResolveTarget(ctx, raw, homes)
	}
	sender := deps.Sender
	if sender == nil {
		sender = &noticeSender{bus: s.bus, home: s.cfg.Agent.HomeChannel, resolve: s.resolveTarget}
	}
	jobs := deps.Cron
	if jobs == nil {
		jobs = cron.New(deps.DB, time.UTC, s.now)
	}
	s.jobs = jobs
	builtins := []tools.Tool{
		tools.Clock(s.now),
		tools.Memory(memoryAdapter{s: s.store, limit: s.cfg.Agent.MemoryCharLimit,
			gate: memorygate.New(deps.DB, s.cfg.MemoryWriteApproval, s.cfg.Agent.MemoryCharLimit)}),
		tools.SessionSearch(memoryAdapter{s: s.store}),
		tools.SendMessage(sender, s.cfg.Agent.SendMessageTargets),
		tools.Cronjob(jobs, s.cfg.Agent.SendMessageTargets),
	}
	for _, t := range append(builtins, deps.Tools...) {
		if err := reg.Register(t); err != nil {
			return nil, err
		}
	}
	if len(s.cfg.Agent.Toolsets) > 0 {
		reg.Keep(s.cfg.Agent.Toolsets)
	}
	reg.MarkDangerous(s.cfg.Agent.DangerousTools...)
	return reg, nil
}

// Run consumes turns until ctx ends, then lets running turns finish for
// DrainTimeout and hands the rest back to the bus.
func (s *Service) Run(ctx context.Context) error {
	if s.closer != nil {
		defer func() { _ = s.closer() }()
	}
	kind := s.llm.Kind
	if s.cfg.Agent.Backend != "" {
		kind = "external agent " + s.cfg.Agent.Backend
	}
	s.log.Info("worker running", "concurrency", s.cfg.Concurrency, "provider", kind, "model", s.llm.Model,
		"tools", s.tools.Names())
	// The approval mode is in memory before the first turn runs.
	if err := s.watchApprovals(ctx); err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return err
	}
	// One subscription for every session's control messages (they are
	// rare), registered before the first turn starts so none is missed.
	sub, err := s.bus.Conn().Subscribe(s.bus.Topology().Subject(bus.SubjectControl+".*"), s.controls.deliver)
	if err != nil {
		return fmt.Errorf("subscribe to control messages: %w", err)
	}
	defer func() { _ = sub.Unsubscribe() }()
	if err := s.bus.Conn().Flush(); err != nil {
		return fmt.Errorf("subscribe to control messages: %w", err)
	}
	c := bus.NewConsumer(s.bus, bus.ConsumerSpec{
		Stream:         bus.StreamTurns,
		Durable:        "worker-turns",
		FilterSubjects: []string{bus.SubjectTurnRequested},
		AckWait:        s.cfg.AckWait,
		MaxDeliver:     s.cfg.MaxDeliver,
		Backoff:        []time.Duration{time.Second, 2 * time.Second, 5 * time.Second},
		Concurrency:    s.cfg.Concurrency,
		DrainTimeout:   s.cfg.DrainTimeout,
		PollWait:       s.cfg.PollWait,
		// Postgres or Redis down: the turn waits in place, its attempts
		// intact (a turn that ran out of attempts before a worker claimed
		// it would keep its session's grant for router.grant_ttl).
		Unavailable: func(err error) bool { return pg.IsUnavailable(err) || redisx.IsUnavailable(err) },
	}, s.handle)
	return c.Run(ctx)
}

// handle runs one delivery of a turn.
func (s *Service) handle(ctx context.Context, req *turnsv1.TurnRequested) error {
	attempt, spent, rerun := 1, 1, false
	if d, ok := bus.DeliveryFrom(ctx); ok {
		attempt, spent, rerun = d.Attempt, d.Spent(), d.Rerun > 0
	}
	if req.GetTurnId() == "" || req.GetSessionKey() == "" {
		return bus.Permanent(errors.New("turn without turn_id or session_key"))
	}
	turnsInflight.Inc()
	defer turnsInflight.Dec()
	r := newTurnRun(s, req, attempt, spent)
	r.rerun = rerun
	r.log = telemetry.WithTrace(ctx, r.log)
	return r.run(ctx)
}
