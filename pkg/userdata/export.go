package userdata

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/switchboard-chat/switchboard/pkg/export"
	"github.com/switchboard-chat/switchboard/pkg/sessionstore"
)

// Document is what Export writes: everything held of one user, as JSON.
type Document struct {
	Platform   string    `json:"platform"`
	UserID     string    `json:"user_id"`
	ExportedAt time.Time `json:"exported_at"`
	// Sessions are the user's own, each with its conversations.
	Sessions []Session `json:"sessions"`
	// SharedSessions are the keys of sessions others share whose last
	// message the user sent; their content is everyone's, and not
	// exported.
	SharedSessions []string      `json:"shared_sessions"`
	Memories       []Memory      `json:"memories"`
	MemoryWrites   []MemoryWrite `json:"memory_writes"`
	ToolApprovals  []Approval    `json:"tool_approvals"`
	CronJobs       []CronJob     `json:"cron_jobs"`
	Pairing        []Pairing     `json:"pairing"`
}

// Session is one of the user's own sessions: every conversation it has
// had (the current one last), each as /save json writes it (Hermes's
// export_session).
type Session struct {
	Key           string            `json:"session_key"`
	Conversations []json.RawMessage `json:"conversations"`
}

// Memory is one durable note.
type Memory struct {
	UserKey   string    `json:"user_key"`
	ID        int64     `json:"id"`
	Content   string    `json:"content"`
	CreatedAt time.Time `json:"created_at"`
}

// MemoryWrite is a memory change the approval gate held: waiting, or
// decided.
type MemoryWrite struct {
	UserKey   string    `json:"user_key"`
	ID        string    `json:"id"`
	Action    string    `json:"action"`
	Content   string    `json:"content"`
	Summary   string    `json:"summary"`
	State     string    `json:"state"`
	CreatedAt time.Time `json:"created_at"`
}

// Approval is a standing approval of a dangerous tool call.
type Approval struct {
	Scope     string    `json:"scope"`
	Subject   string    `json:"subject"`
	Pattern   string    `json:"pattern"`
	CreatedAt time.Time `json:"created_at"`
}

// CronJob is a scheduled job the user made.
type CronJob struct {
	ID        string    `json:"id"`
	Name      string    `json:"name"`
	Prompt    string    `json:"prompt"`
	Schedule  string    `json:"schedule"`
	Deliver   string    `json:"deliver"`
	State     string    `json:"state"`
	CreatedAt time.Time `json:"created_at"`
}

// Pairing is the user's pairing on a platform: approved, or a code
// waiting.
type Pairing struct {
	State     string    `json:"state"`
	UserName  string    `json:"user_name"`
	CreatedAt time.Time `json:"created_at"`
}

// Export reads everything held of u (an access request): their own
// sessions' conversations, and what they own. It reads as it goes, in
// no transaction: a turn running meanwhile may have committed some of
// its steps.
func Export(ctx context.Context, db *pgxpool.Pool, u User, now time.Time) (Document, error) {
	u, err := u.Normalized()
	if err != nil {
		return Document{}, fmt.Errorf("export: %w", err)
	}
	found, err := Find(ctx, db, u)
	if err != nil {
		return Document{}, fmt.Errorf("export: %w", err)
	}
	doc := Document{Platform: u.Platform, UserID: u.ID, ExportedAt: now.UTC(), Sessions: []Session{},
		SharedSessions: append([]string{}, found.Shared...)}
	store := sessionstore.New(db)
	for _, key := range found.Own {
		s, err := exportSession(ctx, db, store, key, u.Platform)
		if err != nil {
			return Document{}, fmt.Errorf("export session %s: %w", key, err)
		}
		doc.Sessions = append(doc.Sessions, s)
	}
	keys, forms := found.UserKeys, IDForms(u)
	if doc.Memories, err = collect[Memory](ctx, db, `SELECT user_key, id, content, created_at
		FROM agent_memories WHERE user_key = ANY($1) ORDER BY id`, keys); err != nil {
		return Document{}, fmt.Errorf("export memories: %w", err)
	}
	if doc.MemoryWrites, err = collect[MemoryWrite](ctx, db, `SELECT user_key, id, action, content, summary, state, created_at
		FROM memory_pending_writes WHERE user_key = ANY($1) ORDER BY created_at, id`, keys); err != nil {
		return Document{}, fmt.Errorf("export memory writes: %w", err)
	}
	if doc.ToolApprovals, err = collect[Approval](ctx, db, `SELECT scope, subject, pattern, created_at
		FROM agent_tool_approvals WHERE scope = 'user' AND subject = ANY($1) ORDER BY subject, pattern`, keys); err != nil {
		return Document{}, fmt.Errorf("export tool approvals: %w", err)
	}
	if doc.CronJobs, err = collect[CronJob](ctx, db, `SELECT id, name, prompt, schedule_display, deliver, state, created_at
		FROM cron_jobs WHERE owner = ANY($1) ORDER BY created_at, id`, keys); err != nil {
		return Document{}, fmt.Errorf("export cron jobs: %w", err)
	}
	// Never a code's hash: what the user was shown is theirs, not the
	// means to check it.
	if doc.Pairing, err = collect[Pairing](ctx, db, `SELECT 'approved', user_name, approved_at FROM pairing_approved
		WHERE platform = $1 AND user_id = ANY($2)
		UNION ALL SELECT state, user_name, created_at FROM pairing_codes WHERE platform = $1 AND user_id = ANY($2)
		ORDER BY 3`, u.Platform, forms); err != nil {
		return Document{}, fmt.Errorf("export pairing: %w", err)
	}
	return doc, nil
}

// collect reads the rows of sql as T, field by column ([] for none).
func collect[T any](ctx context.Context, db *pgxpool.Pool, sql string, args ...any) ([]T, error) {
	rows, err := db.Query(ctx, sql, args...)
	if err != nil {
		return nil, err
	}
	out, err := pgx.CollectRows(rows, pgx.RowToStructByPos[T])
	if out == nil {
		out = []T{}
	}
	return out, err
}

// exportSession reads every conversation of the session key, oldest
// first, each rendered as /save json renders it.
func exportSession(ctx context.Context, db *pgxpool.Pool, store *sessionstore.Store, key, platform string) (Session, error) {
	rows, err := db.Query(ctx, `SELECT session_id, title, started_at FROM session_history WHERE session_key = $1
		UNION ALL SELECT s.session_id, s.title, s.created_at FROM sessions s WHERE s.session_key = $1
			AND NOT EXISTS (SELECT 1 FROM session_history h WHERE h.session_key = $1 AND h.session_id = s.session_id)
		ORDER BY 3, 1`, key)
	if err != nil {
		return Session{}, fmt.Errorf("read conversations: %w", err)
	}
	type conversation struct {
		ID, Title string
		Started   time.Time
	}
	convs, err := pgx.CollectRows(rows, pgx.RowToStructByPos[conversation])
	if err != nil {
		return Session{}, fmt.Errorf("read conversations: %w", err)
	}
	out := Session{Key: key, Conversations: []json.RawMessage{}}
	for _, c := range convs {
		s, err := store.Export(ctx, key, c.ID, 0)
		if err != nil {
			return Session{}, err
		}
		s.Title, s.Platform, s.Started = c.Title, platform, c.Started
		b, err := export.Render(s, "json")
		if err != nil {
			return Session{}, err
		}
		out.Conversations = append(out.Conversations, json.RawMessage(bytes.TrimSpace(b)))
	}
	return out, nil
}

// JSON is d as an indented JSON document.
func (d Document) JSON() ([]byte, error) {
	b, err := json.MarshalIndent(d, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("encode export: %w", err)
	}
	return append(b, '\n'), nil
}
