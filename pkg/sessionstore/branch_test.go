package sessionstore

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"

	eventsv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/events/v1"
)

// Branch switches the key to a copy of its conversation: every message
// in order (tool calls included, turn ids "<id>@<branch>"), the
// summaries pointing at the copies (so the worker's history, the
// messages after the latest summary, is the original's), the stored
// prompt; the original is untouched and ended "branched" in the
// history, the branch current with the next generation and the title
// asked for, or the original's continued in its lineage.
func TestBranchCopiesTheConversation(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := newForkSource(t)
	if err := f.s.SetTitle(ctx, f.key, "Plan"); err != nil {
		t.Fatal(err)
	}
	before, err := f.s.Get(ctx, f.key)
	if err != nil {
		t.Fatal(err)
	}
	orig := f.transcript(t, f.id)
	b, err := f.s.Branch(ctx, f.key, "", 100)
	if err != nil {
		t.Fatal(err)
	}
	br := b.Session
	if b.ParentID != f.id || br.ID == f.id || br.Generation != before.Generation+1 || br.Title != "Plan #2" || b.Messages != 2 {
		t.Fatalf("branched %+v, want parent %s, a new id, generation %d, title Plan #2, 2 messages", b, f.id, before.Generation+1)
	}
	if cur, _ := f.s.Get(ctx, f.key); cur.ID != br.ID {
		t.Fatalf("current conversation %s, want the branch %s", cur.ID, br.ID)
	}
	got := f.transcript(t, br.ID)
	if !slices.Equal(got.contents, orig.contents) || !slices.Equal(got.roles, orig.roles) || !slices.Equal(got.calls, orig.calls) {
		t.Fatalf("copy %+v\nwant %+v", got, orig)
	}
	for i, turn := range got.turns {
		if turn != orig.turns[i]+"@"+br.ID {
			t.Errorf("copied turn id %q, want %q", turn, orig.turns[i]+"@"+br.ID)
		}
	}
	if again := f.transcript(t, f.id); !slices.Equal(again.ids, orig.ids) {
		t.Errorf("original changed: %v, was %v", again.ids, orig.ids)
	}
	// Summaries end at the copies of the messages the originals end at.
	want := []summary{{got.ids[0], "summary to alpha"}, {got.ids[3], "summary to echo"}}
	if s := f.summaries(t, br.ID); !slices.Equal(s, want) {
		t.Errorf("summaries %v, want %v", s, want)
	}
	if p := f.prompt(t, br.ID); p != "the prompt" {
		t.Errorf("prompt %q", p)
	}
	// What the worker reads for the next turn (historySQL): the same.
	history := func(id string) []string {
		rows, err := f.db.Query(ctx, `SELECT role || ':' || content FROM transcript_messages WHERE session_id = $1
			AND id > COALESCE((SELECT max(upto_id) FROM transcript_summaries WHERE session_id = $1), 0) ORDER BY id`, id)
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
		var out []string
		for rows.Next() {
			var s string
			if err := rows.Scan(&s); err != nil {
				t.Fatal(err)
			}
			out = append(out, s)
		}
		return out
	}
	if h, o := history(br.ID), history(f.id); !slices.Equal(h, o) || len(o) != 2 {
		t.Errorf("branch's history %q, original's %q", h, o)
	}
	hist, err := f.s.History(ctx, f.key, 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(hist) != 2 || hist[0].SessionID != br.ID || hist[0].Title != "Plan #2" || !hist[0].EndedAt.IsZero() ||
		hist[1].SessionID != f.id || hist[1].EndReason != "branched" || hist[1].Title != "Plan" {
		t.Errorf("history %+v", hist)
	}
	// Back to the original with /resume, by its title.
	if r, err := f.s.Resume(ctx, f.key, "plan", nil); err != nil || r.ID != f.id {
		t.Fatalf("resume the original: %v, %v", r.ID, err)
	}
	// A title asked for; one taken continues its lineage.
	for _, tt := range []struct{ ask, want string }{{"Side quest", "Side quest"}, {"side QUEST", "side QUEST #2"}, {"plan", "plan #3"}} {
		if _, err := f.s.Resume(ctx, f.key, f.id, nil); err != nil && !errors.Is(err, ErrNotFound) {
			t.Fatal(err)
		}
		b, err := f.s.Branch(ctx, f.key, tt.ask, 100)
		if err != nil || b.Session.Title != tt.want {
			t.Errorf("branch %q: title %q (%v), want %q", tt.ask, b.Session.Title, err, tt.want)
		}
	}
}

// A conversation without a message is not branched (Hermes: "No
// conversation to branch"); nothing changes. An untitled conversation's
// branch is "branch", then "branch #2".
func TestBranchNothingAndUntitled(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := newForkSource(t)
	src := &eventsv1.SessionSource{Platform: "telegram", ChatId: "c", ChatType: "dm", UserId: "u"}
	empty, _, _, err := f.s.Arrive(ctx, "agent:main:telegram:dm:c", "", src, "e9")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.s.Branch(ctx, empty.Key, "", 100); !errors.Is(err, ErrNothingToBranch) {
		t.Fatalf("branch of an empty conversation: %v", err)
	}
	if cur, _ := f.s.Get(ctx, empty.Key); cur.ID != empty.ID || cur.Generation != empty.Generation {
		t.Errorf("refused branch changed the session: %+v", cur)
	}
	if _, err := f.s.Branch(ctx, "agent:main:telegram:dm:nobody", "", 100); !errors.Is(err, ErrNotFound) {
		t.Errorf("branch of no session: %v", err)
	}
	var titles []string
	for range 2 {
		b, err := f.s.Branch(ctx, f.key, "", 100)
		if err != nil {
			t.Fatal(err)
		}
		titles = append(titles, b.Session.Title)
	}
	if strings.Join(titles, ",") != "branch,branch #2" {
		t.Errorf("titles %q", titles)
	}
}

// /yolo's row: toggled, set, read, per key.
func TestYoloPerKey(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := newForkSource(t)
	steps := []struct {
		do   func() (bool, error)
		want bool
	}{
		{func() (bool, error) { return f.s.ToggleYolo(ctx, "k1", "telegram:a") }, true},
		{func() (bool, error) { return f.s.Yolo(ctx, "k1") }, true},
		{func() (bool, error) { return f.s.Yolo(ctx, "k2") }, false},
		{func() (bool, error) { return f.s.ToggleYolo(ctx, "k1", "telegram:a") }, false},
		{func() (bool, error) { return true, f.s.SetYolo(ctx, "k1", true, "telegram:a") }, true},
		{func() (bool, error) { return true, f.s.SetYolo(ctx, "k1", true, "telegram:a") }, true},
		{func() (bool, error) { return f.s.Yolo(ctx, "k1") }, true},
		{func() (bool, error) { return false, f.s.SetYolo(ctx, "k1", false, "telegram:a") }, false},
		{func() (bool, error) { return f.s.Yolo(ctx, "k1") }, false},
	}
	for i, st := range steps {
		if got, err := st.do(); err != nil || got != st.want {
			t.Fatalf("step %d: %v, %v; want %v", i, got, err, st.want)
		}
	}
}
