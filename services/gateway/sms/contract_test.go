package sms

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
	"github.com/switchboard-chat/switchboard/services/gateway/sms/smsfake"
)

// testConfig points a gateway at fake, listening on a free loopback port
// behind the fake's public URL.
func testConfig(f *smsfake.Fake) Config {
	cfg := DefaultConfig()
	cfg.AccountSID, cfg.AuthToken, cfg.PhoneNumber, cfg.PublicURL = f.AccountSID, f.AuthToken, f.PhoneNumber, f.PublicURL
	cfg.APIBaseURL, cfg.Addr = f.BaseURL(), "127.0.0.1:0"
	return cfg
}

func TestContract(t *testing.T) {
	t.Parallel()
	platformtest.Run(t, platformtest.Harness{New: func(t *testing.T, env platformtest.Env) (platform.Platform, platformtest.Fake) {
		f := smsfake.New(t)
		cfg := testConfig(f)
		cfg.MaxBodyBytes = 16 << 10
		p, err := NewPlatform(cfg, env.Log, nil)
		if err != nil {
			t.Fatal(err)
		}
		return p, &contractFake{f: f, p: p, forms: map[string]url.Values{}}
	}})
}

// contractFake drives Twilio's webhook side for the kit's suite.
type contractFake struct {
	f     *smsfake.Fake
	p     *Platform
	mu    sync.Mutex
	forms map[string]url.Values // MessageSid → the call that carried it
}

func (c *contractFake) url() string { return "http://" + c.p.Addr() + c.p.cfg.Path }

func (c *contractFake) post(t *testing.T, ctx context.Context, form url.Values, want int) {
	t.Helper()
	code, _, body, err := c.f.Post(ctx, c.url(), form)
	if err != nil {
		t.Fatal(err)
	}
	if code != want {
		t.Fatalf("webhook answered %d %q, want %d", code, body, want)
	}
}

func (c *contractFake) Kinds() []string { return []string{"text", "mms", "media only"} }

func (c *contractFake) Deliver(t *testing.T, ctx context.Context, kind string) *eventsv1.MessageReceived {
	t.Helper()
	const from = "+15551234567"
	in := smsfake.Inbound{From: from, Body: "hello " + kind}
	switch kind {
	case "mms", "media only":
		in.SID = smsfake.NewSID("MM")
		in.Media = []string{c.f.AddMedia(in.SID, "image/jpeg", []byte("jpeg"))}
		in.MediaTypes = []string{"image/jpeg"}
		if kind == "media only" {
			in.Body = ""
		}
	}
	form := c.f.Form(in)
	sid := form.Get("MessageSid")
	want := &eventsv1.MessageReceived{EventId: sid, MessageId: sid, Text: in.Body,
		Source: &eventsv1.SessionSource{Platform: "sms", Account: c.f.PhoneNumber, ChatId: from, ChatType: "dm", ChatName: from, UserId: from, UserName: from}}
	for i, u := range in.Media {
		want.Attachments = append(want.Attachments, &eventsv1.Attachment{Kind: eventsv1.AttachmentKind_ATTACHMENT_KIND_IMAGE,
			Location: &eventsv1.Attachment_Url{Url: u}, MimeType: in.MediaTypes[i]})
	}
	c.mu.Lock()
	c.forms[sid] = form
	c.mu.Unlock()
	c.post(t, ctx, form, http.StatusOK)
	return want
}

func (c *contractFake) Redeliver(t *testing.T, ctx context.Context, eventID string) {
	c.mu.Lock()
	form := c.forms[eventID]
	c.mu.Unlock()
	c.post(t, ctx, form, http.StatusOK)
}

func (c *contractFake) DeliverOversized(t *testing.T, ctx context.Context) {
	c.post(t, ctx, c.f.Form(smsfake.Inbound{From: "+15551234567", Body: strings.Repeat("x", 32<<10)}), http.StatusRequestEntityTooLarge)
}

// DeliverMalformed: a signed call that is not a message (no MessageSid).
func (c *contractFake) DeliverMalformed(t *testing.T, ctx context.Context) {
	form := c.f.Form(smsfake.Inbound{From: "+15551234567", Body: "no sid"})
	form.Del("MessageSid")
	form.Del("SmsSid")
	c.post(t, ctx, form, http.StatusBadRequest)
}

func (c *contractFake) Drop(*testing.T)      {}
func (c *contractFake) Connections() int     { return 1 }
func (c *contractFake) Connectionless() bool { return true }

func (c *contractFake) Answer(ev *eventsv1.MessageReceived) *deliveryv1.SendRequested {
	s := ev.GetSource()
	return &deliveryv1.SendRequested{
		Target:          &deliveryv1.Target{Platform: "sms", Account: s.GetAccount(), ChatId: s.GetChatId(), ReplyToMessageId: ev.GetMessageId()},
		InputMessageIds: []string{ev.GetMessageId()},
	}
}

func (c *contractFake) Sent(_ *testing.T, _ context.Context, target *deliveryv1.Target) []string {
	var out []string
	for _, m := range c.f.Messages(target.GetChatId()) {
		out = append(out, m.Body)
	}
	return out
}
