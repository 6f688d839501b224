package api

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	deliveryv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/delivery/v1"
	eventsv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/events/v1"
	"github.com/switchboard-chat/switchboard/pkg/platform"
	"github.com/switchboard-chat/switchboard/pkg/platform/platformtest"
)

func TestContract(t *testing.T) {
	t.Parallel()
	platformtest.Run(t, platformtest.Harness{New: func(t *testing.T, env platformtest.Env) (platform.Platform, platformtest.Fake) {
		cfg := DefaultConfig()
		cfg.Addr, cfg.Key, cfg.RateLimit, cfg.MaxBodyBytes = "127.0.0.1:0", testKey, 0, 64<<10
		s, err := New(cfg, Deps{Bus: env.Bus, Log: env.Log})
		if err != nil {
			t.Fatal(err)
		}
		s.runnerFn = env.Runner
		f := &apiFake{s: s, sent: map[string][]string{}, bodies: map[string]fakeReq{}}
		t.Cleanup(f.wg.Wait)
		return s, f
	}})
}

// apiFake is an HTTP client of the gateway: each delivered event is a
// chat completion request that waits for its answer.
type apiFake struct {
	s  *Service
	n  atomic.Int64
	wg sync.WaitGroup

	mu     sync.Mutex
	sent   map[string][]string // chat id → answers received
	bodies map[string]fakeReq  // event id → request, for redelivery
}

type fakeReq struct {
	body    []byte
	session string
	key     string
}

func (f *apiFake) Kinds() []string { return []string{"text", "session", "parts", "context"} }

func (f *apiFake) url() string { return "http://" + f.s.Addr() + "/v1/chat/completions" }

func (f *apiFake) Deliver(t *testing.T, ctx context.Context, kind string) *eventsv1.MessageReceived {
	t.Helper()
	n := f.n.Add(1)
	key := fmt.Sprintf("idem-%d", n)
	session := ""
	text := fmt.Sprintf("hello %s %d", kind, n)
	msgs := []map[string]any{{"role": "user", "content": text}}
	want := &eventsv1.MessageReceived{Text: text, TransportAuthenticated: true}
	switch kind {
	case "session":
		session = fmt.Sprintf("conv-%d", n)
		// The server keeps the conversation, so what the client resends of
		// it is dropped; its system message is the request's own.
		msgs = []map[string]any{
			{"role": "system", "content": "be brief"},
			{"role": "user", "content": "earlier"},
			{"role": "assistant", "content": "earlier answer"},
			{"role": "user", "content": text},
		}
		want.Context = []*eventsv1.ContextMessage{{Role: "system", Content: "be brief"}}
	case "parts":
		msgs = []map[string]any{{"role": "user", "content": []map[string]any{
			{"type": "text", "text": text},
			{"type": "image_url", "image_url": map[string]string{"url": "https://example.test/cat.png"}},
		}}}
		want.Attachments = []*eventsv1.Attachment{{Kind: eventsv1.AttachmentKind_ATTACHMENT_KIND_IMAGE, Location: &eventsv1.Attachment_Url{Url: "https://example.test/cat.png"}}}
	case "context":
		msgs = []map[string]any{
			{"role": "system", "content": "be brief"},
			{"role": "user", "content": "earlier"},
			{"role": "assistant", "content": "earlier answer"},
			{"role": "user", "content": text},
		}
		want.Context = []*eventsv1.ContextMessage{{Role: "system", Content: "be brief"}, {Role: "user", Content: "earlier"}, {Role: "assistant", Content: "earlier answer"}}
	}
	body, _ := json.Marshal(map[string]any{"model": "switchboard", "messages": msgs})
	keySum := sha256.Sum256([]byte(testKey))
	id := keyedID("key-"+hex.EncodeToString(keySum[:4]), session, key)
	chat := session
	if chat == "" {
		chat = id
	}
	want.EventId, want.MessageId, want.ClientSessionId = id, id, session
	want.Source = &eventsv1.SessionSource{Platform: PlatformName, Account: "default", ChatId: chat, ChatType: "dm", UserId: "key-" + hex.EncodeToString(keySum[:4])}
	r := fakeReq{body: body, session: session, key: key}
	f.mu.Lock()
	f.bodies[id] = r
	f.mu.Unlock()
	f.post(r, chat)
	return want
}

// post sends a request in the background; its answer lands in sent.
func (f *apiFake) post(r fakeReq, chat string) {
	f.wg.Add(1)
	go func() {
		defer f.wg.Done()
		req, _ := http.NewRequest(http.MethodPost, f.url(), bytes.NewReader(r.body))
		req.Header.Set("Authorization", "Bearer "+testKey)
		req.Header.Set("Idempotency-Key", r.key)
		if r.session != "" {
			req.Header.Set(HeaderSession, r.session)
		}
		resp, err := (&http.Client{Timeout: 30 * time.Second}).Do(req)
		if err != nil {
			return
		}
		defer resp.Body.Close()
		var c completion
		if resp.StatusCode != http.StatusOK || json.NewDecoder(resp.Body).Decode(&c) != nil || len(c.Choices) == 0 {
			return
		}
		f.mu.Lock()
		f.sent[chat] = append(f.sent[chat], c.Choices[0].Message.Content)
		f.mu.Unlock()
	}()
}

func (f *apiFake) Redeliver(t *testing.T, ctx context.Context, eventID string) {
	f.mu.Lock()
	r := f.bodies[eventID]
	f.mu.Unlock()
	// A client retry: same Idempotency-Key. It waits on the same answer;
	// the event is not published again. Wait until it is registered.
	before := f.waitingOn(eventID)
	f.post(r, "retry")
	platformtest.WaitFor(t, "the retried request to wait", func() bool { return f.waitingOn(eventID) > before })
}

func (f *apiFake) waitingOn(id string) int {
	f.s.following.mu.Lock()
	defer f.s.following.mu.Unlock()
	return len(f.s.following.m[id])
}

func (f *apiFake) status(t *testing.T, body []byte) int {
	req, _ := http.NewRequest(http.MethodPost, f.url(), bytes.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+testKey)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	var e apiError
	if json.Unmarshal(data, &e) != nil || e.Error.Message == "" {
		t.Fatalf("error body %q is not OpenAI's error shape", data)
	}
	return resp.StatusCode
}

func (f *apiFake) DeliverOversized(t *testing.T, _ context.Context) {
	body, _ := json.Marshal(map[string]any{"messages": []map[string]any{{"role": "user", "content": strings.Repeat("x", 100<<10)}}})
	if code := f.status(t, body); code != http.StatusRequestEntityTooLarge {
		t.Fatalf("oversized request: %d, want 413", code)
	}
}

func (f *apiFake) DeliverMalformed(t *testing.T, _ context.Context) {
	if code := f.status(t, []byte(`{"messages": [{"role": "user", "content": 12`)); code != http.StatusBadRequest {
		t.Fatalf("malformed request: %d, want 400", code)
	}
}

func (f *apiFake) Drop(*testing.T) { f.s.dropListener() }

func (f *apiFake) Connections() int { return int(f.s.connects.Load()) }

func (f *apiFake) Answer(ev *eventsv1.MessageReceived) *deliveryv1.SendRequested {
	return &deliveryv1.SendRequested{
		Target:          &deliveryv1.Target{Platform: PlatformName, Account: ev.GetSource().GetAccount(), ChatId: ev.GetSource().GetChatId()},
		InputMessageIds: []string{ev.GetMessageId()},
	}
}

func (f *apiFake) Sent(_ *testing.T, _ context.Context, target *deliveryv1.Target) []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.sent[target.GetChatId()]...)
}
