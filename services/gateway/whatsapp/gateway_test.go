package whatsapp

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/protobuf/proto"

	"github.com/switchboard-chat/switchboard/pkg/attachment"
	"github.com/switchboard-chat/switchboard/pkg/bus"
	"github.com/switchboard-chat/switchboard/pkg/bus/bustest"
	"github.com/switchboard-chat/switchboard/pkg/fakellm"
	deliveryv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/delivery/v1"
	eventsv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/events/v1"
	"github.com/switchboard-chat/switchboard/pkg/platform"
	"github.com/switchboard-chat/switchboard/pkg/platform/platformtest"
	"github.com/switchboard-chat/switchboard/services/gateway/whatsapp/whatsappfake"
)

// harness is a running gateway against a fake Cloud API.
type harness struct {
	f    *whatsappfake.Fake
	s    *Service
	b    *bus.Bus
	url  string // the webhook
	msgs chan jetstream.Msg
}

func start(t *testing.T, f *whatsappfake.Fake, cfg Config, opts platform.Options, log ...*slog.Logger) *harness {
	t.Helper()
	b := bustest.New(t, bustest.EmbeddedURL(t))
	opts.Backoff = platform.Schedule(10 * time.Millisecond)
	logger := slog.New(slog.DiscardHandler)
	if len(log) > 0 {
		logger = log[0]
	}
	s, err := New(cfg, Deps{Log: logger, Bus: b, Runner: opts})
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
	cons, err := b.JetStream().OrderedConsumer(context.Background(), b.Topology().Stream(bus.StreamInbound), jetstream.OrderedConsumerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	it, err := cons.Messages()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(it.Stop)
	h := &harness{f: f, s: s, b: b, url: "http://" + s.Addr() + cfg.Path, msgs: make(chan jetstream.Msg, 64)}
	go func() {
		for {
			m, err := it.Next()
			if err != nil {
				return
			}
			h.msgs <- m
		}
	}()
	return h
}

func (h *harness) next(t *testing.T) *eventsv1.MessageReceived {
	t.Helper()
	select {
	case m := <-h.msgs:
		ev := &eventsv1.MessageReceived{}
		if err := proto.Unmarshal(m.Data(), ev); err != nil {
			t.Fatal(err)
		}
		return ev
	case <-time.After(20 * time.Second):
		t.Fatal("no inbound event within 20s")
		return nil
	}
}

// quiet reports that nothing more was published within a moment.
func (h *harness) quiet(t *testing.T) {
	t.Helper()
	select {
	case m := <-h.msgs:
		t.Fatalf("unexpected inbound event: %s", m.Data())
	case <-time.After(200 * time.Millisecond):
	}
}

func (h *harness) post(t *testing.T, body []byte) int {
	t.Helper()
	code, err := h.f.Post(context.Background(), h.url, body)
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
	if err := h.b.Request(ctx, h.b.Topology().SendSubject("whatsapp"), req, r); err != nil {
		t.Fatal(err)
	}
	return r
}

func b64(data []byte) string { return base64.StdEncoding.EncodeToString(data) }

func target() *deliveryv1.Target {
	return &deliveryv1.Target{Platform: "whatsapp", Account: phoneID, ChatId: ann}
}

// Only a body signed with the app secret is published; a refusal is 401
// and publishes nothing. A retried notification is published once.
func TestWebhookSignatures(t *testing.T) {
	t.Parallel()
	f := whatsappfake.New(t)
	h := start(t, f, testConfig(f), platform.Options{})
	ctx := context.Background()
	body := f.Notification(whatsappfake.Text(f.NewID(), ann, "Ann", "signed"))
	before := testutil.ToFloat64(signatureFailures)
	for name, sig := range map[string]string{
		"missing":      "",
		"wrong secret": whatsappfake.Sign("not-the-secret", body),
		"sha1":         "sha1=" + strings.TrimPrefix(whatsappfake.Sign(f.AppSecret, body), "sha256=")[:40],
		"truncated":    whatsappfake.Sign(f.AppSecret, body)[:20],
		"other body":   whatsappfake.Sign(f.AppSecret, append([]byte(" "), body...)),
		"not hex":      "sha256=" + strings.Repeat("zz", 32),
	} {
		code, err := whatsappfake.PostSigned(ctx, h.url, sig, body)
		if err != nil || code != http.StatusUnauthorized {
			t.Errorf("%s signature: %d %v, want 401", name, code, err)
		}
	}
	if got := testutil.ToFloat64(signatureFailures) - before; got < 6 {
		t.Errorf("signature failures counted %v, want at least 6", got)
	}
	h.quiet(t)
	// Upper-case hex is the same signature.
	sig := "sha256=" + strings.ToUpper(strings.TrimPrefix(whatsappfake.Sign(f.AppSecret, body), "sha256="))
	if code, err := whatsappfake.PostSigned(ctx, h.url, sig, body); err != nil || code != http.StatusOK {
		t.Fatalf("good signature: %d %v", code, err)
	}
	if ev := h.next(t); ev.GetText() != "signed" {
		t.Fatalf("published %v", ev)
	}
	// Meta retries the notification: answered, not published again.
	for range 3 {
		if code := h.post(t, body); code != http.StatusOK {
			t.Fatalf("retry answered %d", code)
		}
	}
	h.quiet(t)
}

func TestWebhookRequests(t *testing.T) {
	t.Parallel()
	f := whatsappfake.New(t)
	cfg := testConfig(f)
	cfg.MaxBodyBytes = 4 << 10
	h := start(t, f, cfg, platform.Options{})
	ctx := context.Background()

	for _, c := range []struct {
		name, mode, token, challenge string
		code                         int
	}{
		{"subscribe", "subscribe", f.VerifyToken, "1158201444", http.StatusOK},
		{"wrong token", "subscribe", "guess", "1158201444", http.StatusForbidden},
		{"empty token", "subscribe", "", "1158201444", http.StatusForbidden},
		{"wrong mode", "unsubscribe", f.VerifyToken, "1158201444", http.StatusBadRequest},
		{"no challenge", "subscribe", f.VerifyToken, "", http.StatusBadRequest},
	} {
		code, body, err := f.Verify(ctx, h.url, c.mode, c.token, c.challenge)
		if err != nil || code != c.code {
			t.Errorf("%s: %d %v, want %d", c.name, code, err, c.code)
		}
		if c.code == http.StatusOK && body != c.challenge {
			t.Errorf("%s: answered %q, want the challenge", c.name, body)
		}
	}

	req, _ := http.NewRequestWithContext(ctx, http.MethodPut, h.url, nil)
	if resp, err := http.DefaultClient.Do(req); err != nil || resp.StatusCode != http.StatusMethodNotAllowed {
		t.Errorf("PUT: %v %v, want 405", resp, err)
	} else {
		resp.Body.Close()
	}
	for name, c := range map[string]struct {
		body []byte
		code int
	}{
		"too large": {f.Notification(whatsappfake.Text(f.NewID(), ann, "Ann", strings.Repeat("x", 5<<10))), http.StatusRequestEntityTooLarge},
		"not json":  {[]byte(`{"object":`), http.StatusBadRequest},
		// Status notifications are not messages: answered, counted, not published.
		"status": {f.Status("wamid.OUT1", ann, "delivered", 0), http.StatusOK},
		"failed": {f.Status("wamid.OUT2", ann, "failed", 131047), http.StatusOK},
		"other":  {[]byte(`{"object":"page","entry":[]}`), http.StatusOK},
	} {
		if code := h.post(t, c.body); code != c.code {
			t.Errorf("%s: answered %d, want %d", name, code, c.code)
		}
	}
	h.quiet(t)
	if got := testutil.ToFloat64(statuses.WithLabelValues("failed")); got < 1 {
		t.Errorf("failed statuses counted %v", got)
	}

	// A notification of several messages, one of them malformed and one a
	// reaction: the others are published, in order, and it is answered 200.
	first, third := f.NewID(), f.NewID()
	body := f.Notification(whatsappfake.Text(first, ann, "Ann", "one"),
		whatsappfake.Inbound{ID: f.NewID(), From: ann, Type: "reaction", Object: map[string]any{"message_id": "wamid.OUT1", "emoji": "👍"}},
		whatsappfake.Inbound{ID: "", From: ann, Type: "text", Object: map[string]any{"body": "no id"}},
		whatsappfake.Text(third, ann, "Ann", "three"))
	if code := h.post(t, body); code != http.StatusOK {
		t.Fatalf("batch answered %d", code)
	}
	if a, b := h.next(t), h.next(t); a.GetEventId() != first || b.GetEventId() != third {
		t.Fatalf("published %s, %s; want %s, %s", a.GetEventId(), b.GetEventId(), first, third)
	}
	h.quiet(t)
}

// FuzzSignature: only the HMAC-SHA256 of exactly the body with the secret
// passes.
func FuzzSignature(f *testing.F) {
	f.Add([]byte(`{"object":"whatsapp_business_account"}`), []byte(`{"object":"whatsapp_business_account"}`), "sha256=00", true, "secret")
	f.Add([]byte(`{}`), []byte(`{} `), "", true, "secret")
	f.Add([]byte(``), []byte(``), "sha256=", false, "")
	f.Add([]byte(`x`), []byte(`x`), "SHA256=AB", false, "s")
	f.Fuzz(func(t *testing.T, body, other []byte, header string, sign bool, secret string) {
		if sign {
			mac := hmac.New(sha256.New, []byte(secret))
			mac.Write(body)
			header = "sha256=" + hex.EncodeToString(mac.Sum(nil))
		}
		ok := validSignature(body, header, secret)
		if secret == "" && ok {
			t.Fatal("accepted without a secret")
		}
		if sign && secret != "" && !ok {
			t.Fatal("good signature refused")
		}
		if ok && validSignature(body, header, secret+"x") {
			t.Fatal("signature accepted with another secret")
		}
		if ok && !bytes.Equal(other, body) && validSignature(other, header, secret) {
			t.Fatalf("signature for %q accepted for %q", body, other)
		}
	})
}

// Send requests: text converted to WhatsApp's formatting and quoting the
// user's message on the first chunk; media by link, by upload and by id;
// typing as a read receipt with the typing indicator; Graph API errors as
// delivery's classes.
func TestSends(t *testing.T) {
	t.Parallel()
	f := whatsappfake.New(t)
	h := start(t, f, testConfig(f), platform.Options{})

	r := h.send(t, &deliveryv1.SendRequested{Op: deliveryv1.SendOp_SEND_OP_SEND, IdempotencyKey: "s1", Text: "**Done**: see [docs](https://x.io)",
		Target: &deliveryv1.Target{Platform: "whatsapp", ChatId: "+" + ann, ReplyToMessageId: "wamid.IN1"}})
	if !r.GetOk() || !strings.HasPrefix(r.GetPlatformMessageId(), "wamid.") {
		t.Fatalf("receipt %v", r)
	}
	r = h.send(t, &deliveryv1.SendRequested{Op: deliveryv1.SendOp_SEND_OP_SEND, IdempotencyKey: "s2", Text: "part *two*", ChunkIndex: 1,
		Format: deliveryv1.TextFormat_TEXT_FORMAT_PLAIN, Target: &deliveryv1.Target{Platform: "whatsapp", ChatId: ann + "@s.whatsapp.net", ReplyToMessageId: "wamid.IN1"}})
	if !r.GetOk() {
		t.Fatalf("receipt %v", r)
	}
	got := f.Messages(ann)
	if len(got) != 2 || got[0].Text != "*Done*: see docs (https://x.io)" || got[0].ReplyTo != "wamid.IN1" ||
		got[1].Text != "part *two*" || got[1].ReplyTo != "" {
		t.Fatalf("sent %+v", got)
	}

	if r := h.send(t, &deliveryv1.SendRequested{Op: deliveryv1.SendOp_SEND_OP_SEND, IdempotencyKey: "long", Text: strings.Repeat("é", maxText+1), Format: deliveryv1.TextFormat_TEXT_FORMAT_PLAIN, Target: target()}); r.GetErrorClass() != deliveryv1.ErrorClass_ERROR_CLASS_PERMANENT {
		t.Fatalf("too long: receipt %v, want permanent", r)
	}

	// Typing: the last message the turn answers is marked read, with the indicator.
	r = h.send(t, &deliveryv1.SendRequested{Op: deliveryv1.SendOp_SEND_OP_TYPING, Target: target(), InputMessageIds: []string{"wamid.A", "wamid.B"}})
	if !r.GetOk() {
		t.Fatalf("typing receipt %v", r)
	}
	if reads := f.Reads(); len(reads) != 1 || reads[0] != (whatsappfake.Read{MessageID: "wamid.B", Typing: true}) {
		t.Fatalf("reads %+v", reads)
	}
	if r := h.send(t, &deliveryv1.SendRequested{Op: deliveryv1.SendOp_SEND_OP_EDIT, MessageId: "wamid.OUT1", Text: "x", Target: target()}); r.GetErrorClass() != deliveryv1.ErrorClass_ERROR_CLASS_PERMANENT {
		t.Fatalf("edit receipt %v, want permanent", r)
	}

	// Media: a caption on the picture; audio takes none, so the text goes first.
	png := platformtest.NoisePNG(t, 4, 4)
	r = h.send(t, &deliveryv1.SendRequested{Op: deliveryv1.SendOp_SEND_OP_SEND, IdempotencyKey: "m1", Text: "the **chart**", Target: &deliveryv1.Target{ChatId: "15550000001"},
		Attachments: []*eventsv1.Attachment{
			{Kind: eventsv1.AttachmentKind_ATTACHMENT_KIND_IMAGE, Location: &eventsv1.Attachment_Url{Url: "https://example.com/chart.png"}},
			{Kind: eventsv1.AttachmentKind_ATTACHMENT_KIND_DOCUMENT, FileName: "chart.png", MimeType: "image/png",
				Location: &eventsv1.Attachment_Url{Url: "data:image/png;base64," + b64(png)}},
		}})
	if !r.GetOk() {
		t.Fatalf("media receipt %v", r)
	}
	r = h.send(t, &deliveryv1.SendRequested{Op: deliveryv1.SendOp_SEND_OP_SEND, IdempotencyKey: "m2", Text: "listen", Target: &deliveryv1.Target{ChatId: "15550000001"},
		Attachments: []*eventsv1.Attachment{{Kind: eventsv1.AttachmentKind_ATTACHMENT_KIND_VOICE, PlatformFileId: "777"}}})
	if r.GetOk() || r.GetErrorClass() != deliveryv1.ErrorClass_ERROR_CLASS_PERMANENT {
		t.Fatalf("unknown media id: receipt %v, want permanent", r)
	}
	f.AddMedia("777", "audio/ogg", []byte("OggS"))
	if r := h.send(t, &deliveryv1.SendRequested{Op: deliveryv1.SendOp_SEND_OP_SEND, IdempotencyKey: "m2", Text: "listen", Target: &deliveryv1.Target{ChatId: "15550000001"},
		Attachments: []*eventsv1.Attachment{{Kind: eventsv1.AttachmentKind_ATTACHMENT_KIND_VOICE, PlatformFileId: "777"}}}); !r.GetOk() {
		t.Fatalf("voice receipt %v", r)
	}
	media := f.Messages("15550000001")
	if len(media) != 4 {
		t.Fatalf("sent %+v, want picture, document, text, audio (the retry skips the text the first attempt sent)", media)
	}
	if m := media[0]; m.Type != "image" || m.Link != "https://example.com/chart.png" || m.Text != "the *chart*" {
		t.Fatalf("picture %+v", m)
	}
	if m := media[1]; m.Type != "document" || m.Name != "chart.png" || m.Text != "" {
		t.Fatalf("document %+v", m)
	} else if up, ok := f.MediaByID(m.MediaID); !ok || !bytes.Equal(up.Data, png) || up.MimeType != "image/png" {
		t.Fatalf("uploaded %+v", up)
	}
	if media[2].Type != "text" || media[2].Text != "listen" || media[3].Type != "audio" || media[3].MediaID != "777" || media[3].Text != "" {
		t.Fatalf("voice send %+v", media[2:])
	}
}

// An attachment's own caption that WhatsApp would not take with it (on
// audio, or over 1,024 characters) goes before it as a text message,
// rather than being dropped or failing the send.
func TestAttachmentCaptions(t *testing.T) {
	t.Parallel()
	f := whatsappfake.New(t)
	h := start(t, f, testConfig(f), platform.Options{})
	f.AddMedia("778", "audio/ogg", []byte("OggS"))
	long := strings.Repeat("ü", maxCaption+1)
	r := h.send(t, &deliveryv1.SendRequested{Op: deliveryv1.SendOp_SEND_OP_SEND, IdempotencyKey: "c1", Target: &deliveryv1.Target{ChatId: "15550000002"},
		Attachments: []*eventsv1.Attachment{
			{Kind: eventsv1.AttachmentKind_ATTACHMENT_KIND_VOICE, PlatformFileId: "778", Caption: "hear this"},
			{Kind: eventsv1.AttachmentKind_ATTACHMENT_KIND_IMAGE, Caption: long, Location: &eventsv1.Attachment_Url{Url: "https://example.com/a.png"}},
			{Kind: eventsv1.AttachmentKind_ATTACHMENT_KIND_IMAGE, Caption: "short", Location: &eventsv1.Attachment_Url{Url: "https://example.com/b.png"}},
		}})
	if !r.GetOk() {
		t.Fatalf("receipt %v", r)
	}
	got := f.Messages("15550000002")
	var seen []string
	for _, m := range got {
		seen = append(seen, m.Type+":"+m.Text)
	}
	want := []string{"text:hear this", "audio:", "text:" + long, "image:", "image:short"}
	if strings.Join(seen, "|") != strings.Join(want, "|") {
		t.Fatalf("sent %.200q, want %.200q", seen, want)
	}
}

// An attachment's own caption over WhatsApp's 4,096 characters for a
// text goes before it as several texts, rather than WhatsApp refusing
// it for good and the picture never arriving; a retry after the picture
// failed sends the picture alone.
func TestAttachmentCaptionOverATextsLimit(t *testing.T) {
	t.Parallel()
	f := whatsappfake.New(t)
	h := start(t, f, testConfig(f), platform.Options{})
	para := strings.TrimSpace(strings.Repeat("a longer description. ", 150)) // 3,299 characters
	req := &deliveryv1.SendRequested{Op: deliveryv1.SendOp_SEND_OP_SEND, IdempotencyKey: "c2", Target: &deliveryv1.Target{ChatId: "15550000004"},
		Attachments: []*eventsv1.Attachment{
			{Kind: eventsv1.AttachmentKind_ATTACHMENT_KIND_IMAGE, Caption: para + "\n\n" + strings.ToUpper(para), Location: &eventsv1.Attachment_Url{Url: "https://example.com/a.png"}},
		}}
	f.Fail(whatsappfake.Failure{}, whatsappfake.Failure{}, whatsappfake.ErrThroughput)
	if r := h.send(t, req); r.GetOk() || r.GetErrorClass() != deliveryv1.ErrorClass_ERROR_CLASS_RATE_LIMITED {
		t.Fatalf("first attempt: receipt %v, want the picture rate limited", r)
	}
	if r := h.send(t, req); !r.GetOk() {
		t.Fatalf("retry: receipt %v", r)
	}
	var seen []string
	for _, m := range f.Messages("15550000004") {
		seen = append(seen, m.Type+":"+strings.TrimSpace(m.Text))
	}
	want := []string{"text:" + para, "text:" + strings.ToUpper(para), "image:"}
	if strings.Join(seen, "|") != strings.Join(want, "|") {
		t.Fatalf("sent %.300q, want %.300q", seen, want)
	}
}

// WhatsApp's image messages take JPEG and PNG only. A picture of
// another type given by URL (a GIF or WebP an answer shows) would be
// accepted by Graph and then fail to arrive (a later failed status, the
// receipt already ok), so it goes as its caption and link in a text
// message, which WhatsApp previews; JPEG and PNG stay images.
func TestImageOfOtherTypeSentAsLink(t *testing.T) {
	t.Parallel()
	f := whatsappfake.New(t)
	h := start(t, f, testConfig(f), platform.Options{})
	for i, a := range []*eventsv1.Attachment{
		{Kind: eventsv1.AttachmentKind_ATTACHMENT_KIND_IMAGE, Caption: "dancing", Location: &eventsv1.Attachment_Url{Url: "https://example.com/a/dance.GIF?x=1"}},
		{Kind: eventsv1.AttachmentKind_ATTACHMENT_KIND_IMAGE, MimeType: "image/webp", Location: &eventsv1.Attachment_Url{Url: "https://example.com/pic"}},
		{Kind: eventsv1.AttachmentKind_ATTACHMENT_KIND_IMAGE, Caption: "chart", Location: &eventsv1.Attachment_Url{Url: "https://example.com/chart.jpg"}},
	} {
		r := h.send(t, &deliveryv1.SendRequested{Op: deliveryv1.SendOp_SEND_OP_SEND, IdempotencyKey: "img" + strings.Repeat("x", i),
			Target: &deliveryv1.Target{ChatId: "15550000003"}, Attachments: []*eventsv1.Attachment{a}})
		if !r.GetOk() {
			t.Fatalf("attachment %d: receipt %v", i, r)
		}
	}
	var seen []string
	for _, m := range f.Messages("15550000003") {
		seen = append(seen, m.Type+":"+m.Text+":"+m.Link)
	}
	want := []string{"text:dancing\nhttps://example.com/a/dance.GIF?x=1:", "text:https://example.com/pic:", "image:chart:https://example.com/chart.jpg"}
	if strings.Join(seen, "|") != strings.Join(want, "|") {
		t.Fatalf("sent %q, want %q", seen, want)
	}
}

// Graph API errors reach delivery as its classes: rate limits with a
// retry-after, the closed 24-hour window and a refused token permanent
// with a clear error, Meta's transient errors retryable.
func TestSendErrors(t *testing.T) {
	t.Parallel()
	f := whatsappfake.New(t)
	cfg := testConfig(f)
	// A transient error may have sent the message: its retry waits for
	// WhatsApp's status of it (TestSendWhoseAnswerWasLostIsNotSentTwice),
	// here not at all.
	cfg.reportWait = time.Millisecond
	h := start(t, f, cfg, platform.Options{})
	for i, c := range []struct {
		name    string
		fail    whatsappfake.Failure
		class   deliveryv1.ErrorClass
		after   time.Duration
		message string
	}{
		{"throughput", whatsappfake.ErrThroughput, deliveryv1.ErrorClass_ERROR_CLASS_RATE_LIMITED, rateRetryAfter, "130429"},
		{"throughput with retry-after", func() whatsappfake.Failure { e := whatsappfake.ErrThroughput; e.RetryAfter = 9; return e }(),
			deliveryv1.ErrorClass_ERROR_CLASS_RATE_LIMITED, 9 * time.Second, "130429"},
		{"pair rate limit", whatsappfake.ErrPairRateLimit, deliveryv1.ErrorClass_ERROR_CLASS_RATE_LIMITED, pairRetryAfter, "131056"},
		{"24-hour window", whatsappfake.ErrReengagement, deliveryv1.ErrorClass_ERROR_CLASS_PERMANENT, 0, "24-hour customer service window is closed"},
		{"token", whatsappfake.ErrTokenExpired, deliveryv1.ErrorClass_ERROR_CLASS_PERMANENT, 0, "refused the whatsapp access token"},
		{"temporary", whatsappfake.Failure{Status: 500, Code: 131000, Message: "Something went wrong"}, deliveryv1.ErrorClass_ERROR_CLASS_RETRYABLE, 0, "131000"},
		{"bad request", whatsappfake.Failure{Status: 400, Code: 131009, Message: "Parameter value is not valid"}, deliveryv1.ErrorClass_ERROR_CLASS_PERMANENT, 0, "131009"},
	} {
		t.Run(c.name, func(t *testing.T) {
			f.Fail(c.fail)
			req := &deliveryv1.SendRequested{Op: deliveryv1.SendOp_SEND_OP_SEND, IdempotencyKey: "e" + string(rune('a'+i)), Text: "hi", Target: target()}
			r := h.send(t, req)
			if r.GetOk() || r.GetErrorClass() != c.class || time.Duration(r.GetRetryAfterMs())*time.Millisecond != c.after || !strings.Contains(r.GetError(), c.message) {
				t.Fatalf("receipt %v, want %v after %v naming %q", r, c.class, c.after, c.message)
			}
			// The key is free again: the retry goes out, after a transient
			// error once the receipt's wait for WhatsApp's status of the
			// first attempt (cfg.reportWait, a millisecond) has passed, as
			// delivery retries it.
			r = h.send(t, req)
			for tries := 0; !r.GetOk() && r.GetErrorClass() == deliveryv1.ErrorClass_ERROR_CLASS_RETRYABLE && tries < 10; tries++ {
				time.Sleep(max(time.Duration(r.GetRetryAfterMs())*time.Millisecond, time.Millisecond))
				r = h.send(t, req)
			}
			if !r.GetOk() {
				t.Fatalf("retry receipt %v", r)
			}
		})
	}
}

// Media the user sent is downloaded through the Graph API (the id, then
// its URL, both with the token) into the attachment store when a worker
// asks, within attachments.max_bytes.
func TestFetch(t *testing.T) {
	t.Parallel()
	f := whatsappfake.New(t)
	acfg := attachment.DefaultConfig()
	acfg.MaxBytes = 1 << 10
	h := start(t, f, testConfig(f), platform.Options{Attachments: acfg})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	pic := []byte("\xff\xd8\xff\xe0 a small jpeg")
	f.AddMedia("601", "image/jpeg", pic)
	f.AddMedia("602", "audio/ogg; codecs=opus", bytes.Repeat([]byte("o"), 2<<10))
	id := f.NewID()
	body := f.Notification(
		whatsappfake.Inbound{ID: id, From: ann, Name: "Ann", Type: "image", Object: map[string]any{"id": "601", "mime_type": "image/jpeg", "caption": "what is it"}},
		whatsappfake.Inbound{ID: f.NewID(), From: ann, Name: "Ann", Type: "audio", Object: map[string]any{"id": "602", "mime_type": "audio/ogg; codecs=opus", "voice": true}},
		whatsappfake.Inbound{ID: f.NewID(), From: ann, Name: "Ann", Type: "document", Object: map[string]any{"id": "603", "mime_type": "text/plain", "filename": "gone.txt"}},
		whatsappfake.Inbound{ID: f.NewID(), From: ann, Name: "Ann", Type: "document", Object: map[string]any{"id": "../../etc", "mime_type": "text/plain", "filename": "evil.txt"}},
	)
	if code := h.post(t, body); code != http.StatusOK {
		t.Fatalf("answered %d", code)
	}
	img := h.next(t)
	got := platformtest.Fetch(t, ctx, h.b, "whatsapp", img, 0)
	if got.GetBytesRef() == "" || got.GetMimeType() != "image/jpeg" || got.GetSizeBytes() != int64(len(pic)) {
		t.Fatalf("fetched %v", got)
	}
	store := attachment.New(h.b.JetStream(), h.b.Topology(), acfg)
	data, _, _, err := store.Head(ctx, got.GetBytesRef(), 1<<10)
	if err != nil || !bytes.Equal(data, pic) {
		t.Fatalf("kept %q %v", data, err)
	}
	if got := platformtest.Fetch(t, ctx, h.b, "whatsapp", h.next(t), 0); got.GetBytesRef() != "" || !strings.Contains(got.GetUnavailable(), "too large") {
		t.Fatalf("voice over max_bytes: %v", got)
	}
	for _, what := range []string{"unknown media", "bad media id"} {
		if got := platformtest.Fetch(t, ctx, h.b, "whatsapp", h.next(t), 0); got.GetBytesRef() != "" || got.GetUnavailable() == "" {
			t.Fatalf("%s: %v", what, got)
		}
	}
	if n := f.Downloads(); n != 2 {
		t.Fatalf("%d downloads, want 2 (the picture, the voice note cut off)", n)
	}
}

// A token Meta refuses is fatal: the gateway turns unready with the reason.
func TestRefusedTokenIsFatal(t *testing.T) {
	t.Parallel()
	f := whatsappfake.New(t)
	cfg := testConfig(f)
	cfg.AccessToken = "expired"
	b := bustest.New(t, bustest.EmbeddedURL(t))
	s, err := New(cfg, Deps{Log: slog.New(slog.DiscardHandler), Bus: b, Runner: platform.Options{Backoff: platform.Schedule(10 * time.Millisecond)}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	defer func() { stop(); <-done; platformtest.DeleteBuckets(b) }()
	platformtest.WaitFor(t, "the fatal state", func() bool { st, _ := s.Runner().State(); return st == platform.StateFatal })
	if err := s.Ready(ctx); err == nil || !strings.Contains(err.Error(), "access token") {
		t.Fatalf("readiness %v: want unready naming the token", err)
	}
}

func TestConfigValidate(t *testing.T) {
	t.Parallel()
	ok := Config{AccessToken: "t", PhoneNumberID: "123", AppSecret: "s", VerifyToken: "v"}
	if err := ok.Validate(); err != nil {
		t.Fatal(err)
	}
	for name, mutate := range map[string]func(*Config){
		"no token":        func(c *Config) { c.AccessToken = "" },
		"no phone id":     func(c *Config) { c.PhoneNumberID = "" },
		"a phone number":  func(c *Config) { c.PhoneNumberID = "+15550783881" },
		"no app secret":   func(c *Config) { c.AppSecret = "" },
		"no verify token": func(c *Config) { c.VerifyToken = "" },
		"bad base url":    func(c *Config) { c.APIBaseURL = "graph.facebook.com" },
	} {
		c := ok
		mutate(&c)
		if err := c.Validate(); err == nil {
			t.Errorf("%s: valid", name)
		}
	}
}

// A voice reply (/voice) kept in the attachment store goes as uploaded
// audio, which WhatsApp plays as a voice note when it is Opus in Ogg.
func TestKeptVoiceReply(t *testing.T) {
	t.Parallel()
	f := whatsappfake.New(t)
	h := start(t, f, testConfig(f), platform.Options{Attachments: attachment.DefaultConfig()})
	ogg := fakellm.OggOpus(4)
	store := attachment.New(h.b.JetStream(), h.b.Topology(), attachment.DefaultConfig())
	if _, err := store.Keep(context.Background(), "voice-reply/turn-1", "audio/ogg", bytes.NewReader(ogg)); err != nil {
		t.Fatal(err)
	}
	r := h.send(t, &deliveryv1.SendRequested{Op: deliveryv1.SendOp_SEND_OP_SEND, IdempotencyKey: "v1", Target: target(),
		Attachments: []*eventsv1.Attachment{{Kind: eventsv1.AttachmentKind_ATTACHMENT_KIND_VOICE, MimeType: "audio/ogg", FileName: "voice-reply.ogg",
			Location: &eventsv1.Attachment_BytesRef{BytesRef: "voice-reply/turn-1"}}}})
	if !r.GetOk() {
		t.Fatalf("receipt %v", r)
	}
	got := f.Messages(ann)
	if len(got) != 1 || got[0].Type != "audio" {
		t.Fatalf("sent %+v, want one audio message", got)
	}
	if up, ok := f.MediaByID(got[0].MediaID); !ok || !bytes.Equal(up.Data, ogg) || up.MimeType != "audio/ogg" {
		t.Fatalf("uploaded %+v", up)
	}
}

// Delivery cuts the Markdown to WhatsApp's 4,096 characters; converted
// to WhatsApp's formatting it may be longer (a quote's ">x" is "> x").
// It still arrives, as several messages that each fit, the first
// quoting the user's, rather than WhatsApp refusing the one and the
// send dead-lettering. A retry after a later message failed sends only
// the rest.
func TestConvertedTextOverTheLimit(t *testing.T) {
	t.Parallel()
	f := whatsappfake.New(t)
	h := start(t, f, testConfig(f), platform.Options{})
	f.AddMedia("779", "audio/ogg", []byte("OggS"))
	md := strings.TrimSuffix(strings.Repeat(">a quoted line\n", 273), "\n") // 4,094 characters
	shown := strings.ReplaceAll(md, ">", "> ")
	for i, c := range []struct {
		name        string
		attachments []*eventsv1.Attachment
		want        []string // the messages' types after the text
	}{
		{"text", nil, nil},
		// Audio takes no caption: the text goes first on its own.
		{"before a voice note", []*eventsv1.Attachment{{Kind: eventsv1.AttachmentKind_ATTACHMENT_KIND_VOICE, PlatformFileId: "779"}}, []string{"audio"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			chat := fmt.Sprintf("1555000010%d", i)
			req := &deliveryv1.SendRequested{Op: deliveryv1.SendOp_SEND_OP_SEND, IdempotencyKey: "over" + chat, Text: md,
				Target: &deliveryv1.Target{ChatId: chat, ReplyToMessageId: "wamid.IN9"}, Attachments: c.attachments}
			f.Fail(whatsappfake.Failure{}, whatsappfake.ErrThroughput)
			if r := h.send(t, req); r.GetErrorClass() != deliveryv1.ErrorClass_ERROR_CLASS_RATE_LIMITED {
				t.Fatalf("first attempt: receipt %v, want the second message rate limited", r)
			}
			if r := h.send(t, req); !r.GetOk() {
				t.Fatalf("retry: receipt %v", r)
			}
			ms := f.Messages(chat)
			var texts, types []string
			for j, m := range ms {
				if m.Type != "text" {
					types = append(types, m.Type)
					continue
				}
				if n := utf8.RuneCountInString(m.Text); n > maxText {
					t.Errorf("message %d has %d characters", j, n)
				}
				if (m.ReplyTo != "") != (j == 0) {
					t.Errorf("message %d quotes %q", j, m.ReplyTo)
				}
				texts = append(texts, m.Text)
			}
			if len(texts) != 2 || strings.Join(texts, "\n") != shown || fmt.Sprint(types) != fmt.Sprint(c.want) {
				t.Fatalf("sent %d texts (%d characters), then %v; want two texts showing the %d characters, then %v",
					len(texts), utf8.RuneCountInString(strings.Join(texts, "\n")), types, utf8.RuneCountInString(shown), c.want)
			}
		})
	}
}

// A user whose username hides their number writes from a business-scoped
// user id (BSUID): the answer goes to it as the Cloud API takes it, in
// "recipient" ("to" takes phone numbers only), the first chunk quoting
// the user's message as for any user.
func TestSendToBusinessScopedUser(t *testing.T) {
	t.Parallel()
	const bsuid = "US.13491208655302741918"
	f := whatsappfake.New(t)
	h := start(t, f, testConfig(f), platform.Options{})
	r := h.send(t, &deliveryv1.SendRequested{Op: deliveryv1.SendOp_SEND_OP_SEND, IdempotencyKey: "u1", Text: "hello",
		Target: &deliveryv1.Target{Platform: "whatsapp", Account: phoneID, ChatId: bsuid, ReplyToMessageId: "wamid.IN1"}})
	if !r.GetOk() {
		t.Fatalf("receipt %v", r)
	}
	got := f.Messages(bsuid)
	if len(got) != 1 || got[0].Text != "hello" || got[0].ReplyTo != "wamid.IN1" {
		t.Fatalf("sent %+v", got)
	}
	if raw := string(got[0].Raw); !strings.Contains(raw, `"recipient":"`+bsuid+`"`) || strings.Contains(raw, `"to":`) {
		t.Fatalf("request %s, want the BSUID as recipient and no to", raw)
	}
}
