package store_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/switchboard-chat/switchboard/pkg/pg/pgtest"
	"github.com/switchboard-chat/switchboard/services/worker/internal/store"
)

// A first attempt frozen (SIGSTOP, a VM pause) past its lock while the
// bus gave its turn to a second attempt runs the same turn at the same
// generation: once the second attempt claimed the turn (its BeginTurn),
// Postgres refuses every write of the first — a step, the final, a
// compaction, a summary, a prompt — whatever the Redis lock checks would
// have said. The second attempt writes on, and a third fences it the
// same way. Before, only the generation was compared and the first
// attempt's writes all committed.
func TestLaterAttemptsClaimFencesTheEarlierOnesWrites(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	ctx := context.Background()
	if _, err := db.Exec(ctx, `INSERT INTO sessions (session_key, session_id, platform, generation) VALUES ('k', 'sid', 'x', 1)`); err != nil {
		t.Fatal(err)
	}
	s := store.New(db)
	locked := time.Now().Truncate(time.Microsecond)
	first := store.Turn{TurnID: "t1", SessionKey: "k", SessionID: "sid", Generation: 1, Attempt: 1, LockedAt: locked}
	st, err := s.BeginTurn(ctx, first)
	if err != nil || st.Final != nil {
		t.Fatalf("first attempt's begin: %+v %v", st, err)
	}
	in, err := s.Append(ctx, first, store.Durable, 0, store.Message{Role: "user", Content: "run it"},
		store.Message{Role: "assistant", ToolCalls: []store.ToolCall{{ID: "c1", Name: "send", Arguments: "{}"}}},
		store.Message{Role: "tool", ToolCallID: "c1", ToolName: "send", Content: "sent"})
	if err != nil {
		t.Fatal(err)
	}

	// The second attempt starts: it claims the turn as it reads it.
	second := first
	second.Attempt, second.LockedAt = 2, locked.Add(time.Minute)
	if st, err := s.BeginTurn(ctx, second); err != nil || len(st.History) != 3 {
		t.Fatalf("second attempt's begin: %+v %v", st, err)
	}

	// The first wakes up: each of its writes is refused.
	final := store.Final{Status: store.StatusCompleted, Kind: store.FinalText, Text: "from the first", Seq: 1}
	for _, w := range []struct {
		name  string
		write func(store.Turn) error
	}{
		{"step", func(t store.Turn) error {
			_, err := s.Append(ctx, t, store.Durable, 3, store.Message{Role: "user", Content: "steered"})
			return err
		}},
		{"final", func(t store.Turn) error {
			_, err := s.Finish(ctx, t, nil, 3, &store.Message{Role: "assistant", Content: "from the first"}, final)
			return err
		}},
		{"compaction", func(t store.Turn) error { return s.Compact(ctx, t, map[int64]string{in[2].ID: "cleared"}) }},
		{"summary", func(t store.Turn) error { return s.SaveSummary(ctx, t, in[0].ID, "summary of the first") }},
		{"prompt", func(t store.Turn) error { return s.SavePrompt(ctx, t, "sig", "prompt of the first") }},
		{"check", func(t store.Turn) error { return s.CheckGeneration(ctx, t) }},
	} {
		if err := w.write(first); !errors.Is(err, store.ErrStaleGeneration) {
			t.Errorf("the first attempt's %s after the second's claim: %v, want ErrStaleGeneration", w.name, err)
		}
	}
	var n int
	if err := db.QueryRow(ctx, `SELECT (SELECT count(*) FROM transcript_messages WHERE turn_id = 't1')
		+ (SELECT count(*) FROM worker_turns WHERE turn_id = 't1')
		+ (SELECT count(*) FROM transcript_summaries WHERE turn_id = 't1')
		+ (SELECT count(*) FROM session_prompts WHERE session_id = 'sid')
		+ (SELECT count(*) FROM transcript_messages WHERE turn_id = 't1' AND compacted IS NOT NULL)`).Scan(&n); err != nil || n != 3 {
		t.Fatalf("rows of the turn after the first attempt's writes: %d (%v), want its 3 steps from before the claim", n, err)
	}

	// The second attempt writes on.
	if _, err := s.Append(ctx, second, store.Durable, 3, store.Message{Role: "user", Content: "steered"}); err != nil {
		t.Fatalf("the second attempt's step: %v", err)
	}

	// A third attempt claims the turn: the second is fenced in its turn,
	// and its claim coming late (it was frozen before it read) cannot
	// take the turn back.
	third := first
	third.Attempt, third.LockedAt = 3, locked.Add(2*time.Minute)
	if _, err := s.BeginTurn(ctx, third); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Finish(ctx, second, nil, 4, &store.Message{Role: "assistant", Content: "from the second"}, final); !errors.Is(err, store.ErrStaleGeneration) {
		t.Errorf("the second attempt's final after the third's claim: %v, want ErrStaleGeneration", err)
	}
	if _, err := s.BeginTurn(ctx, second); !errors.Is(err, store.ErrStaleGeneration) {
		t.Errorf("the second attempt's late claim: %v, want ErrStaleGeneration", err)
	}
	final.Text = "from the third"
	got, err := s.Finish(ctx, third, nil, 4, &store.Message{Role: "assistant", Content: "from the third"}, final)
	if err != nil || got.Text != "from the third" {
		t.Fatalf("the third attempt's final: %+v %v", got, err)
	}
}

// A worker from before the claim (rolling upgrade) neither claims a
// turn nor checks a claim: its writes (Attempt 0) go on as before, even
// after a newer worker's later attempt claimed the turn, and a newer
// worker's attempt after one of its attempts finds no claim.
func TestWritesOfAWorkerFromBeforeTheClaimAreNotFencedByAttempt(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	ctx := context.Background()
	if _, err := db.Exec(ctx, `INSERT INTO sessions (session_key, session_id, platform, generation) VALUES ('k', 'sid', 'x', 1)`); err != nil {
		t.Fatal(err)
	}
	s := store.New(db)
	older := store.Turn{TurnID: "t1", SessionKey: "k", SessionID: "sid", Generation: 1}
	if _, err := s.BeginTurn(ctx, older); err != nil {
		t.Fatal(err)
	}
	// A newer worker's first attempt, after an older worker's attempt,
	// finds no claim.
	newer := older
	newer.Attempt, newer.LockedAt = 3, time.Now()
	if _, err := s.Append(ctx, newer, store.Durable, 0, store.Message{Role: "user", Content: "hi"}); err != nil {
		t.Fatalf("a newer worker's write with no claim: %v", err)
	}
	if _, err := s.BeginTurn(ctx, newer); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Append(ctx, older, store.Durable, 1, store.Message{Role: "assistant", Content: "old"}); err != nil {
		t.Fatalf("an older worker's step after a claim: %v", err)
	}
	// The statements an older worker sends for its final, as they were.
	if _, err := db.Exec(ctx, `SELECT switchboard_fence('k', 1)`); err != nil {
		t.Fatalf("the fence an older worker calls: %v", err)
	}
	if _, err := s.Finish(ctx, older, nil, 2, &store.Message{Role: "assistant", Content: "done"},
		store.Final{Status: store.StatusCompleted, Kind: store.FinalText, Text: "done", Seq: 1}); err != nil {
		t.Fatalf("an older worker's final after a claim: %v", err)
	}
}

// The bus's delivery count is not the order of a turn's attempts: it
// starts again at 1 when the consumer is recreated (deleted by an
// operator, a stream restored) or the turn's message is published anew,
// and a NATS crash can lose its last increments. An attempt that took
// the session lock after an earlier attempt's claim is the newer one
// whatever its number: its writes and its claim must not be refused,
// or the turn ends stale and its user never gets an answer.
func TestAnAttemptWhoseDeliveryCountStartedAgainIsNotRefused(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	ctx := context.Background()
	if _, err := db.Exec(ctx, `INSERT INTO sessions (session_key, session_id, platform, generation) VALUES ('k', 'sid', 'x', 1)`); err != nil {
		t.Fatal(err)
	}
	s := store.New(db)
	// Attempt 3 claimed the turn, then its worker died; the consumer was
	// recreated and delivers the turn again from 1.
	locked := time.Now()
	old := store.Turn{TurnID: "t1", SessionKey: "k", SessionID: "sid", Generation: 1, Attempt: 3, LockedAt: locked}
	if _, err := s.BeginTurn(ctx, old); err != nil {
		t.Fatal(err)
	}
	again := old
	again.Attempt, again.LockedAt = 1, locked.Add(time.Minute)
	if _, err := s.BeginTurn(ctx, again); err != nil {
		t.Fatalf("the new first delivery's read: %v", err)
	}
	if _, err := s.Append(ctx, again, store.Durable, 0, store.Message{Role: "user", Content: "hi"}); err != nil {
		t.Fatalf("the new first delivery's step: %v", err)
	}
	// Its worker stops and hands the turn back; the next delivery (2)
	// claims the turn and ends it.
	next := old
	next.Attempt, next.LockedAt = 2, locked.Add(2*time.Minute)
	if _, err := s.BeginTurn(ctx, next); err != nil {
		t.Fatalf("the new second delivery's claim: %v", err)
	}
	if _, err := s.Finish(ctx, next, nil, 1, &store.Message{Role: "assistant", Content: "hello"},
		store.Final{Status: store.StatusCompleted, Kind: store.FinalText, Text: "hello", Seq: 1}); err != nil {
		t.Fatalf("the new second delivery's final: %v", err)
	}
}
