// Package toolapproval lists and revokes the standing approvals of
// dangerous tool calls (agent_tool_approvals, migration 00207) for the
// admin API. A chat grants them: "/approve session" for the rest of one
// conversation, "/approve always" for a user from then on; the worker
// writes and reads them on a turn's path (services/worker/internal/store)
// at every dangerous call, so a revoked approval asks again from the
// next call, on every replica.
package toolapproval

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Scopes of a standing approval, as the worker records them.
const (
	// Session is "/approve session": the subject is a conversation's
	// session id.
	Session = "session"
	// User is "/approve always": the subject is a user key,
	// <platform>:<user id> in a direct chat, session:<session key> for a
	// group's, channel's or thread's (pkg/memorygate Owner).
	User = "user"
)

// ErrBadScope is a scope that is neither Session nor User.
var ErrBadScope = errors.New("scope must be user or session")

// ParseScope reads a scope as an operator types it ("" stays "").
func ParseScope(s string) (string, error) {
	switch s = strings.ToLower(strings.TrimSpace(s)); s {
	case "", Session, User:
		return s, nil
	}
	return "", fmt.Errorf("%w, not %q", ErrBadScope, s)
}

// Approval is one standing approval.
type Approval struct {
	Scope     string
	Subject   string
	Pattern   string
	CreatedAt time.Time
	// SessionKey is, for scope Session, the key whose conversation the
	// subject is, read from its transcript ("" when none is left).
	SessionKey string
}

// Position is where a listing stopped: it goes on after this approval
// (the zero value starts at the first).
type Position struct {
	Scope, Subject, Pattern string
}

// Filter narrows a listing; an empty field matches all.
type Filter struct {
	Scope   string
	Subject string
	Pattern string
	// SessionKey keeps the approvals of that key's conversations (its
	// current one and those it left: scope Session) and of the user key
	// its turns run as (scope User, subject Owner).
	SessionKey string
	// Owner is the user key the turns of SessionKey run as
	// (memorygate.Owner of its source: <platform>:<user> in a direct
	// chat); "" is session:<SessionKey>, a group's.
	Owner string
}

// Store reads and deletes standing approvals.
type Store struct {
	db *pgxpool.Pool
}

// NewStore returns a Store on db.
func NewStore(db *pgxpool.Pool) *Store { return &Store{db: db} }

// sessionKeyOf is the session key of an approval a's conversation, from
// its transcript (indexed by session id; the sessions and history tables
// are not): every conversation that granted one recorded the turn that
// asked.
const sessionKeyOf = `COALESCE(CASE WHEN a.scope = 'session' THEN
	(SELECT m.session_key FROM transcript_messages m WHERE m.session_id = a.subject LIMIT 1) END, '')`

// List returns up to limit approvals matching f after position after,
// ordered by scope, subject and pattern.
func (s *Store) List(ctx context.Context, f Filter, after Position, limit int) ([]Approval, error) {
	owner := f.Owner
	if owner == "" {
		owner = "session:" + f.SessionKey
	}
	rows, err := s.db.Query(ctx, `SELECT a.scope, a.subject, a.pattern, a.created_at, `+sessionKeyOf+`
FROM agent_tool_approvals a
WHERE ($1 = '' OR a.scope = $1) AND ($2 = '' OR a.subject = $2) AND ($3 = '' OR a.pattern = $3)
  AND ($4 = '' OR (a.scope = 'user' AND a.subject = $9)
       OR (a.scope = 'session' AND a.subject IN (
            SELECT session_id FROM sessions WHERE session_key = $4
            UNION SELECT session_id FROM session_history WHERE session_key = $4)))
  AND (a.scope, a.subject, a.pattern) > ($5, $6, $7)
ORDER BY a.scope, a.subject, a.pattern
LIMIT $8`, f.Scope, f.Subject, f.Pattern, f.SessionKey, after.Scope, after.Subject, after.Pattern, limit, owner)
	if err != nil {
		return nil, fmt.Errorf("list tool approvals: %w", err)
	}
	list, err := pgx.CollectRows(rows, scan)
	if err != nil {
		return nil, fmt.Errorf("list tool approvals: %w", err)
	}
	return list, nil
}

// Revoke deletes subject's approvals in scope: the one of pattern, or
// every one when pattern is "". It returns what it deleted, by pattern.
func (s *Store) Revoke(ctx context.Context, scope, subject, pattern string) ([]Approval, error) {
	if scope != Session && scope != User {
		return nil, ErrBadScope
	}
	if subject == "" {
		return nil, errors.New("revoke tool approvals: subject required")
	}
	rows, err := s.db.Query(ctx, `WITH a AS (
	DELETE FROM agent_tool_approvals WHERE scope = $1 AND subject = $2 AND ($3 = '' OR pattern = $3)
	RETURNING scope, subject, pattern, created_at)
SELECT a.scope, a.subject, a.pattern, a.created_at, `+sessionKeyOf+` FROM a ORDER BY a.pattern`, scope, subject, pattern)
	if err != nil {
		return nil, fmt.Errorf("revoke tool approvals: %w", err)
	}
	list, err := pgx.CollectRows(rows, scan)
	if err != nil {
		return nil, fmt.Errorf("revoke tool approvals: %w", err)
	}
	return list, nil
}

func scan(row pgx.CollectableRow) (Approval, error) {
	var a Approval
	err := row.Scan(&a.Scope, &a.Subject, &a.Pattern, &a.CreatedAt, &a.SessionKey)
	return a, err
}
