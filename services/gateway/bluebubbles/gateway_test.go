package bluebubbles

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/switchboard-chat/switchboard/pkg/attachment"
	"github.com/switchboard-chat/switchboard/pkg/bus"
	"github.com/switchboard-chat/switchboard/pkg/bus/bustest"
	"github.com/switchboard-chat/switchboard/pkg/egress"
	deliveryv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/delivery/v1"
	eventsv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/events/v1"
	"github.com/switchboard-chat/switchboard/pkg/logtest"
	"github.com/switchboard-chat/switchboard/pkg/platform"
	"github.com/switchboard-chat/switchboard/pkg/platform/platformtest"
	"github.com/switchboard-chat/switchboard/services/gateway/bluebubbles/bbfake"
)

// harness is a running gateway against a fake BlueBubbles server.
type harness struct {
	f   *bbfake.Fake
	s   *Service
	b   *bus.Bus
	url string // the webhook with the secret
	evs chan *eventsv1.MessageReceived
}

func newFake(t *testing.T, privateAPI bool) *bbfake.Fake {
	f := bbfake.New(t)
	f.PrivateAPI = privateAPI
	f.AddChat(bbfake.Chat{GUID: groupGUID, ChatIdentifier: "chat493817263544", DisplayName: "Family", Participants: []string{ann, "+15559990000"}})
	f.AddChat(bbfake.Chat{GUID: dmGUID, ChatIdentifier: ann, Participants: []string{ann}})
	return f
}

func start(t *testing.T, f *bbfake.Fake, cfg Config, opts platform.Options) *harness {
	t.Helper()
	return startWith(t, f, cfg, opts, nil)
}

// startWith starts the gateway with hc as its REST client.
func startWith(t *testing.T, f *bbfake.Fake, cfg Config, opts platform.Options, hc *http.Client) *harness {
	t.Helper()
	return startTuned(t, f, cfg, opts, hc, nil)
}

// startTuned starts the gateway after tune (when not nil) changed its
// platform.
func startTuned(t *testing.T, f *bbfake.Fake, cfg Config, opts platform.Options, hc *http.Client, tune func(*Platform)) *harness {
	t.Helper()
	b := bustest.New(t, bustest.EmbeddedURL(t))
	opts.Backoff = platform.Schedule(10 * time.Millisecond)
	if opts.Log == nil {
		opts.Log = slog.New(slog.DiscardHandler)
	}
	s, err := New(cfg, Deps{Log: opts.Log, Bus: b, Runner: opts, HTTPClient: hc})
	if err != nil {
		t.Fatal(err)
	}
	if tune != nil {
		tune(s.p)
	}
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	t.Cleanup(func() {
		stop()
		if err := <-done; err != nil {
			t.Errorf("run: %v", err)
		}
		platformtest.DeleteBuckets(b)
	})
	platformtest.WaitFor(t, "the gateway to be ready", func() bool { return s.Ready(context.Background()) == nil && s.Addr() != "" })
	return &harness{f: f, s: s, b: b, url: hookURL(s.p, s.p.cfg.WebhookSecret), evs: platformtest.InboundEvents(t, b)}
}

func (h *harness) post(t *testing.T, url string, body []byte) int {
	t.Helper()
	code, _, err := bbfake.Post(context.Background(), url, body)
	if err != nil {
		t.Fatal(err)
	}
	return code
}

func (h *harness) send(t *testing.T, req *deliveryv1.SendRequested) *deliveryv1.SendReceipt {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	r := &deliveryv1.SendReceipt{}
	if err := h.b.Request(ctx, h.b.Topology().SendSubject("bluebubbles"), req, r); err != nil {
		t.Fatal(err)
	}
	return r
}

// Only a call whose URL carries the secret is read and published; the
// same message posted again is published once.
func TestWebhookSecret(t *testing.T) {
	t.Parallel()
	f := newFake(t, false)
	cfg := testConfig(f)
	cfg.WebhookSecret = "hook-secret"
	h := start(t, f, cfg, platform.Options{})
	base := "http://" + h.s.Addr() + cfg.Path
	msg, guid := bbfake.Event(bbfake.Inbound{ChatGUID: dmGUID, From: ann, Text: "hello"})
	before := testutil.ToFloat64(authFailures)
	for name, u := range map[string]string{
		"none": base, "wrong": base + "?password=nope", "the server password": base + "?password=" + f.Password,
		"a prefix": base + "?password=hook", "in the path": base + "/hook-secret",
	} {
		if code := h.post(t, u, msg); code != http.StatusUnauthorized && code != http.StatusNotFound {
			t.Fatalf("%s: answered %d, want 401", name, code)
		}
	}
	if got := testutil.ToFloat64(authFailures) - before; got < 4 {
		t.Fatalf("auth failures counted %v, want 4", got)
	}
	platformtest.NoEvent(t, h.evs, 200*time.Millisecond)

	for _, u := range []string{h.url, base + "?guid=hook-secret", h.url} {
		if code := h.post(t, u, msg); code != http.StatusOK {
			t.Fatalf("authorized call answered %d", code)
		}
	}
	if ev := platformtest.NextEvent(t, h.evs); ev.GetEventId() != guid || ev.GetText() != "hello" || ev.GetSource().GetChatId() != dmGUID {
		t.Fatalf("published %v", ev)
	}
	platformtest.NoEvent(t, h.evs, 300*time.Millisecond)

	req, _ := http.NewRequest(http.MethodPost, base, bytes.NewReader(msg))
	req.Header.Set("X-Password", "hook-secret")
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("secret in X-Password: %v %v", resp, err)
	}
	resp.Body.Close()
	if code, _, _ := bbfake.Post(context.Background(), h.url, []byte("{}")); code != http.StatusBadRequest {
		t.Fatalf("an event without a type answered %d", code)
	}
	g, _ := http.Get(h.url)
	if g.StatusCode != http.StatusMethodNotAllowed {
		t.Fatalf("GET answered %d", g.StatusCode)
	}
	g.Body.Close()
}

// A call the bus cannot take, with no room left to hold its message, is
// answered 500; the handler never answers 200 before the message is
// stored. (With room, it is held: TestMessagesPostedDuringANATSOutageArePublished.)
func TestWebhookUnstored(t *testing.T) {
	t.Parallel()
	f := newFake(t, false)
	p, err := NewPlatform(testConfig(f), slog.New(slog.DiscardHandler), nil)
	if err != nil {
		t.Fatal(err)
	}
	p.maxHeld = 1
	rec := &recorder{err: context.DeadlineExceeded}
	srv := httptest.NewServer(p.WebhookHandler(rec))
	defer srv.Close()
	u := srv.URL + "/bluebubbles-webhook?password=" + f.Password
	held, _ := bbfake.Event(bbfake.Inbound{ChatGUID: dmGUID, From: ann, Text: "held"})
	if code, _, _ := bbfake.Post(context.Background(), u, held); code != http.StatusAccepted {
		t.Fatalf("held message answered %d, want 202", code)
	}
	lost, _ := bbfake.Event(bbfake.Inbound{ChatGUID: dmGUID, From: ann, Text: "lost?"})
	if code, _, _ := bbfake.Post(context.Background(), u, lost); code != http.StatusInternalServerError {
		t.Fatalf("unstored message answered %d, want 500", code)
	}
	rec.mu.Lock()
	rec.err = nil
	rec.mu.Unlock()
	platformtest.WaitFor(t, "the held message published", func() bool {
		code, _, _ := bbfake.Post(context.Background(), u, lost)
		return code == http.StatusOK
	})
	rec.mu.Lock()
	defer rec.mu.Unlock()
	var texts []string
	for _, ev := range rec.evs {
		texts = append(texts, ev.GetText())
	}
	if n := len(texts); n < 3 || texts[n-2] != "held" || texts[n-1] != "lost?" {
		t.Fatalf("deliveries %q: want the held message published before the next", texts)
	}
}

// recorder stands in for the kit's connection to fail a delivery.
type recorder struct {
	mu  sync.Mutex
	err error
	evs []*eventsv1.MessageReceived
}

func (r *recorder) Deliver(_ context.Context, ev *eventsv1.MessageReceived) (platform.Accepted, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.evs = append(r.evs, ev)
	return platform.Accepted{}, r.err
}
func (r *recorder) Reject(context.Context, string, error) {}

// The bot's own messages, tapbacks and other events are answered 200 and
// publish nothing; a group under require_mention needs the wake word.
func TestSkips(t *testing.T) {
	t.Parallel()
	f := newFake(t, false)
	cfg := testConfig(f)
	cfg.RequireMention = true
	h := start(t, f, cfg, platform.Options{})
	own, _ := bbfake.Event(bbfake.Inbound{ChatGUID: dmGUID, From: ann, Text: "sent from the mac", FromMe: true})
	tap, _ := bbfake.Event(bbfake.Inbound{ChatGUID: dmGUID, From: ann, Tapback: 2000, AssociatedGUID: "X"})
	quiet, _ := bbfake.Event(bbfake.Inbound{ChatGUID: groupGUID, From: ann, Text: "dinner at 8"})
	for _, b := range [][]byte{own, tap, quiet, []byte(`{"type":"updated-message","data":{"guid":"X","dateRead":1}}`), []byte(`{"type":"chat-read-status-changed","data":{}}`)} {
		if code := h.post(t, h.url, b); code != http.StatusOK {
			t.Fatalf("answered %d for %s", code, b)
		}
	}
	platformtest.NoEvent(t, h.evs, 300*time.Millisecond)
	called, guid := bbfake.Event(bbfake.Inbound{ChatGUID: groupGUID, From: ann, Text: "Hermes: dinner ideas?"})
	if code := h.post(t, h.url, called); code != http.StatusOK {
		t.Fatalf("answered %d", code)
	}
	if ev := platformtest.NextEvent(t, h.evs); ev.GetEventId() != guid || ev.GetText() != "dinner ideas?" || !ev.GetMentioned() {
		t.Fatalf("published %v", ev)
	}
}

// Sends: a DM's address is resolved to its chat guid (learned from its
// messages, else found among the server's chats), Markdown goes out as
// plain text, the idempotency key is the tempGuid; with the Private API
// a reply quotes its message, and typing and read receipts reach the chat.
func TestSend(t *testing.T) {
	t.Parallel()
	f := newFake(t, true)
	h := start(t, f, testConfig(f), platform.Options{})
	tg := &deliveryv1.Target{Platform: "bluebubbles", Account: h.s.p.Account(), ChatId: ann}
	r := h.send(t, &deliveryv1.SendRequested{Op: deliveryv1.SendOp_SEND_OP_SEND, IdempotencyKey: "k1", Target: tg, Text: "**Hi** there, `x`"})
	if !r.GetOk() || r.GetPlatformMessageId() == "" {
		t.Fatalf("receipt %v", r)
	}
	sent := f.Sent(dmGUID)
	if len(sent) != 1 || sent[0].Text != "Hi there, x" || sent[0].TempGUID != "k1" || sent[0].Method != "apple-script" || sent[0].GUID != r.GetPlatformMessageId() {
		t.Fatalf("sent %+v", sent)
	}
	if _, _, _, q := f.Counts(dmGUID); q != 1 {
		t.Fatalf("%d chat queries, want 1", q)
	}
	// A second send uses what the first found.
	if r := h.send(t, &deliveryv1.SendRequested{Op: deliveryv1.SendOp_SEND_OP_SEND, IdempotencyKey: "k2", Target: tg, Text: "again"}); !r.GetOk() {
		t.Fatalf("receipt %v", r)
	}
	if _, _, _, q := f.Counts(dmGUID); q != 1 {
		t.Fatalf("%d chat queries, want 1", q)
	}
	// An incoming message is read, and its reply quotes it.
	msg, guid := bbfake.Event(bbfake.Inbound{ChatGUID: groupGUID, From: ann, Text: "question"})
	if code := h.post(t, h.url, msg); code != http.StatusOK {
		t.Fatalf("answered %d", code)
	}
	platformtest.NextEvent(t, h.evs)
	gt := &deliveryv1.Target{Platform: "bluebubbles", Account: tg.Account, ChatId: groupGUID, ReplyToMessageId: guid}
	if r := h.send(t, &deliveryv1.SendRequested{Op: deliveryv1.SendOp_SEND_OP_TYPING, IdempotencyKey: "t1", Target: gt}); !r.GetOk() {
		t.Fatalf("typing receipt %v", r)
	}
	if r := h.send(t, &deliveryv1.SendRequested{Op: deliveryv1.SendOp_SEND_OP_SEND, IdempotencyKey: "k3", Target: gt, Text: "answer"}); !r.GetOk() {
		t.Fatalf("receipt %v", r)
	}
	if s := f.Sent(groupGUID); len(s) != 1 || s[0].Method != "private-api" || s[0].SelectedMessageGUID != guid {
		t.Fatalf("group reply %+v", s)
	}
	platformtest.WaitFor(t, "the read receipt", func() bool { _, read, _, _ := f.Counts(groupGUID); return read == 1 })
	if typing, _, _, _ := f.Counts(groupGUID); typing != 1 {
		t.Fatalf("typing %d, want 1", typing)
	}
	for _, op := range []deliveryv1.SendOp{deliveryv1.SendOp_SEND_OP_EDIT, deliveryv1.SendOp_SEND_OP_DELETE} {
		if r := h.send(t, &deliveryv1.SendRequested{Op: op, IdempotencyKey: "op-" + op.String(), Target: tg, MessageId: "X", Text: "x"}); r.GetOk() || r.GetErrorClass() != deliveryv1.ErrorClass_ERROR_CLASS_PERMANENT {
			t.Fatalf("%v: receipt %v, want permanent", op, r)
		}
	}
}

// Attachments are uploaded one message each (a voice note as an audio
// message), then the text; a retry skips what was sent.
func TestSendAttachments(t *testing.T) {
	t.Parallel()
	f := newFake(t, false)
	files := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/chart.png" {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Type", "image/png")
		_, _ = w.Write([]byte("\x89PNG chart"))
	}))
	defer files.Close()
	// The file server is on the loopback, which attachments.urls must allow.
	h := start(t, f, testConfig(f), platform.Options{Attachments: attachment.Config{URLs: egress.Config{AllowHosts: []string{"127.0.0.1"}}}})
	tg := &deliveryv1.Target{Platform: "bluebubbles", Account: h.s.p.Account(), ChatId: ann}
	r := h.send(t, &deliveryv1.SendRequested{Op: deliveryv1.SendOp_SEND_OP_SEND, IdempotencyKey: "a1", Target: tg, Text: "here **you** go",
		Attachments: []*eventsv1.Attachment{
			{Kind: eventsv1.AttachmentKind_ATTACHMENT_KIND_IMAGE, Location: &eventsv1.Attachment_Url{Url: files.URL + "/chart.png"}},
			{Kind: eventsv1.AttachmentKind_ATTACHMENT_KIND_VOICE, Location: &eventsv1.Attachment_Url{Url: "data:audio/mpeg;base64,SUQz"}, FileName: "reply.mp3"},
		}})
	sent := f.Sent(dmGUID)
	if !r.GetOk() || len(sent) != 3 || r.GetPlatformMessageId() != sent[0].GUID {
		t.Fatalf("receipt %v, sent %+v", r, sent)
	}
	if s := sent[0]; s.FileName != "file.png" || s.MimeType != "image/png" || string(s.Data) != "\x89PNG chart" || s.AudioMessage || s.TempGUID != "a1.0" {
		t.Fatalf("image %+v", s)
	}
	if s := sent[1]; s.FileName != "reply.mp3" || s.MimeType != "audio/mpeg" || string(s.Data) != "ID3" || !s.AudioMessage {
		t.Fatalf("voice %+v", s)
	}
	if s := sent[2]; s.Text != "here you go" {
		t.Fatalf("text %+v", s)
	}
	for name, a := range map[string]*eventsv1.Attachment{
		"missing file":           {Kind: eventsv1.AttachmentKind_ATTACHMENT_KIND_IMAGE, Location: &eventsv1.Attachment_Url{Url: files.URL + "/gone.png"}},
		"an address not allowed": {Kind: eventsv1.AttachmentKind_ATTACHMENT_KIND_IMAGE, Location: &eventsv1.Attachment_Url{Url: "http://127.0.0.2:9/chart.png"}},
		"no location":            {Kind: eventsv1.AttachmentKind_ATTACHMENT_KIND_DOCUMENT},
	} {
		r := h.send(t, &deliveryv1.SendRequested{Op: deliveryv1.SendOp_SEND_OP_SEND, IdempotencyKey: "bad-" + name, Target: tg, Attachments: []*eventsv1.Attachment{a}})
		if r.GetOk() || r.GetErrorClass() != deliveryv1.ErrorClass_ERROR_CLASS_PERMANENT {
			t.Fatalf("%s: receipt %v, want permanent", name, r)
		}
	}
}

// The REST API's failures as delivery's classes.
func TestSendErrors(t *testing.T) {
	t.Parallel()
	f := newFake(t, false)
	h := start(t, f, testConfig(f), platform.Options{})
	tg := &deliveryv1.Target{Platform: "bluebubbles", Account: h.s.p.Account(), ChatId: groupGUID}
	for i, c := range []struct {
		name    string
		fail    *bbfake.Failure
		target  string
		text    string
		class   deliveryv1.ErrorClass
		after   time.Duration
		message string
	}{
		{name: "429", fail: &bbfake.Failure{Status: 429, Message: "slow down", RetryAfter: 3}, class: deliveryv1.ErrorClass_ERROR_CLASS_RATE_LIMITED, after: 3 * time.Second, message: "slow down"},
		{name: "500", fail: &bbfake.Failure{Status: 500, Message: "AppleScript failed"}, class: deliveryv1.ErrorClass_ERROR_CLASS_RETRYABLE, message: "AppleScript failed"},
		{name: "unknown chat guid", target: "iMessage;+;chat0", class: deliveryv1.ErrorClass_ERROR_CLASS_PERMANENT, message: "Chat does not exist"},
		{name: "unknown address", target: "+15550000000", class: deliveryv1.ErrorClass_ERROR_CLASS_PERMANENT, message: "no chat with this address"},
		{name: "too long", text: strings.Repeat("x", maxText+1), class: deliveryv1.ErrorClass_ERROR_CLASS_PERMANENT, message: "4000"},
		{name: "empty", text: " ", class: deliveryv1.ErrorClass_ERROR_CLASS_PERMANENT, message: "empty"},
	} {
		t.Run(c.name, func(t *testing.T) {
			if c.fail != nil {
				f.Fail(*c.fail)
			}
			req := &deliveryv1.SendRequested{Op: deliveryv1.SendOp_SEND_OP_SEND, IdempotencyKey: "e" + string(rune('a'+i)), Text: "hi", Target: tg}
			if c.target != "" {
				req.Target = &deliveryv1.Target{Platform: "bluebubbles", Account: tg.Account, ChatId: c.target}
			}
			if c.text != "" {
				req.Text = c.text
			}
			r := h.send(t, req)
			if r.GetOk() || r.GetErrorClass() != c.class || time.Duration(r.GetRetryAfterMs())*time.Millisecond != c.after || !strings.Contains(r.GetError(), c.message) {
				t.Fatalf("receipt %v", r)
			}
			if strings.Contains(r.GetError(), f.Password) {
				t.Fatalf("the error carries the password: %s", r.GetError())
			}
		})
	}
}

// Attachments are downloaded with the password into the attachment store
// when a worker asks, within attachments.max_bytes.
func TestFetch(t *testing.T) {
	t.Parallel()
	f := newFake(t, false)
	acfg := attachment.DefaultConfig()
	acfg.MaxBytes = 1 << 10
	h := start(t, f, testConfig(f), platform.Options{Attachments: acfg})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	pic := []byte("\xff\xd8\xff\xe0 a small jpeg")
	small, big := f.AddAttachment("image/jpeg", pic), f.AddAttachment("video/mp4", bytes.Repeat([]byte("v"), 2<<10))
	msg, _ := bbfake.Event(bbfake.Inbound{ChatGUID: dmGUID, From: ann, Text: "what is it", Attachments: []bbfake.InboundAttachment{
		{GUID: small, MimeType: "image/jpeg", TransferName: "IMG_1.jpeg", TotalBytes: len(pic)}, {GUID: big, MimeType: "video/mp4", TransferName: "v.mp4"}}})
	if code := h.post(t, h.url, msg); code != http.StatusOK {
		t.Fatalf("answered %d", code)
	}
	ev := platformtest.NextEvent(t, h.evs)
	got := platformtest.Fetch(t, ctx, h.b, "bluebubbles", ev, 0)
	if got.GetBytesRef() == "" || got.GetMimeType() != "image/jpeg" || got.GetSizeBytes() != int64(len(pic)) {
		t.Fatalf("fetched %v", got)
	}
	store := attachment.New(h.b.JetStream(), h.b.Topology(), acfg)
	if data, _, _, err := store.Head(ctx, got.GetBytesRef(), 1<<10); err != nil || !bytes.Equal(data, pic) {
		t.Fatalf("kept %q %v", data, err)
	}
	if got := platformtest.Fetch(t, ctx, h.b, "bluebubbles", ev, 1); got.GetBytesRef() != "" || !strings.Contains(got.GetUnavailable(), "too large") {
		t.Fatalf("video over max_bytes: %v", got)
	}
}

// With a public URL the gateway registers its webhook (secret in the
// query, new-message only) once, replacing an older registration of the
// same URL and keeping an operator's other webhooks.
func TestRegisterWebhook(t *testing.T) {
	t.Parallel()
	f := newFake(t, false)
	cfg := testConfig(f)
	cfg.PublicURL = "http://gateway.lan:8652"
	want := "http://gateway.lan:8652/bluebubbles-webhook?password=" + f.Password
	f.AddWebhook(want, "new-message", "updated-message")
	f.AddWebhook("http://other.lan/hook", "new-message")
	for range 2 {
		p, err := NewPlatform(cfg, slog.New(slog.DiscardHandler), nil)
		if err != nil {
			t.Fatal(err)
		}
		if err := p.registerWebhook(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	hooks := f.Webhooks()
	if len(hooks) != 2 || hooks[0].URL != "http://other.lan/hook" || hooks[1].URL != want || len(hooks[1].Events) != 1 || hooks[1].Events[0] != "new-message" {
		t.Fatalf("webhooks %+v", hooks)
	}
}

// A server whose webhook API fails does not keep the webhook from being
// served: a registration made before still reaches it, and the gateway
// registers once the API answers, retrying in the background with a
// logged warning per failure.
func TestWebhookServedWhileRegistrationFails(t *testing.T) {
	t.Parallel()
	f := newFake(t, false)
	f.BreakWebhookAPI(true)
	cfg := testConfig(f)
	cfg.PublicURL = "http://gateway.lan:8652"
	var logs logtest.Buffer
	opts := platform.Options{Log: slog.New(slog.NewTextHandler(&logs, nil))}
	h := startTuned(t, f, cfg, opts, nil, func(p *Platform) { p.registerBackoff = platform.Schedule(20 * time.Millisecond) })
	if code := h.post(t, h.url, mustEvent(t, "hello while unregistered")); code != http.StatusOK {
		t.Fatalf("webhook answered %d while the registration fails", code)
	}
	if ev := platformtest.NextEvent(t, h.evs); ev.GetText() != "hello while unregistered" {
		t.Fatalf("published %q", ev.GetText())
	}
	platformtest.WaitFor(t, "a logged failed registration", func() bool {
		return strings.Count(logs.String(), "bluebubbles webhook registration failed") >= 2
	})
	if len(f.Webhooks()) != 0 {
		t.Fatalf("webhooks %+v while the API fails", f.Webhooks())
	}
	f.BreakWebhookAPI(false)
	want := "http://gateway.lan:8652/bluebubbles-webhook?password=" + f.Password
	platformtest.WaitFor(t, "the webhook to be registered", func() bool {
		hooks := f.Webhooks()
		return len(hooks) == 1 && hooks[0].URL == want
	})
	if strings.Contains(logs.String(), "password="+f.Password) {
		t.Fatal("the logs carry the password")
	}
}

// A password the server refuses is fatal: the gateway turns unready with
// the reason.
func TestRefusedPasswordIsFatal(t *testing.T) {
	t.Parallel()
	f := newFake(t, false)
	cfg := testConfig(f)
	cfg.Password = "wrong"
	b := bustest.New(t, bustest.EmbeddedURL(t))
	var logs logtest.Buffer
	s, err := New(cfg, Deps{Log: slog.New(slog.NewTextHandler(&logs, nil)), Bus: b, Runner: platform.Options{Backoff: platform.Schedule(10 * time.Millisecond)}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	defer func() { stop(); <-done; platformtest.DeleteBuckets(b) }()
	deadline := time.Now().Add(20 * time.Second)
	for st, _ := s.Runner().State(); st != platform.StateFatal; st, _ = s.Runner().State() {
		select {
		case err := <-done:
			done <- err
			t.Fatalf("runner returned %v before the fatal state; logs:\n%s", err, logs.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("not fatal within 20s (state %s); logs:\n%s", st, logs.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err := s.Ready(ctx); err == nil || !strings.Contains(err.Error(), "refused the password") {
		t.Fatalf("readiness %v: want unready naming the password", err)
	}
	if strings.Contains(logs.String(), "password=wrong") {
		t.Fatal("the logs carry the password")
	}
}

func TestConfigValidate(t *testing.T) {
	t.Parallel()
	c := Config{ServerURL: "192.168.1.10:1234/", Password: "pw", PublicURL: "https://bb.example.com"}
	if _, err := c.validate(); err != nil {
		t.Fatal(err)
	}
	if c.ServerURL != "http://192.168.1.10:1234" || c.WebhookSecret != "pw" || c.PublicURL != "https://bb.example.com/bluebubbles-webhook" || c.Addr != "127.0.0.1:8652" || c.Path != "/bluebubbles-webhook" {
		t.Fatalf("defaults %+v", c)
	}
	hp := Config{ServerURL: "http://mac:1234", Password: "pw", Host: "0.0.0.0", Port: 8645}
	if _, err := hp.validate(); err != nil || hp.Addr != "0.0.0.0:8645" {
		t.Fatalf("Hermes's host and port: %q %v", hp.Addr, err)
	}
	if n, err := (Config{ServerURL: "http://mac:1234", Password: "pw", Addr: "127.0.0.1:8652", Host: "0.0.0.0", Port: 9000, Path: "bb"}).Normalized(); err != nil || n.Addr != "0.0.0.0:9000" || n.Path != "/bb" {
		t.Fatalf("normalized: %q %q %v", n.Addr, n.Path, err)
	}
	for name, bad := range map[string]Config{
		"bad port":       {ServerURL: "http://mac:1234", Password: "pw", Port: 70000},
		"no url":         {Password: "pw"},
		"no password":    {ServerURL: "http://mac:1234"},
		"query in url":   {ServerURL: "http://mac:1234?password=x", Password: "pw"},
		"bad public url": {ServerURL: "http://mac:1234", Password: "pw", PublicURL: "ftp://x"},
		"bad pattern":    {ServerURL: "http://mac:1234", Password: "pw", MentionPatterns: []string{"(?<=a)b"}},
	} {
		if err := bad.Validate(); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	if (Config{ServerURL: "x"}).Enabled() || !(Config{ServerURL: "x", Password: "y"}).Enabled() {
		t.Fatal("Enabled")
	}
	// A URL given with the password or the webhook secret in its query
	// (as BlueBubbles's own URLs carry it) is refused without repeating
	// it: the error goes to the log.
	for name, c := range map[string]Config{
		"password in server url":   {ServerURL: "http://mac:1234/?password=s3cr3t-pw", Password: "s3cr3t-pw"},
		"guid in server url":       {ServerURL: "http://mac:1234?guid=s3cr3t-pw", Password: "s3cr3t-pw"},
		"secret in public url":     {ServerURL: "http://mac:1234", Password: "pw", PublicURL: "https://gw.example/bluebubbles-webhook?password=s3cr3t-hook"},
		"secret in bad public url": {ServerURL: "http://mac:1234", Password: "pw", PublicURL: "ftp://gw.example/?password=s3cr3t-hook"},
		"secret in fragment":       {ServerURL: "http://mac:1234#s3cr3t-pw", Password: "pw"},
	} {
		err := c.Validate()
		if err == nil {
			t.Errorf("%s: accepted", name)
		} else if strings.Contains(err.Error(), "s3cr3t") {
			t.Errorf("%s: the error repeats the secret: %v", name, err)
		}
	}
}

// A send retried while BlueBubbles still sends its first attempt (the
// gateway stopped waiting; an AppleScript send can take longer than the
// client's timeout) is refused by the server for its tempGuid ("Message
// is already queued to be sent!"). That attempt may still fail on the
// Mac, so the refusal is not a success: delivery is told to look again,
// and the next attempt counts the message sent only once the server
// shows it sent, for text and uploads alike; nothing goes out twice.
func TestSendRetriedWhileQueued(t *testing.T) {
	t.Parallel()
	f := newFake(t, false)
	h := startWith(t, f, testConfig(f), platform.Options{}, &http.Client{Timeout: 300 * time.Millisecond})
	f.SlowSends(1500 * time.Millisecond)
	for _, c := range []struct {
		chat string
		req  *deliveryv1.SendRequested
	}{
		{groupGUID, &deliveryv1.SendRequested{Op: deliveryv1.SendOp_SEND_OP_SEND, IdempotencyKey: "q-text", Text: "once",
			Target: &deliveryv1.Target{Platform: "bluebubbles", Account: h.s.p.Account(), ChatId: groupGUID}}},
		{dmGUID, &deliveryv1.SendRequested{Op: deliveryv1.SendOp_SEND_OP_SEND, IdempotencyKey: "q-file",
			Target:      &deliveryv1.Target{Platform: "bluebubbles", Account: h.s.p.Account(), ChatId: dmGUID},
			Attachments: []*eventsv1.Attachment{{Kind: eventsv1.AttachmentKind_ATTACHMENT_KIND_DOCUMENT, FileName: "a.txt", Location: &eventsv1.Attachment_Url{Url: "data:text/plain;base64,aGk="}}}}},
	} {
		key := c.req.GetIdempotencyKey()
		if r := h.send(t, c.req); r.GetOk() {
			t.Fatalf("%s: the first attempt did not time out: %v", key, r)
		}
		r := h.send(t, c.req)
		if r.GetOk() || r.GetErrorClass() != deliveryv1.ErrorClass_ERROR_CLASS_RETRYABLE || r.GetRetryAfterMs() != queuedRetry.Milliseconds() {
			t.Fatalf("%s: retry while the first attempt is queued: %v, want retryable after %v", key, r, queuedRetry)
		}
		platformtest.WaitFor(t, "the held send", func() bool { return len(f.Sent(c.chat)) > 0 })
		r = h.send(t, c.req)
		sent := f.Sent(c.chat)
		if !r.GetOk() || len(sent) != 1 || r.GetPlatformMessageId() != sent[0].GUID {
			t.Fatalf("%s: retry after the held send: %v, sent %+v", key, r, sent)
		}
	}
}

// A first attempt that BlueBubbles queued and that then failed on the Mac
// is sent by a later retry, once.
func TestSendQueuedThenFailed(t *testing.T) {
	t.Parallel()
	f := newFake(t, false)
	h := startWith(t, f, testConfig(f), platform.Options{}, &http.Client{Timeout: 300 * time.Millisecond})
	f.SlowSends(1 * time.Second)
	f.FailHeld(1)
	req := &deliveryv1.SendRequested{Op: deliveryv1.SendOp_SEND_OP_SEND, IdempotencyKey: "qf-text", Text: "not lost",
		Target: &deliveryv1.Target{Platform: "bluebubbles", Account: h.s.p.Account(), ChatId: groupGUID}}
	if r := h.send(t, req); r.GetOk() {
		t.Fatalf("the first attempt did not time out: %v", r)
	}
	if r := h.send(t, req); r.GetOk() || r.GetRetryAfterMs() != queuedRetry.Milliseconds() {
		t.Fatalf("retry while queued: %v", r)
	}
	f.SlowSends(0)
	var r *deliveryv1.SendReceipt
	deadline := time.Now().Add(10 * time.Second)
	for r = h.send(t, req); !r.GetOk() && time.Now().Before(deadline); r = h.send(t, req) {
		if r.GetErrorClass() != deliveryv1.ErrorClass_ERROR_CLASS_RETRYABLE {
			t.Fatalf("retry: %v", r)
		}
		time.Sleep(100 * time.Millisecond)
	}
	sent := f.Sent(groupGUID)
	if !r.GetOk() || len(sent) != 1 || sent[0].Text != "not lost" || r.GetPlatformMessageId() != sent[0].GUID {
		t.Fatalf("receipt %v, sent %+v", r, sent)
	}
}

// A send BlueBubbles answers 500 "Message send timeout" may have gone
// out: the server stopped waiting for the message to show in the Messages
// database (its timeout, or a sent message it failed to match), and
// Messages sends it all the same. The retry looks for it before it posts,
// for text and uploads alike; before, it posted again and the user got
// the message twice (once per timed-out attempt).
func TestSendTimedOutOnTheServerIsNotSentTwice(t *testing.T) {
	t.Parallel()
	f := newFake(t, false)
	h := start(t, f, testConfig(f), platform.Options{})
	for _, c := range []struct {
		chat string
		req  *deliveryv1.SendRequested
	}{
		{groupGUID, &deliveryv1.SendRequested{Op: deliveryv1.SendOp_SEND_OP_SEND, IdempotencyKey: "t-text", Text: "once",
			Target: &deliveryv1.Target{Platform: "bluebubbles", Account: h.s.p.Account(), ChatId: groupGUID}}},
		{dmGUID, &deliveryv1.SendRequested{Op: deliveryv1.SendOp_SEND_OP_SEND, IdempotencyKey: "t-file",
			Target:      &deliveryv1.Target{Platform: "bluebubbles", Account: h.s.p.Account(), ChatId: dmGUID},
			Attachments: []*eventsv1.Attachment{{Kind: eventsv1.AttachmentKind_ATTACHMENT_KIND_DOCUMENT, FileName: "b.txt", Location: &eventsv1.Attachment_Url{Url: "data:text/plain;base64,aGk="}}}}},
	} {
		key := c.req.GetIdempotencyKey()
		f.TimeOutSends(1)
		r := h.send(t, c.req)
		if r.GetOk() || r.GetErrorClass() != deliveryv1.ErrorClass_ERROR_CLASS_RETRYABLE || !strings.Contains(r.GetError(), "Message send timeout") {
			t.Fatalf("%s: first attempt %v, want retryable with the server's reason", key, r)
		}
		r = h.send(t, c.req)
		sent := f.Sent(c.chat)
		if !r.GetOk() || len(sent) != 1 || r.GetPlatformMessageId() != sent[0].GUID {
			t.Fatalf("%s: retry %v, sent %+v: want the first attempt's message, sent once", key, r, sent)
		}
	}
}

// With the Private API, a text to an address no chat has starts a DM
// with it (POST /api/v1/chat/new), as Hermes; the next send uses that
// chat. Without it, or for a chat id that is no address, the send is
// refused.
func TestSendStartsChat(t *testing.T) {
	t.Parallel()
	f := newFake(t, true)
	h := start(t, f, testConfig(f), platform.Options{})
	const bob = "+15550001111"
	tg := &deliveryv1.Target{Platform: "bluebubbles", Account: h.s.p.Account(), ChatId: bob}
	r := h.send(t, &deliveryv1.SendRequested{Op: deliveryv1.SendOp_SEND_OP_SEND, IdempotencyKey: "n1", Target: tg, Text: "hello bob"})
	sent := f.Sent("iMessage;-;" + bob)
	if !r.GetOk() || f.NewChats() != 1 || len(sent) != 1 || sent[0].Text != "hello bob" || sent[0].TempGUID != "n1" || r.GetPlatformMessageId() != sent[0].GUID {
		t.Fatalf("receipt %v, %d new chats, sent %+v", r, f.NewChats(), sent)
	}
	if r := h.send(t, &deliveryv1.SendRequested{Op: deliveryv1.SendOp_SEND_OP_SEND, IdempotencyKey: "n2", Target: tg, Text: "again"}); !r.GetOk() {
		t.Fatalf("receipt %v", r)
	}
	if n, s := f.NewChats(), f.Sent("iMessage;-;"+bob); n != 1 || len(s) != 2 || s[1].Method != "apple-script" {
		t.Fatalf("%d new chats, sent %+v", n, s)
	}
	// The group member's address: a new DM, never the group.
	if r := h.send(t, &deliveryv1.SendRequested{Op: deliveryv1.SendOp_SEND_OP_SEND, IdempotencyKey: "n3", Text: "private",
		Target: &deliveryv1.Target{Platform: "bluebubbles", Account: tg.Account, ChatId: "+15559990000"}}); !r.GetOk() {
		t.Fatalf("receipt %v", r)
	}
	if len(f.Sent(groupGUID)) != 0 || len(f.Sent("iMessage;-;+15559990000")) != 1 {
		t.Fatalf("group %+v", f.Sent(groupGUID))
	}
	for _, id := range []string{"bob", "+1555abc"} {
		r := h.send(t, &deliveryv1.SendRequested{Op: deliveryv1.SendOp_SEND_OP_SEND, IdempotencyKey: "bad-" + id, Text: "x",
			Target: &deliveryv1.Target{Platform: "bluebubbles", Account: tg.Account, ChatId: id}})
		if r.GetOk() || r.GetErrorClass() != deliveryv1.ErrorClass_ERROR_CLASS_PERMANENT {
			t.Fatalf("%s: receipt %v, want permanent", id, r)
		}
	}
	if f.NewChats() != 2 {
		t.Fatalf("%d new chats, want 2", f.NewChats())
	}
}

// An attachment kept in the store (a file the agent made) is uploaded.
func TestSendKeptAttachment(t *testing.T) {
	t.Parallel()
	f := newFake(t, false)
	acfg := attachment.Config{Enabled: true, MaxBytes: 1 << 20, StoreBytes: 8 << 20}
	h := start(t, f, testConfig(f), platform.Options{Attachments: acfg})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	t.Cleanup(func() {
		_ = h.b.JetStream().DeleteObjectStore(context.Background(), h.b.Topology().Stream(attachment.Bucket))
	})
	if _, err := attachment.New(h.b.JetStream(), h.b.Topology(), acfg).Keep(ctx, "report-1", "application/pdf", strings.NewReader("%PDF-1.4 report")); err != nil {
		t.Fatal(err)
	}
	r := h.send(t, &deliveryv1.SendRequested{Op: deliveryv1.SendOp_SEND_OP_SEND, IdempotencyKey: "kept-1",
		Target:      &deliveryv1.Target{Platform: "bluebubbles", Account: h.s.p.Account(), ChatId: dmGUID},
		Attachments: []*eventsv1.Attachment{{Kind: eventsv1.AttachmentKind_ATTACHMENT_KIND_DOCUMENT, FileName: "report.pdf", Location: &eventsv1.Attachment_BytesRef{BytesRef: "report-1"}}}})
	sent := f.Sent(dmGUID)
	if !r.GetOk() || len(sent) != 1 || sent[0].FileName != "report.pdf" || string(sent[0].Data) != "%PDF-1.4 report" || sent[0].MimeType != "application/pdf" {
		t.Fatalf("receipt %v, sent %+v", r, sent)
	}
}

// An address is a person: a send to one goes to that person's DM only,
// never to a group the person is in (the answer of a DM, or a home
// channel's cron output, would be shown to the whole group); without a
// DM (and without the Private API to start one) it is refused as permanent.
func TestSendToAddressNeverAGroup(t *testing.T) {
	t.Parallel()
	f := newFake(t, false)
	p, err := NewPlatform(testConfig(f), slog.New(slog.DiscardHandler), nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	// +15559990000 is only in the Family group.
	_, err = p.Send(ctx, &deliveryv1.SendRequested{Op: deliveryv1.SendOp_SEND_OP_SEND, IdempotencyKey: "addr-1", Text: "private",
		Target: &deliveryv1.Target{Platform: "bluebubbles", ChatId: "+15559990000"}})
	var se *platform.SendError
	if err == nil || !errors.As(err, &se) || se.Class != deliveryv1.ErrorClass_ERROR_CLASS_PERMANENT || !errors.Is(err, ErrChatNotFound) {
		t.Fatalf("send to an address with no DM: %v", err)
	}
	if got := f.Sent(groupGUID); len(got) != 0 {
		t.Fatalf("the group got %+v", got)
	}
	// Ann has a DM besides the group: hers is used, whatever the order.
	if _, err := p.Send(ctx, &deliveryv1.SendRequested{Op: deliveryv1.SendOp_SEND_OP_SEND, IdempotencyKey: "addr-2", Text: "hi ann",
		Target: &deliveryv1.Target{Platform: "bluebubbles", ChatId: ann}}); err != nil {
		t.Fatal(err)
	}
	if got := f.Sent(dmGUID); len(got) != 1 || len(f.Sent(groupGUID)) != 0 {
		t.Fatalf("dm %+v, group %+v", got, f.Sent(groupGUID))
	}
}
