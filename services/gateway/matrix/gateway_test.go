package matrix

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/switchboard-chat/switchboard/pkg/bus"
	"github.com/switchboard-chat/switchboard/pkg/bus/bustest"
	deliveryv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/delivery/v1"
	eventsv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/events/v1"
	"github.com/switchboard-chat/switchboard/pkg/platform"
	"github.com/switchboard-chat/switchboard/pkg/platform/platformtest"
	"github.com/switchboard-chat/switchboard/pkg/sessionkey"
	"github.com/switchboard-chat/switchboard/pkg/telemetry/telemetrytest"
	"github.com/switchboard-chat/switchboard/services/gateway/matrix/matrixfake"
)

// gw is a running gateway on NATS (an embedded server), pointed at a fake
// homeserver.
type gw struct {
	f    *matrixfake.Fake
	b    *bus.Bus
	s    *Service
	stop func()
	ctx  context.Context
	evs  chan *eventsv1.MessageReceived
}

func start(t *testing.T, cfg func(*Config)) *gw {
	t.Helper()
	f, b, evs := fixture(t)
	g := &gw{f: f, b: b, evs: evs}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	g.ctx = ctx
	g.s, g.stop = runGateway(t, b, f, cfg)
	return g
}

// fixture is a fake homeserver holding the test rooms and a bus whose
// inbound events the test reads; the bus's cursors bucket is deleted
// when the test ends.
func fixture(t *testing.T) (*matrixfake.Fake, *bus.Bus, chan *eventsv1.MessageReceived) {
	t.Helper()
	f := matrixfake.New(bot, token)
	t.Cleanup(f.Close)
	fakeRooms(f)
	b := bustest.New(t, bustest.EmbeddedURL(t))
	t.Cleanup(func() {
		_ = b.JetStream().DeleteKeyValue(context.Background(), b.Topology().Stream(BucketCursors))
	})
	return f, b, platformtest.InboundEvents(t, b)
}

// build makes a gateway on b talking to f (testConfig, changed by mutate
// when it is not nil), not started, retrying at once.
func build(t *testing.T, b *bus.Bus, f *matrixfake.Fake, mutate func(*Config), log *slog.Logger) *Service {
	t.Helper()
	cfg := testConfig(f)
	if mutate != nil {
		mutate(&cfg)
	}
	s, err := New(cfg, Deps{Log: log, Bus: b,
		Runner: platform.Options{Backoff: platform.Schedule(10 * time.Millisecond), LeaseTTL: time.Second}})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// runGateway starts a gateway on b and waits for it to sync; stop ends
// it (and waits).
func runGateway(t *testing.T, b *bus.Bus, f *matrixfake.Fake, mutate func(*Config)) (*Service, func()) {
	t.Helper()
	return runGatewayLogged(t, b, f, mutate, slog.New(slog.DiscardHandler))
}

// runGatewayLogged is runGateway with the gateway logging to log.
func runGatewayLogged(t *testing.T, b *bus.Bus, f *matrixfake.Fake, mutate func(*Config), log *slog.Logger) (*Service, func()) {
	t.Helper()
	s := build(t, b, f, mutate, log)
	runCtx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(runCtx) }()
	var once sync.Once
	stop := func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("run: %v", err)
			}
		})
	}
	t.Cleanup(func() { stop(); platformtest.DeleteBuckets(b) })
	platformtest.WaitFor(t, "the gateway to sync", func() bool {
		st, _ := s.Runner().State()
		return st == platform.StateConnected
	})
	return s, stop
}

func (g *gw) next(t *testing.T) *eventsv1.MessageReceived {
	t.Helper()
	return platformtest.NextEvent(t, g.evs)
}

func (g *gw) none(t *testing.T) { t.Helper(); platformtest.NoEvent(t, g.evs, 500*time.Millisecond) }

func (g *gw) send(t *testing.T, req *deliveryv1.SendRequested) *deliveryv1.SendReceipt {
	t.Helper()
	r := &deliveryv1.SendReceipt{}
	if err := g.b.Request(g.ctx, g.b.Topology().SendSubject("matrix"), req, r); err != nil {
		t.Fatalf("send request: %v", err)
	}
	return r
}

func answer(ev *eventsv1.MessageReceived, op deliveryv1.SendOp, key, text string) *deliveryv1.SendRequested {
	return &deliveryv1.SendRequested{Op: op, Text: text, TurnId: "turn-" + ev.GetEventId(), IdempotencyKey: key,
		Target: &deliveryv1.Target{Platform: "matrix", Account: bot, ChatId: ev.GetSource().GetChatId(), ThreadId: ev.GetSource().GetThreadId(),
			ReplyToMessageId: ev.GetMessageId()},
		InputMessageIds: []string{ev.GetMessageId()}}
}

// A DM in, the answer out as formatted HTML, marked read; a streamed
// answer is one message edited in place (m.replace).
func TestAnswerAndStream(t *testing.T) {
	t.Parallel()
	g := start(t, nil)
	id := g.f.Message(dmRm, ann, "what is 2+2?")
	ev := g.next(t)
	if ev.GetEventId() != id || ev.GetSource().GetChatType() != "dm" || ev.GetSource().GetThreadId() != "" {
		t.Fatalf("event %v, want %s in Ann's DM without a thread", ev, id)
	}
	platformtest.WaitFor(t, "the read receipt", func() bool { return g.f.Receipt(dmRm) == id })
	if r := g.send(t, answer(ev, deliveryv1.SendOp_SEND_OP_TYPING, "", "")); !r.GetOk() || g.f.Typing(dmRm) == 0 {
		t.Fatalf("typing receipt %v, %d typing notices", r, g.f.Typing(dmRm))
	}
	first := g.send(t, answer(ev, deliveryv1.SendOp_SEND_OP_SEND, "k1", "It is"))
	if !first.GetOk() {
		t.Fatalf("send receipt %v", first)
	}
	for i, text := range []string{"It is **4**", "It is **4**."} {
		edit := answer(ev, deliveryv1.SendOp_SEND_OP_EDIT, "k1-edit-"+text, text)
		edit.MessageId = first.GetPlatformMessageId()
		if r := g.send(t, edit); !r.GetOk() {
			t.Fatalf("edit %d receipt %v", i, r)
		}
	}
	sent := g.f.Sent(dmRm)
	if len(sent) != 1 {
		t.Fatalf("the room shows %d messages, want the one edited: %+v", len(sent), sent)
	}
	if s := sent[0]; s.Body != "It is **4**." || s.FormattedBody != "It is <strong>4</strong>." || s.Edits != 2 || s.ReplyTo != id {
		t.Fatalf("message %+v: want the last edit, as HTML, replying to %s", s, id)
	}
	// The gateway does not take its own messages (or their edits) in.
	g.none(t)
}

// A room message that mentions the bot opens a thread on itself; the
// answer goes into it, and a later message in the thread is taken
// without a mention, in the same thread.
func TestThreadKept(t *testing.T) {
	t.Parallel()
	g := start(t, nil)
	g.f.Message(team, bob, "just chatting") // no mention: skipped
	root := g.f.Message(team, ann, "@bot:fake.test plan the trip")
	ev := g.next(t)
	if ev.GetEventId() != root || ev.GetSource().GetThreadId() != root || ev.GetText() != "plan the trip" {
		t.Fatalf("event %v, want %s opening its own thread", ev, root)
	}
	if r := g.send(t, answer(ev, deliveryv1.SendOp_SEND_OP_SEND, "t1", "Day 1: …")); !r.GetOk() {
		t.Fatalf("send receipt %v", r)
	}
	sent := g.f.Sent(team)
	if len(sent) != 1 || sent[0].Thread != root {
		t.Fatalf("sent %+v, want one message in thread %s", sent, root)
	}
	more := g.f.Inject(team, ann, "m.room.message", map[string]any{"msgtype": "m.text", "body": "and day 2?",
		"m.relates_to": map[string]any{"rel_type": "m.thread", "event_id": root, "is_falling_back": true,
			"m.in_reply_to": map[string]any{"event_id": sent[0].EventID}}})
	ev = g.next(t)
	if ev.GetEventId() != more || ev.GetSource().GetThreadId() != root || ev.GetReplyTo() != nil {
		t.Fatalf("event %v, want %s in thread %s", ev, more, root)
	}
}

// Messages sent while no gateway runs are taken by the next one, from the
// stored token: each once, nothing older again.
func TestRestartResumes(t *testing.T) {
	t.Parallel()
	g := start(t, nil)
	first := g.f.Message(dmRm, ann, "before the restart")
	if ev := g.next(t); ev.GetEventId() != first {
		t.Fatalf("event %s, want %s", ev.GetEventId(), first)
	}
	platformtest.WaitFor(t, "the token to move past the first message", func() bool {
		return g.f.Receipt(dmRm) == first
	})
	g.stop()
	a := g.f.Message(dmRm, ann, "while down 1")
	bb := g.f.Message(dmRm, ann, "while down 2")
	_, _ = runGateway(t, g.b, g.f, nil)
	for _, want := range []string{a, bb} {
		if ev := g.next(t); ev.GetEventId() != want {
			t.Fatalf("event %s %q, want %s", ev.GetEventId(), ev.GetText(), want)
		}
	}
	g.none(t)
}

// A sync whose timeline is limited (more came while the gateway was down
// than the homeserver puts in one answer) is not a gap: the gateway pages
// back with /messages to the stored token and publishes every message,
// in order, each once.
func TestRestartLimitedTimeline(t *testing.T) {
	t.Parallel()
	g := start(t, nil)
	first := g.f.Message(dmRm, ann, "before the restart")
	if ev := g.next(t); ev.GetEventId() != first {
		t.Fatalf("event %s, want %s", ev.GetEventId(), first)
	}
	platformtest.WaitFor(t, "the token to move past the first message", func() bool {
		return g.f.Receipt(dmRm) == first
	})
	g.stop()
	g.f.SetTimelineLimit(3)
	var want []string
	for i := range 8 {
		want = append(want, g.f.Message(dmRm, ann, fmt.Sprintf("while down %d", i)))
	}
	_, _ = runGateway(t, g.b, g.f, nil)
	for _, id := range want {
		if ev := g.next(t); ev.GetEventId() != id {
			t.Fatalf("event %s %q, want %s", ev.GetEventId(), ev.GetText(), id)
		}
	}
	g.none(t)
}

// A 429 (M_LIMIT_EXCEEDED) is handed to delivery with the wait it
// names, its Retry-After before its retry_after_ms (the fake sends the
// body's 1.5 s as 2 s in the header, whole seconds rounded up; Matrix 1.10
// deprecates the body's): before, the body's. The retry with the same
// key posts once. A forbidden room is permanent.
func TestSendErrors(t *testing.T) {
	t.Parallel()
	g := start(t, nil)
	g.f.Message(dmRm, ann, "hi")
	ev := g.next(t)
	g.f.FailNext("send", 1, matrixfake.Fail{Status: http.StatusTooManyRequests, ErrCode: "M_LIMIT_EXCEEDED", RetryAfterMS: 1500})
	req := answer(ev, deliveryv1.SendOp_SEND_OP_SEND, "r1", "hello")
	r := g.send(t, req)
	if r.GetOk() || r.GetErrorClass() != deliveryv1.ErrorClass_ERROR_CLASS_RATE_LIMITED || r.GetRetryAfterMs() != 2000 {
		t.Fatalf("receipt %v, want rate limited for the header's 2 s", r)
	}
	if r := g.send(t, req); !r.GetOk() {
		t.Fatalf("retry receipt %v", r)
	}
	if n := len(g.f.Sent(dmRm)); n != 1 {
		t.Fatalf("%d messages shown, want 1", n)
	}
	g.f.FailNext("send", 1, matrixfake.Fail{Status: http.StatusInternalServerError, ErrCode: "M_UNKNOWN"})
	if r := g.send(t, answer(ev, deliveryv1.SendOp_SEND_OP_SEND, "r2", "x")); r.GetErrorClass() != deliveryv1.ErrorClass_ERROR_CLASS_RETRYABLE {
		t.Fatalf("5xx receipt %v, want retryable", r)
	}
	bad := answer(ev, deliveryv1.SendOp_SEND_OP_SEND, "r3", "x")
	bad.Target.ChatId = "!elsewhere:fake.test"
	if r := g.send(t, bad); r.GetErrorClass() != deliveryv1.ErrorClass_ERROR_CLASS_PERMANENT || !strings.Contains(r.GetError(), "M_FORBIDDEN") {
		t.Fatalf("forbidden receipt %v, want permanent", r)
	}
}

// An invite is joined; a DM invite makes the room a DM.
func TestAutoJoin(t *testing.T) {
	t.Parallel()
	g := start(t, nil)
	const newRoom = "!new:" + matrixfake.Server
	g.f.Invite(newRoom, ann, true)
	platformtest.WaitFor(t, "the invite joined", func() bool { return g.f.Joined(newRoom) })
	id := g.f.Message(newRoom, ann, "hello there")
	ev := g.next(t)
	if ev.GetEventId() != id || ev.GetSource().GetChatType() != "dm" {
		t.Fatalf("event %v, want %s in a DM", ev, id)
	}
}

// A join that fails for a while (the homeserver rate-limits joins, or
// is restarting) is tried again: the invite comes in one sync answer
// only, and the stored token moves past it, so giving up on the first
// failure left the bot out of the room for good and every message sent
// there unread. A join refused for good (the invite withdrawn) is not
// tried again.
func TestAutoJoinRetriesAFailedJoin(t *testing.T) {
	t.Parallel()
	g := start(t, nil)
	const newRoom = "!slow:" + matrixfake.Server
	g.f.FailNext("join", 1, matrixfake.Fail{Status: http.StatusTooManyRequests, ErrCode: "M_LIMIT_EXCEEDED", RetryAfterMS: 50})
	g.f.FailNext("join", 1, matrixfake.Fail{Status: http.StatusBadGateway, ErrCode: "M_UNKNOWN"})
	g.f.Invite(newRoom, ann, true)
	platformtest.WaitFor(t, "the invite joined after the failures", func() bool { return g.f.Joined(newRoom) })
	id := g.f.Message(newRoom, ann, "hello there")
	if ev := g.next(t); ev.GetEventId() != id || ev.GetSource().GetChatType() != "dm" {
		t.Fatalf("event %v, want %s in a DM", ev, id)
	}

	const gone = "!gone:" + matrixfake.Server
	g.f.FailNext("join", 1, matrixfake.Fail{Status: http.StatusForbidden, ErrCode: "M_FORBIDDEN"})
	calls := g.f.Calls("join")
	g.f.Invite(gone, ann, false)
	platformtest.WaitFor(t, "the refused join", func() bool { return g.f.Calls("join") > calls })
	time.Sleep(time.Second)
	if n := g.f.Calls("join") - calls; n != 1 || g.f.Joined(gone) {
		t.Fatalf("%d joins of a room the homeserver refused for good (joined %v), want 1", n, g.f.Joined(gone))
	}
}

// A homeserver that is down when the gateway starts is asked again on
// the backoff schedule (whoami), the gateway unready meanwhile; once it
// is up the gateway syncs and a message gets through.
func TestHomeserverDownAtStart(t *testing.T) {
	t.Parallel()
	f := matrixfake.New(bot, token)
	t.Cleanup(f.Close)
	fakeRooms(f)
	down := platformtest.NewOutage(t)
	cfg := testConfig(f)
	cfg.Homeserver = "http://" + down.Addr()
	b := bustest.New(t, bustest.EmbeddedURL(t))
	t.Cleanup(func() {
		_ = b.JetStream().DeleteKeyValue(context.Background(), b.Topology().Stream(BucketCursors))
	})
	evs := platformtest.InboundEvents(t, b)
	s, err := New(cfg, Deps{Log: slog.New(slog.DiscardHandler), Bus: b,
		Runner: platform.Options{Backoff: platform.Schedule(20 * time.Millisecond), LeaseTTL: time.Second}})
	if err != nil {
		t.Fatalf("New with the homeserver down: %v", err)
	}
	platformtest.Start(t, b, s)
	down.ComeUp(t, s, "whoami", strings.TrimPrefix(f.URL, "http://"))
	id := f.Message(dmRm, ann, "are you there?")
	if ev := platformtest.NextEvent(t, evs); ev.GetEventId() != id || ev.GetSource().GetAccount() != bot {
		t.Fatalf("event %v, want %s for %s", ev, id, bot)
	}
}

// A token the homeserver does not know ends Run at once with the reason.
func TestRefusedTokenEndsRun(t *testing.T) {
	t.Parallel()
	f := matrixfake.New(bot, token)
	t.Cleanup(f.Close)
	cfg := testConfig(f)
	cfg.AccessToken = "syt_wrong"
	b := bustest.New(t, bustest.EmbeddedURL(t))
	s, err := New(cfg, Deps{Log: slog.New(slog.DiscardHandler), Bus: b, Runner: platform.Options{Backoff: platform.Schedule(10 * time.Millisecond)}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := s.Run(ctx); err == nil || !strings.Contains(err.Error(), "MATRIX_ACCESS_TOKEN") || !strings.Contains(err.Error(), "M_UNKNOWN_TOKEN") {
		t.Fatalf("Run with a refused token: %v", err)
	}
	if st, _ := s.Runner().State(); st != platform.StateFatal {
		t.Fatalf("state %s, want fatal", st)
	}
}

// A send retried after a failed attempt uploads each attachment once: an
// attachment uploaded but not posted is posted under its first content
// URI, one posted already is skipped (the kit's marks and parts, beside
// the receipt).
func TestRetryReusesUploads(t *testing.T) {
	t.Parallel()
	files := []*eventsv1.Attachment{
		{Kind: eventsv1.AttachmentKind_ATTACHMENT_KIND_DOCUMENT, Location: &eventsv1.Attachment_Url{Url: "data:text/plain;base64,eA=="}, FileName: "a.txt"},
		{Kind: eventsv1.AttachmentKind_ATTACHMENT_KIND_DOCUMENT, Location: &eventsv1.Attachment_Url{Url: "data:text/plain;base64,eQ=="}, FileName: "b.txt"},
	}
	for _, tc := range []struct {
		name string
		fail int // the send call that fails: 1 the first file's event, 2 the second's, 3 the text's
	}{
		{"the first file's event fails", 1},
		{"the second file's event fails", 2},
		{"the text fails", 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			g := start(t, nil)
			g.f.Message(dmRm, ann, "hi")
			ev := g.next(t)
			req := answer(ev, deliveryv1.SendOp_SEND_OP_SEND, "up-"+strconv.Itoa(tc.fail), "hello")
			req.Attachments = files
			g.f.FailNext("send", 1, matrixfake.Fail{Status: http.StatusBadGateway, ErrCode: "M_UNKNOWN", After: tc.fail - 1})
			if r := g.send(t, req); r.GetOk() || r.GetErrorClass() != deliveryv1.ErrorClass_ERROR_CLASS_RETRYABLE {
				t.Fatalf("first attempt's receipt %v, want retryable", r)
			}
			if r := g.send(t, req); !r.GetOk() {
				t.Fatalf("retry receipt %v", r)
			}
			if n := g.f.Calls("upload"); n != 2 {
				t.Fatalf("%d uploads, want 2 (one per file)", n)
			}
			got := g.f.Sent(dmRm)
			if len(got) != 3 || got[0].Body != "a.txt" || got[1].Body != "b.txt" || got[2].Body != "hello" {
				t.Fatalf("sent %+v, want a.txt, b.txt and the text once each", got)
			}
		})
	}
}

// One event of a sync answer that does not decode (the answer as a whole
// then does not) or whose handling panics (null in the timeline) costs
// only itself: it is rejected and counted, the messages before and after
// it are published once each, the token moves past it, and the gateway
// keeps its connection instead of asking for the same answer for ever.
func TestPoisonEventSkipped(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, raw string
		panics    bool
	}{
		{"timestamp not a number", `{"type":"m.room.message","event_id":"$ts:fake.test","sender":"@ann:fake.test","origin_server_ts":"yesterday","content":{"msgtype":"m.text","body":"x"}}`, false},
		{"content not an object", `{"type":"m.room.message","event_id":"$c:fake.test","sender":"@ann:fake.test","origin_server_ts":1,"content":"x"}`, false},
		{"not an object", `42`, false},
		{"null", `null`, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			g := start(t, nil)
			conns := g.f.Connections()
			rejected := telemetrytest.Value(t, "switchboard_gateway_inbound_total", map[string]string{"platform": "matrix", "result": "rejected"})
			panics := telemetrytest.Value(t, "switchboard_panics_total", map[string]string{"component": platform.ReceiveComponent})
			first := g.f.Message(dmRm, ann, "before")
			if ev := g.next(t); ev.GetEventId() != first {
				t.Fatalf("event %s, want %s", ev.GetEventId(), first)
			}
			g.f.InjectRaw(dmRm, tc.raw)
			second := g.f.Message(dmRm, ann, "after")
			if ev := g.next(t); ev.GetEventId() != second {
				t.Fatalf("event %s, want %s", ev.GetEventId(), second)
			}
			g.none(t)
			if n := g.f.Connections(); n != conns {
				t.Errorf("the gateway connected %d times more, want it to keep syncing", n-conns)
			}
			if got := telemetrytest.Value(t, "switchboard_gateway_inbound_total", map[string]string{"platform": "matrix", "result": "rejected"}); got <= rejected {
				t.Errorf("rejected count %v, want it above %v", got, rejected)
			}
			if got := telemetrytest.Value(t, "switchboard_panics_total", map[string]string{"component": platform.ReceiveComponent}); tc.panics && got <= panics {
				t.Errorf("panics count %v, want it above %v", got, panics)
			}
		})
	}
}

// An event that does not decode in the gap a restart reads back
// (/messages) costs only itself: the messages around it are published,
// in order, once each.
func TestRestartGapWithBadEvent(t *testing.T) {
	t.Parallel()
	g := start(t, nil)
	first := g.f.Message(dmRm, ann, "before the restart")
	if ev := g.next(t); ev.GetEventId() != first {
		t.Fatalf("event %s, want %s", ev.GetEventId(), first)
	}
	platformtest.WaitFor(t, "the token to move past the first message", func() bool {
		return g.f.Receipt(dmRm) == first
	})
	g.stop()
	g.f.SetTimelineLimit(2)
	var want []string
	for i := range 6 {
		want = append(want, g.f.Message(dmRm, ann, fmt.Sprintf("while down %d", i)))
		if i == 1 {
			g.f.InjectRaw(dmRm, `{"type":"m.room.message","event_id":"$gap:fake.test","sender":"@ann:fake.test","origin_server_ts":"yesterday","content":{"msgtype":"m.text","body":"x"}}`)
		}
	}
	_, _ = runGateway(t, g.b, g.f, nil)
	for _, id := range want {
		if ev := g.next(t); ev.GetEventId() != id {
			t.Fatalf("event %s %q, want %s", ev.GetEventId(), ev.GetText(), id)
		}
	}
	g.none(t)
}

// A room's chat type follows its members, message by message: Ann's DM
// (listed in m.direct) is a group room once Carol joins (a message needs
// a mention and goes to a group session, by thread), a DM again once she
// leaves (Ann's DM session again), and a group to the gateway that
// starts after Dan joined while none ran, whose first sync carries only
// his join. The DM flag stuck: once a DM, always a DM.
func TestDMFollowsTheRoom(t *testing.T) {
	t.Parallel()
	g := start(t, nil)
	const carol, dan = "@carol:" + matrixfake.Server, "@dan:" + matrixfake.Server
	key := func(ev *eventsv1.MessageReceived) string {
		return sessionkey.Build(ev.GetSource(), sessionkey.DefaultOptions())
	}
	dmKey := "agent:main:matrix:dm:" + dmRm
	for _, step := range []struct {
		name    string
		change  func()
		text    string
		dm      bool
		skipped string // a message sent first, which the room's type skips
	}{
		{name: "a DM", text: "hello", dm: true},
		{name: "carol joined", change: func() { g.f.JoinMember(dmRm, carol, "Carol") },
			skipped: "nobody mentioned", text: "@bot:fake.test hello all"},
		{name: "carol left", change: func() { g.f.LeaveMember(dmRm, carol) }, text: "just us again", dm: true},
	} {
		if step.change != nil {
			step.change()
		}
		if step.skipped != "" {
			g.f.Message(dmRm, ann, step.skipped)
		}
		id := g.f.Message(dmRm, ann, step.text)
		ev := g.next(t)
		if ev.GetEventId() != id {
			t.Fatalf("%s: event %v, want %s", step.name, ev, id)
		}
		want := dmKey
		if !step.dm {
			want = "agent:main:matrix:group:" + dmRm + ":" + id
		}
		if got := key(ev); got != want || (ev.GetSource().GetChatType() == "dm") != step.dm {
			t.Fatalf("%s: chat type %q, key %q, want %q", step.name, ev.GetSource().GetChatType(), got, want)
		}
	}

	g.stop()
	g.f.JoinMember(dmRm, dan, "Dan")
	g.f.Message(dmRm, ann, "nobody mentioned") // skipped: a group room
	id := g.f.Message(dmRm, ann, "@bot:fake.test hello Dan")
	_, g.stop = runGateway(t, g.b, g.f, nil)
	if ev := g.next(t); ev.GetEventId() != id || ev.GetSource().GetChatType() != "group" {
		t.Fatalf("after a restart: event %v, want %s in a group", ev, id)
	}
	g.none(t)
}

// On the very first start (no token stored) what was sent before the
// start is history, skipped; a first sync that fails and is tried again
// (the homeserver answering 502 for a while) does not move the start
// on: a message sent meanwhile is answered.
func TestFirstStartKeptAcrossRetries(t *testing.T) {
	t.Parallel()
	f, b, evs := fixture(t)
	msg := f.Message(dmRm, ann, "hello")
	f.FailNext("sync", 1, matrixfake.Fail{Status: http.StatusBadGateway, ErrCode: "M_UNKNOWN"})
	s := build(t, b, f, nil, slog.New(slog.DiscardHandler))
	// Each reading of the clock is 10 s after the one before: the retry
	// comes long after the message.
	var reads atomic.Int64
	s.p.clock = func() time.Time { return time.Now().Add(time.Duration(reads.Add(1)-1) * 10 * time.Second) }
	platformtest.Start(t, b, s)
	if ev := platformtest.NextEvent(t, evs); ev.GetEventId() != msg {
		t.Fatalf("event %s %q, want %s", ev.GetEventId(), ev.GetText(), msg)
	}
	if f.Calls("sync") < 2 {
		t.Fatalf("%d syncs, want the failed one and its retry", f.Calls("sync"))
	}
}

// The homeserver keeps "typing…" up for the notice's 30 s, the bot's
// messages notwithstanding: a turn's final message takes it down (typing
// false), as Hermes's stop_typing does; a message that ends no turn (a
// command's answer) leaves it.
func TestTypingEndsWithTheTurn(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		final  bool
		typing bool
	}{
		{"a turn's final answer", true, false},
		{"a message before the end", false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			g := start(t, nil)
			g.f.Message(dmRm, ann, "what is 2+2?")
			ev := g.next(t)
			if r := g.send(t, answer(ev, deliveryv1.SendOp_SEND_OP_TYPING, "", "")); !r.GetOk() || !g.f.IsTyping(dmRm) {
				t.Fatalf("typing receipt %v, typing %v", r, g.f.IsTyping(dmRm))
			}
			req := answer(ev, deliveryv1.SendOp_SEND_OP_SEND, "k1", "4")
			req.Final = tc.final
			if r := g.send(t, req); !r.GetOk() {
				t.Fatalf("send receipt %v", r)
			}
			if got := g.f.IsTyping(dmRm); got != tc.typing {
				t.Fatalf("typing after the answer %v, want %v", got, tc.typing)
			}
		})
	}
}

// The start that makes the initial sync's history is the first Connect
// without a token, not the replica's first Connect: a replica that has
// run an hour with a stored token and then finds none (the key deleted,
// a NATS that kept its buckets in memory restarted) skips what was sent
// before, as a first start does. It took the hour's history for
// messages to answer, the last few of every room (only the kit's
// dedupe, while it remembers them, kept them from being answered
// again); taken, each got a read receipt, which the test counts.
func TestStartAfterTheTokenWasLost(t *testing.T) {
	t.Parallel()
	f, b, evs := fixture(t)
	s := build(t, b, f, nil, slog.New(slog.DiscardHandler))
	var now atomic.Int64
	now.Store(time.Now().UnixNano())
	s.p.clock = func() time.Time { return time.Unix(0, now.Load()) }
	platformtest.Start(t, b, s)
	msg := f.Message(dmRm, ann, "hello")
	if ev := platformtest.NextEvent(t, evs); ev.GetEventId() != msg {
		t.Fatalf("event %s %q, want %s", ev.GetEventId(), ev.GetText(), msg)
	}
	platformtest.WaitFor(t, "the token to move past the message", func() bool { return f.Receipt(dmRm) == msg })
	platformtest.WaitFor(t, "a sync from the stored token", func() bool {
		ss := f.SyncSinces()
		return len(ss) > 0 && ss[len(ss)-1] != ""
	})
	now.Add(int64(time.Hour)) // an hour on
	receipts, n := f.Calls("receipt"), len(f.SyncSinces())
	kv, err := b.JetStream().KeyValue(context.Background(), b.Topology().Stream(BucketCursors))
	if err != nil {
		t.Fatal(err)
	}
	if err := kv.Delete(context.Background(), cursorKey(bot)); err != nil {
		t.Fatal(err)
	}
	platformtest.WaitFor(t, "a sync without a token, then one from the token it stored", func() bool {
		ss := f.SyncSinces()[n:]
		i := slices.Index(ss, "")
		return i >= 0 && slices.ContainsFunc(ss[i:], func(s string) bool { return s != "" })
	})
	if got := f.Calls("receipt") - receipts; got != 0 {
		t.Fatalf("%d read receipts after the token was lost, want none: the hour's history was taken for messages", got)
	}
	platformtest.NoEvent(t, evs, 300*time.Millisecond)
}
