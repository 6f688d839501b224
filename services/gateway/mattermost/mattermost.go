// Package mattermost is the Mattermost gateway (`switchboard gateway
// mattermost`), a small client of a Mattermost server's REST API v4 and
// its websocket event stream. It reproduces Hermes's Mattermost adapter
// (gateway/platforms/mattermost.py): one replica per bot account reads
// the websocket (the kit's lease), every replica serves sends, edits
// (PUT /posts/{id}/patch, so answers stream by editing one post),
// deletes, typing, reactions and the workers' file downloads.
//
// A reconnect resumes the websocket connection (connection_id and
// sequence_number, Mattermost's reliable websockets): the server sends
// again what it queued for it meanwhile, as long as it still has it. It
// also reads what the channels it has seen posts in got meanwhile (GET
// /channels/{id}/posts?since=) and publishes it; the kit's dedupe (the
// post id) drops what it had already. What came while no replica ran,
// or after the server forgot the connection (a restart, a full queue)
// in a channel not seen before, is lost; Hermes loses every post made
// while it is disconnected (docs/chat-gateways.md).
//
// Chats are named as in Hermes, so session keys carry over: a channel by
// its id, its type D as "dm", G and P as "group", O as "channel", a
// thread by its root post id; the author's user id is the participant.
package mattermost

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"

	"github.com/switchboard-chat/switchboard/pkg/attachment"
	"github.com/switchboard-chat/switchboard/pkg/bus"
	eventsv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/events/v1"
	"github.com/switchboard-chat/switchboard/pkg/platform"
)

// Reply modes (MATTERMOST_REPLY_MODE).
const (
	// ReplyOff posts answers flat in the channel, as Hermes does by
	// default (a message written in a thread is still answered there).
	ReplyOff = "off"
	// ReplyThread answers a channel message in a thread on it.
	ReplyThread = "thread"
)

// Config is the gateways.mattermost section.
type Config struct {
	// URL (MATTERMOST_URL) is the server, e.g. https://mm.example.com.
	URL string `koanf:"url"`
	// Token (MATTERMOST_TOKEN) is a bot account's token or a personal
	// access token.
	Token string `koanf:"token"`
	// RequireMention (MATTERMOST_REQUIRE_MENTION, default true, as in
	// Hermes): outside DMs, answer only posts that @mention the bot.
	RequireMention bool `koanf:"require_mention"`
	// FreeResponseChannels (MATTERMOST_FREE_RESPONSE_CHANNELS) are
	// channel ids answered without a mention.
	FreeResponseChannels []string `koanf:"free_response_channels"`
	// AllowedChannels (MATTERMOST_ALLOWED_CHANNELS), as in Hermes: when
	// set, posts outside DMs are taken only in these channel ids (group
	// messages included); a mention does not let one in elsewhere.
	AllowedChannels []string `koanf:"allowed_channels"`
	// ReplyMode (MATTERMOST_REPLY_MODE): "off" (default, as in Hermes)
	// or "thread".
	ReplyMode string `koanf:"reply_mode"`
	// Reactions (MATTERMOST_REACTIONS, default false: Hermes's adapter
	// sets none): :eyes: while a turn runs, then :white_check_mark: or :x:.
	Reactions bool `koanf:"reactions"`
	// AllowChannelMentions (MATTERMOST_ALLOW_CHANNEL_MENTIONS, default
	// false) lets @channel, @all and @here in the agent's posts notify
	// the channel. Off, each gets a zero-width joiner after its "@" and
	// notifies no one (Hermes posts them as they are).
	AllowChannelMentions bool `koanf:"allow_channel_mentions"`
	// AllowBots (MATTERMOST_ALLOW_BOTS) says which posts of other bots
	// and incoming webhooks are published, marked is_bot: "none"
	// (default), "mentions" (those that @mention this bot) or "all", as
	// the Discord and Slack gateways' DISCORD_ALLOW_BOTS and
	// SLACK_ALLOW_BOTS. Unset, it follows router.auth.allow_bots.mattermost,
	// so the router's setting has something to admit. The bot's own posts
	// are never published. Hermes's Mattermost adapter has no such
	// setting: it publishes every post but its own as a person's, so two
	// agents in a free channel answer each other.
	AllowBots string `koanf:"allow_bots"`
	// CatchUp (default true): after a reconnect, read and publish what
	// the channels seen since the start got while the websocket was down.
	CatchUp bool `koanf:"catch_up"`
	// PingInterval keeps the websocket alive (default 30 s, as Hermes's
	// heartbeat); a ping unanswered within it drops the connection.
	PingInterval time.Duration `koanf:"ping_interval"`
	// LeaseTTL of the active/standby lease on the websocket.
	LeaseTTL time.Duration `koanf:"lease_ttl"`
	// CallTimeout (default 30 s) bounds what the websocket's reader waits
	// for: each REST call it makes (who the token is, the catch-up's
	// reads) and the answer to its authentication. A server that does
	// not answer within it is dialled again.
	CallTimeout time.Duration `koanf:"call_timeout"`
}

// DefaultConfig has Hermes's defaults.
func DefaultConfig() Config {
	return Config{RequireMention: true, ReplyMode: ReplyOff, CatchUp: true, PingInterval: 30 * time.Second, LeaseTTL: 10 * time.Second,
		CallTimeout: 30 * time.Second}
}

// Enabled reports whether dev should start the gateway: a server and a
// token.
func (c Config) Enabled() bool { return c.URL != "" && c.Token != "" }

// Validate checks the section.
func (c Config) Validate() error {
	if !c.Enabled() {
		return errors.New("mattermost: url (MATTERMOST_URL) and token (MATTERMOST_TOKEN) are required")
	}
	u, err := url.Parse(c.URL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("mattermost: url %q is not an http(s) URL", c.URL)
	}
	switch strings.ToLower(c.ReplyMode) {
	case "", ReplyOff, ReplyThread:
	default:
		return fmt.Errorf("mattermost: reply_mode %q is neither %q nor %q", c.ReplyMode, ReplyOff, ReplyThread)
	}
	if _, err := platform.ParseBotMode(c.AllowBots); err != nil {
		return fmt.Errorf("mattermost: allow_bots (MATTERMOST_ALLOW_BOTS): %w", err)
	}
	if c.PingInterval < 0 {
		return fmt.Errorf("mattermost: ping_interval %s is negative", c.PingInterval)
	}
	if c.CallTimeout < 0 {
		return fmt.Errorf("mattermost: call_timeout %s is negative", c.CallTimeout)
	}
	return nil
}

// Deps are the shared clients.
type Deps struct {
	Log *slog.Logger
	Bus *bus.Bus
	// HTTPClient for API calls and the websocket (default: no overall
	// timeout; each call is bounded by its context).
	HTTPClient *http.Client
	// Runner tunes the kit (attachments, instance, backoff in tests).
	Runner platform.Options
}

// Service runs the Mattermost gateway.
type Service struct {
	platform.Service
	p *Platform
}

// New builds the gateway without calling the server: Run asks it who the
// bot is (SignIn) until it answers, unready meanwhile, so a gateway
// started before its server waits for it; a refused token ends Run.
func New(cfg Config, deps Deps) (*Service, error) {
	if deps.Bus == nil {
		return nil, errors.New("mattermost: bus is required")
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
	p.downloads = platform.NewDownloader(opts.Attachments.URLs)
	if opts.Attachments.Enabled {
		p.store = attachment.Open(deps.Bus.JetStream(), deps.Bus.Topology(), opts.Attachments)
	}
	return &Service{Service: svc, p: p}, nil
}

// Platform is the Mattermost side of the kit.
type Platform struct {
	cfg   Config
	log   *slog.Logger
	cli   *client
	hc    *http.Client
	rules rules
	// store holds the attachments a send refers to by bytes_ref.
	store *attachment.Store
	// downloads fetches the attachments a send names by URL
	// (attachments.urls; nil: public addresses only).
	downloads *platform.Downloader

	// delivering counts the posts being handled now (asked about,
	// published), deliveries those started: ping reads them (ws.go).
	delivering atomic.Int32
	deliveries atomic.Uint64

	// resume is where a reconnect resumes the websocket (ws.go).
	resume resumePoint

	mu       sync.Mutex
	channels map[string]*channel // the channels posts came from, for the catch-up
	names    map[string]string   // user id → username, for caught-up posts
	bots     map[string]bool     // user id → is_bot, as the server said
}

// channel is what the gateway remembers of a channel it saw a post in.
type channel struct {
	Type, Name string
	// Last is the create_at (ms) of the newest post read from it.
	Last int64
}

// NewPlatform builds the platform; SignIn learns the bot's identity.
func NewPlatform(cfg Config, log *slog.Logger, hc *http.Client) (*Platform, error) {
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
	if cfg.CallTimeout == 0 {
		cfg.CallTimeout = DefaultConfig().CallTimeout
	}
	cfg.ReplyMode = strings.ToLower(cfg.ReplyMode)
	return &Platform{
		cfg: cfg, log: log.With("platform", "mattermost"), hc: hc,
		cli:      &client{base: strings.TrimRight(cfg.URL, "/"), token: cfg.Token, hc: hc},
		channels: map[string]*channel{}, names: map[string]string{}, bots: map[string]bool{},
	}, nil
}

// SignIn asks the server who the token belongs to (GET /users/me): the
// bot's id names the account and its own posts, its username is what
// @mentions it (platform.SignInner). A refused token (401, 403) is
// Fatal; anything else (the server down) is retried.
func (p *Platform) SignIn(ctx context.Context) error {
	me, err := p.cli.me(ctx)
	if err != nil {
		err = fmt.Errorf("mattermost: users/me failed (check MATTERMOST_TOKEN and MATTERMOST_URL): %w", err)
		var ae *apiError
		if errors.As(err, &ae) && (ae.Status == http.StatusUnauthorized || ae.Status == http.StatusForbidden) {
			return platform.Fatal(err)
		}
		return err
	}
	bots, _ := platform.ParseBotMode(p.cfg.AllowBots) // Validate checked it
	p.rules = newRules(me.ID, me.Username, p.cfg.RequireMention, platform.IDSet(p.cfg.FreeResponseChannels), bots)
	p.rules.Allowed = platform.IDSet(p.cfg.AllowedChannels)
	p.log.Info("mattermost: signed in", "user_id", me.ID, "username", me.Username)
	return nil
}

func (p *Platform) Name() string    { return "mattermost" }
func (p *Platform) Account() string { return p.rules.BotID }

// SingleConsumer: one replica reads the websocket for the account; two
// would read every post twice.
func (p *Platform) SingleConsumer() bool { return true }

// Ephemeral: the websocket replays nothing to a new connection, so the
// holder keeps it while NATS is out of reach (see platform.Ephemeral).
func (p *Platform) Ephemeral() bool { return true }

// maxPostRunes is the server's limit of one post's message.
const maxPostRunes = 16383

// Capabilities: edits (PUT /posts/{id}/patch), so delivery streams by
// editing; deletes; threads (root_id); typing; files.
func (p *Platform) Capabilities() platform.Capabilities {
	return platform.Capabilities{
		MaxLength: maxPostRunes, Measure: platform.MeasureRunes, CanSend: true, CanEdit: true, CanDelete: true,
		CanThread: true, CanTyping: true, CommandPrefix: "/",
		MediaKinds: []eventsv1.AttachmentKind{eventsv1.AttachmentKind_ATTACHMENT_KIND_IMAGE, eventsv1.AttachmentKind_ATTACHMENT_KIND_DOCUMENT,
			eventsv1.AttachmentKind_ATTACHMENT_KIND_AUDIO, eventsv1.AttachmentKind_ATTACHMENT_KIND_VOICE, eventsv1.AttachmentKind_ATTACHMENT_KIND_VIDEO},
	}
}

var skipped = promauto.NewCounterVec(prometheus.CounterOpts{
	Name: "switchboard_mattermost_posts_skipped_total",
	Help: "Mattermost posts read without a message to publish, by reason (own, system, deleted, empty, channel not allowed, not mentioned, bot).",
}, []string{"reason"})

var caughtUp = promauto.NewCounter(prometheus.CounterOpts{
	Name: "switchboard_mattermost_caught_up_total",
	Help: "Mattermost posts read by the catch-up after a reconnect (before the kit's dedupe).",
})
