// Package line is the LINE gateway (`switchboard gateway line`) over the
// LINE Messaging API, as Hermes's LINE adapter: LINE posts the events of
// the bot's chats to a webhook this gateway serves (every replica serves
// it), and answers go out through the Messaging API's reply endpoint
// (free, with the event's single-use reply token while it is valid) or
// its push endpoint (metered) otherwise. Run by the platform kit's
// Runner.
//
// A webhook delivery is checked (X-Line-Signature: the base64
// HMAC-SHA256 of the raw body keyed with the channel secret), every
// message event in it is normalized and published, and only then is the
// delivery answered 200, so LINE redelivers a delivery the bus did not
// take. A redelivery is absorbed by the bus dedupe id
// line:<account>:<webhookEventId>. Reply tokens are kept in a KV bucket
// (LINE_REPLY_TOKENS) so that the replica that sends the answer, whichever
// it is, can use one; media are published as their content URLs and
// downloaded with the channel's token (Platform.Fetch) only when a turn
// reads them.
//
// Chat ids are LINE's: the user id (U…) of a 1:1 chat, the group id (C…)
// of a group, the room id (R…) of a multi-person chat, as in Hermes's
// session keys (agent:main:line:dm:U…, agent:main:line:group:C…:U…). LINE
// renders no Markdown and cannot edit or delete: delivery sends final
// plain text, which the gateway cuts into messages of up to 5,000
// characters, five to a call.
package line

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/switchboard-chat/switchboard/pkg/bus"
	eventsv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/events/v1"
	"github.com/switchboard-chat/switchboard/pkg/platform"
)

// The Messaging API's hosts: api.line.me for everything but content,
// api-data.line.me for the content of media messages.
const (
	DefaultAPIBaseURL  = "https://api.line.me"
	DefaultDataBaseURL = "https://api-data.line.me"
)

// Config is the gateways.line section.
type Config struct {
	// ChannelAccessToken (LINE_CHANNEL_ACCESS_TOKEN) is the channel's
	// long-lived access token: every API call carries it.
	ChannelAccessToken string `koanf:"channel_access_token"`
	// ChannelSecret (LINE_CHANNEL_SECRET) signs every webhook delivery.
	ChannelSecret string `koanf:"channel_secret"`
	// AllowedGroups (LINE_ALLOWED_GROUPS) and AllowedRooms
	// (LINE_ALLOWED_ROOMS) are the group ids (C…) and room ids (R…) the
	// bot answers in; "*" is every one. Empty, as in Hermes, the bot
	// ignores groups and rooms. Who may talk to the agent is the router's
	// LINE_ALLOWED_USERS.
	AllowedGroups []string `koanf:"allowed_groups"`
	AllowedRooms  []string `koanf:"allowed_rooms"`
	// RequireMention (LINE_REQUIRE_MENTION, default false, as in Hermes):
	// in groups and rooms, publish only messages that mention the bot
	// (LINE's mention object: a mentionee with isSelf, or the bot's user
	// id). DMs and postbacks (taps on the bot's buttons) are never gated.
	// Hermes looks for "@<the bot's display name>" in the text; the
	// mention object does not break when the name changes or another
	// member's name contains it.
	RequireMention bool `koanf:"require_mention"`
	// FreeResponseGroups (LINE_FREE_RESPONSE_GROUPS) and
	// FreeResponseRooms (LINE_FREE_RESPONSE_ROOMS) are groups and rooms
	// answered without a mention when RequireMention is on ("*": all),
	// as Hermes's "dedicated bot groups". They must be allowed too
	// (AllowedGroups, AllowedRooms); one that is not is logged at start.
	FreeResponseGroups []string `koanf:"free_response_groups"`
	FreeResponseRooms  []string `koanf:"free_response_rooms"`
	// APIBaseURL (LINE_API_BASE_URL) and DataBaseURL
	// (LINE_DATA_API_BASE_URL) are the Messaging API's hosts, or a
	// fake's.
	APIBaseURL  string `koanf:"api_base_url"`
	DataBaseURL string `koanf:"data_base_url"`
	// Addr serves the webhook; Host (LINE_HOST) and Port (LINE_PORT),
	// Hermes's names, replace its parts when set. Path is the webhook's
	// path (Hermes's /line/webhook); Path+"/health" answers a probe.
	Addr string `koanf:"addr"`
	Host string `koanf:"host"`
	Port int    `koanf:"port"`
	Path string `koanf:"path"`
	// MaxBodyBytes bounds one webhook delivery (Hermes's 1 MiB).
	MaxBodyBytes int64 `koanf:"max_body_bytes"`
	// AckTimeout bounds publishing a delivery's events before answering
	// LINE.
	AckTimeout time.Duration `koanf:"ack_timeout"`
	// ReplyTokenTTL is how long after its event a reply token is used
	// (Hermes's 50 s, under LINE's minute); later answers are pushed.
	ReplyTokenTTL time.Duration `koanf:"reply_token_ttl"`
}

// DefaultConfig has the defaults.
func DefaultConfig() Config {
	return Config{
		APIBaseURL: DefaultAPIBaseURL, DataBaseURL: DefaultDataBaseURL,
		Addr: "127.0.0.1:8649", Path: "/line/webhook",
		MaxBodyBytes: 1 << 20, AckTimeout: 5 * time.Second, ReplyTokenTTL: 50 * time.Second,
	}
}

// Enabled reports whether the gateway has what it needs to start; dev
// starts it only then.
func (c Config) Enabled() bool { return c.ChannelAccessToken != "" && c.ChannelSecret != "" }

// Validate checks the section without changing it.
func (c Config) Validate() error { return c.validate() }

// Normalized is the section with its defaults filled in and LINE_HOST
// and LINE_PORT applied to Addr.
func (c Config) Normalized() (Config, error) {
	err := c.validate()
	return c, err
}

func (c *Config) validate() error {
	d := DefaultConfig()
	switch {
	case c.ChannelAccessToken == "":
		return errors.New("line: channel_access_token (LINE_CHANNEL_ACCESS_TOKEN) is required")
	case c.ChannelSecret == "":
		return errors.New("line: channel_secret (LINE_CHANNEL_SECRET) is required: it signs every webhook delivery")
	case c.Port < 0 || c.Port > 65535:
		return fmt.Errorf("line: port (LINE_PORT) %d is not a port", c.Port)
	}
	for _, b := range []struct {
		name string
		v    *string
		def  string
	}{{"api_base_url", &c.APIBaseURL, d.APIBaseURL}, {"data_base_url", &c.DataBaseURL, d.DataBaseURL}} {
		if *b.v == "" {
			*b.v = b.def
		}
		*b.v = strings.TrimRight(*b.v, "/")
		if u, err := url.Parse(*b.v); err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
			return fmt.Errorf("line: %s %q is not an http(s) URL", b.name, *b.v)
		}
	}
	if c.Addr == "" {
		c.Addr = d.Addr
	}
	if c.Host != "" || c.Port != 0 {
		host, port, err := net.SplitHostPort(c.Addr)
		if err != nil {
			return fmt.Errorf("line: addr %q: %w", c.Addr, err)
		}
		if c.Host != "" {
			host = c.Host
		}
		if c.Port != 0 {
			port = strconv.Itoa(c.Port)
		}
		c.Addr = net.JoinHostPort(host, port)
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
	if c.ReplyTokenTTL <= 0 {
		c.ReplyTokenTTL = d.ReplyTokenTTL
	}
	return nil
}

// Deps are the shared clients.
type Deps struct {
	Log *slog.Logger
	Bus *bus.Bus
	// Runner tunes the platform runner (tests shorten backoffs); its
	// Attachments are the top-level attachments section.
	Runner platform.Options
	// HTTPClient for the Messaging API and content downloads; nil uses a
	// client with a 30 s timeout.
	HTTPClient *http.Client
}

// Service runs the LINE gateway.
type Service struct {
	platform.Service
	p *Platform
}

// New builds the gateway.
func New(cfg Config, deps Deps) (*Service, error) {
	if deps.Bus == nil {
		return nil, errors.New("line: bus is required")
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

// Addr is the address the webhook listens on, once it does.
func (s *Service) Addr() string { return s.p.Addr() }

// Platform is the LINE side of the kit.
type Platform struct {
	cfg     Config
	log     *slog.Logger
	bus     *bus.Bus
	api     *api
	account string
	groups  map[string]bool
	rooms   map[string]bool
	// freeGroups and freeRooms are answered without a mention.
	freeGroups, freeRooms map[string]bool
	addr                  atomic.Value // string: the webhook listener's address
	botID                 atomic.Value // string: the bot's own user id, once known

	mu sync.Mutex
	kv jetstream.KeyValue // reply tokens, opened on first use
}

// NewPlatform validates cfg and builds the platform; b keeps the reply
// tokens.
func NewPlatform(cfg Config, b *bus.Bus, log *slog.Logger, hc *http.Client) (*Platform, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	if b == nil {
		return nil, errors.New("line: bus is required")
	}
	if log == nil {
		log = slog.Default()
	}
	if hc == nil {
		hc = &http.Client{Timeout: 30 * time.Second}
	}
	p := &Platform{
		cfg: cfg, log: log.With("platform", "line"), bus: b,
		api:     &api{base: cfg.APIBaseURL, data: cfg.DataBaseURL, token: cfg.ChannelAccessToken, hc: hc},
		account: accountOf(cfg.ChannelSecret),
		groups:  platform.IDSet(cfg.AllowedGroups), rooms: platform.IDSet(cfg.AllowedRooms),
		freeGroups: platform.IDSet(cfg.FreeResponseGroups), freeRooms: platform.IDSet(cfg.FreeResponseRooms),
	}
	// As Hermes warns: a free-response group or room that is not
	// allowed is dropped before its freedom counts.
	for _, c := range []struct {
		kind          string
		free, allowed map[string]bool
	}{{"groups", p.freeGroups, p.groups}, {"rooms", p.freeRooms, p.rooms}} {
		var unreachable []string
		for id := range c.free {
			if !c.allowed["*"] && !c.allowed[id] && id != "*" {
				unreachable = append(unreachable, id)
			}
		}
		if len(unreachable) > 0 {
			sort.Strings(unreachable)
			p.log.Warn("line: free-response "+c.kind+" that are not allowed get nothing published", "kind", c.kind, "chat_ids", unreachable)
		}
	}
	return p, nil
}

// accountOf names the channel without revealing its secret: "ch" and
// the first 16 hex digits of a SHA-256 of the secret. The webhook knows
// nothing else stable before the first API call.
func accountOf(secret string) string {
	h := sha256.Sum256([]byte("switchboard line channel\x00" + secret))
	return "ch" + hex.EncodeToString(h[:8])
}

func (p *Platform) Name() string { return "line" }

// Account is a fingerprint of the channel (accountOf): one gateway per
// channel.
func (p *Platform) Account() string { return p.account }

// Capabilities: an answer of up to five text messages of 5,000
// characters (LINE's limit, counted in UTF-16 units to stay under it for
// any text), sent in one call as Hermes batches them; no edits or deletes,
// a loading animation as typing (1:1 chats only); images go out by
// public https URL.
func (p *Platform) Capabilities() platform.Capabilities {
	return platform.Capabilities{
		MaxLength: maxAnswer, Measure: platform.MeasureUTF16, CanSend: true, CanTyping: true, CommandPrefix: "/",
		MediaKinds: []eventsv1.AttachmentKind{eventsv1.AttachmentKind_ATTACHMENT_KIND_IMAGE},
	}
}

// Addr is the address the webhook listens on, once it does.
func (p *Platform) Addr() string {
	a, _ := p.addr.Load().(string)
	return a
}

func (p *Platform) botUserID() string {
	s, _ := p.botID.Load().(string)
	return s
}

// Connect checks the token (GET /v2/bot/info, which also names the bot's
// own user id, whose events are skipped), then serves the webhook until
// ctx ends. A token LINE refuses is fatal; other API trouble is only
// logged, since receiving needs no API call.
func (p *Platform) Connect(ctx context.Context, conn platform.Conn) error {
	if err := p.checkBot(ctx); err != nil {
		return err
	}
	return p.serveWebhook(ctx, conn)
}

func (p *Platform) checkBot(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	var info struct {
		UserID      string `json:"userId"`
		BasicID     string `json:"basicId"`
		DisplayName string `json:"displayName"`
	}
	err := p.api.get(ctx, p.cfg.APIBaseURL+"/v2/bot/info", &info)
	var le *APIError
	switch {
	case err == nil:
		p.botID.Store(info.UserID)
		p.log.Info("line bot", "basic_id", info.BasicID, "name", info.DisplayName)
	case errors.As(err, &le) && le.Status == http.StatusUnauthorized:
		return platform.Fatal(fmt.Errorf("%w: %w", ErrToken, err))
	default:
		p.log.Warn("line bot info lookup failed; serving the webhook anyway", "err", err)
	}
	return nil
}
