package slack

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/switchboard-chat/switchboard/pkg/bus"
	deliveryv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/delivery/v1"
	"github.com/switchboard-chat/switchboard/pkg/platform/platformtest"
	"github.com/switchboard-chat/switchboard/services/gateway/slack/slackfake"
)

// statusTurn sends a turn's requests to the gateway as delivery does.
type statusTurn struct {
	t      *testing.T
	fake   *slackfake.Fake
	ctx    context.Context
	b      *bus.Bus
	send   func(*deliveryv1.SendRequested) *deliveryv1.SendReceipt
	target *deliveryv1.Target
	turn   string
}

func newStatusTurn(t *testing.T, fake *slackfake.Fake, cfg Config, target *deliveryv1.Target, turn string) *statusTurn {
	t.Helper()
	cfg.AppToken = fake.AppToken
	_, b, _, _ := gateway(t, fake, cfg)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	send := func(req *deliveryv1.SendRequested) *deliveryv1.SendReceipt {
		t.Helper()
		r := &deliveryv1.SendReceipt{}
		if err := b.Request(ctx, b.Topology().SendSubject("slack"), req, r); err != nil {
			t.Fatal(err)
		}
		return r
	}
	return &statusTurn{t: t, fake: fake, b: b, ctx: ctx, send: send, target: target, turn: turn}
}

func (s *statusTurn) typing() *deliveryv1.SendReceipt {
	return s.send(&deliveryv1.SendRequested{Op: deliveryv1.SendOp_SEND_OP_TYPING, Target: s.target, TurnId: s.turn})
}

// post sends text as a new message of the turn (final: its last).
func (s *statusTurn) post(key, text string, final bool) *deliveryv1.SendReceipt {
	s.t.Helper()
	r := s.send(&deliveryv1.SendRequested{Op: deliveryv1.SendOp_SEND_OP_SEND, IdempotencyKey: s.turn + ":" + key, Text: text,
		Target: s.target, TurnId: s.turn, Final: final})
	if !r.GetOk() {
		s.t.Fatalf("send %s: receipt %v", key, r)
	}
	return r
}

// TestAssistantStatus: while a turn runs, its thread shows Hermes's
// assistant status, "is thinking..." (assistant.threads.setStatus, as
// Hermes's send_typing), set again by each typing request; once the
// turn's final request was carried out the status is cleared, as
// Hermes's stop_typing, also where Slack would leave it: the edit that
// ends a streamed answer, an answer at the top level (reply_in_thread
// off), a turn that ended without a message.
func TestAssistantStatus(t *testing.T) {
	t.Parallel()
	const thread = "1700000100.000100"
	for i, tc := range []struct {
		name string
		set  func(*Config)
		// end carries out the rest of the turn after its first typing
		// request.
		end func(s *statusTurn)
	}{
		{name: "answer posted in the thread", end: func(s *statusTurn) {
			s.post("0", "the answer", true)
		}},
		{name: "streamed answer ends with an edit", end: func(s *statusTurn) {
			// The first streamed piece is a message in the thread, which
			// clears the status at Slack; the next typing request sets it
			// again, and the final edit ends the turn.
			r := s.post("0", "the ans", false)
			s.typing()
			if got := s.fake.Status("C0CHANNEL", thread); got != "is thinking..." {
				s.t.Fatalf("status after the streamed piece and a typing request: %q", got)
			}
			e := s.send(&deliveryv1.SendRequested{Op: deliveryv1.SendOp_SEND_OP_EDIT, IdempotencyKey: s.turn + ":1", Text: "the answer",
				Target: s.target, TurnId: s.turn, MessageId: r.GetPlatformMessageId(), Final: true})
			if !e.GetOk() {
				s.t.Fatalf("final edit: receipt %v", e)
			}
		}},
		{name: "turn ended without a message", end: func(s *statusTurn) {
			s.send(&deliveryv1.SendRequested{Op: deliveryv1.SendOp_SEND_OP_TYPING, Target: s.target, TurnId: s.turn, Final: true})
		}},
		{name: "answer at the top level", set: func(c *Config) { c.ReplyInThread = false }, end: func(s *statusTurn) {
			s.post("0", "the answer", true)
			if m := s.fake.Messages("C0CHANNEL"); len(m) != 1 || m[0].ThreadTS != "" {
				s.t.Fatalf("posted %+v, want the answer at the top level", m)
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			fake := slackfake.New(t)
			cfg := DefaultConfig()
			if tc.set != nil {
				tc.set(&cfg)
			}
			target := &deliveryv1.Target{Platform: "slack", ChatId: "C0CHANNEL", ThreadId: thread, ReplyToMessageId: thread}
			s := newStatusTurn(t, fake, cfg, target, fmt.Sprintf("turn-%d", i))
			for range 2 {
				if r := s.typing(); !r.GetOk() {
					t.Fatalf("typing receipt %v", r)
				}
			}
			if got := fake.Status("C0CHANNEL", thread); got != "is thinking..." {
				t.Fatalf("status while the turn runs: %q, want %q", got, "is thinking...")
			}
			tc.end(s)
			if got := fake.Status("C0CHANNEL", thread); got != "" {
				t.Errorf("status after the turn: %q, want none", got)
			}
			calls := fake.StatusCalls()
			if last := calls[len(calls)-1]; last != (slackfake.StatusCall{Channel: "C0CHANNEL", ThreadTS: thread}) {
				t.Errorf("last status call %+v, want the thread's status cleared", last)
			}
		})
	}
}

// TestAssistantStatusNeverHoldsTheAnswer: Slack refusing the status (a
// token without the scope, a thread it does not take) or
// hanging on it leaves the turn's answer as it was: sent once, its
// receipt in time; a thread-less DM (dm_top_level_threads_as_sessions
// off) shows no status and makes no call, as Hermes's send_typing.
func TestAssistantStatusNeverHoldsTheAnswer(t *testing.T) {
	t.Parallel()
	for i, tc := range []struct {
		name   string
		target *deliveryv1.Target
		fake   func(*slackfake.Fake)
		// async: the typing request is not waited for (Slack hangs on
		// it, and delivery goes on without its answer).
		async bool
		calls int // status calls expected, at least
	}{
		{name: "missing scope", fake: func(f *slackfake.Fake) { f.FailStatus("missing_scope") }, calls: 2},
		{name: "thread refused", fake: func(f *slackfake.Fake) { f.FailStatus("invalid_thread_ts") }, calls: 2},
		{name: "slack hangs", fake: func(f *slackfake.Fake) { f.StallStatus(15 * time.Second) }, async: true, calls: 2},
		{name: "dm without a thread", target: &deliveryv1.Target{Platform: "slack", ChatId: "D0DM", ReplyToMessageId: "1700000100.000100"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			fake := slackfake.New(t)
			if tc.fake != nil {
				tc.fake(fake)
			}
			target := tc.target
			if target == nil {
				target = &deliveryv1.Target{Platform: "slack", ChatId: "C0CHANNEL", ThreadId: "1700000100.000100", ReplyToMessageId: "1700000100.000100"}
			}
			s := newStatusTurn(t, fake, DefaultConfig(), target, fmt.Sprintf("turn-%d", i))
			if tc.async {
				req := &deliveryv1.SendRequested{Op: deliveryv1.SendOp_SEND_OP_TYPING, Target: target, TurnId: s.turn}
				go func() { _ = s.b.Request(s.ctx, s.b.Topology().SendSubject("slack"), req, &deliveryv1.SendReceipt{}) }()
				platformtest.WaitFor(t, "the typing request at Slack", func() bool { return len(fake.StatusCalls()) == 1 })
			} else {
				s.typing()
			}
			start := time.Now()
			s.post("0", "the answer", true)
			// A message waits 2 s at most for a typing call in flight
			// (platform.Options.TypingHold), the end of typing 2 s at
			// most after the answer is out.
			if d := time.Since(start); d > 10*time.Second {
				t.Errorf("the answer's receipt took %v", d)
			}
			if m := fake.Messages(target.GetChatId()); len(m) != 1 || m[0].Text != "the answer" {
				t.Errorf("posted %+v, want the answer once", m)
			}
			if tc.calls == 0 {
				if calls := fake.StatusCalls(); len(calls) != 0 {
					t.Errorf("status calls %+v, want none", calls)
				}
				return
			}
			platformtest.WaitFor(t, "the status calls", func() bool { return len(fake.StatusCalls()) >= tc.calls })
		})
	}
}
