package sessionstore

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	eventsv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/events/v1"
	"github.com/switchboard-chat/switchboard/pkg/pg/pgtest"
)

// TestHoldTurnStartsIsBounded: a hold whose holder goes silent without
// its connection closing (its host lost, a network partition: Postgres
// sees no close and kept the lock until TCP keepalive gave up, hours)
// held the session's turn starts back, and every StartTurn of the
// session (the sweep's, a completion's) waited that long. The server
// now ends a hold's connection idle past its bound; a hold released in
// time gives its connection back to the pool without that bound.
func TestHoldTurnStartsIsBounded(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := pgtest.New(t)
	s := New(db)
	s.holdIdle = 300 * time.Millisecond
	// Advisory locks are the database's, shared by every test's schema:
	// a key of this test's own.
	const key = "agent:main:telegram:dm:chat-hold-bound"
	if _, _, _, err := s.Arrive(ctx, key, "", &eventsv1.SessionSource{Platform: "telegram", ChatId: "chat-hold-bound"}, ""); err != nil {
		t.Fatal(err)
	}

	// A hold released in time: its connection goes back to the pool as
	// it came, and lives on past the bound. A pool of one connection:
	// the hold's is the one it gives out next.
	cfg := db.Config()
	cfg.MaxConns = 1
	one, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer one.Close()
	s1 := New(one)
	s1.holdIdle = s.holdIdle
	setting := func() string {
		t.Helper()
		var v string
		if err := one.QueryRow(ctx, `SHOW idle_session_timeout`).Scan(&v); err != nil {
			t.Fatalf("the connection of a released hold, past the bound: %v", err)
		}
		return v
	}
	before := setting()
	_, release, err := s1.HoldTurnStarts(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	release()
	time.Sleep(2 * s.holdIdle)
	if after := setting(); after != before {
		t.Errorf("the connection of a released hold: idle_session_timeout %q, want %q as before", after, before)
	}

	// A holder gone silent, a message queued: its start waits for the
	// bound, no longer.
	if _, err := s.Enqueue(ctx, key, 1, false, &eventsv1.MessageReceived{EventId: "e1", Text: "hello"}, 10); err != nil {
		t.Fatal(err)
	}
	_, release, err = s.HoldTurnStarts(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	defer release()
	sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	began := time.Now()
	started, err := s.StartTurn(sctx, key, "t1", 10, 0, func(context.Context, Turn) error { return nil })
	if err != nil || !started {
		t.Fatalf("the turn start behind a silent hold, after %v: started %v, %v", time.Since(began).Round(time.Millisecond), started, err)
	}
}
