package worker

import (
	"log/slog"
	"sync"

	"github.com/nats-io/nats.go"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/switchboard-chat/switchboard/pkg/bus"
	turnsv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/turns/v1"
)

// controls routes the router's control messages (interrupt, steer, stop,
// approvals) to the turns this process runs, by session key. The process
// holds one subscription for all sessions instead of one per turn: control
// messages are rare, turns are many.
type controls struct {
	log *slog.Logger
	mu  sync.Mutex
	m   map[string][]*turnRun // session key → running turns (normally one)
}

func newControls(log *slog.Logger) *controls {
	return &controls{log: log, m: map[string][]*turnRun{}}
}

func (c *controls) add(r *turnRun) {
	c.mu.Lock()
	defer c.mu.Unlock()
	key := r.req.GetSessionKey()
	c.m[key] = append(c.m[key], r)
}

func (c *controls) remove(r *turnRun) {
	c.mu.Lock()
	defer c.mu.Unlock()
	key := r.req.GetSessionKey()
	runs := c.m[key]
	for i, x := range runs {
		if x == r {
			runs = append(runs[:i:i], runs[i+1:]...)
			break
		}
	}
	if len(runs) == 0 {
		delete(c.m, key)
		return
	}
	c.m[key] = runs
}

// deliver is the subscription's handler: it applies a control message to
// the session's running turns here (the one it names, when it names one)
// and answers a request when it runs such a turn: empty when the turn took
// it, "declined" (a true BoolValue) when it did not, so that the router
// need not wait out its timeout. A process running no such turn stays
// silent: another may run it.
func (c *controls) deliver(msg *nats.Msg) {
	var m turnsv1.TurnControlRequested
	if err := proto.Unmarshal(msg.Data, &m); err != nil {
		c.log.Warn("bad control message", "err", err)
		return
	}
	c.mu.Lock()
	runs := append([]*turnRun(nil), c.m[m.GetSessionKey()]...)
	c.mu.Unlock()
	took, mine := false, false
	for _, r := range runs {
		if m.GetTurnId() != "" && m.GetTurnId() != r.req.GetTurnId() {
			continue
		}
		mine = true
		r.log.Info("control received", "action", m.GetAction().String(), "event_id", m.GetEventId())
		if r.ctl.apply(&m) {
			took = true
		}
	}
	// A router of an older release reads any answer as "taken": it gets
	// one only when the turn took the request. A newer one says so in the
	// request's Sb-Control header (bus.HeaderControl), and gets a decline too.
	v2 := msg.Header.Get(bus.HeaderControl) == bus.ControlVersion
	switch {
	case msg.Reply == "" || !mine || (!took && !v2):
	case !v2:
		_ = msg.Respond(nil)
	default:
		reply := nats.NewMsg(msg.Reply)
		reply.Header.Set(bus.HeaderControl, bus.ControlVersion)
		// Steering's queued message is removed when the text reaches the
		// model (store.Turn.Steered): the router leaves it queued.
		reply.Header.Set(bus.HeaderSteerQueue, "1")
		if !took {
			reply.Data, _ = proto.Marshal(wrapperspb.Bool(true))
		}
		_ = msg.RespondMsg(reply)
	}
}
