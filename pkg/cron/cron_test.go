package cron_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/switchboard-chat/switchboard/pkg/cron"
	"github.com/switchboard-chat/switchboard/pkg/pg/pgtest"
)

var t0 = time.Date(2026, 3, 10, 8, 30, 0, 0, time.UTC)

func newStore(t *testing.T, now *time.Time) *cron.Store {
	t.Helper()
	return cron.New(pgtest.New(t), time.UTC, func() time.Time { return *now })
}

var tg = cron.Origin{Platform: "telegram", Account: "default", ChatID: "99"}

func TestCreateAndList(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	now := t0
	s := newStore(t, &now)
	j, err := s.Create(ctx, cron.NewJob{Owner: "telegram:99", Prompt: "  Check the build status and report anything red  ", Schedule: "every 2h", Origin: tg})
	if err != nil {
		t.Fatal(err)
	}
	if len(j.ID) != 12 || j.Name != "Check the build status and report anything red" || j.Deliver != cron.DeliverOrigin ||
		j.State != cron.StateScheduled || !j.NextRunAt.Equal(t0.Add(2*time.Hour)) || j.RepeatDisplay() != "forever" || j.Display != "every 120m" {
		t.Errorf("created %+v", j)
	}
	one, err := s.Create(ctx, cron.NewJob{Owner: "telegram:99", Name: "Tea", Prompt: "Remind me of the tea", Schedule: "30m", Deliver: "local"})
	if err != nil {
		t.Fatal(err)
	}
	if one.RepeatTimes != 1 || one.RepeatDisplay() != "once" || !one.NextRunAt.Equal(t0.Add(30*time.Minute)) || one.Deliver != "local" {
		t.Errorf("one-shot %+v", one)
	}
	// Another user sees none of them, and cannot reach them by id.
	if js, _ := s.List(ctx, "telegram:7", true); len(js) != 0 {
		t.Errorf("another owner lists %d jobs", len(js))
	}
	for _, op := range []func(context.Context, string, string) (cron.Job, error){s.Pause, s.Resume, s.Trigger, s.Remove, s.Resolve} {
		if _, err := op(ctx, "telegram:7", j.ID); !errors.Is(err, cron.ErrNotFound) {
			t.Errorf("another owner's operation: %v", err)
		}
	}
	if _, err := s.Pause(ctx, "telegram:99", "tea"); err != nil { // by name, any case
		t.Fatal(err)
	}
	if js, _ := s.List(ctx, "telegram:99", false); len(js) != 1 || js[0].ID != j.ID {
		t.Errorf("scheduled jobs %v", js)
	}
	if js, _ := s.List(ctx, "telegram:99", true); len(js) != 2 {
		t.Errorf("all jobs %v", js)
	}
	if _, err := s.Create(ctx, cron.NewJob{Owner: "telegram:99", Name: "tea", Prompt: "x", Schedule: "1d", Origin: tg}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Resolve(ctx, "telegram:99", "TEA"); !errors.Is(err, cron.ErrAmbiguous) || !strings.Contains(err.Error(), one.ID) {
		t.Errorf("two jobs named tea: %v", err)
	}
}

func TestCreateRefuses(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	now := t0
	s := newStore(t, &now)
	cases := map[string]cron.NewJob{
		"invalid schedule":     {Owner: "u", Prompt: "p", Schedule: "whenever", Origin: tg},
		"the prompt is empty":  {Owner: "u", Prompt: "  ", Schedule: "1h", Origin: tg},
		"not a platform name":  {Owner: "u", Prompt: "p", Schedule: "1h", Deliver: "Tele-gram!:1", Origin: tg},
		"is not a target":      {Owner: "u", Prompt: "p", Schedule: "1h", Deliver: "telegram:1 2", Origin: tg},
		"repeat must be":       {Owner: "u", Prompt: "p", Schedule: "1h", Repeat: -1, Origin: tg},
		"longer than":          {Owner: "u", Prompt: strings.Repeat("x", cron.MaxPromptBytes+1), Schedule: "1h", Origin: tg},
		"no owner":             {Prompt: "p", Schedule: "1h", Origin: tg},
		"is in the past":       {Owner: "u", Prompt: "p", Schedule: "2026-03-01T09:00:00Z", Origin: tg},
		"not a short line":     {Owner: "u", Prompt: "p", Schedule: strings.Repeat("every ", 50), Origin: tg},
		"deliver: bad target:": {Owner: "u", Prompt: "p", Schedule: "1h", Deliver: ":123", Origin: tg},
		// Postgres text holds no NUL: refused as bad input, not a
		// failing store ("the job store is unavailable").
		"the prompt is not UTF-8 text":     {Owner: "u", Prompt: "check\x00 the build", Schedule: "1h", Origin: tg},
		`deliver "telegram:1\x002" is not`: {Owner: "u", Prompt: "p", Schedule: "1h", Deliver: "telegram:1\x002", Origin: tg},
	}
	for want, n := range cases {
		if _, err := s.Create(ctx, n); !errors.Is(err, cron.ErrInvalid) || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: got %v", want, err)
		}
	}
	// A name keeps what Postgres can hold.
	if j, err := s.Create(ctx, cron.NewJob{Owner: "u", Name: "night\x00ly \xff digest", Prompt: "p", Schedule: "1h", Origin: tg}); err != nil || j.Name != "nightly digest" {
		t.Errorf("name with a NUL and a bad byte: %v %q", err, j.Name)
	}
	// Targets that parse are kept as typed, resolved when the job fires:
	// origin too on a job with no origin chat (made over the API), whose
	// runs go to a home channel, as Hermes's.
	for _, d := range []string{"telegram", "telegram:-1001234567890:17585", "discord:#engineering", "local", "origin"} {
		if j, err := s.Create(ctx, cron.NewJob{Owner: "u", Prompt: "p", Schedule: "1h", Deliver: d}); err != nil || j.Deliver != d {
			t.Errorf("deliver %q: %v %q", d, err, j.Deliver)
		}
	}
}

func TestLifecycle(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	now := t0
	s := newStore(t, &now)
	owner := "session:agent:main:telegram:group:-100:alice"
	j, err := s.Create(ctx, cron.NewJob{Owner: owner, Prompt: "digest", Schedule: "0 9 * * *", Origin: tg})
	if err != nil {
		t.Fatal(err)
	}
	nine := time.Date(2026, 3, 10, 9, 0, 0, 0, time.UTC)
	if !j.NextRunAt.Equal(nine) {
		t.Fatalf("next run %v", j.NextRunAt)
	}
	if j, err = s.Pause(ctx, owner, j.ID); err != nil || j.State != cron.StatePaused || !j.NextRunAt.Equal(nine) {
		t.Fatalf("paused %+v %v", j, err)
	}
	// Resumed after its run passed: as Hermes's resume_job, the next run
	// is the first after now; the one missed while paused is not made up.
	now = nine.Add(3 * time.Hour)
	if j, err = s.Resume(ctx, owner, j.ID); err != nil || j.State != cron.StateScheduled || !j.NextRunAt.Equal(nine.Add(24*time.Hour)) {
		t.Fatalf("resumed %+v %v", j, err)
	}
	if j, err = s.Trigger(ctx, owner, j.ID); err != nil || !j.ManualRunAt.Equal(now) || !j.NextRunAt.Equal(nine.Add(24*time.Hour)) {
		t.Fatalf("triggered %+v %v", j, err)
	}
	sched, prompt, name, rep := "every 30m", "new digest", "Digest", 3
	if j, err = s.Update(ctx, owner, j.ID, cron.Update{Schedule: &sched, Prompt: &prompt, Name: &name, Repeat: &rep}); err != nil {
		t.Fatal(err)
	}
	if j.Display != "every 30m" || j.Prompt != prompt || j.Name != name || j.RepeatDisplay() != "0/3" || !j.NextRunAt.Equal(now.Add(30*time.Minute)) {
		t.Errorf("updated %+v", j)
	}
	bad := "sometime"
	if _, err := s.Update(ctx, owner, j.ID, cron.Update{Schedule: &bad}); !errors.Is(err, cron.ErrInvalid) {
		t.Errorf("bad schedule update: %v", err)
	}
	if got, err := s.Remove(ctx, owner, "digest"); err != nil || got.ID != j.ID {
		t.Fatalf("removed %v %v", got, err)
	}
	if _, err := s.Resolve(ctx, owner, j.ID); !errors.Is(err, cron.ErrNotFound) {
		t.Errorf("removed job still found: %v", err)
	}

	// A one-shot whose time passed cannot be resumed.
	one, err := s.Create(ctx, cron.NewJob{Owner: owner, Prompt: "p", Schedule: "10m", Origin: tg})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Pause(ctx, owner, one.ID); err != nil {
		t.Fatal(err)
	}
	now = now.Add(time.Hour)
	if _, err := s.Resume(ctx, owner, one.ID); !errors.Is(err, cron.ErrInvalid) || !strings.Contains(err.Error(), "has passed") {
		t.Errorf("resume of a passed one-shot: %v", err)
	}
}

// TestChangeRacingARun: a pause, update or run asked for while the
// scheduler holds the job (claimed, publishing) applies to the job as
// the run left it; it does not write back the next run, state and repeat
// count it read before (which re-armed the instant just run: a second
// run of it once the dedupe record is gone, or a repeat beyond its count).
func TestChangeRacingARun(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	now := t0
	db := pgtest.New(t)
	s := cron.New(db, time.UTC, func() time.Time { return now })
	name := "Renamed"
	for _, tc := range []struct {
		name   string
		change func(id string) (cron.Job, error)
		state  string
	}{
		{"pause", func(id string) (cron.Job, error) { return s.Pause(ctx, "telegram:99", id) }, cron.StatePaused},
		{"update", func(id string) (cron.Job, error) {
			return s.Update(ctx, "telegram:99", id, cron.Update{Name: &name})
		}, cron.StateScheduled},
		{"trigger", func(id string) (cron.Job, error) { return s.Trigger(ctx, "telegram:99", id) }, cron.StateScheduled},
	} {
		t.Run(tc.name, func(t *testing.T) {
			now = t0
			j, err := s.Create(ctx, cron.NewJob{Owner: "telegram:99", Prompt: "report " + tc.name, Schedule: "every 3d", Repeat: 5, Origin: tg})
			if err != nil {
				t.Fatal(err)
			}
			due := j.NextRunAt
			now = due.Add(time.Second)
			tx, err := db.Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = tx.Rollback(ctx) }()
			claimed, ok, err := cron.ClaimDue(ctx, tx, now, nil)
			if err != nil || !ok || claimed.ID != j.ID {
				t.Fatalf("claim: %v %v %+v", ok, err, claimed)
			}
			var claimer int
			if err := tx.QueryRow(ctx, `SELECT pg_backend_pid()`).Scan(&claimer); err != nil {
				t.Fatal(err)
			}
			type result struct {
				j   cron.Job
				err error
			}
			done := make(chan result, 1)
			go func() {
				j, err := tc.change(j.ID)
				done <- result{j, err}
			}()
			// Wait until the change waits for the claimed row.
			for deadline := time.Now().Add(time.Minute); ; {
				var waiting bool
				if err := db.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_stat_activity
					WHERE $1::int = ANY (pg_blocking_pids(pid)))`, claimer).Scan(&waiting); err != nil {
					t.Fatal(err)
				}
				if waiting {
					break
				}
				if time.Now().After(deadline) {
					t.Fatal("the change never waited for the claimed job")
				}
				time.Sleep(10 * time.Millisecond)
			}
			claimed.RepeatCompleted++
			claimed.NextRunAt = due.Add(72 * time.Hour)
			claimed.LastRunAt, claimed.LastStatus = now, "ok"
			if err := cron.SaveRun(ctx, tx, claimed, cron.RunID(claimed.ID, due, false), now); err != nil {
				t.Fatal(err)
			}
			if err := tx.Commit(ctx); err != nil {
				t.Fatal(err)
			}
			r := <-done
			if r.err != nil {
				t.Fatal(r.err)
			}
			got, err := s.Resolve(ctx, "telegram:99", j.ID)
			if err != nil {
				t.Fatal(err)
			}
			if !got.NextRunAt.Equal(due.Add(72*time.Hour)) || got.RepeatCompleted != 1 || got.State != tc.state {
				t.Errorf("after the run and the %s: next %s (want %s), repeat %d (want 1), state %s (want %s)",
					tc.name, got.NextRunAt, due.Add(72*time.Hour), got.RepeatCompleted, got.State, tc.state)
			}
			if !r.j.NextRunAt.Equal(got.NextRunAt) {
				t.Errorf("the %s answered next %s, the job has %s", tc.name, r.j.NextRunAt, got.NextRunAt)
			}
		})
	}
}

// TestJobLimitUnderConcurrentCreates: creates that race (the agent's
// parallel tool calls, several API requests) cannot take an owner past
// MaxJobsPerUser between counting and inserting.
func TestJobLimitUnderConcurrentCreates(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	now := t0
	s := newStore(t, &now)
	for i := range cron.MaxJobsPerUser - 2 {
		if _, err := s.Create(ctx, cron.NewJob{Owner: "telegram:5", Prompt: fmt.Sprint("job ", i), Schedule: "every 1h", Deliver: "local"}); err != nil {
			t.Fatal(err)
		}
	}
	var wg sync.WaitGroup
	for i := range 12 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := s.Create(ctx, cron.NewJob{Owner: "telegram:5", Prompt: fmt.Sprint("racing ", i), Schedule: "every 1h", Deliver: "local"})
			if err != nil && !errors.Is(err, cron.ErrInvalid) {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	if js, err := s.List(ctx, "telegram:5", true); err != nil || len(js) != cron.MaxJobsPerUser {
		t.Fatalf("%d jobs (%v), want %d", len(js), err, cron.MaxJobsPerUser)
	}
}

func TestRunID(t *testing.T) {
	t.Parallel()
	due := time.Date(2026, 3, 10, 9, 0, 0, 0, time.UTC)
	asked := time.Date(2026, 3, 10, 9, 0, 0, 300_000, time.UTC) // 300 µs
	berlin := time.FixedZone("CET", 3600)
	cases := []struct {
		id     string
		at     time.Time
		manual bool
		want   string
	}{
		{"abc", due, false, "abc_20260310_090000"},
		{"abc", due.In(berlin), false, "abc_20260310_090000"},
		{"abc", asked, true, "abc_20260310_090000.000300_run"},
		{"abc", due, true, "abc_20260310_090000.000000_run"},
	}
	for _, c := range cases {
		got := cron.RunID(c.id, c.at, c.manual)
		if got != c.want {
			t.Errorf("RunID(%s, %v, %v) = %q, want %q", c.id, c.at, c.manual, got, c.want)
		}
		id, at, manual, err := cron.ParseRunID(got)
		if err != nil || id != c.id || !at.Equal(c.at) || manual != c.manual {
			t.Errorf("ParseRunID(%q) = %q %v %v %v", got, id, at, manual, err)
		}
	}
	// A manual run's id from before microseconds.
	if id, at, manual, err := cron.ParseRunID("abc_20260310_090000_run"); err != nil || id != "abc" || !at.Equal(due) || !manual {
		t.Errorf("second-resolution manual id: %q %v %v %v", id, at, manual, err)
	}
	for _, bad := range []string{"", "abc", "_20260310_090000", "abc_2026", "abc_20260310_090000_x", "abc_20260310_090000.5_run_run"} {
		if _, _, _, err := cron.ParseRunID(bad); !errors.Is(err, cron.ErrBadRunID) {
			t.Errorf("ParseRunID(%q): %v", bad, err)
		}
	}
}

// TestCompletedJobsAndTheCap: a completed job does not count towards
// MaxJobsPerUser, is listed only with all until DeleteCompleted removes
// it, and removing it frees nothing the cap counted.
func TestCompletedJobsAndTheCap(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	now := t0
	db := pgtest.New(t)
	s := cron.New(db, time.UTC, func() time.Time { return now })
	one, err := s.Create(ctx, cron.NewJob{Owner: "telegram:8", Prompt: "once", Schedule: "10m", Deliver: "local"})
	if err != nil {
		t.Fatal(err)
	}
	for i := range cron.MaxJobsPerUser - 1 {
		if _, err := s.Create(ctx, cron.NewJob{Owner: "telegram:8", Prompt: fmt.Sprint("job ", i), Schedule: "every 1h", Deliver: "local"}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.Create(ctx, cron.NewJob{Owner: "telegram:8", Prompt: "one more", Schedule: "every 1h", Deliver: "local"}); !errors.Is(err, cron.ErrInvalid) {
		t.Fatalf("job %d: %v", cron.MaxJobsPerUser+1, err)
	}
	// The one-shot runs and completes.
	now = t0.Add(10 * time.Minute)
	tx, err := db.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	j, ok, err := cron.ClaimDue(ctx, tx, now, nil)
	if err != nil || !ok || j.ID != one.ID {
		t.Fatalf("claim %v %v %+v", ok, err, j)
	}
	j.State, j.NextRunAt, j.RepeatCompleted, j.LastRunAt, j.LastStatus = cron.StateCompleted, time.Time{}, 1, now, "ok"
	if err := cron.SaveRun(ctx, tx, j, cron.RunID(j.ID, one.NextRunAt, false), now); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Create(ctx, cron.NewJob{Owner: "telegram:8", Prompt: "in its place", Schedule: "every 1h", Deliver: "local"}); err != nil {
		t.Fatalf("a completed job still counts: %v", err)
	}
	count := func(all bool) int {
		js, err := s.List(ctx, "telegram:8", all)
		if err != nil {
			t.Fatal(err)
		}
		return len(js)
	}
	if count(false) != cron.MaxJobsPerUser || count(true) != cron.MaxJobsPerUser+1 {
		t.Fatalf("listed %d scheduled, %d in all", count(false), count(true))
	}
	if n, err := cron.DeleteCompleted(ctx, db, now, 10); err != nil || n != 0 {
		t.Fatalf("deleted %d (%v) at its last run", n, err)
	}
	if n, err := cron.DeleteCompleted(ctx, db, now.Add(time.Second), 10); err != nil || n != 1 {
		t.Fatalf("deleted %d (%v) after its last run", n, err)
	}
	if count(true) != cron.MaxJobsPerUser {
		t.Errorf("%d jobs after the completed one went", count(true))
	}
	if _, err := s.Create(ctx, cron.NewJob{Owner: "telegram:8", Prompt: "too many", Schedule: "every 1h", Deliver: "local"}); !errors.Is(err, cron.ErrInvalid) {
		t.Errorf("deleting a completed job freed a place: %v", err)
	}
}

// TestTriggerByState: "run" as Hermes's trigger_job: a paused job is
// scheduled again, its run asked for standing for a scheduled run that
// passed while it was paused (a one-shot whose time passed keeps it, to
// be completed by the run when it fires: pkg/cron/scheduler, rather than
// retired as missed); a completed job is refused; asking again while a
// run is pending names that run.
func TestTriggerByState(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	now := t0
	db := pgtest.New(t)
	s := cron.New(db, time.UTC, func() time.Time { return now })
	const owner = "telegram:99"
	nine := time.Date(2026, 3, 10, 9, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		name     string
		schedule string
		pause    bool
		complete bool
		later    time.Duration // the clock moves on before "run"
		state    string
		next     time.Time
		refused  bool
	}{
		{name: "scheduled", schedule: "0 9 * * *", state: cron.StateScheduled, next: nine},
		{name: "paused, next run ahead", schedule: "0 9 * * *", pause: true, state: cron.StateScheduled, next: nine},
		{name: "paused, next run passed", schedule: "0 9 * * *", pause: true, later: 3 * time.Hour,
			state: cron.StateScheduled, next: nine.Add(24 * time.Hour)},
		{name: "paused interval, next run passed", schedule: "every 1h", pause: true, later: 5 * time.Hour,
			state: cron.StateScheduled, next: t0.Add(6 * time.Hour)},
		{name: "paused one-shot ahead", schedule: "2026-03-10T09:00", pause: true, state: cron.StateScheduled, next: nine},
		{name: "paused one-shot passed", schedule: "2026-03-10T09:00", pause: true, later: 3 * time.Hour, state: cron.StateScheduled, next: nine},
		{name: "completed", schedule: "every 1h", complete: true, state: cron.StateCompleted, refused: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			now = t0
			j, err := s.Create(ctx, cron.NewJob{Owner: owner, Prompt: "job " + tc.name, Schedule: tc.schedule, Origin: tg})
			if err != nil {
				t.Fatal(err)
			}
			if tc.pause {
				if _, err := s.Pause(ctx, owner, j.ID); err != nil {
					t.Fatal(err)
				}
			}
			if tc.complete {
				if _, err := db.Exec(ctx, `UPDATE cron_jobs SET state = 'completed', next_run_at = NULL WHERE id = $1`, j.ID); err != nil {
					t.Fatal(err)
				}
			}
			now = t0.Add(tc.later)
			got, err := s.Trigger(ctx, owner, j.ID)
			if tc.refused {
				after, rerr := s.Resolve(ctx, owner, j.ID)
				if !errors.Is(err, cron.ErrInvalid) || !strings.Contains(cron.Message(err), "has completed") ||
					rerr != nil || !after.ManualRunAt.IsZero() || after.State != cron.StateCompleted {
					t.Fatalf("run of a completed job: %v; job %+v %v", err, after, rerr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got.State != tc.state || !got.NextRunAt.Equal(tc.next) || !got.ManualRunAt.Equal(now) {
				t.Errorf("after run: state %s next %v manual %v; want %s %v %v", got.State, got.NextRunAt, got.ManualRunAt, tc.state, tc.next, now)
			}
			// Asked again before the tick: the same run, whatever the state.
			now = now.Add(time.Second)
			again, err := s.Trigger(ctx, owner, j.ID)
			if err != nil || !again.ManualRunAt.Equal(got.ManualRunAt) || again.State != got.State {
				t.Errorf("asked again: %+v %v", again, err)
			}
			if got.State != cron.StateScheduled {
				return
			}
			// Paused while its run is pending: the run is dropped, as a
			// paused Hermes job is not fired; run again: scheduled again,
			// a new run.
			if paused, err := s.Pause(ctx, owner, j.ID); err != nil || !paused.ManualRunAt.IsZero() {
				t.Fatalf("paused with its run pending: %+v %v", paused, err)
			}
			now = now.Add(time.Second)
			again, err = s.Trigger(ctx, owner, j.ID)
			if err != nil || !again.ManualRunAt.Equal(now) || again.State != cron.StateScheduled {
				t.Errorf("paused with its run pending, run again: %+v %v", again, err)
			}
		})
	}
}

// TestEditCompleted: as Hermes's update_job, which will not activate a
// terminal job, a completed job's schedule cannot be changed (it is not
// revived with the new one); its other fields can, and it stays completed.
func TestEditCompleted(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	now := t0
	db := pgtest.New(t)
	s := cron.New(db, time.UTC, func() time.Time { return now })
	const owner = "telegram:99"
	j, err := s.Create(ctx, cron.NewJob{Owner: owner, Name: "Tea", Prompt: "tea time", Schedule: "30m", Origin: tg})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(ctx, `UPDATE cron_jobs SET state = 'completed', next_run_at = NULL, repeat_completed = 1 WHERE id = $1`, j.ID); err != nil {
		t.Fatal(err)
	}
	now = t0.Add(time.Hour)
	str := func(v string) *string { return &v }
	three := 3
	for _, tc := range []struct {
		name    string
		u       cron.Update
		refused bool
		check   func(cron.Job) bool
	}{
		{"schedule", cron.Update{Schedule: str("every 2h")}, true, nil},
		{"schedule and prompt", cron.Update{Schedule: str("in 10m"), Prompt: str("coffee time")}, true, nil},
		{"prompt", cron.Update{Prompt: str("coffee time")}, false, func(j cron.Job) bool { return j.Prompt == "coffee time" }},
		{"name", cron.Update{Name: str("Coffee")}, false, func(j cron.Job) bool { return j.Name == "Coffee" }},
		{"repeat", cron.Update{Repeat: &three}, false, func(j cron.Job) bool { return j.RepeatTimes == 3 }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := s.Update(ctx, owner, j.ID, tc.u)
			if tc.refused {
				if !errors.Is(err, cron.ErrInvalid) || !strings.Contains(cron.Message(err), "has completed; its schedule cannot be changed") {
					t.Fatalf("schedule of a completed job: %v", err)
				}
				if got, err = s.Resolve(ctx, owner, j.ID); err != nil {
					t.Fatal(err)
				}
			} else if err != nil || !tc.check(got) {
				t.Fatalf("update: %+v %v", got, err)
			}
			if got.State != cron.StateCompleted || !got.NextRunAt.IsZero() || got.RepeatCompleted != 1 || got.Display != j.Display {
				t.Errorf("completed job after the edit: %+v", got)
			}
		})
	}
	if _, err := s.Resume(ctx, owner, j.ID); !errors.Is(err, cron.ErrInvalid) || !strings.Contains(cron.Message(err), "create a new job") {
		t.Errorf("resume of a completed job: %v", err)
	}
}

// TestResumeByState: as Hermes's resume_job, a resumed job's next run is
// computed from now: one that passed while it was paused moves on to the
// first after now (no catch-up of a pause); a cron expression's still
// ahead stays, an interval's is now plus its period (no grid of its
// first run); a one-shot past its grace cannot be resumed, one ahead
// keeps its time.
func TestResumeByState(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	now := t0
	s := newStore(t, &now)
	const owner = "telegram:99"
	nine := time.Date(2026, 3, 10, 9, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		name     string
		schedule string
		later    time.Duration
		next     time.Time
		refused  bool
	}{
		{"cron, next run ahead", "0 9 * * *", 10 * time.Minute, nine, false},
		{"cron, next run passed", "0 9 * * *", 50 * time.Hour, nine.Add(72 * time.Hour), false},
		{"interval, next run ahead", "every 1h", 30 * time.Minute, t0.Add(90 * time.Minute), false},
		{"interval, next run passed", "every 1h", 5*time.Hour + 10*time.Minute, t0.Add(6*time.Hour + 10*time.Minute), false},
		{"one-shot ahead", "2026-03-10T09:00", 10 * time.Minute, nine, false},
		{"one-shot within its grace", "2026-03-10T09:00", 31 * time.Minute, nine, false},
		{"one-shot passed", "2026-03-10T09:00", 3 * time.Hour, time.Time{}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			now = t0
			j, err := s.Create(ctx, cron.NewJob{Owner: owner, Prompt: "job " + tc.name, Schedule: tc.schedule, Origin: tg})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := s.Pause(ctx, owner, j.ID); err != nil {
				t.Fatal(err)
			}
			now = t0.Add(tc.later)
			got, err := s.Resume(ctx, owner, j.ID)
			if tc.refused {
				if !errors.Is(err, cron.ErrInvalid) {
					t.Fatalf("resume: %v", err)
				}
				if got, err = s.Resolve(ctx, owner, j.ID); err != nil || got.State != cron.StatePaused {
					t.Errorf("refused resume: %+v %v", got, err)
				}
				return
			}
			if err != nil || got.State != cron.StateScheduled || !got.NextRunAt.Equal(tc.next) {
				t.Errorf("resumed: %+v %v; want next %v", got, err, tc.next)
			}
		})
	}
}

// TestScheduleChangeRepeat: as Hermes's update_job, a new schedule of
// another kind, without a repeat of its own, takes that kind's default
// repeat (a one-shot made recurring runs forever, a recurring job made a
// one-shot runs once); one of the same kind, or with a repeat given,
// keeps the count asked for.
func TestScheduleChangeRepeat(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	now := t0
	s := newStore(t, &now)
	const owner = "telegram:99"
	for _, tc := range []struct {
		name     string
		from     string
		repeat   int
		to       string
		newRep   *int
		want     int
		wantDisp string
	}{
		{"one-shot made recurring", "30m", 0, "every 2h", nil, 0, "forever"},
		{"recurring made a one-shot", "every 2h", 0, "in 30m", nil, 1, "once"},
		{"recurring with a count made a one-shot", "every 2h", 5, "in 30m", nil, 5, "0/5"},
		{"recurring, same kind", "every 2h", 3, "every 4h", nil, 3, "0/3"},
		{"one-shot, same kind", "30m", 0, "in 1h", nil, 1, "once"},
		{"one-shot made recurring, count given", "30m", 0, "every 2h", func() *int { n := 4; return &n }(), 4, "0/4"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			j, err := s.Create(ctx, cron.NewJob{Owner: owner, Prompt: "job " + tc.name, Schedule: tc.from, Repeat: tc.repeat, Origin: tg})
			if err != nil {
				t.Fatal(err)
			}
			got, err := s.Update(ctx, owner, j.ID, cron.Update{Schedule: &tc.to, Repeat: tc.newRep})
			if err != nil || got.RepeatTimes != tc.want || got.RepeatDisplay() != tc.wantDisp {
				t.Errorf("after the edit: repeat %d (%s), %v; want %d (%s)", got.RepeatTimes, got.RepeatDisplay(), err, tc.want, tc.wantDisp)
			}
		})
	}
}

// TestInTx: a store in a transaction (InTx) changes jobs with the rest of
// it: a rollback leaves no job and no change, a commit keeps them, and a
// refused change (its savepoint rolled back) leaves the transaction
// usable.
func TestInTx(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	now := t0
	db := pgtest.New(t)
	s := cron.New(db, time.UTC, func() time.Time { return now })
	kept, err := s.Create(ctx, cron.NewJob{Owner: "telegram:99", Prompt: "Kept", Schedule: "every 2h", Origin: tg})
	if err != nil {
		t.Fatal(err)
	}
	for _, commit := range []bool{false, true} {
		t.Run(fmt.Sprint("commit=", commit), func(t *testing.T) {
			tx, err := db.Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = tx.Rollback(ctx) }()
			in := s.InTx(tx)
			if _, err := in.Create(ctx, cron.NewJob{Owner: "telegram:99", Prompt: "New", Schedule: "nonsense", Origin: tg}); !errors.Is(err, cron.ErrInvalid) {
				t.Fatalf("create with a bad schedule: %v", err)
			}
			if _, err := in.Create(ctx, cron.NewJob{Owner: "telegram:99", Prompt: "New", Schedule: "30m", Origin: tg}); err != nil {
				t.Fatal(err)
			}
			if _, err := in.Pause(ctx, "telegram:99", kept.ID); err != nil {
				t.Fatal(err)
			}
			if _, err := in.Pause(ctx, "telegram:99", "no such job"); !errors.Is(err, cron.ErrNotFound) {
				t.Fatalf("pause of no job: %v", err)
			}
			// Outside the transaction, nothing has changed yet.
			if js, _ := s.List(ctx, "telegram:99", true); len(js) != 1 || js[0].State != cron.StateScheduled {
				t.Errorf("before the end of the transaction, jobs %+v", js)
			}
			if commit {
				if err := tx.Commit(ctx); err != nil {
					t.Fatal(err)
				}
			} else if err := tx.Rollback(ctx); err != nil {
				t.Fatal(err)
			}
			js, err := s.List(ctx, "telegram:99", true)
			if err != nil {
				t.Fatal(err)
			}
			if want := map[bool]int{false: 1, true: 2}[commit]; len(js) != want {
				t.Errorf("%d jobs, want %d", len(js), want)
			}
			for _, j := range js {
				if paused := j.State == cron.StatePaused; j.ID == kept.ID && paused != commit {
					t.Errorf("kept job's state %s after commit=%v", j.State, commit)
				}
			}
		})
	}
}

// TestScheduleChangeClearsFireFailures: failures to fire belong to the
// instant they were for; a new schedule's first run is tried afresh
// (not delayed by the old backoff, nor taken for a failed firing the
// scheduler must retry however late).
func TestScheduleChangeClearsFireFailures(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	now := t0
	db := pgtest.New(t)
	s := cron.New(db, time.UTC, func() time.Time { return now })
	j, err := s.Create(ctx, cron.NewJob{Owner: "telegram:99", Prompt: "p", Schedule: "every 1h", Origin: tg})
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := cron.RecordFireFailure(ctx, db, j.ID, func(int) cron.FireFailureOutcome {
		return cron.FireFailureOutcome{RetryAt: now.Add(time.Hour), LastError: "boom"}
	}); err != nil {
		t.Fatal(err)
	}
	sched := "every 2h"
	got, err := s.Update(ctx, "telegram:99", j.ID, cron.Update{Schedule: &sched})
	if err != nil || got.FireFailures != 0 || !got.FireRetryAt.IsZero() {
		t.Errorf("after a new schedule: %d failures, retry at %v, %v", got.FireFailures, got.FireRetryAt, err)
	}
}

// A job reference Postgres cannot hold as text (a NUL, invalid UTF-8) names
// no job: /cron pause, remove, run and edit, the cronjob tool and the jobs
// API answer "not found", not "the job store is unavailable".
func TestResolveRefThatIsNotText(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	now := t0
	s := newStore(t, &now)
	j, err := s.Create(ctx, cron.NewJob{Owner: "u", Name: "nightly", Prompt: "p", Schedule: "1h", Origin: tg})
	if err != nil {
		t.Fatal(err)
	}
	for _, ref := range []string{"night\x00ly", j.ID + "\x00", "nightly\xff"} {
		if _, err := s.Resolve(ctx, "u", ref); !errors.Is(err, cron.ErrNotFound) {
			t.Errorf("resolve %q: %v", ref, err)
		}
		if _, err := s.Pause(ctx, "u", ref); !errors.Is(err, cron.ErrNotFound) {
			t.Errorf("pause %q: %v", ref, err)
		}
	}
}

// TestZoneRecorded: a job records the time zone its next run was
// computed in (the scheduler moves a cron expression's next run when
// cron.timezone changed): each change that computes the next run
// records the store's zone; one that keeps it (pause) keeps its zone.
func TestZoneRecorded(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	now := time.Date(2026, 3, 10, 8, 30, 0, 0, time.UTC)
	clock := func() time.Time { return now }
	db := pgtest.New(t)
	berlin, err := time.LoadLocation("Europe/Berlin")
	if err != nil {
		t.Fatal(err)
	}
	utc, ber := cron.New(db, time.UTC, clock), cron.New(db, berlin, clock)
	j, err := utc.Create(ctx, cron.NewJob{Owner: "u", Prompt: "p", Schedule: "0 9 * * *"})
	if err != nil {
		t.Fatal(err)
	}
	sched := "0 10 * * *"
	for _, step := range []struct {
		name     string
		do       func() (cron.Job, error)
		zone     string
		nextWall string // next run in the zone recorded
	}{
		{"create", func() (cron.Job, error) { return utc.Resolve(ctx, "u", j.ID) }, "UTC", "09:00"},
		{"pause", func() (cron.Job, error) { return ber.Pause(ctx, "u", j.ID) }, "UTC", "09:00"},
		{"resume", func() (cron.Job, error) { return ber.Resume(ctx, "u", j.ID) }, "Europe/Berlin", "09:00"},
		{"new schedule", func() (cron.Job, error) { return utc.Update(ctx, "u", j.ID, cron.Update{Schedule: &sched}) }, "UTC", "10:00"},
	} {
		got, err := step.do()
		if err != nil {
			t.Fatalf("%s: %v", step.name, err)
		}
		loc, _ := time.LoadLocation(got.Zone)
		if got.Zone != step.zone || got.NextRunAt.In(loc).Format("15:04") != step.nextWall {
			t.Errorf("%s: zone %q, next run %v; want %q, %s there", step.name, got.Zone, got.NextRunAt, step.zone, step.nextWall)
		}
	}
}
