package whatsapp

import (
	"net/http"
	"strings"
	"testing"

	"github.com/switchboard-chat/switchboard/pkg/logtest"
	"github.com/switchboard-chat/switchboard/pkg/platform"
	"github.com/switchboard-chat/switchboard/pkg/platform/platformtest"
	"github.com/switchboard-chat/switchboard/pkg/pseudonym"
	"github.com/switchboard-chat/switchboard/pkg/telemetry"
	"github.com/switchboard-chat/switchboard/services/gateway/whatsapp/whatsappfake"
)

// TestFailedStatusLoggedByPseudonyms: a wamid is base64 that holds the
// recipient's number ("HBgL" + base64 of "15551234567"), so the log of a
// failed message's status names it, and the recipient, by pseudonyms.
func TestFailedStatusLoggedByPseudonyms(t *testing.T) {
	t.Parallel()
	const wamid = "wamid.HBgLMTU1NTEyMzQ1NjcVAgARGBI5QTNDQTVCM0Q0Q0Q2RTY3RTcA"
	f := whatsappfake.New(t)
	var logs logtest.Buffer
	logCfg := telemetry.LogConfig{Level: "info", Pseudonymize: true, PseudonymKey: "k"}
	h := start(t, f, testConfig(f), platform.Options{}, telemetry.NewLogger(logCfg, &logs))
	if code := h.post(t, f.Status(wamid, ann, "failed", 131047)); code != http.StatusOK {
		t.Fatalf("status answered %d", code)
	}
	p := pseudonym.New(logCfg.PseudonymKey)
	platformtest.WaitFor(t, "the failure's log line", func() bool { return strings.Contains(logs.String(), "sent message failed") })
	out := logs.String()
	if strings.Contains(out, wamid) || strings.Contains(out, ann) || !strings.Contains(out, `"message_id":"`+p.ID(wamid)+`"`) {
		t.Errorf("the log does not name the message %s and its recipient by pseudonyms:\n%s", p.ID(wamid), out)
	}
}
