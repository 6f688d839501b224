// Package discord is the Discord gateway (`switchboard gateway discord`):
// the gateway websocket for inbound messages (identify, heartbeat, resume
// with sequence numbers) and REST for sending, built on
// github.com/bwmarrin/discordgo and the platform kit. One replica per bot
// holds the connection (the kit's lease); every replica serves sends, and
// the workers' attachment fetches: an attachment is published as its CDN
// URL and downloaded (Platform.Fetch) only when a turn reads it.
package discord

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"net/url"
	"os"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/bwmarrin/discordgo"
	"github.com/gorilla/websocket"

	"github.com/switchboard-chat/switchboard/pkg/attachment"
	"github.com/switchboard-chat/switchboard/pkg/bus"
	"github.com/switchboard-chat/switchboard/pkg/chunk"
	"github.com/switchboard-chat/switchboard/pkg/command"
	deliveryv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/delivery/v1"
	eventsv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/events/v1"
	"github.com/switchboard-chat/switchboard/pkg/platform"
)

// Config is the gateways.discord section.
type Config struct {
	// BotToken (DISCORD_BOT_TOKEN), without the "Bot " prefix.
	BotToken string `koanf:"bot_token"`
	// APIBaseURL (DISCORD_API_BASE_URL) replaces https://discord.com for
	// REST; the gateway URL comes from GET /api/v9/gateway.
	APIBaseURL string `koanf:"api_base_url"`
	// AllowedChannels limits guild messages to these channels (and their
	// threads); empty allows all.
	AllowedChannels []string `koanf:"allowed_channels"`
	// IgnoredChannels (DISCORD_IGNORED_CHANNELS) are guild channels (and
	// their threads) the bot never answers in; "*" is every one.
	IgnoredChannels []string `koanf:"ignored_channels"`
	// AllowedRoles (DISCORD_ALLOWED_ROLES): as in Hermes, a guild member
	// with one of these roles is authorized whatever the user allowlists
	// say (the event is marked transport_authenticated, which the router's
	// allowlists defer to); others are authorized as usual (their user id
	// in DISCORD_ALLOWED_USERS, or paired).
	AllowedRoles []string `koanf:"allowed_roles"`
	// AllowBots (DISCORD_ALLOW_BOTS, as in Hermes) says which messages
	// of other bots and webhooks are published, marked is_bot: "none"
	// (default), "mentions" (those that mention this bot) or "all"; true
	// and false, from before it had modes, are "all" and "none". Unset,
	// it follows router.auth.allow_bots.discord, so the router's setting
	// is not dropped here before it can apply. The bot's own messages
	// are never published.
	AllowBots string `koanf:"allow_bots"`
	// AutoThread (DISCORD_AUTO_THREAD, default true, as in Hermes): a
	// guild channel message that mentions the bot (outside the
	// free-response channels, answered inline) is answered in a new
	// thread the gateway opens from it before publishing it (the message
	// is published as the thread's, so it and the thread's later
	// messages are one session), which the bot then follows without
	// mentions. Where the thread is refused, the message keeps
	// prospective_thread_id and is answered in the channel.
	AutoThread bool `koanf:"auto_thread"`
	// RequireMention (DISCORD_REQUIRE_MENTION, default true, as in
	// Hermes): in guild channels the bot answers only messages that
	// mention it or reply to it, and everything in threads it takes part
	// in (it opened them, or their first message addressed it).
	RequireMention bool `koanf:"require_mention"`
	// FreeResponseChannels (DISCORD_FREE_RESPONSE_CHANNELS) are channels
	// (and their threads) answered without a mention; "*" is every one.
	FreeResponseChannels []string `koanf:"free_response_channels"`
	// IgnoreNoMention (DISCORD_IGNORE_NO_MENTION, default true, as in
	// Hermes): outside free-response channels, a message that mentions
	// other people or bots but not this bot is addressed to them and is
	// skipped, even where no mention is required.
	IgnoreNoMention bool `koanf:"ignore_no_mention"`
	// Reactions (DISCORD_REACTIONS, default true, as in Hermes): the
	// user's message shows 👀 while the agent works on it, then ✅ when
	// the answer was sent, ❌ when the turn failed, nothing when it was
	// interrupted. The bot needs the Add Reactions permission.
	Reactions bool `koanf:"reactions"`
	// AllowMentions (allow_mentions.*, DISCORD_ALLOW_MENTION_*) says which
	// mentions in the bot's messages and edits notify: by default, as in
	// Hermes, users by id and the author replied to, never @everyone,
	// @here or a role.
	AllowMentions AllowMentions `koanf:"allow_mentions"`
	// RegisterCommands (DISCORD_REGISTER_COMMANDS, default true): at
	// connect, the replica holding the connection makes the
	// application's global slash commands the command menu's (a GET,
	// and a bulk overwrite only when they differ), as Hermes syncs its
	// command tree. The bot needs the applications.commands scope.
	RegisterCommands bool `koanf:"register_commands"`
	// PressHold is how long a button press, once acknowledged, is held
	// for the router's answer (handlePress), at most maxPressHold; its
	// text, when it has one, is shown to the presser only.
	PressHold time.Duration `koanf:"press_hold"`
}

// DefaultConfig is Hermes's defaults.
func DefaultConfig() Config {
	return Config{AutoThread: true, RequireMention: true, IgnoreNoMention: true, Reactions: true, AllowMentions: DefaultAllowMentions(),
		RegisterCommands: true, PressHold: defaultPressHold}
}

// Enabled reports whether dev should start the gateway.
func (c Config) Enabled() bool { return c.BotToken != "" }

// Validate checks the section.
func (c Config) Validate() error {
	if c.BotToken == "" {
		return errors.New("discord: bot_token (DISCORD_BOT_TOKEN) is required")
	}
	if _, err := platform.ParseBotMode(c.AllowBots); err != nil {
		return fmt.Errorf("discord: allow_bots (DISCORD_ALLOW_BOTS): %w", err)
	}
	if c.PressHold > maxPressHold {
		return fmt.Errorf("discord: press_hold %v: at most %v", c.PressHold, maxPressHold)
	}
	return nil
}

// Deps are the shared clients.
type Deps struct {
	Log    *slog.Logger
	Bus    *bus.Bus
	Runner platform.Options
	// Menu is what the slash commands are registered from; nil:
	// command.Menu, the built-in commands. The skills that run on Discord
	// follow them when the gateway loads skills (pkg/skill's Menu).
	Menu []command.MenuEntry
}

// Service runs the Discord gateway.
type Service struct {
	platform.Service
	p *Platform
}

// SetMenu replaces the slash commands' menu (Platform.SetMenu).
func (s *Service) SetMenu(ctx context.Context, menu []command.MenuEntry) { s.p.SetMenu(ctx, menu) }

// New builds the gateway without calling Discord: Run learns the bot's
// identity (SignIn, GET /users/@me) until Discord answers, unready
// meanwhile, so a gateway started while Discord is out of reach waits for
// it; a refused token ends Run.
func New(cfg Config, deps Deps) (*Service, error) {
	if deps.Bus == nil {
		return nil, errors.New("discord: bus is required")
	}
	log := deps.Log
	if log == nil {
		log = slog.Default()
	}
	p, err := newPlatform(cfg, log)
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
	p.menu = deps.Menu
	p.bus = deps.Bus
	return &Service{Service: svc, p: p}, nil
}

// Platform is the Discord side of the kit.
type Platform struct {
	cfg   Config
	log   *slog.Logger
	s     *discordgo.Session
	cdn   *http.Client // downloads attachments (Fetch)
	rules rules

	chMu     sync.Mutex
	channels map[string]channelInfo

	// store holds the attachments a send refers to by bytes_ref (nil:
	// attachments are off).
	store *attachment.Store
	// sendBytes bounds the bytes of one send's files (maxSendBytes).
	sendBytes int
	// bus tells the replica holding a press that its refusal was shown
	// (endHold); nil in a Platform built without one.
	bus *bus.Bus

	// registered: this process made the slash commands the menu's.
	registered atomic.Bool
	// signedIn: SignIn learnt the bot's identity (rules.BotID is set,
	// and read after this from any goroutine).
	signedIn atomic.Bool
	// menuMu guards menu.
	menuMu sync.Mutex
	// menu is Deps.Menu (nil: command.Menu), or what SetMenu set since.
	menu []command.MenuEntry

	connMu sync.Mutex
	conn   platform.Conn
	ctx    context.Context
	lost   chan struct{}
}

// rewrite sends requests for discord.com to the configured base URL.
type rewrite struct {
	base *url.URL
	next http.RoundTripper
}

func (t rewrite) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.URL.Host == "discord.com" {
		r = r.Clone(r.Context())
		r.URL.Scheme, r.URL.Host = t.base.Scheme, t.base.Host
		r.URL.Path = strings.TrimSuffix(t.base.Path, "/") + r.URL.Path
		r.Host = t.base.Host
	}
	return t.next.RoundTrip(r)
}

// NewPlatform builds the session and checks the token.
func NewPlatform(ctx context.Context, cfg Config, log *slog.Logger) (*Platform, error) {
	p, err := newPlatform(cfg, log)
	if err != nil {
		return nil, err
	}
	if err := p.SignIn(ctx); err != nil {
		return nil, err
	}
	return p, nil
}

// newPlatform builds the platform without calling Discord; SignIn
// learns the bot's identity.
func newPlatform(cfg Config, log *slog.Logger) (*Platform, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	s, err := discordgo.New("Bot " + strings.TrimPrefix(cfg.BotToken, "Bot "))
	if err != nil {
		return nil, fmt.Errorf("discord session: %w", err)
	}
	if cfg.APIBaseURL != "" && strings.TrimSuffix(cfg.APIBaseURL, "/") != "https://discord.com" {
		base, err := url.Parse(cfg.APIBaseURL)
		if err != nil || base.Host == "" {
			return nil, fmt.Errorf("discord: api_base_url %q is not a URL", cfg.APIBaseURL)
		}
		s.Client = &http.Client{Timeout: 20 * time.Second, Transport: rewrite{base: base, next: http.DefaultTransport}}
	}
	s.ShouldReconnectOnError = false // the kit's runner reconnects (and resumes)
	s.SyncEvents = true              // handlers run in order on the reading goroutine
	s.StateEnabled = false
	s.Identify.Compress = false
	s.Identify.Intents = discordgo.IntentsGuildMessages | discordgo.IntentsDirectMessages | discordgo.IntentsMessageContent
	s.LogLevel = discordgo.LogError

	bots, err := platform.ParseBotMode(cfg.AllowBots)
	if err != nil {
		return nil, fmt.Errorf("discord: allow_bots (DISCORD_ALLOW_BOTS): %w", err)
	}
	if cfg.PressHold <= 0 {
		cfg.PressHold = defaultPressHold
	}
	p := &Platform{
		cfg: cfg, log: log.With("platform", "discord"), s: s, cdn: cdnClient(s.Client), channels: map[string]channelInfo{}, sendBytes: maxSendBytes,
		rules: rules{Bots: bots, AutoThread: cfg.AutoThread,
			AllowedChannels: platform.IDSet(cfg.AllowedChannels), IgnoredChannels: platform.IDSet(cfg.IgnoredChannels), AllowedRoles: platform.IDSet(cfg.AllowedRoles),
			RequireMention: cfg.RequireMention, FreeChannels: platform.IDSet(cfg.FreeResponseChannels), IgnoreNoMention: cfg.IgnoreNoMention},
	}
	if len(cfg.AllowedRoles) > 0 && allowAll() {
		log.Warn("discord: allowed_roles authorizes its members but filters no one, and an allow-all setting (DISCORD_ALLOW_ALL_USERS or GATEWAY_ALLOW_ALL_USERS) admits everyone anyway")
	}
	s.AddHandler(p.onEvent)
	s.AddHandler(func(*discordgo.Session, *discordgo.Disconnect) { p.signalLost() })
	return p, nil
}

// SignIn learns the bot's identity (GET /users/@me), its id the account
// (platform.SignInner). A token Discord refuses (401, 403) is Fatal;
// anything else (Discord out of reach, a 5xx) is retried.
func (p *Platform) SignIn(ctx context.Context) error {
	me, err := p.s.User("@me", discordgo.WithContext(ctx))
	if err != nil {
		var re *discordgo.RESTError
		if errors.As(err, &re) && re.Response != nil && (re.Response.StatusCode == http.StatusUnauthorized || re.Response.StatusCode == http.StatusForbidden) {
			return platform.Fatal(fmt.Errorf("discord refused the bot token (check DISCORD_BOT_TOKEN): users/@me: %w", err))
		}
		return fmt.Errorf("discord users/@me: %w", err)
	}
	p.rules.Account, p.rules.BotID = me.ID, me.ID
	p.signedIn.Store(true)
	return nil
}

// allowAll reports whether the environment lets every Discord user in,
// as the router reads it.
func allowAll() bool {
	for _, k := range []string{"DISCORD_ALLOW_ALL_USERS", "GATEWAY_ALLOW_ALL_USERS"} {
		switch strings.ToLower(strings.TrimSpace(os.Getenv(k))) {
		case "true", "1", "yes", "on":
			return true
		}
	}
	return false
}

func (p *Platform) Name() string         { return "discord" }
func (p *Platform) Account() string      { return p.rules.Account }
func (p *Platform) SingleConsumer() bool { return true }

// Ephemeral: the gateway replays nothing to a new session, so the lease
// holder keeps its connection through a NATS outage.
func (p *Platform) Ephemeral() bool { return true }

// Capabilities: 2000 characters per message.
func (p *Platform) Capabilities() platform.Capabilities {
	return platform.Capabilities{
		MaxLength: 2000, Measure: platform.MeasureRunes,
		CanSend: true, CanEdit: true, CanDelete: true, CanThread: true, CanTyping: true,
		CommandPrefix: "/",
	}
}

// resumeWait are the waits before resuming a session whose connection
// was lost (about 15 s in all), and resumeStable how long a connection
// must have lasted for the next loss to start them over.
var (
	resumeWait   = []time.Duration{500 * time.Millisecond, time.Second, 2 * time.Second, 4 * time.Second, 8 * time.Second}
	resumeStable = time.Minute
)

// Connect opens the gateway (identify, or resume after a drop) and waits
// until the connection is lost or ctx ends. A lost connection (Discord
// asks for reconnects now and then, op 7, and connections drop) is
// resumed here within a second, as discord.py does: going back to the
// runner would wait out its reconnect backoff (30 s and more) with the
// bot deaf. Only a connection that keeps dropping goes back to it.
func (p *Platform) Connect(ctx context.Context, conn platform.Conn) error {
	lost := make(chan struct{}, 1)
	p.connMu.Lock()
	p.conn, p.ctx, p.lost = conn, ctx, lost
	p.connMu.Unlock()
	go p.syncCommands(ctx) // REST, beside the websocket
	for quick := 0; ; quick++ {
		select { // a loss reported twice is one loss
		case <-lost:
		default:
		}
		if err := p.s.Open(); err != nil {
			var ce *websocket.CloseError
			if errors.As(err, &ce) && (ce.Code == 4004 || ce.Code == 4013 || ce.Code == 4014) {
				return platform.Fatal(fmt.Errorf("discord gateway: %w", err))
			}
			return fmt.Errorf("discord gateway open: %w", err)
		}
		conn.Connected()
		up := time.Now()
		select {
		case <-ctx.Done():
			// A normal close ends the session; a standby identifies afresh.
			_ = p.s.Close()
			return nil
		case <-lost:
		}
		if time.Since(up) >= resumeStable {
			quick = 0
		}
		if quick >= len(resumeWait) {
			return errors.New("discord gateway connection lost")
		}
		p.log.Warn("discord gateway connection lost; resuming", "attempt", quick+1)
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(resumeWait[quick]):
		}
	}
}

func (p *Platform) signalLost() {
	p.connMu.Lock()
	defer p.connMu.Unlock()
	if p.lost != nil {
		select {
		case p.lost <- struct{}{}:
		default:
		}
	}
}

func (p *Platform) current() (platform.Conn, context.Context) {
	p.connMu.Lock()
	defer p.connMu.Unlock()
	return p.conn, p.ctx
}

// onEvent sees every dispatch with its raw payload, on the reading
// goroutine, in sequence order. A payload whose handling panics is
// logged, counted (switchboard_panics_total{component="gateway_receive"})
// and skipped; the connection and the dispatches after it go on.
func (p *Platform) onEvent(_ *discordgo.Session, e *discordgo.Event) {
	if e.Type != "MESSAGE_CREATE" && e.Type != "INTERACTION_CREATE" {
		return
	}
	conn, ctx := p.current()
	if conn == nil {
		return
	}
	// This is discordgo's reading goroutine: a panic here would end the
	// process, so one payload the code cannot take is skipped instead
	// (Discord takes no acknowledgements and resends nothing).
	platform.Receive(ctx, conn, p.log, "discord", e.Type+" "+strconv.FormatInt(e.Sequence, 10), e.RawData, func() {
		if e.Type == "INTERACTION_CREATE" {
			in, err := parseInteraction(e.RawData)
			if err != nil {
				conn.Reject(ctx, "malformed INTERACTION_CREATE", err)
				p.answerUnread(ctx, e.RawData)
				return
			}
			switch in.Type {
			case discordgo.InteractionApplicationCommand:
				p.handleCommand(ctx, conn, in)
			case discordgo.InteractionMessageComponent:
				p.handlePress(ctx, conn, in)
			default:
				conn.Reject(ctx, "INTERACTION_CREATE of an unknown type", fmt.Errorf("%w: interaction type %d", errMalformed, in.Type))
				p.answerUnread(ctx, e.RawData)
			}
			return
		}
		p.handle(ctx, conn, e.RawData)
	})
}

// ackWithin is how long a press may take to reach the bus: Discord
// wants the interaction answered within 3 s of the press.
const ackWithin = 2500 * time.Millisecond

// handlePress publishes an approval button's press (see pressed), then
// acknowledges the interaction with a deferred message update, so the
// presser's client shows no failure and the card waits for the router's
// answer (the press of a component the gateway does not know, not
// published, with an ephemeral message that nothing was done). A press not on the bus in time is left unanswered: Discord
// shows "This interaction failed" and the user presses again. A
// redelivered interaction is published once (its event id) and answered
// again, which Discord refuses as already acknowledged.
//
// The press is held for the router's answer as a Telegram callback
// query or a Teams invoke is (platform.PressHold): the replica
// subscribes to the press's subject before it publishes the press, and
// once the press is acknowledged it waits for the answer, up to
// Config.PressHold (off the reading goroutine: the next dispatch does
// not wait). The acknowledgement does not wait for the answer (Discord
// wants it within 3 s, and a busy router would make the press fail);
// the answer's text, when it has one (Hermes's "This approval has
// already been resolved~"), is then shown to the presser only, as an
// ephemeral followup (answerHeld). A press the router refuses gets no
// such answer: its refusal comes through delivery as a followup (Send),
// and the replica that sends it ends the hold (endHold).
func (p *Platform) handlePress(ctx context.Context, conn platform.Conn, in *discordgo.Interaction) {
	arrived := time.Now()
	pctx, cancel := context.WithTimeout(ctx, ackWithin)
	defer cancel()
	guild := in.GuildID
	if in.Type != discordgo.InteractionMessageComponent {
		guild = "" // no channel lookup: pressed skips it anyway
	}
	var (
		hold   *platform.PressHold
		held   *eventsv1.Interaction // the press's, published now and held
		ask    = true                // hold the press before its first publish
		failed bool                  // a publish of it failed, and may have been stored
		// unknown: the press is of a component the gateway does not
		// know, and its user is told nothing was done.
		unknown bool
	)
	published := untilDone(pctx, 100*time.Millisecond, time.Second, func() bool {
		ch, settled, err := p.channelOf(pctx, conn, guild, in.ChannelID)
		if settled || err != nil {
			return settled
		}
		ev, why := pressed(in, ch, p.rules, arrived)
		if ev == nil {
			p.log.Debug("discord interaction skipped", "why", string(why), "interaction_id", in.ID)
			unknown = unknownComponent(why)
			return true
		}
		if ask {
			// The router's answer may come as soon as the press is out.
			ask = false
			hold = p.holdPress(conn, ev.GetInteraction())
		}
		acc, err := conn.Deliver(pctx, ev)
		switch {
		case err == nil && (!acc.Duplicate || failed):
			// A duplicate after a failed publish is most likely that
			// publish, stored though its acknowledgement was lost: the
			// router decides it and answers here. A press Discord sent
			// again meanwhile waits out the hold for nothing.
			held = ev.GetInteraction()
			return true
		case err == nil || errors.Is(err, platform.ErrRejected):
			return true // not published now: nothing will answer it
		}
		failed = true
		p.log.Warn("discord event not published; retrying", "kind", "button press", "id", in.ID, "err", err)
		return false
	})
	if held == nil {
		hold.Close()
		hold = nil
	}
	if !published {
		p.log.Warn("discord button press not published in time; leaving it unacknowledged", "interaction_id", in.ID)
		return
	}
	ack := &discordgo.InteractionResponse{Type: discordgo.InteractionResponseDeferredMessageUpdate}
	if unknown {
		ack = unreadResponse()
	}
	if err := p.s.InteractionRespond(in, ack, opts(ctx)...); err != nil {
		hold.Close()
		if isCode(err, discordgo.ErrCodeInteractionHasAlreadyBeenAcknowledged) {
			p.log.Debug("discord interaction already acknowledged", "interaction_id", in.ID)
			return
		}
		p.log.Warn("acknowledge discord interaction", "interaction_id", in.ID, "err", redact(err, in.Token))
		return
	}
	if hold != nil {
		go p.answerHeld(ctx, held, hold)
	}
}

// defaultPressHold and maxPressHold are Config.PressHold's default and
// bound. The press is acknowledged before the hold, so Discord's 3 s
// do not bound it; the bound keeps a replica from waiting long for an
// answer that was lost.
const (
	defaultPressHold = 1500 * time.Millisecond
	maxPressHold     = 10 * time.Second
)

// holdPress starts holding the press of interaction ia for the router's
// answer, or returns nil when it cannot be held (an interaction without
// a usable token, which no followup could answer; a Conn that holds no
// presses; a failed subscription, logged: the press is published
// without a hold, as before holds were).
func (p *Platform) holdPress(conn platform.Conn, ia *eventsv1.Interaction) *platform.PressHold {
	h, ok := conn.(platform.PressHolder)
	if !ok || ia.GetId() == "" {
		return nil
	}
	hold, err := h.HoldPress(ia.GetId())
	if err != nil {
		p.log.Warn("hold discord button press for the router's answer; the presser is shown none", "interaction_id", ia.GetId(), "err", err)
		return nil
	}
	return hold
}

// endHold tells the replica holding the press of interaction ia, if one
// does, that the press is decided: its refusal, which the router sends
// through delivery instead of answering the hold, has just been shown
// (or dropped, when Discord no longer takes it). The hold ends now, not
// when Config.PressHold runs out, and shows nothing more (an answer
// without text). A request, not a publish: the send's receipt comes
// once the holder has taken it. Best effort: a hold not told ends by
// time.
func (p *Platform) endHold(ctx context.Context, ia *eventsv1.Interaction) {
	if p.bus == nil || ia.GetId() == "" {
		return
	}
	hctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	req := &deliveryv1.SendRequested{Op: deliveryv1.SendOp_SEND_OP_SEND,
		Target: &deliveryv1.Target{Platform: "discord", Interaction: &eventsv1.Interaction{Id: ia.GetId(), Component: true}}}
	if _, err := platform.AnswerPress(hctx, p.bus, req); err != nil {
		p.log.Debug("end the hold of a refused discord button press; it ends by time", "interaction_id", ia.GetId(), "err", err)
	}
}

// answerHeld waits for the router's answer to the held press of
// interaction ia, up to Config.PressHold, and shows its text to the
// presser only, as an ephemeral followup of the (acknowledged)
// interaction, as Hermes's views answer a press with an ephemeral
// message. An answer without text, or none in time, shows nothing: the
// router's edit of the card says the rest. Best effort: a followup
// Discord refuses is logged (followup). Not ended by ctx, the
// connection's: the followup goes over REST, which a dropped connection
// does not stop.
func (p *Platform) answerHeld(ctx context.Context, ia *eventsv1.Interaction, hold *platform.PressHold) {
	defer hold.Close()
	t := time.NewTimer(p.cfg.PressHold)
	defer t.Stop()
	var text string
	select {
	case req := <-hold.Answer():
		text = req.GetText()
	case <-t.C:
	}
	if text == "" {
		return
	}
	fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	req := &deliveryv1.SendRequested{Op: deliveryv1.SendOp_SEND_OP_SEND, Target: &deliveryv1.Target{Platform: "discord", Interaction: ia}, Text: text}
	if _, _, err := p.followup(fctx, req); err != nil {
		p.log.Warn("show the router's answer to a discord button press", "interaction_id", ia.GetId(), "err", err)
	}
}

// handle normalizes and publishes one MESSAGE_CREATE. Discord does not
// take acknowledgements, so a publish that fails is retried here (the
// reading goroutine waits; Discord buffers) until it succeeds or the
// connection's context ends.
func (p *Platform) handle(ctx context.Context, conn platform.Conn, raw []byte) {
	m, err := parseMessage(raw)
	if err != nil {
		conn.Reject(ctx, "malformed MESSAGE_CREATE", err)
		return
	}
	untilDone(ctx, 200*time.Millisecond, 5*time.Second, func() bool {
		ch, settled, err := p.channelOf(ctx, conn, m.GuildID, m.ChannelID)
		if settled || err != nil {
			return settled
		}
		ev, why := normalize(m, ch, p.rules)
		if why == skipUnaddressed && ev.GetSource().GetThreadId() != "" {
			// A thread opened from a message has the message's id: the
			// bot takes part when that message was addressed to it.
			known, err := conn.Seen(ctx, ev.GetSource().GetThreadId())
			if err != nil {
				p.log.Warn("discord thread lookup failed; retrying", "chat_id", ev.GetSource().GetThreadId(), "err", err)
				return false
			}
			if known {
				why = ""
			}
		}
		if why != "" {
			p.log.Debug("discord message skipped", "why", string(why), "message_id", m.ID)
			return true
		}
		if ev.GetSource().GetProspectiveThreadId() != "" {
			if err := p.openThread(ctx, m, ev.GetSource()); err != nil {
				p.log.Warn("discord auto-thread not opened; retrying", "message_id", m.ID, "err", err)
				return false
			}
		}
		return p.delivered(ctx, conn, ev, "message", m.ID)
	})
}

// untilDone runs attempt until it reports the dispatch done with (on
// the bus, rejected, skipped) or ctx ends, waiting between attempts a
// little longer each time (pace more, at most most): Discord takes no
// acknowledgements and resends nothing, so the reading goroutine waits
// (Discord buffers) rather than a dispatch being lost. It reports
// whether an attempt was done.
func untilDone(ctx context.Context, pace, most time.Duration, attempt func() bool) bool {
	for n := 0; ctx.Err() == nil; n++ {
		if n > 0 {
			select {
			case <-ctx.Done():
				return false
			case <-time.After(min(time.Duration(n)*pace, most)):
			}
		}
		if attempt() {
			return true
		}
	}
	return false
}

// channelOf is what a dispatch in a guild needs to know about its
// channel (nothing to look up in a DM: guild is empty). settled is true
// when Discord refused the lookup (a channel deleted, or out of the
// bot's reach): the payload is rejected, since asking again would stall
// every later dispatch on this connection. err is a failure worth
// another try, logged here.
func (p *Platform) channelOf(ctx context.Context, conn platform.Conn, guild, channel string) (ci channelInfo, settled bool, err error) {
	if guild == "" {
		return channelInfo{}, false, nil
	}
	ci, err = p.channel(ctx, channel)
	switch {
	case err == nil:
		return ci, false, nil
	case refused(err):
		conn.Reject(ctx, "channel lookup refused", err)
		return channelInfo{}, true, nil
	}
	p.log.Warn("discord channel lookup failed; retrying", "chat_id", channel, "err", err)
	return channelInfo{}, false, err
}

// delivered publishes ev and reports whether it is done with: on the
// bus, or rejected by the kit's check (which no retry changes). Another
// failure is logged, for the caller to try again.
func (p *Platform) delivered(ctx context.Context, conn platform.Conn, ev *eventsv1.MessageReceived, kind, id string) bool {
	_, err := conn.Deliver(ctx, ev)
	if err == nil || errors.Is(err, platform.ErrRejected) {
		return true
	}
	p.log.Warn("discord event not published; retrying", "kind", kind, "id", id, "err", err)
	return false
}

// openThread opens the auto-thread of a channel message that mentions
// the bot before the message is published, as Hermes does
// (discord.py _handle_message, _auto_create_thread): the thread has the
// message's id, and the message's source becomes the thread's (chat and
// thread = the thread id, parent = the channel), so the message and
// the later ones in the thread share one session key,
// agent:main:discord:thread:<thread>:<thread>. The thread is named as
// in Hermes, after the message. A thread already opened from the
// message (an earlier attempt, or its author) is taken as it is. Where
// Discord refuses the thread (no Create Public Threads permission), the
// source keeps prospective_thread_id, as in Hermes's inline fallback:
// the answer goes to the channel (see Send). Other failures are
// returned, for the caller to try again.
func (p *Platform) openThread(ctx context.Context, m *discordgo.Message, src *eventsv1.SessionSource) error {
	_, err := p.s.MessageThreadStartComplex(m.ChannelID, m.ID, &discordgo.ThreadStart{Name: autoThreadName(m.Content), AutoArchiveDuration: 1440}, discordgo.WithContext(ctx))
	switch {
	case err == nil || isCode(err, discordgo.ErrCodeThreadAlreadyCreatedForThisMessage):
	case refused(err):
		p.log.Warn("discord auto-thread refused; answering in the channel", "chat_id", m.ChannelID, "err", err)
		return nil
	default:
		return err
	}
	p.chMu.Lock()
	p.channels[m.ID] = channelInfo{Thread: true, Parent: m.ChannelID, Owner: p.rules.BotID}
	p.chMu.Unlock()
	src.ChatType, src.ChatId, src.ThreadId, src.ParentChatId, src.ProspectiveThreadId = "thread", m.ID, m.ID, m.ChannelID, ""
	return nil
}

var mentionMarkup = regexp.MustCompile(`<@[!&]?\d+>|<#\d+>`)

// autoThreadName is Hermes's name for an auto-thread: the message
// without mentions of users, roles or channels, its spaces collapsed,
// at most 80 characters (77 and "..." when longer), "Hermes" when
// nothing is left.
func autoThreadName(content string) string {
	name := strings.Join(strings.Fields(mentionMarkup.ReplaceAllString(content, "")), " ")
	if r := []rune(name); len(r) > 80 {
		name = string(r[:77]) + "..."
	}
	if name == "" {
		name = "Hermes"
	}
	return name
}

// refused reports whether Discord answered a request with a client error
// that asking again will not change (404 Unknown Channel, 403 Missing
// Access); 429 and server errors are worth another try.
func refused(err error) bool {
	var re *discordgo.RESTError
	if !errors.As(err, &re) || re.Response == nil {
		return false
	}
	code := re.Response.StatusCode
	return code >= 400 && code < 500 && code != http.StatusTooManyRequests && code != http.StatusRequestTimeout
}

// channel says whether a guild channel is a thread (and its parent),
// asking REST once per channel.
func (p *Platform) channel(ctx context.Context, id string) (channelInfo, error) {
	p.chMu.Lock()
	ci, ok := p.channels[id]
	p.chMu.Unlock()
	if ok {
		return ci, nil
	}
	c, err := p.s.Channel(id, discordgo.WithContext(ctx))
	if err != nil {
		return channelInfo{}, err
	}
	if c == nil {
		// A broken answer (200 with the body null): the channel is taken
		// as unknown, not a thread, and the message handled as in a plain
		// channel. Not remembered, so that the next message asks again.
		p.log.Warn("discord channel lookup answered nothing; taking it as no thread", "chat_id", id)
		return channelInfo{}, nil
	}
	ci = channelInfo{Thread: c.IsThread(), Parent: c.ParentID, Owner: c.OwnerID,
		Posts: c.Type == discordgo.ChannelTypeGuildForum || c.Type == discordgo.ChannelTypeGuildMedia}
	p.chMu.Lock()
	if len(p.channels) > 100000 {
		clear(p.channels)
	}
	p.channels[id] = ci
	p.chMu.Unlock()
	return ci, nil
}

// opts are the request options of every send: ctx, and 429s returned to
// delivery instead of slept on.
func opts(ctx context.Context) []discordgo.RequestOption {
	return []discordgo.RequestOption{discordgo.WithContext(ctx), discordgo.WithRetryOnRatelimit(false), discordgo.WithRestRetries(0)}
}

// where is the channel a target's messages live in: the thread when
// there is one (Discord threads are channels).
func where(t *deliveryv1.Target) string {
	if t.GetThreadId() != "" {
		return t.GetThreadId()
	}
	return t.GetChatId()
}

// checkIDs refuses a request whose chat, thread or (withMessage) message
// id is not a snowflake. discordgo pastes these ids into REST paths
// unescaped, so an id such as "1/../../users/@me" would call another
// endpoint with the bot's token. The failure is permanent: no retry can
// make the id valid, and no request is made.
func checkIDs(req *deliveryv1.SendRequested, withMessage bool) error {
	type id struct{ kind, value string }
	t := req.GetTarget()
	ids := []id{{"chat", t.GetChatId()}}
	if t.GetThreadId() != "" {
		ids = append(ids, id{"thread", t.GetThreadId()})
	}
	if withMessage {
		ids = append(ids, id{"message", req.GetMessageId()})
	}
	for _, x := range ids {
		if !snowflake(x.value) {
			return platform.Permanent(fmt.Errorf("discord %s id %q is not a snowflake", x.kind, x.value))
		}
	}
	return nil
}

// Send posts a message. The first chunk replies to the user's message.
// A thread id that does not exist yet (a prospective auto-thread) is
// opened from the message with that id, then posted into. A target
// with an interaction (the refusal of a slash command or of a button
// press) is answered with an ephemeral followup, seen by the invoker
// only; where that cannot be done a command's refusal goes to the
// channel as a message and a press's is dropped (see followup).
func (p *Platform) Send(ctx context.Context, req *deliveryv1.SendRequested) (string, error) {
	t := req.GetTarget()
	if err := checkIDs(req, false); err != nil {
		return "", err
	}
	if t.GetInteraction() != nil {
		if id, done, err := p.followup(ctx, req); done {
			if err == nil && t.GetInteraction().GetComponent() {
				p.endHold(ctx, t.GetInteraction())
			}
			return id, err
		}
	}
	content, files, err := p.media(ctx, req)
	if err != nil {
		return "", err
	}
	n := len([]rune(content))
	if (n == 0 && len(files) == 0) || (n > maxText && len(req.GetAttachments()) == 0) {
		return "", platform.Permanent(fmt.Errorf("discord message of %d characters (1 to %d)", n, maxText))
	}
	// The attachments' captions and links follow the text delivery cut
	// to Discord's 2,000 characters: over it, they go as several
	// messages, the files with the last, rather than Discord refusing
	// the one. Files too many bytes for one request, or more than the
	// maxFiles a message takes, follow it in messages of their own,
	// without text; the buttons go with the last message.
	pieces := platform.Pieces(content, chunk.Limit{Max: maxText, Measure: chunk.Runes})
	last, batches := len(pieces)-1, files.batches()
	pieces = append(pieces, make([]string, len(batches)-1)...)
	// The pieces go where the first went: a thread opened for it, or the
	// channel where none could be; the fallback runs once per send.
	ch := where(t)
	return platform.SendPieces(ctx, pieces, func(i int) int { return i }, func(ctx context.Context, i int, piece string) (string, error) {
		ms := &discordgo.MessageSend{Content: piece, AllowedMentions: p.cfg.AllowMentions.allowed()}
		var fs uploads
		if i >= last {
			fs = batches[i-last]
		}
		if i == len(pieces)-1 {
			ms.Components = components(req)
		}
		return p.post(ctx, req, &ch, ms, fs, i == 0 && req.GetChunkIndex() == 0, i)
	})
}

// post posts ms, with files, for req into *dest (where(req's target)
// at first): replying to the user's message when reply is set; into
// req's thread, which it opens when it does not exist yet (a
// prospective auto-thread), or into the channel where no thread can be
// opened, which *dest then names, so the send's later pieces go there
// at once. ms is piece part of the send: its requests carry the piece's
// nonce (createMessage), and when Discord answers a retry with the
// message an earlier attempt posted, showing other text (a stream
// update's, asked for again by the final), that message is edited to
// show this send's (overEarlier).
func (p *Platform) post(ctx context.Context, req *deliveryv1.SendRequested, dest *string, ms *discordgo.MessageSend, files uploads, reply bool, part int) (string, error) {
	t := req.GetTarget()
	ch := *dest
	n := nonce(req.GetIdempotencyKey(), part)
	retry := n != "" && retrying(ctx, part)
	// A button press's id (press:…) names no message to reply to, and an
	// auto-thread's first message (its id is the thread's) is in the
	// channel the thread grew from, where no reply in the thread can
	// point.
	if r := t.GetReplyToMessageId(); snowflake(r) && reply && ch == t.GetChatId() && r != ch {
		no := false
		ms.Reference = &discordgo.MessageReference{MessageID: r, ChannelID: ch, FailIfNotExists: &no}
	}
	post := func() (*discordgo.Message, error) {
		ms.Files = files.parts() // a second post reads the files afresh
		return p.createMessage(ctx, ch, ms, n)
	}
	m, err := post()
	if err != nil && ch != t.GetChatId() && isCode(err, discordgo.ErrCodeUnknownChannel) {
		if _, terr := p.s.MessageThreadStartComplex(t.GetChatId(), ch, &discordgo.ThreadStart{Name: threadName(req), AutoArchiveDuration: 1440}, opts(ctx)...); terr != nil {
			if !refused(terr) {
				return "", sendError("start thread", terr)
			}
			// No thread can be opened here (no Create Public Threads
			// permission, a message gone): as Hermes's inline fallback,
			// the answer goes to the channel, replying to the message
			// the thread was to grow from, rather than nowhere.
			p.log.Warn("discord thread not opened; answering in the channel", "chat_id", t.GetChatId(), "err", terr)
			ch = t.GetChatId()
			*dest = ch
			if reply {
				no := false
				ms.Reference = &discordgo.MessageReference{MessageID: t.GetThreadId(), ChannelID: ch, FailIfNotExists: &no}
			}
		}
		m, err = post()
	}
	if err != nil {
		if isCode(err, discordgo.ErrCodeCannotSendMessagesInVoiceChannel) {
			return "", p.noMessages(ctx, ch, err)
		}
		return "", sendError("create message", err)
	}
	if retry && m.Content != ms.Content {
		if err := p.overEarlier(ctx, m, ms); err != nil {
			return "", err
		}
	}
	return m.ID, nil
}

// noMessages is the failure of a message Discord refused because
// channel ch takes none (400, code 50008: "Cannot send messages in a
// non-text channel"). Mostly a forum or media channel named as a cron
// job's or a proactive send's chat, which takes posts (threads) only.
// Hermes opens a post there; an answer here is several sends (its
// chunks, a stream's edits, its tool progress), each of which would
// need the post the first opened, so the send fails as permanent and
// says what to name instead.
func (p *Platform) noMessages(ctx context.Context, ch string, err error) error {
	what := "a channel that takes no messages"
	if ci, lerr := p.channel(ctx, ch); lerr == nil && ci.Posts {
		what = "a forum (or media) channel, which takes posts, not messages: name one of its posts (a thread) or a text channel instead"
	}
	return platform.Permanent(fmt.Errorf("discord create message: chat %s is %s: %w", ch, what, err))
}

// retrying records, for the send being performed with ctx, that an
// attempt is about to post piece part, and reports whether an earlier
// attempt did so first: its message may exist, which the nonce makes
// Discord answer with. False when the send keeps no records (no
// idempotency key, or no receipts bucket). True when it keeps them but
// the mark could not be written or read: the attempt may be a retry,
// and taking it for the first would leave an earlier attempt's other
// text (a stream update's) under a receipt that says this send's shows;
// at worst a first attempt's message is edited to the same text.
func retrying(ctx context.Context, part int) bool {
	if _, records := platform.SendTag(ctx, part); !records {
		return false
	}
	mine := strconv.FormatUint(rand.Uint64(), 36)
	first, ok := platform.SendMark(ctx, "posting"+strconv.Itoa(part), mine)
	return !ok || first != mine
}

// overEarlier makes m, the message an earlier attempt of this send
// posted, found again by its nonce, show ms's text and buttons: the
// earlier attempt carried other text (a stream update whose answer was
// lost, the final now sending the whole answer under the same key).
// Without this the chat would keep the stale text, cursor and all, and
// delivery would take the answer for shown. A text that only differs
// by what Discord changed in it is edited to the same text, which
// changes nothing that shows but the edited mark.
func (p *Platform) overEarlier(ctx context.Context, m *discordgo.Message, ms *discordgo.MessageSend) error {
	ch := m.ChannelID
	if ch == "" {
		return errors.New("discord create message: the message found by its nonce names no channel")
	}
	content, shown := ms.Content, ms.Components
	if shown == nil {
		shown = []discordgo.MessageComponent{}
	}
	me := &discordgo.MessageEdit{ID: m.ID, Channel: ch, Content: &content, Components: &shown, AllowedMentions: ms.AllowedMentions}
	if _, err := p.s.ChannelMessageEditComplex(me, opts(ctx)...); err != nil {
		return sendError("edit the message an earlier attempt posted", err)
	}
	p.log.Info("discord message posted by an earlier attempt edited to this send's text", "chat_id", ch, "message_id", m.ID)
	return nil
}

// messageCreate is the body of a create message: discordgo's
// MessageSend, which has no nonce, with Discord's nonce and
// enforce_nonce beside its fields.
type messageCreate struct {
	*discordgo.MessageSend
	Nonce        string `json:"nonce,omitempty"`
	EnforceNonce bool   `json:"enforce_nonce,omitempty"`
}

// createMessage posts ms (its Files in a multipart body) into channel
// ch, as discordgo's ChannelMessageSendComplex does, with nonce and
// enforce_nonce when nonce is set: Discord then answers a create with
// the nonce of one of the bot's messages of the past few minutes with
// that message, and makes none. So a send whose answer was lost (a
// timeout, a connection reset after the request went out), which
// delivery asks for again under the same idempotency key, is not
// posted a second time.
func (p *Platform) createMessage(ctx context.Context, ch string, ms *discordgo.MessageSend, nonce string) (*discordgo.Message, error) {
	body := messageCreate{MessageSend: ms, Nonce: nonce, EnforceNonce: nonce != ""}
	endpoint := discordgo.EndpointChannelMessages(ch)
	var answer []byte
	var err error
	if len(ms.Files) > 0 {
		contentType, data, encErr := discordgo.MultipartBodyWithJSON(body, ms.Files)
		if encErr != nil {
			return nil, platform.Permanent(fmt.Errorf("encode message: %w", encErr))
		}
		answer, err = p.s.RequestRaw(http.MethodPost, endpoint, contentType, data, endpoint, 0, opts(ctx)...)
	} else {
		answer, err = p.s.RequestWithBucketID(http.MethodPost, endpoint, body, endpoint, opts(ctx)...)
	}
	if err != nil {
		return nil, err
	}
	var m discordgo.Message
	if err := discordgo.Unmarshal(answer, &m); err != nil {
		return nil, fmt.Errorf("decode created message: %w", err)
	}
	return &m, nil
}

// nonce is the nonce of piece part of the send keyed key ("" without a
// key: no nonce): 25 hex digits (100 bits) of a hash of both, the most
// Discord takes. It depends on nothing else, so every attempt of the
// send, on any replica and after any restart, asks with the same one.
func nonce(key string, part int) string {
	if key == "" {
		return ""
	}
	sum := sha256.Sum256([]byte(key + "\x00" + strconv.Itoa(part)))
	return hex.EncodeToString(sum[:])[:maxNonce]
}

// maxNonce is the longest nonce Discord takes.
const maxNonce = 25

// maxText is the most characters a Discord message's content takes.
const maxText = 2000

// maxUpload is the largest file a bot may upload to Discord (10 MiB in
// a server without boosts), and maxFiles the files one message takes.
// maxRequest is the largest request Discord takes to create a message,
// its files and all (25 MiB); one over it is refused whole, 413 (code
// 40005), so files over it together go as several messages.
// requestSlack is what a request's files leave of maxRequest for the
// rest of its body: the message's JSON (2,000 characters, escaped, and
// its buttons) and the multipart boundaries and headers.
const (
	maxUpload    = 10 << 20
	maxFiles     = 10
	maxRequest   = 25 << 20
	requestSlack = 256 << 10
	// maxSendBytes bounds the files one send reads into memory before
	// posting them (four requests' worth, the most the ten files a send
	// took before it went over several messages): an answer with more
	// fails as permanent, saying so, rather than the gateway holding
	// hundreds of megabytes for it.
	maxSendBytes = 100 << 20
)

// upload is a file to post with a message.
type upload struct {
	name, mimeType string
	data           []byte
}

type uploads []upload

// parts are the files as discordgo posts them, each read from its start.
func (us uploads) parts() []*discordgo.File {
	if len(us) == 0 {
		return nil
	}
	out := make([]*discordgo.File, len(us))
	for i, u := range us {
		out[i] = &discordgo.File{Name: u.name, ContentType: u.mimeType, Reader: bytes.NewReader(u.data)}
	}
	return out
}

// batches splits the files, in order, into the groups that go with one
// message each: each group within maxRequest (a file within maxUpload
// fits any) and maxFiles, however many files there are. Always at least
// one group, empty when there are no files.
func (us uploads) batches() []uploads {
	out := []uploads{nil}
	size := 0
	for _, u := range us {
		n := len(u.data) + len(u.name) + len(u.mimeType) + 256 // the part's headers
		if cur := out[len(out)-1]; len(cur) >= maxFiles || (len(cur) > 0 && size+n > maxRequest-requestSlack) {
			out, size = append(out, nil), 0
		}
		out[len(out)-1] = append(out[len(out)-1], u)
		size += n
	}
	return out
}

// media is what a send with the agent's attachments posts: the text,
// then for each attachment its caption and, for an http(s) URL, the
// link (Discord shows the picture or a preview); an attachment that is
// bytes (a data: URL, or kept in the attachment store) is uploaded with
// the message. An attachment Discord cannot take (over maxUpload, kept
// bytes without a store) fails the send as permanent, rather than the
// message going out without it.
func (p *Platform) media(ctx context.Context, req *deliveryv1.SendRequested) (string, uploads, error) {
	if len(req.GetAttachments()) == 0 {
		return req.GetText(), nil, nil
	}
	text, idx := platform.LinkedText(req)
	var files uploads
	total := 0
	for _, i := range idx {
		a := req.GetAttachments()[i]
		data, mimeType, err := platform.ReadOutbound(ctx, a, p.store, nil, maxUpload)
		if err != nil {
			return "", nil, fmt.Errorf("discord attachment %d: %w", i, err)
		}
		if total += len(data); total > p.sendBytes {
			return "", nil, platform.Permanent(fmt.Errorf("discord attachments: over %d MiB of files in one send (at attachment %d of %d)",
				p.sendBytes>>20, i+1, len(req.GetAttachments())))
		}
		name := platform.FileName(a, mimeType)
		files = append(files, upload{name: name, mimeType: mimeType, data: data})
	}
	return text, files, nil
}

func threadName(req *deliveryv1.SendRequested) string {
	name := strings.Join(strings.Fields(req.GetText()), " ")
	if r := []rune(name); len(r) > 80 {
		name = string(r[:80])
	}
	if name == "" {
		name = "Reply"
	}
	return name
}

// Edit replaces a message's text, for streaming, an approval prompt's
// answer and a picker's page or answer. components=[] takes the buttons
// off; a picker's page shows its own.
func (p *Platform) Edit(ctx context.Context, req *deliveryv1.SendRequested) error {
	if err := checkIDs(req, true); err != nil {
		return err
	}
	if n := len([]rune(req.GetText())); n == 0 || n > 2000 {
		return platform.Permanent(fmt.Errorf("discord edit of %d characters (1 to 2000)", n))
	}
	text, shown := req.GetText(), []discordgo.MessageComponent{}
	if c := components(req); c != nil {
		shown = c // a picker's next page
	}
	// An edit's mentions are parsed afresh, by Discord's defaults unless
	// the edit says otherwise: a streamed answer reaches its final text
	// by edits, so they carry the same allowed_mentions as a send.
	me := &discordgo.MessageEdit{ID: req.GetMessageId(), Channel: where(req.GetTarget()), Content: &text, Components: &shown,
		AllowedMentions: p.cfg.AllowMentions.allowed()}
	if _, err := p.s.ChannelMessageEditComplex(me, opts(ctx)...); err != nil {
		return sendError("edit message", err)
	}
	return nil
}

// Delete removes a message.
func (p *Platform) Delete(ctx context.Context, req *deliveryv1.SendRequested) error {
	if err := checkIDs(req, true); err != nil {
		return err
	}
	if err := p.s.ChannelMessageDelete(where(req.GetTarget()), req.GetMessageId(), opts(ctx)...); err != nil {
		return sendError("delete message", err)
	}
	return nil
}

// Typing triggers the typing indicator (it lasts about 10 s).
func (p *Platform) Typing(ctx context.Context, req *deliveryv1.SendRequested) error {
	if err := checkIDs(req, false); err != nil {
		return err
	}
	t := req.GetTarget()
	err := p.s.ChannelTyping(where(t), opts(ctx)...)
	if err != nil && where(t) != t.GetChatId() && isCode(err, discordgo.ErrCodeUnknownChannel) {
		// A prospective auto-thread, which the answer's first send opens:
		// until then the bot types in the channel the message is in.
		err = p.s.ChannelTyping(t.GetChatId(), opts(ctx)...)
	}
	if err != nil {
		return sendError("trigger typing", err)
	}
	return nil
}

func isCode(err error, code int) bool {
	var re *discordgo.RESTError
	return errors.As(err, &re) && re.Message != nil && re.Message.Code == code
}

// sendError classifies a REST error: 429 → rate limited with the
// bucket's retry_after, other 4xx → permanent, the rest retryable.
func sendError(op string, err error) error {
	var rl *discordgo.RateLimitError
	if errors.As(err, &rl) && rl.RateLimit != nil && rl.TooManyRequests != nil {
		return platform.RateLimited(fmt.Errorf("discord %s: rate limited (bucket %q): %w", op, rl.Bucket, err), rl.RetryAfter)
	}
	err = fmt.Errorf("discord %s: %w", op, err)
	var re *discordgo.RESTError
	if errors.As(err, &re) && re.Response != nil {
		if c := re.Response.StatusCode; c >= 400 && c < 500 && c != http.StatusTooManyRequests && c != http.StatusRequestTimeout {
			return platform.Permanent(err)
		}
	}
	return err
}
