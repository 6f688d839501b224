package platform_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/proto"

	"github.com/switchboard-chat/switchboard/pkg/bus"
	"github.com/switchboard-chat/switchboard/pkg/bus/bustest"
	deliveryv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/delivery/v1"
	eventsv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/events/v1"
	"github.com/switchboard-chat/switchboard/pkg/platform"
	"github.com/switchboard-chat/switchboard/pkg/platform/platformtest"
	"github.com/switchboard-chat/switchboard/pkg/telemetry/telemetrytest"
)

func TestMemoryContract(t *testing.T) {
	t.Parallel()
	for _, single := range []bool{false, true} {
		name := "multi"
		if single {
			name = "single-consumer"
		}
		t.Run(name, func(t *testing.T) {
			platformtest.Run(t, platformtest.Harness{New: func(t *testing.T, env platformtest.Env) (platform.Platform, platformtest.Fake) {
				m := platformtest.NewMemory("bot1", single)
				return m, m.Fake()
			}})
		})
	}
}

func TestDefaultBackoff(t *testing.T) {
	t.Parallel()
	want := []time.Duration{30, 60, 120, 240, 300, 300, 300}
	for i, w := range want {
		w *= time.Second
		for range 20 {
			got := platform.DefaultBackoff(i)
			if got < w*9/10 || got > w*11/10 {
				t.Fatalf("attempt %d: %v, want %v ± 10%%", i, got, w)
			}
		}
	}
}

type runHandle struct {
	r    *platform.Runner
	stop func()
}

func startRunner(t *testing.T, p platform.Platform, b *bus.Bus, opts platform.Options) runHandle {
	t.Helper()
	r, err := platform.NewRunner(p, b, opts)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	var once sync.Once
	stop := func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("run: %v", err)
			}
		})
	}
	t.Cleanup(stop)
	return runHandle{r, stop}
}

func state(r *platform.Runner) platform.State {
	s, _ := r.State()
	return s
}

func TestFatalFailureStopsRetrying(t *testing.T) {
	t.Parallel()
	b := bustest.New(t, bustest.EmbeddedURL(t))
	m := platformtest.NewMemory("bot", false)
	m.FailNext(platform.Fatal(errors.New("401 unauthorized: bad token")))
	var attempts sync.WaitGroup
	h := startRunner(t, m, b, platform.Options{Backoff: func(int) time.Duration { attempts.Add(1); return time.Millisecond }})
	platformtest.WaitFor(t, "fatal state", func() bool { return state(h.r) == platform.StateFatal })
	err := h.r.Ready(context.Background())
	if err == nil || !strings.Contains(err.Error(), "bad token") {
		t.Fatalf("Ready = %v, want the fatal reason", err)
	}
	if n := m.Fake().Connections(); n != 0 {
		t.Fatalf("connected %d times after a fatal failure", n)
	}
}

func TestRetryableFailureReconnectsWithSchedule(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name        string
		stableAfter time.Duration
		want        []int
	}{
		// A connection that stayed up long enough starts the schedule over.
		{"stable", time.Millisecond, []int{0, 0}},
		// One that drops at once walks on, as a platform that accepts the
		// connection and closes it again would make it.
		{"flapping", time.Hour, []int{0, 1}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			b := bustest.New(t, bustest.EmbeddedURL(t))
			m := platformtest.NewMemory("bot", false)
			m.FailNext(errors.New("connection refused"))
			var mu sync.Mutex
			var asked []int
			h := startRunner(t, m, b, platform.Options{StableAfter: tt.stableAfter, Backoff: func(n int) time.Duration {
				mu.Lock()
				asked = append(asked, n)
				mu.Unlock()
				return time.Millisecond
			}})
			platformtest.WaitFor(t, "connected", func() bool { return state(h.r) == platform.StateConnected })
			if err := h.r.Ready(context.Background()); err != nil {
				t.Fatalf("Ready = %v after reconnect", err)
			}
			time.Sleep(5 * time.Millisecond)
			m.Fake().Drop(t)
			platformtest.WaitFor(t, "second connection", func() bool { return m.Fake().Connections() == 2 && state(h.r) == platform.StateConnected })
			mu.Lock()
			defer mu.Unlock()
			if fmt.Sprint(asked) != fmt.Sprint(tt.want) {
				t.Fatalf("backoff attempts %v, want %v", asked, tt.want)
			}
		})
	}
}

// secondBus opens another connection on b's topology, as another replica.
func secondBus(t *testing.T, b *bus.Bus) (*bus.Bus, *nats.Conn) {
	t.Helper()
	nc, err := nats.Connect(bustest.EmbeddedURL(t), nats.NoReconnect())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	b2, err := bus.New(nc, b.Topology(), slog.Default())
	if err != nil {
		t.Fatal(err)
	}
	return b2, nc
}

func TestLeaseFailover(t *testing.T) {
	t.Parallel()
	base := bustest.New(t, bustest.EmbeddedURL(t))
	ttl := 2 * time.Second
	busA, ncA := secondBus(t, base)
	busB, _ := secondBus(t, base)
	mA := platformtest.NewMemory("bot", true)
	mB := platformtest.NewMemory("bot", true)
	opts := platform.Options{Backoff: platform.Schedule(10 * time.Millisecond), LeaseTTL: ttl}
	optsA, optsB := opts, opts
	optsA.Instance, optsB.Instance = "replica-a", "replica-b"
	a := startRunner(t, mA, busA, optsA)
	platformtest.WaitFor(t, "A active", func() bool { return state(a.r) == platform.StateConnected })
	bb := startRunner(t, mB, busB, optsB)
	platformtest.WaitFor(t, "B standby", func() bool { return state(bb.r) == platform.StateStandby })
	if err := bb.r.Ready(context.Background()); err != nil {
		t.Fatalf("standby not ready: %v", err)
	}

	// Deliver through A, then crash A (its NATS connection dies with it).
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := mA.Push(ctx, "1", "chat", "before"); err != nil {
		t.Fatal(err)
	}
	crashed := time.Now()
	ncA.Close()
	platformtest.WaitFor(t, "B takes over", func() bool { return state(bb.r) == platform.StateConnected })
	if took := time.Since(crashed); took > 15*time.Second {
		t.Fatalf("standby took over after %v, want within 15s", took)
	}
	platformtest.WaitFor(t, "A gives up its connection", func() bool { return state(a.r) != platform.StateConnected })
	// A redelivery of what A already published is not published twice.
	if err := mB.Push(ctx, "1", "chat", "before"); err != nil {
		t.Fatal(err)
	}
	if err := mB.Push(ctx, "2", "chat", "after"); err != nil {
		t.Fatal(err)
	}
	if n := inboundEvents(t, ctx, base); n != 2 {
		t.Fatalf("inbound stream holds %d events, want 2 (no loss, no duplicate)", n)
	}
}

// A NATS restart empties the lease bucket (it is in memory): the holder
// creates its key again and keeps its connection, and a standby that
// finds the key gone first takes over cleanly instead (the holder lets
// go, as the key is another's).
func TestLeaseKeyThatVanishedIsTakenAgain(t *testing.T) {
	t.Parallel()
	base := bustest.New(t, bustest.EmbeddedURL(t))
	ttl := 900 * time.Millisecond
	m := platformtest.NewMemory("bot", true)
	a := startRunner(t, m, base, platform.Options{Backoff: platform.Schedule(10 * time.Millisecond), LeaseTTL: ttl, Instance: "replica-a"})
	platformtest.WaitFor(t, "A active", func() bool { return state(a.r) == platform.StateConnected })
	ctx := context.Background()
	kv, err := base.JetStream().KeyValue(ctx, base.Topology().Stream(platform.BucketLeases))
	if err != nil {
		t.Fatal(err)
	}
	keys, err := kv.Keys(ctx)
	if err != nil || len(keys) != 1 {
		t.Fatalf("lease keys %v (%v)", keys, err)
	}
	if err := kv.Purge(ctx, keys[0]); err != nil {
		t.Fatal(err)
	}
	platformtest.WaitFor(t, "the key held again", func() bool {
		e, err := kv.Get(ctx, keys[0])
		return err == nil && string(e.Value()) == "replica-a"
	})
	time.Sleep(2 * ttl) // renewals go on
	if state(a.r) != platform.StateConnected || m.Fake().Connections() != 1 {
		t.Fatalf("state %v after %d connections, want the first connection kept", state(a.r), m.Fake().Connections())
	}
	// Another replica's value: the lease is lost, the connection ends.
	if _, err := kv.Put(ctx, keys[0], []byte("replica-b")); err != nil {
		t.Fatal(err)
	}
	platformtest.WaitFor(t, "A lets go", func() bool { return state(a.r) != platform.StateConnected })
}

func TestLeaseGracefulHandoff(t *testing.T) {
	t.Parallel()
	base := bustest.New(t, bustest.EmbeddedURL(t))
	busB, _ := secondBus(t, base)
	opts := platform.Options{Backoff: platform.Schedule(10 * time.Millisecond), LeaseTTL: 30 * time.Second}
	a := startRunner(t, platformtest.NewMemory("bot", true), base, opts)
	platformtest.WaitFor(t, "A active", func() bool { return state(a.r) == platform.StateConnected })
	bb := startRunner(t, platformtest.NewMemory("bot", true), busB, opts)
	platformtest.WaitFor(t, "B standby", func() bool { return state(bb.r) == platform.StateStandby })
	a.stop()
	// The lease TTL is 30 s: only a released lease lets B in this soon.
	platformtest.WaitFor(t, "B takes over", func() bool { return state(bb.r) == platform.StateConnected })
}

// connectedRunner is a runner of an in-memory platform on its own bus,
// connected.
func connectedRunner(t *testing.T) runHandle {
	t.Helper()
	b := bustest.New(t, bustest.EmbeddedURL(t))
	h := startRunner(t, platformtest.NewMemory("bot", false), b, platform.Options{Backoff: platform.Schedule(10 * time.Millisecond)})
	platformtest.WaitFor(t, "connected", func() bool { return state(h.r) == platform.StateConnected })
	return h
}

func chatEvent(id string) *eventsv1.MessageReceived {
	return &eventsv1.MessageReceived{EventId: id, Source: &eventsv1.SessionSource{ChatId: "chat"}, Text: "hi"}
}

// TestDeliverReportsWhenADuplicateWasFirstSeen: a repeated event id is a
// duplicate that says when the first copy was published.
func TestDeliverReportsWhenADuplicateWasFirstSeen(t *testing.T) {
	t.Parallel()
	h := connectedRunner(t)
	ctx := context.Background()
	ev := func() *eventsv1.MessageReceived { return chatEvent("e-1") }
	before := time.Now()
	first, err := h.r.Deliver(ctx, ev())
	if err != nil || first.Duplicate || !first.FirstSeen.IsZero() {
		t.Fatalf("first delivery: %+v %v", first, err)
	}
	after := time.Now()
	again, err := h.r.Deliver(ctx, ev())
	if err != nil || !again.Duplicate {
		t.Fatalf("second delivery: %+v %v, want a duplicate", again, err)
	}
	// The server's clock stamps the record; allow a second of skew.
	if again.FirstSeen.Before(before.Add(-time.Second)) || again.FirstSeen.After(after.Add(time.Second)) {
		t.Fatalf("first seen %v, want between %v and %v", again.FirstSeen, before, after)
	}
}

// TestDeliverFreshKeepsNoSeenRecord: a fresh event id is published without
// a seen record, so only the bus dedupe window knows it.
func TestDeliverFreshKeepsNoSeenRecord(t *testing.T) {
	t.Parallel()
	h := connectedRunner(t)
	ctx := context.Background()
	ev := func() *eventsv1.MessageReceived { return chatEvent("fresh-1") }
	first, err := h.r.DeliverFresh(ctx, ev())
	if err != nil || first.Duplicate || first.Seq == 0 {
		t.Fatalf("fresh delivery: %+v %v", first, err)
	}
	// Within the bus window the id is a duplicate, told by the bus, not
	// by a seen record (which would say when it was first seen).
	again, err := h.r.Deliver(ctx, ev())
	if err != nil || !again.Duplicate || !again.FirstSeen.IsZero() || again.Seq != first.Seq {
		t.Fatalf("repeated delivery: %+v %v, want the bus's duplicate of seq %d", again, err, first.Seq)
	}
}

// idempotentMemory is a platform that declares its sends safe to repeat.
// runRunner runs a runner of p until the test ends, once it is connected;
// ctx lives as long.
func runRunner(t *testing.T, p platform.Platform, b *bus.Bus) (*platform.Runner, context.Context) {
	t.Helper()
	r, err := platform.NewRunner(p, b, platform.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	platformtest.WaitFor(t, "the runner to start", func() bool { return state(r) == platform.StateConnected })
	return r, ctx
}

type idempotentMemory struct{ *platformtest.Memory }

func (idempotentMemory) IdempotentSends() bool { return true }

// TestReceiptsAnswerRepeatedKeysUnlessThePlatformIsIdempotent: a repeated
// send key gets the first receipt back and sends nothing, except on a
// platform whose sends are harmless to repeat, where no receipt is kept.
func TestReceiptsAnswerRepeatedKeysUnlessThePlatformIsIdempotent(t *testing.T) {
	t.Parallel()
	b := bustest.New(t, bustest.EmbeddedURL(t))
	for _, tt := range []struct {
		name      string
		p         func() (platform.Platform, *platformtest.Memory)
		wantSends int
		wantDup   bool
	}{
		{"receipts", func() (platform.Platform, *platformtest.Memory) {
			m := platformtest.NewMemory("bot-r", false)
			return m, m
		}, 1, true},
		{"idempotent platform", func() (platform.Platform, *platformtest.Memory) {
			m := platformtest.NewMemory("bot-i", false)
			return idempotentMemory{m}, m
		}, 2, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			p, m := tt.p()
			r, ctx := runRunner(t, p, b)
			req := &deliveryv1.SendRequested{IdempotencyKey: "t1:1:0", Op: deliveryv1.SendOp_SEND_OP_SEND,
				Target: &deliveryv1.Target{Platform: "memory", ChatId: "chat"}, Text: "once"}
			if first := r.Execute(ctx, req); !first.GetOk() || first.GetDuplicate() {
				t.Fatalf("first receipt %+v", first)
			}
			second := r.Execute(ctx, req)
			if !second.GetOk() || second.GetDuplicate() != tt.wantDup {
				t.Fatalf("second receipt %+v, want duplicate=%v", second, tt.wantDup)
			}
			if got := len(m.Fake().Sent(t, ctx, req.GetTarget())); got != tt.wantSends {
				t.Fatalf("sent %d times, want %d", got, tt.wantSends)
			}
		})
	}
}

// slowMemory's sends wait for release: a platform slower than the
// sender's patience.
type slowMemory struct {
	*platformtest.Memory
	release chan struct{}
	entered chan struct{}
	fail    *atomic.Bool // the next send fails
}

func (s slowMemory) Send(ctx context.Context, req *deliveryv1.SendRequested) (string, error) {
	select {
	case s.entered <- struct{}{}:
	default:
	}
	<-s.release
	if s.fail.CompareAndSwap(true, false) {
		return "", errors.New("platform hiccup")
	}
	return s.Memory.Send(ctx, req)
}

// TestSendInProgressIsNotSentTwice: a request repeated while the first
// with its key is still at the platform (the sender timed out and
// retried) sends nothing and is told to come back; afterwards it gets the
// first receipt. A send that failed frees its key at once.
func TestSendInProgressIsNotSentTwice(t *testing.T) {
	t.Parallel()
	b := bustest.New(t, bustest.EmbeddedURL(t))
	m := platformtest.NewMemory("bot-slow", false)
	slow := slowMemory{Memory: m, release: make(chan struct{}), entered: make(chan struct{}, 1), fail: &atomic.Bool{}}
	r, ctx := runRunner(t, slow, b)
	req := &deliveryv1.SendRequested{IdempotencyKey: "t2:1:0", Op: deliveryv1.SendOp_SEND_OP_SEND,
		Target: &deliveryv1.Target{Platform: "memory", ChatId: "chat"}, Text: "once"}

	firstDone := make(chan *deliveryv1.SendReceipt, 1)
	go func() { firstDone <- r.Execute(ctx, req) }()
	<-slow.entered
	again := r.Execute(ctx, req)
	if again.GetOk() || again.GetErrorClass() != deliveryv1.ErrorClass_ERROR_CLASS_RETRYABLE || again.GetRetryAfterMs() <= 0 {
		t.Fatalf("repeat while the first is at the platform: receipt %+v, want RETRYABLE with a retry delay", again)
	}
	close(slow.release)
	if first := <-firstDone; !first.GetOk() {
		t.Fatalf("first receipt %+v", first)
	}
	if later := r.Execute(ctx, req); !later.GetOk() || !later.GetDuplicate() {
		t.Fatalf("repeat after the first: receipt %+v, want its duplicate", later)
	}
	if got := len(m.Fake().Sent(t, ctx, req.GetTarget())); got != 1 {
		t.Fatalf("sent %d times, want once", got)
	}

	failing := &deliveryv1.SendRequested{IdempotencyKey: "t2:2:0", Op: deliveryv1.SendOp_SEND_OP_SEND,
		Target: &deliveryv1.Target{Platform: "memory", ChatId: "chat2"}, Text: "retried"}
	slow.fail.Store(true)
	if rec := r.Execute(ctx, failing); rec.GetOk() {
		t.Fatalf("failing send: receipt %+v", rec)
	}
	if rec := r.Execute(ctx, failing); !rec.GetOk() || rec.GetDuplicate() {
		t.Fatalf("retry after a failure: receipt %+v, want it sent", rec)
	}
}

// TestReservationOfAGoneReplicaIsTakenOver: a replica killed while its
// send was at the platform leaves the key reserved; another replica
// serving the delivery's retry waits while the first is alive and
// sending, and sends at once when it is gone, instead of waiting out the
// send timeout (the retry's answer went 30 s late after a Telegram
// gateway's kill -9 mid-send).
func TestReservationOfAGoneReplicaIsTakenOver(t *testing.T) {
	t.Parallel()
	url := bustest.EmbeddedURL(t)
	busB := bustest.New(t, url)
	busA := bustest.NewWith(t, url, busB.Topology())
	mA, mB := platformtest.NewMemory("bot-gone", false), platformtest.NewMemory("bot-gone", false)
	slow := slowMemory{Memory: mA, release: make(chan struct{}), entered: make(chan struct{}, 1), fail: &atomic.Bool{}}
	a := startRunner(t, slow, busA, platform.Options{Instance: "replica-a"}).r
	b, ctx := runRunner(t, mB, busB)
	platformtest.WaitFor(t, "replica A to start", func() bool { return state(a) == platform.StateConnected })
	t.Cleanup(func() { close(slow.release) }) // before the runners stop
	req := &deliveryv1.SendRequested{IdempotencyKey: "t3:1:0", Op: deliveryv1.SendOp_SEND_OP_SEND,
		Target: &deliveryv1.Target{Platform: "memory", ChatId: "chat"}, Text: "once"}

	go a.Execute(ctx, req)
	<-slow.entered
	if rec := b.Execute(ctx, req); rec.GetOk() || rec.GetErrorClass() != deliveryv1.ErrorClass_ERROR_CLASS_RETRYABLE || rec.GetRetryAfterMs() <= 0 {
		t.Fatalf("retry while replica A is sending: receipt %+v, want RETRYABLE with a retry delay", rec)
	}

	// A's process dies: its connection closes, its send never ends; the
	// server drops its subscriptions as it sees the close.
	busA.Conn().Close()
	platformtest.WaitFor(t, "the server to drop replica A", func() bool {
		_, err := busB.Conn().Request(busB.Topology().SendingSubject("memory", "replica-a"), nil, time.Second)
		return errors.Is(err, nats.ErrNoResponders)
	})
	rec := b.Execute(ctx, req)
	if !rec.GetOk() || rec.GetDuplicate() {
		t.Fatalf("retry after replica A died: receipt %+v, want it sent now", rec)
	}
	if got := len(mB.Fake().Sent(t, ctx, req.GetTarget())); got != 1 {
		t.Fatalf("replica B sent %d times, want once", got)
	}
	if again := b.Execute(ctx, req); !again.GetOk() || !again.GetDuplicate() {
		t.Fatalf("repeat after the takeover: receipt %+v, want its duplicate", again)
	}
}

// TestReservationOfAReconnectingReplicaIsNotTakenOver: a replica whose
// NATS connection dropped while its send was at the platform (its NATS
// server restarted, its cluster node left) has no subscription anywhere
// until it has reconnected, and NATS answers no responders for it as for
// a killed one, though its send goes on. A retry another replica serves
// meanwhile waits for it instead of posting the message a second time.
func TestReservationOfAReconnectingReplicaIsNotTakenOver(t *testing.T) {
	t.Parallel()
	url := bustest.EmbeddedURL(t)
	busB := bustest.New(t, url)
	relay := bustest.NewCuttable(t, url)
	busA := bustest.NewWith(t, relay.URL(), busB.Topology(), nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond))
	mA, mB := platformtest.NewMemory("bot-reconnect", false), platformtest.NewMemory("bot-reconnect", false)
	slow := slowMemory{Memory: mA, release: make(chan struct{}), entered: make(chan struct{}, 1), fail: &atomic.Bool{}}
	a := startRunner(t, slow, busA, platform.Options{Instance: "replica-a"}).r
	b, ctx := runRunner(t, mB, busB)
	platformtest.WaitFor(t, "replica A to start", func() bool { return state(a) == platform.StateConnected })
	t.Cleanup(func() { close(slow.release) }) // before the runners stop
	req := &deliveryv1.SendRequested{IdempotencyKey: "t4:1:0", Op: deliveryv1.SendOp_SEND_OP_SEND,
		Target: &deliveryv1.Target{Platform: "memory", ChatId: "chat"}, Text: "once"}

	go a.Execute(ctx, req)
	<-slow.entered
	// A's connection drops mid-send; it reconnects half a second later.
	relay.Cut()
	platformtest.WaitFor(t, "the server to drop replica A", func() bool {
		_, err := busB.Conn().Request(busB.Topology().SendingSubject("memory", "replica-a"), nil, time.Second)
		return errors.Is(err, nats.ErrNoResponders)
	})
	restored := make(chan struct{})
	time.AfterFunc(500*time.Millisecond, func() { relay.Restore(); close(restored) })
	rec := b.Execute(ctx, req)
	<-restored
	if rec.GetOk() || rec.GetErrorClass() != deliveryv1.ErrorClass_ERROR_CLASS_RETRYABLE || rec.GetRetryAfterMs() <= 0 {
		t.Fatalf("retry while replica A reconnects mid-send: receipt %+v, want RETRYABLE with a retry delay", rec)
	}
	if got := len(mB.Fake().Sent(t, ctx, req.GetTarget())); got != 0 {
		t.Fatalf("replica B sent %d times while replica A was still sending, want none", got)
	}
}

// failReceiptStores makes r's stores in the receipts bucket (receipts
// and part records) fail, as NATS unavailable at that moment would,
// until the flag it returns is cleared.
func failReceiptStores(r *platform.Runner) *atomic.Bool {
	unavailable := &atomic.Bool{}
	unavailable.Store(true)
	platform.SetReceiptStoreHook(r, func() error {
		if unavailable.Load() {
			return errors.New("nats: connection closed")
		}
		return nil
	})
	return unavailable
}

// storedReceipt is nil when kv holds a successful send's receipt as key's
// entry, else what it holds instead.
func storedReceipt(ctx context.Context, kv jetstream.KeyValue, key string) error {
	e, err := kv.Get(ctx, key)
	if err != nil {
		return fmt.Errorf("receipt %s: %w", key, err)
	}
	stored := &deliveryv1.SendReceipt{}
	if err := proto.Unmarshal(e.Value(), stored); err != nil || !stored.GetOk() {
		return fmt.Errorf("receipt %s holds %q, want a successful send's receipt", key, e.Value())
	}
	return nil
}

// TestAReceiptNotStoredIsHeldByItsSender: a replica whose send went out
// but whose receipt could not be stored (NATS unavailable at that moment)
// left its reservation behind and answered another replica's question
// that it was not sending the key: delivery's retry reaching that replica
// posted the message a second time. The sender holds the receipt instead:
// a retry reaching either replica gets it, and the store is retried until
// it succeeds.
func TestAReceiptNotStoredIsHeldByItsSender(t *testing.T) {
	t.Parallel()
	url := bustest.EmbeddedURL(t)
	busA := bustest.New(t, url)
	busB := bustest.NewWith(t, url, busA.Topology())
	mA, mB := platformtest.NewMemory("bot-held", false), platformtest.NewMemory("bot-held", false)
	a := startRunner(t, mA, busA, platform.Options{Instance: "replica-a"}).r
	b := startRunner(t, mB, busB, platform.Options{Instance: "replica-b"}).r
	platformtest.WaitFor(t, "both replicas to start", func() bool {
		return state(a) == platform.StateConnected && state(b) == platform.StateConnected
	})
	unavailable := failReceiptStores(a)
	ctx := context.Background()
	req := &deliveryv1.SendRequested{IdempotencyKey: "t6:1:0", Op: deliveryv1.SendOp_SEND_OP_SEND,
		Target: &deliveryv1.Target{Platform: "memory", ChatId: "chat"}, Text: "once"}
	first := a.Execute(ctx, req)
	if !first.GetOk() {
		t.Fatalf("first receipt %+v", first)
	}

	for _, tt := range []struct {
		name string
		r    *platform.Runner
	}{{"another replica", b}, {"the sender", a}} {
		rec := tt.r.Execute(ctx, req)
		if !rec.GetOk() || !rec.GetDuplicate() || rec.GetPlatformMessageId() != first.GetPlatformMessageId() {
			t.Fatalf("retry reaching %s: receipt %+v, want the first's duplicate", tt.name, rec)
		}
	}
	if got := len(mA.Fake().Sent(t, ctx, req.GetTarget())) + len(mB.Fake().Sent(t, ctx, req.GetTarget())); got != 1 {
		t.Fatalf("posted %d times, want once", got)
	}

	// A replica of the release before takes any answer but "0" for a
	// send under way, and waits it out instead of posting it again.
	kv, err := busA.JetStream().KeyValue(ctx, busA.Topology().Stream(platform.BucketReceipts))
	if err != nil {
		t.Fatal(err)
	}
	keys, err := kv.Keys(ctx)
	if err != nil || len(keys) != 1 {
		t.Fatalf("receipt keys %v (%v), want the one reserved", keys, err)
	}
	answer, err := busB.Conn().Request(busB.Topology().SendingSubject("memory", "replica-a"), []byte(keys[0]), time.Second)
	if err != nil || bytes.Equal(answer.Data, []byte("0")) {
		t.Fatalf("replica A's answer about the key %v (%v): the release before would post it again", answer, err)
	}

	unavailable.Store(false)
	platformtest.WaitFor(t, "the receipt to be stored", func() bool {
		keys, err := kv.Keys(ctx)
		if err != nil || len(keys) != 1 {
			return false
		}
		return storedReceipt(ctx, kv, keys[0]) == nil
	})
}

// TestAHeldReceiptIsStoredAsItsRunnerStops: a receipt held for want of
// NATS gets one more store as its runner stops, before Run returns; its
// background store outlived Run by up to the reservation's lifetime.
func TestAHeldReceiptIsStoredAsItsRunnerStops(t *testing.T) {
	t.Parallel()
	b := bustest.New(t, bustest.EmbeddedURL(t))
	m := platformtest.NewMemory("bot-held-stop", false)
	h := startRunner(t, m, b, platform.Options{Instance: "replica-a"})
	platformtest.WaitFor(t, "the replica to start", func() bool { return state(h.r) == platform.StateConnected })
	unavailable := failReceiptStores(h.r)
	ctx := context.Background()
	req := &deliveryv1.SendRequested{IdempotencyKey: "t7:1:0", Op: deliveryv1.SendOp_SEND_OP_SEND,
		Target: &deliveryv1.Target{Platform: "memory", ChatId: "chat"}, Text: "once"}
	if rec := h.r.Execute(ctx, req); !rec.GetOk() {
		t.Fatalf("receipt %+v", rec)
	}
	unavailable.Store(false)
	h.stop() // at once: before the background store's next try

	kv, err := b.JetStream().KeyValue(ctx, b.Topology().Stream(platform.BucketReceipts))
	if err != nil {
		t.Fatal(err)
	}
	keys, err := kv.Keys(ctx)
	if err != nil || len(keys) != 1 {
		t.Fatalf("receipt keys %v (%v), want the one reserved", keys, err)
	}
	if err := storedReceipt(ctx, kv, keys[0]); err != nil {
		t.Fatalf("after Run returned: %v", err)
	}
}

// TestARunThatCannotStartTakesNoSend: a single-consumer runner whose
// lease bucket could not be created returned from Run at once, after it
// had subscribed sends: a send taken meanwhile went on at the platform
// after Run returned, unwaited, and a part record or receipt it held was
// never flushed. The bucket is created before any send is taken now.
func TestARunThatCannotStartTakesNoSend(t *testing.T) {
	t.Parallel()
	b := bustest.New(t, bustest.EmbeddedURL(t))
	ctx := context.Background()
	// A leases bucket on file: Run's, in memory, cannot be made over it.
	if _, err := b.JetStream().CreateKeyValue(ctx, jetstream.KeyValueConfig{
		Bucket: b.Topology().Stream(platform.BucketLeases), Storage: jetstream.FileStorage}); err != nil {
		t.Fatal(err)
	}
	m := platformtest.NewMemory("bot-no-lease", true)
	slow := slowMemory{Memory: m, release: make(chan struct{}), entered: make(chan struct{}, 1), fail: &atomic.Bool{}}
	t.Cleanup(func() { close(slow.release) })
	data, err := proto.Marshal(&deliveryv1.SendRequested{IdempotencyKey: "t10:1:0", Op: deliveryv1.SendOp_SEND_OP_SEND,
		Target: &deliveryv1.Target{Platform: "memory", ChatId: "chat"}, Text: "once"})
	if err != nil {
		t.Fatal(err)
	}
	// Send requests all the while, so that any moment the runner
	// listens for them one comes.
	stop := make(chan struct{})
	var senders sync.WaitGroup
	for range 4 {
		senders.Add(1)
		go func() {
			defer senders.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				_, _ = b.Conn().Request(b.Topology().SendSubject("memory"), data, 20*time.Millisecond)
			}
		}()
	}
	defer senders.Wait()
	defer close(stop)
	for range 20 {
		r, err := platform.NewRunner(slow, b, platform.Options{})
		if err != nil {
			t.Fatal(err)
		}
		if err := r.Run(ctx); err == nil {
			t.Fatal("Run with a leases bucket it cannot make: nil error")
		}
	}
	time.Sleep(50 * time.Millisecond) // a send taken reaches the platform
	select {
	case <-slow.entered:
		t.Fatal("a send taken by a Run that failed to start went on at the platform after Run returned")
	default:
	}
}

// TestAReceiptHeldAgainAsTheFirstIsLetGoStaysHeld: a receipt held past
// its reservation's lifetime is let go while its last store is under way
// (up to half a second while NATS is unavailable). A send of the key
// again meanwhile (its reservation taken over, as expired) whose receipt
// could not be stored either was held, and dropped as the first's store
// ended: a retry reaching another replica was answered "not sending" and
// posted the message once more.
func TestAReceiptHeldAgainAsTheFirstIsLetGoStaysHeld(t *testing.T) {
	t.Parallel()
	b := bustest.New(t, bustest.EmbeddedURL(t))
	m := platformtest.NewMemory("bot-held-again", false)
	h := startRunner(t, m, b, platform.Options{Instance: "replica-a", SendTimeout: time.Second})
	platformtest.WaitFor(t, "the replica to start", func() bool { return state(h.r) == platform.StateConnected })
	// Each store fails, after storeTakes: NATS unavailable, its publish
	// waiting for an answer.
	var storeTakes atomic.Int64
	storeTakes.Store(int64(time.Second))
	platform.SetReceiptStoreHook(h.r, func() error {
		time.Sleep(time.Duration(storeTakes.Load()))
		return errors.New("nats: timeout")
	})
	ctx := context.Background()
	req := &deliveryv1.SendRequested{IdempotencyKey: "t9:1:0", Op: deliveryv1.SendOp_SEND_OP_SEND,
		Target: &deliveryv1.Target{Platform: "memory", ChatId: "chat"}, Text: "once"}
	if rec := h.r.Execute(ctx, req); !rec.GetOk() {
		t.Fatalf("receipt %+v", rec)
	}
	kv, err := b.JetStream().KeyValue(ctx, b.Topology().Stream(platform.BucketReceipts))
	if err != nil {
		t.Fatal(err)
	}
	keys, err := kv.Keys(ctx)
	if err != nil || len(keys) != 1 {
		t.Fatalf("receipt keys %v (%v), want the one reserved", keys, err)
	}
	answer := func() []byte {
		m, err := b.Conn().Request(b.Topology().SendingSubject("memory", "replica-a"), []byte(keys[0]), time.Second)
		if err != nil {
			t.Fatalf("ask replica A: %v", err)
		}
		return m.Data
	}
	platformtest.WaitFor(t, "the held receipt's lifetime to end", func() bool { return bytes.Equal(answer(), []byte("0")) })

	// The first's last store is under way now; the key is sent again and
	// its receipt not stored either.
	storeTakes.Store(0)
	if rec := h.r.Execute(ctx, req); !rec.GetOk() {
		t.Fatalf("sent again: receipt %+v", rec)
	}
	time.Sleep(1500 * time.Millisecond) // the first's last store ends meanwhile
	if got := answer(); !bytes.HasPrefix(got, []byte("r")) {
		t.Fatalf("replica A's answer about the key sent again %q, want its receipt held", got)
	}
}

// twoParts posts each send as two messages, its text and then a second
// part, as a platform whose long reply takes two calls: each part sent is
// recorded (platform.RecordPart), and one an earlier attempt recorded is
// skipped (platform.SentPart). The second part fails while failSecond is
// set.
type twoParts struct {
	*platformtest.Memory
	failSecond *atomic.Bool
}

func (p twoParts) Send(ctx context.Context, req *deliveryv1.SendRequested) (string, error) {
	first, sent := platform.SentPart(ctx, 0)
	if !sent {
		id, err := p.Memory.Send(ctx, req)
		if err != nil {
			return "", err
		}
		platform.RecordPart(ctx, 0, id)
		first = id
	}
	if p.failSecond.Load() {
		return "", errors.New("platform hiccup")
	}
	second := proto.CloneOf(req)
	second.Text += " (part two)"
	if _, err := p.Memory.Send(ctx, second); err != nil {
		return "", err
	}
	return first, nil
}

// TestAPartRecordNotStoredIsHeldByItsSender: a send made in two platform
// calls whose first part's record could not be stored (NATS unavailable
// at that moment), and whose second part failed, left nothing for the
// retry to skip: the retry posted the first part a second time. The
// sender holds the record as it holds a receipt, and a retry reaching it,
// or another replica, skips the part.
func TestAPartRecordNotStoredIsHeldByItsSender(t *testing.T) {
	t.Parallel()
	url := bustest.EmbeddedURL(t)
	busA := bustest.New(t, url)
	busB := bustest.NewWith(t, url, busA.Topology())
	mA, mB := platformtest.NewMemory("bot-parts", false), platformtest.NewMemory("bot-parts", false)
	failSecond := &atomic.Bool{}
	a := startRunner(t, twoParts{mA, failSecond}, busA, platform.Options{Instance: "replica-a"}).r
	b := startRunner(t, twoParts{mB, &atomic.Bool{}}, busB, platform.Options{Instance: "replica-b"}).r
	platformtest.WaitFor(t, "both replicas to start", func() bool {
		return state(a) == platform.StateConnected && state(b) == platform.StateConnected
	})
	unavailable := failReceiptStores(a)
	ctx := context.Background()
	for i, tt := range []struct {
		name string
		r    *platform.Runner
	}{{"the sender", a}, {"another replica", b}} {
		t.Run(tt.name, func(t *testing.T) {
			target := &deliveryv1.Target{Platform: "memory", ChatId: fmt.Sprintf("chat-%d", i)}
			req := &deliveryv1.SendRequested{IdempotencyKey: fmt.Sprintf("t8:%d:0", i), Op: deliveryv1.SendOp_SEND_OP_SEND,
				Target: target, Text: "long"}
			failSecond.Store(true)
			if rec := a.Execute(ctx, req); rec.GetOk() {
				t.Fatalf("first attempt: receipt %+v, want its second part failed", rec)
			}
			failSecond.Store(false)
			rec := tt.r.Execute(ctx, req)
			if !rec.GetOk() || rec.GetDuplicate() {
				t.Fatalf("retry reaching %s: receipt %+v, want it sent", tt.name, rec)
			}
			sent := append(mA.Fake().Sent(t, ctx, target), mB.Fake().Sent(t, ctx, target)...)
			if want := []string{"long", "long (part two)"}; !slices.Equal(sent, want) {
				t.Fatalf("posted %q, want %q: each part once", sent, want)
			}
		})
	}

	// NATS back, the records held are stored in the background.
	unavailable.Store(false)
	kv, err := busA.JetStream().KeyValue(ctx, busA.Topology().Stream(platform.BucketReceipts))
	if err != nil {
		t.Fatal(err)
	}
	platformtest.WaitFor(t, "the held part records to be stored", func() bool {
		keys, err := kv.Keys(ctx)
		if err != nil {
			return false
		}
		stored := 0
		for _, k := range keys {
			if strings.HasSuffix(k, ".part0") {
				stored++
			}
		}
		return stored == 2
	})
}

// TestAReservationKeptForHeldPartsIsFreedOnceTheyAreStored: a failed
// send whose part records are held keeps its reservation, so that a
// retry reaching another replica asks its sender for them. Once the
// records are stored the reservation stayed on: a retry after its sender
// stopped (a rolling restart) found no one to ask, and waited the "gone"
// grace out where a failed send otherwise frees its key at once.
func TestAReservationKeptForHeldPartsIsFreedOnceTheyAreStored(t *testing.T) {
	t.Parallel()
	url := bustest.EmbeddedURL(t)
	busA := bustest.New(t, url)
	busB := bustest.NewWith(t, url, busA.Topology())
	mA, mB := platformtest.NewMemory("bot-kept", false), platformtest.NewMemory("bot-kept", false)
	failSecond := &atomic.Bool{}
	failSecond.Store(true)
	hA := startRunner(t, twoParts{mA, failSecond}, busA, platform.Options{Instance: "replica-a"})
	b := startRunner(t, twoParts{mB, &atomic.Bool{}}, busB, platform.Options{Instance: "replica-b"}).r
	platformtest.WaitFor(t, "both replicas to start", func() bool {
		return state(hA.r) == platform.StateConnected && state(b) == platform.StateConnected
	})
	unavailable := failReceiptStores(hA.r)
	ctx := context.Background()
	target := &deliveryv1.Target{Platform: "memory", ChatId: "chat"}
	req := &deliveryv1.SendRequested{IdempotencyKey: "t12:1:0", Op: deliveryv1.SendOp_SEND_OP_SEND, Target: target, Text: "long"}
	if rec := hA.r.Execute(ctx, req); rec.GetOk() {
		t.Fatalf("first attempt: receipt %+v, want its second part failed", rec)
	}
	kv, err := busA.JetStream().KeyValue(ctx, busA.Topology().Stream(platform.BucketReceipts))
	if err != nil {
		t.Fatal(err)
	}
	key := platform.ReceiptKey(hA.r, req.GetIdempotencyKey())
	if _, err := kv.Get(ctx, key); err != nil {
		t.Fatalf("reservation after the failed send with its part held: %v, want it kept", err)
	}

	unavailable.Store(false)
	platformtest.WaitFor(t, "the held part record to be stored", func() bool {
		_, err := kv.Get(ctx, key+".part0")
		return err == nil
	})
	platformtest.WaitFor(t, "the reservation to be freed", func() bool {
		_, err := kv.Get(ctx, key)
		return errors.Is(err, jetstream.ErrKeyNotFound)
	})
	hA.stop()
	start := time.Now()
	rec := b.Execute(ctx, req)
	if took := time.Since(start); took >= bus.GoneGrace {
		t.Fatalf("retry after the sender stopped took %v, want it sent without waiting for the sender", took)
	}
	sent := append(mA.Fake().Sent(t, ctx, target), mB.Fake().Sent(t, ctx, target)...)
	if want := []string{"long", "long (part two)"}; !rec.GetOk() || !slices.Equal(sent, want) {
		t.Fatalf("retry: receipt %+v, posted %q, want it sent, each part once: %q", rec, sent, want)
	}
}

// partsFailingEarly is twoParts whose send fails before it looks at
// any part while early is set: an attempt that ends before its first
// platform call (an attachment's download, the chat's typing call).
type partsFailingEarly struct {
	twoParts
	early *atomic.Bool
}

func (p partsFailingEarly) Send(ctx context.Context, req *deliveryv1.SendRequested) (string, error) {
	if p.early.Load() {
		return "", errors.New("attachment download failed")
	}
	return p.twoParts.Send(ctx, req)
}

// TestAHeldPartOutlivesNoReservationKeptForIt: a retry of a send on its
// sender that failed before it reached the part an earlier attempt sent,
// whose record is held, kept its own reservation for that record, but
// the record stayed held only as long as the earlier attempt's
// reservation. Once that was over, a retry reaching another replica
// still found the sender's reservation, asked, was told "not sending",
// and posted the part a second time. The record is held as long as the
// reservation kept for it.
func TestAHeldPartOutlivesNoReservationKeptForIt(t *testing.T) {
	t.Parallel()
	const sendTimeout = 3 * time.Second // a reservation lasts 4 s
	url := bustest.EmbeddedURL(t)
	busA := bustest.New(t, url)
	busB := bustest.NewWith(t, url, busA.Topology())
	mA, mB := platformtest.NewMemory("bot-kept-again", false), platformtest.NewMemory("bot-kept-again", false)
	failSecond, early := &atomic.Bool{}, &atomic.Bool{}
	failSecond.Store(true)
	a := startRunner(t, partsFailingEarly{twoParts{mA, failSecond}, early}, busA,
		platform.Options{Instance: "replica-a", SendTimeout: sendTimeout}).r
	b := startRunner(t, twoParts{mB, &atomic.Bool{}}, busB, platform.Options{Instance: "replica-b", SendTimeout: sendTimeout}).r
	platformtest.WaitFor(t, "both replicas to start", func() bool {
		return state(a) == platform.StateConnected && state(b) == platform.StateConnected
	})
	failReceiptStores(a)
	ctx := context.Background()
	target := &deliveryv1.Target{Platform: "memory", ChatId: "chat"}
	req := &deliveryv1.SendRequested{IdempotencyKey: "t13:1:0", Op: deliveryv1.SendOp_SEND_OP_SEND, Target: target, Text: "long"}
	if rec := a.Execute(ctx, req); rec.GetOk() {
		t.Fatalf("first attempt: receipt %+v, want its second part failed", rec)
	}
	firstEnded := time.Now()

	// The retry reaches the sender and fails before its first part.
	time.Sleep(sendTimeout / 2)
	early.Store(true)
	if rec := a.Execute(ctx, req); rec.GetOk() {
		t.Fatalf("second attempt: receipt %+v, want it failed", rec)
	}

	// The first attempt's reservation is over, the second's is not: the
	// next retry reaches another replica, which asks the sender.
	time.Sleep(time.Until(firstEnded.Add(sendTimeout + time.Second + 300*time.Millisecond)))
	rec := b.Execute(ctx, req)
	sent := append(mA.Fake().Sent(t, ctx, target), mB.Fake().Sent(t, ctx, target)...)
	if want := []string{"long", "long (part two)"}; !rec.GetOk() || !slices.Equal(sent, want) {
		t.Fatalf("retry reaching another replica: receipt %+v, posted %q, want it sent, each part once: %q", rec, sent, want)
	}
}

// TestAnotherReplicasAnswerAboutItsReservationIsReadWithCare: the answer
// of the replica a reservation names decides whether a retry reaching
// another replica sends now, and which parts it skips. Any answer it
// cannot read for certain (a replica of a later release, a confused one)
// has the retry wait the reservation out rather than post parts again;
// an answer listing more parts than a replica can hold (a confused
// replica's, up to NATS's largest payload) had the retry store each of
// them, one call at a time, before its send.
func TestAnotherReplicasAnswerAboutItsReservationIsReadWithCare(t *testing.T) {
	t.Parallel()
	b := bustest.New(t, bustest.EmbeddedURL(t))
	m := platformtest.NewMemory("bot-answers", false)
	r := startRunner(t, twoParts{m, &atomic.Bool{}}, b, platform.Options{Instance: "replica-b"}).r
	platformtest.WaitFor(t, "the replica to start", func() bool { return state(r) == platform.StateConnected })
	ctx := context.Background()
	kv, err := b.JetStream().KeyValue(ctx, b.Topology().Stream(platform.BucketReceipts))
	if err != nil {
		t.Fatal(err)
	}
	// Replica X holds the reservations and answers what the row says.
	var answer atomic.Pointer[[]byte]
	sub, err := b.Conn().Subscribe(b.Topology().SendingSubject("memory", "replica-x"), func(m *nats.Msg) {
		_ = m.Respond(*answer.Load())
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	tooMany := map[int]string{}
	for i := range platform.MaxHeldReceipts + 1 {
		tooMany[i] = "m-x"
	}
	tooManyJSON, err := json.Marshal(tooMany)
	if err != nil {
		t.Fatal(err)
	}
	for i, tt := range []struct {
		name   string
		answer []byte
		posted []string // nil: the retry waits, posting nothing
	}{
		{name: "not sending (any release)", answer: []byte("0"), posted: []string{"long", "long (part two)"}},
		{name: "still sending", answer: []byte("1")},
		{name: "a receipt that does not decode", answer: []byte("r\xff")},
		{name: "parts sent", answer: []byte(`p{"0":"m-x"}`), posted: []string{"long (part two)"}},
		{name: "parts that do not decode", answer: []byte(`p{"0":`)},
		{name: "parts not numbered", answer: []byte(`p{"first":"m-x"}`)},
		{name: "more parts than a replica holds", answer: append([]byte("p"), tooManyJSON...)},
		{name: "an answer of a later release", answer: []byte("q")},
	} {
		t.Run(tt.name, func(t *testing.T) {
			answer.Store(&tt.answer)
			target := &deliveryv1.Target{Platform: "memory", ChatId: fmt.Sprintf("chat-%d", i)}
			req := &deliveryv1.SendRequested{IdempotencyKey: fmt.Sprintf("t11:%d:0", i), Op: deliveryv1.SendOp_SEND_OP_SEND,
				Target: target, Text: "long"}
			key := platform.ReceiptKey(r, req.GetIdempotencyKey())
			reservation := nats.NewMsg("$KV." + b.Topology().Stream(platform.BucketReceipts) + "." + key)
			reservation.Data = []byte("\x00in-progress")
			reservation.Header.Set("Switchboard-Reserved-By", "replica-x")
			if _, err := b.JetStream().PublishMsg(ctx, reservation); err != nil {
				t.Fatal(err)
			}
			rec := r.Execute(ctx, req)
			posted := m.Fake().Sent(t, ctx, target)
			if tt.posted == nil {
				if rec.GetOk() || rec.GetErrorClass() != deliveryv1.ErrorClass_ERROR_CLASS_RETRYABLE || rec.GetRetryAfterMs() <= 0 || len(posted) != 0 {
					t.Fatalf("receipt %+v, posted %q: want RETRYABLE with a retry delay, nothing posted", rec, posted)
				}
				if keys, _ := kv.ListKeys(ctx); keys != nil {
					for k := range keys.Keys() {
						if strings.HasPrefix(k, key+".part") {
							t.Fatalf("part record %s stored: want none", k)
						}
					}
				}
				return
			}
			if !rec.GetOk() || !slices.Equal(posted, tt.posted) {
				t.Fatalf("receipt %+v, posted %q: want it sent, posting %q", rec, posted, tt.posted)
			}
		})
	}
}

// TestReservationIsInProgressToThePreviousRelease: in a rolling upgrade
// the replicas of the release before reservations named their replica
// serve retries beside this release's. They take a reservation only as
// the exact in-progress value, and send past any other entry that is no
// receipt: a retry reaching one while a replica of this release was
// still sending posted the message twice.
func TestReservationIsInProgressToThePreviousRelease(t *testing.T) {
	t.Parallel()
	b := bustest.New(t, bustest.EmbeddedURL(t))
	m := platformtest.NewMemory("bot-upgrade", false)
	slow := slowMemory{Memory: m, release: make(chan struct{}), entered: make(chan struct{}, 1), fail: &atomic.Bool{}}
	r, ctx := runRunner(t, slow, b)
	t.Cleanup(func() { close(slow.release) }) // before the runner stops
	req := &deliveryv1.SendRequested{IdempotencyKey: "t5:1:0", Op: deliveryv1.SendOp_SEND_OP_SEND,
		Target: &deliveryv1.Target{Platform: "memory", ChatId: "chat"}, Text: "once"}

	go r.Execute(ctx, req)
	<-slow.entered
	kv, err := b.JetStream().KeyValue(ctx, b.Topology().Stream(platform.BucketReceipts))
	if err != nil {
		t.Fatal(err)
	}
	keys, err := kv.Keys(ctx)
	if err != nil || len(keys) != 1 {
		t.Fatalf("receipt keys %v (%v), want the one reserved", keys, err)
	}
	e, err := kv.Get(ctx, keys[0])
	if err != nil {
		t.Fatal(err)
	}
	if previousReleaseSends(e.Value()) {
		t.Fatalf("reservation %q: the previous release would send the key again", e.Value())
	}
}

// previousReleaseSends is how a replica of the release before named
// reservations read a receipts entry it found: the exact in-progress
// value waits, a receipt answers the retry, and anything else is a
// broken entry the send goes past.
func previousReleaseSends(v []byte) bool {
	if bytes.Equal(v, []byte("\x00in-progress")) {
		return false
	}
	return proto.Unmarshal(v, &deliveryv1.SendReceipt{}) != nil
}

// leasePair is replica A (active) and B (standby) of one memory bot on
// an embedded server of the test's own, whose outage the test chooses:
// restart stops it for down, runs meanwhile, and starts it again on the
// same port and store. The replicas' connections reconnect for ever.
type leasePair struct {
	ttl        time.Duration
	busA, busB *bus.Bus
	mA, mB     *platformtest.Memory
	a, b       runHandle
	restart    func(down time.Duration, meanwhile func())
}

func startLeasePair(t *testing.T, ephemeral bool) *leasePair {
	t.Helper()
	srv := bustest.NewRestartable(t)
	topo := srv.Topology()
	p := &leasePair{ttl: 900 * time.Millisecond, busA: srv.Bus(t, topo), busB: srv.Bus(t, topo),
		mA: platformtest.NewMemory("bot", true), mB: platformtest.NewMemory("bot", true)}
	p.restart = func(down time.Duration, meanwhile func()) {
		srv.Stop()
		meanwhile()
		time.Sleep(down)
		srv.Start()
	}
	p.mA.SetEphemeral(ephemeral)
	p.mB.SetEphemeral(ephemeral)
	opts := platform.Options{Backoff: platform.Schedule(10 * time.Millisecond), LeaseTTL: p.ttl, SeenTTL: time.Minute}
	optsA, optsB := opts, opts
	optsA.Instance, optsB.Instance = "replica-a", "replica-b"
	p.a = startRunner(t, p.mA, p.busA, optsA)
	platformtest.WaitFor(t, "A active", func() bool { return state(p.a.r) == platform.StateConnected })
	p.b = startRunner(t, p.mB, p.busB, optsB)
	platformtest.WaitFor(t, "B standby", func() bool { return state(p.b.r) == platform.StateStandby })
	return p
}

// leaseHolder reads who holds the lease of b's only lease key.
func leaseHolder(ctx context.Context, b *bus.Bus) string {
	kv, err := b.JetStream().KeyValue(ctx, b.Topology().Stream(platform.BucketLeases))
	if err != nil {
		return ""
	}
	keys, err := kv.Keys(ctx)
	if err != nil || len(keys) != 1 {
		return ""
	}
	e, err := kv.Get(ctx, keys[0])
	if err != nil {
		return ""
	}
	return string(e.Value())
}

func inboundEvents(t *testing.T, ctx context.Context, b *bus.Bus) uint64 {
	t.Helper()
	st, err := b.JetStream().Stream(ctx, b.Topology().Stream(bus.StreamInbound))
	if err != nil {
		t.Fatal(err)
	}
	si, err := st.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return si.State.Msgs
}

// An ephemeral platform's holder (Discord replays nothing to a new
// session) stays connected through a NATS restart that outlasts the
// lease TTL, and the standby waits: the holder takes its key back first,
// in the bucket it creates again (a single server forgets a bucket kept in
// memory). A message the platform sends during the outage is published
// once NATS is back.
func TestEphemeralLeaseHolderKeepsItsConnectionThroughANATSOutage(t *testing.T) {
	t.Parallel()
	p := startLeasePair(t, true)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	pushed := make(chan error, 1)
	p.restart(3*p.ttl, func() { go func() { pushed <- p.mA.Push(ctx, "1", "chat", "sent while NATS is down") }() })
	if err := <-pushed; err != nil {
		t.Fatalf("the message sent during the outage: %v", err)
	}
	platformtest.WaitFor(t, "A holds its key again", func() bool { return leaseHolder(ctx, p.busB) == "replica-a" })
	time.Sleep(3 * p.ttl) // the standby's wait, and renewals after it
	if state(p.a.r) != platform.StateConnected || p.mA.Fake().Connections() != 1 {
		t.Fatalf("A: state %v after %d connections, want its first connection kept", state(p.a.r), p.mA.Fake().Connections())
	}
	if state(p.b.r) != platform.StateStandby || p.mB.Fake().Connections() != 0 {
		t.Fatalf("B: state %v after %d connections, want standby", state(p.b.r), p.mB.Fake().Connections())
	}
	if n := inboundEvents(t, ctx, p.busA); n != 1 {
		t.Fatalf("inbound stream holds %d events, want the one sent during the outage", n)
	}
}

// A platform that keeps what it could not deliver (Telegram) lets go of
// its connection after the lease TTL without NATS, so two replicas never
// poll at once; once NATS is back, in the bucket the lease creates again,
// one of them takes the lease and connects: the bot is not left deaf.
func TestLeaseIsTakenAgainAfterANATSRestart(t *testing.T) {
	t.Parallel()
	p := startLeasePair(t, false)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	p.restart(3*p.ttl, func() {
		platformtest.WaitFor(t, "A lets go without NATS", func() bool { return state(p.a.r) != platform.StateConnected })
	})
	platformtest.WaitFor(t, "a replica connected again", func() bool {
		return state(p.a.r) == platform.StateConnected || state(p.b.r) == platform.StateConnected
	})
	holder, m := "replica-a", p.mA
	if state(p.b.r) == platform.StateConnected {
		holder, m = "replica-b", p.mB
	}
	if got := leaseHolder(ctx, p.busA); got != holder {
		t.Fatalf("lease held by %q, want the connected %s", got, holder)
	}
	if err := m.Push(ctx, "2", "chat", "after the restart"); err != nil {
		t.Fatal(err)
	}
	if n := inboundEvents(t, ctx, p.busA); n != 1 {
		t.Fatalf("inbound stream holds %d events, want the one sent after the restart", n)
	}
}

// panickyMemory panics in its first connection and its first send, as a
// platform's code might on a payload it cannot take.
type panickyMemory struct {
	*platformtest.Memory
	connectPanicked, sendPanicked *atomic.Bool
}

func (p panickyMemory) Connect(ctx context.Context, c platform.Conn) error {
	if p.connectPanicked.CompareAndSwap(false, true) {
		var updates []string
		_ = updates[len(p.Account())] // index out of range: a real runtime panic
	}
	return p.Memory.Connect(ctx, c)
}

func (p panickyMemory) Send(ctx context.Context, req *deliveryv1.SendRequested) (string, error) {
	if p.sendPanicked.CompareAndSwap(false, true) {
		var parts []string
		_ = parts[len(req.GetText())] // index out of range
	}
	return p.Memory.Send(ctx, req)
}

// TestPanicsAreRecoveredPerItem: a panic in the platform's receive loop
// ends that connection, which is made again; a panic in a send fails that
// send as retryable (its key freed for the retry). Both are counted and
// the runner goes on.
func TestPanicsAreRecoveredPerItem(t *testing.T) {
	t.Parallel()
	b := bustest.New(t, bustest.EmbeddedURL(t))
	m := platformtest.NewMemory("bot-panic", false)
	p := panickyMemory{Memory: m, connectPanicked: &atomic.Bool{}, sendPanicked: &atomic.Bool{}}
	connBefore := telemetrytest.Value(t, "switchboard_panics_total", map[string]string{"component": "gateway_connection"})
	sendBefore := telemetrytest.Value(t, "switchboard_panics_total", map[string]string{"component": "gateway_send"})
	h := startRunner(t, p, b, platform.Options{Backoff: func(int) time.Duration { return time.Millisecond }})
	platformtest.WaitFor(t, "connected after the panic", func() bool { return state(h.r) == platform.StateConnected })
	if !p.connectPanicked.Load() {
		t.Fatal("the first connection did not panic")
	}
	if got := telemetrytest.Value(t, "switchboard_panics_total", map[string]string{"component": "gateway_connection"}) - connBefore; got != 1 {
		t.Errorf("connection panics counted %v, want 1", got)
	}

	ctx := context.Background()
	req := &deliveryv1.SendRequested{IdempotencyKey: "t-panic:1:0", Op: deliveryv1.SendOp_SEND_OP_SEND,
		Target: &deliveryv1.Target{Platform: "memory", ChatId: "chat"}, Text: "boom"}
	rec := h.r.Execute(ctx, req)
	if rec.GetOk() || rec.GetErrorClass() != deliveryv1.ErrorClass_ERROR_CLASS_RETRYABLE || !strings.Contains(rec.GetError(), "index out of range") {
		t.Fatalf("panicking send: receipt %+v, want RETRYABLE with the panic", rec)
	}
	if got := telemetrytest.Value(t, "switchboard_panics_total", map[string]string{"component": "gateway_send"}) - sendBefore; got != 1 {
		t.Errorf("send panics counted %v, want 1", got)
	}
	if rec := h.r.Execute(ctx, req); !rec.GetOk() || rec.GetDuplicate() {
		t.Fatalf("retry after the panic: receipt %+v, want it sent", rec)
	}
	if got := len(m.Fake().Sent(t, ctx, req.GetTarget())); got != 1 {
		t.Fatalf("sent %d times, want once", got)
	}
}

// slowTyping is a platform whose typing requests take delay, and count
// only once carried out; began gets one value as each starts.
type slowTyping struct {
	*platformtest.Memory
	delay time.Duration
	shown atomic.Int32
	began chan struct{}
}

func (p *slowTyping) Typing(ctx context.Context, _ *deliveryv1.SendRequested) error {
	p.began <- struct{}{}
	t := time.NewTimer(p.delay)
	defer t.Stop()
	select {
	case <-t.C:
		p.shown.Add(1)
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// A typing request the gateway cannot start within the time its header
// gives it (bus.HeaderStartWithin: delivery sends the turn's answer
// after that) is given up, not carried out after the answer, where the
// indicator would show under it for 5–10 s. One started in time is
// carried out however long the platform takes (a far-away API, a rate
// limit's wait): cut short, a slow platform would never show typing.
// Without the header a request waits its turn, as before.
func TestATypingRequestIsGivenUpPastItsHeadersTime(t *testing.T) {
	t.Parallel()
	b := bustest.New(t, bustest.EmbeddedURL(t))
	p := &slowTyping{Memory: platformtest.NewMemory("bot", false), delay: 900 * time.Millisecond, began: make(chan struct{}, 4)}
	h := startRunner(t, p, b, platform.Options{SendConcurrency: 1})
	platformtest.WaitFor(t, "connected", func() bool { return state(h.r) == platform.StateConnected })
	typing := func(key string, hdr nats.Header) *deliveryv1.SendReceipt {
		req := &deliveryv1.SendRequested{IdempotencyKey: key, Op: deliveryv1.SendOp_SEND_OP_TYPING,
			Target: &deliveryv1.Target{Platform: p.Name(), ChatId: "c1"}, TurnId: "t1"}
		var rec deliveryv1.SendReceipt
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if _, err := b.RequestHeaders(ctx, b.Topology().SendSubject(p.Name()), hdr, req, &rec); err != nil {
			t.Error(err)
		}
		return &rec
	}
	within := nats.Header{bus.HeaderStartWithin: []string{"300"}}
	if rec := typing("t1:typing:0", within); !rec.GetOk() {
		t.Errorf("a typing request started in time, slower than its header's time: receipt %+v, want ok", rec)
	}
	if n := p.shown.Load(); n != 1 {
		t.Errorf("%d typing indicators shown, want 1", n)
	}
	<-p.began
	// The only room for a send taken by a slow request without the
	// header: the next cannot start in its time.
	first := make(chan *deliveryv1.SendReceipt, 1)
	go func() { first <- typing("t1:typing:1", nil) }()
	<-p.began
	if rec := typing("t1:typing:2", within); rec.GetOk() || !strings.HasPrefix(rec.GetError(), bus.LateTyping) {
		// Delivery asks again at once on that error's start alone.
		t.Errorf("a typing request not started in its time: receipt %+v, want it given up with %q", rec, bus.LateTyping)
	}
	if rec := <-first; !rec.GetOk() {
		t.Errorf("a slow typing request without the header: receipt %+v, want ok", rec)
	}
	if n := p.shown.Load(); n != 2 {
		t.Errorf("%d typing indicators shown, want 2 (none past its time)", n)
	}
}
