// Package sms is the SMS gateway (`switchboard gateway sms`) over
// Twilio, as Hermes's SMS adapter: Twilio posts each message a user
// texts to the business number to a webhook this gateway serves (every
// replica serves it), and replies go out through Twilio's Messages API
// (POST /2010-04-01/Accounts/{AccountSid}/Messages.json). Run by the
// platform kit's Runner.
//
// A webhook call is checked (X-Twilio-Signature: the base64 HMAC-SHA1 of
// the public URL and the sorted POST parameters, keyed with the auth
// token, or with a Webhooks Rule's shared key and the algorithm its
// X-Twilio-Webhooks-Signature-Settings names), normalized and published, and only then answered with an
// empty TwiML <Response/>, so Twilio sends nothing itself. A call Twilio
// makes again (its fallback URL, a replayed request) is absorbed by the
// bus dedupe id sms:<phone number>:<MessageSid>. MMS media are published
// as their Twilio URLs and downloaded with the account's credentials
// (Platform.Fetch) only when a turn reads them, by any replica.
//
// Every chat is a direct conversation whose chat id is the sender's
// number in E.164 (+15551234567), as in Hermes's session keys. SMS has
// no formatting, edits, deletes or typing: delivery sends final plain
// text in messages of up to 1,600 characters (Twilio's limit).
package sms

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

	"github.com/switchboard-chat/switchboard/pkg/bus"
	eventsv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/events/v1"
	"github.com/switchboard-chat/switchboard/pkg/platform"
)

// DefaultAPIBaseURL is Twilio's REST API.
const DefaultAPIBaseURL = "https://api.twilio.com"

// Config is the gateways.sms section.
type Config struct {
	// AccountSID (TWILIO_ACCOUNT_SID) is the Twilio account (AC…).
	AccountSID string `koanf:"account_sid"`
	// AuthToken (TWILIO_AUTH_TOKEN) authenticates API calls and signs
	// every webhook call.
	AuthToken string `koanf:"auth_token"`
	// PhoneNumber (TWILIO_PHONE_NUMBER) is the business number in E.164
	// (+15551234567): replies are sent from it, and messages to other
	// numbers of the account are skipped.
	PhoneNumber string `koanf:"phone_number"`
	// WebhookSharedKeys (webhook_shared_key, TWILIO_WEBHOOK_SHARED_KEY,
	// comma-separated) are the secrets of the SharedKeys a Twilio
	// Webhooks Rule may sign the webhook with instead of the auth token
	// (X-Twilio-Webhooks-Signature-Settings names its algorithm): a call
	// signed with any of them is taken, so a key can be rotated (the new
	// one added, the rule moved to it, the old one removed) without
	// refusing calls. Empty: such calls are refused.
	WebhookSharedKeys []string `koanf:"webhook_shared_key"`
	// PublicURL (SMS_WEBHOOK_PUBLIC_URL) is the webhook's address as
	// Twilio calls it (https://sms.example.com/webhooks/twilio), which
	// the signature covers: the gateway sits behind a proxy and cannot
	// know it. Without a path, Path is appended.
	PublicURL string `koanf:"public_url"`
	// APIBaseURL (SMS_API_BASE_URL) is Twilio's REST API, or a fake's.
	APIBaseURL string `koanf:"api_base_url"`
	// Addr serves the webhook; Path is its path.
	Addr string `koanf:"addr"`
	Path string `koanf:"path"`
	// MaxBodyBytes bounds one webhook call (Twilio's are a few KiB).
	MaxBodyBytes int64 `koanf:"max_body_bytes"`
	// AckTimeout bounds publishing a message before answering Twilio
	// (which waits 15 s).
	AckTimeout time.Duration `koanf:"ack_timeout"`
}

// DefaultConfig has the defaults.
func DefaultConfig() Config {
	return Config{
		APIBaseURL: DefaultAPIBaseURL, Addr: "127.0.0.1:8646", Path: "/webhooks/twilio",
		MaxBodyBytes: 64 << 10, AckTimeout: 5 * time.Second,
	}
}

// Enabled reports whether the gateway has what it needs to start; dev
// starts it only then.
func (c Config) Enabled() bool { return c.AccountSID != "" && c.AuthToken != "" }

// Validate checks the section without changing it.
func (c Config) Validate() error { return c.validate() }

func (c *Config) validate() error {
	d := DefaultConfig()
	c.PhoneNumber = strings.TrimSpace(c.PhoneNumber)
	c.WebhookSharedKeys = sharedKeys(c.WebhookSharedKeys)
	switch {
	case c.AccountSID == "":
		return errors.New("sms: account_sid (TWILIO_ACCOUNT_SID) is required")
	case !validSID(c.AccountSID, "AC"):
		return errors.New("sms: account_sid (TWILIO_ACCOUNT_SID) is AC followed by 32 hex digits")
	case c.AuthToken == "":
		return errors.New("sms: auth_token (TWILIO_AUTH_TOKEN) is required")
	case c.PhoneNumber == "":
		return errors.New("sms: phone_number (TWILIO_PHONE_NUMBER) is required: replies are sent from it")
	case !e164(c.PhoneNumber):
		return fmt.Errorf("sms: phone_number (TWILIO_PHONE_NUMBER) %q is not an E.164 number (+15551234567)", c.PhoneNumber)
	case c.PublicURL == "":
		return errors.New("sms: public_url (SMS_WEBHOOK_PUBLIC_URL) is required: Twilio signs the URL it calls, which the gateway behind a proxy cannot know")
	}
	if c.Path == "" {
		c.Path = d.Path
	}
	if !strings.HasPrefix(c.Path, "/") {
		c.Path = "/" + c.Path
	}
	u, err := url.Parse(c.PublicURL)
	if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" || u.Fragment != "" {
		return fmt.Errorf("sms: public_url %q is not an http(s) URL", c.PublicURL)
	}
	if u.Path == "" || u.Path == "/" {
		u.Path = c.Path
		c.PublicURL = u.String()
	}
	if c.APIBaseURL == "" {
		c.APIBaseURL = d.APIBaseURL
	}
	c.APIBaseURL = strings.TrimRight(c.APIBaseURL, "/")
	if u, err := url.Parse(c.APIBaseURL); err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
		return fmt.Errorf("sms: api_base_url %q is not an http(s) URL", c.APIBaseURL)
	}
	if c.Addr == "" {
		c.Addr = d.Addr
	}
	if c.MaxBodyBytes <= 0 {
		c.MaxBodyBytes = d.MaxBodyBytes
	}
	if c.AckTimeout <= 0 {
		c.AckTimeout = d.AckTimeout
	}
	return nil
}

// sharedKeys are keys with spaces trimmed and empty entries ("a,,b", a
// trailing comma) dropped, in a new slice.
func sharedKeys(keys []string) []string {
	var out []string
	for _, k := range keys {
		if k = strings.TrimSpace(k); k != "" {
			out = append(out, k)
		}
	}
	return out
}

// validSID reports whether s is a Twilio SID: its two-letter prefix and
// 32 hex digits.
func validSID(s, prefix string) bool {
	hex, ok := strings.CutPrefix(s, prefix)
	if !ok || len(hex) != 32 {
		return false
	}
	for _, c := range hex {
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F') {
			return false
		}
	}
	return true
}

// e164 reports whether s is "+" and 7 to 15 digits, the first not 0.
func e164(s string) bool {
	d, ok := strings.CutPrefix(s, "+")
	if !ok || len(d) < 7 || len(d) > 15 || d[0] == '0' {
		return false
	}
	for _, c := range d {
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
	// HTTPClient for the Messages API and media downloads; nil uses a
	// client with a 30 s timeout.
	HTTPClient *http.Client
}

// Service runs the SMS gateway.
type Service struct {
	platform.Service
	p *Platform
}

// New builds the gateway.
func New(cfg Config, deps Deps) (*Service, error) {
	if deps.Bus == nil {
		return nil, errors.New("sms: bus is required")
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

// Addr is the address the webhook listens on, once it does.
func (s *Service) Addr() string { return s.p.Addr() }

// Platform is the SMS side of the kit.
type Platform struct {
	cfg    Config
	log    *slog.Logger
	twilio *twilio
	addr   atomic.Value // string: the webhook listener's address
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
		cfg: cfg, log: log.With("platform", "sms"),
		twilio: &twilio{base: cfg.APIBaseURL, sid: cfg.AccountSID, token: cfg.AuthToken, hc: hc},
	}, nil
}

func (p *Platform) Name() string { return "sms" }

// Account is the business number: one gateway per number.
func (p *Platform) Account() string { return p.cfg.PhoneNumber }

// Capabilities: 1,600 characters a message (Twilio's limit, about ten
// segments, Hermes's too) counted in UTF-16 units as Twilio counts them,
// no edits, deletes or typing; media go out as MMS by public URL.
func (p *Platform) Capabilities() platform.Capabilities {
	return platform.Capabilities{
		MaxLength: maxText, Measure: platform.MeasureUTF16, CanSend: true, CommandPrefix: "/",
		MediaKinds: []eventsv1.AttachmentKind{eventsv1.AttachmentKind_ATTACHMENT_KIND_IMAGE},
	}
}

// Addr is the address the webhook listens on, once it does.
func (p *Platform) Addr() string {
	a, _ := p.addr.Load().(string)
	return a
}

// Connect checks the credentials, then serves the webhook until ctx
// ends. Credentials Twilio refuses are fatal; other API trouble is only
// logged, since receiving needs no API call.
func (p *Platform) Connect(ctx context.Context, conn platform.Conn) error {
	if err := p.checkAccount(ctx); err != nil {
		return err
	}
	return p.serveWebhook(ctx, conn)
}

// checkAccount asks Twilio for the account (GET
// /2010-04-01/Accounts/{AccountSid}.json).
func (p *Platform) checkAccount(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	var acct struct {
		Status string `json:"status"`
	}
	err := p.twilio.get(ctx, p.twilio.accountURL()+".json", &acct)
	var te *TwilioError
	switch {
	case err == nil:
		p.log.Info("twilio account", "status", acct.Status, "from", redact(p.cfg.PhoneNumber))
	case errors.As(err, &te) && te.credentialsRefused():
		return platform.Fatal(fmt.Errorf("%w: %w", ErrCredentials, err))
	default:
		p.log.Warn("twilio account lookup failed; serving the webhook anyway", "err", err)
	}
	return nil
}

// redact keeps a number's country code and last four digits for logs
// (+15551234567 → +1555***4567), as Hermes does.
func redact(n string) string {
	if len(n) <= 8 {
		return "***"
	}
	return n[:5] + "***" + n[len(n)-4:]
}
