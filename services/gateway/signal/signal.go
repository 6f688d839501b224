// Package signal is the Signal gateway (`switchboard gateway signal`),
// a client of a signal-cli daemon's HTTP interface (`signal-cli -a
// <number> daemon --http 127.0.0.1:8080 --receive-mode=manual`). By
// default it asks the daemon for received messages with the JSON-RPC
// receive method (a long poll: messages wait on Signal's servers while no
// gateway asks); in sse mode it reads them, as Hermes's Signal adapter
// does, as Server-Sent Events from GET /api/v1/events (what arrives while
// no gateway reads is lost). It sends with JSON-RPC 2.0 at POST
// /api/v1/rpc (send, sendTyping, sendReaction, getAttachment). It is
// built on the platform kit: one replica per account receives (the kit's
// lease), every replica serves sends and the workers' attachment
// fetches.
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
	// ReceiveMode (SIGNAL_RECEIVE_MODE) is how messages are received:
	// ReceiveManual (the default) or ReceiveSSE.
	ReceiveMode string `koanf:"receive_mode"`
	// PollTimeout is how long one receive call waits for a message
	// (manual mode, default 5 s); a gateway that stops waits for the
	// call in flight, so at most this long when nothing arrives.
	PollTimeout time.Duration `koanf:"poll_timeout"`
	// MaxMessages one receive call takes (manual mode, default 1): what
	// a gateway that dies with a call in flight, or before it published
	// the answer, can lose.
	MaxMessages int `koanf:"max_messages"`
	// IdleTimeout drops an event stream that has said nothing, not even
	// signal-cli's keepalive (every 15 s), for this long (sse mode,
	// default 1 min).
	IdleTimeout time.Duration `koanf:"idle_timeout"`
	// LeaseTTL of the active/standby lease on receiving.
	LeaseTTL time.Duration `koanf:"lease_ttl"`
}

// Receive modes.
const (
	// ReceiveManual asks the daemon for messages with the JSON-RPC
	// receive method; the daemon must run with --receive-mode=manual.
	// Messages wait on Signal's servers until a gateway asks.
	ReceiveManual = "manual"
	// ReceiveSSE reads the daemon's event stream, as Hermes does; the
	// daemon runs in its default mode (--receive-mode=on-start). What
	// arrives while no gateway reads is lost.
	ReceiveSSE = "sse"
)

// DefaultConfig has Hermes's defaults, except that messages are received
// with the receive method, which loses none while no gateway runs.
func DefaultConfig() Config {
	return Config{Reactions: true, ReceiveMode: ReceiveManual, PollTimeout: 5 * time.Second, MaxMessages: 1,
		IdleTimeout: time.Minute, LeaseTTL: 10 * time.Second}
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
	switch c.ReceiveMode {
	case "", ReceiveManual, ReceiveSSE:
	default:
		return fmt.Errorf("signal: receive_mode (SIGNAL_RECEIVE_MODE) %q is not %s or %s", c.ReceiveMode, ReceiveManual, ReceiveSSE)
	}
	// signal-cli takes a negative timeout as none: a call that never ends.
	if c.PollTimeout < 0 || c.PollTimeout > maxPollTimeout {
		return fmt.Errorf("signal: poll_timeout %s is not between 0 (the default) and %s", c.PollTimeout, maxPollTimeout)
	}
	if c.MaxMessages < 0 || c.MaxMessages > maxBatch {
		return fmt.Errorf("signal: max_messages %d is not between 0 (the default) and %d", c.MaxMessages, maxBatch)
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
	platform.Service
	p *Platform
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
	if opts.LeaseTTL == 0 {
		opts.LeaseTTL = cfg.LeaseTTL
	}
	if opts.Backoff == nil {
		opts.Backoff = platform.QuickBackoff
	}
	svc, err := platform.NewService(p, deps.Bus, deps.Log, opts)
	if err != nil {
		return nil, err
	}
	p.sent = svc.Runner().MarkSeen
	p.downloads = platform.NewDownloader(opts.Attachments.URLs)
	if opts.Attachments.Enabled {
		p.store = attachment.Open(deps.Bus.JetStream(), deps.Bus.Topology(), opts.Attachments)
	}
	return &Service{Service: svc, p: p}, nil
}

// Platform is the Signal side of the kit.
type Platform struct {
	cfg         Config
	log         *slog.Logger
	client      *client
	rules       rules
	idleTimeout time.Duration
	pollTimeout time.Duration
	maxMessages int
	// sent records the id an echo of a message the bot sent would have
	// (the Runner's MarkSeen), so that a sync transcript of it is never
	// taken for a Note to Self; nil without a runner.
	sent func(ctx context.Context, eventID string) error
	// store holds the attachments a send refers to by bytes_ref.
	store *attachment.Store
	// downloads fetches the attachments a send names by URL
	// (attachments.urls; nil: public addresses only).
	downloads *platform.Downloader

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
	def := DefaultConfig()
	if cfg.ReceiveMode == "" {
		cfg.ReceiveMode = def.ReceiveMode
	}
	idle := cfg.IdleTimeout
	if idle <= 0 {
		idle = def.IdleTimeout
	}
	poll := cfg.PollTimeout
	if poll <= 0 {
		poll = def.PollTimeout
	}
	batch := cfg.MaxMessages
	if batch <= 0 {
		batch = def.MaxMessages
	}
	stream := *hc
	stream.Timeout = 0
	return &Platform{
		cfg: cfg, log: log.With("platform", "signal"), idleTimeout: idle, pollTimeout: poll, maxMessages: batch,
		client: &client{base: strings.TrimRight(cfg.HTTPURL, "/"), account: cfg.Account, rpc: hc, stream: &stream},
		rules:  rules{Account: cfg.Account, Groups: platform.IDSet(cfg.AllowedGroups), RequireMention: cfg.RequireMention},
	}, nil
}

func (p *Platform) Name() string    { return "signal" }
func (p *Platform) Account() string { return p.cfg.Account }

// SingleConsumer: one replica receives for the account; two event
// streams would receive every message twice, and signal-cli answers one
// receive call at a time.
func (p *Platform) SingleConsumer() bool { return true }

// Ephemeral: what the holder received lives only in it until the bus
// takes it. signal-cli hands a stream only the messages that arrive while
// it is open (a daemon that numbers its events may replay those after
// Last-Event-ID), and a receive call's answer is the only copy of the
// messages it carries (signal-cli acknowledged them to Signal's servers
// before it answered), so the holder keeps receiving through a NATS
// outage, holding what it has until the bus takes it; a standby that
// takes over meanwhile is refused by the daemon while the holder's
// receive call runs, and polls after it.
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

// Connect receives until ctx ends or the daemon fails: with receive
// calls, or from the event stream in sse mode.
func (p *Platform) Connect(ctx context.Context, conn platform.Conn) error {
	if p.cfg.ReceiveMode == ReceiveSSE {
		return p.stream(ctx, conn)
	}
	return p.poll(ctx, conn)
}

var skipped = promauto.NewCounterVec(prometheus.CounterOpts{
	Name: "switchboard_signal_events_skipped_total",
	Help: "Signal events read without a message to publish, by reason (receipt, typing, group not allowed, not mentioned …).",
}, []string{"reason"})
