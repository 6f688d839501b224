package sessionstore

import (
	"context"
	"strings"
	"testing"

	"github.com/switchboard-chat/switchboard/pkg/pg/pgtest"

	eventsv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/events/v1"
)

// A reset with a flush queues the ended conversation's memory flush at
// the head of the queue, as a turn of its own, once, only when that
// conversation had a turn; a later reset that drops the queue keeps it
// and does not return it as a dropped message.
func TestResetQueuesTheMemoryFlushFirst(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := pgtest.New(t)
	s := New(db)
	src := &eventsv1.SessionSource{Platform: "telegram", ChatId: "1", ChatType: "dm", UserId: "alice"}
	if _, _, err := s.ArriveAndEnqueue(ctx, "k", "main", src, 7, false, &eventsv1.MessageReceived{EventId: "a", Source: src}, 8); err != nil {
		t.Fatal(err)
	}
	flush := &eventsv1.MessageReceived{Source: src}
	// No turn yet: nothing to flush.
	if _, err := s.ResetKeepingQueue(ctx, "k", "idle", flush); err != nil {
		t.Fatal(err)
	}
	if n, _ := s.QueueLen(ctx, "k"); n != 1 {
		t.Fatalf("%d waiting after the reset of a conversation without a turn, want a alone", n)
	}
	sess, err := s.Get(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	old := sess.ID
	if _, err := db.Exec(ctx, `INSERT INTO worker_turns (turn_id, session_key, session_id, generation, status, started_at, updated_at)
		VALUES ('t1', 'k', $1, 1, 'completed', now(), now())`, old); err != nil {
		t.Fatal(err)
	}
	if _, err := s.ResetKeepingQueue(ctx, "k", "idle", flush); err != nil {
		t.Fatal(err)
	}
	var got []string
	started, err := s.StartTurn(ctx, "k", "t2", 8, 0, func(_ context.Context, tr Turn) error {
		for _, q := range tr.Inputs {
			id, ok := FlushOf(q.Event)
			got = append(got, q.Event.GetEventId()+"="+id+"/"+map[bool]string{true: "flush"}[ok]+q.Event.GetSource().GetUserId())
		}
		return nil
	})
	if err != nil || !started || strings.Join(got, ",") != FlushEventPrefix+old+"="+old+"/flushalice" {
		t.Fatalf("first turn: %v (started %v, %v), want the flush of %s alone", got, started, err, old)
	}
	// A second conversation with a turn, ended by /new twice: one flush,
	// kept by the second /new, and no flush of the empty one between.
	sess, _ = s.Get(ctx, "k")
	if _, err := db.Exec(ctx, `INSERT INTO worker_turns (turn_id, session_key, session_id, generation, status, started_at, updated_at)
		VALUES ('t3', 'k', $1, 1, 'completed', now(), now())`, sess.ID); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		_, dropped, err := s.ResetDropping(ctx, "k", "new", flush)
		if err != nil {
			t.Fatal(err)
		}
		for _, q := range dropped {
			if _, ok := FlushOf(q.Event); ok {
				t.Fatal("a reset dropped the waiting flush")
			}
		}
	}
	if n, _ := s.QueueLen(ctx, "k"); n != 1 {
		t.Fatalf("%d waiting after /new twice, want the one flush", n)
	}
}
