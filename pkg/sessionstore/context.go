package sessionstore

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"
	"time"
)

// ContextView is what /context reads of one conversation: how full the
// context window was at its latest turn (session_context, migration
// 00125, written by the worker with the turn's final), and the sizes of
// what the worker sends the model next — the stored system prompt, the
// latest compression summary and the messages after it — measured in
// bytes as the worker's compression estimate measures them (content and
// tool calls, 16 bytes a message and a call for their framing). Sizes
// only: no message text.
type ContextView struct {
	// Tokens is the prompt of the latest turn's latest model call, as
	// the runtime footer shows it; 0 when no turn of this conversation
	// recorded one. Model is that turn's model, At when it was written.
	Tokens int64
	Model  string
	At     time.Time
	// SystemBytes is the stored system prompt (0 before the first turn).
	SystemBytes int64
	// Summaries are the conversation's compression summaries, oldest
	// first (a /branch copy keeps its source's).
	Summaries []ContextSummary
	// Parts are the messages after the latest summary by role (user,
	// assistant, tool, system), in that order; a role without messages is left
	// out. Tools are the tool results among them by tool, largest first.
	Parts []ContextPart
	Tools []ContextPart
}

// ContextSummary is one compression of a conversation.
type ContextSummary struct {
	At    time.Time
	Bytes int64
}

// ContextPart is the size of some of a conversation's messages: Name is
// a role or a tool.
type ContextPart struct {
	Name     string
	Messages int64
	Bytes    int64
}

// contextRowSQL reads the figure, the system prompt's size and the
// summaries of conversation $2 of key $1; contextPartsSQL the messages
// after the latest summary, by role and tool (the worker's history:
// historySQL in services/worker/internal/store), a tool result that
// mid-turn compression cleared counted as what the model reads of it.
const (
	contextRowSQL = `SELECT coalesce(c.context_tokens, 0), coalesce(c.model, ''), coalesce(c.updated_at, 'epoch'),
		coalesce((SELECT octet_length(prompt) FROM session_prompts WHERE session_id = $2), 0),
		coalesce((SELECT array_agg(created_at ORDER BY upto_id) FROM transcript_summaries WHERE session_id = $2), '{}'),
		coalesce((SELECT array_agg(octet_length(summary)::bigint ORDER BY upto_id) FROM transcript_summaries WHERE session_id = $2), '{}')
	FROM (SELECT) AS one
	LEFT JOIN session_context c ON c.session_key = $1 AND c.session_id = $2`
	contextPartsSQL = `SELECT m.role, CASE WHEN m.role = 'tool' THEN m.tool_name ELSE '' END, count(*),
		sum(octet_length(coalesce(m.compacted, m.content)) + 16 + coalesce((SELECT sum(octet_length(coalesce(tc->>'name', '')) + octet_length(coalesce(tc->>'arguments', '')) + 16)
			FROM jsonb_array_elements(CASE WHEN jsonb_typeof(m.tool_calls) = 'array' THEN m.tool_calls ELSE '[]' END) tc), 0))::bigint
	FROM transcript_messages m WHERE m.session_id = $2 AND m.session_key = $1
		AND m.id > coalesce((SELECT max(upto_id) FROM transcript_summaries WHERE session_id = $2), 0)
	GROUP BY 1, 2`
)

// roleOrder is the order of ContextView.Parts.
var roleOrder = []string{"user", "assistant", "tool", "system"}

// Context reads what /context shows of conversation id of key. It only
// reads, takes no lock, and a turn running meanwhile may have committed
// some of its steps.
func (s *Store) Context(ctx context.Context, key, id string) (ContextView, error) {
	var v ContextView
	var ats []time.Time
	var sizes []int64
	if err := s.db.QueryRow(ctx, contextRowSQL, key, id).Scan(&v.Tokens, &v.Model, &v.At, &v.SystemBytes, &ats, &sizes); err != nil {
		return v, fmt.Errorf("read context: %w", err)
	}
	for i := range min(len(ats), len(sizes)) {
		v.Summaries = append(v.Summaries, ContextSummary{At: ats[i], Bytes: sizes[i]})
	}
	rows, err := s.db.Query(ctx, contextPartsSQL, key, id)
	if err != nil {
		return v, fmt.Errorf("read context parts: %w", err)
	}
	defer rows.Close()
	byRole := map[string]*ContextPart{}
	for rows.Next() {
		var role, tool string
		var p ContextPart
		if err := rows.Scan(&role, &tool, &p.Messages, &p.Bytes); err != nil {
			return v, fmt.Errorf("read context parts: %w", err)
		}
		r := byRole[role]
		if r == nil {
			r = &ContextPart{Name: role}
			byRole[role] = r
		}
		r.Messages += p.Messages
		r.Bytes += p.Bytes
		if role == "tool" {
			p.Name = tool
			v.Tools = append(v.Tools, p)
		}
	}
	if err := rows.Err(); err != nil {
		return v, fmt.Errorf("read context parts: %w", err)
	}
	for _, role := range roleOrder {
		if r := byRole[role]; r != nil {
			v.Parts = append(v.Parts, *r)
		}
	}
	sortParts(v.Tools)
	return v, nil
}

// sortParts orders parts largest first, ties by name.
func sortParts(parts []ContextPart) {
	slices.SortFunc(parts, func(a, b ContextPart) int {
		if c := cmp.Compare(b.Bytes, a.Bytes); c != 0 {
			return c
		}
		return strings.Compare(a.Name, b.Name)
	})
}
