package outbox

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
)

// Channel is one entry of the channel directory: a named chat (or thread)
// a gateway has seen, so proactive sends can address it as
// "platform:#name".
type Channel struct {
	Platform string
	Account  string
	ChatID   string
	ThreadID string
	Name     string
	// Kind is the chat type (channel, group, forum topic …), informative.
	Kind string
}

// UpsertChannel records or renames a channel. Gateways call it whenever
// they learn a chat's name.
func (s *Store) UpsertChannel(ctx context.Context, c Channel) error {
	name := strings.TrimPrefix(strings.TrimSpace(c.Name), "#")
	if c.Platform == "" || c.ChatID == "" || name == "" {
		return errors.New("upsert channel: platform, chat id and name are required")
	}
	_, err := s.db.Exec(ctx, `
INSERT INTO delivery_channels (platform, account, chat_id, thread_id, name, kind, updated_at)
VALUES ($1, $2, $3, $4, $5, $6, now())
ON CONFLICT (platform, account, chat_id, thread_id)
DO UPDATE SET name = EXCLUDED.name, kind = EXCLUDED.kind, updated_at = now()`,
		c.Platform, c.Account, c.ChatID, c.ThreadID, name, c.Kind)
	if err != nil {
		return fmt.Errorf("upsert %s channel: %w", c.Platform, err)
	}
	return nil
}

// LookupChannel finds a channel of a platform by name, case-insensitively,
// with or without a leading "#". When several chats share the name, the
// most recently seen wins.
func (s *Store) LookupChannel(ctx context.Context, platform, name string) (Channel, error) {
	name = strings.TrimPrefix(strings.TrimSpace(name), "#")
	var c Channel
	err := s.db.QueryRow(ctx, `
SELECT platform, account, chat_id, thread_id, name, kind FROM delivery_channels
WHERE platform = $1 AND lower(name) = lower($2)
ORDER BY updated_at DESC LIMIT 1`, platform, name).
		Scan(&c.Platform, &c.Account, &c.ChatID, &c.ThreadID, &c.Name, &c.Kind)
	if errors.Is(err, pgx.ErrNoRows) {
		return Channel{}, fmt.Errorf("channel %s:#%s: %w", platform, name, ErrNotFound)
	}
	if err != nil {
		return Channel{}, fmt.Errorf("lookup channel %s:#%s: %w", platform, name, err)
	}
	return c, nil
}
