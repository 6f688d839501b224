package signal

import (
	"bytes"
	"context"
	"log/slog"
	"math"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/switchboard-chat/switchboard/pkg/attachment"
	"github.com/switchboard-chat/switchboard/pkg/bus"
	"github.com/switchboard-chat/switchboard/pkg/bus/bustest"
	deliveryv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/delivery/v1"
	eventsv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/events/v1"
	"github.com/switchboard-chat/switchboard/pkg/platform"
	"github.com/switchboard-chat/switchboard/pkg/platform/platformtest"
	"github.com/switchboard-chat/switchboard/services/gateway/signal/signalfake"
)

// gw is a running gateway on a real NATS server, pointed at a fake daemon.
type gw struct {
	f   *signalfake.Fake
	b   *bus.Bus
	s   *Service
	ctx context.Context
	evs chan *eventsv1.MessageReceived
}

// start runs a gateway against a new fake daemon in the receive mode
// cfg asks for (the fake in manual mode for manual, its default for
// sse), and waits for it to receive.
func start(t *testing.T, cfg Config, opts platform.Options, setup ...func(*signalfake.Fake)) *gw {
	t.Helper()
	f := signalfake.New(bot)
	t.Cleanup(f.Close)
	if cfg.ReceiveMode != ReceiveSSE {
		f.SetReceiveMode(signalfake.Manual)
	}
	for _, s := range setup {
		s(f)
	}
	b := bustest.New(t, bustest.EmbeddedURL(t))
	g := &gw{f: f, b: b, evs: platformtest.InboundEvents(t, b)}
	g.ctx = context.Background()
	g.s = runGateway(t, b, f, cfg, opts)
	waitReceiving(t, g.s, f, cfg.ReceiveMode)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	g.ctx = ctx
	return g
}

// runGateway starts a gateway on b pointed at f; it stops at the end of
// the test, or when the returned stop is called (which waits for it).
func runGateway(t *testing.T, b *bus.Bus, f *signalfake.Fake, cfg Config, opts platform.Options) *Service {
	s, _ := runGatewayStop(t, b, f, cfg, opts)
	return s
}

func runGatewayStop(t *testing.T, b *bus.Bus, f *signalfake.Fake, cfg Config, opts platform.Options) (*Service, func()) {
	t.Helper()
	cfg.HTTPURL, cfg.Account = f.URL, bot
	if cfg.PollTimeout == DefaultConfig().PollTimeout {
		cfg.PollTimeout = 300 * time.Millisecond // a stopping gateway waits for its call
	}
	opts.Backoff = platform.Schedule(10 * time.Millisecond)
	if opts.LeaseTTL == 0 {
		opts.LeaseTTL = time.Second
	}
	s, err := New(cfg, Deps{Log: slog.New(slog.DiscardHandler), Bus: b, Runner: opts})
	if err != nil {
		t.Fatal(err)
	}
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
	t.Cleanup(func() {
		stop()
		platformtest.DeleteBuckets(b)
	})
	return s, stop
}

// waitReceiving waits for the gateway to be connected: its event stream
// open, or its first receive call answered and the next one in flight.
func waitReceiving(t *testing.T, s *Service, f *signalfake.Fake, mode string) {
	t.Helper()
	platformtest.WaitFor(t, "the gateway to connect", func() bool {
		st, _ := s.Runner().State()
		if mode == ReceiveSSE {
			return st == platform.StateConnected && f.Connected() == 1
		}
		return st == platform.StateConnected && f.Polling() == 1
	})
}

// sseConfig is the default config in sse mode.
func sseConfig() Config {
	cfg := DefaultConfig()
	cfg.ReceiveMode = ReceiveSSE
	return cfg
}

func (g *gw) next(t *testing.T) *eventsv1.MessageReceived {
	t.Helper()
	return platformtest.NextEvent(t, g.evs)
}

func (g *gw) none(t *testing.T) { t.Helper(); platformtest.NoEvent(t, g.evs, 300*time.Millisecond) }

func (g *gw) send(t *testing.T, req *deliveryv1.SendRequested) *deliveryv1.SendReceipt {
	t.Helper()
	r := &deliveryv1.SendReceipt{}
	if err := g.b.Request(g.ctx, g.b.Topology().SendSubject("signal"), req, r); err != nil {
		t.Fatalf("send request: %v", err)
	}
	return r
}

func answer(ev *eventsv1.MessageReceived, op deliveryv1.SendOp, text string) *deliveryv1.SendRequested {
	return &deliveryv1.SendRequested{Op: op, Text: text, TurnId: "turn-" + ev.GetEventId(), IdempotencyKey: "k-" + ev.GetEventId() + "-" + text,
		Target:          &deliveryv1.Target{Platform: "signal", Account: bot, ChatId: ev.GetSource().GetChatId(), ReplyToMessageId: ev.GetMessageId()},
		InputMessageIds: []string{ev.GetMessageId()}}
}

// A direct message in, the answer out: a typing indicator and the
// processing reaction while the turn runs, the reply with its styles,
// quoting the question, then the outcome reaction.
func TestDirectMessageAnswered(t *testing.T) {
	t.Parallel()
	cfg := DefaultConfig()
	cfg.QuoteReplies = true
	g := start(t, cfg, platform.Options{})
	ts := g.f.Receive(signalfake.Message{From: ann, Text: "what is **2+2**?"})
	ev := g.next(t)
	if want := ann.Number + ":" + itoa(ts); ev.GetEventId() != want || ev.GetSource().GetUserIdAlt() != ann.UUID || ev.GetSource().GetChatType() != "dm" {
		t.Fatalf("event %v, want %s from Ann's dm", ev, want)
	}
	if r := g.send(t, answer(ev, deliveryv1.SendOp_SEND_OP_TYPING, "")); !r.GetOk() {
		t.Fatalf("typing receipt %v", r)
	}
	typing := g.f.Calls("sendTyping")
	if len(typing) != 1 || !slices.Equal(toStrings(typing[0].Params["recipient"]), []string{ann.Number}) {
		t.Fatalf("sendTyping calls %+v, want one to Ann", typing)
	}
	platformtest.WaitFor(t, "the processing reaction", func() bool {
		return slices.Equal(g.f.Reactions(ann.Number, ann.Number, ts), []string{"👀"})
	})
	final := answer(ev, deliveryv1.SendOp_SEND_OP_SEND, "It is **4**.")
	final.Final = true
	r := g.send(t, final)
	if !r.GetOk() || !strings.HasPrefix(r.GetPlatformMessageId(), bot+":") {
		t.Fatalf("send receipt %v, want ok with <account>:<timestamp>", r)
	}
	sent := g.f.Sent(ann.Number)
	if len(sent) != 1 || sent[0].Text != "It is 4." || !slices.Equal(sent[0].Styles, []string{"6:1:BOLD"}) ||
		sent[0].QuoteTimestamp != ts || sent[0].QuoteAuthor != ann.Number {
		t.Fatalf("sent %+v, want the plain text with a bold range, quoting the question", sent)
	}
	platformtest.WaitFor(t, "the outcome reaction", func() bool {
		return slices.Equal(g.f.Reactions(ann.Number, ann.Number, ts), []string{"✅"})
	})
}

func toStrings(v any) []string {
	var out []string
	if l, ok := v.([]any); ok {
		for _, x := range l {
			s, _ := x.(string)
			out = append(out, s)
		}
	}
	return out
}

// In a group where a mention is required, only the message that mentions
// the bot is published; the answer goes to the group.
func TestGroupMention(t *testing.T) {
	t.Parallel()
	cfg := DefaultConfig()
	cfg.AllowedGroups, cfg.RequireMention, cfg.Reactions = []string{group}, true, false
	g := start(t, cfg, platform.Options{})
	g.f.Receive(signalfake.Message{From: ann, Text: "just chatting", GroupID: group, GroupName: "Team"})
	g.f.Receive(signalfake.Message{From: ann, Text: "hi", GroupID: "another-group", GroupName: "Other",
		Mentions: []signalfake.Mention{{Contact: botC, Start: 0, Length: 1}}})
	ts := g.f.Receive(signalfake.Message{From: ann, Text: "\uFFFC what time is it", GroupID: group, GroupName: "Team",
		Mentions: []signalfake.Mention{{Contact: botC, Start: 0, Length: 1}}})
	ev := g.next(t)
	if ev.GetEventId() != ann.Number+":"+itoa(ts) || ev.GetText() != "what time is it" || !ev.GetMentioned() ||
		ev.GetSource().GetChatId() != "group:"+group {
		t.Fatalf("event %v, want the mention only, without the bot's name", ev)
	}
	g.none(t)
	if r := g.send(t, answer(ev, deliveryv1.SendOp_SEND_OP_SEND, "noon")); !r.GetOk() {
		t.Fatalf("receipt %v", r)
	}
	if sent := g.f.Sent("group:" + group); len(sent) != 1 || sent[0].Text != "noon" || sent[0].QuoteTimestamp != 0 {
		t.Fatalf("group got %+v, want the answer, not quoting (quote_replies off)", sent)
	}
	if c := g.f.Calls("send"); c[0].Params["groupId"] != group || c[0].Params["recipient"] != nil {
		t.Fatalf("send params %v, want groupId only", c[0].Params)
	}
}

// A picture is published as its attachment id; when a turn reads it, the
// gateway fetches it with getAttachment into the attachment store.
func TestAttachmentFetched(t *testing.T) {
	t.Parallel()
	acfg := attachment.Config{Enabled: true, MaxBytes: 1 << 20, StoreBytes: 8 << 20}
	g := start(t, DefaultConfig(), platform.Options{Attachments: acfg})
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = g.b.JetStream().DeleteObjectStore(ctx, g.b.Topology().Stream(attachment.Bucket))
	})
	pic := platformtest.NoisePNG(t, 16, 16)
	g.f.AddAttachment("Xy9_z-1.png", pic)
	g.f.Receive(signalfake.Message{From: ann, Text: "what is this", Attachments: []signalfake.Attachment{
		{ID: "Xy9_z-1.png", ContentType: "image/png", Filename: "p.png", Size: int64(len(pic))}}})
	ev := g.next(t)
	if len(ev.GetAttachments()) != 1 || ev.GetAttachments()[0].GetPlatformFileId() != "Xy9_z-1.png" {
		t.Fatalf("event attachments %v", ev.GetAttachments())
	}
	if n := len(g.f.Calls("getAttachment")); n != 0 {
		t.Fatalf("publishing fetched %d attachments, want none", n)
	}
	got := platformtest.Fetch(t, g.ctx, g.b, "signal", ev, 0)
	if got.GetBytesRef() == "" || got.GetSizeBytes() != int64(len(pic)) || got.GetMimeType() != "image/png" {
		t.Fatalf("fetched %v", got)
	}
	kept, _, err := attachment.New(g.b.JetStream(), g.b.Topology(), acfg).Get(g.ctx, got.GetBytesRef(), 0)
	if err != nil || !bytes.Equal(kept, pic) {
		t.Fatalf("store has %d bytes (%v), want the picture's %d", len(kept), err, len(pic))
	}
	// An id that names another file of the daemon is refused without a call.
	bad := proto.Clone(ev).(*eventsv1.MessageReceived)
	bad.Attachments[0].PlatformFileId = "../../data/+15550000001"
	bad.EventId += "x"
	if got := platformtest.Fetch(t, g.ctx, g.b, "signal", bad, 0); got.GetBytesRef() != "" || got.GetUnavailable() == "" {
		t.Fatalf("fetched %v for a path, want it unavailable", got)
	}
	if n := len(g.f.Calls("getAttachment")); n != 1 {
		t.Fatalf("%d getAttachment calls, want 1", n)
	}
}

// The daemon drops the stream: the gateway opens it again with the id of
// the last event it published, gets what came meanwhile from the
// daemon's buffer (a daemon that numbers its events), and publishes
// every message once.
func TestStreamDroppedAndResumed(t *testing.T) {
	t.Parallel()
	g := start(t, sseConfig(), platform.Options{}, func(f *signalfake.Fake) { f.SetReplay(true) })
	first := g.f.Receive(signalfake.Message{From: ann, Text: "one"})
	if ev := g.next(t); ev.GetText() != "one" {
		t.Fatalf("got %q", ev.GetText())
	}
	lastID := g.f.LastEventIDs()
	g.f.Drop()
	// Sent while the stream is down (or dying): kept by the daemon.
	g.f.Receive(signalfake.Message{From: ann, Text: "two"})
	g.f.Receive(signalfake.Message{From: ann, Text: "three"})
	platformtest.WaitFor(t, "a new stream", func() bool { return g.f.Connections() == 2 && g.f.Connected() == 1 })
	g.f.Receive(signalfake.Message{From: ann, Text: "four"})
	for _, want := range []string{"two", "three", "four"} {
		if ev := g.next(t); ev.GetText() != want {
			t.Fatalf("after the drop got %q, want %q", ev.GetText(), want)
		}
	}
	g.none(t)
	ids := g.f.LastEventIDs()
	if len(lastID) != 1 || lastID[0] != "" || len(ids) != 2 || ids[1] == "" {
		t.Fatalf("Last-Event-ID headers %q, want none and then the first event's", ids)
	}
	// The first message again (as a daemon that restarted replays what
	// it kept): published once all the same.
	g.f.Drop()
	platformtest.WaitFor(t, "a third stream", func() bool { return g.f.Connections() == 3 && g.f.Connected() == 1 })
	n, _ := g.f.Envelope(signalfake.Message{From: ann, Text: "one", Timestamp: first})
	g.f.Push(n)
	g.f.Receive(signalfake.Message{From: ann, Text: "five"})
	if ev := g.next(t); ev.GetText() != "five" {
		t.Fatalf("after a replay got %q, want only the new message", ev.GetText())
	}
}

// signal-cli 0.14.6 numbers no events: after a drop the stream is opened
// again without Last-Event-ID, and new messages keep coming.
func TestStreamDroppedReleasedDaemon(t *testing.T) {
	t.Parallel()
	g := start(t, sseConfig(), platform.Options{})
	g.f.Receive(signalfake.Message{From: ann, Text: "one"})
	if ev := g.next(t); ev.GetText() != "one" {
		t.Fatalf("got %q", ev.GetText())
	}
	g.f.Drop()
	platformtest.WaitFor(t, "a new stream", func() bool { return g.f.Connections() == 2 && g.f.Connected() == 1 })
	g.f.Receive(signalfake.Message{From: ann, Text: "two"})
	if ev := g.next(t); ev.GetText() != "two" {
		t.Fatalf("after the drop got %q, want the new message", ev.GetText())
	}
	if ids := g.f.LastEventIDs(); !slices.Equal(ids, []string{"", ""}) {
		t.Fatalf("Last-Event-ID headers %q, want none", ids)
	}
}

// A stream that says nothing, not even a keepalive, is dropped and
// opened again.
func TestIdleStreamReconnects(t *testing.T) {
	t.Parallel()
	cfg := sseConfig()
	cfg.IdleTimeout = 200 * time.Millisecond
	g := start(t, cfg, platform.Options{})
	g.f.SetKeepalive(time.Hour) // for the streams opened from now on
	g.f.Drop()
	platformtest.WaitFor(t, "streams opened again after idling", func() bool { return g.f.Connections() >= 4 })
	g.f.SetKeepalive(50 * time.Millisecond)
	n0 := g.f.Connections()
	g.f.Drop() // every stream opened from now on has keepalives
	platformtest.WaitFor(t, "a stream with keepalives", func() bool { return g.f.Connections() > n0 && g.f.Connected() == 1 })
	time.Sleep(100 * time.Millisecond)
	n := g.f.Connections()
	time.Sleep(500 * time.Millisecond)
	if g.f.Connections() != n {
		t.Fatalf("a stream with keepalives was dropped (%d streams, then %d)", n, g.f.Connections())
	}
	g.f.Receive(signalfake.Message{From: ann, Text: "still here"})
	if ev := g.next(t); ev.GetText() != "still here" {
		t.Fatalf("got %q", ev.GetText())
	}
}

// Signal's rate limit reaches delivery as RATE_LIMITED with the wait
// Signal named, and nothing was sent; the retry sends once. An
// unregistered recipient is permanent; a network failure retryable.
func TestSendErrors(t *testing.T) {
	t.Parallel()
	cfg := DefaultConfig()
	cfg.Reactions = false
	g := start(t, cfg, platform.Options{})
	ts := g.f.Receive(signalfake.Message{From: ann, Text: "hi"})
	ev := g.next(t)
	_ = ts
	req := answer(ev, deliveryv1.SendOp_SEND_OP_SEND, "hello")
	g.f.FailNext("send", signalfake.RateLimited(ann.Number, 3))
	r := g.send(t, req)
	if r.GetOk() || r.GetErrorClass() != deliveryv1.ErrorClass_ERROR_CLASS_RATE_LIMITED || r.GetRetryAfterMs() != 3000 {
		t.Fatalf("receipt %v, want RATE_LIMITED after 3 s", r)
	}
	if r := g.send(t, req); !r.GetOk() || r.GetDuplicate() {
		t.Fatalf("retry receipt %v, want ok", r)
	}
	if r := g.send(t, req); !r.GetOk() || !r.GetDuplicate() {
		t.Fatalf("a second retry %v, want the first receipt", r)
	}
	if sent := g.f.Sent(ann.Number); len(sent) != 1 {
		t.Fatalf("sent %d messages, want 1", len(sent))
	}
	for _, tc := range []struct {
		err   *signalfake.RPCError
		class deliveryv1.ErrorClass
	}{
		{signalfake.ProofRequired(ann.Number, 60), deliveryv1.ErrorClass_ERROR_CLASS_RATE_LIMITED},
		{signalfake.Unregistered(ann.Number), deliveryv1.ErrorClass_ERROR_CLASS_PERMANENT},
		{signalfake.NetworkFailure(ann.Number), deliveryv1.ErrorClass_ERROR_CLASS_RETRYABLE},
	} {
		g.f.FailNext("send", tc.err)
		req := answer(ev, deliveryv1.SendOp_SEND_OP_SEND, tc.err.Message+tc.class.String())
		if r := g.send(t, req); r.GetOk() || r.GetErrorClass() != tc.class {
			t.Errorf("%v: receipt %v, want %s", tc.err, r, tc.class)
		}
	}
	// Markdown the daemon refuses: delivery resends it plain.
	g.f.FailNext("send", &signalfake.RPCError{Code: -1, Message: "Invalid textStyle syntax (0:9:BLINK) expected 'start:length:STYLE'"})
	if r := g.send(t, answer(ev, deliveryv1.SendOp_SEND_OP_SEND, "**styled**")); r.GetErrorClass() != deliveryv1.ErrorClass_ERROR_CLASS_FORMAT {
		t.Errorf("receipt %v, want FORMAT", r)
	}
}

// The account's owner writing to themselves (Note to Self) talks to the
// agent; the bot's answer there, synced back, is not taken for a new
// message.
func TestNoteToSelf(t *testing.T) {
	t.Parallel()
	g := start(t, DefaultConfig(), platform.Options{})
	g.f.Push(g.f.NoteToSelf(botC, "remind me", 0))
	ev := g.next(t)
	if ev.GetSource().GetChatId() != bot || ev.GetText() != "remind me" {
		t.Fatalf("event %v, want the note in the account's own chat", ev)
	}
	r := g.send(t, answer(ev, deliveryv1.SendOp_SEND_OP_SEND, "noted"))
	if !r.GetOk() {
		t.Fatalf("receipt %v", r)
	}
	_, sentTS, _ := splitMessageID(r.GetPlatformMessageId())
	g.f.Push(g.f.NoteToSelf(botC, "noted", sentTS)) // the echo
	g.f.Push(g.f.NoteToSelf(botC, "thanks", 0))
	if ev := g.next(t); ev.GetText() != "thanks" {
		t.Fatalf("got %q, want the next note, not the echo of the answer", ev.GetText())
	}
}

// Outbound attachments: a data: URL goes to signal-cli as a data URI with
// the file's name; more than Signal's 32 is refused.
func TestSendAttachments(t *testing.T) {
	t.Parallel()
	cfg := DefaultConfig()
	cfg.Reactions = false
	g := start(t, cfg, platform.Options{})
	req := &deliveryv1.SendRequested{Op: deliveryv1.SendOp_SEND_OP_SEND, IdempotencyKey: "att-1", Text: "here",
		Target: &deliveryv1.Target{Platform: "signal", Account: bot, ChatId: ann.Number},
		Attachments: []*eventsv1.Attachment{{Kind: eventsv1.AttachmentKind_ATTACHMENT_KIND_IMAGE, FileName: "dot.png",
			Location: &eventsv1.Attachment_Url{Url: "data:image/png;base64,iVBORw0KGgo="}}}}
	if r := g.send(t, req); !r.GetOk() {
		t.Fatalf("receipt %v", r)
	}
	sent := g.f.Sent(ann.Number)
	if len(sent) != 1 || !slices.Equal(sent[0].Attachments, []string{"data:image/png;filename=dot.png;base64,iVBORw0KGgo="}) {
		t.Fatalf("sent %+v", sent)
	}
	many := proto.Clone(req).(*deliveryv1.SendRequested)
	many.IdempotencyKey = "att-2"
	for range 32 {
		many.Attachments = append(many.Attachments, req.Attachments[0])
	}
	if r := g.send(t, many); r.GetErrorClass() != deliveryv1.ErrorClass_ERROR_CLASS_PERMANENT {
		t.Fatalf("33 attachments: receipt %v, want permanent", r)
	}
}

// A send whose caller stopped waiting while signal-cli was still at it
// is not sent again: the retry waits while the daemon works, then takes
// the message the first attempt sent.
func TestSendAnswerLateNotSentTwice(t *testing.T) {
	t.Parallel()
	cfg := DefaultConfig()
	cfg.Reactions = false
	g := start(t, cfg, platform.Options{SendTimeout: 300 * time.Millisecond})
	g.f.Receive(signalfake.Message{From: ann, Text: "hi"})
	ev := g.next(t)
	req := answer(ev, deliveryv1.SendOp_SEND_OP_SEND, "the answer")
	run := g.s.Runner()

	release := g.f.HoldNext("send")
	if r := run.Execute(g.ctx, req); r.GetOk() || r.GetErrorClass() != deliveryv1.ErrorClass_ERROR_CLASS_RETRYABLE {
		t.Fatalf("first attempt %v, want retryable (no answer in time)", r)
	}
	r := run.Execute(g.ctx, req)
	if r.GetOk() || r.GetErrorClass() != deliveryv1.ErrorClass_ERROR_CLASS_RETRYABLE || r.GetRetryAfterMs() <= 0 {
		t.Fatalf("retry while the daemon still sends: %v, want retryable with a wait", r)
	}
	// Under load the first attempt can time out before its request
	// reaches the daemon: it is on its way, so wait for it to arrive.
	platformtest.WaitFor(t, "the first attempt at the daemon", func() bool { return len(g.f.Calls("send")) >= 1 })
	if n := len(g.f.Calls("send")); n != 1 {
		t.Fatalf("%d send calls while the first was at the daemon, want 1", n)
	}
	release()
	platformtest.WaitFor(t, "the retry to take the first attempt's message", func() bool {
		r = run.Execute(g.ctx, req)
		return r.GetOk()
	})
	sent := g.f.Sent(ann.Number)
	if len(sent) != 1 || sent[0].Text != "the answer" {
		t.Fatalf("sent %+v, want the answer once", sent)
	}
	if want := messageID(bot, sent[0].Timestamp); r.GetPlatformMessageId() != want {
		t.Fatalf("message id %q, want the first attempt's %q", r.GetPlatformMessageId(), want)
	}
	if n := len(g.f.Calls("send")); n != 1 {
		t.Fatalf("%d send calls, want 1", n)
	}

	// An attempt the daemon refused sent nothing: the retry sends.
	req = answer(ev, deliveryv1.SendOp_SEND_OP_SEND, "second")
	g.f.FailNext("send", signalfake.NetworkFailure(ann.Number))
	if r := run.Execute(g.ctx, req); r.GetOk() {
		t.Fatalf("refused attempt %v, want an error", r)
	}
	if r := run.Execute(g.ctx, req); !r.GetOk() {
		t.Fatalf("retry after a refusal %v, want ok", r)
	}
	if sent := g.f.Sent(ann.Number); len(sent) != 2 || sent[1].Text != "second" {
		t.Fatalf("sent %+v, want the second message once", sent)
	}
}

// A message with a mention whose start plus length overflows (a length
// near the int maximum) is delivered with the mention ignored, its
// placeholder kept, as Signal's clients do: the rendering once panicked
// on it and the message was skipped.
func TestOverflowingMentionDelivered(t *testing.T) {
	t.Parallel()
	cfg := DefaultConfig()
	cfg.Reactions = false
	g := start(t, cfg, platform.Options{})
	n, ts := g.f.Envelope(signalfake.Message{From: ann, Text: "hi \uFFFC"})
	n["envelope"].(map[string]any)["dataMessage"].(map[string]any)["mentions"] = []map[string]any{
		{"number": bot, "start": 3, "length": math.MaxInt64}}
	g.f.Push(n)
	ev := g.next(t)
	if ev.GetEventId() != ann.Number+":"+itoa(ts) || ev.GetText() != "hi \uFFFC" {
		t.Fatalf("event %v, want the message with its placeholder", ev)
	}
}
