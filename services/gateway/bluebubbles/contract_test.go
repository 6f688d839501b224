package bluebubbles

import (
	"context"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"testing"

	deliveryv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/delivery/v1"
	eventsv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/events/v1"
	"github.com/switchboard-chat/switchboard/pkg/platform"
	"github.com/switchboard-chat/switchboard/pkg/platform/platformtest"
	"github.com/switchboard-chat/switchboard/services/gateway/bluebubbles/bbfake"
)

// testConfig points a gateway at fake, listening on a free loopback port.
func testConfig(f *bbfake.Fake) Config {
	cfg := DefaultConfig()
	cfg.ServerURL, cfg.Password, cfg.Addr = f.URL(), f.Password, "127.0.0.1:0"
	return cfg
}

// hookURL is the gateway's webhook as BlueBubbles calls it, with the secret.
func hookURL(p *Platform, secret string) string {
	return "http://" + p.Addr() + p.cfg.Path + "?password=" + url.QueryEscape(secret)
}

func TestContract(t *testing.T) {
	t.Parallel()
	platformtest.Run(t, platformtest.Harness{New: func(t *testing.T, env platformtest.Env) (platform.Platform, platformtest.Fake) {
		f := bbfake.New(t)
		f.AddChat(bbfake.Chat{GUID: dmGUID, ChatIdentifier: ann, Participants: []string{ann}})
		f.AddChat(bbfake.Chat{GUID: groupGUID, ChatIdentifier: "chat493817263544", DisplayName: "Family", Participants: []string{ann, "+15559990000"}})
		cfg := testConfig(f)
		cfg.MaxBodyBytes = 16 << 10
		p, err := NewPlatform(cfg, env.Log, nil)
		if err != nil {
			t.Fatal(err)
		}
		return p, &contractFake{f: f, p: p, bodies: map[string][]byte{}}
	}})
}

// contractFake drives BlueBubbles's webhook side for the kit's suite.
type contractFake struct {
	f      *bbfake.Fake
	p      *Platform
	mu     sync.Mutex
	bodies map[string][]byte // message guid → the webhook that carried it
}

func (c *contractFake) post(t *testing.T, ctx context.Context, body []byte, want int) {
	t.Helper()
	code, answer, err := bbfake.Post(ctx, hookURL(c.p, c.f.Password), body)
	if err != nil {
		t.Fatal(err)
	}
	if code != want {
		t.Fatalf("webhook answered %d %q, want %d", code, answer, want)
	}
}

func (c *contractFake) Kinds() []string { return []string{"text", "group", "image"} }

func (c *contractFake) Deliver(t *testing.T, ctx context.Context, kind string) *eventsv1.MessageReceived {
	t.Helper()
	in := bbfake.Inbound{ChatGUID: dmGUID, From: ann, Text: "hello " + kind}
	src := &eventsv1.SessionSource{Platform: "bluebubbles", Account: c.p.Account(), ChatId: dmGUID, ChatIdAlt: ann, ChatType: "dm", ChatName: ann, UserId: ann, UserName: ann}
	var atts []*eventsv1.Attachment
	switch kind {
	case "group":
		in.ChatGUID = groupGUID
		src = &eventsv1.SessionSource{Platform: "bluebubbles", Account: c.p.Account(), ChatId: groupGUID, ChatType: "group", ChatName: "chat493817263544", UserId: ann, UserName: ann}
	case "image":
		g := c.f.AddAttachment("image/png", []byte("png"))
		in.Attachments = []bbfake.InboundAttachment{{GUID: g, MimeType: "image/png", TransferName: "IMG_0001.png", TotalBytes: 3}}
		atts = []*eventsv1.Attachment{{Kind: eventsv1.AttachmentKind_ATTACHMENT_KIND_IMAGE, PlatformFileId: g, MimeType: "image/png", FileName: "IMG_0001.png", SizeBytes: 3}}
	}
	b, guid := bbfake.Event(in)
	c.mu.Lock()
	c.bodies[guid] = b
	c.mu.Unlock()
	c.post(t, ctx, b, http.StatusOK)
	return &eventsv1.MessageReceived{EventId: guid, MessageId: guid, Text: in.Text, Source: src, Attachments: atts}
}

func (c *contractFake) Redeliver(t *testing.T, ctx context.Context, eventID string) {
	c.mu.Lock()
	b := c.bodies[eventID]
	c.mu.Unlock()
	c.post(t, ctx, b, http.StatusOK)
}

func (c *contractFake) DeliverOversized(t *testing.T, ctx context.Context) {
	b, _ := bbfake.Event(bbfake.Inbound{ChatGUID: dmGUID, From: ann, Text: strings.Repeat("x", 32<<10)})
	c.post(t, ctx, b, http.StatusRequestEntityTooLarge)
}

// DeliverMalformed: an authorized call that is not a message (no guid).
func (c *contractFake) DeliverMalformed(t *testing.T, ctx context.Context) {
	c.post(t, ctx, []byte(`{"type":"new-message","data":{"text":"no guid","handle":{"address":"+15551234567"}}}`), http.StatusBadRequest)
}

func (c *contractFake) Drop(*testing.T)      {}
func (c *contractFake) Connections() int     { return 1 }
func (c *contractFake) Connectionless() bool { return true }

func (c *contractFake) Answer(ev *eventsv1.MessageReceived) *deliveryv1.SendRequested {
	s := ev.GetSource()
	return &deliveryv1.SendRequested{
		Target:          &deliveryv1.Target{Platform: "bluebubbles", Account: s.GetAccount(), ChatId: s.GetChatId(), ReplyToMessageId: ev.GetMessageId()},
		InputMessageIds: []string{ev.GetMessageId()},
	}
}

func (c *contractFake) Sent(_ *testing.T, _ context.Context, target *deliveryv1.Target) []string {
	g := target.GetChatId()
	if !strings.Contains(g, ";") {
		g = "iMessage;-;" + g
	}
	var out []string
	for _, m := range c.f.Sent(g) {
		out = append(out, m.Text)
	}
	return out
}
