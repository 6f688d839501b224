package sessionstore

import (
	"context"
	"testing"

	"github.com/switchboard-chat/switchboard/pkg/pg/pgtest"
)

// TestToolProgressMode checks that a platform's mode is kept per profile
// and platform, replaced by a later choice, and that the table refuses a
// mode delivery does not know.
func TestToolProgressMode(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := New(pgtest.New(t))
	if got, err := s.ToolProgressMode(ctx, "", "telegram"); err != nil || got != "" {
		t.Fatalf("unset: %q, %v; want empty", got, err)
	}
	if err := s.SetToolProgressMode(ctx, "", "Telegram", "new", "telegram:1"); err != nil {
		t.Fatal(err)
	}
	if err := s.SetToolProgressMode(ctx, "", "telegram", "verbose", "telegram:2"); err != nil {
		t.Fatal(err)
	}
	if err := s.SetToolProgressMode(ctx, "coder", "telegram", "off", "telegram:1"); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct{ profile, platform, want string }{
		{"", "telegram", "verbose"},
		{"", "TELEGRAM", "verbose"},
		{"coder", "telegram", "off"},
		{"", "slack", ""},
		{"other", "telegram", ""},
	} {
		if got, err := s.ToolProgressMode(ctx, tt.profile, tt.platform); err != nil || got != tt.want {
			t.Errorf("ToolProgressMode(%q, %q) = %q, %v; want %q", tt.profile, tt.platform, got, err, tt.want)
		}
	}
	if err := s.SetToolProgressMode(ctx, "", "slack", "log", ""); err == nil {
		t.Error("mode log was stored; want the check to refuse it")
	}
}
