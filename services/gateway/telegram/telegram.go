// Package telegram is the Telegram gateway (`switchboard gateway
// telegram`): Bot API long polling or a webhook in, sendMessage /
// editMessageText / sendChatAction / sendPhoto / sendAnimation /
// sendDocument / deleteMessage out, run by the platform kit's Runner. The
// files users send are published as their file_id; the ones the agent
// reads (photos, voice, audio, text documents) are downloaded with getFile
// (Platform.Fetch) only when a turn asks for them, by any replica.
//
// Sending goes through github.com/go-telegram/bot. Receiving does not use
// the library's poller: it advances its offset before an update is
// handled (and buffers updates in a channel), so an update could be
// confirmed to Telegram before it reached the bus, and it retries a 409
// forever. This package drives getUpdates itself: updates are published
// in order, each waiting for its JetStream ack, and only then is the next
// offset sent, which is what confirms them to Telegram. A crash between
// publish and confirmation redelivers the update, and the bus dedupe id
// telegram:<bot id>:<update_id> absorbs it. For the same reason the
// webhook handler is our own: it answers 200 only after the ack.
package telegram

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/go-telegram/bot"
	"github.com/go-telegram/bot/models"

	"github.com/switchboard-chat/switchboard/pkg/attachment"
	"github.com/switchboard-chat/switchboard/pkg/bus"
	"github.com/switchboard-chat/switchboard/pkg/command"
	eventsv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/events/v1"
	"github.com/switchboard-chat/switchboard/pkg/platform"
)

// DefaultAPIBaseURL is Telegram's Bot API.
const DefaultAPIBaseURL = "https://api.telegram.org"

// Config is the `gateways.telegram` section.
type Config struct {
	// BotToken (TELEGRAM_BOT_TOKEN) is "<bot id>:<secret>".
	BotToken string `koanf:"bot_token"`
	// APIBaseURL (TELEGRAM_API_BASE_URL) points at a self-hosted Bot API
	// server, a proxy, or a fake.
	APIBaseURL string `koanf:"api_base_url"`
	// WebhookURL (TELEGRAM_WEBHOOK_URL) switches from long polling to a
	// webhook: the public URL Telegram posts to.
	WebhookURL string `koanf:"webhook_url"`
	// WebhookSecret (TELEGRAM_WEBHOOK_SECRET) is checked against the
	// X-Telegram-Bot-Api-Secret-Token header of each webhook call. It is
	// required with WebhookURL: without it anyone who can reach the URL
	// could post updates in any user's name. Telegram allows 1 to 256
	// characters A-Z, a-z, 0-9, _ and -.
	WebhookSecret string `koanf:"webhook_secret"`
	// WebhookListen is the local address the webhook server binds.
	WebhookListen string `koanf:"webhook_listen"`
	// RequireMention (TELEGRAM_REQUIRE_MENTION, default false as in
	// Hermes): in groups, answer only @mentions and replies to the bot;
	// as in Hermes a command needs one too ("/cmd@bot" is one). Off,
	// every group message the bot receives is answered
	// (with BotFather's privacy mode on, Telegram sends a bot that is not
	// a group admin only those anyway; an admin bot receives everything).
	RequireMention bool `koanf:"require_mention"`
	// FreeResponseChats (TELEGRAM_FREE_RESPONSE_CHATS) are group chat ids
	// exempt from RequireMention.
	FreeResponseChats []string `koanf:"free_response_chats"`
	// ExclusiveBotMentions (TELEGRAM_EXCLUSIVE_BOT_MENTIONS, default true
	// as in Hermes): a group message that names other bots (@other_bot,
	// /cmd@other_bot) and not this one is theirs and is not published,
	// whatever RequireMention, FreeResponseChats or a reply to this bot
	// say. Off, such a message follows those rules like any other
	// (several bots that should all hear the group).
	ExclusiveBotMentions bool `koanf:"exclusive_bot_mentions"`
	// MentionPatterns (TELEGRAM_MENTION_PATTERNS: a JSON list, or one
	// a line, as Hermes reads it; a YAML list) are wake words: a
	// group message whose text or caption matches one of these
	// case-insensitive regular expressions (Go's RE2 syntax) counts as a
	// mention of the bot, as Hermes's mention_patterns. None by default.
	// A pattern that does not compile stops the gateway with the reason
	// (Hermes logs it and skips it).
	MentionPatterns Patterns `koanf:"mention_patterns"`
	// ReplyToMode: first (reply-thread only the first chunk), all, off.
	ReplyToMode string `koanf:"reply_to_mode"`
	// Reactions (TELEGRAM_REACTIONS, default false, as in Hermes): the
	// user's message shows 👀 while the agent works on it, then 👍 when
	// the answer was sent, 👎 when the turn failed, nothing when it was
	// interrupted (Telegram takes only its own list of reaction emoji:
	// no ✅ or ❌).
	Reactions bool `koanf:"reactions"`
	// BotUsername (without @) for mention and /cmd@bot matching; asked
	// from getMe when empty.
	BotUsername string `koanf:"bot_username"`
	// PollTimeout is the getUpdates long-poll timeout.
	PollTimeout time.Duration `koanf:"poll_timeout"`
	// LeaseTTL of the active/standby poller lease.
	LeaseTTL time.Duration `koanf:"lease_ttl"`
	// PressHold is how long a button press's callback query is held
	// for the router's answer (buttons.go), at most maxPressHold.
	PressHold time.Duration `koanf:"press_hold"`
}

// DefaultConfig has Hermes's defaults.
func DefaultConfig() Config {
	return Config{
		APIBaseURL: DefaultAPIBaseURL, WebhookListen: ":8443",
		ReplyToMode: "first", PollTimeout: 30 * time.Second, LeaseTTL: 10 * time.Second,
		PressHold: 1500 * time.Millisecond, ExclusiveBotMentions: true,
	}
}

// Validate checks the configuration.
func (c Config) Validate() error {
	if c.BotToken == "" {
		return errors.New("gateways.telegram.bot_token (TELEGRAM_BOT_TOKEN) is required")
	}
	if _, err := botID(c.BotToken); err != nil {
		return err
	}
	if c.WebhookURL != "" {
		if err := checkWebhookSecret(c.WebhookSecret); err != nil {
			return err
		}
	}
	switch c.ReplyToMode {
	case "", "first", "all", "off":
	default:
		return fmt.Errorf("gateways.telegram.reply_to_mode %q: want first, all or off", c.ReplyToMode)
	}
	if c.PressHold > maxPressHold {
		return fmt.Errorf("gateways.telegram.press_hold %v: at most %v (the client shows a spinner until the press is answered)", c.PressHold, maxPressHold)
	}
	if _, err := mentionPatterns(c.MentionPatterns); err != nil {
		return err
	}
	return nil
}

// Patterns is a list of regular expressions that the environment (or a
// YAML string) sets as one text, which mentionPatterns reads, where the
// config loader splits a plain list's text on its commas: a comma is
// part of a pattern ("a{1,3}", "[,:]"). A YAML list is a pattern an item.
type Patterns []string

// mentionPatterns compiles the mention patterns, each case-insensitive,
// read as Hermes's _compile_mention_patterns: a list is a pattern an
// item; one text (TELEGRAM_MENTION_PATTERNS) is a JSON list of patterns
// (or a JSON string, one), else one pattern a line. Blank ones are
// skipped.
func mentionPatterns(raw []string) ([]*regexp.Regexp, error) {
	pats := raw
	if len(raw) == 1 {
		var err error
		if pats, err = textPatterns(raw[0]); err != nil {
			return nil, err
		}
	}
	var out []*regexp.Regexp
	for _, p := range pats {
		if strings.TrimSpace(p) == "" {
			continue
		}
		re, err := regexp.Compile("(?i)" + p)
		if err != nil {
			return nil, fmt.Errorf("gateways.telegram.mention_patterns (TELEGRAM_MENTION_PATTERNS): pattern %q is not a regular expression Go can compile (RE2 syntax: no look-around, no back-references): %w", p, err)
		}
		out = append(out, re)
	}
	return out, nil
}

// textPatterns reads one text of patterns as Hermes reads
// TELEGRAM_MENTION_PATTERNS: a JSON list, or a JSON string, else one
// pattern a line, trimmed.
func textPatterns(text string) ([]string, error) {
	text = strings.TrimSpace(text)
	var v any
	if json.Unmarshal([]byte(text), &v) == nil {
		switch v := v.(type) {
		case string:
			return []string{v}, nil
		case []any:
			pats := make([]string, 0, len(v))
			for _, p := range v {
				s, ok := p.(string)
				if !ok {
					return nil, fmt.Errorf("gateways.telegram.mention_patterns (TELEGRAM_MENTION_PATTERNS): %v in the JSON list is not a pattern (a string)", p)
				}
				pats = append(pats, s)
			}
			return pats, nil
		}
	}
	var pats []string
	for _, line := range strings.Split(text, "\n") {
		pats = append(pats, strings.TrimSpace(line))
	}
	return pats, nil
}

// checkWebhookSecret applies Telegram's rules for a webhook's secret_token.
func checkWebhookSecret(secret string) error {
	if secret == "" {
		return errors.New("gateways.telegram.webhook_secret (TELEGRAM_WEBHOOK_SECRET) is required with webhook_url: without it anyone who reaches the webhook can post updates as any user")
	}
	if len(secret) > 256 {
		return errors.New("gateways.telegram.webhook_secret: at most 256 characters")
	}
	for _, r := range secret {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '_' || r == '-') {
			return errors.New("gateways.telegram.webhook_secret: only A-Z, a-z, 0-9, _ and - are allowed")
		}
	}
	return nil
}

func botID(token string) (int64, error) {
	prefix, _, ok := strings.Cut(token, ":")
	id, err := strconv.ParseInt(prefix, 10, 64)
	if !ok || err != nil || id <= 0 {
		return 0, errors.New("telegram bot token must look like <bot id>:<secret>")
	}
	return id, nil
}

// Deps are the shared clients.
type Deps struct {
	Log *slog.Logger
	Bus *bus.Bus
	// HTTPClient for the Bot API (default: a client with sane timeouts).
	HTTPClient *http.Client
	// Instance names this replica in the lease (default hostname+random).
	Instance string
	// Backoff overrides the reconnect schedule (tests).
	Backoff platform.Backoff
	// Attachments is the top-level `attachments` section: when enabled,
	// the gateway serves the workers' fetch requests (gateway.telegram.fetch,
	// on every replica): when a turn reads an attachment (a photo, a voice
	// message, a text document), it is downloaded through the Bot API
	// into the attachment store. Nothing is downloaded as a message is
	// published; one declared larger than max_bytes is marked so.
	Attachments attachment.Config
	// Menu is the bot's command menu (setMyCommands); nil: command.Menu,
	// the built-in commands. The skills that run on Telegram follow them
	// when the gateway loads skills (pkg/skill's Menu).
	Menu []command.MenuEntry
}

// Service is the Telegram gateway. It is unready with the reason after
// a fatal error (409 conflict, bad token).
type Service struct {
	platform.Service
	p *Platform
}

// Run serves until ctx ends. The holds and watches of button presses
// end with it (Platform.stopPresses), each answering its query on the
// way out when no one else will: a stopped replica leaves nothing
// running, and no query to no one.
func (s *Service) Run(ctx context.Context) error {
	defer s.p.stopPresses()
	return s.Service.Run(ctx)
}

// SetMenu replaces the bot's command menu (Platform.SetMenu).
func (s *Service) SetMenu(ctx context.Context, menu []command.MenuEntry) { s.p.SetMenu(ctx, menu) }

// New builds the gateway.
func New(cfg Config, deps Deps) (*Service, error) {
	if deps.Bus == nil {
		return nil, errors.New("telegram gateway: bus is required")
	}
	p, err := NewPlatform(cfg, deps.Log, deps.HTTPClient)
	if err != nil {
		return nil, err
	}
	svc, err := platform.NewService(p, deps.Bus, deps.Log, platform.Options{
		LeaseTTL: cfg.LeaseTTL, Instance: deps.Instance, Backoff: deps.Backoff, Attachments: deps.Attachments,
	})
	if err != nil {
		return nil, err
	}
	p.menu = deps.Menu
	p.bus = deps.Bus
	p.downloads = platform.NewDownloader(deps.Attachments.URLs)
	if deps.Attachments.Enabled {
		p.store = attachment.Open(deps.Bus.JetStream(), deps.Bus.Topology(), deps.Attachments)
	}
	return &Service{Service: svc, p: p}, nil
}

// Platform is the Telegram implementation of platform.Platform.
type Platform struct {
	cfg     Config
	log     *slog.Logger
	api     *bot.Bot
	http    *http.Client
	baseURL string
	me      identity
	gate    gating
	// store holds the attachments a send refers to by bytes_ref (nil:
	// attachments are off).
	store *attachment.Store
	// bus sends a press's refusal on to the replica holding it
	// (forwardRefusal); nil in a Platform built without one.
	bus *bus.Bus
	// downloads fetches a file Telegram could not take by URL (nil:
	// public addresses only).
	downloads *platform.Downloader
	// webhookBounds bound the webhook server's connections.
	webhookBounds connBounds

	// held are the callback queries of presses held for the router's
	// answer (hold), by query id; a query's channel is closed when it
	// is claimed (claimQuery).
	heldMu sync.Mutex
	held   map[string]*query
	// retryWaitOver, when set (tests), is called as a failed press's
	// wait for its retry runs out (awaitRetry), before it is let go.
	retryWaitOver func(id string)
	// watchOver, when set (tests), is called once a watch of a press
	// left to another replica's hold (watchHolder) is over, with
	// whether the holder said it answered the press.
	watchOver func(id string, answered bool)
	// life ends when the gateway stops (stopPresses): the holds of
	// presses (hold, awaitRetry) and the watches of presses left to
	// other replicas (watchHolder) end with it, not on their own bounds,
	// so that a stopped replica leaves nothing running. presses counts
	// them (goPress); once stopped, none starts.
	life    context.Context
	endLife context.CancelFunc
	pressMu sync.Mutex
	stopped bool
	presses sync.WaitGroup

	// moved are the groups upgraded to supergroups (migrate.go).
	movedMu sync.Mutex
	moved   moved

	mu       sync.Mutex
	username string
	menuSet  bool // the command menu was set (setCommands)
	// menu is Deps.Menu (nil: command.Menu).
	menu []command.MenuEntry
}

// NewPlatform builds the platform without a bus (the Runner adds it).
func NewPlatform(cfg Config, log *slog.Logger, hc *http.Client) (*Platform, error) {
	def := DefaultConfig()
	if cfg.APIBaseURL == "" {
		cfg.APIBaseURL = def.APIBaseURL
	}
	if cfg.PollTimeout <= 0 {
		cfg.PollTimeout = def.PollTimeout
	}
	if cfg.PressHold <= 0 {
		cfg.PressHold = def.PressHold
	}
	if cfg.WebhookListen == "" {
		cfg.WebhookListen = def.WebhookListen
	}
	if cfg.ReplyToMode == "" {
		cfg.ReplyToMode = def.ReplyToMode
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if log == nil {
		log = slog.Default()
	}
	id, _ := botID(cfg.BotToken)
	patterns, _ := mentionPatterns(cfg.MentionPatterns) // Validate compiled them
	if len(patterns) > 0 {
		log.Info("telegram mention patterns loaded", "count", len(patterns))
	}
	if hc == nil {
		hc = &http.Client{Timeout: cfg.PollTimeout + 30*time.Second}
	}
	base := strings.TrimRight(cfg.APIBaseURL, "/")
	api, err := bot.New(cfg.BotToken, bot.WithServerURL(base), bot.WithSkipGetMe(), bot.WithHTTPClient(cfg.PollTimeout, hc),
		bot.WithErrorsHandler(func(err error) { log.Debug("telegram library error", "err", err) }))
	if err != nil {
		return nil, fmt.Errorf("telegram client: %w", err)
	}
	life, endLife := context.WithCancel(context.Background())
	return &Platform{
		life: life, endLife: endLife,
		cfg: cfg, log: log.With("platform", "telegram"), api: api, http: hc, baseURL: base,
		me: identity{id: id, username: strings.TrimPrefix(cfg.BotUsername, "@")}, username: strings.TrimPrefix(cfg.BotUsername, "@"),
		gate: gating{requireMention: cfg.RequireMention, freeChats: platform.IDSet(cfg.FreeResponseChats), otherBotsToo: !cfg.ExclusiveBotMentions,
			patterns: patterns},
		webhookBounds: webhookBounds,
	}, nil
}

func (p *Platform) Name() string    { return "telegram" }
func (p *Platform) Account() string { return strconv.FormatInt(p.me.id, 10) }

// SingleConsumer: long polling allows one poller per token; webhook mode
// lets every replica serve the endpoint.
func (p *Platform) SingleConsumer() bool { return p.cfg.WebhookURL == "" }

func (p *Platform) Capabilities() platform.Capabilities {
	return platform.Capabilities{
		MaxLength: maxText, Measure: platform.MeasureUTF16, CanSend: true, CanEdit: true, CanDelete: true,
		CanThread: true, CanTyping: true, CommandPrefix: "/",
		MediaKinds: []eventsv1.AttachmentKind{eventsv1.AttachmentKind_ATTACHMENT_KIND_IMAGE, eventsv1.AttachmentKind_ATTACHMENT_KIND_DOCUMENT},
	}
}

func (p *Platform) identity() identity {
	p.mu.Lock()
	defer p.mu.Unlock()
	return identity{id: p.me.id, username: p.username}
}

// learnUsername asks getMe once for the bot's username. A rejected token
// is fatal.
func (p *Platform) learnUsername(ctx context.Context) error {
	if p.identity().username != "" {
		return nil
	}
	u, err := p.api.GetMe(ctx)
	if err != nil {
		if errors.Is(err, bot.ErrorUnauthorized) || errors.Is(err, bot.ErrorNotFound) {
			return platform.Fatal(fmt.Errorf("telegram rejected the bot token (getMe): %w", err))
		}
		return fmt.Errorf("getMe: %w", err)
	}
	p.mu.Lock()
	p.username = u.Username
	p.mu.Unlock()
	return nil
}

// setCommands sets the bot's command menu (Telegram's "/" list) to the
// gateway's commands (command.Menu: every command with Hermes's
// description, within Telegram's limits), as Hermes does at start, once
// per process: a failure is logged and tried again at the next connect,
// never keeps the bot from serving (typed commands work without a menu).
func (p *Platform) setCommands(ctx context.Context) {
	p.mu.Lock()
	done, want := p.menuSet, p.menu
	p.mu.Unlock()
	if done {
		return
	}
	menu := want
	if menu == nil {
		menu = command.Menu()
	}
	var cmds []models.BotCommand
	for _, e := range menu {
		cmds = append(cmds, models.BotCommand{Command: e.Name, Description: e.Description})
	}
	if _, err := p.api.SetMyCommands(ctx, &bot.SetMyCommandsParams{Commands: cmds}); err != nil {
		p.log.WarnContext(ctx, "set the bot's command menu", "err", err)
		return
	}
	p.mu.Lock()
	// A menu replaced meanwhile (SetMenu) is set by its own call.
	p.menuSet = slices.Equal(p.menu, want)
	p.mu.Unlock()
}

// SetMenu replaces the bot's command menu (a skill reload changed the
// skills that run on Telegram) and sets it at once, as Hermes's
// /reload-skills leaves each adapter to refresh what it registered: every
// replica sets the same menu, so whichever holds the connection agrees.
// A failure is logged; the next connect tries again.
func (p *Platform) SetMenu(ctx context.Context, menu []command.MenuEntry) {
	p.mu.Lock()
	p.menu, p.menuSet = slices.Clone(menu), false
	p.mu.Unlock()
	p.setCommands(ctx)
}

// Connect sets the command menu, then runs long polling or the webhook
// server.
func (p *Platform) Connect(ctx context.Context, conn platform.Conn) error {
	if err := p.learnUsername(ctx); err != nil {
		return err
	}
	p.setCommands(ctx)
	if p.cfg.WebhookURL != "" {
		return p.serveWebhook(ctx, conn)
	}
	return p.poll(ctx, conn)
}

// handle normalizes and publishes one raw update. It returns an error
// only when the update was not stored and must not be confirmed.
func (p *Platform) handle(ctx context.Context, conn platform.Conn, raw []byte) (err error) {
	// handed is when this replica was handed the press: a watch of it
	// (heldElsewhere) ends while Telegram still takes its answer.
	handed := time.Now()
	out, err := parseUpdate(raw, p.identity(), p.gate)
	if err != nil {
		conn.Reject(ctx, "malformed update", err)
		if id := queryID(raw); id != "" {
			// A press all the same: its client shows a spinner until
			// the query is answered.
			p.answerCallback(ctx, id, handed)
		}
		return nil
	}
	held := false
	// q is the press's query, held (holdQuery) from just before the
	// press is published; nil until then, and when again: the press is
	// held here already (Telegram sent it again), and its first
	// handling answers it.
	var (
		q         *query
		again     bool
		duplicate bool // the bus had the press already
	)
	if out.callbackID != "" {
		// Answered once the press is on the bus (or skipped): until then
		// the client shows its progress, and Telegram sends it again. A
		// press published is held for the router's answer first (hold),
		// and one whose publish failed is held for its retry (awaitRetry).
		defer func() {
			switch {
			case again:
			case err != nil:
				if q != nil {
					p.awaitRetry(ctx, out.callbackID, q)
				}
			case held:
				p.hold(ctx, out.callbackID, q)
			default:
				if q == nil {
					p.answerCallback(ctx, out.callbackID, handed)
					return
				}
				// A replica told meanwhile that the press is held
				// here left the query to this hold (heldElsewhere), and
				// watches it: it hears that the query is this
				// handling's once this handling watches the replica it
				// leaves it to, or once its answer settled it
				// (queryDone). Said before the answer, a failed answer
				// left the query to no one. The hold closes first, so
				// that the question below does not find it; the watcher
				// waits out a holder's absence for its grace
				// (holderGrace) before it answers.
				asked := q.hold.LetGo()
				q.hold.Close()
				if duplicate && p.heldElsewhere(ctx, out.callbackID, q, handed, asked) {
					return
				}
				// Held by no one: the press was decided before, its holder
				// done or dead, and the router's word kept for it, if any,
				// is the query's answer (keptText), as its holder's was.
				// Answered on the press's own goroutine, and tried again
				// while a failure passes (answerHeld): the next update
				// does not wait for it. Nor does it end with ctx, a
				// webhook's request's.
				if p.claimQuery(out.callbackID) == nil {
					return
				}
				id, actx := out.callbackID, context.WithoutCancel(ctx)
				p.goPress(func() {
					if p.answerHeld(actx, id, p.keptText(actx, id), handed.Add(watchBound)) {
						// Its hold, closed, may have told a replica the
						// press is held here.
						p.confirmAnswered(id)
					}
				})
			}
		}()
	}
	if out.ev == nil {
		updatesSkipped.WithLabelValues(out.skip).Inc()
		p.log.Debug("update skipped", "reason", out.skip)
		return nil
	}
	if out.callbackID != "" {
		out.ev.Interaction = heldPress(out.callbackID, time.Now().Add(p.cfg.PressHold))
		// The router's answer may come as soon as the press is out, and
		// so may its refusal, which claims the query.
		q, again = p.holdQuery(ctx, conn, out.callbackID, handed)
	}
	acc, err := conn.Deliver(ctx, out.ev)
	if err != nil {
		if errors.Is(err, platform.ErrRejected) {
			return nil
		}
		return fmt.Errorf("publish update %s: %w", out.ev.GetEventId(), err)
	}
	// A press published before (Telegram sent it again) was decided
	// then: its query is answered at once. A duplicate after a publish
	// of it failed here is most likely that publish, stored though its
	// acknowledgement was lost, and one sent again meanwhile (two
	// webhook deliveries at once) may have been stored by the other
	// handling: the router decides it, and answers here.
	held = q != nil && (!acc.Duplicate || q.failed || p.sentAgain(q))
	duplicate = acc.Duplicate
	return nil
}
