package retention

import (
	"context"
	"fmt"
	"slices"

	"github.com/jackc/pgx/v5"

	"github.com/switchboard-chat/switchboard/pkg/userdata"
)

// Kinds of the rows a user owns, which Forget deletes besides their
// sessions'.
const (
	KindMemories       = "agent_memories"
	KindMemorySettings = "memory_write_approval"
	KindCronJobs       = "cron_jobs"
	KindPairing        = "pairing"
	KindTopicBindings  = "telegram_topic_bindings"
)

// Erasure is what Forget deleted, or would have in a dry run.
type Erasure struct {
	// Sessions are the keys of the user's own sessions deleted: their
	// direct chats and the sessions a group, channel or thread gives
	// them alone (group_sessions_per_user), with their /background
	// tasks'.
	Sessions []string
	// Busy are the user's own sessions left, because a turn runs, a
	// message waits in the queue or a reply is still to be sent: forget
	// the user again once they are idle.
	Busy []string
	// Shared are the sessions the user's message arrived last in that
	// others share (a group's, a thread's): kept, with what the user
	// wrote there.
	Shared []string
	// Rows deleted by kind: the sessions' (KindSessions, KindMessages, …)
	// and the user's own (KindMemories, KindMemoryWrites,
	// KindMemorySettings, KindApprovals, KindCronJobs, KindPairing,
	// KindTopicBindings).
	Rows map[string]int64
}

// filedKind is the kind Forget counts a userdata.Filed table's rows
// under: its name, but for the standing approvals (KindApprovals, as a
// prune counts a session's).
func filedKind(table string) string {
	if table == "agent_tool_approvals" {
		return KindApprovals
	}
	return table
}

// userIDDeletes delete what a user owns by their platform ($1) and the
// forms of their id ($2; pairing.UserID).
var userIDDeletes = []struct{ kind, sql string }{
	{KindPairing, `DELETE FROM pairing_approved WHERE platform = $1 AND user_id = ANY($2)`},
	{KindPairing, `DELETE FROM pairing_codes WHERE platform = $1 AND user_id = ANY($2)`},
	{KindTopicBindings, `DELETE FROM telegram_topic_bindings WHERE $1 = 'telegram' AND user_id = ANY($2)`},
}

// directChatDelete deletes the sent and dead rows of the user's direct
// chats ($1: their chat keys) that no session of theirs holds: proactive
// sends (a cron job's, send_message's) are filed by chat alone. Rows
// still to send go their way.
const directChatDelete = `DELETE FROM delivery_outbox WHERE chat_key = ANY($1) AND state IN ('sent', 'failed', 'expired')`

// Forget deletes what Switchboard holds of one user (a right-to-erasure
// request): their own sessions, with everything that hangs off them as a
// prune deletes it, and what they own: memories and memory writes
// waiting or decided, their memory approval setting, standing
// "/approve always" approvals, cron jobs, pairing, Telegram topic
// bindings, and what was sent to their direct chats outside a session. One transaction: it all goes, or nothing (a dry run rolls
// it back and reports the same counts). A session that is busy (a turn,
// a queued message, a reply to send) is left and reported, with
// everything else deleted: forget again once it is idle.
//
// Kept: sessions others share (a group's, where the user's messages are
// part of everyone's conversation), the audit log, and what expires on
// its own: inbound events on the bus (nats.retention), Redis dedupe and
// rate-limit entries, cron runs' sessions (cron.session_retention), the
// API's stored responses (gateways.api.response_ttl).
func (s *Sweeper) Forget(ctx context.Context, u userdata.User, dryRun bool) (Erasure, error) {
	u, err := u.Normalized()
	if err != nil {
		return Erasure{}, fmt.Errorf("forget: %w", err)
	}
	res := Erasure{Rows: map[string]int64{}}
	tx, err := s.db.Begin(ctx)
	if err != nil {
		return res, fmt.Errorf("forget: begin: %w", err)
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	if _, err := tx.Exec(ctx, `SET LOCAL lock_timeout = '2s'`); err != nil {
		return res, fmt.Errorf("forget: %w", err)
	}
	found, err := userdata.Find(ctx, tx, u)
	if err != nil {
		return res, fmt.Errorf("forget: %w", err)
	}
	own, userKeys := found.Own, found.UserKeys
	res.Shared = found.Shared
	// Lock the own sessions' rows that nothing waits on; the others are
	// busy.
	rows, err := tx.Query(ctx, `SELECT s.session_key FROM sessions s
WHERE s.session_key = ANY($1)
  AND NOT EXISTS (SELECT 1 FROM session_queue q WHERE q.session_key = s.session_key)
  AND NOT EXISTS (SELECT 1 FROM delivery_outbox o
                  WHERE o.session_key = s.session_key AND o.session_key <> '' AND o.state IN ('queued', 'sending'))
ORDER BY s.session_key
FOR UPDATE OF s SKIP LOCKED`, own)
	if err != nil {
		return res, fmt.Errorf("forget: lock sessions: %w", err)
	}
	idle, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return res, fmt.Errorf("forget: lock sessions: %w", err)
	}
	if len(idle) > 0 {
		deleted, _, sessionRows, err := s.deleteSessions(ctx, tx, idle, dryRun)
		if err != nil {
			return res, err
		}
		res.Sessions = deleted
		for k, v := range sessionRows {
			res.Rows[k] += v
		}
	}
	for _, k := range own {
		if !slices.Contains(res.Sessions, k) {
			res.Busy = append(res.Busy, k)
		}
	}
	// What the user owns, filed under their user keys.
	for _, f := range userdata.Filed {
		tag, err := tx.Exec(ctx, "DELETE FROM "+f.Table+" WHERE "+f.Match("= ANY($1)"), userKeys)
		if err != nil {
			return res, fmt.Errorf("forget: delete %s: %w", f.Table, err)
		}
		res.Rows[filedKind(f.Table)] += tag.RowsAffected()
	}
	tag, err := tx.Exec(ctx, directChatDelete, found.DirectChats)
	if err != nil {
		return res, fmt.Errorf("forget: delete %s: %w", KindOutbox, err)
	}
	res.Rows[KindOutbox] += tag.RowsAffected()
	for _, d := range userIDDeletes {
		tag, err := tx.Exec(ctx, d.sql, u.Platform, userdata.IDForms(u))
		if err != nil {
			return res, fmt.Errorf("forget: delete %s: %w", d.kind, err)
		}
		res.Rows[d.kind] += tag.RowsAffected()
	}
	if dryRun {
		return res, nil
	}
	if err := tx.Commit(ctx); err != nil {
		return Erasure{}, fmt.Errorf("forget: commit: %w", err)
	}
	for k, v := range res.Rows {
		deletedRows.WithLabelValues(k).Add(float64(v))
	}
	s.log.Warn("user forgotten", "platform", u.Platform, "sessions", len(res.Sessions), "busy", len(res.Busy),
		"shared_kept", len(res.Shared), "memories", res.Rows[KindMemories], "transcript_messages", res.Rows[KindMessages])
	return res, nil
}
