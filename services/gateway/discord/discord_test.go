package discord

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/switchboard-chat/switchboard/pkg/attachment"
	"github.com/switchboard-chat/switchboard/pkg/bus"
	"github.com/switchboard-chat/switchboard/pkg/bus/bustest"
	deliveryv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/delivery/v1"
	eventsv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/events/v1"
	"github.com/switchboard-chat/switchboard/pkg/platform"
	"github.com/switchboard-chat/switchboard/pkg/platform/platformtest"
	"github.com/switchboard-chat/switchboard/pkg/sessionkey"
	"github.com/switchboard-chat/switchboard/services/gateway/discord/discordfake"
)

const (
	guild   = "300000000000000001"
	channel = "900000000000000001"
	thread  = "900000000000000002"
	dmChan  = "900000000000000003"
	user    = "400000000000000042"
)

var sentAt = timestamppb.New(time.Date(2026, 1, 2, 3, 4, 5, 678000000, time.UTC))

func newFake(t testing.TB) *discordfake.Fake {
	f := discordfake.New(t)
	f.AddChannel(channel, discordfake.TypeGuildText, guild, "")
	f.AddChannel(thread, discordfake.TypePublicThread, guild, channel)
	f.AddChannel(dmChan, discordfake.TypeDM, "", "")
	return f
}

func TestContract(t *testing.T) {
	platformtest.Run(t, platformtest.Harness{New: func(t *testing.T, env platformtest.Env) (platform.Platform, platformtest.Fake) {
		f := newFake(t)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		p, err := NewPlatform(ctx, Config{BotToken: f.Token, APIBaseURL: f.URL(), AutoThread: true, Reactions: true}, env.Log)
		if err != nil {
			t.Fatal(err)
		}
		return p, &contractFake{f: f}
	}})
}

type contractFake struct {
	f *discordfake.Fake
}

func (c *contractFake) Kinds() []string {
	return []string{"guild", "dm", "thread", "mention", "attachment", "reply"}
}

func (c *contractFake) Deliver(t *testing.T, ctx context.Context, kind string) *eventsv1.MessageReceived {
	t.Helper()
	id := c.f.NewID()
	m := discordfake.MessageCreate{ID: id, ChannelID: channel, GuildID: guild, AuthorID: user, Content: "hello " + kind}
	want := &eventsv1.MessageReceived{EventId: id, MessageId: id, Text: m.Content, SentAt: sentAt,
		Source: &eventsv1.SessionSource{Platform: "discord", Account: c.f.BotID, ChatId: channel, ChatType: "group", UserId: user, UserName: "user" + user, ScopeId: guild}}
	switch kind {
	case "dm":
		m.ChannelID, m.GuildID = dmChan, ""
		want.Source.ChatId, want.Source.ChatType, want.Source.ScopeId, want.Mentioned = dmChan, "dm", "", true
	case "thread":
		m.ChannelID = thread
		want.Source.ChatId, want.Source.ChatType, want.Source.ThreadId, want.Source.ParentChatId = thread, "thread", thread, channel
	case "mention":
		m.Content, m.Mentions = "<@"+c.f.BotID+"> what is up", []string{c.f.BotID}
		// Answered in the thread the gateway opens from it, as in Hermes.
		want.Text, want.Mentioned = "what is up", true
		want.Source.ChatId, want.Source.ChatType, want.Source.ThreadId, want.Source.ParentChatId = id, "thread", id, channel
	case "attachment":
		m.Attachments = []discordfake.Attachment{{ID: "500", Filename: "cat.png", ContentType: "image/png", URL: "https://cdn.discord.test/cat.png", Size: 99}}
		want.Attachments = []*eventsv1.Attachment{{Kind: eventsv1.AttachmentKind_ATTACHMENT_KIND_IMAGE, Location: &eventsv1.Attachment_Url{Url: "https://cdn.discord.test/cat.png"},
			MimeType: "image/png", SizeBytes: 99, FileName: "cat.png", PlatformFileId: "500"}}
	case "reply":
		m.Type, m.ReplyTo = 19, "700000000000000001"
		want.ReplyTo = &eventsv1.ReplyTo{MessageId: "700000000000000001"}
	}
	if err := c.f.Dispatch(ctx, "MESSAGE_CREATE", m.Payload()); err != nil {
		t.Fatalf("dispatch %s: %v", kind, err)
	}
	return want
}

// Redeliver is Discord's redelivery: the connection drops and the resume
// replays the event again.
func (c *contractFake) Redeliver(t *testing.T, ctx context.Context, eventID string) {
	c.f.ReplayOverlap(1)
	c.f.Drop()
}

func (c *contractFake) DeliverOversized(t *testing.T, ctx context.Context) {
	m := discordfake.MessageCreate{ID: c.f.NewID(), ChannelID: channel, GuildID: guild, AuthorID: user, Content: strings.Repeat("x", 300<<10)}
	if err := c.f.Dispatch(ctx, "MESSAGE_CREATE", m.Payload()); err != nil {
		t.Fatal(err)
	}
}

func (c *contractFake) DeliverMalformed(t *testing.T, ctx context.Context) {
	if err := c.f.Dispatch(ctx, "MESSAGE_CREATE", map[string]any{"id": 12, "channel_id": channel, "content": []int{1}}); err != nil {
		t.Fatal(err)
	}
}

// The fake has no payload whose handling panics (it is no PoisonFake,
// so the suite skips that check): the one it had, a message in a channel
// whose lookup answers null, is now handled as in a plain channel
// (TestNullChannelLookupIsHandled), and the gateway reads every other
// part of a payload through nil checks. The oversized and malformed
// checks remain.

func (c *contractFake) Drop(*testing.T) { c.f.Drop() }

func (c *contractFake) Connections() int {
	n, _, _ := c.f.Stats()
	return n
}

func (c *contractFake) Answer(ev *eventsv1.MessageReceived) *deliveryv1.SendRequested {
	s := ev.GetSource()
	return &deliveryv1.SendRequested{
		Target:          &deliveryv1.Target{Platform: "discord", Account: s.GetAccount(), ChatId: s.GetChatId(), ThreadId: s.GetThreadId(), ReplyToMessageId: ev.GetMessageId()},
		InputMessageIds: []string{ev.GetMessageId()},
	}
}

func (c *contractFake) Sent(_ *testing.T, _ context.Context, target *deliveryv1.Target) []string {
	var out []string
	for _, m := range c.f.Messages(where(target)) {
		if !m.Deleted {
			out = append(out, m.Content)
		}
	}
	return out
}

func (c *contractFake) Reactions(_ *testing.T, _ context.Context, target *deliveryv1.Target, messageID string) []string {
	return c.f.Reactions(target.GetChatId(), messageID)
}

// run starts a gateway on f and returns the bus and a reader of inbound
// events (nil after wait when nothing arrives).
func run(t *testing.T, f *discordfake.Fake, cfg Config) (*bus.Bus, func(wait time.Duration) *eventsv1.MessageReceived) {
	t.Helper()
	return runWith(t, f, cfg, platform.Options{})
}

// runWith is run with runner options (its backoff and lease TTL are set
// short for tests).
func runWith(t *testing.T, f *discordfake.Fake, cfg Config, opts platform.Options) (*bus.Bus, func(wait time.Duration) *eventsv1.MessageReceived) {
	t.Helper()
	b := bustest.New(t, bustest.EmbeddedURL(t))
	cfg.BotToken, cfg.APIBaseURL = f.Token, f.URL()
	if opts.Backoff == nil {
		opts.Backoff = platform.Schedule(10 * time.Millisecond)
	}
	opts.LeaseTTL = time.Second
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
	})
	platformtest.WaitFor(t, "the gateway to connect", func() bool {
		st, _ := s.Runner().State()
		return st == platform.StateConnected
	})
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
	return b, func(wait time.Duration) *eventsv1.MessageReceived {
		select {
		case m := <-msgs:
			ev := &eventsv1.MessageReceived{}
			if err := proto.Unmarshal(m.Data(), ev); err != nil {
				t.Fatal(err)
			}
			return ev
		case <-time.After(wait):
			return nil
		}
	}
}

// A resume replays what was missed while disconnected, plus (as Discord
// may) an event that was already published: each reaches the bus once.
func TestResumeReplayPublishesOnce(t *testing.T) {
	t.Parallel()
	f := newFake(t)
	_, next := run(t, f, Config{})
	ctx := context.Background()
	msg := func(text string) discordfake.MessageCreate {
		return discordfake.MessageCreate{ID: f.NewID(), ChannelID: channel, GuildID: guild, AuthorID: user, Content: text}
	}
	a := msg("a")
	if err := f.Dispatch(ctx, "MESSAGE_CREATE", a.Payload()); err != nil {
		t.Fatal(err)
	}
	if ev := next(20 * time.Second); ev.GetEventId() != a.ID {
		t.Fatalf("got %v, want %s", ev, a.ID)
	}
	f.ReplayOverlap(1)
	f.Drop()
	b, c := msg("b"), msg("c")
	for _, m := range []discordfake.MessageCreate{b, c} {
		if err := f.Dispatch(ctx, "MESSAGE_CREATE", m.Payload()); err != nil {
			t.Fatal(err)
		}
	}
	for _, want := range []string{b.ID, c.ID} {
		if ev := next(20 * time.Second); ev.GetEventId() != want {
			t.Fatalf("after the resume got %v, want %s", ev, want)
		}
	}
	sentinel := msg("sentinel")
	if err := f.Dispatch(ctx, "MESSAGE_CREATE", sentinel.Payload()); err != nil {
		t.Fatal(err)
	}
	if ev := next(20 * time.Second); ev.GetEventId() != sentinel.ID {
		t.Fatalf("got %v, want the sentinel %s (a replayed event was published twice)", ev, sentinel.ID)
	}
	if _, identifies, resumes := f.Stats(); identifies != 1 || resumes != 1 {
		t.Fatalf("identifies %d resumes %d, want 1 and 1", identifies, resumes)
	}
	if err := f.RequestHeartbeat(ctx); err != nil {
		t.Fatal(err)
	}
}

// A dropped connection (or Discord's op 7 reconnect) is resumed at once,
// not after the runner's reconnect backoff (here a minute) with the bot
// deaf; what came meanwhile is replayed by the resume.
func TestDropResumesAtOnce(t *testing.T) {
	t.Parallel()
	f := newFake(t)
	_, next := runWith(t, f, Config{}, platform.Options{Backoff: platform.Schedule(time.Minute)})
	ctx := context.Background()
	for i := range 2 {
		f.Drop()
		m := discordfake.MessageCreate{ID: f.NewID(), ChannelID: channel, GuildID: guild, AuthorID: user, Content: fmt.Sprint("after drop ", i)}
		if err := f.Dispatch(ctx, "MESSAGE_CREATE", m.Payload()); err != nil {
			t.Fatal(err)
		}
		if ev := next(10 * time.Second); ev.GetEventId() != m.ID {
			t.Fatalf("after drop %d got %v, want %s within 10 s", i, ev, m.ID)
		}
	}
	if _, identifies, resumes := f.Stats(); identifies != 1 || resumes != 2 {
		t.Fatalf("identifies %d resumes %d, want 1 and 2", identifies, resumes)
	}
}

func TestFilters(t *testing.T) {
	t.Parallel()
	f := newFake(t)
	_, next := run(t, f, Config{AllowedChannels: []string{channel, "900000000000000010"}, IgnoredChannels: []string{"900000000000000010"}, AllowedRoles: []string{"R1"}})
	ctx := context.Background()
	other, ignored := "900000000000000009", "900000000000000010"
	f.AddChannel(other, discordfake.TypeGuildText, guild, "")
	f.AddChannel(ignored, discordfake.TypeGuildText, guild, "")
	for _, m := range []discordfake.MessageCreate{
		{ID: f.NewID(), ChannelID: other, GuildID: guild, AuthorID: user, Content: "wrong channel", Roles: []string{"R1"}},
		{ID: f.NewID(), ChannelID: ignored, GuildID: guild, AuthorID: user, Content: "ignored channel", Roles: []string{"R1"}},
		{ID: f.NewID(), ChannelID: channel, GuildID: guild, AuthorID: "77", AuthorBot: true, Content: "a bot", Roles: []string{"R1"}},
		{ID: f.NewID(), ChannelID: channel, GuildID: guild, AuthorID: f.BotID, Content: "myself", Roles: []string{"R1"}},
	} {
		if err := f.Dispatch(ctx, "MESSAGE_CREATE", m.Payload()); err != nil {
			t.Fatal(err)
		}
	}
	ok := discordfake.MessageCreate{ID: f.NewID(), ChannelID: thread, GuildID: guild, AuthorID: user, Content: "in an allowed channel's thread", Roles: []string{"R1"}}
	if err := f.Dispatch(ctx, "MESSAGE_CREATE", ok.Payload()); err != nil {
		t.Fatal(err)
	}
	if ev := next(20 * time.Second); ev.GetEventId() != ok.ID || !ev.GetTransportAuthenticated() {
		t.Fatalf("got %v, want only %s, authorized by its role", ev, ok.ID)
	}
}

// DISCORD_ALLOW_BOTS: other bots' messages reach the bus marked is_bot
// ("mentions": only those that mention this bot), for the router's
// allow_bots to admit; the bot's own messages never do, whatever the
// mode (answering them would loop).
func TestOtherBots(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	const other = "400000000000000077"
	for _, c := range []struct {
		mode string
		// sent are dispatched in order; want are the ids that reach the
		// bus, in order.
		sent func(f *discordfake.Fake) []discordfake.MessageCreate
		want []int
	}{
		{mode: "", sent: func(f *discordfake.Fake) []discordfake.MessageCreate {
			return []discordfake.MessageCreate{
				{ID: f.NewID(), ChannelID: channel, GuildID: guild, AuthorID: other, AuthorBot: true, Content: "<@" + f.BotID + "> hi", Mentions: []string{f.BotID}},
				{ID: f.NewID(), ChannelID: channel, GuildID: guild, AuthorID: user, Content: "a person"},
			}
		}, want: []int{1}},
		{mode: "mentions", sent: func(f *discordfake.Fake) []discordfake.MessageCreate {
			return []discordfake.MessageCreate{
				{ID: f.NewID(), ChannelID: channel, GuildID: guild, AuthorID: other, AuthorBot: true, Content: "chatter"},
				{ID: f.NewID(), ChannelID: channel, GuildID: guild, AuthorID: f.BotID, AuthorBot: true, Content: "<@" + f.BotID + "> myself", Mentions: []string{f.BotID}},
				{ID: f.NewID(), ChannelID: channel, GuildID: guild, AuthorID: other, AuthorBot: true, Content: "<@" + f.BotID + "> hi", Mentions: []string{f.BotID}},
			}
		}, want: []int{2}},
		{mode: "all", sent: func(f *discordfake.Fake) []discordfake.MessageCreate {
			return []discordfake.MessageCreate{
				{ID: f.NewID(), ChannelID: channel, GuildID: guild, AuthorID: f.BotID, AuthorBot: true, Content: "my own answer"},
				{ID: f.NewID(), ChannelID: channel, GuildID: guild, AuthorID: other, AuthorBot: true, Content: "chatter"},
				{ID: f.NewID(), ChannelID: dmChan, AuthorID: other, AuthorBot: true, Content: "a bot's DM"},
			}
		}, want: []int{1, 2}},
	} {
		t.Run("mode "+c.mode, func(t *testing.T) {
			t.Parallel()
			f := newFake(t)
			// Every channel message counts, so only the bot rule filters.
			_, next := run(t, f, Config{AllowBots: c.mode, FreeResponseChannels: []string{"*"}})
			sent := c.sent(f)
			for _, m := range sent {
				if err := f.Dispatch(ctx, "MESSAGE_CREATE", m.Payload()); err != nil {
					t.Fatal(err)
				}
			}
			for _, i := range c.want {
				ev := next(20 * time.Second)
				if ev.GetEventId() != sent[i].ID {
					t.Fatalf("got %v, want %s (%q)", ev, sent[i].ID, sent[i].Content)
				}
				if ev.GetSource().GetIsBot() != sent[i].AuthorBot || ev.GetSource().GetUserId() != sent[i].AuthorID {
					t.Fatalf("source %v, want user %s marked is_bot %v", ev.GetSource(), sent[i].AuthorID, sent[i].AuthorBot)
				}
			}
			// The messages are handled in order: a person's message
			// after them is the next on the bus, nothing else came.
			last := discordfake.MessageCreate{ID: f.NewID(), ChannelID: channel, GuildID: guild, AuthorID: user, Content: "the end"}
			if err := f.Dispatch(ctx, "MESSAGE_CREATE", last.Payload()); err != nil {
				t.Fatal(err)
			}
			if ev := next(20 * time.Second); ev.GetEventId() != last.ID {
				t.Fatalf("got %v, want only %s after the bots' messages", ev, last.ID)
			}
		})
	}
}

// With Hermes's defaults a guild message is answered when it mentions
// the bot, and so is everything in the thread that grew from it; other
// channel and thread messages are not published.
func TestMentionGating(t *testing.T) {
	t.Parallel()
	f := newFake(t)
	cfg := DefaultConfig()
	_, next := run(t, f, cfg)
	ctx := context.Background()
	dispatch := func(m discordfake.MessageCreate) {
		t.Helper()
		if err := f.Dispatch(ctx, "MESSAGE_CREATE", m.Payload()); err != nil {
			t.Fatal(err)
		}
	}
	dispatch(discordfake.MessageCreate{ID: f.NewID(), ChannelID: channel, GuildID: guild, AuthorID: user, Content: "chatter"})
	mention := discordfake.MessageCreate{ID: f.NewID(), ChannelID: channel, GuildID: guild, AuthorID: user, Content: "<@" + f.BotID + "> help", Mentions: []string{f.BotID}}
	dispatch(mention)
	first := next(20 * time.Second)
	if src := first.GetSource(); first.GetEventId() != mention.ID || src.GetChatId() != mention.ID || src.GetThreadId() != mention.ID || src.GetParentChatId() != channel {
		t.Fatalf("got %v, want the mention, in the thread opened from it", first)
	}
	// As in Hermes, the gateway opened the thread (named after the
	// message) before publishing: it has the message's id, and the bot
	// follows it.
	if ms := f.Channel(mention.ID); ms["parent_id"] != channel || ms["name"] != "help" {
		t.Fatalf("thread %v, want one named after the message, in %s", ms, channel)
	}
	dispatch(discordfake.MessageCreate{ID: f.NewID(), ChannelID: thread, GuildID: guild, AuthorID: user, Content: "another thread"})
	follow := discordfake.MessageCreate{ID: f.NewID(), ChannelID: mention.ID, GuildID: guild, AuthorID: user, Content: "and then?"}
	dispatch(follow)
	second := next(20 * time.Second)
	if second.GetEventId() != follow.ID {
		t.Fatalf("got %v, want only the follow-up in the bot's thread", second)
	}
	// The message that opened the thread and the follow-up are one
	// session, keyed as Hermes keys them.
	k1, k2 := sessionkey.Build(first.GetSource(), sessionkey.DefaultOptions()), sessionkey.Build(second.GetSource(), sessionkey.DefaultOptions())
	if want := "agent:main:discord:thread:" + mention.ID + ":" + mention.ID; k1 != want || k2 != want {
		t.Fatalf("keys %q and %q, want both %q", k1, k2, want)
	}
}

// Where the bot may not open threads, the mention keeps
// prospective_thread_id (Hermes's inline fallback): the answer goes to
// the channel.
func TestAutoThreadRefused(t *testing.T) {
	t.Parallel()
	f := newFake(t)
	f.DenyThreads(channel)
	_, next := run(t, f, DefaultConfig())
	mention := discordfake.MessageCreate{ID: f.NewID(), ChannelID: channel, GuildID: guild, AuthorID: user, Content: "<@" + f.BotID + "> help", Mentions: []string{f.BotID}}
	if err := f.Dispatch(context.Background(), "MESSAGE_CREATE", mention.Payload()); err != nil {
		t.Fatal(err)
	}
	ev := next(20 * time.Second)
	if src := ev.GetSource(); ev.GetEventId() != mention.ID || src.GetChatId() != channel || src.GetChatType() != "group" || src.GetProspectiveThreadId() != mention.ID {
		t.Fatalf("got %v, want the mention in its channel, with prospective_thread_id", ev)
	}
}

func TestSends(t *testing.T) {
	t.Parallel()
	f := newFake(t)
	b, _ := run(t, f, Config{})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	send := sendOf(ctx, t, b)
	f.RateLimitNext(250 * time.Millisecond)
	req := &deliveryv1.SendRequested{Op: deliveryv1.SendOp_SEND_OP_SEND, IdempotencyKey: "k1", Text: "hi",
		Target: &deliveryv1.Target{Platform: "discord", ChatId: channel, ReplyToMessageId: "700000000000000001"}}
	if r := send(req); r.GetOk() || r.GetErrorClass() != deliveryv1.ErrorClass_ERROR_CLASS_RATE_LIMITED || r.GetRetryAfterMs() != 250 {
		t.Fatalf("receipt %v, want RATE_LIMITED after 250 ms", r)
	}
	if r := send(req); !r.GetOk() {
		t.Fatalf("retry receipt %v, want ok", r)
	}
	if ms := f.Messages(channel); len(ms) != 1 || ms[0].ReplyTo != "700000000000000001" {
		t.Fatalf("posted %+v, want one reply to the user's message", ms)
	}
	long := proto.Clone(req).(*deliveryv1.SendRequested)
	long.IdempotencyKey, long.Text = "k2", strings.Repeat("é", 2001)
	if r := send(long); r.GetErrorClass() != deliveryv1.ErrorClass_ERROR_CLASS_PERMANENT {
		t.Fatalf("2001 characters: receipt %v, want PERMANENT", r)
	}
	// A prospective auto-thread: the thread is opened from the message.
	prospective := &deliveryv1.SendRequested{Op: deliveryv1.SendOp_SEND_OP_SEND, IdempotencyKey: "k3", Text: "in the new thread",
		Target: &deliveryv1.Target{Platform: "discord", ChatId: channel, ThreadId: "700000000000000005"}}
	if r := send(prospective); !r.GetOk() {
		t.Fatalf("send into a prospective thread: %v", r)
	}
	if ms := f.Messages("700000000000000005"); len(ms) != 1 {
		t.Fatalf("thread has %+v, want the reply", ms)
	}
	// Where the bot may not open threads, the answer goes to the channel,
	// replying to the message the thread was to grow from.
	f.AddChannel("900000000000000009", discordfake.TypeGuildText, guild, "")
	f.DenyThreads("900000000000000009")
	inline := &deliveryv1.SendRequested{Op: deliveryv1.SendOp_SEND_OP_SEND, IdempotencyKey: "k5", Text: "inline",
		Target: &deliveryv1.Target{Platform: "discord", ChatId: "900000000000000009", ThreadId: "700000000000000006", ReplyToMessageId: "700000000000000006"}}
	if r := send(inline); !r.GetOk() {
		t.Fatalf("send where threads are denied: %v", r)
	}
	if ms := f.Messages("900000000000000009"); len(ms) != 1 || ms[0].Content != "inline" || ms[0].ReplyTo != "700000000000000006" {
		t.Fatalf("channel has %+v, want the answer replying to the message", ms)
	}
	// Typing for a thread not opened yet shows in its channel.
	f.AddChannel("900000000000000008", discordfake.TypeGuildText, guild, "")
	pending := &deliveryv1.SendRequested{Op: deliveryv1.SendOp_SEND_OP_TYPING, Target: &deliveryv1.Target{Platform: "discord", ChatId: "900000000000000008", ThreadId: "700000000000000007"}}
	if r := send(pending); !r.GetOk() || f.Typing("900000000000000008") != 1 {
		t.Fatalf("typing before the thread opens: receipt %v, count %d", r, f.Typing("900000000000000008"))
	}
	typing := &deliveryv1.SendRequested{Op: deliveryv1.SendOp_SEND_OP_TYPING, Target: &deliveryv1.Target{Platform: "discord", ChatId: thread}}
	if r := send(typing); !r.GetOk() || f.Typing(thread) != 1 {
		t.Fatalf("typing receipt %v, count %d", r, f.Typing(thread))
	}
	missing := &deliveryv1.SendRequested{Op: deliveryv1.SendOp_SEND_OP_SEND, IdempotencyKey: "k4", Text: "x", Target: &deliveryv1.Target{Platform: "discord", ChatId: "1"}}
	if r := send(missing); r.GetErrorClass() != deliveryv1.ErrorClass_ERROR_CLASS_PERMANENT {
		t.Fatalf("unknown channel: receipt %v, want PERMANENT", r)
	}
	_ = fmt.Sprint()
}

// A send split in pieces (its picture's link takes the text over
// Discord's 2,000 characters) into a prospective auto-thread the bot may
// not open falls back to the channel once: the thread is tried, and
// refused, for the first piece only; the later pieces go straight to
// the channel the first went to.
func TestThreadFallbackOncePerSplitSend(t *testing.T) {
	t.Parallel()
	f := newFake(t)
	b, _ := run(t, f, Config{})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	const ch, from = "900000000000000019", "700000000000000016"
	f.AddChannel(ch, discordfake.TypeGuildText, guild, "")
	f.DenyThreads(ch)
	link := "https://example.test/chart.png"
	req := &deliveryv1.SendRequested{Op: deliveryv1.SendOp_SEND_OP_SEND, IdempotencyKey: "split", Text: strings.Repeat("word ", 398),
		Attachments: []*eventsv1.Attachment{{Kind: eventsv1.AttachmentKind_ATTACHMENT_KIND_IMAGE, Location: &eventsv1.Attachment_Url{Url: link}}},
		Target:      &deliveryv1.Target{Platform: "discord", ChatId: ch, ThreadId: from, ReplyToMessageId: from}}
	r := &deliveryv1.SendReceipt{}
	if err := b.Request(ctx, b.Topology().SendSubject("discord"), req, r); err != nil {
		t.Fatal(err)
	}
	if !r.GetOk() {
		t.Fatalf("receipt %v, want ok", r)
	}
	if ms := f.Messages(ch); len(ms) != 2 || ms[0].ReplyTo != from || !strings.Contains(ms[1].Content, link) {
		t.Fatalf("channel has %+v, want the text replying to the message, then the link", ms)
	}
	var starts, intoThread int
	for _, rq := range f.Requests() {
		switch {
		case strings.HasPrefix(rq, "POST /api/v9/channels/"+ch+"/messages/"+from+"/threads"):
			starts++
		case strings.HasPrefix(rq, "POST /api/v9/channels/"+from+"/messages"):
			intoThread++
		}
	}
	if starts != 1 || intoThread != 1 {
		t.Fatalf("%d thread starts and %d posts into the thread, want the fallback once (1 and 1): %q", starts, intoThread, f.Requests())
	}
}

// A message in a channel the bot cannot look up (deleted, or access lost:
// Discord answers 404 or 403) is rejected; the messages after it are
// still read and published.
func TestUnknownChannelIsRejected(t *testing.T) {
	t.Parallel()
	f := newFake(t)
	_, next := run(t, f, Config{})
	ctx := context.Background()
	gone := discordfake.MessageCreate{ID: f.NewID(), ChannelID: "900000000000000404", GuildID: guild, AuthorID: user, Content: "in a deleted thread"}
	after := discordfake.MessageCreate{ID: f.NewID(), ChannelID: channel, GuildID: guild, AuthorID: user, Content: "next"}
	for _, m := range []discordfake.MessageCreate{gone, after} {
		if err := f.Dispatch(ctx, "MESSAGE_CREATE", m.Payload()); err != nil {
			t.Fatal(err)
		}
	}
	if ev := next(20 * time.Second); ev.GetEventId() != after.ID {
		t.Fatalf("got %v, want %s", ev, after.ID)
	}
}

// A message in a channel whose lookup answers 200 with the body null (a
// broken answer that discordgo hands over as a nil channel) is handled
// as in a channel that is no thread, and published; the lookup once
// panicked on it and the message was skipped. The next message there
// asks again.
func TestNullChannelLookupIsHandled(t *testing.T) {
	t.Parallel()
	f := newFake(t)
	_, next := run(t, f, Config{})
	ctx := context.Background()
	broken := "900000000000000099"
	f.NullChannel(broken)
	for _, text := range []string{"in a channel that answers null", "again"} {
		m := discordfake.MessageCreate{ID: f.NewID(), ChannelID: broken, GuildID: guild, AuthorID: user, Content: text}
		if err := f.Dispatch(ctx, "MESSAGE_CREATE", m.Payload()); err != nil {
			t.Fatal(err)
		}
		ev := next(20 * time.Second)
		if ev.GetEventId() != m.ID || ev.GetText() != text || ev.GetSource().GetChatId() != broken ||
			ev.GetSource().GetChatType() != "group" || ev.GetSource().GetThreadId() != "" {
			t.Fatalf("got %v, want %s published as a channel message", ev, m.ID)
		}
	}
}

// discordgo pastes channel and message ids into REST paths unescaped, so a
// target id such as "1/../../users/@me" would make the bot call another
// endpoint with its token. An id that is not a snowflake fails the send
// permanently (delivery does not retry it) before any request is made.
func TestNonSnowflakeIDsFailWithoutARequest(t *testing.T) {
	t.Parallel()
	f := newFake(t)
	b, _ := run(t, f, Config{})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	target := func(chat, thread string) *deliveryv1.Target {
		return &deliveryv1.Target{Platform: "discord", ChatId: chat, ThreadId: thread}
	}
	const (
		send   = deliveryv1.SendOp_SEND_OP_SEND
		edit   = deliveryv1.SendOp_SEND_OP_EDIT
		del    = deliveryv1.SendOp_SEND_OP_DELETE
		typing = deliveryv1.SendOp_SEND_OP_TYPING
	)
	for i, tc := range []struct {
		name      string
		op        deliveryv1.SendOp
		target    *deliveryv1.Target
		messageID string
	}{
		{name: "send, chat id climbing out of channels", op: send, target: target("1/../../users/@me", "")},
		{name: "send, chat id ending the path with a query", op: send, target: target("123/threads?", "")},
		{name: "send, thread id climbing out of channels", op: send, target: target(channel, "1/../../users/@me")},
		{name: "send, prospective thread under a bad chat id", op: send, target: target("1/../../guilds/1", "700000000000000005")},
		{name: "send, percent-encoded slash", op: send, target: target("1%2F..%2Fusers", "")},
		{name: "send, trailing newline", op: send, target: target(channel+"\n", "")},
		{name: "send, 21 digits", op: send, target: target("123456789012345678901", "")},
		{name: "send, non-ASCII digits", op: send, target: target("１２３", "")},
		{name: "edit, message id climbing out of the channel", op: edit, target: target(channel, ""), messageID: "1/../../../users/@me"},
		{name: "edit, bad chat id", op: edit, target: target("1/../../users/@me", ""), messageID: "700000000000000001"},
		{name: "delete, message id with a query", op: del, target: target(channel, ""), messageID: "1?reason=x"},
		{name: "delete, bad thread id", op: del, target: target(channel, "../../gateway"), messageID: "700000000000000001"},
		{name: "typing, bad chat id", op: typing, target: target("#", "")},
		{name: "typing, bad thread id", op: typing, target: target(channel, "1/../../users/@me")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req := &deliveryv1.SendRequested{Op: tc.op, IdempotencyKey: fmt.Sprintf("bad-id-%d", i), Text: "x",
				Target: tc.target, MessageId: tc.messageID}
			before := len(f.Requests())
			r := &deliveryv1.SendReceipt{}
			if err := b.Request(ctx, b.Topology().SendSubject("discord"), req, r); err != nil {
				t.Fatal(err)
			}
			if r.GetOk() || r.GetErrorClass() != deliveryv1.ErrorClass_ERROR_CLASS_PERMANENT {
				t.Errorf("receipt %v, want PERMANENT", r)
			}
			if got := f.Requests()[before:]; len(got) != 0 {
				t.Errorf("requests reached Discord: %q", got)
			}
		})
	}
}

// The agent's media (a media reply, a proactive send with files) reach
// the channel: an http(s) URL as its link after the caption, bytes (a
// data: URL, or kept in the attachment store) uploaded with the message.
// They were refused as an empty message and never shown.
func TestAgentMedia(t *testing.T) {
	t.Parallel()
	f := newFake(t)
	cfg := attachment.Config{Enabled: true, MaxBytes: 64 << 10, StoreBytes: 8 << 20}
	b, _ := runWith(t, f, Config{}, platform.Options{Attachments: cfg})
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = b.JetStream().DeleteObjectStore(ctx, b.Topology().Stream(attachment.Bucket))
	})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	img := platformtest.NoisePNG(t, 16, 16)
	ref := attachment.Name("discord", f.BotID, "agent-media", 0)
	if _, err := attachment.New(b.JetStream(), b.Topology(), cfg).Keep(ctx, ref, "image/png", bytes.NewReader(img)); err != nil {
		t.Fatal(err)
	}
	n := 0
	send := func(a *eventsv1.Attachment) (*deliveryv1.SendReceipt, discordfake.Message) {
		t.Helper()
		n++
		req := &deliveryv1.SendRequested{Op: deliveryv1.SendOp_SEND_OP_SEND, IdempotencyKey: fmt.Sprintf("media%d", n),
			Target: &deliveryv1.Target{Platform: "discord", ChatId: channel}, Attachments: []*eventsv1.Attachment{a}}
		r := &deliveryv1.SendReceipt{}
		if err := b.Request(ctx, b.Topology().SendSubject("discord"), req, r); err != nil {
			t.Fatal(err)
		}
		ms := f.Messages(channel)
		if !r.GetOk() || len(ms) != n {
			t.Fatalf("receipt %v, posted %+v", r, ms)
		}
		return r, ms[n-1]
	}
	if _, m := send(&eventsv1.Attachment{Kind: eventsv1.AttachmentKind_ATTACHMENT_KIND_IMAGE, Caption: "the chart",
		Location: &eventsv1.Attachment_Url{Url: "https://example.com/chart.png"}}); m.Content != "the chart\nhttps://example.com/chart.png" || len(m.Files) != 0 {
		t.Fatalf("link: posted %+v", m)
	}
	dataURL := "data:image/png;base64," + base64.StdEncoding.EncodeToString(img)
	if _, m := send(&eventsv1.Attachment{Kind: eventsv1.AttachmentKind_ATTACHMENT_KIND_IMAGE,
		Location: &eventsv1.Attachment_Url{Url: dataURL}}); len(m.Files) != 1 || !bytes.Equal(m.Files[0].Data, img) || m.Files[0].ContentType != "image/png" {
		t.Fatalf("data: URL: posted %+v", m)
	}
	if _, m := send(&eventsv1.Attachment{Kind: eventsv1.AttachmentKind_ATTACHMENT_KIND_DOCUMENT, FileName: "chart.png", Caption: "kept",
		Location: &eventsv1.Attachment_BytesRef{BytesRef: ref}}); m.Content != "kept" || len(m.Files) != 1 || m.Files[0].Name != "chart.png" || !bytes.Equal(m.Files[0].Data, img) {
		t.Fatalf("kept bytes: posted %+v", m)
	}
}

// A media send whose text, captions and links together are over
// Discord's 2,000 characters (delivery cut the text alone to 2,000)
// still arrives whole: as several messages, the first replying to the
// user's, the files with the last, rather than Discord refusing the one
// and the send dead-lettering. A retry after a later message failed
// posts only the rest.
func TestLongMediaSend(t *testing.T) {
	t.Parallel()
	f := newFake(t)
	b, _ := run(t, f, Config{})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	img := platformtest.NoisePNG(t, 4, 4)
	text := strings.TrimSpace(strings.Repeat("a long answer. ", 133)) // 1,994 characters
	link := "https://example.com/chart.png"
	req := &deliveryv1.SendRequested{Op: deliveryv1.SendOp_SEND_OP_SEND, IdempotencyKey: "long-media", Text: text,
		Target: &deliveryv1.Target{Platform: "discord", ChatId: channel, ReplyToMessageId: "700000000000000001"},
		Attachments: []*eventsv1.Attachment{
			{Kind: eventsv1.AttachmentKind_ATTACHMENT_KIND_IMAGE, Caption: "the chart", Location: &eventsv1.Attachment_Url{Url: link}},
			{Kind: eventsv1.AttachmentKind_ATTACHMENT_KIND_IMAGE, Location: &eventsv1.Attachment_Url{Url: "data:image/png;base64," + base64.StdEncoding.EncodeToString(img)}},
		}}
	f.RateLimitAfter(1, 100*time.Millisecond)
	for attempt, want := range []deliveryv1.ErrorClass{deliveryv1.ErrorClass_ERROR_CLASS_RATE_LIMITED, deliveryv1.ErrorClass_ERROR_CLASS_UNSPECIFIED} {
		r := &deliveryv1.SendReceipt{}
		if err := b.Request(ctx, b.Topology().SendSubject("discord"), req, r); err != nil {
			t.Fatal(err)
		}
		if r.GetErrorClass() != want || r.GetOk() != (attempt == 1) {
			t.Fatalf("attempt %d: receipt %v, want the second message rate limited, then the rest sent", attempt+1, r)
		}
	}
	ms := f.Messages(channel)
	var shown []string
	for _, m := range ms {
		if n := len([]rune(m.Content)); n > 2000 {
			t.Errorf("a message of %d characters", n)
		}
		shown = append(shown, m.Content)
	}
	if got, want := strings.Join(shown, "\n"), text+"\nthe chart\n"+link; got != want {
		t.Fatalf("channel shows %q, want %q", got, want)
	}
	if len(ms) != 2 || ms[0].ReplyTo != "700000000000000001" || ms[1].ReplyTo != "" || len(ms[0].Files) != 0 || len(ms[1].Files) != 1 || !bytes.Equal(ms[1].Files[0].Data, img) {
		t.Fatalf("posted %+v, want two messages, the first replying, the file with the last", ms)
	}
}

// sendOf asks the gateway b runs for sends, as delivery does, and returns
// their receipts.
func sendOf(ctx context.Context, t *testing.T, b *bus.Bus) func(*deliveryv1.SendRequested) *deliveryv1.SendReceipt {
	return func(req *deliveryv1.SendRequested) *deliveryv1.SendReceipt {
		t.Helper()
		r := &deliveryv1.SendReceipt{}
		if err := b.Request(ctx, b.Topology().SendSubject("discord"), req, r); err != nil {
			t.Fatal(err)
		}
		return r
	}
}

// Files that together are over Discord's 25 MiB a create message takes
// (each within the 10 MiB a file may be) go as several messages, each
// request within it, the text once, with the first: one request with
// them all was refused whole, 413, and the answer's files were lost. A
// retry after a later message's answer was lost shows each message once.
func TestUploadsOverARequestGoAsSeveralMessages(t *testing.T) {
	t.Parallel()
	f := newFake(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var media []*eventsv1.Attachment
	var want [][]byte
	for i := range 3 {
		data := bytes.Repeat([]byte{byte('a' + i)}, 9<<20)
		want = append(want, data)
		media = append(media, &eventsv1.Attachment{Kind: eventsv1.AttachmentKind_ATTACHMENT_KIND_DOCUMENT, FileName: fmt.Sprintf("part%d.bin", i),
			Location: &eventsv1.Attachment_Url{Url: "data:application/octet-stream;base64," + base64.StdEncoding.EncodeToString(data)}})
	}
	req := &deliveryv1.SendRequested{Op: deliveryv1.SendOp_SEND_OP_SEND, IdempotencyKey: "big-files", Text: "the three parts",
		Target: &deliveryv1.Target{Platform: "discord", ChatId: channel, ReplyToMessageId: "700000000000000001"}, Attachments: media}
	id, ms := sendRetriedAfterSecondAnswerLost(t, ctx, f, req)
	if len(ms) < 2 || id != ms[0].ID || ms[0].Content != "the three parts" || ms[0].ReplyTo != "700000000000000001" {
		t.Fatalf("posted %+v (send answered %q), want the text once with the first of several messages", ms, id)
	}
	var got [][]byte
	for i, m := range ms {
		size := 0
		for _, file := range m.Files {
			size += len(file.Data)
			got = append(got, file.Data)
		}
		if i > 0 && m.Content != "" {
			t.Errorf("message %d repeats text %q", i, m.Content)
		}
		if size > 25<<20 {
			t.Errorf("message %d carries %d bytes of files, over a request", i, size)
		}
	}
	if len(got) != len(want) {
		t.Fatalf("%d files shown, want %d", len(got), len(want))
	}
	for i := range want {
		if !bytes.Equal(got[i], want[i]) {
			t.Errorf("file %d differs, or is out of order", i)
		}
	}
}

// sendRetriedAfterSecondAnswerLost sends req, a send of several
// messages, with the answer to its second message lost (a failure to
// retry), sends it again, and returns the retry's message id and the
// channel's messages.
func sendRetriedAfterSecondAnswerLost(t *testing.T, ctx context.Context, f *discordfake.Fake, req *deliveryv1.SendRequested) (string, []discordfake.Message) {
	t.Helper()
	p, err := NewPlatform(ctx, Config{BotToken: f.Token, APIBaseURL: f.URL()}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	f.LoseCreateAnswerAfter(1)
	var se *platform.SendError
	if _, err := p.Send(ctx, req); err == nil || errors.As(err, &se) {
		t.Fatalf("attempt with the second message's answer lost: %v, want a failure to retry", err)
	}
	id, err := p.Send(ctx, req)
	if err != nil {
		t.Fatalf("retry: %v", err)
	}
	return id, f.Messages(req.GetTarget().GetChatId())
}

// More files than the 10 a Discord message takes go as several
// messages, in order, at most 10 each, the text once, with the first:
// a send with more was refused as permanent, and the answer's files
// were lost. A retry after a later message's answer was lost shows each
// file once.
func TestMoreThanTenFilesGoAsSeveralMessages(t *testing.T) {
	t.Parallel()
	f := newFake(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var media []*eventsv1.Attachment
	var want []string
	for i := range 23 {
		data := fmt.Sprintf("page %d", i)
		want = append(want, data)
		media = append(media, &eventsv1.Attachment{Kind: eventsv1.AttachmentKind_ATTACHMENT_KIND_DOCUMENT, FileName: fmt.Sprintf("page%02d.txt", i),
			Location: &eventsv1.Attachment_Url{Url: "data:text/plain;base64," + base64.StdEncoding.EncodeToString([]byte(data))}})
	}
	req := &deliveryv1.SendRequested{Op: deliveryv1.SendOp_SEND_OP_SEND, IdempotencyKey: "many-files", Text: "the pages",
		Target: &deliveryv1.Target{Platform: "discord", ChatId: channel}, Attachments: media}
	id, ms := sendRetriedAfterSecondAnswerLost(t, ctx, f, req)
	if len(ms) != 3 || id != ms[0].ID || ms[0].Content != "the pages" {
		t.Fatalf("posted %+v (send answered %q), want the text once with the first of 3 messages", ms, id)
	}
	var got []string
	for i, m := range ms {
		if len(m.Files) > 10 {
			t.Errorf("message %d carries %d files", i, len(m.Files))
		}
		if i > 0 && m.Content != "" {
			t.Errorf("message %d repeats text %q", i, m.Content)
		}
		for _, file := range m.Files {
			got = append(got, string(file.Data))
		}
	}
	if !slices.Equal(got, want) {
		t.Errorf("files shown %q, want %q", got, want)
	}
}

// A send to a forum (or media) channel (a cron job's or a proactive
// send's chat id), which Discord refuses (400, code 50008: it takes
// posts, not messages), fails once as permanent and says why, so the
// operator can name one of its posts instead; it was refused with
// Discord's "non-text channel" alone, which names no forum.
func TestSendToAForumIsRefusedClearly(t *testing.T) {
	t.Parallel()
	f := newFake(t)
	b, _ := run(t, f, Config{})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for i, typ := range []int{discordfake.TypeGuildForum, discordfake.TypeGuildMedia} {
		forum := "90000000000000020" + strconv.Itoa(i)
		f.AddChannel(forum, typ, guild, "")
		req := &deliveryv1.SendRequested{Op: deliveryv1.SendOp_SEND_OP_SEND, IdempotencyKey: "cron-forum:" + forum, Text: "the daily report",
			Target: &deliveryv1.Target{Platform: "discord", ChatId: forum}}
		r := sendOf(ctx, t, b)(req)
		if r.GetOk() || r.GetErrorClass() != deliveryv1.ErrorClass_ERROR_CLASS_PERMANENT || !strings.Contains(r.GetError(), "forum") {
			t.Errorf("channel type %d: receipt %v, want a permanent failure that names the forum", typ, r)
		}
		if ms := f.Messages(forum); len(ms) != 0 {
			t.Errorf("channel type %d shows %+v", typ, ms)
		}
	}
}

// The files of one send are read into memory before they are posted:
// past maxSendBytes the send fails as permanent, saying so, and posts
// nothing (with no bound on the count of files any more, an answer with
// a hundred 10 MiB files held a gigabyte).
func TestFilesOfOneSendAreBounded(t *testing.T) {
	t.Parallel()
	f := newFake(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	p, err := NewPlatform(ctx, Config{BotToken: f.Token, APIBaseURL: f.URL()}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	p.sendBytes = 1 << 20
	for _, tc := range []struct {
		name  string
		files int
		ok    bool
	}{{"within the bound", 2, true}, {"over it", 3, false}} {
		var media []*eventsv1.Attachment
		for i := range tc.files {
			data := bytes.Repeat([]byte{'x'}, 400<<10)
			media = append(media, &eventsv1.Attachment{Kind: eventsv1.AttachmentKind_ATTACHMENT_KIND_DOCUMENT, FileName: fmt.Sprintf("f%d.bin", i),
				Location: &eventsv1.Attachment_Url{Url: "data:application/octet-stream;base64," + base64.StdEncoding.EncodeToString(data)}})
		}
		chat := channel
		if !tc.ok {
			chat = thread
		}
		_, err := p.Send(ctx, &deliveryv1.SendRequested{Op: deliveryv1.SendOp_SEND_OP_SEND, IdempotencyKey: tc.name, Text: "files",
			Target: &deliveryv1.Target{Platform: "discord", ChatId: chat}, Attachments: media})
		var se *platform.SendError
		switch {
		case tc.ok && err != nil:
			t.Errorf("%s: %v", tc.name, err)
		case !tc.ok && (!errors.As(err, &se) || se.Class != deliveryv1.ErrorClass_ERROR_CLASS_PERMANENT || !strings.Contains(err.Error(), "over 1 MiB")):
			t.Errorf("%s: %v, want a permanent failure naming the bound", tc.name, err)
		case !tc.ok && len(f.Messages(chat)) != 0:
			t.Errorf("%s: posted %d messages, want none", tc.name, len(f.Messages(chat)))
		}
	}
}
