package sessionstore

import (
	"context"
	"errors"
	"fmt"
	"math"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"google.golang.org/protobuf/proto"

	eventsv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/events/v1"
	"github.com/switchboard-chat/switchboard/pkg/goal"
)

// GoalEventPrefix starts the event id of a goal's continuation in the
// session's queue: goal:<turn id> for one the judge queued after a
// turn, goal:resume:<event id> for /goal resume's.
const GoalEventPrefix = "goal:"

// continuationSeq sorts a continuation after every message of the
// session's queue, whenever they came: a real message always goes first.
const continuationSeq = math.MaxInt64

// goalCols are session_goals' columns scanGoal reads.
const goalCols = `goal, status, turns_used, max_turns, subgoals, last_verdict, last_reason, paused_reason,
	parse_failures, transport_failures`

func scanGoal(r rowScanner) (*goal.State, error) {
	var g goal.State
	err := r.Scan(&g.Goal, &g.Status, &g.TurnsUsed, &g.MaxTurns, &g.Subgoals, &g.LastVerdict, &g.LastReason,
		&g.PausedReason, &g.ParseFailures, &g.TransportFailures)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read goal: %w", err)
	}
	return &g, nil
}

// Goal returns the standing goal of the key's conversation sessionID,
// nil when it has none (none set, or set in another conversation).
func (s *Store) Goal(ctx context.Context, key, sessionID string) (*goal.State, error) {
	return scanGoal(s.db.QueryRow(ctx, `SELECT `+goalCols+` FROM session_goals WHERE session_key = $1 AND session_id = $2`, key, sessionID))
}

// SetGoal sets the standing goal of the key's conversation sessionID,
// active with a fresh budget of maxTurns, in place of any goal the key
// had (its continuations waiting in the queue are dropped).
func (s *Store) SetGoal(ctx context.Context, key, sessionID, text string, maxTurns int) (goal.State, error) {
	g := goal.State{Goal: text, Status: goal.Active, MaxTurns: maxTurns, Subgoals: []string{}}
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		now := s.now()
		if _, err := tx.Exec(ctx, `INSERT INTO session_goals (session_key, session_id, goal, status, max_turns, created_at, updated_at)
			VALUES ($1, $2, $3, 'active', $4, $5, $5)
			ON CONFLICT (session_key) DO UPDATE SET session_id = $2, goal = $3, status = 'active', turns_used = 0, max_turns = $4,
				subgoals = '{}', last_verdict = '', last_reason = '', paused_reason = '', parse_failures = 0, transport_failures = 0,
				created_at = $5, updated_at = $5`, key, sessionID, text, maxTurns, now); err != nil {
			return fmt.Errorf("set goal: %w", err)
		}
		return s.goalSideEffects(ctx, tx, key, sessionID, goal.Active)
	})
	return g, err
}

// UpdateGoal changes the standing goal of the key's conversation
// sessionID with change, under the goal row's lock, and reports the goal
// after it (nil, without calling change, when the conversation has
// none). A goal that is no longer active drops its continuations waiting
// in the queue (Hermes's _clear_goal_pending_continuations), so a
// paused or cleared goal queues no further turn.
func (s *Store) UpdateGoal(ctx context.Context, key, sessionID string, change func(*goal.State) error) (*goal.State, error) {
	var out *goal.State
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		g, err := scanGoal(tx.QueryRow(ctx, `SELECT `+goalCols+` FROM session_goals WHERE session_key = $1 AND session_id = $2 FOR UPDATE`, key, sessionID))
		if err != nil || g == nil {
			out = nil
			return err
		}
		if err := change(g); err != nil {
			return err
		}
		if err := s.writeGoal(ctx, tx, key, sessionID, *g); err != nil {
			return err
		}
		out = g
		return nil
	})
	return out, err
}

// writeGoal stores g as the key's goal.
func (s *Store) writeGoal(ctx context.Context, tx pgx.Tx, key, sessionID string, g goal.State) error {
	if g.Subgoals == nil {
		g.Subgoals = []string{}
	}
	if _, err := tx.Exec(ctx, `UPDATE session_goals SET status = $3, turns_used = $4, max_turns = $5, subgoals = $6, last_verdict = $7,
		last_reason = $8, paused_reason = $9, parse_failures = $10, transport_failures = $11, updated_at = $12
		WHERE session_key = $1 AND session_id = $2`, key, sessionID, g.Status, g.TurnsUsed, g.MaxTurns, g.Subgoals,
		g.LastVerdict, g.LastReason, g.PausedReason, g.ParseFailures, g.TransportFailures, s.now()); err != nil {
		return fmt.Errorf("write goal: %w", err)
	}
	return s.goalSideEffects(ctx, tx, key, sessionID, g.Status)
}

// goalSideEffects keeps the session row's goal_session_id with the
// goal's status and drops the waiting continuations of a goal that is
// not active.
func (s *Store) goalSideEffects(ctx context.Context, tx pgx.Tx, key, sessionID, status string) error {
	active := ""
	if status == goal.Active {
		active = sessionID
	}
	if _, err := tx.Exec(ctx, `UPDATE sessions SET goal_session_id = $2 WHERE session_key = $1 AND goal_session_id <> $2`, key, active); err != nil {
		return fmt.Errorf("mark session goal: %w", err)
	}
	if status != goal.Active {
		if _, err := tx.Exec(ctx, `DELETE FROM session_queue WHERE session_key = $1 AND starts_with(event_id, $2)`, key, GoalEventPrefix); err != nil {
			return fmt.Errorf("drop goal continuations: %w", err)
		}
	}
	return nil
}

// inTx runs fn in a transaction (a savepoint inside Once's), after the
// turn's fence when s is Fenced.
func (s *Store) inTx(ctx context.Context, fn func(pgx.Tx) error) error {
	f := s.fence
	if f == nil {
		return pgx.BeginFunc(ctx, s.db, fn)
	}
	return pgx.BeginFunc(ctx, s.db, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SELECT switchboard_fence($1, $2)`, f.key, f.gen); err != nil {
			var pe *pgconn.PgError
			if errors.As(err, &pe) && pe.Code == fenceCode {
				return fmt.Errorf("%s: %w", pe.Message, ErrStaleGeneration)
			}
			return fmt.Errorf("fence: %w", err)
		}
		return fn(tx)
	})
}

// Verdict is the recorded outcome of the goal judge on one turn.
type Verdict struct {
	// Message is the status line for the chat ("" none: the goal was
	// not active when the verdict came).
	Message string
	Verdict string
	// Continued: a continuation was queued (or one was waiting already).
	Continued bool
	// Replayed: the turn's verdict was recorded before (a retried or
	// redelivered turn); nothing changed now.
	Replayed bool
}

// RecordVerdict records the judge's verdict j on the turn turnID of the
// key's conversation sessionID, in one transaction: the verdict's
// record, the goal's new state (goal.Evaluate) and, when it continues,
// the continuation — cont's message, under the event id
// goal:<turn id>, after every message waiting — in the session's queue,
// the same queue the user's messages wait in. A verdict recorded before
// for the turn is returned as it was, changing nothing, so a retry
// neither counts the turn twice nor queues a second continuation. When
// a continuation waits already (the judge of a turn before queued it and
// a user's message went ahead of it) none more is queued. A goal that is
// no longer active (paused, cleared, another conversation) takes no
// verdict: the Verdict is empty. The records are deleted by the session
// retention (pkg/retention) once a day old, or with their session.
func (s *Store) RecordVerdict(ctx context.Context, key, sessionID, turnID string, j goal.Judged,
	cont func(goal.State) *eventsv1.MessageReceived) (Verdict, error) {
	var v Verdict
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		v = Verdict{}
		err := tx.QueryRow(ctx, `SELECT message, verdict, continued FROM goal_verdicts WHERE turn_id = $1`, turnID).Scan(&v.Message, &v.Verdict, &v.Continued)
		if err == nil {
			v.Replayed = true
			return nil
		}
		if !errors.Is(err, pgx.ErrNoRows) {
			return fmt.Errorf("read goal verdict: %w", err)
		}
		g, err := scanGoal(tx.QueryRow(ctx, `SELECT `+goalCols+` FROM session_goals WHERE session_key = $1 AND session_id = $2 FOR UPDATE`, key, sessionID))
		if err != nil || g == nil || g.Status != goal.Active {
			return err
		}
		d := goal.Evaluate(*g, j)
		if err := s.writeGoal(ctx, tx, key, sessionID, d.State); err != nil {
			return err
		}
		if d.Continue {
			ev := cont(d.State)
			ev.EventId = GoalEventPrefix + turnID
			c := *s
			c.db = tx
			if err := c.EnqueueContinuation(ctx, key, ev); err != nil {
				return err
			}
		}
		v = Verdict{Message: d.Message, Verdict: j.Verdict, Continued: d.Continue}
		if _, err := tx.Exec(ctx, `INSERT INTO goal_verdicts (turn_id, session_key, verdict, reason, message, continued, created_at)
			VALUES ($1, $2, $3, $4, $5, $6, $7)`, turnID, key, j.Verdict, j.Reason, d.Message, d.Continue, s.now()); err != nil {
			return fmt.Errorf("record goal verdict: %w", err)
		}
		return nil
	})
	return v, err
}

// IsGoalContinuation reports whether a queued message is a goal's
// continuation rather than the user's.
func IsGoalContinuation(ev *eventsv1.MessageReceived) bool {
	return len(ev.GetEventId()) > len(GoalEventPrefix) && ev.GetEventId()[:len(GoalEventPrefix)] == GoalEventPrefix
}

// EnqueueContinuation queues ev, a goal's continuation (its event id
// starts with GoalEventPrefix), after every message waiting for the
// session, unless one waits already.
func (s *Store) EnqueueContinuation(ctx context.Context, key string, ev *eventsv1.MessageReceived) error {
	data, err := proto.Marshal(ev)
	if err != nil {
		return fmt.Errorf("encode goal continuation: %w", err)
	}
	if _, err := s.db.Exec(ctx, `INSERT INTO session_queue (session_key, stream_seq, event_id, own_turn, event, enqueued_at, traceparent)
		SELECT $1, $2, $3, true, $4, $5, $6
		WHERE NOT EXISTS (SELECT 1 FROM session_queue WHERE session_key = $1 AND starts_with(event_id, $7))
		ON CONFLICT (session_key, event_id) DO NOTHING`,
		key, int64(continuationSeq), ev.GetEventId(), data, s.now(), traceParent(ctx), GoalEventPrefix); err != nil {
		return fmt.Errorf("queue goal continuation: %w", err)
	}
	return nil
}

// TurnVerdict returns the verdict recorded for the turn turnID, if any.
func (s *Store) TurnVerdict(ctx context.Context, turnID string) (v Verdict, found bool, err error) {
	err = s.db.QueryRow(ctx, `SELECT message, verdict, continued FROM goal_verdicts WHERE turn_id = $1`, turnID).Scan(&v.Message, &v.Verdict, &v.Continued)
	if errors.Is(err, pgx.ErrNoRows) {
		return Verdict{}, false, nil
	}
	if err != nil {
		return Verdict{}, false, fmt.Errorf("read goal verdict: %w", err)
	}
	v.Replayed = true
	return v, true, nil
}
