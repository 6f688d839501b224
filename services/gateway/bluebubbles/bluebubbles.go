// Package bluebubbles is the iMessage gateway (`switchboard gateway
// bluebubbles`) over a BlueBubbles server, as Hermes's BlueBubbles
// adapter: the BlueBubbles server on a Mac signed into Messages posts a
// `new-message` webhook for every iMessage it sees to this gateway (every
// replica serves the webhook), and replies go out through its REST API
// (POST /api/v1/message/text?password=…). Run by the platform kit's
// Runner.
//
// BlueBubbles signs nothing and sends no custom headers: a webhook call
// is trusted only when its URL carries the configured secret (the
// server password by default, as Hermes registers it:
// …/bluebubbles-webhook?password=…), compared in constant time. A call
// is normalized and published, and only then answered 200 (a message the
// bus cannot take is held until it can: BlueBubbles posts once); a
// webhook BlueBubbles posts again is absorbed by the bus dedupe id
// bluebubbles:<server>:<message guid>. The bot's own messages
// (isFromMe), tapbacks, edits and read states (updated-message) are
// skipped. Attachments are published by their BlueBubbles guid and
// downloaded (GET /api/v1/attachment/{guid}/download) only when a turn
// reads them, by any replica.
//
// Chats are Hermes's: a chat's id is its chat guid, a DM's
// (iMessage;-;+15551234567, with the address as chat_id_alt) as a
// group's (iMessage;+;chat123…). iMessage has no formatting and BlueBubbles
// cannot edit: delivery sends final plain text of up to 4,000
// characters a message (Hermes's limit).
package bluebubbles

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/switchboard-chat/switchboard/pkg/attachment"
	"github.com/switchboard-chat/switchboard/pkg/bus"
	eventsv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/events/v1"
	"github.com/switchboard-chat/switchboard/pkg/platform"
)

// Config is the gateways.bluebubbles section.
type Config struct {
	// ServerURL (BLUEBUBBLES_SERVER_URL) is the BlueBubbles server
	// (http://192.168.1.10:1234); "http://" is assumed without a scheme.
	ServerURL string `koanf:"server_url"`
	// Password (BLUEBUBBLES_PASSWORD) is the server password every REST
	// call carries (?password=).
	Password string `koanf:"password"`
	// WebhookSecret (BLUEBUBBLES_WEBHOOK_SECRET) is what a webhook call
	// must carry in its URL (?password= or ?guid=) to be trusted;
	// empty means the server password, as Hermes registers it.
	WebhookSecret string `koanf:"webhook_secret"`
	// PublicURL (BLUEBUBBLES_WEBHOOK_URL) is the webhook's address as the
	// BlueBubbles server calls it (http://gateway.lan:8652/bluebubbles-webhook).
	// When set, the gateway registers it with the server (with the
	// secret in its query and the new-message event), as Hermes does;
	// when empty, add the webhook in BlueBubbles yourself.
	PublicURL string `koanf:"public_url"`
	// Addr serves the webhook (127.0.0.1:8652); Path is its path
	// (BLUEBUBBLES_WEBHOOK_PATH, /bluebubbles-webhook).
	Addr string `koanf:"addr"`
	Path string `koanf:"path"`
	// Host (BLUEBUBBLES_WEBHOOK_HOST) and Port (BLUEBUBBLES_WEBHOOK_PORT),
	// Hermes's names, replace Addr's host and port when set.
	Host string `koanf:"host"`
	Port int    `koanf:"port"`
	// RequireMention (BLUEBUBBLES_REQUIRE_MENTION): in group chats only
	// messages matching a mention pattern are answered, the pattern
	// dropped from the start of the text; DMs always are.
	RequireMention bool `koanf:"require_mention"`
	// MentionPatterns (BLUEBUBBLES_MENTION_PATTERNS: a JSON list, else
	// comma- or newline-separated, as Hermes reads it; a YAML list) are
	// case-insensitive regular expressions (Go's RE2 syntax); unset
	// means Hermes's wake words ("hermes", "@hermes agent" …), and a
	// list given empty (`[]`, or blank patterns only) means none, as
	// Hermes's _compile_mention_patterns reads it: under require_mention
	// no group message is answered.
	MentionPatterns Patterns `koanf:"mention_patterns"`
	// SendReadReceipts marks each chat read once its message is on the
	// bus (needs the Private API helper), as Hermes does by default.
	SendReadReceipts bool `koanf:"send_read_receipts"`
	// MaxBodyBytes bounds one webhook call.
	MaxBodyBytes int64 `koanf:"max_body_bytes"`
	// AckTimeout bounds publishing a message before answering the call.
	AckTimeout time.Duration `koanf:"ack_timeout"`
}

// DefaultConfig has the defaults: Hermes's path; Hermes's port 8645 is
// the WhatsApp gateway's here, so the webhook listens on 8652.
func DefaultConfig() Config {
	return Config{
		Addr: "127.0.0.1:8652", Path: "/bluebubbles-webhook", SendReadReceipts: true,
		MaxBodyBytes: 1 << 20, AckTimeout: 5 * time.Second,
	}
}

// Enabled reports whether the gateway has what it needs to start; dev
// starts it only then.
func (c Config) Enabled() bool { return c.ServerURL != "" && c.Password != "" }

// Validate checks the section without changing it.
func (c Config) Validate() error {
	_, err := c.validate()
	return err
}

// Normalized is the section with its defaults filled in and
// BLUEBUBBLES_WEBHOOK_HOST and BLUEBUBBLES_WEBHOOK_PORT applied to Addr.
func (c Config) Normalized() (Config, error) {
	_, err := c.validate()
	return c, err
}

// defaultMentionPatterns are Hermes's wake words, written for RE2 (no
// look-behind: the character before the name is matched instead).
var defaultMentionPatterns = Patterns{
	`(?:^|[^\w@])@?hermes\s+agent\b[,:\-]?`,
	`(?:^|[^\w@])@?hermes\b[,:\-]?`,
}

func (c *Config) validate() ([]*regexp.Regexp, error) {
	d := DefaultConfig()
	c.ServerURL = strings.TrimRight(strings.TrimSpace(c.ServerURL), "/")
	switch {
	case c.ServerURL == "":
		return nil, errors.New("bluebubbles: server_url (BLUEBUBBLES_SERVER_URL) is required")
	case c.Password == "":
		return nil, errors.New("bluebubbles: password (BLUEBUBBLES_PASSWORD) is required")
	}
	if !strings.HasPrefix(strings.ToLower(c.ServerURL), "http://") && !strings.HasPrefix(strings.ToLower(c.ServerURL), "https://") {
		c.ServerURL = "http://" + c.ServerURL
	}
	if u, err := url.Parse(c.ServerURL); err != nil || u.Host == "" || u.RawQuery != "" || u.Fragment != "" {
		return nil, fmt.Errorf("bluebubbles: server_url %q is not an http(s) URL without a query (the password goes in password)", shownURL(c.ServerURL))
	}
	if c.WebhookSecret == "" {
		c.WebhookSecret = c.Password
	}
	if c.Path == "" {
		c.Path = d.Path
	}
	if !strings.HasPrefix(c.Path, "/") {
		c.Path = "/" + c.Path
	}
	if c.PublicURL != "" {
		u, err := url.Parse(c.PublicURL)
		if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" || u.RawQuery != "" || u.Fragment != "" {
			return nil, fmt.Errorf("bluebubbles: public_url %q is not an http(s) URL without a query (the gateway adds the secret)", shownURL(c.PublicURL))
		}
		if u.Path == "" || u.Path == "/" {
			u.Path = c.Path
			c.PublicURL = u.String()
		}
	}
	if c.Addr == "" {
		c.Addr = d.Addr
	}
	if c.Port < 0 || c.Port > 65535 {
		return nil, fmt.Errorf("bluebubbles: port %d is not a TCP port", c.Port)
	}
	if c.Host != "" || c.Port > 0 {
		host, port, err := net.SplitHostPort(c.Addr)
		if err != nil {
			return nil, fmt.Errorf("bluebubbles: addr %q: %w", c.Addr, err)
		}
		if c.Host != "" {
			host = c.Host
		}
		if c.Port > 0 {
			port = strconv.Itoa(c.Port)
		}
		c.Addr, c.Host, c.Port = net.JoinHostPort(host, port), "", 0
	}
	if c.MaxBodyBytes <= 0 {
		c.MaxBodyBytes = d.MaxBodyBytes
	}
	if c.AckTimeout <= 0 {
		c.AckTimeout = d.AckTimeout
	}
	return compilePatterns(c.MentionPatterns)
}

// shownURL is a configured URL as an error shows it: without its query,
// fragment and user info, where the password or the webhook secret may
// have been written.
func shownURL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "(not a URL)"
	}
	u.User, u.RawQuery, u.ForceQuery, u.Fragment, u.RawFragment = nil, "", false, "", ""
	return u.String()
}

// Patterns are mention patterns: a YAML list is a pattern an item. One
// text (BLUEBUBBLES_MENTION_PATTERNS, or a YAML string) is read whole
// (UnmarshalText), as Hermes reads the variable (gateway/config.py, then
// BlueBubblesAdapter._compile_mention_patterns): a JSON list is its
// items, a JSON string its content read again, any other text is split
// at its line breaks and commas. The config loader splits a plain
// list's text on its commas first, which cut a JSON list of two
// patterns into two halves that are no patterns.
type Patterns []string

// UnmarshalText reads one text of patterns.
func (p *Patterns) UnmarshalText(text []byte) error {
	pats, err := textPatterns(string(text), true)
	*p = pats
	return err
}

// textPatterns reads a text of patterns as Hermes does; orJSONString
// also takes a JSON string for the text it holds (config.py decodes the
// variable once, the adapter the string it got once more).
func textPatterns(text string, orJSONString bool) (Patterns, error) {
	var v any
	if err := json.Unmarshal([]byte(strings.TrimSpace(text)), &v); err == nil {
		switch v := v.(type) {
		case []any:
			pats := make(Patterns, 0, len(v))
			for _, item := range v {
				s, ok := item.(string)
				if !ok {
					return nil, fmt.Errorf("bluebubbles: mention_patterns (BLUEBUBBLES_MENTION_PATTERNS): %v in the JSON list is not a pattern (a string)", item)
				}
				pats = append(pats, s)
			}
			return pats, nil
		case string:
			if orJSONString {
				return textPatterns(v, false)
			}
		}
	}
	var pats Patterns
	for _, line := range strings.Split(text, "\n") {
		pats = append(pats, strings.Split(line, ",")...)
	}
	return pats, nil
}

// compilePatterns compiles the mention patterns, blank ones skipped.
// Unset (nil) means Hermes's wake words; set, even to nothing but blanks,
// means the patterns given, none included, as Hermes's adapter takes its
// defaults only when neither the config nor the environment names any
// (gateway/platforms/bluebubbles.py, _compile_mention_patterns).
func compilePatterns(pats Patterns) ([]*regexp.Regexp, error) {
	if pats == nil {
		pats = defaultMentionPatterns
	}
	out := []*regexp.Regexp{}
	for _, p := range pats {
		if p = strings.TrimSpace(p); p == "" {
			continue
		}
		re, err := regexp.Compile("(?i)" + p)
		if err != nil {
			return nil, fmt.Errorf("bluebubbles: mention pattern %q: %w", p, err)
		}
		out = append(out, re)
	}
	return out, nil
}

// Deps are the shared clients.
type Deps struct {
	Log *slog.Logger
	Bus *bus.Bus
	// Runner tunes the platform runner (tests shorten backoffs); its
	// Attachments are the top-level attachments section.
	Runner platform.Options
	// HTTPClient for the REST API; nil uses a client with a 30 s timeout.
	HTTPClient *http.Client
}

// Service runs the BlueBubbles gateway.
type Service struct {
	platform.Service
	p *Platform
}

// New builds the gateway.
func New(cfg Config, deps Deps) (*Service, error) {
	if deps.Bus == nil {
		return nil, errors.New("bluebubbles: bus is required")
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
	p.downloads = platform.NewDownloader(deps.Runner.Attachments.URLs)
	if deps.Runner.Attachments.Enabled {
		p.store = attachment.Open(deps.Bus.JetStream(), deps.Bus.Topology(), deps.Runner.Attachments)
	}
	return &Service{Service: svc, p: p}, nil
}

// Addr is the address the webhook listens on, once it does.
func (s *Service) Addr() string { return s.p.Addr() }

// Platform is the BlueBubbles side of the kit.
type Platform struct {
	cfg      Config
	log      *slog.Logger
	api      *client
	mentions []*regexp.Regexp
	addr     atomic.Value // string: the webhook listener's address
	// privateAPI: the server has the Private API helper connected
	// (typing, read receipts, replies); learned on connecting.
	privateAPI atomic.Bool
	// store holds the attachments a send refers to by bytes_ref (kept
	// by the runner: a file the agent made, a user's upload it passes on).
	store *attachment.Store
	// downloads fetches the attachments a send names by URL
	// (attachments.urls; nil: public addresses only).
	downloads *platform.Downloader

	// maxHeld bounds the messages held for the bus (maxHeld; tests
	// shrink it).
	maxHeld int
	// drainWait bounds the publishing of held messages once the webhook
	// stopped (drainWait; tests shorten it).
	drainWait time.Duration
	// registerBackoff spaces the attempts to register the webhook
	// (platform.QuickBackoff; tests shorten it).
	registerBackoff platform.Backoff

	mu    sync.Mutex
	guids map[string]string // address → DM chat guid, resolved for sends
}

// NewPlatform validates cfg and builds the platform without a bus (the
// Runner adds it).
func NewPlatform(cfg Config, log *slog.Logger, hc *http.Client) (*Platform, error) {
	mentions, err := cfg.validate()
	if err != nil {
		return nil, err
	}
	if log == nil {
		log = slog.Default()
	}
	if hc == nil {
		hc = &http.Client{Timeout: 30 * time.Second}
	}
	log = log.With("platform", "bluebubbles")
	if cfg.RequireMention && len(mentions) == 0 {
		log.Warn("bluebubbles mention patterns empty with require_mention on; no group message is answered", "hint", "leave mention_patterns unset for Hermes's wake words")
	}
	return &Platform{
		cfg: cfg, log: log, mentions: mentions,
		api: &client{base: cfg.ServerURL, password: cfg.Password, hc: hc}, guids: map[string]string{}, maxHeld: maxHeld, drainWait: drainWait,
		registerBackoff: platform.QuickBackoff,
	}, nil
}

func (p *Platform) Name() string { return "bluebubbles" }

// Account is the BlueBubbles server (its host and port): one gateway per
// server, that is per Apple ID.
func (p *Platform) Account() string {
	u, err := url.Parse(p.cfg.ServerURL)
	if err != nil {
		return p.cfg.ServerURL
	}
	return u.Host
}

// Capabilities: 4,000 characters a message (Hermes's limit), no edits
// or deletes; typing only with the Private API (otherwise a no-op);
// files of every kind go out as uploads.
func (p *Platform) Capabilities() platform.Capabilities {
	return platform.Capabilities{
		MaxLength: maxText, Measure: platform.MeasureRunes, CanSend: true, CanTyping: true, CommandPrefix: "/",
		MediaKinds: []eventsv1.AttachmentKind{eventsv1.AttachmentKind_ATTACHMENT_KIND_IMAGE, eventsv1.AttachmentKind_ATTACHMENT_KIND_AUDIO,
			eventsv1.AttachmentKind_ATTACHMENT_KIND_VOICE, eventsv1.AttachmentKind_ATTACHMENT_KIND_VIDEO, eventsv1.AttachmentKind_ATTACHMENT_KIND_DOCUMENT},
	}
}

// Addr is the address the webhook listens on, once it does.
func (p *Platform) Addr() string {
	a, _ := p.addr.Load().(string)
	return a
}

// Connect checks the server and the password (GET /api/v1/ping, then
// /api/v1/server/info for the Private API), then serves the webhook until
// ctx ends, registering it in the background when a public URL is
// configured. A password the server refuses is fatal.
func (p *Platform) Connect(ctx context.Context, conn platform.Conn) error {
	if err := p.checkServer(ctx); err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer func() { cancel(); wg.Wait() }()
	return p.serveWebhook(ctx, conn, func() {
		if p.cfg.PublicURL != "" {
			wg.Go(func() { p.keepRegistering(ctx) })
		}
	})
}

// checkServer pings the server and reads whether the Private API helper
// is connected.
func (p *Platform) checkServer(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	err := p.api.call(ctx, http.MethodGet, "/api/v1/ping", nil, nil)
	var ae *APIError
	switch {
	case errors.As(err, &ae) && ae.Status == http.StatusUnauthorized:
		return platform.Fatal(fmt.Errorf("%w: %w", ErrCredentials, err))
	case err != nil:
		return fmt.Errorf("bluebubbles server %s: %w", p.Account(), err)
	}
	var info struct {
		PrivateAPI      bool   `json:"private_api"`
		HelperConnected bool   `json:"helper_connected"`
		ServerVersion   string `json:"server_version"`
		OSVersion       string `json:"os_version"`
	}
	if err := p.api.call(ctx, http.MethodGet, "/api/v1/server/info", nil, &info); err != nil {
		p.log.Warn("bluebubbles server info failed; without the private api", "err", err)
	}
	p.privateAPI.Store(info.PrivateAPI && info.HelperConnected)
	p.log.Info("bluebubbles server", "server", p.Account(), "version", info.ServerVersion, "macos", info.OSVersion,
		"private_api", info.PrivateAPI, "helper_connected", info.HelperConnected)
	return nil
}

// webhookEvents are the events the gateway registers for: Hermes's
// (updated-message would only repeat messages as their state changes).
var webhookEvents = []string{"new-message"}

// registerURL is the public URL with the secret in its query, as the
// server will call it.
func (p *Platform) registerURL() string {
	return p.cfg.PublicURL + "?password=" + url.QueryEscape(p.cfg.WebhookSecret)
}

// keepRegistering registers the webhook, once it is served, until that
// succeeds or ctx ends, each failure logged and retried after
// registerBackoff. The webhook is served meanwhile, as Hermes serves it
// whatever its registration does: a registration made before (by hand,
// by another replica, by the last run) still reaches it, and a server
// whose webhook API fails for a while (a restart on the Mac) is
// registered with once it answers, without the gateway going unready.
func (p *Platform) keepRegistering(ctx context.Context) {
	for attempt := 0; ; attempt++ {
		err := p.registerWebhook(ctx)
		if err == nil || ctx.Err() != nil {
			return
		}
		wait := p.registerBackoff(attempt)
		p.log.Warn("bluebubbles webhook registration failed; the webhook is served, registration retried",
			"err", err, "attempt", attempt+1, "retry_in", wait, "url", p.cfg.PublicURL)
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
	}
}

// registerWebhook makes sure the server posts new-message events to the
// public URL: one registration with exactly those events is kept, other
// registrations of the URL (older events) are removed, none is added
// twice, so replicas and restarts share one. It is not removed on
// shutdown: another replica, or the next version, still serves it.
func (p *Platform) registerWebhook(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	want := p.registerURL()
	var hooks []struct {
		ID     json.RawMessage `json:"id"` // a number, or a string
		URL    string          `json:"url"`
		Events []string        `json:"events"`
	}
	if err := p.api.call(ctx, http.MethodGet, "/api/v1/webhook", nil, &hooks); err != nil {
		return fmt.Errorf("list bluebubbles webhooks: %w", err)
	}
	kept := false
	for _, h := range hooks {
		if h.URL != want {
			continue
		}
		if !kept && len(h.Events) == 1 && h.Events[0] == webhookEvents[0] {
			kept = true
			continue
		}
		id := strings.Trim(string(h.ID), `"`)
		if id == "" || id == "null" {
			continue
		}
		if err := p.api.call(ctx, http.MethodDelete, "/api/v1/webhook/"+url.PathEscape(id), nil, nil); err != nil {
			return fmt.Errorf("remove stale bluebubbles webhook %s: %w", reason(id), err)
		}
	}
	if kept {
		p.log.Info("bluebubbles webhook already registered", "url", p.cfg.PublicURL)
		return nil
	}
	if err := p.api.call(ctx, http.MethodPost, "/api/v1/webhook", map[string]any{"url": want, "events": webhookEvents}, nil); err != nil {
		return fmt.Errorf("register bluebubbles webhook: %w", err)
	}
	p.log.Info("bluebubbles webhook registered", "url", p.cfg.PublicURL, "events", webhookEvents)
	return nil
}

// redact keeps an address's first and last characters for logs.
func redact(s string) string {
	if len(s) <= 8 {
		return "***"
	}
	return s[:4] + "***" + s[len(s)-3:]
}
