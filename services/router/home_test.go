package router

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/redis/go-redis/v9"
	"google.golang.org/protobuf/proto"

	"github.com/switchboard-chat/switchboard/pkg/bus"
	deliveryv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/delivery/v1"
	eventsv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/events/v1"
	repliesv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/replies/v1"
	turnsv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/turns/v1"
	"github.com/switchboard-chat/switchboard/pkg/redisx"
	"github.com/switchboard-chat/switchboard/pkg/sessionstore"
)

const homeTelegram = "📬 No home channel is set for Telegram. A home channel is where cron job results and cross-platform messages are delivered.\n\nType /sethome to make this chat your home channel, or ignore to skip."

func homeConfig() Config {
	cfg := testConfig()
	cfg.HomeNotice = true
	return cfg
}

// storedHomeNotices are the home notices on the replies stream (what
// delivery reads: the bus keeps a republished one once), by chat.
func (e *env) storedHomeNotices() map[string][]*repliesv1.ReplyEvent {
	e.t.Helper()
	out := map[string][]*repliesv1.ReplyEvent{}
	for _, ev := range e.storedReplies() {
		if ev.GetNotice().GetKind() == "home" {
			out[ev.GetTarget().GetChatId()] = append(out[ev.GetTarget().GetChatId()], ev)
		}
	}
	return out
}

// storedReplies are the events on the replies stream, in the stream's
// order: what delivery reads, in the order it reads them.
func (e *env) storedReplies() []*repliesv1.ReplyEvent {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := e.bus.JetStream().OrderedConsumer(ctx, e.bus.Topology().Stream(bus.StreamReplies), jetstream.OrderedConsumerConfig{})
	if err != nil {
		e.t.Fatal(err)
	}
	var out []*repliesv1.ReplyEvent
	for {
		batch, err := c.FetchNoWait(100)
		if err != nil {
			e.t.Fatal(err)
		}
		n := 0
		for m := range batch.Messages() {
			n++
			ev := &repliesv1.ReplyEvent{}
			if err := proto.Unmarshal(m.Data(), ev); err != nil {
				e.t.Fatal(err)
			}
			out = append(out, ev)
		}
		if n == 0 {
			return out
		}
	}
}

// homeNoticeStored is when the bus stored the home notice to chat (zero:
// none yet).
func (e *env) homeNoticeStored(chat string) time.Time {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := e.bus.JetStream().OrderedConsumer(ctx, e.bus.Topology().Stream(bus.StreamReplies), jetstream.OrderedConsumerConfig{})
	if err != nil {
		e.t.Fatal(err)
	}
	for {
		batch, err := c.FetchNoWait(100)
		if err != nil {
			e.t.Fatal(err)
		}
		n := 0
		for m := range batch.Messages() {
			n++
			var ev repliesv1.ReplyEvent
			if err := proto.Unmarshal(m.Data(), &ev); err != nil {
				e.t.Fatal(err)
			}
			if ev.GetNotice().GetKind() == "home" && ev.GetTarget().GetChatId() == chat {
				md, err := m.Metadata()
				if err != nil {
					e.t.Fatal(err)
				}
				return md.Timestamp
			}
		}
		if n == 0 {
			return time.Time{}
		}
	}
}

// The home notice reaches the reply partition before the turn it comes
// before reaches the workers, on the idle session's fast path too (a
// new conversation's first message, one after /new): the worker's
// answer, which it publishes to the same partition, cannot come before
// it. The notice was published after the turn's start, and a quick
// answer (a fake LLM's, a short one) reached the chat before it.
func TestHomeNoticeBeforeTurn(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.startRouter(homeConfig(), nil, nil)
	w := e.startWorker(nil)
	for _, tc := range []struct{ name, user string }{
		{"new conversation", "alice"},
		{"after /new", "bob"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.name == "after /new" {
				e.ask(tc.user, "/new")
			}
			e.publish(dm(tc.user, "hello"))
			key := "agent:main:telegram:dm:chat-" + tc.user
			var turn *turnsv1.TurnRequested
			waitFor(t, "the turn", func() bool {
				turns, _ := w.snapshot()
				for _, tr := range turns {
					if tr.GetSessionKey() == key {
						turn = tr
					}
				}
				return turn != nil
			})
			var notice time.Time
			waitFor(t, "the home notice", func() bool { notice = e.homeNoticeStored("chat-" + tc.user); return !notice.IsZero() })
			w.mu.Lock()
			stored := w.stored[turn.GetTurnId()]
			w.mu.Unlock()
			if !notice.Before(stored) {
				t.Errorf("home notice stored at %s, the turn at %s: want the notice first", notice.Format(time.StampNano), stored.Format(time.StampNano))
			}
		})
	}
}

// The home notice's read of the home channels, made while the turn's
// start holds a connection of the pool, uses that connection: on
// another, once every connection is held by a start that reads the same
// way (a burst of new conversations, a backlog after a restart), the
// router waited for ever. With a pool of one connection, one message
// shows it.
func TestHomeNoticeWithOneConnection(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	cfg := e.db.Config()
	cfg.MaxConns = 1
	one, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(one.Close)
	db := e.db
	e.db = one
	e.startRouter(homeConfig(), nil, nil)
	e.db = db
	w := e.startWorker(nil)
	e.publish(dm("alice", "hello"))
	waitFor(t, "the turn", func() bool { turns, _ := w.snapshot(); return len(turns) == 1 })
	waitFor(t, "the home notice", func() bool { return !e.homeNoticeStored("chat-alice").IsZero() })
}

// A new conversation's start that fails after its home notice went out
// (the turn's publish, the commit) is rolled back, and the message comes
// back under another session id: the notice it sends again carries the
// message's ids, which the bus takes once. Here the first attempt's
// claim and notice are put in place as it left them.
func TestHomeNoticeOnceAfterFailedStart(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.startRouter(homeConfig(), nil, nil)
	w := e.startWorker(nil)
	ev := dm("alice", "hello")
	event := "telegram:bot1:" + ev.GetEventId()
	key := "agent:main:telegram:dm:chat-alice"
	ctx := context.Background()
	if err := e.rdb.Set(ctx, e.prefix+"home:"+key, "rolled-back-session "+event+homeClaimMark, time.Hour).Err(); err != nil {
		t.Fatal(err)
	}
	first := &repliesv1.ReplyEvent{TurnId: "home:" + event, SessionKey: key, Seq: 1,
		Target: &deliveryv1.Target{Platform: "telegram", Account: "bot1", ChatId: "chat-alice"},
		Body:   &repliesv1.ReplyEvent_Notice{Notice: &repliesv1.Notice{Text: homeTelegram, Kind: "home"}}}
	if _, err := e.bus.Publish(ctx, e.bus.Topology().ReplySubject(key), "home:"+event, first); err != nil {
		t.Fatal(err)
	}
	e.publish(ev)
	waitFor(t, "the turn", func() bool { turns, _ := w.snapshot(); return len(turns) == 1 })
	e.settle()
	if got := e.storedHomeNotices()["chat-alice"]; len(got) != 1 {
		t.Fatalf("%d home notices stored, want the first attempt's alone", len(got))
	}
}

// settle waits until every inbound message is handled, and a moment for
// notices in flight.
func (e *env) settle() {
	e.t.Helper()
	waitFor(e.t, "inbound drained", e.inboundDrained)
	time.Sleep(200 * time.Millisecond)
}

// The first message of each conversation that goes to the agent is
// preceded by Hermes's home channel notice while the platform has none:
// not the next messages, not a command; again after /new; never once a
// home channel is chosen.
func TestHomeNotice(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.startRouter(homeConfig(), nil, nil)
	w := e.startWorker(nil)

	e.publish(dm("alice", "/status"))
	waitFor(t, "the status", func() bool { return len(e.noticesTo("alice")) == 1 })
	// One message after the other's turn: one sent while it runs gets a
	// busy notice too.
	e.publish(dm("alice", "hello"))
	waitFor(t, "the first turn done", func() bool {
		turns, _ := w.snapshot()
		owner, _ := redisx.NewLocker(e.rdb, e.prefix).Owner(context.Background(), "agent:main:telegram:dm:chat-alice")
		return len(turns) == 1 && owner == ""
	})
	e.publish(dm("alice", "again"))
	waitFor(t, "both messages run", func() bool {
		turns, _ := w.snapshot()
		return len(inputsText(turns, "agent:main:telegram:dm:chat-alice")) == 2
	})
	e.settle()
	if got := e.noticesTo("alice"); len(got) != 2 || got[1] != homeTelegram {
		t.Fatalf("notices %q, want the status and then the home notice once", got)
	}
	home := e.storedHomeNotices()["chat-alice"][0]
	turns, _ := w.snapshot()
	if home.GetTarget().GetReplyToMessageId() != turns[0].GetInputs()[0].GetMessageId() || home.GetSessionKey() != turns[0].GetSessionKey() ||
		home.GetTurnId() != "home:telegram:bot1:"+turns[0].GetInputs()[0].GetEventId() || home.GetGeneration() != turns[0].GetGeneration() {
		t.Errorf("home notice %v, want it to answer the first message of the turn's conversation %v", home, turns[0])
	}

	// A new conversation hears it again.
	if got := e.ask("alice", "/new"); !strings.Contains(got, "New session") {
		t.Fatalf("/new: %q", got)
	}
	e.publish(dm("alice", "after new"))
	e.settle()
	if n := e.countNotices("alice", "No home channel"); n != 2 {
		t.Fatalf("%d home notices after /new and a message, want 2", n)
	}

	// /sethome on any chat of the platform stops it, for everyone.
	e.ask("bob", "/sethome")
	e.publish(dm("bob", "hi"))
	if got := e.ask("alice", "/new"); !strings.Contains(got, "New session") {
		t.Fatalf("/new: %q", got)
	}
	e.publish(dm("alice", "with a home"))
	e.settle()
	if n, m := e.countNotices("alice", "No home channel"), e.countNotices("bob", "No home channel"); n != 2 || m != 0 {
		t.Fatalf("home notices: alice %d, bob %d; want no more once telegram has a home", n, m)
	}
}

// Who hears it: not where the operator configured the home, not where
// router.home_notice is off, not on the API, not a sender authorized by
// the transport (Discord's roles), not a non-admin where admins are
// listed (/sethome is theirs); on Slack it names !sethome, and a message
// left unmarked by Slack's gateway stays unmarked.
func TestHomeNoticeAudience(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		off    bool
		admins []string
		edit   func(*eventsv1.MessageReceived)
		want   string // the notice's text; "" for none
	}{
		{name: "telegram", want: homeTelegram},
		{name: "configured home", edit: func(ev *eventsv1.MessageReceived) { ev.Source.Platform = "discord" }},
		{name: "switched off", off: true},
		{name: "api", edit: func(ev *eventsv1.MessageReceived) { ev.Source.Platform, ev.TransportAuthenticated = "api", true }},
		{name: "authorized by a role", edit: func(ev *eventsv1.MessageReceived) { ev.TransportAuthenticated = true }},
		{name: "not an admin", admins: []string{"bob"}},
		{name: "an admin", admins: []string{"alice"}, want: homeTelegram},
		{name: "slack", edit: func(ev *eventsv1.MessageReceived) {
			ev.Source.Platform, ev.Source.ChatType, ev.NoReaction = "slack", "group", true
		}, want: "📬 No home channel is set for Slack. A home channel is where cron job results and cross-platform messages are delivered.\n\nType !sethome to make this chat your home channel, or ignore to skip."},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			e.homes = func(platform string) string { return map[string]string{"discord": "42"}[platform] }
			cfg := homeConfig()
			cfg.HomeNotice = !tc.off
			if tc.admins != nil {
				cfg.Admins = map[string][]string{"telegram": tc.admins}
			}
			e.startRouter(cfg, nil, nil)
			w := e.startWorker(nil)
			ev := dm("alice", "hello")
			if tc.edit != nil {
				tc.edit(ev)
			}
			e.publish(ev)
			waitFor(t, "the turn", func() bool { turns, _ := w.snapshot(); return len(turns) == 1 })
			e.settle()
			got := e.noticesTo("alice")
			if tc.want == "" {
				if len(got) != 0 {
					t.Fatalf("notices %q, want none", got)
				}
				return
			}
			if len(got) != 1 || got[0] != tc.want {
				t.Fatalf("notices %q, want %q", got, tc.want)
			}
			n := e.storedHomeNotices()["chat-alice"][0]
			if want := []string{ev.GetMessageId()}; ev.GetNoReaction() != (len(n.GetNoReactionMessageIds()) == 1) || len(n.GetInputMessageIds()) != 1 {
				t.Errorf("notice answers %v, unmarked %v; want %v, unmarked as the message (%v)", n.GetInputMessageIds(), n.GetNoReactionMessageIds(), want, ev.GetNoReaction())
			}
		})
	}
}

// Once per conversation across replicas and restarts: two routers handle
// many users' first messages at once, a platform redelivers some, the
// routers stop and another starts; every user heard it exactly once. A
// message that took the notice and was redelivered before it was
// recorded handled (its router died in between) sends it again under the
// same ids, which the bus keeps once.
func TestHomeNoticeOnceAcrossReplicas(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	cfg := homeConfig()
	const users = 12
	for i := range users {
		cfg.Auth.GatewayAllowedUsers = append(cfg.Auth.GatewayAllowedUsers, fmt.Sprintf("u%02d", i))
	}
	ctx, stop := context.WithCancel(context.Background())
	for _, b := range []*bus.Bus{e.bus, e.secondBus()} {
		s, err := New(cfg, Deps{Bus: b, DB: e.db, Redis: e.rdb, RedisPrefix: e.prefix, Environ: []string{}})
		if err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() { done <- s.Run(ctx) }()
		t.Cleanup(func() { stop(); <-done })
	}
	w := e.startWorker(func(*turnsv1.TurnRequested) { time.Sleep(5 * time.Millisecond) })
	var firsts []*eventsv1.MessageReceived
	for round := range 3 {
		for i := range users {
			ev := dm(fmt.Sprintf("u%02d", i), fmt.Sprintf("message %d", round))
			e.publish(ev)
			if round == 0 {
				firsts = append(firsts, ev)
				// The platform delivers it again (past the bus's window).
				e.publishID(ev, "again:"+ev.EventId)
			}
		}
	}
	waitFor(t, "every message handled", func() bool {
		turns, _ := w.snapshot()
		n := 0
		for _, tr := range turns {
			n += len(tr.GetInputs())
		}
		return n >= 3*users
	})
	e.settle()
	stop()

	// A restart, and the first message of u00 redelivered as if its
	// router had died after the notice, before recording it handled.
	if err := e.rdb.Del(context.Background(), e.prefix+"inbound:telegram:bot1:"+firsts[0].EventId).Err(); err != nil {
		t.Fatal(err)
	}
	e.startRouter(cfg, nil, nil)
	e.publishID(firsts[0], "after-crash:"+firsts[0].EventId)
	for i := range users {
		e.publish(dm(fmt.Sprintf("u%02d", i), "after the restart"))
	}
	e.settle()
	stored := e.storedHomeNotices()
	for i := range users {
		chat := fmt.Sprintf("chat-u%02d", i)
		if n := len(stored[chat]); n != 1 {
			t.Errorf("%s: %d home notices stored, want 1", chat, n)
		}
	}
	if n := e.countNotices("u00", "No home channel"); n > 2 {
		t.Errorf("u00: the home notice was published %d times, want at most twice (once more after the crash)", n)
	}
}

// earlierClaimHome is claimHome of the releases before homeClaimMark,
// as a replica of theirs runs it during an upgrade.
var earlierClaimHome = redis.NewScript(`
local v = redis.call('GET', KEYS[1])
if v then
  local sp = string.find(v, ' ', 1, true)
  if sp and string.sub(v, 1, sp - 1) == ARGV[1] then
    return string.sub(v, sp + 1) == ARGV[2] and 1 or 0
  end
end
redis.call('SET', KEYS[1], ARGV[1] .. ' ' .. ARGV[2], 'PX', ARGV[3])
return 1
`)

// The home notice is told once when a router crash's redelivery of the
// message that took it lands on a replica of another release during an
// upgrade: each release published it under ids of its own (the release
// before 2026-12-06 under the conversation's, "home:<session id>"), so
// the bus and the outbox took the second for another notice.
func TestHomeNoticeOnceAcrossReleases(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	key := "agent:main:telegram:dm:chat-alice"
	// The message's conversation: made by a command, which wants no
	// notice.
	conversation := func(t *testing.T, e *env) string {
		e.ask("alice", "/status")
		sess, err := sessionstore.New(e.db).Get(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		return sess.ID
	}
	t.Run("an earlier release took it", func(t *testing.T) {
		for _, tc := range []struct {
			name    string
			session func(sid string) string // of the earlier attempt
		}{
			{"this conversation", func(sid string) string { return sid }},
			{"a start that failed", func(string) string { return "rolled-back-session" }},
		} {
			t.Run(tc.name, func(t *testing.T) {
				t.Parallel()
				e := newEnv(t)
				e.startRouter(homeConfig(), nil, nil)
				w := e.startWorker(nil)
				sid := tc.session(conversation(t, e))
				ev := dm("alice", "hello")
				event := "telegram:bot1:" + ev.GetEventId()
				// Its replica claimed and told it, then died before
				// recording the message handled.
				if err := e.rdb.Set(ctx, e.prefix+"home:"+key, sid+" "+event, time.Hour).Err(); err != nil {
					t.Fatal(err)
				}
				told := &repliesv1.ReplyEvent{TurnId: "home:" + sid, SessionKey: key, Seq: 1,
					Target: &deliveryv1.Target{Platform: "telegram", Account: "bot1", ChatId: "chat-alice"},
					Body:   &repliesv1.ReplyEvent_Notice{Notice: &repliesv1.Notice{Text: homeTelegram, Kind: "home"}}}
				if _, err := e.bus.Publish(ctx, e.bus.Topology().ReplySubject(key), "home:"+sid, told); err != nil {
					t.Fatal(err)
				}
				e.publish(ev)
				waitFor(t, "the turn", func() bool { turns, _ := w.snapshot(); return len(turns) == 1 })
				e.settle()
				if got := e.storedHomeNotices()["chat-alice"]; len(got) != 1 {
					t.Fatalf("%d home notices stored, want the earlier release's alone", len(got))
				}
				// The next message of the conversation hears it no more.
				next := dm("alice", "and then")
				e.publish(next)
				waitFor(t, "the next turn", func() bool { turns, _ := w.snapshot(); return len(turns) == 2 })
				e.settle()
				if got := e.storedHomeNotices()["chat-alice"]; len(got) != 1 {
					t.Fatalf("%d home notices stored after the next message, want 1", len(got))
				}
			})
		}
	})
	t.Run("an earlier release redelivers", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t)
		e.startRouter(homeConfig(), nil, nil)
		w := e.startWorker(nil)
		sid := conversation(t, e)
		ev := dm("alice", "hello")
		e.publish(ev)
		waitFor(t, "the turn", func() bool { turns, _ := w.snapshot(); return len(turns) == 1 })
		e.settle()
		if got := e.storedHomeNotices()["chat-alice"]; len(got) != 1 {
			t.Fatalf("%d home notices stored, want 1", len(got))
		}
		// The router died before recording the message handled; its
		// redelivery lands on a replica of the earlier release, which
		// tells the notice when its claim says so.
		took, err := earlierClaimHome.Run(ctx, e.rdb, []string{e.prefix + "home:" + key}, sid, "telegram:bot1:"+ev.GetEventId(),
			homeNoticeTTL.Milliseconds()).Int()
		if err != nil {
			t.Fatal(err)
		}
		if took != 0 {
			t.Fatalf("the earlier release's replica would tell the notice again under the conversation's ids")
		}
	})
}
