package outbox_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/switchboard-chat/switchboard/pkg/outbox"
	"github.com/switchboard-chat/switchboard/pkg/pg/pgtest"
)

// Housekeeping forgets old stream messages every minute on every replica:
// the delete must find them by the created_at index (migration 00304),
// not read the whole table, and must keep the recent ones.
func TestPruneStreamMessagesUsesItsIndex(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := pgtest.New(t)
	s := outbox.New(db)
	now := time.Now()
	// What a prune finds at each tick: the table holds 2 × delivery.ttl
	// of streamed turns (20 000 over the last two hours and two minutes
	// here, one message each, and one through the store itself) and the
	// prune takes the oldest minute or two of them.
	if _, err := db.Exec(ctx, `INSERT INTO delivery_stream_messages (turn_id, message_index, platform_message_id, created_at)
SELECT 'old-' || i, 0, 'pm-' || i, $1::timestamptz - make_interval(secs => i * 0.366)
FROM generate_series(1, 20000) AS i`, now); err != nil {
		t.Fatal(err)
	}
	if err := s.SaveStreamMessage(ctx, "recent", 0, "pm-recent"); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(ctx, `ANALYZE delivery_stream_messages`); err != nil {
		t.Fatal(err)
	}
	cutoff := now.Add(-2 * time.Hour) // rows 19 673 to 20 000 are older

	rows, err := db.Query(ctx, `EXPLAIN DELETE FROM delivery_stream_messages WHERE created_at < $1`, cutoff)
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
	if p := strings.Join(plan, "\n"); !strings.Contains(p, "delivery_stream_messages_created") {
		t.Fatalf("the prune reads the table without its index:\n%s", p)
	}

	if err := s.PruneStreamMessages(ctx, cutoff); err != nil {
		t.Fatal(err)
	}
	var left int
	if err := db.QueryRow(ctx, `SELECT count(*) FROM delivery_stream_messages`).Scan(&left); err != nil {
		t.Fatal(err)
	}
	if want := 19672 + 1; left != want {
		t.Fatalf("%d stream messages left, want the %d recorded within the cutoff", left, want)
	}
	ids, err := s.StreamMessages(ctx, "recent")
	if err != nil || fmt.Sprint(ids) != "[pm-recent]" {
		t.Fatalf("recent turn's messages %v %v, want kept", ids, err)
	}
}
