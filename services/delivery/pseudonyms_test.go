package delivery_test

import (
	"strings"
	"testing"
	"time"

	deliveryv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/delivery/v1"
	"github.com/switchboard-chat/switchboard/pkg/logtest"
	"github.com/switchboard-chat/switchboard/pkg/pseudonym"
	"github.com/switchboard-chat/switchboard/pkg/telemetry"
)

// TestSendFailuresLoggedByPseudonyms: a gateway's error whose text names
// the chat (a URL with the channel in its path, as discordgo's and
// net/http's errors are) is logged, on each retry and when the row is
// dead-lettered, with the chat's pseudonym in its place.
func TestSendFailuresLoggedByPseudonyms(t *testing.T) {
	t.Parallel()
	const chat = "900000000000000001"
	e := newEnv(t)
	e.gw.setBehaviour(func(r *deliveryv1.SendRequested, _ int) behaviour {
		return behaviour{fail: &deliveryv1.SendReceipt{ErrorClass: deliveryv1.ErrorClass_ERROR_CLASS_RETRYABLE,
			Error: `Post "https://discord.com/api/v9/channels/` + r.GetTarget().GetChatId() + `/messages": EOF`}}
	})
	cfg := testConfig()
	cfg.MaxAttempts = 2
	var logs logtest.Buffer
	logCfg := telemetry.LogConfig{Level: "warn", Pseudonymize: true, PseudonymKey: "k"}
	e.startLogged(t, cfg, "a", telemetry.NewLogger(logCfg, &logs))
	ev := event("t1", 1, "s1", final("hello"))
	ev.Target.ChatId = chat
	e.publish(t, ev)
	eventually(t, e.clock, 100*time.Millisecond, "the dead letter", func() bool { return strings.Contains(logs.String(), "delivery dead-lettered") })

	out, p := logs.String(), pseudonym.New(logCfg.PseudonymKey)
	if strings.Contains(out, chat) {
		t.Errorf("the log names chat %s:\n%s", chat, out)
	}
	for _, msg := range []string{"send failed; will retry", "delivery dead-lettered"} {
		if !strings.Contains(out, `"msg":"`+msg+`"`) || !strings.Contains(out, `channels/`+p.ID(chat)+`/messages`) {
			t.Errorf("no %q naming the chat %s by its pseudonym %s:\n%s", msg, chat, p.ID(chat), out)
		}
	}
}
