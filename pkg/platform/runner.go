package platform

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/switchboard-chat/switchboard/pkg/attachment"
	"github.com/switchboard-chat/switchboard/pkg/bus"
	"github.com/switchboard-chat/switchboard/pkg/gatewaystatus"
	deliveryv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/delivery/v1"
	eventsv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/events/v1"
	"github.com/switchboard-chat/switchboard/pkg/panics"
	"github.com/switchboard-chat/switchboard/pkg/sessionkey"
)

// KV bucket names (before the topology prefix).
const (
	BucketReceipts = "GATEWAY_RECEIPTS"
	BucketSeen     = "GATEWAY_SEEN"
	BucketLeases   = "GATEWAY_LEASES"
)

// Options tune a Runner; zero values take the defaults.
type Options struct {
	Log *slog.Logger
	// Backoff between reconnects; DefaultBackoff (30 → 300 s) if nil.
	Backoff Backoff
	// StableAfter is how long a connection must stay up for the reconnect
	// schedule to start over when it drops (default 1 min): one that
	// drops sooner, again and again, walks the schedule to its end.
	StableAfter time.Duration
	// MaxEventBytes bounds an encoded inbound event
	// (DefaultMaxEventBytes if 0).
	MaxEventBytes int
	// ReceiptTTL is how long a send's receipt answers retries (default 24 h).
	ReceiptTTL time.Duration
	// SeenTTL is how long an inbound event id is remembered beyond the
	// bus dedupe window (default 7 days).
	SeenTTL time.Duration
	// LeaseTTL of the single-consumer lease (default 10 s; a standby
	// takes over within LeaseTTL + LeaseTTL/5).
	LeaseTTL time.Duration
	// Instance names this replica in the lease (default hostname + random).
	Instance string
	// SendConcurrency bounds platform operations in flight (default 32).
	SendConcurrency int
	// SendTimeout bounds one platform operation (default 30 s).
	SendTimeout time.Duration
	// TypingHold bounds how long a message to a chat waits for the
	// chat's typing call in flight (default 2 s); past it, the typing
	// call is cancelled and the message goes (typingCalls).
	TypingHold time.Duration
	// PresenceTTL is the presence bucket's max age
	// (gatewaystatus.PresenceTTL by default; every replica of a
	// deployment must use the same). The replica's entry is rewritten
	// every PresenceTTL/3.
	PresenceTTL time.Duration
	// Attachments: when enabled, a data: URL is kept in the attachment
	// store before its event is published, and a Fetcher platform's
	// gateway downloads the attachments the workers ask for.
	Attachments attachment.Config
}

func (o *Options) defaults() {
	if o.Log == nil {
		o.Log = slog.Default()
	}
	if o.Backoff == nil {
		o.Backoff = DefaultBackoff
	}
	if o.StableAfter <= 0 {
		o.StableAfter = time.Minute
	}
	if o.MaxEventBytes <= 0 {
		o.MaxEventBytes = DefaultMaxEventBytes
	}
	if o.ReceiptTTL <= 0 {
		o.ReceiptTTL = 24 * time.Hour
	}
	if o.SeenTTL <= 0 {
		o.SeenTTL = 7 * 24 * time.Hour
	}
	if o.LeaseTTL <= 0 {
		o.LeaseTTL = 10 * time.Second
	}
	if o.Instance == "" {
		host, _ := os.Hostname()
		b := make([]byte, 4)
		_, _ = rand.Read(b)
		o.Instance = host + "-" + hex.EncodeToString(b)
	}
	if o.PresenceTTL <= 0 {
		o.PresenceTTL = gatewaystatus.PresenceTTL
	}
	if o.SendConcurrency <= 0 {
		o.SendConcurrency = 32
	}
	if o.SendTimeout <= 0 {
		o.SendTimeout = 30 * time.Second
	}
	if o.TypingHold <= 0 {
		o.TypingHold = defaultTypingHold
	}
}

// State is where a Runner's connection is.
type State string

const (
	StateStarting   State = "starting"
	StateConnecting State = "connecting"
	StateConnected  State = "connected"
	StateStandby    State = "standby"
	StateFatal      State = "fatal"
	StateStopped    State = "stopped"
	// StatePaused: an operator paused the platform (/platform pause): no
	// connection, no lease; sends are still served.
	StatePaused State = "paused"
)

// Runner runs one Platform: connection lifecycle, inbound publishing,
// send serving, health and metrics.
type Runner struct {
	p    Platform
	name string
	bus  *bus.Bus
	opts Options
	log  *slog.Logger

	receipts    jetstream.KeyValue
	seen        jetstream.KeyValue
	attachments *attachment.Store // nil: attachments are not kept
	react       *reactions        // nil: the platform does not react, or reactions are off
	// receiptsStream is the receipts bucket's stream: the headers of its
	// entries (a reservation's holder, writeReservation).
	receiptsStream jetstream.Stream
	// typing are the typing calls in flight, which a message to their
	// chat waits for.
	typing typingCalls

	mu     sync.Mutex
	state  State
	reason string
	// since is when state began; attempts counts failed connections
	// since the last success (the presence entry shows both).
	since    time.Time
	attempts int
	started  atomic.Bool

	// pause is the operator's pause of this platform (/platform).
	pause *pauseGate
	// changed wakes the presence writer after a state change.
	changed chan struct{}
	// sending are the receipt keys being sent here (serveSending).
	sending sendingKeys
	// held are receipts sent here that could not be stored yet.
	held heldReceipts
	// storeHook, when set (by a test), runs before each store of a
	// receipt; its error fails the store, as NATS unavailable would.
	storeHook atomic.Pointer[func() error]
}

// NewRunner wraps p; Run starts it.
func NewRunner(p Platform, b *bus.Bus, opts Options) (*Runner, error) {
	if p == nil || b == nil {
		return nil, errors.New("platform runner: platform and bus are required")
	}
	opts.defaults()
	name := p.Name()
	if name == "" {
		return nil, errors.New("platform runner: empty platform name")
	}
	r := &Runner{p: p, name: name, bus: b, opts: opts, log: opts.Log.With("platform", name), state: StateStarting,
		since: time.Now(), pause: newPauseGate(), changed: make(chan struct{}, 1)}
	if acct := p.Account(); acct != "" {
		r.log = r.log.With("account", acct)
	}
	if opts.Attachments.Enabled {
		r.attachments = attachment.New(b.JetStream(), b.Topology(), opts.Attachments)
	}
	r.react = newReactions(p, name, r.log)
	return r, nil
}

// Platform is the wrapped platform.
func (r *Runner) Platform() Platform { return r.p }

// State returns the connection state and, when fatal or connecting, the
// last error.
func (r *Runner) State() (State, string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.state, r.reason
}

func (r *Runner) setState(s State, reason string) {
	r.mu.Lock()
	if s != r.state {
		r.since = time.Now()
	}
	r.state, r.reason = s, reason
	r.mu.Unlock()
	connectedGauge.WithLabelValues(r.name).Set(b2f(s == StateConnected))
	fatalGauge.WithLabelValues(r.name).Set(b2f(s == StateFatal))
	pausedGauge.WithLabelValues(r.name).Set(b2f(s == StatePaused))
	select {
	case r.changed <- struct{}{}:
	default:
	}
}

func (r *Runner) setAttempts(n int) {
	r.mu.Lock()
	r.attempts = n
	r.mu.Unlock()
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// Ready is a readiness check: ready while connected, while standing by
// for the single-consumer lease, or paused by an operator (a standby and
// a paused replica serve sends).
func (r *Runner) Ready(context.Context) error {
	s, reason := r.State()
	switch s {
	case StateConnected, StateStandby, StatePaused:
		return nil
	case StateFatal:
		return fmt.Errorf("%s gateway stopped: %s", r.name, reason)
	case StateConnecting:
		if reason != "" {
			return fmt.Errorf("%s gateway connecting (last error: %s)", r.name, reason)
		}
		return fmt.Errorf("%s gateway connecting", r.name)
	default:
		return fmt.Errorf("%s gateway %s", r.name, s)
	}
}

func (r *Runner) bucket(name string) string { return r.bus.Topology().Stream(name) }

func (r *Runner) openBuckets(ctx context.Context) error {
	js := r.bus.JetStream()
	replicas := max(r.bus.Topology().Replicas, 1)
	var err error
	r.receipts, err = js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{
		Bucket: r.bucket(BucketReceipts), Description: "first receipt per send idempotency key",
		TTL: r.opts.ReceiptTTL, History: 1, Replicas: replicas, Storage: r.bus.Topology().Storage,
	})
	if err != nil {
		return fmt.Errorf("receipts bucket: %w", err)
	}
	if r.receiptsStream, err = js.Stream(ctx, "KV_"+r.bucket(BucketReceipts)); err != nil {
		return fmt.Errorf("receipts bucket's stream: %w", err)
	}
	r.seen, err = js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{
		Bucket: r.bucket(BucketSeen), Description: "inbound event ids already published",
		TTL: r.opts.SeenTTL, History: 1, Replicas: replicas, Storage: r.bus.Topology().Storage,
	})
	if err != nil {
		return fmt.Errorf("seen bucket: %w", err)
	}
	return nil
}

// Run serves sends and keeps the platform connected until ctx ends, then
// stops the connection, finishes in-flight sends and returns.
func (r *Runner) Run(ctx context.Context) error {
	if !r.started.CompareAndSwap(false, true) {
		return errors.New("platform runner: Run called twice")
	}
	if si, ok := r.p.(SignInner); ok {
		if err := r.signIn(ctx, si); err != nil {
			return err
		}
		if ctx.Err() != nil {
			r.setState(StateStopped, "")
			return nil
		}
	}
	if err := r.openBuckets(ctx); err != nil {
		return err
	}
	// The leases bucket of a single-consumer platform, made before any
	// send or fetch is taken: a failure here returns with none running.
	var leases jetstream.KeyValue
	createLeases := func(ctx context.Context) (jetstream.KeyValue, error) {
		return leaseBucket(ctx, r.bus.JetStream(), r.bucket(BucketLeases), r.opts.LeaseTTL, max(r.bus.Topology().Replicas, 1))
	}
	if sc, ok := r.p.(SingleConsumer); ok && sc.SingleConsumer() {
		var err error
		if leases, err = createLeases(ctx); err != nil {
			return err
		}
	}
	stopStatus, err := r.startStatus(ctx)
	if err != nil {
		return err
	}
	defer stopStatus()
	if r.react != nil {
		// Stopped as Run returns: after the sends in flight, which may
		// queue reactions, finished.
		reactCtx, cancelReactions := context.WithCancel(context.WithoutCancel(ctx))
		defer cancelReactions()
		r.react.start(reactCtx)
		defer r.react.stop(reactionTimeout, cancelReactions)
	}
	var inflight inflight
	sem := make(chan struct{}, r.opts.SendConcurrency)
	sendCtx, cancelSends := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelSends()
	// Subscribed before the first send, so every reservation of this
	// replica is one it answers about; unsubscribed as Run returns, after
	// the sends in flight ended.
	asked, err := r.serveSending()
	if err != nil {
		return fmt.Errorf("subscribe %s sending questions: %w", r.name, err)
	}
	defer func() { _ = asked.Unsubscribe() }()
	sub, err := r.bus.Conn().QueueSubscribe(r.bus.Topology().SendSubject(r.name), "gateway-"+r.name, func(m *nats.Msg) {
		got := time.Now() // before the wait for room: a request's time runs from here (startWithin)
		sem <- struct{}{}
		if !inflight.add() {
			<-sem
			return // shutting down: its sender asks again
		}
		ctx := startWithin(bus.ContextFrom(sendCtx, m.Header), m.Header, got)
		req := &deliveryv1.SendRequested{}
		err := proto.Unmarshal(m.Data, req)
		end := func() {}
		if chat, ok := typingChat(req); ok && err == nil {
			// Noted here, where requests are taken one at a time in the
			// order the gateway got them, not on the call's goroutine: a
			// message to the chat right behind it, served on a goroutine
			// of its own at once, must find it in flight (typingCalls).
			ctx, end = r.typing.add(ctx, chat)
		}
		go func() {
			defer func() { end(); <-sem; inflight.done() }()
			r.serveSend(ctx, m, req, err)
		}()
	})
	if err != nil {
		return fmt.Errorf("subscribe %s sends: %w", r.name, err)
	}
	subs := []*nats.Subscription{sub}
	var runErr error
	if _, ok := r.p.(Fetcher); ok && r.attachments != nil {
		fetchSem := make(chan struct{}, fetchConcurrency)
		fsub, err := r.bus.Conn().QueueSubscribe(r.bus.Topology().FetchSubject(r.name), "gateway-"+r.name, func(m *nats.Msg) {
			select {
			case fetchSem <- struct{}{}:
			default:
				// All downloads busy: the worker asks again later rather
				// than wait behind them while other replicas are idle.
				r.replyFetch(sendCtx, m, &eventsv1.AttachmentFetched{Retry: true})
				return
			}
			if !inflight.add() {
				<-fetchSem
				return // shutting down: its sender asks again
			}
			go func() {
				defer func() { <-fetchSem; inflight.done() }()
				r.serveFetch(bus.ContextFrom(sendCtx, m.Header), m)
			}()
		})
		if err != nil {
			// Sends may be taken already: stopped as on any other
			// return, below, they end before Run does.
			runErr = fmt.Errorf("subscribe %s fetches: %w", r.name, err)
		} else {
			subs = append(subs, fsub)
		}
	}

	switch {
	case runErr != nil:
	case leases != nil:
		eph, _ := r.p.(Ephemeral)
		l := &lease{
			kv: leases, key: leaseKey(r.name, r.p.Account()), holder: r.opts.Instance, ttl: r.opts.LeaseTTL, log: r.log,
			conn: natsConn{r.bus.Conn()}, ephemeral: eph != nil && eph.Ephemeral(),
			// The bucket as it is, or, when the server forgot it, again.
			open: func(ctx context.Context) (jetstream.KeyValue, error) {
				kv, err := r.bus.JetStream().KeyValue(ctx, r.bucket(BucketLeases))
				if errors.Is(err, jetstream.ErrBucketNotFound) {
					return createLeases(ctx)
				}
				return kv, err
			},
			onHeld: func(held bool) {
				leaseGauge.WithLabelValues(r.name).Set(b2f(held))
				if !held {
					if s, _ := r.State(); s != StateFatal {
						r.setState(StateStandby, "")
					}
				}
			},
		}
		r.unpaused(ctx, func(ctx context.Context) {
			r.setState(StateStandby, "")
			l.run(ctx, r.connectLoop)
		})
	default:
		r.unpaused(ctx, r.connectLoop)
	}

	// Shutdown: stop taking sends and fetches, let in-flight ones finish.
	for _, s := range subs {
		if err := s.Drain(); err != nil {
			r.log.Warn("drain subscription", "subject", s.Subject, "err", err)
		}
	}
	// Drain returns at once: the subscriptions hand on what they had
	// until they close, and a message that comes after is not taken.
	// One SendTimeout bounds the whole drain, the subscriptions' and the
	// sends' (each send is bounded by it too): two in a row made a stop
	// take up to twice that, past the pods' terminationGracePeriodSeconds.
	drained := time.Now().Add(r.opts.SendTimeout)
	for _, s := range subs {
		for s.IsValid() && time.Now().Before(drained) {
			time.Sleep(5 * time.Millisecond)
		}
	}
	inflight.close()
	waitDone := make(chan struct{})
	go func() { inflight.wait(); close(waitDone) }()
	select {
	case <-waitDone:
	case <-time.After(time.Until(drained)):
		cancelSends()
		<-waitDone
	}
	// No send runs now: the receipts held for want of NATS get one
	// more store each, and no goroutine of them outlives Run.
	r.held.finish()
	if runErr != nil {
		return runErr
	}
	r.setState(StateStopped, "")
	return nil
}

// signInTimeout bounds one sign-in call.
const signInTimeout = 30 * time.Second

// signIn calls si.SignIn until it succeeds (nil), ctx ends (nil) or the
// platform refuses the credentials (the error, the state fatal), waiting
// on the backoff schedule between attempts; each failure is logged once.
func (r *Runner) signIn(ctx context.Context, si SignInner) error {
	r.setState(StateConnecting, "")
	logged := r.p.Account() != "" // NewRunner logs it already
	for attempt := 0; ctx.Err() == nil; attempt++ {
		callCtx, cancel := context.WithTimeout(ctx, signInTimeout)
		err := si.SignIn(callCtx)
		cancel()
		switch {
		case err == nil:
			if acct := r.p.Account(); acct != "" && !logged {
				r.log = r.log.With("account", acct)
				r.react = newReactions(r.p, r.name, r.log)
			}
			return nil
		case ctx.Err() != nil:
			return nil
		case IsFatal(err):
			r.log.Error("platform refused the sign-in; not retrying", "err", err)
			r.setState(StateFatal, err.Error())
			return err
		}
		wait := r.opts.Backoff(attempt)
		reconnectsTotal.WithLabelValues(r.name).Inc()
		r.log.Warn("platform sign-in failed; retrying", "err", err, "attempt", attempt+1, "wait", wait)
		r.setState(StateConnecting, err.Error())
		sleep(ctx, wait)
	}
	return nil
}

func leaseKey(platform, account string) string {
	sum := sha256.Sum256([]byte(account))
	return platform + "." + hex.EncodeToString(sum[:16])
}

// connectLoop connects until ctx ends or the platform fails fatally.
func (r *Runner) connectLoop(ctx context.Context) {
	attempt := 0
	for ctx.Err() == nil {
		r.setState(StateConnecting, r.lastReason())
		c := &conn{r: r}
		// A panic in the platform's receive loop (an inbound payload its
		// code cannot take) ends this connection like an error: the
		// loop reconnects with backoff; the platform, which had no
		// acknowledgement for the payload, hands it over again or drops
		// it by its own rules, as after any lost connection.
		err := panics.Recover(r.log, "gateway_connection", func() error { return r.p.Connect(ctx, c) }, "platform", r.name)
		connectedGauge.WithLabelValues(r.name).Set(0)
		if ctx.Err() != nil {
			return
		}
		if IsFatal(err) {
			r.log.Error("platform connection failed fatally; not retrying", "err", err)
			r.setState(StateFatal, err.Error())
			<-ctx.Done()
			return
		}
		if err == nil {
			err = errors.New("connection closed")
		}
		if up := c.connectedAt.Load(); up != 0 && time.Since(time.Unix(0, up)) >= r.opts.StableAfter {
			attempt = 0
		}
		wait := r.opts.Backoff(attempt)
		attempt++
		r.setAttempts(attempt)
		reconnectsTotal.WithLabelValues(r.name).Inc()
		r.log.Warn("platform connection lost; reconnecting", "err", err, "attempt", attempt, "wait", wait)
		r.setState(StateConnecting, err.Error())
		sleep(ctx, wait)
	}
}

func (r *Runner) lastReason() string {
	_, reason := r.State()
	return reason
}

// conn is the Conn handed to one Connect call.
type conn struct {
	r *Runner
	// connectedAt is when the platform said the connection is up (unix
	// nanoseconds; 0: not yet).
	connectedAt atomic.Int64
}

func (c *conn) Connected() {
	c.connectedAt.CompareAndSwap(0, time.Now().UnixNano())
	c.r.setAttempts(0)
	c.r.setState(StateConnected, "")
	c.r.log.Info("platform connected")
}

func (c *conn) Reject(ctx context.Context, reason string, err error) { c.r.Reject(ctx, reason, err) }

// Reject records an inbound payload that could not be normalized: it is
// logged with the reason and counted, never published.
func (r *Runner) Reject(_ context.Context, reason string, err error) {
	inboundTotal.WithLabelValues(r.name, "rejected").Inc()
	r.log.Warn("inbound payload rejected", "reason", reason, "err", err)
}

func (c *conn) Seen(ctx context.Context, eventID string) (bool, error) { return c.r.Seen(ctx, eventID) }

// Seen is Conn.Seen.
func (r *Runner) Seen(ctx context.Context, eventID string) (bool, error) {
	_, err := r.seen.Get(ctx, hashKey(r.name+":"+r.p.Account()+":"+eventID))
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("seen lookup: %w", err)
	}
	return true, nil
}

// MarkSeen records an event id as published without publishing anything:
// a platform that will receive an echo of what it sent (a sync copy of
// the bot's own message) marks the id the echo will carry, and Deliver
// then takes the echo for a duplicate, on whichever replica reads it.
func (r *Runner) MarkSeen(ctx context.Context, eventID string) error {
	if r.seen == nil {
		return errors.New("mark seen: the runner is not running")
	}
	msgID := r.name + ":" + r.p.Account() + ":" + eventID
	if _, err := r.seen.Put(ctx, hashKey(msgID), []byte(msgID)); err != nil {
		return fmt.Errorf("mark seen: %w", err)
	}
	return nil
}

func (c *conn) Deliver(ctx context.Context, ev *eventsv1.MessageReceived) (Accepted, error) {
	return c.r.Deliver(ctx, ev)
}

// Deliver validates, dedupes and publishes one inbound event. Platforms
// call it through their Conn; HTTP platforms whose requests outlive a
// connection may call it directly.
func (r *Runner) Deliver(ctx context.Context, ev *eventsv1.MessageReceived) (Accepted, error) {
	return r.deliver(ctx, ev, true)
}

// DeliverFresh is Deliver for an event whose id was made for it just now
// and so cannot have been seen (the API gateway's request ids): it skips
// the seen lookup and record, two bus round trips. The bus dedupe window
// still applies to the id.
func (r *Runner) DeliverFresh(ctx context.Context, ev *eventsv1.MessageReceived) (Accepted, error) {
	return r.deliver(ctx, ev, false)
}

func (r *Runner) deliver(ctx context.Context, ev *eventsv1.MessageReceived, seen bool) (Accepted, error) {
	// Before the size check: a data: URL's bytes leave the event here.
	if len(ev.GetAttachments()) > 0 {
		r.prepareAttachments(ctx, ev)
	}
	if err := r.Check(ev); err != nil {
		inboundTotal.WithLabelValues(r.name, "rejected").Inc()
		// As its bus message id: on the platforms whose event ids name
		// the sender (Signal's number), the log handler shows a pseudonym.
		r.log.Warn("inbound event rejected", "reason", err.Error(), "msg_id", r.name+":"+r.p.Account()+":"+ev.GetEventId())
		return Accepted{}, fmt.Errorf("%w: %v", ErrRejected, err)
	}
	src := ev.GetSource()
	msgID := src.GetPlatform() + ":" + src.GetAccount() + ":" + ev.GetEventId()
	seenKey := hashKey(msgID)
	if seen {
		if e, err := r.seen.Get(ctx, seenKey); err == nil && e != nil {
			inboundTotal.WithLabelValues(r.name, "duplicate").Inc()
			r.log.Debug("inbound event already seen", "msg_id", msgID)
			return Accepted{Duplicate: true, FirstSeen: e.Created()}, nil
		} else if err != nil && !errors.Is(err, jetstream.ErrKeyNotFound) {
			r.log.Warn("seen lookup failed; relying on bus dedupe", "err", err)
		}
	}
	if ev.GetReceivedAt() == nil {
		ev.ReceivedAt = timestamppb.Now()
	}
	ack, err := r.bus.Publish(ctx, r.bus.Topology().InboundSubject(sessionkey.ChatKey(src)), msgID, ev)
	if err != nil {
		inboundTotal.WithLabelValues(r.name, "error").Inc()
		return Accepted{}, fmt.Errorf("publish inbound event: %w", err)
	}
	if seen {
		if _, err := r.seen.Put(ctx, seenKey, []byte(msgID)); err != nil {
			r.log.Warn("record seen event failed", "err", err)
		}
	}
	if ack.Duplicate {
		inboundTotal.WithLabelValues(r.name, "duplicate").Inc()
		return Accepted{Duplicate: true, Seq: ack.Sequence}, nil
	}
	inboundTotal.WithLabelValues(r.name, "published").Inc()
	return Accepted{Seq: ack.Sequence}, nil
}

// Check is the validation Deliver applies to ev (CheckEvent with this
// runner's platform, account and bound), for a caller that must know
// before it delivers.
func (r *Runner) Check(ev *eventsv1.MessageReceived) error {
	return CheckEvent(ev, r.name, r.p.Account(), r.opts.MaxEventBytes)
}

// MaxEventIDBytes bounds an inbound event id, which becomes part of the
// bus message id (a NATS header value) and of dedupe keys.
const MaxEventIDBytes = 512

// DefaultMaxEventBytes bounds an encoded inbound event unless
// Options.MaxEventBytes says otherwise.
const DefaultMaxEventBytes = 256 << 10

// CheckEvent is the inbound validation Deliver applies, without I/O: it
// fills an empty platform and account, and refuses an event that is not
// for this platform, has no event or chat id, has an event id that cannot
// be a header value (over MaxEventIDBytes, invalid UTF-8, control
// characters), cannot be encoded (a string that is not valid UTF-8) or
// is over maxBytes encoded. An accepted event can always be published.
func CheckEvent(ev *eventsv1.MessageReceived, name, account string, maxBytes int) error {
	if ev == nil {
		return errors.New("nil event")
	}
	if ev.GetEventId() == "" {
		return errors.New("empty event id")
	}
	if ev.Source == nil {
		ev.Source = &eventsv1.SessionSource{}
	}
	if ev.Source.Platform == "" {
		ev.Source.Platform = name
	}
	if ev.Source.Platform != name {
		return fmt.Errorf("platform %q on a %s gateway", ev.Source.Platform, name)
	}
	if ev.Source.Account == "" {
		ev.Source.Account = account
	}
	if ev.Source.ChatId == "" {
		return errors.New("empty chat id")
	}
	msgID := ev.Source.Platform + ":" + ev.Source.Account + ":" + ev.EventId
	if len(ev.EventId) > MaxEventIDBytes || !headerSafe(msgID) {
		return errors.New("event id is not a printable token")
	}
	// Marshal, not Size: it also refuses strings that are not UTF-8,
	// which the publish would fail on forever.
	b, err := proto.Marshal(ev)
	if err != nil {
		return fmt.Errorf("event cannot be encoded: %w", err)
	}
	if len(b) > maxBytes {
		return fmt.Errorf("event is %d bytes, limit %d", len(b), maxBytes)
	}
	return nil
}

// headerSafe reports whether s is valid UTF-8 without control characters.
func headerSafe(s string) bool {
	if !utf8.ValidString(s) {
		return false
	}
	for _, c := range s {
		if c < 0x20 || c == 0x7f || (c >= 0x80 && c < 0xa0) {
			return false
		}
	}
	return true
}

// hashKey makes any string a valid, fixed-length KV key.
func hashKey(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:20])
}

// startWithin notes on ctx the time a best-effort request's header gives
// it to start in (bus.HeaderStartWithin), counted from got, when the
// gateway got it: its sender goes on without it after that (the turn's
// answer follows a typing request), and started later it would show
// after what followed it. A typing request not started by then is given
// up (perform); one started in time is carried out however long the
// platform takes, or a platform slower than that (a far-away API, a
// rate limit's wait) would never show the indicator. A message to its
// chat waits for it meanwhile, Options.TypingHold at most (typingCalls),
// so that it does not show after the message either.
func startWithin(ctx context.Context, h nats.Header, got time.Time) context.Context {
	ms, err := strconv.Atoi(h.Get(bus.HeaderStartWithin))
	if err != nil || ms <= 0 {
		return ctx
	}
	return context.WithValue(ctx, startByKey{}, got.Add(time.Duration(ms)*time.Millisecond))
}

// startByKey is the context key of the time a request must start by
// (startWithin).
type startByKey struct{}

// late reports whether ctx's request is past the time it had to start
// by (startWithin).
func late(ctx context.Context) bool {
	by, ok := ctx.Value(startByKey{}).(time.Time)
	return ok && time.Now().After(by)
}

// serveSend serves m, decoded as req (err: it could not be).
func (r *Runner) serveSend(ctx context.Context, m *nats.Msg, req *deliveryv1.SendRequested, err error) {
	// The platform send: a server span in the trace of the delivery.
	ctx, span := otel.Tracer("github.com/switchboard-chat/switchboard/pkg/platform").Start(ctx, "platform send "+r.name,
		trace.WithSpanKind(trace.SpanKindServer))
	defer span.End()
	var receipt *deliveryv1.SendReceipt
	if err != nil {
		r.log.Warn("malformed send request", "err", err)
		receipt = &deliveryv1.SendReceipt{ErrorClass: deliveryv1.ErrorClass_ERROR_CLASS_PERMANENT, Error: "malformed send request: " + err.Error()}
		sendsTotal.WithLabelValues(r.name, "malformed", "permanent").Inc()
	} else {
		receipt = r.Execute(ctx, req)
	}
	if m.Reply == "" {
		return
	}
	if err := bus.Reply(ctx, m, receipt); err != nil {
		r.log.Warn("answer send request", "err", err)
	}
}

// idempotentSends reports whether the platform needs no receipts.
func (r *Runner) idempotentSends() bool {
	is, ok := r.p.(IdempotentSender)
	return ok && is.IdempotentSends()
}

// cached reports whether op's receipts are remembered for retries.
func cached(op deliveryv1.SendOp) bool {
	switch op {
	case deliveryv1.SendOp_SEND_OP_SEND, deliveryv1.SendOp_SEND_OP_EDIT, deliveryv1.SendOp_SEND_OP_DELETE:
		return true
	}
	return false
}

// Execute performs one send request and returns its receipt. A repeated
// idempotency key gets the first successful receipt back (Duplicate set)
// and nothing is sent again.
func (r *Runner) Execute(ctx context.Context, req *deliveryv1.SendRequested) *deliveryv1.SendReceipt {
	op := req.GetOp()
	opName := opLabel(op)
	key := req.GetIdempotencyKey()
	var cacheKey string
	var res reservation
	// until is the end of the reservation's lifetime as reserve counts
	// it: a receipt or part record not stored is held so long.
	var until time.Time
	if key != "" && cached(op) && !r.idempotentSends() {
		cacheKey = r.name + "." + hashKey(key)
		defer r.sending.add(cacheKey)()
		if first := r.held.receipt(cacheKey); first != nil {
			// Sent here, its receipt not stored yet (holdEntry).
			sendsTotal.WithLabelValues(r.name, opName, "duplicate").Inc()
			return first
		}
		res = r.reserve(ctx, cacheKey)
		until = time.Now().Add(r.opts.SendTimeout + time.Second)
		switch {
		case res.first != nil:
			sendsTotal.WithLabelValues(r.name, opName, "duplicate").Inc()
			return res.first
		case res.wait > 0:
			// An earlier request with this key is still at the platform
			// (its sender gave up waiting): sending now would post it twice.
			sendsTotal.WithLabelValues(r.name, opName, "in_progress").Inc()
			return &deliveryv1.SendReceipt{IdempotencyKey: key, ErrorClass: deliveryv1.ErrorClass_ERROR_CLASS_RETRYABLE,
				Error: "an earlier request with this key is still being sent", RetryAfterMs: res.wait.Milliseconds()}
		}
	}

	ctx, cancel := context.WithTimeout(ctx, r.opts.SendTimeout)
	defer cancel()
	if cacheKey != "" && op == deliveryv1.SendOp_SEND_OP_SEND {
		p := parts{r: r, key: cacheKey, until: until, known: res.known}
		p.recordKnown(context.WithoutCancel(ctx))
		ctx = withParts(ctx, p)
	}
	ctx = withNotes(ctx, r)
	start := time.Now()
	// A panic in the platform's send code fails this request, retryable
	// (the outbox tries it again under the same key, and dead-letters it
	// after its attempts), instead of the gateway process.
	var msgID string
	err := panics.Recover(r.log, "gateway_send", func() (err error) {
		msgID, err = r.perform(ctx, req)
		return err
	}, "platform", r.name, "op", opName, "key", key)
	sendSeconds.WithLabelValues(r.name, opName).Observe(time.Since(start).Seconds())
	r.react.observe(req, err)
	r.endTyping(ctx, req)
	receipt := &deliveryv1.SendReceipt{IdempotencyKey: key}
	if err != nil {
		class, after := classify(err)
		receipt.ErrorClass = class
		receipt.Error = err.Error()
		if IsPartDone(err) {
			receipt.Error = bus.EditPartDone + ": " + receipt.Error
		}
		receipt.RetryAfterMs = after.Milliseconds()
		sendsTotal.WithLabelValues(r.name, opName, classLabel(class)).Inc()
		// The chat's ids beside the error: the log handler takes them out
		// of a platform's text too (a URL with the channel in its path).
		t := req.GetTarget()
		r.log.Debug("platform operation failed", "op", opName, "class", classLabel(class), "chat_id", t.GetChatId(),
			"thread_id", t.GetThreadId(), "err", err)
		switch {
		case res.rev == 0:
		case r.held.keepFor(cacheKey, res.rev, until):
			// Parts went whose records are held here, not stored: the
			// reservation stays, naming this replica, so that a retry
			// reaching another replica asks this one for them
			// (serveSending) instead of posting them again; freed once
			// they are stored (freeKept).
			r.log.Info("send reservation kept: part records held")
		default:
			// Free the key for the retry at once.
			if err := r.receipts.Delete(context.WithoutCancel(ctx), cacheKey, jetstream.LastRevision(res.rev)); err != nil {
				r.log.Debug("release send reservation", "err", err)
			}
		}
		return receipt
	}
	receipt.Ok = true
	receipt.PlatformMessageId = msgID
	receipt.SentAt = timestamppb.Now()
	sendsTotal.WithLabelValues(r.name, opName, "ok").Inc()
	if cacheKey != "" {
		data, _ := proto.Marshal(receipt)
		if err := r.storeEntry(context.WithoutCancel(ctx), cacheKey, data); err != nil {
			// Held before this request stops counting as sending its key
			// (the deferred uncount): a question about the key finds one
			// or the other (serveSending). Until the reservation's
			// lifetime as reserve counts it is over, other replicas ask.
			r.log.Warn("store receipt failed; held and stored again in the background", "err", err)
			r.holdEntry(cacheKey, data, until)
		}
	}
	return receipt
}

// storeEntry writes data as key's entry in the receipts bucket: a send's
// receipt, or a record of one of its parts (RecordPart).
func (r *Runner) storeEntry(ctx context.Context, key string, data []byte) error {
	if hook := r.storeHook.Load(); hook != nil {
		if err := (*hook)(); err != nil {
			return fmt.Errorf("store receipts entry %s: %w", key, err)
		}
	}
	if _, err := r.receipts.Put(ctx, key, data); err != nil {
		return fmt.Errorf("store receipts entry %s: %w", key, err)
	}
	return nil
}

// inflight counts the sends and fetches being served. Once closed (at
// shutdown, before it is waited for) it takes no more.
type inflight struct {
	mu     sync.Mutex
	closed bool
	wg     sync.WaitGroup
}

func (f *inflight) add() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		return false
	}
	f.wg.Add(1)
	return true
}

func (f *inflight) done() { f.wg.Done() }

func (f *inflight) close() {
	f.mu.Lock()
	f.closed = true
	f.mu.Unlock()
}

func (f *inflight) wait() { f.wg.Wait() }

// reservation is what reserve found of a send's key.
type reservation struct {
	first *deliveryv1.SendReceipt // the key's first receipt: sent already
	rev   uint64                  // this request's reservation; 0: none
	wait  time.Duration           // another request is sending the key now
	// known are the parts an earlier attempt sent, whose records its
	// replica holds, not stored (senderAlive).
	known map[int]string
}

// reserve looks the send's key up in the receipts bucket and claims it
// for this request. It returns the first receipt of a key sent already,
// or how long to wait when another request is sending it now; else the
// revision of this request's reservation (0 when the bucket could not be
// used: the send goes ahead without one). A reservation is taken over
// when it is older than the send timeout (its request died mid-send) or
// when the replica that wrote it is gone or not sending it (senderAlive):
// a replica killed mid-send holds its keys up no longer than that.
func (r *Runner) reserve(ctx context.Context, key string) reservation {
	for range 2 {
		e, err := r.receipts.Get(ctx, key)
		var res reservation
		switch {
		case errors.Is(err, jetstream.ErrKeyNotFound):
			res.rev, err = r.createReservation(ctx, key)
			if errors.Is(err, jetstream.ErrKeyExists) {
				continue // another request reserved it just now: look again
			}
		case err != nil:
		case bytes.HasPrefix(e.Value(), inProgress):
			if age := time.Since(e.Created()); age < r.opts.SendTimeout+time.Second {
				alive, sent, known := r.senderAlive(ctx, key, r.holderOf(ctx, e))
				if sent != nil {
					return reservation{first: sent} // sent, its receipt held by its sender
				}
				if alive {
					return reservation{wait: r.opts.SendTimeout + time.Second - age}
				}
				res.known = known
			}
			res.rev, err = r.writeReservation(ctx, key, e.Revision())
			if err != nil {
				continue
			}
		default:
			first := &deliveryv1.SendReceipt{}
			if err = proto.Unmarshal(e.Value(), first); err == nil {
				first.Duplicate = true
				return reservation{first: first}
			}
		}
		if err != nil {
			r.log.Warn("send reservation failed; sending without one", "err", err)
			return reservation{}
		}
		return res
	}
	return reservation{wait: time.Second}
}

func (r *Runner) perform(ctx context.Context, req *deliveryv1.SendRequested) (string, error) {
	t := req.GetTarget()
	switch req.GetOp() {
	case deliveryv1.SendOp_SEND_OP_SEND:
		if t.GetChatId() == "" {
			return "", Permanent(errors.New("send without a target chat"))
		}
		if err := r.typing.hold(ctx, r.name, t.GetChatId(), r.opts.TypingHold); err != nil {
			return "", err
		}
		return r.p.Send(ctx, req)
	case deliveryv1.SendOp_SEND_OP_EDIT:
		if req.GetMessageId() == "" {
			return "", Permanent(errors.New("edit without a message id"))
		}
		return req.GetMessageId(), r.p.Edit(ctx, req)
	case deliveryv1.SendOp_SEND_OP_DELETE:
		if req.GetMessageId() == "" {
			return "", Permanent(errors.New("delete without a message id"))
		}
		return req.GetMessageId(), r.p.Delete(ctx, req)
	case deliveryv1.SendOp_SEND_OP_TYPING:
		if t.GetChatId() == "" {
			return "", Permanent(errors.New("typing without a target chat"))
		}
		if req.GetFinal() {
			return "", nil // the turn ended without a message: nothing to show
		}
		if late(ctx) {
			// Past its time to start (startWithin): the answer may be out.
			return "", errors.New(bus.LateTyping + ": not started within its time")
		}
		if !added(ctx) {
			// Not taken from the bus (Execute called directly): noted now.
			var end func()
			ctx, end = r.typing.add(ctx, t.GetChatId())
			defer end()
		}
		return "", r.p.Typing(ctx, req)
	case deliveryv1.SendOp_SEND_OP_STREAM_DELTA:
		s, ok := r.p.(Streamer)
		if !ok {
			return "", ErrUnsupported
		}
		if err := r.typing.hold(ctx, r.name, t.GetChatId(), r.opts.TypingHold); err != nil {
			return "", err
		}
		return "", s.StreamDelta(ctx, req)
	case deliveryv1.SendOp_SEND_OP_TOOL_PROGRESS:
		s, ok := r.p.(ToolStepper)
		if !ok {
			return "", ErrUnsupported
		}
		return "", s.ToolProgress(ctx, req)
	default:
		return "", Permanent(fmt.Errorf("unknown send op %d", req.GetOp()))
	}
}

// endTypingTimeout bounds a platform's EndTyping: the final receipt
// waits for it, and the answer is out already.
const endTypingTimeout = 2 * time.Second

// endTyping takes the turn's typing indicator down (TypingEnder) after
// req, when req ends a turn. A failure, a panic included, is logged and
// counted and changes nothing else.
func (r *Runner) endTyping(ctx context.Context, req *deliveryv1.SendRequested) {
	e, ok := r.p.(TypingEnder)
	if !ok || !req.GetFinal() || req.GetTurnId() == "" {
		return // no indicator, or not a turn's end (a command's answer)
	}
	// The request's own time may be spent (a slow send): the end has a
	// time of its own.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), endTypingTimeout)
	defer cancel()
	// A typing call of the chat still going (a refresh that started as
	// the edit ending a streamed answer went: edits do not wait for it)
	// would show the indicator again after the end, until the platform's
	// own timeout: the end waits for it, for half its time at most.
	if chat := req.GetTarget().GetChatId(); chat != "" {
		_ = r.typing.hold(ctx, r.name, chat, endTypingTimeout/2)
	}
	err := panics.Recover(r.log, "gateway_end_typing", func() error { return e.EndTyping(ctx, req) },
		"platform", r.name, "turn_id", req.GetTurnId())
	if err != nil {
		class, _ := classify(err)
		sendsTotal.WithLabelValues(r.name, "end_typing", classLabel(class)).Inc()
		t := req.GetTarget()
		r.log.Debug("end of typing failed", "chat_id", t.GetChatId(), "thread_id", t.GetThreadId(), "err", err)
		return
	}
	sendsTotal.WithLabelValues(r.name, "end_typing", "ok").Inc()
}

func opLabel(op deliveryv1.SendOp) string {
	switch op {
	case deliveryv1.SendOp_SEND_OP_SEND:
		return "send"
	case deliveryv1.SendOp_SEND_OP_EDIT:
		return "edit"
	case deliveryv1.SendOp_SEND_OP_DELETE:
		return "delete"
	case deliveryv1.SendOp_SEND_OP_TYPING:
		return "typing"
	case deliveryv1.SendOp_SEND_OP_STREAM_DELTA:
		return "stream_delta"
	case deliveryv1.SendOp_SEND_OP_TOOL_PROGRESS:
		return "tool_progress"
	default:
		return "unknown"
	}
}

func classLabel(c deliveryv1.ErrorClass) string {
	switch c {
	case deliveryv1.ErrorClass_ERROR_CLASS_RATE_LIMITED:
		return "rate_limited"
	case deliveryv1.ErrorClass_ERROR_CLASS_PERMANENT:
		return "permanent"
	case deliveryv1.ErrorClass_ERROR_CLASS_FORMAT:
		return "format"
	default:
		return "retryable"
	}
}
