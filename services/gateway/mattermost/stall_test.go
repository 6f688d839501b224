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
	"github.com/switchboard-chat/switchboard/pkg/logtest"
	"github.com/switchboard-chat/switchboard/pkg/platform"
	"github.com/switchboard-chat/switchboard/pkg/platform/platformtest"
	"github.com/switchboard-chat/switchboard/pkg/telemetry"
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

// A channel the catch-up cannot read is logged under chat_id, which the
// logs' pseudonyms replace (log.pseudonymize): a DM channel's id names
// the conversation with one person.
func TestCatchUpFailureLogsAPseudonym(t *testing.T) {
	t.Parallel()
	f := mattermostfake.New(bot, botName, token)
	t.Cleanup(f.Close)
	fakeChannels(f)
	var fail atomic.Bool
	target, _ := url.Parse(f.URL)
	proxy := httputil.NewSingleHostReverseProxy(target)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if fail.Load() && strings.HasSuffix(r.URL.Path, "/posts") && r.URL.Query().Has("since") {
			http.Error(w, `{"id":"app.error","message":"down"}`, http.StatusInternalServerError)
			return
		}
		proxy.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	cfg := testConfig(f)
	cfg.URL = srv.URL
	var logs logtest.Buffer
	logCfg := telemetry.LogConfig{Level: "info", Pseudonymize: true, PseudonymKey: "k"}
	evs := runLogged(t, cfg, telemetry.NewLogger(logCfg, &logs))
	platformtest.WaitFor(t, "the gateway to connect", func() bool { return f.Connections() >= 1 })
	first := f.Message(dmCh, ann, "before")
	if ev := platformtest.NextEvent(t, evs); ev.GetEventId() != first {
		t.Fatalf("event %s, want %s", ev.GetEventId(), first)
	}
	fail.Store(true)
	f.Drop()
	platformtest.WaitFor(t, "the catch-up's failure to be logged", func() bool {
		return strings.Contains(logs.String(), "catch-up: channel not read")
	})
	out := logs.String()
	if strings.Contains(out, dmCh) {
		t.Errorf("the log names the DM channel %s:\n%s", dmCh, out)
	}
	if want := `"chat_id":"` + logCfg.Pseudonyms().ID(dmCh) + `"`; !strings.Contains(out, want) {
		t.Errorf("no %s in the log:\n%s", want, out)
	}
}

// run runs a gateway with cfg on an embedded NATS until the test ends and
// returns its inbound events.
func run(t *testing.T, cfg Config) chan *eventsv1.MessageReceived {
	t.Helper()
	return runLogged(t, cfg, slog.New(slog.DiscardHandler))
}

// runLogged is run with the gateway logging to log.
func runLogged(t *testing.T, cfg Config, log *slog.Logger) chan *eventsv1.MessageReceived {
	t.Helper()
	b := bustest.New(t, bustest.EmbeddedURL(t))
	s, err := New(cfg, Deps{Log: log, Bus: b,
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
