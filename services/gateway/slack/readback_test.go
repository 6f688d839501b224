package slack

import (
	"context"
	"encoding/json"
	"log/slog"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/switchboard-chat/switchboard/pkg/bus"
	deliveryv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/delivery/v1"
	eventsv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/events/v1"
	"github.com/switchboard-chat/switchboard/pkg/logtest"
	"github.com/switchboard-chat/switchboard/pkg/platform"
	"github.com/switchboard-chat/switchboard/services/gateway/slack/slackfake"
)

// sendOf returns a function that asks the gateway on b for a send and
// returns its receipt.
func sendOf(ctx context.Context, t *testing.T, b *bus.Bus) func(*deliveryv1.SendRequested) *deliveryv1.SendReceipt {
	return func(req *deliveryv1.SendRequested) *deliveryv1.SendReceipt {
		t.Helper()
		r := &deliveryv1.SendReceipt{}
		if err := b.Request(ctx, b.Topology().SendSubject("slack"), req, r); err != nil {
			t.Fatal(err)
		}
		return r
	}
}

// A chat.postMessage whose answer was lost (the connection reset after
// Slack made the message) is asked for again by delivery under the same
// idempotency key. Slack takes no key, but the message carries its
// piece's marker in its metadata, and the retry reads the bot's
// messages back (conversations.replies in a thread, .history at the top
// level) and takes the one it finds for sent: the chat shows the answer
// once. So for a reply in a thread, a message at a channel's or a DM's
// top level, and a send split in two messages whose first or second
// lost its answer. A first attempt reads nothing back.
func TestSendWhoseAnswerWasLostIsPostedOnce(t *testing.T) {
	t.Parallel()
	fake := slackfake.New(t)
	_, b, _, _ := gateway(t, fake, Config{AppToken: fake.AppToken})
	thread := "1700000000.000001"
	long := strings.Repeat("x", 38990)
	link := &eventsv1.Attachment{Kind: eventsv1.AttachmentKind_ATTACHMENT_KIND_IMAGE, Caption: strings.Repeat("a caption ", 110),
		Location: &eventsv1.Attachment_Url{Url: "https://example.com/chart.png"}}
	for _, tc := range []struct {
		name     string
		chat     string
		thread   string
		text     string
		media    []*eventsv1.Attachment
		answered int // posts answered before the one whose answer is lost
		shown    int
		read     string // the read-back method the retry calls
	}{
		{name: "in a thread", chat: "C1", thread: thread, text: "hello", shown: 1, read: "conversations.replies"},
		{name: "at a channel's top level", chat: "C2", text: "hello", shown: 1, read: "conversations.history"},
		{name: "at a DM's top level", chat: "D3", text: "hello", shown: 1, read: "conversations.history"},
		{name: "split, first message lost", chat: "C4", thread: thread, text: long, media: []*eventsv1.Attachment{link}, shown: 2, read: "conversations.replies"},
		// The retry skips the first message, which the first attempt
		// recorded, and reads back for the second.
		{name: "split, second message lost", chat: "C5", thread: thread, text: long, media: []*eventsv1.Attachment{link}, answered: 1, shown: 2,
			read: "conversations.replies"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			send := sendOf(ctx, t, b)
			req := &deliveryv1.SendRequested{Op: deliveryv1.SendOp_SEND_OP_SEND, IdempotencyKey: "turn-lost:" + tc.name, Text: tc.text, Attachments: tc.media,
				Target: &deliveryv1.Target{Platform: "slack", ChatId: tc.chat, ThreadId: tc.thread}}
			fake.LosePostAnswerAfter(tc.answered)
			if r := send(req); r.GetOk() || r.GetErrorClass() == deliveryv1.ErrorClass_ERROR_CLASS_PERMANENT {
				t.Fatalf("attempt with the answer lost: receipt %v, want a failure to retry", r)
			}
			if reads := readsOf(fake, tc.chat); len(reads) != 0 {
				t.Fatalf("the first attempt read %v back, want nothing", reads)
			}
			r := send(req)
			if !r.GetOk() {
				t.Fatalf("retry: receipt %v, want ok", r)
			}
			ms := fake.Messages(tc.chat)
			if len(ms) != tc.shown {
				t.Fatalf("chat shows %d messages, want %d", len(ms), tc.shown)
			}
			if r.GetPlatformMessageId() != ms[0].TS {
				t.Errorf("receipt names message %s, want the first one posted, %s", r.GetPlatformMessageId(), ms[0].TS)
			}
			markers := map[string]bool{}
			for _, m := range ms {
				if m.Edits != 0 {
					t.Errorf("message %s was edited %d times, want none: the retry carried its text", m.TS, m.Edits)
				}
				var md struct {
					EventType    string            `json:"event_type"`
					EventPayload map[string]string `json:"event_payload"`
				}
				_ = json.Unmarshal(m.Metadata, &md)
				if mk := md.EventPayload["send"]; md.EventType != "switchboard_send" || mk == "" || markers[mk] {
					t.Errorf("message %s has metadata %s, want its own marker", m.TS, m.Metadata)
				}
				markers[md.EventPayload["send"]] = true
			}
			if reads := readsOf(fake, tc.chat); len(reads) != 1 || reads[0] != tc.read {
				t.Errorf("reads %v, want one %s", reads, tc.read)
			}
		})
	}
}

// readsOf are the read-back methods called for chat.
func readsOf(f *slackfake.Fake, chat string) []string {
	var out []string
	for _, r := range f.Reads() {
		if method, ch, _ := strings.Cut(r, " "); ch == chat {
			out = append(out, method)
		}
	}
	return out
}

func texts(ms []slackfake.Message) []string {
	var out []string
	for _, m := range ms {
		out = append(out, m.Text)
	}
	return out
}

// A stream's message whose send lost its answer is asked for again by
// the final, under the same key, with the whole answer: the read-back
// finds the message the stream update made, which is then edited to
// show the answer rather than left with the stale text and its cursor.
// So too when the gateway's records cannot be written (the receipts
// bucket is gone): the attempt cannot tell by its mark whether it is
// the first, reads back over the last half hour, and edits the message.
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
			fake := slackfake.New(t)
			_, b, _, _ := gateway(t, fake, Config{AppToken: fake.AppToken})
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			send := sendOf(ctx, t, b)
			update := &deliveryv1.SendRequested{Op: deliveryv1.SendOp_SEND_OP_SEND, IdempotencyKey: "turn-stream:0:m0", TurnId: "turn-stream", Text: "the whole ▉",
				Target: &deliveryv1.Target{Platform: "slack", ChatId: "C1", ThreadId: "1700000000.000001"}}
			fake.LosePostAnswerAfter(0)
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
			ms := fake.Messages("C1")
			if len(ms) != 1 || ms[0].Text != "the whole answer" || ms[0].Edits != 1 || r.GetPlatformMessageId() != ms[0].TS {
				t.Fatalf("chat shows %+v, receipt names %q; want the one message, edited to the answer", ms, r.GetPlatformMessageId())
			}
		})
	}
}

// A read-back Slack refuses for good (a token without the history
// scopes, a channel the bot cannot read) never costs the answer: the
// retry posts, as it did before the read-back, and the gateway warns
// once, naming the scopes. A read Slack only puts off (rate limited, an
// internal error) is a failure to retry: the next attempt reads again
// and finds the message.
func TestRefusedReadBackStillPosts(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		code  string
		class deliveryv1.ErrorClass // the retry's, with the read failing
		shown int                   // messages the chat shows at the end
	}{
		{code: "missing_scope", shown: 2},
		{code: "not_in_channel", shown: 2},
		{code: "ratelimited", class: deliveryv1.ErrorClass_ERROR_CLASS_RATE_LIMITED, shown: 1},
		{code: "internal_error", class: deliveryv1.ErrorClass_ERROR_CLASS_RETRYABLE, shown: 1},
	} {
		t.Run(tc.code, func(t *testing.T) {
			t.Parallel()
			fake := slackfake.New(t)
			var logs logtest.Buffer
			_, b, _, _ := gatewayWith(t, fake, Config{AppToken: fake.AppToken}, platform.Options{Log: slog.New(slog.NewTextHandler(&logs, nil))})
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			send := sendOf(ctx, t, b)
			fake.FailHistory(tc.code)
			for _, ch := range []string{"C1", "C2"} {
				req := &deliveryv1.SendRequested{Op: deliveryv1.SendOp_SEND_OP_SEND, IdempotencyKey: "turn-refused:" + ch, Text: "hello",
					Target: &deliveryv1.Target{Platform: "slack", ChatId: ch, ThreadId: "1700000000.000001"}}
				fake.LosePostAnswerAfter(0)
				if r := send(req); r.GetOk() {
					t.Fatalf("attempt with the answer lost: receipt %v, want a failure", r)
				}
				r := send(req)
				if tc.class != deliveryv1.ErrorClass_ERROR_CLASS_UNSPECIFIED {
					if r.GetOk() || r.GetErrorClass() != tc.class {
						t.Fatalf("retry with the read failing: receipt %v, want %v", r, tc.class)
					}
					fake.FailHistory("")
					if r = send(req); !r.GetOk() {
						t.Fatalf("retry with the read back: receipt %v, want ok", r)
					}
					fake.FailHistory(tc.code)
				}
				if !r.GetOk() {
					t.Fatalf("retry: receipt %v, want ok", r)
				}
				if ms := fake.Messages(ch); len(ms) != tc.shown || ms[len(ms)-1].Text != "hello" {
					t.Fatalf("chat %s shows %v, want %d messages", ch, texts(ms), tc.shown)
				}
			}
			warned := strings.Count(logs.String(), "cannot read the bot's messages back")
			if want := map[bool]int{true: 1, false: 0}[tc.shown == 2]; warned != want {
				t.Errorf("warned %d times, want %d:\n%s", warned, want, logs.String())
			}
		})
	}
}

// A read-back that keeps failing in a way a later attempt may get past
// (rate limited, as an app outside Slack's Marketplace is on every
// read of more than one page; a 5xx) fails readTries attempts of the
// message, to be retried; the attempt after them posts without it,
// with a warning, rather than failing each of delivery's attempts
// until the answer is dead-lettered: the answer may show twice, but it
// shows. So at once when the gateway's records cannot keep the count
// (the receipts bucket is gone).
func TestReadBackThatKeepsFailingPosts(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		code   string
		class  deliveryv1.ErrorClass
		failed int // retries that fail before one posts
		broken bool
	}{
		{name: "rate limited", code: "ratelimited", class: deliveryv1.ErrorClass_ERROR_CLASS_RATE_LIMITED, failed: readTries},
		{name: "internal error", code: "internal_error", class: deliveryv1.ErrorClass_ERROR_CLASS_RETRYABLE, failed: readTries},
		{name: "records failing", code: "internal_error", broken: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			fake := slackfake.New(t)
			var logs logtest.Buffer
			_, b, _, _ := gatewayWith(t, fake, Config{AppToken: fake.AppToken}, platform.Options{Log: slog.New(slog.NewTextHandler(&logs, nil))})
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			send := sendOf(ctx, t, b)
			req := &deliveryv1.SendRequested{Op: deliveryv1.SendOp_SEND_OP_SEND, IdempotencyKey: "turn-failing-read", Text: "hello",
				Target: &deliveryv1.Target{Platform: "slack", ChatId: "C1", ThreadId: "1700000000.000001"}}
			fake.LosePostAnswerAfter(0)
			if r := send(req); r.GetOk() {
				t.Fatalf("attempt with the answer lost: receipt %v, want a failure", r)
			}
			if tc.broken {
				if err := b.JetStream().DeleteKeyValue(ctx, b.Topology().Stream(platform.BucketReceipts)); err != nil {
					t.Fatal(err)
				}
			}
			fake.FailHistory(tc.code)
			for i := range tc.failed {
				if r := send(req); r.GetOk() || r.GetErrorClass() != tc.class {
					t.Fatalf("retry %d with the read failing: receipt %v, want %v", i+1, r, tc.class)
				}
			}
			if ms := fake.Messages("C1"); len(ms) != 1 {
				t.Fatalf("chat shows %v after the failed reads, want the first attempt's message alone", texts(ms))
			}
			r := send(req)
			if !r.GetOk() {
				t.Fatalf("retry after %d failed reads: receipt %v, want ok", tc.failed, r)
			}
			if ms := fake.Messages("C1"); len(ms) != 2 || r.GetPlatformMessageId() != ms[1].TS {
				t.Fatalf("chat shows %v, receipt names %q; want the message posted again", texts(ms), r.GetPlatformMessageId())
			}
			if got := len(readsOf(fake, "C1")); got != tc.failed+1 {
				t.Errorf("%d reads, want %d", got, tc.failed+1)
			}
			if !strings.Contains(logs.String(), "read-back of an earlier attempt keeps failing") {
				t.Errorf("no warning of the post without the read:\n%s", logs.String())
			}
		})
	}
}
