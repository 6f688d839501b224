package delivery_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/redis/go-redis/v9"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/switchboard-chat/switchboard/pkg/bus"
	"github.com/switchboard-chat/switchboard/pkg/bus/bustest"
	deliveryv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/delivery/v1"
	repliesv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/replies/v1"
	"github.com/switchboard-chat/switchboard/pkg/pg/pgtest"
	"github.com/switchboard-chat/switchboard/pkg/redisx/redistest"
	"github.com/switchboard-chat/switchboard/services/delivery"
)

// clock is wall time plus an offset the test moves forward.
type clock struct {
	mu     sync.Mutex
	offset time.Duration
}

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return time.Now().Add(c.offset)
}

func (c *clock) Advance(d time.Duration) {
	c.mu.Lock()
	c.offset += d
	c.mu.Unlock()
}

// call is one request the test gateway received.
type call struct {
	Key string
	Op  deliveryv1.SendOp
	At  time.Time
	Req *deliveryv1.SendRequested
}

// behaviour is what the test gateway does with a request.
type behaviour struct {
	// fail answers with this failure; nothing is posted.
	fail *deliveryv1.SendReceipt
	// hang posts the message but never answers (a read timeout after the
	// platform accepted it).
	hang bool
	// lost neither posts nor answers (the request or its answer was
	// lost on the way): a repeat of the key is tried again.
	lost bool
	// late takes this long at the platform before it posts and answers:
	// the request's sender may have given up by then. A repeat of the key
	// meanwhile is answered as real gateways do, "still being sent".
	late time.Duration
	// queued waits this long for a send slot before the platform (the
	// gateway's other sends hold them all): a typing request that
	// waited past its start bound (bus.HeaderStartWithin) is given up
	// when its slot frees, as the platform runner does, and shows
	// nothing; one that did not is carried out then.
	queued time.Duration
}

// gateway is a test platform gateway: a NATS responder on the send
// subject of platform "test", speaking the real SendRequested →
// SendReceipt contract, answering a repeated idempotency key with its
// first receipt as real gateways do, and failing on purpose.
type gateway struct {
	clock *clock
	mu    sync.Mutex
	calls []call
	// posted are the platform operations that took effect, in order.
	posted   []call
	receipts map[string]*deliveryv1.SendReceipt
	tries    map[string]int
	inflight map[string]bool
	behave   func(req *deliveryv1.SendRequested, try int) behaviour
	// shownAt are the typing indicators that showed and the sends that
	// posted, with when (wall time), in order.
	shownAt []call
}

func newGateway(t *testing.T, b *bus.Bus, c *clock, platforms ...string) *gateway {
	g := &gateway{clock: c, receipts: map[string]*deliveryv1.SendReceipt{}, tries: map[string]int{}, inflight: map[string]bool{}}
	for _, p := range platforms {
		sub, err := b.Conn().QueueSubscribe(b.Topology().SendSubject(p), "gateway-"+p, g.serve)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = sub.Unsubscribe() })
	}
	return g
}

func (g *gateway) serve(m *nats.Msg) {
	var req deliveryv1.SendRequested
	if err := proto.Unmarshal(m.Data, &req); err != nil {
		return
	}
	g.mu.Lock()
	c := call{Key: req.GetIdempotencyKey(), Op: req.GetOp(), At: g.clock.Now(), Req: &req}
	g.calls = append(g.calls, c)
	if rec, ok := g.receipts[c.Key]; ok {
		g.mu.Unlock()
		dup := proto.Clone(rec).(*deliveryv1.SendReceipt)
		dup.Duplicate = true
		_ = bus.Reply(context.Background(), m, dup)
		return
	}
	if g.inflight[c.Key] {
		g.mu.Unlock()
		_ = bus.Reply(context.Background(), m, &deliveryv1.SendReceipt{IdempotencyKey: c.Key, ErrorClass: deliveryv1.ErrorClass_ERROR_CLASS_RETRYABLE,
			Error: "an earlier request with this key is still being sent", RetryAfterMs: 100})
		return
	}
	g.tries[c.Key]++
	var b behaviour
	if g.behave != nil {
		b = g.behave(&req, g.tries[c.Key])
	}
	if b.lost {
		g.mu.Unlock()
		return
	}
	if b.fail != nil {
		g.mu.Unlock()
		rec := proto.Clone(b.fail).(*deliveryv1.SendReceipt)
		rec.IdempotencyKey = c.Key
		_ = bus.Reply(context.Background(), m, rec)
		return
	}
	if b.queued > 0 {
		g.inflight[c.Key] = true
		g.mu.Unlock()
		within, _ := strconv.Atoi(m.Header.Get(bus.HeaderStartWithin))
		go func() {
			time.Sleep(b.queued)
			g.mu.Lock()
			delete(g.inflight, c.Key)
			if req.GetOp() == deliveryv1.SendOp_SEND_OP_TYPING && within > 0 && b.queued > time.Duration(within)*time.Millisecond {
				g.mu.Unlock()
				_ = bus.Reply(context.Background(), m, &deliveryv1.SendReceipt{IdempotencyKey: c.Key, ErrorClass: deliveryv1.ErrorClass_ERROR_CLASS_RETRYABLE,
					Error: bus.LateTyping + ": not started within its time"})
				return
			}
			g.post(m, c, &req, b)
		}()
		return
	}
	if b.late > 0 {
		// Subscription callbacks run one at a time: the platform's
		// slowness must not hold up the gateway's other requests.
		g.inflight[c.Key] = true
		g.mu.Unlock()
		// A typing request is good for as long as its header says
		// (bus.HeaderStartWithin), as the platform runner has it: past
		// that the gateway gives it up, and it shows nothing.
		within, _ := strconv.Atoi(m.Header.Get(bus.HeaderStartWithin))
		go func() {
			if req.GetOp() == deliveryv1.SendOp_SEND_OP_TYPING && within > 0 && b.late > time.Duration(within)*time.Millisecond {
				time.Sleep(time.Duration(within) * time.Millisecond)
				g.mu.Lock()
				delete(g.inflight, c.Key)
				g.mu.Unlock()
				_ = bus.Reply(context.Background(), m, &deliveryv1.SendReceipt{IdempotencyKey: c.Key, ErrorClass: deliveryv1.ErrorClass_ERROR_CLASS_RETRYABLE,
					Error: bus.LateTyping + ": context deadline exceeded"})
				return
			}
			time.Sleep(b.late)
			g.mu.Lock()
			delete(g.inflight, c.Key)
			g.post(m, c, &req, b)
		}()
		return
	}
	g.post(m, c, &req, b)
}

// post makes req take effect and answers it (unless it hangs); g.mu is
// held and released.
func (g *gateway) post(m *nats.Msg, c call, req *deliveryv1.SendRequested, b behaviour) {
	id := req.GetMessageId()
	if req.GetOp() == deliveryv1.SendOp_SEND_OP_SEND {
		id = fmt.Sprintf("m%d", len(g.posted)+1)
	}
	rec := &deliveryv1.SendReceipt{IdempotencyKey: c.Key, Ok: true, PlatformMessageId: id, SentAt: timestamppb.Now()}
	if req.GetOp() != deliveryv1.SendOp_SEND_OP_TYPING && req.GetOp() != deliveryv1.SendOp_SEND_OP_STREAM_DELTA {
		g.posted = append(g.posted, c)
		g.receipts[c.Key] = rec
	}
	if op := req.GetOp(); op == deliveryv1.SendOp_SEND_OP_SEND || op == deliveryv1.SendOp_SEND_OP_TYPING && !req.GetFinal() {
		shown := c
		shown.At = time.Now()
		g.shownAt = append(g.shownAt, shown)
	}
	g.mu.Unlock()
	if b.hang {
		return
	}
	_ = bus.Reply(context.Background(), m, rec)
}

func (g *gateway) setBehaviour(f func(req *deliveryv1.SendRequested, try int) behaviour) {
	g.mu.Lock()
	g.behave = f
	g.mu.Unlock()
}

func (g *gateway) snapshot() (calls, posted []call) {
	g.mu.Lock()
	defer g.mu.Unlock()
	return append([]call(nil), g.calls...), append([]call(nil), g.posted...)
}

// postedTexts counts posted sends by text.
// sends returns the sends, edits and deletes the gateway took.
func (g *gateway) sends() []call {
	_, p := g.snapshot()
	return p
}

func (g *gateway) postedTexts() map[string]int {
	_, posted := g.snapshot()
	out := map[string]int{}
	for _, p := range posted {
		if p.Op == deliveryv1.SendOp_SEND_OP_SEND {
			out[p.Req.GetText()]++
		}
	}
	return out
}

type env struct {
	url   string
	bus   *bus.Bus
	db    *pgxpool.Pool
	rdb   *redis.Client
	rpref string
	clock *clock
	gw    *gateway
}

func newEnv(t *testing.T) *env {
	t.Helper()
	url := bustest.EmbeddedURL(t)
	e := &env{url: url, bus: bustest.New(t, url), db: pgtest.New(t), clock: &clock{}}
	e.rdb, e.rpref = redistest.New(t)
	e.gw = newGateway(t, e.bus, e.clock, "test", "stream", "api")
	return e
}

func testConfig() delivery.Config {
	cfg := delivery.DefaultConfig()
	cfg.GRPCAddr = ""
	cfg.SendTimeout = 300 * time.Millisecond
	cfg.Lease = time.Second
	cfg.PollInterval = 30 * time.Millisecond
	cfg.RetryBase = 50 * time.Millisecond
	cfg.RetryMax = 200 * time.Millisecond
	cfg.PartitionLease = time.Second
	cfg.AckWait = 2 * time.Second
	// A stop waits for every reply consumer's pull in hand: at the
	// default (1 s) each replica a test stopped, and each partition it
	// let go of, held the test up by about a second.
	cfg.PollWait = 200 * time.Millisecond
	cfg.Platforms = map[string]delivery.Platform{"stream": {Streaming: delivery.StreamEdit}}
	return cfg
}

// streamConfig is testConfig for tests that count stream edits: progress
// edits are best effort, and one that timed out under a loaded machine
// would be planned again and change the count.
func streamConfig() delivery.Config {
	cfg := testConfig()
	cfg.SendTimeout, cfg.Lease = 5*time.Second, 10*time.Second
	return cfg
}

// instance is one running delivery replica with its own NATS connection,
// so the test can kill it hard.
type instance struct {
	svc    *delivery.Service
	nc     *nats.Conn
	cancel context.CancelFunc
	done   chan error
}

func (e *env) start(t *testing.T, cfg delivery.Config, name string) *instance {
	t.Helper()
	return e.startLogged(t, cfg, name, slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})))
}

// startLogged is start with the replica logging to log.
func (e *env) startLogged(t *testing.T, cfg delivery.Config, name string, log *slog.Logger) *instance {
	t.Helper()
	nc, err := nats.Connect(e.url, nats.Name(name))
	if err != nil {
		t.Fatal(err)
	}
	b, err := bus.New(nc, e.bus.Topology(), log)
	if err != nil {
		t.Fatal(err)
	}
	cfg.ReplicaID = name
	log = log.With("replica", name)
	svc, err := delivery.New(cfg, delivery.Deps{Log: log, Bus: b, DB: e.db, Redis: e.rdb, RedisPrefix: e.rpref, Now: e.clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	in := &instance{svc: svc, nc: nc, cancel: cancel, done: make(chan error, 1)}
	go func() { in.done <- svc.Run(ctx) }()
	t.Cleanup(func() { in.stop(t) })
	return in
}

// stop ends the replica gracefully (idempotent).
func (in *instance) stop(t *testing.T) {
	in.cancel()
	select {
	case err, ok := <-in.done:
		if !ok {
			return // stopped already
		}
		if err != nil {
			t.Errorf("delivery run: %v", err)
		}
		close(in.done)
	case <-time.After(20 * time.Second):
		t.Error("delivery did not stop")
	}
	in.nc.Close()
}

// kill ends the replica hard: its NATS connection drops at once, then its
// context ends; whatever it was sending stays unrecorded.
func (in *instance) kill() {
	in.nc.Close()
	in.cancel()
}

func event(turn string, seq int64, session string, body any) *repliesv1.ReplyEvent {
	ev := &repliesv1.ReplyEvent{
		TurnId: turn, SessionKey: session, Seq: seq, Generation: 1,
		Target:          &deliveryv1.Target{Platform: "test", ChatId: "chat-" + session},
		InputMessageIds: []string{"in-" + turn},
		CreatedAt:       timestamppb.Now(),
	}
	switch b := body.(type) {
	case *repliesv1.FinalText:
		ev.Body = &repliesv1.ReplyEvent_FinalText{FinalText: b}
	case *repliesv1.TextDelta:
		ev.Body = &repliesv1.ReplyEvent_TextDelta{TextDelta: b}
	case *repliesv1.ReasoningDelta:
		ev.Body = &repliesv1.ReplyEvent_ReasoningDelta{ReasoningDelta: b}
	case *repliesv1.Typing:
		ev.Body = &repliesv1.ReplyEvent_Typing{Typing: b}
	case *repliesv1.ReplyError:
		ev.Body = &repliesv1.ReplyEvent_Error{Error: b}
	case *repliesv1.Notice:
		ev.Body = &repliesv1.ReplyEvent_Notice{Notice: b}
	case *repliesv1.ToolProgress:
		ev.Body = &repliesv1.ReplyEvent_ToolProgress{ToolProgress: b}
	}
	return ev
}

// publishStream publishes a reply event to the "stream" platform, which
// streams by editing.
func (e *env) publishStream(t *testing.T, turn string, seq int64, session string, body any) {
	t.Helper()
	ev := event(turn, seq, session, body)
	ev.Target.Platform = "stream"
	e.publish(t, ev)
}

func (e *env) publish(t *testing.T, ev *repliesv1.ReplyEvent) {
	t.Helper()
	id := fmt.Sprintf("reply:%s:%d", ev.GetTurnId(), ev.GetSeq())
	if _, err := e.bus.Publish(context.Background(), e.bus.Topology().ReplySubject(ev.GetSessionKey()), id, ev); err != nil {
		t.Fatal(err)
	}
}

// eventually waits for cond with a deadline, nudging the clock by step
// each round (0: leave it).
func eventually(t *testing.T, c *clock, step time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		if step > 0 {
			c.Advance(step)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func final(text string) *repliesv1.FinalText { return &repliesv1.FinalText{Text: text} }

func rowState(t *testing.T, db *pgxpool.Pool, key string) string {
	var st string
	err := db.QueryRow(context.Background(), `SELECT state FROM delivery_outbox WHERE idempotency_key = $1`, key).Scan(&st)
	if err != nil {
		return ""
	}
	return st
}

// typings counts the typing requests the gateway took.
func (e *env) typings() int {
	calls, _ := e.gw.snapshot()
	n := 0
	for _, c := range calls {
		if c.Op == deliveryv1.SendOp_SEND_OP_TYPING {
			n++
		}
	}
	return n
}

// consumed waits until the reply partition of session has no event
// left unhandled. A durable's pending count can lag a publish the
// server already acknowledged, so the partition's last event must also
// be at or below the durable's ack floor (as the router tests'
// inboundDrained).
func (e *env) consumed(t *testing.T, session string) {
	t.Helper()
	top := e.bus.Topology()
	p := top.Partition(session)
	durable := fmt.Sprintf("delivery-replies-%d", p)
	eventually(t, e.clock, 0, "events handled", func() bool {
		ctx := context.Background()
		st, err := e.bus.JetStream().Stream(ctx, top.Stream(bus.StreamReplies))
		if err != nil {
			return false
		}
		var last uint64
		switch m, err := st.GetLastMsgForSubject(ctx, top.ReplyPartitionSubject(p)); {
		case err == nil:
			last = m.Sequence
		case !errors.Is(err, jetstream.ErrMsgNotFound):
			return false
		}
		c, err := st.Consumer(ctx, durable)
		if err != nil {
			return false
		}
		info, err := c.Info(ctx)
		return err == nil && info.NumPending == 0 && info.NumAckPending == 0 && info.AckFloor.Stream >= last
	})
}
