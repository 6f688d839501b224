package teams

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
	"github.com/switchboard-chat/switchboard/services/gateway/teams/teamsfake"
)

// testConfig points a gateway at fake, listening on a free loopback port.
func testConfig(f *teamsfake.Fake) Config {
	cfg := DefaultConfig()
	cfg.ClientID, cfg.ClientSecret, cfg.TenantID = f.ClientID, f.ClientSecret, f.TenantID
	cfg.TokenURL, cfg.OpenIDMetadataURL, cfg.ServiceURL = f.TokenURL(), f.MetadataURL(), f.ServiceURL()
	cfg.Addr = "127.0.0.1:0"
	return cfg
}

// Conversations of the contract: a personal chat, a channel thread, a
// group chat.
const (
	dmConv      = "a:1dm-conversation"
	channelConv = "19:general@thread.tacv2;messageid=1700000000000"
	groupConv   = "19:group-chat@thread.v2"
	userID      = "aad-user-1"
	userName    = "Ann Example"
)

func TestContract(t *testing.T) {
	t.Parallel()
	platformtest.Run(t, platformtest.Harness{New: func(t *testing.T, env platformtest.Env) (platform.Platform, platformtest.Fake) {
		f := teamsfake.New(t)
		cfg := testConfig(f)
		cfg.MaxBodyBytes = 64 << 10
		p, err := NewPlatform(cfg, env.Bus, env.Log, nil)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			_ = env.Bus.JetStream().DeleteKeyValue(context.Background(), env.Bus.Topology().Stream(BucketRoutes))
		})
		return p, &contractFake{f: f, p: p, sent: map[string]map[string]any{}}
	}})
}

// contractFake drives the fake Bot Framework for the kit's suite.
type contractFake struct {
	f    *teamsfake.Fake
	p    *Platform
	mu   sync.Mutex
	sent map[string]map[string]any // event id → the activity
}

func (c *contractFake) url() string { return "http://" + c.p.Addr() + c.p.cfg.Path }

func (c *contractFake) post(t *testing.T, ctx context.Context, a map[string]any, want int) {
	t.Helper()
	code, err := c.f.Post(ctx, c.url(), a)
	if err != nil {
		t.Fatal(err)
	}
	if code != want {
		t.Fatalf("activity answered %d, want %d", code, want)
	}
}

func (c *contractFake) Kinds() []string { return []string{"text", "mention", "group", "image", "file"} }

func (c *contractFake) Deliver(t *testing.T, ctx context.Context, kind string) *eventsv1.MessageReceived {
	t.Helper()
	conv, typ, chat := dmConv, "personal", "dm"
	switch kind {
	case "mention":
		conv, typ, chat = channelConv, "channel", "channel"
	case "group":
		conv, typ, chat = groupConv, "groupChat", "group"
	}
	a := c.f.Message(conv, typ, userID, userName, "hello "+kind)
	id := a["id"].(string)
	want := &eventsv1.MessageReceived{EventId: conv + "|" + id, MessageId: id, Text: "hello " + kind,
		Source: &eventsv1.SessionSource{Platform: "teams", Account: c.f.ClientID, ChatId: conv, ChatType: chat, UserId: userID, UserName: userName, ScopeId: c.f.TenantID}}
	switch kind {
	case "mention", "group":
		c.f.Mention(a)
		want.Mentioned = true
	case "image":
		u := c.f.AddFile([]byte("png"))
		a["attachments"] = []map[string]any{{"contentType": "image/png", "contentUrl": u, "name": "cat.png"}, {"contentType": "text/html", "content": "<p>hello image</p>"}}
		want.Attachments = []*eventsv1.Attachment{{Kind: eventsv1.AttachmentKind_ATTACHMENT_KIND_IMAGE, PlatformFileId: u, MimeType: "image/png", FileName: "cat.png"}}
	case "file":
		const u = "https://contoso.sharepoint.com/personal/ann/_layouts/15/download.aspx?UniqueId=1&tempauth=x"
		a["attachments"] = []map[string]any{{"contentType": "application/vnd.microsoft.teams.file.download.info", "name": "report.pdf",
			"content": map[string]any{"downloadUrl": u, "uniqueId": "1", "fileType": "pdf"}}}
		want.Attachments = []*eventsv1.Attachment{{Kind: eventsv1.AttachmentKind_ATTACHMENT_KIND_DOCUMENT, PlatformFileId: u, MimeType: "application/pdf", FileName: "report.pdf"}}
	}
	c.mu.Lock()
	c.sent[want.EventId] = a
	c.mu.Unlock()
	c.post(t, ctx, a, http.StatusOK)
	return want
}

func (c *contractFake) Redeliver(t *testing.T, ctx context.Context, eventID string) {
	c.mu.Lock()
	a := c.sent[eventID]
	c.mu.Unlock()
	c.post(t, ctx, a, http.StatusOK)
}

func (c *contractFake) DeliverOversized(t *testing.T, ctx context.Context) {
	c.post(t, ctx, c.f.Message(dmConv, "personal", userID, userName, strings.Repeat("x", 100<<10)), http.StatusRequestEntityTooLarge)
}

func (c *contractFake) DeliverMalformed(t *testing.T, ctx context.Context) {
	body, _ := json.Marshal(map[string]any{"type": "message", "serviceUrl": c.f.ServiceURL()})
	code, err := c.f.PostRaw(ctx, c.url(), body[:len(body)-3], "Bearer "+c.f.Sign(c.f.TokenClaims(c.f.ServiceURL())))
	if err != nil {
		t.Fatal(err)
	}
	if code != http.StatusBadRequest {
		t.Fatalf("malformed activity answered %d, want 400", code)
	}
}

func (c *contractFake) Drop(*testing.T)      {}
func (c *contractFake) Connections() int     { return 1 }
func (c *contractFake) Connectionless() bool { return true }

func (c *contractFake) Answer(ev *eventsv1.MessageReceived) *deliveryv1.SendRequested {
	s := ev.GetSource()
	return &deliveryv1.SendRequested{
		Target:          &deliveryv1.Target{Platform: "teams", Account: s.GetAccount(), ChatId: s.GetChatId(), ReplyToMessageId: ev.GetMessageId()},
		InputMessageIds: []string{ev.GetMessageId()},
	}
}

func (c *contractFake) Sent(_ *testing.T, _ context.Context, target *deliveryv1.Target) []string {
	return c.f.Texts(target.GetChatId())
}
