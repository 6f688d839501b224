package signal

import (
	"context"
	"encoding/json"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	deliveryv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/delivery/v1"
	eventsv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/events/v1"
	"github.com/switchboard-chat/switchboard/pkg/platform"
	"github.com/switchboard-chat/switchboard/pkg/platform/platformtest"
	"github.com/switchboard-chat/switchboard/services/gateway/signal/signalfake"
)

// The kit's contract suite, receiving with receive calls from a daemon
// in manual mode and from the event stream of one in its default mode.
func TestContract(t *testing.T) {
	t.Parallel()
	for _, mode := range []string{ReceiveManual, ReceiveSSE} {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			platformtest.Run(t, platformtest.Harness{New: func(t *testing.T, env platformtest.Env) (platform.Platform, platformtest.Fake) {
				f := signalfake.New(bot)
				t.Cleanup(f.Close)
				if mode == ReceiveManual {
					f.SetReceiveMode(signalfake.Manual)
				}
				cfg := DefaultConfig()
				cfg.HTTPURL, cfg.Account, cfg.AllowedGroups = f.URL, bot, []string{group}
				cfg.ReceiveMode, cfg.PollTimeout = mode, 300*time.Millisecond
				p, err := NewPlatform(cfg, env.Log, nil)
				if err != nil {
					t.Fatal(err)
				}
				return p, &contractFake{f: f, manual: mode == ReceiveManual, sent: map[string]string{}}
			}})
		})
	}
}

// contractFake drives the fake daemon for the kit's contract suite.
type contractFake struct {
	f      *signalfake.Fake
	manual bool // connections are receive calls
	mu     sync.Mutex
	sent   map[string]string // event id → the event's data, to push again
}

func (c *contractFake) Kinds() []string {
	return []string{"dm", "group", "mention", "attachment", "reply", "note to self"}
}

func (c *contractFake) push(eventID string, n map[string]any) {
	b, _ := json.Marshal(n)
	c.mu.Lock()
	c.sent[eventID] = string(b)
	c.mu.Unlock()
	c.f.PushRaw(string(b))
}

func (c *contractFake) Deliver(t *testing.T, _ context.Context, kind string) *eventsv1.MessageReceived {
	t.Helper()
	ts := c.f.Now()
	m := signalfake.Message{From: ann, Text: "hello " + kind, Timestamp: ts}
	want := dm(ts, m.Text)
	switch kind {
	case "dm":
	case "group":
		m.GroupID, m.GroupName = group, "Team"
		want = grp(ts, m.Text, false)
	case "mention":
		m.GroupID, m.GroupName, m.Text = group, "Team", "\uFFFC hello"
		m.Mentions = []signalfake.Mention{{Contact: botC, Start: 0, Length: 1}}
		want = grp(ts, "hello", true)
	case "attachment":
		m.Attachments = []signalfake.Attachment{{ID: "cat1.png", ContentType: "image/png", Filename: "cat.png", Size: 4}}
		want.Attachments = []*eventsv1.Attachment{{Kind: eventsv1.AttachmentKind_ATTACHMENT_KIND_IMAGE, MimeType: "image/png",
			SizeBytes: 4, FileName: "cat.png", PlatformFileId: "cat1.png"}}
	case "reply":
		m.Quote = &signalfake.Quote{ID: 1600000000000, Author: botC, Text: "earlier"}
		want.ReplyTo = &eventsv1.ReplyTo{MessageId: bot + ":1600000000000", Text: "earlier", UserId: bot, FromBot: true}
	case "note to self":
		n := c.f.NoteToSelf(botC, m.Text, ts)
		id := bot + ":" + itoa(ts)
		c.push(id, n)
		return &eventsv1.MessageReceived{EventId: id, MessageId: id, Text: m.Text, Mentioned: true, SentAt: timestamppb.New(time.UnixMilli(ts)),
			Source: &eventsv1.SessionSource{Platform: "signal", Account: bot, ChatId: bot, ChatType: "dm", ChatName: "Bot",
				UserId: bot, UserName: "Bot", UserIdAlt: botUUID}}
	default:
		t.Fatalf("unknown kind %s", kind)
	}
	n, _ := c.f.Envelope(m)
	c.push(want.GetEventId(), n)
	return want
}

func (c *contractFake) Redeliver(t *testing.T, _ context.Context, eventID string) {
	c.mu.Lock()
	data, ok := c.sent[eventID]
	c.mu.Unlock()
	if !ok {
		t.Fatalf("no event %s sent", eventID)
	}
	c.f.PushRaw(data)
}

func (c *contractFake) DeliverOversized(*testing.T, context.Context) {
	n, _ := c.f.Envelope(signalfake.Message{From: ann, Text: strings.Repeat("x", 300<<10)})
	c.f.Push(n)
}

func (c *contractFake) DeliverMalformed(*testing.T, context.Context) {
	c.f.PushRaw(`{"envelope":"not an envelope","account":"` + bot + `"}`)
}

// The fake has no payload whose handling panics (it is no PoisonFake,
// so the suite skips that check): the one it had, a mention whose start
// plus length overflows, is now delivered with the mention ignored
// (TestOverflowingMentionDelivered), and nothing else a daemon can send
// reaches a panic. The oversized and malformed checks remain.

// Sessions counts the gateway's connections: each starts with a check.
func (c *contractFake) Sessions() int { return c.f.Checks() }

func (c *contractFake) Drop(*testing.T) { c.f.Drop() }

func (c *contractFake) Connections() int {
	if c.manual {
		return c.f.Polls()
	}
	return c.f.Connections()
}

func (c *contractFake) Answer(ev *eventsv1.MessageReceived) *deliveryv1.SendRequested {
	return &deliveryv1.SendRequested{
		Target:          &deliveryv1.Target{Platform: "signal", Account: bot, ChatId: ev.GetSource().GetChatId(), ReplyToMessageId: ev.GetMessageId()},
		InputMessageIds: []string{ev.GetMessageId()},
	}
}

func (c *contractFake) Sent(_ *testing.T, _ context.Context, target *deliveryv1.Target) []string {
	var out []string
	for _, s := range c.f.Sent(target.GetChatId()) {
		out = append(out, s.Text)
	}
	return out
}

func (c *contractFake) Reactions(t *testing.T, _ context.Context, target *deliveryv1.Target, messageID string) []string {
	author, ts, ok := splitMessageID(messageID)
	if !ok {
		t.Fatalf("message id %q", messageID)
	}
	return c.f.Reactions(target.GetChatId(), author, ts)
}
