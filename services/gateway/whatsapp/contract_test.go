package whatsapp

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
	"github.com/switchboard-chat/switchboard/services/gateway/whatsapp/whatsappfake"
)

// testConfig points a gateway at fake, listening on a free loopback port.
func testConfig(f *whatsappfake.Fake) Config {
	cfg := DefaultConfig()
	cfg.AccessToken, cfg.PhoneNumberID, cfg.AppSecret, cfg.VerifyToken = f.AccessToken, f.PhoneNumberID, f.AppSecret, f.VerifyToken
	cfg.APIBaseURL, cfg.Addr = f.BaseURL(), "127.0.0.1:0"
	return cfg
}

func TestContract(t *testing.T) {
	t.Parallel()
	platformtest.Run(t, platformtest.Harness{New: func(t *testing.T, env platformtest.Env) (platform.Platform, platformtest.Fake) {
		f := whatsappfake.New(t)
		cfg := testConfig(f)
		cfg.Reactions, cfg.MaxBodyBytes = true, 64<<10
		p, err := NewPlatform(cfg, env.Log, nil)
		if err != nil {
			t.Fatal(err)
		}
		return p, &contractFake{f: f, p: p, bodies: map[string][]byte{}}
	}})
}

// contractFake drives the fake Cloud API's webhook side for the kit's suite.
type contractFake struct {
	f      *whatsappfake.Fake
	p      *Platform
	mu     sync.Mutex
	bodies map[string][]byte // event id → the notification that carried it
}

func (c *contractFake) url() string { return "http://" + c.p.Addr() + c.p.cfg.Path }

func (c *contractFake) post(t *testing.T, ctx context.Context, body []byte, want int) {
	t.Helper()
	code, err := c.f.Post(ctx, c.url(), body)
	if err != nil {
		t.Fatal(err)
	}
	if code != want {
		t.Fatalf("notification answered %d, want %d", code, want)
	}
}

func (c *contractFake) Kinds() []string {
	return []string{"text", "image", "voice", "document", "location", "reply", "button"}
}

func (c *contractFake) Deliver(t *testing.T, ctx context.Context, kind string) *eventsv1.MessageReceived {
	t.Helper()
	const from, name = "15551234567", "Ann Example"
	id := c.f.NewID()
	in := whatsappfake.Text(id, from, name, "hello "+kind)
	want := &eventsv1.MessageReceived{EventId: id, MessageId: id, Text: "hello " + kind,
		Source: &eventsv1.SessionSource{Platform: "whatsapp", Account: c.f.PhoneNumberID, ChatId: from, ChatType: "dm", ChatName: name, UserId: from, UserName: name}}
	switch kind {
	case "image":
		in.Type, in.Object = "image", map[string]any{"id": "1001", "mime_type": "image/jpeg", "sha256": "x", "caption": "a cat"}
		want.Text = "a cat"
		want.Attachments = []*eventsv1.Attachment{{Kind: eventsv1.AttachmentKind_ATTACHMENT_KIND_IMAGE, PlatformFileId: "1001", MimeType: "image/jpeg", Caption: "a cat"}}
	case "voice":
		in.Type, in.Object = "audio", map[string]any{"id": "1002", "mime_type": "audio/ogg; codecs=opus", "voice": true}
		want.Text = ""
		want.Attachments = []*eventsv1.Attachment{{Kind: eventsv1.AttachmentKind_ATTACHMENT_KIND_VOICE, PlatformFileId: "1002", MimeType: "audio/ogg"}}
	case "document":
		in.Type, in.Object = "document", map[string]any{"id": "1003", "mime_type": "text/plain", "filename": "list.txt"}
		want.Text = ""
		want.Attachments = []*eventsv1.Attachment{{Kind: eventsv1.AttachmentKind_ATTACHMENT_KIND_DOCUMENT, PlatformFileId: "1003", MimeType: "text/plain", FileName: "list.txt"}}
	case "location":
		in.Type, in.Object = "location", map[string]any{"latitude": 52.52, "longitude": 13.405, "name": "Alexanderplatz", "address": "Berlin"}
		want.Text = "[Location: Alexanderplatz, Berlin (latitude 52.52, longitude 13.405)]"
	case "reply":
		in.ReplyTo, in.FromBusiness = "wamid.OUT1", true
		want.ReplyTo = &eventsv1.ReplyTo{MessageId: "wamid.OUT1", UserId: c.f.DisplayNumber, FromBot: true}
	case "button":
		in.Type, in.Object = "interactive", map[string]any{"type": "button_reply", "button_reply": map[string]any{"id": "yes", "title": "Yes please"}}
		want.Text = "Yes please"
	}
	body := c.f.Notification(in)
	c.mu.Lock()
	c.bodies[id] = body
	c.mu.Unlock()
	c.post(t, ctx, body, http.StatusOK)
	return want
}

func (c *contractFake) Redeliver(t *testing.T, ctx context.Context, eventID string) {
	c.mu.Lock()
	body := c.bodies[eventID]
	c.mu.Unlock()
	c.post(t, ctx, body, http.StatusOK)
}

func (c *contractFake) DeliverOversized(t *testing.T, ctx context.Context) {
	c.post(t, ctx, c.f.Notification(whatsappfake.Text(c.f.NewID(), "15551234567", "Ann", strings.Repeat("x", 100<<10))), http.StatusRequestEntityTooLarge)
}

func (c *contractFake) DeliverMalformed(t *testing.T, ctx context.Context) {
	c.post(t, ctx, []byte(`{"object":"whatsapp_business_account","entry":[{"changes":`), http.StatusBadRequest)
}

func (c *contractFake) Drop(*testing.T)      {}
func (c *contractFake) Connections() int     { return 1 }
func (c *contractFake) Connectionless() bool { return true }

func (c *contractFake) Answer(ev *eventsv1.MessageReceived) *deliveryv1.SendRequested {
	s := ev.GetSource()
	return &deliveryv1.SendRequested{
		Target:          &deliveryv1.Target{Platform: "whatsapp", Account: s.GetAccount(), ChatId: s.GetChatId(), ReplyToMessageId: ev.GetMessageId()},
		InputMessageIds: []string{ev.GetMessageId()},
	}
}

func (c *contractFake) Sent(_ *testing.T, _ context.Context, target *deliveryv1.Target) []string {
	var out []string
	for _, m := range c.f.Messages(target.GetChatId()) {
		if m.Type != "reaction" {
			out = append(out, m.Text)
		}
	}
	return out
}

// Reactions: the business has one reaction per message, the last one it
// sent ("" removes it).
func (c *contractFake) Reactions(_ *testing.T, _ context.Context, target *deliveryv1.Target, messageID string) []string {
	emoji := ""
	for _, m := range c.f.Messages(target.GetChatId()) {
		if m.Type == "reaction" && m.ReactTo == messageID {
			emoji = m.Emoji
		}
	}
	if emoji == "" {
		return nil
	}
	return []string{emoji}
}
