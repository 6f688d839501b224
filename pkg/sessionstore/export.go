package sessionstore

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/switchboard-chat/switchboard/pkg/export"
)

// ExportTooLargeError is Export's answer for a conversation whose stored
// text is over the limit: nothing of it was read.
type ExportTooLargeError struct {
	Bytes, Limit int64
}

func (e *ExportTooLargeError) Error() string {
	return fmt.Sprintf("conversation too large to export: %d bytes stored, limit %d", e.Bytes, e.Limit)
}

// exportSizeSQL measures what Export would read of conversation $2 of
// key $1: its messages' text and tool calls and its summaries.
// exportMessagesSQL and exportSummariesSQL read them, oldest first:
// every message, the ones a compression summarised included (they are
// kept), as Hermes's export includes compacted turns.
const (
	exportSizeSQL = `SELECT
		coalesce((SELECT sum(octet_length(content) + coalesce(octet_length(tool_calls::text), 0))
			FROM transcript_messages WHERE session_id = $2 AND session_key = $1), 0)::bigint +
		coalesce((SELECT sum(octet_length(summary)) FROM transcript_summaries WHERE session_id = $2 AND session_key = $1), 0)::bigint`
	exportMessagesSQL = `SELECT id, role, content, coalesce(tool_calls, 'null'::jsonb), tool_call_id, tool_name, created_at
		FROM transcript_messages WHERE session_id = $2 AND session_key = $1 ORDER BY id`
	exportSummariesSQL = `SELECT upto_id, created_at, summary
		FROM transcript_summaries WHERE session_id = $2 AND session_key = $1 ORDER BY upto_id, id`
)

// Export reads conversation id of key for /save: its messages and
// compression summaries (the caller fills the rest of the session). It
// only reads, takes no lock, and a turn running meanwhile may have
// committed some of its steps. A conversation whose stored text is over
// limit bytes (limit > 0) is not read: *ExportTooLargeError.
func (s *Store) Export(ctx context.Context, key, id string, limit int64) (export.Session, error) {
	out := export.Session{ID: id}
	if limit > 0 {
		var size int64
		if err := s.db.QueryRow(ctx, exportSizeSQL, key, id).Scan(&size); err != nil {
			return out, fmt.Errorf("measure transcript: %w", err)
		}
		if size > limit {
			return out, &ExportTooLargeError{Bytes: size, Limit: limit}
		}
	}
	rows, err := s.db.Query(ctx, exportMessagesSQL, key, id)
	if err != nil {
		return out, fmt.Errorf("read transcript: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var m export.Message
		var calls []byte
		if err := rows.Scan(&m.ID, &m.Role, &m.Content, &calls, &m.ToolCallID, &m.ToolName, &m.At); err != nil {
			return out, fmt.Errorf("read transcript: %w", err)
		}
		if len(calls) > 0 && string(calls) != "null" {
			// The worker's shape: [{"id","name","arguments"}]; a row it
			// did not write so is shown without its calls.
			_ = json.Unmarshal(calls, &m.ToolCalls)
		}
		out.Messages = append(out.Messages, m)
	}
	if err := rows.Err(); err != nil {
		return out, fmt.Errorf("read transcript: %w", err)
	}
	srows, err := s.db.Query(ctx, exportSummariesSQL, key, id)
	if err != nil {
		return out, fmt.Errorf("read summaries: %w", err)
	}
	defer srows.Close()
	for srows.Next() {
		var sm export.Summary
		var at time.Time
		if err := srows.Scan(&sm.UpTo, &at, &sm.Text); err != nil {
			return out, fmt.Errorf("read summaries: %w", err)
		}
		sm.At = at
		out.Summaries = append(out.Summaries, sm)
	}
	if err := srows.Err(); err != nil {
		return out, fmt.Errorf("read summaries: %w", err)
	}
	return out, nil
}
