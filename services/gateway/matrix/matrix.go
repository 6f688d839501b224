// Package matrix is the Matrix gateway (`switchboard gateway matrix`), a
// client of a homeserver's client-server API through mautrix-go
// (maunium.net/go/mautrix). It reproduces Hermes's Matrix adapter
// (gateway/platforms/matrix.py): one replica per bot account runs the
// /sync long poll (the kit's lease), every replica serves sends, edits
// (m.replace, so answers stream by editing), reactions (m.annotation),
// typing, read receipts and the workers' media downloads (mxc://).
//
// Unlike Hermes, which keeps its sync position in memory and skips what
// is older than its start, the gateway stores the next_batch token in a
// NATS KV bucket and moves it only after every message of the batch was
// published: a restart or a lease handover resumes where the last
// published batch ended, and what a crash makes it read twice the kit's
// dedupe (the Matrix event id) drops.
//
// Chats are named as in Hermes, so session keys carry over: a room by its
// room id ("!abc:example.org"), a DM or a room ("dm" or "group"), a
// thread by its root event id; the sender's user id is the participant.
// End-to-end encryption is not supported: encrypted rooms' messages are
// skipped with a log line (see docs/chat-gateways.md).
package matrix

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
	"github.com/rs/zerolog"
	"maunium.net/go/mautrix"
	"maunium.net/go/mautrix/id"

	"github.com/switchboard-chat/switchboard/pkg/attachment"
	"github.com/switchboard-chat/switchboard/pkg/bus"
	eventsv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/events/v1"
	"github.com/switchboard-chat/switchboard/pkg/platform"
)

// Config is the gateways.matrix section.
type Config struct {
	// Homeserver (MATRIX_HOMESERVER) is the client-server API's base URL,
	// e.g. https://matrix.example.org.
	Homeserver string `koanf:"homeserver"`
	// AccessToken (MATRIX_ACCESS_TOKEN) is the bot's access token, the
	// preferred way to sign in.
	AccessToken string `koanf:"access_token"`
	// UserID (MATRIX_USER_ID) is the bot's user id (@bot:example.org):
	// required with a password; with a token it is asked of the
	// homeserver (whoami) when empty.
	UserID string `koanf:"user_id"`
	// Password (MATRIX_PASSWORD) signs in with m.login.password when no
	// token is set (a new device each start, as in Hermes).
	Password string `koanf:"password"`
	// DeviceID (MATRIX_DEVICE_ID) is the device a password login reuses.
	DeviceID string `koanf:"device_id"`
	// RequireMention (MATRIX_REQUIRE_MENTION, default true, as in
	// Hermes): in rooms, answer only messages that mention the bot, are
	// commands, or are in a thread the bot takes part in.
	RequireMention bool `koanf:"require_mention"`
	// FreeResponseRooms (MATRIX_FREE_RESPONSE_ROOMS) answer without a
	// mention.
	FreeResponseRooms []string `koanf:"free_response_rooms"`
	// AllowedRooms (MATRIX_ALLOWED_ROOMS): when set, the bot answers only
	// in these rooms (DMs always).
	AllowedRooms []string `koanf:"allowed_rooms"`
	// AutoThread (MATRIX_AUTO_THREAD, default true, as in Hermes): a room
	// message outside a thread starts one (its session is the thread's).
	AutoThread bool `koanf:"auto_thread"`
	// DMAutoThread (MATRIX_DM_AUTO_THREAD, default false): the same in DMs.
	DMAutoThread bool `koanf:"dm_auto_thread"`
	// ProcessNotices (MATRIX_PROCESS_NOTICES, default false): m.notice
	// messages, which bots send, are skipped unless set.
	ProcessNotices bool `koanf:"process_notices"`
	// AutoJoin (default true, as in Hermes): join the rooms the bot is
	// invited to.
	AutoJoin bool `koanf:"auto_join"`
	// Reactions (MATRIX_REACTIONS, default true): 👀 while a turn runs,
	// then ✅ or ❌.
	Reactions bool `koanf:"reactions"`
	// AllowRoomMentions (MATRIX_ALLOW_ROOM_MENTIONS, default false) lets
	// "@room" in the agent's messages and edits notify the whole room
	// (when the bot has the power level to). Off, each gets a zero-width
	// joiner after its "@" and notifies no one (Hermes sends it as it is).
	AllowRoomMentions bool `koanf:"allow_room_mentions"`
	// ReadReceipts (default true): the bot marks each message it took as
	// read, as Hermes does.
	ReadReceipts bool `koanf:"read_receipts"`
	// SyncTimeout is the /sync long poll's timeout (default 30 s).
	SyncTimeout time.Duration `koanf:"sync_timeout"`
	// LeaseTTL of the active/standby lease on syncing.
	LeaseTTL time.Duration `koanf:"lease_ttl"`
}

// DefaultConfig has Hermes's defaults.
func DefaultConfig() Config {
	return Config{RequireMention: true, AutoThread: true, AutoJoin: true, Reactions: true, ReadReceipts: true,
		SyncTimeout: 30 * time.Second, LeaseTTL: 10 * time.Second}
}

// Enabled reports whether dev should start the gateway: a homeserver and
// a token, or a user id and a password.
func (c Config) Enabled() bool {
	return c.Homeserver != "" && (c.AccessToken != "" || (c.UserID != "" && c.Password != ""))
}

// Validate checks the section.
func (c Config) Validate() error {
	if !c.Enabled() {
		return errors.New("matrix: homeserver (MATRIX_HOMESERVER) and access_token (MATRIX_ACCESS_TOKEN), or user_id (MATRIX_USER_ID) and password (MATRIX_PASSWORD), are required")
	}
	u, err := url.Parse(c.Homeserver)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("matrix: homeserver %q is not an http(s) URL", c.Homeserver)
	}
	if c.UserID != "" {
		if _, _, err := id.UserID(c.UserID).Parse(); err != nil {
			return fmt.Errorf("matrix: user_id %q is not a user id (@bot:example.org): %w", c.UserID, err)
		}
	}
	if c.SyncTimeout < 0 || c.SyncTimeout > 5*time.Minute {
		return fmt.Errorf("matrix: sync_timeout %s is not between 0 (the default) and 5m", c.SyncTimeout)
	}
	return nil
}

// Deps are the shared clients.
type Deps struct {
	Log *slog.Logger
	Bus *bus.Bus
	// HTTPClient for API calls (default: no overall timeout; each call is
	// bounded by its context).
	HTTPClient *http.Client
	// Runner tunes the kit (attachments, instance, backoff in tests).
	Runner platform.Options
}

// Service runs the Matrix gateway.
type Service struct {
	platform.Service
	p *Platform
}

// New builds the gateway without calling the homeserver. Without a user
// id, or with a password, Run asks it who the bot is (whoami) or logs in
// (SignIn) until it answers, unready meanwhile, so a gateway started
// before its homeserver waits for it; refused credentials end Run.
func New(cfg Config, deps Deps) (*Service, error) {
	if deps.Bus == nil {
		return nil, errors.New("matrix: bus is required")
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
	p.Attach(deps.Bus, svc.Runner().MarkSeen)
	p.downloads = platform.NewDownloader(opts.Attachments.URLs)
	if opts.Attachments.Enabled {
		p.store = attachment.Open(deps.Bus.JetStream(), deps.Bus.Topology(), opts.Attachments)
	}
	return &Service{Service: svc, p: p}, nil
}

// Platform is the Matrix side of the kit.
type Platform struct {
	cfg  Config
	log  *slog.Logger
	cli  *mautrix.Client
	sync time.Duration
	// syncGrace is how long past its timeout a long poll of a token may
	// go unanswered before it is given up (syncGrace; a test's).
	syncGrace time.Duration

	free, allowed map[string]bool

	// bus holds the sync token (nil until Attach); cursor keeps it, made
	// at the first Connect, once the account is known.
	bus    *bus.Bus
	cursor *cursor
	// seen and markSeen are the Runner's: whether an event id was
	// published, and recording the threads the bot writes in.
	markSeen func(ctx context.Context, eventID string) error
	// store holds the attachments a send refers to by bytes_ref.
	store *attachment.Store
	// downloads fetches the attachments a send names by URL
	// (attachments.urls; nil: public addresses only).
	downloads *platform.Downloader

	rooms rooms
	// joins are the invites whose join is tried again (the syncing
	// loop's own).
	joins map[id.RoomID]*pendingJoin

	mu        sync.Mutex
	reactions map[string]id.EventID // room|message|emoji → the bot's reaction event

	// clock is time.Now (a test's clock).
	clock func() time.Time
	// started is when the first Connect without a token began: on such
	// a start what is older is history. A Connect that fails before a
	// token is stored and is tried again keeps it, or what was sent
	// meanwhile would pass for history; storing a token clears it.
	started time.Time
}

// NewPlatform builds the platform without a bus (Attach adds it).
func NewPlatform(cfg Config, log *slog.Logger, hc *http.Client) (*Platform, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if log == nil {
		log = slog.Default()
	}
	cli, err := mautrix.NewClient(strings.TrimRight(cfg.Homeserver, "/"), id.UserID(cfg.UserID), cfg.AccessToken)
	if err != nil {
		return nil, fmt.Errorf("matrix client: %w", err)
	}
	if hc != nil {
		cli.Client = hc
	}
	// Retries are delivery's (sends) and the kit's (sync): one attempt
	// per call, a 429 handed back with its wait.
	cli.DefaultHTTPRetries = 0
	cli.Log = zerolog.Nop()
	cli.UserAgent = "switchboard"
	st := cfg.SyncTimeout
	if st <= 0 {
		st = DefaultConfig().SyncTimeout
	}
	return &Platform{
		cfg: cfg, log: log.With("platform", "matrix"), cli: cli, sync: st, syncGrace: syncGrace,
		free: platform.IDSet(cfg.FreeResponseRooms), allowed: platform.IDSet(cfg.AllowedRooms),
		rooms: rooms{m: map[id.RoomID]*room{}}, reactions: map[string]id.EventID{}, clock: time.Now,
	}, nil
}

// SignIn learns the bot's user id (whoami) when only a token is set, or
// signs in with the password when no token is.
func (p *Platform) SignIn(ctx context.Context) error {
	if p.cfg.AccessToken == "" {
		resp, err := p.cli.Login(ctx, &mautrix.ReqLogin{
			Type:                     mautrix.AuthTypePassword,
			Identifier:               mautrix.UserIdentifier{Type: mautrix.IdentifierTypeUser, User: p.cfg.UserID},
			Password:                 p.cfg.Password,
			DeviceID:                 id.DeviceID(p.cfg.DeviceID),
			InitialDeviceDisplayName: "Switchboard",
			StoreCredentials:         true,
		})
		if err != nil {
			return refused(fmt.Errorf("matrix: login as %s failed (check MATRIX_USER_ID and MATRIX_PASSWORD): %w", p.cfg.UserID, err))
		}
		p.cfg.UserID = resp.UserID.String()
		return nil
	}
	if p.cfg.UserID != "" {
		return nil
	}
	resp, err := p.cli.Whoami(ctx)
	if err != nil {
		return refused(fmt.Errorf("matrix: whoami failed (check MATRIX_ACCESS_TOKEN and MATRIX_HOMESERVER, or set MATRIX_USER_ID): %w", err))
	}
	p.cfg.UserID = resp.UserID.String()
	p.cli.UserID = resp.UserID
	return nil
}

// refused marks err Fatal when the homeserver refused the credentials
// (401, 403, M_FORBIDDEN, M_UNKNOWN_TOKEN, M_MISSING_TOKEN,
// M_USER_DEACTIVATED): retrying cannot mend them. Anything else (the
// homeserver down, a 5xx, a 429) is retried.
func refused(err error) error {
	var he mautrix.HTTPError
	if !errors.As(err, &he) {
		return err
	}
	if he.RespError != nil {
		switch he.RespError.ErrCode {
		case mautrix.MForbidden.ErrCode, mautrix.MUnknownToken.ErrCode, mautrix.MMissingToken.ErrCode, mautrix.MUserDeactivated.ErrCode:
			return platform.Fatal(err)
		}
	}
	if he.Response != nil && (he.Response.StatusCode == http.StatusUnauthorized || he.Response.StatusCode == http.StatusForbidden) {
		return platform.Fatal(err)
	}
	return err
}

// Attach gives the platform the bus (its sync token's bucket) and the
// runner's MarkSeen, which records the threads the bot answers in.
func (p *Platform) Attach(b *bus.Bus, markSeen func(ctx context.Context, eventID string) error) {
	p.bus = b
	p.markSeen = markSeen
}

func (p *Platform) Name() string    { return "matrix" }
func (p *Platform) Account() string { return p.cfg.UserID }

// SingleConsumer: one replica syncs for the account; two would publish
// every message twice and fight over the stored token.
func (p *Platform) SingleConsumer() bool { return true }

// maxText is Hermes's practical limit for one Matrix message.
const maxText = 4000

// Capabilities: edits (m.replace), so delivery streams by editing;
// deletes (redactions); threads; typing.
func (p *Platform) Capabilities() platform.Capabilities {
	return platform.Capabilities{
		MaxLength: maxText, Measure: platform.MeasureRunes, CanSend: true, CanEdit: true, CanDelete: true,
		CanThread: true, CanTyping: true, CommandPrefix: "!",
		MediaKinds: []eventsv1.AttachmentKind{eventsv1.AttachmentKind_ATTACHMENT_KIND_IMAGE, eventsv1.AttachmentKind_ATTACHMENT_KIND_DOCUMENT,
			eventsv1.AttachmentKind_ATTACHMENT_KIND_AUDIO, eventsv1.AttachmentKind_ATTACHMENT_KIND_VOICE, eventsv1.AttachmentKind_ATTACHMENT_KIND_VIDEO},
	}
}

var skipped = promauto.NewCounterVec(prometheus.CounterOpts{
	Name: "switchboard_matrix_events_skipped_total",
	Help: "Matrix room events read without a message to publish, by reason (own, edit, notice, encrypted, not mentioned …).",
}, []string{"reason"})
