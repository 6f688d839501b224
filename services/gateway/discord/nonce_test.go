package discord

import (
	"context"
	"encoding/base64"
	"log/slog"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/switchboard-chat/switchboard/pkg/bus"
	deliveryv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/delivery/v1"
	eventsv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/events/v1"
	"github.com/switchboard-chat/switchboard/pkg/platform"
	"github.com/switchboard-chat/switchboard/pkg/platform/platformtest"
	"github.com/switchboard-chat/switchboard/services/gateway/discord/discordfake"
)

// A create message whose answer was lost (the connection reset after
// Discord made the message) is asked again by delivery under the same
// idempotency key. The retry carries the first attempt's nonce with
// enforce_nonce, so Discord answers with the message it made and the
// chat shows it once: a text, a file (a multipart create), and a send
// split in two pieces whose first or second piece lost its answer.
func TestSendWhoseAnswerWasLostIsPostedOnce(t *testing.T) {
	t.Parallel()
	f := newFake(t)
	b, _ := run(t, f, Config{})
	img := base64.StdEncoding.EncodeToString(platformtest.NoisePNG(t, 4, 4))
	link := &eventsv1.Attachment{Kind: eventsv1.AttachmentKind_ATTACHMENT_KIND_IMAGE, Location: &eventsv1.Attachment_Url{Url: "https://example.test/chart.png"}}
	long := strings.Repeat("word ", 398) // with the link, over 2,000 characters: two pieces
	for i, tc := range []struct {
		name  string
		text  string
		media []*eventsv1.Attachment
		// answered creates go through before the one whose answer is lost.
		answered int
		// shown are the messages the chat must show; posts the create
		// messages both attempts make.
		shown, posts int
	}{
		{name: "text", text: "hello", shown: 1, posts: 2},
		{name: "file", text: "the chart", media: []*eventsv1.Attachment{{Kind: eventsv1.AttachmentKind_ATTACHMENT_KIND_IMAGE,
			Location: &eventsv1.Attachment_Url{Url: "data:image/png;base64," + img}}}, shown: 1, posts: 2},
		{name: "split, first piece lost", text: long, media: []*eventsv1.Attachment{link}, shown: 2, posts: 3},
		// The retry skips the first piece, which the first attempt
		// recorded, and asks for the second again.
		{name: "split, second piece lost", text: long, media: []*eventsv1.Attachment{link}, answered: 1, shown: 2, posts: 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			ch := "90000000000000010" + string(rune('0'+i))
			f.AddChannel(ch, discordfake.TypeGuildText, guild, "")
			req := &deliveryv1.SendRequested{Op: deliveryv1.SendOp_SEND_OP_SEND, IdempotencyKey: "turn-lost:" + tc.name, Text: tc.text, Attachments: tc.media,
				Target: &deliveryv1.Target{Platform: "discord", ChatId: ch, ReplyToMessageId: "700000000000000001"}}
			send := func() *deliveryv1.SendReceipt {
				t.Helper()
				r := &deliveryv1.SendReceipt{}
				if err := b.Request(ctx, b.Topology().SendSubject("discord"), req, r); err != nil {
					t.Fatal(err)
				}
				return r
			}
			f.LoseCreateAnswerAfter(tc.answered)
			if r := send(); r.GetOk() || r.GetErrorClass() == deliveryv1.ErrorClass_ERROR_CLASS_PERMANENT {
				t.Fatalf("attempt with the answer lost: receipt %v, want a failure to retry", r)
			}
			r := send()
			if !r.GetOk() {
				t.Fatalf("retry: receipt %v, want ok", r)
			}
			ms := f.Messages(ch)
			if len(ms) != tc.shown {
				t.Fatalf("chat shows %d messages, want %d: %+v", len(ms), tc.shown, ms)
			}
			if r.GetPlatformMessageId() != ms[0].ID {
				t.Errorf("receipt names message %s, want the first one posted, %s", r.GetPlatformMessageId(), ms[0].ID)
			}
			nonces := map[string]bool{}
			for _, m := range ms {
				if m.Edits != 0 {
					t.Errorf("message %s was edited %d times, want none: the retry carried its text", m.ID, m.Edits)
				}
				if m.Nonce == "" || len(m.Nonce) > 25 || nonces[m.Nonce] {
					t.Errorf("message %s has nonce %q, want its own of up to 25 characters", m.ID, m.Nonce)
				}
				nonces[m.Nonce] = true
			}
			posts := 0
			for _, rq := range f.Requests() {
				if rq == "POST /api/v9/channels/"+ch+"/messages" {
					posts++
				}
			}
			if posts != tc.posts {
				t.Errorf("%d create messages, want %d", posts, tc.posts)
			}
		})
	}
}

// The nonce depends on the send's idempotency key alone: a gateway that
// kept no record of an attempt (another replica, a restart) asks with
// the same nonce, and Discord answers with the message made first.
func TestNonceNeedsNoRecord(t *testing.T) {
	t.Parallel()
	f := newFake(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	req := &deliveryv1.SendRequested{Op: deliveryv1.SendOp_SEND_OP_SEND, IdempotencyKey: "turn-restart:0", Text: "hello",
		Target: &deliveryv1.Target{Platform: "discord", ChatId: channel}}
	f.LoseCreateAnswerAfter(0)
	var ids []string
	for attempt := range 2 {
		p, err := NewPlatform(ctx, Config{BotToken: f.Token, APIBaseURL: f.URL()}, slog.New(slog.DiscardHandler))
		if err != nil {
			t.Fatal(err)
		}
		id, err := p.Send(ctx, req)
		if (err == nil) != (attempt == 1) {
			t.Fatalf("attempt %d: %v", attempt+1, err)
		}
		ids = append(ids, id)
	}
	if ms := f.Messages(channel); len(ms) != 1 || ids[1] != ms[0].ID {
		t.Fatalf("chat shows %+v and the retry answered %q, want the one message", ms, ids[1])
	}
	// Another send (another key) is a message of its own.
	other := &deliveryv1.SendRequested{Op: deliveryv1.SendOp_SEND_OP_SEND, IdempotencyKey: "turn-restart:1", Text: "hello",
		Target: &deliveryv1.Target{Platform: "discord", ChatId: channel}}
	p, err := NewPlatform(ctx, Config{BotToken: f.Token, APIBaseURL: f.URL()}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.Send(ctx, other); err != nil {
		t.Fatal(err)
	}
	if ms := f.Messages(channel); len(ms) != 2 {
		t.Fatalf("chat shows %+v, want two messages", ms)
	}
}

// A stream's message whose send lost its answer is asked for again by
// the final, under the same key, with the whole answer: Discord answers
// with the message the stream update made, which is then edited to show
// the answer rather than left with the stale text and its cursor. So
// too when the gateway's records cannot be written (the receipts bucket
// is gone): the attempt cannot tell by its mark whether it is the
// first, and edits the message rather than leave it stale under a
// receipt that says the answer is shown.
func TestRetryWithOtherTextEditsTheEarlierMessage(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		between func(ctx context.Context, b *bus.Bus) error
	}{
		{"its mark written", func(context.Context, *bus.Bus) error { return nil }},
		{"its mark failed", func(ctx context.Context, b *bus.Bus) error {
			return b.JetStream().DeleteKeyValue(ctx, b.Topology().Stream(platform.BucketReceipts))
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f := newFake(t)
			b, _ := run(t, f, Config{})
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			send := sendOf(ctx, t, b)
			update := &deliveryv1.SendRequested{Op: deliveryv1.SendOp_SEND_OP_SEND, IdempotencyKey: "turn-stream:0:m0", TurnId: "turn-stream", Text: "the whole ▉",
				Target: &deliveryv1.Target{Platform: "discord", ChatId: channel}}
			f.LoseCreateAnswerAfter(0)
			if r := send(update); r.GetOk() {
				t.Fatalf("stream update with its answer lost: receipt %v, want a failure", r)
			}
			if err := tc.between(ctx, b); err != nil {
				t.Fatal(err)
			}
			final := proto.Clone(update).(*deliveryv1.SendRequested)
			final.Text, final.Final = "the whole answer", true
			r := send(final)
			if !r.GetOk() {
				t.Fatalf("final: receipt %v, want ok", r)
			}
			ms := f.Messages(channel)
			if len(ms) != 1 || ms[0].Content != "the whole answer" || ms[0].Edits != 1 || r.GetPlatformMessageId() != ms[0].ID {
				t.Fatalf("chat shows %+v, receipt names %q; want the one message, edited to the answer", ms, r.GetPlatformMessageId())
			}
		})
	}
}
