// Package homeassistant is the Home Assistant gateway (`switchboard
// gateway homeassistant`). It reproduces Hermes's Home Assistant adapter
// (gateway/platforms/homeassistant.py, since moved to the
// hermes-homeassistant plugin): one replica (the kit's lease) holds a
// connection to Home Assistant's WebSocket API (/api/websocket: the
// auth handshake with a long-lived access token, then subscribe_events
// for state_changed), turns the state changes of the watched entities
// into messages for the agent, and every replica posts the agent's
// answers as persistent notifications (REST
// POST /api/services/persistent_notification/create).
//
// Hermes's rules carry over: nothing is watched until watch_domains,
// watch_entities or watch_all says so; ignore_entities wins over both; an
// entity is heard at most once per cooldown_seconds (30); a change that
// leaves the state as it was (attributes only) is not a message. Every
// message comes from user "homeassistant" in the channel "ha_events", so
// all events share one session, and is trusted as the transport's: the
// token authenticated the connection and there is no person to allow.
//
// Home Assistant replays nothing to a new subscription, and Hermes
// loses the changes made while it was not subscribed. Here each
// connection, once subscribed, asks for the current states (get_states)
// and publishes every watched entity whose state differs from the last
// one the gateway read, which it keeps in a KV bucket (BucketStates) so
// a restarted process or another replica knows it
// (docs/chat-gateways.md).
package homeassistant

import (
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"

	"github.com/switchboard-chat/switchboard/pkg/bus"
	"github.com/switchboard-chat/switchboard/pkg/platform"
)

// Config is the gateways.homeassistant section.
type Config struct {
	// URL (HASS_URL) is Home Assistant's base URL.
	URL string `koanf:"url"`
	// Token (HASS_TOKEN) is a long-lived access token.
	Token string `koanf:"token"`
	// WatchDomains are the entity domains whose changes are messages
	// (climate, binary_sensor …).
	WatchDomains []string `koanf:"watch_domains"`
	// WatchEntities are single entity ids whose changes are messages.
	WatchEntities []string `koanf:"watch_entities"`
	// IgnoreEntities are never messages, whatever else matches.
	IgnoreEntities []string `koanf:"ignore_entities"`
	// WatchAll makes every entity's changes messages, when neither
	// WatchDomains nor WatchEntities is set.
	WatchAll bool `koanf:"watch_all"`
	// CooldownSeconds is the least time between two messages of one
	// entity (30, as Hermes; 0: none).
	CooldownSeconds int `koanf:"cooldown_seconds"`
	// NotificationID, when set, is the persistent notification every
	// answer replaces. Empty (the default, as Hermes, which sends no
	// notification_id): each answer is a notification of its own, its id
	// made from the send's idempotency key.
	NotificationID string `koanf:"notification_id"`
	// NotificationTitle is the notifications' title ("Hermes Agent").
	NotificationTitle string `koanf:"notification_title"`
	// PingInterval keeps the websocket alive (30 s, Hermes's heartbeat);
	// a ping unanswered within it drops the connection.
	PingInterval time.Duration `koanf:"ping_interval"`
	// LeaseTTL of the active/standby lease on the websocket.
	LeaseTTL time.Duration `koanf:"lease_ttl"`
}

// DefaultURL is Hermes's default HASS_URL.
const DefaultURL = "http://homeassistant.local:8123"

// DefaultConfig has Hermes's defaults.
func DefaultConfig() Config {
	return Config{URL: DefaultURL, CooldownSeconds: 30, NotificationTitle: "Hermes Agent",
		PingInterval: 30 * time.Second, LeaseTTL: 10 * time.Second}
}

// Enabled reports whether dev should start the gateway: a token, as
// Hermes enables the platform when HASS_TOKEN is set.
func (c Config) Enabled() bool { return c.Token != "" }

// Validate checks the section.
func (c Config) Validate() error {
	if c.Token == "" {
		return errors.New("homeassistant: token (HASS_TOKEN) is required")
	}
	u, err := url.Parse(c.URL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("homeassistant: url %q is not an http(s) URL", c.URL)
	}
	if c.CooldownSeconds < 0 {
		return fmt.Errorf("homeassistant: cooldown_seconds %d is negative", c.CooldownSeconds)
	}
	if c.PingInterval < 0 {
		return fmt.Errorf("homeassistant: ping_interval %s is negative", c.PingInterval)
	}
	return nil
}

// Deps are the shared clients.
type Deps struct {
	Log *slog.Logger
	Bus *bus.Bus
	// HTTPClient for the websocket and the REST calls (default: no
	// overall timeout; each call is bounded by its context).
	HTTPClient *http.Client
	// Runner tunes the kit (instance, backoff in tests).
	Runner platform.Options
}

// Service runs the Home Assistant gateway.
type Service struct {
	platform.Service
	p *Platform
}

// New builds the gateway. It does not call Home Assistant: a refused
// token shows when the connection is made (the gateway turns unready
// with the reason).
func New(cfg Config, deps Deps) (*Service, error) {
	if deps.Bus == nil {
		return nil, errors.New("homeassistant: bus is required")
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
	p.states = newStateStore(deps.Bus, p.account)
	svc, err := platform.NewService(p, deps.Bus, deps.Log, opts)
	if err != nil {
		return nil, err
	}
	return &Service{Service: svc, p: p}, nil
}

// Platform is the Home Assistant side of the kit.
type Platform struct {
	cfg     Config
	log     *slog.Logger
	hc      *http.Client
	base    string
	account string
	rules   rules
	// now is the clock of the cooldown (tests move it).
	now func() time.Time
	// handshakeTimeout bounds a connection's setup: the websocket's HTTP
	// upgrade, then auth and the subscription (tests shorten it).
	handshakeTimeout time.Duration
	// statesLimit bounds the get_states answer (maxStatesBytes; tests
	// shrink it).
	statesLimit int64
	// last is when each entity was last published (the cooldown); only
	// Connect's read loop touches it, and Connect never runs twice at
	// once.
	last map[string]time.Time
	// states are the watched entities' last states read (in the bus's
	// bucket once New attached it); statesPending: this connection's
	// get_states is not answered yet; noCatchUp: an answer was too
	// large to read, do not ask again. Only Connect touches them.
	states        *stateStore
	statesPending bool
	noCatchUp     bool

	// delivering counts the changes being published now, deliveries
	// those started: ping reads them (ws.go).
	delivering atomic.Int32
	deliveries atomic.Uint64
}

// NewPlatform builds the platform.
func NewPlatform(cfg Config, log *slog.Logger, hc *http.Client) (*Platform, error) {
	if cfg.URL == "" {
		cfg.URL = DefaultURL
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if log == nil {
		log = slog.Default()
	}
	if hc == nil {
		hc = &http.Client{}
	}
	if cfg.PingInterval == 0 {
		cfg.PingInterval = DefaultConfig().PingInterval
	}
	if cfg.NotificationTitle == "" {
		cfg.NotificationTitle = DefaultConfig().NotificationTitle
	}
	u, _ := url.Parse(cfg.URL)
	p := &Platform{
		cfg: cfg, log: log.With("platform", "homeassistant"), hc: hc,
		base: strings.TrimRight(cfg.URL, "/"), account: strings.ToLower(u.Host),
		rules: newRules(cfg), now: time.Now, last: map[string]time.Time{}, states: newStateStore(nil, strings.ToLower(u.Host)),
		handshakeTimeout: handshakeTimeout, statesLimit: maxStatesBytes,
	}
	if !p.rules.watching() {
		p.log.Warn("homeassistant: no watch_domains, watch_entities or watch_all: every state change will be dropped")
	}
	return p, nil
}

func (p *Platform) Name() string { return "homeassistant" }

// Account is the Home Assistant instance, its URL's host[:port].
func (p *Platform) Account() string { return p.account }

// SingleConsumer: one replica holds the subscription; two would publish
// every change twice (the dedupe would catch it, but the cooldown would
// be per replica).
func (p *Platform) SingleConsumer() bool { return true }

// Ephemeral: Home Assistant replays nothing to a new subscription (the
// catch-up publishes one change per entity, not each of them), so the
// holder keeps its connection while NATS is out of reach.
func (p *Platform) Ephemeral() bool { return true }

// Capabilities: sends only. A notification cannot be threaded, typed
// into or (with a configured notification id) told apart from the
// previous answer; its length is not limited (Hermes cut at 4,096
// characters; the whole answer is posted here).
func (p *Platform) Capabilities() platform.Capabilities {
	return platform.Capabilities{CanSend: true, Measure: platform.MeasureRunes, CommandPrefix: "/"}
}

var skipped = promauto.NewCounterVec(prometheus.CounterOpts{
	Name: "switchboard_homeassistant_changes_skipped_total",
	Help: "Home Assistant state changes read without a message to publish, by reason (ignored, not watched, unchanged, cooldown, seen: published already).",
}, []string{"reason"})
