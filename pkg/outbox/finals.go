package outbox

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/switchboard-chat/switchboard/pkg/pg"
)

// Final identifies a turn's final reply event: its seq and a digest of
// its body, the same for every copy of the event (a redelivery, a
// republication).
type Final struct {
	Seq    int64
	Digest []byte
}

// claimFinal records f as the turn's final unless one is recorded (or
// only reads when claim is false), and returns the final recorded, if
// any: f when this call recorded it. A row another transaction inserts
// at the same moment is not seen by the statement's snapshot: it returns
// no row, and the statement runs again.
const claimFinal = `
WITH ins AS (
  INSERT INTO delivery_turn_finals (turn_id, seq, digest, created_at)
  SELECT $1, $2, $3, $4 WHERE $5
  ON CONFLICT (turn_id) DO NOTHING
  RETURNING seq, digest)
SELECT seq, digest FROM ins
UNION ALL
SELECT seq, digest FROM delivery_turn_finals WHERE turn_id = $1`

// ClaimFinal decides whether the final reply event f of turn goes out:
// the first final of a turn that asks records itself and goes out, and
// so does that same final each time it comes back; a final with another
// seq or body is refused (false), so a turn whose attempts published two
// different finals shows one. With claim false f records nothing (a
// final that shows nothing, which a later one may still follow) and
// goes out unless another final was recorded. The commit does not wait
// for the WAL flush (pg.AsyncCommit): the final's rows, committed after
// it, flush it.
func (s *Store) ClaimFinal(ctx context.Context, turn string, f Final, now time.Time, claim bool) (bool, error) {
	for range 3 {
		b := &pgx.Batch{}
		b.Queue(pg.AsyncCommit)
		var got Final
		found := false
		b.Queue(claimFinal, turn, f.Seq, f.Digest, now, claim).Query(func(rows pgx.Rows) error {
			for rows.Next() {
				if found {
					continue
				}
				if err := rows.Scan(&got.Seq, &got.Digest); err != nil {
					return err
				}
				found = true
			}
			return rows.Err()
		})
		if err := s.db.SendBatch(ctx, b).Close(); err != nil {
			return false, fmt.Errorf("claim the final of turn %s: %w", turn, err)
		}
		switch {
		case found:
			return got.Seq == f.Seq && bytes.Equal(got.Digest, f.Digest), nil
		case !claim:
			return true, nil
		}
	}
	return false, fmt.Errorf("claim the final of turn %s: %w", turn, errClaimRace)
}

// errClaimRace: the turn's final was being recorded by another
// transaction on every try.
var errClaimRace = errors.New("recorded concurrently, not yet visible")

// PruneFinals forgets the turns' finals recorded before cutoff.
func (s *Store) PruneFinals(ctx context.Context, cutoff time.Time) error {
	if _, err := s.db.Exec(ctx, `DELETE FROM delivery_turn_finals WHERE created_at < $1`, cutoff); err != nil {
		return fmt.Errorf("prune turn finals: %w", err)
	}
	return nil
}
