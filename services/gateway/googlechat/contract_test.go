package googlechat

import (
	"context"
	"net/http"
	"strings"
	"sync"
	"testing"

	deliveryv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/delivery/v1"
	eventsv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/events/v1"
	"github.com/switchboard-chat/switchboard/pkg/platform"
	"github.com/switchboard-chat/switchboard/pkg/platform/platformtest"
	"github.com/switchboard-chat/switchboard/services/gateway/googlechat/googlechatfake"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// testConfig points a gateway at fake, listening on a free loopback port.
func testConfig(f *googlechatfake.Fake) Config {
	cfg := DefaultConfig()
	cfg.ServiceAccountJSON, cfg.Audience = f.ServiceAccountJSON(), f.ProjectNumber
	cfg.KeysURL, cfg.APIBaseURL = f.KeysURL(), f.APIBaseURL()
	cfg.Addr = "127.0.0.1:0"
	return cfg
}

// Spaces of the contract: a DM, a space, a group chat.
const (
	dmSpace    = "spaces/dm-ann"
	roomSpace  = "spaces/AAAAroom"
	groupSpace = "spaces/AAAAgroup"
	userEmail  = "ann@example.com"
	userName   = "Ann Example"
)

func TestContract(t *testing.T) {
	t.Parallel()
	platformtest.Run(t, platformtest.Harness{New: func(t *testing.T, env platformtest.Env) (platform.Platform, platformtest.Fake) {
		f := googlechatfake.New(t)
		cfg := testConfig(f)
		cfg.MaxBodyBytes = 64 << 10
		p, err := NewPlatform(cfg, env.Log, nil)
		if err != nil {
			t.Fatal(err)
		}
		return p, &contractFake{f: f, p: p, sent: map[string]map[string]any{}}
	}})
}

// contractFake drives the fake Google Chat for the kit's suite.
type contractFake struct {
	f    *googlechatfake.Fake
	p    *Platform
	mu   sync.Mutex
	sent map[string]map[string]any // event id → the event
}

func (c *contractFake) url() string { return "http://" + c.p.Addr() + c.p.cfg.Path }

func (c *contractFake) post(t *testing.T, ctx context.Context, e map[string]any, want int) {
	t.Helper()
	code, err := c.f.Post(ctx, c.url(), e)
	if err != nil {
		t.Fatal(err)
	}
	if code != want {
		t.Fatalf("event answered %d, want %d", code, want)
	}
}

func (c *contractFake) Kinds() []string { return []string{"text", "space", "group", "image"} }

func (c *contractFake) Deliver(t *testing.T, ctx context.Context, kind string) *eventsv1.MessageReceived {
	t.Helper()
	sp, typ, chat := dmSpace, "DIRECT_MESSAGE", "dm"
	switch kind {
	case "space":
		sp, typ, chat = roomSpace, "SPACE", "group"
	case "group":
		sp, typ, chat = groupSpace, "GROUP_CHAT", "group"
	}
	e := c.f.Message(sp, typ, userEmail, userName, "hello "+kind)
	msg := e["message"].(map[string]any)
	name := msg["name"].(string)
	want := &eventsv1.MessageReceived{EventId: name, MessageId: name, Text: "hello " + kind,
		SentAt: timestamppb.New(mustTime("2026-01-02T03:04:05.123456Z")),
		Source: &eventsv1.SessionSource{Platform: PlatformName, Account: c.f.ProjectNumber, ChatId: sp, ChatName: "Team room", ChatType: chat,
			UserId: userEmail, UserName: userName, UserIdAlt: googlechatfake.UserName(userEmail)}}
	if chat == "group" {
		want.Mentioned = true
		want.Source.ThreadId = msg["thread"].(map[string]any)["name"].(string)
	}
	if kind == "image" {
		ref := c.f.AddFile([]byte("png"), "image/png")
		msg["attachment"] = []map[string]any{{"name": name + "/attachments/a1", "contentName": "cat.png", "contentType": "image/png",
			"source": "UPLOADED_CONTENT", "attachmentDataRef": map[string]any{"resourceName": ref}}}
		want.Attachments = []*eventsv1.Attachment{{Kind: eventsv1.AttachmentKind_ATTACHMENT_KIND_IMAGE, PlatformFileId: ref, MimeType: "image/png", FileName: "cat.png"}}
	}
	c.mu.Lock()
	c.sent[want.EventId] = e
	c.mu.Unlock()
	c.post(t, ctx, e, http.StatusOK)
	return want
}

func (c *contractFake) Redeliver(t *testing.T, ctx context.Context, eventID string) {
	c.mu.Lock()
	e := c.sent[eventID]
	c.mu.Unlock()
	c.post(t, ctx, e, http.StatusOK)
}

func (c *contractFake) DeliverOversized(t *testing.T, ctx context.Context) {
	c.post(t, ctx, c.f.Message(dmSpace, "DIRECT_MESSAGE", userEmail, userName, strings.Repeat("x", 100<<10)), http.StatusRequestEntityTooLarge)
}

func (c *contractFake) DeliverMalformed(t *testing.T, ctx context.Context) {
	code, err := c.f.PostRaw(ctx, c.url(), []byte(`{"type":"MESSAGE","space":{"name":"spaces/x"`), "Bearer "+c.f.Sign(c.f.Claims()))
	if err != nil {
		t.Fatal(err)
	}
	if code != http.StatusBadRequest {
		t.Fatalf("malformed event answered %d, want 400", code)
	}
}

func (c *contractFake) Drop(*testing.T)      {}
func (c *contractFake) Connections() int     { return 1 }
func (c *contractFake) Connectionless() bool { return true }

func (c *contractFake) Answer(ev *eventsv1.MessageReceived) *deliveryv1.SendRequested {
	s := ev.GetSource()
	return &deliveryv1.SendRequested{
		Target:          &deliveryv1.Target{Platform: PlatformName, Account: s.GetAccount(), ChatId: s.GetChatId(), ThreadId: s.GetThreadId(), ReplyToMessageId: ev.GetMessageId()},
		InputMessageIds: []string{ev.GetMessageId()},
	}
}

func (c *contractFake) Sent(_ *testing.T, _ context.Context, target *deliveryv1.Target) []string {
	return c.f.Texts(target.GetChatId())
}
