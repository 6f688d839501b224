package store_test

import (
	"context"
	"errors"
	"testing"

	"github.com/switchboard-chat/switchboard/pkg/pg/pgtest"
	"github.com/switchboard-chat/switchboard/services/worker/internal/store"
)

func TestFinishIsOnceAndFenced(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	ctx := context.Background()
	if _, err := db.Exec(ctx, `CREATE TABLE IF NOT EXISTS sessions (session_key text PRIMARY KEY,
		session_id text NOT NULL, platform text NOT NULL, generation bigint NOT NULL DEFAULT 0)`); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(ctx, `INSERT INTO sessions (session_key, session_id, platform, generation) VALUES ('k', 'sid', 'x', 3)`); err != nil {
		t.Fatal(err)
	}
	s := store.New(db)
	turn := store.Turn{TurnID: "t1", SessionKey: "k", SessionID: "sid", Generation: 3, UserKey: "x:u"}
	st, err := s.BeginTurn(ctx, turn)
	if err != nil || st.Final != nil {
		t.Fatalf("begin: %v %v", st, err)
	}
	if _, err := s.Append(ctx, turn, 0, store.Message{Role: "user", Content: "hello zanzibar"}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Append(ctx, turn, 0, store.Message{Role: "user", Content: "again"}); err == nil {
		t.Error("a committed step was written twice")
	}
	first := store.Final{Status: store.StatusCompleted, Kind: store.FinalText, Text: "one", Seq: 4}
	got, err := s.Finish(ctx, turn, 1, &store.Message{Role: "assistant", Content: "one"}, first)
	if err != nil || got != first {
		t.Fatalf("finish: %v %v", got, err)
	}
	got, err = s.Finish(ctx, turn, 2, &store.Message{Role: "assistant", Content: "two"}, store.Final{Kind: store.FinalText, Text: "two", Seq: 9})
	if err != nil || got.Text != "one" || got.Seq != 4 {
		t.Fatalf("second finish replaced the first: %v %v", got, err)
	}
	st, err = s.BeginTurn(ctx, turn)
	if err != nil || st.Final == nil || st.Final.Seq != 4 {
		t.Fatalf("redelivered begin: %+v %v", st, err)
	}
	_, msgs, err := s.History(ctx, "sid")
	if err != nil || len(msgs) != 2 {
		t.Fatalf("history %v %v", msgs, err)
	}
	hits, err := s.Search(ctx, "x:u", "other", "zanzibar", 5)
	if err != nil || len(hits) != 1 {
		t.Fatalf("search %v %v", hits, err)
	}
	if _, err := db.Exec(ctx, `UPDATE sessions SET generation = 4`); err != nil {
		t.Fatal(err)
	}
	if err := s.SavePrompt(ctx, turn, "sig", "p"); !errors.Is(err, store.ErrStaleGeneration) {
		t.Errorf("stale prompt save: %v", err)
	}
}
