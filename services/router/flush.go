package router

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"maps"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	deliveryv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/delivery/v1"
	eventsv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/events/v1"
	repliesv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/replies/v1"
	turnsv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/turns/v1"
)

// Hermes's pre-reset memory flush. Before a conversation is cleared (an
// idle or daily reset, /new or /reset), Hermes runs one more agent turn
// on it, with only the memory and skill tools, telling the model the
// conversation is about to end and to save what is worth remembering;
// nothing of it reaches the user. Here the reset queues that turn
// (sessionstore.ResetKeepingQueue, ResetDropping) in its own
// transaction, at the head of the session's queue, as a turn of its own:
// it runs under the session lock like any turn, so before the new
// conversation's first, and the queue keeps it across a crash (the sweep
// starts what a dead router left waiting). publishTurn sends it with
// TurnRequested.memory_flush on the conversation that ended; the worker
// runs it (services/worker/flush.go) at most once.

// flushFor is the template of the memory flush a reset of m's session
// queues: the source of the message that ended the conversation (whose
// memory it writes to), or nil when no flush is due: memory is off
// (Config.MemoryFlush), or the session is a cron job's (Hermes skips
// those: a job's run has nothing to remember). The store queues it only
// for a conversation that had a turn.
func (s *Service) flushFor(m *msgCtx) *eventsv1.MessageReceived {
	if !s.cfg.MemoryFlush || m.platform == "cron" {
		return nil
	}
	return &eventsv1.MessageReceived{Source: m.src}
}

// startFlush starts the memory flush /new queued, if any: no message
// waits behind it to start it.
func (s *Service) startFlush(ctx context.Context, m *msgCtx) error {
	if s.flushFor(m) == nil {
		return nil
	}
	if _, err := s.tryStart(ctx, m.key); err != nil {
		return fmt.Errorf("start memory flush: %w", err)
	}
	return nil
}

// flushMarkTTL outlives a flush once a worker runs it: the worker's
// bound (90 s) with a lock expiry and a redelivery after a crash.
const flushMarkTTL = 5 * time.Minute

// markFlush records, before the flush turn turnID of key is published,
// that it is one: a message arriving while it runs is queued behind it
// without a busy acknowledgement or an interrupt (flushRunning). The
// mark lasts as long as the flush may hold the session: its grant keeps
// the session up to GrantTTL while the turn waits for a worker (a
// backlog), then a worker runs it within flushMarkTTL. A mark of 5 min
// ran out under a flush still waiting in the backlog, and a message then
// met an unmarked busy session: it was told "⏳ Queued" or "⚡
// Interrupting" about a task the user never started, and it interrupted
// the flush, whose notes were lost. A mark that outlives its flush names
// that flush's turn, which no later turn's grant matches.
func (s *Service) markFlush(ctx context.Context, key, turnID string) error {
	if err := s.rdb.Set(ctx, s.prefix+"flushing:"+key, turnID, s.cfg.GrantTTL+flushMarkTTL).Err(); err != nil {
		return fmt.Errorf("mark memory flush: %w", err)
	}
	return nil
}

// flushRunning reports whether the turn holding key's lock (owner) is a
// memory flush. One Redis read, for a busy session only, where flushes
// are on; an unreadable mark counts as none (the message then meets a
// busy session, as any other turn's). A turn that holds the session by
// its lease alone (leaseHolder: Redis lost its lock, and with it the
// flush's mark) is one when its start took the flush's queued event
// (sessionstore.FlushTurn): one Postgres read instead, so that a
// message or a command meets the flush as with its lock held.
func (s *Service) flushRunning(ctx context.Context, key, owner string) bool {
	if !s.cfg.MemoryFlush {
		return false
	}
	grant := heldBy(owner)
	if grant == "" {
		return false
	}
	if _, holder, _ := strings.Cut(owner, "/"); holder == leaseHolderID {
		flush, err := s.store.FlushTurn(ctx, key, grant)
		if err != nil {
			s.log.WarnContext(ctx, "read whether the leased turn is a memory flush", "session_key", key, "err", err)
		}
		return flush
	}
	mark, err := s.rdb.Get(ctx, s.prefix+"flushing:"+key).Result()
	return err == nil && mark == grant
}

// typingBehindFlush shows the typing indicator in m's chat while m
// waits for the memory flush flushTurn (or, when "", for whichever
// flush holds the session's lock, if one does): to the user the wait is
// the wait for the answer, up to the flush's bound (90 s), and a turn
// shows typing from its start (the worker's Typing event). Each chat
// waiting has an indicator of its own (flushTypingID): delivery keeps
// one per turn id, so chats of one session (a WhatsApp contact's
// devices) sharing the flush's id showed it in the first alone. The
// indicator is started here and ended by the flush's completion
// (flushTypingEnded) with the chat recorded for it; if the flush ended
// before the record was written, its completion found none, and it is
// ended here. Best effort, as typing is: m is queued and recorded
// handled already.
func (s *Service) typingBehindFlush(ctx context.Context, m *msgCtx, flushTurn string) {
	if !s.cfg.MemoryFlush || quietPlatform(m.platform) {
		return
	}
	running := func() (string, error) {
		owner, err := s.locker.Owner(ctx, m.key)
		if err != nil || !s.flushRunning(ctx, m.key, owner) {
			return "", err
		}
		return heldBy(owner), nil
	}
	err := func() error {
		if flushTurn == "" {
			var err error
			if flushTurn, err = running(); err != nil || flushTurn == "" {
				return err
			}
		}
		t := target(m.ev)
		data, err := proto.Marshal(t)
		if err != nil {
			return fmt.Errorf("encode typing target: %w", err)
		}
		id := flushTypingID(flushTurn, t)
		pipe := s.rdb.TxPipeline()
		pipe.HSet(ctx, s.flushTypingKey(flushTurn), id, data)
		pipe.Expire(ctx, s.flushTypingKey(flushTurn), flushMarkTTL)
		if _, err := pipe.Exec(ctx); err != nil {
			return fmt.Errorf("record typing target: %w", err)
		}
		if err := s.publishFlushTyping(ctx, m.key, id, t, true, "flush-typing:"+flushTurn+":"+m.dedupeID); err != nil {
			return err
		}
		// Its completion reads the record only once it let go of the
		// lock: a flush that still holds it ends the indicator itself.
		if now, err := running(); err != nil || now == flushTurn {
			return err
		}
		return s.publishFlushTyping(ctx, m.key, id, t, false, "flush-typing-off:"+flushTurn+":"+m.dedupeID)
	}()
	if err != nil {
		s.log.WarnContext(ctx, "typing while waiting for the memory flush", "session_key", m.key, "err", err)
	}
}

// flushTypingID is the turn id of the typing indicator shown in chat t
// while its messages wait for the memory flush flushTurn: the flush's
// id and the chat's (its thread included), so that each chat has one
// indicator, however many of its messages wait.
func flushTypingID(flushTurn string, t *deliveryv1.Target) string {
	h := fnv.New64a()
	for _, part := range []string{t.GetPlatform(), t.GetAccount(), t.GetChatId(), t.GetThreadId()} {
		h.Write([]byte(part))
		h.Write([]byte{0})
	}
	return fmt.Sprintf("%s:typing:%016x", flushTurn, h.Sum64())
}

// flushTypingEnded ends the typing indicators that messages waiting for
// the memory flush ev completes were shown (typingBehindFlush), if any:
// one per chat, and the one a router of the release before recorded
// under the flush's own id (legacyFlushTypingKey).
func (s *Service) flushTypingEnded(ctx context.Context, ev *turnsv1.TurnCompleted) error {
	if !s.cfg.MemoryFlush {
		return nil
	}
	return s.endFlushTyping(ctx, ev.GetSessionKey(), ev.GetTurnId(), "")
}

// flushTypingDropped ends the typing indicators of the chats waiting
// for the memory flush flushTurn of m's session when m (/stop, /new)
// dropped their messages but left the flush running: nothing of theirs
// is coming. The records stay, for the flush's completion to end the
// indicators again; a message that waits for the flush from now on
// shows typing anew. Best effort, as typing is.
func (s *Service) flushTypingDropped(ctx context.Context, m *msgCtx, flushTurn string) {
	if err := s.endFlushTyping(ctx, m.key, flushTurn, ":"+m.dedupeID); err != nil {
		s.log.WarnContext(ctx, "end the typing of messages dropped while the memory flush runs", "session_key", m.key, "err", err)
	}
}

// endFlushTyping ends the typing indicators recorded for the chats
// waiting for the memory flush flushTurn of key, each with the message
// id flush-typing-off:<indicator id><suffix>.
func (s *Service) endFlushTyping(ctx context.Context, key, flushTurn, suffix string) error {
	pipe := s.rdb.Pipeline()
	legacy := pipe.Get(ctx, s.legacyFlushTypingKey(flushTurn))
	chats := pipe.HGetAll(ctx, s.flushTypingKey(flushTurn))
	_, _ = pipe.Exec(ctx) // each command's error is read below
	if err := chats.Err(); err != nil {
		return fmt.Errorf("read typing targets: %w", err)
	}
	ends := map[string]string{}
	maps.Copy(ends, chats.Val())
	switch data, err := legacy.Result(); {
	case err == nil:
		ends[flushTurn] = data
	case !errors.Is(err, redis.Nil):
		return fmt.Errorf("read typing target: %w", err)
	}
	for id, data := range ends {
		t := &deliveryv1.Target{}
		if err := proto.Unmarshal([]byte(data), t); err != nil {
			return fmt.Errorf("decode typing target: %w", err)
		}
		if err := s.publishFlushTyping(ctx, key, id, t, false, "flush-typing-off:"+id+suffix); err != nil {
			return err
		}
	}
	return nil
}

// flushTypingKey holds the chats shown typing while they wait for the
// flush turnID: a hash of their typing ids (flushTypingID) to targets.
func (s *Service) flushTypingKey(turnID string) string { return s.prefix + "flushtypings:" + turnID }

// legacyFlushTypingKey is where a router of the release before recorded
// the one chat it showed typing, under the flush's own id.
func (s *Service) legacyFlushTypingKey(turnID string) string {
	return s.prefix + "flushtyping:" + turnID
}

// publishFlushTyping starts (active) or ends the typing indicator id
// (flushTypingID) shown in chat t while it waits for a memory flush of
// key.
func (s *Service) publishFlushTyping(ctx context.Context, key, id string, t *deliveryv1.Target, active bool, msgID string) error {
	ev := &repliesv1.ReplyEvent{TurnId: id, SessionKey: key, Target: t, CreatedAt: timestamppb.New(s.now()),
		Body: &repliesv1.ReplyEvent_Typing{Typing: &repliesv1.Typing{Active: active}}}
	if _, err := s.bus.Publish(ctx, s.topo.ReplySubject(key), msgID, ev); err != nil {
		return fmt.Errorf("publish typing: %w", err)
	}
	return nil
}
