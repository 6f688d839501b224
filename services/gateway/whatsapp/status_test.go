package whatsapp

import (
	"encoding/json"
	"log/slog"
	"net/http"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"

	deliveryv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/delivery/v1"
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
