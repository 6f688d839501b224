package sessionstore

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	eventsv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/events/v1"
	"github.com/switchboard-chat/switchboard/pkg/loop"
	"github.com/switchboard-chat/switchboard/pkg/pg/pgtest"
)

func notBusy(context.Context, string) (bool, error) { return false, nil }
func noSkip(string, string, Skip)                   {}

// Schedulers racing over the same due loops (as router replicas do)
// fire each tick once: every due loop gets one wakeup queued and one
// tick counted, whatever number of passes run at once.
func TestFireDueOnceAcrossSchedulers(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := pgtest.New(t)
	s := New(db)
	const n = 12
	now := time.Now()
	for i := range n {
		key := fmt.Sprintf("agent:main:telegram:dm:%d", i)
		src := &eventsv1.SessionSource{Platform: "telegram", ChatId: fmt.Sprint(i), ChatType: "dm", UserId: fmt.Sprint(i)}
		sess, _, _, err := s.Arrive(ctx, key, "", src, "")
		if err != nil {
			t.Fatal(err)
		}
		l := loop.State{Kind: loop.KindLoop, ID: fmt.Sprintf("id%d", i), Prompt: "check", Status: loop.Active,
			Interval: time.Minute, Delay: time.Minute, NextDue: now.Add(-time.Second)}
		if _, err := s.SetLoop(ctx, key, sess.ID, l, &eventsv1.MessageReceived{Source: src}); err != nil {
			t.Fatal(err)
		}
	}
	var mu sync.Mutex
	var fired []Fired
	var wg sync.WaitGroup
	for range 6 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 3 {
				f, err := New(db).FireDue(ctx, now, 5, notBusy, noSkip)
				if err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				fired = append(fired, f...)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if len(fired) != n {
		t.Fatalf("%d ticks fired, want %d: %+v", len(fired), n, fired)
	}
	seen := map[string]bool{}
	for _, f := range fired {
		if seen[f.Key] || f.Tick != 1 || f.EventID != fmt.Sprintf("loop:id%s:1", strings.TrimPrefix(f.Key, "agent:main:telegram:dm:")) {
			t.Errorf("fired %+v", f)
		}
		seen[f.Key] = true
	}
	var queued, ticks int
	if err := db.QueryRow(ctx, `SELECT (SELECT count(*) FROM session_queue WHERE starts_with(event_id, 'loop:')), (SELECT sum(ticks) FROM session_loops)`).Scan(&queued, &ticks); err != nil {
		t.Fatal(err)
	}
	if queued != n || ticks != n {
		t.Errorf("%d wakeups queued, %d ticks counted; want %d", queued, ticks, n)
	}
}

// A due tick fires only into an idle session: not while a turn holds
// it, nor while messages wait (the user's go first); a loop waits for an
// active goal; a loop of a conversation that ended (/new) is cleared.
// The answer to a wakeup is evaluated once: a repeat returns the same
// line and changes nothing.
func TestFireDueIdleOnlyAndCompleteOnce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := pgtest.New(t)
	s := New(db)
	key := "agent:main:telegram:dm:7"
	src := &eventsv1.SessionSource{Platform: "telegram", ChatId: "7", ChatType: "dm", UserId: "7"}
	sess, _, _, err := s.Arrive(ctx, key, "", src, "")
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	set := func(kind string, times int) {
		t.Helper()
		l := loop.State{Kind: kind, ID: "a" + kind, Prompt: "check", Status: loop.Active, Interval: time.Minute, Delay: time.Minute,
			Times: times, NextDue: now.Add(-time.Second)}
		if _, err := s.SetLoop(ctx, key, sess.ID, l, &eventsv1.MessageReceived{Source: src}); err != nil {
			t.Fatal(err)
		}
	}
	set(loop.KindLoop, 2)
	var skips []Skip
	skip := func(_, _ string, why Skip) { skips = append(skips, why) }
	busy := func(context.Context, string) (bool, error) { return true, nil }
	if f, err := s.FireDue(ctx, now, 10, busy, skip); err != nil || len(f) != 0 || len(skips) != 1 || skips[0] != SkipBusy {
		t.Fatalf("busy: fired %v, skips %v, err %v", f, skips, err)
	}
	// A user's message waits: the session is not idle.
	if _, err := s.Enqueue(ctx, key, 1, false, &eventsv1.MessageReceived{EventId: "u1", Text: "hi", Source: src}, 10); err != nil {
		t.Fatal(err)
	}
	skips = nil
	if f, _ := s.FireDue(ctx, now, 10, notBusy, skip); len(f) != 0 || len(skips) != 1 || skips[0] != SkipBusy {
		t.Fatalf("queued: fired %v, skips %v", f, skips)
	}
	if _, err := db.Exec(ctx, `DELETE FROM session_queue WHERE session_key = $1`, key); err != nil {
		t.Fatal(err)
	}
	f, err := s.FireDue(ctx, now, 10, notBusy, noSkip)
	if err != nil || len(f) != 1 {
		t.Fatalf("idle: fired %v, %v", f, err)
	}
	// Not due again until its interval passed.
	if again, _ := s.FireDue(ctx, now.Add(30*time.Second), 10, notBusy, noSkip); len(again) != 0 {
		t.Fatalf("fired again before its interval: %v", again)
	}
	c, err := s.CompleteWakeup(ctx, key, f[0].EventID, "still red", loop.Verdict{})
	if err != nil || c.Label != "continued" || c.Message != "" {
		t.Fatalf("complete 1: %+v %v", c, err)
	}
	if _, err := db.Exec(ctx, `DELETE FROM session_queue WHERE session_key = $1`, key); err != nil {
		t.Fatal(err)
	}
	f2, _ := s.FireDue(ctx, now.Add(2*time.Minute), 10, notBusy, noSkip)
	if len(f2) != 1 || f2[0].Tick != 2 {
		t.Fatalf("second tick: %v", f2)
	}
	c, err = s.CompleteWakeup(ctx, key, f2[0].EventID, "ok", loop.Verdict{})
	if err != nil || c.Label != "times" || c.Message != "✓ Loop finished — ran 2/2 times." {
		t.Fatalf("complete 2: %+v %v", c, err)
	}
	// A redelivered turn: the same line, nothing changed.
	c, err = s.CompleteWakeup(ctx, key, f2[0].EventID, "LOOP_COMPLETE", loop.Verdict{})
	if err != nil || !c.Replayed || c.Message != "✓ Loop finished — ran 2/2 times." || c.Label != "" {
		t.Fatalf("replay: %+v %v", c, err)
	}
	l, _ := s.Loop(ctx, key, sess.ID, loop.KindLoop)
	if l.Status != loop.Done || l.Ticks != 2 {
		t.Fatalf("after --times 2: %+v", l)
	}
	// A goal of the conversation defers a loop.
	set(loop.KindLoop, 0)
	if _, err := s.SetGoal(ctx, key, sess.ID, "ship", 20); err != nil {
		t.Fatal(err)
	}
	skips = nil
	if f, _ := s.FireDue(ctx, now, 10, notBusy, skip); len(f) != 0 || len(skips) != 1 || skips[0] != SkipGoal {
		t.Fatalf("goal: fired %v, skips %v", f, skips)
	}
	// /new: the loop's conversation ended.
	if _, err := s.Reset(ctx, key, "new"); err != nil {
		t.Fatal(err)
	}
	skips = nil
	if f, _ := s.FireDue(ctx, now, 10, notBusy, skip); len(f) != 0 || len(skips) != 1 || skips[0] != SkipEnded {
		t.Fatalf("ended: fired %v, skips %v", f, skips)
	}
	var status string
	if err := db.QueryRow(ctx, `SELECT status FROM session_loops WHERE session_key = $1 AND kind = 'loop'`, key).Scan(&status); err != nil || status != loop.Cleared {
		t.Fatalf("ended loop: %q %v", status, err)
	}
}

// Due ticks of busy sessions, which stay due, do not hide the others:
// the pages after them are fired too.
func TestFireDuePagesPastBusySessions(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := pgtest.New(t)
	s := New(db)
	now := time.Now()
	for i := range 5 {
		key := fmt.Sprintf("agent:main:telegram:dm:%d", i)
		src := &eventsv1.SessionSource{Platform: "telegram", ChatId: fmt.Sprint(i), ChatType: "dm", UserId: fmt.Sprint(i)}
		sess, _, _, err := s.Arrive(ctx, key, "", src, "")
		if err != nil {
			t.Fatal(err)
		}
		// The idle session's tick is the latest due.
		l := loop.State{Kind: loop.KindLoop, ID: fmt.Sprint(i), Prompt: "p", Status: loop.Active, Interval: time.Minute,
			NextDue: now.Add(-time.Duration(10-i) * time.Second)}
		if _, err := s.SetLoop(ctx, key, sess.ID, l, &eventsv1.MessageReceived{Source: src}); err != nil {
			t.Fatal(err)
		}
	}
	idle := "agent:main:telegram:dm:4"
	busy := func(_ context.Context, key string) (bool, error) { return key != idle, nil }
	var all []Fired
	var after *DueCursor
	pages := 0
	for {
		f, next, err := s.FireDuePage(ctx, now, 2, after, busy, noSkip)
		if err != nil {
			t.Fatal(err)
		}
		pages++
		all = append(all, f...)
		if next == nil {
			break
		}
		after = next
	}
	if len(all) != 1 || all[0].Key != idle || pages != 3 {
		t.Errorf("fired %+v in %d pages; want the idle session's tick, in 3 pages", all, pages)
	}
}

// /stop ends the loop's wakeup in flight once, whatever number of
// router replicas handle a /stop at once: one evaluation (an empty
// answer, Hermes's complete_tick after an interrupted turn), the rest
// change nothing, and the worker that finishes the wakeup after all
// announces nothing again.
func TestStopWakeupOnce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := pgtest.New(t)
	s := New(db)
	src := &eventsv1.SessionSource{Platform: "telegram", ChatId: "8", ChatType: "dm", UserId: "8"}
	now := time.Now()
	for _, tc := range []struct {
		name      string
		times     int
		evaluated bool // the wakeup's turn finished before the /stop
		wantLabel string
		wantMsg   string
		status    string
	}{
		{name: "continues", wantLabel: "continued", status: loop.Active},
		{name: "last run", times: 1, wantLabel: "times", wantMsg: "✓ Loop finished — ran 1/1 times.", status: loop.Done},
		{name: "evaluated before", times: 1, evaluated: true, status: loop.Done},
	} {
		t.Run(tc.name, func(t *testing.T) {
			key := "agent:main:telegram:dm:stop-" + strings.ReplaceAll(tc.name, " ", "-")
			sess, _, _, err := s.Arrive(ctx, key, "", src, "")
			if err != nil {
				t.Fatal(err)
			}
			if got, err := s.StopWakeup(ctx, key); err != nil || got != (Completion{}) {
				t.Fatalf("no loop: %+v %v", got, err)
			}
			l := loop.State{Kind: loop.KindLoop, ID: "s", Prompt: "check", Status: loop.Active, Interval: time.Minute, Delay: time.Minute,
				Times: tc.times, NextDue: now.Add(-time.Second)}
			if _, err := s.SetLoop(ctx, key, sess.ID, l, &eventsv1.MessageReceived{Source: src}); err != nil {
				t.Fatal(err)
			}
			if got, err := s.StopWakeup(ctx, key); err != nil || got != (Completion{}) {
				t.Fatalf("nothing fired yet: %+v %v", got, err)
			}
			f, err := s.FireDue(ctx, now, 10, func(_ context.Context, k string) (bool, error) { return k != key, nil }, noSkip)
			if err != nil || len(f) != 1 {
				t.Fatalf("fire: %v %v", f, err)
			}
			if tc.evaluated {
				if _, err := s.CompleteWakeup(ctx, key, f[0].EventID, "done", loop.Verdict{}); err != nil {
					t.Fatal(err)
				}
			}
			const replicas = 4
			got := make([]Completion, replicas)
			var wg sync.WaitGroup
			for i := range replicas {
				wg.Add(1)
				go func() {
					defer wg.Done()
					c, err := s.StopWakeup(ctx, key)
					if err != nil {
						t.Error(err)
					}
					got[i] = c
				}()
			}
			wg.Wait()
			evaluated := 0
			for _, c := range got {
				if c.Label == "" {
					continue
				}
				evaluated++
				if c.Label != tc.wantLabel || c.Message != tc.wantMsg {
					t.Errorf("stop: %+v, want label %q message %q", c, tc.wantLabel, tc.wantMsg)
				}
			}
			if want := map[bool]int{true: 0, false: 1}[tc.evaluated]; evaluated != want {
				t.Errorf("%d replicas evaluated the wakeup, want %d: %+v", evaluated, want, got)
			}
			after, err := s.Loop(ctx, key, sess.ID, loop.KindLoop)
			if err != nil || after.Status != tc.status || after.Ticks != 1 {
				t.Fatalf("loop after /stop: %+v %v", after, err)
			}
			if tc.status == loop.Active && after.NextDue.Before(time.Now().Add(50*time.Second)) {
				t.Errorf("next wakeup due %v: want a minute from the stop", after.NextDue)
			}
			if tc.evaluated {
				return
			}
			// The worker finishes the stopped wakeup after all: nothing
			// changes, nothing to announce.
			c, err := s.CompleteWakeup(ctx, key, f[0].EventID, "LOOP_COMPLETE", loop.Verdict{})
			if err != nil || !c.Replayed || c.Message != "" || c.Label != "" {
				t.Errorf("worker after /stop: %+v %v", c, err)
			}
		})
	}
}
