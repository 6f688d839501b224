package bluebubbles

import (
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	eventsv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/events/v1"
	"github.com/switchboard-chat/switchboard/pkg/platform"
	"github.com/switchboard-chat/switchboard/pkg/platform/platformtest"
	"github.com/switchboard-chat/switchboard/services/gateway/bluebubbles/bbfake"
)

// outageBus stands in for the kit's connection to a bus that is out of
// reach (a publish waits out its deadline) until up, and records what it
// took, in order.
type outageBus struct {
	mu    sync.Mutex
	up    bool
	tried chan string // the text of each attempt, as it starts
	took  []string
}

func (b *outageBus) Deliver(ctx context.Context, ev *eventsv1.MessageReceived) (platform.Accepted, error) {
	b.tried <- ev.GetText()
	b.mu.Lock()
	up := b.up
	if up {
		b.took = append(b.took, ev.GetText())
	}
	b.mu.Unlock()
	if !up {
		<-ctx.Done()
		return platform.Accepted{}, ctx.Err()
	}
	return platform.Accepted{}, nil
}
func (b *outageBus) Reject(context.Context, string, error) {}

func (b *outageBus) setUp() {
	b.mu.Lock()
	b.up = true
	b.mu.Unlock()
}

func (b *outageBus) taken() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]string(nil), b.took...)
}

// Two messages whose calls race the bus's return reach it in the order
// they arrived: the second, posted once the bus is back while the
// first's attempt is still waiting out the outage, waits behind it.
// Before, it was published at once, ahead of the first.
func TestMessagesRacingTheBusReturnKeepTheirOrder(t *testing.T) {
	t.Parallel()
	f := newFake(t, false)
	cfg := testConfig(f)
	cfg.AckTimeout = 400 * time.Millisecond
	p, err := NewPlatform(cfg, slog.New(slog.DiscardHandler), nil)
	if err != nil {
		t.Fatal(err)
	}
	bus := &outageBus{tried: make(chan string, 16)}
	srv := httptest.NewServer(p.WebhookHandler(bus))
	defer srv.Close()
	u := srv.URL + "/bluebubbles-webhook?password=" + f.Password

	first := make(chan int, 1)
	go func() {
		code, _, _ := bbfake.Post(context.Background(), u, mustEvent(t, "first"))
		first <- code
	}()
	if got := <-bus.tried; got != "first" {
		t.Fatalf("attempt of %q, want the first message's", got)
	}
	bus.setUp()
	if code, _, _ := bbfake.Post(context.Background(), u, mustEvent(t, "second")); code/100 != 2 {
		t.Fatalf("second message answered %d", code)
	}
	if code := <-first; code != http.StatusAccepted {
		t.Fatalf("first message answered %d, want 202 (held)", code)
	}
	platformtest.WaitFor(t, "both messages published", func() bool { return len(bus.taken()) == 2 })
	if got := bus.taken(); got[0] != "first" || got[1] != "second" {
		t.Fatalf("published %q, want the order they came in", got)
	}
}
