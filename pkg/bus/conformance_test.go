package bus_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/protobuf/proto"

	"github.com/switchboard-chat/switchboard/pkg/bus"
	"github.com/switchboard-chat/switchboard/pkg/bus/bustest"
	turnsv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/turns/v1"
	"github.com/switchboard-chat/switchboard/pkg/telemetry/telemetrytest"
)

// TestConformance runs the bus suite against every real server we have:
// the embedded nats-server (current JetStream) and the machine's own.
func TestConformance(t *testing.T) {
	targets := map[string]func(testing.TB) string{
		"embedded": bustest.EmbeddedURL,
		"system": func(tb testing.TB) string {
			u := bustest.SystemURL()
			if !reachable(u) {
				if os.Getenv("CI") != "" {
					tb.Fatalf("NATS at %s is not reachable", u)
				}
				tb.Skipf("NATS at %s is not reachable", u)
			}
			return u
		},
	}
	for name, url := range targets {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			runSuite(t, url(t))
		})
	}
}

func reachable(url string) bool {
	nc, err := nats.Connect(url, nats.Timeout(time.Second))
	if err != nil {
		return false
	}
	nc.Close()
	return true
}

var tracer struct {
	once     sync.Once
	exporter *tracetest.InMemoryExporter
}

func runSuite(t *testing.T, url string) {
	tests := []struct {
		name string
		run  func(t *testing.T, b *bus.Bus)
	}{
		{"streams are created idempotently", testEnsureIdempotent},
		{"the streams' partition count wins over the configured one", testPartitionsReadBack},
		{"streams made before the count was configurable keep 16", testLegacyPartitions},
		{"dedupe by message id", testDedupe},
		{"asynchronous publishes keep their order", testPublishAsyncOrder},
		{"redelivery after nak", testRedelivery},
		{"term after max deliveries", testMaxDeliveries},
		{"permanent error dead-letters at once", testPermanent},
		{"dependency outage retried in place", testUnavailableInPlace},
		{"dependency outage past its bound counts", testUnavailableBound},
		{"poison payload dead-lettered", testPoison},
		{"a panicking handler dead-letters, the consumer lives on", testHandlerPanic},
		{"work queue gives each turn to one consumer", testWorkQueue},
		{"in-flight handler finishes on shutdown", testGracefulDrain},
		{"a running consumer reports its backlog", testBacklogGauges},
		{"a stopping consumer hands messages to the others", testHandBackOnStop},
		{"a message the server gives up on is dead-lettered", testServerMaxDeliveries},
		{"trace context survives a hop", testTraceContext},
		{"request reply", testRequestReply},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tc.run(t, bustest.New(t, url))
		})
	}
}

func turn(id string) *turnsv1.TurnRequested {
	return &turnsv1.TurnRequested{TurnId: id, SessionKey: "agent:main:test:dm:" + id, Generation: 1}
}

func turnsSpec(durable string) bus.ConsumerSpec {
	return bus.ConsumerSpec{
		Stream: bus.StreamTurns, Durable: durable, FilterSubjects: []string{bus.SubjectTurnRequested},
		AckWait: 5 * time.Second, MaxDeliver: 3, Backoff: []time.Duration{50 * time.Millisecond},
		PollWait: 200 * time.Millisecond, DrainTimeout: 5 * time.Second,
	}
}

func start(t *testing.T, c interface{ Run(context.Context) error }) (stop func()) {
	t.Helper()
	cancel, wait := startCancel(t, c)
	return func() { cancel(); wait() }
}

// startCancel runs c until the test ends; cancel ends its context, wait
// (which also cancels) waits for Run to return, for a test that acts
// while the consumer stops.
func startCancel(t *testing.T, c interface{ Run(context.Context) error }) (cancel, wait func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	var once sync.Once
	wait = func() {
		once.Do(func() {
			cancel()
			select {
			case err := <-done:
				if err != nil {
					t.Errorf("consumer run: %v", err)
				}
			case <-time.After(15 * time.Second):
				t.Error("consumer did not stop")
			}
		})
	}
	t.Cleanup(wait)
	return cancel, wait
}

func publishTurn(t *testing.T, b *bus.Bus, id string) {
	t.Helper()
	if _, err := b.Publish(context.Background(), b.Topology().Subject(bus.SubjectTurnRequested), "turn:"+id, turn(id)); err != nil {
		t.Fatal(err)
	}
}

func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func streamMsgs(t *testing.T, b *bus.Bus, stream string) uint64 {
	t.Helper()
	s, err := b.JetStream().Stream(context.Background(), b.Topology().Stream(stream))
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return info.State.Msgs
}

func testEnsureIdempotent(t *testing.T, b *bus.Bus) {
	ctx := context.Background()
	name := b.Topology().Stream(bus.StreamInbound)
	before, err := b.JetStream().Stream(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if err := b.EnsureStreams(ctx); err != nil {
			t.Fatalf("second EnsureStreams: %v", err)
		}
	}
	after, err := b.JetStream().Stream(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	if !after.CachedInfo().Created.Equal(before.CachedInfo().Created) {
		t.Fatal("EnsureStreams recreated an existing stream")
	}
	// A changed declaration is applied to the existing stream, and what an
	// operator set beside it is kept.
	cfg := after.CachedInfo().Config
	cfg.MaxBytes = 64 << 20
	if _, err := b.JetStream().UpdateStream(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	topo := b.Topology()
	topo.Retention = 2 * time.Hour
	changed, err := bus.New(b.Conn(), topo, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := changed.EnsureStreams(ctx); err != nil {
		t.Fatalf("EnsureStreams with a new retention: %v", err)
	}
	st, err := b.JetStream().Stream(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	if got := st.CachedInfo().Config.MaxAge; got != 2*time.Hour {
		t.Fatalf("retention after update = %v, want 2h", got)
	}
	if got := st.CachedInfo().Config.MaxBytes; got != 64<<20 {
		t.Fatalf("the operator's max_bytes after the update = %d, want it kept", got)
	}
}

func testDedupe(t *testing.T, b *bus.Bus) {
	subj := b.Topology().Subject(bus.SubjectTurnRequested)
	first, err := b.Publish(context.Background(), subj, "turn:same", turn("same"))
	if err != nil {
		t.Fatal(err)
	}
	second, err := b.Publish(context.Background(), subj, "turn:same", turn("same"))
	if err != nil {
		t.Fatal(err)
	}
	if first.Duplicate || !second.Duplicate {
		t.Fatalf("duplicate flags = %v, %v; want false, true", first.Duplicate, second.Duplicate)
	}
	if n := streamMsgs(t, b, bus.StreamTurns); n != 1 {
		t.Fatalf("stream holds %d messages, want 1", n)
	}
	if _, err := b.Publish(context.Background(), subj, "", turn("x")); err == nil {
		t.Fatal("publish without message id succeeded")
	}
}

func testPublishAsyncOrder(t *testing.T, b *bus.Bus) {
	ctx := context.Background()
	subj := b.Topology().Subject(bus.SubjectTurnRequested)
	for i := range 20 {
		id := fmt.Sprintf("async-%d", i)
		if err := b.PublishAsync(ctx, subj, "turn:"+id, turn(id)); err != nil {
			t.Fatal(err)
		}
	}
	// A repeated id is dropped like any duplicate.
	if err := b.PublishAsync(ctx, subj, "turn:async-3", turn("async-3")); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Publish(ctx, subj, "turn:sync", turn("sync")); err != nil {
		t.Fatal(err)
	}
	s, err := b.JetStream().Stream(ctx, b.Topology().Stream(bus.StreamTurns))
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info.State.Msgs != 21 {
		t.Fatalf("stream holds %d messages, want 21", info.State.Msgs)
	}
	for seq := info.State.FirstSeq; seq <= info.State.LastSeq; seq++ {
		m, err := s.GetMsg(ctx, seq)
		if err != nil {
			t.Fatal(err)
		}
		want := "turn:sync"
		if n := int(seq - info.State.FirstSeq); n < 20 {
			want = fmt.Sprintf("turn:async-%d", n)
		}
		if got := m.Header.Get(nats.MsgIdHdr); got != want {
			t.Fatalf("message %d is %s, want %s", seq, got, want)
		}
	}
	if err := b.PublishAsync(ctx, subj, "", turn("x")); err == nil {
		t.Fatal("publish without message id succeeded")
	}
}

func testRedelivery(t *testing.T, b *bus.Bus) {
	var attempts []int
	var mu sync.Mutex
	var acked atomic.Bool
	c := bus.NewConsumer(b, turnsSpec("test-redeliver"), func(ctx context.Context, m *turnsv1.TurnRequested) error {
		d, _ := bus.DeliveryFrom(ctx)
		mu.Lock()
		attempts = append(attempts, d.Attempt)
		mu.Unlock()
		if d.Attempt == 1 {
			return fmt.Errorf("transient")
		}
		acked.Store(true)
		return nil
	})
	start(t, c)
	publishTurn(t, b, "r1")
	eventually(t, "second delivery", acked.Load)
	mu.Lock()
	defer mu.Unlock()
	if len(attempts) != 2 || attempts[0] != 1 || attempts[1] != 2 {
		t.Fatalf("attempts = %v, want [1 2]", attempts)
	}
	eventually(t, "work queue emptied by ack", func() bool { return streamMsgs(t, b, bus.StreamTurns) == 0 })
}

func deadLetters(t *testing.T, b *bus.Bus) []*nats.Msg {
	t.Helper()
	s, err := b.JetStream().Stream(context.Background(), b.Topology().Stream(bus.StreamDeadLetter))
	if err != nil {
		t.Fatal(err)
	}
	info, _ := s.Info(context.Background())
	var out []*nats.Msg
	for seq := info.State.FirstSeq; seq > 0 && seq <= info.State.LastSeq; seq++ {
		raw, err := s.GetMsg(context.Background(), seq)
		if err != nil {
			continue
		}
		out = append(out, &nats.Msg{Subject: raw.Subject, Data: raw.Data, Header: raw.Header})
	}
	return out
}

func testMaxDeliveries(t *testing.T, b *bus.Bus) {
	var calls atomic.Int32
	c := bus.NewConsumer(b, turnsSpec("test-maxdeliver"), func(ctx context.Context, m *turnsv1.TurnRequested) error {
		calls.Add(1)
		return fmt.Errorf("always fails")
	})
	start(t, c)
	publishTurn(t, b, "poison")
	eventually(t, "dead letter", func() bool { return len(deadLetters(t, b)) == 1 })
	dl := deadLetters(t, b)[0]
	if got := dl.Header.Get("Sb-Dead-Reason"); got != "max_deliveries" {
		t.Errorf("reason = %q", got)
	}
	if got := dl.Header.Get("Sb-Dead-Attempts"); got != "3" {
		t.Errorf("attempts header = %q, want 3", got)
	}
	if got := dl.Header.Get("Sb-Dead-Msg-Id"); got != "turn:poison" {
		t.Errorf("msg id header = %q", got)
	}
	// The message is terminated and taken off the work queue after its
	// dead letter is stored (deadLetter), so the dead letter's arrival
	// does not mean it is gone; once it is, no delivery can follow.
	eventually(t, "the terminated message off the work queue", func() bool { return streamMsgs(t, b, bus.StreamTurns) == 0 })
	if n := calls.Load(); n != 3 {
		t.Fatalf("handler ran %d times, want 3", n)
	}
}

var errDown = errors.New("database unreachable")

// testUnavailableInPlace: while the handler reports a dependency down,
// the message is retried in place on its first delivery — more times
// than MaxDeliver — and acked once the dependency is back.
func testUnavailableInPlace(t *testing.T, b *bus.Bus) {
	var mu sync.Mutex
	var attempts, reruns []int
	var acked atomic.Bool
	spec := turnsSpec("test-unavailable")
	spec.Unavailable = func(err error) bool { return errors.Is(err, errDown) }
	c := bus.NewConsumer(b, spec, func(ctx context.Context, m *turnsv1.TurnRequested) error {
		d, _ := bus.DeliveryFrom(ctx)
		mu.Lock()
		defer mu.Unlock()
		attempts = append(attempts, d.Attempt)
		reruns = append(reruns, d.Rerun)
		if len(attempts) <= spec.MaxDeliver {
			return fmt.Errorf("claim: %w", errDown)
		}
		acked.Store(true)
		return nil
	})
	start(t, c)
	publishTurn(t, b, "outage")
	eventually(t, "the handler to succeed after the outage", acked.Load)
	eventually(t, "work queue emptied by ack", func() bool { return streamMsgs(t, b, bus.StreamTurns) == 0 })
	mu.Lock()
	defer mu.Unlock()
	if fmt.Sprint(attempts) != "[1 1 1 1]" {
		t.Fatalf("delivery attempts seen %v, want [1 1 1 1] (in place, none used up)", attempts)
	}
	// Each run in place knows the runs of the delivery before it, which
	// may have done part of its work.
	if fmt.Sprint(reruns) != "[0 1 2 3]" {
		t.Fatalf("reruns seen %v, want [0 1 2 3]", reruns)
	}
	if n := len(deadLetters(t, b)); n != 0 {
		t.Fatalf("%d dead letters, want none", n)
	}
}

// testUnavailableBound: past UnavailableFor the error counts like any
// other, up to the dead letter.
func testUnavailableBound(t *testing.T, b *bus.Bus) {
	var calls atomic.Int32
	spec := turnsSpec("test-unavailable-bound")
	spec.Unavailable = func(err error) bool { return errors.Is(err, errDown) }
	spec.UnavailableFor = time.Nanosecond
	c := bus.NewConsumer(b, spec, func(ctx context.Context, m *turnsv1.TurnRequested) error {
		calls.Add(1)
		return errDown
	})
	start(t, c)
	publishTurn(t, b, "long-outage")
	eventually(t, "dead letter", func() bool { return len(deadLetters(t, b)) == 1 })
	if got := deadLetters(t, b)[0].Header.Get("Sb-Dead-Reason"); got != "max_deliveries" {
		t.Errorf("reason = %q", got)
	}
	if n := calls.Load(); n != int32(spec.MaxDeliver) {
		t.Fatalf("handler ran %d times, want %d", n, spec.MaxDeliver)
	}
}

func testPermanent(t *testing.T, b *bus.Bus) {
	var calls atomic.Int32
	c := bus.NewConsumer(b, turnsSpec("test-permanent"), func(ctx context.Context, m *turnsv1.TurnRequested) error {
		calls.Add(1)
		return bus.Permanent(fmt.Errorf("unknown platform"))
	})
	start(t, c)
	publishTurn(t, b, "perm")
	eventually(t, "dead letter", func() bool { return len(deadLetters(t, b)) == 1 })
	if got := deadLetters(t, b)[0].Header.Get("Sb-Dead-Reason"); got != "permanent" {
		t.Errorf("reason = %q", got)
	}
	if n := calls.Load(); n != 1 {
		t.Fatalf("handler ran %d times, want 1", n)
	}
}

func testPoison(t *testing.T, b *bus.Bus) {
	var calls atomic.Int32
	c := bus.NewConsumer(b, turnsSpec("test-poison"), func(ctx context.Context, m *turnsv1.TurnRequested) error {
		calls.Add(1)
		return nil
	})
	start(t, c)
	msg := nats.NewMsg(b.Topology().Subject(bus.SubjectTurnRequested))
	msg.Data = []byte{0xff, 0xff, 0xff}
	msg.Header.Set(nats.MsgIdHdr, "garbage")
	if _, err := b.JetStream().PublishMsg(context.Background(), msg); err != nil {
		t.Fatal(err)
	}
	eventually(t, "dead letter", func() bool { return len(deadLetters(t, b)) == 1 })
	dl := deadLetters(t, b)[0]
	if got := dl.Header.Get("Sb-Dead-Reason"); got != "decode" {
		t.Errorf("reason = %q", got)
	}
	if string(dl.Data) != string(msg.Data) {
		t.Errorf("dead letter lost the payload")
	}
	if calls.Load() != 0 {
		t.Fatal("handler saw an undecodable message")
	}
}

// testHandlerPanic: a message whose handler panics is recovered, counted
// and dead-lettered at once with reason "panic" (not redelivered into a
// crash loop), and the same consumer goes on handling the next message.
func testHandlerPanic(t *testing.T, b *bus.Bus) {
	spec := turnsSpec(fmt.Sprintf("test-panic-%d", time.Now().UnixNano()))
	var calls atomic.Int32
	var handled atomic.Bool
	c := bus.NewConsumer(b, spec, func(ctx context.Context, m *turnsv1.TurnRequested) error {
		calls.Add(1)
		if id := m.GetTurnId(); id == "boom" {
			var v []int
			_ = v[len(id)] // index out of range: a real runtime panic
		}
		handled.Store(true)
		return nil
	})
	start(t, c)
	publishTurn(t, b, "boom")
	eventually(t, "dead letter", func() bool { return len(deadLetters(t, b)) == 1 })
	dl := deadLetters(t, b)[0]
	for h, want := range map[string]string{
		"Sb-Dead-Reason":   "panic",
		"Sb-Dead-Msg-Id":   "turn:boom",
		"Sb-Dead-Attempts": "1",
		"Sb-Dead-Consumer": spec.Durable,
	} {
		if got := dl.Header.Get(h); got != want {
			t.Errorf("%s = %q, want %q", h, got, want)
		}
	}
	if got := dl.Header.Get("Sb-Dead-Error"); !strings.Contains(got, "index out of range [4] with length 0") {
		t.Errorf("Sb-Dead-Error = %q, want the panic's value", got)
	}
	var m turnsv1.TurnRequested
	if err := proto.Unmarshal(dl.Data, &m); err != nil || m.GetTurnId() != "boom" {
		t.Errorf("dead letter lost the payload: %v %q", err, m.GetTurnId())
	}
	// The counters move after the dead letter is stored (and the message
	// terminated), so the dead letter's arrival does not mean they moved.
	for _, c := range []struct {
		name   string
		labels map[string]string
	}{
		{"switchboard_bus_handler_panics_total", map[string]string{"consumer": spec.Durable}},
		{"switchboard_bus_terminated_total", map[string]string{"consumer": spec.Durable, "reason": "panic"}},
	} {
		eventually(t, c.name, func() bool { return telemetrytest.Value(t, c.name, c.labels) >= 1 })
		if got := telemetrytest.Value(t, c.name, c.labels); got != 1 {
			t.Errorf("%s%v = %v, want 1", c.name, c.labels, got)
		}
	}
	publishTurn(t, b, "after")
	eventually(t, "the next message handled by the same consumer", handled.Load)
	eventually(t, "work queue emptied", func() bool { return streamMsgs(t, b, bus.StreamTurns) == 0 })
	if n := calls.Load(); n != 2 {
		t.Fatalf("handler ran %d times, want 2 (the panicking message once)", n)
	}
}

func testWorkQueue(t *testing.T, b *bus.Bus) {
	const n = 60
	var mu sync.Mutex
	seen := map[string]int{}
	per := [2]int{}
	for i := range 2 {
		spec := turnsSpec("worker-turns")
		spec.Concurrency = 4
		c := bus.NewConsumer(b, spec, func(ctx context.Context, m *turnsv1.TurnRequested) error {
			time.Sleep(2 * time.Millisecond)
			mu.Lock()
			seen[m.GetTurnId()]++
			per[i]++
			mu.Unlock()
			return nil
		})
		start(t, c)
	}
	for i := range n {
		publishTurn(t, b, fmt.Sprintf("wq%d", i))
	}
	eventually(t, "all turns handled", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(seen) == n
	})
	time.Sleep(200 * time.Millisecond)
	mu.Lock()
	defer mu.Unlock()
	for id, c := range seen {
		if c != 1 {
			t.Errorf("turn %s handled %d times", id, c)
		}
	}
	if per[0] == 0 || per[1] == 0 {
		t.Errorf("one consumer got nothing: %v", per)
	}
}

func testGracefulDrain(t *testing.T, b *bus.Bus) {
	started := make(chan struct{})
	var finished atomic.Bool
	c := bus.NewConsumer(b, turnsSpec("test-drain"), func(ctx context.Context, m *turnsv1.TurnRequested) error {
		close(started)
		time.Sleep(300 * time.Millisecond)
		if ctx.Err() != nil {
			return ctx.Err()
		}
		finished.Store(true)
		return nil
	})
	stop := start(t, c)
	publishTurn(t, b, "long")
	<-started
	stop()
	if !finished.Load() {
		t.Fatal("in-flight handler did not finish before Run returned")
	}
	// The ack is sent before Run returns; the server removes the message
	// from the work queue when it processes it.
	eventually(t, "finished message acked", func() bool { return streamMsgs(t, b, bus.StreamTurns) == 0 })
}

// testBacklogGauges: a consumer's backlog (not yet delivered, delivered
// and not acked) is on /metrics while it runs, and gone once it stops.
func testBacklogGauges(t *testing.T, b *bus.Bus) {
	spec := turnsSpec(fmt.Sprintf("test-backlog-%d", time.Now().UnixNano()))
	spec.BacklogInterval = 50 * time.Millisecond
	release := make(chan struct{})
	c := bus.NewConsumer(b, spec, func(ctx context.Context, m *turnsv1.TurnRequested) error {
		<-release
		return nil
	})
	for i := range 4 {
		publishTurn(t, b, fmt.Sprint("backlog-", i))
	}
	stop := start(t, c)
	labels := map[string]string{"consumer": spec.Durable}
	backlog := func() string {
		return fmt.Sprintf("pending %v, ack pending %v",
			telemetrytest.Value(t, "switchboard_bus_consumer_pending", labels),
			telemetrytest.Value(t, "switchboard_bus_consumer_ack_pending", labels))
	}
	eventually(t, "one message in the handler, three waiting", func() bool { return backlog() == "pending 3, ack pending 1" })
	close(release)
	eventually(t, "an empty backlog", func() bool { return backlog() == "pending 0, ack pending 0" })
	stop()
	if _, ok := telemetrytest.Lookup(t, "switchboard_bus_consumer_pending", labels); ok {
		t.Error("a stopped consumer still reports its backlog")
	}
}

// testHandBackOnStop stops a consumer while its pull request is open and
// publishes turns into it: each is handed back once, not bounced back to
// the same request until the server gives up on it, and a consumer
// started afterwards on the same durable handles every one.
func testHandBackOnStop(t *testing.T, b *bus.Bus) {
	spec := turnsSpec("test-handback")
	spec.Concurrency, spec.PollWait = 4, time.Second
	release := make(chan struct{})
	first := make(chan struct{})
	stopping := bus.NewConsumer(b, spec, func(ctx context.Context, m *turnsv1.TurnRequested) error {
		if m.GetTurnId() != "first" {
			t.Errorf("the stopping consumer handled %s", m.GetTurnId())
			return nil
		}
		close(first)
		<-release
		return nil
	})
	cancel, wait := startCancel(t, stopping)
	publishTurn(t, b, "first")
	<-first
	// The consumer's pull for its free slots is open (the one that
	// brought the first turn, or the next); stopping leaves it open until
	// it expires, and what it brings meanwhile is handed back. Should it
	// expire before the turns below are published (a stalled test), they
	// wait for the next consumer, at attempt 1.
	eventually(t, "the stopping consumer's open pull", func() bool {
		info, err := b.JetStream().Consumer(context.Background(), b.Topology().Stream(bus.StreamTurns), spec.Durable)
		return err == nil && info.CachedInfo().NumWaiting > 0
	})
	cancel()
	ids := []string{"h1", "h2", "h3"}
	for _, id := range ids {
		publishTurn(t, b, id)
	}
	close(release)
	wait()

	var mu sync.Mutex
	got := map[string][]int{}
	start(t, bus.NewConsumer(b, spec, func(ctx context.Context, m *turnsv1.TurnRequested) error {
		d, _ := bus.DeliveryFrom(ctx)
		if d.Spent() != 1 {
			// A hand-back uses up no attempt: MaxDeliver bounds failures.
			t.Errorf("turn %s: attempt %d, %d handed back: %d spent, want 1", m.GetTurnId(), d.Attempt, d.HandedBack, d.Spent())
		}
		mu.Lock()
		got[m.GetTurnId()] = append(got[m.GetTurnId()], d.Attempt)
		mu.Unlock()
		return nil
	}))
	eventually(t, "every handed back turn handled", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(got) == len(ids)
	})
	time.Sleep(200 * time.Millisecond)
	mu.Lock()
	defer mu.Unlock()
	for _, id := range ids {
		if a := got[id]; len(a) != 1 || a[0] > 2 {
			t.Errorf("turn %s: deliveries to the handler %v, want one, at attempt 1 or 2", id, a)
		}
	}
}

// testServerMaxDeliveries: when the server stops delivering a message on
// its own (every delivery ended without a verdict), the advisory watcher
// copies it to the dead-letter stream and takes it off the work queue.
func testServerMaxDeliveries(t *testing.T, b *bus.Bus) {
	ctx, cancel := context.WithCancel(context.Background())
	subs := b.Conn().NumSubscriptions()
	watched := make(chan error, 1)
	go func() { watched <- b.WatchAdvisories(ctx) }()
	t.Cleanup(func() { cancel(); <-watched })
	// The watcher's two subscriptions exist on the connection; a flush's
	// round trip then proves the server has them (it handles a
	// connection's protocol in order), so the advisory cannot be missed.
	eventually(t, "the watcher subscribed", func() bool { return b.Conn().NumSubscriptions() >= subs+2 })
	if err := b.Conn().Flush(); err != nil {
		t.Fatal(err)
	}
	// A consumer that allows one delivery, driven by hand: the delivery
	// is handed back without a handler, as a dying process would.
	cons, err := b.JetStream().CreateOrUpdateConsumer(ctx, b.Topology().Stream(bus.StreamTurns), jetstream.ConsumerConfig{
		Durable: "test-giveup", AckPolicy: jetstream.AckExplicitPolicy, MaxDeliver: 1,
		FilterSubject: b.Topology().Subject(bus.SubjectTurnRequested)})
	if err != nil {
		t.Fatal(err)
	}
	publishTurn(t, b, "given-up")
	batch, err := cons.Fetch(1, jetstream.FetchMaxWait(2*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	for m := range batch.Messages() {
		if err := m.Nak(); err != nil {
			t.Fatal(err)
		}
	}
	// The next pull finds it over its limit: the server gives up.
	if batch, err := cons.Fetch(1, jetstream.FetchMaxWait(300*time.Millisecond)); err == nil {
		for range batch.Messages() {
			t.Error("delivered past its limit")
		}
	}
	eventually(t, "the dead letter", func() bool { return len(deadLetters(t, b)) == 1 })
	dl := deadLetters(t, b)[0]
	if got := dl.Header.Get("Sb-Dead-Reason"); got != "server_max_deliveries" {
		t.Errorf("reason %q", got)
	}
	if got := dl.Header.Get("Sb-Dead-Msg-Id"); got != "turn:given-up" {
		t.Errorf("msg id %q", got)
	}
	var v turnsv1.TurnRequested
	if err := proto.Unmarshal(dl.Data, &v); err != nil || v.GetTurnId() != "given-up" {
		t.Errorf("dead letter holds %v (%v)", &v, err)
	}
	eventually(t, "the work queue emptied", func() bool { return streamMsgs(t, b, bus.StreamTurns) == 0 })
}

func testTraceContext(t *testing.T, b *bus.Bus) {
	tracer.once.Do(func() {
		tracer.exporter = tracetest.NewInMemoryExporter()
		otel.SetTracerProvider(sdktrace.NewTracerProvider(sdktrace.WithSyncer(tracer.exporter)))
		otel.SetTextMapPropagator(propagation.TraceContext{})
	})
	got := make(chan trace.SpanContext, 1)
	c := bus.NewConsumer(b, turnsSpec("test-trace"), func(ctx context.Context, m *turnsv1.TurnRequested) error {
		got <- trace.SpanContextFromContext(ctx)
		return nil
	})
	start(t, c)
	ctx, span := otel.Tracer("test").Start(context.Background(), "gateway receive")
	if _, err := b.Publish(ctx, b.Topology().Subject(bus.SubjectTurnRequested), "turn:traced", turn("traced")); err != nil {
		t.Fatal(err)
	}
	span.End()
	select {
	case sc := <-got:
		if sc.TraceID() != span.SpanContext().TraceID() {
			t.Fatalf("consumer trace id %s, publisher %s", sc.TraceID(), span.SpanContext().TraceID())
		}
	case <-time.After(10 * time.Second):
		t.Fatal("message not consumed")
	}
}

func testRequestReply(t *testing.T, b *bus.Bus) {
	subj := b.Topology().SendSubject("test")
	sub, err := b.Conn().Subscribe(subj, func(m *nats.Msg) {
		_ = bus.Reply(context.Background(), m, &turnsv1.TurnCompleted{TurnId: "reply-to-" + subj})
	})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var resp turnsv1.TurnCompleted
	if err := b.Request(ctx, subj, turn("req"), &resp); err != nil {
		t.Fatal(err)
	}
	if resp.GetTurnId() != "reply-to-"+subj {
		t.Fatalf("reply = %q", resp.GetTurnId())
	}
}

// A process configured with another partition count than the streams were
// created with uses the streams' count and leaves them as they are.
func testPartitionsReadBack(t *testing.T, b *bus.Bus) {
	ctx := context.Background()
	created := b.Topology().PartitionCount()
	topo := b.Topology()
	topo.Partitions = created / 2
	other, err := bus.New(b.Conn(), topo, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := other.EnsureStreams(ctx); err != nil {
		t.Fatal(err)
	}
	if got := other.Topology().PartitionCount(); got != created {
		t.Fatalf("partition count %d, want the streams' %d", got, created)
	}
	st, err := b.JetStream().Stream(ctx, topo.Stream(bus.StreamInbound))
	if err != nil {
		t.Fatal(err)
	}
	if got := len(st.CachedInfo().Config.Subjects); got != created {
		t.Fatalf("inbound stream has %d subjects, want %d", got, created)
	}
	// A partition the streams do not have cannot be published to.
	beyond := topo.Subject(fmt.Sprintf("%s.%d", bus.SubjectInbound, created))
	if _, err := b.Publish(ctx, beyond, "beyond", turn("x")); err == nil {
		t.Fatalf("publish to %s succeeded", beyond)
	}
}

// Streams whose subjects end in a wildcard (made before the partition
// count was configurable) have 16 partitions and keep their subjects.
func testLegacyPartitions(t *testing.T, b *bus.Bus) {
	ctx := context.Background()
	topo := b.Topology()
	topo.Prefix += "legacy"
	legacy := map[string]string{bus.StreamInbound: bus.SubjectInbound, bus.StreamReplies: bus.SubjectReplies}
	for stream, subject := range legacy {
		for _, cfg := range topo.StreamConfigs() {
			if cfg.Name != topo.Stream(stream) {
				continue
			}
			cfg.Subjects = []string{topo.Subject(subject + ".>")}
			if _, err := b.JetStream().CreateStream(ctx, cfg); err != nil {
				t.Fatal(err)
			}
		}
	}
	t.Cleanup(func() {
		for _, cfg := range topo.StreamConfigs() {
			_ = b.JetStream().DeleteStream(context.Background(), cfg.Name)
		}
	})
	old, err := bus.New(b.Conn(), topo, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := old.EnsureStreams(ctx); err != nil {
		t.Fatal(err)
	}
	if got := old.Topology().PartitionCount(); got != 16 {
		t.Fatalf("partition count %d, want 16", got)
	}
	for stream := range legacy {
		st, err := b.JetStream().Stream(ctx, topo.Stream(stream))
		if err != nil {
			t.Fatal(err)
		}
		if got := st.CachedInfo().Config.Subjects; len(got) != 1 || got[0] != topo.Subject(legacy[stream]+".>") {
			t.Fatalf("%s has subjects %v after ensuring, want its wildcard", stream, got)
		}
	}
}
