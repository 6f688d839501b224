package telegram

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	neturl "net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/switchboard-chat/switchboard/pkg/bus"
	"github.com/switchboard-chat/switchboard/pkg/bus/bustest"
	deliveryv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/delivery/v1"
	eventsv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/events/v1"
	"github.com/switchboard-chat/switchboard/pkg/platform"
	"github.com/switchboard-chat/switchboard/pkg/telegramfake"
)

// wrappedPlatform is the Telegram platform whose connection to the
// runner goes through wrap.
type wrappedPlatform struct {
	*Platform
	wrap func(platform.Conn) platform.Conn
}

func (p *wrappedPlatform) Connect(ctx context.Context, conn platform.Conn) error {
	return p.Platform.Connect(ctx, p.wrap(conn))
}

// startWrapped runs a gateway whose connection goes through wrap, until
// the test ends or stop is called.
func startWrapped(t *testing.T, cfg Config, b *bus.Bus, instance string, wrap func(platform.Conn) platform.Conn) (*platform.Service, func()) {
	t.Helper()
	return startWrappedWith(t, cfg, b, instance, func(*Platform) {}, wrap)
}

// startWrappedWith is startWrapped whose platform is handed to setup
// before it runs.
func startWrappedWith(t *testing.T, cfg Config, b *bus.Bus, instance string, setup func(*Platform), wrap func(platform.Conn) platform.Conn) (*platform.Service, func()) {
	t.Helper()
	return startWrappedRun(t, cfg, b, instance, setup, wrap, false)
}

// startWrappedGateway is startWrappedWith whose stop stops the whole
// replica (Service.Run), its holds and watches of presses too; stop in
// startWrappedWith stops its runner only, as a lease move does, the
// process living on.
func startWrappedGateway(t *testing.T, cfg Config, b *bus.Bus, instance string, setup func(*Platform), wrap func(platform.Conn) platform.Conn) (*platform.Service, func()) {
	t.Helper()
	return startWrappedRun(t, cfg, b, instance, setup, wrap, true)
}

func startWrappedRun(t *testing.T, cfg Config, b *bus.Bus, instance string, setup func(*Platform), wrap func(platform.Conn) platform.Conn, gateway bool) (*platform.Service, func()) {
	t.Helper()
	tp, err := NewPlatform(cfg, quietLog(), nil)
	if err != nil {
		t.Fatal(err)
	}
	tp.bus = b
	setup(tp)
	svc, err := platform.NewService(&wrappedPlatform{Platform: tp, wrap: wrap}, b, quietLog(),
		platform.Options{Instance: instance, LeaseTTL: cfg.LeaseTTL, Backoff: platform.Schedule(50 * time.Millisecond)})
	if err != nil {
		t.Fatal(err)
	}
	run := svc.Run
	if gateway {
		run = (&Service{Service: svc, p: tp}).Run
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- run(ctx) }()
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
	return &svc, stop
}

// lateHoldConn holds a press's first publish back until another
// handling of the press has published it: of two deliveries of one
// update at once, the second stores the press, and the first is told it
// is a duplicate.
type lateHoldConn struct {
	platform.Conn
	published chan struct{}
	first     *sync.Once
	once      *sync.Once
}

func (c *lateHoldConn) HoldPress(id string) (*platform.PressHold, error) {
	return c.Conn.(platform.PressHolder).HoldPress(id)
}

func (c *lateHoldConn) Deliver(ctx context.Context, ev *eventsv1.MessageReceived) (platform.Accepted, error) {
	if ev.GetInteraction() == nil {
		return c.Conn.Deliver(ctx, ev)
	}
	first := false
	c.first.Do(func() { first = true })
	if first {
		select {
		case <-c.published:
		case <-time.After(10 * time.Second):
		}
	}
	acc, err := c.Conn.Deliver(ctx, ev)
	c.once.Do(func() { close(c.published) })
	return acc, err
}

// Two webhook deliveries of the same press at once (Telegram retrying
// one it thinks lost) are one press: the handling that holds its query
// answers it with the router's word, also when the other delivery's
// publish stored the press first and its own was told it is a
// duplicate. Taken for a press decided before, the query was answered
// at once without text, and the router's word was lost.
func TestPressDeliveredTwiceAtOnce(t *testing.T) {
	t.Parallel()
	f := newFake(t)
	b := bustest.New(t, bustest.EmbeddedURL(t))
	cfg := webhookConfig(t, f)
	// The longest there is, so that the hold is found holding however
	// busy the machine.
	const pressHold = maxPressHold
	cfg.PressHold = pressHold
	published, once := make(chan struct{}), &sync.Once{}
	s, _ := startWrapped(t, cfg, b, "a", func(c platform.Conn) platform.Conn {
		return &lateHoldConn{Conn: c, published: published, first: &sync.Once{}, once: once}
	})
	waitFor(t, "connected", 20*time.Second, func() bool { st, _ := s.Runner().State(); return st == platform.StateConnected })
	card := sendApprovalCard(t, f, b)
	pressed := time.Now()
	id, query, err := f.Press("99", card.ID, alice, "ea:once:call_1")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if code, err := f.Push(context.Background(), id); err != nil || code != http.StatusOK {
				t.Errorf("push: %d %v", code, err)
			}
		}()
	}
	wg.Wait()
	evs := inbound(t, b)
	if len(evs) != 1 || evs[0].GetInteraction().GetId() != query {
		t.Fatalf("published %v, want the press once", evs)
	}
	if a := f.CallbackAnswers(); len(a) != 0 {
		t.Fatalf("answers %+v before the router's, want none yet", a)
	}
	const answer = "✅ Approved once"
	if err := platform.PublishPressAnswer(b, &deliveryv1.SendRequested{Target: &deliveryv1.Target{Platform: "telegram", Account: "4242", ChatId: "99",
		Interaction: evs[0].GetInteraction()}, Text: answer}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the query answered", 10*time.Second, func() bool { return len(f.CallbackAnswers()) == 1 })
	if a := f.CallbackAnswers()[0]; a.QueryID != query || a.Text != answer || time.Since(pressed) >= pressHold {
		t.Fatalf("answer %+v %v after the press, want the router's word before the hold ends", a, time.Since(pressed))
	}
}

// cutOffConn stores a press's first publish and reports it failed, as a
// publish whose acknowledgement was lost, and fails every later publish
// of it, as a replica cut off from the bus; lost is closed after that
// first publish.
type cutOffConn struct {
	platform.Conn
	lost chan struct{}
	once *sync.Once
}

func (c *cutOffConn) Deliver(ctx context.Context, ev *eventsv1.MessageReceived) (platform.Accepted, error) {
	if ev.GetInteraction() == nil {
		return c.Conn.Deliver(ctx, ev)
	}
	first := false
	c.once.Do(func() { first = true })
	if first {
		if _, err := c.Conn.Deliver(ctx, ev); err != nil {
			return platform.Accepted{}, err
		}
		close(c.lost)
	}
	return platform.Accepted{}, errors.New("publish: nats: timeout")
}

func (c *cutOffConn) HoldPress(id string) (*platform.PressHold, error) {
	return c.Conn.(platform.PressHolder).HoldPress(id)
}

// A press whose publish failed after the bus stored it, on a poller
// whose lease then moves before the retry, is still its first replica's
// to answer: the new poller, handed the press again and told it is a
// duplicate, leaves the query to that replica's hold, and the router's
// refusal of the stored press is the query's answer. Answered at once
// without text by the new poller, the query took no other answer, and
// the refusal was lost. With no word from the router at all (its
// answer, core NATS, lost), the replica holding the query answers it
// without text when its hold ends: the new poller left it to that hold.
func TestPressStoredByAFailedPublishWhenTheLeaseMoves(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		// pressHold is the gateways' press_hold; late: the lease moves
		// after the published press's hold would have ended; unanswered:
		// neither the router's answer nor its refusal comes.
		pressHold  time.Duration
		late       bool
		unanswered bool
	}{
		// The longest there is, so that the hold is found holding
		// however busy the machine.
		{name: "lease moves at once", pressHold: maxPressHold},
		{name: "lease moves after the press's hold", pressHold: 3 * time.Second, late: true},
		{name: "no word from the router", pressHold: 3 * time.Second, unanswered: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			pressStoredWhenTheLeaseMoves(t, tc.pressHold, tc.late, tc.unanswered)
		})
	}
}

func pressStoredWhenTheLeaseMoves(t *testing.T, pressHold time.Duration, late, unanswered bool) {
	f := newFake(t)
	b := bustest.New(t, bustest.EmbeddedURL(t))
	cfg := testConfig(f)
	cfg.LeaseTTL = time.Second
	cfg.PressHold = pressHold
	lost := make(chan struct{})
	sa, stopA := startWrapped(t, cfg, b, "a", func(c platform.Conn) platform.Conn {
		return &cutOffConn{Conn: c, lost: lost, once: &sync.Once{}}
	})
	waitFor(t, "a connected", 20*time.Second, func() bool { st, _ := sa.Runner().State(); return st == platform.StateConnected })
	sb, _ := startService(t, cfg, b, "b")
	waitFor(t, "b standing by", 20*time.Second, func() bool { st, _ := sb.Runner().State(); return st == platform.StateStandby })

	id, query := pressOnce(t, f, b)
	select {
	case <-lost:
	case <-time.After(10 * time.Second):
		t.Fatal("the press was not published")
	}
	if late {
		// Past the published press's end (its interaction's expires_at),
		// while a still holds it for its retry.
		time.Sleep(pressHold + 100*time.Millisecond)
	}
	// The lease moves: a stops polling (its process, and its hold of the
	// query, live on), and b polls the press again.
	stopA()
	waitFor(t, "b polling the press again", 20*time.Second, func() bool { return f.Confirmed() > id })
	evs := inbound(t, b)
	if len(evs) != 1 || evs[0].GetInteraction().GetId() != query {
		t.Fatalf("published %v, want the press once", evs)
	}
	if a := f.CallbackAnswers(); len(a) != 0 {
		t.Fatalf("answers %+v before the router's refusal, want none yet", a)
	}
	if unanswered {
		// a holds the query from b's question on, as it holds one for
		// its own retry, and answers it without text when that hold
		// ends. Let go when a's wait for a retry ran out (maxPressHold),
		// the query went unanswered: b had left it to a.
		waitFor(t, "the query answered", maxPressHold+pressHold, func() bool { return len(f.CallbackAnswers()) > 0 })
		if a := f.CallbackAnswers(); len(a) != 1 || a[0].QueryID != query || a[0].Text != "" {
			t.Fatalf("answers %+v, want the query answered without text", a)
		}
		return
	}
	const refusal = "⛔ You are not authorized to approve commands."
	r := sendReq(t, b, &deliveryv1.SendRequested{Op: deliveryv1.SendOp_SEND_OP_SEND, IdempotencyKey: "r1",
		Target: &deliveryv1.Target{Platform: "telegram", Account: "4242", ChatId: "99", Interaction: evs[0].GetInteraction()}, Text: refusal})
	if !r.GetOk() {
		t.Fatalf("refusal: %v", r)
	}
	waitFor(t, "the query answered", 10*time.Second, func() bool { return len(f.CallbackAnswers()) == 1 })
	if a := f.CallbackAnswers()[0]; a.QueryID != query || a.Text != refusal {
		t.Fatalf("answer %+v, want the refusal as the query's answer", a)
	}
}

// slowAnswers is the Bot API at target, whose answerCallbackQuery is
// held back until release is closed; answering is closed when the first
// one comes.
func slowAnswers(t *testing.T, target string) (url string, answering, release chan struct{}) {
	t.Helper()
	u, err := neturl.Parse(target)
	if err != nil {
		t.Fatal(err)
	}
	answering, release = make(chan struct{}), make(chan struct{})
	var once sync.Once
	proxy := httputil.NewSingleHostReverseProxy(u)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasSuffix(r.URL.Path, "/answerCallbackQuery") {
			once.Do(func() { close(answering) })
			select {
			case <-release:
			case <-time.After(10 * time.Second):
			}
		}
		proxy.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	return srv.URL, answering, release
}

// A replica that claimed a press's query to answer it with the router's
// refusal holds the press until that answer is made: a replica handed
// the press again meanwhile (the poller's lease moved, a webhook
// delivery retried elsewhere) and told it is a duplicate asks whether
// one holds it (platform.RetryPress), and leaves it to the refusal.
// Told none does, as it was once the claim had ended the hold, it
// answered the query at once without text, and the refusal, answered
// second, was lost.
func TestPressHeldWhileItsRefusalIsAnswered(t *testing.T) {
	t.Parallel()
	f := newFake(t)
	b := bustest.New(t, bustest.EmbeddedURL(t))
	cfg := testConfig(f)
	var answering, release chan struct{}
	cfg.APIBaseURL, answering, release = slowAnswers(t, f.URL)
	// The longest there is, so that the hold is found holding however
	// busy the machine.
	cfg.PressHold = maxPressHold
	s, _ := startService(t, cfg, b, "a")
	waitFor(t, "connected", 20*time.Second, func() bool { st, _ := s.Runner().State(); return st == platform.StateConnected })
	id, query := pressOnce(t, f, b)
	waitFor(t, "the press published", 10*time.Second, func() bool { return f.Confirmed() > id })
	evs := inbound(t, b)
	if len(evs) != 1 || evs[0].GetInteraction().GetId() != query {
		t.Fatalf("published %v, want the press once", evs)
	}
	const refusal = "⛔ You are not authorized to approve commands."
	refused := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		r := &deliveryv1.SendReceipt{}
		err := b.Request(ctx, b.Topology().SendSubject("telegram"), &deliveryv1.SendRequested{Op: deliveryv1.SendOp_SEND_OP_SEND, IdempotencyKey: "r1",
			Target: &deliveryv1.Target{Platform: "telegram", Account: "4242", ChatId: "99", Interaction: evs[0].GetInteraction()}, Text: refusal}, r)
		if err == nil && !r.GetOk() {
			err = fmt.Errorf("receipt %v", r)
		}
		refused <- err
	}()
	select {
	case <-answering:
	case <-time.After(10 * time.Second):
		t.Fatal("the refusal was not answered")
	}
	// The claim has ended the hold's wait by now; the refusal's answer
	// is still on its way to Telegram.
	time.Sleep(300 * time.Millisecond)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	held, err := platform.RetryPress(ctx, b, "telegram", query)
	close(release)
	if err != nil || !held {
		t.Errorf("asked while the refusal is answered: held %v, %v; want held", held, err)
	}
	if err := <-refused; err != nil {
		t.Fatalf("refusal: %v", err)
	}
	if a := f.CallbackAnswers(); len(a) != 1 || a[0].QueryID != query || a[0].Text != refusal {
		t.Fatalf("answers %+v, want the refusal as the query's answer", a)
	}
}

// fastRouterConn answers a press (the router's word, answer) as soon as
// a handling has stored it, as a router deciding it within the
// publish's round trip, and holds back the hold of a press (which comes
// before its publish) until Telegram's second delivery of it has found
// it held (query.again) and published it; a second delivery that waits
// for the hold instead does not publish, and the hold goes on after a
// second.
type fastRouterConn struct {
	platform.Conn
	b         *bus.Bus
	p         *Platform
	answer    string
	published chan struct{}
	once      *sync.Once
}

func (c *fastRouterConn) HoldPress(id string) (*platform.PressHold, error) {
	for end := time.Now().Add(10 * time.Second); time.Now().Before(end); time.Sleep(5 * time.Millisecond) {
		c.p.heldMu.Lock()
		again := c.p.held[id] != nil && c.p.held[id].again
		c.p.heldMu.Unlock()
		if again {
			break
		}
	}
	select {
	case <-c.published:
	case <-time.After(time.Second):
	}
	return c.Conn.(platform.PressHolder).HoldPress(id)
}

func (c *fastRouterConn) Deliver(ctx context.Context, ev *eventsv1.MessageReceived) (platform.Accepted, error) {
	acc, err := c.Conn.Deliver(ctx, ev)
	if err != nil || ev.GetInteraction() == nil || acc.Duplicate {
		return acc, err
	}
	if err := platform.PublishPressAnswer(c.b, &deliveryv1.SendRequested{Target: &deliveryv1.Target{Platform: "telegram", Account: "4242", ChatId: "99",
		Interaction: ev.GetInteraction()}, Text: c.answer}); err != nil {
		return acc, err
	}
	c.once.Do(func() { close(c.published) })
	return acc, nil
}

// Of two webhook deliveries of one press at once, the second, which
// finds the press held by the first (query.again), publishes it only
// once the first holds it for the router's answer: a router that
// answers within the publish's round trip is heard. Published before
// the first's hold had subscribed, the router's word was lost, and the
// query answered without text when the hold ended.
func TestPressDeliveredAgainBeforeItsHoldSubscribes(t *testing.T) {
	t.Parallel()
	f := newFake(t)
	b := bustest.New(t, bustest.EmbeddedURL(t))
	cfg := webhookConfig(t, f)
	cfg.PressHold = 3 * time.Second
	const answer = "✅ Approved once"
	var tp *Platform
	s, _ := startWrappedWith(t, cfg, b, "a", func(p *Platform) { tp = p }, func(c platform.Conn) platform.Conn {
		return &fastRouterConn{Conn: c, b: b, p: tp, answer: answer, published: make(chan struct{}), once: &sync.Once{}}
	})
	waitFor(t, "connected", 20*time.Second, func() bool { st, _ := s.Runner().State(); return st == platform.StateConnected })
	id, query := pressOnce(t, f, b)
	var wg sync.WaitGroup
	for range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if code, err := f.Push(context.Background(), id); err != nil || code != http.StatusOK {
				t.Errorf("push: %d %v", code, err)
			}
		}()
	}
	wg.Wait()
	if evs := inbound(t, b); len(evs) != 1 || evs[0].GetInteraction().GetId() != query {
		t.Fatalf("published %v, want the press once", evs)
	}
	waitFor(t, "the query answered", 10*time.Second, func() bool { return len(f.CallbackAnswers()) == 1 })
	if a := f.CallbackAnswers(); len(a) != 1 || a[0].QueryID != query || a[0].Text != answer {
		t.Fatalf("answers %+v, want the router's word as the query's answer", a)
	}
}

// A press whose publish failed here (stored all the same), held for its
// retry (awaitRetry), whose wait for the retry runs out just as another
// replica handed the press again asks whether one holds it: told it is
// held, that replica leaves the query to this one, which answers it.
// Let go after saying it held it, nobody answered the query.
func TestPressAskedForAsItsRetryWaitRunsOut(t *testing.T) {
	t.Parallel()
	f := newFake(t)
	b := bustest.New(t, bustest.EmbeddedURL(t))
	cfg := webhookConfig(t, f)
	cfg.PressHold = 2 * time.Second
	type answer struct {
		held bool
		err  error
	}
	asked := make(chan answer, 1)
	lost := make(chan struct{})
	s, _ := startWrappedWith(t, cfg, b, "a", func(p *Platform) {
		// Another replica asks in the window between the wait's end
		// and its let-go.
		p.retryWaitOver = func(id string) {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			held, err := platform.RetryPress(ctx, b, "telegram", id)
			asked <- answer{held, err}
		}
	}, func(c platform.Conn) platform.Conn {
		return &cutOffConn{Conn: c, lost: lost, once: &sync.Once{}}
	})
	waitFor(t, "connected", 20*time.Second, func() bool { st, _ := s.Runner().State(); return st == platform.StateConnected })
	id, query := pressOnce(t, f, b)
	if code, err := f.Push(context.Background(), id); err != nil || code != http.StatusInternalServerError {
		t.Fatalf("push: %d %v, want the publish failed", code, err)
	}
	var a answer
	select {
	case a = <-asked:
	case <-time.After(maxPressHold + 10*time.Second):
		t.Fatal("the wait for the press's retry did not run out")
	}
	if a.err != nil || !a.held {
		t.Fatalf("asked as the wait ran out: held %v, %v; want held", a.held, a.err)
	}
	waitFor(t, "the query answered", cfg.PressHold+10*time.Second, func() bool { return len(f.CallbackAnswers()) > 0 })
	if ans := f.CallbackAnswers(); len(ans) != 1 || ans[0].QueryID != query || ans[0].Text != "" {
		t.Fatalf("answers %+v, want the query answered once without text", ans)
	}
}

// killableAPI is the Bot API at target until kill is closed, and then
// no Bot API at all: a replica whose process died answers nothing.
func killableAPI(t *testing.T, target string) (url string, kill chan struct{}) {
	t.Helper()
	u, err := neturl.Parse(target)
	if err != nil {
		t.Fatal(err)
	}
	kill = make(chan struct{})
	proxy := httputil.NewSingleHostReverseProxy(u)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-kill:
			http.Error(w, "dead", http.StatusBadGateway)
			return
		default:
		}
		proxy.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	return srv.URL, kill
}

// A replica that told another it holds a press (platform.RetryPress)
// and then dies before it answers the press's query leaves the query to
// the replica that asked: that one sees the press held no more without
// its holder's word that it answered, and answers the query itself.
// Left to the dead holder, the query went unanswered, its spinner on
// until it expired.
func TestPressHolderDiesAfterSayingItHoldsThePress(t *testing.T) {
	t.Parallel()
	f := newFake(t)
	d := pressHeldByAMortalReplica(t, f, true)
	// The lease moves; b, handed the press again and told it is a
	// duplicate, asks, and a says it holds it.
	d.stopA()
	waitFor(t, "b polling the press again", 20*time.Second, func() bool { return f.Confirmed() > d.id })
	if a := f.CallbackAnswers(); len(a) != 0 {
		t.Fatalf("answers %+v while a holds the press, want none yet", a)
	}
	// a dies: it answers nothing, and its connection to the bus closes.
	close(d.kill)
	d.ba.Conn().Close()
	waitFor(t, "the query answered", maxPressHold, func() bool { return len(f.CallbackAnswers()) > 0 })
	if a := f.CallbackAnswers(); len(a) != 1 || a[0].QueryID != d.query || a[0].Text != "" {
		t.Fatalf("answers %+v, want the query answered once without text", a)
	}
}

// mortalHolder is a replica, a, that holds a press's query on a bus
// connection of its own (ba), which its death closes, whose calls to
// Telegram fail once kill is closed, and which stops polling at stopA;
// the press (the fake's update id, its query id) was published by a.
// b, the test's bus, is the other replicas'; cfg their configuration.
type mortalHolder struct {
	b, ba *bus.Bus
	cfg   Config
	kill  chan struct{}
	stopA func()
	id    int64
	query string
}

// pressHeldByAMortalReplica starts a (mortalHolder) with the longest
// press hold there is (a, alive, answers only when its hold ends) and a
// 1 s lease, and, with standby, a replica b standing by to take the
// lease over; then a press of an approval card, which a holds.
func pressHeldByAMortalReplica(t *testing.T, f *telegramfake.Server, standby bool) *mortalHolder {
	t.Helper()
	url := bustest.EmbeddedURL(t)
	d := &mortalHolder{b: bustest.New(t, url)}
	d.ba = bustest.NewWith(t, url, d.b.Topology())
	d.cfg = testConfig(f)
	d.cfg.LeaseTTL = time.Second
	d.cfg.PressHold = maxPressHold
	cfgA := d.cfg
	cfgA.APIBaseURL, d.kill = killableAPI(t, f.URL)
	lost := make(chan struct{})
	var sa *platform.Service
	sa, d.stopA = startWrapped(t, cfgA, d.ba, "a", func(c platform.Conn) platform.Conn {
		return &cutOffConn{Conn: c, lost: lost, once: &sync.Once{}}
	})
	waitFor(t, "a connected", 20*time.Second, func() bool { st, _ := sa.Runner().State(); return st == platform.StateConnected })
	if standby {
		sb, _ := startService(t, d.cfg, d.b, "b")
		waitFor(t, "b standing by", 20*time.Second, func() bool { st, _ := sb.Runner().State(); return st == platform.StateStandby })
	}
	card := sendApprovalCard(t, f, d.b)
	var err error
	d.id, d.query, err = f.Press("99", card.ID, alice, "ea:once:call_1")
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-lost:
	case <-time.After(10 * time.Second):
		t.Fatal("the press was not published")
	}
	return d
}

// pressOnce sends an approval card to chat 99 and has alice press its
// "once" button: the update's id and its callback query's.
func pressOnce(t *testing.T, f *telegramfake.Server, b *bus.Bus) (int64, string) {
	t.Helper()
	card := sendApprovalCard(t, f, b)
	id, query, err := f.Press("99", card.ID, alice, "ea:once:call_1")
	if err != nil {
		t.Fatal(err)
	}
	return id, query
}

// publishedOnce waits for the gateway to confirm update id, the press of
// query, and returns what it published: that press, once.
func publishedOnce(t *testing.T, f *telegramfake.Server, b *bus.Bus, id int64, query string) []*eventsv1.MessageReceived {
	t.Helper()
	waitFor(t, "the press published", 20*time.Second, func() bool { return f.Confirmed() > id })
	evs := inbound(t, b)
	if len(evs) != 1 || evs[0].GetInteraction().GetId() != query {
		t.Fatalf("published %v, want the press once", evs)
	}
	return evs
}

// countedAnswers is the Bot API at target, counting its
// answerCallbackQuery calls (also those Telegram refuses, which the
// fake does not record).
func countedAnswers(t *testing.T, target string) (url string, calls *atomic.Int32) {
	t.Helper()
	u, err := neturl.Parse(target)
	if err != nil {
		t.Fatal(err)
	}
	calls = &atomic.Int32{}
	proxy := httputil.NewSingleHostReverseProxy(u)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasSuffix(r.URL.Path, "/answerCallbackQuery") {
			calls.Add(1)
		}
		proxy.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	return srv.URL, calls
}

// A replica that left a press's query to the replica holding it
// (heldElsewhere) and watches it hears the holder's word that it
// answered the query with the router's word (PressHold.Answered), and
// does not answer it again. Closed without the word, the hold looked
// like a dead holder's, and the watcher answered the query a second
// time: refused by Telegram when it came second, the router's text
// lost when it came first.
func TestPressLeftToItsHolderIsAnsweredOnce(t *testing.T) {
	t.Parallel()
	f := newFake(t)
	b := bustest.New(t, bustest.EmbeddedURL(t))
	cfg := testConfig(f)
	cfg.LeaseTTL = time.Second
	cfg.PressHold = maxPressHold
	lost := make(chan struct{})
	sa, stopA := startWrapped(t, cfg, b, "a", func(c platform.Conn) platform.Conn {
		return &cutOffConn{Conn: c, lost: lost, once: &sync.Once{}}
	})
	waitFor(t, "a connected", 20*time.Second, func() bool { st, _ := sa.Runner().State(); return st == platform.StateConnected })
	cfgB := cfg
	var calls *atomic.Int32
	cfgB.APIBaseURL, calls = countedAnswers(t, f.URL)
	type watched struct {
		id       string
		answered bool
	}
	over := make(chan watched, 1)
	sb, _ := startWrappedWith(t, cfgB, b, "b", func(p *Platform) {
		p.watchOver = func(id string, answered bool) { over <- watched{id, answered} }
	}, func(c platform.Conn) platform.Conn { return c })
	waitFor(t, "b standing by", 20*time.Second, func() bool { st, _ := sb.Runner().State(); return st == platform.StateStandby })

	id, query := pressOnce(t, f, b)
	select {
	case <-lost:
	case <-time.After(10 * time.Second):
		t.Fatal("the press was not published")
	}
	// The lease moves; b, handed the press again and told it is a
	// duplicate, leaves it to a's hold and watches it.
	stopA()
	waitFor(t, "b polling the press again", 20*time.Second, func() bool { return f.Confirmed() > id })
	evs := inbound(t, b)
	if len(evs) != 1 || evs[0].GetInteraction().GetId() != query {
		t.Fatalf("published %v, want the press once", evs)
	}
	const word = "✅ Approved once"
	if err := platform.PublishPressAnswer(b, &deliveryv1.SendRequested{Target: &deliveryv1.Target{Platform: "telegram", Account: "4242", ChatId: "99",
		Interaction: evs[0].GetInteraction()}, Text: word}); err != nil {
		t.Fatal(err)
	}
	var w watched
	select {
	case w = <-over:
	case <-time.After(maxPressHold + answerTimeout + 10*time.Second):
		t.Fatal("b's watch of the press did not end")
	}
	if w.id != query || !w.answered {
		t.Errorf("b's watch of %q over, answered %v; want %q answered by its holder", w.id, w.answered, query)
	}
	if n := calls.Load(); n != 0 {
		t.Errorf("b answered the query %d times, want none: its holder answered it", n)
	}
	if a := f.CallbackAnswers(); len(a) != 1 || a[0].QueryID != query || a[0].Text != word {
		t.Fatalf("answers %+v, want the router's word as the query's answer", a)
	}
}

// askedDuplicateConn publishes a press twice, so that its handling is
// told it is a duplicate (a press decided before, Telegram sending it
// again), and between the two publishes calls asked, as another replica
// handed the press again asks whether one holds it.
type askedDuplicateConn struct {
	platform.Conn
	asked func(id string)
}

func (c *askedDuplicateConn) Deliver(ctx context.Context, ev *eventsv1.MessageReceived) (platform.Accepted, error) {
	if ev.GetInteraction() == nil {
		return c.Conn.Deliver(ctx, ev)
	}
	if _, err := c.Conn.Deliver(ctx, ev); err != nil {
		return platform.Accepted{}, err
	}
	c.asked(ev.GetInteraction().GetId())
	return c.Conn.Deliver(ctx, ev)
}

func (c *askedDuplicateConn) HoldPress(id string) (*platform.PressHold, error) {
	return c.Conn.(platform.PressHolder).HoldPress(id)
}

// A handling of a press the bus says is a duplicate, whose hold told
// another replica handed the press again that the press is held here
// (platform.RetryPress), answers the query, and that replica, watching
// (platform.PressWatch), hears once it is answered that it need not:
// the query is this handling's. Its hold closed before its answer and
// without its word, the press looked held by no one without the word,
// and the watcher answered the query too.
func TestPressDuplicateAskedForWhileHeld(t *testing.T) {
	t.Parallel()
	f := newFake(t)
	b := bustest.New(t, bustest.EmbeddedURL(t))
	cfg := webhookConfig(t, f)
	var answering, release chan struct{}
	cfg.APIBaseURL, answering, release = slowAnswers(t, f.URL)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	watched := make(chan bool, 1)
	s, _ := startWrapped(t, cfg, b, "a", func(c platform.Conn) platform.Conn {
		return &askedDuplicateConn{Conn: c, asked: func(id string) {
			w, err := platform.WatchPress(b, "telegram", id)
			if err != nil {
				t.Error(err)
				return
			}
			if held, err := platform.RetryPress(ctx, b, "telegram", id); err != nil || !held {
				t.Errorf("asked while the press is held here: held %v, %v", held, err)
			}
			go func() {
				defer w.Close()
				// As watchHolder watches, asking more often.
				watched <- w.Wait(ctx, maxPressHold+answerTimeout, 10*time.Millisecond, holderGrace)
			}()
		}}
	})
	waitFor(t, "connected", 20*time.Second, func() bool { st, _ := s.Runner().State(); return st == platform.StateConnected })
	id, query := pressOnce(t, f, b)
	go func() {
		if code, err := f.Push(context.Background(), id); err != nil || code != http.StatusOK {
			t.Errorf("push: %d %v", code, err)
		}
	}()
	select {
	case <-answering:
	case <-time.After(20 * time.Second):
		t.Fatal("the query was not answered")
	}
	// The watcher asks many times while the handling's answer is on its
	// way, the hold closed (its answer's word comes after the answer),
	// and waits for its word, the holder's absence shorter than the
	// watcher's grace.
	select {
	case said := <-watched:
		t.Fatalf("the watch ended (said %v) before the holder's answer was taken", said)
	case <-time.After(holderGrace / 3):
	}
	close(release)
	var said bool
	select {
	case said = <-watched:
	case <-time.After(maxPressHold + answerTimeout + 5*time.Second):
		t.Fatal("the watch did not end")
	}
	if !said {
		t.Error("the watcher found the press held by no one without its holder's word while the holder answered it: it answers the query too")
	}
	waitFor(t, "the query answered", 10*time.Second, func() bool { return len(f.CallbackAnswers()) == 1 })
	if a := f.CallbackAnswers(); a[0].QueryID != query || a[0].Text != "" {
		t.Fatalf("answers %+v, want the query answered without text", a)
	}
}

// A holder whose own answer to Telegram failed for good says nothing on
// the press's answered subject: the replica that left the query to it,
// watching, finds the hold gone without the word and answers the query
// itself. A refusal that means no one can answer the query any more
// (Telegram's "query is too old ... or query ID is invalid") is the
// query's end, said as answered: the watcher leaves it. Said answered
// whatever Telegram replied, the failed answer left the query to no one,
// its spinner on until it expired. A failure that passes (a 5xx) is the
// holder's to try again, the hold on meanwhile: the query is answered
// with the router's word, and the watcher leaves it.
func TestPressHolderWhoseAnswerFailed(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		// fail is Telegram's reply to the holder's answer.
		fail telegramfake.APIError
		// watcherAnswers: the watcher answers the query (without text);
		// holderAnswers: the holder answers it with the router's word.
		watcherAnswers, holderAnswers bool
	}{
		{name: "server error", fail: telegramfake.APIError{Code: 500, Description: "Internal Server Error"}, holderAnswers: true},
		{name: "bad request", fail: telegramfake.APIError{Code: 400, Description: "Bad Request: invalid callback query answer"}, watcherAnswers: true},
		{name: "query too old", fail: telegramfake.APIError{Code: 400, Description: "Bad Request: query is too old and response timeout expired or query ID is invalid"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f := newFake(t)
			b := bustest.New(t, bustest.EmbeddedURL(t))
			cfg := testConfig(f)
			cfg.LeaseTTL = time.Second
			cfg.PressHold = maxPressHold
			lost := make(chan struct{})
			sa, stopA := startWrapped(t, cfg, b, "a", func(c platform.Conn) platform.Conn {
				return &cutOffConn{Conn: c, lost: lost, once: &sync.Once{}}
			})
			waitFor(t, "a connected", 20*time.Second, func() bool { st, _ := sa.Runner().State(); return st == platform.StateConnected })
			cfgB := cfg
			var calls *atomic.Int32
			cfgB.APIBaseURL, calls = countedAnswers(t, f.URL)
			over := make(chan bool, 1)
			sb, _ := startWrappedWith(t, cfgB, b, "b", func(p *Platform) {
				p.watchOver = func(_ string, answered bool) { over <- answered }
			}, func(c platform.Conn) platform.Conn { return c })
			waitFor(t, "b standing by", 20*time.Second, func() bool { st, _ := sb.Runner().State(); return st == platform.StateStandby })

			id, query := pressOnce(t, f, b)
			select {
			case <-lost:
			case <-time.After(10 * time.Second):
				t.Fatal("the press was not published")
			}
			stopA()
			waitFor(t, "b polling the press again", 20*time.Second, func() bool { return f.Confirmed() > id })
			evs := inbound(t, b)
			if len(evs) != 1 || evs[0].GetInteraction().GetId() != query {
				t.Fatalf("published %v, want the press once", evs)
			}
			// a's answer with the router's word is the next one Telegram
			// gets: b left the query to a.
			f.FailNext("answerCallbackQuery", tc.fail)
			if err := platform.PublishPressAnswer(b, &deliveryv1.SendRequested{Target: &deliveryv1.Target{Platform: "telegram", Account: "4242", ChatId: "99",
				Interaction: evs[0].GetInteraction()}, Text: "✅ Approved once"}); err != nil {
				t.Fatal(err)
			}
			var said bool
			select {
			case said = <-over:
			case <-time.After(maxPressHold + answerTimeout + 10*time.Second):
				t.Fatal("b's watch of the press did not end")
			}
			if said == tc.watcherAnswers {
				t.Errorf("b's watch over, holder said answered %v; want %v", said, !tc.watcherAnswers)
			}
			want := int32(0)
			if tc.watcherAnswers {
				want = 1
			}
			if n := calls.Load(); n != want {
				t.Errorf("b answered the query %d times, want %d", n, want)
			}
			if tc.holderAnswers {
				if a := f.CallbackAnswers(); len(a) != 1 || a[0].QueryID != query || a[0].Text != "✅ Approved once" {
					t.Fatalf("answers %+v, want the router's word as the query's answer", a)
				}
			}
			if !tc.watcherAnswers {
				return
			}
			if a := f.CallbackAnswers(); len(a) != 1 || a[0].QueryID != query || a[0].Text != "" {
				t.Fatalf("answers %+v, want the query answered once without text by b", a)
			}
		})
	}
}

// A replica that stops while it holds a press's query ends the hold with
// it: it answers the query on its way out, without text (the router's
// word can no longer reach it), and holds nothing after, so a replica
// handed the press again is not told it is held by a replica that is
// gone. Left to its own bound, the hold outlived the service by up to
// maxPressHold, and its query was answered after the replica stopped.
func TestPressHeldWhenTheReplicaStops(t *testing.T) {
	t.Parallel()
	f := newFake(t)
	b := bustest.New(t, bustest.EmbeddedURL(t))
	cfg := testConfig(f)
	cfg.PressHold = maxPressHold
	s, stop := startService(t, cfg, b, "a")
	waitFor(t, "connected", 20*time.Second, func() bool { st, _ := s.Runner().State(); return st == platform.StateConnected })
	card := sendApprovalCard(t, f, b)
	if _, _, err := f.Press("99", card.ID, alice, "ea:once:call_1"); err != nil {
		t.Fatal(err)
	}
	var query string
	waitFor(t, "the press published", 20*time.Second, func() bool {
		evs := inbound(t, b)
		if len(evs) == 1 {
			query = evs[0].GetInteraction().GetId()
		}
		return query != ""
	})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	waitFor(t, "the press held", 10*time.Second, func() bool {
		held, err := platform.RetryPress(ctx, b, "telegram", query)
		return err == nil && held
	})
	stop()
	if held, err := platform.RetryPress(ctx, b, "telegram", query); err != nil || held {
		t.Errorf("asked after the replica stopped: held %v, %v; want held by no one", held, err)
	}
	if a := f.CallbackAnswers(); len(a) != 1 || a[0].QueryID != query || a[0].Text != "" {
		t.Fatalf("answers %+v once the replica stopped, want the query answered once without text", a)
	}
}

// A replica that stops while it watches the replica it left a press's
// query to ends its watch with it: when the holder is gone without its
// word, it answers the query on its way out, without text; when the
// holder still holds it, it leaves the query to that holder. Left to
// its own bound, the watch outlived the service.
func TestPressWatchedWhenTheReplicaStops(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		// holderGone: the holder's connection to the bus closes before
		// the watcher stops.
		holderGone bool
	}{{"holder holds", false}, {"holder gone", true}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f := newFake(t)
			url := bustest.EmbeddedURL(t)
			b := bustest.New(t, url)
			ba := bustest.NewWith(t, url, b.Topology())
			cfg := testConfig(f)
			cfg.LeaseTTL = time.Second
			cfg.PressHold = maxPressHold
			cfgA := cfg
			var kill chan struct{}
			cfgA.APIBaseURL, kill = killableAPI(t, f.URL)
			lost := make(chan struct{})
			sa, stopA := startWrapped(t, cfgA, ba, "a", func(c platform.Conn) platform.Conn {
				return &cutOffConn{Conn: c, lost: lost, once: &sync.Once{}}
			})
			waitFor(t, "a connected", 20*time.Second, func() bool { st, _ := sa.Runner().State(); return st == platform.StateConnected })
			cfgB := cfg
			var calls *atomic.Int32
			cfgB.APIBaseURL, calls = countedAnswers(t, f.URL)
			over := make(chan bool, 1)
			sb, stopB := startWrappedGateway(t, cfgB, b, "b", func(p *Platform) {
				p.watchOver = func(_ string, answered bool) { over <- answered }
			}, func(c platform.Conn) platform.Conn { return c })
			waitFor(t, "b standing by", 20*time.Second, func() bool { st, _ := sb.Runner().State(); return st == platform.StateStandby })

			id, query := pressOnce(t, f, b)
			select {
			case <-lost:
			case <-time.After(10 * time.Second):
				t.Fatal("the press was not published")
			}
			stopA()
			waitFor(t, "b polling the press again", 20*time.Second, func() bool { return f.Confirmed() > id })
			if tc.holderGone {
				// a dies; b stops within its grace, before it would take
				// the query over.
				close(kill)
				ba.Conn().Close()
			}
			stopB()
			select {
			case <-over:
			default:
				t.Fatal("b's watch of the press outlived b")
			}
			want := int32(0)
			if tc.holderGone {
				want = 1
			}
			if n := calls.Load(); n != want {
				t.Errorf("b answered the query %d times on its way out, want %d", n, want)
			}
			if tc.holderGone {
				if a := f.CallbackAnswers(); len(a) != 1 || a[0].QueryID != query || a[0].Text != "" {
					t.Fatalf("answers %+v, want the query answered once without text by b", a)
				}
			}
		})
	}
}

// A replica that left a press's query to a holder that neither answers
// it nor goes away (a stuck replica, or one whose answer hangs) answers
// the query itself at the watch's bound, while Telegram still takes an
// answer (about 15 s after the press). Bound at a hold's longest and
// its answer's (20 s), the last-resort answer came after Telegram had
// closed the query, and was refused.
func TestPressWatchEndsWhileTheQueryIsOpen(t *testing.T) {
	t.Parallel()
	f := newFake(t)
	f.SetQueryLife(queryAnswerable)
	b := bustest.New(t, bustest.EmbeddedURL(t))
	cfg := webhookConfig(t, f)
	var stuck *platform.PressHold
	defer func() { stuck.Close() }()
	over := make(chan bool, 1)
	s, _ := startWrappedWith(t, cfg, b, "a", func(p *Platform) {
		p.watchOver = func(_ string, answered bool) { over <- answered }
	}, func(c platform.Conn) platform.Conn {
		return &askedDuplicateConn{Conn: c, asked: func(id string) {
			// Another replica holds the press and never answers it.
			h, err := platform.HoldPress(b, "telegram", id)
			if err != nil {
				t.Error(err)
				return
			}
			stuck = h
		}}
	})
	waitFor(t, "connected", 20*time.Second, func() bool { st, _ := s.Runner().State(); return st == platform.StateConnected })
	id, query := pressOnce(t, f, b)
	if code, err := f.Push(context.Background(), id); err != nil || code != http.StatusOK {
		t.Fatalf("push: %d %v", code, err)
	}
	select {
	case said := <-over:
		if said {
			t.Fatal("the watch says the stuck holder answered the query")
		}
	case <-time.After(maxPressHold + answerTimeout + 10*time.Second):
		t.Fatal("the watch did not end")
	}
	if a := f.CallbackAnswers(); len(a) != 1 || a[0].QueryID != query || a[0].Text != "" {
		t.Fatalf("answers %+v, want the query answered once without text while Telegram takes it", a)
	}
}

// A handling of a press the bus says is a duplicate, whose hold told
// another replica handed the press again that the press is held here,
// tells that replica the query is answered only once it is: when its
// own answer settled it (tried again after a failure that passes), or
// when it leaves the query to a third replica that holds the press and
// watches that one itself. Said before its answer, as it was, a failed
// answer left the query to no one: the replica told "held here" left
// it, its spinner on until it expired.
func TestPressDuplicateAskedForTellsItsAsker(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		// fail: Telegram's replies to the handling's first answers.
		fail []telegramfake.APIError
		// heldElsewhere: a third replica holds the press, and dies
		// after the asker's watch ended.
		heldElsewhere bool
		// askerLeaves: the asker's watch hears that the query needs
		// no answer from it.
		askerLeaves bool
	}{
		{name: "answered", askerLeaves: true},
		{name: "answer failed", fail: []telegramfake.APIError{{Code: 400, Description: "Bad Request: invalid callback query answer"}}},
		{name: "answer failed for a while", fail: []telegramfake.APIError{{Code: 500, Description: "Internal Server Error"}}, askerLeaves: true},
		{name: "held elsewhere", heldElsewhere: true, askerLeaves: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f := newFake(t)
			b := bustest.New(t, bustest.EmbeddedURL(t))
			cfg := webhookConfig(t, f)
			ctx, cancel := context.WithTimeout(context.Background(), 40*time.Second)
			defer cancel()
			watched := make(chan bool, 1)
			over := make(chan bool, 1)
			var third *platform.PressHold
			defer func() { third.Close() }()
			s, _ := startWrappedWith(t, cfg, b, "a", func(p *Platform) {
				p.watchOver = func(_ string, answered bool) { over <- answered }
			}, func(c platform.Conn) platform.Conn {
				return &askedDuplicateConn{Conn: c, asked: func(id string) {
					if tc.heldElsewhere {
						h, err := platform.HoldPress(b, "telegram", id)
						if err != nil {
							t.Error(err)
							return
						}
						third = h
					}
					for _, e := range tc.fail {
						f.FailNext("answerCallbackQuery", e)
					}
					w, err := platform.WatchPress(b, "telegram", id)
					if err != nil {
						t.Error(err)
						return
					}
					if held, err := platform.RetryPress(ctx, b, "telegram", id); err != nil || !held {
						t.Errorf("asked while the press is held here: held %v, %v", held, err)
					}
					go func() {
						defer w.Close()
						// As watchHolder watches, asking more often.
						watched <- w.Wait(ctx, maxPressHold+answerTimeout, 10*time.Millisecond, holderGrace)
					}()
				}}
			})
			waitFor(t, "connected", 20*time.Second, func() bool { st, _ := s.Runner().State(); return st == platform.StateConnected })
			id, query := pressOnce(t, f, b)
			if code, err := f.Push(context.Background(), id); err != nil || code != http.StatusOK {
				t.Fatalf("push: %d %v", code, err)
			}
			select {
			case left := <-watched:
				if left != tc.askerLeaves {
					t.Errorf("the asker's watch says the query needs no answer from it: %v, want %v", left, tc.askerLeaves)
				}
			case <-time.After(maxPressHold + answerTimeout + 5*time.Second):
				t.Fatal("the asker's watch did not end")
			}
			if !tc.heldElsewhere {
				return
			}
			// The handling watches the third replica itself, and its own
			// word to the asker is not taken for that replica's: the
			// third replica dies unanswered, and it answers the query.
			third.Close()
			select {
			case answered := <-over:
				if answered {
					t.Fatal("the handling's watch says the dead holder answered the query")
				}
			case <-time.After(maxPressHold + answerTimeout + 5*time.Second):
				t.Fatal("the handling's watch did not end")
			}
			if a := f.CallbackAnswers(); len(a) != 1 || a[0].QueryID != query || a[0].Text != "" {
				t.Fatalf("answers %+v, want the query answered once without text", a)
			}
		})
	}
}

// stoppingRouterConn publishes a press, has the router's answer with
// text reach its hold, and then stops the gateway's holds and watches
// (Platform.stopPresses), as a replica stopping then does; failed, it
// reports the publish failed (the bus stored it), and the press is held
// for its retry (awaitRetry).
type stoppingRouterConn struct {
	platform.Conn
	t      *testing.T
	b      *bus.Bus
	p      *Platform
	answer string
	failed bool
}

func (c *stoppingRouterConn) Deliver(ctx context.Context, ev *eventsv1.MessageReceived) (platform.Accepted, error) {
	acc, err := c.Conn.Deliver(ctx, ev)
	if err != nil || ev.GetInteraction() == nil {
		return acc, err
	}
	id := ev.GetInteraction().GetId()
	if err := platform.PublishPressAnswer(c.b, &deliveryv1.SendRequested{Target: &deliveryv1.Target{Platform: "telegram", Account: "4242", ChatId: "99",
		Interaction: ev.GetInteraction()}, Text: c.answer}); err != nil {
		return acc, err
	}
	// The hold has the answer once it can give it to an asker.
	for end := time.Now().Add(10 * time.Second); ; {
		actx, cancel := context.WithTimeout(ctx, time.Second)
		req, err := platform.AskPress(actx, c.b, "telegram", id)
		cancel()
		if err == nil && req != nil {
			break
		}
		if time.Now().After(end) {
			c.t.Errorf("the hold of %s did not get the router's answer", id)
			break
		}
	}
	c.p.stopPresses()
	if c.failed {
		return platform.Accepted{}, errors.New("publish: nats: timeout")
	}
	return acc, nil
}

func (c *stoppingRouterConn) HoldPress(id string) (*platform.PressHold, error) {
	return c.Conn.(platform.PressHolder).HoldPress(id)
}

// A hold that has the router's answer when its replica stops answers
// the query with it, whether the press is held for that answer or, its
// publish failed, for its retry (awaitRetry). The stop and the answer
// both at hand, the hold picked either: half the time the query was
// answered without text, or, waiting for the retry, let go unanswered
// with the router's answer in hand.
func TestPressAnsweredAsTheReplicaStops(t *testing.T) {
	t.Parallel()
	const answer = "✅ Approved once"
	// presses: each press's hold picked the stop with even odds.
	const presses = 8
	for _, tc := range []struct {
		name   string
		failed bool
	}{{"held", false}, {"held for its retry", true}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f := newFake(t)
			b := bustest.New(t, bustest.EmbeddedURL(t))
			cfg := webhookConfig(t, f)
			cfg.PressHold = maxPressHold
			var tp *Platform
			s, _ := startWrappedWith(t, cfg, b, "a", func(p *Platform) { tp = p }, func(c platform.Conn) platform.Conn {
				return &stoppingRouterConn{Conn: c, t: t, b: b, p: tp, answer: answer, failed: tc.failed}
			})
			waitFor(t, "connected", 20*time.Second, func() bool { st, _ := s.Runner().State(); return st == platform.StateConnected })
			card := sendApprovalCard(t, f, b)
			queries := map[string]bool{}
			for range presses {
				id, query, err := f.Press("99", card.ID, alice, "ea:once:call_1")
				if err != nil {
					t.Fatal(err)
				}
				queries[query] = true
				if _, err := f.Push(context.Background(), id); err != nil {
					t.Fatalf("push: %v", err)
				}
			}
			// Each press's hold answered before its handling returned
			// (the gateway stopped, the hold ran on the handling's own
			// goroutine).
			a := f.CallbackAnswers()
			got := map[string]string{}
			for _, x := range a {
				got[x.QueryID] = x.Text
			}
			for q := range queries {
				if text, ok := got[q]; !ok || text != answer {
					t.Errorf("query %s answered %v with %q, want the router's word", q, ok, text)
				}
			}
			if len(a) != presses {
				t.Errorf("%d answers, want %d", len(a), presses)
			}
		})
	}
}

// answerTimes is the Bot API at target, recording when each of its
// answerCallbackQuery calls came (also those the fake fails or refuses).
func answerTimes(t *testing.T, target string) (url string, times func() []time.Time) {
	t.Helper()
	u, err := neturl.Parse(target)
	if err != nil {
		t.Fatal(err)
	}
	var (
		mu  sync.Mutex
		got []time.Time
	)
	proxy := httputil.NewSingleHostReverseProxy(u)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasSuffix(r.URL.Path, "/answerCallbackQuery") {
			mu.Lock()
			got = append(got, time.Now())
			mu.Unlock()
		}
		proxy.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	return srv.URL, func() []time.Time {
		mu.Lock()
		defer mu.Unlock()
		return append([]time.Time(nil), got...)
	}
}

// A holder whose answer to a press's query fails for a while (a 5xx, a
// flood wait, the network) tries it again, waiting out a 429's
// retry_after, while Telegram still takes the answer: the query is
// answered with the router's word, once. A refusal that Telegram means
// (a 400) is not tried again. Tried once, a transient failure ended the
// hold without an answer, and with no replica watching, the query was
// never answered, its spinner on until Telegram gave up.
func TestPressHolderRetriesItsAnswer(t *testing.T) {
	t.Parallel()
	const word = "✅ Approved once"
	for _, tc := range []struct {
		name string
		// fail are Telegram's replies to the holder's first answers.
		fail []telegramfake.APIError
		// answered: the query ends answered with the router's word.
		answered bool
	}{
		{name: "server error", fail: []telegramfake.APIError{{Code: 500, Description: "Internal Server Error"}}, answered: true},
		{name: "flood wait", fail: []telegramfake.APIError{telegramfake.FloodWait(1)}, answered: true},
		{name: "network", fail: []telegramfake.APIError{telegramfake.ErrDropConnection}, answered: true},
		{name: "one after another", fail: []telegramfake.APIError{{Code: 502, Description: "Bad Gateway"}, telegramfake.ErrDropConnection,
			telegramfake.FloodWait(1)}, answered: true},
		{name: "bad request", fail: []telegramfake.APIError{{Code: 400, Description: "Bad Request: invalid callback query answer"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f := newFake(t)
			b := bustest.New(t, bustest.EmbeddedURL(t))
			cfg := testConfig(f)
			// The longest there is, so that the hold ends with the
			// router's answer however busy the machine.
			cfg.PressHold = maxPressHold
			var times func() []time.Time
			cfg.APIBaseURL, times = answerTimes(t, f.URL)
			s, _ := startService(t, cfg, b, "a")
			waitFor(t, "connected", 20*time.Second, func() bool { st, _ := s.Runner().State(); return st == platform.StateConnected })
			id, query := pressOnce(t, f, b)
			evs := publishedOnce(t, f, b, id, query)
			for _, e := range tc.fail {
				f.FailNext("answerCallbackQuery", e)
			}
			if err := platform.PublishPressAnswer(b, &deliveryv1.SendRequested{Target: &deliveryv1.Target{Platform: "telegram", Account: "4242", ChatId: "99",
				Interaction: evs[0].GetInteraction()}, Text: word}); err != nil {
				t.Fatal(err)
			}
			// The hold ends once its answer is made or given up: every
			// try came before. A question the hold's end overtakes gets
			// no reply: it is asked again.
			waitFor(t, "the hold ended", 30*time.Second, func() bool {
				ctx, cancel := context.WithTimeout(context.Background(), time.Second)
				defer cancel()
				held, err := platform.RetryPress(ctx, b, "telegram", query)
				return err == nil && !held
			})
			tries := times()
			if !tc.answered {
				if len(tries) != 1 {
					t.Errorf("%d answers tried, want one: Telegram refused it", len(tries))
				}
				if a := f.CallbackAnswers(); len(a) != 0 {
					t.Errorf("answers %+v, want none", a)
				}
				return
			}
			if len(tries) != len(tc.fail)+1 {
				t.Errorf("%d answers tried, want %d: each failure and the answer", len(tries), len(tc.fail)+1)
			}
			for i, e := range tc.fail {
				if wait := time.Duration(e.RetryAfter) * time.Second; i+1 < len(tries) && tries[i+1].Sub(tries[i]) < wait {
					t.Errorf("try %d came %v after a flood wait of %v", i+2, tries[i+1].Sub(tries[i]), wait)
				}
			}
			if a := f.CallbackAnswers(); len(a) != 1 || a[0].QueryID != query || a[0].Text != word {
				t.Fatalf("answers %+v, want the router's word as the query's answer", a)
			}
		})
	}
}

// A replica that stops while the replica it left a press's query to is
// away for a moment (its connection to the bus reconnecting, its
// subscription with it) gives that holder the grace a running watch
// gives it (holderGrace): found holding the press again, the holder
// answers the query, with the router's word, and the stopping replica
// leaves it. Asked once on the way out, the absent holder looked dead,
// and the stopping replica answered the query without text.
func TestPressWatchStopsWhileItsHolderReconnects(t *testing.T) {
	t.Parallel()
	f := newFake(t)
	b := bustest.New(t, bustest.EmbeddedURL(t))
	cfg := webhookConfig(t, f)
	var calls *atomic.Int32
	cfg.APIBaseURL, calls = countedAnswers(t, f.URL)
	var (
		mu     sync.Mutex
		holder *platform.PressHold
	)
	defer func() {
		mu.Lock()
		defer mu.Unlock()
		holder.Close()
	}()
	over := make(chan bool, 1)
	var tp *Platform
	s, stop := startWrappedGateway(t, cfg, b, "a", func(p *Platform) {
		tp = p
		p.watchOver = func(_ string, answered bool) { over <- answered }
	}, func(c platform.Conn) platform.Conn {
		return &askedDuplicateConn{Conn: c, asked: func(id string) {
			// Another replica holds the press.
			h, err := platform.HoldPress(b, "telegram", id)
			if err != nil {
				t.Error(err)
				return
			}
			mu.Lock()
			holder = h
			mu.Unlock()
		}}
	})
	waitFor(t, "connected", 20*time.Second, func() bool { st, _ := s.Runner().State(); return st == platform.StateConnected })
	id, query := pressOnce(t, f, b)
	if code, err := f.Push(context.Background(), id); err != nil || code != http.StatusOK {
		t.Fatalf("push: %d %v", code, err)
	}
	if n := calls.Load(); n != 0 {
		t.Fatalf("the query answered %d times while another replica holds it, want none", n)
	}
	// The holder's connection drops, and a stops meanwhile; the holder
	// subscribes again after half of a's first second on its way out.
	mu.Lock()
	holder.Close()
	mu.Unlock()
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		stop()
	}()
	<-tp.life.Done()
	time.Sleep(holderCheck / 2)
	h, err := platform.HoldPress(b, "telegram", query)
	if err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	holder = h
	mu.Unlock()
	select {
	case <-stopped:
	case <-time.After(holderGrace + answerTimeout + 10*time.Second):
		t.Fatal("a did not stop")
	}
	select {
	case said := <-over:
		if said {
			t.Error("a's watch says the holder answered the query")
		}
	default:
		t.Fatal("a's watch of the press outlived a")
	}
	if n := calls.Load(); n != 0 {
		t.Errorf("a answered the query %d times on its way out, want none: its holder is back", n)
	}
	if a := f.CallbackAnswers(); len(a) != 0 {
		t.Fatalf("answers %+v, want the query left to its holder", a)
	}
}

// A replica handed a press some seconds after another replica began to
// hold it (the poller's lease moved, a webhook delivery was retried
// elsewhere), which leaves the query to that holder, counts its watch's
// bound from when the hold began, which the holder tells it: a holder
// that neither answers nor goes away has its query answered by the
// watcher while Telegram still takes the answer. Counted from when the
// watcher was handed the press, the watch ended after Telegram had
// closed the query, and its answer was refused.
func TestPressWatchCountsFromTheHoldersHold(t *testing.T) {
	t.Parallel()
	f := newFake(t)
	f.SetQueryLife(queryAnswerable)
	b := bustest.New(t, bustest.EmbeddedURL(t))
	cfg := webhookConfig(t, f)
	over := make(chan bool, 1)
	s, _ := startWrappedWith(t, cfg, b, "a", func(p *Platform) {
		p.watchOver = func(_ string, answered bool) { over <- answered }
	}, func(c platform.Conn) platform.Conn {
		return &askedDuplicateConn{Conn: c, asked: func(string) {}}
	})
	waitFor(t, "connected", 20*time.Second, func() bool { st, _ := s.Runner().State(); return st == platform.StateConnected })
	id, query := pressOnce(t, f, b)
	// Another replica was handed the press first, holds it, and never
	// answers it.
	stuck, err := platform.HoldPress(b, "telegram", query)
	if err != nil {
		t.Fatal(err)
	}
	defer stuck.Close()
	// a is handed the press later by more than Telegram's window leaves
	// beyond the watch's bound.
	time.Sleep(queryAnswerable - watchBound + 2*time.Second)
	if code, err := f.Push(context.Background(), id); err != nil || code != http.StatusOK {
		t.Fatalf("push: %d %v", code, err)
	}
	select {
	case said := <-over:
		if said {
			t.Fatal("the watch says the stuck holder answered the query")
		}
	case <-time.After(maxPressHold + answerTimeout + 10*time.Second):
		t.Fatal("the watch did not end")
	}
	if a := f.CallbackAnswers(); len(a) != 1 || a[0].QueryID != query || a[0].Text != "" {
		t.Fatalf("answers %+v, want the query answered once without text while Telegram takes it", a)
	}
}

// A replica that leaves a press's query to a holder whose clock is far
// behind its own (a node whose time drifted) waits for that holder as
// it waits for any: the holder, which has held the press for a second,
// answers the query with the router's word, and the watch leaves it.
// Told when the hold began on the holder's clock, the watch counted its
// bound from an hour ago, ended at once, and answered the query without
// text while the holder held it: the router's word came second and was
// refused.
func TestPressWatchOfAHolderOnAnotherClock(t *testing.T) {
	t.Parallel()
	const word = "✅ Approved once"
	f := newFake(t)
	b := bustest.New(t, bustest.EmbeddedURL(t))
	cfg := webhookConfig(t, f)
	over := make(chan bool, 1)
	s, _ := startWrappedWith(t, cfg, b, "a", func(p *Platform) {
		p.watchOver = func(_ string, answered bool) { over <- answered }
	}, func(c platform.Conn) platform.Conn {
		return &askedDuplicateConn{Conn: c, asked: func(string) {}}
	})
	waitFor(t, "connected", 20*time.Second, func() bool { st, _ := s.Runner().State(); return st == platform.StateConnected })
	id, query := pressOnce(t, f, b)
	// Another replica holds the press, on a clock an hour behind, since
	// a second ago: its reply to an asker says how long it has held it,
	// and when it began to on its clock (as holders said at first).
	sub, err := b.Conn().Subscribe(b.Topology().PressSubject("telegram", query), func(m *nats.Msg) {
		if m.Header.Get("Switchboard-Press-Retry") == "" {
			return
		}
		now := time.Now().Add(-time.Hour)
		r := nats.NewMsg(m.Reply)
		r.Header.Set("Switchboard-Press-Held-Since", now.Add(-time.Second).UTC().Format(time.RFC3339Nano))
		r.Header.Set("Switchboard-Press-Held-For", time.Second.String())
		_ = m.RespondMsg(r)
	})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	if err := b.Conn().Flush(); err != nil {
		t.Fatal(err)
	}
	if code, err := f.Push(context.Background(), id); err != nil || code != http.StatusOK {
		t.Fatalf("push: %d %v", code, err)
	}
	// The holder answers the query with the router's word, says so, and
	// ends its hold (PressHold.Answered).
	resp, err := http.PostForm(f.URL+"/bot"+testToken+"/answerCallbackQuery", neturl.Values{"callback_query_id": {query}, "text": {word}})
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if err := platform.ConfirmPressAnswered(b, "telegram", query); err != nil {
		t.Fatal(err)
	}
	if err := sub.Unsubscribe(); err != nil {
		t.Fatal(err)
	}
	select {
	case said := <-over:
		if !said {
			t.Error("the watch took the query over from its live holder")
		}
	case <-time.After(watchBound + answerTimeout + 10*time.Second):
		t.Fatal("the watch did not end")
	}
	if a := f.CallbackAnswers(); len(a) != 1 || a[0].QueryID != query || a[0].Text != word {
		t.Fatalf("answers %+v, want the holder's, with the router's word, alone", a)
	}
}

// heldAnswers is the Bot API at target, whose answerCallbackQuery calls
// are held back until release is called (at the latest as the test
// ends); answering is closed when the first one comes.
func heldAnswers(t *testing.T, target string) (url string, answering chan struct{}, release func()) {
	t.Helper()
	u, err := neturl.Parse(target)
	if err != nil {
		t.Fatal(err)
	}
	answering, released := make(chan struct{}), make(chan struct{})
	var once, releaseOnce sync.Once
	release = func() { releaseOnce.Do(func() { close(released) }) }
	proxy := httputil.NewSingleHostReverseProxy(u)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasSuffix(r.URL.Path, "/answerCallbackQuery") {
			once.Do(func() { close(answering) })
			<-released
		}
		proxy.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	// Cleanups run last first: the held calls end before the server
	// closes, which waits for them.
	t.Cleanup(release)
	return srv.URL, answering, release
}

// A replica handed again a press that no replica holds (its holder
// died) answers its query, with the router's kept word, off the update
// loop, and tries the answer again when it fails for a while (a 5xx):
// the poll goes on meanwhile (the press is confirmed while its answer
// is still on its way), and the query ends answered with the word.
// Tried once on the update loop, the poll waited for the answer, and a
// failure that passes left the query unanswered, its spinner on until
// Telegram gave up.
func TestPressDecidedBeforeRetriesItsAnswer(t *testing.T) {
	t.Parallel()
	f := newFake(t)
	d := pressHeldByAMortalReplica(t, f, false)
	close(d.kill)
	word := routerWord(t, d.b, d.query, true)
	d.ba.Conn().Close()
	d.stopA()
	// b's first answer is held back, and then fails.
	f.FailNext("answerCallbackQuery", telegramfake.APIError{Code: 500, Description: "Internal Server Error"})
	cfgB := d.cfg
	var (
		answering chan struct{}
		release   func()
	)
	cfgB.APIBaseURL, answering, release = heldAnswers(t, f.URL)
	startService(t, cfgB, d.b, "b")
	select {
	case <-answering:
	case <-time.After(30 * time.Second):
		t.Fatal("b did not answer the press handed again")
	}
	waitFor(t, "b confirming the press while its answer is on its way", 20*time.Second, func() bool { return f.Confirmed() > d.id })
	release()
	waitFor(t, "the query answered", 2*answerTimeout, func() bool { return len(f.CallbackAnswers()) > 0 })
	if a := f.CallbackAnswers(); len(a) != 1 || a[0].QueryID != d.query || a[0].Text != word {
		t.Fatalf("answers %+v, want the query answered once with the router's word %q", a, word)
	}
}

// A held press's refusal whose answer fails for a while (a 5xx, a flood
// wait, the network) is tried again, with its text, while Telegram
// still takes it: the presser sees the refusal, and the query is
// answered once. Tried once, the query was answered without text after
// the failure (or not at all, when that failed too), and the refusal
// was lost.
func TestPressRefusalRetriesItsAnswer(t *testing.T) {
	t.Parallel()
	const refusal = "⛔ You are not authorized to approve commands."
	for _, tc := range []struct {
		name string
		fail []telegramfake.APIError
	}{
		{name: "server error", fail: []telegramfake.APIError{{Code: 500, Description: "Internal Server Error"}}},
		{name: "flood wait", fail: []telegramfake.APIError{telegramfake.FloodWait(1)}},
		{name: "network twice", fail: []telegramfake.APIError{telegramfake.ErrDropConnection, telegramfake.ErrDropConnection}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f := newFake(t)
			b := bustest.New(t, bustest.EmbeddedURL(t))
			cfg := testConfig(f)
			cfg.PressHold = maxPressHold
			var calls *atomic.Int32
			cfg.APIBaseURL, calls = countedAnswers(t, f.URL)
			s, _ := startService(t, cfg, b, "a")
			waitFor(t, "connected", 20*time.Second, func() bool { st, _ := s.Runner().State(); return st == platform.StateConnected })
			id, query := pressOnce(t, f, b)
			evs := publishedOnce(t, f, b, id, query)
			for _, e := range tc.fail {
				f.FailNext("answerCallbackQuery", e)
			}
			if r := sendReq(t, b, &deliveryv1.SendRequested{Op: deliveryv1.SendOp_SEND_OP_SEND, IdempotencyKey: "r1",
				Target: &deliveryv1.Target{Platform: "telegram", Account: "4242", ChatId: "99", Interaction: evs[0].GetInteraction()}, Text: refusal}); !r.GetOk() {
				t.Fatalf("refusal: %v", r)
			}
			waitFor(t, "the query answered", answerTimeout, func() bool { return len(f.CallbackAnswers()) > 0 })
			// The hold ends once the refusal's answer is made: every try
			// came before.
			waitFor(t, "the hold ended", 20*time.Second, func() bool {
				ctx, cancel := context.WithTimeout(context.Background(), time.Second)
				defer cancel()
				held, err := platform.RetryPress(ctx, b, "telegram", query)
				return err == nil && !held
			})
			if a := f.CallbackAnswers(); len(a) != 1 || a[0].QueryID != query || a[0].Text != refusal {
				t.Fatalf("answers %+v, want the refusal as the query's answer", a)
			}
			if n := calls.Load(); n != int32(len(tc.fail)+1) {
				t.Errorf("%d answers tried, want %d: each failure and the answer", n, len(tc.fail)+1)
			}
		})
	}
}
