package sms

import (
	"bytes"
	"context"
	"crypto/sha1"
	"crypto/sha256"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf16"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/switchboard-chat/switchboard/pkg/attachment"
	"github.com/switchboard-chat/switchboard/pkg/bus"
	"github.com/switchboard-chat/switchboard/pkg/bus/bustest"
	"github.com/switchboard-chat/switchboard/pkg/chunk"
	deliveryv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/delivery/v1"
	eventsv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/events/v1"
	"github.com/switchboard-chat/switchboard/pkg/logtest"
	"github.com/switchboard-chat/switchboard/pkg/platform"
	"github.com/switchboard-chat/switchboard/pkg/platform/platformtest"
	"github.com/switchboard-chat/switchboard/services/gateway/sms/smsfake"
)

const ann = "+15551234567"

// harness is a running gateway against a fake Twilio.
type harness struct {
	f   *smsfake.Fake
	s   *Service
	b   *bus.Bus
	url string // the webhook, on the gateway's own address
	evs chan *eventsv1.MessageReceived
}

func start(t *testing.T, f *smsfake.Fake, cfg Config, opts platform.Options) *harness {
	t.Helper()
	b := bustest.New(t, bustest.EmbeddedURL(t))
	opts.Backoff = platform.Schedule(10 * time.Millisecond)
	s, err := New(cfg, Deps{Log: slog.New(slog.DiscardHandler), Bus: b, Runner: opts})
	if err != nil {
		t.Fatal(err)
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
	return &harness{f: f, s: s, b: b, url: "http://" + s.Addr() + s.p.cfg.Path, evs: platformtest.InboundEvents(t, b)}
}

func (h *harness) post(t *testing.T, form url.Values) (int, string, string) {
	t.Helper()
	code, ct, body, err := h.f.Post(context.Background(), h.url, form)
	if err != nil {
		t.Fatal(err)
	}
	return code, ct, body
}

func (h *harness) send(t *testing.T, req *deliveryv1.SendRequested) *deliveryv1.SendReceipt {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	r := &deliveryv1.SendReceipt{}
	if err := h.b.Request(ctx, h.b.Topology().SendSubject("sms"), req, r); err != nil {
		t.Fatal(err)
	}
	return r
}

func target(f *smsfake.Fake) *deliveryv1.Target {
	return &deliveryv1.Target{Platform: "sms", Account: f.PhoneNumber, ChatId: ann}
}

// Only a call signed with the auth token over the public URL is
// published, and answered with empty TwiML; a refusal is 403 and
// publishes nothing. A call made again is published once.
func TestWebhookSignatures(t *testing.T) {
	t.Parallel()
	f := smsfake.New(t)
	h := start(t, f, testConfig(f), platform.Options{})
	ctx := context.Background()
	form := f.Form(smsfake.Inbound{From: ann, Body: "hello"})
	before := testutil.ToFloat64(signatureFailures)
	for _, c := range []struct{ name, sig string }{
		{"missing", ""},
		{"not base64", "%%%"},
		{"other token", smsfake.Sign("other-token", f.PublicURL, form)},
		{"the gateway's own address", smsfake.Sign(f.AuthToken, h.url, form)},
		{"other url", smsfake.Sign(f.AuthToken, f.PublicURL+"/x", form)},
		{"other body", smsfake.Sign(f.AuthToken, f.PublicURL, url.Values{"Body": {"hello"}})},
	} {
		code, _, _, err := smsfake.PostSigned(ctx, h.url, c.sig, form.Encode())
		if err != nil || code != http.StatusForbidden {
			t.Fatalf("%s signature: answered %d %v, want 403", c.name, code, err)
		}
	}
	if got := testutil.ToFloat64(signatureFailures) - before; got < 6 {
		t.Fatalf("signature failures counted %v, want 6", got)
	}
	platformtest.NoEvent(t, h.evs, 200*time.Millisecond)

	code, ct, body := h.post(t, form)
	if code != http.StatusOK || !strings.HasPrefix(ct, "text/xml") || !strings.Contains(body, "<Response/>") {
		t.Fatalf("signed call answered %d %q %q, want 200 with empty TwiML", code, ct, body)
	}
	if ev := platformtest.NextEvent(t, h.evs); ev.GetEventId() != form.Get("MessageSid") || ev.GetText() != "hello" {
		t.Fatalf("published %v", ev)
	}
	// Signed with the default port written out, as some proxies forward.
	again := f.Form(smsfake.Inbound{From: ann, Body: "with port"})
	code, _, _, err := smsfake.PostSigned(ctx, h.url, smsfake.Sign(f.AuthToken, "https://sms.example.com:443/webhooks/twilio", again), again.Encode())
	if err != nil || code != http.StatusOK {
		t.Fatalf("signed with :443: %d %v", code, err)
	}
	if ev := platformtest.NextEvent(t, h.evs); ev.GetText() != "with port" {
		t.Fatalf("published %v", ev)
	}
	// Twilio calls again (the fallback URL, a replay): answered, not
	// published twice.
	if code, _, _ := h.post(t, form); code != http.StatusOK {
		t.Fatalf("repeated call answered %d", code)
	}
	platformtest.NoEvent(t, h.evs, 300*time.Millisecond)
}

// A call a Twilio Webhooks Rule signs with its SharedKey (HMAC-SHA256,
// named in X-Twilio-Webhooks-Signature-Settings) is taken with
// webhook_shared_key set, and refused 403 without it or signed with the
// auth token instead; before, every such call was refused.
func TestWebhookSharedKey(t *testing.T) {
	t.Parallel()
	f := smsfake.New(t)
	cfg := testConfig(f)
	cfg.WebhookSharedKeys = []string{"shared-key-secret"}
	h := start(t, f, cfg, platform.Options{})
	ctx := context.Background()
	const settings = "key=KS0123456789abcdef0123456789abcdef,algorithm=HMAC_SHA256"
	form := f.Form(smsfake.Inbound{From: ann, Body: "signed by a rule"})
	for _, c := range []struct{ name, sig, settings string }{
		{"auth token under a rule", smsfake.Sign(f.AuthToken, f.PublicURL, form), settings},
		{"sha-1 under a sha-256 rule", smsfake.SignWith(sha1.New, "shared-key-secret", f.PublicURL, form), settings},
		{"unknown algorithm", smsfake.SignWith(sha256.New, "shared-key-secret", f.PublicURL, form), "key=KS01,algorithm=HMAC_MD5"},
	} {
		if code, _, _, err := smsfake.PostSignedSettings(ctx, h.url, c.sig, c.settings, form.Encode()); err != nil || code != http.StatusForbidden {
			t.Fatalf("%s: answered %d %v, want 403", c.name, code, err)
		}
	}
	sig := smsfake.SignWith(sha256.New, "shared-key-secret", f.PublicURL, form)
	if code, _, body, err := smsfake.PostSignedSettings(ctx, h.url, sig, settings, form.Encode()); err != nil || code != http.StatusOK {
		t.Fatalf("signed by the rule's shared key: answered %d %q %v, want 200", code, body, err)
	}
	if ev := platformtest.NextEvent(t, h.evs); ev.GetText() != "signed by a rule" {
		t.Fatalf("published %v", ev)
	}
	// Without the shared key configured, a rule's call cannot be checked.
	cfg.WebhookSharedKeys = nil
	h2 := start(t, f, cfg, platform.Options{})
	again := f.Form(smsfake.Inbound{From: ann, Body: "no key"})
	sig = smsfake.SignWith(sha256.New, "shared-key-secret", f.PublicURL, again)
	if code, _, _, _ := smsfake.PostSignedSettings(ctx, h2.url, sig, settings, again.Encode()); code != http.StatusForbidden {
		t.Fatalf("without webhook_shared_key: answered %d, want 403", code)
	}
}

// While a Webhooks Rule's SharedKey is rotated, webhook_shared_key holds
// both secrets and a call signed with either is taken; a call signed
// with a key not in the list is still refused. Before, the setting took
// one key, and whichever key it did not hold was refused 403 during the
// change.
func TestWebhookSharedKeysDuringARotation(t *testing.T) {
	t.Parallel()
	f := smsfake.New(t)
	cfg := testConfig(f)
	cfg.WebhookSharedKeys = []string{" old-secret", "new-secret ", ""}
	h := start(t, f, cfg, platform.Options{})
	ctx := context.Background()
	const settings = "key=KS0123456789abcdef0123456789abcdef,algorithm=HMAC_SHA256"
	for _, c := range []struct {
		key  string
		want int
	}{
		{"old-secret", http.StatusOK},
		{"new-secret", http.StatusOK},
		{"retired-secret", http.StatusForbidden},
		{"", http.StatusForbidden},
	} {
		form := f.Form(smsfake.Inbound{From: ann, Body: "signed with " + c.key})
		sig := smsfake.SignWith(sha256.New, c.key, f.PublicURL, form)
		code, _, body, err := smsfake.PostSignedSettings(ctx, h.url, sig, settings, form.Encode())
		if err != nil || code != c.want {
			t.Fatalf("signed with %q: answered %d %q %v, want %d", c.key, code, body, err, c.want)
		}
		if c.want != http.StatusOK {
			continue
		}
		if ev := platformtest.NextEvent(t, h.evs); ev.GetText() != "signed with "+c.key {
			t.Fatalf("published %v", ev)
		}
	}
	platformtest.NoEvent(t, h.evs, 200*time.Millisecond)
}

// A call with a parameter repeated with one value, signed as Twilio's
// libraries check it (each distinct value once), is taken; before, the
// gateway signed the value twice and refused the call 403.
func TestWebhookRepeatedParameter(t *testing.T) {
	t.Parallel()
	f := smsfake.New(t)
	h := start(t, f, testConfig(f), platform.Options{})
	form := f.Form(smsfake.Inbound{From: ann, Body: "repeated"})
	form.Add("NumSegments", form.Get("NumSegments"))
	if code, _, body := h.post(t, form); code != http.StatusOK {
		t.Fatalf("answered %d %q, want 200", code, body)
	}
	if ev := platformtest.NextEvent(t, h.evs); ev.GetText() != "repeated" {
		t.Fatalf("published %v", ev)
	}
}

// Refusals and skips: each answer, and nothing published.
func TestWebhookRequests(t *testing.T) {
	t.Parallel()
	f := smsfake.New(t)
	cfg := testConfig(f)
	cfg.MaxBodyBytes = 4 << 10
	h := start(t, f, cfg, platform.Options{})
	ctx := context.Background()
	do := func(method, ct, body string) int {
		req, _ := http.NewRequestWithContext(ctx, method, h.url, strings.NewReader(body))
		if ct != "" {
			req.Header.Set("Content-Type", ct)
		}
		req.Header.Set(HeaderSignature, smsfake.Sign(f.AuthToken, f.PublicURL, url.Values{}))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if code := do(http.MethodGet, "", ""); code != http.StatusMethodNotAllowed {
		t.Fatalf("GET answered %d", code)
	}
	if code := do(http.MethodPost, "application/json", "{}"); code != http.StatusUnsupportedMediaType {
		t.Fatalf("JSON answered %d", code)
	}
	if code := do(http.MethodPost, "application/x-www-form-urlencoded", "Body=%zz"); code != http.StatusBadRequest {
		t.Fatalf("bad form answered %d", code)
	}
	if code, _, _ := h.post(t, f.Form(smsfake.Inbound{From: ann, Body: strings.Repeat("x", 5<<10)})); code != http.StatusRequestEntityTooLarge {
		t.Fatalf("oversized call answered %d", code)
	}
	bad := f.Form(smsfake.Inbound{From: ann, Body: "x"})
	bad.Set("MessageSid", "not-a-sid")
	if code, _, _ := h.post(t, bad); code != http.StatusBadRequest {
		t.Fatalf("bad sid answered %d", code)
	}
	skips := map[string]url.Values{}
	status := f.Form(smsfake.Inbound{From: f.PhoneNumber, Body: ""})
	status.Set("MessageStatus", "delivered")
	status.Set("SmsStatus", "delivered")
	skips["status callback"] = status
	skips["own number"] = f.Form(smsfake.Inbound{From: f.PhoneNumber, Body: "echo"})
	other := f.Form(smsfake.Inbound{From: ann, Body: "x"})
	other.Set("To", "+15550000000")
	skips["other phone number"] = other
	acct := f.Form(smsfake.Inbound{From: ann, Body: "x"})
	acct.Set("AccountSid", "AC"+strings.Repeat("f", 32))
	skips["other account"] = acct
	skips["empty message"] = f.Form(smsfake.Inbound{From: ann, Body: "  "})
	for why, form := range skips {
		before := testutil.ToFloat64(skipped.WithLabelValues(why))
		if code, _, body := h.post(t, form); code != http.StatusOK || !strings.Contains(body, "<Response/>") {
			t.Fatalf("%s answered %d %q", why, code, body)
		}
		if testutil.ToFloat64(skipped.WithLabelValues(why)) != before+1 {
			t.Fatalf("%s not counted", why)
		}
	}
	platformtest.NoEvent(t, h.evs, 200*time.Millisecond)
}

// A call the bus cannot take is answered 500 (Twilio calls the fallback
// URL); the handler never answers 200 before the message is stored.
func TestWebhookUnstored(t *testing.T) {
	t.Parallel()
	f := smsfake.New(t)
	p, err := NewPlatform(testConfig(f), slog.New(slog.DiscardHandler), nil)
	if err != nil {
		t.Fatal(err)
	}
	rec := &recorder{err: context.DeadlineExceeded}
	srv := httpServer(t, p.WebhookHandler(rec))
	form := f.Form(smsfake.Inbound{From: ann, Body: "lost?"})
	if code, _, _, _ := f.Post(context.Background(), srv, form); code != http.StatusInternalServerError {
		t.Fatalf("unstored message answered %d, want 500", code)
	}
	rec.mu.Lock()
	rec.err = nil
	rec.mu.Unlock()
	code, _, _, _ := f.Post(context.Background(), srv, form)
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if code != http.StatusOK || len(rec.evs) != 2 {
		t.Fatalf("stored message answered %d after %d deliveries", code, len(rec.evs))
	}
}

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

func httpServer(t *testing.T, h http.Handler) string {
	t.Helper()
	srv := &http.Server{Handler: h}
	ln := listen(t)
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	return "http://" + ln.Addr().String() + "/webhooks/twilio"
}

// Sends: plain text from the business number to the chat's number, MMS
// media by URL, and what cannot be sent refused for good.
func TestSends(t *testing.T) {
	t.Parallel()
	f := smsfake.New(t)
	h := start(t, f, testConfig(f), platform.Options{})
	r := h.send(t, &deliveryv1.SendRequested{Op: deliveryv1.SendOp_SEND_OP_SEND, IdempotencyKey: "s1", Target: target(f),
		Text: "**Done.** See [the docs](https://example.com/d) and `make test`:\n\n```\ngo test ./...\n```"})
	if !r.GetOk() || !strings.HasPrefix(r.GetPlatformMessageId(), "SM") {
		t.Fatalf("receipt %v", r)
	}
	m := f.Messages(ann)
	if len(m) != 1 || m[0].From != f.PhoneNumber || m[0].Body != "Done. See the docs (https://example.com/d) and make test:\n\ngo test ./..." {
		t.Fatalf("sent %+v", m)
	}
	// A chat id written without "+" or with spaces still reaches the number.
	tg := target(f)
	tg.ChatId = "1 555 123-4567"
	if r := h.send(t, &deliveryv1.SendRequested{Op: deliveryv1.SendOp_SEND_OP_SEND, IdempotencyKey: "s2", Target: tg, Text: "again",
		Attachments: []*eventsv1.Attachment{{Kind: eventsv1.AttachmentKind_ATTACHMENT_KIND_IMAGE, Location: &eventsv1.Attachment_Url{Url: "https://example.com/cat.png"}}}}); !r.GetOk() {
		t.Fatalf("receipt %v", r)
	}
	if m := f.Messages(ann); len(m) != 2 || m[1].Body != "again" || len(m[1].MediaURLs) != 1 || m[1].MediaURLs[0] != "https://example.com/cat.png" {
		t.Fatalf("sent %+v", m)
	}
	for _, c := range []struct {
		name string
		req  *deliveryv1.SendRequested
		want string
	}{
		{"too long", &deliveryv1.SendRequested{Text: strings.Repeat("é", 1601)}, "1601 characters"},
		{"empty", &deliveryv1.SendRequested{Text: "  "}, "empty message"},
		{"inline media", &deliveryv1.SendRequested{Text: "x", Attachments: []*eventsv1.Attachment{{Location: &eventsv1.Attachment_BytesRef{BytesRef: "abc.0"}}}}, "public http(s) url"},
	} {
		c.req.Op, c.req.IdempotencyKey, c.req.Target = deliveryv1.SendOp_SEND_OP_SEND, "bad-"+c.name, target(f)
		if r := h.send(t, c.req); r.GetOk() || r.GetErrorClass() != deliveryv1.ErrorClass_ERROR_CLASS_PERMANENT || !strings.Contains(r.GetError(), c.want) {
			t.Fatalf("%s: receipt %v, want permanent naming %q", c.name, r, c.want)
		}
	}
	for _, op := range []deliveryv1.SendOp{deliveryv1.SendOp_SEND_OP_EDIT, deliveryv1.SendOp_SEND_OP_DELETE, deliveryv1.SendOp_SEND_OP_TYPING} {
		if r := h.send(t, &deliveryv1.SendRequested{Op: op, IdempotencyKey: "op-" + op.String(), Target: target(f), MessageId: "SM1", Text: "x"}); r.GetOk() || r.GetErrorClass() != deliveryv1.ErrorClass_ERROR_CLASS_PERMANENT {
			t.Fatalf("%v: receipt %v, want permanent", op, r)
		}
	}
}

// An answer of emoji and other characters outside the BMP, cut as
// delivery cuts an sms answer, reaches Twilio whole: Twilio counts such a
// character as two (UTF-16 units) against its 1,600, so a part of 1,600
// code points would be refused (21617) and lost.
func TestSendAstralCharacters(t *testing.T) {
	t.Parallel()
	f := smsfake.New(t)
	h := start(t, f, testConfig(f), platform.Options{})
	text := strings.Repeat("ok 👍 ", 700)
	parts := chunk.Split(text, "sms")
	for i, p := range parts {
		r := h.send(t, &deliveryv1.SendRequested{Op: deliveryv1.SendOp_SEND_OP_SEND, IdempotencyKey: fmt.Sprint("astral-", i), Target: target(f),
			Text: p, Format: deliveryv1.TextFormat_TEXT_FORMAT_PLAIN})
		if !r.GetOk() {
			t.Fatalf("part %d of %d (%d UTF-16 units): receipt %v", i, len(parts), len(utf16.Encode([]rune(p))), r)
		}
	}
	if got := len(f.Messages(ann)); got != len(parts) {
		t.Fatalf("%d messages sent, want %d", got, len(parts))
	}
	// One that does not fit is refused before Twilio sees it.
	r := h.send(t, &deliveryv1.SendRequested{Op: deliveryv1.SendOp_SEND_OP_SEND, IdempotencyKey: "astral-long", Target: target(f),
		Text: strings.Repeat("👍", 801), Format: deliveryv1.TextFormat_TEXT_FORMAT_PLAIN})
	if r.GetOk() || r.GetErrorClass() != deliveryv1.ErrorClass_ERROR_CLASS_PERMANENT || !strings.Contains(r.GetError(), "1602 characters") {
		t.Fatalf("receipt %v, want permanent naming 1602 characters", r)
	}
}

// A send whose answer was lost (Twilio took it, the connection failed)
// is retried by delivery with the same idempotency key. Twilio has no
// idempotency key of its own: the retry first looks for the message
// among those sent to the number since the first attempt and answers its
// sid instead of texting the user twice. A send that failed with an
// answer posts again.
func TestSendAnswerLost(t *testing.T) {
	t.Parallel()
	f := smsfake.New(t)
	h := start(t, f, testConfig(f), platform.Options{})
	req := &deliveryv1.SendRequested{Op: deliveryv1.SendOp_SEND_OP_SEND, IdempotencyKey: "lost-1", Target: target(f), Text: "the answer"}
	f.HangUp(1)
	if r := h.send(t, req); r.GetOk() || r.GetErrorClass() != deliveryv1.ErrorClass_ERROR_CLASS_RETRYABLE {
		t.Fatalf("receipt %v, want retryable", r)
	}
	if m := f.Messages(ann); len(m) != 1 {
		t.Fatalf("sent %+v, want the message the lost answer was for", m)
	}
	r := h.send(t, req)
	if m := f.Messages(ann); !r.GetOk() || len(m) != 1 || r.GetPlatformMessageId() != m[0].SID {
		t.Fatalf("receipt %v after %+v, want the first attempt's message and no second one", r, m)
	}
	if f.Attempts() != 1 || f.Lists() != 1 {
		t.Fatalf("%d sends and %d lookups, want 1 and 1", f.Attempts(), f.Lists())
	}

	// The same text sent again under another key is a new message.
	if r := h.send(t, &deliveryv1.SendRequested{Op: deliveryv1.SendOp_SEND_OP_SEND, IdempotencyKey: "lost-2", Target: target(f), Text: "the answer"}); !r.GetOk() {
		t.Fatalf("receipt %v", r)
	}
	// A failure with an answer (Twilio did not take it) is posted again,
	// without a lookup.
	f.Fail(smsfake.ErrInternal)
	req3 := &deliveryv1.SendRequested{Op: deliveryv1.SendOp_SEND_OP_SEND, IdempotencyKey: "lost-3", Target: target(f), Text: "third"}
	if r := h.send(t, req3); r.GetOk() {
		t.Fatalf("receipt %v, want a failure", r)
	}
	if r := h.send(t, req3); !r.GetOk() {
		t.Fatalf("receipt %v", r)
	}
	if m := f.Messages(ann); len(m) != 3 || m[1].Body != "the answer" || m[2].Body != "third" || f.Lists() != 1 {
		t.Fatalf("sent %+v with %d lookups, want three messages and one lookup", m, f.Lists())
	}
}

// Twilio's errors as delivery's classes, with clear messages.
func TestSendErrors(t *testing.T) {
	t.Parallel()
	f := smsfake.New(t)
	h := start(t, f, testConfig(f), platform.Options{})
	withRetry := smsfake.ErrTooManyRequests
	withRetry.RetryAfter = 7
	for i, c := range []struct {
		name    string
		fail    smsfake.Failure
		class   deliveryv1.ErrorClass
		after   time.Duration
		message string
	}{
		{"429", smsfake.ErrTooManyRequests, deliveryv1.ErrorClass_ERROR_CLASS_RATE_LIMITED, defaultRetryAfter, "20429"},
		{"429 with retry-after", withRetry, deliveryv1.ErrorClass_ERROR_CLASS_RATE_LIMITED, 7 * time.Second, "20429"},
		{"500 without a body", smsfake.ErrInternal, deliveryv1.ErrorClass_ERROR_CLASS_RETRYABLE, 0, "HTTP 500"},
		{"503", smsfake.Failure{Status: 503, Code: 20503, Message: "Service Unavailable"}, deliveryv1.ErrorClass_ERROR_CLASS_RETRYABLE, 0, "20503"},
		{"the sender's queue is full", smsfake.Failure{Status: 400, Code: 21611, Message: "This 'From' number has exceeded the maximum number of queued messages"}, deliveryv1.ErrorClass_ERROR_CLASS_RETRYABLE, 0, "21611"},
		{"invalid number", smsfake.Failure{Status: 400, Code: 21211, Message: "Invalid 'To' Phone Number"}, deliveryv1.ErrorClass_ERROR_CLASS_PERMANENT, 0, "not a valid phone number"},
		{"unsubscribed", smsfake.Failure{Status: 400, Code: 21610, Message: "Attempt to send to unsubscribed recipient"}, deliveryv1.ErrorClass_ERROR_CLASS_PERMANENT, 0, "replied STOP"},
		{"credentials", smsfake.Failure{Status: 401, Code: 20003, Message: "Authenticate"}, deliveryv1.ErrorClass_ERROR_CLASS_PERMANENT, 0, "refused the account sid and auth token"},
		{"other 4xx", smsfake.Failure{Status: 400, Code: 21620, Message: "Invalid media URL(s)"}, deliveryv1.ErrorClass_ERROR_CLASS_PERMANENT, 0, "21620"},
	} {
		t.Run(c.name, func(t *testing.T) {
			f.Fail(c.fail)
			req := &deliveryv1.SendRequested{Op: deliveryv1.SendOp_SEND_OP_SEND, IdempotencyKey: "e" + string(rune('a'+i)), Text: "hi", Target: target(f)}
			r := h.send(t, req)
			if r.GetOk() || r.GetErrorClass() != c.class || time.Duration(r.GetRetryAfterMs())*time.Millisecond != c.after || !strings.Contains(r.GetError(), c.message) {
				t.Fatalf("receipt %v, want %v after %v naming %q", r, c.class, c.after, c.message)
			}
			if r := h.send(t, req); !r.GetOk() {
				t.Fatalf("retry receipt %v", r)
			}
		})
	}
	// The fake's own check: a recipient who replied STOP.
	f.Unsubscribe(ann)
	if r := h.send(t, &deliveryv1.SendRequested{Op: deliveryv1.SendOp_SEND_OP_SEND, IdempotencyKey: "stop", Text: "hi", Target: target(f)}); r.GetErrorClass() != deliveryv1.ErrorClass_ERROR_CLASS_PERMANENT || !strings.Contains(r.GetError(), "21610") {
		t.Fatalf("unsubscribed: %v", r)
	}
}

// MMS media are downloaded with the account's credentials (through
// Twilio's redirect) into the attachment store when a worker asks,
// within attachments.max_bytes; URLs of other hosts or accounts are not.
func TestFetch(t *testing.T) {
	t.Parallel()
	f := smsfake.New(t)
	acfg := attachment.DefaultConfig()
	acfg.MaxBytes = 1 << 10
	h := start(t, f, testConfig(f), platform.Options{Attachments: acfg})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	pic := []byte("\xff\xd8\xff\xe0 a small jpeg")
	sid := smsfake.NewSID("MM")
	form := f.Form(smsfake.Inbound{SID: sid, From: ann, Body: "what is it", Media: []string{
		f.AddMedia(sid, "image/jpeg", pic),
		f.AddMedia(sid, "video/mp4", bytes.Repeat([]byte("v"), 2<<10)),
		"https://evil.example.com/2010-04-01/Accounts/" + f.AccountSID + "/Messages/" + sid + "/Media/ME" + strings.Repeat("0", 32),
	}, MediaTypes: []string{"image/jpeg", "video/mp4", "image/png"}})
	if code, _, _ := h.post(t, form); code != http.StatusOK {
		t.Fatalf("answered %d", code)
	}
	ev := platformtest.NextEvent(t, h.evs)
	if n := len(ev.GetAttachments()); n != 2 {
		t.Fatalf("%d attachments, want 2 (the foreign URL dropped): %v", n, ev.GetAttachments())
	}
	got := platformtest.Fetch(t, ctx, h.b, "sms", ev, 0)
	if got.GetBytesRef() == "" || got.GetMimeType() != "image/jpeg" || got.GetSizeBytes() != int64(len(pic)) {
		t.Fatalf("fetched %v", got)
	}
	store := attachment.New(h.b.JetStream(), h.b.Topology(), acfg)
	data, _, _, err := store.Head(ctx, got.GetBytesRef(), 1<<10)
	if err != nil || !bytes.Equal(data, pic) {
		t.Fatalf("kept %q %v", data, err)
	}
	if got := platformtest.Fetch(t, ctx, h.b, "sms", ev, 1); got.GetBytesRef() != "" || !strings.Contains(got.GetUnavailable(), "too large") {
		t.Fatalf("video over max_bytes: %v", got)
	}
	if n := f.Downloads(); n != 2 {
		t.Fatalf("%d downloads, want 2", n)
	}
}

// Credentials Twilio refuses are fatal: the gateway turns unready with
// the reason.
func TestRefusedCredentialsAreFatal(t *testing.T) {
	t.Parallel()
	f := smsfake.New(t)
	cfg := testConfig(f)
	cfg.AuthToken = "wrong"
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
			done <- err // for the deferred stop
			t.Fatalf("runner returned %v before the fatal state; logs:\n%s", err, logs.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("not fatal within 20s (state %s); logs:\n%s", st, logs.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err := s.Ready(ctx); err == nil || !strings.Contains(err.Error(), "account sid and auth token") {
		t.Fatalf("readiness %v: want unready naming the credentials", err)
	}
}

func TestConfigValidate(t *testing.T) {
	t.Parallel()
	sid := "AC" + strings.Repeat("a", 32)
	ok := Config{AccountSID: sid, AuthToken: "t", PhoneNumber: "+15550006789", PublicURL: "https://sms.example.com"}
	if err := ok.validate(); err != nil {
		t.Fatal(err)
	}
	if ok.PublicURL != "https://sms.example.com/webhooks/twilio" || ok.Addr != "127.0.0.1:8646" || ok.APIBaseURL != DefaultAPIBaseURL {
		t.Fatalf("defaults: %+v", ok)
	}
	for _, c := range []struct {
		name string
		edit func(*Config)
		want string
	}{
		{"no sid", func(c *Config) { c.AccountSID = "" }, "TWILIO_ACCOUNT_SID"},
		{"bad sid", func(c *Config) { c.AccountSID = "SK" + strings.Repeat("a", 32) }, "AC followed by 32 hex digits"},
		{"no token", func(c *Config) { c.AuthToken = "" }, "TWILIO_AUTH_TOKEN"},
		{"no number", func(c *Config) { c.PhoneNumber = "" }, "TWILIO_PHONE_NUMBER"},
		{"not e164", func(c *Config) { c.PhoneNumber = "5550006789" }, "E.164"},
		{"no public url", func(c *Config) { c.PublicURL = "" }, "SMS_WEBHOOK_PUBLIC_URL"},
		{"bad public url", func(c *Config) { c.PublicURL = "sms.example.com/x" }, "not an http(s) URL"},
		{"bad api url", func(c *Config) { c.APIBaseURL = "ftp://x" }, "api_base_url"},
	} {
		cfg := Config{AccountSID: sid, AuthToken: "t", PhoneNumber: "+15550006789", PublicURL: "https://sms.example.com/hook"}
		c.edit(&cfg)
		if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want an error naming %q", c.name, err, c.want)
		}
	}
}

func listen(t *testing.T) net.Listener {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return ln
}

// TestWebhookRetrySemantics, against the real bus: a message the bus
// cannot take is answered 500, never 200 (Twilio then calls the fallback
// URL, or retries under a connection override), a call that is not a
// message 400; once the bus is back the same call (the fallback, a
// retry) is stored once: the bus id is the MessageSid.
func TestWebhookRetrySemantics(t *testing.T) {
	t.Parallel()
	f := smsfake.New(t)
	cfg := testConfig(f)
	cfg.AckTimeout = time.Second
	h := start(t, f, cfg, platform.Options{})
	ctx := context.Background()
	js, name := h.b.JetStream(), h.b.Topology().Stream(bus.StreamInbound)
	stored := func() uint64 {
		st, err := js.Stream(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		info, err := st.Info(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return info.State.Msgs
	}
	if code, _, _ := h.post(t, url.Values{"AccountSid": {f.AccountSID}, "Body": {"no sid, no sender"}}); code != http.StatusBadRequest {
		t.Fatalf("a call that is not a message answered %d, want 400", code)
	}
	form := f.Form(smsfake.Inbound{From: ann, Body: "during the outage"})
	st, err := js.Stream(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	info, err := st.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := js.DeleteStream(ctx, name); err != nil {
		t.Fatal(err)
	}
	if code, _, _ := h.post(t, form); code != http.StatusInternalServerError {
		t.Fatalf("a message the bus could not take answered %d, want 500", code)
	}
	if _, err := js.CreateStream(ctx, info.Config); err != nil {
		t.Fatal(err)
	}
	for i := range 2 {
		if code, _, _ := h.post(t, form); code != http.StatusOK {
			t.Fatalf("call %d after the outage answered %d, want 200", i+1, code)
		}
		if n := stored(); n != 1 {
			t.Fatalf("call %d after the outage: %d messages stored, want 1", i+1, n)
		}
	}
}

// Delivery cuts the Markdown to Twilio's 1,600 characters; shown as
// plain text it must still fit. A quote's ">x" lines stay as written
// rather than each growing to "> x", past the limit, and the part being
// refused for good.
func TestSendQuotedMarkdownAtTheLimit(t *testing.T) {
	t.Parallel()
	f := smsfake.New(t)
	h := start(t, f, testConfig(f), platform.Options{})
	md := strings.TrimSuffix(strings.Repeat(">a quoted line\n", 300), "\n")
	parts := chunk.Split(md, "sms")
	for i, p := range parts {
		r := h.send(t, &deliveryv1.SendRequested{Op: deliveryv1.SendOp_SEND_OP_SEND, IdempotencyKey: fmt.Sprint("quoted-", i), Target: target(f), Text: p})
		if !r.GetOk() {
			t.Fatalf("part %d of %d (%d UTF-16 units): receipt %v", i, len(parts), len(utf16.Encode([]rune(p))), r)
		}
	}
	if got := len(f.Messages(ann)); got != len(parts) {
		t.Fatalf("%d messages sent, want %d", got, len(parts))
	}
}
