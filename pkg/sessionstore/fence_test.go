package sessionstore

import (
	"context"
	"errors"
	"testing"
	"time"

	eventsv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/events/v1"
	"github.com/switchboard-chat/switchboard/pkg/goal"
	"github.com/switchboard-chat/switchboard/pkg/loop"
	"github.com/switchboard-chat/switchboard/pkg/pg/pgtest"
)

// The writes a worker makes after a turn's answer (the goal's verdict
// and continuation, a /loop wakeup's evaluation) are fenced by the
// turn's generation: once the session moved on (/stop, /new) they write
// nothing and say so; at the current generation they go through.
func TestFencedWritesRefuseAStaleGeneration(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := pgtest.New(t)
	s := New(db)
	key := "agent:main:telegram:dm:5"
	src := &eventsv1.SessionSource{Platform: "telegram", ChatId: "5", ChatType: "dm", UserId: "5"}
	sess, _, _, err := s.Arrive(ctx, key, "", src, "")
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	l := loop.State{Kind: loop.KindLoop, ID: "l1", Prompt: "check", Status: loop.Active, Interval: time.Minute, Delay: time.Minute,
		NextDue: now.Add(-time.Second)}
	if _, err := s.SetLoop(ctx, key, sess.ID, l, &eventsv1.MessageReceived{Source: src}); err != nil {
		t.Fatal(err)
	}
	fired, err := s.FireDue(ctx, now, 10, notBusy, noSkip)
	if err != nil || len(fired) != 1 {
		t.Fatalf("fired %v, %v", fired, err)
	}
	if _, err := db.Exec(ctx, `DELETE FROM session_queue WHERE session_key = $1`, key); err != nil {
		t.Fatal(err)
	}
	if _, err := s.SetGoal(ctx, key, sess.ID, "ship it", 20); err != nil {
		t.Fatal(err)
	}
	cur, err := s.Get(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	gen := cur.Generation
	if _, _, _, err := s.Stop(ctx, key); err != nil { // the session moves on
		t.Fatal(err)
	}
	cont := func(g goal.State) *eventsv1.MessageReceived {
		return &eventsv1.MessageReceived{Text: g.ContinuationPrompt(), Source: src}
	}
	stale := s.Fenced(key, gen)
	if _, err := stale.RecordVerdict(ctx, key, sess.ID, "t1", goal.Judged{Verdict: goal.VerdictContinue, Reason: "more"}, cont); !errors.Is(err, ErrStaleGeneration) {
		t.Errorf("stale verdict: %v, want ErrStaleGeneration", err)
	}
	if _, err := stale.CompleteWakeup(ctx, key, fired[0].EventID, "done", loop.Verdict{}); !errors.Is(err, ErrStaleGeneration) {
		t.Errorf("stale wakeup: %v, want ErrStaleGeneration", err)
	}
	if _, found, _ := s.TurnVerdict(ctx, "t1"); found {
		t.Error("a stale verdict was recorded")
	}
	if g, _ := s.Goal(ctx, key, sess.ID); g.TurnsUsed != 0 {
		t.Errorf("a stale verdict counted a turn: %+v", g)
	}
	if n, _ := s.QueueLen(ctx, key); n != 0 {
		t.Errorf("a stale verdict queued %d messages", n)
	}
	var completed string
	if err := db.QueryRow(ctx, `SELECT coalesce(completed_event_id, '') FROM session_loops WHERE session_key = $1`, key).Scan(&completed); err != nil || completed != "" {
		t.Errorf("a stale wakeup was evaluated (%q, %v)", completed, err)
	}
	fresh := s.Fenced(key, gen+1)
	if v, err := fresh.RecordVerdict(ctx, key, sess.ID, "t2", goal.Judged{Verdict: goal.VerdictContinue, Reason: "more"}, cont); err != nil || !v.Continued {
		t.Errorf("current verdict: %+v, %v", v, err)
	}
	if c, err := fresh.CompleteWakeup(ctx, key, fired[0].EventID, "still red", loop.Verdict{}); err != nil || c.Label == "" {
		t.Errorf("current wakeup: %+v, %v", c, err)
	}
}
