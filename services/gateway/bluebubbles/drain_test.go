package bluebubbles

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	eventsv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/events/v1"
	"github.com/switchboard-chat/switchboard/pkg/logtest"
	"github.com/switchboard-chat/switchboard/pkg/platform"
	"github.com/switchboard-chat/switchboard/pkg/platform/platformtest"
	"github.com/switchboard-chat/switchboard/services/gateway/bluebubbles/bbfake"
)

// slowBus stands in for the kit's connection to a bus that refuses the
// first attempt at once (the message is held) and then holds every
// publish until it is up (closing up) or the publish's deadline. It
// records what it took, in order.
type slowBus struct {
	up    chan struct{}
	tried chan string // the text of each attempt, as it starts

	mu       sync.Mutex
	attempts int
	took     []string
}

func (b *slowBus) Deliver(ctx context.Context, ev *eventsv1.MessageReceived) (platform.Accepted, error) {
	b.tried <- ev.GetText()
	b.mu.Lock()
	b.attempts++
	first := b.attempts == 1
	b.mu.Unlock()
	if first {
		return platform.Accepted{}, errors.New("nats: no responders available for request")
	}
	select {
	case <-b.up:
	case <-ctx.Done():
		return platform.Accepted{}, ctx.Err()
	}
	b.mu.Lock()
	b.took = append(b.took, ev.GetText())
	b.mu.Unlock()
	return platform.Accepted{}, nil
}
func (b *slowBus) Reject(context.Context, string, error)      {}
func (b *slowBus) Connected()                                 {}
func (b *slowBus) Seen(context.Context, string) (bool, error) { return false, nil }
func (b *slowBus) taken() []string                            { b.mu.Lock(); defer b.mu.Unlock(); return slices.Clone(b.took) }

// A stopping gateway publishes, before Connect returns, the messages it
// answered 202 and holds behind a slow publish, in the order they came;
// when the bus stays down it gives up after its drain limit, cutting the
// publish in flight short, and logs the chat's loss before it returns.
// Before, Connect returned as soon as the webhook stopped: the held
// messages were lost with the process, and a publish in flight (up to
// ack_timeout) logged nothing.
func TestStoppingGatewayDrainsHeldMessages(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		busUp bool
	}{
		{"bus comes back", true},
		{"bus stays down", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f := newFake(t, false)
			cfg := testConfig(f)
			cfg.AckTimeout = 5 * time.Second
			var logs logtest.Buffer
			p, err := NewPlatform(cfg, slog.New(slog.NewTextHandler(&logs, nil)), nil)
			if err != nil {
				t.Fatal(err)
			}
			p.drainWait = 300 * time.Millisecond
			if tc.busUp {
				p.drainWait = time.Minute
			}
			bus := &slowBus{up: make(chan struct{}), tried: make(chan string, 16)}
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			returned := make(chan error, 1)
			go func() { returned <- p.Connect(ctx, bus) }()
			platformtest.WaitFor(t, "the webhook to listen", func() bool { return p.Addr() != "" })
			hook := hookURL(p, f.Password)

			texts := []string{"first", "second", "third"}
			for _, text := range texts {
				if code, _, err := bbfake.Post(context.Background(), hook, mustEvent(t, text)); err != nil || code != http.StatusAccepted {
					t.Fatalf("%q answered %d %v, want 202 (held)", text, code, err)
				}
			}
			// The first message's second attempt is in flight: the bus holds it.
			for range 2 {
				if got := nextAttempt(t, bus.tried); got != "first" {
					t.Fatalf("attempt of %q, want the first message's", got)
				}
			}
			cancel()
			if tc.busUp {
				platformtest.WaitFor(t, "the webhook to stop listening", func() bool {
					c, err := net.Dial("tcp", p.Addr())
					if err == nil {
						c.Close()
					}
					return err != nil
				})
				close(bus.up)
			}
			select {
			case err := <-returned:
				if err != nil {
					t.Fatalf("Connect: %v", err)
				}
			case <-time.After(time.Minute):
				t.Fatal("Connect did not return")
			}
			if tc.busUp {
				if got := bus.taken(); !slices.Equal(got, texts) {
					t.Fatalf("published %q before Connect returned, want %q", got, texts)
				}
				return
			}
			if got := logs.String(); !strings.Contains(got, "held for the bus lost") || !strings.Contains(got, "count=3") {
				t.Fatalf("no loss of the chat's 3 messages logged before Connect returned:\n%s", got)
			}
		})
	}
}

func nextAttempt(t *testing.T, tried <-chan string) string {
	t.Helper()
	select {
	case text := <-tried:
		return text
	case <-time.After(30 * time.Second):
		t.Fatal("no publish attempt")
		return ""
	}
}
