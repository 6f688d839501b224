package router

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/redis/go-redis/v9"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/switchboard-chat/switchboard/pkg/bus"
	"github.com/switchboard-chat/switchboard/pkg/command"
	deliveryv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/delivery/v1"
	eventsv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/events/v1"
	repliesv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/replies/v1"
	"github.com/switchboard-chat/switchboard/pkg/pairing"
	"github.com/switchboard-chat/switchboard/pkg/platform"
	"github.com/switchboard-chat/switchboard/pkg/redisx"
	"github.com/switchboard-chat/switchboard/pkg/sessionkey"
	"github.com/switchboard-chat/switchboard/pkg/sessionstore"
	"github.com/switchboard-chat/switchboard/services/router/internal/auth"
)

// msgCtx is one inbound message being handled.
type msgCtx struct {
	ev       *eventsv1.MessageReceived
	src      *eventsv1.SessionSource
	platform string
	seq      int64
	dedupeID string // <platform>:<account>:<event_id>
	key      string
	decision auth.Decision
	notices  int
	// tx, when set, is the store of the transaction m's replies are
	// published in (the busy acknowledgement before its message's insert
	// commits, route): what they read goes through it, not a second
	// connection of the pool, which a transaction holding one may wait
	// for with every other connection held the same way.
	tx     *sessionstore.Store
	marked bool // the dedupe record is written
	// refusedBefore is whether the event carries the mark of a refusal
	// while a turn ran (refusedKey), read with the dedupe record for a
	// command; nil when not read.
	refusedBefore *bool
	// redelivered is a delivery of the bus after the first (an attempt
	// that failed, a router that stopped before acknowledging): Redis may
	// have lost what the first wrote since (it keeps nothing over a
	// restart), so its marks are not trusted to be complete.
	redelivered bool
	// interaction is a native command's or a button press's private
	// answer channel (a Discord interaction's token), taken off the event
	// on arrival: only a refusal of the command or the press uses it
	// (slashRefused, pressRefused), and it goes into no turn, queue or
	// transcript.
	interaction *eventsv1.Interaction
	// pressText is what the presser of a button is shown once the
	// router decided the press (answerPress): Hermes's callback answer
	// on Telegram ("This approval has already been resolved."); "" for
	// nothing. pressRefused: the press's refusal was published, which
	// answers it (its text is pressText too, kept for the gateway's
	// replicas but not sent to the holder).
	pressText    string
	pressRefused bool
	// holder is the session lock's value, read in the same round trip as
	// the dedupe record ("" when free); nil once used or never read.
	holder *string
	// token is the session lock this message took in that round trip
	// when it was free, for the idle session's fast path (startFree);
	// every other path gives it back first (giveBack). lockKey is the
	// session key it was taken under (m.key is only set once the sender
	// is authorized: a denied one's notice goes under the pairing key).
	token, lockKey string
	// early is the free start's first Postgres round trip, sent with
	// that Redis round trip when the message looked like it would start
	// a turn (beginEarly); turnID is the turn it would start, and the
	// token of the lock the first round trip takes for it. Only
	// startFree uses it: every other path drops it (dropEarly) before it
	// touches the session in Postgres.
	early  chan *sessionstore.FreeStart
	turnID string
	// cmd is the message's command, parsed once its sender is allowed
	// (isCmd: it is one).
	cmd   command.Command
	isCmd bool
	// skills are the commands of the skills the message invokes (its
	// text is their invocation; skills.go), none for any other message;
	// bundle is the command of the skill bundle it invokes, if any.
	skills []string
	bundle string
	// skillAnswer answers a skill command that cannot run as typed (a
	// bundle with no skill running here, a stack holding a skill
	// disabled here, too many bytes); "" for any other.
	skillAnswer string
	// hold: the message looks like one part of what the user sent at
	// once (holdFor); a free session waits this long for the rest.
	hold time.Duration
	// home is its conversation's home notice claim, read with the
	// dedupe record when the message may want the notice (wantsHome);
	// sessionID is the conversation it arrived in (home.go).
	home      *string
	sessionID string
	// rootKey is a Telegram DM's session key without a thread and place
	// where the message is in topic mode (topic.go).
	rootKey string
	place   topicPlace
}

// quietPlatforms get no notices about resets and busy sessions: their
// callers are programs waiting for one answer per request (or the cron
// scheduler, whose every run is a session of its own).
func quietPlatform(p string) bool { return p == "api" || p == "webhook" || p == "cron" }

func isDM(src *eventsv1.SessionSource) bool {
	t := src.GetChatType()
	return t == "" || t == "dm"
}

func (s *Service) dedupeKey(id string) string { return s.prefix + "inbound:" + id }

// refusedKey marks an event whose command was refused while a turn ran,
// written before the refusal's record (sessionstore.Once), so that only
// a redelivery of such an event reads that record (command).
func (s *Service) refusedKey(id string) string { return s.prefix + "refused:" + id }

// handleInbound is the INBOUND consumer's handler.
func (s *Service) handleInbound(ctx context.Context, ev *eventsv1.MessageReceived) error {
	dropNUL(ev.ProtoReflect())
	src := sourceOf(ev)
	if src.GetPlatform() == "" || ev.GetEventId() == "" {
		inbound.WithLabelValues("invalid").Inc()
		return bus.Permanent(errors.New("inbound event without platform or event id"))
	}
	if strings.EqualFold(src.GetPlatform(), sessionkey.BackgroundPlatform) {
		// No gateway has it: its keys are /background tasks' sessions'.
		inbound.WithLabelValues("invalid").Inc()
		return bus.Permanent(errors.New("inbound event of the reserved platform " + sessionkey.BackgroundPlatform))
	}
	// Only the router marks transcript commands, and only the API's
	// Responses branches copy a conversation (fork_from).
	ev.TranscriptCommand = ""
	if !strings.EqualFold(src.GetPlatform(), "api") {
		ev.ForkFrom = nil
	}
	m := &msgCtx{ev: ev, src: src, platform: strings.ToLower(src.GetPlatform()),
		dedupeID: src.GetPlatform() + ":" + src.GetAccount() + ":" + ev.GetEventId()}
	if ev.GetSlashCommand() || ev.GetButtonPress() != nil {
		m.interaction = ev.GetInteraction()
	}
	ev.Interaction = nil
	if d, ok := bus.DeliveryFrom(ctx); ok {
		m.seq = int64(d.StreamSeq)
		m.redelivered = d.Attempt > 1
	}
	// The sender is authorized first: between the early start (below) and
	// its use the handler must not need another Postgres connection (a
	// pairing lookup), or handlers holding early starts could take the
	// whole pool.
	dec, err := s.rules.Decide(ctx, ev, s.pairing.IsApproved)
	if err != nil {
		return fmt.Errorf("authorize: %w", err)
	}
	m.decision = dec
	if !ev.GetInternal() && command.ForOtherBot(ev.GetText(), m.platform, s.cfg.BotNames[m.platform]) {
		// "/cmd@other_bot": a command for another bot in the chat, not a
		// message for the agent (a documented drop, as in Hermes).
		inbound.WithLabelValues("other_bot").Inc()
		return nil
	}
	if dec.Allowed && !ev.GetInternal() {
		// Events Switchboard makes itself (webhooks, cron) carry outside
		// text, such as an issue's title: a leading "/" is not a command
		// of a chat user (an "/approve" would answer a tool's approval).
		m.cmd, m.isCmd = s.parseCommand(ev.GetText(), m.platform)
		// "/<skill> [instruction]" is a message from here on (skills.go).
		s.expandSkill(m)
	}
	m.hold = s.holdFor(m)
	key, root, place, err := s.keyFor(ctx, src)
	if err != nil {
		return fmt.Errorf("session key: %w", err)
	}
	m.rootKey, m.place = root, place
	s.beginEarly(ctx, m, key)
	defer s.dropEarly(context.WithoutCancel(ctx), m)
	// One round trip: the dedupe record, and the lock of the session the
	// message will most likely go to, taken when it is free (SET NX GET:
	// the holder otherwise). A message that does not start a turn at once
	// (a duplicate, a denied sender, a command, a busy session) gives the
	// lock back before anything else reads it.
	token := m.turnID // a turn's id is the grant it starts under (see orphaned)
	if token == "" {
		token = redisx.NewGrant(s.now())
	}
	pipe := s.rdb.Pipeline()
	exists := pipe.Exists(ctx, s.dedupeKey(m.dedupeID))
	lock := pipe.SetArgs(ctx, s.locker.Key(key), token, redis.SetArgs{Mode: "NX", Get: true, TTL: s.cfg.GrantTTL})
	var home *redis.StringCmd
	if s.wantsHome(m) {
		home = pipe.Get(ctx, s.homeKey(key))
	}
	var refused *redis.IntCmd
	if m.isCmd {
		refused = pipe.Exists(ctx, s.refusedKey(m.dedupeID))
	}
	_, _ = pipe.Exec(ctx) // each command's error is read below
	if refused != nil {
		// Unread on an error: command reads the record itself.
		if n, err := refused.Result(); err == nil {
			before := n > 0
			m.refusedBefore = &before
		}
	}
	if home != nil {
		switch v, err := home.Result(); {
		case err == nil, errors.Is(err, redis.Nil):
			m.home = &v
		default:
			s.log.Warn("read home notice claim; no notice for this message", "err", err)
		}
	}
	switch v, err := lock.Result(); {
	case errors.Is(err, redis.Nil):
		free := ""
		m.holder, m.token, m.lockKey = &free, token, key
	case err == nil:
		m.holder = &v
	default:
		// Redis before 7.0 refuses NX with GET: every message then takes
		// the queueing path, which reads the lock itself.
		s.log.Debug("take session lock with the dedupe read", "err", err)
	}
	defer s.giveBack(context.WithoutCancel(ctx), m, true)
	seen, err := exists.Result()
	if err != nil {
		return fmt.Errorf("read inbound dedupe record: %w", err)
	}
	if seen > 0 {
		s.giveBack(ctx, m, true)
		inbound.WithLabelValues("duplicate").Inc()
		s.log.Debug("duplicate inbound event ignored", "event", m.dedupeID)
		return nil
	}
	if err := s.handle(ctx, m, key); err != nil {
		return err
	}
	if !m.marked {
		if err := s.markHandled(ctx, m); err != nil {
			return err
		}
	}
	s.answerPress(ctx, m)
	return nil
}

// answerPress tells the gateway that holds the press m is (a Telegram
// callback query, a Teams invoke, a Discord component interaction: its
// interaction, Interaction.component) that the router has decided it,
// with the text the presser is shown (m.pressText, often none), so the
// gateway answers the platform now rather than when its hold ends (on
// Discord, acknowledged already, it shows the text in a followup). A
// refusal (refusePrivately) is the press's answer itself and goes
// through delivery; a press without an interaction (a Slack press, a
// Teams Action.Submit message) has no holder and is sent nothing. Best
// effort: a lost answer leaves the press to the hold's end.
//
// The answer, and a refusal sent through delivery, is also kept where
// any replica of the gateway reads it (platform.KeepPressAnswer), after
// the publish, which holders get at once: a replica that holds the press
// only after the publish (a Teams invoke's retry whose first replica
// died) or takes over the query of a holder that died (a Telegram
// replica watching it) finds the router's word there.
func (s *Service) answerPress(ctx context.Context, m *msgCtx) {
	ia := m.interaction
	if m.ev.GetButtonPress() == nil || !ia.GetComponent() || ia.GetId() == "" {
		return
	}
	t := target(m.ev)
	t.Interaction = ia
	req := &deliveryv1.SendRequested{IdempotencyKey: "press:" + m.dedupeID, Op: deliveryv1.SendOp_SEND_OP_SEND, Target: t, Text: m.pressText}
	if !m.pressRefused {
		if err := platform.PublishPressAnswer(s.bus, req); err != nil {
			s.log.WarnContext(ctx, "answer button press; its gateway answers when its hold ends", "event", m.dedupeID, "err", err)
		}
	}
	kctx, cancel := context.WithTimeout(ctx, pressKeepTimeout)
	defer cancel()
	if err := platform.KeepPressAnswer(kctx, s.bus, req); err != nil {
		s.log.WarnContext(ctx, "keep the answer to a button press for its gateway's other replicas", "event", m.dedupeID, "err", err)
	}
}

// pressKeepTimeout bounds the write of a press's answer to the bucket
// of answers (answerPress): best effort, the holders have the answer
// already, and the message's handling does not wait on a bucket that
// does not answer.
const pressKeepTimeout = 2 * time.Second

// giveBack releases the session lock m took with its first round trip and
// did not use. With restart it then starts the session's waiting messages,
// whose start (after a turn's completion) that lock may have turned away
// meanwhile; the queueing path, which starts them itself, passes false.
func (s *Service) giveBack(ctx context.Context, m *msgCtx, restart bool) {
	s.dropEarly(ctx, m)
	if m.token == "" {
		return
	}
	token := m.token
	m.token = ""
	s.releaseUnused(ctx, m.lockKey, token)
	if !restart {
		return
	}
	if _, err := s.tryStart(ctx, m.lockKey); err != nil {
		s.log.Warn("start waiting messages after giving a session lock back", "session_key", m.lockKey, "err", err)
	}
}

// markHandled records the event id so a replay later starts nothing;
// the home notice m wants goes out first.
func (s *Service) markHandled(ctx context.Context, m *msgCtx) error {
	if err := s.homeNotice(ctx, m); err != nil {
		return err
	}
	if err := s.rdb.Set(ctx, s.dedupeKey(m.dedupeID), "1", s.cfg.DedupeTTL).Err(); err != nil {
		return fmt.Errorf("write inbound dedupe record: %w", err)
	}
	m.marked = true
	return nil
}

// markHandledAndLock is markHandled and an attempt to take the session's
// lock with token (marking it for its holder when it is held, as
// startQueued does), in one round trip.
func (s *Service) markHandledAndLock(ctx context.Context, m *msgCtx, token string) (locked bool, err error) {
	if err := s.homeNotice(ctx, m); err != nil {
		return false, err
	}
	pipe := s.rdb.Pipeline()
	mark := pipe.Set(ctx, s.dedupeKey(m.dedupeID), "1", s.cfg.DedupeTTL)
	lock := s.locker.AcquireOrMarkIn(ctx, pipe, m.key, token, s.cfg.GrantTTL)
	if _, err := pipe.Exec(ctx); err != nil {
		return false, fmt.Errorf("write inbound dedupe record and take the session lock: %w", err)
	}
	if err := mark.Err(); err != nil {
		return false, fmt.Errorf("write inbound dedupe record: %w", err)
	}
	m.marked = true
	n, err := lock.Int()
	if err != nil {
		return false, fmt.Errorf("take the session lock: %w", err)
	}
	return n == 1, nil
}

// handle routes a new message by its sender's authorization (m.decision);
// key is its session key.
func (s *Service) handle(ctx context.Context, m *msgCtx, key string) error {
	dec := m.decision
	verdict := "deny"
	if dec.Allowed {
		verdict = "allow"
	}
	authDecisions.WithLabelValues(m.platform, verdict, string(dec.Reason)).Inc()
	s.log.InfoContext(ctx, "authorization decision", "decision", verdict, "reason", dec.Reason, "platform", m.platform,
		"user_id", m.src.GetUserId(), "chat_type", m.src.GetChatType(), "event", m.dedupeID)
	if !dec.Allowed {
		s.giveBack(ctx, m, true)
		inbound.WithLabelValues("denied").Inc()
		return s.unauthorized(ctx, m)
	}
	if m.ev.GetButtonPress() != nil && m.interaction.GetUnknownChoice() {
		// A press of a choice its gateway cannot read (a Teams card
		// action naming no approval choice it knows): Hermes answers
		// it after the sender's authorization, a stranger refused above
		// as for any press, anyone else told "Unknown action.", and
		// nothing else happens. Its text ("/start") is for routers that
		// do not know the mark.
		s.giveBack(ctx, m, true)
		inbound.WithLabelValues("command").Inc()
		m.pressText = unknownChoiceAnswer
		return nil
	}

	m.key = key
	for _, c := range m.skills {
		skillInvocations.WithLabelValues(c).Inc()
	}
	if m.bundle != "" {
		skillBundleInvocations.WithLabelValues(m.bundle).Inc()
	}
	if m.place == topicLobby && !m.isCmd && !m.ev.GetInternal() {
		// The main view of a chat in topic mode takes commands only.
		s.giveBack(ctx, m, true)
		inbound.WithLabelValues("lobby").Inc()
		return s.lobby(ctx, m)
	}
	if m.isCmd {
		// The lock taken for nothing may have turned away the start of
		// the messages queued behind a turn that just completed: start
		// them, ahead of the command, as their order says.
		s.giveBack(ctx, m, true)
		inbound.WithLabelValues("command").Inc()
		m.holder = nil // commands change the lock themselves: they read it fresh
		return s.command(ctx, m, m.cmd)
	}
	if st := s.pausedFor(m); st != nil && m.platform != "cron" {
		// The emergency stop (pause.go): new work is answered, not
		// queued, as Hermes's paused_reply. A cron run fired before the
		// pause is work in flight: it runs.
		s.giveBack(ctx, m, true)
		inbound.WithLabelValues("paused").Inc()
		return s.notice(ctx, m, 0, pausedText(st), "command")
	}
	if m.token != "" {
		return s.routeToFree(ctx, m)
	}
	s.dropEarly(ctx, m) // the session is busy: the queueing path locks it
	sess, err := s.session(ctx, m)
	if err != nil {
		return err
	}
	m.sessionID = sess.ID
	return s.route(ctx, m, sess, routeOpts{})
}

// routeToFree routes a message to a session whose lock it took with the
// dedupe read — the common case. It starts the message at once
// (startFree); when the session cannot skip the queue, it gives the lock
// back and, with no busy session to decide about, records the arrival and
// the enqueue in one durable transaction, then applies the reset policy
// and takes the lock for the turn, as route does; a session whose turn
// holds its lease though its lock was free is busy, and the message goes
// the busy way (route). A part of what the user sent at once is queued
// the same way and held there for the rest (holdForRest).
func (s *Service) routeToFree(ctx context.Context, m *msgCtx) error {
	m.holder = nil
	if m.hold == 0 && !branches(m) {
		started, err := s.startFree(ctx, m)
		if started || err != nil {
			return err
		}
		// Refused: the session may be busy though its lock was free,
		// when Redis lost the lock of a turn that still runs (its lease
		// refused the start). The message then meets that turn as it
		// would behind its lock: its busy mode interrupts it, steers
		// into it or queues it with the acknowledgement (route). Read
		// only after a refusal: a message to an idle session starts.
		turn, err := s.store.RunningTurn(ctx, m.key)
		if err != nil {
			return err
		}
		if turn != "" {
			s.giveBack(ctx, m, false)
			sess, err := s.session(ctx, m)
			if err != nil {
				return err
			}
			m.sessionID = sess.ID
			owner := leaseHolder(turn)
			m.holder = &owner
			return s.route(ctx, m, sess, routeOpts{})
		}
	}
	// The queueing path takes the lock again if it is still free.
	s.giveBack(ctx, m, false)
	// A redelivered message that is queued already is started all the same.
	arr, _, err := s.store.ArriveAndEnqueue(ctx, m.key, s.cfg.Profile, m.src, m.seq, ownsTurn(m), m.ev, s.cfg.QueueCap)
	m.sessionID = arr.Session.ID
	if errors.Is(err, sessionstore.ErrQueueFull) {
		return s.queueFull(ctx, m, arr.Session.Generation)
	}
	if errors.Is(err, sessionstore.ErrStarted) {
		return s.startedAlready(m)
	}
	if err != nil {
		return err
	}
	s.opened(ctx, m, arr.Created)
	if !arr.Created {
		// The message is queued already: a reset keeps it for the new
		// conversation.
		sess, err := s.resetIfDue(ctx, m, arr.Session, arr.Prev)
		if err != nil {
			return err
		}
		m.sessionID = sess.ID
	}
	if m.hold > 0 {
		return s.holdForRest(ctx, m)
	}
	inbound.WithLabelValues("queued").Inc()
	return s.lockAndStart(ctx, m)
}

// startFree is the idle session's fast path: under the lock m took with
// its first round trip, record the arrival and start the message as its
// own turn in one transaction that commits after the turn is published
// (sessionstore.BeginFree, FreeStart.Start), and only then record the message as handled.
// The message is never queued, and the turn reaches a worker before the
// commit's WAL flush is waited for. It reports false, still holding the
// lock, when the session must take the queueing path: messages wait, a
// reset is due, or the message was started already.
func (s *Service) startFree(ctx context.Context, m *msgCtx) (bool, error) {
	token := m.token
	pol := s.cfg.SessionReset.policy(m.platform, m.src.GetChatType())
	proceed := func(a sessionstore.Arrival) bool {
		_, due := pol.due(a.Prev, s.now())
		return a.Created || !due
	}
	// The turn's id is its grant token: the early start was sent with it
	// (handleInbound takes the lock with m.turnID).
	start := s.takeEarly(m)
	if start == nil {
		start = s.store.BeginFree(ctx, m.key, s.cfg.Profile, m.src, m.ev, token)
	}
	turnID := token
	a, started, err := start.Start(ctx, proceed, func(ctx context.Context, t sessionstore.Turn) error {
		// The home notice the message wants goes before its turn: the
		// worker's answer, on the same reply partition, then follows it
		// (after the turn, it came behind an answer that was quick).
		m.sessionID = t.Session.ID
		if err := s.homeNoticeAt(ctx, m, t.Generation, t.Tx); err != nil {
			return err
		}
		return s.publishTurn(ctx, m.key, token, turnID, t)
	})
	if err != nil {
		return false, fmt.Errorf("start turn: %w", err)
	}
	if !started {
		return false, nil
	}
	s.opened(ctx, m, a.Created)
	m.sessionID = a.Session.ID
	m.token = "" // the turn holds it now
	inbound.WithLabelValues("started").Inc()
	s.turnRequested(ctx, m.key, turnID)
	// A crash before this record leaves a redelivery that the store
	// recognises as started (ErrStarted).
	return true, s.markHandled(ctx, m)
}

// beginEarly sends the free start's first Postgres round trip
// (sessionstore.BeginFree) for key, in parallel with the Redis round trip
// that tells whether the session is free and the message new, when the
// message will start a turn if it is: its sender is allowed and it is not
// a command. It saves that Redis round trip on the path of a message to
// an idle session. A message that does not start at once costs a
// rolled-back transaction, and holds the session's row and queue (and its
// fenced writes) for about one Redis round trip.
func (s *Service) beginEarly(ctx context.Context, m *msgCtx, key string) {
	if !m.decision.Allowed || m.isCmd || m.hold > 0 || branches(m) {
		return
	}
	m.turnID = redisx.NewGrant(s.now())
	early := make(chan *sessionstore.FreeStart, 1)
	m.early = early
	src, ev, turnID := m.src, m.ev, m.turnID
	go func() { early <- s.store.BeginFree(ctx, key, s.cfg.Profile, src, ev, turnID) }()
}

// takeEarly waits for the early start, if one was sent, and hands it over.
func (s *Service) takeEarly(m *msgCtx) *sessionstore.FreeStart {
	if m.early == nil {
		return nil
	}
	f := <-m.early
	m.early = nil
	return f
}

// dropEarly rolls back the early start, if one was sent: before anything
// else locks the session in Postgres.
func (s *Service) dropEarly(ctx context.Context, m *msgCtx) {
	s.takeEarly(m).Drop(ctx)
}

// startedAlready ends the handling of a message the store reports started
// already: a redelivery after a crash between its turn's start and the
// record that it was handled.
func (s *Service) startedAlready(m *msgCtx) error {
	inbound.WithLabelValues("duplicate").Inc()
	s.log.Debug("redelivered inbound event started already", "event", m.dedupeID)
	return nil
}

// unauthorized answers a denied sender: a pairing code in a DM unless
// the platform's unauthorized DM behaviour is to ignore, silence in a
// group (a documented drop). A native command in a group, and a button
// press the platform lets the router answer privately, get Hermes's
// refusal instead.
func (s *Service) unauthorized(ctx context.Context, m *msgCtx) error {
	person := m.src.GetUserId() != "" && !m.src.GetIsBot() && !m.ev.GetInternal()
	if person && m.ev.GetButtonPress() != nil && m.interaction != nil {
		return s.pressRefused(ctx, m)
	}
	if !isDM(m.src) && m.ev.GetSlashCommand() && person {
		return s.slashRefused(ctx, m)
	}
	if !isDM(m.src) || m.src.GetUserId() == "" || m.src.GetIsBot() || quietPlatform(m.platform) || m.ev.GetInternal() {
		return nil
	}
	if s.rules.UnauthorizedDM(m.platform) == auth.DMIgnore {
		// An allowlist restricts the platform (or the operator said so):
		// as Hermes, a stranger gets no answer, not even a pairing code.
		pairingCodes.WithLabelValues("ignored").Inc()
		return nil
	}
	err := s.pairing.IssueSent(ctx, m.platform, m.src.GetUserId(), m.src.GetUserName(), m.dedupeID, func(ctx context.Context, code string, id int64) error {
		text := fmt.Sprintf("Hi! I don't know you yet. Your pairing code is %s\n\nAsk the bot owner to run:\nswitchboard pairing approve %s %s\n\nThe code is valid for one hour.", code, m.platform, code)
		return s.pairingNotice(ctx, m, id, text)
	})
	var text string
	switch {
	case err == nil:
		pairingCodes.WithLabelValues("issued").Inc()
		return nil
	case errors.Is(err, pairing.ErrIssuedAlready):
		// A redelivery after a crash between the code's commit and this
		// message's acknowledgement: the notice with the code is on the
		// bus already (under its own ids), so nothing new is published,
		// least of all "a code was sent to you recently".
		s.log.Debug("redelivered inbound event issued its pairing code already", "event", m.dedupeID)
		return nil
	case errors.Is(err, pairing.ErrRateLimited), errors.Is(err, pairing.ErrTooManyCodes), errors.Is(err, pairing.ErrLockedOut):
		reason := map[bool]string{true: "rate_limited"}[errors.Is(err, pairing.ErrRateLimited)]
		if reason == "" {
			reason = "refused"
		}
		pairingCodes.WithLabelValues(reason).Inc()
		// Say it once per rate window, not on every message.
		ok, rerr := s.rdb.SetNX(ctx, s.prefix+"pairnotice:"+m.platform+":"+m.src.GetUserId(), "1", pairing.UserRateWindow).Result()
		if rerr != nil || !ok {
			return nil
		}
		if errors.Is(err, pairing.ErrRateLimited) {
			text = "A pairing code was sent to you recently. Ask the bot owner to approve it, or try again later."
		} else {
			text = "Too many pairing requests right now. Please try again later."
		}
	default:
		// The code was not kept (pairing.IssueSent): the redelivery
		// of this message issues a new one, not a rate limit.
		return fmt.Errorf("issue pairing code: %w", err)
	}
	return s.notice(ctx, m, 0, text, "pairing")
}

// slashRefusalWindow is how often a sender not allowed hears that a
// native command of theirs in a group, or a press of a button, was
// refused.
const slashRefusalWindow = time.Minute

// slashRefused answers a native command (a Discord slash command) in a
// group from a sender not allowed with Hermes's refusal: they picked it
// from the bot's own menu, so silence would look like a broken bot.
// The refusal carries the command's interaction (Target.interaction),
// so the gateway shows it to the sender only, as Hermes's ephemeral
// answer is (or in the channel when it no longer can). Once a minute
// per sender, so a stranger cannot make the bot flood a channel; the
// rest are dropped, as typed messages are.
func (s *Service) slashRefused(ctx context.Context, m *msgCtx) error {
	return s.refusePrivately(ctx, m, "You're not authorized to use this command.")
}

// Hermes's answers to a press from a user the gateway does not
// authorize, an approval prompt's and any other button's, by platform:
// his Discord views' (their interaction_check; the model picker's and
// the update prompt's say the short one) and his Telegram callback
// handler's (the callback query's answer; its slash-confirm and clarify
// prompts say the other one, its model picker checks no one) and his
// Teams card action's (the invoke's answer; Teams has approval buttons
// alone). Hermes has no /memory list buttons: theirs is the other
// buttons' text. Hermes's Slack adapter ignores such a press without a
// word, and so does Switchboard's (its presses carry no interaction).
var pressRefusals = map[string][2]string{
	"discord":  {"You're not authorized to approve commands~", "You're not authorized~"},
	"telegram": {"⛔ You are not authorized to approve commands.", "⛔ You are not authorized to answer this prompt."},
	"teams":    {"⛔ Not authorized.", "⛔ Not authorized."},
}

// pressRefused answers the press of a button (an approval prompt's, a
// picker's, a /memory list's) from a sender not allowed, in a DM or a
// group, with Hermes's refusal, shown to the presser only: the press
// carries its interaction, which the gateway answers privately (a
// Discord component's ephemeral followup, a Telegram callback query's
// answer), leaving the message with the buttons as it is. Nothing else
// happens: no session is touched, no turn runs, the picker or prompt
// stays. Through delivery once a minute per sender, a window shared
// with the refusal of a slash command (slashRefused); within it, with
// the answer to the press's holder (refusePrivately).
func (s *Service) pressRefused(ctx context.Context, m *msgCtx) error {
	if m.platform == "teams" && m.decision.Reason == auth.ReasonNoAllowlist {
		// Hermes's notice, to every presser, and his warning, which tells
		// the operator: logged once each teamsNoAllowlistLogEvery by this
		// replica (Hermes logs it for every press), so that a busy card
		// cannot flood the logs.
		if due, missed := s.teamsNoAllowlistLog.due(s.now(), teamsNoAllowlistLogEvery); due {
			s.log.WarnContext(ctx, "teams button press refused: no allowlist applies to teams; set TEAMS_ALLOWED_USERS (auth.allowed_users.teams) or TEAMS_ALLOW_ALL_USERS, or pair the user",
				"user_id", m.src.GetUserId(), "event", m.dedupeID, "refused_unlogged", missed, "logged_every", teamsNoAllowlistLogEvery)
		}
		return s.refusePrivately(ctx, m, teamsNoAllowlist)
	}
	texts, ok := pressRefusals[m.platform]
	if !ok {
		texts = pressRefusals["discord"]
	}
	text := texts[1]
	if c, ok := command.Parse(m.ev.GetText(), m.platform, s.cfg.BotNames[m.platform]); ok && (c.Name == "approve" || c.Name == "deny") {
		text = texts[0]
	}
	return s.refusePrivately(ctx, m, text)
}

// refusePrivately publishes text, the refusal of a sender not allowed,
// to the message's chat with its interaction on the target, so the
// gateway shows it to the sender only. Once a minute per sender
// (slashRefusalWindow): the rest are dropped, as typed messages are,
// except a press's, whose refusal goes with the answer to the press's
// holder instead (answerPress), as Hermes refuses every press: it
// costs no delivery, and only the presser sees it (a toast, an invoke's
// answer, an ephemeral followup), so a stranger pressing again floods
// no chat.
func (s *Service) refusePrivately(ctx context.Context, m *msgCtx, text string) error {
	key := s.prefix + "slashdeny:" + m.platform + ":" + m.src.GetUserId()
	ok, err := s.rdb.SetNX(ctx, key, "1", slashRefusalWindow).Result()
	if err != nil {
		return fmt.Errorf("refusal throttle: %w", err)
	}
	if m.ev.GetButtonPress() != nil {
		// The press's answer to its holder within the window, kept for
		// the gateway's other replicas in either case (answerPress).
		m.pressText = text
	}
	if !ok {
		return nil
	}
	t := target(m.ev)
	t.Interaction = m.interaction
	if err := s.publishNoticeTo(ctx, m, 0, t, text, "unauthorized", ""); err != nil {
		// The redelivery answers instead.
		_ = s.rdb.Del(context.WithoutCancel(ctx), key).Err()
		return err
	}
	m.pressRefused = true
	return nil
}

// pairingNotice publishes the notice carrying pending pairing code id,
// under the pairing key. Its ids name the code, not only the message
// (notice's "notice:<event>:<n>"): a publish that failed after all,
// or a commit that failed after it, leaves a notice with a code that was
// not kept, and the new code the redelivery issues must not be taken
// for its duplicate (by JetStream's dedupe window, or delivery's
// idempotency key, the turn id and seq).
func (s *Service) pairingNotice(ctx context.Context, m *msgCtx, id int64, text string) error {
	key := "pairing:" + m.platform + ":" + m.src.GetUserId()
	turnID := fmt.Sprintf("notice:%s:code%d", m.dedupeID, id)
	ev := &repliesv1.ReplyEvent{
		TurnId:     turnID,
		SessionKey: key,
		Seq:        1,
		Target:     target(m.ev),
		CreatedAt:  timestamppb.New(s.now()),
		Body:       &repliesv1.ReplyEvent_Notice{Notice: &repliesv1.Notice{Text: text, Kind: "pairing"}},
	}
	if mid := m.ev.GetMessageId(); mid != "" {
		ev.InputMessageIds = []string{mid}
		if m.ev.GetNoReaction() {
			ev.NoReactionMessageIds = ev.InputMessageIds
		}
	}
	if _, err := s.bus.Publish(ctx, s.topo.ReplySubject(key), turnID, ev); err != nil {
		return fmt.Errorf("publish pairing notice: %w", err)
	}
	return nil
}

// session resolves the message's session, recording its arrival, and
// applies the reset policy.
func (s *Service) session(ctx context.Context, m *msgCtx) (sessionstore.Session, error) {
	sess, created, prev, err := s.arrive(ctx, m)
	if err != nil || created {
		return sess, err
	}
	return s.resetIfDue(ctx, m, sess, prev)
}

// arrive resolves the message's session, recording its arrival, without
// the reset policy; prev is the session's last activity before m (see
// sessionstore.Arrive).
func (s *Service) arrive(ctx context.Context, m *msgCtx) (sess sessionstore.Session, created bool, prev time.Time, err error) {
	sess, created, prev, err = s.store.ArriveFork(ctx, m.key, s.cfg.Profile, m.src, m.ev.GetEventId(), m.ev.GetForkFrom())
	s.opened(ctx, m, created)
	return sess, created, prev, err
}

// branches reports a message that may open its session as a copy of
// another conversation (fork_from). It takes the queueing path, never
// the free start: a free start commits after its turn is published, and
// a worker reads the conversation (unfenced) as soon as it takes the
// turn, so it could miss the copy; the queueing path commits the copy
// with the arrival, before the turn is started.
func branches(m *msgCtx) bool { return m.ev.GetForkFrom().GetTurnId() != "" }

// opened logs a session that m's arrival created as a branch of another
// conversation (its fork_from): the store copied that conversation into
// it with the session, in the same transaction.
func (s *Service) opened(ctx context.Context, m *msgCtx, created bool) {
	if f := m.ev.GetForkFrom(); created && f.GetTurnId() != "" {
		s.log.InfoContext(ctx, "session opened as a branch", "session_key", m.key, "from_session_key", f.GetSessionKey(),
			"from_turn_id", f.GetTurnId())
	}
}

// resetIfDue resets the session when its reset policy says so (prev is
// its last activity before m) and no turn runs, keeping the waiting
// messages (nobody answered them yet: m, if it is queued, and parts held
// for the rest of a message) for the new conversation, and tells the
// user.
func (s *Service) resetIfDue(ctx context.Context, m *msgCtx, sess sessionstore.Session, prev time.Time) (sessionstore.Session, error) {
	pol := s.cfg.SessionReset.policy(m.platform, m.src.GetChatType())
	reason, due := pol.due(prev, s.now())
	if !due {
		return sess, nil
	}
	// A running turn is activity: never reset under it.
	if owner, err := s.lockHolder(ctx, m); err != nil || owner != "" {
		return sess, nil //nolint:nilerr // unknown: do not reset
	}
	// So is the last turn, up to its end (Hermes counts idle time from
	// the end of the last interaction): a user answering a long task's
	// reply soon after it continues the conversation. prev is only the
	// last message's arrival.
	end, spent, err := s.store.LastTurnEnd(ctx, m.key, sess.ID)
	if err != nil {
		return sess, err
	}
	if end.After(prev) {
		if reason, due = pol.due(end, s.now()); !due {
			return sess, nil
		}
	}
	sess, err = s.store.ResetKeepingQueue(ctx, m.key, reason, s.flushFor(m))
	if err != nil {
		return sess, fmt.Errorf("reset session: %w", err)
	}
	resets.WithLabelValues(reason).Inc()
	s.log.InfoContext(ctx, "session reset by policy", "session_key", m.key, "reason", reason)
	// As Hermes (reset_had_activity: total_tokens > 0), only a
	// conversation that used tokens is worth a word: one of commands
	// alone, or of turns stopped before any model call, lost nothing.
	if !quietPlatform(m.platform) && spent {
		if err := s.notice(ctx, m, sess.Generation, resetNotice(reason, pol), "reset"); err != nil {
			return sess, err
		}
	}
	return sess, nil
}

// busyMode is the mode for the message's chat.
func (s *Service) busyMode(m *msgCtx, sess sessionstore.Session) string {
	if mode, ok := s.cfg.ChatBusyModes[m.platform+":"+m.src.GetChatId()]; ok {
		return mode
	}
	if sess.BusyMode != "" {
		return sess.BusyMode
	}
	if mode, ok := s.cfg.PlatformBusyModes[m.platform]; ok {
		return mode
	}
	return s.cfg.BusyMode
}

type routeOpts struct {
	// ownTurn: never merge with other waiting messages (/queue, /retry).
	ownTurn bool
	// mode forces a busy mode (/queue → queue, /steer → steer).
	mode string
	// command is the command that routes the message (queue, steer):
	// while busy it is always answered, in its own words, instead of the
	// rate-limited busy acknowledgement.
	command string
	// steerFailed: the request to steer the running turn failed; the
	// message is queued for the next turn (route sets it).
	steerFailed bool
}

func onlyMedia(ev *eventsv1.MessageReceived) bool {
	return strings.TrimSpace(ev.GetText()) == "" && len(ev.GetAttachments()) > 0
}

// route queues the message in its session's FIFO and starts a turn when the
// session is free; while it is busy the busy mode decides what else
// happens.
func (s *Service) route(ctx context.Context, m *msgCtx, sess sessionstore.Session, o routeOpts) error {
	owner, err := s.lockHolder(ctx, m)
	if err != nil {
		return err
	}
	// A running memory flush (flush.go) is no task of the user's: the
	// message waits for it as for a free session's lock, unannounced, and
	// does not cut it short.
	busy := owner != "" && !s.flushRunning(ctx, m.key, owner)
	mode := o.mode
	if mode == "" {
		mode = s.busyMode(m, sess)
	}
	ownTurn := o.ownTurn || ownsTurn(m)

	// "yes" or "no" to a running turn's question answers it, as in Hermes,
	// instead of interrupting the turn that asked; only a turn waiting for
	// an approval takes it, and any other time it is a message.
	if busy && o.command == "" && !quietPlatform(m.platform) && redisx.GrantOf(owner) != owner {
		// Where /approve is reserved for admins, so is a plain "yes".
		if action, args, ok := approvalWord(m.ev.GetText()); ok && s.mayApprove(m) {
			// Once per event, as /approve: a redelivery must not answer a
			// call the turn asked about since. One no call took records
			// nothing: it goes on as a message.
			name := map[bool]string{true: "approve", false: "deny"}[action == controlApprove]
			err := s.once(ctx, m, name, func(ctx context.Context, _ *sessionstore.Store) (string, int64, error) {
				took, err := s.request(ctx, m, action, args)
				if err != nil {
					return "", 0, err
				}
				if !took {
					return "", 0, errNotTaken
				}
				return approvalReply(action, args), sess.Generation, nil
			})
			if err == nil {
				inbound.WithLabelValues("approval").Inc()
				return nil
			}
			if !errors.Is(err, errNotTaken) {
				return err
			}
		}
	}

	// A turn whose worker recorded its end is over for the user, whose
	// chat may show its answer already: the router has not taken its
	// completion yet (a router restarting after a crash, one behind),
	// which starts the next turn. A message now waits for it as for a
	// free session's lock taken meanwhile: nothing to interrupt or steer,
	// no "⚡ Interrupting current task" nor "⏳ Queued" for a task that
	// ended. /queue and /steer are answered as ever.
	if busy && o.command == "" && !ownTurn && redisx.GrantOf(owner) != owner {
		if turn := heldBy(owner); turn != "" {
			ended, err := s.store.TurnEnded(ctx, turn)
			if err != nil {
				return err
			}
			busy = !ended
		}
	}

	// Steering reaches a turn a worker has claimed (the lock holds its
	// own value, not the router's bare grant); text no running turn took
	// (none claimed yet, or its answer is decided) is queued instead. An
	// API message owns its turn, but an explicit /steer (the runs API's
	// POST /v1/runs/{id}/steer) is for the running one.
	steer := busy && mode == BusySteer && (!ownTurn || o.command == "steer") && !onlyMedia(m.ev) && redisx.GrantOf(owner) != owner

	// Steering is queued too, before the turn is asked to take it: the
	// turn removes it from the queue in the write that gives it to the
	// model, so text the turn never gives to the model (its model call
	// failed, a newer message interrupted it, its worker died) runs as
	// the session's next input, in its place in the queue, once.
	// Steering the running turn took is that turn's, not a waiting
	// message: it takes no room under the cap.
	//
	// A message the running turn does not take as steering is
	// acknowledged (busyAck, or a /queue's answer) before its insert
	// commits, and so before the turn is interrupted: delivery keeps the
	// order of the session's reply subject, and from the commit on the
	// running turn's completion may start the next turn with the
	// message, whose first reply must not reach the chat ahead of
	// "⏳ Queued" or "⚡ Interrupting". Steering is acknowledged by its
	// outcome, after. A message to a free session is queued as before, in
	// one round trip.
	action := "queued"
	interrupt := mode == BusyInterrupt && !ownTurn && !onlyMedia(m.ev)
	if interrupt && redisx.GrantOf(owner) != owner {
		action = "interrupted"
	}
	// Steering is queued before the turn is asked, so that the turn can
	// take it from the queue, and acknowledged by its outcome, after:
	// from its insert until then the session's turn starts are held
	// back, or the running turn's completion could start the next turn
	// with it, whose replies would come before "⏳ Queued" (the user told
	// "queued" after the message ran). What the steering path reads and
	// writes meanwhile goes through the hold's connection (st).
	// It is released before this message's own start (startQueued),
	// which would wait for it.
	st := s.store
	releaseStarts := func() {}
	if steer {
		held, release, err := s.store.HoldTurnStarts(ctx, m.key)
		if err != nil {
			return err
		}
		st, m.tx = held, held
		var once sync.Once
		releaseStarts = func() {
			once.Do(func() {
				m.tx = nil
				release()
			})
		}
		defer releaseStarts()
	}
	var ackFirst func(context.Context, *sessionstore.Store) error
	acked := false
	if busy && !steer {
		ackFirst = func(ctx context.Context, st *sessionstore.Store) error {
			m.tx = st
			defer func() { m.tx = nil }()
			if err := s.ack(ctx, st, m, sess, o, owner, action); err != nil {
				return err
			}
			acked = true
			return nil
		}
	}
	inserted, err := st.EnqueueWhileHeldThen(ctx, m.key, owner, m.seq, ownTurn, m.ev, s.cfg.QueueCap, ackFirst)
	if errors.Is(err, sessionstore.ErrQueueFull) {
		if steer {
			// No room to queue it: the turn is asked for the text alone
			// (no queued message to name), as steering was before it was
			// queued; only text no turn takes is dropped.
			took, err := s.request(ctx, m, controlSteer, m.ev.GetText())
			if err != nil {
				return err
			}
			if took {
				inbound.WithLabelValues("steered").Inc()
				busyActions.WithLabelValues("steered").Inc()
				return s.ack(ctx, st, m, sess, o, owner, "steered")
			}
		}
		return s.queueFull(ctx, m, sess.Generation)
	}
	if errors.Is(err, sessionstore.ErrStarted) {
		return s.startedAlready(m)
	}
	if err != nil {
		return err
	}
	// From here a redelivery must not queue the message again.
	if !busy {
		inbound.WithLabelValues("queued").Inc()
		return s.lockAndStart(ctx, m)
	}
	// Recorded as handled before the turn is asked: a redelivery must not
	// queue again what the turn may have taken from the queue by then.
	if err := s.markHandled(ctx, m); err != nil {
		return err
	}
	if steer {
		took, err := s.steer(ctx, st, m, owner)
		if errors.Is(err, errSteerFailed) {
			// Queued for the next turn, and answered so (Hermes's
			// fallback to its queue when steer() raises).
			took, err, o.steerFailed = false, nil, true
		}
		if err != nil {
			return err
		}
		if took {
			inbound.WithLabelValues("steered").Inc()
			busyActions.WithLabelValues("steered").Inc()
			if err := s.ack(ctx, st, m, sess, o, owner, "steered"); err != nil {
				return err
			}
			releaseStarts()
			// Marks the lock: the turn's completion starts what it did
			// not give to the model.
			if _, err := s.startQueued(ctx, m.key); err != nil {
				return fmt.Errorf("start turn: %w", err)
			}
			return nil
		}
	}
	inbound.WithLabelValues("queued").Inc()
	if busy && inserted {
		if interrupt {
			// Sent even to a turn no worker has claimed yet (one may be
			// claiming it now), but only a claimed turn is running: one
			// still waiting for a worker runs first, then this message
			// (action "queued"). It names the turn it interrupts: by the
			// time it arrives that turn may have ended, and the next
			// one, which may carry this very message, must not be cut
			// short.
			if err := s.control(ctx, m, controlInterrupt, "", heldBy(owner)); err != nil {
				return err
			}
		}
		if s.busyQueued != nil {
			s.busyQueued(ctx, m.ev.GetEventId())
		}
		busyActions.WithLabelValues(action).Inc()
		if !acked {
			// Steering no running turn took, queued: acknowledged
			// while the turn starts are still held back.
			if err := s.ack(ctx, st, m, sess, o, owner, action); err != nil {
				return err
			}
		}
	}
	releaseStarts()
	// Even when busy: the turn may have ended since the lock was read,
	// before this message was queued.
	if _, err := s.startQueued(ctx, m.key); err != nil {
		return fmt.Errorf("start turn: %w", err)
	}
	return nil
}

// queueFull drops a message its session's full queue has no room for,
// and says so.
func (s *Service) queueFull(ctx context.Context, m *msgCtx, gen int64) error {
	m.home = nil // the agent never sees it
	inbound.WithLabelValues("dropped").Inc()
	s.log.WarnContext(ctx, "session queue full; message dropped", "session_key", m.key, "event", m.dedupeID, "cap", s.cfg.QueueCap)
	return s.notice(ctx, m, gen, fmt.Sprintf("⚠️ Too many messages are waiting (%d). This one was not queued; please wait for the current reply.", s.cfg.QueueCap), "queue_full")
}

// lockAndStart runs after a message to a free session is queued: record
// the message as handled and take the lock at once, then start the turn.
func (s *Service) lockAndStart(ctx context.Context, m *msgCtx) error {
	token := redisx.NewGrant(s.now())
	locked, err := s.markHandledAndLock(ctx, m, token)
	if err != nil {
		return err
	}
	if !locked {
		// Not locked: another start took the session meanwhile; the lock
		// is marked, so its turn's completion starts this message. That
		// turn may be a memory flush.
		s.typingBehindFlush(ctx, m, "")
		return nil
	}
	_, flush, err := s.startNext(ctx, m.key, token)
	if err != nil {
		return fmt.Errorf("start turn: %w", err)
	}
	if flush {
		// The reset that m found due queued the ended conversation's
		// flush ahead of it: m waits for it.
		s.typingBehindFlush(ctx, m, token)
	}
	return nil
}

// ownsTurn: the API gateway matches one reply per HTTP request, so its
// messages are never merged into one turn.
func ownsTurn(m *msgCtx) bool { return m.platform == "api" }

// errNotTaken: no waiting call took a plain approval word (route), which
// is then a message.
var errNotTaken = errors.New("approval word taken by no call")

// lockHolder is the value of m's session lock: the one read with the
// dedupe record for its first use (what changed since is handled as any
// change after a read), a fresh read after that, which stands a free
// lock's running turn in for it (holderOrLease: Redis lost the lock of
// a turn that still runs).
func (s *Service) lockHolder(ctx context.Context, m *msgCtx) (string, error) {
	if h := m.holder; h != nil {
		m.holder = nil
		return *h, nil
	}
	owner, err := s.locker.Owner(ctx, m.key)
	if err != nil {
		return "", err
	}
	return s.holderOrLease(ctx, m.key, owner)
}

// mayApprove: m's sender may answer approvals (/approve is not reserved
// for admins on its platform, or the sender is one).
func (s *Service) mayApprove(m *msgCtx) bool {
	admin, _ := s.isAdmin(m)
	return admin
}

// ack tells the user what happened to a message that arrived while the
// session's lock was held by owner: a /queue or /steer command is always
// answered, as in Hermes; any other message gets busyAck. st reads the
// queue: the transaction that queues the message, when the answer goes
// out before its commit (route).
func (s *Service) ack(ctx context.Context, st *sessionstore.Store, m *msgCtx, sess sessionstore.Session, o routeOpts, owner, action string) error {
	var text string
	switch {
	case o.command == "queue":
		// Steering the running turn took is no message of the queue's
		// to the user, though it stays queued until the turn reads it.
		n, _, err := st.Waiting(ctx, m.key, owner)
		if err != nil {
			return err
		}
		text = "Queued for the next turn."
		if n > 1 {
			text = fmt.Sprintf("Queued for the next turn. (%d queued)", n)
		}
	case o.command == "steer" && action == "steered":
		text = fmt.Sprintf("⏩ Steer queued — arrives after the next tool call: '%s'", preview(m.ev.GetText(), 60))
	case o.command == "steer" && o.steerFailed:
		// Hermes answers "⚠️ Steer failed: <error>" and drops the text;
		// here it is queued, and the next turn answers it.
		text = "⚠️ Steer failed — /steer queued for the next turn."
	case o.command == "steer" && redisx.GrantOf(owner) == owner:
		// The lock holds the router's bare grant: no worker runs the turn yet.
		text = "Agent still starting — /steer queued for the next turn."
	case o.command == "steer":
		// A turn runs, but its answer is decided: it reads no more.
		text = "⏳ The current task is finishing — /steer queued for the next turn."
	default:
		return s.busyAck(ctx, m, sess, owner, action)
	}
	return s.notice(ctx, m, sess.Generation, text, "command")
}

// preview is text cut to n runes, with "..." when cut.
func preview(text string, n int) string {
	if utf8.RuneCountInString(text) <= n {
		return text
	}
	return string([]rune(text)[:n]) + "..."
}

// busyAck tells the user, at most once per session per BusyAckInterval,
// what happened to a message that arrived while the agent was busy.
func (s *Service) busyAck(ctx context.Context, m *msgCtx, sess sessionstore.Session, owner, action string) error {
	if quietPlatform(m.platform) {
		return nil
	}
	ok, err := s.rdb.SetNX(ctx, s.prefix+"busyack:"+m.key, action, s.cfg.BusyAckInterval).Result()
	if err != nil || !ok {
		return nil
	}
	// Hermes's words; of its details (time, iteration, tool) the router
	// knows the time: the grant of the running turn says when it began.
	detail := ""
	if began, ok := redisx.GrantTime(redisx.GrantOf(owner)); ok {
		if mins := int(s.now().Sub(began) / time.Minute); mins > 0 {
			detail = fmt.Sprintf(" (%d min elapsed)", mins)
		}
	}
	var text string
	switch action {
	case "interrupted":
		text = "⚡ Interrupting current task" + detail + ". I'll respond to your message shortly."
	case "steered":
		text = "⏩ Steered into current run" + detail + ". Your message arrives after the next tool call."
	default:
		text = "⏳ Queued for the next turn" + detail + ". I'll respond once the current task finishes."
	}
	return s.notice(ctx, m, sess.Generation, text, "busy")
}

// dropNUL removes NUL characters from every string of an inbound event,
// nested messages, lists and maps included. Postgres text refuses them, so
// a NUL in a user's name, a chat's name or a message (which a platform or
// a webhook caller may send) failed every write of the session, on every
// redelivery: the message was never answered. A NUL means nothing in chat
// text.
func dropNUL(m protoreflect.Message) {
	clean := func(v protoreflect.Value) (protoreflect.Value, bool) {
		str := v.String()
		if !strings.Contains(str, "\x00") {
			return v, false
		}
		return protoreflect.ValueOfString(strings.ReplaceAll(str, "\x00", "")), true
	}
	m.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		switch {
		case fd.IsList():
			l := v.List()
			for i := range l.Len() {
				if fd.Kind() == protoreflect.StringKind {
					if c, ok := clean(l.Get(i)); ok {
						l.Set(i, c)
					}
				} else if fd.Message() != nil {
					dropNUL(l.Get(i).Message())
				}
			}
		case fd.IsMap():
			mp := v.Map()
			mp.Range(func(k protoreflect.MapKey, mv protoreflect.Value) bool {
				if fd.MapValue().Kind() == protoreflect.StringKind {
					if c, ok := clean(mv); ok {
						mp.Set(k, c)
					}
				} else if fd.MapValue().Message() != nil {
					dropNUL(mv.Message())
				}
				return true
			})
		case fd.Kind() == protoreflect.StringKind:
			if c, ok := clean(v); ok {
				m.Set(fd, c)
			}
		case fd.Message() != nil:
			dropNUL(v.Message())
		}
		return true
	})
}
