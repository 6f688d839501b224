package sessionstore

import (
	"context"
	"errors"
	"strings"
	"testing"

	eventsv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/events/v1"
	"github.com/switchboard-chat/switchboard/pkg/pg/pgtest"
)

// Titles are unique among a key's conversations, as Hermes's are in its
// session database: SetTitle refuses one another conversation has
// (without regard to case: /resume finds titles so), and
// SetTitleInLineage takes the next of its lineage, as Hermes's
// get_next_title_in_lineage does.
func TestTitlesAreUnique(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := New(pgtest.New(t))
	const key, other = "agent:main:telegram:dm:1", "agent:main:telegram:dm:2"
	for _, k := range []string{key, other} {
		if _, _, _, err := s.Arrive(ctx, k, "", &eventsv1.SessionSource{Platform: "telegram", ChatId: strings.TrimPrefix(k, "agent:main:telegram:dm:")}, ""); err != nil {
			t.Fatal(err)
		}
	}
	// newConversation resets key and titles the new conversation.
	newConversation := func(title string) string {
		t.Helper()
		if _, err := s.Reset(ctx, key, "new"); err != nil {
			t.Fatal(err)
		}
		got, err := s.SetTitleInLineage(ctx, key, title, 12)
		if err != nil {
			t.Fatal(err)
		}
		return got
	}
	if err := s.SetTitle(ctx, key, "Plan"); err != nil {
		t.Fatal(err)
	}
	first, err := s.Get(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	// Setting the conversation's own title again is no conflict, and
	// another key may have the same title.
	if err := s.SetTitle(ctx, key, "Plan"); err != nil {
		t.Fatalf("the same title again: %v", err)
	}
	if err := s.SetTitle(ctx, other, "Plan"); err != nil {
		t.Fatalf("the title in another chat: %v", err)
	}
	for _, c := range []struct{ asked, want string }{
		{"plan", "plan #2"},
		{"Plan", "Plan #3"},
		{"Plan #2", "Plan #4"}, // the base's lineage, not "Plan #2 #2"
		{"Fresh", "Fresh"},
		{"Plan #9", "Plan #9"}, // free: kept as asked
		{"Plan", "Plan #10"},
		{"Long title!", "Long title!"},
		{"Long title!", "Long titl #2"}, // cut to fit 12 characters
	} {
		if got := newConversation(c.asked); got != c.want {
			t.Fatalf("new conversation titled %q: got %q, want %q", c.asked, got, c.want)
		}
	}
	var taken *TitleTakenError
	err = s.SetTitle(ctx, key, "PLAN")
	if !errors.As(err, &taken) || !errors.Is(err, ErrTitleTaken) || taken.Title != "Plan" || taken.SessionID != first.ID {
		t.Fatalf("a title the first conversation has: %v, want it refused naming %s", err, first.ID)
	}
	cur, err := s.Get(ctx, key)
	if err != nil || cur.Title != "Long titl #2" {
		t.Fatalf("after the refusal the title is %q (%v), want it unchanged", cur.Title, err)
	}
	// /resume finds each title's one conversation.
	resumed, err := s.Resume(ctx, key, "plan", nil)
	if err != nil || resumed.ID != first.ID {
		t.Fatalf("resume plan: %+v %v, want %s", resumed, err, first.ID)
	}
	if err := s.SetTitle(ctx, "agent:main:telegram:dm:none", "x"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("title of no session: %v, want not found", err)
	}
}
