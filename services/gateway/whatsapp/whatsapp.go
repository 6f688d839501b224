// Package whatsapp is the WhatsApp gateway (`switchboard gateway
// whatsapp`) over the WhatsApp Business Cloud API (Meta's Graph API):
// Meta posts webhook notifications to an HTTP endpoint this gateway
// serves (every replica serves it), and replies go out as POST
// /{phone-number-id}/messages. Run by the platform kit's Runner.
//
// A notification is checked (X-Hub-Signature-256, an HMAC-SHA256 of the
// raw body with the app secret), its messages are normalized and
// published, and only then is it answered 200: Meta retries anything
// else, and a retry of what was published is absorbed by the bus dedupe
// id whatsapp:<phone number id>:<wamid>. The media users send are
// published as their media id and downloaded through the Graph API
// (Platform.Fetch) only when a turn reads them, by any replica.
//
// The Cloud API has no groups: every chat is a direct conversation whose
// chat id is the user's wa_id (their phone number without "+"). It cannot
// edit or delete a sent message either, so delivery sends only final text
// (no streaming by edits).
package whatsapp

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

	"github.com/switchboard-chat/switchboard/pkg/attachment"
	"github.com/switchboard-chat/switchboard/pkg/bus"
	eventsv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/events/v1"
	"github.com/switchboard-chat/switchboard/pkg/platform"
)

// DefaultAPIBaseURL is Meta's Graph API with the version the gateway was
// written against.
const DefaultAPIBaseURL = "https://graph.facebook.com/v21.0"

// Config is the gateways.whatsapp section.
type Config struct {
	// AccessToken (WHATSAPP_ACCESS_TOKEN) is a system user's or the app's
	// access token with the whatsapp_business_messaging permission.
	AccessToken string `koanf:"access_token"`
	// PhoneNumberID (WHATSAPP_PHONE_NUMBER_ID) is the business phone
	// number's id (not the number itself): replies are sent from it, and
	// notifications for other numbers of the account are skipped.
	PhoneNumberID string `koanf:"phone_number_id"`
	// AppSecret (WHATSAPP_APP_SECRET) is the Meta app's secret, with
	// which every notification is signed. Required: without it anyone who
	// reaches the endpoint could post messages in any user's name.
	AppSecret string `koanf:"app_secret"`
	// VerifyToken (WHATSAPP_VERIFY_TOKEN) is the token typed into the
	// app's webhook settings; Meta sends it back when it subscribes.
	VerifyToken string `koanf:"verify_token"`
	// APIBaseURL (WHATSAPP_API_BASE_URL) is the Graph API base including
	// its version, or a fake's.
	APIBaseURL string `koanf:"api_base_url"`
	// Addr serves the webhook; Path is its path (the callback URL given
	// to Meta ends in it).
	Addr string `koanf:"addr"`
	Path string `koanf:"path"`
	// MaxBodyBytes bounds one notification (Meta's are at most 3 MB).
	MaxBodyBytes int64 `koanf:"max_body_bytes"`
	// AckTimeout bounds publishing a notification's messages before
	// answering Meta.
	AckTimeout time.Duration `koanf:"ack_timeout"`
	// reportWait replaces defaultReportWait (tests).
	reportWait time.Duration
	// Reactions (WHATSAPP_REACTIONS, default false): the user's message
	// shows 👀 while the agent works on it, then ✅ when the answer was
	// sent, ❌ when the turn failed, nothing when it was interrupted.
	Reactions bool `koanf:"reactions"`
}

// DefaultConfig has the defaults.
func DefaultConfig() Config {
	return Config{
		APIBaseURL: DefaultAPIBaseURL, Addr: "127.0.0.1:8645", Path: "/whatsapp/webhook",
		MaxBodyBytes: 3 << 20, AckTimeout: 5 * time.Second,
	}
}

// Enabled reports whether the gateway has what it needs to start; dev
// starts it only then.
func (c Config) Enabled() bool { return c.AccessToken != "" }

// Validate checks the section without changing it.
func (c Config) Validate() error { return c.validate() }

func (c *Config) validate() error {
	d := DefaultConfig()
	switch {
	case c.AccessToken == "":
		return errors.New("whatsapp: access_token (WHATSAPP_ACCESS_TOKEN) is required")
	case c.PhoneNumberID == "":
		return errors.New("whatsapp: phone_number_id (WHATSAPP_PHONE_NUMBER_ID) is required")
	case !validID(c.PhoneNumberID):
		return errors.New("whatsapp: phone_number_id (WHATSAPP_PHONE_NUMBER_ID) is the number's id in the Graph API (digits), not the phone number")
	case c.AppSecret == "":
		return errors.New("whatsapp: app_secret (WHATSAPP_APP_SECRET) is required: without it anyone who reaches the webhook can post messages as any user")
	case c.VerifyToken == "":
		return errors.New("whatsapp: verify_token (WHATSAPP_VERIFY_TOKEN) is required: Meta sends it back when it subscribes the webhook")
	}
	if c.APIBaseURL == "" {
		c.APIBaseURL = d.APIBaseURL
	}
	c.APIBaseURL = strings.TrimRight(c.APIBaseURL, "/")
	if u, err := url.Parse(c.APIBaseURL); err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
		return fmt.Errorf("whatsapp: api_base_url %q is not an http(s) URL", c.APIBaseURL)
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

// validID reports whether s is a Graph API node id (digits).
func validID(s string) bool {
	if s == "" || len(s) > 64 {
		return false
	}
	for _, c := range s {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}

// Deps are the shared clients.
type Deps struct {
	Log *slog.Logger
	Bus *bus.Bus
	// Runner tunes the platform runner (tests shorten backoffs); its
	// Attachments are the top-level attachments section.
	Runner platform.Options
	// HTTPClient for the Graph API and media downloads; nil uses a client
	// with a 30 s timeout.
	HTTPClient *http.Client
}

// Service runs the WhatsApp gateway.
type Service struct {
	platform.Service
	p *Platform
}

// New builds the gateway.
func New(cfg Config, deps Deps) (*Service, error) {
	if deps.Bus == nil {
		return nil, errors.New("whatsapp: bus is required")
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
	if deps.Runner.Attachments.Enabled {
		p.store = attachment.Open(deps.Bus.JetStream(), deps.Bus.Topology(), deps.Runner.Attachments)
	}
	return &Service{Service: svc, p: p}, nil
}

// Addr is the address the webhook listens on, once it does.
func (s *Service) Addr() string { return s.p.Addr() }

// Platform is the WhatsApp side of the kit.
type Platform struct {
	cfg   Config
	log   *slog.Logger
	graph *graph
	addr  atomic.Value // string: the webhook listener's address
	// store holds the attachments a send refers to by bytes_ref (a
	// voice reply); nil when attachments are off.
	store *attachment.Store
}

// NewPlatform validates cfg and builds the platform without a bus (the
// Runner adds it).
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
	return &Platform{
		cfg: cfg, log: log.With("platform", "whatsapp"),
		graph: &graph{base: cfg.APIBaseURL, token: cfg.AccessToken, phoneID: cfg.PhoneNumberID, hc: hc},
	}, nil
}

func (p *Platform) Name() string    { return "whatsapp" }
func (p *Platform) Account() string { return p.cfg.PhoneNumberID }

// Capabilities: 4,096 characters a message (Hermes's limit), no edits or
// deletes (the Cloud API has neither), typing through the read receipt's
// typing indicator.
func (p *Platform) Capabilities() platform.Capabilities {
	return platform.Capabilities{
		MaxLength: maxText, Measure: platform.MeasureRunes, CanSend: true, CanTyping: true, CommandPrefix: "/",
		MediaKinds: []eventsv1.AttachmentKind{eventsv1.AttachmentKind_ATTACHMENT_KIND_IMAGE, eventsv1.AttachmentKind_ATTACHMENT_KIND_DOCUMENT,
			eventsv1.AttachmentKind_ATTACHMENT_KIND_AUDIO, eventsv1.AttachmentKind_ATTACHMENT_KIND_VIDEO},
	}
}

// Addr is the address the webhook listens on, once it does.
func (p *Platform) Addr() string {
	a, _ := p.addr.Load().(string)
	return a
}

// Connect checks the access token, then serves the webhook until ctx
// ends. A token Meta refuses is fatal; Graph API trouble is only logged,
// since receiving needs no token.
func (p *Platform) Connect(ctx context.Context, conn platform.Conn) error {
	if err := p.checkToken(ctx); err != nil {
		return err
	}
	return p.serveWebhook(ctx, conn)
}

// checkToken asks the Graph API for the phone number (GET
// /{phone-number-id}).
func (p *Platform) checkToken(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	var number struct {
		DisplayPhoneNumber string `json:"display_phone_number"`
		VerifiedName       string `json:"verified_name"`
	}
	err := p.graph.get(ctx, p.graph.base+"/"+p.cfg.PhoneNumberID+"?fields=display_phone_number,verified_name", &number)
	var ge *GraphError
	switch {
	case err == nil:
		p.log.Info("whatsapp phone number", "display_phone_number", number.DisplayPhoneNumber, "verified_name", number.VerifiedName)
	case errors.As(err, &ge) && ge.tokenRefused():
		return platform.Fatal(fmt.Errorf("meta refused the whatsapp access token: %w", err))
	case errors.As(err, &ge) && ge.Status == http.StatusNotFound || errors.As(err, &ge) && ge.Code == codeBadParameter:
		return platform.Fatal(fmt.Errorf("whatsapp phone_number_id %s is not a phone number this token can use: %w", p.cfg.PhoneNumberID, err))
	default:
		p.log.Warn("whatsapp phone number lookup failed; serving the webhook anyway", "err", err)
	}
	return nil
}
