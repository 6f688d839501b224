// Package retention deletes idle sessions with everything that hangs off
// them (history, turns, transcripts and their search index entries,
// summaries, stored prompts, session approvals, finished outbox rows,
// YOLO mode, the records of applied chat commands, standing goals, the
// goal judge's verdicts and the approval judge's denials in a row)
// once their last activity is older than the configured retention, and,
// whatever the retention, the per-turn and per-command records that have
// outlived their use: applied chat commands after CommandEffectsAge, goal
// verdicts after GoalVerdictsAge, the memory writes /memory decided
// (approved, rejected or failed) after MemoryDecisionsAge, and the
// smart-approval judge's counts of denials in a row after
// DenialBreakerAge. Forget deletes one user's data on request (a
// right-to-erasure request): their own sessions, as a prune deletes them,
// and what they own.
//
// Any number of replicas sweep at once: each batch is one transaction
// that locks its sessions' rows with FOR UPDATE SKIP LOCKED, so two
// sweepers take disjoint batches and never wait for each other or for a
// router that is updating a session. A session is never deleted while a
// message waits in its queue, an outbox row of it is still to be sent,
// or its Redis lock is held (a running turn, and with it any approval the
// turn waits for), nor while a fenced transcript write is in flight.
package retention

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
	"github.com/redis/go-redis/v9"

	"github.com/switchboard-chat/switchboard/pkg/config"
	"github.com/switchboard-chat/switchboard/pkg/panics"
	"github.com/switchboard-chat/switchboard/pkg/redisx"
)

// CronPlatform is the platform of cron runs' sessions
// (pkg/cron/scheduler.Platform): each run is a fresh session.
const CronPlatform = "cron"

// Kinds of deleted rows, as the metric and Result name them.
const (
	KindSessions       = "sessions"
	KindHistory        = "session_history"
	KindTurns          = "worker_turns"
	KindTurnAttempts   = "worker_turn_attempts"
	KindMessages       = "transcript_messages"
	KindSummaries      = "transcript_summaries"
	KindPrompts        = "session_prompts"
	KindApprovals      = "tool_approvals"
	KindOutbox         = "delivery_outbox"
	KindStreamMessages = "delivery_stream_messages"
	KindYolo           = "session_yolo"
	KindContext        = "session_context"
	KindCommandEffects = "command_effects"
	KindGoals          = "session_goals"
	KindLoops          = "session_loops"
	KindGoalVerdicts   = "goal_verdicts"
	KindMemoryWrites   = "memory_pending_writes"
	KindDenialBreaker  = "agent_denial_breaker"
)

var (
	deletedRows = promauto.NewCounterVec(prometheus.CounterOpts{
		Name: "switchboard_retention_deleted_rows_total",
		Help: "Rows the session retention deleted, by kind (sessions, session_history, worker_turns, worker_turn_attempts: later attempts' claims of turns, transcript_messages, transcript_summaries, session_prompts, tool_approvals: /approve session approvals and /deny all answers, delivery_outbox, delivery_stream_messages, session_yolo, session_context, command_effects, session_goals, goal_verdicts, session_loops, memory_pending_writes: decided memory writes, agent_denial_breaker: counts of the smart-approval judge's denials in a row; and what forgetting a user deletes of theirs: agent_memories, memory_write_approval, cron_jobs, pairing, telegram_topic_bindings).",
	}, []string{"kind"})
	skipped = promauto.NewCounterVec(prometheus.CounterOpts{
		Name: "switchboard_retention_skipped_total",
		Help: "Expired sessions a batch left for later: lock_held (a turn holds the session's Redis lock), fenced_write (a transcript write of the session is in flight).",
	}, []string{"reason"})
)

// CommandEffectsAge is how long the record of an applied chat command
// (command_effects, sessionstore.Once) is kept when its session is not
// deleted first: far longer than its inbound event can be redelivered
// (an event stays on the bus nats.retention, 24 hours by default), after
// which nothing reads it.
const CommandEffectsAge = 30 * 24 * time.Hour

// GoalVerdictsAge is how long the goal judge's verdict on a turn
// (goal_verdicts, sessionstore.RecordVerdict) is kept when its session
// is not deleted first: it only serves a retry or redelivery of that
// turn, which finds the verdict rather than judging the turn again, and
// a day is far past any of them.
const GoalVerdictsAge = 24 * time.Hour

// MemoryDecisionsAge is how long a memory write the approval gate held
// is kept once /memory decided it (memory_pending_writes approved,
// rejected or failed; pkg/memorygate). Hermes deletes its pending
// record (pending/memory/<id>.json) as soon as it is approved or
// rejected. Here nothing shows a decided row: a redelivered /memory
// approve or reject is answered from its command_effects record
// (CommandEffectsAge), and without it finds no pending write of that
// id, the row there or not. Its one reader is the memory tool's call
// that staged it, run again when another worker resumes its turn: it
// finds the staging by (user_key, turn_id, call_id) rather than stage
// the write anew, and that happens only while the turn is retried,
// minutes after the call (its deliveries are bounded). A week, as
// delivery keeps its sent rows (delivery.sent_retention), is far past
// that and leaves an operator the last days' decisions to read
// (decided_by, result). Undecided writes are never deleted: they wait
// for the user, as Hermes's do.
const MemoryDecisionsAge = 7 * 24 * time.Hour

// DenialBreakerAge is how long a conversation's count of the smart
// -approval judge's denials in a row (agent_denial_breaker, the circuit
// breaker of approvals.denial_breaker_threshold) is kept after its last
// denial when its session is not deleted first. The breaker is for a
// model retrying variations of a denied call, which it does within one
// turn or a few in a row; Hermes keeps the count in memory only, for the
// 256 sessions denied last, and loses it with a restart. A day with no
// denial ends the run: the next denial counts from one.
const DenialBreakerAge = 24 * time.Hour

// ToolDenialsAge is how long a "/deny all" answer (agent_tool_denials:
// the reason the rest of one model answer's calls are denied with) is
// kept when its session is not deleted first. Its one reader is the turn
// that took it, or a worker resuming that turn after the first died
// mid-step, minutes later (a turn's redeliveries are bounded); without
// this, with the session retention off (the default), the rows would
// stay for ever. A day is far past any resumption.
const ToolDenialsAge = 24 * time.Hour

// Config is the `sessions` section.
type Config struct {
	// Retention: idle sessions whose last activity is older are deleted
	// with all their rows. 0 keeps sessions forever (the default, as
	// Hermes's sessions.auto_prune is off by default).
	Retention Age `koanf:"retention"`
	// SweepInterval is how often each router replica sweeps.
	SweepInterval time.Duration `koanf:"sweep_interval"`
	// BatchSize is how many sessions one transaction deletes.
	BatchSize int `koanf:"batch_size"`
}

// DefaultConfig returns the defaults.
func DefaultConfig() Config {
	return Config{SweepInterval: time.Hour, BatchSize: 100}
}

// Validate reports the first invalid value, naming its key.
func (c Config) Validate() error {
	if c.Retention < 0 {
		return config.Invalid("sessions.retention", c.Retention, "0 (keep) or a period such as 90d")
	}
	if c.SweepInterval < time.Second {
		return config.Invalid("sessions.sweep_interval", c.SweepInterval, "at least 1s")
	}
	if c.BatchSize < 1 || c.BatchSize > 10000 {
		return config.Invalid("sessions.batch_size", c.BatchSize, "1 to 10000")
	}
	return nil
}

// Deps are what the sweeper uses.
type Deps struct {
	Log *slog.Logger
	DB  *pgxpool.Pool
	// Redis holds the session locks, under RedisPrefix.
	Redis       redis.Cmdable
	RedisPrefix string
	// Now is the clock; nil is time.Now.
	Now func() time.Time
}

// Sweeper deletes expired sessions.
type Sweeper struct {
	cfg     Config
	cronAge Age
	log     *slog.Logger
	db      *pgxpool.Pool
	rdb     redis.Cmdable
	locker  *redisx.Locker
	now     func() time.Time
}

// New builds a sweeper. cronRetention (cron.session_retention) is the
// retention of cron runs' sessions; 0 gives them cfg.Retention.
func New(cfg Config, cronRetention Age, deps Deps) (*Sweeper, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cronRetention < 0 {
		return nil, config.Invalid("cron.session_retention", cronRetention, "0 or a period such as 7d")
	}
	if deps.DB == nil || deps.Redis == nil {
		return nil, errors.New("retention: database and redis required")
	}
	log := deps.Log
	if log == nil {
		log = slog.Default()
	}
	now := deps.Now
	if now == nil {
		now = time.Now
	}
	return &Sweeper{cfg: cfg, cronAge: cronRetention, log: log.With("component", "retention"), db: deps.DB,
		rdb: deps.Redis, locker: redisx.NewLocker(deps.Redis, deps.RedisPrefix), now: now}, nil
}

// Criteria select the sessions a prune deletes.
type Criteria struct {
	// OlderThan: last activity at least this long ago. Must be positive.
	OlderThan time.Duration
	// Platform limits the prune to one platform ("" any).
	Platform string
	// ExceptPlatform leaves one platform out ("" none); with Platform
	// set it does not apply.
	ExceptPlatform string
	// DryRun runs every batch and rolls it back: the counts are what a
	// prune would delete now, and nothing is deleted.
	DryRun bool
}

// Result counts what a prune deleted (or would have, in a dry run).
type Result struct {
	// Sessions deleted.
	Sessions int64
	// Skipped: expired sessions left for later (lock held, write in flight).
	Skipped int64
	// Rows deleted by kind (KindSessions, KindMessages, …).
	Rows map[string]int64
}

func (r *Result) add(o Result) {
	r.Sessions += o.Sessions
	r.Skipped += o.Skipped
	if r.Rows == nil {
		r.Rows = map[string]int64{}
	}
	for k, v := range o.Rows {
		r.Rows[k] += v
	}
}

// Policies are the prunes a sweep runs: cron sessions on their own
// retention (the shorter one when both are set), the others on
// sessions.retention.
func (s *Sweeper) Policies() []Criteria {
	var out []Criteria
	if r := s.cfg.Retention.Duration(); r > 0 {
		out = append(out, Criteria{OlderThan: r, ExceptPlatform: CronPlatform})
	}
	cron := s.cronAge.Duration()
	if r := s.cfg.Retention.Duration(); r > 0 && (cron == 0 || r < cron) {
		cron = r
	}
	if cron > 0 {
		out = append(out, Criteria{OlderThan: cron, Platform: CronPlatform})
	}
	return out
}

// Run sweeps at once and then every sweep interval until ctx ends. With
// no retention configured a sweep only deletes old command records,
// goal verdicts and decided memory writes.
func (s *Sweeper) Run(ctx context.Context) error {
	t := time.NewTicker(s.cfg.SweepInterval)
	defer t.Stop()
	for {
		// A panic in a sweep is recovered and counted, and the sweep is
		// tried again next interval like a failed one: its open batch
		// rolls back, every session it did not delete is still there.
		err := panics.Recover(s.log, "retention_sweep", func() error { _, err := s.Sweep(ctx); return err })
		if err != nil && ctx.Err() == nil {
			s.log.Warn("session retention sweep failed; trying again next interval", "err", err)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// aged are the records deleted on their own once older than their age,
// whether or not their session is kept: each statement deletes up to $2
// rows created (a memory write: decided) before $1, by an index on
// that column.
var aged = []struct {
	kind, sql string
	age       time.Duration
}{
	{KindCommandEffects, `DELETE FROM command_effects WHERE event_id IN
		(SELECT event_id FROM command_effects WHERE created_at < $1 LIMIT $2)`, CommandEffectsAge},
	{KindGoalVerdicts, `DELETE FROM goal_verdicts WHERE turn_id IN
		(SELECT turn_id FROM goal_verdicts WHERE created_at < $1 LIMIT $2)`, GoalVerdictsAge},
	// By memory_pending_writes_decided_idx (migration 00212), whose
	// predicate is the query's: pending writes are never read.
	{KindMemoryWrites, `DELETE FROM memory_pending_writes WHERE (user_key, id) IN
		(SELECT user_key, id FROM memory_pending_writes WHERE state <> 'pending' AND decided_at < $1 LIMIT $2)`, MemoryDecisionsAge},
	// By agent_tool_denials_created_idx (migration 00214).
	{KindApprovals, `DELETE FROM agent_tool_denials WHERE (turn_id, call_id) IN
		(SELECT turn_id, call_id FROM agent_tool_denials WHERE created_at < $1 LIMIT $2)`, ToolDenialsAge},
	// By agent_denial_breaker_updated_idx (migration 00213).
	{KindDenialBreaker, `DELETE FROM agent_denial_breaker WHERE session_id IN
		(SELECT session_id FROM agent_denial_breaker WHERE updated_at < $1 LIMIT $2)`, DenialBreakerAge},
}

// Sweep runs every policy once, then deletes the command records older
// than CommandEffectsAge, the goal verdicts older than GoalVerdictsAge,
// the memory writes decided more than MemoryDecisionsAge ago, the "/deny
// all" answers older than ToolDenialsAge and the judge's denial counts
// untouched for DenialBreakerAge.
func (s *Sweeper) Sweep(ctx context.Context) (Result, error) {
	var total Result
	for _, c := range s.Policies() {
		r, err := s.Prune(ctx, c)
		total.add(r)
		if err != nil {
			return total, err
		}
	}
	for _, a := range aged {
		n, err := s.pruneAged(ctx, a.kind, a.sql, s.now().Add(-a.age))
		total.add(Result{Rows: map[string]int64{a.kind: n}})
		if err != nil {
			return total, err
		}
	}
	return total, nil
}

// pruneAged deletes the records of kind older than cutoff (of sessions
// still kept), a batch at a time.
func (s *Sweeper) pruneAged(ctx context.Context, kind, sql string, cutoff time.Time) (int64, error) {
	var total int64
	for {
		tag, err := s.db.Exec(ctx, sql, cutoff, s.cfg.BatchSize)
		if err != nil {
			return total, fmt.Errorf("retention: delete old %s: %w", kind, err)
		}
		total += tag.RowsAffected()
		deletedRows.WithLabelValues(kind).Add(float64(tag.RowsAffected()))
		if tag.RowsAffected() < int64(s.cfg.BatchSize) {
			return total, nil
		}
	}
}

// Prune deletes the sessions c selects, a batch per transaction, walking
// the keys in order so that each is looked at once per call.
func (s *Sweeper) Prune(ctx context.Context, c Criteria) (Result, error) {
	if c.OlderThan <= 0 {
		return Result{}, errors.New("prune: older-than must be positive")
	}
	total := Result{Rows: map[string]int64{}}
	cutoff := s.now().Add(-c.OlderThan)
	after := ""
	for {
		r, last, n, err := s.batch(ctx, c, cutoff, after)
		total.add(r)
		if err != nil {
			return total, err
		}
		if n < s.cfg.BatchSize {
			return total, nil
		}
		after = last
	}
}

// candidatesSQL picks a batch of expired sessions after a key and locks
// their rows, skipping rows another transaction holds (a router updating
// the session, another sweeper's batch). A session with a queued message
// or an outbox row still to send is no candidate. Last activity is the
// later of the last message's arrival and the last change of the row
// (turn starts, resets, usage). The platform condition is written into
// the text rather than made optional with a parameter, so that the plan
// can use the (platform, session_key) index.
func candidatesSQL(c Criteria) string {
	where := ""
	switch {
	case c.Platform != "":
		where = "AND s.platform = $4"
	case c.ExceptPlatform != "":
		where = "AND s.platform <> $4"
	}
	return `
SELECT s.session_key FROM sessions s
WHERE s.session_key > $1
  ` + where + `
  AND greatest(s.last_activity_at, s.updated_at) < $2
  AND NOT EXISTS (SELECT 1 FROM session_queue q WHERE q.session_key = s.session_key)
  AND NOT EXISTS (SELECT 1 FROM delivery_outbox o
                  WHERE o.session_key = s.session_key AND o.session_key <> '' AND o.state IN ('queued', 'sending'))
ORDER BY s.session_key
LIMIT $3
FOR UPDATE OF s SKIP LOCKED`
}

// fenceSQL keeps the keys whose generation advisory lock (the class of
// switchboard_fence, migration 00203) it can take at once: no fenced
// transcript write of the session is in flight, and none starts before
// the batch commits (it then finds the session gone and fails its fence).
const fenceSQL = `SELECT k FROM unnest($1::text[]) AS k WHERE pg_try_advisory_xact_lock(21314, hashtext(k))`

// deletes are the batch's statements in order: rows found through the
// session's turns and conversations first, then the turns, the history
// and the session rows. $1 is the keys, $2 every conversation (session
// id) they have had.
var deletes = []struct{ kind, sql string }{
	{KindStreamMessages, `DELETE FROM delivery_stream_messages WHERE turn_id IN
		(SELECT turn_id FROM worker_turns WHERE session_key = ANY($1))`},
	{KindOutbox, `DELETE FROM delivery_outbox WHERE session_key = ANY($1) AND session_key <> '' AND state IN ('sent', 'failed', 'expired')`},
	{KindApprovals, `DELETE FROM agent_tool_approvals WHERE scope = 'session' AND subject = ANY($2) AND $1::text[] IS NOT NULL`},
	{KindApprovals, `DELETE FROM agent_tool_denials WHERE session_id = ANY($2) AND $1::text[] IS NOT NULL`},
	{KindDenialBreaker, `DELETE FROM agent_denial_breaker WHERE session_id = ANY($2) AND $1::text[] IS NOT NULL`},
	{KindMessages, `DELETE FROM transcript_messages WHERE session_id = ANY($2) AND session_key = ANY($1)`},
	{KindSummaries, `DELETE FROM transcript_summaries WHERE session_id = ANY($2) AND session_key = ANY($1)`},
	{KindPrompts, `DELETE FROM session_prompts WHERE session_id = ANY($2) AND session_key = ANY($1)`},
	{KindTurns, `DELETE FROM worker_turns WHERE session_key = ANY($1)`},
	{KindTurnAttempts, `DELETE FROM worker_turn_attempts WHERE session_key = ANY($1)`},
	{KindYolo, `DELETE FROM session_yolo WHERE session_key = ANY($1)`},
	{KindContext, `DELETE FROM session_context WHERE session_key = ANY($1)`},
	{KindCommandEffects, `DELETE FROM command_effects WHERE session_key = ANY($1)`},
	{KindGoals, `DELETE FROM session_goals WHERE session_key = ANY($1)`},
	{KindLoops, `DELETE FROM session_loops WHERE session_key = ANY($1)`},
	{KindGoalVerdicts, `DELETE FROM goal_verdicts WHERE session_key = ANY($1)`},
	{KindHistory, `DELETE FROM session_history WHERE session_key = ANY($1)`},
	{KindSessions, `DELETE FROM sessions WHERE session_key = ANY($1)`},
}

// batch deletes up to BatchSize sessions in one transaction. n is how
// many candidates it locked and last the greatest key it looked at.
func (s *Sweeper) batch(ctx context.Context, c Criteria, cutoff time.Time, after string) (res Result, last string, n int, err error) {
	tx, err := s.db.Begin(ctx)
	if err != nil {
		return res, after, 0, fmt.Errorf("retention: begin: %w", err)
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	// A batch never waits long on a row or a lock: it skips locked rows,
	// and anything else slow is a reason to give up and try next time.
	if _, err := tx.Exec(ctx, `SET LOCAL lock_timeout = '2s'`); err != nil {
		return res, after, 0, fmt.Errorf("retention: %w", err)
	}
	args := []any{after, cutoff, s.cfg.BatchSize}
	switch {
	case c.Platform != "":
		args = append(args, c.Platform)
	case c.ExceptPlatform != "":
		args = append(args, c.ExceptPlatform)
	}
	rows, err := tx.Query(ctx, candidatesSQL(c), args...)
	if err != nil {
		return res, after, 0, fmt.Errorf("retention: select expired sessions: %w", err)
	}
	var keys []string
	for rows.Next() {
		var k string
		if err := rows.Scan(&k); err != nil {
			rows.Close()
			return res, after, 0, fmt.Errorf("retention: read expired sessions: %w", err)
		}
		keys = append(keys, k)
	}
	if err := rows.Err(); err != nil {
		return res, after, 0, fmt.Errorf("retention: select expired sessions: %w", err)
	}
	n, last = len(keys), after
	if n == 0 {
		return res, last, 0, nil
	}
	last = keys[n-1]

	keys, left, deleted, err := s.deleteSessions(ctx, tx, keys, c.DryRun)
	res.Skipped = int64(left)
	if err != nil || len(keys) == 0 {
		return res, last, n, err
	}
	res.Rows = deleted
	res.Sessions = res.Rows[KindSessions]
	if c.DryRun {
		return res, last, n, nil // the deferred rollback undoes it
	}
	if err := tx.Commit(ctx); err != nil {
		return Result{Skipped: res.Skipped}, last, n, fmt.Errorf("retention: commit: %w", err)
	}
	for k, v := range res.Rows {
		deletedRows.WithLabelValues(k).Add(float64(v))
	}
	s.log.Info("session retention batch deleted",
		"sessions", res.Sessions, "skipped", res.Skipped, "older_than", Age(c.OlderThan).String(),
		"platform", c.Platform, "except_platform", c.ExceptPlatform,
		"transcript_messages", res.Rows[KindMessages], "worker_turns", res.Rows[KindTurns],
		"delivery_outbox", res.Rows[KindOutbox], "first_key", keys[0], "last_key", keys[len(keys)-1])
	return res, last, n, nil
}

// deleteSessions deletes, in tx, the sessions of keys (whose rows tx
// holds) with everything that hangs off them (deletes), except those a
// fenced transcript write or a turn (its Redis lock) holds: deleted are
// the keys it deleted, left how many it did not. A dry run counts the
// skips without the metric; the caller's rollback undoes the rest.
func (s *Sweeper) deleteSessions(ctx context.Context, tx pgx.Tx, keys []string, dryRun bool) (deleted []string, left int, rows map[string]int64, err error) {
	n := len(keys)
	keys, err = s.unfenced(ctx, tx, keys)
	if err != nil {
		return nil, 0, nil, err
	}
	fenced := n - len(keys)
	keys, held, err := s.unlocked(ctx, keys)
	if err != nil {
		return nil, 0, nil, err
	}
	if !dryRun {
		skipped.WithLabelValues("fenced_write").Add(float64(fenced))
		skipped.WithLabelValues("lock_held").Add(float64(held))
	}
	if len(keys) == 0 {
		return nil, fenced + held, nil, nil
	}
	// Every conversation the keys have had: the history lists them, the
	// current one and any a turn ran in are added in case it does not.
	var ids []string
	if err := tx.QueryRow(ctx, `SELECT coalesce(array_agg(DISTINCT id), '{}') FROM (
			SELECT session_id AS id FROM session_history WHERE session_key = ANY($1)
			UNION SELECT session_id FROM sessions WHERE session_key = ANY($1)
			UNION SELECT session_id FROM worker_turns WHERE session_key = ANY($1)) x`, keys).Scan(&ids); err != nil {
		return nil, fenced + held, nil, fmt.Errorf("retention: list conversations: %w", err)
	}
	rows = map[string]int64{}
	for _, d := range deletes {
		args := []any{keys, ids}
		if !strings.Contains(d.sql, "$2") {
			args = args[:1]
		}
		tag, err := tx.Exec(ctx, d.sql, args...)
		if err != nil {
			return nil, fenced + held, nil, fmt.Errorf("retention: delete %s: %w", d.kind, err)
		}
		rows[d.kind] += tag.RowsAffected()
	}
	return keys, fenced + held, rows, nil
}

// unfenced keeps the keys whose generation advisory lock the
// transaction took.
func (s *Sweeper) unfenced(ctx context.Context, tx pgx.Tx, keys []string) ([]string, error) {
	rows, err := tx.Query(ctx, fenceSQL, keys)
	if err != nil {
		return nil, fmt.Errorf("retention: take fences: %w", err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("retention: take fences: %w", err)
	}
	return out, nil
}

// unlocked drops the keys whose Redis session lock is held: a turn runs
// (or was just granted), and with it any approval it waits for. Checked
// while the batch holds the rows: a turn that takes the lock afterwards
// waits for the row to start and then finds the session gone.
func (s *Sweeper) unlocked(ctx context.Context, keys []string) (free []string, held int, err error) {
	pipe := s.rdb.Pipeline()
	cmds := make([]*redis.IntCmd, len(keys))
	for i, k := range keys {
		cmds[i] = pipe.Exists(ctx, s.locker.Key(k))
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return nil, 0, fmt.Errorf("retention: read session locks: %w", err)
	}
	for i, k := range keys {
		if cmds[i].Val() > 0 {
			held++
			continue
		}
		free = append(free, k)
	}
	return free, held, nil
}
