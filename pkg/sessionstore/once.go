package sessionstore

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// Answer is what a chat command answered: the text of its notice, the
// generation it carries and its seq among the notices about the inbound
// event (the bus message id and delivery's idempotency key are made of
// the event's id and the seq).
type Answer struct {
	Text       string
	Generation int64
	Seq        int
}

// Once applies a chat command's effect exactly once per inbound event,
// across redeliveries of the event. eventID is the event's dedupe id,
// key the session key the command is about. effect runs with a Store
// whose statements belong to one transaction, which also records the
// event with the answer effect returns (command_effects, migration
// 00116): all of it commits or none. An event recorded already (a
// redelivery after a crash between that commit and the record that the
// message was handled) runs nothing: Once returns the recorded answer
// and done true, for the caller to send it again under the same ids.
// Two deliveries of one event at once are serialised on the record's
// key: the second waits for the first to commit (then it is done) or
// roll back (then it applies the effect itself). An error of effect
// rolls everything back and records nothing. A store of another package
// (cron's) joins the transaction through tx.Tx.
func (s *Store) Once(ctx context.Context, eventID, key string, effect func(ctx context.Context, tx *Store) (Answer, error)) (a Answer, done bool, err error) {
	err = pgx.BeginFunc(ctx, s.db, func(tx pgx.Tx) error {
		a, done = Answer{}, false
		tag, err := tx.Exec(ctx, `INSERT INTO command_effects (event_id, session_key, created_at) VALUES ($1, $2, $3)
			ON CONFLICT (event_id) DO NOTHING`, eventID, key, s.now())
		if err != nil {
			return fmt.Errorf("record command effect: %w", err)
		}
		if tag.RowsAffected() == 0 {
			done = true
			if err := tx.QueryRow(ctx, `SELECT answer, generation, seq FROM command_effects WHERE event_id = $1`, eventID).
				Scan(&a.Text, &a.Generation, &a.Seq); err != nil {
				return fmt.Errorf("read command effect: %w", err)
			}
			return nil
		}
		c := *s
		c.db, c.pool, c.tx = tx, nil, tx
		if a, err = effect(ctx, &c); err != nil {
			return err
		}
		if a.Seq < 1 {
			a.Seq = 1
		}
		if _, err := tx.Exec(ctx, `UPDATE command_effects SET answer = $2, generation = $3, seq = $4 WHERE event_id = $1`,
			eventID, a.Text, a.Generation, a.Seq); err != nil {
			return fmt.Errorf("record command answer: %w", err)
		}
		return nil
	})
	return a, done, err
}

// Answered is the answer Once recorded for the event eventID, and
// whether it recorded one: for a command that is not applied through
// Once itself (one that starts a turn, or only reads) to answer a
// redelivery as Once answered the first delivery (the router's refusal
// while a turn ran, recorded through Once), instead of running.
func (s *Store) Answered(ctx context.Context, eventID string) (Answer, bool, error) {
	var a Answer
	err := s.db.QueryRow(ctx, `SELECT answer, generation, seq FROM command_effects WHERE event_id = $1`, eventID).
		Scan(&a.Text, &a.Generation, &a.Seq)
	if errors.Is(err, pgx.ErrNoRows) {
		return Answer{}, false, nil
	}
	if err != nil {
		return Answer{}, false, fmt.Errorf("read command effect: %w", err)
	}
	return a, true, nil
}

// Tx is the transaction of Once's effect, for the stores of other
// packages to run their statements in (cron.Store.InTx), so that their
// changes commit with the record of the event; nil outside an effect.
func (s *Store) Tx() pgx.Tx { return s.tx }
