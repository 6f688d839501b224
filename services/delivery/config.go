package delivery

import (
	"fmt"
	"strings"
	"time"

	"github.com/switchboard-chat/switchboard/pkg/loopback"
	"github.com/switchboard-chat/switchboard/services/delivery/internal/ratelimit"
)

// Streaming modes of a platform.
const (
	// StreamEdit: the platform can edit a sent message; deltas are streamed
	// by editing one message in place.
	StreamEdit = "edit"
	// StreamNative: the gateway streams text itself (the API gateway's
	// SSE); every delta is sent as SEND_OP_STREAM_DELTA.
	StreamNative = "native"
	// StreamNone: only the final text is sent.
	StreamNone = "none"
)

// Platform is what delivery knows about one platform.
type Platform struct {
	// Streaming is edit, native or none.
	Streaming string `koanf:"streaming"`
	// BotRate limits sends per bot identity (platform account), ChatRate
	// per chat. A zero rate takes the platform's default; count -1 turns
	// the limit off.
	BotRate  ratelimit.Rate `koanf:"bot_rate"`
	ChatRate ratelimit.Rate `koanf:"chat_rate"`
	// NoTyping: the platform shows no typing indicator (the API streams,
	// webhooks have no chat, SMS has none), so none is sent.
	NoTyping bool `koanf:"no_typing"`
	// PerRequest: each reply answers its own waiting request (the API), so
	// there is no chat order to keep, and a send repeated under its key is
	// taken once: a lone reply goes straight to the gateway without first
	// checking the chat's outbox, and one that went through leaves no sent
	// row (a redelivered reply event sends it again, harmlessly).
	PerRequest bool `koanf:"per_request"`
	// Home is the chat a proactive send to the bare platform goes to:
	// "chat_id", "chat_id:thread_id" or "#channel-name".
	Home string `koanf:"home"`
	// ToolProgress shows the agent's tool calls in the chat, as Hermes's
	// display.platforms.<platform>.tool_progress: off, new (a line when
	// the tool changes), all (a line per call) or verbose (with the
	// call's arguments). Empty: delivery.tool_progress, else the
	// platform's default (Hermes's).
	ToolProgress string `koanf:"tool_progress"`
	// ToolPreviewLength cuts a progress line's preview (verbose: the
	// arguments) at that many characters; 0: delivery.tool_preview_length.
	ToolPreviewLength int `koanf:"tool_preview_length"`
	// Images is how the images a final answer references reach the
	// chat: native (taken out of the text and sent after it as image
	// attachments) or link (the text as written). Empty: the platform's
	// default, native where its gateway posts an image attachment as a
	// picture. delivery.images link turns native off everywhere.
	Images string `koanf:"images"`
}

// Tool progress modes (Hermes's display.tool_progress).
const (
	ToolProgressOff     = "off"
	ToolProgressNew     = "new"
	ToolProgressAll     = "all"
	ToolProgressVerbose = "verbose"
)

// toolProgressMode reads a configured mode as Hermes does: true, yes, on
// and 1 are all; false, no and 0 are off. ok is false for an unknown
// mode; "" stays "" (not set).
func toolProgressMode(v string) (mode string, ok bool) {
	switch m := strings.ToLower(strings.TrimSpace(v)); m {
	case "":
		return "", true
	case ToolProgressOff, ToolProgressNew, ToolProgressAll, ToolProgressVerbose:
		return m, true
	case "true", "yes", "on", "1":
		return ToolProgressAll, true
	case "false", "no", "0":
		return ToolProgressOff, true
	}
	return "", false
}

// DefaultPlatforms are the platforms' documented capabilities and limits.
func DefaultPlatforms() map[string]Platform {
	perSecond := ratelimit.Rate{Count: 1, Per: time.Second, Burst: 1}
	// Tool progress as Hermes's display tiers have it: on where the chat
	// is the operator's own and progress edits one message (Discord),
	// only when the tool changes where edits reach a shared audience
	// (Matrix, Mattermost, Teams), off on mobile inboxes (Telegram), where Slack
	// posts pile up, where nothing can be edited (the WhatsApp Cloud API,
	// Signal, SMS, iMessage, email, Home Assistant) and on webhooks. Unlisted
	// platforms: all.
	//
	// Images native where the gateway posts an image attachment given by
	// URL as a picture (its capabilities' media kinds take images):
	// Telegram, Matrix, Mattermost, Teams, WhatsApp, Signal, SMS (MMS),
	// BlueBubbles, LINE. Discord, Slack, Google Chat, email and Home
	// Assistant post such an attachment as its link, which the answer's
	// text already is; the API and webhooks take no images.
	return map[string]Platform{
		"telegram":   {Streaming: StreamEdit, BotRate: ratelimit.Rate{Count: 30, Per: time.Second}, ChatRate: perSecond, ToolProgress: ToolProgressOff, Images: ImagesNative},
		"discord":    {Streaming: StreamEdit, ChatRate: ratelimit.Rate{Count: 5, Per: 5 * time.Second}, ToolProgress: ToolProgressAll},
		"slack":      {Streaming: StreamEdit, ChatRate: perSecond, ToolProgress: ToolProgressOff},
		"matrix":     {Streaming: StreamEdit, ToolProgress: ToolProgressNew, Images: ImagesNative},
		"mattermost": {Streaming: StreamEdit, ToolProgress: ToolProgressNew, Images: ImagesNative},
		"teams":      {Streaming: StreamEdit, ChatRate: perSecond, ToolProgress: ToolProgressNew, Images: ImagesNative}, // edits count against the connector's per-conversation limit
		"whatsapp":   {Streaming: StreamNone, ToolProgress: ToolProgressOff, Images: ImagesNative},
		"signal":     {Streaming: StreamNone, ToolProgress: ToolProgressOff, Images: ImagesNative},
		"sms":        {Streaming: StreamNone, NoTyping: true, ToolProgress: ToolProgressOff, Images: ImagesNative},
		"email":      {Streaming: StreamNone, ToolProgress: ToolProgressOff},
		"api":        {Streaming: StreamNative, NoTyping: true, PerRequest: true},
		"webhook":    {Streaming: StreamNone, NoTyping: true, ToolProgress: ToolProgressOff},
		// Hermes's minimal display tier: a persistent notification per
		// answer, no typing, no tool progress.
		"homeassistant": {Streaming: StreamNone, NoTyping: true, ToolProgress: ToolProgressOff},
		// BlueBubbles cannot edit (Hermes's adapter does not): final text
		// only; typing shows with the Private API helper.
		"bluebubbles": {Streaming: StreamNone, ToolProgress: ToolProgressOff, Images: ImagesNative},
		// LINE cannot edit: final text only, no tool progress (each
		// message after the first of a turn is a metered push, and
		// progress would spend the free reply token, as Hermes warns);
		// typing is the loading animation, in 1:1 chats.
		"line": {Streaming: StreamNone, ToolProgress: ToolProgressOff, Images: ImagesNative},
		// Google Chat edits the app's messages (messages.patch), as
		// Hermes streams there; the Chat API allows one write a second
		// per space, and no typing indicator exists.
		"google_chat": {Streaming: StreamEdit, ChatRate: perSecond, NoTyping: true, ToolProgress: ToolProgressNew},
	}
}

// Config is the `delivery` section of the configuration.
type Config struct {
	// TTL: a message not sent within TTL of being queued expires (with a
	// log line and a metric) instead of arriving late.
	TTL time.Duration `koanf:"ttl"`
	// GRPCAddr serves DeliveryService.Send; empty turns it off.
	GRPCAddr string `koanf:"grpc_addr"`
	// Token, when set, is the bearer token DeliveryService.Send requires.
	Token string `koanf:"token"`
	// SendTimeout bounds one request to a gateway. A timeout means "maybe
	// delivered": the row is retried with the same idempotency key.
	SendTimeout time.Duration `koanf:"send_timeout"`
	// Lease is how long a claimed row belongs to its sender; after it
	// another replica takes the row over. Must exceed SendTimeout.
	Lease time.Duration `koanf:"lease"`
	// PollInterval is how often the outbox is checked for due rows that
	// no replica's clock knows of (another replica's retries, rows left by
	// a process that ended); new rows, finished sends and this replica's
	// own retries and deferrals wake the send loop when they come due.
	PollInterval time.Duration `koanf:"poll_interval"`
	// Senders is how many sends one replica runs at once.
	Senders int `koanf:"senders"`
	// MaxAttempts dead-letters a row after that many failed attempts.
	MaxAttempts int `koanf:"max_attempts"`
	// RetryBase and RetryMax bound the exponential backoff.
	RetryBase time.Duration `koanf:"retry_base"`
	RetryMax  time.Duration `koanf:"retry_max"`
	// TypingInterval refreshes the typing indicator while a turn runs, at
	// most for TypingMax.
	TypingInterval time.Duration `koanf:"typing_interval"`
	TypingMax      time.Duration `koanf:"typing_max"`
	// PartitionLease is the TTL of a replica's ownership of a reply
	// partition (a crashed owner's partitions move after it).
	PartitionLease time.Duration `koanf:"partition_lease"`
	// AckWait of the reply consumers.
	AckWait time.Duration `koanf:"ack_wait"`
	// PollWait bounds one pull of a reply consumer, and so how long a
	// stop, or the end of a partition's ownership, waits for an idle one
	// (0: the bus's default, 1 s). Not configurable: tests shorten it so
	// that stopping a replica does not take a second.
	PollWait time.Duration `koanf:"-"`
	// SentRetention is how long a sent row is kept (for the admin
	// listing) before housekeeping deletes it; DeadRetention the same for
	// dead letters (failed, expired) nobody requeued or purged.
	SentRetention time.Duration `koanf:"sent_retention"`
	DeadRetention time.Duration `koanf:"dead_retention"`
	// ToolProgress is the tool progress mode of every platform that sets
	// none of its own (Hermes's display.tool_progress; the environment's
	// HERMES_TOOL_PROGRESS_MODE): off, new, all or verbose. Empty: each
	// platform's default.
	ToolProgress string `koanf:"tool_progress"`
	// ToolPreviewLength cuts a progress line's preview at that many
	// characters (Hermes's display.tool_preview_length); 0: 40, and
	// verbose lines' arguments are not cut.
	ToolPreviewLength int `koanf:"tool_preview_length"`
	// Images: link leaves the images of every answer in its text as
	// written (the switch that turns native images off); empty or native
	// sends them as images where the platform's images mode is native.
	Images string `koanf:"images"`
	// Platforms override DefaultPlatforms field by field.
	Platforms map[string]Platform `koanf:"platforms"`
	// ReplicaID names this replica in claims; hostname+random by default.
	ReplicaID string `koanf:"replica_id"`
}

// DefaultConfig is the configuration with every default.
func DefaultConfig() Config {
	return Config{
		TTL:            time.Hour,
		GRPCAddr:       "127.0.0.1:7071",
		SendTimeout:    10 * time.Second,
		Lease:          30 * time.Second,
		PollInterval:   5 * time.Second,
		Senders:        16,
		MaxAttempts:    12,
		RetryBase:      time.Second,
		RetryMax:       5 * time.Minute,
		TypingInterval: 4 * time.Second,
		TypingMax:      5 * time.Minute,
		PartitionLease: 15 * time.Second,
		AckWait:        30 * time.Second,
		SentRetention:  7 * 24 * time.Hour,
		DeadRetention:  30 * 24 * time.Hour,
	}
}

func (c Config) withDefaults() Config {
	d := DefaultConfig()
	set := func(v *time.Duration, def time.Duration) {
		if *v <= 0 {
			*v = def
		}
	}
	set(&c.TTL, d.TTL)
	set(&c.SendTimeout, d.SendTimeout)
	set(&c.Lease, d.Lease)
	set(&c.PollInterval, d.PollInterval)
	set(&c.RetryBase, d.RetryBase)
	set(&c.RetryMax, d.RetryMax)
	set(&c.TypingInterval, d.TypingInterval)
	set(&c.TypingMax, d.TypingMax)
	set(&c.PartitionLease, d.PartitionLease)
	set(&c.AckWait, d.AckWait)
	set(&c.SentRetention, d.SentRetention)
	set(&c.DeadRetention, d.DeadRetention)
	if c.Senders <= 0 {
		c.Senders = d.Senders
	}
	if c.MaxAttempts <= 0 {
		c.MaxAttempts = d.MaxAttempts
	}
	return c
}

// Validate reports settings that cannot work.
func (c Config) Validate() error {
	c = c.withDefaults()
	if c.Lease <= c.SendTimeout {
		return fmt.Errorf("delivery.lease (%v) must exceed delivery.send_timeout (%v)", c.Lease, c.SendTimeout)
	}
	if c.GRPCAddr != "" && c.Token == "" && !loopback.Addr(c.GRPCAddr) {
		// DeliveryService.Send posts as the bot to any chat: without a
		// token it must not be reachable from the network.
		return fmt.Errorf("delivery.grpc_addr %s is not a loopback address: set delivery.token, or listen on loopback", c.GRPCAddr)
	}
	if _, ok := toolProgressMode(c.ToolProgress); !ok {
		return fmt.Errorf("delivery.tool_progress: %q is not off, new, all or verbose", c.ToolProgress)
	}
	if c.ToolPreviewLength < 0 {
		return fmt.Errorf("delivery.tool_preview_length: %d is negative", c.ToolPreviewLength)
	}
	switch c.Images {
	case "", ImagesNative, ImagesLink:
	default:
		return fmt.Errorf("delivery.images: %q is not native or link", c.Images)
	}
	for name, p := range c.Platforms {
		switch p.Images {
		case "", ImagesNative, ImagesLink:
		default:
			return fmt.Errorf("delivery.platforms.%s.images: %q is not native or link", name, p.Images)
		}
		switch p.Streaming {
		case "", StreamEdit, StreamNative, StreamNone:
		default:
			return fmt.Errorf("delivery.platforms.%s.streaming: %q is not edit, native or none", name, p.Streaming)
		}
		if _, ok := toolProgressMode(p.ToolProgress); !ok {
			return fmt.Errorf("delivery.platforms.%s.tool_progress: %q is not off, new, all or verbose", name, p.ToolProgress)
		}
		if p.ToolPreviewLength < 0 {
			return fmt.Errorf("delivery.platforms.%s.tool_preview_length: %d is negative", name, p.ToolPreviewLength)
		}
	}
	return nil
}

// toolProgress is the tool progress mode of a platform and its preview
// length: the platform's setting, else delivery's, else the platform's
// default, else all (Hermes's order).
func (c Config) toolProgress(platform string) (mode string, previewLength int) {
	name := strings.ToLower(platform)
	o := c.Platforms[name]
	mode, _ = toolProgressMode(o.ToolProgress)
	if mode == "" {
		mode, _ = toolProgressMode(c.ToolProgress)
	}
	if mode == "" {
		mode = defaultPlatforms[name].ToolProgress
	}
	if mode == "" {
		mode = ToolProgressAll
	}
	previewLength = o.ToolPreviewLength
	if previewLength == 0 {
		previewLength = c.ToolPreviewLength
	}
	return mode, previewLength
}

// ToolProgressOf is the tool progress mode configured for a platform
// (off, new, all or verbose): what /verbose cycles from while it has
// chosen none.
func (c Config) ToolProgressOf(platform string) string {
	mode, _ := c.toolProgress(platform)
	return mode
}

// nativeImages reports whether the images of a final answer to platform
// are sent as images.
func (c Config) nativeImages(platform string) bool {
	return c.Images != ImagesLink && c.platform(platform).Images == ImagesNative
}

// defaultPlatforms is DefaultPlatforms, built once: platform runs for
// every reply event.
var defaultPlatforms = DefaultPlatforms()

// HomeOf is the home channel configured for a platform
// (delivery.platforms.<p>.home), "" for none.
func (c Config) HomeOf(platform string) string { return c.platform(platform).Home }

// platform merges the configured platform over its defaults.
func (c Config) platform(name string) Platform {
	name = strings.ToLower(name)
	p := defaultPlatforms[name]
	o, ok := c.Platforms[name]
	if !ok {
		return p
	}
	if o.Streaming != "" {
		p.Streaming = o.Streaming
	}
	if o.BotRate.Count != 0 {
		p.BotRate = o.BotRate
	}
	if o.ChatRate.Count != 0 {
		p.ChatRate = o.ChatRate
	}
	if o.Home != "" {
		p.Home = o.Home
	}
	if o.Images != "" {
		p.Images = o.Images
	}
	p.NoTyping = p.NoTyping || o.NoTyping
	p.PerRequest = p.PerRequest || o.PerRequest
	return p
}
