package slack

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/proto"

	"github.com/switchboard-chat/switchboard/pkg/attachment"
	"github.com/switchboard-chat/switchboard/pkg/bus"
	"github.com/switchboard-chat/switchboard/pkg/bus/bustest"
	"github.com/switchboard-chat/switchboard/pkg/chunk"
	deliveryv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/delivery/v1"
	eventsv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/events/v1"
	"github.com/switchboard-chat/switchboard/pkg/platform"
	"github.com/switchboard-chat/switchboard/pkg/platform/platformtest"
	"github.com/switchboard-chat/switchboard/pkg/sessionkey"
	"github.com/switchboard-chat/switchboard/services/gateway/slack/slackfake"
)

func TestContract(t *testing.T) {
	platformtest.Run(t, platformtest.Harness{New: func(t *testing.T, env platformtest.Env) (platform.Platform, platformtest.Fake) {
		fake := slackfake.New(t)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		p, err := NewPlatform(ctx, Config{BotToken: fake.BotToken, AppToken: fake.AppToken, APIBaseURL: fake.APIURL(), Reactions: true}, env.Log, nil)
		if err != nil {
			t.Fatal(err)
		}
		return p, &contractFake{f: fake, sent: map[string][]byte{}}
	}})
}

// contractFake drives the Slack fake in Socket Mode for the kit's suite.
type contractFake struct {
	f    *slackfake.Fake
	n    atomic.Int64
	mu   sync.Mutex
	sent map[string][]byte // normalized event id → payload
}

func (c *contractFake) Kinds() []string {
	return []string{"channel", "dm", "thread", "mention", "command", "file", "mpim"}
}

func (c *contractFake) Deliver(t *testing.T, ctx context.Context, kind string) *eventsv1.MessageReceived {
	t.Helper()
	n := c.n.Add(1)
	ts := fmt.Sprintf("1700000%03d.000%03d", n, n)
	ev := slackfake.Event{Channel: fmt.Sprintf("C%04d", n), ChannelType: "channel", User: "U0USER01", Text: "hello " + kind, TS: ts}
	want := &eventsv1.MessageReceived{
		EventId: ev.Channel + ":" + ts, MessageId: ts, Text: ev.Text, SentAt: tsTime(ts),
		// A channel message starts its thread, as in Hermes.
		Source: &eventsv1.SessionSource{Platform: "slack", Account: c.f.BotUserID, ChatId: ev.Channel, ChatType: "group", UserId: "U0USER01", ScopeId: c.f.TeamID, ThreadId: ts},
		// A channel message without a mention takes no reaction.
		NoReaction: true,
	}
	switch kind {
	case "dm":
		ev.Channel, ev.ChannelType = fmt.Sprintf("D%04d", n), "im"
		want.EventId, want.Source.ChatId, want.Source.ChatType, want.Mentioned, want.NoReaction = ev.Channel+":"+ts, ev.Channel, "dm", true, false
		want.Source.ThreadId = ""
	case "mpim":
		// A group DM is a DM, as in Hermes.
		ev.ChannelType = "mpim"
		want.Source.ChatType, want.Mentioned, want.NoReaction, want.Source.ThreadId = "dm", true, false, ""
	case "thread":
		ev.ThreadTS = "1690000000.000001"
		want.Source.ThreadId = ev.ThreadTS
	case "mention":
		ev.Type = "app_mention"
		ev.Text = "<@" + c.f.BotUserID + "> what is up"
		want.Text, want.Mentioned, want.NoReaction = "what is up", true, false
	case "command":
		ev.Text = "<@" + c.f.BotUserID + "> !new"
		want.Text, want.Mentioned, want.NoReaction = "!new", true, false
	case "file":
		ev.Subtype = "file_share"
		ev.Files = []slackfake.File{{ID: "F01", Name: "cat.png", Mimetype: "image/png", URL: "https://files.slack.test/F01/cat.png", Size: 1234}}
		want.Attachments = []*eventsv1.Attachment{{Kind: eventsv1.AttachmentKind_ATTACHMENT_KIND_IMAGE, Location: &eventsv1.Attachment_Url{Url: "https://files.slack.test/F01/cat.png"},
			MimeType: "image/png", SizeBytes: 1234, FileName: "cat.png", PlatformFileId: "F01"}}
	}
	payload := c.f.Callback(fmt.Sprintf("Ev%06d", n), ev)
	c.mu.Lock()
	c.sent[want.EventId] = payload
	c.mu.Unlock()
	if err := c.f.Push(ctx, payload, 0); err != nil {
		t.Fatalf("push %s: %v", kind, err)
	}
	return want
}

func (c *contractFake) Redeliver(t *testing.T, ctx context.Context, eventID string) {
	c.mu.Lock()
	payload := c.sent[eventID]
	c.mu.Unlock()
	if err := c.f.Push(ctx, payload, 1); err != nil {
		t.Fatalf("redeliver: %v", err)
	}
}

func (c *contractFake) DeliverOversized(t *testing.T, ctx context.Context) {
	ev := slackfake.Event{Channel: "CBIG", ChannelType: "channel", User: "U0USER01", Text: strings.Repeat("x", 300<<10), TS: "1700000000.999999"}
	if err := c.f.Push(ctx, c.f.Callback("EvBIG", ev), 0); err != nil {
		t.Fatalf("push oversized: %v", err)
	}
}

func (c *contractFake) DeliverMalformed(t *testing.T, ctx context.Context) {
	err := c.f.PushRaw(ctx, func(id string) []byte {
		return []byte(`{"envelope_id":"` + id + `","type":"events_api","payload":{"type":"event_callback","event":"not an object"}}`)
	})
	if err != nil {
		t.Fatalf("push malformed: %v", err)
	}
}

func (c *contractFake) Drop(*testing.T)  { c.f.Drop() }
func (c *contractFake) Connections() int { return c.f.Connections() }

func (c *contractFake) Answer(ev *eventsv1.MessageReceived) *deliveryv1.SendRequested {
	s := ev.GetSource()
	return &deliveryv1.SendRequested{
		Target:          &deliveryv1.Target{Platform: "slack", Account: s.GetAccount(), ChatId: s.GetChatId(), ThreadId: s.GetThreadId(), ReplyToMessageId: ev.GetMessageId()},
		InputMessageIds: []string{ev.GetMessageId()},
	}
}

func (c *contractFake) Sent(_ *testing.T, _ context.Context, target *deliveryv1.Target) []string {
	var out []string
	for _, m := range c.f.Messages(target.GetChatId()) {
		if !m.Deleted {
			out = append(out, m.Text)
		}
	}
	return out
}

func (c *contractFake) Reactions(_ *testing.T, _ context.Context, target *deliveryv1.Target, messageID string) []string {
	return c.f.Reactions(target.GetChatId(), messageID)
}

// gateway runs a Slack gateway against fake with cfg and returns the bus
// and a reader of the inbound stream.
func gateway(t *testing.T, fake *slackfake.Fake, cfg Config) (*Service, *bus.Bus, func() *eventsv1.MessageReceived, func() bool) {
	t.Helper()
	return gatewayWith(t, fake, cfg, platform.Options{})
}

// gatewayWith is gateway with runner options (its backoff is set short
// for tests).
func gatewayWith(t *testing.T, fake *slackfake.Fake, cfg Config, opts platform.Options) (*Service, *bus.Bus, func() *eventsv1.MessageReceived, func() bool) {
	t.Helper()
	b := bustest.New(t, bustest.EmbeddedURL(t))
	cfg.BotToken, cfg.APIBaseURL = fake.BotToken, fake.APIURL()
	opts.Backoff = platform.Schedule(10 * time.Millisecond)
	log := opts.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	s, err := New(cfg, Deps{Log: log, Bus: b, Runner: opts})
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
	})
	platformtest.WaitFor(t, "the gateway to connect", func() bool { return s.Ready(context.Background()) == nil })
	cons, err := b.JetStream().OrderedConsumer(context.Background(), b.Topology().Stream(bus.StreamInbound), jetstream.OrderedConsumerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	it, err := cons.Messages()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(it.Stop)
	msgs := make(chan jetstream.Msg, 64)
	go func() {
		for {
			m, err := it.Next()
			if err != nil {
				return
			}
			msgs <- m
		}
	}()
	next := func() *eventsv1.MessageReceived {
		t.Helper()
		select {
		case m := <-msgs:
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
	empty := func() bool { return len(msgs) == 0 }
	return s, b, next, empty
}

// With Hermes's defaults a channel message is published when it
// mentions the bot (in the thread it starts, as in Hermes), and so are
// replies in its thread; other channel messages are not.
func TestMentionGating(t *testing.T) {
	t.Parallel()
	fake := slackfake.New(t)
	cfg := DefaultConfig()
	cfg.AppToken = fake.AppToken
	_, b, next, _ := gateway(t, fake, cfg)
	ctx := context.Background()
	push := func(e slackfake.Event) {
		t.Helper()
		if err := fake.Push(ctx, fake.Callback("Ev"+e.TS, e), 0); err != nil {
			t.Fatal(err)
		}
	}
	push(slackfake.Event{Channel: "C0CHANNEL", ChannelType: "channel", User: "U0USER01", Text: "chatter", TS: "1.1"})
	push(slackfake.Event{Channel: "C0CHANNEL", ChannelType: "channel", User: "U0USER01", Text: "<@" + fake.BotUserID + "> help", TS: "2.1"})
	if ev := next(); ev.GetMessageId() != "2.1" || ev.GetSource().GetThreadId() != "2.1" {
		t.Fatalf("got %v, want the mention, in the thread it starts", ev)
	}
	push(slackfake.Event{Channel: "C0CHANNEL", ChannelType: "channel", User: "U0USER01", Text: "in chatter's thread", TS: "3.1", ThreadTS: "1.1"})
	push(slackfake.Event{Channel: "C0CHANNEL", ChannelType: "channel", User: "U0USER01", Text: "and then?", TS: "4.1", ThreadTS: "2.1"})
	if ev := next(); ev.GetMessageId() != "4.1" || ev.GetSource().GetThreadId() != "2.1" {
		t.Fatalf("got %v, want only the reply in the mention's thread", ev)
	}
	// The bot's answer at the channel's top level: a reply in its thread
	// is for the bot, as in Hermes.
	sctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	r := &deliveryv1.SendReceipt{}
	req := &deliveryv1.SendRequested{Op: deliveryv1.SendOp_SEND_OP_SEND, IdempotencyKey: "answer", Text: "here you go",
		Target: &deliveryv1.Target{Platform: "slack", ChatId: "C0CHANNEL"}}
	if err := b.Request(sctx, b.Topology().SendSubject("slack"), req, r); err != nil || !r.GetOk() {
		t.Fatalf("send: receipt %v, err %v", r, err)
	}
	push(slackfake.Event{Channel: "C0CHANNEL", ChannelType: "channel", User: "U0USER01", Text: "thanks, and more?", TS: "5.1", ThreadTS: r.GetPlatformMessageId()})
	if ev := next(); ev.GetMessageId() != "5.1" || ev.GetSource().GetThreadId() != r.GetPlatformMessageId() {
		t.Fatalf("got %v, want the reply in the thread of the bot's answer", ev)
	}
	// A mention inside the thread of a message that was not for the bot:
	// as in Hermes, the thread's later replies are for it too.
	push(slackfake.Event{Channel: "C0CHANNEL", ChannelType: "channel", User: "U0USER02", Text: "<@" + fake.BotUserID + "> what do you think?", TS: "6.1", ThreadTS: "1.1"})
	if ev := next(); ev.GetMessageId() != "6.1" || ev.GetSource().GetThreadId() != "1.1" {
		t.Fatalf("got %v, want the mention in chatter's thread", ev)
	}
	push(slackfake.Event{Channel: "C0CHANNEL", ChannelType: "channel", User: "U0USER01", Text: "and about the budget?", TS: "7.1", ThreadTS: "1.1"})
	if ev := next(); ev.GetMessageId() != "7.1" || ev.GetSource().GetThreadId() != "1.1" {
		t.Fatalf("got %v, want the reply in the thread the bot was mentioned in", ev)
	}
}

// SLACK_ALLOW_BOTS: other bots' messages reach the bus marked is_bot
// ("mentions": only those that mention this bot), for the router's
// allow_bots to admit; the bot's own posts (as Slack echoes them: its
// user and bot id) never do, whatever the mode, or it would answer
// itself.
func TestOtherBots(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		mode string
		sent func(f *slackfake.Fake) []slackfake.Event
		want []int // indexes of sent that reach the bus, in order
	}{
		{mode: "none", sent: func(f *slackfake.Fake) []slackfake.Event {
			return []slackfake.Event{
				{Subtype: "bot_message", Channel: "C0CHANNEL", ChannelType: "channel", BotID: "B0OTHER", Text: "<@" + f.BotUserID + "> hi", TS: "1.1"},
				{Channel: "D0OTHER", ChannelType: "im", User: "U0OTHERBOT", BotID: "B0OTHER", Text: "a bot's DM", TS: "1.2"},
			}
		}},
		{mode: "mentions", sent: func(f *slackfake.Fake) []slackfake.Event {
			return []slackfake.Event{
				{Subtype: "bot_message", Channel: "C0CHANNEL", ChannelType: "channel", BotID: "B0OTHER", Text: "chatter", TS: "1.1"},
				{Channel: "C0CHANNEL", ChannelType: "channel", User: f.BotUserID, BotID: f.BotID, Text: "<@" + f.BotUserID + "> my own", TS: "1.2"},
				{Channel: "C0CHANNEL", ChannelType: "channel", User: "U0OTHERBOT", BotID: "B0OTHER", Text: "<@" + f.BotUserID + "> hi", TS: "1.3"},
			}
		}, want: []int{2}},
		{mode: "all", sent: func(f *slackfake.Fake) []slackfake.Event {
			return []slackfake.Event{
				{Subtype: "bot_message", Channel: "C0CHANNEL", ChannelType: "channel", BotID: f.BotID, Text: "my own answer", TS: "1.1"},
				{Subtype: "bot_message", Channel: "C0CHANNEL", ChannelType: "channel", BotID: "B0OTHER", Text: "chatter", TS: "1.2"},
				{Channel: "D0OTHER", ChannelType: "im", User: "U0OTHERBOT", BotID: "B0OTHER", Text: "a bot's DM", TS: "1.3"},
			}
		}, want: []int{1, 2}},
	} {
		t.Run(c.mode, func(t *testing.T) {
			t.Parallel()
			fake := slackfake.New(t)
			cfg := DefaultConfig()
			cfg.AppToken, cfg.AllowBots = fake.AppToken, c.mode
			// Every channel message counts, so only the bot rule filters.
			cfg.RequireMention = false
			_, _, next, _ := gateway(t, fake, cfg)
			ctx := context.Background()
			sent := c.sent(fake)
			for _, e := range sent {
				if err := fake.Push(ctx, fake.Callback("Ev"+e.TS, e), 0); err != nil {
					t.Fatal(err)
				}
			}
			for _, i := range c.want {
				ev := next()
				if ev.GetMessageId() != sent[i].TS || !ev.GetSource().GetIsBot() {
					t.Fatalf("got %v, want %s (%q) marked is_bot", ev, sent[i].TS, sent[i].Text)
				}
			}
			// Events are handled in order: a person's message after them
			// is the next on the bus, nothing else came.
			last := slackfake.Event{Channel: "C0CHANNEL", ChannelType: "channel", User: "U0USER01", Text: "the end", TS: "9.1"}
			if err := fake.Push(ctx, fake.Callback("Ev9.1", last), 0); err != nil {
				t.Fatal(err)
			}
			if ev := next(); ev.GetMessageId() != last.TS || ev.GetSource().GetIsBot() {
				t.Fatalf("got %v, want only the person's %s after the bots' messages", ev, last.TS)
			}
		})
	}
}

// A gateway refuses an allow_bots it cannot read, as the router does,
// rather than guess.
func TestAllowBotsChecked(t *testing.T) {
	cfg := DefaultConfig()
	cfg.BotToken, cfg.AppToken = "xoxb-1", "xapp-1"
	for _, v := range []string{"", "none", "Mentions", "all", "true", "false"} {
		cfg.AllowBots = v
		if err := cfg.Validate(); err != nil {
			t.Errorf("allow_bots %q: %v", v, err)
		}
	}
	cfg.AllowBots = "yes-please"
	if err := cfg.Validate(); err == nil {
		t.Error("allow_bots \"yes-please\" validates")
	}
}

// "/hermes <command>" over Socket Mode reaches the router as the command,
// once however often Slack sends the envelope.
func TestSlashCommand(t *testing.T) {
	t.Parallel()
	fake := slackfake.New(t)
	_, _, next, empty := gateway(t, fake, Config{AppToken: fake.AppToken})
	ctx := context.Background()
	envelope := func(id string) []byte {
		data, _ := json.Marshal(map[string]any{"envelope_id": id, "type": "slash_commands", "accepts_response_payload": true,
			"payload": map[string]any{"command": "/hermes", "text": "new", "team_id": "T0WORKSPACE", "channel_id": "D0DM",
				"user_id": "U0USER01", "trigger_id": "1337.42"}})
		return data
	}
	for range 2 {
		if err := fake.PushRaw(ctx, envelope); err != nil {
			t.Fatal(err)
		}
	}
	ev := next()
	if ev.GetText() != "!new" || ev.GetSource().GetChatId() != "D0DM" || ev.GetSource().GetUserId() != "U0USER01" || !ev.GetNoReaction() {
		t.Fatalf("got %v, want !new from U0USER01 in D0DM, with no reaction (no Slack message to react to)", ev)
	}
	time.Sleep(200 * time.Millisecond)
	if !empty() {
		t.Fatalf("the repeated envelope was published again: %v", next())
	}
}

func TestEventsAPIOverHTTP(t *testing.T) {
	t.Parallel()
	fake := slackfake.New(t)
	const secret = "signing-secret"
	s, _, next, _ := gateway(t, fake, Config{SigningSecret: secret, Addr: "127.0.0.1:0"})
	platformtest.WaitFor(t, "the events listener", func() bool { return s.p.EventsAddr() != "" })
	url := "http://" + s.p.EventsAddr() + "/slack/events"
	ctx := context.Background()
	post := func(body []byte, retry int, at time.Time) int {
		t.Helper()
		code, _, err := slackfake.PostEvent(ctx, url, secret, body, retry, at)
		if err != nil {
			t.Fatal(err)
		}
		return code
	}

	first := fake.Callback("Ev1", slackfake.Event{Channel: "C1", ChannelType: "channel", User: "U1", Text: "hi", TS: "1700000001.000100"})
	if code := post(first, 0, time.Now()); code != 200 {
		t.Fatalf("event answered %d, want 200", code)
	}
	if ev := next(); ev.GetEventId() != "C1:1700000001.000100" || ev.GetSource().GetScopeId() != fake.TeamID {
		t.Fatalf("published %v", ev)
	}
	// Slack retries (it did not see our 200 in time): answered, not published again.
	for retry := 1; retry <= 3; retry++ {
		if code := post(first, retry, time.Now()); code != 200 {
			t.Fatalf("retry %d answered %d, want 200", retry, code)
		}
	}
	// The app_mention Slack sends for the same message is the same message.
	mention := fake.Callback("Ev2", slackfake.Event{Type: "app_mention", Channel: "C1", User: "U1", Text: "hi", TS: "1700000001.000100"})
	if code := post(mention, 0, time.Now()); code != 200 {
		t.Fatalf("mention answered %d", code)
	}

	// Refused: wrong signature, stale or future timestamps.
	sentinelBody := fake.Callback("Ev3", slackfake.Event{Channel: "C1", ChannelType: "channel", User: "U1", Text: "after", TS: "1700000002.000100"})
	for name, at := range map[string]time.Time{"stale": time.Now().Add(-6 * time.Minute), "future": time.Now().Add(6 * time.Minute)} {
		if code := post(sentinelBody, 0, at); code != 401 {
			t.Fatalf("%s timestamp answered %d, want 401", name, code)
		}
	}
	if code, _, _ := slackfake.PostEvent(ctx, url, "wrong-secret", sentinelBody, 0, time.Now()); code != 401 {
		t.Fatalf("bad signature answered %d, want 401", code)
	}
	code, body, err := slackfake.PostEvent(ctx, url, secret, []byte(`{"type":"url_verification","challenge":"abc123","token":"x"}`), 0, time.Now())
	if err != nil || code != 200 || string(body) != "abc123" {
		t.Fatalf("url_verification: %d %q %v", code, body, err)
	}

	if code := post(sentinelBody, 0, time.Now().Add(-4*time.Minute)); code != 200 {
		t.Fatalf("sentinel answered %d", code)
	}
	if ev := next(); ev.GetEventId() != "C1:1700000002.000100" {
		t.Fatalf("after retries and refusals the next event is %s, want the sentinel", ev.GetEventId())
	}
}

// A 429 is a rate limit whether or not it names its wait: Slack always
// sends Retry-After, a proxy in front of it may not, and slack-go then
// reports the bare status (a 4xx, taken for a permanent failure before:
// delivery dead-lettered the reply). Without a named wait it is retried
// after rateLimitWait, as Slack's "ratelimited" error code is.
func TestRateLimitedWithoutRetryAfter(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		limit func(*slackfake.Fake)
		want  time.Duration
	}{
		{"Retry-After named", func(f *slackfake.Fake) { f.RateLimitNext(7 * time.Second) }, 7 * time.Second},
		{"no Retry-After", (*slackfake.Fake).RateLimitNextBare, rateLimitWait},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			fake := slackfake.New(t)
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			p, err := NewPlatform(ctx, Config{BotToken: fake.BotToken, SigningSecret: "s3cret", APIBaseURL: fake.APIURL()}, slog.New(slog.DiscardHandler), nil)
			if err != nil {
				t.Fatal(err)
			}
			tc.limit(fake)
			req := &deliveryv1.SendRequested{Op: deliveryv1.SendOp_SEND_OP_SEND, Text: "hi", Target: &deliveryv1.Target{Platform: "slack", ChatId: "C1"}}
			_, err = p.Send(ctx, req)
			var se *platform.SendError
			if !errors.As(err, &se) || se.Class != deliveryv1.ErrorClass_ERROR_CLASS_RATE_LIMITED || se.RetryAfter != tc.want {
				t.Fatalf("send answered %v, want rate limited for %v", err, tc.want)
			}
			if _, err := p.Send(ctx, req); err != nil {
				t.Fatalf("the retry: %v", err)
			}
			if m := fake.Messages("C1"); len(m) != 1 {
				t.Fatalf("posted %d messages, want 1", len(m))
			}
		})
	}
}

func TestRateLimitedReceipt(t *testing.T) {
	t.Parallel()
	fake := slackfake.New(t)
	_, b, _, _ := gateway(t, fake, Config{AppToken: fake.AppToken})
	fake.RateLimitNext(7 * time.Second)
	req := &deliveryv1.SendRequested{Op: deliveryv1.SendOp_SEND_OP_SEND, IdempotencyKey: "k1", Text: "hi",
		Target: &deliveryv1.Target{Platform: "slack", ChatId: "C1", ThreadId: "1700000000.000001"}}
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	r := &deliveryv1.SendReceipt{}
	if err := b.Request(ctx, b.Topology().SendSubject("slack"), req, r); err != nil {
		t.Fatal(err)
	}
	if r.GetOk() || r.GetErrorClass() != deliveryv1.ErrorClass_ERROR_CLASS_RATE_LIMITED || r.GetRetryAfterMs() != 7000 {
		t.Fatalf("receipt %v, want RATE_LIMITED after 7000 ms", r)
	}
	r = &deliveryv1.SendReceipt{}
	if err := b.Request(ctx, b.Topology().SendSubject("slack"), req, r); err != nil {
		t.Fatal(err)
	}
	if !r.GetOk() {
		t.Fatalf("retry receipt %v, want ok", r)
	}
	msgs := fake.Messages("C1")
	if len(msgs) != 1 || msgs[0].ThreadTS != "1700000000.000001" {
		t.Fatalf("posted %+v, want one reply in the thread", msgs)
	}
	missing := proto.Clone(req).(*deliveryv1.SendRequested)
	missing.IdempotencyKey, missing.Target.ChatId = "k2", "Cmissing"
	r = &deliveryv1.SendReceipt{}
	if err := b.Request(ctx, b.Topology().SendSubject("slack"), missing, r); err != nil {
		t.Fatal(err)
	}
	if r.GetErrorClass() != deliveryv1.ErrorClass_ERROR_CLASS_PERMANENT {
		t.Fatalf("channel_not_found receipt %v, want PERMANENT", r)
	}
}

// Model text reaches Slack escaped (& < > as &amp; &lt; &gt;, Slack's
// rule for text you send), so <!channel>, <@U…> and <url|label> in it are
// shown as typed instead of pinging everyone or disguising a link, and its
// Markdown becomes mrkdwn. Edits, which carry streamed text, are converted
// the same way.
func TestTextIsEscaped(t *testing.T) {
	t.Parallel()
	fake := slackfake.New(t)
	_, b, _, _ := gateway(t, fake, Config{AppToken: fake.AppToken})
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	var ts string // the message the send posted; the edits rewrite it
	for i, tc := range []struct {
		name string
		op   deliveryv1.SendOp
		text string
		want string
	}{
		{"send", deliveryv1.SendOp_SEND_OP_SEND, "hi <!channel> & <https://evil.example|innocent>",
			"hi &lt;!channel&gt; &amp; &lt;https://evil.example|innocent&gt;"},
		{"edit", deliveryv1.SendOp_SEND_OP_EDIT, "<!here> <@U123> <!subteam^S1>", "&lt;!here&gt; &lt;@U123&gt; &lt;!subteam^S1&gt;"},
		{"edit with entities already written", deliveryv1.SendOp_SEND_OP_EDIT, "&lt;!channel&gt; a > b", "&amp;lt;!channel&amp;gt; a &gt; b"},
		{"edit with markdown", deliveryv1.SendOp_SEND_OP_EDIT, "**bold** *it* `code` https://example.com", "*bold* _it_ `code` https://example.com"},
		{"edit with a markdown link", deliveryv1.SendOp_SEND_OP_EDIT, "see [the docs](https://x.io/?a=1&b=2)", "see <https://x.io/?a=1&amp;b=2|the docs>"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req := &deliveryv1.SendRequested{Op: tc.op, IdempotencyKey: fmt.Sprintf("esc-%d", i), Text: tc.text, MessageId: ts,
				Target: &deliveryv1.Target{Platform: "slack", ChatId: "CESC"}}
			r := &deliveryv1.SendReceipt{}
			if err := b.Request(ctx, b.Topology().SendSubject("slack"), req, r); err != nil {
				t.Fatal(err)
			}
			if !r.GetOk() {
				t.Fatalf("receipt %v, want ok", r)
			}
			if tc.op == deliveryv1.SendOp_SEND_OP_SEND {
				ts = r.GetPlatformMessageId()
			}
			msgs := fake.Messages("CESC")
			if len(msgs) != 1 || msgs[0].Text != tc.want {
				t.Fatalf("slack has %+v, want one message with text %q", msgs, tc.want)
			}
		})
	}
}

// Every part delivery cuts a reply into reaches Slack within its 40,000
// characters, however much the mrkdwn conversion grows it: here each
// link's "|" becomes "%7C", doubling the text, and a part that would
// outgrow the limit goes out escaped only (msg_too_long before).
func TestLongReplyFitsAfterFormatting(t *testing.T) {
	t.Parallel()
	fake := slackfake.New(t)
	_, b, _, _ := gateway(t, fake, Config{AppToken: fake.AppToken})
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	link := "[a](https://x.io/?q=" + strings.Repeat("|", 20) + ") "
	parts := chunk.Split(strings.Repeat(link, 1500), "slack")
	if len(parts) < 2 {
		t.Fatalf("%d parts, want the reply cut", len(parts))
	}
	for i, part := range parts {
		req := &deliveryv1.SendRequested{Op: deliveryv1.SendOp_SEND_OP_SEND, IdempotencyKey: fmt.Sprintf("long-%d", i), Text: part,
			Target: &deliveryv1.Target{Platform: "slack", ChatId: "CLONG"}}
		r := &deliveryv1.SendReceipt{}
		if err := b.Request(ctx, b.Topology().SendSubject("slack"), req, r); err != nil {
			t.Fatal(err)
		}
		if !r.GetOk() {
			t.Fatalf("part %d: receipt %v, want ok", i, r)
		}
	}
	msgs := fake.Messages("CLONG")
	if len(msgs) != len(parts) {
		t.Fatalf("%d messages, want %d", len(msgs), len(parts))
	}
	for i, m := range msgs {
		if n := utf8.RuneCountInString(m.Text); n > slackfake.MaxText {
			t.Errorf("message %d has %d characters", i, n)
		}
	}
	// A part the conversion keeps within the limit is still mrkdwn.
	short := &deliveryv1.SendRequested{Op: deliveryv1.SendOp_SEND_OP_SEND, IdempotencyKey: "long-short", Text: link,
		Target: &deliveryv1.Target{Platform: "slack", ChatId: "CSHORT"}}
	if err := b.Request(ctx, b.Topology().SendSubject("slack"), short, &deliveryv1.SendReceipt{}); err != nil {
		t.Fatal(err)
	}
	if msgs := fake.Messages("CSHORT"); len(msgs) != 1 || !strings.HasPrefix(msgs[0].Text, "<https://x.io/?q=%7C") {
		t.Fatalf("short reply %+v, want a mrkdwn link", msgs)
	}
}

// The agent's media (a media reply, a proactive send with files) reach
// the channel: an http(s) URL as its link after the caption, bytes (a
// data: URL, or kept in the attachment store) uploaded and shared into
// the thread. They were refused as a message without text.
func TestAgentMedia(t *testing.T) {
	t.Parallel()
	fake := slackfake.New(t)
	cfg := attachment.Config{Enabled: true, MaxBytes: 64 << 10, StoreBytes: 8 << 20}
	_, b, _, _ := gatewayWith(t, fake, Config{AppToken: fake.AppToken}, platform.Options{Attachments: cfg})
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = b.JetStream().DeleteObjectStore(ctx, b.Topology().Stream(attachment.Bucket))
	})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	img := platformtest.NoisePNG(t, 16, 16)
	ref := attachment.Name("slack", fake.BotUserID, "agent-media", 0)
	if _, err := attachment.New(b.JetStream(), b.Topology(), cfg).Keep(ctx, ref, "image/png", bytes.NewReader(img)); err != nil {
		t.Fatal(err)
	}
	n := 0
	send := func(a *eventsv1.Attachment) slackfake.Message {
		t.Helper()
		n++
		req := &deliveryv1.SendRequested{Op: deliveryv1.SendOp_SEND_OP_SEND, IdempotencyKey: fmt.Sprintf("media%d", n),
			Target: &deliveryv1.Target{Platform: "slack", ChatId: "C1", ThreadId: "1700000000.000001"}, Attachments: []*eventsv1.Attachment{a}}
		r := &deliveryv1.SendReceipt{}
		if err := b.Request(ctx, b.Topology().SendSubject("slack"), req, r); err != nil {
			t.Fatal(err)
		}
		ms := fake.Messages("C1")
		if !r.GetOk() || len(ms) != n || ms[n-1].ThreadTS != "1700000000.000001" {
			t.Fatalf("receipt %v, posted %+v", r, ms)
		}
		return ms[n-1]
	}
	if m := send(&eventsv1.Attachment{Kind: eventsv1.AttachmentKind_ATTACHMENT_KIND_IMAGE, Caption: "the chart",
		Location: &eventsv1.Attachment_Url{Url: "https://example.com/chart.png"}}); m.Text != "the chart\nhttps://example.com/chart.png" || len(m.Files) != 0 {
		t.Fatalf("link: posted %+v", m)
	}
	dataURL := "data:image/png;base64," + base64.StdEncoding.EncodeToString(img)
	if m := send(&eventsv1.Attachment{Kind: eventsv1.AttachmentKind_ATTACHMENT_KIND_IMAGE,
		Location: &eventsv1.Attachment_Url{Url: dataURL}}); len(m.Files) != 1 || !bytes.Equal(m.Files[0].Data, img) || m.Files[0].Name != "file.png" {
		t.Fatalf("data: URL: posted %+v", m)
	}
	if m := send(&eventsv1.Attachment{Kind: eventsv1.AttachmentKind_ATTACHMENT_KIND_DOCUMENT, FileName: "chart.png",
		Location: &eventsv1.Attachment_BytesRef{BytesRef: ref}}); len(m.Files) != 1 || m.Files[0].Name != "chart.png" || !bytes.Equal(m.Files[0].Data, img) {
		t.Fatalf("kept bytes: posted %+v", m)
	}
}

// A media send whose text (cut by delivery to Slack's limit) and the
// captions and links after it are longer than Slack takes still
// arrives whole, as several messages in the thread, rather than Slack
// refusing it (msg_too_long) and the send dead-lettering. A retry after
// a later message failed posts only the rest.
func TestLongMediaSend(t *testing.T) {
	t.Parallel()
	fake := slackfake.New(t)
	_, b, _, _ := gatewayWith(t, fake, Config{AppToken: fake.AppToken}, platform.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	text := strings.Repeat("x", 38990)
	link := "https://example.com/chart.png"
	req := &deliveryv1.SendRequested{Op: deliveryv1.SendOp_SEND_OP_SEND, IdempotencyKey: "long-media", Text: text,
		Target: &deliveryv1.Target{Platform: "slack", ChatId: "C7", ThreadId: "1700000000.000001"},
		Attachments: []*eventsv1.Attachment{{Kind: eventsv1.AttachmentKind_ATTACHMENT_KIND_IMAGE, Caption: strings.Repeat("a caption ", 110),
			Location: &eventsv1.Attachment_Url{Url: link}}}}
	fake.RateLimitAfter(1, time.Second)
	for attempt, want := range []deliveryv1.ErrorClass{deliveryv1.ErrorClass_ERROR_CLASS_RATE_LIMITED, deliveryv1.ErrorClass_ERROR_CLASS_UNSPECIFIED} {
		r := &deliveryv1.SendReceipt{}
		if err := b.Request(ctx, b.Topology().SendSubject("slack"), req, r); err != nil {
			t.Fatal(err)
		}
		if r.GetErrorClass() != want || r.GetOk() != (attempt == 1) {
			t.Fatalf("attempt %d: receipt %v, want the second message rate limited, then the rest sent", attempt+1, r)
		}
	}
	var texts []string
	for _, m := range fake.Messages("C7") {
		if n := utf8.RuneCountInString(m.Text); n > slackfake.MaxText || m.ThreadTS != "1700000000.000001" {
			t.Errorf("a message of %d characters in thread %q", n, m.ThreadTS)
		}
		texts = append(texts, m.Text)
	}
	want := text + "\n" + strings.TrimSpace(strings.Repeat("a caption ", 110)) + "\n" + link
	if got := strings.Join(texts, "\n"); len(texts) != 2 || got != want {
		t.Fatalf("%d messages showing %d characters, want 2 showing the %d characters", len(texts), utf8.RuneCountInString(got), utf8.RuneCountInString(want))
	}
}

// TestReplyInThread: reply_in_thread (default true, as Hermes's
// platforms.slack.extra.reply_in_thread) answers a channel message
// outside a thread in the thread it starts; off, as in Hermes, that
// answer, and a file with it, goes to the channel's top level (the
// session key stays the thread's), while a message in a real thread is
// still answered there.
func TestReplyInThread(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name     string
		inThread bool
		target   *deliveryv1.Target
		want     string // the answer's thread_ts
	}{
		{"default, message outside a thread", true, &deliveryv1.Target{ChatId: "C0CHANNEL", ThreadId: "1.1", ReplyToMessageId: "1.1"}, "1.1"},
		{"off, message outside a thread", false, &deliveryv1.Target{ChatId: "C0CHANNEL", ThreadId: "1.1", ReplyToMessageId: "1.1"}, ""},
		{"off, message in a thread", false, &deliveryv1.Target{ChatId: "C0CHANNEL", ThreadId: "1.1", ReplyToMessageId: "2.1"}, "1.1"},
		{"off, a send to a thread without a message to answer", false, &deliveryv1.Target{ChatId: "C0CHANNEL", ThreadId: "1.1"}, "1.1"},
		// A slash command's or a press's message id names no message
		// whose thread the answer could start: it goes to the top level.
		{"default, the answer to a slash command", true, &deliveryv1.Target{ChatId: "C0CHANNEL", ReplyToMessageId: "slash:1337.42"}, ""},
		{"default, the answer to a press outside a thread", true, &deliveryv1.Target{ChatId: "C0CHANNEL", ReplyToMessageId: "press:C0CHANNEL:1.1:2.2"}, ""},
		{"default, a send without a message to answer", true, &deliveryv1.Target{ChatId: "C0CHANNEL"}, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			fake := slackfake.New(t)
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			cfg := DefaultConfig()
			cfg.BotToken, cfg.SigningSecret, cfg.APIBaseURL, cfg.ReplyInThread = fake.BotToken, "s3cret", fake.APIURL(), c.inThread
			p, err := NewPlatform(ctx, cfg, slog.New(slog.DiscardHandler), nil)
			if err != nil {
				t.Fatal(err)
			}
			c.target.Platform = "slack"
			if _, err := p.Send(ctx, &deliveryv1.SendRequested{Op: deliveryv1.SendOp_SEND_OP_SEND, Target: c.target, Text: "answer"}); err != nil {
				t.Fatal(err)
			}
			file := &deliveryv1.SendRequested{Op: deliveryv1.SendOp_SEND_OP_SEND, Target: c.target,
				Attachments: []*eventsv1.Attachment{{Kind: eventsv1.AttachmentKind_ATTACHMENT_KIND_DOCUMENT, MimeType: "text/plain", FileName: "notes.txt",
					Location: &eventsv1.Attachment_Url{Url: "data:text/plain;base64,bm90ZXM="}}}}
			if _, err := p.Send(ctx, file); err != nil {
				t.Fatal(err)
			}
			m := fake.Messages("C0CHANNEL")
			if len(m) != 2 {
				t.Fatalf("posted %v, want the answer and the file", m)
			}
			for _, msg := range m {
				if msg.ThreadTS != c.want {
					t.Errorf("posted in thread %q, want %q", msg.ThreadTS, c.want)
				}
			}
		})
	}
}

// With reply_in_thread off, the answer to a channel message goes to the
// channel's top level, and a reply in that answer's thread is for the
// bot without a mention, keyed by that thread (a conversation of its
// own), as in Hermes.
func TestReplyInThreadOffFollowsTheAnswer(t *testing.T) {
	t.Parallel()
	fake := slackfake.New(t)
	cfg := DefaultConfig()
	cfg.AppToken, cfg.ReplyInThread = fake.AppToken, false
	_, b, next, _ := gateway(t, fake, cfg)
	ctx := context.Background()
	push := func(e slackfake.Event) {
		t.Helper()
		if err := fake.Push(ctx, fake.Callback("Ev"+e.TS, e), 0); err != nil {
			t.Fatal(err)
		}
	}
	push(slackfake.Event{Channel: "C0CHANNEL", ChannelType: "channel", User: "U0USER01", Text: "<@" + fake.BotUserID + "> help", TS: "1.1"})
	if ev := next(); ev.GetMessageId() != "1.1" || ev.GetSource().GetThreadId() != "1.1" {
		t.Fatalf("got %v, want the mention, keyed by the thread it starts", ev)
	}
	sctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	r := &deliveryv1.SendReceipt{}
	req := &deliveryv1.SendRequested{Op: deliveryv1.SendOp_SEND_OP_SEND, IdempotencyKey: "answer", Text: "here you go",
		Target: &deliveryv1.Target{Platform: "slack", ChatId: "C0CHANNEL", ThreadId: "1.1", ReplyToMessageId: "1.1"}}
	if err := b.Request(sctx, b.Topology().SendSubject("slack"), req, r); err != nil || !r.GetOk() {
		t.Fatalf("send: receipt %v, err %v", r, err)
	}
	if m := fake.Messages("C0CHANNEL"); len(m) != 1 || m[0].ThreadTS != "" {
		t.Fatalf("posted %+v, want the answer at the top level", m)
	}
	push(slackfake.Event{Channel: "C0CHANNEL", ChannelType: "channel", User: "U0USER01", Text: "thanks, and more?", TS: "3.1", ThreadTS: r.GetPlatformMessageId()})
	if ev := next(); ev.GetMessageId() != "3.1" || ev.GetSource().GetThreadId() != r.GetPlatformMessageId() {
		t.Fatalf("got %v, want the reply in the thread of the bot's answer", ev)
	}
}

// TestDMTopLevelThreads: with Hermes's default
// (dm_top_level_threads_as_sessions on) a DM message outside a thread is
// published keyed by the thread it starts and its answer goes into that
// thread, where the user's follow-up finds the same session; with
// reply_in_thread off the answer goes to the DM's top level, as Hermes's
// _resolve_thread_ts, the session still the thread's. Off, the DM's top
// level is one session, answered at the top level.
func TestDMTopLevelThreads(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name         string
		set          func(*Config)
		key          string // the session key of the top-level DM and of the follow-up
		answerThread string // the answer's thread_ts
		followUpTS   string // the follow-up's thread_ts
		followUpKey  string
		secondKey    string // the key of the next top-level DM
	}{
		{name: "default", set: func(*Config) {},
			key: "agent:main:slack:dm:T0WORKSPACE:D0DM:1700000001.000100", answerThread: "1700000001.000100",
			followUpTS: "1700000001.000100", followUpKey: "agent:main:slack:dm:T0WORKSPACE:D0DM:1700000001.000100",
			secondKey: "agent:main:slack:dm:T0WORKSPACE:D0DM:1700000003.000100"},
		{name: "reply_in_thread off", set: func(c *Config) { c.ReplyInThread = false },
			key: "agent:main:slack:dm:T0WORKSPACE:D0DM:1700000001.000100", answerThread: "",
			followUpTS: "1700000001.000100", followUpKey: "agent:main:slack:dm:T0WORKSPACE:D0DM:1700000001.000100",
			secondKey: "agent:main:slack:dm:T0WORKSPACE:D0DM:1700000003.000100"},
		// Off, the DM's top level is one session, and its answer goes to
		// the thread of the message it answers, as Hermes's
		// _resolve_thread_ts (reply_to); a reply there is that thread's.
		{name: "off", set: func(c *Config) { c.DMTopLevelThreadsAsSessions = false },
			key: "agent:main:slack:dm:T0WORKSPACE:D0DM", answerThread: "1700000001.000100",
			followUpTS: "1700000001.000100", followUpKey: "agent:main:slack:dm:T0WORKSPACE:D0DM:1700000001.000100",
			secondKey: "agent:main:slack:dm:T0WORKSPACE:D0DM"},
		{name: "off, reply_in_thread off", set: func(c *Config) { c.DMTopLevelThreadsAsSessions, c.ReplyInThread = false, false },
			key: "agent:main:slack:dm:T0WORKSPACE:D0DM", answerThread: "",
			secondKey: "agent:main:slack:dm:T0WORKSPACE:D0DM"},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			fake := slackfake.New(t)
			cfg := DefaultConfig()
			cfg.AppToken = fake.AppToken
			c.set(&cfg)
			_, b, next, _ := gateway(t, fake, cfg)
			ctx := context.Background()
			push := func(e slackfake.Event) *eventsv1.MessageReceived {
				t.Helper()
				e.Channel, e.ChannelType, e.User = "D0DM", "im", "U0USER01"
				if err := fake.Push(ctx, fake.Callback("Ev"+e.TS, e), 0); err != nil {
					t.Fatal(err)
				}
				ev := next()
				if ev.GetMessageId() != e.TS {
					t.Fatalf("got %v, want message %s", ev, e.TS)
				}
				return ev
			}
			key := func(ev *eventsv1.MessageReceived) string {
				return sessionkey.Build(ev.GetSource(), sessionkey.DefaultOptions())
			}
			ev := push(slackfake.Event{Text: "plan the trip", TS: "1700000001.000100"})
			if got := key(ev); got != c.key {
				t.Fatalf("key %s, want %s", got, c.key)
			}
			sctx, cancel := context.WithTimeout(ctx, 15*time.Second)
			defer cancel()
			r := &deliveryv1.SendReceipt{}
			req := &deliveryv1.SendRequested{Op: deliveryv1.SendOp_SEND_OP_SEND, IdempotencyKey: "answer", Text: "here you go",
				Target: &deliveryv1.Target{Platform: "slack", ChatId: "D0DM", ThreadId: sessionkey.ReplyThread(ev.GetSource()), ReplyToMessageId: ev.GetMessageId()}}
			if err := b.Request(sctx, b.Topology().SendSubject("slack"), req, r); err != nil || !r.GetOk() {
				t.Fatalf("send: receipt %v, err %v", r, err)
			}
			if m := fake.Messages("D0DM"); len(m) != 1 || m[0].ThreadTS != c.answerThread {
				t.Fatalf("posted %+v, want the answer in thread %q", m, c.answerThread)
			}
			if c.followUpTS != "" {
				if got := key(push(slackfake.Event{Text: "and the hotel?", TS: "1700000002.000100", ThreadTS: c.followUpTS})); got != c.followUpKey {
					t.Errorf("follow-up key %s, want %s", got, c.followUpKey)
				}
			}
			if got := key(push(slackfake.Event{Text: "something else", TS: "1700000003.000100"})); got != c.secondKey {
				t.Errorf("next top-level DM key %s, want %s", got, c.secondKey)
			}
		})
	}
}

// TestReplyInThreadOffApprovalInTheThread: with reply_in_thread off an
// approval prompt still goes into the thread of the session it asks for,
// as Hermes's send_exec_approval (it passes no reply_to to
// _resolve_thread_ts, so the thread stays), so a press of its buttons
// reaches that session: at the top level the press was keyed without
// the thread, a session with no waiting call. A top-level DM (its own
// session, as dm_top_level_threads_as_sessions) and a channel mention.
func TestReplyInThreadOffApprovalInTheThread(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name string
		ev   slackfake.Event
	}{
		{"dm", slackfake.Event{Channel: "D0DM", ChannelType: "im", User: "U0USER01", Text: "clean up", TS: "1700000001.000100"}},
		{"channel", slackfake.Event{Type: "app_mention", Channel: "C0CHANNEL", ChannelType: "channel", User: "U0USER01", Text: "<@U0BOT> clean up", TS: "1700000001.000100"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			fake := slackfake.New(t)
			cfg := DefaultConfig()
			cfg.AppToken, cfg.ReplyInThread = fake.AppToken, false
			_, b, next, _ := gateway(t, fake, cfg)
			ctx := context.Background()
			if err := fake.Push(ctx, fake.Callback("Ev1", c.ev), 0); err != nil {
				t.Fatal(err)
			}
			ev := next()
			key := sessionkey.Build(ev.GetSource(), sessionkey.DefaultOptions())
			if ev.GetSource().GetThreadId() != c.ev.TS {
				t.Fatalf("got %v, want the message keyed by the thread it starts", ev)
			}
			sctx, cancel := context.WithTimeout(ctx, 15*time.Second)
			defer cancel()
			// As the worker addresses a turn's replies (worker.replyTarget).
			target := &deliveryv1.Target{Platform: "slack", ChatId: c.ev.Channel, ThreadId: sessionkey.ReplyThread(ev.GetSource()), ReplyToMessageId: ev.GetMessageId()}
			r := &deliveryv1.SendReceipt{}
			req := &deliveryv1.SendRequested{Op: deliveryv1.SendOp_SEND_OP_SEND, IdempotencyKey: "prompt", Text: "approve `rm -rf /tmp/x`?", Target: target,
				Approval: &deliveryv1.Approval{Choices: []string{"once", "session", "always", "deny"}, ToolCallId: "call_1"}}
			if err := b.Request(sctx, b.Topology().SendSubject("slack"), req, r); err != nil || !r.GetOk() {
				t.Fatalf("send: receipt %v, err %v", r, err)
			}
			if m := fake.Messages(c.ev.Channel); len(m) != 1 || m[0].ThreadTS != c.ev.TS {
				t.Fatalf("posted %d messages, the first in thread %q, want the prompt in thread %s", len(m), m[0].ThreadTS, c.ev.TS)
			}
			if _, err := fake.Press(ctx, c.ev.Channel, r.GetPlatformMessageId(), "U0USER01", "alice", "ea:once:call_1"); err != nil {
				t.Fatal(err)
			}
			press := next()
			if got := sessionkey.Build(press.GetSource(), sessionkey.DefaultOptions()); press.GetText() != "/approve" || got != key {
				t.Fatalf("press %q keyed %s, want /approve in the session %s", press.GetText(), got, key)
			}
			// The answer itself still goes to the top level.
			req = &deliveryv1.SendRequested{Op: deliveryv1.SendOp_SEND_OP_SEND, IdempotencyKey: "answer", Text: "done", Target: target}
			if err := b.Request(sctx, b.Topology().SendSubject("slack"), req, r); err != nil || !r.GetOk() {
				t.Fatalf("send: receipt %v, err %v", r, err)
			}
			if m := fake.Messages(c.ev.Channel); len(m) != 2 || m[1].ThreadTS != "" {
				t.Fatalf("posted %+v, want the answer at the top level", m)
			}
		})
	}
}

// A delete retried after its answer was lost finds the message gone
// (Slack's message_not_found): that is the delete done, not a failure
// for delivery to dead-letter.
func TestDeleteOfAMessageGoneAlready(t *testing.T) {
	t.Parallel()
	fake := slackfake.New(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cfg := DefaultConfig()
	cfg.BotToken, cfg.SigningSecret, cfg.APIBaseURL = fake.BotToken, "s3cret", fake.APIURL()
	p, err := NewPlatform(ctx, cfg, slog.New(slog.DiscardHandler), nil)
	if err != nil {
		t.Fatal(err)
	}
	target := &deliveryv1.Target{Platform: "slack", ChatId: "C0CHANNEL"}
	ts, err := p.Send(ctx, &deliveryv1.SendRequested{Op: deliveryv1.SendOp_SEND_OP_SEND, Target: target, Text: "soon gone"})
	if err != nil {
		t.Fatal(err)
	}
	del := &deliveryv1.SendRequested{Op: deliveryv1.SendOp_SEND_OP_DELETE, Target: target, MessageId: ts}
	for attempt := 1; attempt <= 2; attempt++ {
		if err := p.Delete(ctx, del); err != nil {
			t.Fatalf("delete, attempt %d: %v", attempt, err)
		}
	}
	if m := fake.Messages("C0CHANNEL"); len(m) != 1 || !m[0].Deleted {
		t.Fatalf("messages %+v, want the one deleted", m)
	}
}
