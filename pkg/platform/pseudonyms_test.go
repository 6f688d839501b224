package platform_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/switchboard-chat/switchboard/pkg/bus/bustest"
	deliveryv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/delivery/v1"
	eventsv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/events/v1"
	"github.com/switchboard-chat/switchboard/pkg/logtest"
	"github.com/switchboard-chat/switchboard/pkg/platform"
	"github.com/switchboard-chat/switchboard/pkg/platform/platformtest"
	"github.com/switchboard-chat/switchboard/pkg/pseudonym"
	"github.com/switchboard-chat/switchboard/pkg/telemetry"
)

// refusingMemory's sends fail as a platform client's do, with the
// request's URL, the channel in its path, in the error.
type refusingMemory struct{ *platformtest.Memory }

func (refusingMemory) Send(_ context.Context, req *deliveryv1.SendRequested) (string, error) {
	return "", fmt.Errorf(`Post "https://discord.com/api/v9/channels/%s/messages": connection reset`, req.GetTarget().GetChatId())
}

// TestFailedSendLoggedByPseudonyms: the gateway's log of a failed send
// names the chat by its pseudonym, in the platform's error text too.
func TestFailedSendLoggedByPseudonyms(t *testing.T) {
	t.Parallel()
	const chat = "900000000000000001"
	var logs logtest.Buffer
	logCfg := telemetry.LogConfig{Level: "debug", Pseudonymize: true, PseudonymKey: "k"}
	p := refusingMemory{platformtest.NewMemory("bot-refusing", false)}
	r, err := platform.NewRunner(p, bustest.New(t, bustest.EmbeddedURL(t)), platform.Options{Log: telemetry.NewLogger(logCfg, &logs)})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	platformtest.WaitFor(t, "the runner to start", func() bool { return state(r) == platform.StateConnected })
	req := &deliveryv1.SendRequested{IdempotencyKey: "t1:1:0", Op: deliveryv1.SendOp_SEND_OP_SEND,
		Target: &deliveryv1.Target{Platform: "memory", ChatId: chat}, Text: "hello"}
	if rec := r.Execute(ctx, req); rec.GetOk() {
		t.Fatalf("receipt %+v, want a failure", rec)
	}
	out, ps := logs.String(), pseudonym.New(logCfg.PseudonymKey)
	if !strings.Contains(out, "platform operation failed") {
		t.Fatalf("no failure logged:\n%s", out)
	}
	if strings.Contains(out, chat) || !strings.Contains(out, "channels/"+ps.ID(chat)+"/messages") {
		t.Errorf("the failure does not name chat %s by its pseudonym %s:\n%s", chat, ps.ID(chat), out)
	}
}

// signalMemory is a memory platform named signal, whose event ids
// ("<sender>:<timestamp>") hold the sender's number.
type signalMemory struct{ *platformtest.Memory }

func (signalMemory) Name() string { return "signal" }

// TestRejectedEventLoggedByPseudonyms: a refused inbound event is logged
// by its bus message id, whose event id on Signal (the sender's number
// and a timestamp) is a pseudonym.
func TestRejectedEventLoggedByPseudonyms(t *testing.T) {
	t.Parallel()
	const eventID = "+15551234567:1700000000000"
	var logs logtest.Buffer
	logCfg := telemetry.LogConfig{Level: "debug", Pseudonymize: true, PseudonymKey: "k"}
	r, err := platform.NewRunner(signalMemory{platformtest.NewMemory("bot-signal", false)}, bustest.New(t, bustest.EmbeddedURL(t)),
		platform.Options{Log: telemetry.NewLogger(logCfg, &logs), MaxEventBytes: 64})
	if err != nil {
		t.Fatal(err)
	}
	ev := &eventsv1.MessageReceived{EventId: eventID, Source: &eventsv1.SessionSource{ChatId: "+15551234567"}, Text: strings.Repeat("x", 100)}
	if _, err := r.Deliver(t.Context(), ev); !errors.Is(err, platform.ErrRejected) {
		t.Fatalf("Deliver: %v, want it rejected", err)
	}
	out, ps := logs.String(), pseudonym.New(logCfg.PseudonymKey)
	if strings.Contains(out, "5551234567") || !strings.Contains(out, `"msg_id":"signal:bot-signal:`+ps.ID(eventID)+`"`) {
		t.Errorf("the rejection does not name the event by its pseudonym %s:\n%s", ps.ID(eventID), out)
	}
}
