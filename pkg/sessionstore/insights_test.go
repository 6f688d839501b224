package sessionstore

import (
	"context"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/switchboard-chat/switchboard/pkg/pg/pgtest"
)

// Every statement of Insights reads by index: with many chats' rows in
// the tables, none scans a whole table.
func TestInsightsUseIndexes(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := pgtest.New(t)
	// 400 chats with 25 conversations each over 100 days, 3 turns a
	// conversation, 4 messages a turn.
	for _, q := range []string{
		`INSERT INTO sessions (session_key, session_id, platform)
			SELECT 'agent:main:telegram:dm:' || k, 'k' || k || 's24', 'telegram' FROM generate_series(1, 400) k`,
		`INSERT INTO session_history (session_key, session_id, started_at)
			SELECT 'agent:main:telegram:dm:' || k, 'k' || k || 's' || c, now() - (c * 4) * interval '1 day'
			FROM generate_series(1, 400) k, generate_series(0, 24) c`,
		`INSERT INTO worker_turns (turn_id, session_key, session_id, generation, model, started_at, input_tokens, output_tokens)
			SELECT 'k' || k || 's' || c || 't' || n, 'agent:main:telegram:dm:' || k, 'k' || k || 's' || c, 1, 'm',
				now() - (c * 4) * interval '1 day' + n * interval '1 minute', 10, 5
			FROM generate_series(1, 400) k, generate_series(0, 24) c, generate_series(1, 3) n`,
		`INSERT INTO transcript_messages (session_key, session_id, user_key, turn_id, generation, step, role, content, tool_calls)
			SELECT 'agent:main:telegram:dm:' || k, 'k' || k || 's' || c, 'telegram:' || k, 'k' || k || 's' || c || 't' || n, 1, st,
				(ARRAY['user', 'assistant', 'tool', 'assistant'])[st + 1], 'text',
				CASE WHEN st = 1 THEN '[{"id": "1", "name": "web_search", "arguments": "{}"}]'::jsonb END
			FROM generate_series(1, 400) k, generate_series(0, 24) c, generate_series(1, 3) n, generate_series(0, 3) st`,
		`ANALYZE sessions, session_history, worker_turns, transcript_messages`,
	} {
		if _, err := db.Exec(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	since := time.Now().Add(-30 * 24 * time.Hour)
	seq := regexp.MustCompile(`Seq Scan on (sessions|session_history|worker_turns|transcript_messages)\b`)
	for i, q := range insightsSQL {
		args := []any{"agent:main:telegram:dm:7", since}
		if strings.Contains(q, "$3") {
			args = append(args, since.Add(-insightsSkew))
		}
		rows, err := db.Query(ctx, "EXPLAIN "+q, args...)
		if err != nil {
			t.Fatal(err)
		}
		var plan []string
		for rows.Next() {
			var line string
			if err := rows.Scan(&line); err != nil {
				t.Fatal(err)
			}
			plan = append(plan, line)
		}
		if err := rows.Err(); err != nil {
			t.Fatal(err)
		}
		if p := strings.Join(plan, "\n"); seq.MatchString(p) {
			t.Errorf("statement %d scans a table:\n%s\n%s", i, q, p)
		}
	}
	// And the numbers of that chat: 8 conversations in 30 days (days 0
	// to 28), 24 turns, 96 messages, of which 24 from the user and 24
	// calls of web_search.
	in, err := New(db).Insights(ctx, "agent:main:telegram:dm:7", since)
	if err != nil {
		t.Fatal(err)
	}
	if len(in.Sessions) != 8 || in.Messages != 96 || in.UserMessages != 24 ||
		len(in.Tools) != 1 || in.Tools[0] != (ToolCount{"web_search", 24}) ||
		len(in.Models) != 1 || in.Models[0] != (ModelUsage{Model: "m", Sessions: 8, Usage: Usage{Input: 240, Output: 120}}) {
		t.Errorf("insights %+v", in)
	}
}
