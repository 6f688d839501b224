package retention_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/switchboard-chat/switchboard/pkg/config"
	"github.com/switchboard-chat/switchboard/pkg/cron/scheduler"
	eventsv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/events/v1"
	"github.com/switchboard-chat/switchboard/pkg/pg/pgtest"
	"github.com/switchboard-chat/switchboard/pkg/redisx"
	"github.com/switchboard-chat/switchboard/pkg/redisx/redistest"
	"github.com/switchboard-chat/switchboard/pkg/retention"
	"github.com/switchboard-chat/switchboard/pkg/sessionstore"
)

const day = 24 * time.Hour

// ns begins the session keys the sweeping tests seed: an agent name of
// this test binary's own. The fence's advisory locks belong to the
// database, not to a test's schema, so a test of another package writing
// a transcript of agent:main:telegram:dm:1 at that moment would hold the
// lock of this package's session of that key, and the sweep would skip it.
var ns = fmt.Sprintf("agent:rt%d:", time.Now().UnixNano()%1e9)

// tables a session's rows live in, with how to count one key's rows.
var tables = map[string]string{
	"sessions":                 `SELECT count(*) FROM sessions WHERE session_key = $1`,
	"session_history":          `SELECT count(*) FROM session_history WHERE session_key = $1`,
	"session_queue":            `SELECT count(*) FROM session_queue WHERE session_key = $1`,
	"worker_turns":             `SELECT count(*) FROM worker_turns WHERE session_key = $1`,
	"worker_turn_attempts":     `SELECT count(*) FROM worker_turn_attempts WHERE session_key = $1`,
	"transcript_messages":      `SELECT count(*) FROM transcript_messages WHERE session_key = $1`,
	"transcript_summaries":     `SELECT count(*) FROM transcript_summaries WHERE session_key = $1`,
	"session_prompts":          `SELECT count(*) FROM session_prompts WHERE session_key = $1`,
	"agent_tool_approvals":     `SELECT count(*) FROM agent_tool_approvals WHERE subject IN ('c1-' || $1, 'c2-' || $1)`,
	"delivery_outbox":          `SELECT count(*) FROM delivery_outbox WHERE session_key = $1`,
	"delivery_stream_messages": `SELECT count(*) FROM delivery_stream_messages WHERE turn_id LIKE 't%-' || $1`,
	"session_yolo":             `SELECT count(*) FROM session_yolo WHERE session_key = $1`,
	"command_effects":          `SELECT count(*) FROM command_effects WHERE session_key = $1`,
	"session_goals":            `SELECT count(*) FROM session_goals WHERE session_key = $1`,
	"goal_verdicts":            `SELECT count(*) FROM goal_verdicts WHERE session_key = $1`,
	"session_loops":            `SELECT count(*) FROM session_loops WHERE session_key = $1`,
	"agent_denial_breaker":     `SELECT count(*) FROM agent_denial_breaker WHERE session_id IN ('c1-' || $1, 'c2-' || $1)`,
}

// seed writes a session idle for age with two conversations, a turn in
// each, transcript messages (searchable), a summary, a prompt, a session
// approval, a sent outbox row, a streamed message, YOLO mode, the
// record of an applied chat command and a goal judge's verdict.
func seed(t *testing.T, db *pgxpool.Pool, key, platform string, age time.Duration) {
	t.Helper()
	ctx := context.Background()
	at := time.Now().Add(-age)
	stmts := []string{
		`INSERT INTO sessions (session_key, session_id, platform, created_at, updated_at, last_activity_at)
			VALUES ($1, 'c2-' || $1, $2, $3, $3, $3)`,
		`INSERT INTO session_history (session_key, session_id, started_at) VALUES ($1, 'c1-' || $1, $3), ($1, 'c2-' || $1, $3)`,
		`INSERT INTO worker_turns (turn_id, session_key, session_id, generation, status, started_at, updated_at)
			VALUES ('t1-' || $1, $1, 'c1-' || $1, 1, 'completed', $3, $3), ('t2-' || $1, $1, 'c2-' || $1, 2, 'completed', $3, $3)`,
		`INSERT INTO worker_turn_attempts (turn_id, session_key, attempt, locked_at, claimed_at) VALUES ('t2-' || $1, $1, 2, $3, $3)`,
		`INSERT INTO transcript_messages (session_key, session_id, turn_id, generation, step, role, content, created_at)
			VALUES ($1, 'c1-' || $1, 't1-' || $1, 1, 0, 'user', 'hello marmalade', $3),
			       ($1, 'c2-' || $1, 't2-' || $1, 2, 0, 'user', 'hello again', $3)`,
		`INSERT INTO transcript_summaries (session_id, session_key, upto_id, summary, turn_id, generation, created_at)
			VALUES ('c1-' || $1, $1, 1, 'summary', 't1-' || $1, 1, $3)`,
		`INSERT INTO session_prompts (session_id, session_key, signature, prompt, updated_at) VALUES ('c2-' || $1, $1, 's', 'p', $3)`,
		`INSERT INTO agent_tool_approvals (scope, subject, pattern, created_at) VALUES ('session', 'c1-' || $1, 'terminal', $3)`,
		`INSERT INTO delivery_outbox (idempotency_key, state, platform, chat_key, session_key, turn_id, payload,
				next_attempt_at, expires_at, created_at, updated_at)
			VALUES ('sent-' || $1, 'sent', $2, $1, $1, 't2-' || $1, '\x00', $3, $3, $3, $3)`,
		`INSERT INTO delivery_stream_messages (turn_id, message_index, platform_message_id, created_at) VALUES ('t2-' || $1, 0, 'm', $3)`,
		`INSERT INTO session_yolo (session_key, set_at) VALUES ($1, $3)`,
		`INSERT INTO session_goals (session_key, session_id, goal, status, max_turns, created_at, updated_at)
			VALUES ($1, 'c2-' || $1, 'ship it', 'paused', 20, $3, $3)`,
		`INSERT INTO session_loops (session_key, kind, id, session_id, prompt, status, interval_ms, next_due_at, template, created_at, updated_at)
			VALUES ($1, 'loop', 'l', 'c2-' || $1, 'check', 'active', 60000, $3, '\x', $3, $3)`,
	}
	for _, q := range stmts {
		args := []any{key, platform, at}
		if !strings.Contains(q, "$2") {
			q, args = strings.ReplaceAll(q, "$3", "$2"), []any{key, at}
		}
		if _, err := db.Exec(ctx, q, args...); err != nil {
			t.Fatalf("seed %s: %v\n%s", key, err, q)
		}
	}
	// A command (/new) of the last few days, when the session was last
	// active.
	if _, err := db.Exec(ctx, `INSERT INTO command_effects (event_id, session_key, answer, created_at) VALUES ('telegram:bot:new-' || $1, $1, 'x', $2)`,
		key, time.Now().Add(-min(age, 3*day))); err != nil {
		t.Fatal(err)
	}
	// The goal judge's verdict on a turn of the last hour.
	if _, err := db.Exec(ctx, `INSERT INTO goal_verdicts (turn_id, session_key, verdict, reason, message, continued, created_at)
		VALUES ('t2-' || $1, $1, 'continue', 'r', 'm', true, $2)`, key, time.Now().Add(-min(age, time.Hour))); err != nil {
		t.Fatal(err)
	}
	// The approval judge's denials in a row, the last of the last hour.
	if _, err := db.Exec(ctx, `INSERT INTO agent_denial_breaker (session_id, denials, turn_id, call_id, updated_at)
		VALUES ('c2-' || $1, 2, 't2-' || $1, 'call_0', $2)`, key, time.Now().Add(-min(age, time.Hour))); err != nil {
		t.Fatal(err)
	}
}

func counts(t *testing.T, db *pgxpool.Pool, key string) map[string]int {
	t.Helper()
	out := map[string]int{}
	for name, q := range tables {
		var n int
		if err := db.QueryRow(context.Background(), q, key).Scan(&n); err != nil {
			t.Fatalf("count %s: %v", name, err)
		}
		out[name] = n
	}
	return out
}

func sweeper(t *testing.T, db *pgxpool.Pool, cfg retention.Config, cron retention.Age) (*retention.Sweeper, func(key string) (release func())) {
	t.Helper()
	rdb, prefix := redistest.New(t)
	s, err := retention.New(cfg, cron, retention.Deps{DB: db, Redis: rdb, RedisPrefix: prefix, Log: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	// hold takes the session's lock as the router does for a turn;
	// release ends it.
	hold := func(key string) (release func()) {
		locker := redisx.NewLocker(rdb, prefix)
		if ok, err := locker.Acquire(context.Background(), key, redisx.NewGrant(time.Now()), time.Minute); err != nil || !ok {
			t.Fatalf("take the lock of %s: %v %v", key, ok, err)
		}
		return func() {
			if err := rdb.Del(context.Background(), locker.Key(key)).Err(); err != nil {
				t.Fatalf("release the lock of %s: %v", key, err)
			}
		}
	}
	return s, hold
}

func TestCronPlatformIsTheSchedulers(t *testing.T) {
	if retention.CronPlatform != scheduler.Platform {
		t.Fatalf("retention.CronPlatform %q, scheduler.Platform %q", retention.CronPlatform, scheduler.Platform)
	}
}

func TestSweep(t *testing.T) {
	ctx := context.Background()
	db := pgtest.New(t)
	cfg := retention.DefaultConfig()
	cfg.Retention = retention.Age(90 * day)
	cfg.BatchSize = 2 // several batches
	s, hold := sweeper(t, db, cfg, retention.Age(7*day))

	cases := []struct {
		name     string
		key      string
		platform string
		age      time.Duration
		setup    func(key string)
		deleted  bool
	}{
		{name: "old idle session", key: ns + "telegram:dm:1", platform: "telegram", age: 100 * day, deleted: true},
		{name: "recent session", key: ns + "telegram:dm:2", platform: "telegram", age: 30 * day},
		{name: "queued message", key: ns + "telegram:dm:3", platform: "telegram", age: 100 * day, setup: func(key string) {
			if _, err := db.Exec(ctx, `INSERT INTO session_queue (session_key, stream_seq, event_id, event) VALUES ($1, 1, 'e1', '\x00')`, key); err != nil {
				t.Fatal(err)
			}
		}},
		{name: "held lock", key: ns + "telegram:dm:4", platform: "telegram", age: 100 * day, setup: func(key string) { hold(key) }},
		{name: "undelivered outbox row", key: ns + "telegram:dm:5", platform: "telegram", age: 100 * day, setup: func(key string) {
			if _, err := db.Exec(ctx, `INSERT INTO delivery_outbox (idempotency_key, state, platform, chat_key, session_key, payload,
					next_attempt_at, expires_at, created_at, updated_at) VALUES ('q-' || $1, 'queued', 'telegram', $1, $1, '\x00', now(), now(), now(), now())`, key); err != nil {
				t.Fatal(err)
			}
		}},
		{name: "sending outbox row", key: ns + "telegram:dm:6", platform: "telegram", age: 100 * day, setup: func(key string) {
			if _, err := db.Exec(ctx, `INSERT INTO delivery_outbox (idempotency_key, state, platform, chat_key, session_key, payload,
					next_attempt_at, expires_at, created_at, updated_at) VALUES ('s-' || $1, 'sending', 'telegram', $1, $1, '\x00', now(), now(), now(), now())`, key); err != nil {
				t.Fatal(err)
			}
		}},
		{name: "old cron run", key: ns + "cron:dm:job1_20260101T000000Z", platform: "cron", age: 8 * day, deleted: true},
		{name: "recent cron run", key: ns + "cron:dm:job1_20260102T000000Z", platform: "cron", age: 6 * day},
		{name: "chat as old as a pruned cron run", key: ns + "telegram:dm:7", platform: "telegram", age: 8 * day},
		{name: "row changed recently", key: ns + "telegram:dm:8", platform: "telegram", age: 100 * day, setup: func(key string) {
			if _, err := db.Exec(ctx, `UPDATE sessions SET updated_at = now() WHERE session_key = $1`, key); err != nil {
				t.Fatal(err)
			}
		}},
	}
	for _, c := range cases {
		seed(t, db, c.key, c.platform, c.age)
		if c.setup != nil {
			c.setup(c.key)
		}
	}
	res, err := s.Sweep(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := counts(t, db, c.key)
			for table, n := range got {
				if c.deleted && n != 0 {
					t.Errorf("%s: %d rows left", table, n)
				}
				if !c.deleted && n == 0 && table != "session_queue" && !(table == "delivery_outbox") {
					t.Errorf("%s: rows deleted from a kept session", table)
				}
			}
			if !c.deleted && got["sessions"] != 1 {
				t.Errorf("session deleted")
			}
		})
	}
	if res.Sessions != 2 || res.Skipped != 1 {
		t.Errorf("result %+v, want 2 sessions deleted and 1 skipped (the held lock)", res)
	}
	want := map[string]int64{retention.KindSessions: 2, retention.KindHistory: 4, retention.KindTurns: 4, retention.KindMessages: 4,
		retention.KindSummaries: 2, retention.KindPrompts: 2, retention.KindApprovals: 2, retention.KindOutbox: 2, retention.KindStreamMessages: 2,
		retention.KindYolo: 2, retention.KindCommandEffects: 2, retention.KindGoals: 2, retention.KindGoalVerdicts: 2,
		retention.KindLoops: 2, retention.KindDenialBreaker: 2, retention.KindTurnAttempts: 2}
	for k, v := range want {
		if res.Rows[k] != v {
			t.Errorf("rows %s = %d, want %d", k, res.Rows[k], v)
		}
	}
	// The search index answers nothing of a deleted transcript.
	var n int
	if err := db.QueryRow(ctx, `SELECT count(*) FROM transcript_messages WHERE to_tsvector('simple', content) @@ to_tsquery('simple', 'marmalade')`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 8 { // the eight kept sessions' first messages
		t.Errorf("search finds %d messages, want 8", n)
	}
}

// The record of an applied chat command is deleted with its session, and
// on its own once older than CommandEffectsAge (no redelivery of its
// event can come), also with session retention off.
func TestSweepDeletesOldCommandRecords(t *testing.T) {
	ctx := context.Background()
	db := pgtest.New(t)
	cfg := retention.DefaultConfig()
	cfg.BatchSize = 2 // several batches
	s, _ := sweeper(t, db, cfg, 0)
	key := ns + "telegram:dm:1"
	seed(t, db, key, "telegram", 1000*day)
	for i, age := range []time.Duration{retention.CommandEffectsAge + time.Hour, retention.CommandEffectsAge + day, 40 * day, day, 0} {
		if _, err := db.Exec(ctx, `INSERT INTO command_effects (event_id, session_key, answer, created_at) VALUES ($1, $2, 'x', $3)`,
			fmt.Sprintf("telegram:bot:e%d", i), key, time.Now().Add(-age)); err != nil {
			t.Fatal(err)
		}
	}
	res, err := s.Sweep(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if got := res.Rows[retention.KindCommandEffects]; got != 3 {
		t.Errorf("deleted %d command records, want the 3 older than %v", got, retention.CommandEffectsAge)
	}
	if c := counts(t, db, key); c["command_effects"] != 3 || c["sessions"] != 1 {
		t.Errorf("left %d command records and %d sessions, want the 3 recent records and the session", c["command_effects"], c["sessions"])
	}
}

// The goal judge's verdict on a turn is deleted with its session, and on
// its own once older than GoalVerdictsAge (a day: no retry of its turn
// comes that late), also with session retention off.
func TestSweepDeletesOldGoalVerdicts(t *testing.T) {
	ctx := context.Background()
	db := pgtest.New(t)
	cfg := retention.DefaultConfig()
	cfg.BatchSize = 2 // several batches
	s, _ := sweeper(t, db, cfg, 0)
	key := ns + "telegram:dm:1"
	seed(t, db, key, "telegram", 1000*day)
	ages := []time.Duration{retention.GoalVerdictsAge + time.Minute, retention.GoalVerdictsAge + day, 40 * day,
		retention.GoalVerdictsAge - time.Minute, time.Minute}
	for i, age := range ages {
		if _, err := db.Exec(ctx, `INSERT INTO goal_verdicts (turn_id, session_key, verdict, reason, message, continued, created_at)
			VALUES ($1, $2, 'continue', 'r', 'm', true, $3)`, fmt.Sprintf("v%d", i), key, time.Now().Add(-age)); err != nil {
			t.Fatal(err)
		}
	}
	res, err := s.Sweep(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if got := res.Rows[retention.KindGoalVerdicts]; got != 3 {
		t.Errorf("deleted %d goal verdicts, want the 3 older than %v", got, retention.GoalVerdictsAge)
	}
	// Left: the two recent ones and the seed's, of the last hour.
	if c := counts(t, db, key); c["goal_verdicts"] != 3 || c["sessions"] != 1 {
		t.Errorf("left %d goal verdicts and %d sessions, want the 3 recent verdicts and the session", c["goal_verdicts"], c["sessions"])
	}
}

// Records only a turn's retries read go on their own once older than
// their age, also with session retention off, a batch at a time; younger
// ones stay: the smart-approval judge's count of denials in a row (a
// DenialBreakerAge after the last denial; deleted with its session
// too) and "/deny all" answers (a ToolDenialsAge after they were given).
func TestSweepDeletesAgedTurnRecords(t *testing.T) {
	for _, tc := range []struct {
		name, insert, count, kind string
		age                       time.Duration
	}{
		{"judge denial counts", `INSERT INTO agent_denial_breaker (session_id, denials, turn_id, call_id, updated_at)
			VALUES ($1, 3, 't', 'call_0', $2)`, `SELECT count(*) FROM agent_denial_breaker WHERE session_id = $1`,
			retention.KindDenialBreaker, retention.DenialBreakerAge},
		{"deny all answers", `INSERT INTO agent_tool_denials (turn_id, call_id, session_id, reason, created_at)
			VALUES ($1, 'call_0', 'sid', 'not now', $2)`, `SELECT count(*) FROM agent_tool_denials WHERE turn_id = $1`,
			retention.KindApprovals, retention.ToolDenialsAge},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			db := pgtest.New(t)
			cfg := retention.DefaultConfig()
			cfg.BatchSize = 2 // several batches
			s, _ := sweeper(t, db, cfg, 0)
			ages := []struct {
				ago  time.Duration
				kept bool
			}{
				{tc.age + time.Minute, false},
				{tc.age + day, false},
				{40 * day, false},
				{tc.age - time.Minute, true},
				{time.Minute, true},
			}
			for i, a := range ages {
				if _, err := db.Exec(ctx, tc.insert, fmt.Sprintf("id-%d", i), time.Now().Add(-a.ago)); err != nil {
					t.Fatal(err)
				}
			}
			res, err := s.Sweep(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if got := res.Rows[tc.kind]; got != 3 {
				t.Errorf("deleted %d rows, want the 3 older than %v", got, tc.age)
			}
			for i, a := range ages {
				var n int
				if err := db.QueryRow(ctx, tc.count, fmt.Sprintf("id-%d", i)).Scan(&n); err != nil {
					t.Fatal(err)
				}
				if (n == 1) != a.kept {
					t.Errorf("a row %v old: kept %v, want %v", a.ago, n == 1, a.kept)
				}
			}
		})
	}
}

// The delete of old "/deny all" answers finds them by the index of
// migration 00214, not by reading the table.
func TestToolDenialsDeleteUsesIndex(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	const del = `DELETE FROM agent_tool_denials WHERE (turn_id, call_id) IN
		(SELECT turn_id, call_id FROM agent_tool_denials WHERE created_at < $1 LIMIT $2)`
	if p := pgtest.EmptyTablePlan(t, db, del, time.Now().Add(-retention.ToolDenialsAge), 100); !strings.Contains(p, "agent_tool_denials_created_idx") {
		t.Errorf("the delete does not use agent_tool_denials_created_idx:\n%s", p)
	}
}

func TestRetentionOffKeepsEverything(t *testing.T) {
	db := pgtest.New(t)
	s, _ := sweeper(t, db, retention.DefaultConfig(), 0)
	seed(t, db, ns+"telegram:dm:1", "telegram", 1000*day)
	seed(t, db, ns+"cron:dm:j_1", "cron", 1000*day)
	if p := s.Policies(); len(p) != 0 {
		t.Fatalf("policies %+v with retention off", p)
	}
	if _, err := s.Sweep(context.Background()); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{ns + "telegram:dm:1", ns + "cron:dm:j_1"} {
		if c := counts(t, db, k); c["sessions"] != 1 || c["session_history"] != 2 {
			t.Errorf("%s deleted", k)
		}
	}
}

func TestPolicies(t *testing.T) {
	db := pgtest.New(t)
	cases := []struct {
		name       string
		retention  retention.Age
		cron       retention.Age
		wantAll    time.Duration
		wantCron   time.Duration
		wantNumber int
	}{
		{"off", 0, 0, 0, 0, 0},
		{"cron only (the default)", 0, retention.Age(7 * day), 0, 7 * day, 1},
		{"both", retention.Age(90 * day), retention.Age(7 * day), 90 * day, 7 * day, 2},
		{"cron longer than sessions", retention.Age(3 * day), retention.Age(7 * day), 3 * day, 3 * day, 2},
		{"sessions only: cron follows", retention.Age(30 * day), 0, 30 * day, 30 * day, 2},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cfg := retention.DefaultConfig()
			cfg.Retention = c.retention
			s, _ := sweeper(t, db, cfg, c.cron)
			p := s.Policies()
			if len(p) != c.wantNumber {
				t.Fatalf("policies %+v", p)
			}
			for _, q := range p {
				switch {
				case q.Platform == retention.CronPlatform && q.OlderThan != c.wantCron,
					q.ExceptPlatform == retention.CronPlatform && q.OlderThan != c.wantAll:
					t.Errorf("policy %+v", q)
				}
			}
		})
	}
}

func TestPruneDryRunAndPlatform(t *testing.T) {
	ctx := context.Background()
	db := pgtest.New(t)
	s, _ := sweeper(t, db, retention.DefaultConfig(), 0)
	seed(t, db, ns+"telegram:dm:1", "telegram", 100*day)
	seed(t, db, ns+"discord:dm:1", "discord", 100*day)
	res, err := s.Prune(ctx, retention.Criteria{OlderThan: 90 * day, Platform: "telegram", DryRun: true})
	if err != nil {
		t.Fatal(err)
	}
	if res.Sessions != 1 || res.Rows[retention.KindMessages] != 2 {
		t.Fatalf("dry run %+v", res)
	}
	if counts(t, db, ns+"telegram:dm:1")["transcript_messages"] != 2 {
		t.Fatal("dry run deleted")
	}
	if res, err = s.Prune(ctx, retention.Criteria{OlderThan: 90 * day, Platform: "telegram"}); err != nil || res.Sessions != 1 {
		t.Fatalf("prune %+v %v", res, err)
	}
	if counts(t, db, ns+"telegram:dm:1")["sessions"] != 0 || counts(t, db, ns+"discord:dm:1")["sessions"] != 1 {
		t.Fatal("prune of telegram touched the wrong sessions")
	}
	if _, err := s.Prune(ctx, retention.Criteria{}); err == nil {
		t.Fatal("a prune without an age ran")
	}
}

// Two sweepers at once delete every session exactly once; a sweeper never
// waits for rows another transaction holds.
func TestConcurrentSweepers(t *testing.T) {
	ctx := context.Background()
	db := pgtest.New(t)
	cfg := retention.DefaultConfig()
	cfg.Retention = retention.Age(90 * day)
	cfg.BatchSize = 7
	a, _ := sweeper(t, db, cfg, 0)
	b, _ := sweeper(t, db, cfg, 0)
	const total = 120
	for i := range total {
		seed(t, db, fmt.Sprintf(ns+"telegram:dm:%03d", i), "telegram", 100*day)
	}

	// Another transaction (a router, a third sweeper) holds two rows.
	tx, err := db.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	if _, err := tx.Exec(ctx, `SELECT 1 FROM sessions WHERE session_key IN ($1, $2) FOR UPDATE`, ns+"telegram:dm:000", ns+"telegram:dm:050"); err != nil {
		t.Fatal(err)
	}

	var wg sync.WaitGroup
	results := make([]retention.Result, 2)
	errs := make([]error, 2)
	start := time.Now()
	for i, s := range []*retention.Sweeper{a, b} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cctx, cancel := context.WithTimeout(ctx, 20*time.Second)
			defer cancel()
			results[i], errs[i] = s.Sweep(cctx)
		}()
	}
	wg.Wait()
	if el := time.Since(start); el > 15*time.Second {
		t.Errorf("sweepers took %s: they waited on locked rows", el)
	}
	for _, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	sum := results[0].Sessions + results[1].Sessions
	if sum != total-2 {
		t.Fatalf("sweepers deleted %d+%d sessions, want %d", results[0].Sessions, results[1].Sessions, total-2)
	}
	if m := results[0].Rows[retention.KindMessages] + results[1].Rows[retention.KindMessages]; m != 2*(total-2) {
		t.Fatalf("deleted %d transcript messages, want %d", m, 2*(total-2))
	}
	var left int
	if err := db.QueryRow(ctx, `SELECT count(*) FROM sessions`).Scan(&left); err != nil {
		t.Fatal(err)
	}
	if left != 2 {
		t.Fatalf("%d sessions left, want the 2 held ones", left)
	}
	_ = tx.Rollback(ctx)
	if res, err := a.Sweep(ctx); err != nil || res.Sessions != 2 {
		t.Fatalf("after release: %+v %v", res, err)
	}
}

// A fenced transcript write in flight (a worker's transaction holding the
// generation fence) keeps its session for a later sweep.
func TestFencedWriteKeepsSession(t *testing.T) {
	ctx := context.Background()
	db := pgtest.New(t)
	cfg := retention.DefaultConfig()
	cfg.Retention = retention.Age(90 * day)
	s, _ := sweeper(t, db, cfg, 0)
	key := ns + "telegram:dm:1"
	seed(t, db, key, "telegram", 100*day)
	var gen int64
	if err := db.QueryRow(ctx, `SELECT generation FROM sessions WHERE session_key = $1`, key).Scan(&gen); err != nil {
		t.Fatal(err)
	}
	tx, err := db.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	if _, err := tx.Exec(ctx, `SELECT switchboard_fence($1, $2)`, key, gen); err != nil {
		t.Fatal(err)
	}
	res, err := s.Sweep(ctx)
	if err != nil || res.Sessions != 0 || res.Skipped != 1 {
		t.Fatalf("sweep during a fenced write: %+v %v", res, err)
	}
	_ = tx.Rollback(ctx)
	if res, err = s.Sweep(ctx); err != nil || res.Sessions != 1 {
		t.Fatalf("sweep after: %+v %v", res, err)
	}
}

func TestRunStopsWithContext(t *testing.T) {
	db := pgtest.New(t)
	cfg := retention.DefaultConfig()
	cfg.Retention = retention.Age(90 * day)
	cfg.SweepInterval = time.Second
	s, _ := sweeper(t, db, cfg, 0)
	seed(t, db, ns+"telegram:dm:1", "telegram", 100*day)
	ctx, cancel := context.WithTimeout(context.Background(), 1500*time.Millisecond)
	defer cancel()
	if err := s.Run(ctx); err != nil {
		t.Fatal(err)
	}
	if counts(t, db, ns+"telegram:dm:1")["sessions"] != 0 {
		t.Fatal("Run did not sweep")
	}
}

func TestParseAge(t *testing.T) {
	cases := []struct {
		in   string
		want time.Duration
		err  bool
	}{
		{"", 0, false}, {"0", 0, false}, {"90d", 90 * day, false}, {"2w", 14 * day, false},
		{"720h", 720 * time.Hour, false}, {"1h30m", 90 * time.Minute, false},
		{"-1d", 0, true}, {"107000d", 0, true}, {"36500d", 36500 * day, false}, {"876001h", 0, true}, {"-5h", 0, true}, {"d", 0, true}, {"ninety", 0, true}, {"1.5d", 0, true},
	}
	for _, c := range cases {
		got, err := retention.ParseAge(c.in)
		if (err != nil) != c.err || (!c.err && got.Duration() != c.want) {
			t.Errorf("ParseAge(%q) = %v, %v", c.in, got, err)
		}
	}
	if s := retention.Age(90 * day).String(); s != "90d" {
		t.Errorf("String = %q", s)
	}
}

func TestConfigFile(t *testing.T) {
	type file struct {
		Sessions retention.Config `koanf:"sessions"`
		Cron     struct {
			SessionRetention retention.Age `koanf:"session_retention"`
		} `koanf:"cron"`
	}
	cases := []struct {
		name, yaml string
		env        []string
		sessions   time.Duration
		cron       time.Duration
		err        bool
	}{
		{name: "defaults", yaml: "{}", cron: 7 * day},
		{name: "days", yaml: "sessions:\n  retention: 90d\ncron:\n  session_retention: 3d\n", sessions: 90 * day, cron: 3 * day},
		{name: "duration and zero", yaml: "sessions:\n  retention: 2160h\ncron:\n  session_retention: 0\n", sessions: 90 * day},
		{name: "environment", yaml: "{}", env: []string{"SWITCHBOARD_SESSIONS__RETENTION=30d"}, sessions: 30 * day, cron: 7 * day},
		{name: "negative", yaml: "sessions:\n  retention: -1d\n", err: true},
		{name: "not an age", yaml: "sessions:\n  retention: soon\n", err: true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "config.yaml")
			if err := os.WriteFile(path, []byte(c.yaml), 0o600); err != nil {
				t.Fatal(err)
			}
			out := file{Sessions: retention.DefaultConfig()}
			out.Cron.SessionRetention = scheduler.DefaultConfig().SessionRetention
			_, err := config.Load(config.Options{Path: path, Environ: append([]string{}, c.env...)}, &out)
			if c.err {
				if err == nil {
					t.Fatalf("loaded %+v", out)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if out.Sessions.Retention.Duration() != c.sessions || out.Cron.SessionRetention.Duration() != c.cron {
				t.Fatalf("sessions.retention %v, cron.session_retention %v", out.Sessions.Retention, out.Cron.SessionRetention)
			}
		})
	}
}

// A message that arrives while a batch holds its session's row waits for
// the batch and then makes a fresh session, with its history row: the
// batch's deletes do not swallow it.
func TestArrivalDuringBatchMakesAFreshSession(t *testing.T) {
	ctx := context.Background()
	db := pgtest.New(t)
	key := ns + "telegram:dm:1"
	seed(t, db, key, "telegram", 100*day)
	// A batch as the sweeper runs it, paused before its commit.
	tx, err := db.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	if _, err := tx.Exec(ctx, `SELECT 1 FROM sessions WHERE session_key = $1 FOR UPDATE SKIP LOCKED`, key); err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{`DELETE FROM transcript_messages WHERE session_key = $1`, `DELETE FROM worker_turns WHERE session_key = $1`,
		`DELETE FROM session_history WHERE session_key = $1`, `DELETE FROM sessions WHERE session_key = $1`} {
		if _, err := tx.Exec(ctx, q, key); err != nil {
			t.Fatal(err)
		}
	}
	type arrival struct {
		sess    sessionstore.Session
		created bool
		err     error
	}
	got := make(chan arrival, 1)
	go func() {
		sess, created, _, err := sessionstore.New(db).Arrive(ctx, key, "", &eventsv1.SessionSource{Platform: "telegram", ChatId: "1", ChatType: "dm"}, "e1")
		got <- arrival{sess, created, err}
	}()
	select {
	case a := <-got:
		t.Fatalf("arrival did not wait for the batch: %+v", a)
	case <-time.After(300 * time.Millisecond):
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	a := <-got
	if a.err != nil || !a.created || a.sess.ID == "c2-"+key {
		t.Fatalf("arrival after the batch: created %v, session %q, %v", a.created, a.sess.ID, a.err)
	}
	var history int
	if err := db.QueryRow(ctx, `SELECT count(*) FROM session_history WHERE session_key = $1 AND session_id = $2`, key, a.sess.ID).Scan(&history); err != nil || history != 1 {
		t.Fatalf("history of the fresh session: %d, %v", history, err)
	}
}

// The sweep deletes a deleted session's goal verdicts by its key: the
// delete must find them by the session_key index (migration 00138), not
// read the whole table, and must take only that session's verdicts.
func TestGoalVerdictsDeleteUsesSessionIndex(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := pgtest.New(t)
	// A day of verdicts of 2 000 sessions, 10 each.
	if _, err := db.Exec(ctx, `INSERT INTO goal_verdicts (turn_id, session_key, verdict, reason, message, continued, created_at)
SELECT 'v' || i, 'agent:main:telegram:dm:' || (i % 2000), 'continue', 'r', 'm', true, now() - make_interval(secs => i)
FROM generate_series(1, 20000) AS i`); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(ctx, `ANALYZE goal_verdicts`); err != nil {
		t.Fatal(err)
	}
	keys := []string{"agent:main:telegram:dm:7", "agent:main:telegram:dm:8"}
	const del = `DELETE FROM goal_verdicts WHERE session_key = ANY($1)`
	rows, err := db.Query(ctx, `EXPLAIN `+del, keys)
	if err != nil {
		t.Fatal(err)
	}
	var plan []string
	for rows.Next() {
		var line string
		if err := rows.Scan(&line); err != nil {
			t.Fatal(err)
		}
		plan = append(plan, line)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if p := strings.Join(plan, "\n"); !strings.Contains(p, "goal_verdicts_session") {
		t.Fatalf("the delete reads the table without its index:\n%s", p)
	}
	tag, err := db.Exec(ctx, del, keys)
	if err != nil {
		t.Fatal(err)
	}
	if tag.RowsAffected() != 20 {
		t.Errorf("deleted %d verdicts, want the two sessions' 20", tag.RowsAffected())
	}
	var left int
	if err := db.QueryRow(ctx, `SELECT count(*) FROM goal_verdicts`).Scan(&left); err != nil {
		t.Fatal(err)
	}
	if left != 20000-20 {
		t.Errorf("%d verdicts left, want the other sessions' %d", left, 20000-20)
	}
}

// The memory writes /memory decided (approved, rejected, failed) are
// deleted once decided more than MemoryDecisionsAge ago, with session
// retention off too; pending ones are kept however old, and so are the
// recent decisions.
func TestSweepDeletesOldMemoryDecisions(t *testing.T) {
	ctx := context.Background()
	db := pgtest.New(t)
	cfg := retention.DefaultConfig()
	cfg.BatchSize = 2 // several batches
	s, _ := sweeper(t, db, cfg, 0)
	old := retention.MemoryDecisionsAge + time.Hour
	rows := []struct {
		id, state string
		created   time.Duration // ago
		decided   time.Duration // ago; 0: undecided
		kept      bool
	}{
		{"00000001", "approved", old + day, old, false},
		{"00000002", "rejected", old + day, old + 40*day, false},
		{"00000003", "failed", old + day, old, false},
		{"00000004", "approved", old + day, retention.MemoryDecisionsAge - time.Hour, true},
		{"00000005", "rejected", time.Hour, time.Minute, true},
		{"00000006", "pending", 1000 * day, 0, true},
		{"00000007", "pending", time.Minute, 0, true},
	}
	for _, r := range rows {
		var decided *time.Time
		if r.decided > 0 {
			at := time.Now().Add(-r.decided)
			decided = &at
		}
		if _, err := db.Exec(ctx, `INSERT INTO memory_pending_writes (user_key, id, action, content, summary, state, decided_by, decided_at, created_at)
			VALUES ('telegram:alice', $1, 'add', 'likes tea', 'add to memory: likes tea', $2, CASE WHEN $3::timestamptz IS NULL THEN '' ELSE 'telegram:alice' END, $3, $4)`,
			r.id, r.state, decided, time.Now().Add(-r.created)); err != nil {
			t.Fatal(err)
		}
	}
	res, err := s.Sweep(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if got := res.Rows[retention.KindMemoryWrites]; got != 3 {
		t.Errorf("deleted %d decided memory writes, want the 3 decided more than %v ago", got, retention.MemoryDecisionsAge)
	}
	for _, r := range rows {
		var n int
		if err := db.QueryRow(ctx, `SELECT count(*) FROM memory_pending_writes WHERE id = $1`, r.id).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if (n == 1) != r.kept {
			t.Errorf("write %s (%s, decided %v ago): kept %v, want %v", r.id, r.state, r.decided, n == 1, r.kept)
		}
	}
}

// The delete of decided memory writes finds them by the partial index
// of migration 00212: each sweep deletes the few decided a week ago out
// of a week of decisions and the writes still pending, which it must not
// read.
func TestMemoryDecisionsDeleteUsesIndex(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := pgtest.New(t)
	// 20 000 writes of 2 000 owners: one in ten pending, 200 decided
	// eight days ago, the others in the last five days.
	if _, err := db.Exec(ctx, `INSERT INTO memory_pending_writes (user_key, id, action, content, summary, state, decided_at, created_at)
SELECT 'telegram:u' || (i % 2000), lpad(to_hex(i), 8, '0'), 'add', 'note', 'add to memory: note',
       CASE WHEN i % 10 = 0 THEN 'pending' ELSE 'approved' END,
       CASE WHEN i % 10 = 0 THEN NULL
            WHEN i % 100 = 1 THEN now() - make_interval(days => 8, secs => i)
            ELSE now() - make_interval(secs => i * 20) END,
       now() - make_interval(days => 9, secs => i)
FROM generate_series(1, 20000) AS i`); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(ctx, `ANALYZE memory_pending_writes`); err != nil {
		t.Fatal(err)
	}
	const del = `DELETE FROM memory_pending_writes WHERE (user_key, id) IN
		(SELECT user_key, id FROM memory_pending_writes WHERE state <> 'pending' AND decided_at < $1 LIMIT $2)`
	cutoff := time.Now().Add(-retention.MemoryDecisionsAge)
	rows, err := db.Query(ctx, `EXPLAIN `+del, cutoff, 100)
	if err != nil {
		t.Fatal(err)
	}
	plan, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	if p := strings.Join(plan, "\n"); !strings.Contains(p, "memory_pending_writes_decided_idx") {
		t.Fatalf("the delete reads the table without its index:\n%s", p)
	}
	tag, err := db.Exec(ctx, del, cutoff, 100)
	if err != nil {
		t.Fatal(err)
	}
	if tag.RowsAffected() != 100 {
		t.Errorf("deleted %d writes, want a batch of 100", tag.RowsAffected())
	}
	// The sweep, whose statement this is, takes the other 100.
	s, _ := sweeper(t, db, retention.DefaultConfig(), 0)
	res, err := s.Sweep(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if got := res.Rows[retention.KindMemoryWrites]; got != 100 {
		t.Errorf("the sweep deleted %d writes, want the other 100 decided eight days ago", got)
	}
	var pending, decided int
	if err := db.QueryRow(ctx, `SELECT count(*) FILTER (WHERE state = 'pending'), count(*) FILTER (WHERE decided_at >= $1)
		FROM memory_pending_writes`, cutoff).Scan(&pending, &decided); err != nil {
		t.Fatal(err)
	}
	if pending != 2000 || decided != 17800 {
		t.Errorf("%d pending and %d recently decided writes left, want all 2000 and 17800", pending, decided)
	}
}
