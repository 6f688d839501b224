package router

import (
	"context"
	"fmt"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/protobuf/types/known/wrapperspb"
	"log/slog"
	"regexp"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go"
	"github.com/redis/go-redis/v9"
	"google.golang.org/protobuf/proto"

	"github.com/switchboard-chat/switchboard/pkg/bus"
	"github.com/switchboard-chat/switchboard/pkg/bus/bustest"
	deliveryv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/delivery/v1"
	eventsv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/events/v1"
	repliesv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/replies/v1"
	turnsv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/turns/v1"
	"github.com/switchboard-chat/switchboard/pkg/pairing"
	"github.com/switchboard-chat/switchboard/pkg/pg/pgtest"
	"github.com/switchboard-chat/switchboard/pkg/redisx"
	"github.com/switchboard-chat/switchboard/pkg/redisx/redistest"
	"github.com/switchboard-chat/switchboard/pkg/sessionkey"
	"github.com/switchboard-chat/switchboard/pkg/sessionstore"
	"github.com/switchboard-chat/switchboard/pkg/skill"
	"github.com/switchboard-chat/switchboard/services/router/internal/auth"
)

// env is one test's cluster: real NATS, Postgres and Redis, isolated.
type env struct {
	t      *testing.T
	url    string
	bus    *bus.Bus
	db     *pgxpool.Pool
	rdb    *redis.Client
	prefix string
	// homes are the configured home channels the router is started with.
	homes func(platform string) string
	// provider is the model provider the router is started with.
	provider Provider
	// models lists the provider's models for the routers started.
	models ModelLister
	// skills are the skills the router is started with.
	skills *skill.Set
	// skillsCfg, when set, is where each router started loads its own
	// skills from (a process's skill.Library), instead of skills.
	skillsCfg *skill.Config

	mu      sync.Mutex
	notices []*repliesv1.ReplyEvent
	control []*turnsv1.TurnControlRequested
	// refuseControl: no running turn takes steering or an approval's
	// answer (control requests go unanswered); by default a worker's
	// turn takes them.
	refuseControl atomic.Bool
	// failControl: the answers to control requests cannot be read (the
	// request fails with an error, not a "no").
	failControl atomic.Bool
	// steerQueue: the workers answer as this release's do
	// (bus.HeaderSteerQueue): steering a turn takes stays queued until the
	// turn gives it to the model, which this simulated worker never does.
	// Unset: as an older release's, whose steering the router unqueues.
	steerQueue atomic.Bool
	// beforeClaim, when set before startWorker, runs as a worker takes
	// a turn, before it claims the turn's lock: a turn it holds there
	// waits in the workers' backlog, its router's grant in the lock.
	beforeClaim func(*turnsv1.TurnRequested)
}

func newEnv(t *testing.T) *env {
	t.Helper()
	url := bustest.EmbeddedURL(t)
	e := &env{t: t, url: url, bus: bustest.New(t, url), db: pgtest.New(t)}
	e.rdb, e.prefix = redistest.New(t)
	topo := e.bus.Topology()
	sub, err := e.bus.Conn().Subscribe(topo.Subject(bus.SubjectReplies+".>"), func(m *nats.Msg) {
		var ev repliesv1.ReplyEvent
		if proto.Unmarshal(m.Data, &ev) == nil {
			e.mu.Lock()
			e.notices = append(e.notices, &ev)
			e.mu.Unlock()
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	csub, err := e.bus.Conn().Subscribe(topo.Subject(bus.SubjectControl+".>"), func(m *nats.Msg) {
		var c turnsv1.TurnControlRequested
		if proto.Unmarshal(m.Data, &c) == nil {
			e.mu.Lock()
			e.control = append(e.control, &c)
			e.mu.Unlock()
		}
		if m.Reply != "" {
			// As a worker running the session's turn answers a router of
			// this release: at once, declined when the turn does not take it.
			reply := nats.NewMsg(m.Reply)
			reply.Header.Set(bus.HeaderControl, bus.ControlVersion)
			if e.steerQueue.Load() {
				reply.Header.Set(bus.HeaderSteerQueue, "1")
			}
			if e.refuseControl.Load() {
				reply.Data, _ = proto.Marshal(wrapperspb.Bool(true))
			}
			if e.failControl.Load() {
				reply.Data = []byte{0xff} // no protobuf message
			}
			_ = m.RespondMsg(reply)
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe(); _ = csub.Unsubscribe() })
	return e
}

// secondBus is another connection on the same topology: another process.
func (e *env) secondBus() *bus.Bus {
	nc, err := nats.Connect(e.url)
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(nc.Close)
	b, err := bus.New(nc, e.bus.Topology(), slog.Default())
	if err != nil {
		e.t.Fatal(err)
	}
	return b
}

func testConfig() Config {
	cfg := DefaultConfig()
	cfg.SweepInterval = 200 * time.Millisecond
	cfg.DrainTimeout = 2 * time.Second
	// A stop waits for each consumer's pull in hand: at the default (1 s)
	// every router a test starts held its end up by a second.
	cfg.PollWait = 200 * time.Millisecond
	cfg.Auth.GatewayAllowedUsers = []string{"alice", "bob"}
	// Tested on its own (home_test.go); the other tests count notices.
	cfg.HomeNotice = false
	return cfg
}

// runRouter runs s until the test ends, when it stops s and fails the
// test if s ended with an error.
func runRouter(ctx context.Context, t *testing.T, s *Service) {
	t.Helper()
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- s.Run(rctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("router run: %v", err)
		}
	})
}

// startRouter runs a router until the test ends.
func (e *env) startRouter(cfg Config, b *bus.Bus, parts []int) *Service {
	e.t.Helper()
	if b == nil {
		b = e.bus
	}
	var lib *skill.Library
	switch {
	case e.skillsCfg != nil:
		lib = skill.NewLibrary(*e.skillsCfg, nil, nil)
	case e.skills != nil:
		lib = skill.Fixed(e.skills)
	}
	s, err := New(cfg, Deps{Bus: b, DB: e.db, Redis: e.rdb, RedisPrefix: e.prefix, Environ: []string{}, Partitions: parts, Homes: e.homes, Provider: e.provider, Models: e.models, Skills: lib})
	if err != nil {
		e.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	e.t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			e.t.Errorf("router run: %v", err)
		}
	})
	return s
}

// worker simulates agent workers with the real bus contract: it consumes
// TURNS, holds each turn until hold returns, releases the lock and
// publishes TurnCompleted, saying whether a start marked the lock.
type worker struct {
	mu      sync.Mutex
	turns   []*turnsv1.TurnRequested
	active  map[string]int
	overlap []string
	// lost: turns whose claim found the session taken by another turn
	// (a real worker ends them stale, without an answer).
	lost []string
	hold func(*turnsv1.TurnRequested)
	// stored: when the bus stored each turn, by turn id.
	stored map[string]time.Time
	// ended: the turns whose lock this worker let go of, by turn id.
	ended map[string]bool
}

// hasEnded reports whether the worker let go of the turn's lock.
func (w *worker) hasEnded(turnID string) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.ended[turnID]
}

func (e *env) startWorker(hold func(*turnsv1.TurnRequested)) *worker {
	w := &worker{active: map[string]int{}, hold: hold, stored: map[string]time.Time{}, ended: map[string]bool{}}
	locker := redisx.NewLocker(e.rdb, e.prefix)
	c := bus.NewConsumer(e.bus, bus.ConsumerSpec{Stream: bus.StreamTurns, Durable: "worker-turns", Concurrency: 8, DrainTimeout: time.Second, PollWait: 200 * time.Millisecond},
		func(ctx context.Context, t *turnsv1.TurnRequested) error {
			if e.beforeClaim != nil {
				e.beforeClaim(t)
			}
			// As a worker does: the turn's attempt holds the lock under
			// its own value.
			holder := redisx.Holder(t.LockToken, "test-worker.1")
			claim, err := locker.Claim(ctx, t.SessionKey, t.LockToken, holder, time.Duration(t.LockTtlMs)*time.Millisecond)
			if err != nil {
				return err
			}
			// As a worker's first fenced write after its claim does
			// (switchboard_fence(), migration 00203), wait for the turn's
			// start to commit: the router publishes a turn before it
			// commits the start, so without this a test could read the
			// session before its row or new generation is visible.
			if _, err := e.db.Exec(ctx, `SELECT pg_advisory_xact_lock_shared(21314, hashtext($1))`, t.SessionKey); err != nil {
				return err
			}
			// The turn's end ends its lease (migration 00148): a worker's
			// row in worker_turns does (sessionstore's lease tests), which
			// tests here write themselves where they need one (their
			// counts, their clocks); this one lets the lease go instead,
			// before it lets go of the lock. A turn the test does not hold
			// has ended by the time the test sees it: its lease goes now,
			// so that only the lock's release follows, at once.
			endLease := func() error {
				_, err := e.db.Exec(ctx, `DELETE FROM turn_leases WHERE session_key = $1 AND turn_id = $2`, t.SessionKey, t.TurnId)
				return err
			}
			if w.hold == nil && claim != redisx.ClaimLost {
				if err := endLease(); err != nil {
					return err
				}
			}
			w.mu.Lock()
			w.turns = append(w.turns, t)
			if d, ok := bus.DeliveryFrom(ctx); ok {
				w.stored[t.TurnId] = d.Published
			}
			if claim == redisx.ClaimLost {
				w.lost = append(w.lost, t.TurnId)
				w.mu.Unlock()
				return nil
			}
			w.active[t.SessionKey]++
			if w.active[t.SessionKey] > 1 {
				w.overlap = append(w.overlap, t.SessionKey)
			}
			w.mu.Unlock()
			if w.hold != nil {
				w.hold(t)
			}
			w.mu.Lock()
			w.active[t.SessionKey]--
			w.mu.Unlock()
			if w.hold != nil {
				if err := endLease(); err != nil {
					return err
				}
			}
			waiting, err := locker.ReleaseWaiting(ctx, t.SessionKey, holder)
			w.mu.Lock()
			w.ended[t.TurnId] = true
			w.mu.Unlock()
			done := &turnsv1.TurnCompleted{TurnId: t.TurnId, SessionKey: t.SessionKey, SessionId: t.SessionId, Generation: t.Generation,
				Status: turnsv1.TurnStatus_TURN_STATUS_COMPLETED, Usage: &turnsv1.Usage{InputTokens: 10, OutputTokens: 5},
				UsageRecorded: true, NothingWaiting: err == nil && !waiting}
			_, err = e.bus.Publish(ctx, e.bus.Topology().Subject(bus.SubjectTurnCompleted), "turn-done:"+t.TurnId, done)
			return err
		})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = c.Run(ctx); close(done) }()
	e.t.Cleanup(func() { cancel(); <-done })
	return w
}

func (w *worker) snapshot() ([]*turnsv1.TurnRequested, []string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]*turnsv1.TurnRequested(nil), w.turns...), append([]string(nil), w.overlap...)
}

func (w *worker) lostTurns() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]string(nil), w.lost...)
}

var eventSeq int64
var eventMu sync.Mutex

func nextEventID() string {
	eventMu.Lock()
	defer eventMu.Unlock()
	eventSeq++
	return fmt.Sprintf("ev%d", eventSeq)
}

func dm(user, text string) *eventsv1.MessageReceived {
	id := nextEventID()
	return &eventsv1.MessageReceived{EventId: id, MessageId: "m" + id, Text: text,
		Source: &eventsv1.SessionSource{Platform: "telegram", Account: "bot1", ChatId: "chat-" + user, ChatType: "dm", UserId: user, UserName: user}}
}

func (e *env) publish(ev *eventsv1.MessageReceived) {
	e.publishID(ev, ev.Source.Platform+":"+ev.Source.Account+":"+ev.EventId)
}

func (e *env) publishID(ev *eventsv1.MessageReceived, msgID string) {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := e.bus.Publish(ctx, e.bus.Topology().InboundSubject(sessionkey.ChatKey(ev.Source)), msgID, ev); err != nil {
		e.t.Fatal(err)
	}
}

// waitFor polls cond until it holds or the deadline passes.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// inboundDrained reports whether every inbound durable has acked all.
// A durable's pending count can lag a publish the server already
// acknowledged (seen: a message published, every durable reporting none
// pending, the message handled a moment later), so the stream's last
// message must also be at or below the ack floor of one durable: the
// one whose partition it belongs to.
func (e *env) inboundDrained() bool {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	st, err := e.bus.JetStream().Stream(ctx, e.bus.Topology().Stream(bus.StreamInbound))
	if err != nil {
		return false
	}
	sinfo, err := st.Info(ctx)
	if err != nil {
		return false
	}
	var acked uint64
	for p := range e.bus.Topology().PartitionCount() {
		c, err := st.Consumer(ctx, fmt.Sprintf("router-inbound-%d", p))
		if err != nil {
			return false
		}
		info, err := c.Info(ctx)
		if err != nil || info.NumPending > 0 || info.NumAckPending > 0 {
			return false
		}
		acked = max(acked, info.AckFloor.Stream)
	}
	return acked >= sinfo.State.LastSeq
}

// ask sends text as user's DM and returns the next notice to user.
func (e *env) ask(user, text string) string {
	e.t.Helper()
	before := len(e.noticesTo(user))
	e.publish(dm(user, text))
	waitFor(e.t, "reply to "+text, func() bool { return len(e.noticesTo(user)) > before })
	return e.noticesTo(user)[before]
}

// answersTo is the router's answers (notices) to the Telegram event ev.
func (e *env) answersTo(ev *eventsv1.MessageReceived) []*repliesv1.ReplyEvent {
	e.mu.Lock()
	defer e.mu.Unlock()
	var out []*repliesv1.ReplyEvent
	for _, n := range e.notices {
		if n.GetTurnId() == "notice:telegram:bot1:"+ev.GetEventId() {
			out = append(out, n)
		}
	}
	return out
}

func (e *env) noticesTo(user string) []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	var out []string
	for _, n := range e.notices {
		if n.GetTarget().GetChatId() == "chat-"+user && n.GetNotice() != nil {
			out = append(out, n.GetNotice().GetText())
		}
	}
	return out
}

func inputsText(turns []*turnsv1.TurnRequested, key string) []string {
	var out []string
	for _, t := range turns {
		if t.SessionKey != key {
			continue
		}
		for _, in := range t.Inputs {
			out = append(out, in.Text)
		}
	}
	return out
}

func TestTwoRoutersKeepOrderAndOneTurnPerSession(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	cfg := testConfig()
	cfg.BusyMode = BusyQueue
	cfg.SweepInterval = time.Hour // the completions alone start every queued message
	users := []string{"alice", "bob"}
	cfg.Auth.GatewayAllowedUsers = append(cfg.Auth.GatewayAllowedUsers, users...)
	e.startRouter(cfg, nil, nil)
	e.startRouter(cfg, e.secondBus(), nil)
	w := e.startWorker(func(*turnsv1.TurnRequested) { time.Sleep(15 * time.Millisecond) })

	const n = 50
	for i := range n {
		for _, u := range users {
			e.publish(dm(u, fmt.Sprintf("%s-%02d", u, i)))
		}
	}
	for _, u := range users {
		key := "agent:main:telegram:dm:chat-" + u
		waitFor(t, "all inputs of "+u, func() bool {
			turns, _ := w.snapshot()
			return len(inputsText(turns, key)) >= n
		})
		turns, overlap := w.snapshot()
		if len(overlap) > 0 {
			t.Fatalf("two turns ran at once for %v", overlap)
		}
		got := inputsText(turns, key)
		if len(got) != n {
			t.Fatalf("%s: %d inputs, want %d", u, len(got), n)
		}
		for i, text := range got {
			if want := fmt.Sprintf("%s-%02d", u, i); text != want {
				t.Fatalf("%s: input %d is %q, want %q (order broken)", u, i, text, want)
			}
		}
		var sessions int
		if err := e.db.QueryRow(context.Background(), `SELECT count(*) FROM sessions WHERE session_key = $1`, key).Scan(&sessions); err != nil {
			t.Fatal(err)
		}
		if sessions != 1 {
			t.Fatalf("%d sessions for %s", sessions, key)
		}
	}
}

func TestGetOrCreateIsRaceFree(t *testing.T) {
	t.Parallel()
	pool1, url := pgtest.NewWithURL(t)
	pool2, err := pgxpool.New(context.Background(), url)
	if err != nil {
		t.Fatal(err)
	}
	defer pool2.Close()
	stores := []*sessionstore.Store{sessionstore.New(pool1), sessionstore.New(pool2)}
	src := &eventsv1.SessionSource{Platform: "telegram", ChatId: "1", ChatType: "dm", UserId: "u"}
	var wg sync.WaitGroup
	ids := make(chan string, 50)
	created := make(chan bool, 50)
	for i := range 50 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s, c, _, err := stores[i%2].Arrive(context.Background(), "agent:main:telegram:dm:1", "", src, "")
			if err != nil {
				t.Error(err)
				return
			}
			ids <- s.ID
			created <- c
		}()
	}
	wg.Wait()
	close(ids)
	close(created)
	seen := map[string]bool{}
	for id := range ids {
		seen[id] = true
	}
	nCreated := 0
	for c := range created {
		if c {
			nCreated++
		}
	}
	if len(seen) != 1 || nCreated != 1 {
		t.Fatalf("50 concurrent get-or-create: %d session ids, %d creations; want 1 and 1", len(seen), nCreated)
	}
}

var codeRE = regexp.MustCompile(`pairing code is ([A-Z2-9]{8})`)

func TestPairingApprovalSeenByBothReplicas(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	cfg := testConfig()
	// An allowlist exists: strangers get codes only when asked for.
	cfg.Auth.UnauthorizedDMBehavior = auth.DMPair
	// Each replica owns half the partitions, so both must see the approval.
	var a, b []int
	n := e.bus.Topology().PartitionCount()
	for p := range n {
		if p < n/2 {
			a = append(a, p)
		} else {
			b = append(b, p)
		}
	}
	e.startRouter(cfg, nil, a)
	e.startRouter(cfg, e.secondBus(), b)
	w := e.startWorker(nil)

	// A stranger DMs: gets a code, no turn.
	first := dm("mallory", "hello")
	e.publish(first)
	var code string
	waitFor(t, "pairing code notice", func() bool {
		for _, n := range e.noticesTo("mallory") {
			if m := codeRE.FindStringSubmatch(n); m != nil {
				code = m[1]
				return true
			}
		}
		return false
	})
	// In a group, silence.
	grp := dm("mallory", "hi all")
	grp.Source.ChatType, grp.Source.ChatId = "group", "g1"
	e.publish(grp)
	waitFor(t, "inbound drained", e.inboundDrained)
	if turns, _ := w.snapshot(); len(turns) != 0 {
		t.Fatalf("unauthorized sender started %d turns", len(turns))
	}
	if _, err := pairing.NewStore(e.db).Approve(context.Background(), "telegram", strings.ToLower(code), "test"); err != nil {
		t.Fatal(err)
	}
	// Messages from chats in both halves of the partitions now run.
	var chats []string
	seenA, seenB := false, false
	for i := 0; !(seenA && seenB); i++ {
		chat := fmt.Sprintf("c%d", i)
		p := e.bus.Topology().Partition(sessionkey.ChatKey(&eventsv1.SessionSource{Platform: "telegram", Account: "bot1", ChatId: chat}))
		if p < n/2 && !seenA {
			seenA = true
			chats = append(chats, chat)
		} else if p >= n/2 && !seenB {
			seenB = true
			chats = append(chats, chat)
		}
	}
	for _, chat := range chats {
		ev := dm("mallory", "now I may")
		ev.Source.ChatId = chat
		e.publish(ev)
	}
	waitFor(t, "turns on both replicas", func() bool {
		turns, _ := w.snapshot()
		return len(turns) == 2
	})
}

func TestStopAndNew(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.startRouter(testConfig(), nil, nil)
	release := make(chan struct{})
	w := e.startWorker(func(t *turnsv1.TurnRequested) {
		if t.Inputs[0].Text == "long task" {
			<-release
		}
	})
	defer close(release)
	key := "agent:main:telegram:dm:chat-alice"
	locker := redisx.NewLocker(e.rdb, e.prefix)
	store := sessionstore.New(e.db)

	e.publish(dm("alice", "long task"))
	waitFor(t, "turn running", func() bool { turns, _ := w.snapshot(); return len(turns) == 1 })
	before, err := store.Get(context.Background(), key)
	if err != nil {
		t.Fatal(err)
	}
	// Busy, interrupt mode: queued plus an interrupt to the worker.
	e.publish(dm("alice", "follow-up"))
	waitFor(t, "interrupt sent", func() bool {
		e.mu.Lock()
		defer e.mu.Unlock()
		for _, c := range e.control {
			if c.Action == turnsv1.ControlAction_CONTROL_ACTION_INTERRUPT && c.SessionKey == key {
				return true
			}
		}
		return false
	})
	waitFor(t, "busy acknowledgement", func() bool {
		for _, n := range e.noticesTo("alice") {
			if strings.Contains(n, "Interrupting") {
				return true
			}
		}
		return false
	})

	e.publish(dm("alice", "/stop"))
	waitFor(t, "stop notice", func() bool {
		for _, n := range e.noticesTo("alice") {
			if strings.HasPrefix(n, "⚡ Stopped. You can continue this session.") {
				return true
			}
		}
		return false
	})
	owner, err := locker.Owner(context.Background(), key)
	if err != nil || owner != "" {
		t.Fatalf("lock after /stop: %q, %v", owner, err)
	}
	after, _ := store.Get(context.Background(), key)
	if after.Generation <= before.Generation || after.ID != before.ID {
		t.Fatalf("/stop: generation %d→%d, id %s→%s; want a newer generation and the same session", before.Generation, after.Generation, before.ID, after.ID)
	}
	if n, _ := store.QueueLen(context.Background(), key); n != 0 {
		t.Fatalf("/stop left %d waiting", n)
	}

	e.publish(dm("alice", "/new"))
	waitFor(t, "new notice", func() bool {
		for _, n := range e.noticesTo("alice") {
			if strings.Contains(n, "New session") {
				return true
			}
		}
		return false
	})
	renewed, _ := store.Get(context.Background(), key)
	if renewed.ID == after.ID || renewed.Generation <= after.Generation {
		t.Fatalf("/new: id %s→%s, generation %d→%d", after.ID, renewed.ID, after.Generation, renewed.Generation)
	}
	// The session is free: the next message runs at once.
	e.publish(dm("alice", "fresh start"))
	waitFor(t, "turn after /new", func() bool {
		turns, _ := w.snapshot()
		return len(inputsText(turns, key)) == 2
	})
	turns, _ := w.snapshot()
	if got := inputsText(turns, key); got[1] != "fresh start" {
		t.Fatalf("inputs %q", got)
	}
	if turns[1].SessionId != renewed.ID || turns[1].Generation <= renewed.Generation {
		t.Fatalf("turn after /new: session %s gen %d; session %s gen %d", turns[1].SessionId, turns[1].Generation, renewed.ID, renewed.Generation)
	}
}

func TestExpiredLockLetsWaitingMessageRun(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.startRouter(testConfig(), nil, nil)
	key := "agent:main:telegram:dm:chat-bob"
	// A worker took the lock and crashed: nobody renews or releases it.
	locker := redisx.NewLocker(e.rdb, e.prefix)
	if ok, err := locker.Acquire(context.Background(), key, "crashed", 1500*time.Millisecond); err != nil || !ok {
		t.Fatal("take lock", ok, err)
	}
	e.publish(dm("bob", "anyone there?"))
	waitFor(t, "inbound drained", e.inboundDrained)
	w := e.startWorker(nil)
	waitFor(t, "waiting message runs after the lock expired", func() bool {
		turns, _ := w.snapshot()
		return len(inputsText(turns, key)) == 1
	})
}

// A turn that waits for a worker longer than the lock's TTL keeps its
// session: a message that arrives meanwhile is queued behind it instead of
// starting a turn of its own that would leave the first unanswered.
func TestTurnWaitingForAWorkerKeepsItsSession(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	cfg := testConfig()
	cfg.LockTTL = time.Second
	e.startRouter(cfg, nil, nil)
	key := "agent:main:telegram:dm:chat-bob"
	// No worker runs (all of them down, or busy): the turn waits.
	e.publish(dm("bob", "first"))
	waitFor(t, "inbound drained", e.inboundDrained)
	time.Sleep(cfg.LockTTL + cfg.LockTTL/2)
	e.publish(dm("bob", "second"))
	waitFor(t, "inbound drained", e.inboundDrained)

	w := e.startWorker(nil)
	waitFor(t, "both messages run", func() bool {
		turns, _ := w.snapshot()
		return len(inputsText(turns, key)) == 2
	})
	turns, overlap := w.snapshot()
	if lost := w.lostTurns(); len(lost) > 0 {
		t.Fatalf("turns superseded while they waited for a worker: %v", lost)
	}
	if got := inputsText(turns, key); !slices.Equal(got, []string{"first", "second"}) {
		t.Fatalf("inputs %q, want first then second", got)
	}
	if len(overlap) > 0 {
		t.Fatalf("two turns at once: %v", overlap)
	}
	if turns[0].Generation >= turns[1].Generation {
		t.Fatalf("generations %d then %d", turns[0].Generation, turns[1].Generation)
	}
	// Nothing was running to interrupt (the default busy mode): the user
	// is told the message is queued.
	if got := e.noticesTo("bob"); len(got) != 1 || !strings.HasPrefix(got[0], "⏳ Queued for the next turn") {
		t.Fatalf("notices %q, want one saying the message is queued", got)
	}
}

// The sweep takes a session from a holder that left it, and counts it:
// the grant of a router that died between taking the lock and starting
// the turn (a grant lives GrantTTL, so that a started turn keeps its
// session however long it waits for a worker; the sweep takes it over
// once it is older than LockTTL and names no started turn), and the lock
// of a worker that died, once it expires.
func TestSweepTakesOverAbandonedLocks(t *testing.T) {
	t.Parallel()
	tests := []struct {
		kind  string
		value func() string
		// expires: the lock goes once the message waits behind it, as a
		// dead worker's lock runs out (a TTL set up front could run out
		// before the message arrives on a slow machine).
		expires bool
	}{
		{"orphaned_grant", func() string { return redisx.NewGrant(time.Now()) }, false},
		{"expired", func() string { return redisx.Holder(redisx.NewGrant(time.Now()), "dead-worker.1") }, true},
	}
	for _, tt := range tests {
		t.Run(tt.kind, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			cfg := testConfig()
			cfg.LockTTL = time.Second
			// This router's own log says which path started the message:
			// the takeover counter is process-wide, shared with the other
			// tests running in parallel.
			var logs lockedBuffer
			e.startRouterWith(cfg, nil, func(d *Deps) { d.Log = slog.New(slog.NewTextHandler(&logs, nil)) })
			w := e.startWorker(nil)
			key := "agent:main:telegram:dm:chat-bob"
			lock := redisx.NewLocker(e.rdb, e.prefix).Key(key)
			if err := e.rdb.Set(context.Background(), lock, tt.value(), time.Hour).Err(); err != nil {
				t.Fatal(err)
			}
			before := testutil.ToFloat64(lockTakeovers.WithLabelValues(tt.kind))
			e.publish(dm("bob", "anyone there?"))
			if tt.expires {
				// Handled, not only queued: the handler's own start after
				// queueing must have found the lock held, or it would
				// start the message once the lock goes, before the sweep.
				waitFor(t, "the message waits behind the lock", func() bool {
					var n int
					_ = e.db.QueryRow(context.Background(), `SELECT count(*) FROM session_queue WHERE session_key = $1`, key).Scan(&n)
					return n == 1 && e.inboundDrained()
				})
				if err := e.rdb.Del(context.Background(), lock).Err(); err != nil {
					t.Fatal(err)
				}
			}
			waitFor(t, "the waiting message runs", func() bool {
				turns, _ := w.snapshot()
				return len(inputsText(turns, key)) == 1
			})
			// The sweep counts a takeover, then logs the swept session,
			// after it published the turn: the worker may run it first.
			waitFor(t, "the sweep logs the session it started", func() bool {
				return strings.Contains(logs.String(), `msg="swept waiting session"`)
			})
			if got := testutil.ToFloat64(lockTakeovers.WithLabelValues(tt.kind)); got < before+1 {
				t.Errorf("%s takeovers %v, want at least %v", tt.kind, got, before+1)
			}
			if took := strings.Contains(logs.String(), `msg="took over an orphaned session lock"`); took != (tt.kind == "orphaned_grant") {
				t.Errorf("took over an orphaned grant: %v, want %v; router log:\n%s", took, !took, logs.String())
			}
		})
	}
}

func TestOrphaned(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	cfg := testConfig()
	s := e.startRouter(cfg, nil, nil)
	e.startWorker(nil)
	key := "agent:main:telegram:dm:chat-alice"
	e.publish(dm("alice", "hello"))
	var last string
	waitFor(t, "the session's turn", func() bool {
		sess, err := s.store.Get(context.Background(), key)
		last = sess.LastTurnID
		return err == nil && last != ""
	})
	old := redisx.NewGrant(time.Now().Add(-2 * cfg.LockTTL))
	tests := []struct {
		name, key, owner string
		want             bool
	}{
		{"a worker's claim", key, redisx.Holder(old, "w.1"), false},
		{"a grant being started", key, redisx.NewGrant(time.Now()), false},
		{"an old grant of another turn", key, old, true},
		{"an old grant of the session's last turn", key, last, false},
		{"a value that is no grant of this release", key, redisx.NewToken(), false},
		{"an old grant of a session that does not exist", "agent:main:telegram:dm:nobody", old, true},
	}
	for _, tt := range tests {
		got, err := s.orphaned(context.Background(), tt.key, tt.owner)
		if err != nil || got != tt.want {
			t.Errorf("%s: orphaned = %v (%v), want %v", tt.name, got, err, tt.want)
		}
	}
	if _, ok := redisx.GrantTime(last); !ok {
		t.Errorf("the session's last turn id %q is not its grant", last)
	}
}

func TestDuplicateInboundStartsNothing(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.startRouter(testConfig(), nil, nil)
	w := e.startWorker(nil)
	ev := dm("alice", "once")
	e.publish(ev)
	waitFor(t, "first turn", func() bool { turns, _ := w.snapshot(); return len(turns) == 1 })
	// The same platform event replayed after the bus dedupe window: a new
	// Nats-Msg-Id, same event id.
	e.publishID(ev, "replayed-later")
	e.publish(dm("alice", "after"))
	waitFor(t, "second message handled", func() bool { turns, _ := w.snapshot(); return len(turns) == 2 })
	waitFor(t, "inbound drained", e.inboundDrained)
	turns, _ := w.snapshot()
	if got := inputsText(turns, "agent:main:telegram:dm:chat-alice"); len(got) != 2 || got[1] != "after" {
		t.Fatalf("inputs %q; the replay must start nothing", got)
	}
}

// A router that crashed after starting a message's turn, before it
// recorded the message as handled, sees the message again: it must not be
// queued or started a second time, whether the turn still runs or is done.
func TestRedeliveryOfAStartedMessageStartsNothing(t *testing.T) {
	t.Parallel()
	for _, busy := range []bool{false, true} {
		t.Run(fmt.Sprintf("turn running %v", busy), func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			e.startRouter(testConfig(), nil, nil)
			w := e.startWorker(nil)
			key := "agent:main:telegram:dm:chat-alice"
			ev := dm("alice", "once")
			e.publish(ev)
			waitFor(t, "first turn", func() bool { turns, _ := w.snapshot(); return len(turns) == 1 })
			waitFor(t, "inbound drained", e.inboundDrained)
			// The crash: no record of the message in Redis.
			keys, err := e.rdb.Keys(context.Background(), e.prefix+"inbound:*").Result()
			if err != nil || len(keys) != 1 {
				t.Fatalf("dedupe records %v, %v", keys, err)
			}
			if err := e.rdb.Del(context.Background(), keys...).Err(); err != nil {
				t.Fatal(err)
			}
			locker := redisx.NewLocker(e.rdb, e.prefix)
			if busy {
				waitFor(t, "lock released", func() bool { o, _ := locker.Owner(context.Background(), key); return o == "" })
				if ok, err := locker.Acquire(context.Background(), key, "running", time.Minute); err != nil || !ok {
					t.Fatal("take lock", ok, err)
				}
			}
			e.publishID(ev, "redelivered")
			waitFor(t, "inbound drained", e.inboundDrained)
			if busy {
				if err := locker.Release(context.Background(), key, "running"); err != nil {
					t.Fatal(err)
				}
			}
			e.publish(dm("alice", "after"))
			waitFor(t, "next message handled", func() bool { turns, _ := w.snapshot(); return len(turns) == 2 })
			waitFor(t, "inbound drained", e.inboundDrained)
			turns, _ := w.snapshot()
			if got := inputsText(turns, key); len(got) != 2 || got[0] != "once" || got[1] != "after" {
				t.Fatalf("inputs %q; the redelivery must start nothing", got)
			}
		})
	}
}

// The router takes a free session's lock with its first read of a
// message; a message that then starts no turn gives it back, so the
// session is not left looking busy.
func TestMessagesThatStartNoTurnLeaveTheLockFree(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	cfg := testConfig()
	cfg.Auth.UnauthorizedDMBehavior = auth.DMPair
	e.startRouter(cfg, nil, nil)
	w := e.startWorker(nil)
	locker := redisx.NewLocker(e.rdb, e.prefix)
	free := func(user string) func() bool {
		return func() bool {
			o, err := locker.Owner(context.Background(), "agent:main:telegram:dm:chat-"+user)
			return err == nil && o == ""
		}
	}
	first := dm("alice", "hello")
	e.publish(first)
	waitFor(t, "first turn", func() bool { turns, _ := w.snapshot(); return len(turns) == 1 })
	waitFor(t, "lock free after the turn", free("alice"))
	for _, tt := range []struct {
		name string
		ev   *eventsv1.MessageReceived
		id   string
	}{
		{"denied sender", dm("mallory", "let me in"), ""},
		{"command", dm("alice", "/help"), ""},
		{"replayed event", first, "replayed"},
	} {
		if tt.id != "" {
			e.publishID(tt.ev, tt.id)
		} else {
			e.publish(tt.ev)
		}
		waitFor(t, tt.name+" handled", e.inboundDrained)
		if !free(tt.ev.Source.UserId)() {
			t.Fatalf("%s left the session lock held", tt.name)
		}
	}
	if turns, _ := w.snapshot(); len(turns) != 1 {
		t.Fatalf("%d turns, want 1", len(turns))
	}
	// The denied sender's pairing code goes out as before: under the
	// pairing key, not a session's.
	settled(t, "pairing notice", 1, func() int { return len(e.noticesTo("mallory")) })
	e.mu.Lock()
	defer e.mu.Unlock()
	var pairing []string
	for _, n := range e.notices {
		if n.GetTarget().GetChatId() == "chat-mallory" {
			pairing = append(pairing, n.GetSessionKey())
		}
	}
	if len(pairing) != 1 || pairing[0] != "pairing:telegram:mallory" {
		t.Fatalf("notices to the denied sender under %q, want one under the pairing key", pairing)
	}
}

// A command takes the session lock with its first read like any message;
// giving it back starts what waits in the queue then (a turn's completion
// may have found the lock taken by the command and started nothing), at
// once rather than at the next sweep.
func TestCommandStartsWhatItsLockTurnedAway(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	cfg := testConfig()
	cfg.SweepInterval = time.Hour
	e.startRouter(cfg, nil, nil)
	w := e.startWorker(nil)
	// What the race leaves: a queued message, the lock free, no turn.
	waiting := dm("alice", "waiting")
	key := "agent:main:telegram:dm:chat-alice"
	if _, _, err := sessionstore.New(e.db).ArriveAndEnqueue(context.Background(), key, cfg.Profile, waiting.Source, 1, false, waiting, 10); err != nil {
		t.Fatal(err)
	}
	e.publish(dm("alice", "/status"))
	waitFor(t, "the waiting message's turn", func() bool { turns, _ := w.snapshot(); return len(turns) == 1 })
	if turns, _ := w.snapshot(); turns[0].GetInputs()[0].GetText() != "waiting" {
		t.Fatalf("started %v", turns[0].GetInputs())
	}
}

// A turn's usage is counted once: the router adds to the session's row
// what a turn that ended without a final used, and not what a worker
// stored with the turn's final; /status shows both.
func TestUsageIsCountedOnce(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	svc := e.startRouter(testConfig(), nil, nil)
	w := e.startWorker(nil)
	e.publish(dm("alice", "hello"))
	waitFor(t, "the turn", func() bool { turns, _ := w.snapshot(); return len(turns) == 1 })
	key := "agent:main:telegram:dm:chat-alice"
	ctx := context.Background()
	tokens := func() (in, out int64) {
		t.Helper()
		if err := e.db.QueryRow(ctx, `SELECT input_tokens, output_tokens FROM sessions WHERE session_key = $1`, key).Scan(&in, &out); err != nil {
			t.Fatal(err)
		}
		return in, out
	}
	// The test worker's completion says its usage was stored with its
	// final, as workers do: the router adds nothing for it.
	turns, _ := w.snapshot()
	sid := turns[0].GetSessionId()
	for _, tc := range []struct {
		recorded bool
		in, out  int64
	}{{true, 0, 0}, {false, 1, 1}} {
		ev := &turnsv1.TurnCompleted{TurnId: fmt.Sprintf("direct-%v", tc.recorded), SessionKey: key, SessionId: sid,
			Status: turnsv1.TurnStatus_TURN_STATUS_COMPLETED, Usage: &turnsv1.Usage{InputTokens: 1, OutputTokens: 1},
			UsageRecorded: tc.recorded}
		if err := svc.handleTurnCompleted(ctx, ev); err != nil {
			t.Fatal(err)
		}
		if in, out := tokens(); in != tc.in || out != tc.out {
			t.Errorf("recorded %v: session counts %d/%d, want %d/%d", tc.recorded, in, out, tc.in, tc.out)
		}
	}
	// A completion whose booking failed (Postgres refused it) is booked by
	// its redelivery: the once-per-turn record does not outlive the failure.
	retry := &turnsv1.TurnCompleted{TurnId: "direct-retry", SessionKey: key, SessionId: sid,
		Status: turnsv1.TurnStatus_TURN_STATUS_FAILED, Usage: &turnsv1.Usage{InputTokens: 2, OutputTokens: 2}}
	if _, err := e.db.Exec(ctx, `ALTER TABLE sessions RENAME TO sessions_away`); err != nil {
		t.Fatal(err)
	}
	err := svc.handleTurnCompleted(ctx, retry)
	if _, rerr := e.db.Exec(ctx, `ALTER TABLE sessions_away RENAME TO sessions`); rerr != nil {
		t.Fatal(rerr)
	}
	if err == nil {
		t.Fatal("booking without the sessions table succeeded")
	}
	if err := svc.handleTurnCompleted(ctx, retry); err != nil {
		t.Fatal(err)
	}
	if in, out := tokens(); in != 3 || out != 3 {
		t.Errorf("after a failed booking and its redelivery: %d/%d, want 3/3", in, out)
	}
	// What a worker stored with its finals counts for the conversation.
	if _, err := e.db.Exec(ctx, `INSERT INTO worker_turns (turn_id, session_key, session_id, generation, final_kind, input_tokens, output_tokens)
		VALUES ('stored', $1, $2, 1, 'final_text', 1000, 500), ('elsewhere', $1, 'another-conversation', 1, 'final_text', 7, 7)`, key, sid); err != nil {
		t.Fatal(err)
	}
	before := len(e.noticesTo("alice"))
	e.publish(dm("alice", "/status"))
	waitFor(t, "the status", func() bool { return len(e.noticesTo("alice")) > before })
	if got := e.noticesTo("alice")[before]; !strings.Contains(got, "Tokens: 1003 in, 503 out") {
		t.Errorf("status %q, want 1003 in and 503 out", got)
	}
	if got := e.ask("alice", "/usage"); !strings.Contains(got, "Input: 1,003\nOutput: 503\nTotal: 1,506") {
		t.Errorf("/usage %q, want 1,003 in, 503 out, 1,506 in all", got)
	}
	if got := e.ask("alice", "/new"); !strings.Contains(got, "New session started") {
		t.Fatalf("/new: %q", got)
	}
	if got := e.ask("alice", "/usage"); got != "No usage data available for this session." {
		t.Errorf("/usage of a new conversation: %q", got)
	}
}

func TestCommands(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	cfg := testConfig()
	cfg.Admins = map[string][]string{"telegram": {"alice"}}
	e.startRouter(cfg, nil, nil)
	tests := []struct {
		user, text, want string
	}{
		{"alice", "/help", "/new [title] (/reset)"},
		{"alice", "/stpo", "Did you mean /stop"},
		{"alice", "/whoami", "Role: admin"},
		{"bob", "/whoami", "Authorized by: allowlist"},
		{"bob", "/model gpt-x", "reserved for admins"},
		{"alice", "/model gpt-x", "now uses gpt-x"},
		{"alice", "/status", "Model: gpt-x"},
		{"alice", "/title Trip plans", "Title set: Trip plans"},
		{"alice", "/sessions", "Trip plans"},
		{"alice", "/reset", "New session started"},
		{"alice", "/status", "Model: default"}, // a /model override belongs to its conversation
		{"alice", "/title", "no title"},
		{"alice", "/resume trip PLANS", "Resumed Trip plans"},
		{"alice", "/status", "Title: Trip plans"},
		{"alice", "/new Beach day", "New session started: Beach day"},
		{"alice", "/sessions", "1. Beach day"},
		{"alice", "/resume 1", "Already on that conversation"},
		{"alice", "/resume 9", "There is no conversation 9"},
		{"alice", "/resume 3", "Resumed Trip plans"},
		{"alice", "/resume nothing-like-it", "No earlier conversation"},
		{"alice", "/undo x", "Usage: /undo"},
		{"alice", "/stop", "No active task to stop."},
		{"alice", "/approve", "No pending command to approve."},
		{"alice", "/deny", "No pending command to deny."},
		{"alice", "/steer", "Usage: /steer <prompt>  (no agent is running; sending as a normal message)"},
		{"alice", "/sethome", "home channel"},
		{"alice", "/queue", "Usage: /queue <prompt>"},
		// Titles are cleaned as Hermes cleans them, and refused when too
		// long: a NUL, which Postgres text refuses, once failed the
		// handler on every redelivery and the user never got an answer.
		{"alice", "/title Road\x00 trip\u200b  \x7fplans", "Title set: Road trip plans"},
		{"alice", "/resume Road\x00 trip plans", "Already on that conversation"},
		{"alice", "/title " + strings.Repeat("é", 101), "⚠️ Title too long (101 chars, max 100)"},
		{"alice", "/title \u200b\u202e", "Title is empty after cleanup"},
		{"alice", "/new " + strings.Repeat("x", 150), "New session started. ⚠️ Title too long (150 chars, max 100)"},
		{"alice", "/title", "no title"},
	}
	for _, tt := range tests {
		if got := e.ask(tt.user, tt.text); !strings.Contains(got, tt.want) {
			t.Errorf("%s %s: got %q, want it to contain %q", tt.user, tt.text, got, tt.want)
		}
	}
}

// /sethome records the chat unless the operator configured the
// platform's home, which a user cannot move.
func TestSetHome(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.homes = func(platform string) string { return map[string]string{"discord": "42"}[platform] }
	e.startRouter(testConfig(), nil, nil)
	if got := e.ask("alice", "/sethome"); !strings.Contains(got, "now the home channel for telegram") {
		t.Fatalf("/sethome on telegram: %q", got)
	}
	var chat string
	if err := e.db.QueryRow(context.Background(), `SELECT chat_id FROM home_channels WHERE platform = 'telegram'`).Scan(&chat); err != nil || chat != "chat-alice" {
		t.Fatalf("telegram's home %q (%v), want chat-alice", chat, err)
	}
	ev := dm("bob", "/sethome")
	ev.Source.Platform = "discord"
	e.publish(ev)
	waitFor(t, "the answer on discord", func() bool { return len(e.noticesTo("bob")) > 0 })
	if got := e.noticesTo("bob")[0]; !strings.Contains(got, "set by the operator") {
		t.Fatalf("/sethome on discord: %q, want it refused", got)
	}
	var n int
	if err := e.db.QueryRow(context.Background(), `SELECT count(*) FROM home_channels WHERE platform = 'discord'`).Scan(&n); err != nil || n != 0 {
		t.Fatalf("discord home rows %d (%v), want none", n, err)
	}
}

// Telegram's /start (a user opening the bot) is answered with nothing and
// starts nothing, as in Hermes; "!" before a word that is no command is an
// ordinary message on Slack.
func TestStartPingAndBangText(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.startRouter(testConfig(), nil, nil)
	w := e.startWorker(nil)
	e.publish(dm("bob", "/start"))
	e.publish(dm("bob", "/help"))
	waitFor(t, "reply to /help", func() bool { return len(e.noticesTo("bob")) > 0 })
	waitFor(t, "inbound drained", e.inboundDrained)
	if got := e.noticesTo("bob"); len(got) != 1 || !strings.Contains(got[0], "/new [title] (/reset)") {
		t.Fatalf("notices %q, want only the help", got)
	}
	slackMsg := &eventsv1.MessageReceived{EventId: nextEventID(), Text: "!nice work",
		Source: &eventsv1.SessionSource{Platform: "slack", Account: "T1", ChatId: "D1", ChatType: "dm", UserId: "bob", UserName: "bob"}}
	e.publish(slackMsg)
	waitFor(t, "the slack message runs as a turn", func() bool {
		turns, _ := w.snapshot()
		for _, tr := range turns {
			for _, in := range tr.Inputs {
				if in.Text == "!nice work" {
					return true
				}
			}
		}
		return false
	})
	turns, _ := w.snapshot()
	if len(turns) != 1 {
		t.Fatalf("%d turns, want only the slack message's", len(turns))
	}
}

// /retry, /undo and /compress run as turns of their own whose input the router
// marks, in canonical form, for the worker to perform; a mark that
// arrives from outside is cleared. The focus of /compress <focus>
// (Hermes's focus topic) goes on the turn (compress_focus), on one line.
func TestTranscriptCommandsAreMarkedTurns(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.startRouter(testConfig(), nil, nil)
	w := e.startWorker(nil)
	forged := dm("alice", "just text")
	forged.TranscriptCommand = "undo 50"
	locker := redisx.NewLocker(e.rdb, e.prefix)
	for i, ev := range []*eventsv1.MessageReceived{dm("alice", "/retry"), dm("alice", "/UNDO 3"), dm("alice", "/undo"), dm("alice", "/compress travel plans"), dm("alice", "/compress"), dm("alice", "/compress  the\n\"db\"   migration "),
		dm("alice", "/compress here"), dm("alice", "/compress HERE 5 --dry-run"), dm("alice", "/compress —preview auth bugs"), dm("alice", "/compress up to here 500"), forged} {
		// One at a time: /retry and /undo are refused while a turn runs.
		e.publish(ev)
		waitFor(t, fmt.Sprintf("turn %d", i+1), func() bool { turns, _ := w.snapshot(); return len(turns) == i+1 })
		waitFor(t, fmt.Sprintf("turn %d done", i+1), func() bool {
			owner, err := locker.Owner(context.Background(), "agent:main:telegram:dm:chat-alice")
			return err == nil && owner == ""
		})
	}
	turns, _ := w.snapshot()
	want := map[string]string{"/retry": "retry", "/UNDO 3": "undo 3", "/undo": "undo", "/compress travel plans": "compress",
		"/compress": "compress", "/compress  the\n\"db\"   migration ": "compress", "just text": "",
		"/compress here": "compress", "/compress HERE 5 --dry-run": "compress", "/compress —preview auth bugs": "compress", "/compress up to here 500": "compress"}
	focus := map[string]string{"/compress travel plans": "travel plans", "/compress  the\n\"db\"   migration ": `the "db" migration`,
		"/compress —preview auth bugs": "auth bugs"}
	// Hermes's "here [N]" (2 by default, at most 100) and --preview.
	keep := map[string]int32{"/compress here": 2, "/compress HERE 5 --dry-run": 5, "/compress up to here 500": 100}
	preview := map[string]bool{"/compress HERE 5 --dry-run": true, "/compress —preview auth bugs": true}
	for _, tr := range turns {
		in := tr.GetInputs()
		if len(in) != 1 {
			t.Fatalf("turn with %d inputs", len(in))
		}
		if got, w := in[0].GetTranscriptCommand(), want[in[0].GetText()]; got != w {
			t.Errorf("%q: marked %q, want %q", in[0].GetText(), got, w)
		}
		if got, w := tr.GetCompressFocus(), focus[in[0].GetText()]; got != w {
			t.Errorf("%q: compress focus %q, want %q", in[0].GetText(), got, w)
		}
		if k, p := tr.GetCompressKeepLast(), tr.GetCompressPreview(); k != keep[in[0].GetText()] || p != preview[in[0].GetText()] {
			t.Errorf("%q: compress keep_last %d, preview %v; want %d, %v", in[0].GetText(), k, p, keep[in[0].GetText()], preview[in[0].GetText()])
		}
	}
	// Hermes refuses --aggressive, preview or not; nothing is queued.
	for _, text := range []string{"/compress --aggressive", "/compress --preview --aggressive here"} {
		if got := e.ask("alice", text); got != compressAggressive {
			t.Errorf("%s: answered %q, want %q", text, got, compressAggressive)
		}
	}
	if turns, _ := w.snapshot(); len(turns) != 11 {
		t.Errorf("%d turns, want 11: --aggressive runs none", len(turns))
	}
}

func TestIdleResetTellsTheUser(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	cfg := testConfig()
	cfg.SessionReset.Mode, cfg.SessionReset.IdleMinutes = ResetIdle, 60
	clock := e.startRouterOnClock(cfg, time.Now())
	w := e.startWorker(nil)
	key := "agent:main:telegram:dm:chat-alice"

	e.publish(dm("alice", "hello"))
	waitFor(t, "first turn", func() bool { turns, _ := w.snapshot(); return len(turns) == 1 })
	first, _ := sessionstore.New(e.db).Get(context.Background(), key)
	locker := redisx.NewLocker(e.rdb, e.prefix)
	waitFor(t, "first turn done", func() bool {
		owner, err := locker.Owner(context.Background(), key)
		return err == nil && owner == ""
	})
	// The worker's record of the finished turn (this fake worker writes
	// none): the conversation used tokens, so its reset is worth a word.
	turns, _ := w.snapshot()
	if _, err := e.db.Exec(context.Background(), `INSERT INTO worker_turns (turn_id, session_key, session_id, generation, status, started_at, updated_at,
		input_tokens, output_tokens) VALUES ($1, $2, $3, $4, 'completed', $5, $5, 10, 5)`, turns[0].TurnId, key, turns[0].SessionId, turns[0].Generation, clock.Now()); err != nil {
		t.Fatal(err)
	}
	clock.advance(61 * time.Minute)
	e.publish(dm("alice", "back again"))
	waitFor(t, "second turn", func() bool { turns, _ := w.snapshot(); return len(turns) == 2 })
	turns, _ = w.snapshot()
	if turns[1].SessionId == first.ID {
		t.Fatal("idle session was not reset")
	}
	if n := settled(t, "reset notices", 1, func() int { return e.countNotices("alice", "Session reset after 1 hour of inactivity") }); n != 1 {
		t.Fatalf("reset notices %q", e.noticesTo("alice"))
	}
}

// TestConcurrentFirstMessagesOverTwoRouters bypasses the partition order
// on purpose: 50 first messages for one new session handled at the same
// time by two router instances give one session, one turn at a time, and
// every message in some turn.
func TestConcurrentFirstMessagesOverTwoRouters(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	cfg := testConfig()
	cfg.QueueCap = 64 // all 50 may wait at once; the cap is tested elsewhere
	r1 := e.startRouter(cfg, nil, []int{})
	r2 := e.startRouter(cfg, e.secondBus(), []int{})
	w := e.startWorker(func(*turnsv1.TurnRequested) { time.Sleep(5 * time.Millisecond) })
	var wg sync.WaitGroup
	for i := range 50 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := []*Service{r1, r2}[i%2]
			if err := r.handleInbound(context.Background(), dm("alice", fmt.Sprintf("m%02d", i))); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	key := "agent:main:telegram:dm:chat-alice"
	waitFor(t, "all 50 messages in turns", func() bool {
		turns, _ := w.snapshot()
		return len(inputsText(turns, key)) == 50
	})
	_, overlap := w.snapshot()
	if len(overlap) > 0 {
		t.Fatalf("two turns ran at once: %v", overlap)
	}
	var sessions, history int
	_ = e.db.QueryRow(context.Background(), `SELECT count(*) FROM sessions`).Scan(&sessions)
	_ = e.db.QueryRow(context.Background(), `SELECT count(*) FROM session_history`).Scan(&history)
	if sessions != 1 || history != 1 {
		t.Fatalf("%d sessions, %d history rows; want 1 and 1", sessions, history)
	}
}

func TestWarnsOnceWithoutAllowlist(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	var buf strings.Builder
	var mu sync.Mutex
	log := slog.New(slog.NewTextHandler(writerFunc(func(p []byte) (int, error) {
		mu.Lock()
		defer mu.Unlock()
		return buf.Write(p)
	}), nil))
	cfg := DefaultConfig()
	if _, err := New(cfg, Deps{Log: log, Bus: e.bus, DB: e.db, Redis: e.rdb, Environ: []string{"PATH=/bin"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := New(cfg, Deps{Log: log, Bus: e.bus, DB: e.db, Redis: e.rdb, Environ: []string{"SLACK_ALLOWED_USERS=U1"}}); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if n := strings.Count(buf.String(), "no allowlist configured"); n != 1 {
		t.Fatalf("%d warnings; log:\n%s", n, buf.String())
	}
}

type writerFunc func([]byte) (int, error)

// lockedBuffer is a log the router's goroutines write while the test reads.
type lockedBuffer struct {
	mu  sync.Mutex
	buf strings.Builder
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }

// A handler holding an early start (the free start's first Postgres round
// trip, sent with its Redis one) finishes it without a second connection:
// with more inbound partitions than the pool has connections, and senders
// whose authorization reads the pairing table, every message still
// starts.
func TestEarlyStartsNeverWaitForTheirOwnPool(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	_, url := pgtest.NewWithURL(t)
	pcfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		t.Fatal(err)
	}
	pcfg.MaxConns = 2
	small, err := pgxpool.NewWithConfig(context.Background(), pcfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(small.Close)
	e.db = small
	cfg := testConfig()
	users := make([]string, 16)
	for i := range users {
		users[i] = fmt.Sprintf("user%02d", i)
	}
	cfg.Auth.GatewayAllowedUsers = users
	w := e.startWorker(nil)
	e.startRouter(cfg, nil, nil)
	for _, u := range users {
		e.publish(dm(u, "hello"))
	}
	waitFor(t, "every message started", func() bool {
		turns, _ := w.snapshot()
		return len(turns) == len(users)
	})
}

// As Hermes: a stranger's DM gets no answer, not even a pairing code, when
// an allowlist restricts the platform; without one it gets a code, and
// the operator's setting wins either way.
func TestUnauthorizedDMBehaviour(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	cfg := testConfig() // GatewayAllowedUsers: alice, bob
	cfg.Auth.PlatformUnauthorizedDMBehavior = map[string]string{"discord": auth.DMPair}
	e.startRouter(cfg, nil, nil)
	e.publish(dm("mallory", "let me in"))
	onDiscord := dm("mallory", "let me in")
	onDiscord.Source.Platform, onDiscord.Source.ChatId = "discord", "chat-mallory-d"
	e.publish(onDiscord)
	waitFor(t, "inbound drained", e.inboundDrained)
	settled(t, "the discord code", 1, func() int {
		e.mu.Lock()
		defer e.mu.Unlock()
		n := 0
		for _, ev := range e.notices {
			if ev.GetTarget().GetChatId() == "chat-mallory-d" && codeRE.MatchString(ev.GetNotice().GetText()) {
				n++
			}
		}
		return n
	})
	if got := e.noticesTo("mallory"); len(got) != 0 {
		t.Fatalf("telegram, restricted by the allowlist, answered the stranger: %q", got)
	}
}

// TestForkFromOnlyOnTheAPI: fork_from copies a conversation into a new
// one for the API's Responses branches; on any other platform the router
// drops it, so an event can never open a copy of someone else's chat.
func TestForkFromOnlyOnTheAPI(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.startRouter(testConfig(), nil, nil)
	w := e.startWorker(nil)
	ctx := context.Background()
	store := sessionstore.New(e.db)

	bobKey := "agent:main:telegram:dm:chat-bob"
	bob, _, _, err := store.Arrive(ctx, bobKey, "", dm("bob", "x").GetSource(), "seed")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.db.Exec(ctx, `INSERT INTO transcript_messages (session_key, session_id, user_key, turn_id, generation, step, role, content)
		VALUES ($1, $2, 'telegram:bob', 'bob-turn', 1, 0, 'user', 'bob''s secret')`, bobKey, bob.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := e.db.Exec(ctx, `INSERT INTO worker_turns (turn_id, session_key, session_id, generation, status, final_kind, final_text, updated_at)
		VALUES ('bob-turn', $1, $2, 1, 'completed', 'final_text', 'x', now())`, bobKey, bob.ID); err != nil {
		t.Fatal(err)
	}

	ev := dm("alice", "hello")
	ev.ForkFrom = &eventsv1.ForkFrom{SessionKey: bobKey, TurnId: "bob-turn"}
	e.publish(ev)
	waitFor(t, "alice's turn", func() bool { turns, _ := w.snapshot(); return len(turns) == 1 })
	turns, _ := w.snapshot()
	var n int
	if err := e.db.QueryRow(ctx, `SELECT count(*) FROM transcript_messages WHERE session_id = $1`, turns[0].GetSessionId()).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 0 {
		t.Fatalf("a Telegram message with fork_from opened a copy of another chat (%d messages)", n)
	}
}

// TestStopAnswersTheAPIRequestsItDrops: an API request waits for an
// answer of its own; one whose waiting message /stop or /new drops gets
// an "interrupted" error at once instead of its reply timeout (/new
// left it to the timeout). A chat's dropped messages get only the
// /stop's count, as in Hermes.
func TestStopAnswersTheAPIRequestsItDrops(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct{ command, text string }{
		{"/stop", "Stopped before it ran: /stop dropped this waiting message."},
		{"/new", "Stopped before it ran: /new dropped this waiting message."},
	} {
		t.Run(tt.command, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			cfg := testConfig()
			cfg.Auth.AllowAll = map[string]bool{"api": true}
			e.startRouter(cfg, nil, nil)
			release := make(chan struct{})
			w := e.startWorker(func(t *turnsv1.TurnRequested) {
				if t.Inputs[0].Text == "long task" {
					<-release
				}
			})
			defer close(release)

			api := func(id, text string) *eventsv1.MessageReceived {
				return &eventsv1.MessageReceived{EventId: id, MessageId: id, Text: text, TransportAuthenticated: true,
					Source: &eventsv1.SessionSource{Platform: "api", Account: "default", ChatId: "conv", ChatType: "dm", UserId: "client"}}
			}
			e.publish(api("req-1", "long task"))
			waitFor(t, "turn running", func() bool { turns, _ := w.snapshot(); return len(turns) == 1 })
			e.publish(api("req-2", "next"))
			e.publish(api("req-3", "and next"))
			waitFor(t, "both queued", func() bool {
				n, err := sessionstore.New(e.db).QueueLen(context.Background(), "agent:main:api:dm:conv")
				return err == nil && n == 2
			})
			e.publish(api("req-cmd", tt.command))

			errorsFor := func() map[string]*repliesv1.ReplyEvent {
				e.mu.Lock()
				defer e.mu.Unlock()
				out := map[string]*repliesv1.ReplyEvent{}
				for _, ev := range e.notices {
					if ev.GetError() != nil && len(ev.GetInputMessageIds()) == 1 {
						out[ev.GetInputMessageIds()[0]] = ev
					}
				}
				return out
			}
			waitFor(t, "the dropped requests answered", func() bool { return len(errorsFor()) == 2 })
			got := errorsFor()
			for _, id := range []string{"req-2", "req-3"} {
				ev := got[id]
				if ev == nil || ev.GetError().GetCode() != "interrupted" || ev.GetError().GetMessage() != tt.text ||
					ev.GetTarget().GetChatId() != "conv" || ev.GetTurnId() != "stopped:"+id {
					t.Errorf("answer to %s: %v", id, ev)
				}
			}
			if got["req-1"] != nil {
				t.Errorf("the running request got an answer from %s: %v", tt.command, got["req-1"])
			}
		})
	}
}

// The answer to a command is Markdown, as Hermes writes its command
// replies (delivery renders **bold** and `code` in each platform's
// markup); other notices, such as a pairing code's, are plain text.
func TestCommandAnswersAreMarkdown(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	cfg := testConfig()
	cfg.Auth.UnauthorizedDMBehavior = auth.DMPair
	e.startRouter(cfg, nil, nil)
	e.ask("bob", "/help")
	e.publish(dm("mallory", "hello"))
	waitFor(t, "the pairing notice", func() bool { return len(e.noticesTo("mallory")) == 1 })
	want := map[string]deliveryv1.TextFormat{
		"chat-bob":     deliveryv1.TextFormat_TEXT_FORMAT_MARKDOWN,
		"chat-mallory": deliveryv1.TextFormat_TEXT_FORMAT_UNSPECIFIED,
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, n := range e.notices {
		chat := n.GetTarget().GetChatId()
		if w, ok := want[chat]; ok && n.GetNotice() != nil && n.GetNotice().GetFormat() != w {
			t.Errorf("%s: notice %q (kind %s) format %v, want %v", chat, n.GetNotice().GetText(), n.GetNotice().GetKind(), n.GetNotice().GetFormat(), w)
		}
	}
}
