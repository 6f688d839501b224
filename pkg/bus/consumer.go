package bus

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"runtime/debug"
	"strconv"
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

// ErrPermanent marks a handler error that no retry can fix: the message is
// dead-lettered at once instead of redelivered.
var ErrPermanent = errors.New("permanent failure")

// Permanent wraps err so the consumer dead-letters the message at once.
func Permanent(err error) error { return fmt.Errorf("%w: %w", ErrPermanent, err) }

// ErrPanicked is the error of a handler that panicked. The consumer
// recovers the panic, logs it with its stack and dead-letters the message
// at once (reason "panic"): a message that makes its handler panic would
// otherwise kill the process, be redelivered to the next one and kill it
// too, a crash loop. Retrying it with backoff would mostly repeat the
// same panic while holding up a strictly ordered consumer (router inbound,
// MaxAckPending 1) for minutes; the copy in DEADLETTER keeps it for an
// operator. A panic in a goroutine the handler started is not recovered.
var ErrPanicked = errors.New("handler panicked")

// retryAfterError asks for a specific redelivery delay.
type retryAfterError struct {
	err   error
	delay time.Duration
}

func (e *retryAfterError) Error() string { return e.err.Error() }
func (e *retryAfterError) Unwrap() error { return e.err }

// RetryAfter wraps err so the message is redelivered after delay instead of
// the consumer's backoff.
func RetryAfter(err error, delay time.Duration) error {
	return &retryAfterError{err: err, delay: delay}
}

// ConsumerSpec declares a durable pull consumer and how this process runs it.
type ConsumerSpec struct {
	// Stream is the unprefixed stream name (StreamInbound, …).
	Stream string
	// Durable names the consumer: "<service>-<purpose>". Processes that use
	// the same durable share its messages.
	Durable string
	// FilterSubjects are unprefixed subjects; empty means the whole stream.
	FilterSubjects []string
	// AckWait is how long a delivered message may go without an ack or an
	// in-progress signal before the server redelivers it. Default 30s.
	AckWait time.Duration
	// MaxDeliver bounds the deliveries a handler fails: the failure of
	// delivery MaxDeliver (or a later one) dead-letters the message.
	// Default 10. The server's own bound is higher (see serverMaxDeliver):
	// deliveries handed back by a stopping process, which run no handler,
	// must not make the server drop a message on its own.
	MaxDeliver int
	// MaxAckPending caps unacknowledged messages across all processes of
	// the durable. 1 gives strict order. Default 1000.
	MaxAckPending int
	// Backoff is the nak delay per attempt (the last entry repeats).
	// Default: 1s, 2s, 5s, 10s, 30s, 60s with ±20% jitter.
	Backoff []time.Duration
	// Concurrency is how many handlers run at once in this process. Default 1.
	Concurrency int
	// DrainTimeout is how long in-flight handlers may keep running after
	// Run's context ends; handlers still running then see their context
	// canceled and their message is handed back. Default 10s.
	DrainTimeout time.Duration
	// PollWait bounds one pull request; it is also the longest Run takes to
	// notice its context ended while idle. Default 1s.
	PollWait time.Duration
	// Unavailable, when set, tells a handler error that means a dependency
	// is down (Postgres unreachable, restarting) from any other. Such a
	// message is not handed back: the consumer keeps it in progress and
	// runs the handler again, pausing 0.5 s doubling to 5 s, without using
	// up a delivery attempt — an outage does not turn work into dead
	// letters or failed turns — for up to UnavailableFor; after that the
	// error counts like any other.
	Unavailable func(error) bool
	// UnavailableFor bounds the in-place retries of one delivery.
	// Default 15 min.
	UnavailableFor time.Duration
	// BacklogInterval is how often the consumer's backlog gauges
	// (switchboard_bus_consumer_pending, _ack_pending) are read from the
	// server while it runs. Default 15s.
	BacklogInterval time.Duration
}

// maxUnavailablePause is the longest pause between in-place retries.
const maxUnavailablePause = 5 * time.Second

func (s ConsumerSpec) withDefaults() ConsumerSpec {
	if s.AckWait <= 0 {
		s.AckWait = 30 * time.Second
	}
	if s.MaxDeliver <= 0 {
		s.MaxDeliver = 10
	}
	if s.MaxAckPending <= 0 {
		s.MaxAckPending = 1000
	}
	if len(s.Backoff) == 0 {
		s.Backoff = []time.Duration{time.Second, 2 * time.Second, 5 * time.Second, 10 * time.Second, 30 * time.Second, time.Minute}
	}
	if s.Concurrency <= 0 {
		s.Concurrency = 1
	}
	if s.DrainTimeout <= 0 {
		s.DrainTimeout = 10 * time.Second
	}
	if s.PollWait <= 0 {
		s.PollWait = time.Second
	}
	if s.UnavailableFor <= 0 {
		s.UnavailableFor = 15 * time.Minute
	}
	if s.BacklogInterval <= 0 {
		s.BacklogInterval = 15 * time.Second
	}
	return s
}

// Delivery describes the bus message a handler is processing.
type Delivery struct {
	Subject string
	MsgID   string
	// Attempt counts deliveries of this message to the durable, from 1.
	Attempt int
	// HandedBack counts the deliveries a stopping process handed back
	// (their handler did not run, or was cut short by the drain timeout).
	HandedBack int
	// Rerun counts the handler's runs of this delivery before the one in
	// progress: a run that failed because a dependency was down is run
	// again in place (ConsumerSpec.Unavailable), under the same Attempt,
	// and may have done part of its work (published, streamed) already.
	Rerun     int
	StreamSeq uint64
	Published time.Time
	Header    nats.Header
	msg       jetstream.Msg
}

// Spent counts the deliveries that used up an attempt: Attempt less the
// hand-backs of stopping processes. A rollout that hands a long turn
// back again and again must not make its last attempt look like a
// failing one.
func (d *Delivery) Spent() int { return max(d.Attempt-d.HandedBack, 1) }

// InProgress tells the server the handler is still working, resetting the
// ack timer. Consumers do this on their own every AckWait/3; long
// handlers may call it at meaningful points too.
func (d *Delivery) InProgress() error { return d.msg.InProgress() }

type deliveryKey struct{}

// DeliveryFrom returns the delivery a handler's context belongs to.
func DeliveryFrom(ctx context.Context) (*Delivery, bool) {
	d, ok := ctx.Value(deliveryKey{}).(*Delivery)
	return d, ok
}

// protoPtr constrains a pointer to a generated protobuf message struct.
type protoPtr[T any] interface {
	*T
	proto.Message
}

// Handler processes one decoded message. A nil error acks it; ErrPermanent
// dead-letters it; any other error naks it with backoff until MaxDeliver,
// after which it is dead-lettered.
type Handler[T any] func(ctx context.Context, msg *T) error

// Consumer runs a typed handler over a durable pull consumer.
type Consumer[T any, P protoPtr[T]] struct {
	bus  *Bus
	spec ConsumerSpec
	h    func(context.Context, P) error
	log  *slog.Logger
	// handBacks counts hand-backs per message (nil: not counted).
	handBacks jetstream.KeyValue
}

// BucketHandBacks is the KV bucket (before the topology prefix) that
// counts the hand-backs of each message, key "<durable>.<stream seq>",
// for a day.
const BucketHandBacks = "BUS_HANDBACKS"

// NewConsumer prepares a consumer; Run creates it on the server and pulls.
func NewConsumer[T any, P protoPtr[T]](b *Bus, spec ConsumerSpec, h func(context.Context, P) error) *Consumer[T, P] {
	spec = spec.withDefaults()
	return &Consumer[T, P]{bus: b, spec: spec, h: h, log: b.log.With("consumer", spec.Durable)}
}

// Ensure creates or updates the durable consumer on the server.
func (c *Consumer[T, P]) Ensure(ctx context.Context) (jetstream.Consumer, error) {
	topo := c.bus.topo
	filters := make([]string, len(c.spec.FilterSubjects))
	for i, s := range c.spec.FilterSubjects {
		filters[i] = topo.Subject(s)
	}
	cfg := jetstream.ConsumerConfig{
		Durable:       c.spec.Durable,
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       c.spec.AckWait,
		MaxDeliver:    serverMaxDeliver(c.spec.MaxDeliver),
		MaxAckPending: c.spec.MaxAckPending,
		DeliverPolicy: jetstream.DeliverAllPolicy,
	}
	switch len(filters) {
	case 0:
	case 1:
		cfg.FilterSubject = filters[0]
	default:
		cfg.FilterSubjects = filters
	}
	stream := topo.Stream(c.spec.Stream)
	cons, err := c.bus.js.CreateOrUpdateConsumer(ctx, stream, cfg)
	if err != nil {
		return nil, fmt.Errorf("ensure consumer %s on %s: %w", c.spec.Durable, stream, err)
	}
	return cons, nil
}

// Run pulls and handles messages until ctx ends, then lets in-flight
// handlers finish within DrainTimeout and returns.
func (c *Consumer[T, P]) Run(ctx context.Context) error {
	cons, err := c.Ensure(ctx)
	if err != nil {
		return err
	}
	stopGauges := c.watchBacklog(ctx, cons)
	defer stopGauges()
	if c.handBacks, err = c.bus.handBackCounts(ctx); err != nil {
		c.log.Warn("hand-back counts unavailable: a hand-back uses up a delivery attempt", "err", err)
		c.handBacks = nil
	}
	// Handlers outlive ctx by up to DrainTimeout so a graceful stop lets
	// running work finish.
	hctx, cancelHandlers := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelHandlers()
	slots := make(chan struct{}, c.spec.Concurrency)
	// Handlers run on Concurrency long-lived goroutines, each holding a
	// slot per message: a goroutine per message would grow a fresh stack
	// to a handler's depth every time.
	work := make(chan jetstream.Msg)
	var wg sync.WaitGroup
	for range c.spec.Concurrency {
		wg.Go(func() {
			for msg := range work {
				c.handle(ctx, hctx, msg)
				<-slots
			}
		})
	}
	defer func() {
		close(work)
		done := make(chan struct{})
		go func() { wg.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(c.spec.DrainTimeout):
			c.log.Warn("handlers still running after drain timeout; handing their messages back")
			cancelHandlers()
			<-done
		}
	}()
	for ctx.Err() == nil {
		select {
		case slots <- struct{}{}:
		case <-ctx.Done():
			return nil
		}
		free := 1
		for free < c.spec.Concurrency {
			select {
			case slots <- struct{}{}:
				free++
				continue
			default:
			}
			break
		}
		batch, err := cons.Fetch(free, jetstream.FetchMaxWait(c.spec.PollWait))
		if err != nil {
			for range free {
				<-slots
			}
			if ctx.Err() != nil {
				return nil
			}
			c.log.Warn("fetch failed", "err", err)
			select {
			case <-time.After(time.Second):
			case <-ctx.Done():
			}
			continue
		}
		got := 0
		for msg := range batch.Messages() {
			got++
			if ctx.Err() != nil {
				// Shutting down: hand it back to another process.
				c.handBack(msg)
				<-slots
				continue
			}
			work <- msg
		}
		for range free - got {
			<-slots
		}
		if err := batch.Error(); err != nil && !errors.Is(err, nats.ErrTimeout) && ctx.Err() == nil {
			c.log.Debug("fetch ended", "err", err)
		}
	}
	return nil
}

// watchBacklog keeps the consumer's backlog gauges current until stop,
// which removes them: a consumer this process no longer runs (a partition
// that moved to another replica) reports nothing here.
func (c *Consumer[T, P]) watchBacklog(ctx context.Context, cons jetstream.Consumer) (stop func()) {
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	name := c.spec.Durable
	go func() {
		defer close(done)
		t := time.NewTicker(c.spec.BacklogInterval)
		defer t.Stop()
		for {
			ictx, icancel := context.WithTimeout(ctx, 5*time.Second)
			info, err := cons.Info(ictx)
			icancel()
			if err == nil {
				consumerPending.WithLabelValues(name).Set(float64(info.NumPending))
				consumerAckPending.WithLabelValues(name).Set(float64(info.NumAckPending))
			} else if ctx.Err() == nil {
				c.log.Debug("read consumer backlog", "err", err)
			}
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
	}()
	return func() {
		cancel()
		<-done
		consumerPending.DeleteLabelValues(name)
		consumerAckPending.DeleteLabelValues(name)
	}
}

// handle runs the handler on one message under ctx (the handlers'
// context); stopping is Run's, which ends when the consumer stops.
func (c *Consumer[T, P]) handle(stopping, ctx context.Context, msg jetstream.Msg) {
	start := time.Now()
	d := &Delivery{Subject: msg.Subject(), Header: msg.Headers(), msg: msg, Attempt: 1}
	if meta, err := msg.Metadata(); err == nil {
		d.Attempt = int(meta.NumDelivered)
		d.StreamSeq = meta.Sequence.Stream
		d.Published = meta.Timestamp
		if d.Attempt > 1 {
			d.HandedBack = c.handedBack(ctx, d.StreamSeq)
		}
	}
	d.MsgID = msg.Headers().Get(nats.MsgIdHdr)
	if d.Attempt > 1 {
		redeliveries.WithLabelValues(c.spec.Durable).Inc()
	}
	ctx = ContextFrom(ctx, msg.Headers())
	ctx, span := otel.Tracer(tracerName).Start(ctx, "consume "+c.spec.Durable,
		trace.WithSpanKind(trace.SpanKindConsumer),
		trace.WithAttributes(attribute.String("messaging.system", "nats"),
			attribute.String("messaging.destination.name", d.Subject),
			attribute.String("messaging.message.id", d.MsgID),
			attribute.Int("messaging.nats.delivery", d.Attempt)))
	defer span.End()
	ctx = context.WithValue(ctx, deliveryKey{}, d)

	var v T
	if err := proto.Unmarshal(msg.Data(), P(&v)); err != nil {
		telemetry.SpanFailed(span, "decode")
		c.deadLetter(ctx, msg, d, "decode", fmt.Errorf("%w: %v", ErrDecode, err))
		return
	}

	stop := c.keepAlive(msg)
	err := c.call(ctx, d, P(&v))
	err = c.whileUnavailable(stopping, ctx, d, msg, err)
	stop()
	handleSeconds.WithLabelValues(c.spec.Durable).Observe(time.Since(start).Seconds())

	var ra *retryAfterError
	switch {
	case err == nil:
		if aerr := msg.Ack(); aerr != nil {
			c.log.Warn("ack failed; message will be redelivered", "msg_id", d.MsgID, "err", aerr)
		}
		handled.WithLabelValues(c.spec.Durable, "ack").Inc()
	case errors.Is(err, ErrPanicked):
		telemetry.SpanMessageError(span, err, P(&v))
		c.deadLetter(context.WithoutCancel(ctx), msg, d, "panic", err)
	case errors.Is(err, ErrPermanent):
		telemetry.SpanMessageError(span, err, P(&v))
		c.deadLetter(ctx, msg, d, "permanent", err)
	case ctx.Err() != nil, stopping.Err() != nil && c.spec.Unavailable != nil && c.spec.Unavailable(err):
		// The drain timeout ran out, or the consumer stops while a
		// dependency is down: another process takes it.
		c.handBack(msg)
	case d.Spent() >= c.spec.MaxDeliver:
		telemetry.SpanMessageError(span, err, P(&v))
		c.deadLetter(ctx, msg, d, "max_deliveries", err)
	default:
		delay := c.backoff(d.Attempt)
		if errors.As(err, &ra) {
			delay = ra.delay
		}
		c.log.Warn("handler failed; redelivering", "msg_id", d.MsgID, "attempt", d.Attempt, "delay", delay, "err", err)
		_ = msg.NakWithDelay(delay)
		handled.WithLabelValues(c.spec.Durable, "nak").Inc()
	}
}

// handBackSlack is how many deliveries beyond MaxDeliver the server
// allows: hand-backs by stopping processes and deliveries lost with a
// crashed one, neither of which ran the handler to its end. Only a
// message that keeps killing the processes handling it reaches it.
const handBackSlack = 10

func serverMaxDeliver(maxDeliver int) int { return maxDeliver + handBackSlack }

// handBack returns a message this stopping process will not handle. Its
// redelivery waits until the pull request that brought it has expired:
// handed back at once, it would come straight back to that request,
// again and again, until the server gave up on it.
func (c *Consumer[T, P]) handBack(msg jetstream.Msg) {
	if meta, err := msg.Metadata(); err == nil {
		c.countHandBack(meta.Sequence.Stream)
	}
	_ = msg.NakWithDelay(c.spec.PollWait + handBackMargin)
	handled.WithLabelValues(c.spec.Durable, "nak").Inc()
}

func (c *Consumer[T, P]) handBackKey(seq uint64) string {
	return c.spec.Durable + "." + strconv.FormatUint(seq, 10)
}

// handedBack is how many times the message at stream sequence seq was
// handed back (0 when not counted).
func (c *Consumer[T, P]) handedBack(ctx context.Context, seq uint64) int {
	if c.handBacks == nil {
		return 0
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	e, err := c.handBacks.Get(ctx, c.handBackKey(seq))
	if err != nil {
		return 0
	}
	n, _ := strconv.Atoi(string(e.Value()))
	return n
}

// countHandBack records one more hand-back of the message at seq, before
// it goes back: a count that fails to be written leaves the attempt used
// up, as before there were counts.
func (c *Consumer[T, P]) countHandBack(seq uint64) {
	if c.handBacks == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	key := c.handBackKey(seq)
	e, err := c.handBacks.Get(ctx, key)
	switch {
	case errors.Is(err, jetstream.ErrKeyNotFound):
		_, err = c.handBacks.Create(ctx, key, []byte("1"))
	case err == nil:
		n, _ := strconv.Atoi(string(e.Value()))
		_, err = c.handBacks.Update(ctx, key, []byte(strconv.Itoa(n+1)), e.Revision())
	}
	if err != nil {
		// Its redelivery will count as a failed attempt.
		c.log.Warn("count a hand-back: the handed back message's redelivery uses up an attempt", "key", key, "err", err)
	}
}

// handBackMargin covers the time between a pull request's sending and
// its expiry starting on the server.
const handBackMargin = 500 * time.Millisecond

// whileUnavailable runs the handler again, in place, while its error says
// a dependency is down: the message stays in progress (keepAlive runs)
// and no delivery attempt is used up. It returns the last error once the
// handler succeeded or failed otherwise, UnavailableFor passed, or the
// consumer is stopping.
func (c *Consumer[T, P]) whileUnavailable(stopping, ctx context.Context, d *Delivery, msg jetstream.Msg, err error) error {
	if c.spec.Unavailable == nil {
		return err
	}
	deadline := time.Now().Add(c.spec.UnavailableFor)
	pause := 500 * time.Millisecond
	for n := 1; err != nil && !errors.Is(err, ErrPermanent) && c.spec.Unavailable(err); n++ {
		if time.Now().After(deadline) {
			c.log.Warn("dependency still unavailable; handing the message back", "msg_id", d.MsgID, "err", err)
			return err
		}
		if n == 1 {
			c.log.Warn("dependency unavailable; retrying the message in place", "msg_id", d.MsgID, "err", err)
		} else {
			c.log.Debug("dependency still unavailable", "msg_id", d.MsgID, "retry", n, "err", err)
		}
		unavailableRetries.WithLabelValues(c.spec.Durable).Inc()
		select {
		case <-time.After(pause):
		case <-stopping.Done():
			return err
		case <-ctx.Done():
			return err
		}
		pause = min(2*pause, maxUnavailablePause)
		var v T
		if derr := proto.Unmarshal(msg.Data(), P(&v)); derr != nil {
			return err // decoded once already; cannot happen
		}
		d.Rerun++
		err = c.call(ctx, d, P(&v))
	}
	return err
}

// call runs the handler, turning its panic into an ErrPanicked error,
// logged with the stack and the message's subject and stream sequence
// and counted in switchboard_bus_handler_panics_total.
func (c *Consumer[T, P]) call(ctx context.Context, d *Delivery, v P) (err error) {
	defer func() {
		if p := recover(); p != nil {
			handlerPanics.WithLabelValues(c.spec.Durable).Inc()
			c.log.Error("handler panicked", "subject", d.Subject, "stream_seq", d.StreamSeq,
				"msg_id", d.MsgID, "attempt", d.Attempt, "panic", fmt.Sprint(p), "stack", string(debug.Stack()))
			err = fmt.Errorf("%w: %v", ErrPanicked, p)
		}
	}()
	return c.h(ctx, v)
}

// keepAlive signals in-progress every AckWait/3 while a handler runs.
func (c *Consumer[T, P]) keepAlive(msg jetstream.Msg) (stop func()) {
	done := make(chan struct{})
	go func() {
		t := time.NewTicker(c.spec.AckWait / 3)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				if err := msg.InProgress(); err != nil {
					c.log.Debug("in-progress signal failed", "err", err)
				}
			}
		}
	}()
	return func() { close(done) }
}

func (c *Consumer[T, P]) backoff(attempt int) time.Duration {
	i := attempt - 1
	if i >= len(c.spec.Backoff) {
		i = len(c.spec.Backoff) - 1
	}
	if i < 0 {
		i = 0
	}
	d := c.spec.Backoff[i]
	jitter := time.Duration(float64(d) * (rand.Float64()*0.4 - 0.2))
	return d + jitter
}

// deadLetter copies the message to the dead-letter stream with the reason,
// then terminates it so it is never redelivered. If the copy cannot be
// stored the message is naked instead: nothing is dropped silently.
func (c *Consumer[T, P]) deadLetter(ctx context.Context, msg jetstream.Msg, d *Delivery, reason string, cause error) {
	topo := c.bus.topo
	dl, id := deadLetterMsg(topo, c.spec.Stream, c.spec.Durable, d.StreamSeq, d.Subject, msg.Headers(), msg.Data(),
		reason, cause, d.Attempt)
	if _, err := c.bus.js.PublishMsg(ctx, dl, jetstream.WithMsgID(id)); err != nil {
		c.log.Error("dead-letter publish failed; message handed back", "msg_id", d.MsgID, "err", err)
		_ = msg.NakWithDelay(c.backoff(d.Attempt))
		handled.WithLabelValues(c.spec.Durable, "nak").Inc()
		return
	}
	if err := msg.TermWithReason(reason); err != nil {
		c.log.Warn("term failed", "msg_id", d.MsgID, "err", err)
	}
	if topo.workQueue(c.spec.Stream) {
		// Servers before 2.10 keep a terminated message in a work-queue
		// stream; it now lives in the dead-letter stream, so remove it.
		if s, err := c.bus.js.Stream(ctx, topo.Stream(c.spec.Stream)); err == nil {
			_ = s.DeleteMsg(ctx, d.StreamSeq)
		}
	}
	handled.WithLabelValues(c.spec.Durable, "term").Inc()
	terminated.WithLabelValues(c.spec.Durable, reason).Inc()
	c.log.Error("message dead-lettered", "msg_id", d.MsgID, "subject", d.Subject,
		"attempts", d.Attempt, "reason", reason, "err", cause)
}

// deadLetterMsg is the copy of a message given up on that goes to the
// dead-letter stream, with its dedupe id: one per stream, consumer and
// stream sequence, so copies made twice (a retry, two processes) are one.
func deadLetterMsg(topo Topology, stream, durable string, seq uint64, subject string, h nats.Header, data []byte,
	reason string, cause error, attempts int) (*nats.Msg, string) {
	dl := nats.NewMsg(topo.Subject(SubjectDeadLetter + "." + stream))
	dl.Data = data
	for k, v := range h {
		if k == nats.MsgIdHdr {
			continue
		}
		dl.Header[k] = v
	}
	dl.Header.Set("Sb-Dead-Subject", subject)
	dl.Header.Set("Sb-Dead-Msg-Id", h.Get(nats.MsgIdHdr))
	dl.Header.Set("Sb-Dead-Consumer", durable)
	dl.Header.Set("Sb-Dead-Reason", reason)
	dl.Header.Set("Sb-Dead-Error", truncate(cause.Error(), 512))
	dl.Header.Set("Sb-Dead-Attempts", strconv.Itoa(attempts))
	return dl, fmt.Sprintf("dead:%s:%s:%d", stream, durable, seq)
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n]
}
