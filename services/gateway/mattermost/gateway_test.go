package mattermost

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/switchboard-chat/switchboard/pkg/attachment"
	"github.com/switchboard-chat/switchboard/pkg/bus"
	"github.com/switchboard-chat/switchboard/pkg/bus/bustest"
	"github.com/switchboard-chat/switchboard/pkg/chunk"
	"github.com/switchboard-chat/switchboard/pkg/egress"
	deliveryv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/delivery/v1"
	eventsv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/events/v1"
	"github.com/switchboard-chat/switchboard/pkg/platform"
	"github.com/switchboard-chat/switchboard/pkg/platform/platformtest"
	"github.com/switchboard-chat/switchboard/services/gateway/mattermost/mattermostfake"
)

// gw is a running gateway on NATS (an embedded server), pointed at a fake
// Mattermost server.
type gw struct {
	f   *mattermostfake.Fake
	b   *bus.Bus
	s   *Service
	ctx context.Context
	evs chan *eventsv1.MessageReceived
}

func start(t *testing.T, mutate func(*Config), opts platform.Options) *gw {
	t.Helper()
	f := mattermostfake.New(bot, botName, token)
	t.Cleanup(f.Close)
	fakeChannels(f)
	b := bustest.New(t, bustest.EmbeddedURL(t))
	g := &gw{f: f, b: b, evs: platformtest.InboundEvents(t, b)}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	g.ctx = ctx
	cfg := testConfig(f)
	if mutate != nil {
		mutate(&cfg)
	}
	opts.Backoff, opts.LeaseTTL = platform.Schedule(10*time.Millisecond), time.Second
	s, err := New(cfg, Deps{Log: slog.New(slog.DiscardHandler), Bus: b, Runner: opts})
	if err != nil {
		t.Fatal(err)
	}
	g.s = s
	runCtx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(runCtx) }()
	var once sync.Once
	t.Cleanup(func() {
		once.Do(func() {
			stop()
			if err := <-done; err != nil {
				t.Errorf("run: %v", err)
			}
		})
		platformtest.DeleteBuckets(b)
	})
	platformtest.WaitFor(t, "the gateway to connect", func() bool {
		st, _ := s.Runner().State()
		return st == platform.StateConnected
	})
	return g
}

func (g *gw) next(t *testing.T) *eventsv1.MessageReceived {
	t.Helper()
	return platformtest.NextEvent(t, g.evs)
}

// want takes the next event, which must be the one with event id id.
func (g *gw) want(t *testing.T, id string) {
	t.Helper()
	if ev := g.next(t); ev.GetEventId() != id {
		t.Fatalf("event %v, want %s", ev, id)
	}
}

func (g *gw) none(t *testing.T) { t.Helper(); platformtest.NoEvent(t, g.evs, 500*time.Millisecond) }

func (g *gw) send(t *testing.T, req *deliveryv1.SendRequested) *deliveryv1.SendReceipt {
	t.Helper()
	r := &deliveryv1.SendReceipt{}
	if err := g.b.Request(g.ctx, g.b.Topology().SendSubject("mattermost"), req, r); err != nil {
		t.Fatalf("send request: %v", err)
	}
	return r
}

func answer(ev *eventsv1.MessageReceived, op deliveryv1.SendOp, key, text string) *deliveryv1.SendRequested {
	return &deliveryv1.SendRequested{Op: op, Text: text, TurnId: "turn-" + ev.GetEventId(), IdempotencyKey: key,
		Target: &deliveryv1.Target{Platform: "mattermost", Account: bot, ChatId: ev.GetSource().GetChatId(), ThreadId: ev.GetSource().GetThreadId(),
			ReplyToMessageId: ev.GetMessageId()},
		InputMessageIds: []string{ev.GetMessageId()}}
}

// A DM in, the answer out as Markdown, typing shown; a streamed answer is
// one post patched in place; the bot's own posts are not taken in.
func TestAnswerAndStream(t *testing.T) {
	t.Parallel()
	g := start(t, nil, platform.Options{})
	id := g.f.Message(dmCh, ann, "what is 2+2?")
	ev := g.next(t)
	if ev.GetEventId() != id || ev.GetSource().GetChatType() != "dm" || ev.GetSource().GetThreadId() != "" || !ev.GetMentioned() {
		t.Fatalf("event %v, want %s in Ann's DM without a thread", ev, id)
	}
	if r := g.send(t, answer(ev, deliveryv1.SendOp_SEND_OP_TYPING, "", "")); !r.GetOk() || g.f.Typing(dmCh) == 0 {
		t.Fatalf("typing receipt %v, %d typing calls", r, g.f.Typing(dmCh))
	}
	first := g.send(t, answer(ev, deliveryv1.SendOp_SEND_OP_SEND, "k1", "It is"))
	if !first.GetOk() {
		t.Fatalf("send receipt %v", first)
	}
	for i, text := range []string{"It is **4**", "It is **4**. ![chart](https://x.test/c.png)"} {
		edit := answer(ev, deliveryv1.SendOp_SEND_OP_EDIT, "k1-edit-"+text, text)
		edit.MessageId = first.GetPlatformMessageId()
		if r := g.send(t, edit); !r.GetOk() {
			t.Fatalf("edit %d receipt %v", i, r)
		}
	}
	sent := g.f.BotPosts(dmCh)
	if len(sent) != 1 {
		t.Fatalf("the DM shows %d posts, want the one edited: %+v", len(sent), sent)
	}
	if s := sent[0]; s.Message != "It is **4**. https://x.test/c.png" || s.EditAt == 0 || s.RootID != "" {
		t.Fatalf("post %+v: want the last edit, Markdown kept, the image as its URL, not in a thread", s)
	}
	del := answer(ev, deliveryv1.SendOp_SEND_OP_DELETE, "k1-del", "")
	del.MessageId = first.GetPlatformMessageId()
	if r := g.send(t, del); !r.GetOk() || len(g.f.BotPosts(dmCh)) != 0 {
		t.Fatalf("delete receipt %v, posts %+v", r, g.f.BotPosts(dmCh))
	}
	g.none(t)
}

// Outside DMs a post is taken when it mentions the bot (or the channel
// is free, or mentions are not required); system posts never.
func TestChannelRules(t *testing.T) {
	t.Parallel()
	g := start(t, func(c *Config) { c.FreeResponseChannels = []string{priv} }, platform.Options{})
	g.f.Message(town, bob, "just chatting")
	g.f.Add(mattermostfake.Post{ChannelID: town, UserID: ann, Type: "system_join_channel", Message: "ann joined the channel. @hermes"})
	free := g.f.Message(priv, bob, "no mention needed here")
	if ev := g.next(t); ev.GetEventId() != free || ev.GetText() != "no mention needed here" || ev.GetMentioned() {
		t.Fatalf("event %v, want %s unmentioned in the free channel", ev, free)
	}
	byID := g.f.Message(town, ann, "hey @"+bot+" look")
	if ev := g.next(t); ev.GetEventId() != byID || ev.GetText() != "hey  look" || !ev.GetMentioned() {
		t.Fatalf("event %v, want %s mentioning the bot by id", ev, byID)
	}
	g.f.Message(town, ann, "@hermesfan is not the bot")
	// The server lists the bot among the mentioned of an @here (every
	// member is); an announcement does not address the bot.
	g.f.Message(town, bob, "@here standup in 5")
	g.f.Message(town, bob, "@channel release is out")
	g.none(t)

	open := start(t, func(c *Config) { c.RequireMention = false }, platform.Options{})
	id := open.f.Message(town, bob, "anyone?")
	if ev := open.next(t); ev.GetEventId() != id || ev.GetSource().GetUserName() != "bob" {
		t.Fatalf("event %v, want %s from bob", ev, id)
	}
}

// allowed_channels (MATTERMOST_ALLOWED_CHANNELS), as in Hermes: when set,
// posts outside DMs are taken only in those channels, a mention or a
// free channel not letting one in elsewhere; DMs always.
func TestAllowedChannels(t *testing.T) {
	t.Parallel()
	g := start(t, func(c *Config) {
		c.AllowedChannels = []string{priv}
		c.FreeResponseChannels = []string{town}
	}, platform.Options{})
	g.f.Message(town, ann, "@hermes free but not allowed")
	g.f.Message(grp, ann, "@hermes a group message not allowed")
	allowed := g.f.Message(priv, ann, "@hermes here")
	if ev := g.next(t); ev.GetEventId() != allowed || ev.GetText() != "here" {
		t.Fatalf("event %v, want %s in the allowed channel", ev, allowed)
	}
	dm := g.f.Message(dmCh, ann, "a DM is always taken")
	g.want(t, dm)
	g.none(t)
}

// A message in a thread is answered in it; in reply mode "thread" a
// channel message is answered in a thread on it, and "off" posts flat.
func TestThreads(t *testing.T) {
	t.Parallel()
	for _, mode := range []string{ReplyOff, ReplyThread} {
		t.Run(mode, func(t *testing.T) {
			g := start(t, func(c *Config) { c.ReplyMode = mode }, platform.Options{})
			top := g.f.Message(town, ann, "@hermes plan the trip")
			ev := g.next(t)
			if ev.GetSource().GetThreadId() != "" {
				t.Fatalf("event %v: a top-level post has no thread (Hermes's key)", ev)
			}
			wantRoot := ""
			if mode == ReplyThread {
				wantRoot = top
			}
			// The typing shows where the answer will be.
			if r := g.send(t, answer(ev, deliveryv1.SendOp_SEND_OP_TYPING, "", "")); !r.GetOk() || g.f.TypingIn(town, wantRoot) != 1 {
				t.Fatalf("typing receipt %v, %d typing calls in thread %q", r, g.f.TypingIn(town, wantRoot), wantRoot)
			}
			if r := g.send(t, answer(ev, deliveryv1.SendOp_SEND_OP_SEND, "t1", "Day 1")); !r.GetOk() {
				t.Fatalf("send receipt %v", r)
			}
			if p := g.f.BotPosts(town); len(p) != 1 || p[0].RootID != wantRoot {
				t.Fatalf("posts %+v, want one with root %q", p, wantRoot)
			}
			in := g.f.Add(mattermostfake.Post{ChannelID: town, UserID: ann, RootID: top, Message: "@hermes and day 2?"})
			ev = g.next(t)
			if ev.GetEventId() != in || ev.GetSource().GetThreadId() != top {
				t.Fatalf("event %v, want %s in thread %s", ev, in, top)
			}
			if r := g.send(t, answer(ev, deliveryv1.SendOp_SEND_OP_SEND, "t2", "Day 2")); !r.GetOk() {
				t.Fatalf("send receipt %v", r)
			}
			if p := g.f.BotPosts(town); len(p) != 2 || p[1].RootID != top {
				t.Fatalf("posts %+v, want the second in thread %s", p, top)
			}
		})
	}
}

// After the websocket drops, the posts the channels seen before got in
// the meantime are read and published, each once; a channel never seen
// is not read.
func TestCatchUpAfterReconnect(t *testing.T) {
	t.Parallel()
	g := start(t, nil, platform.Options{})
	first := g.f.Message(dmCh, ann, "before")
	g.want(t, first)
	conns := g.f.Connections()
	// Posts the server has but never sent over the websocket: made while
	// the connection was down.
	missed1 := g.f.AddSilently(mattermostfake.Post{ChannelID: dmCh, UserID: ann, Message: "while down 1"})
	missed2 := g.f.AddSilently(mattermostfake.Post{ChannelID: dmCh, UserID: ann, Message: "while down 2"})
	g.f.AddSilently(mattermostfake.Post{ChannelID: grp, UserID: ann, Message: "@hermes in a channel not seen yet"})
	g.f.Drop()
	platformtest.WaitFor(t, "a new connection", func() bool { return g.f.Connections() > conns })
	for _, want := range []string{missed1, missed2} {
		ev := g.next(t)
		if ev.GetEventId() != want || ev.GetSource().GetUserName() != "ann" || ev.GetSource().GetChatType() != "dm" {
			t.Fatalf("event %v, want %s from ann in the DM", ev, want)
		}
	}
	g.none(t)
	if g.f.Calls("channel posts") != 1 {
		t.Fatalf("%d channel reads, want the DM's alone", g.f.Calls("channel posts"))
	}
}

// The catch-up after a reconnect reads only the channels
// allowed_channels lets in: a channel it keeps out, where a post was
// skipped or the bot posted (a proactive send), was read each reconnect
// too, every post there skipped, a call for nothing and a step nearer
// the server's rate limit.
func TestCatchUpSkipsChannelsNotAllowed(t *testing.T) {
	t.Parallel()
	g := start(t, func(c *Config) { c.AllowedChannels = []string{priv} }, platform.Options{})
	g.f.Message(town, ann, "@hermes not allowed")
	g.f.Message(grp, ann, "@hermes not allowed either")
	if r := g.send(t, &deliveryv1.SendRequested{Op: deliveryv1.SendOp_SEND_OP_SEND, Text: "the daily report", IdempotencyKey: "cron-1",
		Target: &deliveryv1.Target{Platform: "mattermost", Account: bot, ChatId: town}}); !r.GetOk() {
		t.Fatalf("proactive send: %v", r)
	}
	in := g.f.Message(priv, ann, "@hermes here")
	g.want(t, in)
	conns, reads := g.f.Connections(), g.f.Calls("channel posts")
	g.f.Drop()
	platformtest.WaitFor(t, "a new connection", func() bool { return g.f.Connections() > conns })
	// A DM not seen before: read over the new connection, after the
	// catch-up, which runs before its events.
	after := g.f.Message(dmCh, ann, "still here?")
	g.want(t, after)
	if n := g.f.Calls("channel posts") - reads; n != 1 {
		t.Fatalf("%d channel reads in the catch-up, want the allowed channel's alone", n)
	}
}

// A reconnect resumes the connection (connection_id and sequence_number,
// Mattermost's reliable websockets): what the server queued for it while
// it was down is sent again, so a post in a channel the catch-up does
// not know is published too.
func TestReconnectResumesTheConnection(t *testing.T) {
	t.Parallel()
	g := start(t, nil, platform.Options{})
	first := g.f.Message(dmCh, ann, "before")
	g.want(t, first)
	conns := g.f.Connections()
	// Held on its way back, so the post is made while it is down.
	g.f.FailNext("users/me", 1, mattermostfake.Fail{Delay: 300 * time.Millisecond})
	g.f.Drop()
	missed := g.f.Message(grp, ann, "@hermes while you were away")
	platformtest.WaitFor(t, "a new connection", func() bool { return g.f.Connections() > conns })
	if ev := g.next(t); ev.GetEventId() != missed || ev.GetSource().GetChatType() != "group" {
		t.Fatalf("event %v, want %s, made while the websocket was down", ev, missed)
	}
	if g.f.Resumed() != 1 {
		t.Fatalf("%d connections resumed, want 1", g.f.Resumed())
	}
	// A live post after it, on the resumed connection.
	live := g.f.Message(dmCh, ann, "after")
	g.want(t, live)
	// A server that no longer has the connection (restarted) starts a
	// new one; the catch-up reads the channels seen.
	conns = g.f.Connections()
	g.f.FailNext("users/me", 1, mattermostfake.Fail{Delay: 300 * time.Millisecond})
	g.f.Drop()
	g.f.ForgetConnections()
	caught := g.f.AddSilently(mattermostfake.Post{ChannelID: grp, UserID: ann, Message: "@hermes while the server restarted"})
	platformtest.WaitFor(t, "a new connection", func() bool { return g.f.Connections() > conns })
	g.want(t, caught)
	after := g.f.Message(dmCh, ann, "on the new connection")
	g.want(t, after)
	if g.f.Resumed() != 1 {
		t.Fatalf("%d connections resumed, want the first alone", g.f.Resumed())
	}
	g.none(t)
}

// A resumed connection the server had nothing to send again, and that
// then stayed quiet (no event) while it answered pings, is still resumed
// when it drops: the server kept it, and a post made in a channel the
// catch-up does not know while it is down is sent again. A gateway that
// took the quiet connection for one the server refused dialled afresh
// and lost the post.
func TestQuietResumedConnectionIsResumedAgain(t *testing.T) {
	t.Parallel()
	g := start(t, func(c *Config) { c.PingInterval = 50 * time.Millisecond }, platform.Options{})
	first := g.f.Message(dmCh, ann, "before")
	g.want(t, first)
	for i := 1; i <= 2; i++ {
		conns := g.f.Connections()
		// Held on its way back, so the post is made while it is down.
		g.f.FailNext("users/me", 1, mattermostfake.Fail{Delay: 300 * time.Millisecond})
		g.f.Drop()
		var missed string
		if i == 2 {
			missed = g.f.Message(priv, ann, "@hermes while the quiet connection was down")
		}
		platformtest.WaitFor(t, "a new connection", func() bool { return g.f.Connections() > conns })
		if g.f.Resumed() != i {
			t.Fatalf("reconnect %d: %d connections resumed, want %d", i, g.f.Resumed(), i)
		}
		if missed != "" {
			g.want(t, missed)
		}
		// Quiet: pings and their answers, no event.
		time.Sleep(300 * time.Millisecond)
	}
	g.none(t)
}

// An event larger than the gateway reads closes the connection; the
// resumed one starts after it, not with it again (which would close
// every connection for ever), and the posts after it are published.
func TestOversizedEventIsNotResumed(t *testing.T) {
	t.Parallel()
	g := start(t, nil, platform.Options{})
	first := g.f.Message(dmCh, ann, "before")
	g.want(t, first)
	conns := g.f.Connections()
	g.f.Add(mattermostfake.Post{ChannelID: town, UserID: ann, Message: "@hermes see attached",
		Props: map[string]any{"attachments": strings.Repeat("x", maxFrameBytes)}})
	after := g.f.Message(grp, ann, "@hermes after the big one")
	g.want(t, after)
	if n := g.f.Connections() - conns; n != 1 {
		t.Fatalf("%d new connections, want the one after the big event", n)
	}
	g.none(t)
}

// The server registers a connection (hello, then its events) before it
// answers the authentication challenge: a post in that moment is
// published, even one in a channel the catch-up does not know.
func TestPostBeforeTheAuthenticationReply(t *testing.T) {
	t.Parallel()
	g := start(t, nil, platform.Options{})
	conns := g.f.Connections()
	g.f.DelayAuthReply(300 * time.Millisecond)
	g.f.Drop()
	platformtest.WaitFor(t, "a new connection", func() bool { return g.f.Connections() > conns })
	id := g.f.Message(grp, ann, "@hermes first post here")
	if ev := g.next(t); ev.GetEventId() != id || ev.GetSource().GetChatType() != "group" {
		t.Fatalf("event %v, want %s in the group", ev, id)
	}
	g.none(t)
}

// A catch-up read the server rate limits (429) is read again after
// X-Ratelimit-Reset, not given up with what the channel got meanwhile.
func TestCatchUpRateLimited(t *testing.T) {
	t.Parallel()
	g := start(t, nil, platform.Options{})
	first := g.f.Message(dmCh, ann, "before")
	g.want(t, first)
	missed := g.f.AddSilently(mattermostfake.Post{ChannelID: dmCh, UserID: ann, Message: "while down"})
	g.f.FailNext("channel posts", 1, mattermostfake.Fail{Status: http.StatusTooManyRequests, Reset: 1})
	g.f.Drop()
	g.want(t, missed)
	if n := g.f.Calls("channel posts"); n != 2 {
		t.Fatalf("%d channel reads, want the limited one and its retry", n)
	}
	g.none(t)
}

// A 429 is handed to delivery with X-Ratelimit-Reset; the retry with the
// same key posts once. 5xx is retryable; a channel the bot cannot post
// in, or an id that is no id, is permanent.
func TestSendErrors(t *testing.T) {
	t.Parallel()
	g := start(t, nil, platform.Options{})
	g.f.Message(dmCh, ann, "hi")
	ev := g.next(t)
	g.f.FailNext("create post", 1, mattermostfake.Fail{Status: http.StatusTooManyRequests, Reset: 2})
	req := answer(ev, deliveryv1.SendOp_SEND_OP_SEND, "r1", "hello")
	r := g.send(t, req)
	if r.GetOk() || r.GetErrorClass() != deliveryv1.ErrorClass_ERROR_CLASS_RATE_LIMITED || r.GetRetryAfterMs() != 2000 {
		t.Fatalf("receipt %v, want rate limited for 2s", r)
	}
	if r := g.send(t, req); !r.GetOk() {
		t.Fatalf("retry receipt %v", r)
	}
	if n := len(g.f.BotPosts(dmCh)); n != 1 {
		t.Fatalf("%d posts shown, want 1", n)
	}
	g.f.FailNext("create post", 1, mattermostfake.Fail{Status: http.StatusServiceUnavailable})
	if r := g.send(t, answer(ev, deliveryv1.SendOp_SEND_OP_SEND, "r2", "x")); r.GetErrorClass() != deliveryv1.ErrorClass_ERROR_CLASS_RETRYABLE {
		t.Fatalf("5xx receipt %v, want retryable", r)
	}
	for _, chat := range []string{"elsewhere00000000000000000", "../../users/me"} {
		bad := answer(ev, deliveryv1.SendOp_SEND_OP_SEND, "r3"+chat, "x")
		bad.Target.ChatId = chat
		if r := g.send(t, bad); r.GetErrorClass() != deliveryv1.ErrorClass_ERROR_CLASS_PERMANENT {
			t.Fatalf("send to %q: receipt %v, want permanent", chat, r)
		}
	}
}

// A text over the post limit goes as several posts, code fences whole;
// when a later part fails, the retry sends only what is missing.
func TestLongTextChunked(t *testing.T) {
	t.Parallel()
	g := start(t, nil, platform.Options{})
	g.f.Message(dmCh, ann, "a long one")
	ev := g.next(t)
	text := strings.Repeat("word ", 5000) + "\n```\n" + strings.Repeat("code\n", 400) + "```"
	// The first post goes through, the second is refused once.
	g.f.FailNext("create post", 1, mattermostfake.Fail{Status: http.StatusInternalServerError, Skip: 1})
	req := answer(ev, deliveryv1.SendOp_SEND_OP_SEND, "long", text)
	r := g.send(t, req)
	if r.GetOk() {
		t.Fatalf("receipt %v, want the injected failure", r)
	}
	r = g.send(t, req)
	if !r.GetOk() {
		t.Fatalf("retry receipt %v", r)
	}
	posts := g.f.BotPosts(dmCh)
	var joined strings.Builder
	for _, p := range posts {
		if n := utf8.RuneCountInString(p.Message); n > maxPostRunes {
			t.Fatalf("a post of %d runes", n)
		}
		if strings.Count(p.Message, "```")%2 != 0 {
			t.Fatalf("a post with an open code fence: %q…", p.Message[:40])
		}
		joined.WriteString(p.Message)
	}
	if want := len(chunk.SplitLimit(text, chunk.Limit{Max: maxPostRunes, Measure: chunk.Runes})); len(posts) != want {
		t.Fatalf("%d posts, want %d (the part sent before the failure not again)", len(posts), want)
	}
	if len(posts) < 2 || r.GetPlatformMessageId() != posts[len(posts)-1].ID {
		t.Fatalf("%d posts, message id %s: want several, the last one's id", len(posts), r.GetPlatformMessageId())
	}
	if got := joined.String(); !strings.Contains(got, "word word") || strings.Count(got, "code\n") < 400 {
		t.Fatalf("the posts do not hold the text")
	}
}

// TestFilesWithoutMetadataAreDescribed: a post whose event names its
// files without their metadata has them described by the server (GET
// /files/{id}/info, as Hermes's adapter asks of every file), so an audio
// file is a voice message and a picture a picture, not documents known by
// their ids; a file the server does not describe is still published, as a
// document; a post with its metadata costs no call.
func TestFilesWithoutMetadataAreDescribed(t *testing.T) {
	t.Parallel()
	g := start(t, nil, platform.Options{})
	audio := g.f.Upload("talk.ogg", "audio/ogg", []byte("OggS"))
	pic := g.f.Upload("p.png", "image/png", []byte("\x89PNG"))
	type want struct {
		kind       eventsv1.AttachmentKind
		name, mime string
	}
	for _, c := range []struct {
		name     string
		file     mattermostfake.FileInfo
		metadata bool
		fail     bool
		want     want
		calls    int
	}{
		{"with metadata", audio, true, false, want{eventsv1.AttachmentKind_ATTACHMENT_KIND_VOICE, "talk.ogg", "audio/ogg"}, 0},
		{"audio", audio, false, false, want{eventsv1.AttachmentKind_ATTACHMENT_KIND_VOICE, "talk.ogg", "audio/ogg"}, 1},
		{"picture", pic, false, false, want{eventsv1.AttachmentKind_ATTACHMENT_KIND_IMAGE, "p.png", "image/png"}, 1},
		{"not described", audio, false, true, want{eventsv1.AttachmentKind_ATTACHMENT_KIND_DOCUMENT, "", ""}, 1},
	} {
		before := g.f.Calls("file info")
		g.f.OmitFileMetadata(!c.metadata)
		if c.fail {
			g.f.FailNext("file info", 1, mattermostfake.Fail{Status: http.StatusInternalServerError})
		}
		g.f.Add(mattermostfake.Post{ChannelID: dmCh, UserID: ann, FileIDs: []string{c.file.ID}})
		ev := g.next(t)
		atts := ev.GetAttachments()
		if len(atts) != 1 || atts[0].GetPlatformFileId() != c.file.ID {
			t.Fatalf("%s: attachments %v", c.name, atts)
		}
		if got := (want{atts[0].GetKind(), atts[0].GetFileName(), atts[0].GetMimeType()}); got != c.want {
			t.Errorf("%s: published %+v, want %+v", c.name, got, c.want)
		}
		if n := g.f.Calls("file info") - before; n != c.calls {
			t.Errorf("%s: %d file info calls, want %d", c.name, n, c.calls)
		}
	}
}

// startKeeping starts the gateway with an attachment store, which it
// removes when the test ends.
func startKeeping(t *testing.T) (*gw, attachment.Config) {
	t.Helper()
	acfg := attachment.Config{Enabled: true, MaxBytes: 1 << 20, StoreBytes: 8 << 20}
	g := start(t, nil, platform.Options{Attachments: acfg})
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = g.b.JetStream().DeleteObjectStore(ctx, g.b.Topology().Stream(attachment.Bucket))
	})
	return g, acfg
}

// A file is published by its id; when a turn reads it, the gateway
// downloads it into the attachment store. A file the agent sends is
// uploaded and posted.
func TestAttachments(t *testing.T) {
	t.Parallel()
	g, acfg := startKeeping(t)
	pic := platformtest.NoisePNG(t, 16, 16)
	fi := g.f.Upload("p.png", "image/png", pic)
	g.f.Add(mattermostfake.Post{ChannelID: dmCh, UserID: ann, Message: "what is this", FileIDs: []string{fi.ID}})
	ev := g.next(t)
	if len(ev.GetAttachments()) != 1 || ev.GetAttachments()[0].GetPlatformFileId() != fi.ID {
		t.Fatalf("event attachments %v", ev.GetAttachments())
	}
	if n := g.f.Calls("file"); n != 0 {
		t.Fatalf("publishing downloaded %d files, want none", n)
	}
	got := platformtest.Fetch(t, g.ctx, g.b, "mattermost", ev, 0)
	if got.GetBytesRef() == "" || got.GetSizeBytes() != int64(len(pic)) || got.GetMimeType() != "image/png" {
		t.Fatalf("fetched %v", got)
	}
	kept, _, err := attachment.New(g.b.JetStream(), g.b.Topology(), acfg).Get(g.ctx, got.GetBytesRef(), 0)
	if err != nil || !bytes.Equal(kept, pic) {
		t.Fatalf("store has %d bytes (%v), want the picture's %d", len(kept), err, len(pic))
	}

	req := answer(ev, deliveryv1.SendOp_SEND_OP_SEND, "a1", "here it is")
	req.Attachments = []*eventsv1.Attachment{{Kind: eventsv1.AttachmentKind_ATTACHMENT_KIND_IMAGE, FileName: "dot.png", MimeType: "image/png",
		Location: &eventsv1.Attachment_Url{Url: "data:image/png;base64,iVBORw0KGgo="}}}
	if r := g.send(t, req); !r.GetOk() {
		t.Fatalf("send receipt %v", r)
	}
	posts := g.f.BotPosts(dmCh)
	if len(posts) != 2 || len(posts[0].FileIDs) != 1 || posts[1].Message != "here it is" {
		t.Fatalf("posts %+v, want the file then the text", posts)
	}
	if data, info, ok := g.f.File(posts[0].FileIDs[0]); !ok || info.Name != "dot.png" || info.MimeType != "image/png" || len(data) != 8 {
		t.Fatalf("uploaded %+v (%d bytes)", info, len(data))
	}

	// Each file's caption is on the files' post, once; one that repeats
	// the text that follows is not.
	dot := func(caption string) *eventsv1.Attachment {
		return &eventsv1.Attachment{Kind: eventsv1.AttachmentKind_ATTACHMENT_KIND_IMAGE, FileName: "dot.png", MimeType: "image/png", Caption: caption,
			Location: &eventsv1.Attachment_Url{Url: "data:image/png;base64,iVBORw0KGgo="}}
	}
	req = answer(ev, deliveryv1.SendOp_SEND_OP_SEND, "a2", "both charts")
	req.Attachments = []*eventsv1.Attachment{dot("Before"), dot("After"), dot("After"), dot("both charts")}
	if r := g.send(t, req); !r.GetOk() {
		t.Fatalf("send receipt %v", r)
	}
	posts = g.f.BotPosts(dmCh)[2:]
	if len(posts) != 2 || len(posts[0].FileIDs) != 4 || posts[0].Message != "Before\nAfter" || posts[1].Message != "both charts" {
		t.Fatalf("posts %+v, want the files with their two captions, then the text", posts)
	}
}

// A file download answered 429 (with the Retry-After the server's rate
// limiter names) or a 5xx is asked again, as Hermes's media downloads:
// before, the first such answer lost the file to the turn. A 403 is
// final.
func TestFileDownloadRetried(t *testing.T) {
	t.Parallel()
	g, _ := startKeeping(t)
	pic := platformtest.NoisePNG(t, 16, 16)
	for _, tc := range []struct {
		name string
		fail mattermostfake.Fail
		// calls is how many downloads the fetch makes; kept: the file
		// is kept.
		calls int
		kept  bool
	}{
		{name: "rate limited", fail: mattermostfake.Fail{Status: http.StatusTooManyRequests, Reset: 1}, calls: 2, kept: true},
		{name: "server error", fail: mattermostfake.Fail{Status: http.StatusServiceUnavailable}, calls: 2, kept: true},
		{name: "forbidden", fail: mattermostfake.Fail{Status: http.StatusForbidden}, calls: 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fi := g.f.Upload("p.png", "image/png", pic)
			g.f.Add(mattermostfake.Post{ChannelID: dmCh, UserID: ann, Message: tc.name, FileIDs: []string{fi.ID}})
			ev := g.next(t)
			g.f.FailNext("file", 1, tc.fail)
			before := g.f.Calls("file")
			got := platformtest.Fetch(t, g.ctx, g.b, "mattermost", ev, 0)
			if n := g.f.Calls("file") - before; n != tc.calls {
				t.Errorf("%d downloads, want %d", n, tc.calls)
			}
			if !tc.kept {
				if got.GetBytesRef() != "" || !strings.Contains(got.GetUnavailable(), "could not be downloaded") {
					t.Fatalf("fetched %v, want it not downloaded", got)
				}
				return
			}
			if got.GetBytesRef() == "" || got.GetSizeBytes() != int64(len(pic)) {
				t.Fatalf("fetched %v, want the picture's %d bytes", got, len(pic))
			}
		})
	}
}

// A token the server refuses ends Run at once with a clear error: no
// retry mends it.
func TestRefusedToken(t *testing.T) {
	t.Parallel()
	f := mattermostfake.New(bot, botName, token)
	t.Cleanup(f.Close)
	cfg := testConfig(f)
	cfg.Token = "wrong"
	b := bustest.New(t, bustest.EmbeddedURL(t))
	s, err := New(cfg, Deps{Log: slog.New(slog.DiscardHandler), Bus: b, Runner: platform.Options{Backoff: platform.Schedule(10 * time.Millisecond)}})
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err = s.Run(ctx)
	if err == nil || !strings.Contains(err.Error(), "MATTERMOST_TOKEN") || !strings.Contains(err.Error(), "401") {
		t.Fatalf("Run with a refused token: %v", err)
	}
	if n := f.Calls("users/me"); n != 1 {
		t.Fatalf("users/me asked %d times, want once", n)
	}
}

// A server that is down when the gateway starts is asked again on the
// backoff schedule, the gateway unready meanwhile; once it is up the
// gateway signs in, connects and a message gets through.
func TestServerDownAtStart(t *testing.T) {
	t.Parallel()
	f := mattermostfake.New(bot, botName, token)
	t.Cleanup(f.Close)
	fakeChannels(f)
	down := platformtest.NewOutage(t)
	cfg := testConfig(f)
	cfg.URL = "http://" + down.Addr()
	b := bustest.New(t, bustest.EmbeddedURL(t))
	evs := platformtest.InboundEvents(t, b)
	s, err := New(cfg, Deps{Log: slog.New(slog.DiscardHandler), Bus: b,
		Runner: platform.Options{Backoff: platform.Schedule(20 * time.Millisecond), LeaseTTL: time.Second}})
	if err != nil {
		t.Fatalf("New with the server down: %v", err)
	}
	ctx := platformtest.Start(t, b, s)
	down.ComeUp(t, s, "users/me", strings.TrimPrefix(f.URL, "http://"))
	if err := s.Ready(ctx); err != nil {
		t.Fatalf("unready once connected: %v", err)
	}
	id := f.Message(dmCh, ann, "are you there?")
	if ev := platformtest.NextEvent(t, evs); ev.GetEventId() != id || ev.GetSource().GetAccount() != bot {
		t.Fatalf("event %v, want %s for account %s", ev, id, bot)
	}
}

// A token revoked while the gateway runs makes it unready for good with
// the reason at the next connect, rather than retrying forever.
func TestRevokedTokenIsFatal(t *testing.T) {
	t.Parallel()
	g := start(t, nil, platform.Options{})
	g.f.RevokeToken()
	g.f.Drop()
	platformtest.WaitFor(t, "the gateway to stop retrying", func() bool {
		st, _ := g.s.Runner().State()
		return st == platform.StateFatal
	})
	if _, reason := g.s.Runner().State(); !strings.Contains(reason, "MATTERMOST_TOKEN") {
		t.Fatalf("reason %q does not name the token", reason)
	}
	if err := g.s.Ready(g.ctx); err == nil {
		t.Fatal("ready with a refused token")
	}
}

// A file an agent names by URL is downloaded only from a public address
// unless attachments.urls allows more: one on the gateway's own network
// fails for good with why (delivery dead-letters it), and nothing is
// posted; allowed, it is uploaded.
func TestAttachmentURLGuard(t *testing.T) {
	t.Parallel()
	files := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain")
		_, _ = w.Write([]byte("quarterly numbers"))
	}))
	t.Cleanup(files.Close)
	for _, tt := range []struct {
		name string
		urls egress.Config
		ok   bool
	}{
		{"refused by default", egress.Config{}, false},
		{"allowed by address", egress.Config{AllowHosts: []string{"127.0.0.1"}}, true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			g := start(t, nil, platform.Options{Attachments: attachment.Config{URLs: tt.urls}})
			req := &deliveryv1.SendRequested{Op: deliveryv1.SendOp_SEND_OP_SEND, IdempotencyKey: "u1",
				Target: &deliveryv1.Target{Platform: "mattermost", Account: bot, ChatId: dmCh},
				Attachments: []*eventsv1.Attachment{{Kind: eventsv1.AttachmentKind_ATTACHMENT_KIND_DOCUMENT, FileName: "q.txt",
					Location: &eventsv1.Attachment_Url{Url: files.URL + "/q.txt?sig=s3cret"}}}}
			r := g.send(t, req)
			posts := g.f.BotPosts(dmCh)
			if !tt.ok {
				if r.GetOk() || r.GetErrorClass() != deliveryv1.ErrorClass_ERROR_CLASS_PERMANENT ||
					!strings.Contains(r.GetError(), "not a public address") || strings.Contains(r.GetError(), "s3cret") || len(posts) != 0 {
					t.Fatalf("receipt %v, posts %+v; want a permanent refusal with the reason, nothing posted", r, posts)
				}
				return
			}
			if !r.GetOk() || len(posts) != 1 || len(posts[0].FileIDs) != 1 {
				t.Fatalf("receipt %v, posts %+v", r, posts)
			}
			if data, _, _ := g.f.File(posts[0].FileIDs[0]); string(data) != "quarterly numbers" {
				t.Fatalf("uploaded %q", data)
			}
		})
	}
}

// A post whose create got no clear answer is not made twice when it is
// retried after the server's 30 s pending_post_id window: the retry
// finds the post by the send's marker; one the server did not make is
// made by the retry.
func TestUnclearCreateNotRepeated(t *testing.T) {
	t.Parallel()
	g := start(t, nil, platform.Options{})
	for _, c := range []struct {
		name string
		fail mattermostfake.Fail
	}{
		{"answer lost", mattermostfake.Fail{Status: http.StatusBadGateway, Lost: true}},
		{"not made", mattermostfake.Fail{Status: http.StatusServiceUnavailable}},
	} {
		g.f.Message(dmCh, ann, c.name)
		ev := g.next(t)
		before := len(g.f.BotPosts(dmCh))
		g.f.FailNext("create post", 1, c.fail)
		req := answer(ev, deliveryv1.SendOp_SEND_OP_SEND, "unclear-"+c.name, "the answer to "+c.name)
		if r := g.send(t, req); r.GetOk() || r.GetErrorClass() != deliveryv1.ErrorClass_ERROR_CLASS_RETRYABLE {
			t.Fatalf("%s: receipt %v, want retryable", c.name, r)
		}
		g.f.ExpirePending()
		r := g.send(t, req)
		posts := g.f.BotPosts(dmCh)[before:]
		if !r.GetOk() || len(posts) != 1 || posts[0].Message != req.GetText() || r.GetPlatformMessageId() != posts[0].ID {
			t.Fatalf("%s: receipt %v, posts %+v: want the answer once", c.name, r, posts)
		}
	}
}

// MATTERMOST_ALLOW_BOTS: other bots' posts (a bot account's, marked
// from_bot by the server or known only by the users API's is_bot) and
// incoming webhooks' posts (from_webhook; their author is a person)
// reach the bus marked is_bot, as allow_bots says ("mentions": only
// those that @mention this bot); the bot's own posts never do. Every
// channel post counts here (no mention required), so only the bot rule
// filters, and two agents in a free channel cannot answer each other
// for ever.
func TestOtherBots(t *testing.T) {
	t.Parallel()
	const other, quiet = "otherbot000000000000000000", "quietbot000000000000000000"
	for _, c := range []struct {
		mode string
		want []int // indexes of the posts below that reach the bus, in order
	}{
		{mode: "none"},
		{mode: "mentions", want: []int{1, 3}},
		{mode: "all", want: []int{0, 1, 2, 3, 4}},
	} {
		t.Run(c.mode, func(t *testing.T) {
			t.Parallel()
			g := start(t, func(cfg *Config) {
				cfg.AllowBots, cfg.RequireMention = c.mode, false
			}, platform.Options{})
			g.f.AddBot(other, "otherbot")
			g.f.AddBot(quiet, "quietbot")
			posts := []mattermostfake.Post{
				{ChannelID: town, UserID: other, Message: "chatter"},
				{ChannelID: town, UserID: other, Message: "@" + botName + " your turn"},
				// A bot whose posts the server does not mark: its
				// account's is_bot tells.
				{ChannelID: town, UserID: quiet, Message: "deploy finished", Props: map[string]any{}},
				// An incoming webhook made by Ann: from_webhook.
				{ChannelID: town, UserID: ann, Message: "@" + botName + " CI failed", Props: map[string]any{"from_webhook": "true", "override_username": "ci"}},
				{ChannelID: dmCh, UserID: other, Message: "a bot's DM"},
				{ChannelID: town, UserID: bot, Message: "@" + botName + " my own", Props: map[string]any{"from_bot": "true"}},
			}
			ids := make([]string, len(posts))
			for i, p := range posts {
				ids[i] = g.f.Add(p)
			}
			for _, i := range c.want {
				ev := g.next(t)
				if ev.GetEventId() != ids[i] || !ev.GetSource().GetIsBot() {
					t.Fatalf("got %v, want post %d (%q) marked is_bot", ev, i, posts[i].Message)
				}
			}
			// Posts are handled in order: a person's post after them is
			// the next on the bus, nothing else came.
			last := g.f.Message(town, bob, "the end")
			if ev := g.next(t); ev.GetEventId() != last || ev.GetSource().GetIsBot() {
				t.Fatalf("got %v, want only Bob's %s after the bots' posts", ev, last)
			}
			// is_bot is asked once per user.
			if n := g.f.Calls("user"); n > 4 {
				t.Errorf("%d user lookups for 4 authors", n)
			}
		})
	}
}

// A gateway refuses an allow_bots it cannot read rather than guess.
func TestAllowBotsChecked(t *testing.T) {
	t.Parallel()
	cfg := DefaultConfig()
	cfg.URL, cfg.Token, cfg.AllowBots = "http://127.0.0.1:1", token, "some"
	if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), "MATTERMOST_ALLOW_BOTS") {
		t.Fatalf("validate: %v", err)
	}
	cfg.AllowBots = "true"
	if err := cfg.Validate(); err != nil {
		t.Fatalf("validate true: %v", err)
	}
}

// A send retried after a failed post uploads each file once: the retry
// attaches the files the first attempt uploaded (their ids kept beside
// the receipt) instead of leaving them unattached on the server and
// uploading them again.
func TestRetryReusesUploads(t *testing.T) {
	t.Parallel()
	g := start(t, nil, platform.Options{})
	for _, c := range []struct {
		name string
		fail mattermostfake.Fail
	}{
		{"the files' first post fails", mattermostfake.Fail{Status: http.StatusServiceUnavailable}},
		{"the files' second post fails", mattermostfake.Fail{Status: http.StatusServiceUnavailable, Skip: 1}},
		{"the text fails", mattermostfake.Fail{Status: http.StatusInternalServerError, Skip: 2}},
		{"the first post's answer is lost", mattermostfake.Fail{Status: http.StatusBadGateway, Lost: true}},
	} {
		g.f.Message(dmCh, ann, c.name)
		ev := g.next(t)
		before, uploads := len(g.f.BotPosts(dmCh)), g.f.Calls("upload")
		req := answer(ev, deliveryv1.SendOp_SEND_OP_SEND, "files-"+c.name, "the files")
		for i := range 6 { // two posts of files: five, then one
			req.Attachments = append(req.Attachments, &eventsv1.Attachment{Kind: eventsv1.AttachmentKind_ATTACHMENT_KIND_DOCUMENT,
				FileName: fmt.Sprintf("f%d.txt", i), Location: &eventsv1.Attachment_Url{Url: "data:text/plain;base64,eA=="}})
		}
		g.f.FailNext("create post", 1, c.fail)
		if r := g.send(t, req); r.GetOk() {
			t.Fatalf("%s: first attempt's receipt %v, want a failure", c.name, r)
		}
		if r := g.send(t, req); !r.GetOk() {
			t.Fatalf("%s: retry receipt %v", c.name, r)
		}
		posts := g.f.BotPosts(dmCh)[before:]
		if len(posts) != 3 || len(posts[0].FileIDs) != 5 || len(posts[1].FileIDs) != 1 || posts[2].Message != "the files" {
			t.Fatalf("%s: posts %+v, want five files, one file, the text", c.name, posts)
		}
		if n := g.f.Calls("upload") - uploads; n != 6 {
			t.Fatalf("%s: %d uploads, want 6 (one per file)", c.name, n)
		}
		if n := g.f.Unattached(); n != 0 {
			t.Fatalf("%s: %d uploaded files no post claims", c.name, n)
		}
	}
}
