package worker_test

import (
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"google.golang.org/protobuf/proto"

	"github.com/switchboard-chat/switchboard/pkg/bus"
	"github.com/switchboard-chat/switchboard/pkg/fakellm"
	turnsv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/turns/v1"
	"github.com/switchboard-chat/switchboard/services/worker"
)

// steer sends /steer's control as a router of this release does and
// reports whether the running turn took the text (false: it declined,
// and the router queues the text as a message of its own).
func (h *harness) steer(key, text string) bool {
	h.t.Helper()
	data, err := proto.Marshal(&turnsv1.TurnControlRequested{SessionKey: key,
		Action: turnsv1.ControlAction_CONTROL_ACTION_STEER, Text: text})
	if err != nil {
		h.t.Fatal(err)
	}
	msg := nats.NewMsg(h.bus.Topology().ControlSubject(key))
	msg.Data = data
	msg.Header.Set(bus.HeaderControl, bus.ControlVersion)
	reply, err := h.bus.Conn().RequestMsg(msg, 10*time.Second)
	if err != nil {
		h.t.Fatal(err)
	}
	return len(reply.Data) == 0
}

// Steering taken by a turn is text the user was told reached the agent:
// a turn that will read no more of it must decline it, so that the
// router queues it, instead of taking it and dropping it. A turn at
// agent.max_iterations asks the model one last question, without tools,
// and a /moa turn's reference models and aggregator read no steering:
// text sent while they run was taken and lost.
func TestSteeringATurnThatWillNotReadItIsDeclined(t *testing.T) {
	t.Parallel()
	const slow = 1500 * time.Millisecond // within the harness's callTimeout
	cases := []struct {
		name string
		mod  func(*worker.Config, *worker.Deps)
		text string
		opts turnOpts
		// slowReq picks the request the steering arrives during.
		slowReq func(fakellm.Request) bool
	}{
		{
			name: "iteration limit",
			mod:  func(c *worker.Config, _ *worker.Deps) { c.Agent.MaxIterations = 1 },
			text: `[[tool:clock {}]] what time is it`,
			slowReq: func(r fakellm.Request) bool {
				return strings.Contains(r.LastUserText(), "maximum number of tool-calling iterations")
			},
		},
		{
			name:    "mixture of agents",
			mod:     moaPreset("agg", 1, 8, "ref-a"),
			text:    "Name three risks.",
			opts:    turnOpts{moa: true},
			slowReq: func(r fakellm.Request) bool { return r.Model == "ref-a" },
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			h := newHarness(t)
			key := "agent:main:telegram:dm:steer-" + strings.ReplaceAll(tc.name, " ", "-")
			h.setGeneration(key, 1)
			h.fake.SetScript(func(r *fakellm.Request) (fakellm.Reply, bool) {
				if !tc.slowReq(*r) {
					return fakellm.Reply{}, false
				}
				return fakellm.Reply{Text: "an answer", Failure: &fakellm.Failure{Latency: slow}}, true
			})
			h.startWorker("w1", tc.mod)
			req := h.requestTurn(key, tc.text, tc.opts)
			waitFor(t, 30*time.Second, "the slow model call", func() bool {
				for _, r := range h.fake.Requests() {
					if tc.slowReq(r) {
						return true
					}
				}
				return false
			})
			took := h.steer(key, "make it by train")
			c := h.waitCompleted(req.TurnId)
			if c.GetStatus() != turnsv1.TurnStatus_TURN_STATUS_COMPLETED {
				t.Fatalf("turn %v (%s)", c.GetStatus(), c.GetError())
			}
			if took {
				read := false
				for _, r := range h.fake.Requests() {
					for _, m := range r.Messages {
						read = read || strings.Contains(m.Content, "make it by train")
					}
				}
				if !read {
					t.Fatal("the turn took the steering and no model read it: lost")
				}
			}
		})
	}
}

// A turn run again after its worker stopped during the iteration limit's
// last question (committed already, so it is not asked twice) still reads
// the steering it takes before that question is asked again: it goes
// with it, instead of being acknowledged and dropped.
func TestSteeringOfAResumedTurnAtTheIterationLimitIsRead(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	key := "agent:main:telegram:dm:steer-resumed-limit"
	h.setGeneration(key, 1)
	limited := func(c *worker.Config, _ *worker.Deps) {
		c.Agent.MaxIterations = 1
		c.DrainTimeout = 50 * time.Millisecond
	}
	w1 := h.startWorker("w1", limited)
	// Earlier exchanges, which the second worker compresses first.
	for _, text := range []string{"first topic", "second topic"} {
		if c := h.waitCompleted(h.requestTurn(key, text, turnOpts{}).TurnId); c.GetStatus() != turnsv1.TurnStatus_TURN_STATUS_COMPLETED {
			t.Fatalf("%s: %v", text, c.GetStatus())
		}
	}
	isLimit := func(r fakellm.Request) bool {
		for _, m := range r.Messages {
			if strings.Contains(m.Content, "maximum number of tool-calling iterations") {
				return true
			}
		}
		return false
	}
	var asked atomic.Int32
	h.fake.SetScript(func(r *fakellm.Request) (fakellm.Reply, bool) {
		switch {
		case strings.HasPrefix(r.System, "You compress chat history"):
			// The resumed turn's compression: the steering arrives now.
			return fakellm.Reply{Text: "a summary", Failure: &fakellm.Failure{Latency: 1500 * time.Millisecond}}, true
		case isLimit(*r) && asked.Add(1) == 1:
			// The first worker stops while it waits for this answer.
			return fakellm.Reply{Text: "never read", Failure: &fakellm.Failure{Latency: 2900 * time.Millisecond}}, true
		}
		return fakellm.Reply{}, false
	})
	req := h.requestTurn(key, `[[tool:clock {}]] what time is it`, turnOpts{})
	waitFor(t, 30*time.Second, "the iteration limit's question", func() bool { return asked.Load() > 0 })
	w1.stop(t)
	h.startWorker("w2", func(c *worker.Config, d *worker.Deps) {
		limited(c, d)
		c.Agent.ContextWindow = 50 // compress the earlier exchange first
		c.Agent.ProtectLast = 2
	})
	waitFor(t, 30*time.Second, "the resumed turn's compression", func() bool {
		for _, r := range h.fake.Requests() {
			if strings.HasPrefix(r.System, "You compress chat history") {
				return true
			}
		}
		return false
	})
	took := h.steer(key, "make it by train")
	if c := h.waitCompleted(req.TurnId); c.GetStatus() != turnsv1.TurnStatus_TURN_STATUS_COMPLETED {
		t.Fatalf("turn %v (%s)", c.GetStatus(), c.GetError())
	}
	if !took {
		t.Fatal("the resumed turn declined steering it could still read")
	}
	for _, r := range h.fake.Requests() {
		for _, m := range r.Messages {
			if strings.Contains(m.Content, "make it by train") {
				return
			}
		}
	}
	t.Fatal("the turn took the steering and no model read it: lost")
}
