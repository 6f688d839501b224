package router

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/switchboard-chat/switchboard/pkg/bus"
	"github.com/switchboard-chat/switchboard/pkg/command"
	deliveryv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/delivery/v1"
	eventsv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/events/v1"
	repliesv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/replies/v1"
	turnsv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/turns/v1"
	"github.com/switchboard-chat/switchboard/pkg/llm"
	"github.com/switchboard-chat/switchboard/pkg/personality"
	"github.com/switchboard-chat/switchboard/pkg/redisx"
	"github.com/switchboard-chat/switchboard/pkg/sessionkey"
	"github.com/switchboard-chat/switchboard/pkg/sessionstore"
)

const (
	controlInterrupt = turnsv1.ControlAction_CONTROL_ACTION_INTERRUPT
	controlSteer     = turnsv1.ControlAction_CONTROL_ACTION_STEER
	controlStop      = turnsv1.ControlAction_CONTROL_ACTION_STOP
	controlApprove   = turnsv1.ControlAction_CONTROL_ACTION_APPROVE
	controlDeny      = turnsv1.ControlAction_CONTROL_ACTION_DENY
)

// tryStart claims the session lock and, if messages wait, publishes the
// next turn under it. It reports false when the session is busy or idle.
// The lock, the dequeue and the generation bump happen before the turn is
// visible to any worker; the transaction commits only after the publish.
func (s *Service) tryStart(ctx context.Context, key string) (bool, error) {
	// Take the lock only when something waits: a lock held for nothing
	// would make a message arriving now look like it met a running turn.
	if n, err := s.store.QueueLen(ctx, key); err != nil || n == 0 {
		return false, err
	}
	// Parts held for the rest of a message wait for it (split.go).
	if held, err := s.held(ctx, key); err != nil || held {
		return false, err
	}
	return s.startQueued(ctx, key)
}

// startQueued is tryStart for a session known to have waiting messages
// (one was just queued). When the lock is held it marks it in the same
// step, so its holder's turn completion starts them (see TurnCompleted's
// nothing_waiting).
func (s *Service) startQueued(ctx context.Context, key string) (bool, error) {
	token := redisx.NewGrant(s.now())
	ok, err := s.locker.AcquireOrMark(ctx, key, token, s.cfg.GrantTTL)
	if err != nil || !ok {
		return false, err
	}
	return s.startLocked(ctx, key, token)
}

// startLocked starts the next turn of a session whose lock token holds,
// or releases the lock when nothing could be started. The turn's id is
// token: a grant names the turn it started (see orphaned).
func (s *Service) startLocked(ctx context.Context, key, token string) (bool, error) {
	started, _, err := s.startNext(ctx, key, token)
	return started, err
}

// startNext is startLocked, also reporting whether the turn it started
// is a memory flush (flush.go), which the messages left queued wait for.
func (s *Service) startNext(ctx context.Context, key, token string) (started, flush bool, err error) {
	turnID := token
	turnCtx := ctx
	started, err = s.store.StartTurn(ctx, key, turnID, s.maxInput, s.maxInputBytes, func(ctx context.Context, t sessionstore.Turn) error {
		if err := s.holdGoal(t); err != nil {
			return err
		}
		flush = false
		if len(t.Inputs) == 1 {
			_, flush = sessionstore.FlushOf(t.Inputs[0].Event)
		}
		ctx, span := inputTrace(ctx, t.Inputs)
		defer span.End()
		turnCtx = ctx
		if t.More {
			// Messages stay queued behind this turn: its completion
			// must start them.
			if err := s.locker.MarkWaiting(ctx, key); err != nil {
				return err
			}
		}
		return s.publishTurn(ctx, key, token, turnID, t)
	})
	if errors.Is(err, sessionstore.ErrTurnRunning) {
		// Redis lost the running turn's lock (the lease in Postgres
		// says it runs): the messages wait for it as behind its lock,
		// which is marked for them before it is let go, so that the
		// turn's completion starts them (its worker finds the mark, or
		// finds its lock gone: either tells the router to look).
		s.log.WarnContext(ctx, "session lock free while its turn still runs (Redis lost it?); the messages wait for the turn", "session_key", key)
		turnsWaitedForLease.Inc()
		if err := s.locker.MarkWaiting(ctx, key); err != nil {
			s.log.WarnContext(ctx, "mark the session's waiting messages; the sweep starts them", "session_key", key, "err", err)
		}
		s.releaseUnused(ctx, key, token)
		// The turn may have ended while the lock was held here: its
		// completion's start then met it and only marked it, for a
		// holder that lets go without looking (the turn's end is
		// recorded before its completion goes out). Started here, or
		// the messages waited for the sweep. Still running: its end
		// finds the mark or its lock gone, and its completion starts
		// them.
		running, err := s.store.TurnRunning(ctx, key)
		if err != nil {
			s.log.WarnContext(ctx, "read the running turn's lease again; the sweep starts the messages if it has ended", "session_key", key, "err", err)
			return false, false, nil
		}
		if running {
			return false, false, nil
		}
		started, err := s.tryStart(ctx, key)
		return started, false, err
	}
	if err != nil || !started {
		s.releaseUnused(ctx, key, token)
		if errors.Is(err, errGoalHeld) {
			// While paused a goal does not go on by itself (pause.go).
			return false, false, s.pauseGoal(ctx, key)
		}
		return false, false, err
	}
	s.turnRequested(turnCtx, key, turnID)
	return true, flush, nil
}

const tracerName = "github.com/switchboard-chat/switchboard/services/router"

// inputTrace is the context to publish a turn of inputs under. A message
// queued behind a running turn is started by that turn's completion (or
// by the sweep), whose trace is another message's; the turn continues
// the trace its newest input was queued under instead (the input it
// answers: one trace per message, from its gateway request to its
// send), in a span linked to what started it and to the other inputs'
// traces. Inputs queued in ctx's own trace (queued and started by the
// same inbound message) or before migration 00108 keep ctx; the span
// returned then is a no-op (ending it must not end ctx's).
func inputTrace(ctx context.Context, inputs []sessionstore.Queued) (context.Context, trace.Span) {
	cur := trace.SpanFromContext(ctx)
	if len(inputs) == 0 {
		return ctx, trace.SpanFromContext(context.Background())
	}
	newest := remoteSpan(inputs[len(inputs)-1].TraceParent)
	if !newest.IsValid() || newest.TraceID() == cur.SpanContext().TraceID() {
		return ctx, trace.SpanFromContext(context.Background())
	}
	var links []trace.Link
	if cur.SpanContext().IsValid() {
		links = append(links, trace.Link{SpanContext: cur.SpanContext()})
	}
	for _, q := range inputs[:len(inputs)-1] {
		if sc := remoteSpan(q.TraceParent); sc.IsValid() && sc.TraceID() != newest.TraceID() {
			links = append(links, trace.Link{SpanContext: sc})
		}
	}
	return otel.Tracer(tracerName).Start(trace.ContextWithRemoteSpanContext(ctx, newest), "router start queued turn",
		trace.WithLinks(links...), trace.WithAttributes(attribute.Int("messaging.batch.message_count", len(inputs))))
}

// remoteSpan parses a W3C traceparent ("" or malformed: invalid).
func remoteSpan(traceparent string) trace.SpanContext {
	if traceparent == "" {
		return trace.SpanContext{}
	}
	ctx := propagation.TraceContext{}.Extract(context.Background(), propagation.MapCarrier{"traceparent": traceparent})
	return trace.SpanContextFromContext(ctx)
}

// publishTurn publishes the turn t of the session key to the workers,
// under the lock token.
func (s *Service) publishTurn(ctx context.Context, key, token, turnID string, t sessionstore.Turn) error {
	req := &turnsv1.TurnRequested{
		TurnId:        turnID,
		SessionKey:    key,
		SessionId:     t.Session.ID,
		Generation:    t.Generation,
		LockToken:     token,
		LockTtlMs:     s.cfg.LockTTL.Milliseconds(),
		GrantTtlMs:    s.cfg.GrantTTL.Milliseconds(),
		Origin:        t.Session.Origin,
		ModelOverride: t.Session.ModelOverride,
		Profile:       t.Session.Profile,
		RequestedAt:   timestamppb.New(s.now()),
		// /reasoning's choices; an effort an operator's downgrade left
		// unknown goes as the default.
		ShowReasoning: t.Session.ShowReasoning,
		YoloDisabled:  !s.cfg.YoloCommand,
		// The worker judges the turn against the conversation's goal.
		GoalActive: t.Session.GoalActive(),
	}
	if personality.ValidEffort(t.Session.ReasoningEffort) {
		req.ReasoningEffort = t.Session.ReasoningEffort
	}
	// /fast's choice; none: the worker's agent.service_tier.
	if tier := t.Session.ServiceTier; tier == llm.TierFast || tier == llm.TierNormal {
		req.ServiceTier = tier
	}
	if name := t.Session.Personality; name != "" {
		prompt, ok := personality.Lookup(s.cfg.Personalities, name)
		if !ok {
			// Removed from agent.personalities since it was chosen.
			s.log.WarnContext(ctx, "session personality not configured; none used", "session_key", key, "personality", name)
		}
		req.PersonalityPrompt = prompt
	}
	// Hermes's one-shot /reload-skills note (reload.go) rides on the
	// turn: the worker adds it to the model's copy of the first input,
	// and the inputs stay what the user sent.
	req.SkillsNote = t.SkillsNote
	for _, q := range t.Inputs {
		req.Inputs = append(req.Inputs, q.Event)
		if req.ReplyRoute == nil && q.Event.GetReplyRoute() != nil {
			req.ReplyRoute = q.Event.GetReplyRoute()
		}
	}
	if len(req.Inputs) == 1 && req.Inputs[0].GetTranscriptCommand() == moaCommand {
		// /moa's prompt: the mixture rides on the turn, the input is
		// the prompt alone.
		in := proto.CloneOf(req.Inputs[0])
		in.TranscriptCommand = ""
		req.Inputs[0], req.Moa = in, true
	}
	if len(req.Inputs) == 1 {
		if old, ok := sessionstore.FlushOf(req.Inputs[0]); ok {
			// The pre-reset memory flush (flush.go): on the conversation
			// that ended, with no input of the user's.
			req.MemoryFlush, req.SessionId, req.Inputs = true, old, nil
			if err := s.markFlush(ctx, key, turnID); err != nil {
				return err
			}
		}
	}
	if len(req.Inputs) == 1 {
		if arg, ok := strings.CutPrefix(req.Inputs[0].GetTranscriptCommand(), "compress "); ok {
			// /compress's argument rides on the turn, the command on
			// its input.
			c := command.ParseCompress(arg)
			in := proto.CloneOf(req.Inputs[0])
			in.TranscriptCommand = "compress"
			req.Inputs[0] = in
			req.CompressFocus, req.CompressKeepLast, req.CompressPreview = c.Focus, int32(c.Keep), c.Preview
		}
	}
	if len(t.Inputs) > 0 {
		// The newest message's source is where the answer goes, and its
		// context limit (an API request's truncation "auto") what the
		// model is shown.
		newest := t.Inputs[len(t.Inputs)-1].Event
		req.Origin = newest.GetSource()
		req.ContextLimit = max(newest.GetContextLimit(), 0)
	}
	mode, err := s.chosenToolProgress(ctx, t.Session.Profile, req.Origin.GetPlatform())
	if err != nil {
		return err
	}
	req.ToolProgressMode = mode
	sq, side, err := s.sideQuestion(ctx, key)
	if err != nil {
		return err
	}
	if id, ok := sessionkey.BackgroundTask(key, s.cfg.Profile); ok && !side {
		req.BackgroundTaskId = id
	}
	req.SideQuestion = sq
	req.RuntimeFooter = s.footerFor(key, req.Origin.GetPlatform(), t.Session)
	req.VoiceMode = s.voiceFor(key, req.Origin.GetPlatform(), t.Session)
	if _, err := s.bus.Publish(ctx, s.topo.Subject(bus.SubjectTurnRequested), "turn:"+turnID, req); err != nil {
		return fmt.Errorf("publish turn: %w", err)
	}
	return nil
}

// releaseUnused releases a session lock taken for a turn that did not start.
func (s *Service) releaseUnused(ctx context.Context, key, token string) {
	if err := s.locker.Release(context.WithoutCancel(ctx), key, token); err != nil {
		s.log.Debug("release unused session lock", "session_key", key, "err", err)
	}
}

func (s *Service) turnRequested(ctx context.Context, key, turnID string) {
	turnsStarted.Inc()
	s.log.InfoContext(ctx, "turn requested", "session_key", key, "turn_id", turnID)
}

// control sends a control message to the worker running the session's
// turn turnID, or whichever turn runs for it when turnID is empty.
func (s *Service) control(ctx context.Context, m *msgCtx, action turnsv1.ControlAction, text, turnID string) error {
	msg := &turnsv1.TurnControlRequested{SessionKey: m.key, TurnId: turnID, Action: action, Text: text, EventId: m.dedupeID}
	if err := s.bus.PublishCore(ctx, s.topo.ControlSubject(m.key), msg); err != nil {
		return fmt.Errorf("send control: %w", err)
	}
	return nil
}

// heldBy is the id of the turn whose grant the lock value owner holds ("",
// when it is no grant of this release): a grant token is its turn's id.
func heldBy(owner string) string {
	grant := redisx.GrantOf(owner)
	if _, ok := redisx.GrantTime(grant); !ok {
		return ""
	}
	return grant
}

// leaseHolderID is the holder part of leaseHolder's value.
const leaseHolderID = sessionstore.LeaseHolderID

// leaseHolder stands for the session lock's value while Redis has lost
// the lock of the turn turnID, which still runs: it holds its lease in
// Postgres (migration 00148, sessionstore.RunningTurn). It is a claim of
// the turn's grant, as its worker's is, by a holder nobody knows the id
// of until the worker claims the lock again. What decides about a busy
// session by the lock's value (route, command) then meets the turn as
// behind its lock: heldBy names it (an interruption's control), its
// grant says when it began (the busy acknowledgement), and steering and
// approvals go to it (requestControl addresses the session's running
// turn, whichever worker runs it), and steering it took is the turn's
// whichever of its holders the lock names (sessionstore.Queued.IsSteeringOf).
func leaseHolder(turnID string) string { return sessionstore.LeaseHolder(turnID) }

// holderOrLease is owner, the session lock's value, or, when the lock is
// free, leaseHolder of the turn that holds the session's lease, if one
// does ("" when none): one Postgres read, for a free lock only.
func (s *Service) holderOrLease(ctx context.Context, key, owner string) (string, error) {
	if owner != "" {
		return owner, nil
	}
	turn, err := s.store.RunningTurn(ctx, key)
	if err != nil || turn == "" {
		return "", err
	}
	return leaseHolder(turn), nil
}

// controlV2 asks a worker for replies of bus.ControlVersion.
var controlV2 = nats.Header{bus.HeaderControl: []string{bus.ControlVersion}}

// requestTimeout bounds the wait for a running turn to take a control
// request.
const requestTimeout = 2 * time.Second

// request hands a control (steering text, an approval's answer) to the
// session's running turn and reports whether a turn took it. A worker
// answers only for a turn that will use it: steering while the turn will
// still read it (not once its answer is decided), an answer while the
// turn waits for one. Steering nobody took within requestTimeout must be
// queued by the caller.
func (s *Service) request(ctx context.Context, m *msgCtx, action turnsv1.ControlAction, text string) (bool, error) {
	req := &turnsv1.TurnControlRequested{SessionKey: m.key, Action: action, Text: text, EventId: m.dedupeID}
	if action == controlApprove || action == controlDeny {
		req.ToolCallId = m.ev.GetButtonPress().GetToolCallId() // a pressed button's call
	}
	took, _, err := s.requestControl(ctx, req)
	return took, err
}

// steer asks the session's running turn, whose lock holds owner, to take
// m's text, which route queued (st: the store it holds the session's
// turn starts with): a worker of this release removes the
// queued message when its turn gives the text to the model, and leaves
// it queued otherwise (the next turn then answers it); until then the
// message is marked as that turn's steering, which the queue's counts
// leave out (sessionstore.Store.Waiting). A turn of an older release's
// worker takes the text without ever removing the message, so for one
// the message is removed here, as steering was before (lost when that
// turn does not give it to the model).
//
// A request that fails (errSteerFailed) leaves the message queued for the
// next turn, as Hermes falls back to its queue when the running agent's
// steer() raises: the caller answers it as queued, not with the error, so
// that its user is told before the next turn answers it.
func (s *Service) steer(ctx context.Context, st *sessionstore.Store, m *msgCtx, owner string) (bool, error) {
	req := &turnsv1.TurnControlRequested{SessionKey: m.key, Action: controlSteer, Text: m.ev.GetText(), EventId: m.dedupeID,
		QueuedEventId: m.ev.GetEventId()}
	took, hdr, err := s.requestControl(ctx, req)
	if err != nil && ctx.Err() == nil {
		s.log.WarnContext(ctx, "steering request failed; the message waits for the next turn", "session_key", m.key, "err", err)
		return false, fmt.Errorf("%w: %w", errSteerFailed, err)
	}
	if err != nil || !took {
		return took, err
	}
	if hdr.Get(bus.HeaderSteerQueue) != "" {
		// The mark only keeps the text out of the waiting counts: the
		// turn has taken it, so a failed mark must not fail (and, by a
		// redelivery, repeat) the steering.
		if err := st.MarkSteering(ctx, m.key, m.ev.GetEventId(), owner); err != nil {
			s.log.WarnContext(ctx, "steering taken but not marked: the queue's counts include it", "session_key", m.key, "err", err)
		}
		return true, nil
	}
	if err := st.Unqueue(ctx, m.key, m.ev.GetEventId()); err != nil {
		return true, err
	}
	return true, nil
}

// errSteerFailed: a steering request that could not be sent or whose
// answer could not be read (Service.steer).
var errSteerFailed = errors.New("steering request failed")

// requestControl sends req to the session's running turn and reports
// whether a turn took it, with the headers of the answer.
func (s *Service) requestControl(ctx context.Context, req *turnsv1.TurnControlRequested) (bool, nats.Header, error) {
	action := req.GetAction()
	rctx, cancel := context.WithTimeout(ctx, requestTimeout)
	defer cancel()
	// A worker that speaks control replies of version 2 (it says so in its
	// answer) answers at once: empty when its turn took the request,
	// "declined" when not. An older worker answers only when its turn took
	// it, and took every approval's answer, waited for or not: from one,
	// only steering counts as taken. No answer in time is a "no".
	var declined wrapperspb.BoolValue
	hdr, err := s.bus.RequestHeaders(rctx, s.topo.ControlSubject(req.GetSessionKey()), controlV2, req, &declined)
	switch {
	case err == nil && hdr.Get(bus.HeaderControl) == bus.ControlVersion:
		return !declined.GetValue(), hdr, nil
	case err == nil:
		return action == controlSteer, hdr, nil
	case errors.Is(err, nats.ErrNoResponders), errors.Is(err, context.DeadlineExceeded), errors.Is(err, nats.ErrTimeout):
		if ctx.Err() != nil {
			return false, nil, ctx.Err()
		}
		return false, nil, nil
	}
	return false, nil, fmt.Errorf("send control %s: %w", action, err)
}

// forceUnlock stops the running turn, in the transaction st of a command
// that fences it off (/stop, /new: the session's row is locked until it
// commits, and its generation moved on to gen), and returns the lock's
// owner and what frees the session for after the commit (nil when
// nothing is to be freed). The stopped worker's later writes are fenced
// by the generation. A running memory flush (flush.go) is no task of the
// user's and is left to end (its owner is not reported): Hermes runs it
// beside the chat, where /stop finds no agent of the session to stop and
// a second /new starts another flush without ending the first.
//
// The lock is freed only after the commit, as the admin API's reset
// frees it: freed before, a message arriving meanwhile could be granted
// it and start a turn while the stopped one still ran as the session's
// (and a commit that failed left the stopped turn's session unlocked).
// And only the lock of lastTurn, the session's last turn read under the
// row's lock: another grant is a router's for a message whose start
// waits for the commit, a turn of what follows the command, which must
// keep its lock (freed, it would run unlocked beside the next turn).
//
// A free lock may be one Redis lost while the turn still runs: the
// turn's lease (migration 00148), read in st after the bump
// (sessionstore.FencedTurn), stands in for it (leaseHolder), so the
// turn gets its stop and the command answers as for a running task.
func (s *Service) forceUnlock(ctx context.Context, m *msgCtx, st *sessionstore.Store, gen int64, lastTurn string) (owner string, unlock func(context.Context), err error) {
	owner, err = s.locker.Owner(ctx, m.key)
	if err != nil {
		return "", nil, err
	}
	stopped := "" // the turn the stop names ("": whichever runs)
	if owner == "" {
		turn, err := st.FencedTurn(ctx, m.key, gen-1)
		if err != nil || turn == "" {
			return "", nil, err
		}
		owner, stopped = leaseHolder(turn), turn
	}
	if s.flushRunning(ctx, m.key, owner) {
		// The messages waiting for it were dropped (both callers drop
		// the queue): their chats stop showing typing now.
		s.flushTypingDropped(ctx, m, heldBy(owner))
		return "", nil, nil
	}
	if err := s.control(ctx, m, controlStop, "", stopped); err != nil {
		return owner, nil, err
	}
	if lastTurn == "" || redisx.GrantOf(owner) != lastTurn {
		return owner, nil, nil
	}
	return owner, func(ctx context.Context) {
		ctx = context.WithoutCancel(ctx)
		// Compare-and-delete with the token we read: a newer owner is
		// kept. The lease's stand-in holds no lock: nothing to delete.
		err := redisx.ErrNotOwner
		if stopped == "" {
			err = s.locker.Release(ctx, m.key, owner)
		}
		if errors.Is(err, redisx.ErrNotOwner) {
			// A worker claimed the stopped turn's grant after we read it:
			// the turn was waiting for one, and that attempt subscribed
			// to its controls after the stop went out and runs on,
			// holding the session, until its first write finds the
			// generation moved on; or its worker claimed back the lock
			// Redis lost. Every holder of that grant is an attempt of the
			// stopped turn, which the commit fenced off: it lets go of
			// the lock too (its renewal then finds the session moved on
			// and stops it). Another grant's holder is kept.
			var cur string
			if cur, err = s.locker.Owner(ctx, m.key); err == nil && cur != "" && cur != owner && redisx.GrantOf(cur) == lastTurn {
				err = s.locker.Release(ctx, m.key, cur)
			}
		}
		if err != nil {
			s.log.Debug("force unlock", "session_key", m.key, "err", err)
		}
	}, nil
}

// target is where a notice about m goes: back to the chat it came from.
func target(ev *eventsv1.MessageReceived) *deliveryv1.Target {
	src := sourceOf(ev)
	return &deliveryv1.Target{
		Platform:         src.GetPlatform(),
		Account:          src.GetAccount(),
		ChatId:           src.GetChatId(),
		ThreadId:         sessionkey.ReplyThread(src),
		ReplyToMessageId: ev.GetMessageId(),
	}
}

// notice publishes a system message to the user on the session's reply
// subject. Its id is notice:<platform>:<account>:<event_id>:<n>, so a
// redelivered inbound event sends it once.
func (s *Service) notice(ctx context.Context, m *msgCtx, gen int64, text, kind string) error {
	return s.publishNotice(ctx, m, gen, text, kind, "")
}

// publishNotice publishes a notice; replaces names the platform message
// whose text it replaces ("": a message of its own).
func (s *Service) publishNotice(ctx context.Context, m *msgCtx, gen int64, text, kind, replaces string) error {
	return s.publishNoticeTo(ctx, m, gen, target(m.ev), text, kind, replaces)
}

// publishNoticeTo is publishNotice to target t.
func (s *Service) publishNoticeTo(ctx context.Context, m *msgCtx, gen int64, t *deliveryv1.Target, text, kind, replaces string) error {
	n := &repliesv1.Notice{Text: text, Kind: kind, ReplacesMessageId: replaces}
	if kind == "command" {
		// Command answers are written in Markdown, as Hermes's are.
		n.Format = deliveryv1.TextFormat_TEXT_FORMAT_MARKDOWN
	}
	return s.publishNoticeBody(ctx, m, gen, t, n)
}

// publishCommandNotice publishes n as a command's answer (kind command,
// in Markdown) to the message's chat: one with buttons (n.Picker) or
// replacing a message.
func (s *Service) publishCommandNotice(ctx context.Context, m *msgCtx, gen int64, n *repliesv1.Notice) error {
	n.Kind, n.Format = "command", deliveryv1.TextFormat_TEXT_FORMAT_MARKDOWN
	return s.publishNoticeBody(ctx, m, gen, target(m.ev), n)
}

// publishNoticeBody publishes the notice n about m to target t.
func (s *Service) publishNoticeBody(ctx context.Context, m *msgCtx, gen int64, t *deliveryv1.Target, n *repliesv1.Notice) error {
	ev := &repliesv1.ReplyEvent{Body: &repliesv1.ReplyEvent_Notice{Notice: n}}
	if id := m.ev.GetMessageId(); id != "" {
		ev.InputMessageIds = []string{id}
		if m.ev.GetNoReaction() {
			ev.NoReactionMessageIds = ev.InputMessageIds
		}
	}
	return s.publishNext(ctx, m, gen, t, ev, "notice")
}

// publishNext publishes ev, whose body is set, as the next reply about
// the inbound event m (a notice, a file) to target t: its turn id
// (notice:<event>), seq and bus message id (notice:<event>:<n>) come
// from the event and the replies sent about it so far, so a redelivery's
// replies are the first one's. A message without a session (pairing)
// goes on the sender's pairing key. what names the reply in the error.
func (s *Service) publishNext(ctx context.Context, m *msgCtx, gen int64, t *deliveryv1.Target, ev *repliesv1.ReplyEvent, what string) error {
	m.notices++
	key := m.key
	st := s.store
	if m.tx != nil {
		st = m.tx
	}
	if key == "" {
		key = "pairing:" + m.platform + ":" + m.src.GetUserId()
	} else if cur, err := st.Generation(ctx, key); err == nil && cur > gen {
		// Delivery drops events older than the newest generation it saw
		// for the session: a reply carries the generation of the moment.
		gen = cur
	}
	ev.TurnId, ev.SessionKey, ev.Generation, ev.Seq = "notice:"+m.dedupeID, key, gen, int64(m.notices)
	ev.Target, ev.CreatedAt = t, timestamppb.New(s.now())
	id := fmt.Sprintf("notice:%s:%d", m.dedupeID, m.notices)
	if _, err := s.bus.Publish(ctx, s.topo.ReplySubject(key), id, ev); err != nil {
		return fmt.Errorf("publish %s: %w", what, err)
	}
	return nil
}

// stoppedText explains an API request whose waiting message /stop dropped.
const stoppedText = "Stopped before it ran: /stop dropped this waiting message."

// newDroppedText explains an API request whose waiting message /new
// dropped.
const newDroppedText = "Stopped before it ran: /new dropped this waiting message."

// answerDropped ends the API requests whose waiting messages a /stop or
// a /new dropped: each waits for an answer of its own (ownsTurn: never
// merged into another message's turn), which no turn will give now. It
// gets an "interrupted" error with text at once instead of its reply
// timeout. The reply's ids come from the dropped message, so a
// republished one is taken once; a redelivered command finds the queue
// emptied (or its effect recorded) and adds nothing.
func (s *Service) answerDropped(ctx context.Context, m *msgCtx, gen int64, dropped []sessionstore.Queued, text string) error {
	for _, q := range dropped {
		ev := q.Event
		if !strings.EqualFold(ev.GetSource().GetPlatform(), "api") || ev.GetMessageId() == "" {
			continue
		}
		turnID := "stopped:" + ev.GetEventId()
		reply := &repliesv1.ReplyEvent{
			TurnId:          turnID,
			SessionKey:      m.key,
			Generation:      gen,
			Seq:             1,
			Target:          target(ev),
			CreatedAt:       timestamppb.New(s.now()),
			InputMessageIds: []string{ev.GetMessageId()},
			Body:            &repliesv1.ReplyEvent_Error{Error: &repliesv1.ReplyError{Code: "interrupted", Message: text}},
		}
		if _, err := s.bus.Publish(ctx, s.topo.ReplySubject(m.key), turnID, reply); err != nil {
			return fmt.Errorf("answer a dropped waiting message: %w", err)
		}
	}
	return nil
}
