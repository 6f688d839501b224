package sessionstore

import (
	"context"
	"errors"
	"sync"
	"testing"
)

// Once applies a command's effect once per event: a second call runs
// nothing and returns the first answer; an effect's error records nothing
// (the next delivery applies it); the effect's writes commit with the
// record or not at all; two deliveries at once apply it once.
func TestOnceAppliesAnEffectOncePerEvent(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := newForkSource(t)
	history := func() int {
		t.Helper()
		var n int
		if err := f.db.QueryRow(ctx, `SELECT count(*) FROM session_history WHERE session_key = $1`, f.key).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	reset := func(ctx context.Context, tx *Store) (Answer, error) {
		sess, err := tx.Reset(ctx, f.key, "new")
		return Answer{Text: "new " + sess.ID, Generation: sess.Generation, Seq: 2}, err
	}
	first, done, err := f.s.Once(ctx, "telegram:bot:e1", f.key, reset)
	if err != nil || done || first.Seq != 2 || first.Generation == 0 {
		t.Fatalf("first: %+v done %v err %v", first, done, err)
	}
	again, done, err := f.s.Once(ctx, "telegram:bot:e1", f.key, reset)
	if err != nil || !done || again != first {
		t.Fatalf("again: %+v done %v err %v, want the first answer %+v, done", again, done, err, first)
	}
	if n := history(); n != 2 {
		t.Fatalf("%d conversations, want 2 (one reset)", n)
	}

	// An error rolls the effect and the record back.
	boom := errors.New("boom")
	if _, _, err := f.s.Once(ctx, "telegram:bot:e2", f.key, func(ctx context.Context, tx *Store) (Answer, error) {
		if _, err := tx.Reset(ctx, f.key, "new"); err != nil {
			return Answer{}, err
		}
		return Answer{}, boom
	}); !errors.Is(err, boom) {
		t.Fatalf("failing effect: %v", err)
	}
	if n := history(); n != 2 {
		t.Fatalf("%d conversations after a failed effect, want 2", n)
	}

	// Two deliveries of one event at once.
	var wg sync.WaitGroup
	answers := make([]Answer, 4)
	dones := make([]bool, 4)
	for i := range answers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			a, d, err := f.s.Once(ctx, "telegram:bot:e2", f.key, reset)
			if err != nil {
				t.Error(err)
			}
			answers[i], dones[i] = a, d
		}()
	}
	wg.Wait()
	applied := 0
	for i, a := range answers {
		if !dones[i] {
			applied++
		}
		if a != answers[0] {
			t.Errorf("answers differ: %+v and %+v", a, answers[0])
		}
	}
	if applied != 1 || history() != 3 {
		t.Fatalf("applied %d times, %d conversations, want once and 3", applied, history())
	}
	var key string
	if err := f.db.QueryRow(ctx, `SELECT session_key FROM command_effects WHERE event_id = 'telegram:bot:e2'`).Scan(&key); err != nil || key != f.key {
		t.Fatalf("record's key %q, %v", key, err)
	}
}

// Answered finds what Once recorded for an event, and nothing for an
// event Once never saw.
func TestAnsweredReadsOncesRecord(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := newForkSource(t)
	if a, ok, err := f.s.Answered(ctx, "telegram:bot:none"); err != nil || ok || a != (Answer{}) {
		t.Fatalf("an event never recorded: %+v, %v, %v", a, ok, err)
	}
	want := Answer{Text: "refused", Generation: 7, Seq: 2}
	if _, _, err := f.s.Once(ctx, "telegram:bot:r1", f.key, func(context.Context, *Store) (Answer, error) { return want, nil }); err != nil {
		t.Fatal(err)
	}
	if a, ok, err := f.s.Answered(ctx, "telegram:bot:r1"); err != nil || !ok || a != want {
		t.Fatalf("recorded: %+v, %v, %v, want %+v", a, ok, err, want)
	}
}
