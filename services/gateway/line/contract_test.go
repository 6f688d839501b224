package line

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"sync"
	"testing"

	deliveryv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/delivery/v1"
	eventsv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/events/v1"
	"github.com/switchboard-chat/switchboard/pkg/platform"
	"github.com/switchboard-chat/switchboard/pkg/platform/platformtest"
	"github.com/switchboard-chat/switchboard/services/gateway/line/linefake"
)

// testConfig points a gateway at fake, listening on a free loopback port.
func testConfig(f *linefake.Fake) Config {
	cfg := DefaultConfig()
	cfg.ChannelAccessToken, cfg.ChannelSecret = f.Token, f.Secret
	cfg.APIBaseURL, cfg.DataBaseURL, cfg.Addr = f.BaseURL(), f.BaseURL(), "127.0.0.1:0"
	cfg.AllowedGroups = []string{"*"}
	return cfg
}

func TestContract(t *testing.T) {
	t.Parallel()
	platformtest.Run(t, platformtest.Harness{New: func(t *testing.T, env platformtest.Env) (platform.Platform, platformtest.Fake) {
		f := linefake.New(t)
		cfg := testConfig(f)
		cfg.MaxBodyBytes = 16 << 10
		p, err := NewPlatform(cfg, env.Bus, env.Log, nil)
		if err != nil {
			t.Fatal(err)
		}
		return p, &contractFake{f: f, p: p, events: map[string]map[string]any{}}
	}})
}

// contractFake drives LINE's webhook side for the kit's suite.
type contractFake struct {
	f      *linefake.Fake
	p      *Platform
	mu     sync.Mutex
	events map[string]map[string]any // webhookEventId → the event
}

const (
	testUser  = "U4af4980629a0c1b2c3d4e5f6a7b8c9d0"
	testGroup = "Ca56f94637cc4347f90a25382909b24b9"
)

func (c *contractFake) url() string { return "http://" + c.p.Addr() + c.p.cfg.Path }

func (c *contractFake) post(t *testing.T, ctx context.Context, body []byte, want int) {
	t.Helper()
	code, answer, err := c.f.Post(ctx, c.url(), body)
	if err != nil {
		t.Fatal(err)
	}
	if code != want {
		t.Fatalf("webhook answered %d %q, want %d", code, answer, want)
	}
}

func (c *contractFake) Kinds() []string { return []string{"text", "image", "sticker", "group"} }

func (c *contractFake) Deliver(t *testing.T, ctx context.Context, kind string) *eventsv1.MessageReceived {
	t.Helper()
	in := linefake.Inbound{UserID: testUser, Text: "hello " + kind}
	src := &eventsv1.SessionSource{Platform: "line", Account: c.p.Account(), ChatId: testUser, ChatType: "dm", ChatName: testUser, UserId: testUser, UserName: testUser}
	want := &eventsv1.MessageReceived{Source: src, Text: in.Text}
	switch kind {
	case "image":
		in.Type, in.ContentID = "image", c.f.AddContent("image/jpeg", []byte("jpeg"))
		want.Text = ""
		want.Attachments = []*eventsv1.Attachment{{Kind: eventsv1.AttachmentKind_ATTACHMENT_KIND_IMAGE, PlatformFileId: in.ContentID,
			Location: &eventsv1.Attachment_Url{Url: c.f.BaseURL() + "/v2/bot/message/" + in.ContentID + "/content"}}}
	case "sticker":
		in.Type, in.Keywords = "sticker", []string{"Happy", "Smile"}
		want.Text = "[sticker: Happy, Smile]"
	case "group":
		in.GroupID, in.MentionBot = testGroup, true
		src.ChatId, src.ChatType, src.ChatName = testGroup, "group", testGroup
		want.Mentioned = true
	}
	ev := c.f.Event(in)
	id := ev["webhookEventId"].(string)
	want.EventId = id
	want.MessageId = ev["message"].(map[string]any)["id"].(string)
	c.mu.Lock()
	c.events[id] = ev
	c.mu.Unlock()
	c.post(t, ctx, c.f.Body(ev), http.StatusOK)
	return want
}

// Redeliver posts the event again as LINE's redelivery.
func (c *contractFake) Redeliver(t *testing.T, ctx context.Context, eventID string) {
	c.mu.Lock()
	ev := c.events[eventID]
	c.mu.Unlock()
	again := map[string]any{}
	for k, v := range ev {
		again[k] = v
	}
	again["deliveryContext"] = map[string]any{"isRedelivery": true}
	c.post(t, ctx, c.f.Body(again), http.StatusOK)
}

func (c *contractFake) DeliverOversized(t *testing.T, ctx context.Context) {
	c.post(t, ctx, c.f.Body(c.f.Event(linefake.Inbound{UserID: testUser, Text: strings.Repeat("x", 32<<10)})), http.StatusRequestEntityTooLarge)
}

// DeliverMalformed: a signed body that is not a delivery (events is not
// a list).
func (c *contractFake) DeliverMalformed(t *testing.T, ctx context.Context) {
	b, _ := json.Marshal(map[string]any{"destination": c.f.BotID, "events": "none"})
	c.post(t, ctx, b, http.StatusBadRequest)
}

func (c *contractFake) Drop(*testing.T)      {}
func (c *contractFake) Connections() int     { return 1 }
func (c *contractFake) Connectionless() bool { return true }

func (c *contractFake) Answer(ev *eventsv1.MessageReceived) *deliveryv1.SendRequested {
	s := ev.GetSource()
	return &deliveryv1.SendRequested{
		Target:          &deliveryv1.Target{Platform: "line", Account: s.GetAccount(), ChatId: s.GetChatId(), ReplyToMessageId: ev.GetMessageId()},
		InputMessageIds: []string{ev.GetMessageId()},
	}
}

func (c *contractFake) Sent(_ *testing.T, _ context.Context, target *deliveryv1.Target) []string {
	var out []string
	for _, m := range c.f.Sent(target.GetChatId()) {
		out = append(out, m.Text)
	}
	return out
}
