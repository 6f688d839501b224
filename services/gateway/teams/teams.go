// Package teams is the Microsoft Teams gateway (`switchboard gateway
// teams`), a Bot Framework bot as Hermes's Teams adapter is one: Teams
// posts activities to the bot's messaging endpoint (POST /api/messages,
// served by every replica), and answers go out through the Bot Connector
// REST API at the activity's serviceUrl. Run by the platform kit's Runner.
//
// An activity is answered only after its Authorization bearer token was
// verified as the Bot Framework requires (RS256, issued by
// https://api.botframework.com for this app id, signed with a key from
// the OpenID metadata's JWKS, the serviceurl claim matching the
// activity's serviceUrl) and its message is on the bus; a redelivery is
// absorbed by the bus dedupe id teams:<app id>:<conversation id>|<activity id>.
// The verified serviceUrl is kept per conversation in a NATS KV bucket, so
// that any replica can answer, and only a verified activity ever sets it.
//
// Conversations map as Hermes maps them: a personal chat is a dm, a group
// chat a group, a channel a channel, each keyed by the conversation id
// (a channel thread's id carries ;messageid=<root>, so every thread is a
// conversation of its own).
package teams

import (
	"container/list"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/switchboard-chat/switchboard/pkg/bearer"
	"github.com/switchboard-chat/switchboard/pkg/bus"
	"github.com/switchboard-chat/switchboard/pkg/egress"
	eventsv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/events/v1"
	"github.com/switchboard-chat/switchboard/pkg/platform"
)

// Microsoft's endpoints, the defaults.
const (
	// DefaultOpenIDMetadataURL lists the keys that sign the Bot Framework's
	// tokens to bots (its jwks_uri).
	DefaultOpenIDMetadataURL = "https://login.botframework.com/v1/.well-known/openidconfiguration"
	// DefaultIssuer is the iss of those tokens.
	DefaultIssuer = "https://api.botframework.com"
	// DefaultScope is what the bot's own tokens are asked for.
	DefaultScope = "https://api.botframework.com/.default"
	// DefaultServiceURL is where a conversation the gateway has no
	// verified serviceUrl for is addressed (Hermes's TEAMS_SERVICE_URL
	// default, the public cloud's Teams connector).
	DefaultServiceURL = "https://smba.trafficmanager.net/teams/"
	// loginBase builds the tenant's token endpoint.
	loginBase = "https://login.microsoftonline.com/"
)

// Config is the gateways.teams section.
type Config struct {
	// ClientID (TEAMS_CLIENT_ID) is the bot's Microsoft App ID (the Entra
	// app's client id): the audience of the tokens Teams sends and the
	// client of the tokens the gateway asks for.
	ClientID string `koanf:"client_id"`
	// ClientSecret (TEAMS_CLIENT_SECRET) is the app's client secret.
	ClientSecret string `koanf:"client_secret"`
	// TenantID (TEAMS_TENANT_ID) is the app's tenant: its token endpoint
	// issues the bot's tokens. "botframework.com" for a multi-tenant app.
	TenantID string `koanf:"tenant_id"`
	// TokenURL overrides the token endpoint (default
	// https://login.microsoftonline.com/<tenant>/oauth2/v2.0/token).
	TokenURL string `koanf:"token_url"`
	// Scope of the bot's tokens (https://api.botframework.com/.default).
	Scope string `koanf:"scope"`
	// OpenIDMetadataURL is the Bot Framework's OpenID metadata document.
	OpenIDMetadataURL string `koanf:"openid_metadata_url"`
	// Issuer is the iss the inbound tokens must carry.
	Issuer string `koanf:"issuer"`
	// ClockSkew tolerated on the tokens' nbf and exp (5 minutes, as the
	// Bot Framework SDKs allow).
	ClockSkew time.Duration `koanf:"clock_skew"`
	// ServiceURL (TEAMS_SERVICE_URL) addresses a conversation no verified
	// activity came from yet (a home channel before anyone wrote there).
	ServiceURL string `koanf:"service_url"`
	// RequireMention (TEAMS_REQUIRE_MENTION, default false): in channels
	// and group chats answer only messages that @mention the bot. Without
	// resource-specific consent Teams delivers only those anyway.
	RequireMention bool `koanf:"require_mention"`
	// Addr serves the messaging endpoint (Hermes's port 3978); Path is its
	// path (the endpoint registered with the bot ends in it).
	Addr string `koanf:"addr"`
	Path string `koanf:"path"`
	// Port (TEAMS_PORT), when set, replaces Addr's port.
	Port int `koanf:"port"`
	// MaxBodyBytes bounds one activity (1 MiB, as Hermes).
	MaxBodyBytes int64 `koanf:"max_body_bytes"`
	// AckTimeout bounds publishing an activity's message before answering.
	AckTimeout time.Duration `koanf:"ack_timeout"`
	// PressHold is how long the answer to an approval button's invoke
	// waits for the router's (endpoint.go), at most maxPressHold.
	PressHold time.Duration `koanf:"press_hold"`
	// RouteTTL is how long a conversation's serviceUrl is kept after its
	// last activity.
	RouteTTL time.Duration `koanf:"route_ttl"`
}

// DefaultConfig has the defaults.
func DefaultConfig() Config {
	return Config{
		Scope: DefaultScope, OpenIDMetadataURL: DefaultOpenIDMetadataURL, Issuer: DefaultIssuer,
		ClockSkew: 5 * time.Minute, ServiceURL: DefaultServiceURL,
		Addr: "127.0.0.1:3978", Path: "/api/messages",
		MaxBodyBytes: 1 << 20, AckTimeout: 5 * time.Second, RouteTTL: 90 * 24 * time.Hour,
		PressHold: 1500 * time.Millisecond,
	}
}

// Enabled reports whether the gateway has what it needs to start; dev
// starts it only then.
func (c Config) Enabled() bool { return c.ClientID != "" && c.ClientSecret != "" }

// Validate checks the section without changing it.
func (c Config) Validate() error { return c.validate() }

// Resolved is the section with its defaults filled in (the port applied
// to the address, the tenant's token endpoint), as the gateway runs it.
func (c Config) Resolved() (Config, error) {
	err := c.validate()
	return c, err
}

func (c *Config) validate() error {
	d := DefaultConfig()
	switch {
	case c.ClientID == "":
		return errors.New("teams: client_id (TEAMS_CLIENT_ID) is required: it is the audience every activity's token must carry")
	case c.ClientSecret == "":
		return errors.New("teams: client_secret (TEAMS_CLIENT_SECRET) is required to send")
	case c.TenantID == "" && c.TokenURL == "":
		return errors.New("teams: tenant_id (TEAMS_TENANT_ID) is required (botframework.com for a multi-tenant app)")
	case strings.ContainsAny(c.TenantID, "/?#% "):
		return fmt.Errorf("teams: tenant_id %q is not a tenant id or domain", c.TenantID)
	}
	if c.TokenURL == "" {
		c.TokenURL = loginBase + c.TenantID + "/oauth2/v2.0/token"
	}
	if c.Scope == "" {
		c.Scope = d.Scope
	}
	if c.OpenIDMetadataURL == "" {
		c.OpenIDMetadataURL = d.OpenIDMetadataURL
	}
	if c.Issuer == "" {
		c.Issuer = d.Issuer
	}
	if c.ClockSkew <= 0 {
		c.ClockSkew = d.ClockSkew
	}
	if c.ServiceURL == "" {
		c.ServiceURL = d.ServiceURL
	}
	for name, u := range map[string]string{"token_url": c.TokenURL, "openid_metadata_url": c.OpenIDMetadataURL, "service_url": c.ServiceURL} {
		if !httpURL(u) {
			return fmt.Errorf("teams: %s %q is not an http(s) URL", name, u)
		}
	}
	if c.Addr == "" {
		c.Addr = d.Addr
	}
	if c.Port < 0 || c.Port > 65535 {
		return fmt.Errorf("teams: port %d is not a TCP port", c.Port)
	}
	if c.Port > 0 {
		host, _, err := net.SplitHostPort(c.Addr)
		if err != nil {
			return fmt.Errorf("teams: addr %q: %w", c.Addr, err)
		}
		c.Addr, c.Port = net.JoinHostPort(host, strconv.Itoa(c.Port)), 0
	}
	if c.Path == "" {
		c.Path = d.Path
	}
	if !strings.HasPrefix(c.Path, "/") {
		c.Path = "/" + c.Path
	}
	if c.MaxBodyBytes <= 0 {
		c.MaxBodyBytes = d.MaxBodyBytes
	}
	if c.AckTimeout <= 0 {
		c.AckTimeout = d.AckTimeout
	}
	if c.PressHold <= 0 {
		c.PressHold = d.PressHold
	}
	if c.PressHold > maxPressHold {
		return fmt.Errorf("teams: press_hold %v: at most %v (the Bot Framework wants an invoke's answer within a few seconds)", c.PressHold, maxPressHold)
	}
	if c.RouteTTL <= 0 {
		c.RouteTTL = d.RouteTTL
	}
	return nil
}

func httpURL(s string) bool {
	u, err := url.Parse(s)
	return err == nil && (u.Scheme == "https" || u.Scheme == "http") && u.Host != ""
}

// Deps are the shared clients.
type Deps struct {
	Log *slog.Logger
	Bus *bus.Bus
	// Runner tunes the platform runner (tests shorten backoffs); its
	// Attachments are the top-level attachments section.
	Runner platform.Options
	// HTTPClient for Microsoft's endpoints; nil uses a client with a 30 s
	// timeout.
	HTTPClient *http.Client
}

// Service runs the Teams gateway.
type Service struct {
	platform.Service
	p *Platform
}

// New builds the gateway.
func New(cfg Config, deps Deps) (*Service, error) {
	if deps.Bus == nil {
		return nil, errors.New("teams: bus is required")
	}
	log := deps.Log
	if log == nil {
		log = slog.Default()
	}
	p, err := NewPlatform(cfg, deps.Bus, log, deps.HTTPClient)
	if err != nil {
		return nil, err
	}
	svc, err := platform.NewService(p, deps.Bus, log, deps.Runner)
	if err != nil {
		return nil, err
	}
	return &Service{Service: svc, p: p}, nil
}

// Addr is the address the endpoint listens on, once it does.
func (s *Service) Addr() string { return s.p.Addr() }

// Platform is the Teams side of the kit.
type Platform struct {
	cfg       Config
	log       *slog.Logger
	bus       *bus.Bus
	hc        *http.Client
	anon      *http.Client // downloads from hosts activities name (public addresses only)
	verifier  *verifier
	tokens    *bearer.Tokens
	connector *bearer.Client
	addr      atomic.Value // string: the listener's address

	// routes: the conversations' serviceUrls (KV, opened on first use)
	// and what this replica last stored, to skip rewriting them.
	mu     sync.Mutex
	kv     jetstream.KeyValue
	stored map[string]storedRoute

	// invokes: the presses of invokes this replica holds for the
	// router's answer, by interaction id (invokes.go).
	invokesMu sync.Mutex
	invokes   map[string]*heldInvoke
	// keeps are the presses held on for a retry (keepForRetry), oldest
	// first, each until its timer lets go, the cap lets go of it
	// (maxKeeps), or the endpoint stops serving (endKeeps); stopped: it
	// has, and keeps none; capLogged: when the cap was last logged
	// (guarded by invokesMu). maxKeeps and keepFor, when set (tests),
	// stand for the cap and retryHold.
	keeps     *list.List // of *keptInvoke
	stopped   bool
	capLogged time.Time
	maxKeeps  int
	keepFor   time.Duration
}

// NewPlatform validates cfg and builds the platform; b holds the
// conversations' serviceUrls.
func NewPlatform(cfg Config, b *bus.Bus, log *slog.Logger, hc *http.Client) (*Platform, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	if b == nil {
		return nil, errors.New("teams: bus is required")
	}
	if log == nil {
		log = slog.Default()
	}
	if hc == nil {
		hc = &http.Client{Timeout: 30 * time.Second}
	}
	// The bot's own tokens: OAuth2 client credentials.
	tokens := &bearer.Tokens{URL: cfg.TokenURL, HC: hc, Form: func(time.Time) (url.Values, error) {
		return url.Values{"grant_type": {"client_credentials"}, "client_id": {cfg.ClientID}, "client_secret": {cfg.ClientSecret}, "scope": {cfg.Scope}}, nil
	}}
	return &Platform{
		cfg: cfg, log: log.With("platform", "teams"), bus: b, hc: hc, anon: egress.Guard(hc, egress.Config{}),
		verifier:  newVerifier(cfg.OpenIDMetadataURL, cfg.Issuer, cfg.ClientID, cfg.ClockSkew, hc),
		tokens:    tokens,
		connector: &bearer.Client{Tokens: tokens, HC: hc, Name: "bot connector", Failure: failure},
		stored:    map[string]storedRoute{},
	}, nil
}

func (p *Platform) Name() string    { return "teams" }
func (p *Platform) Account() string { return p.cfg.ClientID }

// maxText is Hermes's limit for one Teams message (about 28 KB of text).
const maxText = 28000

// Capabilities: 28,000 characters a message (Hermes's limit), edits and
// deletes of the bot's own messages (the connector's PUT and DELETE, so
// delivery streams by editing one message), typing activities, images
// and files sent as attachments.
func (p *Platform) Capabilities() platform.Capabilities {
	return platform.Capabilities{
		MaxLength: maxText, Measure: platform.MeasureRunes, CanSend: true, CanEdit: true, CanDelete: true, CanTyping: true,
		CommandPrefix: "/",
		MediaKinds:    []eventsv1.AttachmentKind{eventsv1.AttachmentKind_ATTACHMENT_KIND_IMAGE, eventsv1.AttachmentKind_ATTACHMENT_KIND_DOCUMENT},
	}
}

// Addr is the address the endpoint listens on, once it does.
func (p *Platform) Addr() string {
	a, _ := p.addr.Load().(string)
	return a
}

// Connect checks the credentials (a token from the token endpoint; a
// refused secret is fatal), then serves the messaging endpoint until ctx
// ends.
func (p *Platform) Connect(ctx context.Context, conn platform.Conn) error {
	if err := p.checkCredentials(ctx); err != nil {
		return err
	}
	p.startKeeps()
	// A retry once the endpoint stops comes to another replica: the
	// presses held on here for one are let go as Connect returns.
	defer p.endKeeps()
	return p.serve(ctx, conn)
}

// checkCredentials asks for a token once: an app id or secret the token
// endpoint refuses is fatal, anything else (the endpoint out of reach) is
// logged, since receiving needs no token.
func (p *Platform) checkCredentials(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	_, err := p.tokens.Token(ctx)
	switch {
	case err == nil:
		return nil
	case bearer.Refused(err):
		return platform.Fatal(fmt.Errorf("the token endpoint refused the teams app's credentials: %w", err))
	default:
		p.log.Warn("teams token request failed; serving the endpoint anyway", "err", err)
		return nil
	}
}
