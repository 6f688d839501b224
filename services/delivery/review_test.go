package delivery_test

import (
	"context"
	"strings"
	"testing"
	"time"

	deliveryv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/delivery/v1"
	repliesv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/replies/v1"
)

// A streamed message whose send timed out after the platform took it
// (delivery's request timeout is shorter than the gateway's) is found
// again under its idempotency key when the final comes: the final is
// written over it, so the chat shows one answer, not a stale half with
// its cursor and the whole answer below it.
func TestStreamSendThatTimedOutIsEditedNotDoubled(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name string
		last any
		want string
	}{
		{"final", final("the whole answer, at last"), "the whole answer, at last"},
		{"error", &repliesv1.ReplyError{Code: "interrupted"}, ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			e.gw.setBehaviour(func(req *deliveryv1.SendRequested, try int) behaviour {
				return behaviour{hang: req.GetOp() == deliveryv1.SendOp_SEND_OP_SEND && try == 1}
			})
			e.start(t, testConfig(), "a")
			partial := strings.Repeat("the whole ", 3)
			e.publishStream(t, "t1", 1, "s1", &repliesv1.TextDelta{Text: partial})
			eventually(t, e.clock, 0, "the streamed message", func() bool { return len(e.gw.sends()) == 1 })
			e.consumed(t, "s1") // its request timed out: no receipt
			e.publishStream(t, "t1", 2, "s1", tt.last)
			eventually(t, e.clock, 0, "the final edit", func() bool {
				p := e.gw.sends()
				return len(p) > 1 && p[len(p)-1].Req.GetFinal()
			})
			time.Sleep(200 * time.Millisecond)
			p := e.gw.sends()
			sends := 0
			for _, c := range p {
				if c.Op == deliveryv1.SendOp_SEND_OP_SEND {
					sends++
				}
			}
			last := p[len(p)-1]
			if sends != 1 || last.Op != deliveryv1.SendOp_SEND_OP_EDIT || last.Req.GetMessageId() != "m1" {
				t.Fatalf("%d messages posted (want 1); the final is %v of %q", sends, last.Op, last.Req.GetMessageId())
			}
			want := tt.want
			if want == "" {
				want = partial
			}
			if last.Req.GetText() != want {
				t.Errorf("final text %q, want %q", last.Req.GetText(), want)
			}
		})
	}
}

// A stream edit that timed out while the platform was slow is still
// applied after delivery gave up on it. The final's edit must not go out
// before it lands, or the stale edit, cursor and all, overwrites the
// answer: the final waits until the gateway can say the edit is done.
func TestTimedOutStreamEditDoesNotOverwriteTheFinal(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.start(t, testConfig(), "a")
	stream := func(seq int64, body any) { e.publishStream(t, "t1", seq, "s1", body) }
	chunk := strings.Repeat("x", 30)
	stream(1, &repliesv1.TextDelta{Text: chunk})
	eventually(t, e.clock, 0, "the streamed message", func() bool { return len(e.gw.sends()) == 1 })
	e.consumed(t, "s1")
	e.gw.setBehaviour(func(req *deliveryv1.SendRequested, try int) behaviour {
		if req.GetOp() == deliveryv1.SendOp_SEND_OP_EDIT && !req.GetFinal() && try == 1 {
			return behaviour{late: 1500 * time.Millisecond}
		}
		return behaviour{}
	})
	e.clock.Advance(time.Second)
	stream(2, &repliesv1.TextDelta{Text: chunk})
	e.consumed(t, "s1") // the edit's request timed out; the platform still works on it
	stream(3, final(chunk+chunk+" done"))
	eventually(t, e.clock, 0, "the final edit and the stale one", func() bool {
		n := 0
		for _, c := range e.gw.sends() {
			if c.Op == deliveryv1.SendOp_SEND_OP_EDIT {
				n++
			}
		}
		return n >= 2 && len(e.gw.sends()) >= 3 && func() bool {
			for _, c := range e.gw.sends() {
				if c.Req.GetFinal() {
					return true
				}
			}
			return false
		}()
	})
	time.Sleep(1500 * time.Millisecond)
	p := e.gw.sends()
	last := p[len(p)-1]
	if last.Op != deliveryv1.SendOp_SEND_OP_EDIT || last.Req.GetText() != chunk+chunk+" done" || last.Req.GetMessageId() != "m1" {
		t.Fatalf("the message ends as %v %q of %q, want the final answer", last.Op, last.Req.GetText(), last.Req.GetMessageId())
	}
	for _, c := range p {
		if c.Op == deliveryv1.SendOp_SEND_OP_SEND && c.Req.GetTurnId() == "t1" && c.Key != "t1:0:m0" {
			t.Errorf("a second message was posted: %q", c.Req.GetText())
		}
	}
}

// A reply whose every attempt failed is dead-lettered, and the user is
// told, as Hermes tells them, once per turn: a failed notice is not
// followed by another, and a permanent refusal (Hermes's plain-text
// fallback case, not its retries) sends none.
func TestUndeliveredReplyTellsTheUserOnce(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name        string
		class       deliveryv1.ErrorClass
		noticeFails bool
		want        string // the notice row's state; "" for none
	}{
		{"retries exhausted", deliveryv1.ErrorClass_ERROR_CLASS_RETRYABLE, false, "sent"},
		{"the notice fails too", deliveryv1.ErrorClass_ERROR_CLASS_RETRYABLE, true, "failed"},
		{"permanent", deliveryv1.ErrorClass_ERROR_CLASS_PERMANENT, false, ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			e.gw.setBehaviour(func(req *deliveryv1.SendRequested, _ int) behaviour {
				if strings.HasPrefix(req.GetIdempotencyKey(), "t1:1:") || tt.noticeFails {
					return behaviour{fail: &deliveryv1.SendReceipt{ErrorClass: tt.class, Error: "502 Bad Gateway"}}
				}
				return behaviour{}
			})
			cfg := testConfig()
			cfg.MaxAttempts = 2
			e.start(t, cfg, "a")
			long := strings.Repeat("word ", 1000) // two chunks on "test" (4,000)
			e.publish(t, event("t1", 1, "s1", final(long)))
			eventually(t, e.clock, 0, "both chunks dead-lettered", func() bool {
				return rowState(t, e.db, "t1:1:0") == "failed" && rowState(t, e.db, "t1:1:1") == "failed"
			})
			if tt.want != "" {
				eventually(t, e.clock, 0, "the notice "+tt.want, func() bool { return rowState(t, e.db, "t1:undelivered") == tt.want })
			}
			time.Sleep(300 * time.Millisecond)
			if got := rowState(t, e.db, "t1:undelivered"); got != tt.want {
				t.Fatalf("notice row %q, want %q", got, tt.want)
			}
			var rows int
			if err := e.db.QueryRow(context.Background(), `SELECT count(*) FROM delivery_outbox`).Scan(&rows); err != nil {
				t.Fatal(err)
			}
			if want := 2 + map[bool]int{true: 1, false: 0}[tt.want != ""]; rows != want {
				t.Errorf("%d outbox rows, want %d", rows, want)
			}
			if tt.want == "sent" {
				calls, _ := e.gw.snapshot()
				var notice *deliveryv1.SendRequested
				for _, c := range calls {
					if c.Key == "t1:undelivered" {
						notice = c.Req
					}
				}
				if notice == nil || !strings.Contains(notice.GetText(), "delivery failed") || !notice.GetFinal() ||
					notice.GetErrorCode() != "undelivered" || notice.GetTarget().GetChatId() != "chat-s1" {
					t.Errorf("notice %v", notice)
				}
			}
		})
	}
}
