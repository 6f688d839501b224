package matrix

import (
	"context"
	"strings"
	"testing"
	"time"

	deliveryv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/delivery/v1"
	eventsv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/events/v1"
	"github.com/switchboard-chat/switchboard/pkg/platform"
	"github.com/switchboard-chat/switchboard/pkg/platform/platformtest"
	"github.com/switchboard-chat/switchboard/services/gateway/matrix/matrixfake"
)

const (
	bot   = "@bot:" + matrixfake.Server
	ann   = "@ann:" + matrixfake.Server
	bob   = "@bob:" + matrixfake.Server
	token = "syt_test_token"
	dmRm  = "!dm:" + matrixfake.Server
	team  = "!team:" + matrixfake.Server
)

// fakeRooms gives a fake the rooms the tests use: a DM with Ann and a
// team room with Ann and Bob.
func fakeRooms(f *matrixfake.Fake) {
	f.AddRoom(matrixfake.Room{ID: dmRm, Members: map[string]string{ann: "Ann"}, BotName: "Hermes", Direct: true})
	f.AddRoom(matrixfake.Room{ID: team, Name: "Team", Members: map[string]string{ann: "Ann", bob: "Bob"}, BotName: "Hermes"})
}

// testConfig is a config pointed at f with quick syncs.
func testConfig(f *matrixfake.Fake) Config {
	cfg := DefaultConfig()
	cfg.Homeserver, cfg.AccessToken, cfg.SyncTimeout = f.URL, token, 300*time.Millisecond
	return cfg
}

// The kit's contract suite against the fake homeserver, through mautrix.
func TestContract(t *testing.T) {
	t.Parallel()
	platformtest.Run(t, platformtest.Harness{New: func(t *testing.T, env platformtest.Env) (platform.Platform, platformtest.Fake) {
		f := matrixfake.New(bot, token)
		t.Cleanup(f.Close)
		fakeRooms(f)
		p, err := NewPlatform(testConfig(f), env.Log, nil)
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := p.SignIn(ctx); err != nil {
			t.Fatal(err)
		}
		p.Attach(env.Bus, func(ctx context.Context, id string) error { return env.Runner().MarkSeen(ctx, id) })
		return p, &contractFake{f: f}
	}})
}

type contractFake struct{ f *matrixfake.Fake }

func (c *contractFake) Kinds() []string {
	return []string{"dm", "room mention", "thread", "reply", "image", "emote", "pill"}
}

func (c *contractFake) Deliver(t *testing.T, _ context.Context, kind string) *eventsv1.MessageReceived {
	t.Helper()
	dmSrc := func() *eventsv1.SessionSource {
		return &eventsv1.SessionSource{Platform: "matrix", Account: bot, ChatId: dmRm, ChatName: "Ann", ChatType: "dm", UserId: ann, UserName: "Ann"}
	}
	roomSrc := func(thread string) *eventsv1.SessionSource {
		return &eventsv1.SessionSource{Platform: "matrix", Account: bot, ChatId: team, ChatName: "Team", ChatType: "group", UserId: ann, UserName: "Ann",
			ThreadId: thread, ParentChatId: team}
	}
	var id string
	want := &eventsv1.MessageReceived{Mentioned: true}
	switch kind {
	case "dm":
		id = c.f.Message(dmRm, ann, "hello dm")
		want.Text, want.Source = "hello dm", dmSrc()
	case "room mention":
		id = c.f.Inject(team, ann, "m.room.message", map[string]any{"msgtype": "m.text", "body": "Hermes: what time is it?",
			"m.mentions": map[string]any{"user_ids": []string{bot}}})
		want.Text, want.Source = "what time is it?", roomSrc(id)
	case "thread":
		// The thread's root is the bot's own message (skipped).
		root := c.f.Message(team, bot, "an earlier answer")
		id = c.f.Inject(team, ann, "m.room.message", map[string]any{"msgtype": "m.text", "body": "in thread " + bot,
			"m.relates_to": map[string]any{"rel_type": "m.thread", "event_id": root, "is_falling_back": true,
				"m.in_reply_to": map[string]any{"event_id": root}}})
		want.Text, want.Source = "in thread", roomSrc(root)
	case "reply":
		id = c.f.Inject(dmRm, ann, "m.room.message", map[string]any{"msgtype": "m.text", "body": "> <@bot:fake.test> earlier\n\nyes",
			"m.relates_to": map[string]any{"m.in_reply_to": map[string]any{"event_id": "$earlier:fake.test"}}})
		want.Text, want.Source = "yes", dmSrc()
		want.ReplyTo = &eventsv1.ReplyTo{MessageId: "$earlier:fake.test"}
	case "image":
		mxc := c.f.Upload([]byte("\x89PNG"), "image/png")
		id = c.f.Inject(dmRm, ann, "m.room.message", map[string]any{"msgtype": "m.image", "body": "cat.png", "url": mxc,
			"info": map[string]any{"mimetype": "image/png", "size": 4}})
		want.Source = dmSrc()
		want.Attachments = []*eventsv1.Attachment{{Kind: eventsv1.AttachmentKind_ATTACHMENT_KIND_IMAGE, MimeType: "image/png", SizeBytes: 4,
			FileName: "cat.png", PlatformFileId: mxc}}
	case "emote":
		id = c.f.Inject(dmRm, ann, "m.room.message", map[string]any{"msgtype": "m.emote", "body": "waves"})
		want.Text, want.Source = "* Ann waves", dmSrc()
	case "pill":
		id = c.f.Inject(team, ann, "m.room.message", map[string]any{"msgtype": "m.text", "body": "Hermes: hi",
			"format": "org.matrix.custom.html", "formatted_body": `<a href="https://matrix.to/#/@bot:fake.test">Hermes</a>: hi`})
		want.Text, want.Source = "hi", roomSrc(id)
	default:
		t.Fatalf("unknown kind %s", kind)
	}
	want.EventId, want.MessageId = id, id
	return want
}

func (c *contractFake) Redeliver(_ *testing.T, _ context.Context, eventID string) {
	c.f.Replay(eventID)
}

func (c *contractFake) DeliverOversized(*testing.T, context.Context) {
	c.f.Message(dmRm, ann, strings.Repeat("x", maxEventBytes+1))
}

func (c *contractFake) DeliverMalformed(*testing.T, context.Context) {
	c.f.InjectRaw(dmRm, `{"type":"m.room.message","event_id":"$bad:fake.test","sender":"@ann:fake.test","origin_server_ts":1,"content":{"msgtype":"m.text","body":42}}`)
}

func (c *contractFake) Drop(*testing.T) { c.f.Drop() }

func (c *contractFake) Connections() int { return c.f.Connections() }

func (c *contractFake) Answer(ev *eventsv1.MessageReceived) *deliveryv1.SendRequested {
	return &deliveryv1.SendRequested{
		Target: &deliveryv1.Target{Platform: "matrix", Account: bot, ChatId: ev.GetSource().GetChatId(), ThreadId: ev.GetSource().GetThreadId(),
			ReplyToMessageId: ev.GetMessageId()},
		InputMessageIds: []string{ev.GetMessageId()},
	}
}

func (c *contractFake) Sent(_ *testing.T, _ context.Context, target *deliveryv1.Target) []string {
	var out []string
	for _, s := range c.f.Sent(target.GetChatId()) {
		out = append(out, s.Body)
	}
	return out
}

func (c *contractFake) Reactions(_ *testing.T, _ context.Context, target *deliveryv1.Target, messageID string) []string {
	return c.f.Reactions(target.GetChatId(), messageID)
}
