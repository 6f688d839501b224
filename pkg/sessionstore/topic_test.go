package sessionstore

import (
	"context"
	"errors"
	"testing"
	"time"

	eventsv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/events/v1"
	"github.com/switchboard-chat/switchboard/pkg/pg/pgtest"
)

// /topic <prefix> resolves among the chat's own conversations only (its
// DM key and its topics' keys): one match is the id, none or several
// are refused; another chat's conversations, even one whose key starts
// like the chat's, never count.
func TestChatSessionByPrefix(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := pgtest.New(t)
	s := New(db)
	const root = "agent:main:telegram:dm:c1"
	for _, h := range []struct{ key, id string }{
		{root, "20260101_000000_aaaa1111"},
		{root, "20260101_000000_aaaa2222"},
		{root + ":10", "20260102_000000_bbbb1111"},
		{root + ":10", "20260101_000000_aaaa1111"}, // restored into topic 10 too
		{"agent:main:telegram:dm:c11", "20260103_000000_cccc1111"},
		{"agent:main:telegram:dm:c2", "20260102_000000_bbbb2222"},
	} {
		if _, err := db.Exec(ctx, `INSERT INTO session_history (session_key, session_id, title, started_at) VALUES ($1, $2, '', $3)`,
			h.key, h.id, time.Now()); err != nil {
			t.Fatal(err)
		}
	}
	for _, tt := range []struct {
		prefix, want string
		err          error
	}{
		{"20260101_000000_aaaa1", "20260101_000000_aaaa1111", nil},
		{"20260101_000000_aaaa1111", "20260101_000000_aaaa1111", nil},
		{"20260102", "20260102_000000_bbbb1111", nil}, // c2's bbbb2222 does not count
		{"20260101_000000_aaaa", "", ErrAmbiguous},
		{"2026", "", ErrAmbiguous},
		{"20260103", "", ErrNotFound}, // c11's, another chat's
		{"20260102_000000_bbbb2", "", ErrNotFound},
		{"x", "", ErrNotFound},
		{"", "", ErrNotFound},
		{"%", "", ErrNotFound},
		{"2026010_", "", ErrNotFound},
	} {
		t.Run(tt.prefix, func(t *testing.T) {
			got, err := s.ChatSessionByPrefix(ctx, root, tt.prefix)
			if got != tt.want || !errors.Is(err, tt.err) || (tt.err == nil) != (err == nil) {
				t.Errorf("ChatSessionByPrefix(%q) = %q, %v; want %q, %v", tt.prefix, got, err, tt.want, tt.err)
			}
		})
	}
}

// A topic bound to the DM main view's own current conversation takes it
// over: the main view goes on in a new conversation of its own, at the
// next generation, its history of the old one ended "moved". Else both
// keys were on it, and once /topic off made the main view a chat again
// their turns could run on it at once.
func TestBindTopicMovesTheMainViewsConversation(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := New(pgtest.New(t))
	const root = "agent:main:telegram:dm:c1"
	src := &eventsv1.SessionSource{Platform: "telegram", ChatId: "c1", ChatType: "dm", UserId: "u1"}
	before, _, _, err := s.Arrive(ctx, root, "", src, "e1")
	if err != nil {
		t.Fatal(err)
	}
	if _, _, _, err := s.Arrive(ctx, TopicKey(root, "30"), "", src, "e2"); err != nil {
		t.Fatal(err)
	}
	bound, err := s.BindTopic(ctx, root, TopicKey(root, "30"), "30", "u1", before.ID)
	if err != nil || bound.ID != before.ID {
		t.Fatalf("bind: %+v %v", bound, err)
	}
	after, err := s.Get(ctx, root)
	if err != nil {
		t.Fatal(err)
	}
	if after.ID == before.ID || after.Generation <= before.Generation {
		t.Fatalf("main view after the bind: conversation %s generation %d, want a new one past %d (was %s)",
			after.ID, after.Generation, before.Generation, before.ID)
	}
	hist, err := s.History(ctx, root, 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(hist) != 2 || hist[0].SessionID != after.ID || !hist[0].EndedAt.IsZero() ||
		hist[1].SessionID != before.ID || hist[1].EndReason != "moved" {
		t.Errorf("main view's history: %+v", hist)
	}
	// Bound again (a redelivered /topic), nothing moves twice.
	if _, err := s.BindTopic(ctx, root, TopicKey(root, "30"), "30", "u1", before.ID); err != nil {
		t.Fatal(err)
	}
	if again, _ := s.Get(ctx, root); again.ID != after.ID {
		t.Errorf("a second bind moved the main view again: %s, was %s", again.ID, after.ID)
	}
}
