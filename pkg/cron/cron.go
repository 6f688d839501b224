// Package cron keeps Hermes's cron jobs in Postgres (the cron_jobs table):
// a prompt that runs on a schedule in a fresh session of its own, whose
// answer goes to a deliver target. Users and the agent manage their own
// jobs through Store (the agent's cronjob tool, the /cron command); the
// scheduler (pkg/cron/scheduler) claims and fires the due ones.
package cron

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/switchboard-chat/switchboard/pkg/cron/schedule"
	"github.com/switchboard-chat/switchboard/pkg/outbox"
)

// Job states (Hermes's).
const (
	StateScheduled = "scheduled"
	StatePaused    = "paused"
	StateCompleted = "completed"
)

// Deliver targets that are not chats.
const (
	DeliverOrigin = "origin"
	DeliverLocal  = "local"
)

// Limits on what a job holds.
const (
	MaxPromptBytes = 16 << 10
	MaxNameRunes   = 100
	MaxJobsPerUser = 100
)

// Errors callers tell apart.
var (
	ErrNotFound  = errors.New("job not found")
	ErrAmbiguous = errors.New("ambiguous job reference")
	// ErrInvalid marks bad input (schedule, deliver target, repeat,
	// prompt); its message says what is wrong.
	ErrInvalid = errors.New("invalid cron job")
)

// NextRun is when the job runs next: the run asked for with "run"
// while it has not fired (the scheduler fires it on its next tick, and
// as Hermes's, whose trigger_job moves next_run_at to now, it is the
// job's next run), else the scheduled one, whichever comes first. Every
// view of a job shows it as its next run (the chat's /cron, the jobs
// API, the agent's cronjob tool).
func (j Job) NextRun() time.Time {
	if !j.ManualRunAt.IsZero() && (j.NextRunAt.IsZero() || j.ManualRunAt.Before(j.NextRunAt)) {
		return j.ManualRunAt
	}
	return j.NextRunAt
}

// Origin is the chat a job was created from.
type Origin struct {
	Platform, Account, ChatID, ThreadID string
}

// Job is one cron job.
type Job struct {
	ID, Owner, Name, Prompt string
	// Kind, Expr and Display are the parsed schedule (see schedule).
	Kind, Expr, Display string
	Deliver             string
	Origin              Origin
	// RepeatTimes is how many runs the job has (0: forever);
	// RepeatCompleted how many scheduled runs it made.
	RepeatTimes, RepeatCompleted int
	State                        string
	// NextRunAt is zero once completed; ManualRunAt is a run asked for
	// with "run" (zero: none).
	NextRunAt, ManualRunAt, LastRunAt time.Time
	LastStatus, LastError             string
	// LastDeliveryError is why the answer of the last run was not
	// delivered ("": none failed; Hermes's last_delivery_error).
	LastDeliveryError string
	// LastRunID is the run (RunID) LastStatus belongs to.
	LastRunID string
	// PausedReason is why the scheduler paused the job ("": it was not
	// the scheduler, or the job is not paused; Hermes's paused_reason).
	PausedReason string
	// FireFailures counts the failures to fire the job in a row;
	// FireRetryAt is when the scheduler may try again (zero: any tick).
	FireFailures int
	FireRetryAt  time.Time
	// RunningRunID is the run in flight, which holds the job's next fire
	// until its turn ends (RunEnded) ("": none). RunningUntil is when the
	// scheduler next looks whether the run still goes: it renews the hold
	// while the run's turn is alive and releases it once the run is gone
	// without an end (pkg/cron/scheduler).
	RunningRunID string
	RunningUntil time.Time
	// NextSkipAt is the first instant of the schedule not yet counted as
	// a fire skipped while the run in flight held the job (zero: its
	// NextRunAt); the scheduler logs and counts each once.
	NextSkipAt time.Time
	// RunGoneAt is when the scheduler first found the run in flight
	// showing no sign of life (zero: it has not, or it showed one
	// since); it is released only when it still shows none a tick later.
	RunGoneAt time.Time
	// Zone is the time zone NextRunAt was computed in (ZoneName of the
	// scheduler's or the store's location; "" for rows from before it
	// was recorded): the scheduler moves a cron expression's next run
	// to its own zone when they differ (cron.timezone changed).
	Zone string
	// ZoneAt is when Zone was last changed (migration 00144): a
	// scheduler started before then leaves the job in Zone (ClaimDueIn).
	ZoneAt               time.Time
	CreatedAt, UpdatedAt time.Time
}

// ZoneName names loc as Job.Zone records it: its IANA name, "Local" for
// the process's zone, "UTC" for nil.
func ZoneName(loc *time.Location) string {
	if loc == nil {
		return "UTC"
	}
	return loc.String()
}

// Running: a run of the job is in flight and holds its next fire. Its
// hold is renewed while the run's turn is alive and released when the
// turn ends or is found gone, so it is not bounded by a time: a hold
// whose renewal is due (RunningUntil passed) still holds until the
// scheduler has looked.
func (j Job) Running() bool {
	return j.RunningRunID != ""
}

// Schedule loads the job's schedule in loc.
func (j Job) Schedule(loc *time.Location) (schedule.Schedule, error) {
	return schedule.Load(j.Kind, j.Expr, loc)
}

// RepeatDisplay is Hermes's: "forever", "once", or "<done>/<times>".
func (j Job) RepeatDisplay() string {
	switch j.RepeatTimes {
	case 0:
		return "forever"
	case 1:
		return "once"
	}
	return fmt.Sprintf("%d/%d", j.RepeatCompleted, j.RepeatTimes)
}

// DBTX is what the store runs its statements on: the pool, or the
// scheduler's transaction.
type DBTX interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// Store reads and changes cron jobs. Every method that takes an owner
// only sees that owner's jobs.
type Store struct {
	// db is the pool, or the transaction InTx was given.
	db  beginner
	now func() time.Time
	loc *time.Location
}

// beginner is what the store runs its statements on: the pool, or a
// transaction (whose BeginFunc is a savepoint).
type beginner interface {
	DBTX
	Begin(ctx context.Context) (pgx.Tx, error)
}

// New returns a store; loc is the time zone of naive timestamps and cron
// expressions (nil: UTC), now the clock (nil: time.Now).
func New(db *pgxpool.Pool, loc *time.Location, now func() time.Time) *Store {
	if loc == nil {
		loc = time.UTC
	}
	if now == nil {
		now = time.Now
	}
	return &Store{db: db, now: now, loc: loc}
}

// InTx returns a copy of s whose statements run in tx, so that a change
// commits or rolls back with the rest of tx: the router applies a /cron
// command in the transaction that records the inbound event as applied
// (sessionstore.Once). A failed statement of a method that opens a
// transaction of its own rolls back to its savepoint only.
func (s *Store) InTx(tx pgx.Tx) *Store {
	c := *s
	c.db = tx
	return &c
}

// Location is the store's time zone.
func (s *Store) Location() *time.Location { return s.loc }

const columns = `id, owner, name, prompt, schedule_kind, schedule_expr, schedule_display, deliver,
origin_platform, origin_account, origin_chat_id, origin_thread_id, coalesce(repeat_times, 0), repeat_completed,
state, next_run_at, manual_run_at, last_run_at, last_status, last_error, last_delivery_error, last_run_id,
paused_reason, fire_failures, fire_retry_at, running_run_id, running_until, next_skip_at, run_gone_at, schedule_zone, schedule_zone_at, created_at, updated_at`

func scan(row pgx.Row) (Job, error) {
	var j Job
	var next, manual, last, retry, until, skip, gone *time.Time
	err := row.Scan(&j.ID, &j.Owner, &j.Name, &j.Prompt, &j.Kind, &j.Expr, &j.Display, &j.Deliver,
		&j.Origin.Platform, &j.Origin.Account, &j.Origin.ChatID, &j.Origin.ThreadID, &j.RepeatTimes, &j.RepeatCompleted,
		&j.State, &next, &manual, &last, &j.LastStatus, &j.LastError, &j.LastDeliveryError, &j.LastRunID,
		&j.PausedReason, &j.FireFailures, &retry, &j.RunningRunID, &until, &skip, &gone, &j.Zone, &j.ZoneAt, &j.CreatedAt, &j.UpdatedAt)
	if errors.Is(err, pgx.ErrNoRows) {
		return Job{}, ErrNotFound
	}
	if err != nil {
		return Job{}, fmt.Errorf("read cron job: %w", err)
	}
	for _, p := range []struct {
		src *time.Time
		dst *time.Time
	}{{next, &j.NextRunAt}, {manual, &j.ManualRunAt}, {last, &j.LastRunAt}, {retry, &j.FireRetryAt}, {until, &j.RunningUntil}, {skip, &j.NextSkipAt}, {gone, &j.RunGoneAt}} {
		if p.src != nil {
			*p.dst = *p.src
		}
	}
	return j, nil
}

func nullTime(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	return &t
}

func nullRepeat(n int) *int {
	if n <= 0 {
		return nil
	}
	return &n
}

// NewJob is what a job is created from.
type NewJob struct {
	Owner, Name, Prompt, Schedule, Deliver string
	Origin                                 Origin
	// Repeat: 0 for the schedule's default (once for a one-shot,
	// forever for the others).
	Repeat int
}

// CheckDeliver validates a deliver value: one target, or several
// separated by commas ("telegram,discord:123,origin"; Hermes's
// comma-separated deliver, every target of which gets the answer). A
// target is origin, local, a platform (the origin chat when it is the
// origin's platform, else its home channel, resolved when the job
// fires), platform:chat_id, platform:chat_id:thread_id or
// platform:#name. Each part is trimmed and checked; empty parts are
// dropped. "" becomes origin when there is an origin chat, local
// otherwise (Hermes's create_job). origin without an origin chat (a job
// made over the API or by an admin) is kept: as Hermes's, its runs go to
// the first platform's home channel there is when they fire (Targets).
func CheckDeliver(raw string, origin Origin) (string, error) {
	d := strings.TrimSpace(raw)
	if len(d) > 512 || !utf8.ValidString(d) {
		return "", fmt.Errorf("%w: deliver %q is not a target", ErrInvalid, d)
	}
	parts := DeliverParts(d)
	if len(parts) == 0 {
		if origin.Platform != "" && origin.ChatID != "" {
			return DeliverOrigin, nil
		}
		return DeliverLocal, nil
	}
	for i, p := range parts {
		switch strings.ToLower(p) {
		case DeliverOrigin, DeliverLocal:
			parts[i] = strings.ToLower(p)
			continue
		}
		if strings.ContainsAny(p, "\r\n\t \x00") {
			return "", fmt.Errorf("%w: deliver %q is not a target", ErrInvalid, p)
		}
		if _, _, err := outbox.ParseTarget(p, func(string) string { return "home" }); err != nil {
			return "", fmt.Errorf("%w: deliver: %v (use origin, local, a platform, platform:chat_id or platform:#channel, or several separated by commas)", ErrInvalid, err)
		}
	}
	return strings.Join(parts, ","), nil
}

func checkPrompt(p string) (string, error) {
	p = strings.TrimSpace(p)
	switch {
	case p == "":
		return "", fmt.Errorf("%w: the prompt is empty", ErrInvalid)
	case len(p) > MaxPromptBytes:
		return "", fmt.Errorf("%w: the prompt is longer than %d bytes", ErrInvalid, MaxPromptBytes)
	case !utf8.ValidString(p) || strings.ContainsRune(p, 0):
		// Postgres text holds neither.
		return "", fmt.Errorf("%w: the prompt is not UTF-8 text", ErrInvalid)
	}
	return p, nil
}

func checkRepeat(n int) error {
	if n < 0 || n > 1_000_000 {
		return fmt.Errorf("%w: repeat must be a count of runs from 1, or 0 for the default", ErrInvalid)
	}
	return nil
}

// nameOf is Hermes's default name: the prompt's first 50 characters.
func nameOf(name, prompt string) string {
	// Postgres text holds no NUL and no invalid UTF-8: dropped, as the
	// spacing is normalised.
	name = strings.Join(strings.Fields(strings.ReplaceAll(strings.ToValidUTF8(name, ""), "\x00", "")), " ")
	if name == "" {
		name = strings.Join(strings.Fields(prompt), " ")
		if r := []rune(name); len(r) > 50 {
			name = strings.TrimSpace(string(r[:50]))
		}
	}
	if r := []rune(name); len(r) > MaxNameRunes {
		name = string(r[:MaxNameRunes])
	}
	if name == "" {
		name = "cron job"
	}
	return name
}

func newID() string {
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// Create stores a new job and returns it with its first run.
func (s *Store) Create(ctx context.Context, n NewJob) (Job, error) {
	if n.Owner == "" {
		return Job{}, fmt.Errorf("%w: no owner", ErrInvalid)
	}
	prompt, err := checkPrompt(n.Prompt)
	if err != nil {
		return Job{}, err
	}
	now := s.now()
	sched, err := schedule.Parse(n.Schedule, now, s.loc)
	if err != nil {
		return Job{}, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	deliver, err := CheckDeliver(n.Deliver, n.Origin)
	if err != nil {
		return Job{}, err
	}
	if err := checkRepeat(n.Repeat); err != nil {
		return Job{}, err
	}
	repeat := n.Repeat
	if repeat == 0 {
		repeat = sched.DefaultRepeat()
	}
	var j Job
	err = pgx.BeginFunc(ctx, s.db, func(tx pgx.Tx) error {
		// Creates of one owner take turns from the count to the insert,
		// so that racing ones (parallel tool calls) keep the limit.
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock(hashtextextended('cron_jobs:' || $1, 0))`, n.Owner); err != nil {
			return fmt.Errorf("lock owner's cron jobs: %w", err)
		}
		var count int
		if err := tx.QueryRow(ctx, `SELECT count(*) FROM cron_jobs WHERE owner = $1 AND state <> 'completed'`, n.Owner).Scan(&count); err != nil {
			return fmt.Errorf("count cron jobs: %w", err)
		}
		if count >= MaxJobsPerUser {
			return fmt.Errorf("%w: you have %d jobs, the most there may be; remove one first", ErrInvalid, count)
		}
		row := tx.QueryRow(ctx, `
INSERT INTO cron_jobs (id, owner, name, prompt, schedule_kind, schedule_expr, schedule_display, deliver,
  origin_platform, origin_account, origin_chat_id, origin_thread_id, repeat_times, next_run_at, created_at, updated_at, schedule_zone, schedule_zone_at)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $15, $16, $15)
RETURNING `+columns,
			newID(), n.Owner, nameOf(n.Name, prompt), prompt, sched.Kind, sched.Expr, sched.Display, deliver,
			n.Origin.Platform, n.Origin.Account, n.Origin.ChatID, n.Origin.ThreadID, nullRepeat(repeat), sched.First(now), now, ZoneName(s.loc))
		if j, err = scan(row); err != nil {
			return fmt.Errorf("create cron job: %w", err)
		}
		return nil
	})
	if err != nil {
		return Job{}, err
	}
	return j, nil
}

// List returns the owner's jobs, oldest first: the scheduled ones, or
// with all also the paused and completed ones (Hermes's include_disabled).
func (s *Store) List(ctx context.Context, owner string, all bool) ([]Job, error) {
	rows, err := s.db.Query(ctx, `SELECT `+columns+` FROM cron_jobs
WHERE owner = $1 AND ($2 OR state = 'scheduled') ORDER BY created_at, id`, owner, all)
	if err != nil {
		return nil, fmt.Errorf("list cron jobs: %w", err)
	}
	defer rows.Close()
	var out []Job
	for rows.Next() {
		j, err := scan(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, j)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list cron jobs: %w", err)
	}
	return out, nil
}

// Resolve finds one of the owner's jobs by id, or else by name (case
// insensitive, as Hermes): several jobs of that name are ErrAmbiguous,
// whose message lists their ids.
func (s *Store) Resolve(ctx context.Context, owner, ref string) (Job, error) {
	ref = strings.TrimSpace(ref)
	if ref == "" || !utf8.ValidString(ref) || strings.ContainsRune(ref, 0) {
		// No id or name holds these (nameOf), and Postgres text cannot:
		// asked, it would fail as if the store were down.
		return Job{}, ErrNotFound
	}
	j, err := scan(s.db.QueryRow(ctx, `SELECT `+columns+` FROM cron_jobs WHERE owner = $1 AND id = $2`, owner, ref))
	if !errors.Is(err, ErrNotFound) {
		return j, err
	}
	rows, err := s.db.Query(ctx, `SELECT `+columns+` FROM cron_jobs WHERE owner = $1 AND lower(name) = lower($2)
ORDER BY created_at, id LIMIT 10`, owner, ref)
	if err != nil {
		return Job{}, fmt.Errorf("find cron job: %w", err)
	}
	defer rows.Close()
	var found []Job
	for rows.Next() {
		j, err := scan(rows)
		if err != nil {
			return Job{}, err
		}
		found = append(found, j)
	}
	if err := rows.Err(); err != nil {
		return Job{}, fmt.Errorf("find cron job: %w", err)
	}
	switch len(found) {
	case 0:
		return Job{}, ErrNotFound
	case 1:
		return found[0], nil
	}
	ids := make([]string, len(found))
	for i, f := range found {
		ids[i] = f.ID
	}
	return Job{}, fmt.Errorf("%w: %d jobs are named '%s' (%s); use the job id", ErrAmbiguous, len(found), ref, strings.Join(ids, ", "))
}

// Get returns the job id, whoever owns it: for the services that act on
// a job's runs (the worker sending a run's answer to its deliver
// targets), never for a user's request, which Resolve answers.
func (s *Store) Get(ctx context.Context, id string) (Job, error) {
	if id == "" || !utf8.ValidString(id) || strings.ContainsRune(id, 0) {
		return Job{}, ErrNotFound
	}
	return scan(s.db.QueryRow(ctx, `SELECT `+columns+` FROM cron_jobs WHERE id = $1`, id))
}

// Update is a change to a job; nil fields stay.
type Update struct {
	Name, Prompt, Schedule, Deliver *string
	Repeat                          *int
}

// Update changes one of the owner's jobs. A new schedule starts over from
// now (a paused job stays paused). A completed job keeps its state: as
// Hermes's update_job, which will not activate a terminal job, a new
// schedule for it is refused (Hermes's `cron resume --run-now|--at`
// re-arms one; here, make a new job); its other fields may change.
func (s *Store) Update(ctx context.Context, owner, id string, u Update) (Job, error) {
	return s.change(ctx, owner, id, func(j *Job, now time.Time) error {
		if u.Schedule != nil && j.State == StateCompleted {
			return fmt.Errorf("%w: job '%s' has completed; its schedule cannot be changed: create a new job", ErrInvalid, j.Name)
		}
		var err error
		if u.Prompt != nil {
			if j.Prompt, err = checkPrompt(*u.Prompt); err != nil {
				return err
			}
		}
		if u.Name != nil && strings.TrimSpace(*u.Name) != "" {
			j.Name = nameOf(*u.Name, j.Prompt)
		}
		if u.Deliver != nil {
			if j.Deliver, err = CheckDeliver(*u.Deliver, j.Origin); err != nil {
				return err
			}
		}
		if u.Repeat != nil {
			if err := checkRepeat(*u.Repeat); err != nil {
				return err
			}
			j.RepeatTimes = *u.Repeat
		}
		if u.Schedule != nil {
			sched, err := schedule.Parse(*u.Schedule, now, s.loc)
			if err != nil {
				return fmt.Errorf("%w: %w", ErrInvalid, err)
			}
			// As Hermes's _rederive_repeat_for_schedule_change: a change of
			// kind without a repeat of its own takes the new kind's default
			// (a one-shot made recurring no longer retires after one run).
			switch old := j.Kind; {
			case u.Repeat != nil || old == sched.Kind:
			case sched.Kind == schedule.Once && j.RepeatTimes == 0:
				j.RepeatTimes = 1
			case old == schedule.Once && j.RepeatTimes == 1:
				j.RepeatTimes = 0
			}
			j.Kind, j.Expr, j.Display = sched.Kind, sched.Expr, sched.Display
			j.NextRunAt, j.Zone = sched.First(now), ZoneName(s.loc)
			// Failures to fire belonged to the old schedule's instant: the
			// new one is tried afresh (and is missed if the routers are
			// down at its time, rather than retried as a failed firing).
			j.FireFailures, j.FireRetryAt = 0, time.Time{}
		}
		return nil
	})
}

// change applies fn to one of the owner's jobs (by id or name) and saves
// it, in a transaction that holds the job's row from the read to the
// write: a run the scheduler is making (it holds the row while it
// publishes) ends first, and fn sees the job as the run left it, rather
// than writing back the next run, state and repeat count from before it
// (which re-armed the instant just run).
func (s *Store) change(ctx context.Context, owner, ref string, fn func(j *Job, now time.Time) error) (Job, error) {
	found, err := s.Resolve(ctx, owner, ref)
	if err != nil {
		return Job{}, err
	}
	var out Job
	err = pgx.BeginFunc(ctx, s.db, func(tx pgx.Tx) error {
		j, err := scan(tx.QueryRow(ctx, `SELECT `+columns+` FROM cron_jobs WHERE owner = $1 AND id = $2 FOR UPDATE`, owner, found.ID))
		if err != nil {
			return err // ErrNotFound: removed since
		}
		now := s.now()
		if err := fn(&j, now); err != nil {
			return err
		}
		out, err = save(ctx, tx, owner, j, now)
		return err
	})
	if err != nil {
		return Job{}, err
	}
	return out, nil
}

func save(ctx context.Context, db DBTX, owner string, j Job, now time.Time) (Job, error) {
	row := db.QueryRow(ctx, `
UPDATE cron_jobs SET name = $3, prompt = $4, schedule_kind = $5, schedule_expr = $6, schedule_display = $7, deliver = $8,
  repeat_times = $9, repeat_completed = $10, state = $11, next_run_at = $12, manual_run_at = $13, updated_at = $14,
  paused_reason = $15, fire_failures = $16, fire_retry_at = $17, schedule_zone = $18,
  schedule_zone_at = CASE WHEN schedule_zone = $18 THEN schedule_zone_at ELSE $14 END
WHERE owner = $1 AND id = $2 RETURNING `+columns,
		owner, j.ID, j.Name, j.Prompt, j.Kind, j.Expr, j.Display, j.Deliver, nullRepeat(j.RepeatTimes), j.RepeatCompleted,
		j.State, nullTime(j.NextRunAt), nullTime(j.ManualRunAt), now, j.PausedReason, j.FireFailures, nullTime(j.FireRetryAt), j.Zone)
	out, err := scan(row)
	if err != nil {
		return Job{}, fmt.Errorf("update cron job %s: %w", j.ID, err)
	}
	return out, nil
}

// Pause stops scheduling one of the owner's jobs; it keeps its next run
// for Resume. A run asked for ("run") that has not fired is dropped: as
// in Hermes, where a paused job is not fired, run-now or not. (One that
// fired is not: the scheduler holds the row until it has saved the run.)
func (s *Store) Pause(ctx context.Context, owner, id string) (Job, error) {
	return s.change(ctx, owner, id, func(j *Job, _ time.Time) error {
		if j.State == StateCompleted {
			return fmt.Errorf("%w: job '%s' has completed; there is nothing to pause", ErrInvalid, j.Name)
		}
		j.State, j.ManualRunAt, j.PausedReason = StatePaused, time.Time{}, ""
		return nil
	})
}

// Resume schedules a paused job again. As Hermes's resume_job ("compute
// the next future run from now"), a recurring job's next run is its first
// after now: the runs it missed paused are not made up (a pause is not
// downtime; "run" makes one now); a cron expression's next run still
// ahead is that one, an interval's is now plus its period (an interval
// counts from its last run or from now, not on a grid of its first). A
// one-shot whose time passed beyond its grace cannot be resumed.
func (s *Store) Resume(ctx context.Context, owner, id string) (Job, error) {
	return s.change(ctx, owner, id, func(j *Job, now time.Time) error {
		if j.State == StateCompleted {
			return fmt.Errorf("%w: job '%s' has completed; there is nothing to resume: create a new job", ErrInvalid, j.Name)
		}
		sched, err := j.Schedule(s.loc)
		if err != nil {
			return err
		}
		switch {
		case sched.Kind == schedule.Once && sched.At.Before(now.Add(-schedule.OnceGrace)):
			return fmt.Errorf("%w: job '%s' was due at %s, which has passed; change its schedule to run it again",
				ErrInvalid, j.Name, sched.At.In(s.loc).Format("2006-01-02 15:04"))
		case sched.Kind == schedule.Once:
			j.NextRunAt = sched.At
		default:
			j.NextRunAt, j.Zone = sched.First(now), ZoneName(s.loc)
		}
		j.State = StateScheduled
		// A job the scheduler paused for failing to fire is tried afresh.
		j.PausedReason, j.FireFailures, j.FireRetryAt = "", 0, time.Time{}
		return nil
	})
}

// Trigger asks for a run of one of the owner's jobs on the next tick
// (Hermes's "run", trigger_job). As Hermes's, that run is the job's run,
// not one besides its schedule: it counts towards repeat, and the job's
// next run is computed from it (mark_job_run), so a one-shot run early is
// its one run and completes it, and a recurring job's next run is its
// first after the run (the scheduler does this when the run fires; until
// then the schedule shows the run pending). As Hermes's, a paused job is
// scheduled again and a completed job is refused: nothing of it is left
// to run (Hermes points to re-arming it; here, make a new one). Asking
// again before that tick asks for the same run (it keeps the instant
// asked first, so a retried request names the same run); asking after
// it fired is another run, however soon: a manual run's id carries its
// instant to the microsecond, and a new one is always later than the
// job's last manual run.
//
// Hermes stores the run by moving next_run_at to now; here it is kept
// apart (manual_run_at), so that its run id differs from the scheduled
// runs' and a pause can drop it without losing the schedule.
func (s *Store) Trigger(ctx context.Context, owner, id string) (Job, error) {
	return s.change(ctx, owner, id, func(j *Job, now time.Time) error {
		// A completed job with a run pending is a row from before a run
		// counted (a paused one-shot whose time had passed was completed
		// when its run was asked for): asking again names that run.
		pending := !j.ManualRunAt.IsZero()
		if j.State == StateCompleted && !pending {
			return fmt.Errorf("%w: job '%s' has completed; there is nothing left to run: create a new job", ErrInvalid, j.Name)
		}
		if j.State == StatePaused {
			sched, err := j.Schedule(s.loc)
			if err != nil {
				return fmt.Errorf("%w: job '%s' has an unreadable schedule: %v", ErrInvalid, j.Name, err)
			}
			// The run asked for is the job's run: a one-shot whose time
			// passed while paused runs now, not retired as missed (the
			// scheduler fires the run asked for first, which completes it).
			j.State = StateScheduled
			if sched.Kind != schedule.Once && !j.NextRunAt.After(now) {
				j.NextRunAt, j.Zone = sched.First(now), ZoneName(s.loc)
			}
			j.PausedReason, j.FireFailures = "", 0
		}
		// Asked for by hand: tried on the next tick, whatever the delay
		// after a failure to fire.
		j.FireRetryAt = time.Time{}
		if pending {
			return nil
		}
		at := now.UTC().Truncate(time.Microsecond)
		if _, last, manual, err := ParseRunID(j.LastRunID); err == nil && manual && !at.After(last) {
			// Another replica's clock behind the one that asked last.
			at = last.Add(time.Microsecond)
		}
		j.ManualRunAt = at
		return nil
	})
}

// Remove deletes one of the owner's jobs and returns it.
func (s *Store) Remove(ctx context.Context, owner, id string) (Job, error) {
	j, err := s.Resolve(ctx, owner, id)
	if err != nil {
		return Job{}, err
	}
	if _, err := s.db.Exec(ctx, `DELETE FROM cron_jobs WHERE owner = $1 AND id = $2`, owner, j.ID); err != nil {
		return Job{}, fmt.Errorf("remove cron job %s: %w", j.ID, err)
	}
	return j, nil
}

// ClaimDue locks one job the scheduler has something to do with at now
// in tx, skipping rows other transactions hold and the ids in skip;
// false when there is none. That is a job:
//
//   - without a run in flight, due at now (a scheduled run or a run
//     asked for): it fires;
//   - whose run in flight holds it and whose hold is due for renewal
//     (running_until passed): the scheduler looks whether the run still
//     goes, renews the hold or releases it;
//   - whose run in flight holds it while one of its scheduled instants
//     came due that was not counted yet (NextSkipAt, else NextRunAt):
//     that fire is skipped, as Hermes's tick skips a job whose run is
//     still going.
func ClaimDue(ctx context.Context, tx DBTX, now time.Time, skip []string) (Job, bool, error) {
	return ClaimDueIn(ctx, tx, now, "", now, skip)
}

// ClaimDueIn is ClaimDue for a scheduler whose time zone is zone
// (ZoneName), started at started: it also claims a scheduled cron
// expression whose next run was computed in another zone (cron.timezone
// changed since), however far ahead, for the scheduler to move it to
// zone, when its zone was set no later than started (Job.ZoneAt). A zone
// set since may come from a router started with a newer cron.timezone
// (a rolling change): this one must not move it back. Writes that leave
// the zone as it was (a run's status, its delivery failure) do not
// count. "" claims none.
func ClaimDueIn(ctx context.Context, tx DBTX, now time.Time, zone string, started time.Time, skip []string) (Job, bool, error) {
	if skip == nil {
		skip = []string{}
	}
	j, err := scan(tx.QueryRow(ctx, `SELECT `+columns+` FROM cron_jobs
WHERE NOT (id = ANY($2)) AND (fire_retry_at IS NULL OR fire_retry_at <= $1) AND (
  (running_run_id = '' AND ((state = 'scheduled' AND next_run_at <= $1) OR manual_run_at <= $1))
  OR (running_run_id <> '' AND (running_until IS NULL OR running_until <= $1))
  OR (running_run_id <> '' AND state = 'scheduled' AND coalesce(next_skip_at, next_run_at) <= $1)
  OR ($3 <> '' AND schedule_kind = 'cron' AND state = 'scheduled' AND next_run_at IS NOT NULL
      AND schedule_zone <> '' AND schedule_zone <> $3 AND fire_failures = 0 AND schedule_zone_at <= $4))
ORDER BY LEAST(CASE WHEN state = 'scheduled' THEN next_run_at END, manual_run_at, running_until), id
LIMIT 1 FOR UPDATE SKIP LOCKED`, now, skip, zone, started))
	if errors.Is(err, ErrNotFound) {
		return Job{}, false, nil
	}
	if err != nil {
		return Job{}, false, fmt.Errorf("claim due cron job: %w", err)
	}
	return j, true, nil
}

// SaveRun writes what a tick changed (next and manual run, state, repeat
// count, last run and status) in tx; runID is the run it fired (or
// blocked), which becomes the job's last run, "" for none (a missed or
// skipped instant). When the row already holds runID's outcome (its turn
// ended, or its answer failed to deliver, before a retry of a failed
// commit recorded it), that stays; a new run clears the last delivery
// error. The job's run in flight becomes j.RunningRunID, holding its next
// fire, looked at again at j.RunningUntil ("": none: a run blocked, an
// instant missed), with j.NextSkipAt, unless the row already holds
// runID's end (RunEnded of a run not yet recorded): then nothing holds it.
func SaveRun(ctx context.Context, tx DBTX, j Job, runID string, now time.Time) error {
	_, err := tx.Exec(ctx, `
UPDATE cron_jobs SET next_run_at = $2, manual_run_at = $3, state = $4, repeat_completed = $5, last_run_at = $6,
  last_status = CASE WHEN $10 <> '' AND last_run_id = $10 THEN last_status ELSE $7 END,
  last_error = CASE WHEN $10 <> '' AND last_run_id = $10 THEN last_error ELSE $8 END,
  last_delivery_error = CASE WHEN $10 = '' OR last_run_id = $10 THEN last_delivery_error ELSE '' END,
  last_run_id = CASE WHEN $10 = '' THEN last_run_id ELSE $10 END, updated_at = $9,
  fire_failures = 0, fire_retry_at = NULL,
  paused_reason = CASE WHEN $4 = 'paused' THEN $11 ELSE '' END,
  running_run_id = CASE WHEN $10 <> '' AND last_run_id = $10 THEN '' ELSE $12 END,
  running_until = CASE WHEN $10 <> '' AND last_run_id = $10 THEN NULL ELSE $13::timestamptz END,
  next_skip_at = CASE WHEN $10 <> '' AND last_run_id = $10 THEN NULL ELSE $14::timestamptz END,
  run_gone_at = CASE WHEN $10 <> '' AND last_run_id = $10 THEN NULL ELSE $15::timestamptz END,
  schedule_zone = $16, schedule_zone_at = CASE WHEN schedule_zone = $16 THEN schedule_zone_at ELSE $9 END
WHERE id = $1`, j.ID, nullTime(j.NextRunAt), nullTime(j.ManualRunAt), j.State, j.RepeatCompleted,
		nullTime(j.LastRunAt), j.LastStatus, truncate(j.LastError, 2000), now, runID, truncate(j.PausedReason, 2000),
		j.RunningRunID, nullTime(j.RunningUntil), nullTime(j.NextSkipAt), nullTime(j.RunGoneAt), j.Zone)
	if err != nil {
		return fmt.Errorf("save cron run of %s: %w", j.ID, err)
	}
	return nil
}

// FireFailure is what the scheduler makes of its failures to fire a job,
// given how many there have been in a row, this one included.
type FireFailure func(failures int) FireFailureOutcome

// FireFailureOutcome is a failed firing's consequence for its job.
type FireFailureOutcome struct {
	// RetryAt is the earliest the scheduler tries the job again.
	RetryAt time.Time
	// LastError is the job's last error from now on (its status error).
	LastError string
	// Pause pauses the job (a scheduled one; a run asked for is
	// dropped, as by Pause) for PausedReason.
	Pause        bool
	PausedReason string
}

// RecordFireFailure records on job id that the scheduler failed to fire
// it in a way it rolled back (it panicked, or the bus or the database
// failed before the run was saved): one more failure in a row, and what
// decide makes of it (when to try again, the job's last error, whether
// to pause it). The job's schedule, repeat count and last run stay as
// they were, so the run is still due, from RetryAt. It returns the
// failures in a row and the outcome; ErrNotFound for a job removed since.
func RecordFireFailure(ctx context.Context, db interface {
	Begin(ctx context.Context) (pgx.Tx, error)
}, id string, decide FireFailure) (int, FireFailureOutcome, error) {
	var n int
	var out FireFailureOutcome
	err := pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error {
		var state string
		err := tx.QueryRow(ctx, `SELECT fire_failures, state FROM cron_jobs WHERE id = $1 FOR UPDATE`, id).Scan(&n, &state)
		if errors.Is(err, pgx.ErrNoRows) {
			return ErrNotFound
		}
		if err != nil {
			return err
		}
		n++
		out = decide(n)
		out.Pause = out.Pause && state == StateScheduled
		if !out.Pause {
			out.PausedReason = ""
		}
		_, err = tx.Exec(ctx, `
UPDATE cron_jobs SET last_status = 'error', last_error = $2, fire_failures = $3, fire_retry_at = $4,
  state = CASE WHEN $5 THEN 'paused' ELSE state END,
  manual_run_at = CASE WHEN $5 THEN NULL ELSE manual_run_at END,
  paused_reason = CASE WHEN $5 THEN $6 ELSE paused_reason END, updated_at = now()
WHERE id = $1`, id, truncate(out.LastError, 2000), n, nullTime(out.RetryAt), out.Pause, truncate(out.PausedReason, 2000))
		return err
	})
	if err != nil {
		if errors.Is(err, ErrNotFound) {
			return 0, FireFailureOutcome{}, err
		}
		return 0, FireFailureOutcome{}, fmt.Errorf("record failed firing of cron job %s: %w", id, err)
	}
	return n, out, nil
}

// RunEnded records on the job of the run runID (RunID) that the run's
// turn ended at end, as Hermes's mark_job_run after a run:
//
//   - the run no longer holds the job (ClaimDue skips a job whose run is
//     in flight, as Hermes's tick does not fire a job while its run
//     goes on): the next fire may be made;
//   - the job's next run is computed from end: an interval's is a period
//     after it (a run of ten minutes every hour starts an hour after the
//     last one ended, not after it started), a cron expression's is its
//     first instant after it (instants that passed while the run went on
//     are skipped, not caught up).
//
// The scheduler moved the job on from the instant the run fired; the
// next run is moved only while that still stands: the job is scheduled,
// runID is its last run, and its next run is the one the scheduler set.
// The hold is released only while runID is the run that holds it. So it
// applies once however often the turn's end is redelivered and whichever
// router replica handles it, and never over a change made since (a new
// schedule, a resume, a later run fired once the scheduler found this
// one gone). A run not yet recorded (the commit after its
// publish failed, and its turn ended before the retry) becomes the job's
// last run, ok (RecordOutcome then records a failure), so that the retry
// that records it holds nothing (SaveRun). False: nothing applied.
func (s *Store) RunEnded(ctx context.Context, runID string, end time.Time) (bool, error) {
	id, at, manual, err := ParseRunID(runID)
	if err != nil {
		return false, err
	}
	applied := false
	err = pgx.BeginFunc(ctx, s.db, func(tx pgx.Tx) error {
		j, err := scan(tx.QueryRow(ctx, `SELECT `+columns+` FROM cron_jobs WHERE id = $1 FOR UPDATE`, id))
		if err == nil && j.LastRunID != runID && ((manual && j.ManualRunAt.Equal(at)) ||
			(!manual && !j.NextRunAt.IsZero() && j.NextRunAt.Truncate(time.Second).Equal(at))) {
			// Not recorded yet: the retry of its commit will be.
			_, err := tx.Exec(ctx, `UPDATE cron_jobs SET last_run_id = $2, last_status = 'ok', last_error = '', last_delivery_error = '',
  updated_at = $3 WHERE id = $1`, id, runID, s.now())
			applied = err == nil
			return err
		}
		if errors.Is(err, ErrNotFound) {
			return nil
		}
		if err != nil {
			return err
		}
		release := j.RunningRunID == runID
		next, zone := j.NextRunAt, j.Zone
		if j.Kind != schedule.Once && j.State == StateScheduled && j.LastRunID == runID && !j.LastRunAt.IsZero() && end.After(j.LastRunAt) {
			if sched, err := j.Schedule(s.loc); err == nil { // else the scheduler pauses it
				if fired, _ := sched.Next(j.LastRunAt); j.NextRunAt.Equal(fired) {
					next, _ = sched.Next(end)
					zone = ZoneName(s.loc)
				}
			}
		}
		if !release && next.Equal(j.NextRunAt) {
			return nil
		}
		if _, err := tx.Exec(ctx, `
UPDATE cron_jobs SET next_run_at = $2, updated_at = $3, schedule_zone = $5,
  schedule_zone_at = CASE WHEN schedule_zone = $5 THEN schedule_zone_at ELSE $3 END,
  running_run_id = CASE WHEN $4 THEN '' ELSE running_run_id END,
  running_until = CASE WHEN $4 THEN NULL ELSE running_until END,
  next_skip_at = CASE WHEN $4 THEN NULL ELSE next_skip_at END,
  run_gone_at = CASE WHEN $4 THEN NULL ELSE run_gone_at END
WHERE id = $1`, id, nullTime(next), s.now(), release, zone); err != nil {
			return err
		}
		applied = true
		return nil
	})
	if err != nil {
		return false, fmt.Errorf("record the end of cron run %s: %w", runID, err)
	}
	return applied, nil
}

// RecordOutcome sets the last status of the job of the run runID (RunID)
// whose turn ended (error, with the reason). It applies only when runID
// is the job's last run, or a run the job has not recorded yet (its due
// instant or manual run is still pending: the commit after its publish
// failed); the outcome of an older run that ends after a newer one fired
// is dropped, as is one of a job removed since. False: not applied.
func (s *Store) RecordOutcome(ctx context.Context, runID, status, errText string) (bool, error) {
	id, at, manual, err := ParseRunID(runID)
	if err != nil {
		return false, err
	}
	tag, err := s.db.Exec(ctx, `
UPDATE cron_jobs SET last_status = $3, last_error = $4, last_run_id = $2, updated_at = now()
WHERE id = $1 AND (last_run_id = $2
  OR ($5 AND manual_run_at = $6)
  OR (NOT $5 AND date_trunc('second', next_run_at) = $6))`,
		id, runID, status, truncate(errText, 2000), manual, at)
	if err != nil {
		return false, fmt.Errorf("record cron outcome of %s: %w", runID, err)
	}
	return tag.RowsAffected() == 1, nil
}

// StatusDeliveryFailed is the last status of a run whose turn ended but
// whose answer was not delivered (Hermes's delivery_failed).
const StatusDeliveryFailed = "delivery_failed"

// RecordDeliveryFailure records on the job of the run runID (RunID) that
// its answer was not delivered to target ("<platform>:<chat>[:<thread>]",
// as a deliver value names it; "" for a failure of no one target), and
// why (the delivery service gave a message of it up: dead-lettered,
// expired): last_delivery_error, and last_status delivery_failed unless
// the run failed itself (error stays, as Hermes's). A target's failure
// reads "delivery to <target> failed: <reason>", and a run's failures to
// different targets are joined with "; ", as Hermes's _deliver_result
// words and joins them; a later failure to a target recorded for the run
// already (such as the notice that the answer failed), or one of no
// target after any other, is dropped: it says less. As RecordOutcome, it
// applies only to the job's last run or one it has not recorded yet; a
// failure of an older run, or of a removed job, is dropped. False: not
// applied.
func RecordDeliveryFailure(ctx context.Context, db DBTX, runID, target, reason string) (bool, error) {
	id, at, manual, err := ParseRunID(runID)
	if err != nil {
		return false, err
	}
	reason = strings.TrimSpace(reason)
	// mark is what a recorded failure to the same target contains ("",
	// in every text, for a failure of no target).
	var mark string
	switch {
	case target != "":
		mark = "delivery to " + target + " failed"
		if reason != "" {
			reason = mark + ": " + reason
		} else {
			reason = mark
		}
	case reason == "":
		reason = "not delivered"
	}
	tag, err := db.Exec(ctx, `
UPDATE cron_jobs SET
  last_delivery_error = CASE
    WHEN last_run_id <> $2 OR last_delivery_error = '' THEN $3
    WHEN strpos(last_delivery_error, $7) > 0 THEN last_delivery_error
    ELSE left(last_delivery_error || '; ' || $3, $8) END,
  last_status = CASE WHEN last_run_id = $2 AND last_status NOT IN ('', 'ok') THEN last_status ELSE $6 END,
  last_error = CASE WHEN last_run_id = $2 THEN last_error ELSE '' END,
  last_run_id = $2, updated_at = now()
WHERE id = $1 AND (last_run_id = $2
  OR ($4 AND manual_run_at = $5)
  OR (NOT $4 AND date_trunc('second', next_run_at) = $5))`,
		id, runID, truncate(reason, maxDeliveryError), manual, at, StatusDeliveryFailed, mark, maxDeliveryError)
	if err != nil {
		return false, fmt.Errorf("record cron delivery failure of %s: %w", runID, err)
	}
	return tag.RowsAffected() == 1, nil
}

// maxDeliveryError bounds a job's last_delivery_error.
const maxDeliveryError = 2000

// RecordDeliveryFailure is RecordDeliveryFailure on the store's
// database.
func (s *Store) RecordDeliveryFailure(ctx context.Context, runID, target, reason string) (bool, error) {
	return RecordDeliveryFailure(ctx, s.db, runID, target, reason)
}

// RunOfSession is the run (RunID) whose session key is key
// (<ns>:cron:dm:<run id>, the scheduler's runs), or false.
func RunOfSession(key string) (string, bool) {
	parts := strings.Split(key, ":")
	if len(parts) != 5 || parts[2] != "cron" || parts[3] != "dm" {
		return "", false
	}
	if _, _, _, err := ParseRunID(parts[4]); err != nil {
		return "", false
	}
	return parts[4], true
}

// DeleteCompleted deletes completed jobs whose last run (or completion,
// for a one-shot missed without running) is before cutoff, at most limit
// of them, and returns how many. A completed job with a run asked for
// that has not fired yet stays until it has. A run's answer goes by the
// run's message; the row is read again only for the other targets of a
// job with several (a deleted job's run answers in its first target).
func DeleteCompleted(ctx context.Context, db DBTX, cutoff time.Time, limit int) (int64, error) {
	tag, err := db.Exec(ctx, `DELETE FROM cron_jobs WHERE id IN (
  SELECT id FROM cron_jobs WHERE state = 'completed' AND coalesce(last_run_at, updated_at) < $1 AND manual_run_at IS NULL
  LIMIT $2 FOR UPDATE SKIP LOCKED)`, cutoff, limit)
	if err != nil {
		return 0, fmt.Errorf("delete completed cron jobs: %w", err)
	}
	return tag.RowsAffected(), nil
}

// ErrBadRunID: a string that is not a run id.
var ErrBadRunID = errors.New("not a cron run id")

const (
	runStamp       = "20060102_150405"
	manualRunStamp = "20060102_150405.000000"
	manualSuffix   = "_run"
)

// RunID names one run of job id: "<id>_<instant, UTC yyyymmdd_hhmmss>"
// for the run due at at, "<id>_<instant to the microsecond>_run" for a
// run asked for at at. It is the run's event id, chat id and session
// (agent:main:cron:dm:<run id>), the same however often the scheduler
// retries publishing it.
func RunID(id string, at time.Time, manual bool) string {
	if manual {
		return id + "_" + at.UTC().Format(manualRunStamp) + manualSuffix
	}
	return id + "_" + at.UTC().Format(runStamp)
}

// ParseRunID reads a RunID back; a manual run's instant to the second
// (ids from before microseconds) also reads.
func ParseRunID(s string) (id string, at time.Time, manual bool, err error) {
	id, rest, ok := strings.Cut(s, "_")
	if !ok || id == "" {
		return "", time.Time{}, false, fmt.Errorf("%w: %q", ErrBadRunID, s)
	}
	rest, manual = strings.CutSuffix(rest, manualSuffix)
	layout := runStamp
	if manual && len(rest) > len(runStamp) {
		layout = manualRunStamp
	}
	at, err = time.ParseInLocation(layout, rest, time.UTC)
	if err != nil {
		return "", time.Time{}, false, fmt.Errorf("%w: %q", ErrBadRunID, s)
	}
	return id, at, manual, nil
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

// Message is err as a user reads it: without the sentinels' prefixes.
func Message(err error) string {
	m := err.Error()
	for _, p := range []string{ErrInvalid.Error() + ": ", schedule.ErrInvalid.Error() + ": ", ErrAmbiguous.Error() + ": "} {
		m = strings.TrimPrefix(m, p)
	}
	return m
}

// Owner is who owns the jobs made from a chat: "<platform>:<user>" in a
// direct chat (the alternative id when there is one), "session:<key>"
// elsewhere, as the worker's user key (a group's jobs are the session's,
// not one member's).
func Owner(platform, chatType, userID, userIDAlt, sessionKey string) string {
	if chatType != "" && chatType != "dm" {
		return "session:" + sessionKey
	}
	if userIDAlt != "" {
		userID = userIDAlt
	}
	if userID == "" {
		return "session:" + sessionKey
	}
	return platform + ":" + userID
}
