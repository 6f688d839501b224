package googlechat

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/switchboard-chat/switchboard/pkg/bus"
	"github.com/switchboard-chat/switchboard/pkg/bus/bustest"
	"github.com/switchboard-chat/switchboard/pkg/chunk"
	deliveryv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/delivery/v1"
	eventsv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/events/v1"
	"github.com/switchboard-chat/switchboard/pkg/platform"
	"github.com/switchboard-chat/switchboard/pkg/platform/platformtest"
	"github.com/switchboard-chat/switchboard/services/gateway/googlechat/googlechatfake"
)

// harness is a running gateway against a fake Google.
type harness struct {
	f   *googlechatfake.Fake
	s   *Service
	b   *bus.Bus
	url string
	evs chan *eventsv1.MessageReceived
}

func start(t *testing.T, f *googlechatfake.Fake, cfg Config) *harness {
	t.Helper()
	b := bustest.New(t, bustest.EmbeddedURL(t))
	s, err := New(cfg, Deps{Log: slog.New(slog.DiscardHandler), Bus: b, Runner: platform.Options{Backoff: platform.Schedule(10 * time.Millisecond)}})
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
	return &harness{f: f, s: s, b: b, url: "http://" + s.Addr() + cfg.Path, evs: platformtest.InboundEvents(t, b)}
}

// TestTokenChecks: only an event with Google Chat's valid token for this
// app reaches the bus; one whose token cannot be checked is answered 503
// so that it is not taken for delivered.
func TestTokenChecks(t *testing.T) {
	f := googlechatfake.New(t)
	h := start(t, f, testConfig(f))
	other, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	with := func(mod func(jwt.MapClaims)) string {
		c := f.Claims()
		mod(c)
		return "Bearer " + f.Sign(c)
	}
	foreign := func() string {
		tok := jwt.NewWithClaims(jwt.SigningMethodRS256, f.Claims())
		tok.Header["kid"] = "chat-key-1"
		s, _ := tok.SignedString(other)
		return "Bearer " + s
	}()
	body := []byte(`{"type":"MESSAGE","space":{"name":"spaces/D","spaceType":"DIRECT_MESSAGE"},"message":{"name":"spaces/D/messages/x","sender":{"name":"users/1","email":"a@b","type":"HUMAN"},"text":"forged"}}`)
	for name, auth := range map[string]string{
		"none":           "",
		"not bearer":     "Basic abc",
		"other audience": with(func(c jwt.MapClaims) { c["aud"] = "999" }),
		"other issuer":   with(func(c jwt.MapClaims) { c["iss"] = "someone@example.iam.gserviceaccount.com" }),
		"expired":        with(func(c jwt.MapClaims) { c["exp"] = time.Now().Add(-time.Hour).Unix() }),
		"no expiry":      with(func(c jwt.MapClaims) { delete(c, "exp") }),
		"foreign key":    foreign,
		"alg none":       "Bearer eyJhbGciOiJub25lIiwia2lkIjoiY2hhdC1rZXktMSJ9.eyJpc3MiOiJjaGF0QHN5c3RlbS5nc2VydmljZWFjY291bnQuY29tIn0.",
	} {
		code, err := f.PostRaw(context.Background(), h.url, body, auth)
		if err != nil {
			t.Fatal(err)
		}
		if code != http.StatusUnauthorized {
			t.Errorf("%s: answered %d, want 401", name, code)
		}
	}
	platformtest.NoEvent(t, h.evs, 200*time.Millisecond)

	ok := f.Message("spaces/D", "DIRECT_MESSAGE", "a@example.com", "A", "real")
	if code, err := f.Post(context.Background(), h.url, ok); err != nil || code != http.StatusOK {
		t.Fatalf("valid event: %d %v", code, err)
	}
	if ev := platformtest.NextEvent(t, h.evs); ev.GetText() != "real" {
		t.Fatalf("published %q", ev.GetText())
	}
}

func TestKeysUnavailable(t *testing.T) {
	f := googlechatfake.New(t)
	cfg := testConfig(f)
	cfg.KeysURL = "http://127.0.0.1:1/jwks"
	h := start(t, f, cfg)
	code, err := f.Post(context.Background(), h.url, f.Message("spaces/D", "DIRECT_MESSAGE", "a@example.com", "A", "x"))
	if err != nil || code != http.StatusServiceUnavailable {
		t.Fatalf("answered %d %v, want 503", code, err)
	}
}

func newPlatform(t *testing.T) (*googlechatfake.Fake, *Platform) {
	f := googlechatfake.New(t)
	p, err := NewPlatform(testConfig(f), slog.New(slog.DiscardHandler), nil)
	if err != nil {
		t.Fatal(err)
	}
	return f, p
}

func class(err error) deliveryv1.ErrorClass {
	var se *platform.SendError
	if errors.As(err, &se) {
		return se.Class
	}
	return deliveryv1.ErrorClass_ERROR_CLASS_UNSPECIFIED
}

// TestSend: threads, Google Chat's formatting, requestId idempotency and
// the classes of the Chat API's failures.
func TestSend(t *testing.T) {
	f, p := newPlatform(t)
	ctx := context.Background()
	const sp, th = "spaces/S1", "spaces/S1/threads/t1"
	req := &deliveryv1.SendRequested{Target: &deliveryv1.Target{Platform: PlatformName, ChatId: sp, ThreadId: th}, Text: "**done**", IdempotencyKey: "turn:1:0"}
	id, err := p.Send(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	again, err := p.Send(ctx, req)
	if err != nil || again != id {
		t.Fatalf("repeated send: %s %v, want %s", again, err, id)
	}
	ms := f.Messages(sp)
	if len(ms) != 1 || ms[0].Text != "*done*" || ms[0].Thread != th || ms[0].RequestID == "" {
		t.Fatalf("messages %+v", ms)
	}

	edit := &deliveryv1.SendRequested{Target: req.Target, MessageId: id, Text: "edited"}
	if err := p.Edit(ctx, edit); err != nil {
		t.Fatal(err)
	}
	if err := p.Delete(ctx, edit); err != nil {
		t.Fatal(err)
	}
	if got := f.Texts(sp); len(got) != 0 {
		t.Fatalf("texts after delete %q", got)
	}
	if err := p.Edit(ctx, &deliveryv1.SendRequested{Target: req.Target, MessageId: "spaces/OTHER/messages/1", Text: "x"}); class(err) != deliveryv1.ErrorClass_ERROR_CLASS_PERMANENT {
		t.Fatalf("edit in another space: %v", err)
	}

	for _, c := range []struct {
		fail googlechatfake.Failure
		want deliveryv1.ErrorClass
	}{
		{googlechatfake.Failure{Status: 429, RetryAfter: 3}, deliveryv1.ErrorClass_ERROR_CLASS_RATE_LIMITED},
		{googlechatfake.Failure{Status: 503}, deliveryv1.ErrorClass_ERROR_CLASS_UNSPECIFIED},
		{googlechatfake.Failure{Status: 403}, deliveryv1.ErrorClass_ERROR_CLASS_PERMANENT},
		{googlechatfake.Failure{Status: 404}, deliveryv1.ErrorClass_ERROR_CLASS_PERMANENT},
	} {
		f.Fail(c.fail)
		_, err := p.Send(ctx, &deliveryv1.SendRequested{Target: &deliveryv1.Target{ChatId: sp}, Text: "x", IdempotencyKey: "k"})
		if err == nil || class(err) != c.want {
			t.Errorf("HTTP %d: %v (class %v), want class %v", c.fail.Status, err, class(err), c.want)
		}
	}
	if _, err := p.Send(ctx, &deliveryv1.SendRequested{Target: &deliveryv1.Target{ChatId: sp, ThreadId: "spaces/OTHER/threads/1"}, Text: "x"}); class(err) != deliveryv1.ErrorClass_ERROR_CLASS_PERMANENT {
		t.Fatalf("thread of another space: %v", err)
	}
	// Pictures go as links on lines of their own; a file without an
	// http(s) URL cannot go at all.
	pic := &deliveryv1.SendRequested{Target: &deliveryv1.Target{ChatId: "spaces/S2"}, Text: "look",
		Attachments: []*eventsv1.Attachment{{Location: &eventsv1.Attachment_Url{Url: "https://example.com/cat.png"}}}}
	if _, err := p.Send(ctx, pic); err != nil {
		t.Fatal(err)
	}
	if got := f.Texts("spaces/S2"); len(got) != 1 || got[0] != "look\nhttps://example.com/cat.png" {
		t.Fatalf("picture sent as %q", got)
	}
	pic.Text, pic.IdempotencyKey = "", "only-a-picture"
	if _, err := p.Send(ctx, pic); err != nil {
		t.Fatal(err)
	}
	if got := f.Texts("spaces/S2"); len(got) != 2 || got[1] != "https://example.com/cat.png" {
		t.Fatalf("picture alone sent as %q", got)
	}
	pic.Attachments[0].Location = &eventsv1.Attachment_Url{Url: "data:image/png;base64,AAAA"}
	if _, err := p.Send(ctx, pic); class(err) != deliveryv1.ErrorClass_ERROR_CLASS_PERMANENT {
		t.Fatalf("inline file: %v", err)
	}
	if err := p.Typing(ctx, req); !errors.Is(err, platform.ErrUnsupported) {
		t.Fatalf("typing: %v", err)
	}
}

func TestFetch(t *testing.T) {
	f, p := newPlatform(t)
	ref := f.AddFile([]byte("pixels"), "image/png")
	rc, mt, err := p.Fetch(context.Background(), &eventsv1.Attachment{PlatformFileId: ref})
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	b, _ := io.ReadAll(rc)
	if string(b) != "pixels" || mt != "image/png" {
		t.Fatalf("fetched %q %q", b, mt)
	}
	if _, _, err := p.Fetch(context.Background(), &eventsv1.Attachment{PlatformFileId: "../token"}); !errors.Is(err, platform.ErrNotFetched) {
		t.Fatalf("traversal: %v", err)
	}
}

func TestRefusedServiceAccountIsFatal(t *testing.T) {
	f := googlechatfake.New(t)
	other := googlechatfake.New(t)
	cfg := testConfig(f)
	cfg.ServiceAccountJSON = other.ServiceAccountJSON() // signed with another key
	cfg.TokenURL = f.TokenURL()
	p, err := NewPlatform(cfg, slog.New(slog.DiscardHandler), nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Connect(context.Background(), nil); !platform.IsFatal(err) {
		t.Fatalf("connect with a refused key: %v, want fatal", err)
	}
}

func TestConfig(t *testing.T) {
	if err := (Config{ServiceAccountJSON: "x"}).Validate(); err == nil {
		t.Fatal("no audience accepted")
	}
	if err := (Config{Audience: "1"}).Validate(); err == nil {
		t.Fatal("no service account accepted")
	}
	if err := (Config{Audience: "1", ServiceAccountJSON: "x", APIBaseURL: "ftp://x"}).Validate(); err == nil {
		t.Fatal("ftp api accepted")
	}
	if _, err := NewPlatform(Config{Audience: "1", ServiceAccountJSON: "/nonexistent/sa.json"}, nil, nil); err == nil {
		t.Fatal("missing key file accepted")
	}
}

// TestEventRetrySemantics: what Google Chat is answered decides whether
// it may post an event again. Input that is not an event is refused 400
// (nothing to retry); an event whose message the bus cannot take is
// answered 500, never 200, so it is not taken for delivered; once the bus
// is back the event is stored, and the same event posted again (a
// redelivery) is answered 200 and stored once (bus id: the message name).
func TestEventRetrySemantics(t *testing.T) {
	t.Parallel()
	f := googlechatfake.New(t)
	cfg := testConfig(f)
	cfg.AckTimeout = time.Second
	h := start(t, f, cfg)
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
	auth := "Bearer " + f.Sign(f.Claims())
	ev := f.Message("spaces/D", "DIRECT_MESSAGE", "a@example.com", "A", "during the outage")
	for _, tc := range []struct {
		name string
		body string
		want int
	}{
		{"not JSON", "{", http.StatusBadRequest},
		{"no type", `{"space":{"name":"spaces/D"}}`, http.StatusBadRequest},
		{"no space", `{"type":"MESSAGE","message":{"name":"spaces/D/messages/1","text":"x"}}`, http.StatusBadRequest},
	} {
		if code, err := f.PostRaw(ctx, h.url, []byte(tc.body), auth); err != nil || code != tc.want {
			t.Fatalf("%s: answered %d %v, want %d", tc.name, code, err, tc.want)
		}
	}

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
	if code, err := f.Post(ctx, h.url, ev); err != nil || code != http.StatusInternalServerError {
		t.Fatalf("event the bus could not take answered %d %v, want 500", code, err)
	}
	if _, err := js.CreateStream(ctx, info.Config); err != nil {
		t.Fatal(err)
	}
	for i, want := range []uint64{1, 1} {
		if code, err := f.Post(ctx, h.url, ev); err != nil || code != http.StatusOK {
			t.Fatalf("post %d after the outage answered %d %v, want 200", i+1, code, err)
		}
		if n := stored(); n != want {
			t.Fatalf("post %d after the outage: %d messages stored, want %d", i+1, n, want)
		}
	}
}

// TestBotMessages: with allow_bots, another app's message that Google
// Chat posts reaches the bus marked is_bot; without it, it is skipped, as
// is the app's own message whatever allow_bots says (the sender name the
// Chat API gave a message the gateway created, users/app at the fake).
func TestBotMessages(t *testing.T) {
	t.Parallel()
	for _, mode := range []string{"none", "all"} {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			f := googlechatfake.New(t)
			cfg := testConfig(f)
			cfg.AllowBots = mode
			h := start(t, f, cfg)
			ctx := context.Background()
			if _, err := h.s.p.Send(ctx, &deliveryv1.SendRequested{Target: &deliveryv1.Target{Platform: PlatformName, ChatId: "spaces/S"}, Text: "hello"}); err != nil {
				t.Fatalf("send: %v", err)
			}
			fromApp := func(sender, text string) map[string]any {
				ev := f.Message("spaces/S", "SPACE", "other-app@example.com", "Other app", text)
				ev["message"].(map[string]any)["sender"] = map[string]any{"name": sender, "displayName": "Other app", "type": "BOT"}
				return ev
			}
			for _, ev := range []map[string]any{fromApp("users/app", "my own words"), fromApp("users/777", "from another app")} {
				if code, err := f.Post(ctx, h.url, ev); err != nil || code != http.StatusOK {
					t.Fatalf("post: %d %v", code, err)
				}
			}
			if mode == "none" {
				platformtest.NoEvent(t, h.evs, 300*time.Millisecond)
				return
			}
			ev := platformtest.NextEvent(t, h.evs)
			if ev.GetText() != "from another app" || !ev.GetSource().GetIsBot() || ev.GetSource().GetUserIdAlt() != "users/777" {
				t.Fatalf("published %q from %s (is_bot %v), want the other app's message marked as a bot's", ev.GetText(), ev.GetSource().GetUserIdAlt(), ev.GetSource().GetIsBot())
			}
			platformtest.NoEvent(t, h.evs, 300*time.Millisecond)
		})
	}
}

// Delivery cuts the Markdown to Google Chat's 4,096 characters; converted
// (a quote's ">x" is "> x") and with the attachments' links after it, it
// may be longer. It still arrives, as several messages in the thread
// that each fit, rather than Chat refusing the one and the send
// dead-lettering. A retry after a later message failed creates only the
// rest: each message has its own requestId.
func TestConvertedTextOverTheLimit(t *testing.T) {
	f, p := newPlatform(t)
	ctx := context.Background()
	md := quotedOverLimit
	link := "https://example.com/cat.png"
	for i, c := range []struct {
		name  string
		text  string
		atts  []*eventsv1.Attachment
		shown string
	}{
		{"quotes", md, nil, strings.ReplaceAll(md, ">", "> ")},
		{"links", strings.Repeat("x", 4090), []*eventsv1.Attachment{{Location: &eventsv1.Attachment_Url{Url: link}}}, strings.Repeat("x", 4090) + "\n" + link},
	} {
		t.Run(c.name, func(t *testing.T) {
			sp := fmt.Sprintf("spaces/L%d", i)
			th := sp + "/threads/t1"
			req := &deliveryv1.SendRequested{Target: &deliveryv1.Target{Platform: PlatformName, ChatId: sp, ThreadId: th}, Text: c.text,
				Attachments: c.atts, IdempotencyKey: "over:" + sp}
			f.Fail(googlechatfake.Failure{}, googlechatfake.Failure{Status: 503})
			if _, err := p.Send(ctx, req); err == nil {
				t.Fatal("first attempt went through, want the second message failed")
			}
			if _, err := p.Send(ctx, req); err != nil {
				t.Fatalf("retry: %v", err)
			}
			var texts []string
			for _, m := range f.Messages(sp) {
				if n := len([]rune(m.Text)); n > maxText || m.Thread != th {
					t.Errorf("a message of %d characters in thread %q", n, m.Thread)
				}
				texts = append(texts, m.Text)
			}
			if got := strings.Join(texts, "\n"); len(texts) != 2 || got != c.shown {
				t.Fatalf("%d messages showing %d characters, want 2 showing the %d characters", len(texts), len([]rune(got)), len([]rune(c.shown)))
			}
		})
	}
}

// An edit whose text the conversion makes longer than 4,096 characters
// (a stream's final edit of a message cut at the limit in Markdown) was
// refused for good, the message keeping what it showed before: the
// message now shows the text cut to the limit and the rest follows it
// in its thread. Edits of the message that overflow again (the stream
// growing, a retry) show their rest in that same message, no other.
func TestEditOverTheLimit(t *testing.T) {
	f, p := newPlatform(t)
	ctx := context.Background()
	sp, th := "spaces/E1", "spaces/E1/threads/t1"
	target := &deliveryv1.Target{Platform: PlatformName, ChatId: sp, ThreadId: th}
	id, err := p.Send(ctx, &deliveryv1.SendRequested{Target: target, Text: "streaming ▉", IdempotencyKey: "edit-over"})
	if err != nil {
		t.Fatal(err)
	}
	md := quotedOverLimit
	longer := md + "\n>one line more"
	for _, text := range []string{md, md, longer} {
		if err := p.Edit(ctx, &deliveryv1.SendRequested{Target: target, MessageId: id, Text: text}); err != nil {
			t.Fatalf("edit: %v", err)
		}
		var texts []string
		for _, m := range f.Messages(sp) {
			if n := len([]rune(m.Text)); n > maxText || m.Thread != th {
				t.Errorf("a message of %d characters in thread %q", n, m.Thread)
			}
			texts = append(texts, m.Text)
		}
		want := strings.ReplaceAll(text, ">", "> ")
		if got := strings.Join(texts, "\n"); len(texts) != 2 || texts[0] == "" || got != want {
			t.Fatalf("%d messages showing %d characters, want 2 showing the %d characters", len(texts), len([]rune(got)), len([]rune(want)))
		}
	}
}

// A message whose send was split (the conversion made it longer than
// 4,096 characters) is edited as one text over all its messages: the
// first shows what fits and the send's later pieces the rest, rather
// than the edit creating messages of its own beside them; and an edit
// that fits fewer messages (a final that rewrites the answer shorter)
// deletes the surplus ones (spaces.messages.delete), rather than leave
// them showing stale text.
func TestEditRewritesASplitSend(t *testing.T) {
	f, p := newPlatform(t)
	ctx := context.Background()
	sp, th := "spaces/E2", "spaces/E2/threads/t1"
	target := &deliveryv1.Target{Platform: PlatformName, ChatId: sp, ThreadId: th}
	md := quotedOverLimit
	id, err := p.Send(ctx, &deliveryv1.SendRequested{Target: target, Text: md, IdempotencyKey: "split-send"})
	if err != nil {
		t.Fatal(err)
	}
	if n := len(f.Texts(sp)); n != 2 {
		t.Fatalf("the send made %d messages, want 2", n)
	}
	for _, c := range []struct {
		name, text string
		shown      int // messages that show it
	}{
		{"longer", md + "\n>one line more", 2},
		{"shorter", "the final answer", 1},
	} {
		if err := p.Edit(ctx, &deliveryv1.SendRequested{Target: target, MessageId: id, Text: c.text}); err != nil {
			t.Fatalf("%s edit: %v", c.name, err)
		}
		shown := f.Texts(sp)
		want := strings.ReplaceAll(c.text, ">", "> ")
		if got := strings.Join(shown, "\n"); len(shown) != c.shown || got != want {
			t.Fatalf("%s edit: %d messages show %d characters, want %d showing the %d characters",
				c.name, len(shown), len([]rune(got)), c.shown, len([]rune(want)))
		}
		if all := f.Messages(sp); len(all) != 2 {
			t.Fatalf("%s edit: %d messages made in all, want the send's 2", c.name, len(all))
		}
		for _, m := range f.Messages(sp) {
			if m.Thread != th {
				t.Errorf("%s edit: a message in thread %q", c.name, m.Thread)
			}
		}
	}
}

// sendReq asks the gateway for req over the bus, as delivery does, and
// returns its receipt.
func sendReq(t *testing.T, b *bus.Bus, req *deliveryv1.SendRequested) *deliveryv1.SendReceipt {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	rec := &deliveryv1.SendReceipt{}
	if err := b.Request(ctx, b.Topology().SendSubject(PlatformName), req, rec); err != nil {
		t.Fatal(err)
	}
	return rec
}

// An edit whose message took its text, but whose follow-on message (the
// rest of a text over the limit) is refused for good, answers that it
// was done in part (bus.EditPartDone): delivery then does not post the
// whole text again as a new message, as it does for a message that is
// gone, which showed the answer twice. Nothing else is posted.
func TestEditRefusedInPart(t *testing.T) {
	f := googlechatfake.New(t)
	h := start(t, f, testConfig(f))
	sp, th := "spaces/E3", "spaces/E3/threads/t1"
	target := &deliveryv1.Target{Platform: PlatformName, ChatId: sp, ThreadId: th}
	md := quotedOverLimit
	sent := sendReq(t, h.b, &deliveryv1.SendRequested{Op: deliveryv1.SendOp_SEND_OP_SEND, Target: target, Text: md, IdempotencyKey: "part:send"})
	if !sent.GetOk() {
		t.Fatalf("send: %v", sent.GetError())
	}
	for _, c := range []struct {
		name string
		text string
		fail func() // the follow-on's step refused, after the edit's own patch
	}{
		{"its patch refused", md + "\n>one line more", func() {
			f.FailOn(http.MethodPatch, googlechatfake.Failure{}, googlechatfake.Failure{Status: http.StatusForbidden})
		}},
		{"its create refused", md + "\n" + md, func() { f.Fail(googlechatfake.Failure{Status: http.StatusBadRequest}) }},
	} {
		t.Run(c.name, func(t *testing.T) {
			c.fail()
			rec := sendReq(t, h.b, &deliveryv1.SendRequested{Op: deliveryv1.SendOp_SEND_OP_EDIT, Target: target, MessageId: sent.GetPlatformMessageId(),
				Text: c.text, IdempotencyKey: "part:" + c.name})
			if rec.GetOk() || rec.GetErrorClass() != deliveryv1.ErrorClass_ERROR_CLASS_PERMANENT || !strings.HasPrefix(rec.GetError(), bus.EditPartDone) {
				t.Fatalf("receipt ok=%v class %v %q, want permanent, done in part", rec.GetOk(), rec.GetErrorClass(), rec.GetError())
			}
			first := platform.Pieces(strings.ReplaceAll(c.text, ">", "> "), chunk.Limit{Max: maxText, Measure: chunk.Runes})[0]
			if ms := f.Texts(sp); len(ms) != 2 || ms[0] != first {
				t.Fatalf("%d messages shown; want the send's 2, the first showing the edit's first part", len(ms))
			}
		})
	}
}

// An edit asks Chat for no follow-on message it knows does not exist:
// the gateway notes a message's follow-ons (platform.WriteNote) when a
// send or an edit makes them, so a stream's edits of a message that
// goes on in none make one call each, the patch, where each also looked
// for a follow-on (a get, answered 404); and an edit of a split message
// patches only the follow-ons whose text it changes and deletes those it
// no longer needs, a follow-on made without its id (its id kept by one
// deleted before) too.
func TestEditsAskForNoFollowOn(t *testing.T) {
	f := googlechatfake.New(t)
	h := start(t, f, testConfig(f))
	edit := func(t *testing.T, target *deliveryv1.Target, id, text, key string) {
		t.Helper()
		rec := sendReq(t, h.b, &deliveryv1.SendRequested{Op: deliveryv1.SendOp_SEND_OP_EDIT, Target: target, MessageId: id, Text: text, IdempotencyKey: key})
		if !rec.GetOk() {
			t.Fatalf("edit %s: %s", key, rec.GetError())
		}
	}
	calls := func() map[string]int {
		return map[string]int{"create": f.Calls(http.MethodPost), "get": f.Calls(http.MethodGet),
			"patch": f.Calls(http.MethodPatch), "delete": f.Calls(http.MethodDelete)}
	}
	t.Run("a message without follow-ons", func(t *testing.T) {
		target := &deliveryv1.Target{Platform: PlatformName, ChatId: "spaces/N1"}
		sent := sendReq(t, h.b, &deliveryv1.SendRequested{Op: deliveryv1.SendOp_SEND_OP_SEND, Target: target, Text: "Hel ▉", IdempotencyKey: "n1:send"})
		before := calls()
		for i, text := range []string{"Hello ▉", "Hello, wor ▉", "Hello, world."} {
			edit(t, target, sent.GetPlatformMessageId(), text, fmt.Sprintf("n1:%d", i))
		}
		after := calls()
		if after["get"] != before["get"] || after["patch"]-before["patch"] != 3 || after["create"] != before["create"] {
			t.Fatalf("three edits made calls %v after %v, want three patches and nothing else", after, before)
		}
		if got := f.Texts("spaces/N1"); len(got) != 1 || got[0] != "Hello, world." {
			t.Fatalf("the chat shows %q", got)
		}
	})
	t.Run("a split message", func(t *testing.T) {
		sp := "spaces/N2"
		target := &deliveryv1.Target{Platform: PlatformName, ChatId: sp}
		md := quotedOverLimit
		sent := sendReq(t, h.b, &deliveryv1.SendRequested{Op: deliveryv1.SendOp_SEND_OP_SEND, Target: target, Text: md, IdempotencyKey: "n2:send"})
		id := sent.GetPlatformMessageId()
		for _, c := range []struct {
			name, text string
			want       map[string]int // calls made
			shown      int
		}{
			{"its rest grows", md + "\n>one line more", map[string]int{"patch": 2}, 2},
			{"its rest the same", md + "\n>one line more", map[string]int{"patch": 1}, 2},
			{"shorter", "the final answer", map[string]int{"patch": 1, "delete": 1}, 1},
			// The follow-on's id is kept by the one deleted: made
			// without it (a get finds the id's message gone).
			{"longer again", md, map[string]int{"patch": 1, "create": 2, "get": 1}, 2},
			{"shorter again", "the final answer, again", map[string]int{"patch": 1, "delete": 1}, 1},
		} {
			before := calls()
			edit(t, target, id, c.text, "n2:"+c.name)
			after := calls()
			for k := range after {
				if after[k]-before[k] != c.want[k] {
					t.Errorf("%s: %d %s calls, want %d", c.name, after[k]-before[k], k, c.want[k])
				}
			}
			shown := f.Texts(sp)
			if want := strings.ReplaceAll(c.text, ">", "> "); len(shown) != c.shown || strings.Join(shown, "\n") != want {
				t.Fatalf("%s: %d messages show %d characters, want %d showing the %d characters", c.name, len(shown), len([]rune(strings.Join(shown, "\n"))), c.shown, len([]rune(want)))
			}
		}
	})
}

// A gateway that stops after Chat made a follow-on message, before it
// noted what the message shows (here: the create's answer lost), leaves
// a note that claims the follow-on all the same (noted before Chat was
// asked), so the next edit, shorter, deletes it rather than leave it
// showing the stale rest of the answer.
func TestFollowOnsAreNotedBeforeTheyAreMade(t *testing.T) {
	f := googlechatfake.New(t)
	h := start(t, f, testConfig(f))
	sp := "spaces/C1"
	target := &deliveryv1.Target{Platform: PlatformName, ChatId: sp}
	md := quotedOverLimit
	sent := sendReq(t, h.b, &deliveryv1.SendRequested{Op: deliveryv1.SendOp_SEND_OP_SEND, Target: target, Text: md, IdempotencyKey: "c1:send"})
	if n := len(f.Texts(sp)); !sent.GetOk() || n != 2 {
		t.Fatalf("the send made %d messages (%s), want 2", n, sent.GetError())
	}
	f.Fail(googlechatfake.Failure{Status: http.StatusServiceUnavailable, Done: true})
	rec := sendReq(t, h.b, &deliveryv1.SendRequested{Op: deliveryv1.SendOp_SEND_OP_EDIT, Target: target, MessageId: sent.GetPlatformMessageId(),
		Text: md + "\n" + md, IdempotencyKey: "c1:longer"})
	if rec.GetOk() || rec.GetErrorClass() == deliveryv1.ErrorClass_ERROR_CLASS_PERMANENT {
		t.Fatalf("the edit whose create's answer was lost: ok=%v class %v, want a retryable failure", rec.GetOk(), rec.GetErrorClass())
	}
	if n := len(f.Texts(sp)); n != 3 {
		t.Fatalf("%d messages shown, want 3: the test does not make the third", n)
	}
	rec = sendReq(t, h.b, &deliveryv1.SendRequested{Op: deliveryv1.SendOp_SEND_OP_EDIT, Target: target, MessageId: sent.GetPlatformMessageId(),
		Text: "the final answer", IdempotencyKey: "c1:final"})
	if !rec.GetOk() {
		t.Fatalf("final edit: %s", rec.GetError())
	}
	if got := f.Texts(sp); len(got) != 1 || got[0] != "the final answer" {
		t.Fatalf("the chat shows %d messages, want the final answer alone", len(got))
	}
}

// A follow-on message made without its id (the id kept by one deleted
// before) is noted by its name as soon as Chat made it: an edit whose
// next follow-on is then refused for good leaves a note that names it,
// so a later edit, shorter, deletes it rather than leave it showing the
// stale rest of the answer.
func TestAFollowOnMadeWithoutItsIDIsNotedAtOnce(t *testing.T) {
	f := googlechatfake.New(t)
	h := start(t, f, testConfig(f))
	sp := "spaces/W1"
	target := &deliveryv1.Target{Platform: PlatformName, ChatId: sp}
	md := quotedOverLimit
	sent := sendReq(t, h.b, &deliveryv1.SendRequested{Op: deliveryv1.SendOp_SEND_OP_SEND, Target: target, Text: md, IdempotencyKey: "w1:send"})
	id := sent.GetPlatformMessageId()
	edit := func(text, key string) *deliveryv1.SendReceipt {
		return sendReq(t, h.b, &deliveryv1.SendRequested{Op: deliveryv1.SendOp_SEND_OP_EDIT, Target: target, MessageId: id, Text: text, IdempotencyKey: key})
	}
	// The follow-on deleted: Chat keeps its id.
	if rec := edit("short", "w1:short"); !rec.GetOk() || len(f.Texts(sp)) != 1 {
		t.Fatalf("shorter edit: ok=%v %q, %d messages", rec.GetOk(), rec.GetError(), len(f.Texts(sp)))
	}
	// Three pieces: the first follow-on made without its id (its
	// create with the id refused, then one without), the second's
	// create refused for good.
	f.Fail(googlechatfake.Failure{}, googlechatfake.Failure{}, googlechatfake.Failure{Status: http.StatusBadRequest})
	if rec := edit(md+"\n"+md, "w1:longer"); rec.GetOk() || !strings.HasPrefix(rec.GetError(), bus.EditPartDone) {
		t.Fatalf("longer edit: ok=%v %q, want done in part", rec.GetOk(), rec.GetError())
	}
	if n := len(f.Texts(sp)); n != 2 {
		t.Fatalf("%d messages shown, want 2: the test does not make the follow-on without its id", n)
	}
	if rec := edit("the final answer", "w1:final"); !rec.GetOk() {
		t.Fatalf("final edit: %s", rec.GetError())
	}
	if got := f.Texts(sp); len(got) != 1 || got[0] != "the final answer" {
		t.Fatalf("the chat shows %d messages, want the final answer alone", len(got))
	}
}

// Deleting a message over the limit (a stream's surplus message, one a
// refused edit moved below) deletes the follow-on messages its text goes
// on in too: they would go on showing the rest of a text that is gone.
func TestDeleteTakesTheFollowOnsWithIt(t *testing.T) {
	f := googlechatfake.New(t)
	h := start(t, f, testConfig(f))
	sp := "spaces/D1"
	target := &deliveryv1.Target{Platform: PlatformName, ChatId: sp}
	md := quotedOverLimit
	sent := sendReq(t, h.b, &deliveryv1.SendRequested{Op: deliveryv1.SendOp_SEND_OP_SEND, Target: target, Text: md, IdempotencyKey: "d1:send"})
	if n := len(f.Texts(sp)); !sent.GetOk() || n != 2 {
		t.Fatalf("the send made %d messages (%s), want 2", n, sent.GetError())
	}
	// An edit makes one more follow-on.
	if rec := sendReq(t, h.b, &deliveryv1.SendRequested{Op: deliveryv1.SendOp_SEND_OP_EDIT, Target: target, MessageId: sent.GetPlatformMessageId(),
		Text: md + "\n" + md, IdempotencyKey: "d1:edit"}); !rec.GetOk() || len(f.Texts(sp)) != 3 {
		t.Fatalf("edit: ok=%v %q, %d messages", rec.GetOk(), rec.GetError(), len(f.Texts(sp)))
	}
	rec := sendReq(t, h.b, &deliveryv1.SendRequested{Op: deliveryv1.SendOp_SEND_OP_DELETE, Target: target, MessageId: sent.GetPlatformMessageId(), IdempotencyKey: "d1:delete"})
	if !rec.GetOk() {
		t.Fatalf("delete: %s", rec.GetError())
	}
	if got := f.Texts(sp); len(got) != 0 {
		t.Fatalf("%d messages left after the delete, want none", len(got))
	}
}

// An edit that shows its whole text but whose delete of a follow-on
// message it no longer needs is refused for good is no failure: the
// answer shows, and a "delivery failed" notice (what delivery sends
// for an edit done in part) would tell the user it could not be sent.
// The note keeps the follow-on, so the next edit deletes it.
func TestARefusedSurplusDeleteIsNoFailure(t *testing.T) {
	f := googlechatfake.New(t)
	h := start(t, f, testConfig(f))
	sp := "spaces/S1"
	target := &deliveryv1.Target{Platform: PlatformName, ChatId: sp}
	md := quotedOverLimit
	sent := sendReq(t, h.b, &deliveryv1.SendRequested{Op: deliveryv1.SendOp_SEND_OP_SEND, Target: target, Text: md, IdempotencyKey: "s1:send"})
	edit := func(text, key string) *deliveryv1.SendReceipt {
		return sendReq(t, h.b, &deliveryv1.SendRequested{Op: deliveryv1.SendOp_SEND_OP_EDIT, Target: target, MessageId: sent.GetPlatformMessageId(), Text: text, IdempotencyKey: key})
	}
	f.FailOn(http.MethodDelete, googlechatfake.Failure{Status: http.StatusForbidden})
	if rec := edit("the final answer", "s1:final"); !rec.GetOk() {
		t.Fatalf("the edit whose surplus delete was refused: %s, want ok", rec.GetError())
	}
	if got := f.Texts(sp); len(got) != 2 || got[0] != "the final answer" {
		t.Fatalf("the chat shows %d messages, want the answer and the follow-on whose delete was refused", len(got))
	}
	if rec := edit("the final answer, again", "s1:again"); !rec.GetOk() {
		t.Fatalf("the next edit: %s", rec.GetError())
	}
	if got := f.Texts(sp); len(got) != 1 {
		t.Fatalf("the chat shows %d messages after the next edit, want 1", len(got))
	}
}

// quotedOverLimit is Markdown of 4,094 characters, under Chat's limit of
// 4,096, whose conversion (one character more a line) is 4,367,
// over it: its message goes on in a follow-on message.
var quotedOverLimit = strings.TrimSuffix(strings.Repeat(">a quoted line\n", 273), "\n")
