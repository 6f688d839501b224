package delivery_test

import (
	"strings"
	"testing"
	"time"

	deliveryv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/delivery/v1"
	repliesv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/replies/v1"
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

// TestStreamLineFailuresLoggedByPseudonyms: a stream update the gateway
// did not answer, then refused with an error naming the chat, is logged
// (the final waiting for it, then sending without it) with the chat's
// pseudonym in the platform's text.
func TestStreamLineFailuresLoggedByPseudonyms(t *testing.T) {
	t.Parallel()
	const chat = "900000000000000002"
	e := newEnv(t)
	e.gw.setBehaviour(func(r *deliveryv1.SendRequested, try int) behaviour {
		switch {
		case r.GetFinal():
			return behaviour{}
		case try == 1:
			return behaviour{lost: true}
		}
		return behaviour{fail: &deliveryv1.SendReceipt{ErrorClass: deliveryv1.ErrorClass_ERROR_CLASS_RETRYABLE,
			Error: `Post "https://discord.com/api/v9/channels/` + r.GetTarget().GetChatId() + `/messages": EOF`}}
	})
	var logs logtest.Buffer
	logCfg := telemetry.LogConfig{Level: "warn", Pseudonymize: true, PseudonymKey: "k"}
	e.startLogged(t, testConfig(), "a", telemetry.NewLogger(logCfg, &logs))
	for seq, body := range []any{&repliesv1.TextDelta{Text: "Let me check the clock for you."}, final("the answer")} {
		ev := event("t1", int64(seq+1), "s1", body)
		ev.Target.Platform, ev.Target.ChatId = "stream", chat
		e.publish(t, ev)
		if seq == 0 {
			e.consumed(t, "s1") // the delta's send timed out
		}
	}
	eventually(t, e.clock, 5*time.Second, "the final sent without the stream update", func() bool {
		return strings.Contains(logs.String(), "stream update still unconfirmed")
	})

	out, p := logs.String(), pseudonym.New(logCfg.PseudonymKey)
	if strings.Contains(out, chat) {
		t.Errorf("the log names chat %s:\n%s", chat, out)
	}
	for _, msg := range []string{"handler failed; redelivering", "stream update still unconfirmed"} {
		if !strings.Contains(out, msg) {
			t.Errorf("no %q logged:\n%s", msg, out)
		}
	}
	if !strings.Contains(out, `channels/`+p.ID(chat)+`/messages`) {
		t.Errorf("no error naming the chat %s by its pseudonym %s:\n%s", chat, p.ID(chat), out)
	}
}
