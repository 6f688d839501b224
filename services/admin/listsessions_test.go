package admin

import (
	"context"
	"testing"

	adminv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/admin/v1"
	eventsv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/events/v1"
	"github.com/switchboard-chat/switchboard/pkg/pg/pgtest"
	"github.com/switchboard-chat/switchboard/pkg/sessionstore"
)

// TestListSessionsPlatformAsPruneTakesIt: the platform filter is read as
// PruneSessions and ListPairings read theirs (in any case), so
// "sessions list --platform Telegram" lists the sessions "sessions prune
// --platform Telegram" would delete.
func TestListSessionsPlatformAsPruneTakesIt(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := pgtest.New(t)
	s, err := New(Config{Addr: "127.0.0.1:0"}, Deps{DB: db, Token: "t"})
	if err != nil {
		t.Fatal(err)
	}
	store := sessionstore.New(db)
	for _, src := range []*eventsv1.SessionSource{
		{Platform: "telegram", ChatType: "dm", ChatId: "1"}, {Platform: "telegram", ChatType: "dm", ChatId: "2"},
		{Platform: "slack", ChatType: "dm", ChatId: "3"},
	} {
		k := "agent:main:" + src.GetPlatform() + ":dm:" + src.GetChatId()
		if _, _, _, err := store.Arrive(ctx, k, "", src, ""); err != nil {
			t.Fatal(err)
		}
	}
	for _, tt := range []struct {
		platform string
		want     int
	}{{"", 3}, {"telegram", 2}, {"Telegram", 2}, {"slack", 1}, {"discord", 0}} {
		resp, err := s.ListSessions(ctx, &adminv1.ListSessionsRequest{Platform: tt.platform})
		if err != nil {
			t.Fatalf("platform %q: %v", tt.platform, err)
		}
		if got := len(resp.GetSessions()); got != tt.want {
			t.Errorf("platform %q: %d sessions, want %d", tt.platform, got, tt.want)
		}
	}
}
