package router

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/switchboard-chat/switchboard/pkg/config"
	"github.com/switchboard-chat/switchboard/pkg/redisx"
	"github.com/switchboard-chat/switchboard/pkg/sessionstore"
)

func TestResetPolicy(t *testing.T) {
	cfg := ResetConfig{Mode: ResetNone, IdleMinutes: 60, AtHour: 4, Timezone: "UTC",
		Platforms: map[string]ResetOverride{"slack": {Mode: ResetDaily, Timezone: "Europe/Berlin"}, "discord": {Mode: ResetBoth, IdleMinutes: 10},
			"matrix": {Mode: ResetDaily, AtHour: new(0)}},
		ChatTypes: map[string]ResetOverride{"group": {Mode: ResetIdle}, "dm": {IdleMinutes: 30}, "thread": {Mode: ResetDaily, AtHour: new(6)}},
	}
	if err := cfg.validate(); err != nil {
		t.Fatal(err)
	}
	if err := cfg.load(); err != nil {
		t.Fatal(err)
	}
	now := time.Date(2026, 3, 10, 12, 0, 0, 0, time.UTC)
	tests := []struct {
		name, platform, chatType string
		last                     time.Time
		wantReason               string
		wantDue                  bool
	}{
		{"default none never resets", "telegram", "channel", now.Add(-72 * time.Hour), "", false},
		{"chat type idle due", "telegram", "group", now.Add(-61 * time.Minute), "idle", true},
		{"chat type idle not yet", "telegram", "group", now.Add(-59 * time.Minute), "", false},
		{"dm override only changes minutes (mode stays none)", "telegram", "dm", now.Add(-31 * time.Minute), "", false},
		{"platform daily: last before today's 04:00 Berlin", "slack", "dm", time.Date(2026, 3, 10, 2, 59, 0, 0, time.UTC), "daily", true},
		{"platform daily: last after today's 04:00 Berlin", "slack", "dm", time.Date(2026, 3, 10, 3, 1, 0, 0, time.UTC), "", false},
		{"platform wins over chat type", "slack", "group", now.Add(-2 * time.Hour), "", false},
		{"both: idle with platform minutes", "discord", "group", now.Add(-11 * time.Minute), "idle", true},
		{"both: daily", "discord", "dm", time.Date(2026, 3, 10, 3, 55, 0, 0, time.UTC).Add(-0), "idle", true},
		// An override can move the hour to midnight: 0 is an hour, not "inherit".
		{"platform at midnight: last after it", "matrix", "dm", time.Date(2026, 3, 10, 0, 30, 0, 0, time.UTC), "", false},
		{"platform at midnight: last before it", "matrix", "dm", time.Date(2026, 3, 9, 23, 30, 0, 0, time.UTC), "daily", true},
		{"chat type hour", "telegram", "thread", time.Date(2026, 3, 10, 5, 0, 0, 0, time.UTC), "daily", true},
		{"platform without an hour keeps the chat type's", "slack", "thread", time.Date(2026, 3, 10, 4, 30, 0, 0, time.UTC), "daily", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			reason, due := cfg.policy(tt.platform, tt.chatType).due(tt.last, now)
			if reason != tt.wantReason || due != tt.wantDue {
				t.Fatalf("got %q %v, want %q %v", reason, due, tt.wantReason, tt.wantDue)
			}
		})
	}
	// Before today's boundary, the boundary is yesterday's.
	p := ResetPolicy{Mode: ResetDaily, AtHour: 23}
	if _, due := p.due(time.Date(2026, 3, 9, 23, 30, 0, 0, time.UTC), now); due {
		t.Fatal("daily reset before its hour came")
	}
	if _, due := p.due(time.Date(2026, 3, 9, 22, 30, 0, 0, time.UTC), now); !due {
		t.Fatal("daily reset missed yesterday's boundary")
	}
	bad := ResetConfig{Mode: "weekly"}
	if bad.validate() == nil {
		t.Fatal("accepted mode weekly")
	}
	if (ResetConfig{Platforms: map[string]ResetOverride{"slack": {AtHour: new(24)}}}).validate() == nil {
		t.Fatal("accepted a platform's at_hour 24")
	}
}

// located is p with its time zone loaded, as ResetConfig.load loads the
// zones of the policies the router resolves.
func located(t *testing.T, p ResetPolicy) ResetPolicy {
	t.Helper()
	c := ResetConfig{Timezone: p.Timezone}
	if err := c.load(); err != nil {
		t.Fatal(err)
	}
	p.loc = c.zones[p.Timezone]
	return p
}

// TestResetZonesLoadedAtStart: the router loads the reset policy's time
// zones when it is built, not for each message it reads a policy for
// (a daily policy's due, on every message's path, allocates nothing);
// a zone that does not load stops it there.
func TestResetZonesLoadedAtStart(t *testing.T) {
	e := newEnv(t)
	cfg := testConfig()
	cfg.SessionReset = ResetConfig{Mode: ResetDaily, AtHour: 4, Timezone: "America/New_York",
		Platforms: map[string]ResetOverride{"slack": {Timezone: "Asia/Tokyo"}}}
	s, err := New(cfg, Deps{Bus: e.bus, DB: e.db, Redis: e.rdb, RedisPrefix: e.prefix, Environ: []string{}})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		platform  string
		last, now time.Time // just before and after 04:00 in the zone
	}{
		{"telegram", time.Date(2026, 3, 10, 7, 59, 0, 0, time.UTC), time.Date(2026, 3, 10, 8, 1, 0, 0, time.UTC)},
		{"slack", time.Date(2026, 3, 9, 18, 59, 0, 0, time.UTC), time.Date(2026, 3, 9, 19, 1, 0, 0, time.UTC)},
	} {
		pol := s.cfg.SessionReset.policy(tc.platform, "dm")
		if reason, due := pol.due(tc.last, tc.now); reason != "daily" || !due {
			t.Errorf("%s: %q %v across 04:00 in %s, want daily", tc.platform, reason, due, pol.Timezone)
		}
		if n := testing.AllocsPerRun(100, func() { pol.due(tc.last, tc.now) }); n != 0 {
			t.Errorf("%s: due allocates %v times a call: it loads %s for each message", tc.platform, n, pol.Timezone)
		}
	}
	cfg.SessionReset.ChatTypes = map[string]ResetOverride{"group": {Timezone: "Mars/Olympus_Mons"}}
	if _, err := New(cfg, Deps{Bus: e.bus, DB: e.db, Redis: e.rdb, RedisPrefix: e.prefix, Environ: []string{}}); err == nil ||
		!strings.Contains(err.Error(), "session_reset.chat_types.group.timezone") {
		t.Errorf("an unknown zone: %v, want an error at start naming session_reset.chat_types.group.timezone", err)
	}
}

// at_hour: 0 in an override reaches the policy from the config file.
func TestResetOverrideFromYAML(t *testing.T) {
	path := filepath.Join(t.TempDir(), "router.yaml")
	yaml := "session_reset:\n  mode: daily\n  platforms:\n    matrix:\n      at_hour: 0\n    slack:\n      mode: idle\n"
	if err := os.WriteFile(path, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := DefaultConfig()
	warnings, err := config.Load(config.Options{Path: path, Environ: []string{}}, &cfg)
	if err != nil || len(warnings) > 0 {
		t.Fatalf("load: %v %v", warnings, err)
	}
	if got := cfg.SessionReset.policy("matrix", "dm"); got.AtHour != 0 || got.Mode != ResetDaily {
		t.Errorf("matrix policy %+v, want daily at 0", got)
	}
	if got := cfg.SessionReset.policy("slack", "dm"); got.AtHour != 4 || got.Mode != ResetIdle {
		t.Errorf("slack policy %+v, want idle, the default hour 4", got)
	}
}

// /new after the reset policy came due starts one new conversation with
// one answer, as Hermes handles /new before it looks at the policy: the
// policy's reset ran first, with its own "Session reset" notice and an
// empty conversation left in /sessions, and then /new reset again.
func TestNewWhenAResetIsDueResetsOnce(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	cfg := testConfig()
	cfg.SessionReset.Mode, cfg.SessionReset.IdleMinutes = ResetIdle, 60
	clock := e.startRouterOnClock(cfg, time.Now())
	w := e.startWorker(nil)
	key := "agent:main:telegram:dm:chat-alice"
	store := sessionstore.New(e.db)

	e.publish(dm("alice", "hello"))
	waitFor(t, "first turn", func() bool { turns, _ := w.snapshot(); return len(turns) == 1 })
	waitFor(t, "first turn done", func() bool { return e.lockOf(key) == "" })
	first, err := store.Get(context.Background(), key)
	if err != nil {
		t.Fatal(err)
	}
	clock.advance(61 * time.Minute)

	if got := e.ask("alice", "/new"); got != "✨ New session started." {
		t.Fatalf("/new answered %q, want only its own answer; all: %q", got, e.noticesTo("alice"))
	}
	var sess sessionstore.Session
	waitFor(t, "the reset of /new", func() bool {
		sess, err = store.Get(context.Background(), key)
		return err == nil && sess.ID != first.ID
	})
	var resets int
	var reason string
	if err := e.db.QueryRow(context.Background(), `SELECT reset_count, last_reset_reason FROM sessions WHERE session_key = $1`, key).
		Scan(&resets, &reason); err != nil {
		t.Fatal(err)
	}
	if resets != 1 || reason != "new" {
		t.Errorf("%d resets, the last for %q; want 1, for new", resets, reason)
	}
	hist, err := store.History(context.Background(), key, 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(hist) != 2 {
		t.Errorf("%d conversations in the history, want 2 (the first and the one /new started): %+v", len(hist), hist)
	}
}

// The boundaries of a reset, as Hermes draws them: idle means longer
// than idle_minutes since the last activity (a message at exactly the
// limit continues the conversation), and the daily reset comes at
// at_hour:00 on the wall clock of the policy's time zone, also on the
// day a DST change skips or repeats that hour.
func TestResetPolicyBoundaries(t *testing.T) {
	ny, err := time.LoadLocation("America/New_York")
	if err != nil {
		t.Fatal(err)
	}
	berlin, err := time.LoadLocation("Europe/Berlin")
	if err != nil {
		t.Fatal(err)
	}
	idle := ResetPolicy{Mode: ResetIdle, IdleMinutes: 60}
	now := time.Date(2026, 3, 10, 12, 0, 0, 0, time.UTC)
	// 2026-03-08 in New York: 02:00 EST is 03:00 EDT (07:00 UTC).
	nyGap := ResetPolicy{Mode: ResetDaily, AtHour: 2, Timezone: "America/New_York"}
	// 2026-03-29 in Berlin: 02:00 CET is 03:00 CEST (01:00 UTC).
	berlinGap := ResetPolicy{Mode: ResetDaily, AtHour: 2, Timezone: "Europe/Berlin"}
	// 2026-11-01 in New York: 01:00 to 02:00 runs twice (EDT, then EST).
	nyTwice := ResetPolicy{Mode: ResetDaily, AtHour: 1, Timezone: "America/New_York"}
	chathamTwice := ResetPolicy{Mode: ResetDaily, AtHour: 3, Timezone: "Pacific/Chatham"}
	trollTwice := ResetPolicy{Mode: ResetDaily, AtHour: 2, Timezone: "Antarctica/Troll"}
	santiagoMidnight := ResetPolicy{Mode: ResetDaily, AtHour: 0, Timezone: "America/Santiago"}
	tests := []struct {
		name      string
		p         ResetPolicy
		last, now time.Time
		want      bool
	}{
		{"idle: exactly the limit", idle, now.Add(-60 * time.Minute), now, false},
		{"idle: past the limit", idle, now.Add(-60*time.Minute - time.Second), now, true},
		{"daily: last exactly at the hour", ResetPolicy{Mode: ResetDaily, AtHour: 4}, time.Date(2026, 3, 10, 4, 0, 0, 0, time.UTC), now, false},
		{"daily: last just before the hour", ResetPolicy{Mode: ResetDaily, AtHour: 4}, time.Date(2026, 3, 10, 3, 59, 59, 0, time.UTC), now, true},
		{"skipped hour: crossed", nyGap, time.Date(2026, 3, 8, 1, 30, 0, 0, ny), time.Date(2026, 3, 8, 3, 30, 0, 0, ny), true},
		{"skipped hour: not yet come", nyGap, time.Date(2026, 3, 8, 0, 30, 0, 0, ny), time.Date(2026, 3, 8, 1, 30, 0, 0, ny), false},
		{"skipped hour: both after it", nyGap, time.Date(2026, 3, 8, 3, 5, 0, 0, ny), time.Date(2026, 3, 8, 9, 0, 0, 0, ny), false},
		{"skipped hour, Berlin: crossed", berlinGap, time.Date(2026, 3, 29, 1, 45, 0, 0, berlin), time.Date(2026, 3, 29, 3, 15, 0, 0, berlin), true},
		{"skipped hour, Berlin: not yet come", berlinGap, time.Date(2026, 3, 29, 0, 15, 0, 0, berlin), time.Date(2026, 3, 29, 1, 45, 0, 0, berlin), false},
		{"repeated hour: crossed once", nyTwice, time.Date(2026, 11, 1, 0, 50, 0, 0, ny), time.Date(2026, 11, 1, 1, 10, 0, 0, ny), true},
		// 05:30 UTC is 01:30 EDT; 06:10 UTC is 01:10 EST, the hour's second run.
		{"repeated hour: no second reset", nyTwice, time.Date(2026, 11, 1, 5, 30, 0, 0, time.UTC), time.Date(2026, 11, 1, 6, 10, 0, 0, time.UTC), false},
		// 2027-04-04 in the Chatham Islands: 03:45 +1345 is 02:45 +1245
		// (14:00 UTC), so 03:00 comes twice, 45 minutes apart. 13:25 UTC
		// is 03:10 of the first run, 14:05 UTC 02:50 and 14:20 UTC 03:05
		// of the second.
		{"hour inside a repeated span: crossed the first time", chathamTwice, time.Date(2027, 4, 3, 13, 10, 0, 0, time.UTC), time.Date(2027, 4, 3, 13, 25, 0, 0, time.UTC), true},
		{"hour inside a repeated span: after the first crossing", chathamTwice, time.Date(2027, 4, 3, 13, 25, 0, 0, time.UTC), time.Date(2027, 4, 3, 14, 5, 0, 0, time.UTC), false},
		{"hour inside a repeated span: no second reset", chathamTwice, time.Date(2027, 4, 3, 14, 5, 0, 0, time.UTC), time.Date(2027, 4, 3, 14, 20, 0, 0, time.UTC), false},
		{"hour inside a repeated span: next day", chathamTwice, time.Date(2027, 4, 3, 14, 20, 0, 0, time.UTC), time.Date(2027, 4, 4, 14, 20, 0, 0, time.UTC), true},
		// 2027-10-31 at Troll: 03:00 +02 is 01:00 +00 (01:00 UTC); 02:00
		// comes twice. 01:30 UTC is 01:30 and 02:10 UTC 02:10 of the
		// second run.
		{"two hours back: no second reset", trollTwice, time.Date(2027, 10, 31, 1, 30, 0, 0, time.UTC), time.Date(2027, 10, 31, 2, 10, 0, 0, time.UTC), false},
		{"two hours back: crossed the first time", trollTwice, time.Date(2027, 10, 30, 23, 30, 0, 0, time.UTC), time.Date(2027, 10, 31, 0, 30, 0, 0, time.UTC), true},
		// 2027-04-04 in Santiago: midnight -03 is 23:00 -04 of the day
		// before (03:00 UTC); midnight comes once, at the second 23:59.
		{"midnight change back: the repeated hour", santiagoMidnight, time.Date(2027, 4, 4, 2, 30, 0, 0, time.UTC), time.Date(2027, 4, 4, 3, 30, 0, 0, time.UTC), false},
		{"midnight change back: midnight", santiagoMidnight, time.Date(2027, 4, 4, 3, 30, 0, 0, time.UTC), time.Date(2027, 4, 4, 4, 10, 0, 0, time.UTC), true},
		// 2027-09-05 in Santiago: midnight -04 is 01:00 -03 (04:00 UTC).
		{"midnight skipped: crossed", santiagoMidnight, time.Date(2027, 9, 5, 3, 30, 0, 0, time.UTC), time.Date(2027, 9, 5, 4, 10, 0, 0, time.UTC), true},
		// East of UTC, a half-hour offset: midnight in Kolkata is 18:30 UTC.
		{"half-hour offset: midnight crossed", ResetPolicy{Mode: ResetDaily, AtHour: 0, Timezone: "Asia/Kolkata"}, time.Date(2026, 3, 9, 18, 29, 0, 0, time.UTC), time.Date(2026, 3, 9, 18, 31, 0, 0, time.UTC), true},
		{"half-hour offset: before midnight", ResetPolicy{Mode: ResetDaily, AtHour: 0, Timezone: "Asia/Kolkata"}, time.Date(2026, 3, 9, 18, 31, 0, 0, time.UTC), time.Date(2026, 3, 10, 18, 29, 0, 0, time.UTC), false},
		{"23:00 east of UTC: crossed", ResetPolicy{Mode: ResetDaily, AtHour: 23, Timezone: "Asia/Tokyo"}, time.Date(2026, 3, 9, 13, 59, 0, 0, time.UTC), time.Date(2026, 3, 9, 14, 1, 0, 0, time.UTC), true},
		{"23:00 east of UTC: not yet", ResetPolicy{Mode: ResetDaily, AtHour: 23, Timezone: "Asia/Tokyo"}, time.Date(2026, 3, 9, 14, 1, 0, 0, time.UTC), time.Date(2026, 3, 10, 13, 59, 0, 0, time.UTC), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, due := located(t, tt.p).due(tt.last, tt.now); due != tt.want {
				t.Errorf("due %v, want %v (last %v, now %v)", due, tt.want, tt.last.UTC(), tt.now.UTC())
			}
		})
	}
}

// An automatic reset tells the user why, and, as Hermes's notice does,
// that the conversation it ended is not lost: /resume lists it and
// brings it back.
func TestResetNoticeNamesResume(t *testing.T) {
	tests := []struct {
		reason string
		p      ResetPolicy
		want   string
	}{
		{"idle", ResetPolicy{IdleMinutes: 1440}, "◐ Session reset after 1 day of inactivity. Starting fresh.\nUse /resume to browse and restore a previous session."},
		{"daily", ResetPolicy{AtHour: 4, Timezone: "Europe/Berlin"}, "◐ Daily session reset (04:00 Europe/Berlin). Starting fresh.\nUse /resume to browse and restore a previous session."},
	}
	for _, tt := range tests {
		if got := resetNotice(tt.reason, tt.p); got != tt.want {
			t.Errorf("%s: %q, want %q", tt.reason, got, tt.want)
		}
	}
}

// Idle time counts from the end of the last turn, as Hermes's
// update_session after each interaction makes it: a user who answers
// soon after a long task's reply continues the conversation, though
// their previous message arrived longer ago than idle_minutes.
func TestIdleCountsFromTheLastTurnsEnd(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	cfg := testConfig()
	cfg.SessionReset.Mode, cfg.SessionReset.IdleMinutes = ResetIdle, 60
	clock := e.startRouterOnClock(cfg, time.Now())
	w := e.startWorker(nil)
	key := "agent:main:telegram:dm:chat-alice"

	e.publish(dm("alice", "a long task"))
	waitFor(t, "first turn", func() bool { turns, _ := w.snapshot(); return len(turns) == 1 })
	waitFor(t, "first turn done", func() bool { return e.lockOf(key) == "" })
	turns, _ := w.snapshot()
	first := turns[0]
	// The task ran 50 minutes (the worker's record of the turn); the
	// user answers 11 minutes after its reply.
	start := clock.Now()
	if _, err := e.db.Exec(context.Background(), `INSERT INTO worker_turns (turn_id, session_key, session_id, generation, status, started_at, updated_at)
		VALUES ($1, $2, $3, $4, 'completed', $5, $6)`, first.TurnId, key, first.SessionId, first.Generation, start, start.Add(50*time.Minute)); err != nil {
		t.Fatal(err)
	}
	clock.advance(61 * time.Minute)
	e.publish(dm("alice", "thanks, and now"))
	waitFor(t, "second turn", func() bool { turns, _ := w.snapshot(); return len(turns) == 2 })
	turns, _ = w.snapshot()
	if turns[1].SessionId != first.SessionId {
		t.Fatalf("the conversation was reset 11 minutes after the last turn ended; notices %q", e.noticesTo("alice"))
	}

	// Idle past the turn's end too: the next message starts over.
	clock.advance(61 * time.Minute)
	e.publish(dm("alice", "back after a while"))
	waitFor(t, "third turn", func() bool { turns, _ := w.snapshot(); return len(turns) == 3 })
	turns, _ = w.snapshot()
	if turns[2].SessionId == first.SessionId {
		t.Fatal("an idle conversation was not reset")
	}
}

// A reset by policy of a conversation that never had a turn (only
// commands) says nothing, as Hermes notifies only when the expired
// session had activity: there was nothing to lose.
func TestResetOfAnEmptyConversationIsQuiet(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	cfg := testConfig()
	cfg.SessionReset.Mode, cfg.SessionReset.IdleMinutes = ResetIdle, 60
	clock := e.startRouterOnClock(cfg, time.Now())
	w := e.startWorker(nil)
	key := "agent:main:telegram:dm:chat-alice"

	e.ask("alice", "/status")
	first, err := sessionstore.New(e.db).Get(context.Background(), key)
	if err != nil {
		t.Fatal(err)
	}
	clock.advance(61 * time.Minute)
	e.publish(dm("alice", "hello"))
	waitFor(t, "a turn", func() bool { turns, _ := w.snapshot(); return len(turns) == 1 })
	if turns, _ := w.snapshot(); turns[0].SessionId == first.ID {
		t.Error("the idle conversation was not reset")
	}
	// Notices of the chat arrive in order: one the reset sent comes
	// before this answer.
	e.ask("alice", "/status")
	if n := e.countNotices("alice", "Session reset"); n != 0 {
		t.Fatalf("reset notices for an empty conversation: %q", e.noticesTo("alice"))
	}
}

// A reset by policy of a conversation whose only turn used no tokens (a
// /stop fenced it before its model call; its worker recorded it fenced)
// says nothing either: Hermes notifies only when the expired session
// used tokens (reset_had_activity: total_tokens > 0).
func TestResetAfterATurnThatUsedNoTokensIsQuiet(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	cfg := testConfig()
	cfg.SessionReset.Mode, cfg.SessionReset.IdleMinutes = ResetIdle, 60
	clock := e.startRouterOnClock(cfg, time.Now())
	w := e.startWorker(nil)
	key := "agent:main:telegram:dm:chat-alice"

	e.publish(dm("alice", "hello"))
	waitFor(t, "first turn", func() bool { turns, _ := w.snapshot(); return len(turns) == 1 })
	waitFor(t, "first turn done", func() bool { return e.lockOf(key) == "" })
	turns, _ := w.snapshot()
	first := turns[0]
	if _, err := e.db.Exec(context.Background(), `INSERT INTO worker_turns (turn_id, session_key, session_id, generation, status, started_at, updated_at)
		VALUES ($1, $2, $3, $4, 'fenced', $5, $5)`, first.TurnId, key, first.SessionId, first.Generation, clock.Now()); err != nil {
		t.Fatal(err)
	}
	clock.advance(61 * time.Minute)
	e.publish(dm("alice", "back again"))
	waitFor(t, "second turn", func() bool { turns, _ := w.snapshot(); return len(turns) == 2 })
	if turns, _ := w.snapshot(); turns[1].SessionId == first.SessionId {
		t.Fatal("the idle conversation was not reset")
	}
	// Notices of the chat arrive in order: one the reset sent comes
	// before this answer.
	e.ask("alice", "/status")
	if n := e.countNotices("alice", "Session reset"); n != 0 {
		t.Fatalf("reset notices for a conversation that used no tokens: %q", e.noticesTo("alice"))
	}
}

// /new stops the running turn with its reset in hand (the session row,
// locked until the reset commits), as /stop does: a turn start landing
// before the commit (the stopped turn's completion, the sweep, a
// message arriving) waits for the commit and finds the waiting messages
// dropped. It released the lock before taking the row: such a start
// took the lock and ran the waiting messages as a turn of the
// conversation /new was ending, outdated as soon as the reset committed,
// its lock making the next message look as if it met a running turn.
// (The lock is now freed only after the commit:
// TestStopAndNewFreeTheLockOnlyAfterTheirCommit.)
func TestNewReleasesTheLockWithItsResetInHand(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	const key = "agent:main:telegram:dm:chat-bob"
	e := newEnv(t)
	cfg := testConfig()
	cfg.BusyMode = BusyQueue
	s, err := New(cfg, Deps{Bus: e.bus, DB: e.db, Redis: e.rdb, RedisPrefix: e.prefix, Environ: []string{}})
	if err != nil {
		t.Fatal(err)
	}
	type start struct {
		started bool
		err     error
	}
	starts := make(chan start, 1)
	var hooked atomic.Bool
	s.stopSent = func(ctx context.Context, command string, tx pgx.Tx) {
		if command != "new" || !hooked.CompareAndSwap(false, true) {
			return
		}
		var pid int
		if err := tx.QueryRow(ctx, `SELECT pg_backend_pid()`).Scan(&pid); err != nil {
			t.Error(err)
			return
		}
		go func() {
			started, err := s.tryStart(context.WithoutCancel(ctx), key)
			starts <- start{started, err}
		}()
		// Until the start has ended, or waits for a lock /new's
		// transaction holds.
		deadline := time.Now().Add(30 * time.Second)
		for len(starts) == 0 {
			var n int
			if err := e.db.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE $1 = ANY(pg_blocking_pids(pid))`, pid).Scan(&n); err != nil {
				t.Error(err)
				return
			}
			if n > 0 {
				return
			}
			if time.Now().After(deadline) {
				t.Error("the turn start neither ended nor waited for /new's transaction")
				return
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	runRouter(ctx, t, s)
	g := newGate(t, "long job")
	w := e.startWorker(g.hold)
	defer g.open()

	e.publish(dm("bob", "long job"))
	waitFor(t, "the turn runs", func() bool { turns, _ := w.snapshot(); return len(turns) == 1 })
	store := sessionstore.New(e.db)
	e.publish(dm("bob", "and this"))
	waitFor(t, "the message waiting", func() bool { n, err := store.QueueLen(ctx, key); return err == nil && n == 1 })

	if got := e.ask("bob", "/new"); got != "✨ New session started." {
		t.Fatalf("/new: %q", got)
	}
	waitFor(t, "the turn start between", func() bool { return len(starts) == 1 })
	if st := <-starts; st.err != nil || st.started {
		t.Errorf("the turn start between /new's unlock and its commit: started %v (%v), want nothing started: the waiting message is /new's to drop", st.started, st.err)
	}
	if n, err := store.QueueLen(ctx, key); err != nil || n != 0 {
		t.Errorf("%d messages waiting after /new (%v)", n, err)
	}
	locker := redisx.NewLocker(e.rdb, e.prefix)
	if o, err := locker.Owner(ctx, key); err != nil || o != "" {
		t.Errorf("the session's lock after /new: %q (%v), want it free", o, err)
	}
	// The next message starts a turn of the new conversation.
	e.publish(dm("bob", "hello"))
	waitFor(t, "the next message's turn", func() bool {
		turns, _ := w.snapshot()
		return slices.Contains(inputsText(turns, key), "hello")
	})
	turns, _ := w.snapshot()
	if got := inputsText(turns, key); slices.Contains(got, "and this") {
		t.Errorf("turns %q: the message /new dropped ran", got)
	}
}

// /new and /stop free the stopped turn's session lock only once their
// transaction has committed, as the admin API's reset does: they freed
// it before, so a message arriving in between could be granted the lock
// and start a turn while the stopped one still ran as the session's, and
// a commit that failed left the stopped turn's session unlocked. And
// only the stopped turn's: a lock another grant holds (a router's, for a
// message whose start waits for the command's commit: a turn of what
// follows it) is kept; freed, that turn would run unlocked beside the
// next one.
func TestStopAndNewFreeTheLockOnlyAfterTheirCommit(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name    string
		command string
		other   bool // the lock is another grant's, not the last turn's
	}{
		{"new frees the stopped turn's lock after its commit", "/new", false},
		{"stop frees the stopped turn's lock after its commit", "/stop", false},
		{"new keeps another grant's lock", "/new", true},
		{"stop keeps another grant's lock", "/stop", true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			const key = "agent:main:telegram:dm:chat-bob"
			e := newEnv(t)
			s, err := New(testConfig(), Deps{Bus: e.bus, DB: e.db, Redis: e.rdb, RedisPrefix: e.prefix, Environ: []string{}})
			if err != nil {
				t.Fatal(err)
			}
			locker := redisx.NewLocker(e.rdb, e.prefix)
			var (
				mu           sync.Mutex
				beforeCommit []string // the lock's owner before each commit
			)
			s.stopSent = func(ctx context.Context, command string, _ pgx.Tx) {
				owner, err := locker.Owner(ctx, key)
				if err != nil {
					t.Error(err)
				}
				mu.Lock()
				defer mu.Unlock()
				beforeCommit = append(beforeCommit, owner)
			}
			runRouter(ctx, t, s)
			// The worker's turn winds down slowly: it holds the lock
			// after the stop, until the gate opens.
			g := newGate(t, "long job")
			w := e.startWorker(g.hold)
			defer g.open()

			var want string // the lock's owner between the stop and the commit
			if tt.other {
				e.ask("bob", "/status")
				want = redisx.NewGrant(time.Now())
				if err := e.rdb.Set(ctx, locker.Key(key), want, time.Minute).Err(); err != nil {
					t.Fatal(err)
				}
			} else {
				e.publish(dm("bob", "long job"))
				waitFor(t, "the turn runs", func() bool { turns, _ := w.snapshot(); return len(turns) == 1 })
				turns, _ := w.snapshot()
				want = redisx.Holder(turns[0].GetLockToken(), "test-worker.1")
				waitFor(t, "the worker holds the lock", func() bool { o, _ := locker.Owner(ctx, key); return o == want })
			}

			e.ask("bob", tt.command)
			mu.Lock()
			got := slices.Clone(beforeCommit)
			mu.Unlock()
			if len(got) != 1 || got[0] != want {
				t.Errorf("the lock before %s committed: %q, want %q (freed only after the commit)", tt.command, got, want)
			}
			after := ""
			if tt.other {
				after = want
			}
			if o, err := locker.Owner(ctx, key); err != nil || o != after {
				t.Errorf("the lock after %s: %q (%v), want %q", tt.command, o, err, after)
			}
		})
	}
}

// A worker that claims the stopped turn's grant between the stop and the
// commit of /stop or /new (the turn was waiting for one) subscribed to
// its controls after the stop went out: it runs on, holding the session,
// until its first write finds the generation moved on. The lock freed
// after the commit is the stopped turn's whoever of its attempts holds it
// then: the compare-and-delete with the bare grant read before the stop
// missed that claim and left the session held by the stopped turn.
func TestStopAndNewFreeTheLockALateClaimTook(t *testing.T) {
	t.Parallel()
	for _, command := range []string{"/stop", "/new"} {
		t.Run(command, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			const key = "agent:main:telegram:dm:chat-bob"
			e := newEnv(t)
			s, err := New(testConfig(), Deps{Bus: e.bus, DB: e.db, Redis: e.rdb, RedisPrefix: e.prefix, Environ: []string{}})
			if err != nil {
				t.Fatal(err)
			}
			locker := redisx.NewLocker(e.rdb, e.prefix)
			late := make(chan string, 1)
			s.stopSent = func(ctx context.Context, _ string, _ pgx.Tx) {
				// A worker claims the waiting turn's grant now.
				owner, err := locker.Owner(ctx, key)
				if err != nil {
					t.Error(err)
					return
				}
				holder := redisx.Holder(owner, "late-worker.1")
				if c, err := locker.Claim(ctx, key, owner, holder, time.Minute); err != nil || c != redisx.Claimed {
					t.Errorf("claim %q: %v, %v", owner, c, err)
				}
				select {
				case late <- holder:
				default: // a retried transaction's
				}
			}
			runRouter(ctx, t, s)
			// No worker: the turn waits for one under its bare grant.
			e.publish(dm("bob", "long job"))
			waitFor(t, "the turn is started", func() bool {
				sess, err := sessionstore.New(e.db).Get(ctx, key)
				o, _ := locker.Owner(ctx, key)
				return err == nil && sess.LastTurnID != "" && o == sess.LastTurnID
			})

			e.ask("bob", command)
			holder := <-late
			if o, err := locker.Owner(ctx, key); err != nil || o != "" {
				t.Errorf("the lock after %s: %q (%v), want it freed (the stopped turn's late claim %q)", command, o, err, holder)
			}
		})
	}
}

// testClock is the clock of a router a test moves.
type testClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *testClock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.now }

func (c *testClock) set(t time.Time) { c.mu.Lock(); defer c.mu.Unlock(); c.now = t }

func (c *testClock) advance(d time.Duration) { c.mu.Lock(); defer c.mu.Unlock(); c.now = c.now.Add(d) }

// startRouterOnClock starts a router of cfg whose clock reads start
// until the test moves it; it stops at the test's end.
func (e *env) startRouterOnClock(cfg Config, start time.Time) *testClock {
	e.t.Helper()
	clock := &testClock{now: start}
	s, err := New(cfg, Deps{Bus: e.bus, DB: e.db, Redis: e.rdb, RedisPrefix: e.prefix, Environ: []string{}, Now: clock.Now})
	if err != nil {
		e.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	e.t.Cleanup(func() { cancel(); <-done })
	return clock
}
