package sessionstore

import (
	"context"
	"testing"

	eventsv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/events/v1"
	"github.com/switchboard-chat/switchboard/pkg/goal"
	"github.com/switchboard-chat/switchboard/pkg/pg/pgtest"
)

// The judge's verdict on a turn is recorded once: a retry of the turn
// (RecordVerdict again, another verdict even) finds the first, counts
// nothing more and queues no second continuation; the continuation goes
// after the user's messages; a goal that is done drops the continuation
// that waits, and the session row says whether a goal is active. It
// deletes no old verdicts on the turn's path: pkg/retention does.
func TestRecordVerdictOnce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := pgtest.New(t)
	s := New(db)
	key := "agent:main:telegram:dm:1"
	src := &eventsv1.SessionSource{Platform: "telegram", ChatId: "1", ChatType: "dm", UserId: "1"}
	sess, _, _, err := s.Arrive(ctx, key, "", src, "")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.SetGoal(ctx, key, sess.ID, "ship it", 20); err != nil {
		t.Fatal(err)
	}
	if got, _ := s.Get(ctx, key); !got.GoalActive() {
		t.Fatal("the session row does not say the goal is active")
	}
	cont := func(g goal.State) *eventsv1.MessageReceived {
		return &eventsv1.MessageReceived{Text: g.ContinuationPrompt(), Source: src}
	}
	if _, err := db.Exec(ctx, `INSERT INTO goal_verdicts (turn_id, session_key, verdict, reason, message, continued, created_at)
		VALUES ('t0', $1, 'continue', 'r', 'm', false, now() - interval '2 days')`, key); err != nil {
		t.Fatal(err)
	}
	v, err := s.RecordVerdict(ctx, key, sess.ID, "t1", goal.Judged{Verdict: goal.VerdictContinue, Reason: "more"}, cont)
	if err != nil || !v.Continued || v.Replayed || v.Message != "↻ Continuing toward goal (1/20): more" {
		t.Fatalf("first verdict: %+v, %v", v, err)
	}
	if _, found, err := s.TurnVerdict(ctx, "t0"); err != nil || !found {
		t.Fatalf("a day-old verdict was deleted on the turn's path (found %v, %v); retention deletes it", found, err)
	}
	// A retry of the turn, whose judge said something else this time.
	v, err = s.RecordVerdict(ctx, key, sess.ID, "t1", goal.Judged{Verdict: goal.VerdictDone, Reason: "now done"}, cont)
	if err != nil || !v.Replayed || !v.Continued || v.Message != "↻ Continuing toward goal (1/20): more" {
		t.Fatalf("retried verdict: %+v, %v", v, err)
	}
	if v, found, err := s.TurnVerdict(ctx, "t1"); err != nil || !found || v.Message != "↻ Continuing toward goal (1/20): more" {
		t.Fatalf("TurnVerdict: %+v, %v, %v", v, found, err)
	}
	g, err := s.Goal(ctx, key, sess.ID)
	if err != nil || g.TurnsUsed != 1 || g.Status != goal.Active {
		t.Fatalf("goal after the retry: %+v, %v", g, err)
	}
	// A user's message arrives: it goes before the continuation.
	if _, err := s.Enqueue(ctx, key, 7, false, &eventsv1.MessageReceived{EventId: "u1", Text: "quick question", Source: src}, 32); err != nil {
		t.Fatal(err)
	}
	_, head, err := s.Peek(ctx, key, 10)
	if err != nil || len(head) != 2 || head[0].EventID != "u1" || head[1].EventID != "goal:t1" {
		t.Fatalf("queue %+v, %v; want the user's message, then the continuation", head, err)
	}
	// Another turn's continue while one waits queues none more.
	if v, err := s.RecordVerdict(ctx, key, sess.ID, "t2", goal.Judged{Verdict: goal.VerdictContinue, Reason: "r"}, cont); err != nil || !v.Continued {
		t.Fatalf("second turn: %+v, %v", v, err)
	}
	if n, _ := s.QueueLen(ctx, key); n != 2 {
		t.Fatalf("%d queued, want 2", n)
	}
	// Done: the waiting continuation goes; the user's message stays.
	v, err = s.RecordVerdict(ctx, key, sess.ID, "t3", goal.Judged{Verdict: goal.VerdictDone, Reason: "shipped"}, cont)
	if err != nil || v.Continued || v.Message != "✓ Goal achieved: shipped" {
		t.Fatalf("done: %+v, %v", v, err)
	}
	_, head, _ = s.Peek(ctx, key, 10)
	if len(head) != 1 || head[0].EventID != "u1" {
		t.Fatalf("queue after done: %+v", head)
	}
	if got, _ := s.Get(ctx, key); got.GoalActive() {
		t.Error("the session row says a done goal is active")
	}
	// A goal no longer active takes no verdict.
	if v, err := s.RecordVerdict(ctx, key, sess.ID, "t4", goal.Judged{Verdict: goal.VerdictContinue}, cont); err != nil || v.Message != "" || v.Continued {
		t.Fatalf("verdict on a done goal: %+v, %v", v, err)
	}
	if g, _ := s.Goal(ctx, key, sess.ID); g.TurnsUsed != 3 || g.Status != goal.Done {
		t.Fatalf("goal: %+v", g)
	}
}
