package sessionstore

import (
	"context"
	"fmt"
	"math"
	"strings"
	"time"

	"google.golang.org/protobuf/proto"

	eventsv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/events/v1"
)

// FlushCommand is the transcript command of Hermes's pre-reset memory
// flush, a turn queued when a conversation ends: "memory-flush <session
// id>" names the conversation that ended. The router makes it a turn
// with TurnRequested.memory_flush set, on that conversation.
const FlushCommand = "memory-flush"

// FlushEventPrefix opens the event id of a memory flush: one per ended
// conversation ("memflush:<session id>").
const FlushEventPrefix = "memflush:"

// flushSeq places a memory flush before every waiting message: it reads
// the conversation that ended, so it runs before the new one's first turn.
const flushSeq = math.MinInt64

// FlushOf reports whether ev is a memory flush, and of which conversation.
func FlushOf(ev *eventsv1.MessageReceived) (sessionID string, ok bool) {
	id, ok := strings.CutPrefix(ev.GetTranscriptCommand(), FlushCommand+" ")
	return id, ok && id != "" && strings.HasPrefix(ev.GetEventId(), FlushEventPrefix)
}

// FlushTurn reports whether turnID, the session key's last turn, is a
// memory flush: its start took the flush's queued event
// (FlushEventPrefix), the last started of the session. The router's
// mark of a running flush lives in Redis, lost with the lock; this is
// what tells a flush that holds the session by its lease alone.
func (s *Store) FlushTurn(ctx context.Context, key, turnID string) (bool, error) {
	var flush bool
	err := s.db.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM sessions
		WHERE session_key = $1 AND last_turn_id = $2 AND starts_with(last_started_event_id, $3))`, key, turnID, FlushEventPrefix).Scan(&flush)
	if err != nil {
		return false, fmt.Errorf("read whether turn %s is a memory flush: %w", turnID, err)
	}
	return flush, nil
}

// queueFlush queues, in tx, the memory flush of conversation old of key
// at the head of its queue, as its own turn, when that conversation had
// a turn (a worker recorded one; not the end of a turn fenced off
// undecided, which the flush never counted before the worker recorded
// it): one of commands alone has nothing to remember. ev is its
// template (the source of the message that ended the conversation,
// kept on the queued event; the flush's turn carries no inputs, so
// whose memory it writes is decided by the session's origin, the same
// owner as its ordinary turns').
func queueFlush(ctx context.Context, tx dbtx, key, old string, ev *eventsv1.MessageReceived, now time.Time) error {
	f := &eventsv1.MessageReceived{EventId: FlushEventPrefix + old, Source: ev.GetSource(),
		TranscriptCommand: FlushCommand + " " + old}
	data, err := proto.Marshal(f)
	if err != nil {
		return fmt.Errorf("encode memory flush: %w", err)
	}
	if _, err := tx.Exec(ctx, `INSERT INTO session_queue (session_key, stream_seq, event_id, own_turn, event, enqueued_at, traceparent, takes_skills_note)
		SELECT $1, $2, $3, true, $4, $5, '', false
		WHERE EXISTS (SELECT 1 FROM worker_turns WHERE session_key = $1 AND session_id = $6 AND status <> 'fenced')
		ON CONFLICT (session_key, event_id) DO NOTHING`,
		key, int64(flushSeq), f.GetEventId(), data, now, old); err != nil {
		return fmt.Errorf("queue memory flush: %w", err)
	}
	return nil
}
