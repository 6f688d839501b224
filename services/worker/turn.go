package worker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel/attribute"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/switchboard-chat/switchboard/pkg/bus"
	"github.com/switchboard-chat/switchboard/pkg/command"
	"github.com/switchboard-chat/switchboard/pkg/footer"
	deliveryv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/delivery/v1"
	repliesv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/replies/v1"
	turnsv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/turns/v1"
	"github.com/switchboard-chat/switchboard/pkg/memorygate"
	"github.com/switchboard-chat/switchboard/pkg/pg"
	"github.com/switchboard-chat/switchboard/pkg/placeholder"
	"github.com/switchboard-chat/switchboard/pkg/redisx"
	"github.com/switchboard-chat/switchboard/pkg/sessionkey"
	"github.com/switchboard-chat/switchboard/pkg/sessionstore"
	"github.com/switchboard-chat/switchboard/services/worker/internal/store"
)

// Reasons a turn stops early.
var (
	errLockLost = errors.New("session lock lost")
	// errMovedOn: the lock is gone because the session moved on (/stop,
	// /new, a reset): a lock loss that nothing went wrong for.
	errMovedOn     = fmt.Errorf("session moved on: %w", redisx.ErrNotOwner)
	errLockBusy    = errors.New("session lock held by another attempt at this turn")
	errInterrupted = errors.New("turn interrupted")
	errStopped     = errors.New("turn stopped")
)

// seqTTL keeps a turn's reply sequence counter as long as the REPLIES
// stream keeps events, from its last renewal: the attempt running the
// turn renews it (keepLock) every quarter of it, so a turn that runs
// longer (a long tool, an external agent's long run, approvals waited
// for) never sees it expire and start its seqs again at 1, which the bus
// and delivery would take for the turn's earlier events (its final
// dropped as its typing's duplicate).
const seqTTL = 24 * time.Hour

// seqTTL is the seq counter's expiry (Config.SeqTTL).
func (s *Service) seqTTL() time.Duration {
	if s.cfg.SeqTTL > 0 {
		return s.cfg.SeqTTL
	}
	return seqTTL
}

// seqKey is the Redis key of the turn's reply seq counter.
func (r *turnRun) seqKey() string { return r.s.cfg.RedisPrefix + "turnseq:" + r.req.GetTurnId() }

// mayFollowStream reports whether an earlier run of the turn may have
// streamed part of an answer: a later attempt's, or a run of the same
// delivery again in place (rerun). Such a run streams no text: its
// deltas would be spliced onto that part; its final carries the whole
// answer (edits rewrite the message; an API stream ends with an error
// when the final does not continue it).
func (r *turnRun) mayFollowStream() bool { return r.attempt > 1 || r.rerun }

// turnRun is one delivery of one turn.
type turnRun struct {
	s       *Service
	req     *turnsv1.TurnRequested
	attempt int // the delivery's number: 1 is the first, later ones may follow a streamed part
	// rerun: the delivery runs again in place (bus.Delivery.Rerun: a
	// dependency was down), after a run that may have streamed part of
	// an answer, as a later attempt may follow one (mayFollowStream).
	rerun bool
	// temperature of the turn's model calls; nil: the provider's default
	// (a /moa turn's aggregator: agent.moa.aggregator_temperature).
	temperature *float64
	// callAttrs are added to the span of the turn's model calls (a /moa
	// turn's aggregator: moa.role).
	callAttrs []attribute.KeyValue
	// spent counts the deliveries that used up an attempt (hand-backs of
	// stopping workers do not): the budget MaxDeliver bounds.
	spent int
	// reads are how an earlier attempt read each input's attachments, as
	// committed with the turn's steps (keepReads); nil for an input
	// without, or read by this attempt.
	reads [][]store.ReadAttachment
	// fetchSpent is the time the attempt's downloads of attachments, of
	// all its messages, took so far (fetchAttachments): fetchWait bounds
	// it.
	fetchSpent time.Duration
	log        *slog.Logger
	st         store.Turn
	// held is st as the session lock was claimed (keepLock): what the
	// lock's renewals fence and renew the lease of, read by the renewal
	// goroutine while the turn's own changes st (its Cut).
	held     store.Turn
	ttl      time.Duration
	target   *deliveryv1.Target // nil: the turn's replies go nowhere
	inputIDs []string
	// noReaction are those of inputIDs their gateway marks with no
	// processing reaction.
	noReaction []string
	// copies are the other deliver targets of a cron run (crontargets.go).
	copies cronCopies
	// answerOnly: every input's sender waits for the whole answer and
	// shows no progress, so typing, text deltas and tool progress are
	// not published (each would cost a seq, a publish and a delivery) —
	// but for the tool steps an API answer lists (answerListsSteps).
	answerOnly bool
	// onlyTools, when set, limits the tools model calls offer (a memory
	// flush's: flush.go).
	onlyTools []string
	// listsSteps: an input's answer lists the turn's tool calls (a
	// Responses request: MessageReceived.lists_tool_calls).
	listsSteps bool
	ctl        *control
	// holder is this attempt's value of the session lock: the router's
	// grant token and the attempt, so two deliveries of one turn never
	// hold the lock at once.
	holder   string
	lockLost atomic.Bool
	// seqUsed: this attempt allocated a reply seq from the counter.
	seqUsed atomic.Bool
	// floored: this attempt created the turn's seq counter at its floor
	// (takeSeq), so the counter never handed out seq 1.
	floored atomic.Bool
	// textStreamed: this attempt published a text delta.
	textStreamed bool
	// answerStreamed: a model call of this attempt streamed answer text
	// (not only reasoning); the next call's text starts after a break.
	answerStreamed bool
	// sinceBreak is the answer text this attempt streamed since its last
	// break (TextDelta.restart): what an API's final must start with.
	sinceBreak strings.Builder
	// finalBreak: the break before a final that does not continue the
	// streamed text was published.
	finalBreak bool
	// sinceRestart is the reasoning this attempt streamed since the
	// last reasoning restart: the block delivery shows above the text
	// since the last break.
	sinceRestart strings.Builder
	// reasoningStreamed: a model call of this attempt published a
	// reasoning delta; the next call's first delta restarts the block.
	reasoningStreamed bool
	// toolRunning is the id of the tool call a stop cut short ("" when
	// none was running).
	toolRunning string
	// deniedAll is the "/deny all" answer given to a call of the model's
	// current answer: its other calls that would ask are denied with
	// its reason instead (nil: none; runTools clears it).
	deniedAll *answer
	// stepCalls are the ids of the calls runTools runs (the model's
	// answer's calls without a result yet): those a "/deny all" covers.
	stepCalls []string
	usage     turnsv1.Usage
	// usageRecorded: the turn's final is stored, with the usage of the
	// attempt that decided it (TurnCompleted.usage_recorded).
	usageRecorded bool
	model         string
	// lastPrompt is the prompt tokens of this attempt's latest model
	// call (0: none made): how full the context window is.
	lastPrompt int64
	// began is when this attempt was delivered (the wall clock, for
	// turnSeconds).
	began time.Time
	// prompt is the conversation's stored system prompt, as begin loaded
	// it (nil: none stored).
	prompt *store.Prompt
	// ahead delivers the turn's first read, started while the lock is
	// claimed (readAhead); nil when begin must read itself.
	ahead chan beganTurn
	// pictures are the attempt's pictures for the model, by reference,
	// read once (picture).
	pictures map[string]shownPicture
	// goalQueued: the goal judge queued a continuation behind the turn
	// (goalStep); its completion must start it.
	goalQueued bool
	// leaseEnded: the write of the turn's answer ended its lease
	// (store.Turn.EndLease), nothing following it under the lock.
	leaseEnded bool
	// noteSent: this attempt built a request to a model (or the external
	// agent) carrying the turn's /reload-skills note (modelTurn).
	noteSent bool
	// turnSummaryOff: a summary of the turn's steps failed this attempt
	// (summariseTurn); its later mid-turn compressions clear instead.
	turnSummaryOff bool
}

// beganTurn is the result of the turn's first read.
type beganTurn struct {
	ts  store.TurnState
	err error
}

// readAhead starts the turn's first read (store.BeginTurn) so that it
// overlaps the lock claim: the two round trips go out together. The read
// takes no lock and writes nothing; a claim that had to wait for another
// attempt drops it (that attempt may write meanwhile), and a turn whose
// claim fails never uses it. Only a first attempt reads ahead: a later
// one's read claims the turn in Postgres (store.BeginTurn), fencing the
// earlier attempts' writes, which it must do only once it holds the
// session lock, not while an earlier attempt still does.
func (r *turnRun) readAhead(ctx context.Context) {
	ch := make(chan beganTurn, 1)
	t := r.st // claimLock sets its LockedAt meanwhile
	go func() {
		ts, err := r.s.store.BeginTurn(ctx, t)
		ch <- beganTurn{ts, err}
	}()
	r.ahead = ch
}

// read is the turn's first read: the one readAhead started, or a new one.
func (r *turnRun) read(ctx context.Context) (store.TurnState, error) {
	if ch := r.ahead; ch != nil {
		r.ahead = nil
		b := <-ch
		return b.ts, b.err
	}
	return r.s.store.BeginTurn(ctx, r.st)
}

func newTurnRun(s *Service, req *turnsv1.TurnRequested, attempt, spent int) *turnRun {
	ttl := time.Duration(req.GetLockTtlMs()) * time.Millisecond
	if ttl <= 0 {
		ttl = 30 * time.Second
	}
	r := &turnRun{
		s:       s,
		req:     req,
		attempt: attempt,
		spent:   spent,
		ttl:     ttl,
		log:     s.log.With("turn_id", req.GetTurnId(), "session_key", req.GetSessionKey(), "attempt", attempt),
		st: store.Turn{
			TurnID:     req.GetTurnId(),
			SessionKey: req.GetSessionKey(),
			SessionID:  req.GetSessionId(),
			Generation: req.GetGeneration(),
			Attempt:    attempt,
			LockTTL:    ttl,
			UserKey:    userKey(req),
			StartedAt:  s.now(),
		},
		ctl:    newControl(inputEventIDs(req)),
		began:  time.Now(),
		holder: redisx.Holder(req.GetLockToken(), fmt.Sprintf("%s.%d", s.cfg.ID, attempt)),
	}
	r.target = replyTarget(req)
	if req.GetMemoryFlush() {
		// Hermes's pre-reset memory flush (flush.go) shows the user
		// nothing and reads no steering.
		r.target = nil
		r.ctl.closeSteer()
	}
	if cmd, ok := transcriptCommandOf(req); ok && cmd.name != "retry" || s.agent == nil && (req.GetMoa() || req.GetSideQuestion() != nil) {
		// A turn that reads no steering (/undo and /compress, which the
		// worker does itself, an external agent or not; the built-in
		// loop's /moa models and side questions) refuses it from the
		// start, so the router queues it instead of acknowledging text
		// nobody will read. (An external agent running a turn is sent
		// steering and decides.)
		r.ctl.closeSteer()
	}
	r.answerOnly = len(req.GetInputs()) > 0
	for _, in := range req.GetInputs() {
		if id := in.GetMessageId(); id != "" {
			r.inputIDs = append(r.inputIDs, id)
			if in.GetNoReaction() {
				r.noReaction = append(r.noReaction, id)
			}
		}
		r.answerOnly = r.answerOnly && in.GetAnswerOnly()
		r.listsSteps = r.listsSteps || in.GetListsToolCalls()
	}
	if req.GetBackgroundTaskId() != "" {
		// A /background task answers in the chat, never in the Responses
		// answer of the request that started it: its calls are listed
		// nowhere. The router clears the flag for it; one from before
		// that may still have queued the task with it.
		r.listsSteps = false
	}
	return r
}

// inputEventIDs are the event ids of the turn's inputs.
func inputEventIDs(req *turnsv1.TurnRequested) []string {
	var out []string
	for _, in := range req.GetInputs() {
		if id := in.GetEventId(); id != "" {
			out = append(out, id)
		}
	}
	return out
}

// userKey is the owner of memories and transcripts: "<platform>:<user>"
// in a direct chat. In a group, channel or thread it is the session
// ("session:<key>"): there the turn runs for whoever spoke last, merged
// turns mix several people's messages, and a shared thread lets anyone
// put text before the next turn, so the user's own memories and past
// conversations must not be within the tools' reach.
func userKey(req *turnsv1.TurnRequested) string {
	src := req.GetOrigin()
	if len(req.GetInputs()) > 0 && req.GetInputs()[len(req.GetInputs())-1].GetSource() != nil {
		src = req.GetInputs()[len(req.GetInputs())-1].GetSource()
	}
	// The router's /memory finds the owner of a chat's notes the same way.
	return memorygate.Owner(req.GetSessionKey(), src)
}

// replyTarget is where replies go: the reply route when set (an empty
// platform there means no reply), else the origin chat.
func replyTarget(req *turnsv1.TurnRequested) *deliveryv1.Target {
	var replyTo string
	if n := len(req.GetInputs()); n > 0 {
		replyTo = req.GetInputs()[n-1].GetMessageId()
	}
	if rr := req.GetReplyRoute(); rr != nil {
		if rr.GetPlatform() == "" {
			return nil
		}
		return &deliveryv1.Target{Platform: rr.GetPlatform(), Account: rr.GetAccount(), ChatId: rr.GetChatId(), ThreadId: rr.GetThreadId()}
	}
	o := req.GetOrigin()
	if o == nil {
		return nil
	}
	return &deliveryv1.Target{Platform: o.GetPlatform(), Account: o.GetAccount(), ChatId: o.GetChatId(),
		ThreadId: sessionkey.ReplyThread(o), ReplyToMessageId: replyTo}
}

// run is the whole life of one delivery. It returns nil when the turn
// reached an end (acked), an error to have the bus redeliver it.
func (r *turnRun) run(ctx context.Context) error {
	if r.s.agent == nil && r.attempt <= 1 {
		r.readAhead(ctx)
	}
	if err := r.claimLock(ctx); err != nil {
		if errors.Is(err, errLockLost) {
			// Another turn owns the session now: this one is superseded.
			r.log.Warn("turn lock owned by another turn; abandoning as stale")
			r.answerSuperseded(ctx)
			r.recordFenced(ctx)
			return r.complete(ctx, turnsv1.TurnStatus_TURN_STATUS_STALE, "session lock owned by another turn", false)
		}
		if errors.Is(err, errLockBusy) {
			// An earlier delivery still renews the lock: it runs this turn.
			r.log.Warn("turn still held by an earlier attempt; redelivering later")
			return bus.RetryAfter(err, r.ttl)
		}
		return err
	}
	ctx, stopRenew := r.keepLock(ctx)
	defer stopRenew()
	unsub, err := r.subscribeControl()
	if err != nil {
		return err
	}
	defer unsub()

	started := &turnsv1.TurnStarted{TurnId: r.req.GetTurnId(), SessionKey: r.req.GetSessionKey(),
		Generation: r.req.GetGeneration(), WorkerId: r.s.cfg.ID, StartedAt: timestamppb.New(r.s.now()),
		Attempt: int32(r.attempt)}
	if err := r.s.bus.PublishAsync(ctx, r.s.bus.Topology().Subject(bus.SubjectTurnStarted),
		fmt.Sprintf("turn-started:%s:%d", r.req.GetTurnId(), r.attempt), started); err != nil {
		return fmt.Errorf("publish turn started: %w", err)
	}
	r.log.Info("turn started")

	if r.req.GetMemoryFlush() {
		return r.endFlush(ctx, r.runFlush(ctx))
	}
	fin, err := r.runAgent(ctx)
	r.ctl.closeSteer() // whatever ended the turn, it reads no more
	switch {
	case errors.Is(err, store.ErrStaleGeneration), errors.Is(err, errLockLost):
		r.log.Warn("turn superseded; abandoning", "err", err)
		r.answerSuperseded(ctx)
		r.endStream(ctx)
		r.recordFenced(ctx)
		return r.complete(ctx, turnsv1.TurnStatus_TURN_STATUS_STALE, "superseded by a newer turn", true)
	case err != nil && ctx.Err() != nil && r.spent < r.s.cfg.MaxDeliver:
		// Shutting down past the drain timeout: hand the lock back to the
		// bare grant, so the next attempt claims it at once, and the turn
		// back to the bus. The grant keeps the session while the turn
		// waits for a worker again.
		r.log.Info("turn handed back", "err", err)
		r.handLockBack(ctx)
		return err
	case err != nil && pg.IsUnavailable(err):
		// Postgres is down: the consumer runs the turn again in place
		// (resuming from the last committed step) once it is back.
		r.log.Warn("turn paused: database unavailable", "err", err)
		return err
	case err != nil:
		ctx = context.WithoutCancel(ctx)
		if r.spent < r.s.cfg.MaxDeliver {
			r.log.Warn("turn failed; will be retried", "err", err)
			return err
		}
		// Last attempt: never fail silently.
		r.log.Error("turn failed on its last attempt; telling the user", "err", err)
		fin = store.Final{Status: store.StatusFailed, Kind: store.FinalError, ErrorCode: "interrupted",
			Text: r.failedText()}
		if seq, created, serr := r.takeSeq(ctx); serr == nil {
			fin.Seq = seq
			if created || r.floored.Load() {
				// No seq of the turn was handed out before this one, or
				// this attempt created the counter at its floor (a
				// listing turn's steps took 2 and up), so seq 1 is free
				// or holds an earlier attempt's final, committed without
				// the counter (finalSeq: an older worker's, or one this
				// attempt's failed read missed). The apology takes it
				// too: should its write fail below and it go out
				// uncommitted, the bus passes one of the two finals, not
				// both. (A listing turn's floor handed this attempt 2.)
				fin.Seq = 1
			}
			t := r.withUsage()
			t.EndLease = true // an apology: no voice reply, no goal or loop step
			kept, ferr := r.s.store.Finish(ctx, t, nil, 0, nil, fin)
			switch {
			case errors.Is(ferr, store.ErrStaleGeneration):
				r.recordFenced(ctx)
				return r.complete(ctx, turnsv1.TurnStatus_TURN_STATUS_STALE, "superseded by a newer turn", true)
			case ferr == nil:
				fin = kept // an earlier attempt's final, when one was decided
				r.usageRecorded = true
				r.finished(t)
			}
			_ = r.publishFinal(ctx, fin)
		}
		if !r.usageRecorded {
			// No final stored (its seq or its write failed): the turn's
			// end is recorded all the same, with no usage (which goes to
			// the router, as before), so that it counts as ended
			// (sessionstore.TurnMayRun) as a decided turn does.
			if err := r.s.store.BookUsage(ctx, r.st, store.StatusFailed, r.model); err != nil {
				r.log.Warn("record the end of a turn failed without a final", "err", err)
			}
		}
	default:
		if err := r.publishFinal(ctx, fin); err != nil {
			return err
		}
		// A voice reply (/voice) follows the text, before the turn ends
		// (the next turn's replies come after it).
		r.voiceReply(ctx, fin)
		// The goal judge (/goal), after the answer, under the lock.
		if err := r.goalStep(ctx, fin); superseded(err) {
			// Answered, but the session is no longer this turn's (/stop,
			// /new, a takeover): what follows the answer is not its to do.
			r.log.Warn("turn superseded after its answer; its goal step writes nothing", "err", err)
		} else if err != nil {
			if r.spent < r.s.cfg.MaxDeliver {
				r.log.Warn("goal step failed; the turn will be retried", "err", err)
				return err
			}
			r.log.Error("goal step failed on the turn's last attempt; the goal waits for the next turn", "err", err)
		}
		// A /loop wakeup's answer, likewise.
		if err := r.loopStep(ctx, fin); superseded(err) {
			r.log.Warn("turn superseded after its answer; its loop step writes nothing", "err", err)
		} else if err != nil {
			if r.spent < r.s.cfg.MaxDeliver {
				r.log.Warn("loop step failed; the turn will be retried", "err", err)
				return err
			}
			r.log.Error("loop step failed on the turn's last attempt; the loop goes on by its schedule", "err", err)
		}
	}
	return r.complete(ctx, statusOf(fin.Status), fin.ErrorCode, true)
}

// recordFenced records that the turn, which the session moved on from
// (a /stop, a /new, a reset, a newer turn), has ended without a final,
// now that this attempt runs nothing more (store.RecordFenced): until
// then it counts as one that may run, and an operator's reset of the
// session sends it a stop, which needs the bus. Its usage goes with the
// record, to its own conversation, and the router then books none
// (TurnCompleted.usage_recorded). Best effort: not recorded (the
// database failed, or the turn only lost its lock to another attempt
// of it), the turn counts as one that may run and its usage goes to the
// router, as before. A memory flush records its own end (endFlush).
func (r *turnRun) recordFenced(ctx context.Context) {
	if r.req.GetMemoryFlush() || r.usageRecorded {
		return
	}
	model := r.model
	if model == "" && r.s.agent == nil {
		// No model call made: the model it would have called, so that
		// /insights names no model "".
		_, model = r.s.backendFor(r.req.GetModelOverride())
	}
	recorded, err := r.s.store.RecordFenced(context.WithoutCancel(ctx), r.withUsage(), model)
	if err != nil {
		r.log.Warn("record the end of a fenced turn", "err", err)
		return
	}
	r.usageRecorded = recorded
}

// handLockBack gives the session lock of a turn handed back to the bus
// back to the bare grant, so that the next attempt claims it at once
// instead of waiting for this one's to expire. The grant keeps the
// session while the turn waits for a worker again.
func (r *turnRun) handLockBack(ctx context.Context) {
	grant := time.Duration(r.req.GetGrantTtlMs()) * time.Millisecond
	if grant < r.ttl {
		grant = r.ttl
	}
	hctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
	defer cancel()
	if err := r.s.locker.Swap(hctx, r.req.GetSessionKey(), r.holder, r.req.GetLockToken(), grant); err != nil {
		r.log.Warn("hand the session lock back", "err", err)
		return
	}
	// The lease, as the grant, holds the session while the turn waits.
	if err := r.s.store.RenewLease(hctx, r.st, grant); err != nil {
		r.log.Warn("renew the lease of a turn handed back", "err", err)
	}
}

// superseded reports whether err says the turn's fence refused a write:
// its lock was lost, or its session moved past its generation.
func superseded(err error) bool {
	return errors.Is(err, errLockLost) || errors.Is(err, store.ErrStaleGeneration) || errors.Is(err, sessionstore.ErrStaleGeneration)
}

// errPanicked ends a turn whose code panicked (a provider SDK's, a
// parser's): it fails as any other turn does, retried until its last
// attempt tells the user, instead of taking the worker and its other
// turns down with it (and, redelivered, the next worker too).
var errPanicked = errors.New("turn panicked")

// runAgent runs the turn on the external agent or the built-in loop.
func (r *turnRun) runAgent(ctx context.Context) (fin store.Final, err error) {
	defer func() {
		if p := recover(); p != nil {
			r.log.Error("turn panicked", "panic", fmt.Sprint(p), "stack", string(debug.Stack()))
			fin, err = store.Final{}, fmt.Errorf("%w: %v", errPanicked, p)
		}
	}()
	if r.s.agent != nil {
		return r.runRemote(ctx)
	}
	return r.runLoop(ctx)
}

// answerSuperseded makes sure a superseded turn that an earlier, crashed
// attempt was running still answers its user exactly once: with the final
// reply that attempt committed (republished under the same id, so a copy
// that already went out is deduplicated), or with a notice that the
// request was interrupted. A first attempt superseded before it answered
// was stopped on purpose (/stop, /new, a reset) and stays silent.
func (r *turnRun) answerSuperseded(ctx context.Context) {
	if r.attempt <= 1 || r.target == nil {
		return
	}
	ctx = context.WithoutCancel(ctx)
	f, err := r.s.store.Decided(ctx, r.req.GetTurnId())
	if err != nil {
		r.log.Warn("read superseded turn", "err", err)
		return
	}
	if f != nil {
		if err := r.publishFinal(ctx, *f); err != nil {
			r.log.Warn("republish superseded turn's reply", "err", err)
		}
		return
	}
	err = r.publish(ctx, &repliesv1.ReplyEvent{Body: &repliesv1.ReplyEvent_Error{Error: &repliesv1.ReplyError{
		Code: "interrupted", Message: r.backgroundFailure(r.interruptedText())}}})
	if err != nil {
		r.log.Warn("tell the user a superseded turn was interrupted", "err", err)
	}
}

// stoppedText answers an API request whose turn /stop (or /new) ended
// before it answered.
const stoppedText = "Stopped before it answered: a /stop or /new in its conversation ended its turn."

// resetStoppedText answers an API request whose turn the admin API's
// reset ended before it answered.
const resetStoppedText = "Stopped before it answered: an operator reset this conversation and ended its turn."

// endStream takes the cursor off what a first attempt streamed before it
// was stopped (/stop, /new: the stopped turn's final is refused by the
// fence): an interrupted error without text ends the stream message and
// says nothing (the router answered the command). Later attempts stream
// nothing, and answerSuperseded gives them their final.
//
// An API request waits for its own answer, which a stopped turn will
// never give, so when the router's stop reached this turn its request is
// answered with the interrupted error and stoppedText. Only the stop
// tells: a first attempt superseded by a takeover (it lost its lock while
// frozen) stays silent, since the attempt that took over answers.
func (r *turnRun) endStream(ctx context.Context) {
	if r.attempt > 1 || r.target == nil {
		return
	}
	end := &repliesv1.ReplyError{Code: "interrupted"}
	switch {
	case r.target.GetPlatform() == "api" && r.ctl.stoppedByReset():
		end.Message = resetStoppedText
	case r.target.GetPlatform() == "api" && r.ctl.stopped():
		end.Message = stoppedText
	case !r.textStreamed && !r.rerun:
		// (A run in place after another may end that one's stream.)
		return
	}
	err := r.publish(context.WithoutCancel(ctx), &repliesv1.ReplyEvent{Body: &repliesv1.ReplyEvent_Error{Error: end}})
	if err != nil {
		r.log.Warn("end the stopped turn's stream", "err", err)
	}
}

func statusOf(s string) turnsv1.TurnStatus {
	switch s {
	case store.StatusCompleted:
		return turnsv1.TurnStatus_TURN_STATUS_COMPLETED
	case store.StatusInterrupted:
		return turnsv1.TurnStatus_TURN_STATUS_INTERRUPTED
	case store.StatusStopped:
		return turnsv1.TurnStatus_TURN_STATUS_STOPPED
	default:
		return turnsv1.TurnStatus_TURN_STATUS_FAILED
	}
}

// complete releases the lock (when release), its lease first
// (endLease), and publishes TurnCompleted, which tells the router
// whether messages were marked as waiting behind the turn. Only a first
// attempt that released the lock itself knows: an earlier attempt may
// have taken the mark and crashed before its completion was published. A
// completion that leaves the router nothing to do goes to a subject the
// router does not read.
func (r *turnRun) complete(ctx context.Context, status turnsv1.TurnStatus, reason string, release bool) error {
	ctx = context.WithoutCancel(ctx)
	nothingWaiting := false
	if release {
		r.endLease(ctx)
		waiting, err := r.s.locker.ReleaseWaiting(ctx, r.req.GetSessionKey(), r.holder)
		if err != nil && !errors.Is(err, redisx.ErrNotOwner) {
			r.log.Warn("release session lock", "err", err)
		}
		nothingWaiting = err == nil && !waiting && r.attempt == 1 && !r.goalQueued
	}
	u := proto.Clone(&r.usage).(*turnsv1.Usage)
	done := &turnsv1.TurnCompleted{TurnId: r.req.GetTurnId(), SessionKey: r.req.GetSessionKey(),
		SessionId: r.req.GetSessionId(), Generation: r.req.GetGeneration(), Status: status, Error: reason,
		Usage: u, WorkerId: r.s.cfg.ID, Model: r.model, CompletedAt: timestamppb.New(r.s.now()),
		UsageRecorded: r.usageRecorded, NothingWaiting: nothingWaiting}
	// The router reads only the completions it has something to do for.
	subject := bus.SubjectTurnCompleted
	if nothingWaiting && r.usageRecorded {
		subject = bus.SubjectTurnCompletedIdle
	}
	topo := r.s.bus.Topology()
	_, err := r.s.bus.Publish(ctx, topo.Subject(subject), "turn-done:"+r.req.GetTurnId(), done)
	if errors.Is(err, jetstream.ErrNoStreamResponse) && subject == bus.SubjectTurnCompletedIdle {
		// The stream was declared by a process from before the idle
		// subject (a rolling upgrade): the router's subject takes it.
		_, err = r.s.bus.Publish(ctx, topo.Subject(bus.SubjectTurnCompleted), "turn-done:"+r.req.GetTurnId(), done)
	}
	if err != nil {
		return fmt.Errorf("publish turn completed: %w", err)
	}
	label := strings.ToLower(strings.TrimPrefix(status.String(), "TURN_STATUS_"))
	turnsCompleted.WithLabelValues(label).Inc()
	turnSeconds.WithLabelValues(label).Observe(time.Since(r.began).Seconds())
	r.log.Info("turn completed", "status", status.String(), "model_calls", u.GetModelCalls(), "tool_calls", u.GetToolCalls())
	return nil
}

// endLease ends the turn's lease on its session (migration 00148) as it
// lets go of the lock, not at its recorded end (its worker_turns row),
// unless nothing follows the answer under the lock (afterAnswer: the
// answer's write then ended it, leaseEnded, and a plain turn costs no
// round trip more): what follows the answer (a voice reply, the goal
// judge's and a /loop wakeup's steps) is the turn's still, and a start
// that found the lock lost with Redis's data then would run the next
// turn beside it, its replies before the voice reply. Before the
// release: a message arriving between the two finds the lock held and
// marks it (the release takes the mark), where with the lease still
// held after the release it would be queued behind a lease about to end
// and wait for the sweep. An attempt whose lock was lost ends nothing
// (the lease may be a later attempt's now, which the fence does not tell
// before that attempt's claim). Not ended (Postgres failed), the lease
// lapses a lock's TTL after its last renewal, as the lock would.
func (r *turnRun) endLease(ctx context.Context) {
	if r.leaseEnded || r.lockLost.Load() || r.held.TurnID == "" {
		return
	}
	if err := r.s.store.EndLease(ctx, r.held); err != nil {
		r.log.Warn("end the turn's lease", "err", err)
	}
}

// claimLock makes this attempt the holder of the session lock the router
// granted the turn, in one round trip per try: the bare grant, our own
// value (renewed) or a free lock (expired after a crash) are taken. While
// another attempt at the same turn holds it, it waits up to two TTLs for
// that attempt to finish or its lock to expire (the consumer keeps the
// message in progress meanwhile), then reports errLockBusy.
func (r *turnRun) claimLock(ctx context.Context) error {
	key, token := r.req.GetSessionKey(), r.req.GetLockToken()
	deadline := time.Now().Add(2 * r.ttl)
	for {
		c, at, err := r.s.locker.ClaimAt(ctx, key, token, r.holder, r.ttl)
		switch {
		case err != nil:
			return err
		case c == redisx.Claimed:
			r.st.LockedAt = at // orders this attempt's claim and writes (store.Turn)
			return nil
		case c == redisx.ClaimedFree:
			r.st.LockedAt = at
			return r.claimedFree(ctx)
		case c == redisx.ClaimLost:
			if err := r.grantElsewhere(ctx); err != nil {
				return err
			}
			if time.Now().After(deadline) {
				return errLockBusy
			}
		case time.Now().After(deadline):
			return errLockBusy
		}
		r.ahead = nil // read again once the other attempt is gone
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(r.ttl / 10):
		}
	}
}

// grantElsewhere checks a claim or renewal that found another grant
// holding the session lock: errLockLost when the session moved on (a
// newer turn started, or /stop or /new ended this one), nil while it is
// still at the turn's generation. No turn of the session starts then
// while this one holds its lease (migration 00148): the other grant is a
// router's that took the lock Redis had lost and will give it back,
// having found this turn running, so the attempt waits for it instead of
// abandoning a turn nothing else will answer. (The check waits for a
// generation bump in flight, whose lock switchboard_fence shares.)
func (r *turnRun) grantElsewhere(ctx context.Context) error {
	err := r.s.store.CheckGeneration(ctx, r.st)
	if errors.Is(err, store.ErrStaleGeneration) {
		return errLockLost
	}
	return err
}

// claimedFree checks a claim that found the session lock free: its grant
// is gone. When the session moved on (/stop or /new released the grant of
// a turn that was waiting for a worker) the turn must not run: it gives
// the lock back and is lost (stale). When the grant expired or Redis lost
// it, the session is still at the turn's generation and the turn runs.
func (r *turnRun) claimedFree(ctx context.Context) error {
	err := r.s.store.CheckGeneration(ctx, r.st)
	if err == nil {
		return nil
	}
	if rerr := r.s.locker.Release(context.WithoutCancel(ctx), r.req.GetSessionKey(), r.holder); rerr != nil {
		r.log.Warn("give back a session lock claimed for a stale turn", "err", rerr)
	}
	if errors.Is(err, store.ErrStaleGeneration) {
		return errLockLost
	}
	return err
}

// keepLock renews the lock every TTL/3 until stop. A lock that vanished
// (Redis restarted without its data, or failed over) is claimed again
// while the session is still at the turn's generation. When the session
// moved on, or another grant or another attempt holds the lock, the lock
// is lost and the turn stops at its next safe point.
func (r *turnRun) keepLock(ctx context.Context) (context.Context, func()) {
	r.held = r.st // before the renewals read it
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(r.ttl / 3)
		defer t.Stop()
		var seqKept time.Time // never: the first renewal renews the counter too
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			err := r.renewLock(ctx)
			if errors.Is(err, errLockLost) {
				return
			}
			if err != nil && ctx.Err() == nil {
				r.log.Warn("renew session lock", "err", err)
			}
			// The lease holds the session should Redis lose the lock:
			// renewed also when Redis did not answer (a restart, a
			// failover, which may lose the lock), or another grant held
			// the lock while the session was still the turn's, so that it
			// outlives the outage. Postgres down: the lock still holds it
			// (and the fenced writes wait for Postgres anyway).
			if err := r.s.store.RenewLease(ctx, r.held, r.ttl); err != nil && ctx.Err() == nil {
				r.log.Warn("renew the turn's lease", "err", err)
			}
			if now := time.Now(); err == nil && now.Sub(seqKept) >= r.s.seqTTL()/4 {
				if err := r.keepSeq(ctx); err != nil && ctx.Err() == nil {
					r.log.Warn("renew the reply seq counter", "err", err)
				} else {
					seqKept = now
				}
			}
		}
	}()
	return ctx, func() { cancel(); <-done }
}

// keepSeq renews the expiry of the turn's reply seq counter, if it
// exists (a turn that published nothing yet has none, and gets none):
// the counter lives as long as the turn runs, and seqTTL after.
func (r *turnRun) keepSeq(ctx context.Context) error {
	if err := r.s.rdb.PExpire(ctx, r.seqKey(), r.s.seqTTL()).Err(); err != nil {
		return fmt.Errorf("renew reply seq counter: %w", err)
	}
	return nil
}

// renewLock renews the session lock once, claiming it again when it
// vanished (reclaim). errLockLost: the session moved on, or another
// grant or attempt holds the lock; the turn is then stopped at its next
// safe point and any call it runs is ended. Any other error is Redis's or
// Postgres's: whether the lock is still held is not known.
func (r *turnRun) renewLock(ctx context.Context) error {
	err := r.s.locker.Renew(ctx, r.req.GetSessionKey(), r.holder, r.ttl)
	if errors.Is(err, redisx.ErrNotOwner) {
		err = r.reclaim(ctx)
	}
	if !errors.Is(err, redisx.ErrNotOwner) {
		return err
	}
	if r.lockLost.CompareAndSwap(false, true) { // once, whoever finds it first
		reason := "taken"
		if errors.Is(err, errMovedOn) {
			reason = "moved_on"
		}
		lockLost.WithLabelValues(reason).Inc()
		r.log.Warn("session lock lost; stopping at the next safe point", "reason", reason)
		r.ctl.wakeUp()
		r.ctl.abortCall(errLockLost)
	}
	return errLockLost
}

// fenceTool is the fence of a tool's side effects: right before a tool
// runs, the turn renews its lock (one round trip while it holds it), and
// runs nothing once another attempt took the session over or the session
// moved on. The renewals every TTL/3 are not enough for this: a worker
// frozen (SIGSTOP, a long GC or VM pause) past the lock's TTL while
// another attempt claimed the turn wakes up in its loop before its
// renewal does, and would run one tool: its side effect (a message sent,
// a file written, a command run) is done whatever happens to the write
// of its result, which the generation fence does not even refuse when
// the attempt that took over runs the same turn (same generation). The
// window that remains is the few instructions
// between this check and the tool's start; a fenced write cannot close
// it, as the tool's effect is outside the database. When Redis cannot
// answer, the tool does not run either: the check is tried again
// (fenceRetries, within a third of the lock's TTL, its renewal period),
// so that one error (a blip, a failover) does not end a long turn; then
// the turn's attempt ends with the error (and is kept for a retry while
// Redis is unavailable). A /stop or an interrupting message during the
// wait ends it (fenceWait). A lost lock stops the tool at once, also when
// the renewal found it lost while the check was tried again and the
// check then claimed it free. A check that succeeds after errors holds
// the lock as any other: it renewed it.
func (r *turnRun) fenceTool(ctx context.Context) error {
	deadline := time.Now().Add(r.ttl / 3)
	wait := fenceBackoff
	for retry := 0; ; retry++ {
		cctx, cancel := context.WithDeadline(ctx, deadline)
		err := r.renewLock(cctx)
		cancel()
		if err == nil && r.lockLost.Load() {
			// The lock was lost meanwhile (the renewal found another
			// attempt holding it while this check waited for Redis):
			// the turn is stopping, even though the check claimed the
			// lock again once that attempt gave it back.
			return errLockLost
		}
		if err == nil || errors.Is(err, errLockLost) {
			return err
		}
		if retry == fenceRetries || ctx.Err() != nil || time.Until(deadline) < wait {
			return fmt.Errorf("check the session lock before a tool runs: %w", err)
		}
		r.log.Warn("check the session lock before a tool runs; trying again", "err", err, "in", wait)
		if err := r.fenceWait(ctx, wait); err != nil {
			return err
		}
		wait *= 2
	}
}

// fenceWait waits d before the lock check is tried again; a /stop, an
// interrupting message, the lock's loss or ctx's end ends the wait with
// the reason, as the tool would not run.
func (r *turnRun) fenceWait(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-r.ctl.wake:
			if err := r.checkpoint(ctx); err != nil {
				return err
			}
		case <-t.C:
			return nil
		}
	}
}

// fenceRetries and fenceBackoff: a lock check before a tool that Redis
// did not answer is tried again up to three times, after 100, 200 and
// 400 ms.
const (
	fenceRetries = 3
	fenceBackoff = 100 * time.Millisecond
)

// reclaim claims the lock again after a renewal found it gone; it
// reports ErrNotOwner when the session moved on (/stop and /new advance
// the generation before they drop the lock) or another grant or attempt
// holds it.
func (r *turnRun) reclaim(ctx context.Context) error {
	if err := r.s.store.CheckGeneration(ctx, r.held); err != nil {
		if errors.Is(err, store.ErrStaleGeneration) {
			return errMovedOn
		}
		return err
	}
	c, err := r.s.locker.Claim(ctx, r.req.GetSessionKey(), r.req.GetLockToken(), r.holder, r.ttl)
	switch {
	case err != nil:
		return err
	case c == redisx.ClaimLost:
		// A router's grant took the lock Redis had lost (the generation
		// was still the turn's just now): it gives it back once it finds
		// this turn's lease. Kept, the lock is claimed again next time.
		return errGrantElsewhere
	case c != redisx.Claimed && c != redisx.ClaimedFree:
		return redisx.ErrNotOwner
	}
	r.log.Warn("session lock had vanished; claimed it again")
	return nil
}

// errGrantElsewhere: a renewal found another grant holding the session
// lock while the session was still at the turn's generation (reclaim).
var errGrantElsewhere = errors.New("session lock held by another grant while the session is still at the turn's generation")

// checkpoint is a safe point: it reports why the turn must stop, if it must.
func (r *turnRun) checkpoint(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if r.lockLost.Load() {
		return errLockLost
	}
	return r.ctl.stopReason()
}

// nextSeq allocates the next reply seq of the turn. The counter lives in
// Redis so a redelivered turn continues the sequence instead of reusing ids
// that JetStream would deduplicate away. A later attempt of a turn whose
// first attempt may take seq 1 without the counter (finalSeq) and whose
// answer lists its tool calls is handed 2 and up: seq 1 stays that
// final's, should the first attempt be frozen past its lock rather than
// dead and wake to commit and publish it.
func (r *turnRun) nextSeq(ctx context.Context) (int64, error) {
	n, _, err := r.takeSeq(ctx)
	return n, err
}

// takeSeq is nextSeq that also reports whether this call created the
// counter: no seq of the turn was handed out by it before, so seq 1 is
// either free or an earlier attempt's counter-less final (finalSeq).
func (r *turnRun) takeSeq(ctx context.Context) (n int64, created bool, err error) {
	r.seqUsed.Store(true)
	key := r.seqKey()
	floor := 0
	if r.attempt > 1 && r.finalUncounted() && r.listsSteps {
		// Only a turn whose later attempt publishes steps before its
		// final: another's final at the counter's 1 is a final too, and
		// Finish keeps one of the two, which both then publish.
		floor = 1
	}
	v, err := nextSeqScript.Run(ctx, r.s.rdb, []string{key}, r.s.seqTTL().Milliseconds(), floor).Int64Slice()
	if err != nil {
		return 0, false, fmt.Errorf("allocate reply seq: %w", err)
	}
	if len(v) != 2 {
		return 0, false, fmt.Errorf("allocate reply seq: unexpected reply %v", v)
	}
	if v[1] == 1 && floor > 0 {
		r.floored.Store(true)
	}
	return v[0], v[1] == 1, nil
}

// afterAnswer reports whether the turn may still run something under
// its lock once its answer is written: a voice reply (a speaker and a
// chat's /voice mode), the goal judge's step (an active goal), a /loop
// wakeup's step. It errs towards yes: the turn then ends its lease as it
// lets go of the lock (endLease), a round trip more, rather than with
// its answer's write.
func (r *turnRun) afterAnswer() bool {
	voice := r.req.GetVoiceMode() == voiceAll || r.req.GetVoiceMode() == voiceOnly
	return r.s.tts != nil && voice || r.s.goals != nil && (r.req.GetGoalActive() || r.loopWakeup() != "")
}

// finishing is the turn for the write of its answer (store.Finish): with
// what this attempt used, ending its lease in the same transaction when
// nothing follows the answer under the lock (afterAnswer).
func (r *turnRun) finishing() store.Turn {
	t := r.withUsage()
	t.EndLease = !r.afterAnswer()
	return t
}

// finished records what the write of the answer did to the turn's lease.
func (r *turnRun) finished(t store.Turn) {
	if t.EndLease {
		r.leaseEnded = true
	}
}

// withUsage is the turn for its final's write: with what this attempt
// used.
func (r *turnRun) withUsage() store.Turn {
	t := r.st
	t.Usage = store.Usage{Input: r.usage.GetInputTokens(), Output: r.usage.GetOutputTokens(),
		CacheRead: r.usage.GetCacheReadTokens(), CacheWrite: r.usage.GetCacheWriteTokens(), Context: r.lastPrompt}
	return t
}

// finalSeq is the seq of the turn's final event. A turn run here (not by
// a remote agent) whose inputs all wait for the whole answer publishes no
// event before its final but its tool calls' steps when its answer lists
// them (answerListsSteps) — its progress is not sent, and every attempt's
// final is committed with its seq before it is published and republished
// as it is — so when its first attempt allocated none, the final is the
// turn's first event: seq 1, without the counter's round trip. Only the
// first attempt's: a later one asks the counter, which hands it 2 and up
// (nextSeq), since an earlier attempt may have published steps (one of
// an older release did for every answer-only API turn) or, frozen past
// its lock, may still publish its final at 1. Finish keeps whichever
// final was committed first, and every attempt publishes that one at
// its own seq.
func (r *turnRun) finalSeq(ctx context.Context) (int64, error) {
	if r.finalUncounted() && !r.seqUsed.Load() && r.attempt <= 1 {
		return 1, nil
	}
	return r.nextSeq(ctx)
}

// finalUncounted reports whether the turn's first attempt may publish
// its final at seq 1 without the counter (finalSeq).
func (r *turnRun) finalUncounted() bool { return r.answerOnly && r.s.agent == nil }

// nextSeqScript increments a turn's seq counter, setting its expiry when
// it is created: one round trip. A floor (ARGV[2]) above 0 starts a
// counter not yet created there, so the first seq it hands out is the
// floor's next. It returns the seq and 1 when this call created the
// counter (0 otherwise), with no command more than it needs to count: a
// turn's every seq comes from it.
var nextSeqScript = redis.NewScript(`
local created = 0
if ARGV[2] ~= "0" and redis.call("SET", KEYS[1], ARGV[2], "NX", "PX", ARGV[1]) then created = 1 end
local n = redis.call("INCR", KEYS[1])
if n == 1 then
  created = 1
  redis.call("PEXPIRE", KEYS[1], ARGV[1])
end
return {n, created}`)

// fillSeqGap runs when a turn is redelivered: a crash between allocating a
// seq and publishing it leaves a hole at the counter's value; a typing
// event with that id fills it (or is deduplicated if it was published),
// but for an answer-only turn.
func (r *turnRun) fillSeqGap(ctx context.Context, final *store.Final) error {
	if r.target == nil {
		return nil
	}
	n, err := r.s.rdb.Get(ctx, r.seqKey()).Int64()
	if err != nil || n == 0 || (final != nil && final.Seq == n) {
		return nil //nolint:nilerr // no counter: nothing was published
	}
	if r.answerOnly {
		// Such a turn publishes no typing, and its hole may be a final's:
		// seq 1, which a first attempt takes without the counter
		// (finalSeq), or the seq an earlier attempt took from it for its
		// final. That attempt, frozen past its lock rather than dead (an
		// older worker's, which no claim fences), may still commit its
		// final there and publish it: a typing event would have the bus
		// drop that final, and the final this attempt's Finish then
		// keeps, as its duplicate. The hole is left: nothing waits for
		// it.
		return nil
	}
	return r.publishAt(ctx, n, &repliesv1.ReplyEvent{Body: &repliesv1.ReplyEvent_Typing{Typing: &repliesv1.Typing{Active: true}}})
}

// publish sends a reply event with the next seq, if it sends it.
func (r *turnRun) publish(ctx context.Context, ev *repliesv1.ReplyEvent) error {
	if !r.sends(ev) {
		return nil
	}
	seq, err := r.nextSeq(ctx)
	if err != nil {
		return err
	}
	return r.publishAt(ctx, seq, ev)
}

// sends reports whether publish sends ev: the turn's replies go
// somewhere, and ev is not progress that no input's sender is shown.
func (r *turnRun) sends(ev *repliesv1.ReplyEvent) bool {
	return r.target != nil && (!r.answerOnly || !isProgress(ev) || r.answerListsSteps(ev))
}

// answerListsSteps reports whether ev is a tool step that an
// answer-only turn publishes still: the API gateway lists a turn's tool
// calls in a Responses answer that does not stream (function_call and
// function_call_output items before the message, as Hermes's API server
// does), and its request, which shows no progress, can only get them
// as steps: a call's start and end, nothing else. Only a turn an input
// of which says its answer lists them (lists_tool_calls) does: a chat
// completion that does not stream shows none. A turn that calls no
// tool publishes nothing more. A later attempt does too, its steps at
// seq 2 and up (nextSeq): an earlier attempt, frozen past its lock
// rather than dead, may still commit its final at seq 1 without the
// counter (finalSeq), and a step at seq 1 would have the bus drop that
// final, and every republication of it, as the step's duplicate.
func (r *turnRun) answerListsSteps(ev *repliesv1.ReplyEvent) bool {
	if !r.listsSteps {
		return false
	}
	switch ev.GetToolProgress().GetPhase() {
	case repliesv1.ToolPhase_TOOL_PHASE_STARTED, repliesv1.ToolPhase_TOOL_PHASE_FINISHED, repliesv1.ToolPhase_TOOL_PHASE_FAILED:
		return true
	}
	return false
}

func (r *turnRun) publishAt(ctx context.Context, seq int64, ev *repliesv1.ReplyEvent) error {
	return r.publishAtID(ctx, seq, fmt.Sprintf("reply:%s:%d", r.req.GetTurnId(), seq), ev)
}

// publishAtID publishes ev at seq under the bus message id id.
func (r *turnRun) publishAtID(ctx context.Context, seq int64, id string, ev *repliesv1.ReplyEvent) error {
	_, err := r.publishEvent(ctx, seq, id, ev)
	return err
}

// publishEvent is publishAtID, also returning the stream's
// acknowledgement of an event it waited for (nil for progress, published
// without waiting, and for a turn whose replies go nowhere).
func (r *turnRun) publishEvent(ctx context.Context, seq int64, id string, ev *repliesv1.ReplyEvent) (ack *jetstream.PubAck, err error) {
	if r.target == nil {
		return nil, nil
	}
	ev.TurnId = r.req.GetTurnId()
	ev.SessionKey = r.req.GetSessionKey()
	ev.Generation = r.req.GetGeneration()
	ev.Seq = seq
	ev.Target = r.target
	ev.CreatedAt = timestamppb.New(r.s.now())
	ev.TurnRequestedAt = r.req.GetRequestedAt()
	ev.InputMessageIds = r.inputIDs
	ev.NoReactionMessageIds = r.noReaction
	if _, ok := ev.GetBody().(*repliesv1.ReplyEvent_ToolProgress); ok {
		// The mode /verbose chose, for delivery to show the step by.
		ev.ToolProgressMode = r.req.GetToolProgressMode()
	}
	subject := r.s.bus.Topology().ReplySubject(r.req.GetSessionKey())
	if isProgress(ev) {
		// Progress: no need to wait for the stream; the final event,
		// published after it on the same connection, stays behind it.
		err = r.s.bus.PublishAsync(ctx, subject, id, ev)
	} else {
		ack, err = r.s.bus.Publish(ctx, subject, id, ev)
	}
	if err != nil {
		return nil, fmt.Errorf("publish reply event: %w", err)
	}
	if !isProgress(ev) {
		// What the user must get goes to every deliver target of a cron
		// run whose job names several, after the first's.
		if err := r.publishCopies(ctx, subject, id, ev); err != nil {
			return nil, err
		}
	}
	return ack, nil
}

// isProgress reports whether ev only shows progress (typing, streamed
// text, tool steps): nothing the user must get.
func isProgress(ev *repliesv1.ReplyEvent) bool {
	switch ev.GetBody().(type) {
	case *repliesv1.ReplyEvent_Typing, *repliesv1.ReplyEvent_TextDelta, *repliesv1.ReplyEvent_ReasoningDelta, *repliesv1.ReplyEvent_ToolProgress:
		return true
	}
	return false
}

// publishFinal (re)publishes the turn's one final event at its stored seq.
func (r *turnRun) publishFinal(ctx context.Context, f store.Final) error {
	ev := &repliesv1.ReplyEvent{}
	switch f.Kind {
	case store.FinalText:
		text, deliver := r.cronAnswer(f.Text)
		if !deliver {
			return nil
		}
		text = r.backgroundAnswer(text)
		text = r.withFooter(text, f)
		ev.Body = &repliesv1.ReplyEvent_FinalText{FinalText: &repliesv1.FinalText{Text: text, Format: deliveryv1.TextFormat_TEXT_FORMAT_MARKDOWN,
			Usage: &deliveryv1.TokenUsage{PromptTokens: f.Usage.Input + f.Usage.CacheRead + f.Usage.CacheWrite, CompletionTokens: f.Usage.Output}}}
	case store.FinalError:
		ev.Body = &repliesv1.ReplyEvent_Error{Error: &repliesv1.ReplyError{Code: f.ErrorCode, Message: r.backgroundFailure(f.Text)}}
	default:
		return nil
	}
	ctx = context.WithoutCancel(ctx)
	id := fmt.Sprintf("reply:%s:%d", r.req.GetTurnId(), f.Seq)
	ack, err := r.publishEvent(ctx, f.Seq, id, ev)
	if err != nil || ack == nil || !ack.Duplicate || r.heldFinal(ctx, ack) {
		return err
	}
	// The bus holds another event under the final's id: during a rolling
	// upgrade, a typing event an older worker's later attempt filled the
	// seq with, which an earlier attempt (frozen past its lock, and not
	// fenced by that attempt, which claims nothing) took for the final
	// committed. The final goes again under an id of its own, where that
	// typing event had left the turn without an answer.
	r.log.Warn("the final's seq holds another reply event; publishing the final under its own id", "seq", f.Seq)
	_, err = r.publishEvent(ctx, f.Seq, id+":final", ev)
	return err
}

// heldFinal reports whether the event the bus holds under a final's id,
// which ack called a duplicate, is a final (this one, published before by
// this attempt or another, or another attempt's at the same seq: a
// turn's apology and an earlier final share seq 1), or could not be read
// (a final published again is taken once by delivery: the same seq and
// body, the same outbox keys).
func (r *turnRun) heldFinal(ctx context.Context, ack *jetstream.PubAck) bool {
	st, err := r.s.bus.JetStream().Stream(ctx, ack.Stream)
	if err != nil {
		r.log.Warn("read the event held under the final's id", "err", err)
		return false
	}
	m, err := st.GetMsg(ctx, ack.Sequence)
	if err != nil {
		r.log.Warn("read the event held under the final's id", "err", err)
		return false
	}
	var held repliesv1.ReplyEvent
	if err := proto.Unmarshal(m.Data, &held); err != nil {
		r.log.Warn("read the event held under the final's id", "err", err)
		return false
	}
	switch held.GetBody().(type) {
	case *repliesv1.ReplyEvent_FinalText, *repliesv1.ReplyEvent_Error:
		return true
	}
	return false
}

// breakBeforeFinal streams Hermes's paragraph break, marked restart,
// to an API stream before a final whose text does not continue the
// answer text streamed since the last break: one the model did not
// stream (Hermes's "(No response generated)" for a last call that said
// nothing after text streamed before a tool call). The stream then shows
// the final after what it was streamed and completes, rather than taking
// the final for another answer. Best effort: without it the stream ends
// with the interrupted error, as before. Chats need none: their final
// replaces the streamed message. It goes before the final's seq is
// taken, so the final stays the turn's last event.
func (r *turnRun) breakBeforeFinal(ctx context.Context, text string) {
	if !r.answerStreamed || r.finalBreak || r.target.GetPlatform() != "api" || strings.HasPrefix(text, r.sinceBreak.String()) {
		return
	}
	r.finalBreak = true
	brk := &repliesv1.TextDelta{Text: "\n\n", Restart: true}
	if err := r.publish(context.WithoutCancel(ctx), &repliesv1.ReplyEvent{Body: &repliesv1.ReplyEvent_TextDelta{TextDelta: brk}}); err != nil {
		r.log.Warn("stream the break before the final", "err", err)
	}
}

// withFooter is the answer with Hermes's runtime footer after it when
// the turn asks for it (TurnRequested.runtime_footer: the chat's /footer,
// else router.runtime_footer): the model that answered and how full the
// context window was at the latest model call. Only the final event
// carries it — streamed text, tool progress and the transcript do not —
// so the model never reads it back. A final republished by a later
// attempt that made no model call has the model only.
func (r *turnRun) withFooter(text string, f store.Final) string {
	if !r.req.GetRuntimeFooter() {
		return text
	}
	model := f.Model
	if model == "" {
		model = r.model
	}
	if model == "external" {
		// An external agent chooses its own model and tells none.
		model = ""
	}
	var window int64
	if r.s.agent == nil {
		window = int64(r.s.cfg.Agent.ContextWindow)
	}
	return footer.Append(text, footer.Format(model, r.lastPrompt, window))
}

// backgroundAnswer is what the answer of a /background task's turn
// (TurnRequested.background_task_id) delivers to the chat it was asked
// in, as Hermes: "✅ Background task complete", the prompt's first 60
// characters, and the answer, or "(No response generated)". Other
// turns' answers go as they are.
func (r *turnRun) backgroundAnswer(text string) string {
	if r.req.GetSideQuestion() != nil {
		return r.sideAnswer(text)
	}
	if r.req.GetBackgroundTaskId() == "" {
		return text
	}
	if strings.TrimSpace(text) == "" {
		text = placeholder.NoResponse
	}
	return "✅ Background task complete\nPrompt: \"" + r.backgroundPrompt() + "\"\n\n" + text
}

// interruptedText is what a turn whose attempt died before it answered
// tells its chat. A cron run was sent by no one: asking to send it again
// would make no sense there.
func (r *turnRun) interruptedText() string {
	if r.req.GetOrigin().GetPlatform() == "cron" {
		return "The run was interrupted before it finished."
	}
	return "Sorry, your earlier message was interrupted before it was answered. Please send it again."
}

// failedText is what a turn whose last attempt failed tells its chat; a
// cron run's, as interruptedText, asks for nothing to be sent again.
func (r *turnRun) failedText() string {
	if r.req.GetOrigin().GetPlatform() == "cron" {
		return "The run was interrupted before it finished."
	}
	return "Sorry, your request was interrupted and could not be completed. Please send it again."
}

// backgroundFailure is the reason a /background task's turn failed, as
// Hermes words it ("Background task <id> failed: …"; delivery puts its
// ⚠️ before every failure, where Hermes has ❌), or a cron run's
// ("Cron job '<name>' failed:\n…"). Other turns' go as they are.
func (r *turnRun) backgroundFailure(reason string) string {
	if r.req.GetSideQuestion() != nil {
		// Hermes's "❌ /btw failed: …" (delivery puts its ⚠️ first).
		if reason == "" {
			reason = "no answer"
		}
		return "/btw failed: " + reason
	}
	if o := r.req.GetOrigin(); o.GetPlatform() == "cron" {
		// Hermes's "⚠️ Cron job '<name>' failed:\n<error>": the chat
		// learns which job (delivery puts the ⚠️ first).
		if reason == "" {
			reason = "See logs for details"
		}
		return "Cron job '" + o.GetChatName() + "' failed:\n" + reason
	}
	id := r.req.GetBackgroundTaskId()
	if id == "" {
		return reason
	}
	if reason == "" {
		reason = "no answer"
	}
	return "Background task " + id + " failed: " + reason
}

// backgroundPrompt is the task's prompt (its turn's one input; a /btw's
// question) cut to 60
// characters with "...", as Hermes previews it.
func (r *turnRun) backgroundPrompt() string {
	ins := r.req.GetInputs()
	if len(ins) == 0 {
		return ""
	}
	p := ins[len(ins)-1].GetText()
	if utf8.RuneCountInString(p) <= 60 {
		return p
	}
	return string([]rune(p)[:60]) + "..."
}

// cronAnswer is what a cron run's answer (a turn of the cron platform)
// delivers, as Hermes: nothing when it is silent (silentAnswer; the
// transcript keeps it), otherwise the answer under the job's name with
// the note that the agent cannot see it. Other turns' answers go as they
// are.
func (r *turnRun) cronAnswer(text string) (string, bool) {
	o := r.req.GetOrigin()
	if o.GetPlatform() != "cron" {
		return text, true
	}
	if silentAnswer(text) {
		r.log.Info("cron run answered [SILENT]; nothing delivered")
		return "", false
	}
	return "Cronjob Response: " + o.GetChatName() + "\n-------------\n\n" + text +
		"\n\nNote: The agent cannot see this message, and therefore cannot respond to it.", true
}

// silenceMarkers are the answers that mean the agent chose to say
// nothing (Hermes's LIVE_GATEWAY_SILENT_MARKERS): the run's framing asks
// for [SILENT], models drop the brackets or say NO_REPLY, and one that
// does not think in English translates the word.
var silenceMarkers = map[string]bool{
	"[SILENT]": true, "SILENT": true, "NO_REPLY": true, "NO REPLY": true,
	"[静默]": true, "静默": true, "[沉默]": true, "沉默": true,
}

// silentPrefixes open an answer that is silent whatever follows ("[SILENT]
// nothing new since yesterday").
var silentPrefixes = []string{"[SILENT]", "[静默]", "[沉默]"}

// silentAnswer: a cron run's answer suppresses its delivery, as Hermes's
// autonomous lanes decide (gateway/response_filters.py): it opens with a
// bracketed marker, or the answer, its first line or its last line is a
// marker (any case, spacing and stray punctuation around it aside:
// "*NO_REPLY*", "Nothing changed.\n\n[SILENT]"). A marker within a
// sentence is content: delivered.
func silentAnswer(text string) bool {
	t := strings.TrimSpace(text)
	if t == "" {
		return false
	}
	up := strings.ToUpper(t)
	for _, p := range silentPrefixes {
		if strings.HasPrefix(up, p) {
			return true
		}
	}
	var lines []string
	for _, l := range strings.Split(t, "\n") {
		if strings.TrimSpace(l) != "" {
			lines = append(lines, l)
		}
	}
	return isSilenceMarker(t) || isSilenceMarker(lines[0]) || isSilenceMarker(lines[len(lines)-1])
}

// isSilenceMarker: s, spaced and cased as it may be, with or without
// punctuation at its edges (not brackets: "[SILENT" is no marker), is a
// silence marker.
func isSilenceMarker(s string) bool {
	s = strings.TrimSpace(s)
	if n := utf8.RuneCountInString(s); n == 0 || n > 64 {
		return false
	}
	edge := func(r rune) bool { return r != '[' && r != ']' && unicode.IsPunct(r) }
	for _, c := range []string{s, strings.TrimSpace(strings.TrimFunc(s, edge))} {
		if silenceMarkers[strings.Join(strings.Fields(strings.ToUpper(c)), " ")] {
			return true
		}
	}
	return false
}

func (r *turnRun) toolProgress(ctx context.Context, tp *repliesv1.ToolProgress) error {
	return r.publish(ctx, &repliesv1.ReplyEvent{Body: &repliesv1.ReplyEvent_ToolProgress{ToolProgress: tp}})
}

// control is what the router asked of the running turn.
type control struct {
	mu        sync.Mutex
	interrupt bool
	stop      bool
	steer     []steerNote
	// steerSeen are the queued messages of the steering this attempt
	// took (steerNote.queued), so that the same message is never taken
	// twice; inputs are the event ids of the turn's inputs, whose
	// steering the turn declines (the router queued it, and it became an
	// input of this turn before the turn was asked).
	steerSeen map[string]bool
	inputs    map[string]bool
	// forwarded are the queued messages of the steering passed on to an
	// external agent: the turn's final removes them (remoteCompleted).
	forwarded []string
	// steerClosed: the turn reads no more steering (its answer is
	// decided), so steering is refused and the router queues it.
	steerClosed bool
	approvals   chan answer
	// awaiting: a tool call waits for the user's /approve or /deny; an
	// answer at any other time is refused (the router says nothing is
	// pending).
	awaiting bool
	// awaitingCall is the id of the tool call that waits: an answer
	// for another call (an old prompt's button) is refused.
	awaitingCall string
	wake         chan struct{}
	forward      func(*turnsv1.TurnControlRequested)
	// cancelCall ends the model call in progress, if any: a stop, an
	// interrupt or the lock's loss does not wait for a call that may
	// stream for minutes.
	cancelCall context.CancelCauseFunc
	// stopAsked: the router sent a stop (/stop, /new), or the admin
	// API's reset did, whether the turn reads it itself or forwards it
	// to an external agent.
	stopAsked bool
	// stopByReset: the first stop was the admin API's reset's (its event
	// id adminResetEvent…), which the stopped API request is told.
	stopByReset bool
}

// adminResetEvent starts the event id of the stop the admin API's
// ResetSession sends (services/admin stopTurn).
const adminResetEvent = "admin-reset:"

// duringCall registers cancel as the way to end the model call now in
// progress (nil: none). It returns the reason to stop when one already
// came, and the call must not start.
func (c *control) duringCall(cancel context.CancelCauseFunc) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.cancelCall = cancel
	switch {
	case cancel == nil:
		return nil
	case c.stop:
		return errStopped
	case c.interrupt:
		return errInterrupted
	}
	return nil
}

// abortCall ends the model call in progress, if any, with reason.
func (c *control) abortCall(reason error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.cancelCall != nil {
		c.cancelCall(reason)
	}
}

// setForward passes every later control message to fn (external agents),
// after replaying what arrived before it was set (a stop, an interrupt,
// steering), so a control sent while the agent was being started is not
// lost.
func (c *control) setForward(fn func(*turnsv1.TurnControlRequested)) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.forward = fn
	if fn == nil {
		return
	}
	switch {
	case c.stop:
		fn(&turnsv1.TurnControlRequested{Action: turnsv1.ControlAction_CONTROL_ACTION_STOP})
	case c.interrupt:
		fn(&turnsv1.TurnControlRequested{Action: turnsv1.ControlAction_CONTROL_ACTION_INTERRUPT})
	}
	for _, n := range c.steer {
		fn(&turnsv1.TurnControlRequested{Action: turnsv1.ControlAction_CONTROL_ACTION_STEER, Text: n.text, QueuedEventId: n.queued})
		c.forwardedSteer(n.queued)
	}
	c.steer = nil
}

// steerNote is one steering text the turn took, and the event id of the
// queued message that carries it ("" when the router queued none): the
// write that gives the text to the model removes that message
// (store.Turn.Steered); text never given to the model stays queued.
type steerNote struct {
	text   string
	queued string
}

// steerTexts and steerQueued are the texts and the queued messages of
// notes.
func steerTexts(notes []steerNote) []string {
	out := make([]string, len(notes))
	for i, n := range notes {
		out[i] = n.text
	}
	return out
}

func steerQueued(notes []steerNote) []string {
	var out []string
	for _, n := range notes {
		if n.queued != "" {
			out = append(out, n.queued)
		}
	}
	return out
}

func newControl(inputs []string) *control {
	c := &control{approvals: make(chan answer, 4), wake: make(chan struct{}, 1),
		steerSeen: map[string]bool{}, inputs: map[string]bool{}}
	for _, id := range inputs {
		c.inputs[id] = true
	}
	return c
}

// forwardedSteer records queued (when set) as steering passed on to an
// external agent. The caller holds mu.
func (c *control) forwardedSteer(queued string) {
	if queued != "" {
		c.forwarded = append(c.forwarded, queued)
	}
}

// takeForwarded returns and clears the queued messages of the steering
// passed on to an external agent.
func (c *control) takeForwarded() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	f := c.forwarded
	c.forwarded = nil
	return f
}

func (c *control) wakeUp() {
	select {
	case c.wake <- struct{}{}:
	default:
	}
}

// apply takes a control message; it reports false for steering the turn
// will not read.
func (c *control) apply(m *turnsv1.TurnControlRequested) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if m.GetAction() == turnsv1.ControlAction_CONTROL_ACTION_STEER {
		q := m.GetQueuedEventId()
		switch {
		case c.steerClosed, c.inputs[q]:
			// The turn reads no more, or the queued text is one of its
			// inputs already (the turn before, which it was meant for,
			// ended meanwhile): no second copy.
			return false
		case q != "" && c.steerSeen[q]:
			return true // taken already
		case q != "":
			c.steerSeen[q] = true
		}
	}
	isAnswer := m.GetAction() == turnsv1.ControlAction_CONTROL_ACTION_APPROVE || m.GetAction() == turnsv1.ControlAction_CONTROL_ACTION_DENY
	if m.GetAction() == turnsv1.ControlAction_CONTROL_ACTION_STOP {
		if !c.stopAsked {
			c.stopByReset = strings.HasPrefix(m.GetEventId(), adminResetEvent)
		}
		c.stopAsked = true
	}
	if c.forward != nil {
		if isAnswer {
			if !c.answers(m) {
				return false
			}
			c.awaiting = false // one answer per request
		}
		if m.GetAction() == turnsv1.ControlAction_CONTROL_ACTION_STEER {
			c.forwardedSteer(m.GetQueuedEventId())
		}
		c.forward(m)
		return true
	}
	switch m.GetAction() {
	case turnsv1.ControlAction_CONTROL_ACTION_INTERRUPT:
		c.interrupt = true
		c.wakeUp()
		if c.cancelCall != nil {
			c.cancelCall(errInterrupted)
		}
	case turnsv1.ControlAction_CONTROL_ACTION_STOP:
		c.stop = true
		c.wakeUp()
		if c.cancelCall != nil {
			c.cancelCall(errStopped)
		}
	case turnsv1.ControlAction_CONTROL_ACTION_STEER:
		if m.GetText() != "" {
			c.steer = append(c.steer, steerNote{text: m.GetText(), queued: m.GetQueuedEventId()})
		}
	case turnsv1.ControlAction_CONTROL_ACTION_APPROVE, turnsv1.ControlAction_CONTROL_ACTION_DENY:
		if !c.answers(m) {
			return false
		}
		select {
		case c.approvals <- answerOf(m):
			c.awaiting = false // one answer per request
		default:
			return false
		}
	}
	return true
}

// answer is the user's answer to an approval: approved or denied, and
// for how long an approval stands (store.ApproveSession, ApproveUser;
// "" for this call alone); a denial's reason for the agent ("" for
// none) and whether it denies the rest of the model's calls that would
// ask too (/deny all).
type answer struct {
	approved bool
	scope    string
	reason   string
	all      bool
}

// answerOf reads an approval control: its text is /approve's argument
// (command.ApprovalScope) or /deny's (command.Deny).
func answerOf(m *turnsv1.TurnControlRequested) answer {
	if m.GetAction() != turnsv1.ControlAction_CONTROL_ACTION_APPROVE {
		all, reason := command.Deny(m.GetText())
		return answer{reason: reason, all: all}
	}
	scope := map[string]string{
		command.ApproveSession: store.ApproveSession,
		command.ApproveAlways:  store.ApproveUser,
	}[command.ApprovalScope(m.GetText())]
	return answer{approved: true, scope: scope}
}

// answers reports whether the approval answer m is for the call that
// waits: one does, and m names no call or that one. The caller holds mu.
func (c *control) answers(m *turnsv1.TurnControlRequested) bool {
	return c.awaiting && (m.GetToolCallId() == "" || m.GetToolCallId() == c.awaitingCall)
}

// await marks whether a tool call (call, its id) waits for the user's
// answer; a new wait starts with no answer given before it.
func (c *control) await(waiting bool, call string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.awaiting, c.awaitingCall = waiting, call
	for waiting {
		select {
		case <-c.approvals:
		default:
			return
		}
	}
}

// stopped reports whether the router asked the turn to stop.
func (c *control) stopped() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.stopAsked
}

// stoppedByReset reports whether the stop was the admin API's reset's.
func (c *control) stoppedByReset() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.stopByReset
}

func (c *control) stopReason() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case c.stop:
		return errStopped
	case c.interrupt:
		return errInterrupted
	}
	return nil
}

// takeSteer returns and clears the pending steering.
func (c *control) takeSteer() []steerNote {
	c.mu.Lock()
	defer c.mu.Unlock()
	s := c.steer
	c.steer = nil
	return s
}

// takeSteerOrClose is takeSteer at the point where the answer is decided
// unless steering waits: with none pending, it refuses all later
// steering, so none is acknowledged and then dropped.
func (c *control) takeSteerOrClose() []steerNote {
	c.mu.Lock()
	defer c.mu.Unlock()
	s := c.steer
	c.steer = nil
	c.steerClosed = len(s) == 0
	return s
}

// takeSteerAndClose returns and clears the pending steering and
// refuses all later steering: the turn reads it now, and never again.
func (c *control) takeSteerAndClose() []steerNote {
	c.mu.Lock()
	defer c.mu.Unlock()
	s := c.steer
	c.steer = nil
	c.steerClosed = true
	return s
}

// closeSteer refuses all later steering (the turn is ending).
func (c *control) closeSteer() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.steerClosed = true
}

// subscribeControl registers the turn for the router's control messages
// of its session, which the process-wide subscription (controls) routes.
func (r *turnRun) subscribeControl() (func(), error) {
	r.s.controls.add(r)
	return func() { r.s.controls.remove(r) }, nil
}
