package sessionstore

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	eventsv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/events/v1"
	"github.com/switchboard-chat/switchboard/pkg/loop"
)

// A loop's or heartbeat's wakeup waits in the session's queue under the
// event id <kind>:<loop id>:<tick> (session_loops, migration 00134).

// WakeupOf reports the kind and loop id of a queued wakeup (ok false: a
// message of the user's, or anything else).
func WakeupOf(eventID string) (kind, id string, ok bool) {
	for _, k := range []string{loop.KindLoop, loop.KindHeartbeat} {
		if rest, found := strings.CutPrefix(eventID, k+":"); found {
			id, _, ok = strings.Cut(rest, ":")
			return k, id, ok && id != ""
		}
	}
	return "", "", false
}

// loopCols are session_loops' columns scanLoop reads.
const loopCols = `kind, id, prompt, status, interval_ms, delay_ms, times, until_text, max_ticks, ticks, next_due_at,
	coalesce(last_fired_at, 'epoch'::timestamptz), paused_reason, last_stop_reason, last_digest`

// loopColsL is loopCols of the table aliased l.
const loopColsL = `l.kind, l.id, l.prompt, l.status, l.interval_ms, l.delay_ms, l.times, l.until_text, l.max_ticks, l.ticks, l.next_due_at,
	coalesce(l.last_fired_at, 'epoch'::timestamptz), l.paused_reason, l.last_stop_reason, l.last_digest`

func scanLoop(r rowScanner, extra ...any) (*loop.State, error) {
	var l loop.State
	var interval, delay int64
	dest := append([]any{&l.Kind, &l.ID, &l.Prompt, &l.Status, &interval, &delay, &l.Times, &l.Until, &l.MaxTicks, &l.Ticks,
		&l.NextDue, &l.LastFired, &l.PausedReason, &l.LastStopReason, &l.LastDigest}, extra...)
	err := r.Scan(dest...)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read loop: %w", err)
	}
	l.Interval, l.Delay = time.Duration(interval)*time.Millisecond, time.Duration(delay)*time.Millisecond
	return &l, nil
}

// Loop returns the loop or heartbeat (kind) of the key's conversation
// sessionID, nil when it has none (none set, or set in another
// conversation).
func (s *Store) Loop(ctx context.Context, key, sessionID, kind string) (*loop.State, error) {
	return scanLoop(s.db.QueryRow(ctx, `SELECT `+loopCols+` FROM session_loops WHERE session_key = $1 AND kind = $2 AND session_id = $3`,
		key, kind, sessionID))
}

// SetLoop sets l, active, as the key's loop or heartbeat (l.Kind) in
// the conversation sessionID, in place of the one the key had (its
// wakeup waiting in the queue is dropped); its wakeups are made from
// template. It reports whether it replaced one that was active or
// paused.
func (s *Store) SetLoop(ctx context.Context, key, sessionID string, l loop.State, template *eventsv1.MessageReceived) (replaced bool, err error) {
	data, err := proto.Marshal(template)
	if err != nil {
		return false, fmt.Errorf("encode loop template: %w", err)
	}
	err = s.inTx(ctx, func(tx pgx.Tx) error {
		err := tx.QueryRow(ctx, `SELECT status IN ('active', 'paused') FROM session_loops WHERE session_key = $1 AND kind = $2 AND session_id = $3 FOR UPDATE`,
			key, l.Kind, sessionID).Scan(&replaced)
		if err != nil && !errors.Is(err, pgx.ErrNoRows) {
			return fmt.Errorf("read loop: %w", err)
		}
		now := s.now()
		if _, err := tx.Exec(ctx, `INSERT INTO session_loops (session_key, kind, id, session_id, prompt, status, interval_ms, delay_ms,
				times, until_text, max_ticks, next_due_at, template, created_at, updated_at)
			VALUES ($1, $2, $3, $4, $5, 'active', $6, $7, $8, $9, $10, $11, $12, $13, $13)
			ON CONFLICT (session_key, kind) DO UPDATE SET id = $3, session_id = $4, prompt = $5, status = 'active', interval_ms = $6,
				delay_ms = $7, times = $8, until_text = $9, max_ticks = $10, ticks = 0, next_due_at = $11, last_fired_at = NULL,
				paused_reason = '', last_stop_reason = '', last_digest = '', template = $12, last_event_id = '',
				completed_event_id = '', completed_message = '', created_at = $13, updated_at = $13`,
			key, l.Kind, l.ID, sessionID, l.Prompt, l.Interval.Milliseconds(), l.Delay.Milliseconds(), l.Times, l.Until, l.MaxTicks,
			l.NextDue, data, now); err != nil {
			return fmt.Errorf("set loop: %w", err)
		}
		return dropWakeups(ctx, tx, key, l.Kind)
	})
	return replaced, err
}

// dropWakeups deletes the kind's wakeups waiting in the key's queue.
func dropWakeups(ctx context.Context, tx pgx.Tx, key, kind string) error {
	if _, err := tx.Exec(ctx, `DELETE FROM session_queue WHERE session_key = $1 AND starts_with(event_id, $2)`, key, kind+":"); err != nil {
		return fmt.Errorf("drop %s wakeups: %w", kind, err)
	}
	return nil
}

// UpdateLoop changes the key's loop or heartbeat (kind) of the
// conversation sessionID with change, under the row's lock, and reports
// it after (nil, without calling change, when there is none). One that
// is no longer active drops its wakeup waiting in the queue.
func (s *Store) UpdateLoop(ctx context.Context, key, sessionID, kind string, change func(*loop.State) error) (*loop.State, error) {
	var out *loop.State
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		l, err := scanLoop(tx.QueryRow(ctx, `SELECT `+loopCols+` FROM session_loops WHERE session_key = $1 AND kind = $2 AND session_id = $3 FOR UPDATE`,
			key, kind, sessionID))
		if err != nil || l == nil {
			out = nil
			return err
		}
		if err := change(l); err != nil {
			return err
		}
		if err := s.writeLoop(ctx, tx, key, *l, "", ""); err != nil {
			return err
		}
		out = l
		return nil
	})
	return out, err
}

// writeLoop stores l as the key's loop of its kind; a non-empty
// completedEvent records the wakeup whose answer changed it.
func (s *Store) writeLoop(ctx context.Context, tx pgx.Tx, key string, l loop.State, completedEvent, completedMessage string) error {
	var fired any
	if !l.LastFired.IsZero() && l.LastFired.Unix() > 0 {
		fired = l.LastFired
	}
	if _, err := tx.Exec(ctx, `UPDATE session_loops SET status = $3, delay_ms = $4, ticks = $5, next_due_at = $6, last_fired_at = $7,
		paused_reason = $8, last_stop_reason = $9, last_digest = $10, updated_at = $11,
		completed_event_id = CASE WHEN $12 = '' THEN completed_event_id ELSE $12 END,
		completed_message = CASE WHEN $12 = '' THEN completed_message ELSE $13 END
		WHERE session_key = $1 AND kind = $2`, key, l.Kind, l.Status, l.Delay.Milliseconds(), l.Ticks, l.NextDue, fired,
		l.PausedReason, l.LastStopReason, l.LastDigest, s.now(), completedEvent, completedMessage); err != nil {
		return fmt.Errorf("write loop: %w", err)
	}
	if l.Status != loop.Active {
		return dropWakeups(ctx, tx, key, l.Kind)
	}
	return nil
}

// Fired is a tick the scheduler queued.
type Fired struct {
	Key, Kind, EventID string
	Tick               int
}

// Skip says why a due loop did not fire ("" it fired).
type Skip string

// Reasons a due tick is not fired now.
const (
	SkipBusy  Skip = "busy"  // a turn runs or messages wait: it fires when the session is idle
	SkipGoal  Skip = "goal"  // a loop defers to an active goal of its conversation
	SkipEnded Skip = "ended" // its conversation ended (/new): cleared
)

// FireDue fires the loops and heartbeats due at now, up to limit of
// them, in one transaction: each due row is claimed (FOR UPDATE SKIP
// LOCKED: another replica's claim skips it, and a claim it commits
// moves the row's next due time), advanced by one tick and its wakeup
// queued in its session's queue behind every waiting message. A tick
// fires only into an idle session (Hermes's rule): nothing queued and
// busy(key) false (no turn holds the session); a busy one is left due
// and fires when it is idle, missed ticks coalescing into that one. A
// loop also waits while a goal of its conversation is active (Hermes's
// goal_blocks_loop_tick), and one whose conversation ended is cleared.
// skipped gets every due row not fired and why.
func (s *Store) FireDue(ctx context.Context, now time.Time, limit int, busy func(ctx context.Context, key string) (bool, error),
	skipped func(key, kind string, why Skip)) ([]Fired, error) {
	fired, _, err := s.FireDuePage(ctx, now, limit, nil, busy, skipped)
	return fired, err
}

// DueCursor is where a page of due loops ended.
type DueCursor struct {
	At        time.Time
	Key, Kind string
}

// FireDuePage is FireDue over the page of due rows after after (nil:
// the first), in (due time, key, kind) order; next is the cursor of
// the page that follows, nil when this one was the last. Paging keeps
// the due rows of busy sessions, which stay due, from hiding the others.
func (s *Store) FireDuePage(ctx context.Context, now time.Time, limit int, after *DueCursor, busy func(ctx context.Context, key string) (bool, error),
	skipped func(key, kind string, why Skip)) (fired []Fired, next *DueCursor, err error) {
	if after == nil {
		after = &DueCursor{}
	}
	err = s.inTx(ctx, func(tx pgx.Tx) error {
		fired, next = nil, nil
		rows, err := tx.Query(ctx, `SELECT `+loopColsL+`, l.session_key, l.session_id, coalesce(s.session_id, ''),
			coalesce(s.goal_session_id, ''), l.template, EXISTS (SELECT 1 FROM session_queue q WHERE q.session_key = l.session_key)
			FROM session_loops l LEFT JOIN sessions s ON s.session_key = l.session_key
			WHERE l.status = 'active' AND l.next_due_at <= $1 AND (l.next_due_at, l.session_key, l.kind) > ($3, $4, $5)
			ORDER BY l.next_due_at, l.session_key, l.kind LIMIT $2 FOR UPDATE OF l SKIP LOCKED`, now, limit, after.At, after.Key, after.Kind)
		if err != nil {
			return fmt.Errorf("read due loops: %w", err)
		}
		type due struct {
			key, sid, current, goalSID string
			template                   []byte
			queued                     bool
			l                          *loop.State
		}
		var all []due
		for rows.Next() {
			var d due
			l, err := scanLoop(rows, &d.key, &d.sid, &d.current, &d.goalSID, &d.template, &d.queued)
			if err != nil {
				rows.Close()
				return err
			}
			d.l = l
			all = append(all, d)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return fmt.Errorf("read due loops: %w", err)
		}
		if len(all) == limit {
			last := all[len(all)-1]
			next = &DueCursor{At: last.l.NextDue, Key: last.key, Kind: last.l.Kind}
		}
		for _, d := range all {
			switch {
			case d.current != d.sid:
				d.l.Status, d.l.LastStopReason = loop.Cleared, "conversation ended"
				if err := s.writeLoop(ctx, tx, d.key, *d.l, "", ""); err != nil {
					return err
				}
				skipped(d.key, d.l.Kind, SkipEnded)
				continue
			case d.l.Kind == loop.KindLoop && d.goalSID == d.sid:
				skipped(d.key, d.l.Kind, SkipGoal)
				continue
			case d.queued:
				skipped(d.key, d.l.Kind, SkipBusy)
				continue
			}
			b, err := busy(ctx, d.key)
			if err != nil {
				return err
			}
			if b {
				skipped(d.key, d.l.Kind, SkipBusy)
				continue
			}
			tick, text := loop.Fire(*d.l, now)
			var ev eventsv1.MessageReceived
			if err := proto.Unmarshal(d.template, &ev); err != nil {
				return fmt.Errorf("decode loop template: %w", err)
			}
			ev.EventId = tick.Kind + ":" + tick.ID + ":" + strconv.Itoa(tick.Ticks)
			ev.MessageId = ""
			ev.Text = text
			ev.ReceivedAt = timestamppb.New(now)
			data, err := proto.Marshal(&ev)
			if err != nil {
				return fmt.Errorf("encode wakeup: %w", err)
			}
			if err := s.writeLoop(ctx, tx, d.key, tick, "", ""); err != nil {
				return err
			}
			if _, err := tx.Exec(ctx, `UPDATE session_loops SET last_event_id = $3 WHERE session_key = $1 AND kind = $2`,
				d.key, tick.Kind, ev.EventId); err != nil {
				return fmt.Errorf("record wakeup: %w", err)
			}
			if _, err := tx.Exec(ctx, `INSERT INTO session_queue (session_key, stream_seq, event_id, own_turn, event, enqueued_at, traceparent)
				VALUES ($1, $2, $3, true, $4, $5, '') ON CONFLICT (session_key, event_id) DO NOTHING`,
				d.key, int64(continuationSeq), ev.EventId, data, now); err != nil {
				return fmt.Errorf("queue wakeup: %w", err)
			}
			fired = append(fired, Fired{Key: d.key, Kind: tick.Kind, EventID: ev.EventId, Tick: tick.Ticks})
		}
		return nil
	})
	return fired, next, err
}

// Completion is what the evaluation of a wakeup's answer did.
type Completion struct {
	// Message is the line for the chat ("" none).
	Message string
	// Label names the outcome (loop.Outcome's), "" when nothing changed.
	Label string
	// Replayed: the wakeup was evaluated before (a redelivered turn).
	Replayed bool
}

// CompleteWakeup evaluates the answer to the loop wakeup eventID of the
// key (loop.Complete with the --until judge's verdict), in one
// transaction, once: a wakeup evaluated before returns its message as
// it was, and one that is no longer the loop's latest (the loop was
// replaced, paused or stopped meanwhile) changes nothing.
func (s *Store) CompleteWakeup(ctx context.Context, key, eventID, response string, judged loop.Verdict) (Completion, error) {
	var c Completion
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		c = Completion{}
		var last, completed, message string
		l, err := scanLoop(tx.QueryRow(ctx, `SELECT `+loopCols+`, last_event_id, completed_event_id, completed_message
			FROM session_loops WHERE session_key = $1 AND kind = 'loop' FOR UPDATE`, key), &last, &completed, &message)
		if err != nil || l == nil {
			return err
		}
		if completed == eventID {
			c = Completion{Message: message, Replayed: true}
			return nil
		}
		if last != eventID || l.Status != loop.Active {
			return nil
		}
		o := loop.Complete(*l, response, judged, s.now())
		c = Completion{Message: o.Message, Label: o.Label}
		return s.writeLoop(ctx, tx, key, o.State, eventID, o.Message)
	})
	return c, err
}

// StopWakeup ends the key's loop wakeup that /stop stopped — running,
// or waiting in the queue /stop emptied — as Hermes's gateway does
// after an interrupted turn: the loop goes on, the stopped wakeup
// counts as a run with an empty answer (loop.Complete: --times and the
// backstop budget apply, the next wakeup is scheduled from now). It
// changes nothing when the loop's latest wakeup was evaluated already
// (the turn finished first, or a redelivered /stop), or the loop is not
// active. The line it returns goes in /stop's answer, so the wakeup's
// record keeps none: a worker that finished the wakeup after all
// announces nothing again.
func (s *Store) StopWakeup(ctx context.Context, key string) (Completion, error) {
	var c Completion
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		c = Completion{}
		var last, completed string
		l, err := scanLoop(tx.QueryRow(ctx, `SELECT `+loopCols+`, coalesce(last_event_id, ''), coalesce(completed_event_id, '')
			FROM session_loops WHERE session_key = $1 AND kind = 'loop' FOR UPDATE`, key), &last, &completed)
		if err != nil || l == nil {
			return err
		}
		if last == "" || last == completed || l.Status != loop.Active {
			return nil
		}
		o := loop.Complete(*l, "", loop.Verdict{}, s.now())
		c = Completion{Message: o.Message, Label: o.Label}
		return s.writeLoop(ctx, tx, key, o.State, last, "")
	})
	return c, err
}
