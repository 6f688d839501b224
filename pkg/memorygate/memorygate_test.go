package memorygate_test

import (
	"context"
	"errors"
	"sync"
	"testing"

	eventsv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/events/v1"
	"github.com/switchboard-chat/switchboard/pkg/memorygate"
	"github.com/switchboard-chat/switchboard/pkg/pg/pgtest"
)

func TestOwner(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		src  *eventsv1.SessionSource
		want string
	}{
		{&eventsv1.SessionSource{Platform: "telegram", ChatType: "dm", UserId: "7"}, "telegram:7"},
		{&eventsv1.SessionSource{Platform: "telegram", UserId: "7"}, "telegram:7"},
		{&eventsv1.SessionSource{Platform: "signal", ChatType: "dm", UserId: "7", UserIdAlt: "uuid-7"}, "signal:uuid-7"},
		{&eventsv1.SessionSource{Platform: "telegram", ChatType: "dm"}, ""},
		{&eventsv1.SessionSource{Platform: "telegram", ChatType: "group", UserId: "7"}, "session:K"},
	} {
		if got := memorygate.Owner("K", tc.src); got != tc.want {
			t.Errorf("Owner(%v) = %q, want %q", tc.src, got, tc.want)
		}
	}
}

// The gate: the default until an owner chooses; staging is idempotent
// per tool call; approvals race and one wins; a write that cannot apply
// now stays pending, one that never can is closed.
func TestStore(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	ctx := context.Background()
	s := memorygate.New(db, true, 30)
	if on, err := s.Enabled(ctx, "u"); err != nil || !on {
		t.Fatalf("default gate %v %v", on, err)
	}
	if err := s.SetEnabled(ctx, "u", false, "me"); err != nil {
		t.Fatal(err)
	}
	if on, _ := s.Enabled(ctx, "u"); on {
		t.Fatal("gate on after SetEnabled(false)")
	}
	if on, _ := s.Enabled(ctx, "v"); !on {
		t.Fatal("another owner's gate changed")
	}

	w := memorygate.Write{Owner: "u", Action: memorygate.ActionAdd, Content: "likes tea", TurnID: "t", CallID: "c"}
	id, err := s.Stage(ctx, w)
	if err != nil || !memorygate.ValidID(id) {
		t.Fatalf("Stage = %q, %v", id, err)
	}
	if again, err := s.Stage(ctx, w); err != nil || again != id {
		t.Fatalf("the same call staged again: %q (%v), want %q", again, err, id)
	}
	if list, _ := s.Pending(ctx, "v"); len(list) != 0 {
		t.Fatalf("another owner sees %v", list)
	}
	list, err := s.Pending(ctx, "u")
	if err != nil || len(list) != 1 || list[0].ID != id || list[0].Summary != "add to memory: likes tea" {
		t.Fatalf("Pending = %+v, %v", list, err)
	}

	// Eight approvals at once: one applies.
	var wg sync.WaitGroup
	outcomes := make([]memorygate.Outcome, 8)
	for i := range outcomes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			o, _, err := s.Approve(ctx, "u", id, "me")
			if err != nil {
				t.Error(err)
			}
			outcomes[i] = o
		}()
	}
	wg.Wait()
	applied := 0
	for _, o := range outcomes {
		switch o {
		case memorygate.Applied:
			applied++
		case memorygate.NotPending:
		default:
			t.Errorf("outcome %v", o)
		}
	}
	var n int
	if err := db.QueryRow(ctx, `SELECT count(*) FROM agent_memories WHERE user_key = 'u' AND content = 'likes tea'`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if applied != 1 || n != 1 {
		t.Fatalf("%d approvals applied, %d notes; want 1 and 1", applied, n)
	}
	if ok, _ := s.Reject(ctx, "u", id, "me"); ok {
		t.Fatal("rejected an approved write")
	}

	// Past the limit (30 characters): stays pending.
	big, _ := s.Stage(ctx, memorygate.Write{Owner: "u", Action: memorygate.ActionAdd, Content: "a note far too long to fit in"})
	if o, msg, err := s.Approve(ctx, "u", big, "me"); err != nil || o != memorygate.Retry || msg == "" {
		t.Fatalf("Approve past the limit = %v %q %v", o, msg, err)
	}
	if list, _ := s.Pending(ctx, "u"); len(list) != 1 || list[0].ID != big {
		t.Fatalf("the refused write is not pending: %+v", list)
	}
	if _, err := memorygate.AddNote(ctx, db, "u", "a note far too long to fit in", 30); !errors.Is(err, memorygate.ErrFull) {
		t.Fatalf("AddNote past the limit: %v", err)
	}
	if ok, err := s.Reject(ctx, "u", big, "me"); err != nil || !ok {
		t.Fatalf("Reject = %v %v", ok, err)
	}

	// A removal whose note is gone is closed.
	gone, _ := s.Stage(ctx, memorygate.Write{Owner: "u", Action: memorygate.ActionRemove, Content: "x", NoteID: 99999})
	if o, msg, err := s.Approve(ctx, "u", gone, "me"); err != nil || o != memorygate.Dropped || msg != "no note 99999" {
		t.Fatalf("Approve of a gone note = %v %q %v", o, msg, err)
	}
	if list, _ := s.Pending(ctx, "u"); len(list) != 0 {
		t.Fatalf("pending after all decided: %+v", list)
	}
}

func TestSummary(t *testing.T) {
	t.Parallel()
	long := make([]rune, 200)
	for i := range long {
		long[i] = 'é'
	}
	for _, tc := range []struct {
		w    memorygate.Write
		want string
	}{
		{memorygate.Write{Action: memorygate.ActionAdd, Content: "likes tea"}, "add to memory: likes tea"},
		{memorygate.Write{Action: memorygate.ActionRemove, Content: "old"}, "remove from memory: old"},
		{memorygate.Write{Action: memorygate.ActionAdd, Content: string(long)}, "add to memory: " + string(long[:120])},
	} {
		if got := tc.w.Summary(); got != tc.want {
			t.Errorf("Summary = %q, want %q", got, tc.want)
		}
	}
}
