package scheduler_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/switchboard-chat/switchboard/pkg/bus"
	"github.com/switchboard-chat/switchboard/pkg/bus/bustest"
	"github.com/switchboard-chat/switchboard/pkg/cron"
	"github.com/switchboard-chat/switchboard/pkg/cron/scheduler"
	deliveryv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/delivery/v1"
	eventsv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/events/v1"
	"github.com/switchboard-chat/switchboard/pkg/logtest"
	"github.com/switchboard-chat/switchboard/pkg/outbox"
	"github.com/switchboard-chat/switchboard/pkg/pg/pgtest"
	"github.com/switchboard-chat/switchboard/pkg/platform/platformtest"
	"github.com/switchboard-chat/switchboard/pkg/telemetry/telemetrytest"
)

// clock is the scheduler's and the store's injected time.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) Now() time.Time  { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) Set(t time.Time) { c.mu.Lock(); c.t = t; c.mu.Unlock() }

var (
	t0 = time.Date(2026, 3, 10, 8, 30, 0, 0, time.UTC)
	tg = cron.Origin{Platform: "telegram", Account: "default", ChatID: "99"}
)

type env struct {
	db    *pgxpool.Pool
	bus   *bus.Bus
	clock *clock
	store *cron.Store
}

func newEnv(t *testing.T) *env {
	t.Helper()
	e := &env{db: pgtest.New(t), bus: bustest.New(t, bustest.SystemURL()), clock: &clock{t: t0}}
	e.store = cron.New(e.db, time.UTC, e.clock.Now)
	return e
}

func resolve(_ context.Context, raw string) (*deliveryv1.Target, error) {
	homes := map[string]string{"discord": "555"}
	t, _, err := outbox.ParseTarget(raw, func(p string) string { return homes[p] })
	return t, err
}

func (e *env) scheduler(t *testing.T, mod func(*scheduler.Config)) *scheduler.Scheduler {
	t.Helper()
	return e.schedulerWith(t, mod, nil)
}

// schedulerWith is scheduler with the look at runs in flight (nil: none,
// a run held past cron.max_run_duration is gone).
func (e *env) schedulerWith(t *testing.T, mod func(*scheduler.Config), alive func(context.Context, string) (bool, error)) *scheduler.Scheduler {
	t.Helper()
	cfg := scheduler.DefaultConfig()
	cfg.Timezone = "UTC"
	if mod != nil {
		mod(&cfg)
	}
	s, err := scheduler.New(cfg, scheduler.Deps{DB: e.db, Bus: e.bus, Resolve: resolve, Now: e.clock.Now, RunAlive: alive})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func (e *env) create(t *testing.T, n cron.NewJob) cron.Job {
	t.Helper()
	if n.Owner == "" {
		n.Owner = "telegram:99"
	}
	if n.Origin == (cron.Origin{}) {
		n.Origin = tg
	}
	j, err := e.store.Create(context.Background(), n)
	if err != nil {
		t.Fatal(err)
	}
	return j
}

func (e *env) job(t *testing.T, id string) cron.Job {
	t.Helper()
	j, err := e.store.Resolve(context.Background(), "telegram:99", id)
	if err != nil {
		t.Fatal(err)
	}
	return j
}

// published is how many messages the inbound stream holds.
func (e *env) published(t *testing.T) uint64 {
	t.Helper()
	st, err := e.bus.JetStream().Stream(context.Background(), e.bus.Topology().Stream(bus.StreamInbound))
	if err != nil {
		t.Fatal(err)
	}
	info, err := st.Info(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return info.State.Msgs
}

func tick(t *testing.T, s *scheduler.Scheduler) int {
	t.Helper()
	n, err := s.Tick(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// TestRunPublished: a due job's run is an internal, transport-trusted
// message of its own fresh session (chat <job>_<due>), framed as Hermes
// frames it, answering only with its answer, to the origin chat.
func TestRunPublished(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	evs := platformtest.InboundEvents(t, e.bus)
	j := e.create(t, cron.NewJob{Prompt: "Summarize the news", Schedule: "30m", Name: "News"})
	s := e.scheduler(t, nil)
	if n := tick(t, s); n != 0 {
		t.Fatalf("fired %d before the job was due", n)
	}
	e.clock.Set(t0.Add(30*time.Minute + 20*time.Second))
	if n := tick(t, s); n != 1 {
		t.Fatalf("fired %d, want 1", n)
	}
	ev := platformtest.NextEvent(t, evs)
	wantID := j.ID + "_20260310_090000"
	src := ev.GetSource()
	if ev.GetEventId() != wantID || src.GetPlatform() != "cron" || src.GetChatId() != wantID || src.GetChatName() != "News" ||
		!ev.GetInternal() || !ev.GetTransportAuthenticated() || !ev.GetAnswerOnly() {
		t.Errorf("event %v", ev)
	}
	if !strings.HasPrefix(ev.GetText(), "[IMPORTANT: You are running as a scheduled cron job.") || !strings.HasSuffix(ev.GetText(), "\n\nSummarize the news") ||
		!strings.Contains(ev.GetText(), `respond with exactly "[SILENT]"`) {
		t.Errorf("text %q", ev.GetText())
	}
	if rr := ev.GetReplyRoute(); rr.GetPlatform() != "telegram" || rr.GetChatId() != "99" || rr.GetAccount() != "default" {
		t.Errorf("reply route %v", rr)
	}
	got := e.job(t, j.ID)
	if got.State != cron.StateCompleted || !got.NextRunAt.IsZero() || got.RepeatCompleted != 1 || got.LastStatus != "ok" ||
		!got.LastRunAt.Equal(e.clock.Now()) {
		t.Errorf("after its one run %+v", got)
	}
	e.clock.Set(t0.Add(2 * time.Hour))
	if n := tick(t, s); n != 0 {
		t.Errorf("a completed job fired %d times", n)
	}
}

// TestFiresOnceAcrossReplicas: two schedulers on one database, ticking
// at once, fire every due job once between them (SKIP LOCKED), without
// the bus's dedupe having to hide anything.
func TestFiresOnceAcrossReplicas(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	const jobs = 30
	for i := range jobs {
		e.create(t, cron.NewJob{Prompt: fmt.Sprintf("job %d", i), Schedule: "every 1h"})
	}
	e.clock.Set(t0.Add(time.Hour + time.Second))
	a, b := e.scheduler(t, nil), e.scheduler(t, nil)
	var wg sync.WaitGroup
	counts := make([]int, 6)
	for i := range counts {
		s := a
		if i%2 == 1 {
			s = b
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			n, err := s.Tick(context.Background())
			if err != nil {
				t.Error(err)
			}
			counts[i] = n
		}()
	}
	wg.Wait()
	total := 0
	for _, n := range counts {
		total += n
	}
	if total != jobs || e.published(t) != jobs {
		t.Errorf("fired %d (%v), %d on the bus; want %d each", total, counts, e.published(t), jobs)
	}
	js, _ := e.store.List(context.Background(), "telegram:99", true)
	for _, j := range js {
		if j.RepeatCompleted != 1 || !j.NextRunAt.Equal(t0.Add(2*time.Hour+time.Second)) {
			t.Errorf("job %s: %d runs, next %v", j.ID, j.RepeatCompleted, j.NextRunAt)
		}
	}
}

// TestStopAfterPublishSavesTheRun: a scheduler stopped (its context
// ended, as by the router's stop) after it published a run still saves
// it: the job is held by the run, not left due with a failure to fire
// recorded against it and its run published again after a delay.
func TestStopAfterPublishSavesTheRun(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	j := e.create(t, cron.NewJob{Prompt: "report", Schedule: "every 1h"})
	e.clock.Set(t0.Add(time.Hour))
	s := e.scheduler(t, nil)
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	scheduler.SetCommit(s, func(cctx context.Context, tx pgx.Tx) error {
		stop() // the router stops between the publish and the commit
		return tx.Commit(cctx)
	})
	// The tick's next claim meets the stop (Run does not log that).
	if n, err := s.Tick(ctx); n != 1 || (err != nil && !errors.Is(err, context.Canceled)) {
		t.Fatalf("tick: %d, %v", n, err)
	}
	got := e.job(t, j.ID)
	if got.FireFailures != 0 || got.LastStatus != "ok" || got.RunningRunID == "" || got.RepeatCompleted != 1 {
		t.Fatalf("the stop rolled the published run back: %+v", got)
	}
}

// TestCrashBetweenPublishAndCommit: the run is published, then the commit
// that advances the job fails; the next tick (another replica) publishes
// the run again under the same id, which the bus takes once.
func TestCrashBetweenPublishAndCommit(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	j := e.create(t, cron.NewJob{Prompt: "report", Schedule: "every 1h"})
	e.clock.Set(t0.Add(time.Hour))
	crashing := e.scheduler(t, nil)
	scheduler.SetCommit(crashing, func(ctx context.Context, tx pgx.Tx) error {
		_ = tx.Rollback(ctx)
		return errors.New("connection lost")
	})
	if n, err := crashing.Tick(context.Background()); err == nil || n != 0 {
		t.Fatalf("crashing tick: %d, %v", n, err)
	}
	if got := e.job(t, j.ID); got.RepeatCompleted != 0 || !got.NextRunAt.Equal(t0.Add(time.Hour)) {
		t.Fatalf("the failed commit advanced the job: %+v", got)
	}
	if n := e.published(t); n != 1 {
		t.Fatalf("%d messages after the first publish", n)
	}
	e.clock.Set(t0.Add(time.Hour + time.Minute))
	if n := tick(t, e.scheduler(t, nil)); n != 1 {
		t.Fatalf("the retry published %d", n)
	}
	if n := e.published(t); n != 1 {
		t.Errorf("%d messages on the bus after the retry, want the one run", n)
	}
	if got := e.job(t, j.ID); got.RepeatCompleted != 1 || !got.NextRunAt.Equal(t0.Add(2*time.Hour+time.Minute)) {
		t.Errorf("after the retry %+v", got)
	}
}

// TestNotFiring: paused and completed jobs do not fire. As Hermes's
// trigger_job, a run asked for with "run" fires a paused job once and
// schedules it again; the run counts towards repeat and the next run is
// the first after it; a paused one-shot whose time passed runs once and
// completes (not retired as missed over the run's status); a completed
// job cannot be run.
func TestNotFiring(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := newEnv(t)
	evs := platformtest.InboundEvents(t, e.bus)
	paused := e.create(t, cron.NewJob{Prompt: "paused", Schedule: "every 1h"})
	done := e.create(t, cron.NewJob{Prompt: "done", Schedule: "every 1h", Repeat: 1})
	one := e.create(t, cron.NewJob{Prompt: "one", Schedule: "45m"})
	for _, id := range []string{paused.ID, one.ID} {
		if _, err := e.store.Pause(ctx, "telegram:99", id); err != nil {
			t.Fatal(err)
		}
	}
	s := e.scheduler(t, nil)
	e.clock.Set(t0.Add(time.Hour))
	if n := tick(t, s); n != 1 {
		t.Fatalf("fired %d, want the one scheduled job", n)
	}
	platformtest.NextEvent(t, evs)
	if got := e.job(t, done.ID); got.State != cron.StateCompleted {
		t.Fatalf("repeat 1 job after its run: %+v", got)
	}
	for _, at := range []time.Duration{2 * time.Hour, 3 * time.Hour, 30 * time.Hour} {
		e.clock.Set(t0.Add(at))
		if n := tick(t, s); n != 0 {
			t.Fatalf("at +%v fired %d", at, n)
		}
	}
	if _, err := e.store.Trigger(ctx, "telegram:99", done.ID); !errors.Is(err, cron.ErrInvalid) {
		t.Errorf("run of a completed job: %v", err)
	}
	for _, id := range []string{paused.ID, one.ID} {
		if _, err := e.store.Trigger(ctx, "telegram:99", id); err != nil {
			t.Fatal(err)
		}
	}
	if n := tick(t, s); n != 2 {
		t.Fatalf("the runs asked for fired %d, want 2", n)
	}
	runs := map[string]bool{}
	for range 2 {
		runs[platformtest.NextEvent(t, evs).GetEventId()] = true
	}
	asked := e.clock.Now()
	if !runs[cron.RunID(paused.ID, asked, true)] || !runs[cron.RunID(one.ID, asked, true)] {
		t.Errorf("runs published %v", runs)
	}
	got := e.job(t, paused.ID)
	if got.State != cron.StateScheduled || !got.ManualRunAt.IsZero() || got.RepeatCompleted != 1 || !got.NextRunAt.Equal(asked.Add(time.Hour)) {
		t.Errorf("paused job after a run asked for: %+v", got)
	}
	got = e.job(t, one.ID)
	if got.State != cron.StateCompleted || !got.ManualRunAt.IsZero() || got.LastStatus != "ok" || got.LastError != "" || got.RepeatCompleted != 1 {
		t.Errorf("paused one-shot after a run asked for: %+v", got)
	}
	if n := tick(t, s); n != 0 {
		t.Errorf("fired %d more", n)
	}
	platformtest.NoEvent(t, evs, 200*time.Millisecond)
	e.ended(t)
	e.clock.Set(asked.Add(time.Hour))
	if n := tick(t, s); n != 1 {
		t.Errorf("the resumed job's next run fired %d", n)
	}
	// A run asked for, then a pause before the tick: nothing fires.
	if _, err := e.store.Trigger(ctx, "telegram:99", paused.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := e.store.Pause(ctx, "telegram:99", paused.ID); err != nil {
		t.Fatal(err)
	}
	if n := tick(t, s); n != 0 {
		t.Errorf("a run asked for before a pause fired %d", n)
	}
}

// TestDowntime: after an outage a recurring job runs once (Hermes's
// catch-up: missed runs collapse) and its next run is the first after
// that run (an interval's counts from it); with catch_up_missed off it
// only moves on. A one-shot missed
// beyond its grace is retired without running.
func TestDowntime(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	evs := platformtest.InboundEvents(t, e.bus)
	daily := e.create(t, cron.NewJob{Prompt: "daily", Schedule: "0 9 * * *"})
	hourly := e.create(t, cron.NewJob{Prompt: "hourly", Schedule: "every 1h"})
	one := e.create(t, cron.NewJob{Prompt: "one", Schedule: "45m"})
	// Down from 8:30 to 9:10 three days later.
	back := time.Date(2026, 3, 13, 9, 10, 0, 0, time.UTC)
	e.clock.Set(back)
	if n := tick(t, e.scheduler(t, nil)); n != 2 {
		t.Fatalf("fired %d after the outage, want the daily and the hourly once each", n)
	}
	ids := map[string]bool{}
	for range 2 {
		ids[platformtest.NextEvent(t, evs).GetEventId()] = true
	}
	if !ids[daily.ID+"_20260310_090000"] || !ids[hourly.ID+"_20260310_093000"] {
		t.Errorf("runs published %v", ids)
	}
	platformtest.NoEvent(t, evs, 200*time.Millisecond)
	if got := e.job(t, daily.ID); !got.NextRunAt.Equal(time.Date(2026, 3, 14, 9, 0, 0, 0, time.UTC)) || got.RepeatCompleted != 1 {
		t.Errorf("daily after the catch-up %+v", got)
	}
	if got := e.job(t, hourly.ID); !got.NextRunAt.Equal(back.Add(time.Hour)) {
		t.Errorf("hourly after the catch-up: next %v, want an hour after it", got.NextRunAt)
	}
	if got := e.job(t, one.ID); got.State != cron.StateCompleted || got.LastStatus != "error" || !strings.HasPrefix(got.LastError, "missed: ") {
		t.Errorf("missed one-shot %+v", got)
	}

	// Without catch-up the missed run is skipped.
	e2 := newEnv(t)
	j := e2.create(t, cron.NewJob{Prompt: "daily", Schedule: "0 9 * * *"})
	e2.clock.Set(back)
	if n := tick(t, e2.scheduler(t, func(c *scheduler.Config) { c.CatchUpMissed = false })); n != 0 {
		t.Fatalf("fired %d with catch_up_missed off", n)
	}
	if got := e2.job(t, j.ID); !got.NextRunAt.Equal(time.Date(2026, 3, 14, 9, 0, 0, 0, time.UTC)) || got.RepeatCompleted != 0 {
		t.Errorf("skipped job %+v", got)
	}
	// A run late within its grace still runs without catch-up.
	e2.clock.Set(time.Date(2026, 3, 14, 9, 30, 0, 0, time.UTC))
	if n := tick(t, e2.scheduler(t, func(c *scheduler.Config) { c.CatchUpMissed = false })); n != 1 {
		t.Errorf("a run 30 minutes late fired %d", n)
	}
}

// TestIntervalFromEachRun: as Hermes's compute_next_run, an interval's
// next run is its period after the run just made (on time, late, a
// catch-up, or a run asked for), or after the instant a run was skipped
// (cron.catch_up_missed off): it is not kept on the grid of its first run.
func TestIntervalFromEachRun(t *testing.T) {
	t.Parallel()
	due := t0.Add(time.Hour) // an hourly job's first run
	for _, tc := range []struct {
		name     string
		at       time.Duration // when the tick fires, from due
		byHand   bool          // a run asked for at due-40m fires then
		noCatch  bool
		runs     int
		wantNext time.Time
	}{
		{name: "on time", at: 20 * time.Second, runs: 1, wantNext: due.Add(time.Hour + 20*time.Second)},
		{name: "late within its grace", at: 10 * time.Minute, runs: 1, wantNext: due.Add(70 * time.Minute)},
		{name: "catch-up after an outage", at: 5*time.Hour + 10*time.Minute, runs: 1, wantNext: due.Add(6*time.Hour + 10*time.Minute)},
		{name: "skipped without catch-up", at: 5*time.Hour + 10*time.Minute, noCatch: true, runs: 0, wantNext: due.Add(6*time.Hour + 10*time.Minute)},
		{name: "a run asked for", at: -40 * time.Minute, byHand: true, runs: 1, wantNext: due.Add(20 * time.Minute)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			j := e.create(t, cron.NewJob{Prompt: "hourly", Schedule: "every 1h"})
			s := e.scheduler(t, func(c *scheduler.Config) { c.CatchUpMissed = !tc.noCatch })
			e.clock.Set(due.Add(tc.at))
			if tc.byHand {
				if _, err := e.store.Trigger(context.Background(), "telegram:99", j.ID); err != nil {
					t.Fatal(err)
				}
			}
			if n := tick(t, s); n != tc.runs {
				t.Fatalf("fired %d, want %d", n, tc.runs)
			}
			e.ended(t) // at once: the next run stays the one from the firing
			got := e.job(t, j.ID)
			if !got.NextRunAt.Equal(tc.wantNext) || got.RepeatCompleted != tc.runs || got.State != cron.StateScheduled {
				t.Errorf("next %v, %d runs, %s; want %v, %d, scheduled", got.NextRunAt, got.RepeatCompleted, got.State, tc.wantNext, tc.runs)
			}
			// Nothing more until then; then the next run.
			e.clock.Set(tc.wantNext.Add(-time.Second))
			if n := tick(t, s); n != 0 {
				t.Errorf("fired %d before the next run", n)
			}
			e.clock.Set(tc.wantNext)
			if n := tick(t, s); n != 1 {
				t.Errorf("the next run fired %d", n)
			}
			if got := e.job(t, j.ID); !got.NextRunAt.Equal(tc.wantNext.Add(time.Hour)) {
				t.Errorf("after the next run: next %v, want %v", got.NextRunAt, tc.wantNext.Add(time.Hour))
			}
		})
	}
}

// TestMissedOneShotRunByHand: a run asked for is the one-shot's run, as
// Hermes's run-now: asked for before its time it fires at once and
// completes the one-shot, which does not run again at its time; asked for
// while the routers were down at its time, it fires when they are back
// and the one-shot is completed with the run's status, not retired as
// missed over it. Either way one run, counted.
func TestMissedOneShotRunByHand(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, tc := range []struct {
		name       string
		askedAt    time.Duration
		wantStatus string
	}{
		{"asked for while the routers were down", 2 * time.Hour, "ok"},
		{"asked for before its time", 10 * time.Minute, "ok"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			j := e.create(t, cron.NewJob{Prompt: "one", Schedule: "45m"})
			s := e.scheduler(t, nil)
			e.clock.Set(t0.Add(tc.askedAt))
			if _, err := e.store.Trigger(ctx, "telegram:99", j.ID); err != nil {
				t.Fatal(err)
			}
			if tc.askedAt < 45*time.Minute {
				if n := tick(t, s); n != 1 { // up then: the run fires at once
					t.Fatalf("the early run fired %d", n)
				}
			}
			e.clock.Set(t0.Add(3 * time.Hour)) // the routers are back
			tick(t, s)
			got := e.job(t, j.ID)
			if got.State != cron.StateCompleted || got.LastStatus != tc.wantStatus || (tc.wantStatus == "ok") != (got.LastError == "") ||
				got.RepeatCompleted != 1 || !strings.HasSuffix(got.LastRunID, "_run") {
				t.Errorf("state %s, status %q, error %q, %d runs, last %q; want completed, %q, its one run asked for",
					got.State, got.LastStatus, got.LastError, got.RepeatCompleted, got.LastRunID, tc.wantStatus)
			}
			if n := e.published(t); n != 1 {
				t.Errorf("%d runs published, want the one asked for", n)
			}
		})
	}
}

// TestDeliverTargets: local runs answer nowhere; a platform's home and
// an explicit chat resolve when the job fires; a target that does not
// resolve blocks the run (no model call) and says why.
func TestDeliverTargets(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	evs := platformtest.InboundEvents(t, e.bus)
	local := e.create(t, cron.NewJob{Prompt: "l", Schedule: "11m", Deliver: "local"})
	home := e.create(t, cron.NewJob{Prompt: "h", Schedule: "11m", Deliver: "discord"})
	chat := e.create(t, cron.NewJob{Prompt: "c", Schedule: "12m", Deliver: "telegram:-100123:17585"})
	blocked := e.create(t, cron.NewJob{Prompt: "b", Schedule: "every 12m", Deliver: "slack"})
	// Several targets (Hermes's comma-separated deliver): the run goes
	// out with the first that resolves (the worker answers in the
	// others too); one resolving none is blocked, saying why for each.
	several := e.create(t, cron.NewJob{Prompt: "m", Schedule: "12m", Deliver: "slack, discord:123 ,origin"})
	none := e.create(t, cron.NewJob{Prompt: "n", Schedule: "every 12m", Deliver: "slack,matrix"})
	e.clock.Set(t0.Add(12 * time.Minute))
	if n := tick(t, e.scheduler(t, nil)); n != 4 {
		t.Fatalf("fired %d, want 4", n)
	}
	routes := map[string]string{}
	for range 4 {
		ev := platformtest.NextEvent(t, evs)
		rr := ev.GetReplyRoute()
		routes[strings.SplitN(ev.GetEventId(), "_", 2)[0]] = rr.GetPlatform() + ":" + rr.GetChatId() + ":" + rr.GetThreadId()
	}
	want := map[string]string{local.ID: "::", home.ID: "discord:555:", chat.ID: "telegram:-100123:17585", several.ID: "discord:123:"}
	for id, w := range want {
		if routes[id] != w {
			t.Errorf("job %s routed to %q, want %q", id, routes[id], w)
		}
	}
	got := e.job(t, blocked.ID)
	if got.LastStatus != "blocked_config" || !strings.Contains(got.LastError, "no home channel for slack") ||
		!got.NextRunAt.Equal(t0.Add(24*time.Minute)) || got.State != cron.StateScheduled {
		t.Errorf("blocked job %+v", got)
	}
	if got := e.job(t, none.ID); got.LastStatus != "blocked_config" || !strings.Contains(got.LastError, "slack: ") ||
		!strings.Contains(got.LastError, "matrix: ") {
		t.Errorf("job with no target resolving: status %q error %q", got.LastStatus, got.LastError)
	}
}

// TestDeliverToTheOriginsPlatform: as Hermes's
// _resolve_single_delivery_target (cron/scheduler.py), a deliver target
// that names only the platform the job was made on is the chat (and
// thread) the job was made in, even when that platform has a home
// channel (discord here, for a job made in a Discord thread), and not a
// blocked run when it has none (telegram here); another platform is its
// home channel.
func TestDeliverToTheOriginsPlatform(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	evs := platformtest.InboundEvents(t, e.bus)
	topic := cron.Origin{Platform: "telegram", Account: "default", ChatID: "-100123", ThreadID: "17585"}
	discordThread := cron.Origin{Platform: "discord", Account: "default", ChatID: "777", ThreadID: "888"}
	same := e.create(t, cron.NewJob{Prompt: "s", Schedule: "11m", Deliver: "telegram"})
	thread := e.create(t, cron.NewJob{Prompt: "t", Schedule: "11m", Deliver: "Telegram", Origin: topic})
	other := e.create(t, cron.NewJob{Prompt: "o", Schedule: "11m", Deliver: "discord"})
	home := e.create(t, cron.NewJob{Owner: "discord:42", Prompt: "h", Schedule: "11m", Deliver: "Discord", Origin: discordThread})
	e.clock.Set(t0.Add(11 * time.Minute))
	if n := tick(t, e.scheduler(t, nil)); n != 4 {
		t.Fatalf("fired %d, want 4 (job %+v)", n, e.job(t, same.ID))
	}
	routes := map[string]string{}
	for range 4 {
		ev := platformtest.NextEvent(t, evs)
		rr := ev.GetReplyRoute()
		routes[strings.SplitN(ev.GetEventId(), "_", 2)[0]] = rr.GetPlatform() + ":" + rr.GetAccount() + ":" + rr.GetChatId() + ":" + rr.GetThreadId()
	}
	for id, w := range map[string]string{same.ID: "telegram:default:99:", thread.ID: "telegram:default:-100123:17585", other.ID: "discord::555:",
		home.ID: "discord:default:777:888"} {
		if routes[id] != w {
			t.Errorf("job %s routed to %q, want %q", id, routes[id], w)
		}
	}
}

// TestDeliverToAHomeWithoutAnOrigin: as Hermes's deliver=origin
// fallback, a job that delivers to its origin but has none (made over the
// API) answers in the first home channel of Hermes's platform order
// (telegram before discord), not nowhere; with no home channel at all its
// run is blocked and says why. A job that says nothing delivers nowhere
// (Hermes's create_job makes it local), and still runs.
func TestDeliverToAHomeWithoutAnOrigin(t *testing.T) {
	t.Parallel()
	create := func(e *env, deliver string) cron.Job {
		j, err := e.store.Create(context.Background(), cron.NewJob{Owner: "telegram:99", Prompt: "p", Schedule: "every 11m", Deliver: deliver})
		if err != nil {
			t.Fatal(err)
		}
		return j
	}
	sched := func(e *env, homes map[string]string) *scheduler.Scheduler {
		cfg := scheduler.DefaultConfig()
		cfg.Timezone = "UTC"
		s, err := scheduler.New(cfg, scheduler.Deps{DB: e.db, Bus: e.bus, Now: e.clock.Now,
			Resolve: func(_ context.Context, raw string) (*deliveryv1.Target, error) {
				t, _, err := outbox.ParseTarget(raw, func(p string) string { return homes[p] })
				return t, err
			}})
		if err != nil {
			t.Fatal(err)
		}
		return s
	}

	e := newEnv(t)
	evs := platformtest.InboundEvents(t, e.bus)
	origin, unsaid := create(e, "origin"), create(e, "")
	if unsaid.Deliver != cron.DeliverLocal {
		t.Fatalf("deliver unsaid without an origin is %q, want local", unsaid.Deliver)
	}
	e.clock.Set(t0.Add(11 * time.Minute))
	if n := tick(t, sched(e, map[string]string{"discord": "555", "telegram": "-100777:5"})); n != 2 {
		t.Fatalf("fired %d, want 2", n)
	}
	routes := map[string]*eventsv1.ReplyRoute{}
	for range 2 {
		ev := platformtest.NextEvent(t, evs)
		routes[strings.SplitN(ev.GetEventId(), "_", 2)[0]] = ev.GetReplyRoute()
	}
	if rr := routes[origin.ID]; rr.GetPlatform() != "telegram" || rr.GetChatId() != "-100777" || rr.GetThreadId() != "5" {
		t.Errorf("origin job without an origin routed to %v, want telegram's home -100777:5", rr)
	}
	if rr := routes[unsaid.ID]; rr == nil || rr.GetPlatform() != "" {
		t.Errorf("job with no deliver routed to %v, want nowhere", rr)
	}

	bare := newEnv(t)
	blocked := create(bare, "origin")
	bare.clock.Set(t0.Add(11 * time.Minute))
	if n := tick(t, sched(bare, nil)); n != 0 {
		t.Errorf("fired %d with no home channel anywhere, want 0", n)
	}
	got := bare.job(t, blocked.ID)
	if got.LastStatus != "blocked_config" || !strings.Contains(got.LastError, "no platform has a home channel") {
		t.Errorf("origin job without an origin nor a home: status %q error %q", got.LastStatus, got.LastError)
	}
}

// TestRunTicks: Run ticks at once, then every cron.tick, and returns nil
// when its context ends.
func TestRunTicks(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	j := e.create(t, cron.NewJob{Prompt: "hourly", Schedule: "every 1h"})
	e.clock.Set(t0.Add(time.Hour))
	s := e.scheduler(t, func(c *scheduler.Config) { c.Tick = time.Second })
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	// A run is in the stream a moment before its job records it (the
	// publish's acknowledgement, then the commit that holds the job): the
	// end below must come after that record, or it ends nothing and the
	// run holds the job past the next one.
	wait := func(n int) {
		t.Helper()
		waitFor(t, fmt.Sprintf("run %d published and recorded on its job", n), func() bool {
			return e.published(t) >= uint64(n) && e.job(t, j.ID).RepeatCompleted >= n
		})
	}
	wait(1)
	e.ended(t)
	e.clock.Set(t0.Add(2 * time.Hour))
	wait(2)
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Run: %v", err)
		}
	case <-time.After(waitBound):
		t.Fatal("Run did not stop")
	}
	if n := e.published(t); n != 2 {
		t.Errorf("%d runs, want 2", n)
	}
}

// waitBound bounds a test's wait for something another goroutine (Run's
// ticks) or process (NATS) does. It is not a guess at how long that takes,
// which under load (-race, -cpu 1, other packages' tests beside) may be
// seconds for what takes milliseconds alone: the waits end as soon as it
// is done.
const waitBound = time.Minute

// waitFor polls cond until it holds, at most waitBound.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(waitBound)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("waited %v in vain for %s", waitBound, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// fail is the router's record of a run whose turn failed.
func (e *env) fail(t *testing.T, runID, reason string) bool {
	t.Helper()
	applied, err := e.store.RecordOutcome(context.Background(), runID, "error", reason)
	if err != nil {
		t.Fatal(err)
	}
	return applied
}

// TestOutcomesOutOfOrder: two runs of a job are fired, and their turns
// end out of order: the older run's failure, arriving after the newer
// run fired (or failed), does not overwrite the newer run's status.
func TestOutcomesOutOfOrder(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	j := e.create(t, cron.NewJob{Prompt: "report", Schedule: "every 1h"})
	s := e.scheduler(t, nil)
	first := cron.RunID(j.ID, t0.Add(time.Hour), false)
	second := cron.RunID(j.ID, t0.Add(2*time.Hour), false)
	e.clock.Set(t0.Add(time.Hour))
	if n := tick(t, s); n != 1 {
		t.Fatalf("fired %d", n)
	}
	// The first run's turn ends (its end recorded, not yet its failure).
	e.ended(t)
	e.clock.Set(t0.Add(2 * time.Hour))
	if n := tick(t, s); n != 1 {
		t.Fatalf("fired %d", n)
	}
	// The first run's failure is recorded after the second run fired.
	if e.fail(t, first, "first run failed") {
		t.Error("an older run's outcome applied")
	}
	if got := e.job(t, j.ID); got.LastStatus != "ok" || got.LastError != "" || got.LastRunID != second {
		t.Errorf("after the first run's late failure: %q %q %q, want the second run's ok", got.LastStatus, got.LastError, got.LastRunID)
	}
	// Both fail, the newer first.
	if !e.fail(t, second, "second run failed") {
		t.Error("the last run's outcome did not apply")
	}
	e.fail(t, first, "first run failed")
	if got := e.job(t, j.ID); got.LastStatus != "error" || got.LastError != "second run failed" {
		t.Errorf("after both failed: %q %q, want the second run's error", got.LastStatus, got.LastError)
	}
	// A manual run is a run like any other: the scheduled run's late
	// outcome does not overwrite it.
	if _, err := e.store.Trigger(context.Background(), "telegram:99", j.ID); err != nil {
		t.Fatal(err)
	}
	e.ended(t)
	if n := tick(t, s); n != 1 {
		t.Fatalf("manual run fired %d", n)
	}
	if e.fail(t, second, "second run failed again") {
		t.Error("a scheduled run's outcome applied over a newer manual run")
	}
	if got := e.job(t, j.ID); got.LastStatus != "ok" || !strings.HasSuffix(got.LastRunID, "_run") {
		t.Errorf("after the manual run: %q %q", got.LastStatus, got.LastRunID)
	}
}

// TestOutcomeBeforeItsRunIsRecorded: the commit that records a run fails
// after its publish, and its turn fails before the retry records it: the
// failure applies (the run is the job's pending one) and the retry keeps
// it rather than writing ok over it.
func TestOutcomeBeforeItsRunIsRecorded(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	j := e.create(t, cron.NewJob{Prompt: "report", Schedule: "every 1h"})
	e.clock.Set(t0.Add(time.Hour))
	crashing := e.scheduler(t, nil)
	scheduler.SetCommit(crashing, func(ctx context.Context, tx pgx.Tx) error {
		_ = tx.Rollback(ctx)
		return errors.New("connection lost")
	})
	if _, err := crashing.Tick(context.Background()); err == nil {
		t.Fatal("the crashing tick succeeded")
	}
	run := cron.RunID(j.ID, t0.Add(time.Hour), false)
	if !e.fail(t, run, "the model is unavailable") {
		t.Fatal("the pending run's outcome did not apply")
	}
	e.clock.Set(t0.Add(time.Hour + time.Minute))
	if n := tick(t, e.scheduler(t, nil)); n != 1 {
		t.Fatalf("the retry published %d", n)
	}
	if got := e.job(t, j.ID); got.LastStatus != "error" || got.LastError != "the model is unavailable" || got.LastRunID != run || got.RepeatCompleted != 1 {
		t.Errorf("after the retry: %+v", got)
	}
	if n := e.published(t); n != 1 {
		t.Errorf("%d runs on the bus, want 1", n)
	}
}

// TestDeliveryFailures: a run whose answer was not delivered (Hermes's
// last_delivery_error) says so on its job: status delivery_failed with
// the first reason, and each other target's after it, unless the run
// failed itself; a failure of an older
// run is dropped; the next run clears it. A failure of a run whose commit
// failed after its publish applies, and the retry keeps it.
func TestDeliveryFailures(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := newEnv(t)
	j := e.create(t, cron.NewJob{Prompt: "report", Schedule: "every 1h"})
	s := e.scheduler(t, nil)
	first := cron.RunID(j.ID, t0.Add(time.Hour), false)
	second := cron.RunID(j.ID, t0.Add(2*time.Hour), false)
	record := func(run, target, reason string) bool {
		t.Helper()
		ok, err := cron.RecordDeliveryFailure(ctx, e.db, run, target, reason)
		if err != nil {
			t.Fatal(err)
		}
		return ok
	}
	e.clock.Set(t0.Add(time.Hour))
	tick(t, s)
	steps := []struct {
		name            string
		do              func() bool
		applied         bool
		status, deliver string
		lastErr         string
	}{
		{"the answer is dead-lettered", func() bool { return record(first, "", "gave up after 5 attempts: no gateway serves telegram") },
			true, "delivery_failed", "gave up after 5 attempts: no gateway serves telegram", ""},
		{"the undelivered notice fails too", func() bool { return record(first, "", "chat not found") },
			true, "delivery_failed", "gave up after 5 attempts: no gateway serves telegram", ""},
		{"the turn failed as well", func() bool { return e.fail(t, first, "the model is unavailable") },
			true, "error", "gave up after 5 attempts: no gateway serves telegram", "the model is unavailable"},
		{"the next run", func() bool { e.ended(t); e.clock.Set(t0.Add(2 * time.Hour)); return tick(t, s) == 1 },
			true, "ok", "", ""},
		{"the older run's failure", func() bool { return record(first, "", "late") },
			false, "ok", "", ""},
		{"the run of a removed job", func() bool { return record("000000000000_20260310_090000", "", "gone") },
			false, "ok", "", ""},
		{"the new run's answer expires", func() bool { return record(second, "", "expired before it could be sent") },
			true, "delivery_failed", "expired before it could be sent", ""},
		// Failures to targets, as delivery records them: one line each,
		// "; "-joined, as Hermes's _deliver_result; a target's second
		// failure says less, one of no target after them too.
		{"its copy to a target fails", func() bool { return record(second, "telegram:42", "Forbidden: bot was blocked by the user") },
			true, "delivery_failed", "expired before it could be sent; delivery to telegram:42 failed: Forbidden: bot was blocked by the user", ""},
		{"another copy fails", func() bool { return record(second, "telegram:4", "chat not found") },
			true, "delivery_failed", "expired before it could be sent; delivery to telegram:42 failed: Forbidden: bot was blocked by the user; delivery to telegram:4 failed: chat not found", ""},
		{"the notice to the first target fails too", func() bool { return record(second, "telegram:42", "chat not found") },
			true, "delivery_failed", "expired before it could be sent; delivery to telegram:42 failed: Forbidden: bot was blocked by the user; delivery to telegram:4 failed: chat not found", ""},
		{"a failure of no target", func() bool { return record(second, "", "late") },
			true, "delivery_failed", "expired before it could be sent; delivery to telegram:42 failed: Forbidden: bot was blocked by the user; delivery to telegram:4 failed: chat not found", ""},
	}
	for _, st := range steps {
		if got := st.do(); got != st.applied {
			t.Errorf("%s: applied %v, want %v", st.name, got, st.applied)
		}
		got := e.job(t, j.ID)
		if got.LastStatus != st.status || got.LastDeliveryError != st.deliver || got.LastError != st.lastErr {
			t.Errorf("%s: status %q, delivery error %q, error %q; want %q %q %q", st.name,
				got.LastStatus, got.LastDeliveryError, got.LastError, st.status, st.deliver, st.lastErr)
		}
	}

	// The commit after the publish fails; the answer fails before the retry.
	e2 := newEnv(t)
	k := e2.create(t, cron.NewJob{Prompt: "report", Schedule: "every 1h"})
	e2.clock.Set(t0.Add(time.Hour))
	crashing := e2.scheduler(t, nil)
	scheduler.SetCommit(crashing, func(ctx context.Context, tx pgx.Tx) error {
		_ = tx.Rollback(ctx)
		return errors.New("connection lost")
	})
	if _, err := crashing.Tick(ctx); err == nil {
		t.Fatal("the crashing tick succeeded")
	}
	run := cron.RunID(k.ID, t0.Add(time.Hour), false)
	if ok, err := cron.RecordDeliveryFailure(ctx, e2.db, run, "", "chat not found"); err != nil || !ok {
		t.Fatalf("the pending run's delivery failure: %v %v", ok, err)
	}
	e2.clock.Set(t0.Add(time.Hour + time.Minute))
	if n := tick(t, e2.scheduler(t, nil)); n != 1 {
		t.Fatalf("the retry published %d", n)
	}
	if got := e2.job(t, k.ID); got.LastStatus != "delivery_failed" || got.LastDeliveryError != "chat not found" || got.LastRunID != run {
		t.Errorf("after the retry: %+v", got)
	}
}

// TestManualRunsWithinASecond: "run" asked twice before the tick is one
// run (the second joins the first: same id); asked again after the tick
// fired it, within the same second (the clock does not move here), it is
// a second run with an id of its own. A retry of a manual run's publish
// keeps its id. Each run counts towards repeat, as Hermes's run-now.
func TestManualRunsWithinASecond(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := newEnv(t)
	evs := platformtest.InboundEvents(t, e.bus)
	j := e.create(t, cron.NewJob{Prompt: "report", Schedule: "every 1d"})
	e.clock.Set(t0.Add(time.Hour + 300*time.Millisecond))
	a, err := e.store.Trigger(ctx, "telegram:99", j.ID)
	if err != nil {
		t.Fatal(err)
	}
	e.clock.Set(t0.Add(time.Hour + 700*time.Millisecond))
	b, err := e.store.Trigger(ctx, "telegram:99", j.ID)
	if err != nil {
		t.Fatal(err)
	}
	if !a.ManualRunAt.Equal(t0.Add(time.Hour+300*time.Millisecond)) || !b.ManualRunAt.Equal(a.ManualRunAt) {
		t.Fatalf("runs asked for at %v and %v, want one at the first", a.ManualRunAt, b.ManualRunAt)
	}
	// The first attempt's commit fails after its publish; the retry
	// publishes the same id.
	crashing := e.scheduler(t, nil)
	scheduler.SetCommit(crashing, func(ctx context.Context, tx pgx.Tx) error {
		_ = tx.Rollback(ctx)
		return errors.New("connection lost")
	})
	if _, err := crashing.Tick(ctx); err == nil {
		t.Fatal("the crashing tick succeeded")
	}
	s := e.scheduler(t, nil)
	if n := tick(t, s); n != 0 {
		t.Fatalf("fired %d in the tick of the failure", n)
	}
	e.clock.Set(t0.Add(time.Hour + time.Minute + 700*time.Millisecond)) // the next tick
	if n := tick(t, s); n != 1 {
		t.Fatalf("fired %d", n)
	}
	one := platformtest.NextEvent(t, evs).GetEventId()
	if want := j.ID + "_20260310_093000.300000_run"; one != want {
		t.Errorf("manual run id %q, want %q", one, want)
	}
	// Asked again in the same second (and, on a replica whose clock is
	// behind, before the first): another run, later than the first.
	e.clock.Set(t0.Add(time.Hour + 100*time.Millisecond))
	c, err := e.store.Trigger(ctx, "telegram:99", j.ID)
	if err != nil {
		t.Fatal(err)
	}
	if !c.ManualRunAt.After(a.ManualRunAt) {
		t.Fatalf("second run asked for at %v, not after the first's %v", c.ManualRunAt, a.ManualRunAt)
	}
	e.clock.Set(t0.Add(time.Hour + 900*time.Millisecond))
	e.ended(t) // the first run's turn ended
	if n := tick(t, s); n != 1 {
		t.Fatalf("the second run fired %d", n)
	}
	two := platformtest.NextEvent(t, evs).GetEventId()
	if two == one || !strings.HasSuffix(two, "_run") {
		t.Errorf("second run id %q (first %q)", two, one)
	}
	platformtest.NoEvent(t, evs, 200*time.Millisecond)
	if n := e.published(t); n != 2 {
		t.Errorf("%d runs on the bus, want 2", n)
	}
	if got := e.job(t, j.ID); got.LastRunID != two || !got.ManualRunAt.IsZero() || got.RepeatCompleted != 2 {
		t.Errorf("after two manual runs %+v", got)
	}
}

// TestCompletedJobsDeleted: a completed job stays listed (all) for
// cron.completed_retention after its last run, then a tick deletes it;
// jobs that are not completed, and a completed one with a run asked for
// that has not fired, stay. Completed jobs never count towards the cap.
func TestCompletedJobsDeleted(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := newEnv(t)
	one := e.create(t, cron.NewJob{Prompt: "one", Schedule: "30m"})
	three := e.create(t, cron.NewJob{Prompt: "three", Schedule: "every 10m", Repeat: 1})
	missed := e.create(t, cron.NewJob{Prompt: "missed", Schedule: "20m"})
	paused := e.create(t, cron.NewJob{Prompt: "paused", Schedule: "every 10m"})
	// A one-shot run by hand before its time: that run is its one run.
	late := e.create(t, cron.NewJob{Prompt: "late", Schedule: "45m"})
	if _, err := e.store.Trigger(ctx, "telegram:99", late.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := e.store.Pause(ctx, "telegram:99", paused.ID); err != nil {
		t.Fatal(err)
	}
	s := e.scheduler(t, nil)
	e.clock.Set(t0.Add(10 * time.Minute))
	if n := tick(t, s); n != 2 { // three's one run, late's run asked for
		t.Fatalf("fired %d, want 2", n)
	}
	e.clock.Set(t0.Add(30 * time.Minute))
	tick(t, s) // one runs, missed is retired
	for _, id := range []string{one.ID, three.ID, missed.ID, late.ID} {
		if got := e.job(t, id); got.State != cron.StateCompleted {
			t.Fatalf("job %s: %s", id, got.State)
		}
	}
	if js, _ := e.store.List(ctx, "telegram:99", false); len(js) != 0 {
		t.Errorf("scheduled list holds %d jobs", len(js))
	}
	e.clock.Set(t0.Add(7*24*time.Hour + 5*time.Minute))
	tick(t, s)
	if js, _ := e.store.List(ctx, "telegram:99", true); len(js) != 5 {
		t.Fatalf("%d jobs listed before the retention passed, want 5", len(js))
	}
	// A completed job with a run asked for and not fired (a row from
	// before a run counted: a paused one-shot past its time was completed
	// when its run was asked for) stays until it has fired; asking again
	// names the same run.
	asked := t0.Add(20 * time.Minute)
	if _, err := e.db.Exec(ctx, `UPDATE cron_jobs SET manual_run_at = $2 WHERE id = $1`, one.ID, asked); err != nil {
		t.Fatal(err)
	}
	if j, err := e.store.Trigger(ctx, "telegram:99", one.ID); err != nil || j.State != cron.StateCompleted || !j.ManualRunAt.Equal(asked) {
		t.Fatalf("one after its run asked for again: %+v %v", j, err)
	}
	e.clock.Set(t0.Add(7*24*time.Hour + 31*time.Minute))
	if _, err := cron.DeleteCompleted(ctx, e.db, e.clock.Now().Add(-7*24*time.Hour), 100); err != nil {
		t.Fatal(err)
	}
	if _, err := e.store.Resolve(ctx, "telegram:99", one.ID); err != nil {
		t.Fatalf("a completed job with a run asked for was deleted: %v", err)
	}
	if n := tick(t, s); n != 1 {
		t.Fatalf("the run asked for fired %d", n)
	}
	if got := e.job(t, one.ID); got.State != cron.StateCompleted || got.RepeatCompleted != 1 || !got.ManualRunAt.IsZero() {
		t.Errorf("one after the run asked for: %+v", got)
	}
	// Its retention runs from that last run.
	e.clock.Set(t0.Add(14*24*time.Hour + 30*time.Minute))
	tick(t, s)
	if _, err := e.store.Resolve(ctx, "telegram:99", one.ID); err != nil {
		t.Fatalf("deleted before the retention after its manual run: %v", err)
	}
	e.clock.Set(t0.Add(14*24*time.Hour + 32*time.Minute))
	tick(t, s)
	js, err := e.store.List(ctx, "telegram:99", true)
	if err != nil || len(js) != 1 || js[0].ID != paused.ID {
		t.Errorf("after the retention: %v %v, want only the paused job", js, err)
	}
	// cron.completed_retention 0 keeps them.
	e2 := newEnv(t)
	kept := e2.create(t, cron.NewJob{Prompt: "kept", Schedule: "30m"})
	keep := e2.scheduler(t, func(c *scheduler.Config) { c.CompletedRetention = 0 })
	e2.clock.Set(t0.Add(30 * time.Minute))
	tick(t, keep)
	e2.clock.Set(t0.Add(365 * 24 * time.Hour))
	tick(t, keep)
	if got := e2.job(t, kept.ID); got.State != cron.StateCompleted {
		t.Errorf("kept job %+v", got)
	}
}

// TestPanicWhileFiring: a panic while firing one job (here its deliver
// target's resolver panics, or the commit) does not end the tick, Run or
// the router: it is logged with the job's id, counted in
// switchboard_panics_total{component="cron_fire"}, the job's last status
// says the firing failed, and the job stays due (nothing of the run is
// saved) and fires on a later tick once firing it no longer panics. The
// other due jobs fire as ever.
func TestPanicWhileFiring(t *testing.T) {
	for _, tc := range []struct {
		name   string
		where  string // "resolve" or "commit"
		target string
	}{
		{"the resolver panics", "resolve", "discord:#boom"},
		{"the commit panics", "commit", "telegram:42"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// Not parallel: the counter is the process's.
			ctx := context.Background()
			e := newEnv(t)
			evs := platformtest.InboundEvents(t, e.bus)
			boom := e.create(t, cron.NewJob{Prompt: "boom", Schedule: "every 1h", Deliver: tc.target})
			fine := e.create(t, cron.NewJob{Prompt: "fine", Schedule: "every 1h"})
			var mu sync.Mutex
			broken := true
			isBroken := func() bool { mu.Lock(); defer mu.Unlock(); return broken }
			logs := &logtest.Buffer{}
			cfg := scheduler.DefaultConfig()
			cfg.Timezone, cfg.Tick = "UTC", time.Second
			s, err := scheduler.New(cfg, scheduler.Deps{DB: e.db, Bus: e.bus, Now: e.clock.Now,
				Log: slog.New(slog.NewJSONHandler(logs, nil)),
				Resolve: func(ctx context.Context, raw string) (*deliveryv1.Target, error) {
					if tc.where == "resolve" && raw == tc.target && isBroken() {
						var m map[string]*deliveryv1.Target
						m["x"].ChatId = "nil map, nil pointer" // a bug: panics
					}
					return resolve(ctx, raw)
				}})
			if err != nil {
				t.Fatal(err)
			}
			if tc.where == "commit" {
				scheduler.SetCommit(s, func(ctx context.Context, tx pgx.Tx) error {
					// This transaction saved boom's run (uncommitted: only
					// it sees the run id).
					var last string
					if err := tx.QueryRow(ctx, `SELECT last_run_id FROM cron_jobs WHERE id = $1`, boom.ID).Scan(&last); err == nil &&
						last == cron.RunID(boom.ID, t0.Add(time.Hour), false) && isBroken() {
						panic("commit of " + boom.ID)
					}
					return tx.Commit(ctx)
				})
			}
			panicsBefore, _ := telemetrytest.Lookup(t, "switchboard_panics_total", map[string]string{"component": "cron_fire"})
			due := t0.Add(time.Hour)
			e.clock.Set(due)
			// Through Run, as the router runs it: it lives on.
			runCtx, stop := context.WithCancel(ctx)
			done := make(chan error, 1)
			go func() { done <- s.Run(runCtx) }()
			platformtest.NextEvent(t, evs) // fine's run (and boom's, for a commit that panics after its publish)
			waitFor(t, "a second panic recovered (Run ticking on)", func() bool {
				if telemetrytest.Value(t, "switchboard_panics_total", map[string]string{"component": "cron_fire"}) >= panicsBefore+2 {
					return true
				}
				e.clock.Set(e.clock.Now().Add(500 * time.Millisecond)) // past the delay after a failure
				return false
			})
			select {
			case err := <-done:
				t.Fatalf("Run ended on a panic: %v", err)
			default:
			}
			got := e.job(t, boom.ID)
			if got.State != cron.StateScheduled || !got.NextRunAt.Equal(due) || got.RepeatCompleted != 0 || got.LastStatus != "error" ||
				!strings.Contains(got.LastError, "panicked") || !strings.Contains(got.LastError, "tried again from") {
				t.Errorf("the job whose firing panicked: %+v", got)
			}
			if got := e.job(t, fine.ID); got.RepeatCompleted != 1 || got.LastStatus != "ok" {
				t.Errorf("the other job: %+v", got)
			}
			logged := logs.String()
			for _, want := range []string{`"msg":"panic recovered"`, `"job":"` + boom.ID + `"`, "scheduler_test.go"} {
				if !strings.Contains(logged, want) {
					t.Errorf("the log lacks %s", want)
				}
			}
			// Fixed: the run it owed fires, once, under its id.
			mu.Lock()
			broken = false
			mu.Unlock()
			want := cron.RunID(boom.ID, due, false)
			waitFor(t, "the job to fire once fixed", func() bool {
				if e.job(t, boom.ID).LastRunID == want {
					return true
				}
				e.clock.Set(e.clock.Now().Add(500 * time.Millisecond))
				return false
			})
			stop()
			if err := <-done; err != nil {
				t.Errorf("Run: %v", err)
			}
			if got := e.job(t, boom.ID); got.RepeatCompleted != 1 || got.LastStatus != "ok" || got.LastError != "" || !got.NextRunAt.After(due) ||
				got.FireFailures != 0 || !got.FireRetryAt.IsZero() || got.State != cron.StateScheduled {
				t.Errorf("after the fix: %+v", got)
			}
			if n := e.published(t); n != 2 {
				t.Errorf("%d runs on the bus, want one of each job", n)
			}
		})
	}
}

// TestFiringFailuresBackOff: a job whose firing fails every time is not
// tried every tick: each failure in a row doubles the delay before the
// next try (the next tick, then 2, 4, 8 ticks later). A panic that is its
// fifth failure in a row (cron.pause_after_fire_failures) pauses it, with
// the reason /cron list shows; a failing commit (the database, or the
// bus, failing) only delays it, however long it lasts. Resumed (or once
// the failure is gone), it fires under the run id it owed and its count
// starts over. The other jobs fire as ever.
func TestFiringFailuresBackOff(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name       string
		panics     bool
		wantTries  []int // the minutes (from due, a tick a minute) the scheduler tried it
		wantPaused bool
	}{
		{name: "a panic", panics: true, wantTries: []int{0, 1, 3, 7, 15}, wantPaused: true},
		{name: "a failed commit", wantTries: []int{0, 1, 3, 7, 15, 31}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			e := newEnv(t)
			boom := e.create(t, cron.NewJob{Prompt: "boom", Schedule: "every 1d", Deliver: "discord:#boom"})
			fine := e.create(t, cron.NewJob{Prompt: "fine", Schedule: "every 10m"})
			var mu sync.Mutex
			broken := true
			var tries []int
			due := t0.Add(24 * time.Hour)
			try := func() {
				mu.Lock()
				defer mu.Unlock()
				tries = append(tries, int(e.clock.Now().Sub(due)/time.Minute))
			}
			isBroken := func() bool { mu.Lock(); defer mu.Unlock(); return broken }
			cfg := scheduler.DefaultConfig()
			cfg.Timezone = "UTC"
			s, err := scheduler.New(cfg, scheduler.Deps{DB: e.db, Bus: e.bus, Now: e.clock.Now,
				Log: slog.New(slog.NewJSONHandler(&logtest.Buffer{}, nil)),
				Resolve: func(ctx context.Context, raw string) (*deliveryv1.Target, error) {
					if raw == "discord:#boom" {
						try()
						if tc.panics && isBroken() {
							panic("resolving " + raw)
						}
					}
					return resolve(ctx, raw)
				}})
			if err != nil {
				t.Fatal(err)
			}
			scheduler.SetCommit(s, func(ctx context.Context, tx pgx.Tx) error {
				var last string
				if err := tx.QueryRow(ctx, `SELECT last_run_id FROM cron_jobs WHERE id = $1`, boom.ID).Scan(&last); err == nil &&
					last == cron.RunID(boom.ID, due, false) && !tc.panics && isBroken() {
					_ = tx.Rollback(ctx)
					return errors.New("connection lost")
				}
				return tx.Commit(ctx)
			})
			for m := 0; m <= 40; m++ {
				e.clock.Set(due.Add(time.Duration(m)*time.Minute + 2*time.Second))
				_, _ = s.Tick(ctx)
				e.ended(t)
			}
			mu.Lock()
			got := fmt.Sprint(tries)
			mu.Unlock()
			if got != fmt.Sprint(tc.wantTries) {
				t.Errorf("tried at minutes %s, want %v", got, tc.wantTries)
			}
			j := e.job(t, boom.ID)
			if j.FireFailures != len(tc.wantTries) || j.LastStatus != "error" || j.RepeatCompleted != 0 {
				t.Errorf("after the failures: %+v", j)
			}
			if tc.wantPaused {
				if j.State != cron.StatePaused || !strings.Contains(j.PausedReason, "failed to fire the job 5 times in a row") ||
					!strings.Contains(j.PausedReason, "resolving discord:#boom") || !strings.Contains(j.PausedReason, "/cron resume "+boom.ID) {
					t.Errorf("not paused with its reason: %+v", j)
				}
			} else if j.State != cron.StateScheduled || j.PausedReason != "" || !j.FireRetryAt.Equal(due.Add(31*time.Minute+2*time.Second).Add(32*time.Minute-30*time.Second)) {
				t.Errorf("an outage paused it, or its next try is not 32 ticks off: %+v", j)
			}
			if f := e.job(t, fine.ID); f.RepeatCompleted < 4 || f.FireFailures != 0 {
				t.Errorf("the other job: %+v", f)
			}
			// Fixed, and (paused) resumed: it fires, and starts over.
			mu.Lock()
			broken = false
			mu.Unlock()
			if tc.wantPaused {
				r, err := e.store.Resume(ctx, "telegram:99", boom.ID)
				if err != nil {
					t.Fatal(err)
				}
				if r.PausedReason != "" || r.FireFailures != 0 || !r.FireRetryAt.IsZero() {
					t.Errorf("resumed: %+v", r)
				}
				e.clock.Set(r.NextRunAt)
			} else {
				e.clock.Set(j.FireRetryAt)
			}
			tick(t, s)
			if j := e.job(t, boom.ID); j.RepeatCompleted != 1 || j.LastStatus != "ok" || j.FireFailures != 0 || !j.FireRetryAt.IsZero() {
				t.Errorf("fixed: %+v", j)
			}
		})
	}
}

// TestIntervalFromRunEnd: an interval job's next run counts from the end
// of its run, as Hermes's mark_job_run: the scheduler moves it on a
// period from the firing, and the run's end (cron.Store.RunEnded, which
// the router calls for the run's completed turn) a period from the end.
// A redelivered end, or one handled by two router replicas at once,
// applies once; an end that comes after the schedule was changed, or
// after the next run fired (a run whose turn was lost, past
// cron.max_run_duration), does not move the next run; a cron
// expression's next run stays while the run ended before it.
func TestIntervalFromRunEnd(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := newEnv(t)
	lost := "" // the run whose turn is gone; the others go on
	s := e.schedulerWith(t, func(c *scheduler.Config) { c.MaxRunDuration = time.Hour },
		func(_ context.Context, run string) (bool, error) { return run != lost, nil })
	j := e.create(t, cron.NewJob{Prompt: "hourly", Schedule: "every 1h"})
	daily := e.create(t, cron.NewJob{Prompt: "daily", Schedule: "30 9 * * *"})
	due := t0.Add(time.Hour)
	e.clock.Set(due.Add(20 * time.Second))
	if n := tick(t, s); n != 2 {
		t.Fatalf("fired %d", n)
	}
	run := cron.RunID(j.ID, due, false)
	if got := e.job(t, j.ID).NextRunAt; !got.Equal(due.Add(time.Hour + 20*time.Second)) {
		t.Fatalf("next run from the firing %v", got)
	}
	end := due.Add(12 * time.Minute)
	// Two replicas handle the end at once, and it is redelivered later.
	var wg sync.WaitGroup
	applied := make(chan bool, 3)
	for range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ok, err := e.store.RunEnded(ctx, run, end)
			if err != nil {
				t.Error(err)
			}
			applied <- ok
		}()
	}
	wg.Wait()
	if ok, err := e.store.RunEnded(ctx, run, end.Add(time.Minute)); err != nil || ok {
		t.Errorf("a redelivered end applied: %v %v", ok, err)
	}
	close(applied)
	n := 0
	for ok := range applied {
		if ok {
			n++
		}
	}
	if n != 1 {
		t.Errorf("the end applied %d times", n)
	}
	if got := e.job(t, j.ID).NextRunAt; !got.Equal(end.Add(time.Hour)) {
		t.Errorf("next run %v, want an hour after the run ended (%v)", got, end.Add(time.Hour))
	}
	// Not before then; then the next run, which counts from its own end.
	e.clock.Set(end.Add(time.Hour - time.Second))
	if n := tick(t, s); n != 0 {
		t.Errorf("fired %d before the next run", n)
	}
	e.clock.Set(end.Add(time.Hour))
	if n := tick(t, s); n != 1 {
		t.Fatalf("the next run fired %d", n)
	}
	second := cron.RunID(j.ID, end.Add(time.Hour), false)
	// Its turn is lost: cron.max_run_duration after it fired the scheduler
	// finds it gone, and still gone a tick later fires the one after (due
	// at end+2h); its end, should it come, changes nothing.
	lost = second
	e.clock.Set(end.Add(2 * time.Hour))
	if n := tick(t, s); n != 0 {
		t.Fatalf("fired %d at the first look at the lost run", n)
	}
	e.clock.Set(end.Add(2*time.Hour + time.Minute))
	if n := tick(t, s); n != 1 {
		t.Fatalf("the third run fired %d", n)
	}
	if ok, err := e.store.RunEnded(ctx, second, end.Add(2*time.Hour+5*time.Minute)); err != nil || ok {
		t.Errorf("the end of a run after which another fired applied: %v %v", ok, err)
	}
	if got := e.job(t, j.ID).NextRunAt; !got.Equal(end.Add(3*time.Hour + time.Minute)) {
		t.Errorf("next run %v after the overlapping end", got)
	}
	// A schedule changed while the run went on wins over its end.
	third := cron.RunID(j.ID, end.Add(2*time.Hour), false)
	every2h := "every 2h"
	e.clock.Set(end.Add(2*time.Hour + 90*time.Second))
	u, err := e.store.Update(ctx, "telegram:99", j.ID, cron.Update{Schedule: &every2h})
	if err != nil {
		t.Fatal(err)
	}
	// (It ends the run's hold all the same.)
	if ok, err := e.store.RunEnded(ctx, third, end.Add(2*time.Hour+2*time.Minute)); err != nil || !ok {
		t.Errorf("the end of the run in flight did not release it: %v %v", ok, err)
	}
	if got := e.job(t, j.ID); !got.NextRunAt.Equal(u.NextRunAt) || got.RunningRunID != "" {
		t.Errorf("next run %v, in flight %q; want the new schedule's %v, none", got.NextRunAt, got.RunningRunID, u.NextRunAt)
	}
	// A cron expression keeps its times when its run ends before the next.
	before := e.job(t, daily.ID).NextRunAt
	if ok, err := e.store.RunEnded(ctx, e.job(t, daily.ID).LastRunID, due.Add(30*time.Minute)); err != nil || !ok {
		t.Errorf("the end of a cron expression's run did not release it: %v %v", ok, err)
	}
	if got := e.job(t, daily.ID); !got.NextRunAt.Equal(before) || got.RunningRunID != "" {
		t.Errorf("a cron expression's next run moved: %v, was %v (in flight %q)", got.NextRunAt, before, got.RunningRunID)
	}
}

// end is the router's record of a run whose turn ended at end
// (cronOutcome: cron.Store.RunEnded).
func (e *env) end(t *testing.T, runID string, end time.Time) bool {
	t.Helper()
	applied, err := e.store.RunEnded(context.Background(), runID, end)
	if err != nil {
		t.Fatal(err)
	}
	return applied
}

// ticks ticks every scheduler given (replicas) at once, n times each,
// and returns the runs they fired between them.
func ticks(t *testing.T, n int, ss ...*scheduler.Scheduler) int {
	t.Helper()
	var wg sync.WaitGroup
	var mu sync.Mutex
	total := 0
	for i := range n * len(ss) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			fired, err := ss[i%len(ss)].Tick(context.Background())
			if err != nil {
				t.Error(err)
			}
			mu.Lock()
			total += fired
			mu.Unlock()
		}()
	}
	wg.Wait()
	return total
}

// TestRunHoldsItsJob: as Hermes's tick, a job whose run takes longer
// than its period (every minute, a run of three) does not fire again
// while the run goes on, whichever replica ticks, a new one included (a
// router restarted); when the run's turn ends its next run is computed
// from the end (an interval's a period after it, a cron expression's its
// first instant after it: the instants that passed meanwhile are not
// caught up), and it fires then.
func TestRunHoldsItsJob(t *testing.T) {
	t.Parallel()
	due := t0.Add(time.Minute)
	for _, tc := range []struct {
		name, schedule string
		next           func(end time.Time) time.Time
	}{
		{"an interval", "every 1m", func(end time.Time) time.Time { return end.Add(time.Minute) }},
		{"a cron expression", "* * * * *", func(end time.Time) time.Time { return end.Truncate(time.Minute).Add(time.Minute) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			j := e.create(t, cron.NewJob{Prompt: "a long report", Schedule: tc.schedule})
			if !j.NextRunAt.Equal(due) {
				t.Fatalf("first run %v, want %v", j.NextRunAt, due)
			}
			e.clock.Set(due.Add(20 * time.Second))
			if n := tick(t, e.scheduler(t, nil)); n != 1 {
				t.Fatalf("fired %d, want 1", n)
			}
			first := cron.RunID(j.ID, due, false)
			if got := e.job(t, j.ID); got.RunningRunID != first || !got.Running() {
				t.Fatalf("the run in flight: %q until %v", got.RunningRunID, got.RunningUntil)
			}
			for m := 1; m <= 3; m++ {
				e.clock.Set(due.Add(time.Duration(m)*time.Minute + 20*time.Second))
				if n := ticks(t, 2, e.scheduler(t, nil), e.scheduler(t, nil)); n != 0 {
					t.Fatalf("%d min after the run fired, still in flight: fired %d more", m, n)
				}
			}
			if n := e.published(t); n != 1 {
				t.Fatalf("%d runs on the bus while the first went on, want 1", n)
			}
			end := due.Add(3*time.Minute + 5*time.Second)
			if !e.end(t, first, end) {
				t.Fatal("the run's end did not apply")
			}
			if e.end(t, first, end) {
				t.Error("the run's end, redelivered, applied again")
			}
			next := tc.next(end)
			got := e.job(t, j.ID)
			if got.RunningRunID != "" || !got.RunningUntil.IsZero() || !got.NextRunAt.Equal(next) {
				t.Fatalf("after the run ended: in flight %q until %v, next %v; want none, next %v", got.RunningRunID, got.RunningUntil, got.NextRunAt, next)
			}
			s := e.scheduler(t, nil)
			e.clock.Set(next.Add(-time.Second))
			if n := tick(t, s); n != 0 {
				t.Errorf("fired %d before the next run", n)
			}
			e.clock.Set(next)
			if n := tick(t, s); n != 1 {
				t.Fatalf("the next run fired %d, want 1", n)
			}
			if got := e.job(t, j.ID); got.LastRunID != cron.RunID(j.ID, next, false) || got.RunningRunID != got.LastRunID || got.RepeatCompleted != 2 {
				t.Errorf("after the second run: last %q, in flight %q, %d runs", got.LastRunID, got.RunningRunID, got.RepeatCompleted)
			}
			// A run asked for waits for the run in flight, too.
			if _, err := e.store.Trigger(context.Background(), "telegram:99", j.ID); err != nil {
				t.Fatal(err)
			}
			if n := tick(t, s); n != 0 {
				t.Errorf("a run asked for fired %d while a run was in flight", n)
			}
			e.end(t, cron.RunID(j.ID, next, false), next.Add(10*time.Second))
			if n := tick(t, s); n != 1 {
				t.Errorf("the run asked for fired %d once the run in flight ended", n)
			}
		})
	}
}

// TestLostRunReleasedAfterMaxRunDuration: a run whose turn never ends
// (lost for good) holds its job cron.max_run_duration after it fired,
// not for ever: then the job fires again (its missed instants collapsed
// into one run, as after downtime), and the lost run's end, should it
// come after all, changes nothing of the newer run.
func TestLostRunReleasedAfterMaxRunDuration(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	j := e.create(t, cron.NewJob{Prompt: "report", Schedule: "every 1m"})
	bound := func(c *scheduler.Config) { c.MaxRunDuration = 10 * time.Minute }
	due := t0.Add(time.Minute)
	fired := due.Add(20 * time.Second)
	e.clock.Set(fired)
	if n := tick(t, e.scheduler(t, bound)); n != 1 {
		t.Fatalf("fired %d", n)
	}
	lost := cron.RunID(j.ID, due, false)
	overran, _ := telemetrytest.Lookup(t, "switchboard_cron_runs_total", map[string]string{"outcome": "overran"})
	e.clock.Set(fired.Add(10*time.Minute - time.Second))
	if n := ticks(t, 2, e.scheduler(t, bound), e.scheduler(t, bound)); n != 0 {
		t.Fatalf("fired %d within cron.max_run_duration of a run in flight", n)
	}
	e.clock.Set(fired.Add(10 * time.Minute))
	if n := ticks(t, 2, e.scheduler(t, bound), e.scheduler(t, bound)); n != 1 {
		t.Fatalf("fired %d once the lost run's hold lapsed, want 1", n)
	}
	if v := telemetrytest.Value(t, "switchboard_cron_runs_total", map[string]string{"outcome": "overran"}); v < overran+1 {
		t.Errorf("overran runs %v, was %v", v, overran)
	}
	catchUp := cron.RunID(j.ID, fired.Add(time.Minute), false)
	got := e.job(t, j.ID)
	if got.LastRunID != catchUp || got.RunningRunID != catchUp || !got.RunningUntil.Equal(fired.Add(20*time.Minute)) {
		t.Fatalf("after the hold lapsed: last %q, in flight %q until %v; want %q until %v", got.LastRunID, got.RunningRunID, got.RunningUntil,
			catchUp, fired.Add(20*time.Minute))
	}
	if e.end(t, lost, fired.Add(11*time.Minute)) {
		t.Error("the lost run's late end applied")
	}
	if after := e.job(t, j.ID); after.RunningRunID != catchUp || !after.NextRunAt.Equal(got.NextRunAt) {
		t.Errorf("the lost run's late end changed the job: in flight %q, next %v", after.RunningRunID, after.NextRunAt)
	}
	if n := e.published(t); n != 2 {
		t.Errorf("%d runs on the bus, want 2", n)
	}
}

// TestRunOutlastingMaxRunDuration: a run whose turn goes on past
// cron.max_run_duration (a slow model) still holds its job: the
// scheduler, finding the run alive, renews its hold a tick at a time
// instead of firing beside it, on every replica; each instant that came
// due meanwhile is a fire skipped, counted once (as Hermes's tick skips
// a job whose run is in flight, rather than queueing it), and so is a
// run asked for. Once the turn ended the job fires again. A look that
// fails (Redis down) keeps the hold too; a run found gone releases it.
func TestRunOutlastingMaxRunDuration(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	j := e.create(t, cron.NewJob{Prompt: "a slow report", Schedule: "every 1m"})
	var mu sync.Mutex
	answer := map[string]error{} // the runs alive: nil, or the look's error
	looks := 0
	alive := func(_ context.Context, run string) (bool, error) {
		mu.Lock()
		defer mu.Unlock()
		looks++
		err, ok := answer[run]
		return ok, err
	}
	set := func(run string, alive bool, err error) {
		mu.Lock()
		defer mu.Unlock()
		if alive {
			answer[run] = err
		} else {
			delete(answer, run)
		}
	}
	bound := func(c *scheduler.Config) { c.MaxRunDuration = 10 * time.Minute }
	a, b := e.schedulerWith(t, bound, alive), e.schedulerWith(t, bound, alive)
	due := t0.Add(time.Minute)
	fired := due.Add(20 * time.Second)
	e.clock.Set(fired)
	if n := ticks(t, 1, a); n != 1 {
		t.Fatalf("fired %d", n)
	}
	first := cron.RunID(j.ID, due, false)
	set(first, true, nil)
	skipped, _ := telemetrytest.Lookup(t, "switchboard_cron_runs_total", map[string]string{"outcome": "skipped"})
	skippedBy := func(want float64) {
		t.Helper()
		if v := telemetrytest.Value(t, "switchboard_cron_runs_total", map[string]string{"outcome": "skipped"}); v < skipped+want {
			t.Errorf("skipped fires %v, want at least %v more than %v", v, want, skipped)
		}
	}
	// Within the bound the run is not looked at; its instants are skipped.
	e.clock.Set(fired.Add(5 * time.Minute))
	if n := ticks(t, 2, a, b); n != 0 {
		t.Fatalf("fired %d beside the run in flight", n)
	}
	if looks != 0 {
		t.Errorf("%d looks at a run within cron.max_run_duration", looks)
	}
	skippedBy(5)
	// Past it: alive, held, the hold renewed until the next tick.
	for _, after := range []time.Duration{10 * time.Minute, 30 * time.Minute, 3 * time.Hour} {
		e.clock.Set(fired.Add(after))
		if n := ticks(t, 2, a, b); n != 0 {
			t.Fatalf("%v after it fired, the run alive: fired %d beside it", after, n)
		}
		got := e.job(t, j.ID)
		if got.RunningRunID != first || !got.RunningUntil.Equal(fired.Add(after+time.Minute)) || !got.Running() {
			t.Fatalf("%v after it fired: held by %q until %v; want %q until %v", after, got.RunningRunID, got.RunningUntil,
				first, fired.Add(after+time.Minute))
		}
	}
	skippedBy(180)
	// A look that fails holds, as does the run's own hold.
	set(first, true, errors.New("redis: connection refused"))
	if _, err := e.store.Trigger(context.Background(), "telegram:99", j.ID); err != nil {
		t.Fatal(err)
	}
	e.clock.Set(fired.Add(4 * time.Hour))
	if n := ticks(t, 2, a, b); n != 0 {
		t.Fatalf("fired %d when the run could not be looked at", n)
	}
	if n := e.published(t); n != 1 {
		t.Fatalf("%d runs on the bus, want 1", n)
	}
	// The turn ends: the run asked for fires at the next tick.
	set(first, false, nil)
	end := fired.Add(4*time.Hour + 30*time.Second)
	if !e.end(t, first, end) {
		t.Fatal("the run's end did not apply")
	}
	if got := e.job(t, j.ID); got.RunningRunID != "" || !got.NextSkipAt.IsZero() {
		t.Fatalf("after the run ended: held by %q, skips from %v", got.RunningRunID, got.NextSkipAt)
	}
	e.clock.Set(end.Add(time.Second))
	if n := ticks(t, 2, a, b); n != 1 {
		t.Fatalf("fired %d once the run ended, want 1", n)
	}
	second := e.job(t, j.ID).RunningRunID
	if second == "" || second == first {
		t.Fatalf("the next run in flight %q", second)
	}
	// Its worker dies and no end comes: past the bound it shows no sign
	// of life, and a tick later still none (no next attempt took it
	// meanwhile): the job is released and fires again.
	e.clock.Set(end.Add(11 * time.Minute))
	if n := ticks(t, 2, a, b); n != 0 {
		t.Fatalf("fired %d at the first look that found the run without a sign of life, want 0", n)
	}
	if got := e.job(t, j.ID); got.RunningRunID != second || !got.RunGoneAt.Equal(end.Add(11*time.Minute)) {
		t.Fatalf("after the first look: held by %q, gone since %v", got.RunningRunID, got.RunGoneAt)
	}
	// A sign of life meanwhile (the next attempt claimed the lock) resets it.
	set(second, true, nil)
	e.clock.Set(end.Add(12 * time.Minute))
	if n := ticks(t, 2, a, b); n != 0 {
		t.Fatalf("fired %d beside the run's next attempt", n)
	}
	if got := e.job(t, j.ID); got.RunningRunID != second || !got.RunGoneAt.IsZero() {
		t.Fatalf("after a sign of life: held by %q, gone since %v", got.RunningRunID, got.RunGoneAt)
	}
	set(second, false, nil)
	e.clock.Set(end.Add(13 * time.Minute))
	if n := ticks(t, 2, a, b); n != 0 {
		t.Fatalf("fired %d at the first look that found it gone again", n)
	}
	e.clock.Set(end.Add(14 * time.Minute))
	if n := ticks(t, 2, a, b); n != 1 {
		t.Fatalf("fired %d once the run in flight was gone a tick apart, want 1", n)
	}
	if n := e.published(t); n != 3 {
		t.Errorf("%d runs on the bus, want 3", n)
	}
}

// TestRunHeldAcrossReplicas: two replicas' schedulers ticking at once
// fire a due job once; while its run goes on neither fires it (the hold
// is the job's row, not a replica's memory); once it ended, once again.
func TestRunHeldAcrossReplicas(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	j := e.create(t, cron.NewJob{Prompt: "report", Schedule: "every 1m"})
	a, b := e.scheduler(t, nil), e.scheduler(t, nil)
	due := t0.Add(time.Minute)
	e.clock.Set(due)
	if n := ticks(t, 3, a, b); n != 1 {
		t.Fatalf("the due run fired %d times between the replicas, want 1", n)
	}
	for _, m := range []time.Duration{time.Minute, 2 * time.Minute, 5 * time.Minute} {
		e.clock.Set(due.Add(m))
		if n := ticks(t, 3, a, b); n != 0 {
			t.Fatalf("%v after the run fired, in flight: the replicas fired %d more", m, n)
		}
	}
	end := due.Add(5*time.Minute + 30*time.Second)
	e.end(t, cron.RunID(j.ID, due, false), end)
	e.clock.Set(end.Add(time.Minute))
	if n := ticks(t, 3, a, b); n != 1 {
		t.Fatalf("after the run ended the replicas fired %d, want 1", n)
	}
	if n := e.published(t); n != 2 {
		t.Errorf("%d runs on the bus, want 2", n)
	}
}

// ended ends every run in flight now, as the router does when their
// turns complete (cron.Store.RunEnded): the tests whose subject is not
// the hold have their runs end as soon as they fired.
func (e *env) ended(t *testing.T) {
	t.Helper()
	rows, err := e.db.Query(context.Background(), `SELECT running_run_id FROM cron_jobs WHERE running_run_id <> ''`)
	if err != nil {
		t.Fatal(err)
	}
	runs, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range runs {
		e.end(t, r, e.clock.Now())
	}
}

// TestRunEndedBeforeItsRunIsRecorded: the commit that records a run fails
// after its publish, and the run's turn ends before the retry records it:
// the retry holds nothing (there is no end left to come), so the job
// fires again at its next run rather than cron.max_run_duration later.
func TestRunEndedBeforeItsRunIsRecorded(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	j := e.create(t, cron.NewJob{Prompt: "report", Schedule: "every 1m"})
	due := t0.Add(time.Minute)
	e.clock.Set(due)
	crashing := e.scheduler(t, nil)
	scheduler.SetCommit(crashing, func(ctx context.Context, tx pgx.Tx) error {
		_ = tx.Rollback(ctx)
		return errors.New("connection lost")
	})
	if _, err := crashing.Tick(context.Background()); err == nil {
		t.Fatal("the crashing tick succeeded")
	}
	run := cron.RunID(j.ID, due, false)
	if !e.end(t, run, due.Add(20*time.Second)) {
		t.Fatal("the end of the run not yet recorded did not apply")
	}
	e.clock.Set(due.Add(time.Minute))
	s := e.scheduler(t, nil)
	if n := tick(t, s); n != 1 {
		t.Fatalf("the retry published %d", n)
	}
	got := e.job(t, j.ID)
	if got.RunningRunID != "" || got.LastRunID != run || got.LastStatus != "ok" || got.RepeatCompleted != 1 {
		t.Fatalf("after the retry: in flight %q, last %q (%s), %d runs; want none, %q (ok), 1", got.RunningRunID, got.LastRunID, got.LastStatus,
			got.RepeatCompleted, run)
	}
	e.clock.Set(got.NextRunAt)
	if n := tick(t, s); n != 1 {
		t.Errorf("the next run fired %d", n)
	}
	if n := e.published(t); n != 2 {
		t.Errorf("%d runs on the bus, want 2", n)
	}
}

// TestOneShotRetriedNotMissed: a one-shot whose firing was tried on time
// and failed (the bus or the database down: here the commit after its
// publish) is retried under its run id when the scheduler gets through,
// however late: an outage only delays, as for any job. It was retired as
// missed ("missed: due at …", status error) once the retry came more than
// two minutes after its time, though its run had gone out (and its end
// may have been recorded ok meanwhile), or had never been published and
// so was lost while every router was up.
func TestOneShotRetriedNotMissed(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name      string
		published bool // the failed attempt's publish went through
		ended     bool // and its run ended before the retry
	}{
		{"commit failed after the publish", true, false},
		{"commit failed, run ended before the retry", true, true},
		{"publish failed", false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			e := newEnv(t)
			j := e.create(t, cron.NewJob{Prompt: "remind me", Schedule: "30m", Deliver: "telegram:99"})
			due := t0.Add(30 * time.Minute)
			runID := cron.RunID(j.ID, due, false)
			e.clock.Set(due.Add(10 * time.Second))
			cfg := scheduler.DefaultConfig()
			cfg.Timezone = "UTC"
			failing, err := scheduler.New(cfg, scheduler.Deps{DB: e.db, Bus: e.bus, Now: e.clock.Now,
				Resolve: func(ctx context.Context, raw string) (*deliveryv1.Target, error) {
					if !tc.published {
						return nil, errors.New("directory: connection refused") // before the publish
					}
					return resolve(ctx, raw)
				}})
			if err != nil {
				t.Fatal(err)
			}
			scheduler.SetCommit(failing, func(ctx context.Context, tx pgx.Tx) error {
				_ = tx.Rollback(ctx)
				return errors.New("connection lost")
			})
			if _, err := failing.Tick(ctx); err == nil {
				t.Fatal("the failing tick did not fail")
			}
			want := uint64(0)
			if tc.published {
				want = 1
			}
			if n := e.published(t); n != want {
				t.Fatalf("%d messages after the failed attempt", n)
			}
			if tc.ended {
				e.end(t, runID, due.Add(time.Minute))
			}
			// The outage lasts; the scheduler gets through 5 minutes late.
			e.clock.Set(due.Add(5 * time.Minute))
			tick(t, e.scheduler(t, nil))
			got := e.job(t, j.ID)
			if got.State != cron.StateCompleted || got.LastStatus != "ok" || got.LastError != "" || got.LastRunID != runID || got.RepeatCompleted != 1 {
				t.Errorf("state %s, status %q, error %q, last run %q, %d runs; want completed, ok, its run %s",
					got.State, got.LastStatus, got.LastError, got.LastRunID, got.RepeatCompleted, runID)
			}
			if n := e.published(t); n != 1 {
				t.Errorf("%d runs on the bus, want its one run", n)
			}
		})
	}
}

// TestBurstBeyondMaxPerTick: more jobs due at once than cron.max_per_tick
// are all fired, by ticks that follow one another at once while the last
// one used its whole budget, not one batch a tick: a one-shot left for
// the third tick was more than two minutes late and retired as missed
// (Hermes's tick fires every due job), though every router was up.
func TestBurstBeyondMaxPerTick(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	var ids []string
	for i := range 7 {
		ids = append(ids, e.create(t, cron.NewJob{Prompt: fmt.Sprintf("remind me %d", i), Schedule: "30m"}).ID)
	}
	e.clock.Set(t0.Add(30*time.Minute + 5*time.Second))
	// A tick so long that only the first one, at once, comes in the test.
	s := e.scheduler(t, func(c *scheduler.Config) { c.MaxPerTick, c.Tick, c.MaxRunDuration = 2, time.Hour, time.Hour })
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	// The runs are in the stream before their publishes are acknowledged
	// and their jobs written: wait for the jobs, or the stop cancels a
	// publish that the stream already holds.
	recorded := func() bool {
		for _, id := range ids {
			if j := e.job(t, id); j.State != cron.StateCompleted && j.LastStatus == "" {
				return false
			}
		}
		return true
	}
	waitFor(t, "the 7 due runs published and recorded", func() bool { return e.published(t) >= 7 && recorded() })
	cancel()
	if err := <-done; err != nil {
		t.Errorf("Run: %v", err)
	}
	if n := e.published(t); n != 7 {
		t.Fatalf("%d of the 7 due runs published by the first tick", n)
	}
	// Two minutes later nothing is left to be retired as missed.
	e.clock.Set(t0.Add(33 * time.Minute))
	tick(t, s)
	for _, id := range ids {
		if j := e.job(t, id); j.State != cron.StateCompleted || j.LastStatus != "ok" {
			t.Errorf("job %s: %s, %q %q", id, j.State, j.LastStatus, j.LastError)
		}
	}
}

// TestHeldJobWithNothingToSkip: a job held by its run whose schedule was
// changed since its last skipped instant (next_skip_at now before its new
// next run) has nothing to skip yet: a look leaves it unclaimable until
// its next instant, rather than claimable by every tick (and by each of
// the ticks that follow one another at once through a burst) for nothing.
func TestHeldJobWithNothingToSkip(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := newEnv(t)
	j := e.create(t, cron.NewJob{Prompt: "a long report", Schedule: "every 1h"})
	s := e.scheduler(t, func(c *scheduler.Config) { c.MaxRunDuration = 24 * time.Hour })
	e.clock.Set(t0.Add(time.Hour + time.Second))
	if n := tick(t, s); n != 1 {
		t.Fatalf("fired %d", n)
	}
	// Its next instant comes while the run goes: skipped, counted once.
	e.clock.Set(t0.Add(2*time.Hour + 2*time.Second))
	tick(t, s)
	if got := e.job(t, j.ID); !got.Running() || got.NextSkipAt.IsZero() {
		t.Fatalf("not held with a skip: %+v", got)
	}
	e.clock.Set(t0.Add(2*time.Hour + 30*time.Minute))
	sched := "every 3h"
	if _, err := e.store.Update(ctx, "telegram:99", j.ID, cron.Update{Schedule: &sched}); err != nil {
		t.Fatal(err)
	}
	e.clock.Set(t0.Add(3*time.Hour + time.Minute)) // the old skip mark passed; the new next run has not come
	tick(t, s)
	tx, err := e.db.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	if got, ok, err := cron.ClaimDue(ctx, tx, e.clock.Now(), nil); err != nil || ok {
		t.Errorf("after a look, the held job is still claimable: %v %v (next run %v, skip mark %v)", ok, err, got.NextRunAt, got.NextSkipAt)
	}
}

// TestTimezoneChange: a cron expression's next run, computed in the
// zone cron.timezone named before, moves to the new zone when a
// scheduler of the new zone first sees it: a job at a set time of day
// runs at that time in the new zone from its next day on, neither once
// more at the old zone's time (run twice that day) nor missing the new
// zone's time when it comes first (a restart across it runs it late,
// once); an hourly job goes on from its last run on the new zone's
// hours.
func TestTimezoneChange(t *testing.T) {
	t.Parallel()
	day := func(d, h, m int) time.Time { return time.Date(2026, 3, d, h, m, 0, 0, time.UTC) }
	type at struct {
		when  time.Time
		fired int
	}
	cases := []struct {
		name, expr, zone string
		ran              time.Time // its last run in UTC
		ticks            []at      // the new zone's scheduler
	}{
		{"west: 09:00 New York, the day after the run at 09:00 UTC", "0 9 * * *", "America/New_York", day(10, 9, 0),
			[]at{{day(10, 10, 0), 0}, {day(10, 13, 0), 0}, {day(11, 9, 0), 0}, {day(11, 13, 0), 1}, {day(11, 14, 0), 0}, {day(12, 13, 0), 1}}},
		{"east: 09:00 Berlin, before the old 09:00 UTC", "0 9 * * *", "Europe/Berlin", day(10, 9, 0),
			[]at{{day(10, 12, 0), 0}, {day(11, 8, 0), 1}, {day(11, 9, 0), 0}, {day(12, 8, 0), 1}}},
		{"east, restarted after the new zone's time: late, once", "0 9 * * *", "Europe/Berlin", day(10, 9, 0),
			[]at{{day(11, 8, 30), 1}, {day(11, 9, 0), 0}, {day(11, 10, 0), 0}, {day(12, 8, 0), 1}}},
		{"far west: 09:00 Honolulu the same UTC day, its 10th not skipped", "0 9 * * *", "Pacific/Honolulu", day(10, 9, 0),
			[]at{{day(10, 10, 0), 0}, {day(10, 19, 0), 1}, {day(11, 9, 0), 0}, {day(11, 19, 0), 1}}},
		{"far east: 23:00 Kiritimati, not twice on its 11th", "0 23 * * *", "Pacific/Kiritimati", day(10, 23, 0),
			[]at{{day(10, 23, 30), 0}, {day(11, 9, 0), 0}, {day(11, 23, 0), 0}, {day(12, 9, 0), 1}}},
		{"hourly, to a half-hour zone: on from the last run", "0 * * * *", "Asia/Kolkata", day(10, 9, 0),
			[]at{{day(10, 9, 10), 0}, {day(10, 9, 30), 1}, {day(10, 10, 0), 0}, {day(10, 10, 30), 1}}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			e.clock.Set(tc.ran.Add(-30 * time.Minute))
			j := e.create(t, cron.NewJob{Prompt: "p", Schedule: tc.expr})
			old := e.scheduler(t, nil) // UTC
			e.clock.Set(tc.ran)
			if n := tick(t, old); n != 1 {
				t.Fatalf("the UTC scheduler fired %d at %v", n, tc.ran)
			}
			s := e.scheduler(t, func(c *scheduler.Config) { c.Timezone = tc.zone })
			store := cron.New(e.db, mustZone(t, tc.zone), e.clock.Now) // the new zone's router
			for _, a := range tc.ticks {
				e.clock.Set(a.when)
				if n := tick(t, s); n != a.fired {
					t.Errorf("at %v (%s): fired %d, want %d (next run %v)", a.when, a.when.In(mustZone(t, tc.zone)).Format("15:04 MST"),
						n, a.fired, e.job(t, j.ID).NextRunAt)
				}
				if run := e.job(t, j.ID).RunningRunID; run != "" {
					e.clock.Set(a.when.Add(time.Minute))
					if _, err := store.RunEnded(context.Background(), run, a.when.Add(time.Minute)); err != nil {
						t.Fatal(err)
					}
				}
			}
			if got := e.job(t, j.ID); got.Zone != tc.zone {
				t.Errorf("zone %q, want %q", got.Zone, tc.zone)
			}
		})
	}
}

// Routers with different cron.timezone at once (a rolling change of it)
// moved each cron expression's next run to their own zone in turn, every
// tick. A router moves only jobs last written before it started: the one
// started later, with the newer zone, moves the job once, and the older
// one leaves it (and fires it when it is due, as any replica does).
func TestTimezoneChangeDuringARollingChange(t *testing.T) {
	t.Parallel()
	day := func(d, h, m int) time.Time { return time.Date(2026, 3, d, h, m, 0, 0, time.UTC) }
	e := newEnv(t)
	e.clock.Set(day(10, 7, 0))
	j := e.create(t, cron.NewJob{Prompt: "p", Schedule: "0 9 * * *"}) // 09:00 UTC
	old := e.scheduler(t, nil)                                        // UTC, started first
	e.clock.Set(day(10, 8, 0))
	newer := e.scheduler(t, func(c *scheduler.Config) { c.Timezone = "America/New_York" })
	nyNine := day(10, 13, 0) // 09:00 EDT
	for i, s := range []*scheduler.Scheduler{newer, old, newer, old} {
		e.clock.Set(day(10, 8, 1+i))
		if n := tick(t, s); n != 0 {
			t.Fatalf("tick %d fired %d", i, n)
		}
		if got := e.job(t, j.ID); got.Zone != "America/New_York" || !got.NextRunAt.Equal(nyNine) {
			t.Fatalf("after tick %d: next run %v in %q, want %v in America/New_York", i, got.NextRunAt, got.Zone, nyNine)
		}
	}
	e.clock.Set(nyNine)
	if n := tick(t, old); n != 1 {
		t.Fatalf("the UTC router fired %d at New York's 09:00, want 1", n)
	}
}

// A router of a new cron.timezone moves a job only when its zone was set
// before the router started, but it read that from updated_at, which a
// write of the last run's status alone moves on too (the run's failure,
// or its answer's delivery failure, recorded by any router after the new
// one started): the job ran once more at the old zone's time. Such a
// write leaves the zone's time as it was, and the job moves.
func TestTimezoneChangeAfterAStatusWrite(t *testing.T) {
	t.Parallel()
	day := func(d, h, m int) time.Time { return time.Date(2026, 3, d, h, m, 0, 0, time.UTC) }
	for _, tc := range []struct {
		name  string
		write func(ctx context.Context, e *env, run string) (bool, error)
	}{
		{"the run's failure", func(ctx context.Context, e *env, run string) (bool, error) {
			return e.store.RecordOutcome(ctx, run, "error", "the model failed")
		}},
		{"its answer's delivery failure", func(ctx context.Context, e *env, run string) (bool, error) {
			return cron.RecordDeliveryFailure(ctx, e.db, run, "", "dead-lettered")
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			e := newEnv(t)
			e.clock.Set(day(10, 8, 30))
			j := e.create(t, cron.NewJob{Prompt: "p", Schedule: "0 9 * * *"}) // 09:00 UTC
			e.clock.Set(day(10, 9, 0))
			if n := tick(t, e.scheduler(t, nil)); n != 1 {
				t.Fatalf("the UTC scheduler fired %d", n)
			}
			run := e.job(t, j.ID).RunningRunID
			e.clock.Set(day(10, 9, 2))
			if !e.end(t, run, day(10, 9, 2)) {
				t.Fatal("the run's end did not apply")
			}
			e.clock.Set(day(10, 9, 5))
			s := e.scheduler(t, func(c *scheduler.Config) { c.Timezone = "America/New_York" })
			if applied, err := tc.write(ctx, e, run); err != nil || !applied {
				t.Fatalf("status write: applied %v, %v", applied, err)
			}
			e.clock.Set(day(10, 9, 10))
			tick(t, s)
			nyNine := day(11, 13, 0) // 09:00 EDT of the 11th
			if got := e.job(t, j.ID); got.Zone != "America/New_York" || !got.NextRunAt.Equal(nyNine) {
				t.Fatalf("next run %v in %q, want %v in America/New_York", got.NextRunAt, got.Zone, nyNine)
			}
		})
	}
}

func mustZone(t *testing.T, name string) *time.Location {
	t.Helper()
	loc, err := time.LoadLocation(name)
	if err != nil {
		t.Fatal(err)
	}
	return loc
}

// TestRetryAfterTheDedupeWindow: the commit that records a run fails
// after its publish and the retry comes after the bus's dedupe window (a
// tick or more later: a minute, where the window is 30 s by default).
// A run whose end is recorded meanwhile (its job's last run) is known to
// have run: the retry records it without a second message. One that
// still goes is published again, for its session's record to stop at
// the router (services/router TestCronRunRepublishedAfterRedisLoss).
func TestRetryAfterTheDedupeWindow(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name     string
		ended    bool
		messages uint64
	}{
		{"the run ended before the retry", true, 1},
		{"the run still goes", false, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			const window = time.Second
			e := newEnv(t)
			e.bus = bustest.NewWith(t, bustest.SystemURL(), bus.Topology{Prefix: bustest.Prefix(), Storage: jetstream.MemoryStorage, DedupeWindow: window})
			j := e.create(t, cron.NewJob{Prompt: "report", Schedule: "every 1h"})
			due := t0.Add(time.Hour)
			e.clock.Set(due)
			crashing := e.scheduler(t, nil)
			scheduler.SetCommit(crashing, func(ctx context.Context, tx pgx.Tx) error {
				_ = tx.Rollback(ctx)
				return errors.New("connection lost")
			})
			if _, err := crashing.Tick(context.Background()); err == nil {
				t.Fatal("the crashing tick succeeded")
			}
			run := cron.RunID(j.ID, due, false)
			if tc.ended && !e.end(t, run, due.Add(20*time.Second)) {
				t.Fatal("the end of the run not yet recorded did not apply")
			}
			dedupeLapsed(t, e.bus)
			e.clock.Set(due.Add(time.Minute))
			if n := tick(t, e.scheduler(t, nil)); n != 1 {
				t.Fatalf("the retry fired %d", n)
			}
			if n := e.published(t); n != tc.messages {
				t.Errorf("%d messages on the bus, want %d", n, tc.messages)
			}
			got := e.job(t, j.ID)
			if got.LastRunID != run || got.RepeatCompleted != 1 || got.LastStatus != "ok" || got.Running() == tc.ended {
				t.Errorf("after the retry: last run %q (%s), %d runs, in flight %q", got.LastRunID, got.LastStatus, got.RepeatCompleted, got.RunningRunID)
			}
		})
	}
}

// dedupeLapsed waits until the inbound stream of b has forgotten every
// message id published to it so far. The server forgets them by a timer,
// a dedupe window after it stored the first of them, or later when it is
// slow to run the timer (under load): a sleep of the window and a margin
// assumed it on time. A probe id, published now and then again until the
// stream takes it as new, tells, since the server forgets ids in the
// order it stored them. The probe's two messages are deleted again.
func dedupeLapsed(t *testing.T, b *bus.Bus) {
	t.Helper()
	ctx := context.Background()
	js := b.JetStream()
	st, err := js.Stream(ctx, b.Topology().Stream(bus.StreamInbound))
	if err != nil {
		t.Fatal(err)
	}
	subject, probe := b.Topology().InboundPartitionSubject(0), "dedupe-probe"
	first, err := js.Publish(ctx, subject, nil, jetstream.WithMsgID(probe))
	if err != nil {
		t.Fatal(err)
	}
	var again *jetstream.PubAck
	waitFor(t, "the inbound stream to forget its message ids", func() bool {
		again, err = js.Publish(ctx, subject, nil, jetstream.WithMsgID(probe))
		if err != nil {
			t.Fatal(err)
		}
		return !again.Duplicate
	})
	for _, seq := range []uint64{first.Sequence, again.Sequence} {
		if err := st.DeleteMsg(ctx, seq); err != nil {
			t.Fatal(err)
		}
	}
}

// TestCommitErrorAfterItsSave: a commit that returns an error may have
// gone through (the context ended while COMMIT's answer was on its way,
// as on a router's stop, or the connection broke after it): a run saved
// so is the job's run, not a failure to fire it (its list showed "the
// scheduler could not queue its run" and the job waited a retry's
// delay); a commit that did fail is recorded as ever.
func TestCommitErrorAfterItsSave(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		saved bool
	}{
		{"committed, its answer lost", true},
		{"not committed", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			j := e.create(t, cron.NewJob{Prompt: "report", Schedule: "every 1h"})
			due := t0.Add(time.Hour)
			e.clock.Set(due)
			s := e.scheduler(t, nil)
			scheduler.SetCommit(s, func(ctx context.Context, tx pgx.Tx) error {
				if tc.saved {
					if err := tx.Commit(ctx); err != nil {
						return err
					}
				} else {
					_ = tx.Rollback(ctx)
				}
				return errors.New("read COMMIT's answer: connection reset by peer")
			})
			n, err := s.Tick(context.Background())
			got := e.job(t, j.ID)
			run := cron.RunID(j.ID, due, false)
			if tc.saved {
				if err != nil || n != 1 || got.FireFailures != 0 || !got.FireRetryAt.IsZero() || got.LastStatus != "ok" || got.LastError != "" ||
					got.LastRunID != run || got.RepeatCompleted != 1 {
					t.Errorf("fired %d, %v; job %d failures (retry %v), %q %q, last run %q, %d runs; want 1 run saved ok",
						n, err, got.FireFailures, got.FireRetryAt, got.LastStatus, got.LastError, got.LastRunID, got.RepeatCompleted)
				}
				return
			}
			if err == nil || n != 0 || got.FireFailures != 1 || got.LastStatus != "error" || got.RepeatCompleted != 0 || !got.NextRunAt.Equal(due) {
				t.Errorf("fired %d, %v; job %d failures, %q, %d runs, next %v; want the failure recorded, the run still due",
					n, err, got.FireFailures, got.LastStatus, got.RepeatCompleted, got.NextRunAt)
			}
		})
	}
}

// TestAStopWhileFiringStillQueuesTheRun: the scheduler's stop (the
// router's: its context ends) that comes while a claimed job is being
// fired does not cancel the run's publish, which the stream may already
// hold: the run goes out and is saved, and the job holds it. Before, the
// publish returned the context's error (whether the stream held the run
// or not), the job said "the scheduler could not queue its run" and was
// fired again later, its run left to the bus's and the router's dedupe.
func TestAStopWhileFiringStillQueuesTheRun(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	j := e.create(t, cron.NewJob{Prompt: "the report", Schedule: "every 1h", Deliver: "telegram:42"})
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	cfg := scheduler.DefaultConfig()
	cfg.Timezone = "UTC"
	s, err := scheduler.New(cfg, scheduler.Deps{DB: e.db, Bus: e.bus, Now: e.clock.Now,
		Resolve: func(_ context.Context, raw string) (*deliveryv1.Target, error) {
			stop() // the stop comes as the job is fired, before its publish
			return resolve(context.Background(), raw)
		}})
	if err != nil {
		t.Fatal(err)
	}
	due := t0.Add(time.Hour)
	e.clock.Set(due)
	_, _ = s.Tick(ctx) // stopped: what comes after the fired job may fail
	if n := e.published(t); n != 1 {
		t.Fatalf("%d runs on the bus, want the fired one", n)
	}
	runID := cron.RunID(j.ID, due, false)
	got := e.job(t, j.ID)
	if got.LastStatus != "ok" || got.LastError != "" || got.RunningRunID != runID || !got.NextRunAt.After(due) {
		t.Errorf("status %q, error %q, running %q, next %s; want ok, held by %s, next after %s",
			got.LastStatus, got.LastError, got.RunningRunID, got.NextRunAt, runID, due)
	}
}
