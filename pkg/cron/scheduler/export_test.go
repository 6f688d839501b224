package scheduler

import (
	"context"

	"github.com/jackc/pgx/v5"
)

// SetCommit replaces how a run's transaction ends.
func SetCommit(s *Scheduler, f func(ctx context.Context, tx pgx.Tx) error) { s.commit = f }
