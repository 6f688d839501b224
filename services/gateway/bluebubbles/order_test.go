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

// pairBus stands in for the kit's connection to a bus on which a
// publish of chat waits, until its deadline, for a publish of another
// chat to start: both complete only when they are in flight together.
// It records what it took, in order.
type pairBus struct {
	chat    string
	started chan struct{} // the chat's publish started
	other   chan struct{} // closed when another chat's publish starts
	once    sync.Once
	mu      sync.Mutex
	took    []string
}

func (b *pairBus) Deliver(ctx context.Context, ev *eventsv1.MessageReceived) (platform.Accepted, error) {
	if ev.GetSource().GetChatId() == b.chat {
		b.started <- struct{}{}
		select {
		case <-b.other:
		case <-ctx.Done():
			return platform.Accepted{}, ctx.Err()
		}
	} else {
		b.once.Do(func() { close(b.other) })
	}
	b.mu.Lock()
	b.took = append(b.took, ev.GetText())
	b.mu.Unlock()
	return platform.Accepted{}, nil
}
func (b *pairBus) Reject(context.Context, string, error) {}

func (b *pairBus) taken() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]string(nil), b.took...)
}

// Two chats' messages are published at once: a message of another chat
// posted while a chat's publish is in flight does not wait for it, and
// both are published on their first attempt and answered 200. Before, a
// replica published every chat's messages one at a time: the other
// chat's message waited behind the first, which waited out ack_timeout,
// and both were answered 202.
func TestChatsArePublishedConcurrently(t *testing.T) {
	t.Parallel()
	f := newFake(t, false)
	cfg := testConfig(f)
	cfg.AckTimeout = 3 * time.Second
	p, err := NewPlatform(cfg, slog.New(slog.DiscardHandler), nil)
	if err != nil {
		t.Fatal(err)
	}
	bus := &pairBus{chat: dmGUID, started: make(chan struct{}, 16), other: make(chan struct{})}
	srv := httptest.NewServer(p.WebhookHandler(bus))
	defer srv.Close()
	u := srv.URL + "/bluebubbles-webhook?password=" + f.Password

	dm := make(chan int, 1)
	go func() {
		code, _, _ := bbfake.Post(context.Background(), u, mustEvent(t, "the dm"))
		dm <- code
	}()
	<-bus.started
	group, _ := bbfake.Event(bbfake.Inbound{ChatGUID: groupGUID, From: ann, Text: "Hermes: the group"})
	if code, _, _ := bbfake.Post(context.Background(), u, group); code != http.StatusOK {
		t.Fatalf("the group's message answered %d, want 200 (published at once)", code)
	}
	if code := <-dm; code != http.StatusOK {
		t.Fatalf("the dm's message answered %d, want 200 (published on its first attempt)", code)
	}
	if got := bus.taken(); len(got) != 2 {
		t.Fatalf("published %q, want both messages once", got)
	}
}
