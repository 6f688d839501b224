// Package platform is the kit every platform gateway is built on. A
// platform (Telegram, Discord, the OpenAI-compatible API, webhooks …)
// implements the small Platform interface: a receive loop that hands
// normalized events to a Sink, and the send operations. A Runner does the
// rest: it publishes inbound events with their dedupe ids, serves send
// requests from delivery with an idempotency cache shared by replicas,
// reconnects with Hermes's backoff, elects one active replica per bot
// identity for single-consumer platforms, marks the messages a turn
// answers with Hermes's processing reactions (Reactor), and reports
// health and metrics.
package platform

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	deliveryv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/delivery/v1"
	eventsv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/events/v1"
)

// Measure is how a platform counts a message's length.
type Measure int

const (
	// MeasureRunes counts Unicode code points (Discord, Slack).
	MeasureRunes Measure = iota
	// MeasureUTF16 counts UTF-16 code units (Telegram).
	MeasureUTF16
	// MeasureBytes counts UTF-8 bytes.
	MeasureBytes
)

func (m Measure) String() string {
	switch m {
	case MeasureUTF16:
		return "utf16"
	case MeasureBytes:
		return "bytes"
	default:
		return "runes"
	}
}

// Capabilities describe what a platform can do; delivery and the router
// read them to chunk, stream and parse commands.
type Capabilities struct {
	// MaxLength of one message, counted with Measure; 0 means no limit.
	MaxLength int
	Measure   Measure
	// CanSend is false for inbound-only platforms (webhooks).
	CanSend   bool
	CanEdit   bool
	CanDelete bool
	CanThread bool
	CanTyping bool
	// StreamsNatively: the platform takes SEND_OP_STREAM_DELTA (api).
	StreamsNatively bool
	MediaKinds      []eventsv1.AttachmentKind
	// CommandPrefix is how commands start ("/" on most platforms).
	CommandPrefix string
}

// Platform is what one platform implements. Every method may be called
// concurrently, except Connect, which the Runner calls again only after
// the previous call returned.
type Platform interface {
	// Name is the lowercase platform name: telegram, api, webhook …
	Name() string
	// Account is the bot identity (bot id, app id, route set): part of
	// every dedupe id and of the active/standby lease.
	Account() string
	Capabilities() Capabilities
	// Connect opens the connection and runs the receive loop until ctx
	// ends (return nil) or the connection fails (return the error; wrap it
	// with Fatal when retrying cannot help). It calls conn.Connected once
	// the platform accepted the connection and hands every event to
	// conn.Deliver, acknowledging it to the platform only after Deliver
	// returned nil.
	Connect(ctx context.Context, conn Conn) error
	// Send posts a new message and returns the platform's message id.
	Send(ctx context.Context, req *deliveryv1.SendRequested) (messageID string, err error)
	// Edit replaces the text of req.MessageId.
	Edit(ctx context.Context, req *deliveryv1.SendRequested) error
	// Delete removes req.MessageId.
	Delete(ctx context.Context, req *deliveryv1.SendRequested) error
	// Typing shows a typing indicator in the target chat.
	Typing(ctx context.Context, req *deliveryv1.SendRequested) error
}

// TypingEnder is implemented by platforms whose typing indicator stays up
// until it is taken down (Slack's assistant thread status, for two
// minutes), where other platforms' lapse a few seconds after the last
// request. The
// Runner calls EndTyping once a turn's final request (its last message,
// or the typing request that ends a turn without one) was carried out,
// succeeded or not: the turn is over either way. Best effort: it is
// bounded by endTypingTimeout, and its error is logged at debug and
// counted, never put on the request's receipt.
type TypingEnder interface {
	EndTyping(ctx context.Context, req *deliveryv1.SendRequested) error
}

// SignInner is implemented by platforms that learn who they are (their
// Account: the bot's user id) from the platform before they can run
// (Mattermost's users/me, Slack's auth.test). The Runner calls SignIn
// before anything else, and again on its backoff schedule while it
// fails (the platform down or out of reach), the gateway unready
// meanwhile with the last error, so a gateway started before its
// platform waits for it. An error wrapped with Fatal (the platform
// refused the credentials) ends Run with it: no retry mends it.
type SignInner interface {
	SignIn(ctx context.Context) error
}

// Streamer is implemented by platforms that stream text natively
// (SEND_OP_STREAM_DELTA).
type Streamer interface {
	StreamDelta(ctx context.Context, req *deliveryv1.SendRequested) error
}

// ToolStepper is implemented by platforms that show the steps of the
// agent's tool calls (SEND_OP_TOOL_PROGRESS: the API gateway's runs).
type ToolStepper interface {
	ToolProgress(ctx context.Context, req *deliveryv1.SendRequested) error
}

// IdempotentSender is implemented by platforms whose Send, Edit and
// Delete are harmless to repeat with one idempotency key (the API gateway
// hands a reply to a waiting request, which takes it once): the Runner
// keeps no receipts for them, saving a KV read before and a write after
// every send.
type IdempotentSender interface {
	IdempotentSends() bool
}

// SingleConsumer is implemented by platforms that allow one connection per
// bot identity (Telegram long-poll, the Discord gateway): the Runner
// connects only while it holds the lease.
type SingleConsumer interface {
	SingleConsumer() bool
}

// Ephemeral is implemented by single-consumer platforms whose events reach
// only the connection open when they happen: Discord's gateway replays
// nothing to a new session. Such a lease holder keeps its connection
// while NATS is out of reach, rather than letting go after the lease TTL;
// a platform that keeps undelivered events for the next connection
// (Telegram's getUpdates) loses nothing by letting go, and must, so that
// two replicas never poll at once.
type Ephemeral interface {
	Ephemeral() bool
}

// Fetcher is implemented by platforms whose attachments only the gateway
// can download, with the platform's credentials (Telegram's file API,
// Slack's private URLs) or from where the platform put them (Discord's
// CDN). When a turn runs a message, the worker asks the gateway for the
// attachments the agent reads (gateway.<platform>.fetch); the Runner
// downloads them through Fetch into the attachment store.
type Fetcher interface {
	// Fetch opens a's bytes and returns the media type the platform
	// reports ("" when it reports none).
	Fetch(ctx context.Context, a *eventsv1.Attachment) (io.ReadCloser, string, error)
}

// ErrNotFetched is returned by a Fetcher for an attachment it has no way
// to download (no file id or address).
var ErrNotFetched = errors.New("attachment not fetched")

// Conn is the Runner's side of a connection, given to Connect.
type Conn interface {
	// Connected reports that the platform accepted the connection: the
	// gateway becomes ready and the reconnect backoff resets.
	Connected()
	// Deliver validates ev, stamps received_at and publishes it on the
	// bus. Duplicate is true when the event was seen before (nothing was
	// published twice). An error wrapping ErrRejected means the event is
	// invalid and was dropped with a logged reason: acknowledge it to the
	// platform anyway. Any other error means it was not stored: do not
	// acknowledge it, so the platform redelivers.
	Deliver(ctx context.Context, ev *eventsv1.MessageReceived) (Accepted, error)
	// Reject records a payload that could not be normalized (malformed or
	// too large) with the reason; it is logged and counted, never
	// published.
	Reject(ctx context.Context, reason string, err error)
	// Seen reports whether an event of this gateway with this event id
	// was published (and is still remembered, Options.SeenTTL): the
	// gateways ask it of a thread's first message to know whether the
	// bot was addressed there, and so takes part in the thread.
	Seen(ctx context.Context, eventID string) (bool, error)
}

// Accepted is the outcome of Conn.Deliver.
type Accepted struct {
	// Duplicate: the event id was seen before; nothing new was published.
	Duplicate bool
	// Seq is the inbound stream sequence of the stored event.
	Seq uint64
	// FirstSeen is when the event id was first published, for a
	// duplicate found in the gateway's seen bucket; zero when unknown
	// (a first publish, or a duplicate only the bus dedupe window caught).
	FirstSeen time.Time
}

// ErrRejected marks an inbound event the gateway refused to publish.
var ErrRejected = errors.New("event rejected")

// ErrUnsupported is returned by a platform for an operation it does not
// have; the receipt is permanent.
var ErrUnsupported = errors.New("operation not supported by this platform")

// fatalError marks a connection failure retrying cannot fix.
type fatalError struct{ err error }

func (e fatalError) Error() string { return e.err.Error() }
func (e fatalError) Unwrap() error { return e.err }

// Fatal marks a connection error as fatal (bad token, a second poller on
// the same bot): the gateway turns unready with the reason and does not
// reconnect.
func Fatal(err error) error {
	if err == nil {
		return nil
	}
	return fatalError{err}
}

// IsFatal reports whether err was marked with Fatal.
func IsFatal(err error) bool {
	var f fatalError
	return errors.As(err, &f)
}

// partDone marks the failure of an edit done in part (PartDone).
type partDone struct{ err error }

func (e partDone) Error() string { return e.err.Error() }
func (e partDone) Unwrap() error { return e.err }

// PartDone marks err, the failure of an edit whose message took its new
// text before a later part of the edit failed (a follow-on message the
// text goes on in): its receipt's error starts with bus.EditPartDone,
// so delivery does not post the edit's text again as a new message
// (the message shows its part); err keeps its class.
func PartDone(err error) error {
	if err == nil {
		return nil
	}
	return partDone{err}
}

// IsPartDone reports whether err was marked with PartDone.
func IsPartDone(err error) bool {
	var p partDone
	return errors.As(err, &p)
}

// SendError classifies a failed platform operation for delivery's retry
// policy. Errors that are not SendErrors count as retryable.
type SendError struct {
	Class      deliveryv1.ErrorClass
	RetryAfter time.Duration
	Err        error
}

func (e *SendError) Error() string {
	return fmt.Sprintf("%s: %v", e.Class, e.Err)
}

func (e *SendError) Unwrap() error { return e.Err }

// Permanent marks a send error that no retry can fix (chat not found,
// forbidden, too long).
func Permanent(err error) error {
	return &SendError{Class: deliveryv1.ErrorClass_ERROR_CLASS_PERMANENT, Err: err}
}

// RateLimited marks a 429 or flood wait; delivery retries after d.
func RateLimited(err error, d time.Duration) error {
	return &SendError{Class: deliveryv1.ErrorClass_ERROR_CLASS_RATE_LIMITED, RetryAfter: d, Err: err}
}

// FormatRejected marks a formatting error; delivery retries once as plain text.
func FormatRejected(err error) error {
	return &SendError{Class: deliveryv1.ErrorClass_ERROR_CLASS_FORMAT, Err: err}
}

// classify turns an operation error into receipt fields.
func classify(err error) (deliveryv1.ErrorClass, time.Duration) {
	var se *SendError
	if errors.As(err, &se) {
		return se.Class, se.RetryAfter
	}
	if errors.Is(err, ErrUnsupported) {
		return deliveryv1.ErrorClass_ERROR_CLASS_PERMANENT, 0
	}
	return deliveryv1.ErrorClass_ERROR_CLASS_RETRYABLE, 0
}

// IDSet is a set of the ids a config lists (channels, chats, roles),
// blanks and surrounding spaces dropped.
func IDSet(ids []string) map[string]bool {
	m := map[string]bool{}
	for _, id := range ids {
		if id = strings.TrimSpace(id); id != "" {
			m[id] = true
		}
	}
	return m
}
