// Package scheduler fires due cron jobs (pkg/cron), as Hermes's gateway
// ticker does every 60 seconds, from any number of replicas at once.
//
// Each tick claims due jobs one at a time with SELECT … FOR UPDATE SKIP
// LOCKED, publishes the run as an internal inbound message, and advances
// the job (next run, repeat count, state) in the same transaction. The
// message's id is made of the job and the instant it was due, so a crash
// (or a failed commit) between the publish and the commit re-publishes
// the same id on the next tick, past the bus's dedupe window (30 s by
// default, a tick being a minute): the router's dedupe record (Redis)
// and, should Redis have lost it, the run's session, which records the
// event as its last started (Postgres), make it one run; a run whose end
// the job recorded meanwhile (its last run) is not published again.
//
// A published run holds its job until the run's turn ends (as Hermes's
// tick, which skips a job whose run is still going): its running_run_id
// stands until the router handles the turn's TurnCompleted
// (cron.Store.RunEnded), and each of the job's instants that comes due
// meanwhile is a fire skipped, logged and counted, not made later. The
// hold is not bounded by a time but by the run's liveness:
// cron.max_run_duration after firing, and every tick after that, the
// scheduler looks whether the run still goes (Deps.RunAlive: its
// session's lock is held, by the router's grant or by the worker that
// renews it; a dead worker's lapses within router.lock_ttl) and renews
// the hold, or releases it when the run is gone without an end (lost:
// no sign of life at two looks a tick apart), so that the job fires
// again.
package scheduler

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/switchboard-chat/switchboard/pkg/bus"
	"github.com/switchboard-chat/switchboard/pkg/config"
	"github.com/switchboard-chat/switchboard/pkg/cron"
	"github.com/switchboard-chat/switchboard/pkg/cron/schedule"
	deliveryv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/delivery/v1"
	eventsv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/events/v1"
	"github.com/switchboard-chat/switchboard/pkg/outbox"
	"github.com/switchboard-chat/switchboard/pkg/panics"
	"github.com/switchboard-chat/switchboard/pkg/retention"
	"github.com/switchboard-chat/switchboard/pkg/sessionkey"
)

// Platform is the platform of cron runs' messages: each run is the
// session agent:main:cron:dm:<job id>_<due instant>, a fresh one.
const Platform = "cron"

// Account is the account of cron runs' messages.
const Account = "default"

// fireTimeout bounds one job's transaction: claim, publish, commit.
const fireTimeout = 30 * time.Second

// saveTimeout bounds the save of a run handled (published, blocked or
// skipped), which goes on when the scheduler stops meanwhile.
const saveTimeout = 10 * time.Second

// publishTimeout bounds a run's publish, which the scheduler's stop does
// not cancel (run): the stream may hold it already.
const publishTimeout = 10 * time.Second

// Status values a run leaves in last_status (Hermes's literals).
const (
	StatusOK            = "ok"
	StatusError         = "error"
	StatusBlockedConfig = "blocked_config"
)

var runs = promauto.NewCounterVec(prometheus.CounterOpts{
	Name: "switchboard_cron_runs_total",
	Help: "Cron job runs by outcome: published (scheduled, late or catch_up), manual, missed (a one-shot past its grace, or a catch-up skipped by cron.catch_up_missed=false), blocked (no deliver target), failed (firing failed: a panic, or publish or commit failed; retried under the same id after a delay that doubles with each failure in a row), paused (a panic that was the job's cron.pause_after_fire_failures-th failure in a row paused it), overran (a job's run in flight was found gone, cron.max_run_duration or more after it fired, without its turn's end: its hold is released and the job fires again), skipped (an instant of the job came due while its previous run was still going: that fire is not made, as Hermes's tick skips a job whose run is in flight).",
}, []string{"outcome"})

// Config is the `cron` section.
type Config struct {
	// Enabled runs the scheduler in `switchboard router` and `dev`.
	Enabled bool `koanf:"enabled"`
	// Tick is how often due jobs are looked for (Hermes: 60s).
	Tick time.Duration `koanf:"tick"`
	// CatchUpMissed: a recurring job whose run was missed beyond its
	// grace (downtime) runs once when the scheduler is back (Hermes's
	// default); false skips to its next run instead.
	CatchUpMissed bool `koanf:"catch_up_missed"`
	// Timezone of cron expressions and timestamps without an offset (an
	// IANA name; empty: the process's local zone).
	Timezone string `koanf:"timezone"`
	// MaxPerTick bounds the runs one replica fires per tick.
	MaxPerTick int `koanf:"max_per_tick"`
	// SessionRetention: each run is a fresh session (a job every minute
	// makes 1,440 a day); the router's retention sweep (pkg/retention)
	// deletes them once idle this long. 0 gives them sessions.retention.
	SessionRetention retention.Age `koanf:"session_retention"`
	// CompletedRetention: a completed job (a one-shot that ran or was
	// missed, a job whose repeat count ran out) stays listed (all /
	// include_disabled) this long after its last run, then is deleted
	// (Hermes's cron.completed_retention_days, 7 days). 0 keeps them.
	CompletedRetention retention.Age `koanf:"completed_retention"`
	// PauseAfterFireFailures: a job whose firing fails is tried again
	// after a delay that doubles with each failure in a row (a tick, then
	// 2, 4, … ticks, at most an hour); a panic that is its
	// PauseAfterFireFailures-th failure in a row pauses it, with the
	// reason /cron list shows. 0 never pauses.
	PauseAfterFireFailures int `koanf:"pause_after_fire_failures"`
	// MaxRunDuration: as Hermes's tick, a job whose run has not ended
	// does not fire again (a run of 3 minutes every minute runs back to
	// back, not three at once; the fires due meanwhile are skipped); the
	// run's end (its TurnCompleted, cron.Store.RunEnded) releases it.
	// This long after a run fired, and every tick after that, the
	// scheduler looks whether the run still goes (Deps.RunAlive): a run
	// whose turn is alive keeps holding its job, however long it takes;
	// one that is gone without an end (lost for good) releases it, and
	// the job fires again. Set it above the time a run's message may
	// take to reach a worker (a run not yet started shows no sign of
	// life).
	MaxRunDuration time.Duration `koanf:"max_run_duration"`
}

// DefaultConfig returns the defaults.
func DefaultConfig() Config {
	return Config{Enabled: true, Tick: time.Minute, CatchUpMissed: true, MaxPerTick: 100, SessionRetention: retention.Age(7 * 24 * time.Hour), CompletedRetention: retention.Age(7 * 24 * time.Hour),
		PauseAfterFireFailures: 5, MaxRunDuration: 2 * time.Hour}
}

// Location is the configured time zone.
func (c Config) Location() (*time.Location, error) {
	if c.Timezone == "" {
		return time.Local, nil
	}
	loc, err := time.LoadLocation(c.Timezone)
	if err != nil {
		return nil, config.Invalid("cron.timezone", c.Timezone, "an IANA time zone such as Europe/Berlin")
	}
	return loc, nil
}

// Validate checks the configuration.
func (c Config) Validate() error {
	if c.Tick < time.Second {
		return config.Invalid("cron.tick", c.Tick.String(), "at least 1s")
	}
	if c.MaxPerTick < 1 {
		return config.Invalid("cron.max_per_tick", fmt.Sprint(c.MaxPerTick), "at least 1")
	}
	if c.SessionRetention < 0 {
		return config.Invalid("cron.session_retention", c.SessionRetention.String(), "0 or a period such as 7d")
	}
	if c.PauseAfterFireFailures < 0 {
		return config.Invalid("cron.pause_after_fire_failures", fmt.Sprint(c.PauseAfterFireFailures), "0 (never) or a count of failures")
	}
	if c.MaxRunDuration < c.Tick {
		return config.Invalid("cron.max_run_duration", c.MaxRunDuration.String(), "a duration of at least cron.tick ("+c.Tick.String()+")")
	}
	if c.CompletedRetention < 0 {
		return config.Invalid("cron.completed_retention", c.CompletedRetention.String(), "0 or a period such as 7d")
	}
	_, err := c.Location()
	return err
}

// Deps are the scheduler's clients.
type Deps struct {
	Log *slog.Logger
	DB  *pgxpool.Pool
	Bus *bus.Bus
	// Resolve turns a deliver target other than origin and local into a
	// chat (outbox.Store.ResolveTarget with the configured homes); its
	// errors wrapping outbox.ErrBadTarget block the run.
	Resolve func(ctx context.Context, raw string) (*deliveryv1.Target, error)
	// RunAlive reports whether the run runID (cron.RunID) still goes: its
	// session's lock is held (a router's grant, or a worker's claim that
	// the worker renews) or messages wait in its session's queue. Nil:
	// a run whose hold is due for a look is taken as gone.
	RunAlive func(ctx context.Context, runID string) (bool, error)
	// Paused reports whether the global emergency stop (/pause) holds
	// new work: a tick then fires nothing, as Hermes's skips its due-job
	// scan. Nil: never paused.
	Paused func(ctx context.Context) (bool, error)
	Now    func() time.Time
}

// Scheduler fires due cron jobs.
type Scheduler struct {
	cfg     Config
	log     *slog.Logger
	db      *pgxpool.Pool
	bus     *bus.Bus
	resolve func(ctx context.Context, raw string) (*deliveryv1.Target, error)
	alive   func(ctx context.Context, runID string) (bool, error)
	paused  func(ctx context.Context) (bool, error)
	// held: the last tick was paused (logged once per pause).
	held bool
	// more: the last tick used its whole cron.max_per_tick budget, so
	// jobs may still be due; Run ticks again at once.
	more atomic.Bool
	now  func() time.Time
	loc  *time.Location
	// zone names loc (cron.ZoneName), as the jobs' next runs record it.
	zone string
	// started is when the scheduler was made: it moves only jobs whose
	// zone was set before (rezone).
	started time.Time
	// commit ends a run's transaction (tests make it fail).
	commit func(ctx context.Context, tx pgx.Tx) error
}

// New builds a scheduler.
func New(cfg Config, deps Deps) (*Scheduler, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if deps.DB == nil || deps.Bus == nil || deps.Resolve == nil {
		return nil, errors.New("cron scheduler: DB, Bus and Resolve are required")
	}
	if deps.Log == nil {
		deps.Log = slog.Default()
	}
	if deps.Now == nil {
		deps.Now = time.Now
	}
	loc, _ := cfg.Location()
	return &Scheduler{cfg: cfg, log: deps.Log.With("component", "cron"), db: deps.DB, bus: deps.Bus,
		resolve: deps.Resolve, alive: deps.RunAlive, paused: deps.Paused, now: deps.Now, loc: loc, zone: cron.ZoneName(loc), started: deps.Now(),
		commit: func(ctx context.Context, tx pgx.Tx) error { return tx.Commit(ctx) }}, nil
}

// maxBackToBack bounds the ticks Run makes at once, one after another,
// while each used its whole budget.
const maxBackToBack = 1000

// Run ticks until ctx ends; the first tick is at once. A tick that used
// its whole cron.max_per_tick budget is followed at once by another, so
// that a burst of due jobs is fired in batches now, not one batch a tick
// (a one-shot left for the third tick is past its grace: missed).
func (s *Scheduler) Run(ctx context.Context) error {
	s.log.Info("cron scheduler running", "tick", s.cfg.Tick, "timezone", s.loc.String())
	t := time.NewTicker(s.cfg.Tick)
	defer t.Stop()
	for n := 0; ; n++ {
		if _, err := s.Tick(ctx); err != nil && ctx.Err() == nil {
			s.log.Warn("cron tick failed", "err", err)
		}
		if s.more.Load() && n < maxBackToBack && ctx.Err() == nil {
			continue
		}
		n = -1
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// Tick fires the jobs due now and returns how many runs it published,
// then deletes completed jobs past cron.completed_retention. A job whose
// run fails (a panic, publish, commit) is left due, skipped for the rest
// of this tick and tried again after a delay (fireFailed); the first such
// error is returned.
func (s *Scheduler) Tick(ctx context.Context) (int, error) {
	if s.paused != nil {
		paused, err := s.paused(ctx)
		if err != nil {
			return 0, fmt.Errorf("read the emergency stop: %w", err)
		}
		if paused != s.held {
			s.held = paused
			if paused {
				s.log.Warn("cron dispatch paused by the global emergency stop (/pause); /pause off resumes it")
			} else {
				s.log.Info("cron dispatch resumed: the global emergency stop was lifted")
			}
		}
		if paused {
			s.more.Store(false)
			return 0, s.sweep(ctx)
		}
	}
	fired, more, err := s.fire(ctx)
	s.more.Store(more)
	if serr := s.sweep(ctx); err == nil {
		err = serr
	}
	return fired, err
}

// sweepBatch bounds the completed jobs one tick deletes.
const sweepBatch = 1000

// sweep deletes completed jobs whose last run is older than
// cron.completed_retention. Replicas may sweep at once: each row goes once.
func (s *Scheduler) sweep(ctx context.Context) error {
	if s.cfg.CompletedRetention <= 0 || ctx.Err() != nil {
		return nil
	}
	n, err := cron.DeleteCompleted(ctx, s.db, s.now().Add(-time.Duration(s.cfg.CompletedRetention)), sweepBatch)
	if err != nil {
		return err
	}
	if n > 0 {
		s.log.Info("completed cron jobs deleted", "count", n, "retention", s.cfg.CompletedRetention.String())
	}
	return nil
}

// fire publishes the runs due now; more: it stopped at
// cron.max_per_tick, and jobs may still be due.
func (s *Scheduler) fire(ctx context.Context) (fired int, more bool, err error) {
	var skip []string
	var first error
	for range s.cfg.MaxPerTick {
		id, published, ok, err := s.fireOne(ctx, skip)
		if err != nil {
			runs.WithLabelValues("failed").Inc()
			if id != "" {
				s.fireFailed(ctx, id, err)
			}
			if first == nil {
				first = err
			}
			if id == "" || ctx.Err() != nil {
				return fired, false, first
			}
			skip = append(skip, id)
			continue
		}
		if !ok {
			return fired, false, first
		}
		// One look at a job a tick: a job held by its run may be
		// claimed again at once.
		skip = append(skip, id)
		if published {
			fired++
		}
	}
	return fired, true, first
}

// fireOne claims one due job and handles it in a transaction of its own.
func (s *Scheduler) fireOne(ctx context.Context, skip []string) (id string, published, ok bool, err error) {
	// A bus or database that stops answering must not hold the row's lock
	// (and the tick) for good.
	ctx, cancel := context.WithTimeout(ctx, fireTimeout)
	defer cancel()
	tx, err := s.db.Begin(ctx)
	if err != nil {
		return "", false, false, fmt.Errorf("begin cron transaction: %w", err)
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	now := s.now()
	j, ok, err := cron.ClaimDueIn(ctx, tx, now, s.zone, s.started, skip)
	if err != nil || !ok {
		return "", false, false, err
	}
	// A panic while firing the job (resolving its target, publishing,
	// saving) must not end the scheduler, nor the router it runs in: it
	// is logged with the job's id and stack, counted
	// (switchboard_panics_total{component="cron_fire"}), and handled as a
	// failed run: the transaction is rolled back, so the job stays due and
	// is retried under the same run id (skipped for the rest of this tick),
	// after a delay that grows with its failures in a row, and its last
	// status says so (fireFailed).
	err = panics.Recover(s.log, "cron_fire", func() error {
		var runID string
		var err error
		if published, runID, err = s.handle(ctx, &j, now); err != nil {
			return err
		}
		// The run may be out: its record is saved even when the
		// scheduler stops meanwhile (the router's stop ends ctx), else
		// it is rolled back and recorded as a failure to fire, and the
		// job shows an error and publishes its run again after a delay.
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), saveTimeout)
		defer cancel()
		if err := cron.SaveRun(sctx, tx, j, runID, now); err != nil {
			return err
		}
		if err := s.commit(sctx, tx); err != nil {
			if s.saved(sctx, j, runID, now) {
				// The commit went through and its answer was lost (the
				// context ended, as on a router's stop, or the connection
				// broke after COMMIT): the run is saved, and recording a
				// failure on it would show it failed and delay the job.
				s.log.Warn("cron run's commit reported an error, but the run is saved", "job", j.ID, "run", runID, "err", err)
				return nil
			}
			return fmt.Errorf("commit cron run of %s: %w", j.ID, err)
		}
		return nil
	}, "job", j.ID)
	if err != nil {
		// Release the row before fire writes on it from another connection.
		_ = tx.Rollback(context.WithoutCancel(ctx))
	}
	if err != nil {
		return j.ID, false, true, err
	}
	return j.ID, published, true, nil
}

// saved reports whether the row of j holds what SaveRun wrote for the
// tick at now (its run runID, next run, repeat count and state): a
// commit that returned an error may have gone through. False when the
// database cannot tell (the failure is then recorded, as before).
func (s *Scheduler) saved(ctx context.Context, j cron.Job, runID string, now time.Time) bool {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	var ok bool
	err := s.db.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM cron_jobs WHERE id = $1 AND updated_at = $2
  AND ($3 = '' OR last_run_id = $3) AND next_run_at IS NOT DISTINCT FROM $4 AND repeat_completed = $5 AND state = $6)`,
		j.ID, now, runID, nullTime(j.NextRunAt), j.RepeatCompleted, j.State).Scan(&ok)
	return err == nil && ok
}

func nullTime(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	return &t
}

// maxFireBackoff bounds the delay before a job whose firing failed is
// tried again.
const maxFireBackoff = time.Hour

// fireBackoff is the delay before the next try of a job whose firing
// failed n times in a row: half a tick short of 1, 2, 4, … ticks (so
// the first failure is retried on the next tick, whatever the ticker's
// jitter), at most maxFireBackoff.
func (s *Scheduler) fireBackoff(n int) time.Duration {
	d := s.cfg.Tick
	for i := 1; i < n && d < maxFireBackoff; i++ {
		d *= 2
	}
	return min(d-s.cfg.Tick/2, maxFireBackoff)
}

// fireFailed records a failure to fire job id (rolled back: the run is
// still due): the job is tried again after fireBackoff, and a panic that
// is its cron.pause_after_fire_failures-th failure in a row pauses it.
// Hermes has no such failure (its tick advances a recurring job before
// running it and a run that raises is a failed run); here a run is
// published under an id of its own so that a crash or a failed commit
// repeats it rather than losing it, and a job whose firing fails every
// time would otherwise be retried, and logged, every tick for good. The
// bus or the database failing (an error, not a panic) only delays: an
// outage must not pause every job of the cluster.
func (s *Scheduler) fireFailed(ctx context.Context, id string, ferr error) {
	panicked := errors.Is(ferr, panics.ErrPanicked)
	now := s.now()
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	n, out, err := cron.RecordFireFailure(rctx, s.db, id, func(n int) cron.FireFailureOutcome {
		o := cron.FireFailureOutcome{RetryAt: now.Add(s.fireBackoff(n))}
		what := "the scheduler failed while firing it"
		if !panicked {
			what = "the scheduler could not queue its run"
		}
		if panicked && s.cfg.PauseAfterFireFailures > 0 && n >= s.cfg.PauseAfterFireFailures {
			o.Pause = true
			o.PausedReason = fmt.Sprintf("paused by the scheduler: it failed to fire the job %d times in a row (%s); /cron resume %s schedules it again",
				n, ferr.Error(), id)
			o.LastError = fmt.Sprintf("%s (%s); paused after %d failures in a row", what, ferr.Error(), n)
			return o
		}
		o.LastError = fmt.Sprintf("%s (%s); %d in a row, tried again from %s", what, ferr.Error(), n,
			o.RetryAt.In(s.loc).Format("2006-01-02 15:04:05 MST"))
		return o
	})
	switch {
	case errors.Is(err, cron.ErrNotFound):
		return
	case err != nil:
		s.log.Error("record a cron job's failed firing", "job", id, "err", err)
		s.log.Warn("cron run failed; retried next tick", "job", id, "err", ferr)
	case out.Pause:
		runs.WithLabelValues("paused").Inc()
		s.log.Error("cron job paused: its firing failed too often in a row", "job", id, "failures", n, "err", ferr)
	default:
		s.log.Warn("cron run failed; retried later", "job", id, "failures", n, "retry_at", out.RetryAt, "err", ferr)
	}
}

// handle decides what a due job does now and publishes its run; j is
// changed as the run leaves it, for SaveRun, with the id of the run it
// fired or blocked ("" for none).
func (s *Scheduler) handle(ctx context.Context, j *cron.Job, now time.Time) (bool, string, error) {
	sched, schedErr := j.Schedule(s.loc)
	if schedErr == nil {
		s.rezone(j, sched)
	}
	if j.RunningRunID != "" && !j.RunningUntil.After(now) && !s.runAlive(ctx, j, now) {
		// Its turn is gone and its end never came (lost: a crash no
		// redelivery recovered): the job is free to fire again.
		runs.WithLabelValues("overran").Inc()
		s.log.Warn("cron run is gone without its end; its job fires again", "job", j.ID,
			"run", j.RunningRunID, "max_run_duration", s.cfg.MaxRunDuration)
		j.RunningRunID, j.RunningUntil, j.NextSkipAt, j.RunGoneAt = "", time.Time{}, time.Time{}, time.Time{}
	}
	if j.RunningRunID != "" {
		// Its run still goes: the job does not fire.
		if schedErr == nil {
			s.skipFires(j, sched, now)
		} else {
			j.NextSkipAt = now.Add(s.cfg.Tick) // paused once the run ends
		}
		return false, "", nil
	}
	if due := (j.State == cron.StateScheduled && !j.NextRunAt.IsZero() && !j.NextRunAt.After(now)) ||
		(!j.ManualRunAt.IsZero() && !j.ManualRunAt.After(now)); !due {
		return false, "", nil // claimed for its hold, released above
	}
	// Only a run published below holds the job.
	j.RunningRunID, j.RunningUntil, j.NextSkipAt, j.RunGoneAt = "", time.Time{}, time.Time{}, time.Time{}
	if err := schedErr; err != nil {
		// A row no schedule reads back from: stop it rather than loop.
		s.log.Error("cron job has an unreadable schedule; paused", "job", j.ID, "err", err)
		j.State, j.LastStatus, j.LastError, j.ManualRunAt = cron.StatePaused, StatusError, err.Error(), time.Time{}
		j.PausedReason = "paused by the scheduler: its schedule cannot be read (" + err.Error() + ")"
		return false, "", nil
	}
	if !j.ManualRunAt.IsZero() && !j.ManualRunAt.After(now) {
		runAt := j.ManualRunAt
		runID := cron.RunID(j.ID, runAt, true)
		j.ManualRunAt = time.Time{}
		ok, err := s.run(ctx, j, runAt, runID, now)
		if err != nil {
			return false, "", err
		}
		if ok {
			runs.WithLabelValues("manual").Inc()
			s.log.Info("cron job fired", "job", j.ID, "asked", runAt, "kind", "manual")
		}
		// As Hermes's run-now (trigger_job, then mark_job_run): the run
		// asked for is the job's run, blocked or not. It counts towards
		// repeat, a one-shot is completed by it, and the next run is the
		// first after it (a scheduled run due meanwhile is this one).
		s.advance(j, sched, now)
		return ok, runID, nil
	}
	due := j.NextRunAt
	late := now.Sub(due)
	grace := sched.Grace(due)
	if sched.Kind == schedule.Once {
		grace = max(grace, 2*s.cfg.Tick)
	}
	// An instant whose firing failed (a panic, the bus or the database
	// down) was tried in time, and its run may be out already (a commit
	// that failed after its publish; its end may even be recorded): it is
	// retried under its id however late, never missed nor skipped. An
	// outage only delays.
	tried := j.FireFailures > 0 || j.LastRunID == cron.RunID(j.ID, due, false)
	switch {
	case tried:
	case sched.Kind == schedule.Once && late > grace && ranByHandSince(j.LastRunID, due):
		// A "run" fired since it was due: that was its run, as Hermes's
		// run-now of a one-shot is; completed, its status the run's
		// rather than "missed". (A run asked for completes a one-shot
		// when it fires; this is for rows from before it did.)
		j.State, j.NextRunAt = cron.StateCompleted, time.Time{}
		return false, "", nil
	case sched.Kind == schedule.Once && late > grace:
		// Hermes retires a one-shot past its grace: it never runs late.
		runs.WithLabelValues("missed").Inc()
		s.log.Warn("cron one-shot missed; retired without running", "job", j.ID, "due", due, "late", late.Round(time.Second))
		j.State, j.NextRunAt = cron.StateCompleted, time.Time{}
		j.LastStatus = StatusError
		j.LastError = fmt.Sprintf("missed: due at %s, %s ago (one-shots run at most %s late)",
			due.In(s.loc).Format("2006-01-02 15:04"), late.Round(time.Second), grace)
		return false, "", nil
	case sched.Kind != schedule.Once && late > grace && !s.cfg.CatchUpMissed:
		runs.WithLabelValues("missed").Inc()
		s.log.Info("cron run missed beyond its grace; skipped (cron.catch_up_missed=false)", "job", j.ID, "due", due)
		j.NextRunAt, j.Zone = s.next(sched, now), s.zone
		if j.NextRunAt.IsZero() {
			j.State = cron.StateCompleted
		}
		return false, "", nil
	}
	runID := cron.RunID(j.ID, due, false)
	ok, err := s.run(ctx, j, due, runID, now)
	if err != nil {
		return false, "", err
	}
	kind := "scheduled"
	switch {
	case late > grace:
		kind = "catch_up"
	case late > 5*time.Minute:
		kind = "late"
	}
	if ok {
		runs.WithLabelValues(kind).Inc()
		s.log.Info("cron job fired", "job", j.ID, "due", due, "kind", kind)
	}
	// A blocked run counts as the scheduled one.
	s.advance(j, sched, now)
	return ok, runID, nil
}

// rezone moves the next run of j, a cron expression whose next run was
// computed in another time zone (cron.timezone changed since), to the
// run that stands for it in this scheduler's zone (schedule.InZoneOf):
// 09:00 every day is 09:00 in the new zone from the next day on, not
// once more at the old zone's 09:00 and then at the new one's (two runs,
// and the new zone's run of that day missed when it came first). As
// Hermes's repair of a next run whose offset no longer matches, which
// recomputes it to keep the wall clock's reading rather than fire it.
// An instant whose firing failed keeps its zone until it has fired: its
// run may be out already, and is retried under its id.
//
// Only a job whose zone was set before this scheduler started is moved
// (Job.ZoneAt; a write of its status alone does not count): a zone set
// since may come from a router started with a newer cron.timezone (a
// rolling change, or a rollback), which a router of the older zone must
// not undo, or the two would move it back and forth every tick. Nothing
// tells which zone is newer but the routers' starts, so such a job keeps
// its next run, and this scheduler's zone applies from the run after it
// (cron.timezone must be the same on every router).
func (s *Scheduler) rezone(j *cron.Job, sched schedule.Schedule) {
	if j.Kind != schedule.Cron || j.Zone == "" || j.Zone == s.zone || j.State != cron.StateScheduled || j.NextRunAt.IsZero() ||
		j.FireFailures > 0 || j.LastRunID == cron.RunID(j.ID, j.NextRunAt, false) {
		return
	}
	if j.ZoneAt.After(s.started) {
		s.log.Warn("cron job's next run was computed in another time zone since this router started; left as it is (do the routers' cron.timezone differ?)",
			"job", j.ID, "job_zone", j.Zone, "zone", s.zone, "next", j.NextRunAt)
		return
	}
	next := s.next(sched, s.now())
	if old, err := time.LoadLocation(j.Zone); err != nil {
		s.log.Warn("cron job's former time zone is unknown; its next run is the new zone's next", "job", j.ID, "zone", j.Zone, "err", err)
	} else if was, err := j.Schedule(old); err == nil {
		next = sched.InZoneOf(was, j.NextRunAt)
	}
	if next.IsZero() {
		j.Zone = s.zone // none comes: completed when it is due
		return
	}
	s.log.Info("cron job's next run moved to the configured time zone", "job", j.ID, "from_zone", j.Zone, "zone", s.zone,
		"was", j.NextRunAt, "next", next)
	j.NextRunAt, j.Zone, j.NextSkipAt = next, s.zone, time.Time{}
}

// runAlive looks whether j's run in flight, whose hold is due for a
// look, still goes, and renews the hold until the next tick when it
// does. A run the scheduler cannot look at (Redis failing) is taken as
// alive: firing a second run beside one that may still go is what the
// hold is for. A run that shows no sign of life is looked at once more
// a tick later (RunGoneAt) before it counts as gone: a dead worker's
// claim lapses a moment before the bus hands the turn to the next
// attempt, and a TurnCompleted may still wait for a router.
func (s *Scheduler) runAlive(ctx context.Context, j *cron.Job, now time.Time) bool {
	if s.alive == nil {
		return false
	}
	alive, err := s.alive(ctx, j.RunningRunID)
	if err != nil {
		s.log.Warn("cannot look whether a cron run still goes; its job keeps waiting", "job", j.ID, "run", j.RunningRunID, "err", err)
		alive = true
	}
	switch {
	case alive:
		j.RunGoneAt = time.Time{}
		s.log.Debug("cron run still goes; its hold is renewed", "job", j.ID, "run", j.RunningRunID)
	case j.RunGoneAt.IsZero() || now.Sub(j.RunGoneAt) < s.cfg.Tick:
		if j.RunGoneAt.IsZero() {
			j.RunGoneAt = now
		}
		s.log.Info("cron run shows no sign of life; looked at again next tick", "job", j.ID, "run", j.RunningRunID)
	default:
		return false
	}
	j.RunningUntil = now.Add(s.cfg.Tick)
	return true
}

// maxSkipCount bounds the instants one look counts as skipped (a job
// every minute held for a day is 1,440).
const maxSkipCount = 100_000

// skipFires logs and counts the instants of j that came due while its
// run in flight held it (from NextSkipAt, else NextRunAt, up to now),
// each once: as Hermes's tick, a fire due while the job's previous run
// goes on is skipped, not queued; the run's end computes the next run
// (cron.Store.RunEnded). Nothing is announced to the job's chat.
func (s *Scheduler) skipFires(j *cron.Job, sched schedule.Schedule, now time.Time) {
	if j.State != cron.StateScheduled || j.NextRunAt.IsZero() {
		return
	}
	from := j.NextSkipAt
	if from.IsZero() || from.Before(j.NextRunAt) {
		from = j.NextRunAt
	}
	n, t := 0, from
	for !t.After(now) && n < maxSkipCount {
		n++
		next, ok := sched.Next(t)
		if !ok || !next.After(t) {
			t = time.Time{}
			break
		}
		t = next
	}
	if n == 0 {
		// Nothing came due since the last mark (the schedule changed
		// since: its next run is later): the mark moves to that run, so
		// the job is not claimed again before it.
		j.NextSkipAt = from
		return
	}
	if t.IsZero() || t.Before(now) {
		// No instant after now (a one-shot), or more than the bound: the
		// next look counts from the next tick.
		t = now.Add(s.cfg.Tick)
	}
	j.NextSkipAt = t
	runs.WithLabelValues("skipped").Add(float64(n))
	s.log.Info("cron job already running; fire skipped", "job", j.ID, "name", j.Name, "run", j.RunningRunID,
		"due", from, "skipped", n)
}

// advance counts the run just made (scheduled, or asked for with "run")
// towards the job's repeat and moves the job on to its next run after
// it, or completes it: a one-shot, or a job whose repeat ran out. A
// completed job with a run asked for (a row from before a run counted)
// stays as it is.
func (s *Scheduler) advance(j *cron.Job, sched schedule.Schedule, now time.Time) {
	if j.State == cron.StateCompleted {
		return
	}
	j.RepeatCompleted++
	j.NextRunAt, j.Zone = s.next(sched, now), s.zone
	if j.NextRunAt.IsZero() || (j.RepeatTimes > 0 && j.RepeatCompleted >= j.RepeatTimes) {
		j.State, j.NextRunAt = cron.StateCompleted, time.Time{}
	}
}

// ranByHandSince: the run lastRunID was asked for with "run" at or after
// due.
func ranByHandSince(lastRunID string, due time.Time) bool {
	_, at, manual, err := cron.ParseRunID(lastRunID)
	return err == nil && manual && !at.Before(due)
}

// next is the job's next run after a run (or a skipped instant) at now,
// as Hermes's compute_next_run(schedule, now) after a run and after a
// skipped catch-up: an interval's is now plus its period, so it counts
// from each run's time and a late run or a catch-up moves it rather than
// keeping the grid of its first run; a cron expression's is its first
// instant after now, so missed ones collapse into the run just made
// (Hermes's catch-up fires once, not per slot). This is the provisional
// next run, as Hermes's advance before the run (advance_next_run): the
// run holds the job until its turn ends (or cron.max_run_duration
// passes), and when it ends the router computes the next run from that
// end (cron.Store.RunEnded), as Hermes's mark_job_run does: an
// interval's a period after it, a cron expression's its first instant
// after it.
func (s *Scheduler) next(sched schedule.Schedule, now time.Time) time.Time {
	t, _ := sched.Next(now)
	return t
}

// run publishes a run of j as the message eventID (cron.RunID of due,
// the instant it stands for). False without an error: the
// deliver target does not resolve, and the job says so (Hermes's
// blocked_config: no model call for an answer that cannot be delivered).
func (s *Scheduler) run(ctx context.Context, j *cron.Job, due time.Time, eventID string, now time.Time) (bool, error) {
	if j.LastRunID == eventID {
		// The retry of a commit that failed after the publish, and the
		// run's end (or outcome) is recorded already (cron.Store.RunEnded
		// of a run not yet recorded): the run went out and ran. Published
		// again it would be a second message for the router to catch
		// (past the bus's dedupe window, its session's record of the
		// event is the last guard, and the session retention may have
		// deleted it since); the job's own record is enough to know.
		s.log.Info("cron run ran already; recorded, not published again", "job", j.ID, "run", eventID)
		j.LastRunAt = now
		return true, nil
	}
	route, err := s.route(ctx, j)
	if errors.Is(err, outbox.ErrBadTarget) {
		runs.WithLabelValues("blocked").Inc()
		s.log.Warn("cron run blocked: its deliver target does not resolve", "job", j.ID, "deliver", j.Deliver, "err", err)
		j.LastRunAt, j.LastStatus, j.LastError = now, StatusBlockedConfig, "deliver "+j.Deliver+": "+err.Error()
		return false, nil
	}
	if err != nil {
		return false, err
	}
	src := &eventsv1.SessionSource{Platform: Platform, Account: Account, ChatId: eventID, ChatName: j.Name,
		ChatType: "dm", UserId: j.ID, UserName: j.Name}
	ev := &eventsv1.MessageReceived{
		EventId: eventID, MessageId: eventID, Source: src, Text: Frame(j.Prompt),
		SentAt: timestamppb.New(due), ReceivedAt: timestamppb.New(now),
		Internal: true, TransportAuthenticated: true, AnswerOnly: true, ReplyRoute: route,
	}
	msgID := Platform + ":" + Account + ":" + eventID
	// The scheduler's stop (the router's: ctx ends) does not cancel the
	// publish, which the stream may hold already: cancelled, the run
	// went out all the same while the job said it could not be queued
	// and fired it again later. publishTimeout bounds what a stop waits.
	pctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), publishTimeout)
	defer cancel()
	if deadline, ok := ctx.Deadline(); ok {
		var cancelAt context.CancelFunc
		pctx, cancelAt = context.WithDeadline(pctx, deadline)
		defer cancelAt()
	}
	if _, err := s.bus.Publish(pctx, s.bus.Topology().InboundSubject(sessionkey.ChatKey(src)), msgID, ev); err != nil {
		return false, fmt.Errorf("publish cron run %s: %w", eventID, err)
	}
	j.LastRunAt, j.LastStatus, j.LastError = now, StatusOK, ""
	// It holds the job until its turn ends (cron.Store.RunEnded) or
	// cron.max_run_duration passes.
	j.RunningRunID, j.RunningUntil = eventID, now.Add(s.cfg.MaxRunDuration)
	return true, nil
}

// route is where a run's answer goes: the first of the job's deliver
// targets (cron.Targets), resolved now (a home channel chosen since the
// job was made counts), or nowhere (local). A job with several targets
// publishes its run with the first; the worker sends the answer to the
// others as well, resolving them again when it answers (each under
// idempotency keys of its own). None of several resolving blocks the run
// (ErrBadTarget); some not resolving is logged, and those are skipped,
// as Hermes's _resolve_delivery_targets skips them.
func (s *Scheduler) route(ctx context.Context, j *cron.Job) (*eventsv1.ReplyRoute, error) {
	targets, skipped, err := cron.Targets(ctx, *j, s.resolve)
	if err != nil {
		return nil, err
	}
	if len(targets) == 0 {
		return &eventsv1.ReplyRoute{}, nil
	}
	for _, why := range skipped {
		s.log.Warn("cron run skips a deliver target that does not resolve", "job", j.ID, "target", why)
	}
	if o := j.Origin; j.Deliver == cron.DeliverOrigin && (o.Platform == "" || o.ChatID == "") {
		s.log.Info("cron job delivers to its origin but has none; its run goes to a home channel", "job", j.ID, "platform", targets[0].GetPlatform())
	}
	t := targets[0]
	return &eventsv1.ReplyRoute{Platform: t.GetPlatform(), Account: t.GetAccount(), ChatId: t.GetChatId(), ThreadId: t.GetThreadId()}, nil
}

// SilentMarker in a run's answer suppresses its delivery (Hermes's).
const SilentMarker = "[SILENT]"

// Frame is the text a run's prompt reaches the agent as: Hermes's
// instructions for a scheduled run (its answer is delivered for it; it
// may answer [SILENT] when there is nothing to report), then the prompt.
func Frame(prompt string) string {
	return "[IMPORTANT: You are running as a scheduled cron job. DELIVERY: Your final response will be automatically " +
		"delivered to the user — do NOT use send_message or try to deliver the output yourself. Just produce your " +
		"report/output as your final response and the system handles the rest. SILENT: If there is genuinely nothing " +
		"new to report, respond with exactly \"" + SilentMarker + "\" (nothing else) to suppress delivery. Never combine " +
		SilentMarker + " with content — either report your findings normally, or say " + SilentMarker + " and nothing more.]\n\n" + prompt
}
