package bus

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	neturl "net/url"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/protobuf/proto"

	"github.com/switchboard-chat/switchboard/pkg/telemetry"
)

const tracerName = "github.com/switchboard-chat/switchboard/pkg/bus"

// Header names Switchboard sets on bus messages besides Nats-Msg-Id.
const (
	HeaderContentType = "Content-Type"
	HeaderProtoType   = "Sb-Proto-Type"
	contentTypeProto  = "application/protobuf"
	// HeaderControl carries the version of a control request (router to
	// worker) and of its reply. At ControlVersion a worker running the
	// session's turn replies at once, with a true BoolValue when its turn
	// declined the request; without it a worker replies only when its turn
	// took the request (a router of an older release reads any reply as
	// taken).
	HeaderControl  = "Sb-Control"
	ControlVersion = "2"
	// HeaderSteerQueue, set ("1") on a worker's reply to a control
	// request, says that the worker removes steering's queued message
	// (TurnControlRequested.queued_event_id) when its turn gives the text
	// to the model. A reply without it comes from a worker of an older
	// release, which never does: the router removes the message of
	// steering such a turn took.
	HeaderSteerQueue = "Sb-Steer-Queue"
	// HeaderStartWithin, on a best-effort request to a gateway (a typing
	// indicator's), is how many milliseconds after the gateway got it
	// the request may still be started: its sender goes on without it
	// after a while (the turn's answer follows), and started later it
	// would show after what followed it. The gateway gives it up then;
	// one started in time is carried out however long it takes.
	HeaderStartWithin = "Sb-Start-Within"
)

// LateTyping starts the error of a gateway's answer to a typing request
// it gave up, not started within its HeaderStartWithin (it waited for a
// send slot behind the chat's other sends): its sender may ask again at
// once, with a bound of its own, while it still wants the indicator.
const LateTyping = "typing too late"

// EditPartDone starts the error of a gateway's answer to an edit whose
// message took its new text while a later part of the edit failed (a
// follow-on message its text goes on in, on a platform that goes on in
// several messages): the message shows its part, so its sender does not
// post the edit's whole text again as a new message, as it does for an
// edit of a message that is gone.
const EditPartDone = "edit done in part"

// ErrDecode marks a message whose payload cannot be decoded: a poison
// message, dead-lettered on first sight.
var ErrDecode = errors.New("decode bus message")

// Bus publishes and consumes Switchboard's events on one NATS connection.
type Bus struct {
	nc   *nats.Conn
	js   jetstream.JetStream
	topo Topology
	log  *slog.Logger

	// handBacks is the BUS_HANDBACKS bucket, opened once for every
	// consumer of the process (handBackCounts).
	hbMu      sync.Mutex
	handBacks jetstream.KeyValue

	// pressWords is the GATEWAY_PRESS_WORDS bucket, opened once for the
	// process (PressWords).
	pwMu       sync.Mutex
	pressWords jetstream.KeyValue
}

// handBackCounts creates or opens the bucket that counts hand-backs
// (BucketHandBacks), once per Bus; a failure is tried again by the next
// consumer to start.
func (b *Bus) handBackCounts(ctx context.Context) (jetstream.KeyValue, error) {
	b.hbMu.Lock()
	defer b.hbMu.Unlock()
	if b.handBacks != nil {
		return b.handBacks, nil
	}
	kv, err := b.js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{
		Bucket: b.topo.Stream(BucketHandBacks), Description: "hand-backs of stopping processes, per message",
		TTL: 24 * time.Hour, History: 1, Storage: jetstream.FileStorage, Replicas: max(b.topo.Replicas, 1),
	})
	if err != nil {
		return nil, err
	}
	b.handBacks = kv
	return kv, nil
}

// New wraps an open NATS connection.
func New(nc *nats.Conn, topo Topology, log *slog.Logger) (*Bus, error) {
	if log == nil {
		log = slog.Default()
	}
	js, err := jetstream.New(nc, jetstream.WithPublishAsyncMaxPending(4096))
	if err != nil {
		return nil, fmt.Errorf("open jetstream: %w", err)
	}
	return &Bus{nc: nc, js: js, topo: topo, log: log}, nil
}

// Connect dials NATS with reconnects forever and wraps the connection.
// extra options come last (a process embedding the server passes
// nats.InProcessServer). The caller closes it with Close.
func Connect(url, name string, topo Topology, log *slog.Logger, extra ...nats.Option) (*Bus, error) {
	opts := append([]nats.Option{
		nats.Name(name),
		nats.MaxReconnects(-1),
		nats.ReconnectWait(time.Second),
		nats.DisconnectErrHandler(func(_ *nats.Conn, err error) {
			if err != nil {
				slog.Warn("nats disconnected", "err", err)
			}
		}),
		nats.ReconnectHandler(func(c *nats.Conn) { slog.Info("nats reconnected", "url", c.ConnectedUrlRedacted()) }),
	}, extra...)
	nc, err := nats.Connect(url, opts...)
	if err != nil {
		return nil, fmt.Errorf("connect nats %s: %w", RedactURL(url), err)
	}
	b, err := New(nc, topo, log)
	if err != nil {
		nc.Close()
		return nil, err
	}
	return b, nil
}

// Conn is the underlying NATS connection.
func (b *Bus) Conn() *nats.Conn { return b.nc }

// JetStream is the underlying JetStream context.
func (b *Bus) JetStream() jetstream.JetStream { return b.js }

// Topology is the naming this bus uses.
func (b *Bus) Topology() Topology { return b.topo }

// Close drains the connection: pending publishes are flushed and
// subscriptions finish what they hold.
func (b *Bus) Close() error {
	if b.nc.IsClosed() {
		return nil
	}
	if err := b.nc.Drain(); err != nil {
		b.nc.Close()
		return fmt.Errorf("drain nats: %w", err)
	}
	for deadline := time.Now().Add(5 * time.Second); !b.nc.IsClosed() && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
	}
	b.nc.Close()
	return nil
}

// EnsureStreams creates every stream of the topology, or updates it to the
// declared config. It is idempotent and safe to run from every replica.
// The partition count of existing streams wins over the configured one
// (it is fixed when the streams are created): the bus's topology takes it.
func (b *Bus) EnsureStreams(ctx context.Context) error {
	var err error
	for range 3 {
		if err = b.readPartitions(ctx); err != nil {
			return err
		}
		err = b.ensureStreams(ctx)
		if !errors.Is(err, errCreatedMeanwhile) {
			return err
		}
		// Another process created a stream first, perhaps with another
		// partition count: read it back and declare again.
	}
	return err
}

var errCreatedMeanwhile = errors.New("stream created by another process meanwhile")

// readPartitions sets the topology's partition count to the inbound
// stream's, when it exists.
func (b *Bus) readPartitions(ctx context.Context) error {
	st, err := b.js.Stream(ctx, b.topo.Stream(StreamInbound))
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("read stream %s: %w", b.topo.Stream(StreamInbound), err)
	}
	n, legacy, ok := b.topo.partitionsOf(SubjectInbound, st.CachedInfo().Config.Subjects)
	if !ok {
		return fmt.Errorf("stream %s has subjects %v, not Switchboard's inbound partitions", b.topo.Stream(StreamInbound), st.CachedInfo().Config.Subjects)
	}
	if n != b.topo.PartitionCount() {
		b.log.Warn("the streams' partition count differs from the configured one; using the streams' (it is fixed when they are created)",
			"streams", n, "configured", b.topo.PartitionCount())
		b.topo.Partitions = n
	}
	b.topo.legacy = legacy
	return nil
}

func (b *Bus) ensureStreams(ctx context.Context) error {
	for _, cfg := range b.topo.StreamConfigs() {
		// Every process ensures the streams at start; an update is sent
		// only when the declared config differs from the server's, so a
		// rolling start of many replicas does not rewrite every stream.
		st, err := b.js.Stream(ctx, cfg.Name)
		switch {
		case errors.Is(err, jetstream.ErrStreamNotFound):
			_, err = b.js.CreateStream(ctx, cfg)
			if errors.Is(err, jetstream.ErrStreamNameAlreadyInUse) {
				return errCreatedMeanwhile
			}
		case err == nil && !sameStreamConfig(st.CachedInfo().Config, cfg):
			_, err = b.js.UpdateStream(ctx, declared(st.CachedInfo().Config, cfg))
		}
		if err != nil {
			return fmt.Errorf("ensure stream %s: %w", cfg.Name, err)
		}
	}
	return nil
}

// declared is the server's config of a stream with the fields the
// topology declares set as it declares them: what an operator set beside
// them (max_bytes, max_msgs, compression, placement, …) is kept.
func declared(have, want jetstream.StreamConfig) jetstream.StreamConfig {
	have.Subjects, have.Retention, have.MaxAge, have.Duplicates = want.Subjects, want.Retention, want.MaxAge, want.Duplicates
	have.Replicas, have.Storage, have.Discard, have.Description = want.Replicas, want.Storage, want.Discard, want.Description
	return have
}

// sameStreamConfig compares the fields the topology declares.
func sameStreamConfig(have, want jetstream.StreamConfig) bool {
	return slices.Equal(have.Subjects, want.Subjects) && have.Retention == want.Retention &&
		have.MaxAge == want.MaxAge && have.Duplicates == want.Duplicates && have.Replicas == want.Replicas &&
		have.Storage == want.Storage && have.Discard == want.Discard && have.Description == want.Description
}

// Ready reports whether the connection is up (for readiness probes).
func (b *Bus) Ready(context.Context) error {
	if s := b.nc.Status(); s != nats.CONNECTED {
		return fmt.Errorf("nats %s", s)
	}
	return nil
}

func newMsg(ctx context.Context, subject string, m proto.Message) (*nats.Msg, error) {
	data, err := proto.Marshal(m)
	if err != nil {
		return nil, fmt.Errorf("encode %T: %w", m, err)
	}
	msg := nats.NewMsg(subject)
	msg.Data = data
	msg.Header.Set(HeaderContentType, contentTypeProto)
	msg.Header.Set(HeaderProtoType, string(m.ProtoReflect().Descriptor().FullName()))
	otel.GetTextMapPropagator().Inject(ctx, headerCarrier(msg.Header))
	return msg, nil
}

// Publish stores m on a stream subject with msgID as its Nats-Msg-Id, so a
// retried publish within the dedupe window is stored once. It waits for
// the stream's acknowledgement.
func (b *Bus) Publish(ctx context.Context, subject, msgID string, m proto.Message) (*jetstream.PubAck, error) {
	if msgID == "" {
		return nil, fmt.Errorf("publish %s: empty message id", subject)
	}
	ctx, span := otel.Tracer(tracerName).Start(ctx, "publish "+subject,
		trace.WithSpanKind(trace.SpanKindProducer),
		trace.WithAttributes(attribute.String("messaging.system", "nats"),
			attribute.String("messaging.destination.name", subject),
			attribute.String("messaging.message.id", msgID)))
	defer span.End()
	msg, err := newMsg(ctx, subject, m)
	if err != nil {
		return nil, err
	}
	start := time.Now()
	ack, err := b.js.PublishMsg(ctx, msg, jetstream.WithMsgID(msgID))
	published.WithLabelValues(subjectLabel(b.topo, subject), resultLabel(err)).Inc()
	publishSeconds.WithLabelValues(subjectLabel(b.topo, subject)).Observe(time.Since(start).Seconds())
	if err != nil {
		telemetry.SpanMessageError(span, err, m)
		return nil, fmt.Errorf("publish %s: %w", subject, err)
	}
	if ack.Duplicate {
		duplicates.WithLabelValues(subjectLabel(b.topo, subject)).Inc()
		span.SetAttributes(attribute.Bool("messaging.duplicate", true))
	}
	return ack, nil
}

// PublishAsync stores m like Publish but does not wait for the stream's
// acknowledgement: for progress events (typing, text deltas, lifecycle
// notes) whose loss costs nothing but a missing indicator. Later
// publishes on this bus keep their order after it (one connection, in
// order). A failure is counted and logged when the acknowledgement does
// not come; only a failure to send at all is returned.
func (b *Bus) PublishAsync(ctx context.Context, subject, msgID string, m proto.Message) error {
	if msgID == "" {
		return fmt.Errorf("publish %s: empty message id", subject)
	}
	msg, err := newMsg(ctx, subject, m)
	if err != nil {
		return err
	}
	label := subjectLabel(b.topo, subject)
	f, err := b.js.PublishMsgAsync(msg, jetstream.WithMsgID(msgID))
	if err != nil {
		published.WithLabelValues(label, resultLabel(err)).Inc()
		return fmt.Errorf("publish %s: %w", subject, err)
	}
	go func() {
		select {
		case <-f.Ok():
			published.WithLabelValues(label, resultLabel(nil)).Inc()
		case err := <-f.Err():
			published.WithLabelValues(label, resultLabel(err)).Inc()
			b.log.Warn("asynchronous publish failed", "subject", subject, "msg_id", msgID, "err", err)
		}
	}()
	return nil
}

// PublishCore sends m on a core NATS subject (not stored): control
// messages to whoever listens now.
func (b *Bus) PublishCore(ctx context.Context, subject string, m proto.Message) error {
	msg, err := newMsg(ctx, subject, m)
	if err != nil {
		return err
	}
	if err := b.nc.PublishMsg(msg); err != nil {
		return fmt.Errorf("publish %s: %w", subject, err)
	}
	return nil
}

// Request sends req on a core NATS subject and decodes the reply into resp.
func (b *Bus) Request(ctx context.Context, subject string, req, resp proto.Message) error {
	_, err := b.RequestHeaders(ctx, subject, nil, req, resp)
	return err
}

// RequestHeaders is Request with headers added to the request, returning
// the reply's headers.
func (b *Bus) RequestHeaders(ctx context.Context, subject string, hdr nats.Header, req, resp proto.Message) (nats.Header, error) {
	ctx, span := otel.Tracer(tracerName).Start(ctx, "request "+subject, trace.WithSpanKind(trace.SpanKindClient))
	defer span.End()
	msg, err := newMsg(ctx, subject, req)
	if err != nil {
		return nil, err
	}
	for k, v := range hdr {
		msg.Header[k] = v
	}
	reply, err := b.nc.RequestMsgWithContext(ctx, msg)
	if err != nil {
		telemetry.SpanMessageError(span, err, req)
		return nil, fmt.Errorf("request %s: %w", subject, err)
	}
	if err := proto.Unmarshal(reply.Data, resp); err != nil {
		return nil, fmt.Errorf("%w: reply on %s: %v", ErrDecode, subject, err)
	}
	return reply.Header, nil
}

// ContextFrom extracts the trace context carried in a message's headers.
func ContextFrom(ctx context.Context, h nats.Header) context.Context {
	if h == nil {
		return ctx
	}
	return otel.GetTextMapPropagator().Extract(ctx, headerCarrier(h))
}

// Reply answers a core NATS request with m, carrying the trace context.
func Reply(ctx context.Context, req *nats.Msg, m proto.Message) error {
	msg, err := newMsg(ctx, req.Reply, m)
	if err != nil {
		return err
	}
	if err := req.RespondMsg(msg); err != nil {
		return fmt.Errorf("reply on %s: %w", req.Subject, err)
	}
	return nil
}

// RedactURL hides the credentials of a NATS server URL, or of each URL of
// a comma-separated list: a password, or a user name alone (a token).
func RedactURL(urls string) string {
	parts := strings.Split(urls, ",")
	for i, p := range parts {
		u, err := neturl.Parse(strings.TrimSpace(p))
		switch {
		case err != nil:
			parts[i] = "(unparsable url)"
		case u.User == nil:
		default:
			u.User = neturl.User("redacted")
			parts[i] = u.String()
		}
	}
	return strings.Join(parts, ",")
}
