package sessionstore

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// Insights are the numbers of /insights over the conversations one session
// key started in a window: what Hermes's InsightsEngine reads from its
// sessions and messages tables, read here from session_history,
// worker_turns and transcript_messages. Counts only: no message text.
type Insights struct {
	// Sessions are the conversations started at or after the window's
	// start, oldest first.
	Sessions []InsightSession
	// Messages counts the user, assistant and tool messages of those
	// conversations; UserMessages the user's.
	Messages, UserMessages int64
	// Tools counts the tool calls the model made, by tool, most called
	// first (ties by name).
	Tools []ToolCount
	// Models sums the turns' usage by the model that ran them, in no
	// particular order.
	Models []ModelUsage
	// Unbooked is what turns that ended without a final used (the
	// session row's counts, migration 00206) when the key's current
	// conversation is one of Sessions; CurrentModel is that
	// conversation's /model override ("" for the default).
	Unbooked     Usage
	CurrentModel string
}

// InsightSession is one conversation of Insights.
type InsightSession struct {
	ID        string
	StartedAt time.Time
	// LastTurnAt is when its last decided turn ended; zero without one.
	LastTurnAt time.Time
}

// ToolCount is how many calls a tool got.
type ToolCount struct {
	Name  string
	Calls int64
}

// ModelUsage is the usage of the turns one model ran, and in how many
// conversations.
type ModelUsage struct {
	Model    string
	Sessions int
	Usage
}

// insightsSkew widens the turns' lower bound: a turn's start is the
// worker's clock, its conversation's the router's.
const insightsSkew = time.Hour

// insightsWindow selects the conversations of the window: $1 the key,
// $2 its start.
const insightsWindow = `SELECT h.session_id FROM session_history h WHERE h.session_key = $1 AND h.started_at >= $2`

// insightsSQL are Insights' statements, in the order it reads them; $3
// is the lower bound of the turns' starts.
var insightsSQL = []string{
	// The conversations, and when the last turn of each ended.
	`SELECT h.session_id, h.started_at, (SELECT max(t.updated_at) FROM worker_turns t
			WHERE t.session_key = h.session_key AND t.session_id = h.session_id AND t.started_at >= $3)
		FROM session_history h WHERE h.session_key = $1 AND h.started_at >= $2
		ORDER BY h.started_at, h.session_id`,
	// Usage by model.
	`SELECT t.model, count(DISTINCT t.session_id), sum(t.input_tokens)::bigint, sum(t.output_tokens)::bigint,
			sum(t.cache_read_tokens)::bigint, sum(t.cache_write_tokens)::bigint
		FROM worker_turns t WHERE t.session_key = $1 AND t.started_at >= $3 AND t.session_id IN (` + insightsWindow + `)
		GROUP BY t.model`,
	// Messages.
	`SELECT count(*) FILTER (WHERE m.role IN ('user', 'assistant', 'tool')), count(*) FILTER (WHERE m.role = 'user')
		FROM transcript_messages m WHERE m.session_key = $1 AND m.session_id IN (` + insightsWindow + `)`,
	// Tool calls by tool, from the assistant messages that made them.
	`SELECT c.value->>'name', count(*) FROM transcript_messages m
			CROSS JOIN LATERAL jsonb_array_elements(CASE WHEN jsonb_typeof(m.tool_calls) = 'array' THEN m.tool_calls ELSE '[]'::jsonb END) c
		WHERE m.session_key = $1 AND m.session_id IN (` + insightsWindow + `) AND m.role = 'assistant' AND m.tool_calls IS NOT NULL
			AND coalesce(c.value->>'name', '') <> ''
		GROUP BY 1 ORDER BY 2 DESC, 1`,
	// What turns without a final used, when the current conversation is
	// in the window.
	`SELECT s.input_tokens, s.output_tokens, s.cache_read_tokens, s.cache_write_tokens, s.model_override
		FROM sessions s WHERE s.session_key = $1 AND s.session_id IN (` + insightsWindow + `)`,
}

// Insights reads the numbers of the conversations key started at or after
// since. Every statement starts from the key's session_history rows in
// the window (its started_at index) and reaches turns by
// (session_key, started_at) and messages by (session_id, id): the cost
// follows this chat's activity in the window, not the tables' size.
func (s *Store) Insights(ctx context.Context, key string, since time.Time) (Insights, error) {
	var in Insights
	b := &pgx.Batch{}
	for _, q := range insightsSQL {
		if strings.Contains(q, "$3") {
			b.Queue(q, key, since, since.Add(-insightsSkew))
		} else {
			b.Queue(q, key, since)
		}
	}
	br := s.db.SendBatch(ctx, b)
	err := func() error {
		rows, _ := br.Query()
		var err error
		in.Sessions, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (InsightSession, error) {
			var is InsightSession
			var last *time.Time
			err := r.Scan(&is.ID, &is.StartedAt, &last)
			if last != nil {
				is.LastTurnAt = *last
			}
			return is, err
		})
		if err != nil {
			return fmt.Errorf("read conversations: %w", err)
		}
		rows, _ = br.Query()
		in.Models, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (ModelUsage, error) {
			var mu ModelUsage
			err := r.Scan(&mu.Model, &mu.Sessions, &mu.Input, &mu.Output, &mu.CacheRead, &mu.CacheWrite)
			return mu, err
		})
		if err != nil {
			return fmt.Errorf("read turn usage: %w", err)
		}
		if err := br.QueryRow().Scan(&in.Messages, &in.UserMessages); err != nil {
			return fmt.Errorf("count messages: %w", err)
		}
		rows, _ = br.Query()
		in.Tools, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (ToolCount, error) {
			var tc ToolCount
			err := r.Scan(&tc.Name, &tc.Calls)
			return tc, err
		})
		if err != nil {
			return fmt.Errorf("count tool calls: %w", err)
		}
		u := &in.Unbooked
		err = br.QueryRow().Scan(&u.Input, &u.Output, &u.CacheRead, &u.CacheWrite, &in.CurrentModel)
		if err != nil && !errors.Is(err, pgx.ErrNoRows) {
			return fmt.Errorf("read session usage: %w", err)
		}
		return nil
	}()
	if cerr := br.Close(); err == nil && cerr != nil {
		err = fmt.Errorf("read insights: %w", cerr)
	}
	return in, err
}
