package outbox_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	deliveryv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/delivery/v1"
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
	if err := s.SaveStreamMessage(ctx, "recent", 0, 0, "pm-recent"); err != nil {
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
	seg, err := s.LastStreamSegment(ctx, "recent")
	if err != nil || fmt.Sprint(seg.IDs) != "[pm-recent]" {
		t.Fatalf("recent turn's messages %v %v, want kept", seg.IDs, err)
	}
}

// The final of a streamed reply writes over its last segment's messages
// only: the messages before a tool call keep their text. A segment opened
// before its first message has none, and opening it again (a redelivered
// event) changes nothing.
func TestLastStreamSegment(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := outbox.New(pgtest.New(t))
	type msg struct {
		segment int64
		index   int
		id      string
	}
	tests := []struct {
		name   string
		msgs   []msg
		opened []int64
		want   outbox.StreamSegment
	}{
		{"nothing streamed", nil, nil, outbox.StreamSegment{}},
		{"one segment", []msg{{0, 1, "m2"}, {0, 0, "m1"}}, nil, outbox.StreamSegment{Recorded: true, IDs: []string{"m1", "m2"}}},
		{"two segments", []msg{{0, 0, "m1"}, {0, 1, "m2"}, {7, 2, "m3"}}, []int64{7}, outbox.StreamSegment{Recorded: true, Segment: 7, IDs: []string{"m3"}}},
		{"a segment with no message yet", []msg{{0, 0, "m1"}}, []int64{7, 7}, outbox.StreamSegment{Recorded: true, Segment: 7}},
		{"opened twice, then streamed", []msg{{0, 0, "m1"}, {4, 1, "m2"}}, []int64{4, 4}, outbox.StreamSegment{Recorded: true, Segment: 4, IDs: []string{"m2"}}},
	}
	for i, tt := range tests {
		turn := fmt.Sprint("seg-", i)
		for _, seg := range tt.opened {
			if err := s.OpenStreamSegment(ctx, turn, seg); err != nil {
				t.Fatal(err)
			}
		}
		for _, m := range tt.msgs {
			if err := s.SaveStreamMessage(ctx, turn, m.segment, m.index, m.id); err != nil {
				t.Fatal(err)
			}
		}
		got, err := s.LastStreamSegment(ctx, turn)
		if err != nil {
			t.Fatal(err)
		}
		if fmt.Sprintf("%+v", got) != fmt.Sprintf("%+v", tt.want) {
			t.Errorf("%s: %+v, want %+v", tt.name, got, tt.want)
		}
		got, stored, err := s.LastStreamSegmentAndKey(ctx, turn, turn+":9:0")
		if err != nil {
			t.Fatal(err)
		}
		if fmt.Sprintf("%+v", got) != fmt.Sprintf("%+v", tt.want) || stored {
			t.Errorf("%s, with a key not stored: %+v %v, want %+v false", tt.name, got, stored, tt.want)
		}
	}
	// The key of a stored row is found, whatever was streamed.
	req := &deliveryv1.SendRequested{IdempotencyKey: "seg-0:9:0", Op: deliveryv1.SendOp_SEND_OP_SEND,
		Target: &deliveryv1.Target{Platform: "test", ChatId: "c1"}, TurnId: "seg-0", Text: "the answer"}
	if _, err := s.Enqueue(ctx, time.Now(), time.Hour, req); err != nil {
		t.Fatal(err)
	}
	if got, stored, err := s.LastStreamSegmentAndKey(ctx, "seg-0", "seg-0:9:0"); err != nil || !stored || got.Recorded {
		t.Errorf("a stored row's key: %+v %v %v, want nothing streamed and the row found", got, stored, err)
	}
}

// A rolling upgrade runs replicas from before segments against this
// schema: one that takes a turn over reads every row of
// delivery_stream_messages as a message to write over, the final's
// first part going to the first. A segment's mark must not be such a
// row: a message id "" took the answer's first part (refused: the answer
// lost) and the messages after it were deleted. Those replicas see the
// turn's messages alone, in order, and the segments work as before.
func TestStreamSegmentMarksAreNoMessages(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := pgtest.New(t)
	s := outbox.New(db)
	tests := []struct {
		name   string
		saved  [][2]any // segment, id: indexes in order
		opened []int64
		old    []string // what a replica from before segments reads
		last   outbox.StreamSegment
	}{
		{"opened before its first message", [][2]any{{int64(0), "m1"}}, []int64{5},
			[]string{"m1"}, outbox.StreamSegment{Recorded: true, Segment: 5}},
		{"opened, then streamed", [][2]any{{int64(0), "m1"}, {int64(5), "m2"}}, []int64{5},
			[]string{"m1", "m2"}, outbox.StreamSegment{Recorded: true, Segment: 5, IDs: []string{"m2"}}},
		{"two segments, the last empty", [][2]any{{int64(0), "m1"}, {int64(5), "m2"}}, []int64{5, 9},
			[]string{"m1", "m2"}, outbox.StreamSegment{Recorded: true, Segment: 9}},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			turn := fmt.Sprint("marks-", i)
			for _, seg := range tt.opened {
				if err := s.OpenStreamSegment(ctx, turn, seg); err != nil {
					t.Fatal(err)
				}
			}
			for j, m := range tt.saved {
				if err := s.SaveStreamMessage(ctx, turn, m[0].(int64), j, m[1].(string)); err != nil {
					t.Fatal(err)
				}
			}
			// The query of the replicas from before segments.
			rows, err := db.Query(ctx, `SELECT platform_message_id FROM delivery_stream_messages
WHERE turn_id = $1 ORDER BY message_index`, turn)
			if err != nil {
				t.Fatal(err)
			}
			var old []string
			for rows.Next() {
				var id string
				if err := rows.Scan(&id); err != nil {
					t.Fatal(err)
				}
				old = append(old, id)
			}
			if err := rows.Err(); err != nil {
				t.Fatal(err)
			}
			if fmt.Sprintf("%q", old) != fmt.Sprintf("%q", tt.old) {
				t.Errorf("a replica from before segments reads the messages %q, want %q", old, tt.old)
			}
			got, err := s.LastStreamSegment(ctx, turn)
			if err != nil {
				t.Fatal(err)
			}
			if fmt.Sprintf("%+v", got) != fmt.Sprintf("%+v", tt.last) {
				t.Errorf("last segment %+v, want %+v", got, tt.last)
			}
		})
	}
	// Housekeeping forgets old segment marks too.
	if _, err := db.Exec(ctx, `UPDATE delivery_stream_segments SET created_at = now() - interval '3 hours'`); err != nil {
		t.Fatal(err)
	}
	if err := s.PruneStreamMessages(ctx, time.Now().Add(-2*time.Hour)); err != nil {
		t.Fatal(err)
	}
	var left int
	if err := db.QueryRow(ctx, `SELECT count(*) FROM delivery_stream_segments`).Scan(&left); err != nil {
		t.Fatal(err)
	}
	if left != 0 {
		t.Errorf("%d old segment marks left after the prune", left)
	}
}

// A tools' message marked below a stream segment's messages is below the
// last segment only while it counts all of that segment's messages: a
// mark of an earlier segment, or one that a later message of the same
// segment went below, is not. Marking twice changes nothing, and
// housekeeping forgets old marks.
func TestStreamToolsBelowTheLastSegment(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := pgtest.New(t)
	s := outbox.New(db)
	type msg struct {
		segment int64
		index   int
		id      string
	}
	tests := []struct {
		name   string
		msgs   []msg
		opened []int64
		marks  [][2]int64 // segment, messages
		want   bool
	}{
		{"nothing streamed", nil, nil, nil, false},
		{"no mark", []msg{{0, 0, "m1"}}, nil, nil, false},
		{"below the block", []msg{{0, 0, "m1"}}, nil, [][2]int64{{0, 1}, {0, 1}}, true},
		{"below two messages", []msg{{0, 0, "m1"}, {0, 1, "m2"}}, nil, [][2]int64{{0, 2}}, true},
		{"a later message below it", []msg{{0, 0, "m1"}, {0, 1, "m2"}}, nil, [][2]int64{{0, 1}}, false},
		{"an earlier segment's", []msg{{0, 0, "m1"}, {4, 1, "m2"}}, []int64{4}, [][2]int64{{0, 1}}, false},
		{"the last segment's", []msg{{0, 0, "m1"}, {4, 1, "m2"}}, []int64{4}, [][2]int64{{4, 1}}, true},
		{"a segment with no message yet", []msg{{0, 0, "m1"}}, []int64{4}, [][2]int64{{0, 1}}, false},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			turn := fmt.Sprint("tools-", i)
			for _, seg := range tt.opened {
				if err := s.OpenStreamSegment(ctx, turn, seg); err != nil {
					t.Fatal(err)
				}
			}
			for _, m := range tt.msgs {
				if err := s.SaveStreamMessage(ctx, turn, m.segment, m.index, m.id); err != nil {
					t.Fatal(err)
				}
			}
			for _, m := range tt.marks {
				if err := s.MarkStreamTools(ctx, turn, m[0], int(m[1])); err != nil {
					t.Fatal(err)
				}
			}
			last, err := s.LastStreamSegment(ctx, turn)
			if err != nil {
				t.Fatal(err)
			}
			got, below, err := s.LastStreamSegmentBelow(ctx, turn)
			if err != nil {
				t.Fatal(err)
			}
			if fmt.Sprintf("%+v", got) != fmt.Sprintf("%+v", last) || below != tt.want {
				t.Errorf("%+v, below %v; want %+v, below %v", got, below, last, tt.want)
			}
		})
	}
	if _, err := db.Exec(ctx, `UPDATE delivery_stream_tools SET created_at = now() - interval '3 hours'`); err != nil {
		t.Fatal(err)
	}
	if err := s.PruneStreamMessages(ctx, time.Now().Add(-2*time.Hour)); err != nil {
		t.Fatal(err)
	}
	var left int
	if err := db.QueryRow(ctx, `SELECT count(*) FROM delivery_stream_tools`).Scan(&left); err != nil {
		t.Fatal(err)
	}
	if left != 0 {
		t.Errorf("%d old tools marks left after the prune", left)
	}
}
