package platform

import (
	"context"
	"hash/fnv"
	"log/slog"
	"slices"
	"sync"
	"time"

	deliveryv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/delivery/v1"
	"github.com/switchboard-chat/switchboard/pkg/panics"
)

// Reactions are the emoji a platform marks the user's messages with while
// the agent answers them, as Hermes does: Processing when the turn starts,
// swapped for Success or Failure once the turn's reply was sent; an
// interrupted turn is left with neither. The zero value turns reactions
// off.
type Reactions struct {
	Processing, Success, Failure string
	// Replace: the bot has one reaction per message and setting one
	// replaces it (Telegram). The outcome is set without removing
	// Processing first, and Unreact clears whatever the bot set.
	Replace bool
}

// On reports whether reactions are on.
func (r Reactions) On() bool { return r.Processing != "" }

// Reactor is implemented by platforms that can react to the user's
// messages with an emoji. The Runner calls it in the background, after
// the typing request that starts a turn and after the send that ends it:
// a reaction never fails, delays or retries a send, and a failed one
// (a 429 included) is logged, counted and not tried again.
type Reactor interface {
	// Reactions are the emoji to use: the zero value while reactions are
	// off for this gateway.
	Reactions() Reactions
	// React adds the bot's emoji reaction to message messageID in
	// target's chat; a reaction the message already has is no error.
	React(ctx context.Context, target *deliveryv1.Target, messageID, emoji string) error
	// Unreact removes the bot's emoji reaction from the message; one it
	// does not have is no error.
	Unreact(ctx context.Context, target *deliveryv1.Target, messageID, emoji string) error
}

const (
	// reactionWorkers run reactions; a turn's go to one of them, in order.
	reactionWorkers = 4
	// reactionQueue bounds the reactions waiting for each worker; beyond
	// it they are dropped (and counted) rather than hold up a send.
	reactionQueue = 64
	// reactionTimeout bounds one platform call, and how long a stopping
	// gateway lets queued reactions finish.
	reactionTimeout = 5 * time.Second
	// markedTurns and markTTL bound the turns a gateway remembers having
	// marked: between markTTL and twice that, and at most twice
	// markedTurns (longer than delivery.typing_max, 5 min by default).
	markedTurns = 4096
	markTTL     = 10 * time.Minute
)

// reactions carries out a Reactor platform's reactions for a Runner.
type reactions struct {
	p     Reactor
	emoji Reactions
	name  string
	log   *slog.Logger
	marks marks

	queues []chan reaction
	mu     sync.Mutex // guards closed (and sends on queues)
	closed bool
	wg     sync.WaitGroup
}

// reaction is the steps to take, in order, on each of a turn's messages.
type reaction struct {
	target *deliveryv1.Target
	turn   string
	ids    []string
	steps  []step
}

type reactionTurnKey struct{}

// ReactionTurn returns the turn a React or Unreact call made with ctx
// marks ("" when the request named none). A platform whose reaction
// calls are idempotent by a client-chosen id (Matrix's transaction ids)
// derives it from the turn, so that the same turn marking a message
// twice (a repeated final, another replica's typing request) makes one
// reaction, and a later turn marking it again makes a new one.
func ReactionTurn(ctx context.Context) string {
	t, _ := ctx.Value(reactionTurnKey{}).(string)
	return t
}

// WithReactionTurn returns ctx for the reaction calls of turn.
func WithReactionTurn(ctx context.Context, turn string) context.Context {
	return context.WithValue(ctx, reactionTurnKey{}, turn)
}

type step struct {
	add   bool
	emoji string
}

// newReactions returns nil unless p reacts and its reactions are on.
func newReactions(p Platform, name string, log *slog.Logger) *reactions {
	rp, ok := p.(Reactor)
	if !ok || !rp.Reactions().On() {
		return nil
	}
	rs := &reactions{p: rp, emoji: rp.Reactions(), name: name, log: log, marks: marks{max: markedTurns, ttl: markTTL}}
	for range reactionWorkers {
		rs.queues = append(rs.queues, make(chan reaction, reactionQueue))
	}
	return rs
}

// start runs the workers until stop.
func (rs *reactions) start(ctx context.Context) {
	for _, q := range rs.queues {
		rs.wg.Add(1)
		go func() {
			defer rs.wg.Done()
			for job := range q {
				rs.do(ctx, job)
			}
		}()
	}
}

// stop takes no more reactions and lets the queued ones finish for up to
// grace; then cancel ends the calls still under way.
func (rs *reactions) stop(grace time.Duration, cancel context.CancelFunc) {
	rs.mu.Lock()
	if !rs.closed {
		rs.closed = true
		for _, q := range rs.queues {
			close(q)
		}
	}
	rs.mu.Unlock()
	done := make(chan struct{})
	go func() { rs.wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(grace):
		cancel()
		<-done
	}
}

// observe reacts to a platform operation just performed (err is its
// result): the first typing request of a turn marks the messages it
// answers as being processed; a turn's final message, once sent, swaps
// that for the outcome. Requests whose reply goes elsewhere than the
// chat of those messages (a reply route) are left alone: message ids
// mean nothing in another chat, and on Telegram would name another
// message. So are the messages the gateway said to leave unmarked
// (no_reaction_message_ids: on Slack, those that neither came in a
// direct message nor mentioned the bot).
func (rs *reactions) observe(req *deliveryv1.SendRequested, err error) {
	if rs == nil || !answersHere(req) {
		return
	}
	ids := marked(req)
	if len(ids) == 0 {
		return
	}
	turn := req.GetTurnId()
	switch {
	case req.GetFinal():
		// The turn's last message, once sent; on a typing request, its
		// end without a message (interrupted before it said anything).
		if err != nil {
			return
		}
		if turn != "" {
			rs.marks.add(turn) // a late typing request must not mark it again
		}
		rs.enqueue(turn, reaction{target: req.GetTarget(), ids: ids, steps: rs.outcome(req.GetErrorCode())})
	case req.GetOp() == deliveryv1.SendOp_SEND_OP_TYPING:
		// Repeated every few seconds while the turn runs: once is enough.
		if turn != "" && rs.marks.add(turn) {
			rs.enqueue(turn, reaction{target: req.GetTarget(), ids: ids, steps: []step{{add: true, emoji: rs.emoji.Processing}}})
		}
	}
}

// answersHere reports whether req answers user messages in its target
// chat: its reply threads to one of them.
func answersHere(req *deliveryv1.SendRequested) bool {
	reply := req.GetTarget().GetReplyToMessageId()
	return reply != "" && slices.Contains(req.GetInputMessageIds(), reply)
}

// marked is the messages req answers that take reactions: its input
// messages but those it names in no_reaction_message_ids (none, but on
// Slack, so the common case allocates nothing).
func marked(req *deliveryv1.SendRequested) []string {
	ids, skip := req.GetInputMessageIds(), req.GetNoReactionMessageIds()
	if len(skip) == 0 {
		return ids
	}
	var out []string
	for _, id := range ids {
		if !slices.Contains(skip, id) {
			out = append(out, id)
		}
	}
	return out
}

// outcome is what ends a turn whose final message carried errorCode:
// Success, Failure, or (interrupted) neither. Where reactions add up, a
// failure or an interruption also takes Success away: a turn that failed
// after streaming has two final messages, the streamed text's and the
// explanation's.
func (rs *reactions) outcome(errorCode string) []step {
	e := rs.emoji
	switch {
	case errorCode == "" && e.Replace:
		return []step{{add: true, emoji: e.Success}}
	case errorCode == "":
		return []step{{emoji: e.Processing}, {add: true, emoji: e.Success}}
	case errorCode == "interrupted" && e.Replace:
		return []step{{emoji: e.Processing}}
	case errorCode == "interrupted":
		return []step{{emoji: e.Processing}, {emoji: e.Success}}
	case e.Replace:
		return []step{{add: true, emoji: e.Failure}}
	default:
		return []step{{emoji: e.Processing}, {emoji: e.Success}, {add: true, emoji: e.Failure}}
	}
}

// enqueue hands job to the worker of turn (or of its first message),
// without waiting: when that worker is behind, the job is dropped.
func (rs *reactions) enqueue(turn string, job reaction) {
	job.turn = turn
	key := turn
	if key == "" {
		key = job.ids[0]
	}
	h := fnv.New32a()
	_, _ = h.Write([]byte(key))
	q := rs.queues[h.Sum32()%uint32(len(rs.queues))]
	rs.mu.Lock()
	defer rs.mu.Unlock()
	if !rs.closed {
		select {
		case q <- job:
			return
		default:
		}
	}
	reactionsTotal.WithLabelValues(rs.name, "queue", "dropped").Inc()
	rs.log.Debug("reaction dropped: queue full or gateway stopping", "turn_id", turn)
}

// do takes job's steps on each message. A rate-limited call ends the job:
// the platform is asked nothing more for it, now or later.
func (rs *reactions) do(ctx context.Context, job reaction) {
	for _, id := range job.ids {
		for _, s := range job.steps {
			op := "unreact"
			if s.add {
				op = "react"
			}
			if ctx.Err() != nil {
				reactionsTotal.WithLabelValues(rs.name, op, "canceled").Inc()
				return
			}
			cctx, cancel := context.WithTimeout(WithReactionTurn(ctx, job.turn), reactionTimeout)
			// A worker is a goroutine of its own: a panic in the
			// platform's call would end the process. It fails this
			// reaction instead (logged, counted).
			err := panics.Recover(rs.log, "gateway_react", func() error {
				if s.add {
					return rs.p.React(cctx, job.target, id, s.emoji)
				}
				return rs.p.Unreact(cctx, job.target, id, s.emoji)
			}, "platform", rs.name, "op", op, "message_id", id)
			cancel()
			if err == nil {
				reactionsTotal.WithLabelValues(rs.name, op, "ok").Inc()
				continue
			}
			class, _ := classify(err)
			reactionsTotal.WithLabelValues(rs.name, op, classLabel(class)).Inc()
			rs.log.Debug("reaction failed", "op", op, "emoji", s.emoji, "chat_id", job.target.GetChatId(),
				"message_id", id, "class", classLabel(class), "err", err)
			if class == deliveryv1.ErrorClass_ERROR_CLASS_RATE_LIMITED {
				return
			}
		}
	}
}

// marks is the set of turns a gateway has marked (or finished), kept for
// a while and up to a bound: two generations of at most max turns each;
// the older is dropped when the newer is ttl old or full.
type marks struct {
	max int
	ttl time.Duration

	mu       sync.Mutex
	cur, old map[string]struct{}
	since    time.Time
}

// add records turn and reports whether it was new.
func (m *marks) add(turn string) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.cur[turn]; ok {
		return false
	}
	if _, ok := m.old[turn]; ok {
		return false
	}
	if now := time.Now(); m.cur == nil || len(m.cur) >= m.max || now.Sub(m.since) >= m.ttl {
		m.old, m.cur, m.since = m.cur, map[string]struct{}{}, now
	}
	m.cur[turn] = struct{}{}
	return true
}
