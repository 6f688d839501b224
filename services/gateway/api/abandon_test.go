package api

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	eventsv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/events/v1"
)

// A client that goes away before its answer stops its turn, as Hermes
// interrupts the agent of a client that disconnects: the request's own
// conversation gets /stop. Not a conversation other requests share
// (X-Session-Id), not a request with an Idempotency-Key (a retry takes
// its answer), not a request that got its answer.
func TestAbandonedRequestStopsItsTurn(t *testing.T) {
	t.Parallel()
	b := newBus(t)
	s := startService(t, b, nil)
	r := startResponder(t, b)
	release := r.hold()

	for _, c := range []struct {
		name    string
		body    string
		headers map[string]string
		stop    bool
	}{
		{"stateless", `{"messages":[{"role":"user","content":"plain"}]}`, nil, true},
		{"stateless streaming", `{"stream":true,"messages":[{"role":"user","content":"streamed"}]}`, nil, true},
		{"shared conversation", `{"messages":[{"role":"user","content":"shared"}]}`, map[string]string{HeaderSession: "conv-1"}, false},
		{"keyed", `{"messages":[{"role":"user","content":"keyed"}]}`, map[string]string{HeaderIdempotencyKey: "k-1"}, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			before := len(r.received())
			ctx, cancel := context.WithCancel(context.Background())
			req, _ := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+s.Addr()+"/v1/chat/completions", strings.NewReader(c.body))
			req.Header.Set("Authorization", "Bearer "+testKey)
			for k, v := range c.headers {
				req.Header.Set(k, v)
			}
			done := make(chan struct{})
			go func() {
				defer close(done)
				if resp, err := http.DefaultClient.Do(req); err == nil {
					// A streaming answer starts at once: read until the
					// client goes away.
					buf := make([]byte, 512)
					for {
						if _, err := resp.Body.Read(buf); err != nil {
							break
						}
					}
					resp.Body.Close()
				}
			}()
			waitUntil(t, "the request's message", func() bool { return len(r.received()) > before })
			msg := r.received()[before]
			cancel()
			<-done
			stopOf := func() *eventsv1.MessageReceived {
				for _, ev := range r.received() {
					if ev.GetText() == "/stop" && ev.GetEventId() == msg.GetEventId()+"_stop" {
						return ev
					}
				}
				return nil
			}
			if !c.stop {
				time.Sleep(300 * time.Millisecond)
				if ev := stopOf(); ev != nil {
					t.Fatalf("a %s request that went away stopped its conversation: %v", c.name, ev)
				}
				return
			}
			waitUntil(t, "/stop", func() bool { return stopOf() != nil })
			stop := stopOf()
			if stop.GetSource().GetChatId() != msg.GetSource().GetChatId() || stop.GetSource().GetUserId() != msg.GetSource().GetUserId() ||
				!stop.GetAnswerOnly() {
				t.Fatalf("/stop %v went elsewhere than the request's conversation %v", stop, msg)
			}
		})
	}

	// An answered request stops nothing.
	release()
	before := len(r.received())
	if res := post(s, `{"messages":[{"role":"user","content":"answered"}]}`, nil); res.code != http.StatusOK {
		t.Fatalf("answered request: %d %s", res.code, res.body)
	}
	time.Sleep(300 * time.Millisecond)
	for _, ev := range r.received()[before:] {
		if ev.GetText() == "/stop" {
			t.Fatalf("an answered request sent /stop: %v", ev)
		}
	}
}

// waitUntil waits up to 20 s for cond.
func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
