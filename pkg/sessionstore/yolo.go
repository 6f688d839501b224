package sessionstore

import (
	"context"
	"fmt"
)

// Yolo reports whether YOLO mode (/yolo) is on for the chat key.
func (s *Store) Yolo(ctx context.Context, key string) (bool, error) {
	var on bool
	if err := s.db.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM session_yolo WHERE session_key = $1)`, key).Scan(&on); err != nil {
		return false, fmt.Errorf("read yolo: %w", err)
	}
	return on, nil
}

// SetYolo turns YOLO mode on or off for the chat key; by is who did
// ("<platform>:<user id>"). Setting what is set changes nothing.
func (s *Store) SetYolo(ctx context.Context, key string, on bool, by string) error {
	var err error
	if on {
		_, err = s.db.Exec(ctx, `INSERT INTO session_yolo (session_key, set_by, set_at) VALUES ($1, $2, $3)
			ON CONFLICT (session_key) DO NOTHING`, key, by, s.now())
	} else {
		_, err = s.db.Exec(ctx, `DELETE FROM session_yolo WHERE session_key = $1`, key)
	}
	if err != nil {
		return fmt.Errorf("set yolo: %w", err)
	}
	return nil
}

// ToggleYolo turns YOLO mode off for the chat key if it is on, on
// otherwise, in one statement, and reports whether it is now on.
func (s *Store) ToggleYolo(ctx context.Context, key, by string) (bool, error) {
	var on bool
	err := s.db.QueryRow(ctx, `WITH d AS (DELETE FROM session_yolo WHERE session_key = $1 RETURNING 1),
		i AS (INSERT INTO session_yolo (session_key, set_by, set_at) SELECT $1, $2, $3 WHERE NOT EXISTS (SELECT 1 FROM d)
			ON CONFLICT (session_key) DO NOTHING RETURNING 1)
		SELECT EXISTS (SELECT 1 FROM i)`, key, by, s.now()).Scan(&on)
	if err != nil {
		return false, fmt.Errorf("toggle yolo: %w", err)
	}
	return on, nil
}
