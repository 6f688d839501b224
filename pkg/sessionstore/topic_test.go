package sessionstore

import (
	"context"
	"errors"
	"testing"
	"time"

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
