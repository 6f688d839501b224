package telegram

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"strings"
	"testing"

	deliveryv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/delivery/v1"
	eventsv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/events/v1"
	"github.com/switchboard-chat/switchboard/pkg/platform"
	"github.com/switchboard-chat/switchboard/pkg/platform/platformtest"
	"github.com/switchboard-chat/switchboard/pkg/telegramfake"
)

func newFake(t *testing.T) *telegramfake.Server {
	t.Helper()
	f, err := telegramfake.New(testToken, testUsername)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(f.Close)
	return f
}

func testConfig(f *telegramfake.Server) Config {
	cfg := DefaultConfig()
	cfg.BotToken, cfg.APIBaseURL, cfg.PollTimeout = testToken, f.URL, 2e9
	return cfg
}

// webhookConfig is testConfig in webhook mode: the gateway listens on a
// free local port for the fake's deliveries, with secret "s3cret".
func webhookConfig(t *testing.T, f *telegramfake.Server) Config {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	cfg := testConfig(f)
	cfg.WebhookURL, cfg.WebhookSecret, cfg.WebhookListen = "http://"+addr+"/tg/hook", "s3cret", addr
	return cfg
}

// fakeDriver is the contract suite's view of the fake Bot API.
type fakeDriver struct {
	f *telegramfake.Server
}

func (d *fakeDriver) Kinds() []string {
	var out []string
	for _, c := range kindCases() {
		if c.want != nil {
			out = append(out, c.name)
		}
	}
	return out
}

func (d *fakeDriver) Deliver(t *testing.T, _ context.Context, kind string) *eventsv1.MessageReceived {
	for _, c := range kindCases() {
		if c.name == kind {
			id := d.f.Inject(c.update)
			c.want.EventId = strconv.FormatInt(id, 10)
			return c.want
		}
	}
	t.Fatalf("unknown kind %s", kind)
	return nil
}

func (d *fakeDriver) Redeliver(t *testing.T, _ context.Context, eventID string) {
	id, err := strconv.ParseInt(eventID, 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	d.f.Redeliver(id)
}

func (d *fakeDriver) DeliverOversized(*testing.T, context.Context) {
	d.f.Inject(obj{"message": msg(obj{"from": alice, "chat": dmChat, "text": strings.Repeat("x", 300<<10)})})
}

func (d *fakeDriver) DeliverMalformed(*testing.T, context.Context) {
	d.f.InjectRaw(`"message":"not a message"`)
}

func (d *fakeDriver) Drop(*testing.T) { d.f.Drop() }

// Connections counts long polls: a poll cut by a drop is followed by a
// new one, in the same polling session (the gateway polls again at once
// rather than reconnecting).
func (d *fakeDriver) Connections() int { return d.f.Calls("getUpdates") }

// Sessions counts polling sessions: each Connect starts with deleteWebhook.
func (d *fakeDriver) Sessions() int { return d.f.Calls("deleteWebhook") }

func (d *fakeDriver) Answer(ev *eventsv1.MessageReceived) *deliveryv1.SendRequested {
	req := answer(ev)
	req.InputMessageIds = []string{ev.GetMessageId()}
	return req
}

func (d *fakeDriver) Reactions(t *testing.T, _ context.Context, target *deliveryv1.Target, messageID string) []string {
	id, err := strconv.Atoi(messageID)
	if err != nil {
		t.Fatal(err)
	}
	return d.f.Reactions(target.GetChatId(), id)
}

func (d *fakeDriver) Sent(_ *testing.T, _ context.Context, target *deliveryv1.Target) []string {
	var out []string
	for _, m := range d.f.Messages(target.GetChatId()) {
		if !m.Deleted {
			out = append(out, m.Shown)
		}
	}
	return out
}

func TestContract(t *testing.T) {
	t.Parallel()
	platformtest.Run(t, platformtest.Harness{New: func(t *testing.T, env platformtest.Env) (platform.Platform, platformtest.Fake) {
		f := newFake(t)
		cfg := testConfig(f)
		cfg.Reactions = true
		p, err := NewPlatform(cfg, env.Log, nil)
		if err != nil {
			t.Fatal(err)
		}
		return p, &fakeDriver{f: f}
	}})
}

var _ = fmt.Sprint
