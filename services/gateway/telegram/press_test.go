package telegram

import (
	"context"
	"net"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/switchboard-chat/switchboard/pkg/bus"
	"github.com/switchboard-chat/switchboard/pkg/bus/bustest"
	deliveryv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/delivery/v1"
	eventsv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/events/v1"
	"github.com/switchboard-chat/switchboard/pkg/platform"
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
	tp, err := NewPlatform(cfg, quietLog(), nil)
	if err != nil {
		t.Fatal(err)
	}
	tp.bus = b
	svc, err := platform.NewService(&wrappedPlatform{Platform: tp, wrap: wrap}, b, quietLog(),
		platform.Options{Instance: instance, LeaseTTL: cfg.LeaseTTL, Backoff: platform.Schedule(50 * time.Millisecond)})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- svc.Run(ctx) }()
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

// lateHoldConn holds a press's first handling back (its hold, which
// comes before its publish) until another handling of the press has
// published it: of two deliveries of one update at once, the second
// stores the press, and the first is told it is a duplicate.
type lateHoldConn struct {
	platform.Conn
	published chan struct{}
	once      *sync.Once
}

func (c *lateHoldConn) HoldPress(id string) (*platform.PressHold, error) {
	select {
	case <-c.published:
	case <-time.After(10 * time.Second):
	}
	return c.Conn.(platform.PressHolder).HoldPress(id)
}

func (c *lateHoldConn) Deliver(ctx context.Context, ev *eventsv1.MessageReceived) (platform.Accepted, error) {
	acc, err := c.Conn.Deliver(ctx, ev)
	if ev.GetInteraction() != nil {
		c.once.Do(func() { close(c.published) })
	}
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
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	cfg := testConfig(f)
	cfg.WebhookURL, cfg.WebhookSecret, cfg.WebhookListen = "http://"+addr+"/tg/hook", "s3cret", addr
	// The longest there is, so that the hold is found holding however
	// busy the machine.
	const pressHold = maxPressHold
	cfg.PressHold = pressHold
	published, once := make(chan struct{}), &sync.Once{}
	s, _ := startWrapped(t, cfg, b, "a", func(c platform.Conn) platform.Conn {
		return &lateHoldConn{Conn: c, published: published, once: once}
	})
	waitFor(t, "connected", 20*time.Second, func() bool { st, _ := s.Runner().State(); return st == platform.StateConnected })
	target := &deliveryv1.Target{Platform: "telegram", Account: "4242", ChatId: "99"}
	r := sendReq(t, b, &deliveryv1.SendRequested{Op: deliveryv1.SendOp_SEND_OP_SEND, IdempotencyKey: "p1", Target: target, Text: "approve?",
		Approval: &deliveryv1.Approval{Choices: []string{"once", "deny"}, ToolCallId: "call_1"}})
	if !r.GetOk() {
		t.Fatalf("prompt not sent: %v", r)
	}
	card := f.Messages("99")[0]
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
