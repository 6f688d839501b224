package scheduler_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/switchboard-chat/switchboard/pkg/cron"
	"github.com/switchboard-chat/switchboard/pkg/cron/scheduler"
)

// TestPausedTickFiresNothing: while the emergency stop (/pause) holds,
// a tick fires no due job and leaves it due; once lifted, the next tick
// fires it, as Hermes's tick skips its scan while ESTOP exists.
func TestPausedTickFiresNothing(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	j := e.create(t, cron.NewJob{Prompt: "Summarize the news", Schedule: "30m", Name: "News"})
	var paused atomic.Bool
	paused.Store(true)
	cfg := scheduler.DefaultConfig()
	cfg.Timezone = "UTC"
	s, err := scheduler.New(cfg, scheduler.Deps{DB: e.db, Bus: e.bus, Resolve: resolve, Now: e.clock.Now,
		Paused: func(context.Context) (bool, error) { return paused.Load(), nil }})
	if err != nil {
		t.Fatal(err)
	}
	e.clock.Set(t0.Add(30*time.Minute + 20*time.Second))
	if n := tick(t, s); n != 0 {
		t.Fatalf("fired %d while paused", n)
	}
	if got := e.published(t); got != 0 {
		t.Fatalf("%d messages published while paused", got)
	}
	if got := e.job(t, j.ID); got.State != cron.StateScheduled || got.RepeatCompleted != 0 {
		t.Fatalf("job after a paused tick: %+v; want it still due", got)
	}
	paused.Store(false)
	if n := tick(t, s); n != 1 {
		t.Fatalf("fired %d after the pause was lifted, want 1", n)
	}
}
