// Package signal is the Signal gateway (`switchboard gateway signal`),
// a client of a signal-cli daemon's HTTP interface (`signal-cli -a
// <number> daemon --http 127.0.0.1:8080`), as Hermes's Signal adapter
// is: received messages come as Server-Sent Events from GET
// /api/v1/events, and the gateway sends with JSON-RPC 2.0 at POST
// /api/v1/rpc (send, sendTyping, sendReaction, getAttachment). It is
// built on the platform kit: one replica per account reads the event
// stream (the kit's lease), every replica serves sends and the workers'
// attachment fetches.
//
// Chats are named as in Hermes, so session keys carry over: a direct
// chat by the sender's number (its UUID when the number is hidden), a
// group by "group:<base64 group id>"; the sender's UUID is the
// participant (user_id_alt). A message is named "<author>:<timestamp>",
// which is what Signal's quotes and reactions address it by, and which
// is the inbound event's dedupe id.
package signal

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"

	"github.com/switchboard-chat/switchboard/pkg/attachment"
	"github.com/switchboard-chat/switchboard/pkg/bus"
	eventsv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/events/v1"
	"github.com/switchboard-chat/switchboard/pkg/platform"
)

// Config is the gateways.signal section.
type Config struct {
	// HTTPURL (SIGNAL_HTTP_URL) is the signal-cli daemon's HTTP address,
	// e.g. http://127.0.0.1:8080.
	HTTPURL string `koanf:"http_url"`
	// Account (SIGNAL_ACCOUNT) is the bot's number in E.164 form
	// (+15551234567), registered or linked in signal-cli.
	Account string `koanf:"account"`
	// AllowedGroups (SIGNAL_GROUP_ALLOWED_USERS, Hermes's name) are the
	// group ids (base64, as signal-cli lists them) the bot answers in;
	// "*" is every group. Empty, as in Hermes, the bot ignores groups.
	// Who may talk to the agent is the router's SIGNAL_ALLOWED_USERS.
	AllowedGroups []string `koanf:"allowed_groups"`
	// RequireMention (SIGNAL_REQUIRE_MENTION, default false, as in
	// Hermes): in groups, answer only messages that @mention the bot or
	// quote one of its messages.
	RequireMention bool `koanf:"require_mention"`
	// Reactions (SIGNAL_REACTIONS, default true, as in Hermes): the
	// user's message shows 👀 while the agent works on it, then ✅ or ❌
	// (Signal keeps one reaction per person on a message: each replaces
	// the last); an interrupted turn takes the 👀 away.
	Reactions bool `koanf:"reactions"`
	// QuoteReplies (SIGNAL_QUOTE_REPLIES, default false: Hermes does not
	// quote): the first message of an answer quotes the user's message.
	QuoteReplies bool `koanf:"quote_replies"`
	// IdleTimeout drops an event stream that has said nothing, not even
	// signal-cli's keepalive (every 15 s), for this long (default 1 min).
	IdleTimeout time.Duration `koanf:"idle_timeout"`
	// LeaseTTL of the active/standby lease on the event stream.
	LeaseTTL time.Duration `koanf:"lease_ttl"`
}

// DefaultConfig has Hermes's defaults.
func DefaultConfig() Config {
	return Config{Reactions: true, IdleTimeout: time.Minute, LeaseTTL: 10 * time.Second}
}

// Enabled reports whether dev should start the gateway.
func (c Config) Enabled() bool { return c.HTTPURL != "" && c.Account != "" }

// Validate checks the section.
func (c Config) Validate() error {
	if c.HTTPURL == "" || c.Account == "" {
		return errors.New("signal: http_url (SIGNAL_HTTP_URL) and account (SIGNAL_ACCOUNT) are required")
	}
	u, err := url.Parse(c.HTTPURL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("signal: http_url %q is not an http(s) URL", c.HTTPURL)
	}
	if strings.ContainsAny(c.Account, " :/") {
		return fmt.Errorf("signal: account %q is not a number (+15551234567) or an account UUID", c.Account)
	}
	return nil
}

// Deps are the shared clients.
type Deps struct {
	Log *slog.Logger
	Bus *bus.Bus
	// HTTPClient for JSON-RPC calls (default: 60 s per call).
	HTTPClient *http.Client
	// Runner tunes the kit (attachments, instance, backoff in tests).
	Runner platform.Options
}

// Service runs the Signal gateway.
type Service struct {
	p      *Platform
	runner *platform.Runner
}

// New builds the gateway.
func New(cfg Config, deps Deps) (*Service, error) {
	if deps.Bus == nil {
		return nil, errors.New("signal: bus is required")
	}
	p, err := NewPlatform(cfg, deps.Log, deps.HTTPClient)
	if err != nil {
		return nil, err
	}
	opts := deps.Runner
	if opts.Log == nil {
		opts.Log = deps.Log
	}
	if opts.LeaseTTL == 0 {
		opts.LeaseTTL = cfg.LeaseTTL
	}
	if opts.Backoff == nil {
		opts.Backoff = Backoff
	}
	r, err := platform.NewRunner(p, deps.Bus, opts)
	if err != nil {
		return nil, err
	}
	p.sent = r.MarkSeen
	if opts.Attachments.Enabled {
		p.store = attachment.Open(deps.Bus.JetStream(), deps.Bus.Topology(), opts.Attachments)
	}
	return &Service{p: p, runner: r}, nil
}

// Backoff is Hermes's reconnect schedule for the event stream: 2 s,
// doubling to 60 s, each with up to 20 % jitter.
func Backoff(attempt int) time.Duration {
	return platform.Jitter(platform.Schedule(2*time.Second, 4*time.Second, 8*time.Second, 16*time.Second,
		32*time.Second, 60*time.Second)(attempt), 0.2)
}

// Run serves until ctx ends.
func (s *Service) Run(ctx context.Context) error { return s.runner.Run(ctx) }

// Ready is the readiness check.
func (s *Service) Ready(ctx context.Context) error { return s.runner.Ready(ctx) }

// Runner exposes the kit runner (state, tests).
func (s *Service) Runner() *platform.Runner { return s.runner }

// Platform is the Signal side of the kit.
type Platform struct {
	cfg         Config
	log         *slog.Logger
	client      *client
	rules       rules
	idleTimeout time.Duration
	// sent records the id an echo of a message the bot sent would have
	// (the Runner's MarkSeen), so that a sync transcript of it is never
	// taken for a Note to Self; nil without a runner.
	sent func(ctx context.Context, eventID string) error
	// store holds the attachments a send refers to by bytes_ref.
	store *attachment.Store

	mu     sync.Mutex
	lastID string // of the last event handled: Last-Event-ID
}

// NewPlatform builds the platform without a bus (the Runner adds it).
func NewPlatform(cfg Config, log *slog.Logger, hc *http.Client) (*Platform, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if log == nil {
		log = slog.Default()
	}
	if hc == nil {
		hc = &http.Client{Timeout: 60 * time.Second}
	}
	idle := cfg.IdleTimeout
	if idle <= 0 {
		idle = DefaultConfig().IdleTimeout
	}
	stream := *hc
	stream.Timeout = 0
	return &Platform{
		cfg: cfg, log: log.With("platform", "signal"), idleTimeout: idle,
		client: &client{base: strings.TrimRight(cfg.HTTPURL, "/"), account: cfg.Account, rpc: hc, stream: &stream},
		rules:  rules{Account: cfg.Account, Groups: platform.IDSet(cfg.AllowedGroups), RequireMention: cfg.RequireMention},
	}, nil
}

func (p *Platform) Name() string    { return "signal" }
func (p *Platform) Account() string { return p.cfg.Account }

// SingleConsumer: one replica reads the account's event stream; two
// would receive every message twice.
func (p *Platform) SingleConsumer() bool { return true }

// Ephemeral: signal-cli hands a stream only the messages that arrive
// while it is open (a daemon that numbers its events may replay those
// after Last-Event-ID), so the holder keeps its stream through a NATS
// outage, holding events until the bus takes them.
func (p *Platform) Ephemeral() bool { return true }

// maxText is Hermes's limit for one Signal message, in UTF-16 code units.
const maxText = 8000

// Capabilities: no edits (Hermes sends no edits, and Signal lets a
// message be edited only a few times, too few to stream by), no deletes.
func (p *Platform) Capabilities() platform.Capabilities {
	return platform.Capabilities{
		MaxLength: maxText, Measure: platform.MeasureUTF16, CanSend: true, CanTyping: true, CommandPrefix: "/",
		MediaKinds: []eventsv1.AttachmentKind{eventsv1.AttachmentKind_ATTACHMENT_KIND_IMAGE, eventsv1.AttachmentKind_ATTACHMENT_KIND_DOCUMENT,
			eventsv1.AttachmentKind_ATTACHMENT_KIND_AUDIO, eventsv1.AttachmentKind_ATTACHMENT_KIND_VIDEO},
	}
}

// Connect reads the event stream until ctx ends or it fails.
func (p *Platform) Connect(ctx context.Context, conn platform.Conn) error {
	return p.stream(ctx, conn)
}

var skipped = promauto.NewCounterVec(prometheus.CounterOpts{
	Name: "switchboard_signal_events_skipped_total",
	Help: "Signal events read without a message to publish, by reason (receipt, typing, group not allowed, not mentioned …).",
}, []string{"reason"})
