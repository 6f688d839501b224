package delivery_test

import (
	"testing"
	"time"

	deliveryv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/delivery/v1"
	repliesv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/replies/v1"
)

// A notice that comes before a turn's answer (the home channel notice, a
// busy acknowledgement, a reset notice) reaches the chat before the
// answer's first message, however long the platform holds its send: the
// reply partition hands delivery the turn's events only after the
// notice's (the router publishes it first), and the notice, when its
// direct send gives up waiting (a slow platform, a send slot held by the
// gateway's other sends), is an outbox row the answer's rows and stream
// wait behind. The held request is not sent twice: its retries are
// answered "still being sent", then with its receipt.
func TestNoticeBeforeAnswerKeepsItsPlace(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, platform, kind string
		hold                 behaviour
	}{
		{"home notice, slow platform, streamed answer", "stream", "home", behaviour{late: time.Second}},
		{"busy notice, send slot held, streamed answer", "stream", "busy", behaviour{queued: time.Second}},
		{"reset notice, slow platform, answer in one message", "test", "reset", behaviour{late: time.Second}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			e.start(t, testConfig(), "a")
			e.gw.setBehaviour(func(req *deliveryv1.SendRequested, try int) behaviour {
				if req.GetTurnId() == "n1" && try == 1 {
					return tc.hold
				}
				return behaviour{}
			})
			publish := func(turn string, seq int64, body any) {
				ev := event(turn, seq, "s1", body)
				ev.Target.Platform = tc.platform
				e.publish(t, ev)
			}
			publish("n1", 1, &repliesv1.Notice{Text: "the notice", Kind: tc.kind})
			publish("t1", 1, &repliesv1.TextDelta{Text: "the answer, streamed"})
			publish("t1", 2, final("the answer, streamed and done"))
			eventually(t, e.clock, 50*time.Millisecond, "the notice and the answer", func() bool {
				notice, answer := false, false
				for _, c := range e.gw.sends() {
					notice = notice || c.Req.GetTurnId() == "n1"
					answer = answer || c.Req.GetTurnId() == "t1" && c.Req.GetFinal()
				}
				return notice && answer
			})
			var order []string
			for _, c := range e.gw.sends() {
				if c.Op == deliveryv1.SendOp_SEND_OP_SEND {
					order = append(order, c.Req.GetTurnId())
				}
			}
			if len(order) != 2 || order[0] != "n1" || order[1] != "t1" {
				t.Fatalf("messages posted for %v, want the notice's once and then the answer's", order)
			}
		})
	}
}
