package sessionstore

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
)

// ToolProgressMode is the tool progress mode /verbose chose for platform
// in profile ("" for the default profile), "" when none was chosen.
func (s *Store) ToolProgressMode(ctx context.Context, profile, platform string) (string, error) {
	var mode string
	err := s.db.QueryRow(ctx, `SELECT mode FROM tool_progress_modes WHERE profile = $1 AND platform = $2`,
		profile, strings.ToLower(platform)).Scan(&mode)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("read tool progress mode: %w", err)
	}
	return mode, nil
}

// SetToolProgressMode records mode (off, new, all or verbose) as the tool
// progress mode of platform in profile, chosen by by.
func (s *Store) SetToolProgressMode(ctx context.Context, profile, platform, mode, by string) error {
	_, err := s.db.Exec(ctx, `INSERT INTO tool_progress_modes (profile, platform, mode, set_by, set_at)
		VALUES ($1, $2, $3, $4, $5)
		ON CONFLICT (profile, platform) DO UPDATE SET mode = EXCLUDED.mode, set_by = EXCLUDED.set_by, set_at = EXCLUDED.set_at`,
		profile, strings.ToLower(platform), mode, by, s.now())
	if err != nil {
		return fmt.Errorf("set tool progress mode: %w", err)
	}
	return nil
}
