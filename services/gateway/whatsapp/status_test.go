package whatsapp

import (
	"encoding/json"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	deliveryv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/delivery/v1"
	eventsv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/events/v1"
	"github.com/switchboard-chat/switchboard/pkg/logtest"
	"github.com/switchboard-chat/switchboard/pkg/platform"
	"github.com/switchboard-chat/switchboard/pkg/platform/platformtest"
	"github.com/switchboard-chat/switchboard/services/gateway/whatsapp/whatsappfake"
)

// records are the JSON log records in logs with this message.
func records(t *testing.T, logs *logtest.Buffer, msg string) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, line := range strings.Split(logs.String(), "\n") {
		if line == "" {
			continue
		}
		var r map[string]any
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			t.Fatalf("log line %q: %v", line, err)
		}
		if r["msg"] == msg {
			out = append(out, r)
		}
	}
	return out
}

// A message Graph accepted and later reported failed (the 24-hour window
// closed, an undeliverable number) is counted by its error code and
// logged at warn with its message id, chat, code and Meta's title, so an
// operator finds the send the outbox records as sent.
func TestFailedStatusVisible(t *testing.T) {
	t.Parallel()
	f := whatsappfake.New(t)
	var logs logtest.Buffer
	h := start(t, f, testConfig(f), platform.Options{}, slog.New(slog.NewJSONHandler(&logs, nil)))
	var ids []string
	for _, key := range []string{"late", "nowhere"} {
		r := h.send(t, &deliveryv1.SendRequested{Op: deliveryv1.SendOp_SEND_OP_SEND, IdempotencyKey: key, Text: "hello", Target: target()})
		if !r.GetOk() {
			t.Fatalf("receipt %v", r)
		}
		ids = append(ids, r.GetPlatformMessageId())
	}
	before := map[string]float64{}
	for _, code := range []string{"131047", "131026", "unknown"} {
		before[code] = testutil.ToFloat64(sendFailures.WithLabelValues(code))
	}
	for i, code := range []int{131047, 131026} {
		if got := h.post(t, f.Status(ids[i], ann, "failed", code)); got != http.StatusOK {
			t.Fatalf("status answered %d", got)
		}
	}
	if got := h.post(t, f.Status("wamid.NOCODE", ann, "failed", 0)); got != http.StatusOK {
		t.Fatalf("status answered %d", got)
	}
	if got := h.post(t, f.Status(ids[0], ann, "delivered", 0)); got != http.StatusOK {
		t.Fatalf("status answered %d", got)
	}
	for code, want := range map[string]float64{"131047": 1, "131026": 1, "unknown": 1} {
		if got := testutil.ToFloat64(sendFailures.WithLabelValues(code)) - before[code]; got < want {
			t.Errorf("send failures with code %s counted %v, want %v", code, got, want)
		}
	}
	var recs []map[string]any
	platformtest.WaitFor(t, "the failures logged", func() bool {
		recs = records(t, &logs, "whatsapp reports a sent message failed")
		return len(recs) == 3
	})
	for i, want := range []struct {
		id, title string
		code      float64
	}{{ids[0], "Re-engagement message", 131047}, {ids[1], "Message undeliverable", 131026}, {"wamid.NOCODE", "", 0}} {
		r := recs[i]
		if r["level"] != "WARN" || r["message_id"] != want.id || r["code"] != want.code || r["title"] != want.title || r["chat_id"] != ann {
			t.Errorf("log record %v, want message %s code %v title %q", r, want.id, want.code, want.title)
		}
	}
	if d, _ := recs[0]["details"].(string); !strings.Contains(d, "24 hours") {
		t.Errorf("details %q, want Meta's", d)
	}
}

// A send whose answer was lost (Graph timed out, or answered 500 after
// it took the message) may have gone out: the Cloud API takes no
// idempotency key, and the retry posted the message again. Each message
// now carries its send's tag as biz_opaque_callback_data, which Meta
// returns in the message's statuses; the retry looks for that status
// first: reported, the first message is the send's; not yet, it waits
// (retryable) up to the report wait; none by then, it posts again.
func TestSendWhoseAnswerWasLostIsNotSentTwice(t *testing.T) {
	t.Parallel()
	f := whatsappfake.New(t)
	cfg := testConfig(f)
	cfg.reportWait = 3 * time.Second
	h := start(t, f, cfg, platform.Options{})
	to := recipient(target().GetChatId())
	text := func(key string) *deliveryv1.SendRequested {
		return &deliveryv1.SendRequested{Op: deliveryv1.SendOp_SEND_OP_SEND, IdempotencyKey: key, Text: key, Target: target()}
	}
	image := &deliveryv1.SendRequested{Op: deliveryv1.SendOp_SEND_OP_SEND, IdempotencyKey: "image", Target: target(),
		Attachments: []*eventsv1.Attachment{{Kind: eventsv1.AttachmentKind_ATTACHMENT_KIND_IMAGE, Location: &eventsv1.Attachment_Url{Url: "https://example.com/a.png"}}}}
	lost := func(req *deliveryv1.SendRequested) whatsappfake.Message {
		t.Helper()
		before := len(f.Messages(to))
		f.LoseAnswers(1)
		if r := h.send(t, req); r.GetOk() || r.GetErrorClass() != deliveryv1.ErrorClass_ERROR_CLASS_RETRYABLE {
			t.Fatalf("%s: first attempt %v, want retryable", req.GetIdempotencyKey(), r)
		}
		msgs := f.Messages(to)
		if len(msgs) != before+1 || msgs[before].CallbackData == "" {
			t.Fatalf("%s: sent %+v, want one message with its callback data", req.GetIdempotencyKey(), msgs[before:])
		}
		return msgs[before]
	}
	once := func(req *deliveryv1.SendRequested, first whatsappfake.Message) {
		t.Helper()
		r := h.send(t, req)
		n := 0
		for _, m := range f.Messages(to) {
			if m.CallbackData == first.CallbackData {
				n++
			}
		}
		if !r.GetOk() || r.GetPlatformMessageId() != first.ID || n != 1 {
			t.Fatalf("%s: retry %v with %d messages sent, want the first attempt's %s, sent once", req.GetIdempotencyKey(), r, n, first.ID)
		}
	}

	// Reported before the retry: text and media alike.
	for _, req := range []*deliveryv1.SendRequested{text("reported"), image} {
		first := lost(req)
		if got := h.post(t, f.StatusOf(first, "sent")); got != http.StatusOK {
			t.Fatalf("status webhook: %d", got)
		}
		once(req, first)
	}

	// Retried before the report: it waits, then takes the report.
	req := text("waiting")
	first := lost(req)
	if r := h.send(t, req); r.GetOk() || r.GetErrorClass() != deliveryv1.ErrorClass_ERROR_CLASS_RETRYABLE || r.GetRetryAfterMs() <= 0 {
		t.Fatalf("retry before the report: %v, want retryable with a wait", r)
	}
	if got := h.post(t, f.StatusOf(first, "delivered")); got != http.StatusOK {
		t.Fatalf("status webhook: %d", got)
	}
	once(req, first)

	// No report within the wait: the first attempt is taken as lost and
	// the message is sent again.
	req = text("never reported")
	first = lost(req)
	time.Sleep(cfg.reportWait)
	if r := h.send(t, req); !r.GetOk() || r.GetPlatformMessageId() == first.ID || len(f.Messages(to)) != 5 {
		t.Fatalf("retry after the wait: %v, sent %d, want the message sent again", r, len(f.Messages(to)))
	}
}

// The wait for a report follows every unanswered attempt, not only the
// first: a retry posted after the first attempt's wait whose answer is
// lost as well may have gone out too, and the next retry waits for its
// report before posting a third time.
func TestEveryUnansweredAttemptIsWaitedFor(t *testing.T) {
	t.Parallel()
	f := whatsappfake.New(t)
	cfg := testConfig(f)
	cfg.reportWait = time.Second
	h := start(t, f, cfg, platform.Options{})
	to := recipient(target().GetChatId())
	req := &deliveryv1.SendRequested{Op: deliveryv1.SendOp_SEND_OP_SEND, IdempotencyKey: "twice lost", Text: "hello", Target: target()}
	f.LoseAnswers(1)
	if r := h.send(t, req); r.GetOk() || r.GetErrorClass() != deliveryv1.ErrorClass_ERROR_CLASS_RETRYABLE {
		t.Fatalf("attempt whose answer is lost: %v, want retryable", r)
	}
	time.Sleep(cfg.reportWait) // no report: the next attempt posts again
	f.LoseAnswers(1)
	if r := h.send(t, req); r.GetOk() || r.GetErrorClass() != deliveryv1.ErrorClass_ERROR_CLASS_RETRYABLE || len(f.Messages(to)) != 2 {
		t.Fatalf("second attempt: %v, sent %d; want retryable and 2 sent", r, len(f.Messages(to)))
	}
	// The second attempt's answer was lost as well: its retry waits for
	// its report instead of posting a third message at once.
	if r := h.send(t, req); r.GetOk() || r.GetRetryAfterMs() <= 0 || len(f.Messages(to)) != 2 {
		t.Fatalf("retry right after the second unanswered attempt: %v, sent %d; want a wait and 2 sent", r, len(f.Messages(to)))
	}
}

// A failed status of a message sent to a business-scoped user id (a user
// whose username hides their number) names them in recipient_user_id,
// with no recipient_id: the warning still says which chat it was.
func TestFailedStatusOfBusinessScopedUser(t *testing.T) {
	t.Parallel()
	const bsuid = "US.13491208655302741918"
	f := whatsappfake.New(t)
	var logs logtest.Buffer
	h := start(t, f, testConfig(f), platform.Options{}, slog.New(slog.NewJSONHandler(&logs, nil)))
	r := h.send(t, &deliveryv1.SendRequested{Op: deliveryv1.SendOp_SEND_OP_SEND, IdempotencyKey: "late", Text: "hello",
		Target: &deliveryv1.Target{Platform: "whatsapp", Account: phoneID, ChatId: bsuid}})
	if !r.GetOk() {
		t.Fatalf("receipt %v", r)
	}
	if got := h.post(t, f.Status(r.GetPlatformMessageId(), bsuid, "failed", 131047)); got != http.StatusOK {
		t.Fatalf("status answered %d", got)
	}
	var recs []map[string]any
	platformtest.WaitFor(t, "the failure logged", func() bool {
		recs = records(t, &logs, "whatsapp reports a sent message failed")
		return len(recs) == 1
	})
	if recs[0]["message_id"] != r.GetPlatformMessageId() || recs[0]["chat_id"] != bsuid {
		t.Fatalf("log record %v, want message %s of chat %s", recs[0], r.GetPlatformMessageId(), bsuid)
	}
}
