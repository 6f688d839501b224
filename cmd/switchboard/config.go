package main

import (
	"fmt"
	"slices"
	"strings"
	"time"
	"unicode"

	"github.com/switchboard-chat/switchboard/pkg/approvalmode"
	"github.com/switchboard-chat/switchboard/pkg/attachment"
	"github.com/switchboard-chat/switchboard/pkg/bus"
	"github.com/switchboard-chat/switchboard/pkg/config"
	"github.com/switchboard-chat/switchboard/pkg/cron/scheduler"
	"github.com/switchboard-chat/switchboard/pkg/llm"
	"github.com/switchboard-chat/switchboard/pkg/personality"
	"github.com/switchboard-chat/switchboard/pkg/pg"
	"github.com/switchboard-chat/switchboard/pkg/redisx"
	"github.com/switchboard-chat/switchboard/pkg/retention"
	"github.com/switchboard-chat/switchboard/pkg/skill"
	"github.com/switchboard-chat/switchboard/pkg/telemetry"
	"github.com/switchboard-chat/switchboard/services/admin"
	"github.com/switchboard-chat/switchboard/services/delivery"
	"github.com/switchboard-chat/switchboard/services/gateway/api"
	"github.com/switchboard-chat/switchboard/services/gateway/bluebubbles"
	"github.com/switchboard-chat/switchboard/services/gateway/discord"
	"github.com/switchboard-chat/switchboard/services/gateway/email"
	"github.com/switchboard-chat/switchboard/services/gateway/googlechat"
	"github.com/switchboard-chat/switchboard/services/gateway/homeassistant"
	"github.com/switchboard-chat/switchboard/services/gateway/line"
	"github.com/switchboard-chat/switchboard/services/gateway/matrix"
	"github.com/switchboard-chat/switchboard/services/gateway/mattermost"
	"github.com/switchboard-chat/switchboard/services/gateway/signal"
	"github.com/switchboard-chat/switchboard/services/gateway/slack"
	"github.com/switchboard-chat/switchboard/services/gateway/sms"
	"github.com/switchboard-chat/switchboard/services/gateway/teams"
	"github.com/switchboard-chat/switchboard/services/gateway/telegram"
	"github.com/switchboard-chat/switchboard/services/gateway/webhook"
	"github.com/switchboard-chat/switchboard/services/gateway/whatsapp"
	"github.com/switchboard-chat/switchboard/services/router"
	"github.com/switchboard-chat/switchboard/services/worker"
)

// Config is the one configuration file every service reads; each service
// takes its own section. Defaults are in defaultConfig; environment
// variables override the file (see envAliases and config.EnvPrefix).
type Config struct {
	NATS     NATSConfig          `koanf:"nats"`
	Postgres PostgresConfig      `koanf:"postgres"`
	Redis    RedisConfig         `koanf:"redis"`
	Log      telemetry.LogConfig `koanf:"log"`
	Ops      OpsConfig           `koanf:"ops"`
	Dev      DevConfig           `koanf:"dev"`
	Gateways GatewaysConfig      `koanf:"gateways"`
	Delivery delivery.Config     `koanf:"delivery"`
	Router   router.Config       `koanf:"router"`
	Admin    admin.Config        `koanf:"admin"`
	Worker   worker.Config       `koanf:"worker"`
	Agent    worker.AgentConfig  `koanf:"agent"`
	LLM      LLMConfig           `koanf:"llm"`
	Privacy  PrivacyConfig       `koanf:"privacy"`
	// Approvals is the dangerous-command approval mode's default.
	Approvals ApprovalsConfig `koanf:"approvals"`
	// Attachments bounds the users' attachments the gateways keep for
	// the agent (pictures, voice messages, text documents).
	Attachments attachment.Config `koanf:"attachments"`
	// STT transcribes voice messages for the agent.
	STT STTConfig `koanf:"stt"`
	// TTS speaks the agent's answers in the chats that chose /voice.
	TTS TTSConfig `koanf:"tts"`
	// Cron is the scheduler of cron jobs, which runs in the router.
	Cron scheduler.Config `koanf:"cron"`
	// Sessions is the retention of idle sessions, swept by the router.
	Sessions retention.Config `koanf:"sessions"`
	// Skills are the operator's skills, which "/<skill> [instruction]"
	// invokes; the router loads them (every replica the same dirs).
	Skills skill.Config `koanf:"skills"`
	// Memory is Hermes's memory section: write_approval.
	Memory MemoryConfig `koanf:"memory"`
}

// MemoryConfig is the memory section.
type MemoryConfig struct {
	// WriteApproval is Hermes's memory.write_approval: when true, the
	// memory tool's writes (add, remove) are held until the user
	// approves them with /memory approve; /memory approval on|off
	// overrides it for one memory owner (a DM's user, a group chat).
	// Default false: writes apply at once.
	WriteApproval bool `koanf:"write_approval"`
}

// STTConfig selects speech-to-text for voice messages and audio files.
type STTConfig struct {
	// Provider is openai (any OpenAI-compatible /audio/transcriptions
	// endpoint: OpenAI, Groq, a local Whisper server) or off. Empty: the
	// model provider's own endpoint when it is OpenAI-compatible (the
	// fake model included), else off (voice messages are named to the
	// model, not heard): voice goes to no other provider unless told.
	Provider string `koanf:"provider"`
	// Model, default whisper-1.
	Model string `koanf:"model"`
	// BaseURL including /v1; empty: as Provider says.
	BaseURL string `koanf:"base_url"`
	APIKey  string `koanf:"api_key"`
	// Timeout bounds one transcription whole, the read of its audio
	// from the attachment store included (default Hermes's 30 s); a
	// voice message not transcribed by then is only named to the model.
	Timeout time.Duration `koanf:"timeout"`
}

// TTSConfig selects text-to-speech for voice replies (/voice).
type TTSConfig struct {
	// Provider is openai (any OpenAI-compatible /audio/speech endpoint)
	// or off. Empty: the model provider's own endpoint when it is
	// OpenAI-compatible (the fake model included), else off: /voice
	// then says voice replies are not configured.
	Provider string `koanf:"provider"`
	// Model, default gpt-4o-mini-tts; Voice, default alloy (Hermes's
	// OpenAI TTS defaults).
	Model string `koanf:"model"`
	Voice string `koanf:"voice"`
	// Format is the response_format asked for: opus (the default: Opus
	// in Ogg, which Telegram, WhatsApp and Signal play as a voice
	// message without converting), mp3, aac, flac, wav or pcm.
	Format string `koanf:"format"`
	// BaseURL including /v1; empty: as Provider says.
	BaseURL string `koanf:"base_url"`
	APIKey  string `koanf:"api_key"`
	// Timeout bounds one synthesis (default 60 s); the text answer is
	// already delivered, and a voice reply that takes longer is dropped.
	Timeout time.Duration `koanf:"timeout"`
}

// LLMConfig selects the model provider. Empty provider: the environment
// (ANTHROPIC_API_KEY/ANTHROPIC_BASE_URL, OPENAI_API_KEY/OPENAI_BASE_URL);
// with none set, `switchboard dev` runs the fake model in-process.
type LLMConfig struct {
	// Provider is openai, anthropic or fake.
	Provider string `koanf:"provider"`
	Model    string `koanf:"model"`
	// BaseURL: OpenAI-compatible servers include /v1; Anthropic does not.
	BaseURL string `koanf:"base_url"`
	APIKey  string `koanf:"api_key"`
	// MaxAttempts bounds retries of 429 and 5xx answers.
	MaxAttempts int `koanf:"max_attempts"`
	// CallTimeout bounds one model call; a stalled provider then ends the
	// turn with "took too long" instead of holding the session.
	CallTimeout time.Duration `koanf:"call_timeout"`
	// StreamIdleTimeout bounds the wait for the next chunk of a streamed
	// call (the first included); a stream gone silent for that long is
	// a retryable provider error. 0 turns it off. Hermes's stale-stream
	// timeout, 180 s by default.
	StreamIdleTimeout time.Duration `koanf:"stream_idle_timeout"`
}

// ApprovalsConfig is Hermes's approvals section.
type ApprovalsConfig struct {
	// Mode is the dangerous-command approval mode while no one has set
	// one with /approvals (Hermes's approvals.mode): manual (the
	// default) asks the user before every dangerous tool call, smart
	// lets a judge model (agent.approval_judge_model) approve the calls
	// it finds harmless and asks about the rest, off never asks.
	Mode string `koanf:"mode"`
	// SmartPolicy is Hermes's approvals.smart_policy: the operator's
	// rules, appended to the judge's system prompt (never next to the
	// call it judges); empty for none, at most
	// approvalmode.MaxSmartPolicyChars characters.
	SmartPolicy string `koanf:"smart_policy"`
	// DenialBreakerThreshold is Hermes's approvals.denial_breaker
	// _threshold: from this many consecutive judge DENY verdicts in a
	// conversation on, the result of a denied call tells the model to
	// stop trying variations (3; 0 or less turns it off).
	DenialBreakerThreshold int `koanf:"denial_breaker_threshold"`
}

// PrivacyConfig controls what personal data reaches the model.
type PrivacyConfig struct {
	// RedactPII hashes user and chat ids in prompts (SHA-256, 12 hex chars).
	RedactPII bool `koanf:"redact_pii"`
}

// NATSConfig locates the bus.
type NATSConfig struct {
	URL string `koanf:"url"`
	// Prefix isolates deployments sharing one NATS server.
	Prefix string `koanf:"prefix"`
	// Replicas per stream: 1 on one node, 3 in a cluster.
	Replicas int `koanf:"replicas"`
	// DedupeWindow is how long JetStream remembers message ids.
	DedupeWindow time.Duration `koanf:"dedupe_window"`
	// Retention bounds how long events stay on the bus.
	Retention time.Duration `koanf:"retention"`
	// Partitions of the inbound and reply subjects, fixed when the
	// streams are created (existing streams keep theirs).
	Partitions int `koanf:"partitions"`
}

// PostgresConfig locates the database.
type PostgresConfig struct {
	URL string `koanf:"url"`
	// MaxConns bounds this process's connection pool; 0 keeps pgx's
	// default of max(4, CPUs), which starved `dev` at 64 sessions (see
	// docs/performance.md). Processes × MaxConns must fit the server's
	// max_connections.
	MaxConns int32 `koanf:"max_conns"`
}

// RedisConfig locates Redis.
type RedisConfig struct {
	URL string `koanf:"url"`
	// Prefix namespaces every key.
	Prefix string `koanf:"prefix"`
}

// OpsConfig is the operations endpoint of each process.
type OpsConfig struct {
	// Addr serves /metrics, /healthz and /readyz.
	Addr string `koanf:"addr"`
	// Pprof exposes /debug/pprof on the same address.
	Pprof bool `koanf:"pprof"`
}

// DevConfig applies to `switchboard dev` only.
type DevConfig struct {
	// NATSPort of the embedded server (-1 picks a free port).
	NATSPort int `koanf:"nats_port"`
	// NATSStoreDir keeps JetStream data between runs; empty uses a
	// temporary directory.
	NATSStoreDir string `koanf:"nats_store_dir"`
	// MemoryLimitMiB is the Go runtime's soft memory limit for the dev
	// process (0: none; GOMEMLIMIT wins, and so does a lower limit from
	// the container). Under sustained load the process's heap — the
	// embedded server's message caches and dedupe ids among it — would
	// otherwise grow to twice what is live before each collection.
	MemoryLimitMiB int `koanf:"memory_limit_mib"`
	// GCPercent is the Go collector's target for the dev process (GOGC;
	// 0: the runtime's default of 100; the GOGC variable wins). One
	// process holds every service and the embedded server, whose message
	// ids and caches are most of a live heap of 30–40 MB under load: at
	// 100 it collected three times a second, at 400 the heap grows to
	// about the memory limit above, which bounds it, between collections.
	GCPercent int `koanf:"gc_percent"`
}

func defaultConfig() *Config {
	return &Config{
		NATS: NATSConfig{URL: "nats://127.0.0.1:4222", Replicas: 1, DedupeWindow: 30 * time.Second, Retention: 24 * time.Hour,
			Partitions: bus.DefaultPartitions},
		Postgres:    PostgresConfig{URL: pg.DefaultURL, MaxConns: 16},
		Redis:       RedisConfig{URL: redisx.DefaultURL, Prefix: "sb:"},
		Log:         telemetry.LogConfig{Level: "info", Format: "json", Pseudonymize: true},
		Ops:         OpsConfig{Addr: "127.0.0.1:9090"},
		Dev:         DevConfig{NATSPort: 14222, NATSStoreDir: ".switchboard/nats", MemoryLimitMiB: 160, GCPercent: 400},
		Gateways:    GatewaysConfig{API: api.DefaultConfig(), Signal: signal.DefaultConfig(), Matrix: matrix.DefaultConfig(), Mattermost: mattermost.DefaultConfig(), Webhook: webhook.DefaultConfig(), Discord: discord.DefaultConfig(), Slack: slack.DefaultConfig(), Telegram: telegram.DefaultConfig(), WhatsApp: whatsapp.DefaultConfig(), Email: email.DefaultConfig(), SMS: sms.DefaultConfig(), Teams: teams.DefaultConfig(), HomeAssistant: homeassistant.DefaultConfig(), BlueBubbles: bluebubbles.DefaultConfig(), LINE: line.DefaultConfig(), GoogleChat: googlechat.DefaultConfig()},
		Delivery:    delivery.DefaultConfig(),
		Router:      router.DefaultConfig(),
		Admin:       admin.Config{Addr: admin.DefaultAddr},
		Worker:      worker.DefaultConfig(),
		Agent:       worker.DefaultConfig().Agent,
		LLM:         LLMConfig{MaxAttempts: 4, CallTimeout: 10 * time.Minute, StreamIdleTimeout: 3 * time.Minute},
		Attachments: attachment.DefaultConfig(),
		STT:         STTConfig{Timeout: llm.DefaultTranscriptionTimeout},
		TTS:         TTSConfig{Model: llm.DefaultSpeechModel, Voice: llm.DefaultSpeechVoice, Format: llm.DefaultSpeechFormat, Timeout: time.Minute},
		Cron:        scheduler.DefaultConfig(),
		Sessions:    retention.DefaultConfig(),
		Skills:      skill.DefaultConfig(),
		Approvals:   ApprovalsConfig{DenialBreakerThreshold: approvalmode.DefaultBreakerThreshold},
	}
}

// envAliases maps conventional environment variables to config keys.
var envAliases = map[string]string{
	"NATS_URL":     "nats.url",
	"DATABASE_URL": "postgres.url",
	"REDIS_URL":    "redis.url",
	"LOG_LEVEL":    "log.level",
	// The API gateway's bearer key, named as in Hermes.
	"API_SERVER_KEY": "gateways.api.key",
	// Hermes's names for the Telegram gateway.
	"TELEGRAM_BOT_TOKEN":      "gateways.telegram.bot_token",
	"TELEGRAM_API_BASE_URL":   "gateways.telegram.api_base_url",
	"TELEGRAM_WEBHOOK_URL":    "gateways.telegram.webhook_url",
	"TELEGRAM_WEBHOOK_SECRET": "gateways.telegram.webhook_secret",
	// and for its group gating.
	"TELEGRAM_REQUIRE_MENTION":        "gateways.telegram.require_mention",
	"TELEGRAM_FREE_RESPONSE_CHATS":    "gateways.telegram.free_response_chats",
	"TELEGRAM_EXCLUSIVE_BOT_MENTIONS": "gateways.telegram.exclusive_bot_mentions",
	"TELEGRAM_MENTION_PATTERNS":       "gateways.telegram.mention_patterns",
	// and for the processing reactions.
	"TELEGRAM_REACTIONS": "gateways.telegram.reactions",
	// Hermes's fallback for display.tool_progress.
	"HERMES_TOOL_PROGRESS_MODE": "delivery.tool_progress",
}

// Validate checks values that would otherwise fail later and obscurely.
func (c *Config) Validate() error {
	if c.NATS.Replicas < 1 || c.NATS.Replicas > 5 {
		return config.Invalid("nats.replicas", c.NATS.Replicas, "1 to 5")
	}
	if c.NATS.Partitions < 1 || c.NATS.Partitions > bus.MaxPartitions {
		return config.Invalid("nats.partitions", c.NATS.Partitions, fmt.Sprintf("1 to %d", bus.MaxPartitions))
	}
	switch c.Log.Level {
	case "debug", "info", "warn", "error":
	default:
		return config.Invalid("log.level", c.Log.Level, "debug, info, warn or error")
	}
	switch c.Log.Format {
	case "json", "text":
	default:
		return config.Invalid("log.format", c.Log.Format, "json or text")
	}
	if c.Postgres.MaxConns < 0 {
		return config.Invalid("postgres.max_conns", c.Postgres.MaxConns, "0 (pgx default) or more")
	}
	if c.Dev.MemoryLimitMiB < 0 {
		return config.Invalid("dev.memory_limit_mib", c.Dev.MemoryLimitMiB, "0 (none) or more")
	}
	if c.Dev.GCPercent < 0 {
		return config.Invalid("dev.gc_percent", c.Dev.GCPercent, "0 (the Go default) or more")
	}
	if c.LLM.StreamIdleTimeout < 0 {
		return config.Invalid("llm.stream_idle_timeout", c.LLM.StreamIdleTimeout, "0 (off) or more")
	}
	if c.NATS.DedupeWindow < time.Second {
		return config.Invalid("nats.dedupe_window", c.NATS.DedupeWindow, "at least 1s")
	}
	if err := c.Attachments.Validate(); err != nil {
		return err
	}
	switch c.STT.Provider {
	case "", "openai", "off":
	default:
		return config.Invalid("stt.provider", c.STT.Provider, "openai or off")
	}
	if c.STT.Timeout <= 0 {
		return config.Invalid("stt.timeout", c.STT.Timeout, "more than 0")
	}
	switch c.TTS.Provider {
	case "", "openai", "off":
	default:
		return config.Invalid("tts.provider", c.TTS.Provider, "openai or off")
	}
	switch c.TTS.Format {
	case "mp3", "opus", "aac", "flac", "wav", "pcm":
	default:
		return config.Invalid("tts.format", c.TTS.Format, "opus, mp3, aac, flac, wav or pcm")
	}
	if c.TTS.Timeout <= 0 {
		return config.Invalid("tts.timeout", c.TTS.Timeout, "more than 0")
	}
	if err := c.Delivery.Validate(); err != nil {
		return err
	}
	if err := c.Cron.Validate(); err != nil {
		return err
	}
	if err := c.Sessions.Validate(); err != nil {
		return err
	}
	if err := c.Skills.Validate(); err != nil {
		return fmt.Errorf("%w for %v", config.ErrInvalid, err)
	}
	if _, err := approvalmode.FromConfig(c.Approvals.Mode); err != nil {
		return config.Invalid("approvals.mode", c.Approvals.Mode, "manual, smart or off")
	}
	if err := approvalmode.CheckSmartPolicy(c.Approvals.SmartPolicy); err != nil {
		return fmt.Errorf("%w: %v", config.ErrInvalid, err)
	}
	if err := c.Router.Validate(); err != nil {
		return fmt.Errorf("%w for router.%v", config.ErrInvalid, err)
	}
	if err := c.Skills.CheckReserved(func(name string) bool {
		_, quick := c.Router.QuickCommands[name]
		return quick
	}); err != nil {
		// A quick command wins over a bundle: it could never run.
		return fmt.Errorf("%w for %v", config.ErrInvalid, err)
	}
	switch c.LLM.Provider {
	case "", "openai", "anthropic", "fake":
	default:
		return config.Invalid("llm.provider", c.LLM.Provider, "openai, anthropic or fake")
	}
	if c.Worker.Concurrency < 1 {
		return config.Invalid("worker.concurrency", c.Worker.Concurrency, "at least 1")
	}
	if c.Agent.MaxIterations < 1 {
		return config.Invalid("agent.max_iterations", c.Agent.MaxIterations, "at least 1")
	}
	if c.Agent.Backend != "" && !strings.HasPrefix(c.Agent.Backend, "grpc://") {
		return config.Invalid("agent.backend", c.Agent.Backend, "empty or grpc://host:port")
	}
	if e := c.Agent.ReasoningEffort; e != "" && !personality.ValidEffort(e) {
		return config.Invalid("agent.reasoning_effort", e, "empty, none, minimal, low, medium, high or xhigh")
	}
	if _, ok := llm.ParseServiceTier(c.Agent.ServiceTier); !ok {
		return config.Invalid("agent.service_tier", c.Agent.ServiceTier, "empty, normal or fast")
	}
	for _, id := range c.Agent.Models {
		// What /model <name> takes: default and reset go back to the
		// default model instead.
		if id == "" || len(id) > 128 || id == "default" || id == "reset" ||
			strings.IndexFunc(id, func(r rune) bool { return unicode.IsSpace(r) || unicode.IsControl(r) }) >= 0 {
			return config.Invalid("agent.models", id, "model ids of 1 to 128 bytes without spaces (not default or reset)")
		}
	}
	return validMoA(c.Agent.MoA)
}

// validMoA checks agent.moa, /moa's Mixture of Agents preset.
func validMoA(m worker.MoAConfig) error {
	for _, id := range append(slices.Clone(m.ReferenceModels), m.AggregatorModel) {
		if strings.IndexFunc(id, func(r rune) bool { return unicode.IsSpace(r) || unicode.IsControl(r) }) >= 0 {
			return config.Invalid("agent.moa", id, "model names without spaces")
		}
	}
	if slices.Contains(m.ReferenceModels, "") {
		return config.Invalid("agent.moa.reference_models", m.ReferenceModels, "model names, none empty")
	}
	for key, t := range map[string]float64{"reference_temperature": m.ReferenceTemperature, "aggregator_temperature": m.AggregatorTemperature} {
		if t < 0 || t > 2 {
			return config.Invalid("agent.moa."+key, t, "from 0 to 2")
		}
	}
	if m.MinSuccessfulReferences < 1 || len(m.ReferenceModels) > 0 && m.MinSuccessfulReferences > len(m.ReferenceModels) {
		return config.Invalid("agent.moa.min_successful_references", m.MinSuccessfulReferences, "from 1 to the number of reference_models")
	}
	if m.MaxConcurrency < 1 {
		return config.Invalid("agent.moa.max_concurrency", m.MaxConcurrency, "at least 1")
	}
	if m.ReferenceTimeout < 0 || m.ReferenceMaxTokens < 0 {
		return config.Invalid("agent.moa", m.ReferenceTimeout, "reference_timeout and reference_max_tokens of 0 or more")
	}
	return nil
}

func loadConfig(path string) (*Config, []config.Warning, error) {
	cfg := defaultConfig()
	warnings, err := config.Load(config.Options{Path: path, Aliases: envAliases}, cfg)
	if err != nil {
		return nil, nil, fmt.Errorf("load config: %w", err)
	}
	return cfg, warnings, nil
}
