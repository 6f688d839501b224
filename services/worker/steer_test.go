package worker_test

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"

	"github.com/switchboard-chat/switchboard/pkg/bus"
	"github.com/switchboard-chat/switchboard/pkg/fakellm"
	agentv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/agent/v1"
	eventsv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/events/v1"
	turnsv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/turns/v1"
	"github.com/switchboard-chat/switchboard/pkg/sessionstore"
	"github.com/switchboard-chat/switchboard/services/worker"
)

// steer sends /steer's control as a router of this release does and
// reports whether the running turn took the text (false: it declined,
// and the router queues the text as a message of its own).
func (h *harness) steer(key, text string) bool {
	h.t.Helper()
	took, _ := h.steerQueued(key, text, "")
	return took
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

// queueSteer does what the router does with steering for a running turn
// before it asks the turn to take it: it queues the message (its event id
// is returned), as the session's next input should the turn not give it
// to the model.
func (h *harness) queueSteer(key, text string) string {
	h.t.Helper()
	id := fmt.Sprintf("steer-%d", h.seq.Add(1))
	ev := &eventsv1.MessageReceived{EventId: id, MessageId: "m-" + id, Text: text,
		Source: &eventsv1.SessionSource{Platform: "telegram", Account: "bot1", ChatId: "99", ChatType: "dm", UserId: "u-" + key}}
	if _, err := sessionstore.New(h.db).Enqueue(context.Background(), key, h.seq.Add(1), false, ev, 100); err != nil {
		h.t.Fatal(err)
	}
	return id
}

// steerQueued asks the running turn to take the queued steering id, as a
// router of this release does, and reports whether the turn took it and
// whether its worker leaves the message queued until the text reaches
// the model (bus.HeaderSteerQueue). With no id it steers as a router of
// an older release does, naming no queued message.
func (h *harness) steerQueued(key, text, id string) (took, keeps bool) {
	h.t.Helper()
	data, err := proto.Marshal(&turnsv1.TurnControlRequested{SessionKey: key,
		Action: turnsv1.ControlAction_CONTROL_ACTION_STEER, Text: text, QueuedEventId: id})
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
	return len(reply.Data) == 0, reply.Header.Get(bus.HeaderSteerQueue) != ""
}

// queued are the texts of the session's queued messages, in order.
func (h *harness) queued(key string) []string {
	h.t.Helper()
	_, head, err := sessionstore.New(h.db).Peek(context.Background(), key, 100)
	if err != nil {
		h.t.Fatal(err)
	}
	var out []string
	for _, q := range head {
		out = append(out, q.Event.GetText())
	}
	return out
}

// readBy counts the model requests whose messages carry text.
func readBy(reqs []fakellm.Request, text string) int {
	n := 0
	for _, r := range reqs {
		for _, m := range r.Messages {
			if strings.Contains(m.Content, text) {
				n++
				break
			}
		}
	}
	return n
}

// Steering a turn took and never gave to the model was lost: the router
// had told the user it was added, the turn's model call failed (or a
// newer message interrupted the turn, or its worker went away), and
// nothing put the text back. The router now queues the steering before it
// asks; the turn removes it from the queue only in the write that gives
// it to the model. So the text reaches the model exactly once: in this
// turn after the next tool call, or as the session's next input.
func TestSteeringTheTurnDidNotGiveToTheModelStaysQueued(t *testing.T) {
	t.Parallel()
	const text = "make it by train"
	const slow = 1200 * time.Millisecond // within the harness's callTimeout
	cases := []struct {
		name string
		// script answers the turn's model calls (the steering arrives
		// during the first, slow one).
		script func(r *fakellm.Request) (fakellm.Reply, bool)
		// after runs once the turn took the steering.
		after  func(h *harness, key string)
		status turnsv1.TurnStatus
		// queued: the steering is still queued after the turn; otherwise
		// the turn gave it to the model, and removed it.
		queued bool
	}{
		{
			name: "the model call fails",
			script: func(r *fakellm.Request) (fakellm.Reply, bool) {
				return fakellm.Reply{Failure: &fakellm.Failure{Status: http.StatusBadRequest, Message: "refused", Latency: slow}}, true
			},
			status: turnsv1.TurnStatus_TURN_STATUS_FAILED,
			queued: true,
		},
		{
			name: "a newer message interrupts the turn",
			script: func(r *fakellm.Request) (fakellm.Reply, bool) {
				return fakellm.Reply{Text: "never said", Failure: &fakellm.Failure{Latency: 2 * slow}}, true
			},
			after: func(h *harness, key string) {
				h.control(key, turnsv1.ControlAction_CONTROL_ACTION_INTERRUPT, "")
			},
			status: turnsv1.TurnStatus_TURN_STATUS_INTERRUPTED,
			queued: true,
		},
		{
			name: "the next tool call carries it",
			script: func(r *fakellm.Request) (fakellm.Reply, bool) {
				if len(r.Messages) > 0 && r.Messages[len(r.Messages)-1].Role == "tool" {
					return fakellm.Reply{Text: "by train, then"}, true
				}
				return fakellm.Reply{ToolCalls: []fakellm.ToolCall{{ID: "c1", Name: "clock", Arguments: `{}`}},
					Failure: &fakellm.Failure{Latency: slow}}, true
			},
			status: turnsv1.TurnStatus_TURN_STATUS_COMPLETED,
		},
		{
			name: "the answer is followed by it",
			script: func(r *fakellm.Request) (fakellm.Reply, bool) {
				if strings.Contains(r.LastUserText(), text) {
					return fakellm.Reply{Text: "by train, then"}, true
				}
				return fakellm.Reply{Text: "by car", Failure: &fakellm.Failure{Latency: slow}}, true
			},
			status: turnsv1.TurnStatus_TURN_STATUS_COMPLETED,
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			h := newHarness(t)
			key := "agent:main:telegram:dm:steer-kept-" + strings.ReplaceAll(tc.name, " ", "-")
			h.setGeneration(key, 1)
			h.fake.SetScript(tc.script)
			h.startWorker("w1", nil)
			req := h.requestTurn(key, "plan a trip", turnOpts{})
			waitFor(t, 30*time.Second, "the first model call", func() bool { return len(h.fake.Requests()) > 0 })
			id := h.queueSteer(key, text)
			took, keeps := h.steerQueued(key, text, id)
			if !took || !keeps {
				t.Fatalf("steering taken %v, kept queued until read %v", took, keeps)
			}
			if tc.after != nil {
				tc.after(h, key)
			}
			c := h.waitCompleted(req.TurnId)
			if c.GetStatus() != tc.status {
				t.Fatalf("turn %v (%s), want %v", c.GetStatus(), c.GetError(), tc.status)
			}
			read := readBy(h.fake.Requests(), text)
			queued := h.queued(key)
			switch {
			case tc.queued && (read != 0 || strings.Join(queued, "|") != text):
				t.Fatalf("the model read the steering %d times, queued %q; want it queued once, unread", read, queued)
			case !tc.queued && (read == 0 || len(queued) != 0):
				t.Fatalf("the model read the steering %d times, queued %q; want it read and no longer queued", read, queued)
			}
			if !tc.queued {
				return
			}
			// The next turn answers it, as the router starts it from the
			// queue: the model reads it once.
			h.fake.SetScript(nil)
			next := h.requestTurn(key, queued[0], turnOpts{})
			if c := h.waitCompleted(next.TurnId); c.GetStatus() != turnsv1.TurnStatus_TURN_STATUS_COMPLETED {
				t.Fatalf("next turn %v (%s)", c.GetStatus(), c.GetError())
			}
			reqs := h.fake.Requests()
			if n := readBy(reqs[len(reqs)-1:], text); n != 1 || strings.Count(fmt.Sprint(reqs[len(reqs)-1].Messages), text) != 1 {
				t.Fatalf("the next turn's model call carries the steering %d times: %v", n, reqs[len(reqs)-1].Messages)
			}
		})
	}
}

// Steering a turn took lives in its worker's memory until the model reads
// it: a worker that goes away before then (here it stops past its drain
// timeout, handing the turn back; a crash leaves it to the lock's expiry)
// took the text with it. It stays queued now, and the attempt that runs
// the turn again, which never took it, leaves it there.
func TestSteeringSurvivesItsWorkersStop(t *testing.T) {
	t.Parallel()
	const text = "make it by train"
	h := newHarness(t)
	key := "agent:main:telegram:dm:steer-worker-stops"
	h.setGeneration(key, 1)
	var calls atomic.Int32
	h.fake.SetScript(func(r *fakellm.Request) (fakellm.Reply, bool) {
		if calls.Add(1) == 1 {
			return fakellm.Reply{Text: "never said", Failure: &fakellm.Failure{Latency: 2500 * time.Millisecond}}, true
		}
		return fakellm.Reply{Text: "by car"}, true
	})
	quick := func(c *worker.Config, _ *worker.Deps) { c.DrainTimeout = 50 * time.Millisecond }
	w1 := h.startWorker("w1", quick)
	req := h.requestTurn(key, "plan a trip", turnOpts{})
	waitFor(t, 30*time.Second, "the first model call", func() bool { return calls.Load() > 0 })
	id := h.queueSteer(key, text)
	if took, keeps := h.steerQueued(key, text, id); !took || !keeps {
		t.Fatalf("steering taken %v, kept queued until read %v", took, keeps)
	}
	w1.stop(t)
	h.startWorker("w2", quick)
	if c := h.waitCompleted(req.TurnId); c.GetStatus() != turnsv1.TurnStatus_TURN_STATUS_COMPLETED {
		t.Fatalf("turn %v (%s)", c.GetStatus(), c.GetError())
	}
	if n, q := readBy(h.fake.Requests(), text), h.queued(key); n != 0 || strings.Join(q, "|") != text {
		t.Fatalf("the model read the steering %d times, queued %q; want it queued once for the next turn", n, q)
	}
}

// Steering passed on to an external agent was the agent's to read: the
// turn's final removes its queued message, so it does not run again as
// the next input.
func TestSteeringPassedToAnExternalAgentLeavesTheQueue(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	key := "agent:main:telegram:dm:steer-external"
	h.setGeneration(key, 1)
	agent := startAgent(t, h)
	req := h.requestTurn(key, "wait for me", turnOpts{})
	<-agent.starts
	id := h.queueSteer(key, "go on")
	if took, keeps := h.steerQueued(key, "go on", id); !took || !keeps {
		t.Fatalf("steering taken %v, kept queued until read %v", took, keeps)
	}
	if c := h.waitCompleted(req.TurnId); c.GetStatus() != turnsv1.TurnStatus_TURN_STATUS_COMPLETED {
		t.Fatalf("turn %v (%s)", c.GetStatus(), c.GetError())
	}
	if q := h.queued(key); len(q) != 0 {
		t.Fatalf("queued %q after the agent read the steering", q)
	}
}

// lateAgent is an AgentService that reads the first steering into its
// answer and then has decided it: the steering after it is received but
// never read. With say, it names what it read (TurnResult.steering_read).
type lateAgent struct {
	agentv1.UnimplementedAgentServiceServer
	say              bool
	started, decided chan struct{}
}

func (a *lateAgent) RunTurn(stream grpc.BidiStreamingServer[agentv1.RunTurnRequest, agentv1.RunTurnResponse]) error {
	if first, err := stream.Recv(); err != nil || first.GetStart() == nil {
		return fmt.Errorf("no start: %w", err)
	}
	close(a.started)
	read, err := stream.Recv()
	if err != nil {
		return err
	}
	close(a.decided)
	if _, err := stream.Recv(); err != nil {
		return err
	}
	answer := "answered with: " + read.GetControl().GetText()
	res := &agentv1.TurnResult{Status: turnsv1.TurnStatus_TURN_STATUS_COMPLETED, FinalText: answer,
		Appended: []*agentv1.TranscriptMessage{{Role: "assistant", Content: answer}}}
	if a.say {
		res.SteeringRead = &agentv1.SteeringRead{QueuedEventIds: []string{read.GetControl().GetQueuedEventId()}}
	}
	return stream.Send(&agentv1.RunTurnResponse{Event: &agentv1.RunTurnResponse_Completed{Completed: res}})
}

// An external agent's final removed every steering text forwarded to it,
// so steering that came after the agent had decided its answer was
// acknowledged and lost. An agent that names the steering it read keeps
// the rest queued for the next turn; one that names none read it all, as
// before.
func TestExternalAgentKeepsSteeringItDidNotRead(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		say    bool
		queued string
	}{
		{name: "the agent names what it read", say: true, queued: "go right"},
		{name: "an agent that does not say", queued: ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			h := newHarness(t)
			key := "agent:main:telegram:dm:steer-late"
			h.setGeneration(key, 1)
			agent := &lateAgent{say: tc.say, started: make(chan struct{}), decided: make(chan struct{})}
			startAgentWorker(t, h, agent)
			req := h.requestTurn(key, "hello", turnOpts{})
			<-agent.started
			for i, text := range []string{"go left", "go right"} {
				if i == 1 {
					<-agent.decided
				}
				if took, keeps := h.steerQueued(key, text, h.queueSteer(key, text)); !took || !keeps {
					t.Fatalf("%s: taken %v, kept queued until read %v", text, took, keeps)
				}
			}
			if c := h.waitCompleted(req.TurnId); c.GetStatus() != turnsv1.TurnStatus_TURN_STATUS_COMPLETED {
				t.Fatalf("turn %v (%s)", c.GetStatus(), c.GetError())
			}
			if q := strings.Join(h.queued(key), "|"); q != tc.queued {
				t.Fatalf("queued %q after the turn, want %q", q, tc.queued)
			}
		})
	}
}
