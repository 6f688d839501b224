package mattermost

import (
	"context"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	deliveryv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/delivery/v1"
	eventsv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/events/v1"
	"github.com/switchboard-chat/switchboard/pkg/platform"
	"github.com/switchboard-chat/switchboard/pkg/platform/platformtest"
	"github.com/switchboard-chat/switchboard/services/gateway/mattermost/mattermostfake"
)

const (
	bot     = "hermesbot0000000000000000a"
	botName = "hermes"
	ann     = "annuser0000000000000000000"
	bob     = "bobuser0000000000000000000"
	token   = "mm-test-token"
	dmCh    = "dmchannel00000000000000000"
	town    = "townsquare0000000000000000"
	priv    = "privatechannel000000000000"
	grp     = "groupmessage0000000000000a"
)

// fakeChannels gives a fake the users and channels the tests use.
func fakeChannels(f *mattermostfake.Fake) {
	f.AddUser(ann, "ann")
	f.AddUser(bob, "bob")
	f.AddChannel(mattermostfake.Channel{ID: dmCh, Type: "D", Name: bot + "__" + ann})
	f.AddChannel(mattermostfake.Channel{ID: town, Type: "O", DisplayName: "Town Square", Name: "town-square"})
	f.AddChannel(mattermostfake.Channel{ID: priv, Type: "P", DisplayName: "Ops", Name: "ops"})
	f.AddChannel(mattermostfake.Channel{ID: grp, Type: "G", DisplayName: "ann, bob, hermes"})
}

// testConfig is a config pointed at f.
func testConfig(f *mattermostfake.Fake) Config {
	cfg := DefaultConfig()
	cfg.URL, cfg.Token, cfg.Reactions = f.URL, token, true
	return cfg
}

// The kit's contract suite against the fake server, over REST and the
// websocket.
func TestContract(t *testing.T) {
	t.Parallel()
	platformtest.Run(t, platformtest.Harness{New: func(t *testing.T, env platformtest.Env) (platform.Platform, platformtest.Fake) {
		f := mattermostfake.New(bot, botName, token)
		t.Cleanup(f.Close)
		fakeChannels(f)
		p, err := NewPlatform(testConfig(f), env.Log, nil)
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := p.SignIn(ctx); err != nil {
			t.Fatal(err)
		}
		return p, &contractFake{f: f}
	}})
}

type contractFake struct{ f *mattermostfake.Fake }

func (c *contractFake) Kinds() []string {
	return []string{"dm", "channel mention", "thread", "private channel", "group", "file"}
}

func (c *contractFake) Deliver(t *testing.T, _ context.Context, kind string) *eventsv1.MessageReceived {
	t.Helper()
	src := func(ch, name, typ string) *eventsv1.SessionSource {
		return &eventsv1.SessionSource{Platform: "mattermost", Account: bot, ChatId: ch, ChatName: name, ChatType: typ, UserId: ann, UserName: "ann"}
	}
	want := &eventsv1.MessageReceived{Mentioned: true}
	var p mattermostfake.Post
	switch kind {
	case "dm":
		p = mattermostfake.Post{ChannelID: dmCh, UserID: ann, Message: "hello dm"}
		want.Text, want.Source = "hello dm", src(dmCh, "ann", "dm")
	case "channel mention":
		p = mattermostfake.Post{ChannelID: town, UserID: ann, Message: "@hermes what time is it?"}
		want.Text, want.Source = "what time is it?", src(town, "Town Square", "channel")
	case "thread":
		root := c.f.Message(town, bot, "an earlier answer")
		p = mattermostfake.Post{ChannelID: town, UserID: ann, RootID: root, Message: "and then, @Hermes?"}
		want.Text, want.Source = "and then, ?", src(town, "Town Square", "channel")
		want.Source.ThreadId, want.Source.ParentChatId = root, town
	case "private channel":
		p = mattermostfake.Post{ChannelID: priv, UserID: ann, Message: "@hermes: status"}
		want.Text, want.Source = "status", src(priv, "Ops", "group")
	case "group":
		p = mattermostfake.Post{ChannelID: grp, UserID: ann, Message: "hi @hermes"}
		want.Text, want.Source = "hi", src(grp, "ann, bob, hermes", "group")
	case "file":
		fi := c.f.Upload("cat.png", "image/png", []byte("\x89PNG"))
		p = mattermostfake.Post{ChannelID: dmCh, UserID: ann, FileIDs: []string{fi.ID}}
		want.Source = src(dmCh, "ann", "dm")
		want.Attachments = []*eventsv1.Attachment{{Kind: eventsv1.AttachmentKind_ATTACHMENT_KIND_IMAGE, MimeType: "image/png", SizeBytes: 4,
			FileName: "cat.png", PlatformFileId: fi.ID}}
	default:
		t.Fatalf("unknown kind %s", kind)
	}
	p.CreateAt = time.Now().UnixMilli()
	id := c.f.Add(p)
	want.EventId, want.MessageId = id, id
	want.SentAt = timestamppb.New(time.UnixMilli(p.CreateAt))
	return want
}

func (c *contractFake) Redeliver(_ *testing.T, _ context.Context, eventID string) {
	c.f.Replay(eventID)
}

func (c *contractFake) DeliverOversized(*testing.T, context.Context) {
	c.f.Message(dmCh, ann, strings.Repeat("x", maxPostRunes+1))
}

func (c *contractFake) DeliverMalformed(*testing.T, context.Context) {
	c.f.InjectRaw(`{"event":"posted","data":{"channel_type":"D","post":"{\"id\":42"},"broadcast":{},"seq":99}`)
}

func (c *contractFake) Drop(*testing.T) { c.f.Drop() }

func (c *contractFake) Connections() int { return c.f.Connections() }

func (c *contractFake) Answer(ev *eventsv1.MessageReceived) *deliveryv1.SendRequested {
	return &deliveryv1.SendRequested{
		Target: &deliveryv1.Target{Platform: "mattermost", Account: bot, ChatId: ev.GetSource().GetChatId(), ThreadId: ev.GetSource().GetThreadId(),
			ReplyToMessageId: ev.GetMessageId()},
		InputMessageIds: []string{ev.GetMessageId()},
	}
}

func (c *contractFake) Sent(_ *testing.T, _ context.Context, target *deliveryv1.Target) []string {
	var out []string
	for _, p := range c.f.BotPosts(target.GetChatId()) {
		out = append(out, p.Message)
	}
	return out
}

func (c *contractFake) Reactions(_ *testing.T, _ context.Context, _ *deliveryv1.Target, messageID string) []string {
	return c.f.Reactions(messageID)
}
