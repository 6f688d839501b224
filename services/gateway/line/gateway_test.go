package line

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf16"

	"github.com/switchboard-chat/switchboard/pkg/bus"
	"github.com/switchboard-chat/switchboard/pkg/bus/bustest"
	"github.com/switchboard-chat/switchboard/pkg/chunk"
	deliveryv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/delivery/v1"
	eventsv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/events/v1"
	"github.com/switchboard-chat/switchboard/pkg/platform"
	"github.com/switchboard-chat/switchboard/pkg/platform/platformtest"
	"github.com/switchboard-chat/switchboard/services/gateway/line/linefake"
)

type harness struct {
	f   *linefake.Fake
	s   *Service
	b   *bus.Bus
	url string
	evs chan *eventsv1.MessageReceived
}

func start(t *testing.T, f *linefake.Fake, cfg Config) *harness {
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
	return &harness{f: f, s: s, b: b, url: "http://" + s.Addr() + s.p.cfg.Path, evs: platformtest.InboundEvents(t, b)}
}

func (h *harness) post(t *testing.T, body []byte) int {
	t.Helper()
	code, _, err := h.f.Post(context.Background(), h.url, body)
	if err != nil {
		t.Fatal(err)
	}
	return code
}

func (h *harness) next(t *testing.T) *eventsv1.MessageReceived {
	t.Helper()
	select {
	case ev := <-h.evs:
		return ev
	case <-time.After(10 * time.Second):
		t.Fatal("no inbound event")
		return nil
	}
}

func (h *harness) none(t *testing.T) {
	t.Helper()
	select {
	case ev := <-h.evs:
		t.Fatalf("unexpected event %s %q", ev.GetEventId(), ev.GetText())
	case <-time.After(300 * time.Millisecond):
	}
}

func (h *harness) send(t *testing.T, req *deliveryv1.SendRequested) *deliveryv1.SendReceipt {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	r := &deliveryv1.SendReceipt{}
	if err := h.b.Request(ctx, h.b.Topology().SendSubject("line"), req, r); err != nil {
		t.Fatal(err)
	}
	return r
}

func sendTo(chat, key, text string) *deliveryv1.SendRequested {
	return &deliveryv1.SendRequested{Op: deliveryv1.SendOp_SEND_OP_SEND, IdempotencyKey: key, Text: text, Final: true,
		Target: &deliveryv1.Target{Platform: "line", ChatId: chat}}
}

// A delivery is published only when signed with the channel secret;
// every event of it is on the bus before the 200; a redelivery is
// published once; Verify's empty delivery is answered 200.
func TestWebhook(t *testing.T) {
	t.Parallel()
	f := linefake.New(t)
	cfg := testConfig(f)
	cfg.AllowedGroups = []string{testGroup}
	h := start(t, f, cfg)
	body := f.Body(f.Event(linefake.Inbound{UserID: alice, Text: "one"}), f.Event(linefake.Inbound{UserID: alice, Text: "two"}))

	if code, _, _ := linefake.PostSigned(context.Background(), h.url, linefake.Sign("wrong secret", body), body); code != http.StatusUnauthorized {
		t.Fatalf("forged delivery answered %d, want 401", code)
	}
	if code, _, _ := linefake.PostSigned(context.Background(), h.url, "", body); code != http.StatusUnauthorized {
		t.Fatalf("unsigned delivery answered %d, want 401", code)
	}
	h.none(t)

	if code := h.post(t, body); code != http.StatusOK {
		t.Fatalf("delivery answered %d", code)
	}
	if a, b := h.next(t), h.next(t); a.GetText() != "one" || b.GetText() != "two" {
		t.Fatalf("events %q %q, want one, two in order", a.GetText(), b.GetText())
	}
	if code := h.post(t, body); code != http.StatusOK {
		t.Fatalf("redelivery answered %d", code)
	}
	h.none(t)

	if code := h.post(t, f.Body()); code != http.StatusOK {
		t.Fatalf("verify (no events) answered %d", code)
	}
	// A malformed event does not hold back the good one beside it; a
	// follow and a group not allowed publish nothing.
	bad := f.Event(linefake.Inbound{UserID: alice, Text: "bad"})
	bad["source"] = map[string]any{"type": "space"}
	follow := f.Event(linefake.Inbound{UserID: alice})
	follow["type"] = "follow"
	if code := h.post(t, f.Body(bad, follow, f.Event(linefake.Inbound{UserID: alice, GroupID: "Cnotallowed", Text: "group"}), f.Event(linefake.Inbound{UserID: alice, Text: "good"}))); code != http.StatusOK {
		t.Fatalf("mixed delivery answered %d", code)
	}
	if ev := h.next(t); ev.GetText() != "good" {
		t.Fatalf("published %q, want only the good event", ev.GetText())
	}
	resp, err := http.Get(h.url)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusMethodNotAllowed {
		t.Fatalf("GET answered %d", resp.StatusCode)
	}
	resp, err = http.Get(h.url + "/health")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(b), `"platform":"line"`) {
		t.Fatalf("health %d %s", resp.StatusCode, b)
	}
	h.none(t)
}

// A delivery whose events the bus does not take is answered 500, and
// LINE's redelivery of it is published.
func TestWebhookUnstored(t *testing.T) {
	t.Parallel()
	f, p := newPlatform(t)
	rec := &recorder{err: context.DeadlineExceeded}
	srv := httpServer(t, p.WebhookHandler(rec))
	body := f.Body(f.Event(linefake.Inbound{UserID: alice, Text: "lost?"}))
	if code, _, _ := f.Post(context.Background(), srv, body); code != http.StatusInternalServerError {
		t.Fatalf("unstored delivery answered %d, want 500", code)
	}
	rec.mu.Lock()
	rec.err = nil
	rec.mu.Unlock()
	code, _, _ := f.Post(context.Background(), srv, body)
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if code != http.StatusOK || len(rec.evs) != 2 {
		t.Fatalf("stored delivery answered %d after %d deliveries", code, len(rec.evs))
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
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: h}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	return "http://" + ln.Addr().String() + "/line/webhook"
}

// The first answer uses the event's reply token, once; the next is
// pushed; a token LINE no longer takes falls back to a push; a
// redelivered event's token is never used; a push retried after a lost
// answer is not shown twice; Markdown goes out as plain text.
func TestSends(t *testing.T) {
	t.Parallel()
	f := linefake.New(t)
	h := start(t, f, testConfig(f))
	ctx := context.Background()

	h.post(t, f.Body(f.Event(linefake.Inbound{UserID: alice, Text: "hi"})))
	h.next(t)
	for i, text := range []string{"**first**", "second"} {
		if r := h.send(t, sendTo(alice, "k"+text, text)); !r.GetOk() || r.GetPlatformMessageId() == "" {
			t.Fatalf("send %d: %v", i, r)
		}
	}
	got := f.Sent(alice)
	if len(got) != 2 || got[0].Via != "reply" || got[0].Text != "first" || got[1].Via != "push" || got[1].Text != "second" {
		t.Fatalf("sent %+v, want the first by reply as plain text, the second by push", got)
	}

	h.post(t, f.Body(f.Event(linefake.Inbound{UserID: alice, Text: "late"})))
	h.next(t)
	f.ExpireReplyTokens()
	if r := h.send(t, sendTo(alice, "k-late", "late answer")); !r.GetOk() {
		t.Fatalf("send with an expired token: %v", r)
	}
	if got := f.Sent(alice); got[len(got)-1].Via != "push" || got[len(got)-1].Text != "late answer" {
		t.Fatalf("after an expired token: %+v", got[len(got)-1])
	}

	h.post(t, f.Body(f.Event(linefake.Inbound{UserID: alice, Text: "again", Redelivery: true})))
	h.next(t)
	h.send(t, sendTo(alice, "k-redelivered", "answer"))
	if got := f.Sent(alice); got[len(got)-1].Via != "push" {
		t.Fatalf("a redelivered event's token was used: %+v", got[len(got)-1])
	}

	// The runner's receipts absorb a repeat; below them, LINE's retry key
	// does: the same push sent twice is shown once.
	req := sendTo(alice, "k-retry", "only once")
	for range 2 {
		if _, err := h.s.p.Send(ctx, req); err != nil {
			t.Fatal(err)
		}
	}
	n := 0
	for _, m := range f.Sent(alice) {
		if m.Text == "only once" {
			n++
		}
	}
	if n != 1 {
		t.Fatalf("a retried push shows %d times", n)
	}

	img := sendTo(testGroup, "k-img", "look")
	img.Attachments = []*eventsv1.Attachment{{Kind: eventsv1.AttachmentKind_ATTACHMENT_KIND_IMAGE, Location: &eventsv1.Attachment_Url{Url: "https://cdn.example/a.png"}}}
	if r := h.send(t, img); !r.GetOk() {
		t.Fatalf("image send: %v", r)
	}
	if got := f.Sent(testGroup); len(got) != 2 || got[1].Type != "image" || got[1].ImageURL != "https://cdn.example/a.png" {
		t.Fatalf("image send shows %+v", got)
	}
	for name, r := range map[string]*deliveryv1.SendRequested{
		"empty":   sendTo(alice, "k-empty", " "),
		"no chat": sendTo("", "k-nochat", "x"),
		"private media": func() *deliveryv1.SendRequested {
			r := sendTo(alice, "k-ref", "x")
			r.Attachments = []*eventsv1.Attachment{{Location: &eventsv1.Attachment_BytesRef{BytesRef: "ref"}}}
			return r
		}(),
	} {
		if rc := h.send(t, r); rc.GetOk() || rc.GetErrorClass() != deliveryv1.ErrorClass_ERROR_CLASS_PERMANENT {
			t.Errorf("%s: receipt %v, want a permanent error", name, rc)
		}
	}
	if r := h.send(t, sendTo(alice, "k-5000", strings.Repeat("あ", 5000))); !r.GetOk() {
		t.Fatalf("5,000 characters refused: %v", r)
	}
}

// An answer longer than one message goes as up to five messages of one
// call, as Hermes batches them: within the reply token's time all of it
// is free, none of it pushed (the monthly push quota untouched). A send
// of more than five messages' worth goes in several calls, the rest
// pushed; when a later call fails, the retry sends only it.
func TestLongAnswer(t *testing.T) {
	t.Parallel()
	const carol = "U9c8b7a6f5e4d3c2b1a0f9e8d7c6b5a4f"
	f := linefake.New(t)
	h := start(t, f, testConfig(f))
	h.post(t, f.Body(f.Event(linefake.Inbound{UserID: alice, Text: "tell me everything"})))
	h.next(t)

	// 12,000 characters of Markdown, sent as plain text.
	var b strings.Builder
	for b.Len() < 12000 {
		b.WriteString("See [the docs](https://docs.example/page) for more words here.\n\n")
	}
	attempts := f.Attempts()
	r := h.send(t, sendTo(alice, "k-long", b.String()))
	if !r.GetOk() {
		t.Fatalf("receipt %v", r)
	}
	got := f.Sent(alice)
	if len(got) != 3 || f.Attempts()-attempts != 1 || r.GetPlatformMessageId() != got[0].ID {
		t.Fatalf("%d messages in %d calls, id %s: want 3 in one call, the first's id", len(got), f.Attempts()-attempts, r.GetPlatformMessageId())
	}
	var joined strings.Builder
	for _, m := range got {
		if n := len(utf16.Encode([]rune(m.Text))); m.Via != "reply" || n > maxText || strings.Contains(m.Text, "(1/") {
			t.Fatalf("message of %d units via %s: want replies of at most %d without a counter", n, m.Via, maxText)
		}
		joined.WriteString(m.Text + "\n\n")
	}
	if strings.Count(joined.String(), "the docs (https://docs.example/page)") != strings.Count(b.String(), "[the docs]") {
		t.Fatal("the messages do not hold the whole answer")
	}

	// Seven messages' worth after the token's time: two pushes; the
	// second fails once, and the retry sends only it.
	h.post(t, f.Body(f.Event(linefake.Inbound{UserID: carol, Text: "and more"})))
	h.next(t)
	f.ExpireReplyTokens()
	long := strings.TrimSpace(strings.Repeat("ข้อความ ", 4300))
	f.Fail(linefake.Failure{Status: http.StatusInternalServerError, Message: "An error occurred in the server.", Skip: 1})
	req := sendTo(carol, "k-longer", long)
	if r := h.send(t, req); r.GetOk() || r.GetErrorClass() != deliveryv1.ErrorClass_ERROR_CLASS_RETRYABLE {
		t.Fatalf("receipt %v, want the injected failure", r)
	}
	if r := h.send(t, req); !r.GetOk() {
		t.Fatalf("retry receipt %v", r)
	}
	got = f.Sent(carol)
	want := len(chunk.Parts(long, chunk.Limit{Max: maxText, Measure: chunk.UTF16}))
	if want <= maxMessages || len(got) != want {
		t.Fatalf("%d messages, want %d (more than five, the first call's not again)", len(got), want)
	}
	for _, m := range got {
		if m.Via != "push" {
			t.Fatalf("message via %s after the token's time", m.Via)
		}
	}
}

// A notice the router sends ahead of a turn's answer (the home channel
// notice, a reset notice, a busy acknowledgement) is pushed and leaves
// the reply token to the answer, as Hermes sends its home notice: the
// answer goes free, and reaches the chat when the channel's monthly
// push quota is spent (the notice, refused for good, does not). A
// notice that is the whole answer (a command's) takes the token.
func TestNoticeBeforeAnswerLeavesReplyToken(t *testing.T) {
	t.Parallel()
	f := linefake.New(t)
	h := start(t, f, testConfig(f))
	notice := func(turn, key string, final bool) *deliveryv1.SendRequested {
		r := sendTo(alice, key, "notice "+key)
		r.TurnId, r.Final, r.ChunkCount = turn, final, 1
		return r
	}
	for _, c := range []struct {
		name       string
		notice     *deliveryv1.SendRequested
		quotaSpent bool
		want       []string // how the notice and then the answer went
	}{
		{"home notice", notice("home:line:ch1:ev1", "home:line:ch1:ev1:1:0", false), false, []string{"push", "reply"}},
		{"reset notice", notice("notice:line:ch1:ev2", "notice:line:ch1:ev2:1:0", false), false, []string{"push", "reply"}},
		{"home notice, push quota spent", notice("home:line:ch1:ev3", "home:line:ch1:ev3:1:0", false), true, []string{"reply"}},
		{"a command's answer", notice("notice:line:ch1:ev4", "notice:line:ch1:ev4:1:0", true), false, []string{"reply", "push"}},
	} {
		before := len(f.Sent(alice))
		h.post(t, f.Body(f.Event(linefake.Inbound{UserID: alice, Text: c.name})))
		h.next(t)
		if c.quotaSpent {
			f.Fail(linefake.ErrMonthlyLimit)
			if r := h.send(t, c.notice); r.GetOk() || r.GetErrorClass() != deliveryv1.ErrorClass_ERROR_CLASS_PERMANENT {
				t.Fatalf("%s: notice receipt %v, want refused for good", c.name, r)
			}
		} else if r := h.send(t, c.notice); !r.GetOk() {
			t.Fatalf("%s: notice receipt %v", c.name, r)
		}
		answer := sendTo(alice, "k-answer "+c.name, "the answer to "+c.name)
		answer.TurnId = "turn-" + c.name
		if r := h.send(t, answer); !r.GetOk() {
			t.Fatalf("%s: answer receipt %v", c.name, r)
		}
		var via []string
		for _, m := range f.Sent(alice)[before:] {
			via = append(via, m.Via)
		}
		if !slices.Equal(via, c.want) {
			t.Errorf("%s: sent via %v, want %v", c.name, via, c.want)
		}
	}
}

// What a turn sends before its answer (tool progress lines, each a
// message of its own on LINE, which cannot edit; the text the model said
// before a call) is pushed and leaves the reply token to the final
// answer, as the router's notices before an answer do: the answer goes
// free, and reaches the chat when the channel's monthly push quota is
// spent. The requests are delivery's: a progress line is one part, not
// final; an answer longer than one send starts with parts that are not
// final either, the first of which takes the token.
func TestTurnLeavesReplyTokenToItsAnswer(t *testing.T) {
	t.Parallel()
	f := linefake.New(t)
	h := start(t, f, testConfig(f))
	part := func(turn, key, text string, index, count int32, final bool) *deliveryv1.SendRequested {
		r := sendTo(alice, key, text)
		r.TurnId, r.Final, r.ChunkIndex, r.ChunkCount = turn, final, index, count
		return r
	}
	long := strings.TrimSpace(strings.Repeat("word ", 1200)) // two messages
	for _, c := range []struct {
		name       string
		sends      []*deliveryv1.SendRequested
		quotaSpent bool
		want       []string // how each send went
	}{
		{"a tool progress line, then the answer", []*deliveryv1.SendRequested{
			part("t1", "t1:1:tp:0", `💻 terminal: "ls"`, 0, 1, false),
			part("t1", "t1:2:0", "the answer", 0, 1, true),
		}, false, []string{"push", "reply"}},
		{"text before a call, two progress lines, then the answer", []*deliveryv1.SendRequested{
			part("t2", "t2:1:0", "Let me look.", 0, 1, false),
			part("t2", "t2:2:tp:0", `🔍 web_search: "tea"`, 0, 1, false),
			part("t2", "t2:3:tp:0", `📖 read_file: "notes.md"`, 0, 1, false),
			part("t2", "t2:4:0", "the answer", 0, 1, true),
		}, false, []string{"push", "push", "push", "reply"}},
		{"a progress line, push quota spent", []*deliveryv1.SendRequested{
			part("t3", "t3:1:tp:0", `💻 terminal: "ls"`, 0, 1, false),
			part("t3", "t3:2:0", "the answer", 0, 1, true),
		}, true, []string{"reply"}},
		{"a long answer's first part takes the token", []*deliveryv1.SendRequested{
			part("t4", "t4:1:0", long, 0, 2, false),
			part("t4", "t4:1:1", "the rest", 1, 2, true),
		}, false, []string{"reply", "reply", "push"}},
	} {
		before := len(f.Sent(alice))
		h.post(t, f.Body(f.Event(linefake.Inbound{UserID: alice, Text: c.name})))
		h.next(t)
		for i, req := range c.sends {
			if c.quotaSpent && i == 0 {
				f.Fail(linefake.ErrMonthlyLimit)
				if r := h.send(t, req); r.GetOk() || r.GetErrorClass() != deliveryv1.ErrorClass_ERROR_CLASS_PERMANENT {
					t.Fatalf("%s: send %d receipt %v, want refused for good", c.name, i, r)
				}
				continue
			}
			if r := h.send(t, req); !r.GetOk() {
				t.Fatalf("%s: send %d receipt %v", c.name, i, r)
			}
		}
		var via []string
		for _, m := range f.Sent(alice)[before:] {
			via = append(via, m.Via)
		}
		if !slices.Equal(via, c.want) {
			t.Errorf("%s: sent via %v, want %v", c.name, via, c.want)
		}
	}
}

// An approval prompt is not final, yet it is not sent ahead of an answer
// the token could still serve: the turn waits on the user, whose tap (or
// typed /approve) brings a reply token of its own for what follows. The
// prompt takes the chat's token, free: pushed, it spent a push while the
// token it left expired unused, and on a channel whose monthly push
// quota is spent the prompt never reached the user, whose turn then
// waited for an answer that could not come. The turn's answer goes by
// the tap's token.
func TestApprovalPromptTakesReplyToken(t *testing.T) {
	t.Parallel()
	f := linefake.New(t)
	h := start(t, f, testConfig(f))
	h.post(t, f.Body(f.Event(linefake.Inbound{UserID: alice, Text: "clean up /tmp"})))
	h.next(t)
	prompt := sendTo(alice, "t1:1:a:0", "⚠️ Dangerous command requires approval: reply /approve or /deny")
	prompt.TurnId, prompt.Final, prompt.ChunkIndex, prompt.ChunkCount = "t1", false, 0, 1
	prompt.Approval = &deliveryv1.Approval{Choices: []string{"once", "session", "always", "deny"}, ToolCallId: "call_7"}
	if r := h.send(t, prompt); !r.GetOk() {
		t.Fatalf("prompt receipt %v", r)
	}
	h.post(t, f.Body(f.Event(linefake.Inbound{Type: "postback", UserID: alice, Text: "ea:once:call_7"})))
	if ev := h.next(t); ev.GetText() != "/approve" {
		t.Fatalf("tap published as %q", ev.GetText())
	}
	answer := sendTo(alice, "t1:2:0", "done")
	answer.TurnId, answer.ChunkCount = "t1", 1
	if r := h.send(t, answer); !r.GetOk() {
		t.Fatalf("answer receipt %v", r)
	}
	var via []string
	for _, m := range f.Sent(alice) {
		via = append(via, m.Via)
	}
	if want := []string{"reply", "reply"}; !slices.Equal(via, want) {
		t.Errorf("prompt and answer sent via %v, want %v", via, want)
	}
}

// A reply LINE refuses with a 429 did not use its token: the retry
// answers by reply, not by a metered push.
func TestRateLimitedReplyKeepsToken(t *testing.T) {
	t.Parallel()
	f := linefake.New(t)
	h := start(t, f, testConfig(f))
	h.post(t, f.Body(f.Event(linefake.Inbound{UserID: alice, Text: "hi"})))
	h.next(t)
	f.Fail(linefake.ErrTooManyRequests)
	req := sendTo(alice, "k-429", "hello")
	if r := h.send(t, req); r.GetOk() || r.GetErrorClass() != deliveryv1.ErrorClass_ERROR_CLASS_RATE_LIMITED {
		t.Fatalf("receipt %v, want rate limited", r)
	}
	if r := h.send(t, req); !r.GetOk() {
		t.Fatalf("retry receipt %v", r)
	}
	if got := f.Sent(alice); len(got) != 1 || got[0].Via != "reply" {
		t.Fatalf("sent %+v, want the answer once, by reply", got)
	}
}

// A reply without a clear answer (LINE took it and the answer was lost,
// or a 5xx) keeps its token for the send's retry: LINE refusing it as
// spent tells the retry the first attempt was shown, so it is not pushed
// a second time; a reply LINE did not take is retried by reply.
func TestReplyWithoutClearAnswer(t *testing.T) {
	t.Parallel()
	f := linefake.New(t)
	h := start(t, f, testConfig(f))
	for _, c := range []struct {
		name string
		fail linefake.Failure
	}{
		{"answer lost", linefake.Failure{Status: http.StatusInternalServerError, Message: "An error occurred in the server.", Lost: true}},
		{"server error", linefake.ErrInternal},
	} {
		before := len(f.Sent(alice))
		h.post(t, f.Body(f.Event(linefake.Inbound{UserID: alice, Text: c.name})))
		h.next(t)
		f.Fail(c.fail)
		req := sendTo(alice, "k-"+c.name, "the answer to "+c.name)
		if r := h.send(t, req); r.GetOk() || r.GetErrorClass() != deliveryv1.ErrorClass_ERROR_CLASS_RETRYABLE {
			t.Fatalf("%s: receipt %v, want retryable", c.name, r)
		}
		if r := h.send(t, req); !r.GetOk() {
			t.Fatalf("%s: retry receipt %v", c.name, r)
		}
		if got := f.Sent(alice)[before:]; len(got) != 1 || got[0].Via != "reply" || got[0].Text != req.GetText() {
			t.Fatalf("%s: sent %+v, want the answer once, by reply", c.name, got)
		}
	}
	// Another send does not take a token spent by an unclear attempt for
	// its own: it pushes.
	h.post(t, f.Body(f.Event(linefake.Inbound{UserID: alice, Text: "one more"})))
	h.next(t)
	f.Fail(linefake.Failure{Status: http.StatusBadGateway, Message: "Bad Gateway", Lost: true})
	if r := h.send(t, sendTo(alice, "k-first", "first")); r.GetOk() {
		t.Fatalf("receipt %v, want the injected failure", r)
	}
	if r := h.send(t, sendTo(alice, "k-second", "second")); !r.GetOk() {
		t.Fatalf("receipt %v", r)
	}
	if got := f.Sent(alice); got[len(got)-1].Text != "second" || got[len(got)-1].Via != "push" {
		t.Fatalf("sent %+v, want the second pushed", got[len(got)-2:])
	}
}

// A reply whose answer was lost keeps its token for the send's retry
// even when the user writes again meanwhile (a newer token for the
// chat): the retry learns from its own token that the first attempt was
// shown, instead of replying again with the newer one; the newer token
// still answers the new message.
func TestLostReplyThenNewMessage(t *testing.T) {
	t.Parallel()
	f := linefake.New(t)
	h := start(t, f, testConfig(f))
	h.post(t, f.Body(f.Event(linefake.Inbound{UserID: alice, Text: "question"})))
	h.next(t)
	f.Fail(linefake.Failure{Status: http.StatusInternalServerError, Message: "An error occurred in the server.", Lost: true})
	first := sendTo(alice, "k-lost", "the answer")
	if r := h.send(t, first); r.GetOk() || r.GetErrorClass() != deliveryv1.ErrorClass_ERROR_CLASS_RETRYABLE {
		t.Fatalf("receipt %v, want retryable", r)
	}
	h.post(t, f.Body(f.Event(linefake.Inbound{UserID: alice, Text: "are you there?"})))
	h.next(t)
	if r := h.send(t, first); !r.GetOk() {
		t.Fatalf("retry receipt %v", r)
	}
	if r := h.send(t, sendTo(alice, "k-next", "yes")); !r.GetOk() {
		t.Fatalf("next receipt %v", r)
	}
	got := f.Sent(alice)
	if len(got) != 2 || got[0].Text != "the answer" || got[1].Text != "yes" || got[1].Via != "reply" {
		t.Fatalf("sent %+v, want the answer once and the next answer by reply", got)
	}
}

// LINE's failures map to delivery's classes.
func TestSendErrors(t *testing.T) {
	t.Parallel()
	f, p := newPlatform(t)
	ctx := context.Background()
	for _, c := range []struct {
		name  string
		fail  linefake.Failure
		class deliveryv1.ErrorClass
		is    error
		after time.Duration
	}{
		{"rate limited", linefake.ErrTooManyRequests, deliveryv1.ErrorClass_ERROR_CLASS_RATE_LIMITED, nil, defaultRetryAfter},
		{"rate limited with retry-after", linefake.Failure{Status: 429, Message: "slow down", RetryAfter: 7}, deliveryv1.ErrorClass_ERROR_CLASS_RATE_LIMITED, nil, 7 * time.Second},
		{"monthly limit", linefake.ErrMonthlyLimit, deliveryv1.ErrorClass_ERROR_CLASS_PERMANENT, ErrMonthlyLimit, 0},
		{"server error", linefake.ErrInternal, deliveryv1.ErrorClass_ERROR_CLASS_RETRYABLE, nil, 0},
		{"bad request", linefake.ErrBadRequest, deliveryv1.ErrorClass_ERROR_CLASS_PERMANENT, nil, 0},
		{"forbidden", linefake.Failure{Status: 403, Message: "Access to this API is not available for your account"}, deliveryv1.ErrorClass_ERROR_CLASS_PERMANENT, ErrForbidden, 0},
		{"unauthorized", linefake.Failure{Status: 401, Message: "Authentication failed"}, deliveryv1.ErrorClass_ERROR_CLASS_PERMANENT, ErrToken, 0},
	} {
		f.Fail(c.fail)
		_, err := p.Send(ctx, sendTo(alice, "k-"+c.name, "x"))
		class, after := deliveryv1.ErrorClass_ERROR_CLASS_RETRYABLE, time.Duration(0)
		var se *platform.SendError
		if errors.As(err, &se) {
			class, after = se.Class, se.RetryAfter
		}
		if err == nil || class != c.class || after != c.after || (c.is != nil && !errors.Is(err, c.is)) {
			t.Errorf("%s: %v (class %s, after %s), want %s after %s", c.name, err, class, after, c.class, c.after)
		}
	}
}

// Typing is LINE's loading animation in 1:1 chats, nothing in groups.
func TestTyping(t *testing.T) {
	t.Parallel()
	f, p := newPlatform(t)
	typing := func(chat string) error {
		return p.Typing(context.Background(), &deliveryv1.SendRequested{Op: deliveryv1.SendOp_SEND_OP_TYPING, Target: &deliveryv1.Target{Platform: "line", ChatId: chat}})
	}
	if err := typing(alice); err != nil || f.Loading(alice) != 1 {
		t.Fatalf("dm typing: %v, %d animations", err, f.Loading(alice))
	}
	if err := typing(testGroup); err != nil || f.Loading(testGroup) != 0 {
		t.Fatalf("group typing: %v, %d animations", err, f.Loading(testGroup))
	}
}

// Media content is downloaded with the channel's token; other URLs are
// not fetched with it.
func TestFetch(t *testing.T) {
	t.Parallel()
	f, p := newPlatform(t)
	id := f.AddContent("image/png", []byte("png bytes"))
	rc, mt, err := p.Fetch(context.Background(), &eventsv1.Attachment{Location: &eventsv1.Attachment_Url{Url: contentURL(f.BaseURL(), id)}})
	if err != nil {
		t.Fatal(err)
	}
	got, _ := io.ReadAll(rc)
	rc.Close()
	if !bytes.Equal(got, []byte("png bytes")) || mt != "image/png" {
		t.Fatalf("content %q %q", got, mt)
	}
	if _, _, err := p.Fetch(context.Background(), &eventsv1.Attachment{Location: &eventsv1.Attachment_Url{Url: contentURL(f.BaseURL(), "999")}}); !errors.Is(err, ErrDownload) {
		t.Fatalf("missing content: %v", err)
	}
	for _, u := range []string{"https://cdn.example/x.png", contentURL(f.BaseURL(), "1/../2"), f.BaseURL() + "/v2/bot/info"} {
		if _, _, err := p.Fetch(context.Background(), &eventsv1.Attachment{Location: &eventsv1.Attachment_Url{Url: u}}); !errors.Is(err, platform.ErrNotFetched) {
			t.Errorf("%s: %v, want not fetched", u, err)
		}
	}
}

// A content download answered 429 (with its Retry-After) or a 5xx is
// asked again, as Hermes's media downloads: before, the first such
// answer lost the file to the turn. A 403 is final.
func TestFetchRetries(t *testing.T) {
	t.Parallel()
	f, p := newPlatform(t)
	for _, tc := range []struct {
		name string
		fail linefake.Failure
		// downloads is how many downloads the fetch makes; kept: it
		// gets the content.
		downloads int
		kept      bool
	}{
		{"rate limited", linefake.Failure{Status: http.StatusTooManyRequests, Message: linefake.ErrTooManyRequests.Message, RetryAfter: 1}, 2, true},
		{"server error", linefake.ErrInternal, 2, true},
		{"forbidden", linefake.Failure{Status: http.StatusForbidden, Message: "Access to this API is not available for your account"}, 1, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			id := f.AddContent("image/png", []byte("png bytes"))
			f.FailDownloads(tc.fail)
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			before := f.Downloads()
			rc, _, err := p.Fetch(ctx, &eventsv1.Attachment{Location: &eventsv1.Attachment_Url{Url: contentURL(f.BaseURL(), id)}})
			if n := f.Downloads() - before; n != tc.downloads {
				t.Errorf("%d downloads, want %d", n, tc.downloads)
			}
			if !tc.kept {
				if !errors.Is(err, ErrDownload) {
					if err == nil {
						_ = rc.Close()
					}
					t.Fatalf("fetch: %v, want ErrDownload", err)
				}
				return
			}
			if err != nil {
				t.Fatalf("fetch: %v, want the content", err)
			}
			got, _ := io.ReadAll(rc)
			_ = rc.Close()
			if !bytes.Equal(got, []byte("png bytes")) {
				t.Fatalf("content %q, want the image's", got)
			}
		})
	}
}

// A voice note's or video's content that LINE is still preparing (the
// download answered 202, the transcoding status "processing") is
// waited for within the fetch's time, not reported as a failed
// download; one LINE could not prepare is an error at once.
func TestFetchWaitsForPreparedContent(t *testing.T) {
	t.Parallel()
	f, p := newPlatform(t)
	for _, tc := range []struct {
		name   string
		kind   eventsv1.AttachmentKind
		checks int
	}{
		{"audio", eventsv1.AttachmentKind_ATTACHMENT_KIND_AUDIO, 3},
		{"video", eventsv1.AttachmentKind_ATTACHMENT_KIND_VIDEO, 2},
		{"202 on a download of another kind", eventsv1.AttachmentKind_ATTACHMENT_KIND_DOCUMENT, 1},
	} {
		id := f.AddPreparingContent("audio/x-m4a", []byte("m4a bytes"), tc.checks, false)
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		rc, mt, err := p.Fetch(ctx, &eventsv1.Attachment{Kind: tc.kind, Location: &eventsv1.Attachment_Url{Url: contentURL(f.BaseURL(), id)}})
		if err != nil {
			cancel()
			t.Fatalf("%s: %v", tc.name, err)
		}
		got, _ := io.ReadAll(rc)
		rc.Close()
		cancel()
		if !bytes.Equal(got, []byte("m4a bytes")) || mt != "audio/x-m4a" {
			t.Fatalf("%s: content %q %q", tc.name, got, mt)
		}
	}
	id := f.AddPreparingContent("video/mp4", []byte("mp4"), 0, true)
	if _, _, err := p.Fetch(context.Background(), &eventsv1.Attachment{Kind: eventsv1.AttachmentKind_ATTACHMENT_KIND_VIDEO, Location: &eventsv1.Attachment_Url{Url: contentURL(f.BaseURL(), id)}}); !errors.Is(err, ErrDownload) {
		t.Fatalf("content LINE could not prepare: %v", err)
	}
	id = f.AddPreparingContent("video/mp4", []byte("mp4"), 1000, false)
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	if _, _, err := p.Fetch(ctx, &eventsv1.Attachment{Kind: eventsv1.AttachmentKind_ATTACHMENT_KIND_VIDEO, Location: &eventsv1.Attachment_Url{Url: contentURL(f.BaseURL(), id)}}); err == nil {
		t.Fatal("content never prepared was fetched")
	}
}

// A channel access token LINE refuses makes the gateway unready with
// the reason, and it does not retry.
func TestRefusedTokenIsFatal(t *testing.T) {
	t.Parallel()
	f := linefake.New(t)
	f.RefuseToken()
	b := bustest.New(t, bustest.EmbeddedURL(t))
	s, err := New(testConfig(f), Deps{Log: slog.New(slog.DiscardHandler), Bus: b, Runner: platform.Options{Backoff: platform.Schedule(10 * time.Millisecond)}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	defer func() { stop(); <-done; platformtest.DeleteBuckets(b) }()
	platformtest.WaitFor(t, "the fatal state", func() bool { st, _ := s.Runner().State(); return st == platform.StateFatal })
	if err := s.Ready(ctx); err == nil || !strings.Contains(err.Error(), "LINE_CHANNEL_ACCESS_TOKEN") {
		t.Fatalf("readiness %v: want unready naming the token", err)
	}
}

func TestConfigValidate(t *testing.T) {
	t.Parallel()
	ok := Config{ChannelAccessToken: "t", ChannelSecret: "s"}
	if err := ok.validate(); err != nil {
		t.Fatal(err)
	}
	if ok.Addr != "127.0.0.1:8649" || ok.Path != "/line/webhook" || ok.APIBaseURL != DefaultAPIBaseURL || ok.DataBaseURL != DefaultDataBaseURL || ok.ReplyTokenTTL != 50*time.Second {
		t.Fatalf("defaults: %+v", ok)
	}
	port := Config{ChannelAccessToken: "t", ChannelSecret: "s", Host: "0.0.0.0", Port: 9000}
	if err := port.validate(); err != nil || port.Addr != "0.0.0.0:9000" {
		t.Fatalf("LINE_HOST and LINE_PORT: %v %s", err, port.Addr)
	}
	for _, c := range []struct {
		name string
		edit func(*Config)
		want string
	}{
		{"no token", func(c *Config) { c.ChannelAccessToken = "" }, "LINE_CHANNEL_ACCESS_TOKEN"},
		{"no secret", func(c *Config) { c.ChannelSecret = "" }, "LINE_CHANNEL_SECRET"},
		{"bad port", func(c *Config) { c.Port = 70000 }, "LINE_PORT"},
		{"bad api url", func(c *Config) { c.APIBaseURL = "ftp://x" }, "api_base_url"},
		{"bad data url", func(c *Config) { c.DataBaseURL = "x" }, "data_base_url"},
	} {
		cfg := Config{ChannelAccessToken: "t", ChannelSecret: "s"}
		c.edit(&cfg)
		if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want an error naming %q", c.name, err, c.want)
		}
	}
}

// LINE's image messages show JPEG or PNG only: an attachment that is not
// such a picture (a document, a video, a voice note, a GIF) goes as its
// caption and link in a text message, never as a broken image; a picture
// goes as an image message after its caption; an attachment without a
// public https URL is refused as permanent.
func TestSendAttachments(t *testing.T) {
	t.Parallel()
	f := linefake.New(t)
	h := start(t, f, testConfig(f))
	att := func(kind eventsv1.AttachmentKind, mimeType, u, caption string) *deliveryv1.SendRequested {
		r := sendTo(testGroup, "k-"+kind.String()+mimeType+u, "")
		r.Attachments = []*eventsv1.Attachment{{Kind: kind, MimeType: mimeType, Caption: caption, Location: &eventsv1.Attachment_Url{Url: u}}}
		return r
	}
	for name, c := range map[string]struct {
		req  *deliveryv1.SendRequested
		want []linefake.Message
	}{
		"document": {att(eventsv1.AttachmentKind_ATTACHMENT_KIND_DOCUMENT, "application/pdf", "https://cdn.example/report.pdf", "The report"),
			[]linefake.Message{{Type: "text", Text: "The report\nhttps://cdn.example/report.pdf"}}},
		"video": {att(eventsv1.AttachmentKind_ATTACHMENT_KIND_VIDEO, "", "https://cdn.example/clip.mp4", ""),
			[]linefake.Message{{Type: "text", Text: "https://cdn.example/clip.mp4"}}},
		"voice": {att(eventsv1.AttachmentKind_ATTACHMENT_KIND_VOICE, "audio/ogg", "https://cdn.example/note.ogg", ""),
			[]linefake.Message{{Type: "text", Text: "https://cdn.example/note.ogg"}}},
		"gif": {att(eventsv1.AttachmentKind_ATTACHMENT_KIND_IMAGE, "image/gif", "https://cdn.example/a.gif", ""),
			[]linefake.Message{{Type: "text", Text: "https://cdn.example/a.gif"}}},
		"png": {att(eventsv1.AttachmentKind_ATTACHMENT_KIND_IMAGE, "image/png", "https://cdn.example/a.png", "A chart"),
			[]linefake.Message{{Type: "text", Text: "A chart"}, {Type: "image", ImageURL: "https://cdn.example/a.png"}}},
		"jpeg": {att(eventsv1.AttachmentKind_ATTACHMENT_KIND_IMAGE, "image/jpeg; charset=binary", "https://cdn.example/b.jpg", ""),
			[]linefake.Message{{Type: "image", ImageURL: "https://cdn.example/b.jpg"}}},
		"jpg": {att(eventsv1.AttachmentKind_ATTACHMENT_KIND_IMAGE, "image/jpg", "https://cdn.example/e.jpg", ""),
			[]linefake.Message{{Type: "image", ImageURL: "https://cdn.example/e.jpg"}}},
		"undeclared": {att(eventsv1.AttachmentKind_ATTACHMENT_KIND_UNSPECIFIED, "", "https://cdn.example/c.png", ""),
			[]linefake.Message{{Type: "image", ImageURL: "https://cdn.example/c.png"}}},
		"undeclared gif (an answer's image)": {att(eventsv1.AttachmentKind_ATTACHMENT_KIND_IMAGE, "", "https://cdn.example/f.GIF?v=2", "Dancing"),
			[]linefake.Message{{Type: "text", Text: "Dancing\nhttps://cdn.example/f.GIF?v=2"}}},
		"undeclared webp": {att(eventsv1.AttachmentKind_ATTACHMENT_KIND_IMAGE, "", "https://cdn.example/g.webp", ""),
			[]linefake.Message{{Type: "text", Text: "https://cdn.example/g.webp"}}},
		"undeclared, no extension": {att(eventsv1.AttachmentKind_ATTACHMENT_KIND_IMAGE, "", "https://fal.media/files/abc", ""),
			[]linefake.Message{{Type: "image", ImageURL: "https://fal.media/files/abc"}}},
		"typed picture": {att(eventsv1.AttachmentKind_ATTACHMENT_KIND_UNSPECIFIED, "image/png", "https://cdn.example/d.png", ""),
			[]linefake.Message{{Type: "image", ImageURL: "https://cdn.example/d.png"}}},
	} {
		before := len(f.Sent(testGroup))
		if rc := h.send(t, c.req); !rc.GetOk() {
			t.Fatalf("%s: receipt %v", name, rc)
		}
		got := f.Sent(testGroup)[before:]
		if len(got) != len(c.want) {
			t.Fatalf("%s: sent %+v, want %+v", name, got, c.want)
		}
		for i, w := range c.want {
			if got[i].Type != w.Type || got[i].Text != w.Text || got[i].ImageURL != w.ImageURL {
				t.Fatalf("%s: sent %+v, want %+v", name, got, c.want)
			}
		}
	}
	private := sendTo(testGroup, "k-bytes", "")
	private.Attachments = []*eventsv1.Attachment{{Kind: eventsv1.AttachmentKind_ATTACHMENT_KIND_IMAGE, Location: &eventsv1.Attachment_BytesRef{BytesRef: "ref"}}}
	before := len(f.Sent(testGroup))
	if rc := h.send(t, private); rc.GetOk() || rc.GetErrorClass() != deliveryv1.ErrorClass_ERROR_CLASS_PERMANENT {
		t.Errorf("bytes: receipt %v, want a permanent error", rc)
	}
	if got := f.Sent(testGroup); len(got) != before {
		t.Fatalf("sent %+v", got[before:])
	}
}

// An approval prompt carries quick reply buttons; a tap is a postback
// published as the command it stands for, from the tapper, with the
// call it answers, and its reply token answers it. Other postback data
// (a rich menu's) is the user's text, as Hermes; a delivery of many
// events is published whole.
func TestApprovalButtons(t *testing.T) {
	t.Parallel()
	f := linefake.New(t)
	cfg := testConfig(f)
	cfg.AllowedGroups = []string{testGroup}
	h := start(t, f, cfg)
	req := sendTo(testGroup, "prompt-1", "⚠️ Dangerous command requires approval: reply /approve or /deny")
	req.Approval = &deliveryv1.Approval{Choices: []string{"once", "session", "always", "deny"}, ToolCallId: "call_42"}
	if r := h.send(t, req); !r.GetOk() {
		t.Fatalf("prompt: %v", r)
	}
	got := f.Sent(testGroup)
	want := []linefake.Button{{Label: "Allow Once", Data: "ea:once:call_42", DisplayText: "/approve"}, {Label: "Allow Session", Data: "ea:session:call_42", DisplayText: "/approve session"},
		{Label: "Always Allow", Data: "ea:always:call_42", DisplayText: "/approve always"}, {Label: "Deny", Data: "ea:deny:call_42", DisplayText: "/deny"}}
	if len(got) != 1 || !slices.Equal(got[0].Buttons, want) {
		t.Fatalf("sent %+v", got)
	}

	h.post(t, f.Body(f.Event(linefake.Inbound{Type: "postback", GroupID: testGroup, UserID: alice, Text: "ea:session:call_42"})))
	ev := h.next(t)
	if ev.GetText() != "/approve session" || ev.GetButtonPress().GetToolCallId() != "call_42" || ev.GetSource().GetUserId() != alice || ev.GetSource().GetChatId() != testGroup {
		t.Fatalf("press %v", ev)
	}
	if r := h.send(t, sendTo(testGroup, "answer-1", "✅ Approved for session")); !r.GetOk() {
		t.Fatalf("answer: %v", r)
	}
	if got := f.Sent(testGroup); got[len(got)-1].Via != "reply" || got[len(got)-1].Buttons != nil {
		t.Fatalf("the answer did not use the tap's reply token: %+v", got[len(got)-1])
	}

	var evs []map[string]any
	for i := range 120 {
		evs = append(evs, f.Event(linefake.Inbound{Type: "postback", UserID: alice, Text: fmt.Sprintf("menu %d", i)}))
	}
	if code := h.post(t, f.Body(evs...)); code != http.StatusOK {
		t.Fatalf("a delivery of 120 events answered %d", code)
	}
	for i := range 120 {
		if ev := h.next(t); ev.GetText() != fmt.Sprintf("menu %d", i) || ev.GetButtonPress() != nil {
			t.Fatalf("event %d: %v", i, ev)
		}
	}
}

// LINE_REQUIRE_MENTION: in groups and rooms only messages whose mention
// object names the bot are published, except in the free-response
// groups (LINE_FREE_RESPONSE_GROUPS); DMs and postbacks (taps on the
// bot's buttons) are never gated. A mention of another member is not
// one of the bot.
func TestRequireMention(t *testing.T) {
	t.Parallel()
	const free, room = "Cf0e1d2c3b4a5968778695a4b3c2d1e0f", "Rb1c2d3e4f5a6b7c8d9e0f1a2b3c4d5e6"
	f := linefake.New(t)
	cfg := testConfig(f)
	cfg.AllowedGroups, cfg.AllowedRooms = []string{testGroup, free}, []string{"*"}
	cfg.RequireMention, cfg.FreeResponseGroups = true, []string{free}
	h := start(t, f, cfg)
	other := f.Event(linefake.Inbound{UserID: alice, GroupID: testGroup, Text: "@Ann hi"})
	other["message"].(map[string]any)["mention"] = map[string]any{"mentionees": []map[string]any{{"index": 0, "length": 4, "type": "user", "userId": "U9f8e7d6c5b4a39281706f5e4d3c2b1a0"}}}
	events := []map[string]any{
		f.Event(linefake.Inbound{UserID: alice, GroupID: testGroup, Text: "chatter"}),
		f.Event(linefake.Inbound{UserID: alice, GroupID: testGroup, Text: "@Bot help", MentionBot: true}),
		other,
		f.Event(linefake.Inbound{UserID: alice, GroupID: free, Text: "anything goes here"}),
		f.Event(linefake.Inbound{UserID: alice, RoomID: room, Text: "room chatter"}),
		f.Event(linefake.Inbound{UserID: alice, Text: "a DM"}),
		f.Event(linefake.Inbound{Type: "postback", UserID: alice, GroupID: testGroup, Text: "/new"}),
	}
	if code := h.post(t, f.Body(events...)); code != http.StatusOK {
		t.Fatalf("delivery answered %d", code)
	}
	for _, want := range []struct {
		text, chat string
		mentioned  bool
	}{{"@Bot help", testGroup, true}, {"anything goes here", free, false}, {"a DM", alice, false}, {"/new", testGroup, false}} {
		ev := h.next(t)
		if ev.GetText() != want.text || ev.GetSource().GetChatId() != want.chat || ev.GetMentioned() != want.mentioned {
			t.Fatalf("event %q in %s (mentioned %v), want %q in %s (mentioned %v)", ev.GetText(), ev.GetSource().GetChatId(), ev.GetMentioned(),
				want.text, want.chat, want.mentioned)
		}
	}
	h.none(t)
}

// newPlatform is a LINE gateway on a fake LINE and its own bus, not
// connected.
func newPlatform(t *testing.T) (*linefake.Fake, *Platform) {
	t.Helper()
	f := linefake.New(t)
	p, err := NewPlatform(testConfig(f), bustest.New(t, bustest.EmbeddedURL(t)), slog.New(slog.DiscardHandler), nil)
	if err != nil {
		t.Fatal(err)
	}
	return f, p
}
