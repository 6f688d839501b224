// Package googlechat is the Google Chat gateway (`switchboard gateway
// googlechat`), a Chat app as Hermes's Google Chat adapter is one in its
// HTTP-callback mode: Google Chat posts interaction events to the app's
// HTTP endpoint (served by every replica), and answers go out through the
// Chat REST API (spaces.messages.create) with the service account's OAuth
// token. Run by the platform kit's Runner.
//
// An event is answered only after its Authorization bearer token was
// verified as Google Chat signs it (RS256, issuer
// chat@system.gserviceaccount.com, audience the app's project number, a
// key of Google's published JWKS for that issuer) and its message is on
// the bus; a redelivery is absorbed by the bus dedupe id
// google_chat:<audience>:<message name>.
//
// Spaces map as Hermes maps them (platform google_chat): a direct message
// is a dm, any other space a group, keyed by the space name (spaces/…);
// the user is the sender's email (user_id) and resource name users/…
// (user_id_alt, the participant of group keys); a group message's thread
// (spaces/…/threads/…) is its session's thread. In a DM Google Chat opens
// a thread for every top-level message: only a reply in an existing thread
// (threadReply) is a thread of its own there, the stateless form of
// Hermes's "side thread" rule.
package googlechat

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"sync/atomic"
	"time"

	"github.com/switchboard-chat/switchboard/pkg/bearer"
	"github.com/switchboard-chat/switchboard/pkg/bus"
	"github.com/switchboard-chat/switchboard/pkg/platform"
)

// Google's endpoints, the defaults.
const (
	// DefaultIssuer is the iss (and email) of the tokens Google Chat signs.
	DefaultIssuer = "chat@system.gserviceaccount.com"
	// DefaultKeysURL is Google's JWKS of that service account.
	DefaultKeysURL = "https://www.googleapis.com/service_accounts/v1/jwk/chat@system.gserviceaccount.com"
	// DefaultAPIBaseURL is the Chat REST API.
	DefaultAPIBaseURL = "https://chat.googleapis.com"
	// DefaultTokenURL is Google's OAuth token endpoint (a service
	// account key's token_uri).
	DefaultTokenURL = "https://oauth2.googleapis.com/token"
	// Scope of the app's tokens.
	Scope = "https://www.googleapis.com/auth/chat.bot"
	// PlatformName is Hermes's platform name, the one session keys carry.
	PlatformName = "google_chat"
)

// Config is the gateways.googlechat section.
type Config struct {
	// ServiceAccountJSON (GOOGLE_CHAT_SERVICE_ACCOUNT_JSON; Hermes's
	// fallback to GOOGLE_APPLICATION_CREDENTIALS is not read) is the
	// service account key: a path to its JSON file, or the JSON itself.
	ServiceAccountJSON string `koanf:"service_account_json"`
	// Audience (GOOGLE_CHAT_HTTP_EVENTS_AUDIENCE) is the aud of the
	// tokens Google Chat sends: the app's project
	// number, with the app's authentication audience set to "Project
	// Number".
	Audience string `koanf:"audience"`
	// Issuer the inbound tokens must carry.
	Issuer string `koanf:"issuer"`
	// KeysURL is the JWKS that signs them.
	KeysURL string `koanf:"keys_url"`
	// APIBaseURL is the Chat REST API's root.
	APIBaseURL string `koanf:"api_base_url"`
	// TokenURL overrides the key's token_uri.
	TokenURL string `koanf:"token_url"`
	// ClockSkew tolerated on the tokens' iat, nbf and exp.
	ClockSkew time.Duration `koanf:"clock_skew"`
	// Addr serves the endpoint; Path is its path (the app's HTTP endpoint
	// URL ends in it).
	Addr string `koanf:"addr"`
	Path string `koanf:"path"`
	// MaxBodyBytes bounds one event (1 MiB).
	MaxBodyBytes int64 `koanf:"max_body_bytes"`
	// AckTimeout bounds publishing an event's message before answering.
	AckTimeout time.Duration `koanf:"ack_timeout"`
	// AllowBots (GOOGLE_CHAT_ALLOW_BOTS) says which messages of other
	// apps (sender type BOT) are published, marked is_bot, as the Discord,
	// Slack and Mattermost gateways' allow_bots: "none" (the default),
	// "mentions" (those that @mention this app; Google Chat delivers a
	// space message to an app only when it is mentioned, so in spaces it
	// is "all") or "all"; true and false are "all" and "none". Unset, it
	// follows router.auth.allow_bots.google_chat. The app's own messages
	// are never published. Hermes's adapter has no such setting.
	AllowBots string `koanf:"allow_bots"`
}

// DefaultConfig has the defaults.
func DefaultConfig() Config {
	return Config{
		Issuer: DefaultIssuer, KeysURL: DefaultKeysURL, APIBaseURL: DefaultAPIBaseURL, ClockSkew: 5 * time.Minute,
		Addr: "127.0.0.1:8790", Path: "/googlechat/events", MaxBodyBytes: 1 << 20, AckTimeout: 5 * time.Second,
	}
}

// Enabled reports whether the gateway has what it needs to start; dev
// starts it only then.
func (c Config) Enabled() bool { return c.ServiceAccountJSON != "" && c.Audience != "" }

// Validate checks the section without changing it.
func (c Config) Validate() error { return c.validate() }

func (c *Config) validate() error {
	d := DefaultConfig()
	switch {
	case c.Audience == "":
		return errors.New("googlechat: audience (GOOGLE_CHAT_HTTP_EVENTS_AUDIENCE, the app's project number) is required: every event's token must carry it")
	case c.ServiceAccountJSON == "":
		return errors.New("googlechat: service_account_json (GOOGLE_CHAT_SERVICE_ACCOUNT_JSON) is required to send")
	}
	if c.Issuer == "" {
		c.Issuer = d.Issuer
	}
	if c.KeysURL == "" {
		c.KeysURL = d.KeysURL
	}
	if c.APIBaseURL == "" {
		c.APIBaseURL = d.APIBaseURL
	}
	if c.ClockSkew <= 0 {
		c.ClockSkew = d.ClockSkew
	}
	for name, u := range map[string]string{"keys_url": c.KeysURL, "api_base_url": c.APIBaseURL, "token_url": c.TokenURL} {
		if u != "" && !httpURL(u) {
			return fmt.Errorf("googlechat: %s %q is not an http(s) URL", name, u)
		}
	}
	if _, err := platform.ParseBotMode(c.AllowBots); err != nil {
		return fmt.Errorf("googlechat: allow_bots (GOOGLE_CHAT_ALLOW_BOTS): %w", err)
	}
	if c.Addr == "" {
		c.Addr = d.Addr
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
	// Runner tunes the platform runner; its Attachments are the
	// top-level attachments section.
	Runner platform.Options
	// HTTPClient for Google's endpoints; nil uses one with a 30 s timeout.
	HTTPClient *http.Client
}

// Service runs the Google Chat gateway.
type Service struct {
	platform.Service
	p *Platform
}

// New builds the gateway.
func New(cfg Config, deps Deps) (*Service, error) {
	if deps.Bus == nil {
		return nil, errors.New("googlechat: bus is required")
	}
	log := deps.Log
	if log == nil {
		log = slog.Default()
	}
	p, err := NewPlatform(cfg, log, deps.HTTPClient)
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

// Platform is the Google Chat side of the kit.
type Platform struct {
	cfg      Config
	log      *slog.Logger
	verifier *verifier
	base     string // the Chat API's
	hc       *http.Client
	tokens   *bearer.Tokens
	api      *bearer.Client
	addr     atomic.Value // string
	bots     platform.BotMode
	self     selfNames
}

// NewPlatform validates cfg, reads the service account key and builds
// the platform.
func NewPlatform(cfg Config, log *slog.Logger, hc *http.Client) (*Platform, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	if log == nil {
		log = slog.Default()
	}
	if hc == nil {
		hc = &http.Client{Timeout: 30 * time.Second}
	}
	sa, err := loadServiceAccount(cfg.ServiceAccountJSON)
	if err != nil {
		return nil, fmt.Errorf("googlechat: %w", err)
	}
	if cfg.TokenURL != "" {
		sa.TokenURI = cfg.TokenURL
	}
	tokens := &bearer.Tokens{URL: sa.TokenURI, HC: hc, Form: sa.grant}
	bots, _ := platform.ParseBotMode(cfg.AllowBots) // validate checked it
	return &Platform{
		cfg: cfg, log: log.With("platform", PlatformName), bots: bots,
		verifier: newVerifier(cfg.KeysURL, cfg.Issuer, cfg.Audience, cfg.ClockSkew, hc),
		base:     strings.TrimRight(cfg.APIBaseURL, "/"), hc: hc, tokens: tokens,
		api: &bearer.Client{Tokens: tokens, HC: hc, Name: "chat api", Failure: failure},
	}, nil
}

func (p *Platform) Name() string    { return PlatformName }
func (p *Platform) Account() string { return p.cfg.Audience }

// maxText is Google Chat's limit for one message's text.
const maxText = 4096

// Capabilities: 4,096 characters a message, edits and deletes of the
// app's own messages (messages.patch and delete, so delivery streams by
// editing one message), threads; no typing indicator (the Chat API has
// none) and no uploads (media.upload refuses service accounts).
func (p *Platform) Capabilities() platform.Capabilities {
	return platform.Capabilities{
		MaxLength: maxText, Measure: platform.MeasureRunes, CanSend: true, CanEdit: true, CanDelete: true, CanThread: true,
		CommandPrefix: "/",
	}
}

// Addr is the address the endpoint listens on, once it does.
func (p *Platform) Addr() string {
	a, _ := p.addr.Load().(string)
	return a
}

// Connect checks the service account (a token from the token endpoint; a
// refused key is fatal), then serves the endpoint until ctx ends.
func (p *Platform) Connect(ctx context.Context, conn platform.Conn) error {
	cctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	_, err := p.tokens.Token(cctx)
	cancel()
	switch {
	case err == nil:
	case bearer.Refused(err):
		return platform.Fatal(fmt.Errorf("the token endpoint refused the google chat service account: %w", err))
	default:
		p.log.Warn("google chat token request failed; serving the endpoint anyway", "err", err)
	}
	return p.serve(ctx, conn)
}
