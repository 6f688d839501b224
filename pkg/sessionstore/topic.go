package sessionstore

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// ErrTopicLinked: the conversation is another topic's of the chat (/topic
// <session-id>).
var ErrTopicLinked = errors.New("session is linked to another topic")

// ErrAmbiguous: a session id prefix names more than one conversation.
var ErrAmbiguous = errors.New("session id prefix is ambiguous")

// Telegram DM topic mode (/topic): per private chat, named by its DM
// session key without a thread (rootKey, migration 00128), and the
// conversations restored into its topics (migration 00129). A topic's
// session key is rootKey + ":" + its thread id.

// TopicMode reports whether rootKey's chat has topic mode on.
func (s *Store) TopicMode(ctx context.Context, rootKey string) (bool, error) {
	var on bool
	err := s.db.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM telegram_topic_modes WHERE root_key = $1)`, rootKey).Scan(&on)
	if err != nil {
		return false, fmt.Errorf("read topic mode: %w", err)
	}
	return on, nil
}

// EnableTopicMode turns rootKey's topic mode on; already reports it was.
func (s *Store) EnableTopicMode(ctx context.Context, rootKey, chatID, userID string) (already bool, err error) {
	tag, err := s.db.Exec(ctx, `INSERT INTO telegram_topic_modes (root_key, chat_id, user_id, enabled_at) VALUES ($1, $2, $3, $4)
		ON CONFLICT (root_key) DO NOTHING`, rootKey, chatID, userID, s.now())
	if err != nil {
		return false, fmt.Errorf("enable topic mode: %w", err)
	}
	return tag.RowsAffected() == 0, nil
}

// DisableTopicMode turns rootKey's topic mode off and deletes its topics'
// bindings; was reports it was on. The topics' sessions stay (their
// history, /sessions in a topic once it is on again).
func (s *Store) DisableTopicMode(ctx context.Context, rootKey string) (was bool, err error) {
	err = pgx.BeginFunc(ctx, s.db, func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, `DELETE FROM telegram_topic_modes WHERE root_key = $1`, rootKey)
		if err != nil {
			return fmt.Errorf("disable topic mode: %w", err)
		}
		was = tag.RowsAffected() > 0
		if _, err := tx.Exec(ctx, `DELETE FROM telegram_topic_bindings WHERE root_key = $1`, rootKey); err != nil {
			return fmt.Errorf("delete topic bindings: %w", err)
		}
		return nil
	})
	return was, err
}

// Owner is the session key a conversation (session id) was started or
// resumed under most recently, and its title; ErrNotFound when no key
// ever had it.
func (s *Store) Owner(ctx context.Context, sessionID string) (key, title string, err error) {
	err = s.db.QueryRow(ctx, `SELECT session_key, title FROM session_history WHERE session_id = $1
		ORDER BY started_at DESC LIMIT 1`, sessionID).Scan(&key, &title)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", "", ErrNotFound
	}
	if err != nil {
		return "", "", fmt.Errorf("find session: %w", err)
	}
	return key, title, nil
}

// ChatSessionByPrefix is the one conversation of rootKey's chat (its DM
// key and its topics' keys, as Unlinked) whose id starts with prefix:
// ErrNotFound when none does, ErrAmbiguous when more than one does.
// Other chats' conversations never count, so a prefix tells nothing of
// them.
func (s *Store) ChatSessionByPrefix(ctx context.Context, rootKey, prefix string) (string, error) {
	if prefix == "" {
		return "", ErrNotFound
	}
	rows, err := s.db.Query(ctx, `SELECT DISTINCT session_id FROM session_history
		WHERE (session_key = $1 OR starts_with(session_key, $1 || ':')) AND starts_with(session_id, $2)
		ORDER BY session_id LIMIT 2`, rootKey, prefix)
	if err != nil {
		return "", fmt.Errorf("find session by prefix: %w", err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return "", fmt.Errorf("find session by prefix: %w", err)
	}
	switch len(ids) {
	case 0:
		return "", ErrNotFound
	case 1:
		return ids[0], nil
	}
	return "", ErrAmbiguous
}

// LastAnswer is the text of the conversation's latest assistant message
// with text ("" for none).
func (s *Store) LastAnswer(ctx context.Context, sessionID string) (string, error) {
	var text string
	err := s.db.QueryRow(ctx, `SELECT content FROM transcript_messages WHERE session_id = $1 AND role = 'assistant'
		AND content <> '' ORDER BY id DESC LIMIT 1`, sessionID).Scan(&text)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("read last answer: %w", err)
	}
	return text, nil
}

// BindTopic makes sessionID, an earlier conversation, the current one of
// the topic whose session key is topicKey (rootKey:<threadID>), and
// records the binding. As Resume it advances the generation and drops
// waiting messages; the conversation joins the topic's history (/sessions
// there). It fails with ErrTopicLinked when another topic of the chat is
// on that conversation, and with ErrNotFound when topicKey has no session.
//
// The DM's main view's own current conversation moves into the topic:
// the main view (rootKey) goes on in a new conversation, as after a
// reset, fencing any turn of it still running (in topic mode it takes
// commands only). Else both keys would be on it, and once /topic off
// makes the main view a chat again the two could run turns on it at
// once and interleave its transcript. Hermes leaves it on both.
func (s *Store) BindTopic(ctx context.Context, rootKey, topicKey, threadID, userID, sessionID string) (Session, error) {
	now := s.now()
	var sess Session
	err := pgx.BeginFunc(ctx, s.db, func(tx pgx.Tx) error {
		var cur string
		if err := tx.QueryRow(ctx, `SELECT session_id FROM sessions WHERE session_key = $1 FOR UPDATE`, topicKey).Scan(&cur); err != nil {
			if errors.Is(err, pgx.ErrNoRows) {
				return ErrNotFound
			}
			return fmt.Errorf("lock session: %w", err)
		}
		// The main view's row before the conversation's lock, as a
		// resume there takes them: the topic's, the main view's, the
		// conversation's never wait on one another in a cycle.
		var rootCur string
		if err := tx.QueryRow(ctx, `SELECT session_id FROM sessions WHERE session_key = $1 FOR UPDATE`, rootKey).Scan(&rootCur); err != nil && !errors.Is(err, pgx.ErrNoRows) {
			return fmt.Errorf("lock the main view's session: %w", err)
		}
		// Serialise binds of one conversation: the unique binding row;
		// and with resumes of it (heldElsewhere): the conversation's lock.
		if err := lockConversation(ctx, tx, sessionID); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `DELETE FROM telegram_topic_bindings b USING sessions s
			WHERE b.session_key = s.session_key AND s.session_id <> b.session_id AND b.session_id = $1`, sessionID); err != nil {
			return fmt.Errorf("drop stale topic binding: %w", err)
		}
		var linked bool
		if err := tx.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM sessions WHERE session_id = $1 AND session_key <> $2
			AND starts_with(session_key, $3 || ':'))
			OR EXISTS (SELECT 1 FROM telegram_topic_bindings WHERE session_id = $1 AND session_key <> $2)`,
			sessionID, topicKey, rootKey).Scan(&linked); err != nil {
			return fmt.Errorf("check topic links: %w", err)
		}
		if linked {
			return ErrTopicLinked
		}
		var title string
		err := tx.QueryRow(ctx, `SELECT title FROM session_history WHERE session_id = $1 ORDER BY started_at DESC LIMIT 1`, sessionID).Scan(&title)
		if errors.Is(err, pgx.ErrNoRows) {
			return ErrNotFound
		}
		if err != nil {
			return fmt.Errorf("read session title: %w", err)
		}
		if cur != sessionID {
			if _, err := tx.Exec(ctx, `UPDATE session_history SET ended_at = $3, end_reason = 'switched'
				WHERE session_key = $1 AND session_id = $2 AND ended_at IS NULL`, topicKey, cur, now); err != nil {
				return fmt.Errorf("end session history: %w", err)
			}
		}
		if _, err := tx.Exec(ctx, `INSERT INTO session_history (session_key, session_id, title, started_at) VALUES ($1, $2, $3, $4)
			ON CONFLICT (session_key, session_id) DO UPDATE SET ended_at = NULL, end_reason = ''`, topicKey, sessionID, title, now); err != nil {
			return fmt.Errorf("record session history: %w", err)
		}
		if rootCur == sessionID {
			if err := moveOffRoot(ctx, tx, rootKey, sessionID, now); err != nil {
				return err
			}
		}
		if _, err := tx.Exec(ctx, `INSERT INTO telegram_topic_bindings (session_key, root_key, thread_id, session_id, user_id, bound_at)
			VALUES ($1, $2, $3, $4, $5, $6)
			ON CONFLICT (session_key) DO UPDATE SET session_id = EXCLUDED.session_id, user_id = EXCLUDED.user_id, bound_at = EXCLUDED.bound_at`,
			topicKey, rootKey, threadID, sessionID, userID, now); err != nil {
			return fmt.Errorf("bind topic: %w", err)
		}
		if cur == sessionID {
			sess, err = scanSession(tx.QueryRow(ctx, `SELECT `+sessionCols+` FROM sessions WHERE session_key = $1`, topicKey))
			return err
		}
		if _, err := tx.Exec(ctx, `DELETE FROM session_queue WHERE session_key = $1`, topicKey); err != nil {
			return fmt.Errorf("clear queue: %w", err)
		}
		sess, err = scanSession(tx.QueryRow(ctx, `UPDATE sessions SET session_id = $2, title = $3, generation = generation + 1,
			model_override = '', resume_pending = true, system_prompt_fingerprint = '', updated_at = $4, last_activity_at = $4
			WHERE session_key = $1 RETURNING `+sessionCols, topicKey, sessionID, title, now))
		if err != nil {
			return fmt.Errorf("bind session to topic: %w", err)
		}
		return nil
	})
	return sess, err
}

// moveOffRoot puts rootKey, the main view whose conversation sessionID
// a topic takes (BindTopic), on a new conversation: its history of
// sessionID ends ("moved"), the next generation fences a turn of it
// still running, and its counters and settings, the conversation's,
// start afresh, as a reset's. Its waiting rows stay, not dropped
// unanswered: in topic mode the main view queues no message (one
// queued before the mode went on runs in the new conversation), and a
// memory flush names its own conversation.
func moveOffRoot(ctx context.Context, tx pgx.Tx, rootKey, sessionID string, now time.Time) error {
	id := NewSessionID(now)
	if _, err := tx.Exec(ctx, `UPDATE session_history SET ended_at = $3, end_reason = 'moved'
		WHERE session_key = $1 AND session_id = $2 AND ended_at IS NULL`, rootKey, sessionID, now); err != nil {
		return fmt.Errorf("end the main view's session history: %w", err)
	}
	if _, err := tx.Exec(ctx, `INSERT INTO session_history (session_key, session_id, started_at) VALUES ($1, $2, $3)`, rootKey, id, now); err != nil {
		return fmt.Errorf("record the main view's session history: %w", err)
	}
	if _, err := tx.Exec(ctx, `UPDATE sessions SET session_id = $2, generation = generation + 1, title = '', model_override = '',
		input_tokens = 0, output_tokens = 0, cache_read_tokens = 0, cache_write_tokens = 0,
		system_prompt_fingerprint = '', resume_pending = false, updated_at = $3
		WHERE session_key = $1`, rootKey, id, now); err != nil {
		return fmt.Errorf("move the main view to a new session: %w", err)
	}
	return nil
}

// Unlinked lists up to limit conversations of rootKey's chat (its DM key
// and its topics' keys) that no topic of it is on now, newest first: the
// ones /topic <session-id> can restore.
func (s *Store) Unlinked(ctx context.Context, rootKey string, limit int) ([]History, error) {
	rows, err := s.db.Query(ctx, `SELECT session_id, title, started_at FROM (
			SELECT DISTINCT ON (h.session_id) h.session_id, h.title, h.started_at FROM session_history h
			WHERE (h.session_key = $1 OR starts_with(h.session_key, $1 || ':'))
			AND NOT EXISTS (SELECT 1 FROM sessions s WHERE s.session_id = h.session_id AND starts_with(s.session_key, $1 || ':'))
			ORDER BY h.session_id, h.started_at DESC) u
		ORDER BY started_at DESC, session_id DESC LIMIT $2`, rootKey, limit)
	if err != nil {
		return nil, fmt.Errorf("list unlinked sessions: %w", err)
	}
	defer rows.Close()
	var out []History
	for rows.Next() {
		var h History
		if err := rows.Scan(&h.SessionID, &h.Title, &h.StartedAt); err != nil {
			return nil, fmt.Errorf("scan unlinked session: %w", err)
		}
		out = append(out, h)
	}
	return out, rows.Err()
}

// TopicKey is the session key of thread's topic in the DM whose key is
// rootKey; TopicThread reads the thread back ("" when key is not one of
// rootKey's topics).
func TopicKey(rootKey, thread string) string { return rootKey + ":" + thread }

// TopicThread is the thread of key when it is one of rootKey's topics.
func TopicThread(rootKey, key string) string {
	t, ok := strings.CutPrefix(key, rootKey+":")
	if !ok {
		return ""
	}
	return t
}
