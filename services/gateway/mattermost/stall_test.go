package mattermost

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/switchboard-chat/switchboard/pkg/bus/bustest"
	eventsv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/events/v1"
	"github.com/switchboard-chat/switchboard/pkg/platform"
	"github.com/switchboard-chat/switchboard/pkg/platform/platformtest"
	"github.com/switchboard-chat/switchboard/services/gateway/mattermost/mattermostfake"
)

// A server that takes the websocket but never answers the authentication
// challenge (overloaded, or a proxy that swallowed the frame) is given up
// after call_timeout and dialled again, instead of being waited for
// forever with the gateway unready and never reconnecting.
func TestUnansweredAuthenticationReconnects(t *testing.T) {
	t.Parallel()
	var dials atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/api/v4/users/me":
			_ = json.NewEncoder(w).Encode(map[string]string{"id": bot, "username": botName})
		case "/api/v4/websocket":
			ws, err := websocket.Accept(w, r, nil)
			if err != nil {
				return
			}
			dials.Add(1)
			defer ws.CloseNow()
			for { // read the challenge and whatever follows; answer nothing
				if _, _, err := ws.Read(r.Context()); err != nil {
					return
				}
			}
		default:
			http.NotFound(w, r)
		}
	}))
	t.Cleanup(srv.Close)
	cfg := DefaultConfig()
	cfg.URL, cfg.Token, cfg.CallTimeout = srv.URL, token, 200*time.Millisecond
	run(t, cfg)
	platformtest.WaitFor(t, "the gateway to dial again", func() bool { return dials.Load() >= 3 })
}

// A catch-up read the server never answers is given up after
// call_timeout, as a channel the catch-up cannot read is (logged, its
// missed posts lost): the gateway goes on reading the websocket. Before,
// the read waited forever while the gateway reported itself connected
// and read nothing more.
func TestStalledCatchUpGivesUp(t *testing.T) {
	t.Parallel()
	f := mattermostfake.New(bot, botName, token)
	t.Cleanup(f.Close)
	fakeChannels(f)
	var stall atomic.Bool
	target, _ := url.Parse(f.URL)
	proxy := httputil.NewSingleHostReverseProxy(target)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if stall.Load() && strings.HasSuffix(r.URL.Path, "/posts") && r.URL.Query().Has("since") {
			<-r.Context().Done()
			return
		}
		proxy.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	cfg := testConfig(f)
	cfg.URL, cfg.CallTimeout = srv.URL, 200*time.Millisecond
	evs := run(t, cfg)
	platformtest.WaitFor(t, "the gateway to connect", func() bool { return f.Connections() >= 1 })
	first := f.Message(dmCh, ann, "before")
	if ev := platformtest.NextEvent(t, evs); ev.GetEventId() != first {
		t.Fatalf("event %s, want %s", ev.GetEventId(), first)
	}
	conns := f.Connections()
	f.AddSilently(mattermostfake.Post{ChannelID: dmCh, UserID: ann, Message: "while down"})
	stall.Store(true)
	f.Drop()
	platformtest.WaitFor(t, "a new connection", func() bool { return f.Connections() > conns })
	live := f.Message(dmCh, ann, "after the reconnect")
	if ev := platformtest.NextEvent(t, evs); ev.GetEventId() != live {
		t.Fatalf("event %s (%q), want the live post %s", ev.GetEventId(), ev.GetText(), live)
	}
}

// run runs a gateway with cfg on an embedded NATS until the test ends and
// returns its inbound events.
func run(t *testing.T, cfg Config) chan *eventsv1.MessageReceived {
	t.Helper()
	b := bustest.New(t, bustest.EmbeddedURL(t))
	s, err := New(cfg, Deps{Log: slog.New(slog.DiscardHandler), Bus: b,
		Runner: platform.Options{Backoff: platform.Schedule(10 * time.Millisecond), LeaseTTL: time.Second}})
	if err != nil {
		t.Fatal(err)
	}
	evs := platformtest.InboundEvents(t, b)
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	t.Cleanup(func() {
		stop()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("run: %v", err)
			}
		case <-time.After(10 * time.Second):
			t.Error("the gateway did not stop")
		}
		platformtest.DeleteBuckets(b)
	})
	return evs
}
