// Package slack is the Slack gateway (`switchboard gateway slack`): Socket
// Mode when an app token is set, else the Events API over HTTP with
// signing-secret verification; chat.postMessage and chat.update for
// replies. Built on github.com/slack-go/slack and the platform kit. Shared
// files are published as their url_private_download (or url_private) and
// downloaded with the bot token (Platform.Fetch) only when a turn reads
// them, by any replica.
package slack

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"sync/atomic"
	"time"
	"unicode/utf8"

	slackapi "github.com/slack-go/slack"
	"github.com/slack-go/slack/socketmode"

	"github.com/switchboard-chat/switchboard/pkg/attachment"
	"github.com/switchboard-chat/switchboard/pkg/bus"
	"github.com/switchboard-chat/switchboard/pkg/chunk"
	deliveryv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/delivery/v1"
	eventsv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/events/v1"
	"github.com/switchboard-chat/switchboard/pkg/markup"
	"github.com/switchboard-chat/switchboard/pkg/platform"
)

// Config is the gateways.slack section.
type Config struct {
	// BotToken (xoxb-…, SLACK_BOT_TOKEN) calls the Web API.
	BotToken string `koanf:"bot_token"`
	// AppToken (xapp-…, SLACK_APP_TOKEN) turns on Socket Mode.
	AppToken string `koanf:"app_token"`
	// SigningSecret (SLACK_SIGNING_SECRET) verifies Events API requests
	// when Socket Mode is off.
	SigningSecret string `koanf:"signing_secret"`
	// APIBaseURL (SLACK_API_BASE_URL) is the Web API base, ending in /api/.
	APIBaseURL string `koanf:"api_base_url"`
	// Addr serves the Events API (HTTP mode only).
	Addr string `koanf:"addr"`
	// Path of the Events API endpoint.
	Path string `koanf:"path"`
	// AllowBots (SLACK_ALLOW_BOTS, as in Hermes) says which messages of
	// other bots are published, marked is_bot: "none" (default),
	// "mentions" (those that mention this bot) or "all"; true and false,
	// from before it had modes, are "all" and "none". Unset, it follows
	// router.auth.allow_bots.slack, so the router's setting is not
	// dropped here before it can apply. The bot's own messages are never
	// published.
	AllowBots string `koanf:"allow_bots"`
	// RequireMention (SLACK_REQUIRE_MENTION, default true, as in Hermes):
	// in channels the bot answers only messages that mention it, and
	// replies in the threads of messages it answered or posted.
	RequireMention bool `koanf:"require_mention"`
	// FreeResponseChannels (SLACK_FREE_RESPONSE_CHANNELS) are channels
	// answered without a mention.
	FreeResponseChannels []string `koanf:"free_response_channels"`
	// MaxBodyBytes bounds one Events API request.
	MaxBodyBytes int64 `koanf:"max_body_bytes"`
	// AckTimeout bounds publishing an HTTP event before answering Slack,
	// which gives up after 3 s.
	AckTimeout time.Duration `koanf:"ack_timeout"`
	// Reactions (SLACK_REACTIONS, default true, as in Hermes): the user's
	// message shows :eyes: while the agent works on it, then
	// :white_check_mark: when the answer was sent, :x: when the turn
	// failed, nothing when it was interrupted. As in Hermes, only
	// messages addressed to the bot are marked (a DM, a group DM, a
	// mention; normalize sets no_reaction on the others). Needs the
	// reactions:write scope.
	Reactions bool `koanf:"reactions"`
	// ReplyInThread (default true, as Hermes's
	// platforms.slack.extra.reply_in_thread): a channel message outside
	// a thread is answered in the thread it starts. Off, as in Hermes,
	// that answer goes to the channel's top level instead (its session
	// is still the thread's: a reply in the thread continues it, a new
	// message at the top level starts another); a message in a thread is
	// answered there either way.
	ReplyInThread bool `koanf:"reply_in_thread"`
	// DMTopLevelThreadsAsSessions (default true, as Hermes's
	// platforms.slack.extra.dm_top_level_threads_as_sessions): a DM
	// message outside a thread is keyed by the thread it starts (its own
	// ts), as a channel message is, so each top-level DM is a session of
	// its own, answered in its thread, and the replies in that thread
	// continue it. Off, as Hermes's legacy behaviour, a DM's top level is
	// one session, answered at the top level. Group DMs (mpim) are DMs.
	DMTopLevelThreadsAsSessions bool `koanf:"dm_top_level_threads_as_sessions"`
}

// DefaultConfig has the defaults.
func DefaultConfig() Config {
	return Config{
		APIBaseURL: slackapi.APIURL, Addr: "127.0.0.1:8644", Path: "/slack/events",
		MaxBodyBytes: 4 << 20, AckTimeout: 2500 * time.Millisecond, RequireMention: true, Reactions: true,
		ReplyInThread: true, DMTopLevelThreadsAsSessions: true,
	}
}

// Enabled reports whether the gateway has what it needs to start; dev
// starts it only then.
func (c Config) Enabled() bool { return c.BotToken != "" }

// Validate checks the section without changing it.
func (c Config) Validate() error { return c.validate() }

func (c *Config) validate() error {
	d := DefaultConfig()
	if c.BotToken == "" {
		return errors.New("slack: bot_token (SLACK_BOT_TOKEN) is required")
	}
	if c.AppToken == "" && c.SigningSecret == "" {
		return errors.New("slack: set app_token (SLACK_APP_TOKEN) for Socket Mode or signing_secret (SLACK_SIGNING_SECRET) for the Events API")
	}
	if c.APIBaseURL == "" {
		c.APIBaseURL = d.APIBaseURL
	}
	if !strings.HasSuffix(c.APIBaseURL, "/") {
		c.APIBaseURL += "/"
	}
	if c.Addr == "" {
		c.Addr = d.Addr
	}
	if c.Path == "" {
		c.Path = d.Path
	}
	if c.MaxBodyBytes <= 0 {
		c.MaxBodyBytes = d.MaxBodyBytes
	}
	if c.AckTimeout <= 0 {
		c.AckTimeout = d.AckTimeout
	}
	if _, err := platform.ParseBotMode(c.AllowBots); err != nil {
		return fmt.Errorf("slack: allow_bots (SLACK_ALLOW_BOTS): %w", err)
	}
	return nil
}

// Deps are the shared clients.
type Deps struct {
	Log *slog.Logger
	Bus *bus.Bus
	// Runner tunes the platform runner (tests shorten backoffs).
	Runner platform.Options
	// HTTPClient for the Web API and file downloads; nil uses a default
	// client.
	HTTPClient *http.Client
}

// Service runs the Slack gateway.
type Service struct {
	platform.Service
	p *Platform
}

// New builds the gateway without calling Slack: Run checks the token
// with auth.test (SignIn) until Slack answers, unready meanwhile, so a
// gateway started while Slack is out of reach waits for it; a refused
// token ends Run.
func New(cfg Config, deps Deps) (*Service, error) {
	if deps.Bus == nil {
		return nil, errors.New("slack: bus is required")
	}
	log := deps.Log
	if log == nil {
		log = slog.Default()
	}
	p, err := newPlatform(cfg, log, deps.HTTPClient)
	if err != nil {
		return nil, err
	}
	svc, err := platform.NewService(p, deps.Bus, log, deps.Runner)
	if err != nil {
		return nil, err
	}
	p.runner = svc.Runner()
	if deps.Runner.Attachments.Enabled {
		p.store = attachment.Open(deps.Bus.JetStream(), deps.Bus.Topology(), deps.Runner.Attachments)
	}
	return &Service{Service: svc, p: p}, nil
}

// Platform is the Slack side of the kit.
type Platform struct {
	cfg    Config
	log    *slog.Logger
	api    *slackapi.Client
	hc     *http.Client // downloads files (Fetch)
	id     identity
	runner *platform.Runner
	// store holds the attachments a send refers to by bytes_ref (nil:
	// attachments are off).
	store *attachment.Store
	// readWarned is set once a read-back was refused and said so.
	readWarned atomic.Bool

	eventsAddr atomic.Value // string
}

// NewPlatform validates cfg and learns the bot's identity (auth.test).
func NewPlatform(ctx context.Context, cfg Config, log *slog.Logger, hc *http.Client) (*Platform, error) {
	p, err := newPlatform(cfg, log, hc)
	if err != nil {
		return nil, err
	}
	if err := p.SignIn(ctx); err != nil {
		return nil, err
	}
	return p, nil
}

// newPlatform validates cfg and builds the platform without calling
// Slack; SignIn learns the bot's identity.
func newPlatform(cfg Config, log *slog.Logger, hc *http.Client) (*Platform, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	if hc == nil {
		hc = &http.Client{} // slack-go's default; the Runner bounds each download
	}
	opts := []slackapi.Option{slackapi.OptionAPIURL(cfg.APIBaseURL), slackapi.OptionHTTPClient(hc)}
	if cfg.AppToken != "" {
		opts = append(opts, slackapi.OptionAppLevelToken(cfg.AppToken))
	}
	api := slackapi.New(cfg.BotToken, opts...)
	bots, _ := platform.ParseBotMode(cfg.AllowBots) // validate checked it
	return &Platform{
		cfg: cfg, log: log.With("platform", "slack"), api: api, hc: hc,
		id: identity{Bots: bots, RequireMention: cfg.RequireMention, FreeChannels: platform.IDSet(cfg.FreeResponseChannels),
			DMThreads: cfg.DMTopLevelThreadsAsSessions},
	}, nil
}

// SignIn checks the bot token with auth.test and learns the bot's
// identity, its user id the account (platform.SignInner). A token Slack
// refuses is Fatal; anything else (Slack out of reach, a 5xx) is
// retried.
func (p *Platform) SignIn(ctx context.Context) error {
	auth, err := p.api.AuthTestContext(ctx)
	if err != nil {
		var se slackapi.SlackErrorResponse
		var sc slackapi.StatusCodeError
		switch {
		case errors.As(err, &se) && refusedToken[se.Err], refusedToken[err.Error()],
			errors.As(err, &sc) && (sc.Code == http.StatusUnauthorized || sc.Code == http.StatusForbidden):
			return platform.Fatal(fmt.Errorf("slack refused the bot token (check SLACK_BOT_TOKEN): auth.test: %w", err))
		}
		return fmt.Errorf("slack auth.test: %w", err)
	}
	p.id.Account, p.id.BotUserID, p.id.BotID = auth.UserID, auth.UserID, auth.BotID
	return nil
}

// refusedToken are Slack's errors for a token no retry makes good.
var refusedToken = map[string]bool{"invalid_auth": true, "account_inactive": true, "not_authed": true, "token_revoked": true,
	"token_expired": true, "not_allowed_token_type": true}

func (p *Platform) Name() string    { return "slack" }
func (p *Platform) Account() string { return p.id.Account }

// Capabilities: Slack takes 40,000 characters; like Hermes we stay below
// with 39,000. Commands start with "!" (Slack keeps "/" for its own
// slash commands).
func (p *Platform) Capabilities() platform.Capabilities {
	return platform.Capabilities{
		MaxLength: 39000, Measure: platform.MeasureRunes,
		CanSend: true, CanEdit: true, CanDelete: true, CanThread: true, CanTyping: true,
		CommandPrefix: "!",
	}
}

// Connect runs Socket Mode, or the Events API server when there is no
// app token.
func (p *Platform) Connect(ctx context.Context, conn platform.Conn) error {
	if p.cfg.AppToken != "" {
		return p.socketMode(ctx, conn)
	}
	return p.serveEvents(ctx, conn)
}

func (p *Platform) socketMode(ctx context.Context, conn platform.Conn) error {
	sm := socketmode.New(p.api, socketmode.OptionReadLimit(p.cfg.MaxBodyBytes))
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- sm.RunContext(ctx) }()
	for {
		select {
		case err := <-done:
			if ctx.Err() != nil {
				return nil
			}
			return classifyConnect(err)
		case evt := <-sm.Events:
			// An envelope whose handling panics is skipped (logged,
			// counted) and acknowledged, so Slack does not send it
			// again; the connection and the envelopes after it go on.
			var envID string
			var raw []byte
			if evt.Request != nil {
				envID, raw = evt.Request.EnvelopeID, evt.Request.Payload
			}
			if !platform.Receive(ctx, conn, p.log, "slack", envID, raw, func() { p.socketEvent(ctx, sm, conn, evt) }) && envID != "" {
				if err := sm.AckCtx(ctx, envID, nil); err != nil {
					p.log.Warn("ack slack envelope", "err", err)
				}
			}
		}
	}
}

func (p *Platform) socketEvent(ctx context.Context, sm *socketmode.Client, conn platform.Conn, evt socketmode.Event) {
	switch evt.Type {
	case socketmode.EventTypeConnected:
		conn.Connected()
	case socketmode.EventTypeEventsAPI:
		if evt.Request == nil {
			return
		}
		if err := p.handle(ctx, conn, evt.Request.Payload); err != nil {
			// Not stored: no ack, Slack delivers it again.
			p.log.Warn("slack event not published; leaving it unacknowledged", "err", err)
			return
		}
		if err := sm.AckCtx(ctx, evt.Request.EnvelopeID, nil); err != nil {
			p.log.Warn("ack slack envelope", "err", err)
		}
	case socketmode.EventTypeErrorBadMessage:
		bad, _ := evt.Data.(*socketmode.ErrorBadMessage)
		var cause error = errMalformed
		if bad != nil {
			cause = bad.Cause
			if envID := envelopeID(bad.Message); envID != "" {
				_ = sm.AckCtx(ctx, envID, nil)
			}
		}
		conn.Reject(ctx, "malformed socket mode envelope", cause)
	case socketmode.EventTypeSlashCommand:
		if evt.Request == nil {
			return
		}
		if err := p.handleSlash(ctx, conn, evt.Data); err != nil {
			// Not stored: no ack, and Slack tells the user it failed.
			p.log.Warn("slack slash command not published; leaving it unacknowledged", "err", err)
			return
		}
		_ = sm.AckCtx(ctx, evt.Request.EnvelopeID, nil)
	case socketmode.EventTypeInteractive:
		if evt.Request == nil {
			return
		}
		if err := p.handlePress(ctx, conn, evt.Data); err != nil {
			// Not stored: no ack, Slack delivers it again.
			p.log.Warn("slack button press not published; leaving it unacknowledged", "err", err)
			return
		}
		if err := sm.AckCtx(ctx, evt.Request.EnvelopeID, nil); err != nil {
			p.log.Warn("ack slack envelope", "err", err)
		}
	}
}

// handlePress publishes an approval button's press (see pressed); nil
// means acknowledge it (published, duplicate, skipped or rejected).
func (p *Platform) handlePress(ctx context.Context, conn platform.Conn, data any) error {
	cb, ok := data.(slackapi.InteractionCallback)
	if !ok {
		conn.Reject(ctx, "malformed interactive payload", fmt.Errorf("%w: interactive payload %T", errMalformed, data))
		return nil
	}
	ev, why := pressed(cb, p.id)
	if ev == nil {
		p.log.Debug("slack interaction skipped", "why", string(why))
		return nil
	}
	if _, err := conn.Deliver(ctx, ev); err != nil && !errors.Is(err, platform.ErrRejected) {
		return err
	}
	return nil
}

// handleSlash publishes a slash command (see slash); nil means
// acknowledge it.
func (p *Platform) handleSlash(ctx context.Context, conn platform.Conn, data any) error {
	cmd, ok := data.(slackapi.SlashCommand)
	if !ok {
		conn.Reject(ctx, "malformed slash command", fmt.Errorf("%w: slash command payload %T", errMalformed, data))
		return nil
	}
	ev, why := slash(cmd, p.id)
	if ev == nil {
		conn.Reject(ctx, "malformed slash command", fmt.Errorf("%w: %s", errMalformed, why))
		return nil
	}
	if _, err := conn.Deliver(ctx, ev); err != nil && !errors.Is(err, platform.ErrRejected) {
		return err
	}
	return nil
}

// handle normalizes and publishes one event_callback payload. nil means
// acknowledge it (published, duplicate, skipped or rejected); an error
// means it was not stored.
func (p *Platform) handle(ctx context.Context, conn deliverer, raw []byte) error {
	ev, why, err := normalize(raw, p.id)
	if err != nil {
		conn.Reject(ctx, "malformed slack event", err)
		return nil
	}
	if root := ev.GetSource().GetThreadId(); why == skipUnaddressed && root != "" && root != ev.GetMessageId() {
		// A reply in the thread of a message the bot answered (a
		// channel message outside a thread has its own ts as thread).
		known, err := conn.Seen(ctx, ev.GetSource().GetChatId()+":"+root)
		if err != nil {
			return err // not acknowledged: Slack sends it again
		}
		if known {
			why = ""
		}
	}
	if why != "" {
		p.log.Debug("slack event skipped", "why", string(why))
		return nil
	}
	if needsFileInfo(ev) {
		// A copy of a message published already (Slack's retry, the
		// app_mention sent with the message event) is a duplicate
		// before it costs files.info calls, as Hermes checks its dedup
		// first (gateway/platforms/slack.py, _handle_slack_message).
		// Deliver checks again; a failed lookup leaves it to Deliver
		// and the bus dedupe.
		switch seen, err := conn.Seen(ctx, ev.GetEventId()); {
		case err != nil:
			p.log.Warn("slack: duplicate check before files.info failed", "err", err)
		case seen:
			p.log.Debug("slack event already published; files.info not called", "event_id", ev.GetEventId())
			p.followMention(ctx, ev) // as Deliver's duplicate does
			return nil
		}
		p.completeFiles(ctx, ev)
	}
	switch _, err := conn.Deliver(ctx, ev); {
	case err == nil:
		p.followMention(ctx, ev)
	case !errors.Is(err, platform.ErrRejected):
		return err
	}
	return nil
}

// followMention records the thread of a published channel reply that
// mentions the bot under the event id its thread's replies are checked
// against (handle), so that, as in Hermes (its mentioned threads), the
// later replies in that thread reach the agent without a mention, as
// they do in the thread of a message that mentioned it. Best effort.
func (p *Platform) followMention(ctx context.Context, ev *eventsv1.MessageReceived) {
	root := ev.GetSource().GetThreadId()
	if p.runner == nil || !ev.GetMentioned() || root == "" || root == ev.GetMessageId() || ev.GetSource().GetChatType() == "dm" {
		return
	}
	if err := p.runner.MarkSeen(context.WithoutCancel(ctx), ev.GetSource().GetChatId()+":"+root); err != nil {
		p.log.Warn("slack: record the thread the bot was mentioned in", "err", err)
	}
}

// deliverer is the part of platform.Conn handle needs (the HTTP handler
// delivers through the Runner).
type deliverer interface {
	Deliver(ctx context.Context, ev *eventsv1.MessageReceived) (platform.Accepted, error)
	Reject(ctx context.Context, reason string, err error)
	Seen(ctx context.Context, eventID string) (bool, error)
}

func classifyConnect(err error) error {
	if err == nil {
		return errors.New("socket mode stopped")
	}
	if refusedToken[err.Error()] {
		return platform.Fatal(fmt.Errorf("slack socket mode: %w", err))
	}
	var sc slackapi.StatusCodeError
	if errors.As(err, &sc) && (sc.Code == http.StatusNotFound || sc.Code == http.StatusUnauthorized || sc.Code == http.StatusForbidden) {
		return platform.Fatal(fmt.Errorf("slack socket mode: %w", err))
	}
	return fmt.Errorf("slack socket mode: %w", err)
}

// text is the text option of every send and edit (streamed text arrives
// as edits). The model writes Markdown; Slack reads mrkdwn, so it is
// converted (**bold** → *bold*, [text](url) → <url|text>, headings to
// bold) and everything else in it is escaped as Slack asks
// (& < > as &amp; &lt; &gt;, see
// https://api.slack.com/reference/surfaces/formatting#escaping): left
// as is, <!channel>, <!here> or <@U…> in it would ping people and
// <https://…|label> would disguise a link. Plain text is only escaped.
func text(req *deliveryv1.SendRequested) slackapi.MsgOption {
	return slackapi.MsgOptionText(rendered(req), false)
}

// maxText is the longest text Slack takes in a message (longer:
// msg_too_long, which no retry mends).
const maxText = 40000

// rendered is the request's text as Slack shows it (see text).
//
// Delivery cuts Slack replies at 39,000 characters counted as they are
// once escaped (chunk.EscapedRunes), so the escaped text always fits.
// The mrkdwn conversion can grow a little more (a "|" in a link's
// address becomes "%7C", a link labelled with another address gains
// "(<…>)"): a part it would take past maxText goes out escaped only,
// without formatting, rather than being refused. Hermes also keeps
// its limit on the formatted text (it converts, then splits).
func rendered(req *deliveryv1.SendRequested) string {
	escaped := markup.Slack.Escape(req.GetText())
	if req.GetFormat() == deliveryv1.TextFormat_TEXT_FORMAT_PLAIN {
		return escaped
	}
	if s := markup.Slack.Convert(req.GetText()); utf8.RuneCountInString(s) <= maxText {
		return s
	}
	return escaped
}

// Send posts a message; a target thread id becomes thread_ts.
func (p *Platform) Send(ctx context.Context, req *deliveryv1.SendRequested) (string, error) {
	if len(req.GetAttachments()) > 0 {
		return p.sendMedia(ctx, req)
	}
	return p.sendText(ctx, req, 0)
}

// sendText posts req's text as piece part of its send (chat.postMessage).
// A keyed send's message carries its piece's marker (sendMarker) in its
// metadata, and an attempt that may follow one whose answer was lost
// reads the bot's messages back first: a message an earlier attempt
// posted is taken for this one, edited to this send's text when it shows
// another (a stream update whose answer was lost, the final now sending
// the whole answer under the same key), instead of the answer being
// posted twice. A read Slack refuses (no history scope) leaves it to
// post, as without the read.
func (p *Platform) sendText(ctx context.Context, req *deliveryv1.SendRequested, part int) (string, error) {
	t := req.GetTarget()
	if req.GetText() == "" {
		return "", platform.Permanent(errors.New("slack message without text"))
	}
	body := rendered(req)
	opts := []slackapi.MsgOption{slackapi.MsgOptionText(body, false)}
	// Buttons only in Socket Mode: over HTTP the gateway serves no
	// interactivity endpoint, so a press could not reach it.
	blocks := approvalBlocks(req.GetApproval(), body)
	if p.cfg.AppToken == "" {
		blocks = nil
	}
	if blocks != nil {
		// The text stays as the notification's fallback.
		opts = append(opts, slackapi.MsgOptionBlocks(blocks...))
	}
	thread := p.thread(t)
	if req.GetApproval() != nil {
		// An approval prompt goes into the session's thread even with
		// reply_in_thread off, as Hermes's send_exec_approval (and its
		// text fallback) resolve the thread without the message being
		// answered: a press is keyed by the prompt's thread, and at the
		// top level it would reach a session with no call waiting.
		thread = t.GetThreadId()
	}
	if thread != "" {
		opts = append(opts, slackapi.MsgOptionTS(thread))
	}
	if marker := sendMarker(req.GetIdempotencyKey(), part); marker != "" {
		opts = append(opts, metadata(marker))
		if since, retry := earlier(ctx, part, time.Now()); retry {
			m, err := p.findSent(ctx, t.GetChatId(), thread, since, marker)
			switch {
			case errors.Is(err, errReadRefused):
				p.readRefusedOnce(err)
			case err != nil && readFailed(ctx, part):
				return "", err
			case err != nil:
				p.log.Warn("slack: the read-back of an earlier attempt keeps failing; posting, the answer may show twice",
					"chat_id", t.GetChatId(), "err", err)
			case m != nil:
				if m.Text != body {
					_, _, _, err := p.api.UpdateMessageContext(ctx, t.GetChatId(), m.Timestamp, slackapi.MsgOptionText(body, false), slackapi.MsgOptionBlocks(blocks...))
					if err != nil {
						return "", sendError("chat.update (the message an earlier attempt posted)", err)
					}
					p.log.Info("slack message posted by an earlier attempt edited to this send's text", "chat_id", t.GetChatId(), "ts", m.Timestamp)
				}
				if thread == "" {
					p.followThread(ctx, t, m.Timestamp)
				}
				return m.Timestamp, nil
			}
		}
	}
	_, ts, err := p.api.PostMessageContext(ctx, t.GetChatId(), opts...)
	if err != nil {
		return "", sendError("chat.postMessage", err)
	}
	if thread == "" {
		p.followThread(ctx, t, ts)
	}
	return ts, nil
}

// maxUpload bounds a file the gateway uploads (it is read into memory;
// Slack takes far larger ones).
const maxUpload = 50 << 20

// sendMedia posts the agent's media (a media reply, a proactive send
// with files): the text, the captions and the links of http(s)
// attachments as one message (Slack unfurls them), then each attachment
// that is bytes (a data: URL, or kept in the attachment store) as a
// file shared into the chat and thread (files.getUploadURLExternal, the
// upload, files.completeUploadExternal). Each is a part of the send (the
// message 0, attachment i i+1): a retry after a later part failed skips
// the parts sent already (platform.SentPart). The receipt names the
// first part: the message's ts, or the first file's id.
func (p *Platform) sendMedia(ctx context.Context, req *deliveryv1.SendRequested) (string, error) {
	t := req.GetTarget()
	text, files := platform.LinkedText(req)
	first := ""
	// Delivery cut the text to Slack's limit; the captions and links
	// after it may take it past: then it goes as several messages (the
	// first part 0, the others after the attachments'), the approval's
	// buttons under the last, rather than Slack refusing it.
	if pieces := platform.Pieces(text, chunk.Limits("slack")); len(pieces) > 1 {
		n := len(req.GetAttachments())
		part := func(i int) int {
			if i == 0 {
				return 0
			}
			return n + i
		}
		id, err := platform.SendPieces(ctx, pieces, part, func(ctx context.Context, i int, piece string) (string, error) {
			msg := &deliveryv1.SendRequested{Target: t, Text: piece, Format: req.GetFormat(), IdempotencyKey: req.GetIdempotencyKey()}
			if i == len(pieces)-1 {
				msg.Approval = req.GetApproval()
			}
			return p.sendText(ctx, msg, part(i))
		})
		if err != nil {
			return "", err
		}
		first = id
	} else if text != "" {
		id, sent := platform.SentPart(ctx, 0)
		if !sent {
			msg := &deliveryv1.SendRequested{Target: t, Text: text, Format: req.GetFormat(), Approval: req.GetApproval(), IdempotencyKey: req.GetIdempotencyKey()}
			var err error
			if id, err = p.sendText(ctx, msg, 0); err != nil {
				return "", err
			}
			platform.RecordPart(ctx, 0, id)
		}
		first = id
	}
	for _, i := range files {
		id, sent := platform.SentPart(ctx, i+1)
		if !sent {
			a := req.GetAttachments()[i]
			data, mimeType, err := platform.ReadOutbound(ctx, a, p.store, nil, maxUpload)
			if err != nil {
				return first, fmt.Errorf("slack attachment %d: %w", i, err)
			}
			name := platform.FileName(a, mimeType)
			f, err := p.api.UploadFileContext(ctx, slackapi.UploadFileParameters{Reader: bytes.NewReader(data), FileSize: len(data),
				Filename: name, Title: name, Channel: t.GetChatId(), ThreadTimestamp: p.thread(t)})
			if err != nil {
				return first, sendError("files.uploadV2", err)
			}
			id = f.ID
			platform.RecordPart(ctx, i+1, id)
		}
		if first == "" {
			first = id
		}
	}
	return first, nil
}

// thread is the thread_ts a send to t goes to: t's thread, but with
// reply_in_thread off not the thread a message outside one starts (a
// channel's, or a DM's with dm_top_level_threads_as_sessions: normalize
// keys that message by its own ts), whose answer then goes to the top
// level, as Hermes's _resolve_thread_ts (the thread is the message
// being answered). With reply_in_thread on, an answer to a message
// outside a thread whose session has none (a top-level DM with
// dm_top_level_threads_as_sessions off: one session for the DM's top
// level) goes to the thread of the message it answers, as Hermes's
// _resolve_thread_ts falls back to reply_to: the session stays the
// DM's, and a reply in that thread is keyed by it, as in Hermes. Only
// a message (a ts) starts a thread: the answer to a slash command or a
// button press outside a thread (its message id "slash:…" or
// "press:…", as Hermes's slash event has no message to reply to) goes
// to the top level; as thread_ts that id would put it in a thread no
// one can open, or be refused.
func (p *Platform) thread(t *deliveryv1.Target) string {
	switch {
	case !p.cfg.ReplyInThread && t.GetThreadId() == t.GetReplyToMessageId():
		return ""
	case p.cfg.ReplyInThread && t.GetThreadId() == "" && tsTime(t.GetReplyToMessageId()) != nil:
		return t.GetReplyToMessageId()
	}
	return t.GetThreadId()
}

// followThread records a message the bot posted at a channel's top level
// under the event id its thread's replies are checked against (handle),
// so that, as in Hermes, a reply in the thread of the bot's own message
// reaches the agent without a mention: that is how a Slack user answers
// a message. A reply already in a thread cannot start one, and a DM
// needs no mention. Best effort: the send stands if it fails.
func (p *Platform) followThread(ctx context.Context, t *deliveryv1.Target, ts string) {
	if p.runner == nil || ts == "" || p.thread(t) != "" || strings.HasPrefix(t.GetChatId(), "D") {
		return
	}
	if err := p.runner.MarkSeen(context.WithoutCancel(ctx), t.GetChatId()+":"+ts); err != nil {
		p.log.Warn("slack: record the bot's message for its thread", "err", err)
	}
}

// Edit replaces a message's text (chat.update), for streaming and an
// approval prompt's answer. blocks=[] takes an approval card's section
// and buttons off, so the new text is what the message shows.
func (p *Platform) Edit(ctx context.Context, req *deliveryv1.SendRequested) error {
	_, _, _, err := p.api.UpdateMessageContext(ctx, req.GetTarget().GetChatId(), req.GetMessageId(), text(req), slackapi.MsgOptionBlocks())
	if err != nil {
		return sendError("chat.update", err)
	}
	return nil
}

// Delete removes a message (chat.delete). A message Slack no longer has
// (message_not_found: a retry of a delete whose answer was lost, or one
// deleted by hand) is gone already, which is what was asked, as the
// Telegram and Mattermost gateways take it.
func (p *Platform) Delete(ctx context.Context, req *deliveryv1.SendRequested) error {
	_, _, err := p.api.DeleteMessageContext(ctx, req.GetTarget().GetChatId(), req.GetMessageId())
	if err != nil && !isSlackError(err, "message_not_found") {
		return sendError("chat.delete", err)
	}
	return nil
}

// statusThinking is the assistant status a thread shows while a turn
// runs, Hermes's ("<app> is thinking...").
const statusThinking = "is thinking..."

// Typing shows the turn's thread that the agent works on it, as Hermes's
// send_typing: the thread's assistant status (assistant.threads.setStatus,
// scope chat:write or assistant:write), beside the app's name. Slack has
// no other typing indicator for bots. The status needs a thread: a DM
// answered at its top level (dm_top_level_threads_as_sessions off) shows
// none, as in Hermes. It stays until the app replies in the thread or
// the status is cleared (EndTyping), so delivery's repeated requests keep
// it up after a streamed message cleared it (and past Slack's two-minute
// timeout). Slack may refuse it (a thread it does not take, a token
// without the scope): the error is logged at debug by the Runner and
// the turn's replies go out as before.
func (p *Platform) Typing(ctx context.Context, req *deliveryv1.SendRequested) error {
	return p.setStatus(ctx, req.GetTarget(), statusThinking)
}

// EndTyping clears the status Typing set once the turn's final message
// was sent, or the turn ended without one (platform.TypingEnder), as
// Hermes's stop_typing: Slack clears it by itself only when the app
// replies in the thread, not on the edit that ends a streamed answer,
// an answer at the channel's top level (reply_in_thread off), or a turn
// that said nothing.
func (p *Platform) EndTyping(ctx context.Context, req *deliveryv1.SendRequested) error {
	return p.setStatus(ctx, req.GetTarget(), "")
}

// setStatus sets the assistant status of t's thread ("" clears it);
// without a thread there is none to set.
func (p *Platform) setStatus(ctx context.Context, t *deliveryv1.Target, status string) error {
	if t.GetThreadId() == "" {
		return nil
	}
	err := p.api.SetAssistantThreadsStatusContext(ctx, slackapi.AssistantThreadsSetStatusParameters{
		ChannelID: t.GetChatId(), ThreadTS: t.GetThreadId(), Status: status})
	if err != nil {
		return sendError("assistant.threads.setStatus", err)
	}
	return nil
}

// rateLimitWait is how long a rate-limited call waits when Slack names
// no wait: its "ratelimited" error code, or a 429 without Retry-After
// (Slack always sends one; a proxy in front of it may not).
// chat.postMessage takes about one message a second in a channel.
const rateLimitWait = time.Second

// retryableCodes are Slack error codes worth retrying; every other error
// code is permanent.
var retryableCodes = map[string]bool{"internal_error": true, "fatal_error": true, "service_unavailable": true, "request_timeout": true}

func sendError(method string, err error) error {
	err = fmt.Errorf("slack %s: %w", method, err)
	var rl *slackapi.RateLimitedError
	if errors.As(err, &rl) {
		return platform.RateLimited(err, rl.RetryAfter)
	}
	var se slackapi.SlackErrorResponse
	if errors.As(err, &se) {
		if se.Err == "ratelimited" {
			return platform.RateLimited(err, rateLimitWait)
		}
		if retryableCodes[se.Err] {
			return err
		}
		return platform.Permanent(err)
	}
	var sc slackapi.StatusCodeError
	if errors.As(err, &sc) && sc.Code == http.StatusTooManyRequests {
		// A 429 without Retry-After (slack-go reports the bare status).
		return platform.RateLimited(err, rateLimitWait)
	}
	if errors.As(err, &sc) && sc.Code >= 400 && sc.Code < 500 {
		return platform.Permanent(err)
	}
	return err
}
