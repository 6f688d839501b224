package router

import (
	"context"
	"reflect"
	"regexp"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/switchboard-chat/switchboard/pkg/cron"
	"github.com/switchboard-chat/switchboard/pkg/cron/schedule"
	eventsv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/events/v1"
	turnsv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/turns/v1"
	"github.com/switchboard-chat/switchboard/pkg/redisx"
	"github.com/switchboard-chat/switchboard/pkg/sessionstore"
)

func TestSplitSchedule(t *testing.T) {
	cases := []struct{ in, sched, prompt string }{
		{`30m Remind me to check the build`, "30m", "Remind me to check the build"},
		{`"every 2h" "Check server status"`, "every 2h", "Check server status"},
		{`'in 30m' stretch`, "in 30m", "stretch"},
		{`every 2h Check  the   server`, "every 2h", "Check  the   server"},
		{`0 9 * * * Give me a morning summary`, "0 9 * * *", "Give me a morning summary"},
		{`2026-03-15T09:00:00 Pay the rent`, "2026-03-15T09:00:00", "Pay the rent"},
		// Refused later, saying it never comes, not as "0".
		{`0 0 30 2 * Leap day party`, "0 0 30 2 *", "Leap day party"},
		{`30m`, "30m", ""},
		// Day and time phrases are read whole, not as "every <d>" and a
		// prompt that starts with the time ("every day" and "at 9am ...").
		{`every day at 9am Check the news`, "every day at 9am", "Check the news"},
		{`weekdays at 9:30 pm Stand-up notes`, "weekdays at 9:30 pm", "Stand-up notes"},
		{`Every Mon, Wed and Fri at noon Gym`, "Every Mon, Wed and Fri at noon", "Gym"},
		{`monday 9am  Plan the  week`, "monday 9am", "Plan the  week"},
		{`every monday 9am`, "every monday 9am", ""},
		{`every day summary`, "every day", "summary"},
		// A bare number after the days may start the prompt: as
		// Hermes's /cron add, the schedule is then the first word
		// ("monday", refused), never Mondays at 03:00; "at" or a quoted
		// schedule makes it the time.
		{`monday 3 things`, "monday", "3 things"},
		{`Mon, Wed 7 stretches`, "Mon,", "Wed 7 stretches"},
		{`every monday 3 things`, "every", "monday 3 things"},
		{`every day 7 stretch`, "every", "day 7 stretch"},
		{`monday at 3 things`, "monday at 3", "things"},
		{`every day at 7 stretch`, "every day at 7", "stretch"},
		{`"monday 3" things`, "monday 3", "things"},
		{`0 9 * * 1 Weekly plan`, "0 9 * * 1", "Weekly plan"},
		{`"every 2h`, "", ""},
		{``, "", ""},
	}
	for _, c := range cases {
		s, p := splitSchedule(c.in)
		if s != c.sched || p != c.prompt {
			t.Errorf("splitSchedule(%q) = %q, %q; want %q, %q", c.in, s, p, c.sched, c.prompt)
		}
	}
}

// TestSplitScheduleRefusesABareHour: /cron add with days and a bare
// number, unquoted and without "at", makes no job (Hermes's /cron add
// reads the first word, which is no schedule), rather than one on
// another schedule than either reading: "every day 7 stretch" is not
// the interval "every day" with the prompt "7 stretch", nor "day 7
// stretch" a run in 24 hours (a bare "day" is no duration: Hermes's
// parse_duration wants its digits).
func TestSplitScheduleRefusesABareHour(t *testing.T) {
	for _, in := range []string{`monday 3 things`, `Mon, Wed 7 stretches`, `every monday 3 things`, `every day 7 stretch`,
		`every weekday 8 standup`, `Every Mon and Fri 9 gym`, `day 7 stretch`, `daily 7 stretch`, `weekdays 8 standup`} {
		s, p := splitSchedule(in)
		if _, err := schedule.Parse(s, time.Now(), time.UTC); err == nil {
			t.Errorf("splitSchedule(%q) = %q, %q: a schedule, want one refused", in, s, p)
		}
	}
}

func TestParseCronEdit(t *testing.T) {
	str := func(s string) *string { return &s }
	num := func(n int) *int { return &n }
	cases := []struct {
		in   string
		ref  string
		u    cron.Update
		fail string
	}{
		{in: `abc123 --schedule "every 4h"`, ref: "abc123", u: cron.Update{Schedule: str("every 4h")}},
		{in: `--prompt 'Use the "revised" task' abc123`, ref: "abc123", u: cron.Update{Prompt: str(`Use the "revised" task`)}},
		{in: `morning digest --name=Digest --deliver telegram:-100:7 --repeat 3`, ref: "morning digest",
			u: cron.Update{Name: str("Digest"), Deliver: str("telegram:-100:7"), Repeat: num(3)}},
		{in: `j --repeat forever --SCHEDULE 0\ 9\ *\ *\ *`, ref: "j", u: cron.Update{Repeat: num(0), Schedule: str("0 9 * * *")}},
		{in: `j --prompt "a \"quoted\" C:\path"`, ref: "j", u: cron.Update{Prompt: str(`a "quoted" C:\path`)}},
		{in: `j --repeat once`, ref: "j", u: cron.Update{Repeat: num(1)}},
		{in: `j`, ref: "j"},
		{in: ``},
		{in: `j --skill arxiv`, fail: "--skill: Switchboard's cron jobs have no per-job skills"},
		{in: `j --model gpt-5`, fail: "no per-job models"},
		{in: `j --frobnicate`, fail: "unknown option --frobnicate"},
		{in: `j --schedule`, fail: "--schedule needs a value"},
		{in: `j --repeat often`, fail: "invalid repeat value"},
		{in: `j --prompt "unclosed`, fail: "unclosed \" quote"},
	}
	for _, c := range cases {
		ref, u, err := parseCronEdit(c.in)
		if c.fail != "" {
			if err == nil || !strings.Contains(err.Error(), c.fail) {
				t.Errorf("parseCronEdit(%q): error %v, want %q", c.in, err, c.fail)
			}
			continue
		}
		if err != nil || ref != c.ref || !reflect.DeepEqual(u, c.u) {
			t.Errorf("parseCronEdit(%q) = %q, %+v, %v; want %q, %+v", c.in, ref, u, err, c.ref, c.u)
		}
	}
}

// TestCronCommand: /cron manages the sender's own jobs with Hermes's
// texts; another user sees none of them; admin lists apply as to the
// other commands.
func TestCronCommand(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	cfg := testConfig()
	e.startRouter(cfg, nil, nil)

	if got := e.ask("alice", "/cron"); !strings.Contains(got, "/cron add <schedule> <prompt>") || !strings.HasSuffix(got, "No scheduled jobs. Use '/cron add' to create one.") {
		t.Errorf("/cron: %q", got)
	}
	if got := e.ask("alice", "/cron list"); got != "No scheduled jobs." {
		t.Errorf("empty list: %q", got)
	}
	got := e.ask("alice", `/cron add "every 2h" Check the server status`)
	m := regexp.MustCompile(`^Created job: ([0-9a-f]{12})\n  Schedule: every 120m\n  Next run: \d{4}-\d\d-\d\d \d\d:\d\d UTC$`).FindStringSubmatch(got)
	if m == nil {
		t.Fatalf("/cron add: %q", got)
	}
	id := m[1]
	j, err := cron.New(e.db, nil, nil).Resolve(context.Background(), "telegram:alice", id)
	if err != nil || j.Origin != (cron.Origin{Platform: "telegram", Account: "bot1", ChatID: "chat-alice"}) || j.Deliver != "origin" || j.Prompt != "Check the server status" {
		t.Fatalf("stored job %+v %v", j, err)
	}
	if got := e.ask("alice", "/cron list"); !strings.Contains(got, "ID: "+id) || !strings.Contains(got, "Schedule: every 120m (forever)") ||
		!strings.Contains(got, "Prompt: Check the server status") || !strings.Contains(got, "State: scheduled") {
		t.Errorf("list: %q", got)
	}
	if got := e.ask("bob", "/cron list"); got != "No scheduled jobs." {
		t.Errorf("bob lists %q", got)
	}
	if got := e.ask("alice", "/cron"); !strings.Contains(got, "/cron pause <job_id>") || !strings.Contains(got, "Scheduled Jobs:\n\n  ID: "+id) {
		t.Errorf("/cron with a job: %q", got)
	}
	if got := e.ask("bob", "/cron pause "+id); !strings.Contains(got, "Failed to pause job: Job with ID or name '"+id+"' not found.") {
		t.Errorf("bob pauses alice's job: %q", got)
	}
	if got := e.ask("alice", "/cron pause "+id); got != "Paused job: Check the server status ("+id+")" {
		t.Errorf("pause: %q", got)
	}
	if got := e.ask("alice", "/cron list"); got != "No scheduled jobs." {
		t.Errorf("list without paused: %q", got)
	}
	if got := e.ask("alice", "/cron list all"); !strings.Contains(got, "State: paused") {
		t.Errorf("list all: %q", got)
	}
	if got := e.ask("alice", "/cron resume check the SERVER status"); !strings.HasPrefix(got, "Resumed job: Check the server status ("+id+")\n  Next run: ") {
		t.Errorf("resume by name: %q", got)
	}
	if got := e.ask("alice", "/cron run "+id); got != "Triggered job: Check the server status ("+id+")\n  It will run on the next scheduler tick." {
		t.Errorf("run: %q", got)
	}
	// As Hermes's trigger_job, run schedules a paused job again.
	if got := e.ask("alice", "/cron pause "+id); got != "Paused job: Check the server status ("+id+")" {
		t.Errorf("pause: %q", got)
	}
	if got := e.ask("alice", "/cron run "+id); got != "Triggered job: Check the server status ("+id+")\n  It will run on the next scheduler tick." {
		t.Errorf("run while paused: %q", got)
	}
	if got := e.ask("alice", "/cron list"); !strings.Contains(got, "State: scheduled") {
		t.Errorf("list after running a paused job: %q", got)
	}
	if got := e.ask("alice", `/cron edit check the server status --schedule "every 4h" --prompt 'Check the server, report red'`); !regexp.MustCompile(
		`^Updated job: ` + id + `\n  Name: Check the server status\n  Schedule: every 240m \(forever\)\n  Next run: \d{4}-`).MatchString(got) {
		t.Errorf("edit: %q", got)
	}
	if j, err := cron.New(e.db, nil, nil).Resolve(context.Background(), "telegram:alice", id); err != nil || j.Prompt != "Check the server, report red" || j.Display != "every 240m" {
		t.Errorf("edited job %+v %v", j, err)
	}
	if got := e.ask("alice", "/cron edit "+id+" --skill arxiv"); got != "Failed to update job: --skill: Switchboard's cron jobs have no per-job skills" {
		t.Errorf("edit skills: %q", got)
	}
	if got := e.ask("alice", "/cron edit "+id); got != "Failed to update job: No updates provided." {
		t.Errorf("edit nothing: %q", got)
	}
	if got := e.ask("bob", "/cron edit "+id+" --name mine"); !strings.HasPrefix(got, "Failed to update job: Job with ID or name '"+id+"' not found.") {
		t.Errorf("bob edits alice's job: %q", got)
	}
	// As Hermes's job list: why the last run's answer was not delivered.
	run := id + "_20260101_090000"
	if _, err := e.db.Exec(context.Background(), `UPDATE cron_jobs SET last_run_at = now(), last_status = 'ok', last_run_id = $2 WHERE id = $1`, id, run); err != nil {
		t.Fatal(err)
	}
	if ok, err := cron.RecordDeliveryFailure(context.Background(), e.db, run, "", "Forbidden: bot was blocked by the user"); err != nil || !ok {
		t.Fatalf("record the delivery failure: %v %v", ok, err)
	}
	if got := e.ask("alice", "/cron list"); !regexp.MustCompile(`\n  Last run: \d{4}-\d\d-\d\d \d\d:\d\d UTC \(delivery_failed\)\n  Delivery failed: Forbidden: bot was blocked by the user`).MatchString(got) ||
		strings.Contains(got, "Last error:") {
		t.Errorf("list with a delivery failure: %q", got)
	}
	if _, err := cron.New(e.db, nil, nil).RecordOutcome(context.Background(), run, "error", "the model is unavailable"); err != nil {
		t.Fatal(err)
	}
	if got := e.ask("alice", "/cron list"); !strings.Contains(got, " (error)\n  Last error: the model is unavailable\n  Delivery failed: Forbidden: bot was blocked by the user") {
		t.Errorf("list with a failed run: %q", got)
	}
	// A completed job is not revived by a new schedule (Hermes's
	// update_job refuses to activate a terminal job), nor run.
	if _, err := e.db.Exec(context.Background(), `UPDATE cron_jobs SET state = 'completed', next_run_at = NULL, manual_run_at = NULL WHERE id = $1`, id); err != nil {
		t.Fatal(err)
	}
	if got := e.ask("alice", "/cron edit "+id+` --schedule "every 1h"`); got != "Failed to update job: job 'Check the server status' has completed; its schedule cannot be changed: create a new job" {
		t.Errorf("edit a completed job's schedule: %q", got)
	}
	if got := e.ask("alice", "/cron run "+id); got != "Failed to run job: job 'Check the server status' has completed; there is nothing left to run: create a new job" {
		t.Errorf("run a completed job: %q", got)
	}
	if got := e.ask("alice", "/cron add whenever do it"); !strings.HasPrefix(got, "Failed to create job: \"whenever\". Use:") {
		t.Errorf("bad schedule: %q", got)
	}
	if got := e.ask("alice", "/cron add 30m"); got != "Usage: /cron add <schedule> <prompt>" {
		t.Errorf("no prompt: %q", got)
	}
	if got := e.ask("alice", "/cron remove"); got != "Usage: /cron remove <job_id>" {
		t.Errorf("no id: %q", got)
	}
	if got := e.ask("alice", "/cron frobnicate"); got != "Unknown cron command: frobnicate\n  Available: list, add, edit, pause, resume, run, remove" {
		t.Errorf("unknown: %q", got)
	}
	if got := e.ask("alice", "/cron rm "+id); got != "Removed job: Check the server status ("+id+")" {
		t.Errorf("remove: %q", got)
	}
}

// TestCronCommandAdmins: where an admin list exists, /cron is theirs.
func TestCronCommandAdmins(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	cfg := testConfig()
	cfg.Admins = map[string][]string{"telegram": {"alice"}}
	e.startRouter(cfg, nil, nil)
	if got := e.ask("bob", "/cron list"); !strings.Contains(got, "/cron is reserved for admins here.") {
		t.Errorf("non-admin: %q", got)
	}
	if got := e.ask("alice", "/cron list"); got != "No scheduled jobs." {
		t.Errorf("admin: %q", got)
	}
}

// TestCronOutcome: a cron run's turn that failed marks its job's last
// status; completions of other sessions, and of a run that is neither
// the job's last nor its pending one, are not read for it.
func TestCronOutcome(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	s := e.startRouter(testConfig(), nil, nil)
	j, err := s.cron.Create(context.Background(), cron.NewJob{Owner: "telegram:alice", Prompt: "p", Schedule: "every 1h",
		Origin: cron.Origin{Platform: "telegram", ChatID: "chat-alice"}})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	// The run due next (published; the commit recording it not yet made).
	run := cron.RunID(j.ID, j.NextRunAt, false)
	for _, ev := range []*turnsv1.TurnCompleted{
		{SessionKey: "agent:main:telegram:dm:" + run, Status: turnsv1.TurnStatus_TURN_STATUS_FAILED, Error: "nope"},
		{SessionKey: "agent:main:cron:dm:" + run, Status: turnsv1.TurnStatus_TURN_STATUS_COMPLETED},
		{SessionKey: "agent:main:cron:dm:" + cron.RunID(j.ID, j.NextRunAt.Add(-time.Hour), false), Status: turnsv1.TurnStatus_TURN_STATUS_FAILED, Error: "old"},
		{SessionKey: "agent:main:cron:dm:" + j.ID, Status: turnsv1.TurnStatus_TURN_STATUS_FAILED, Error: "no run"},
	} {
		if err := s.cronOutcome(ctx, ev); err != nil {
			t.Fatal(err)
		}
	}
	// Only the pending run's completion counts: it is the job's last run, ok.
	if got, _ := s.cron.Resolve(ctx, "telegram:alice", j.ID); got.LastStatus != "ok" || got.LastError != "" || got.LastRunID != run {
		t.Fatalf("status %q %q, last run %q", got.LastStatus, got.LastError, got.LastRunID)
	}
	if err := s.cronOutcome(ctx, &turnsv1.TurnCompleted{SessionKey: "agent:main:cron:dm:" + run,
		Status: turnsv1.TurnStatus_TURN_STATUS_FAILED, Error: "the model is unavailable"}); err != nil {
		t.Fatal(err)
	}
	if got, _ := s.cron.Resolve(ctx, "telegram:alice", j.ID); got.LastStatus != "error" || got.LastError != "the model is unavailable" || got.LastRunID != run {
		t.Errorf("after a failed run %q %q %q", got.LastStatus, got.LastError, got.LastRunID)
	}
}

// TestCronRunEndMovesInterval: the completed turn of an interval job's
// run ends the run's hold on the job (a run asked for meanwhile waits for
// it, and /cron run says so) and moves the job's next run to a period
// after the turn ended (its completed_at), as Hermes counts an interval
// from the end of each run; the completion redelivered (later) moves it
// no further. A stale turn ends nothing.
func TestCronRunEndMovesInterval(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	s := e.startRouter(testConfig(), nil, nil)
	ctx := context.Background()
	j, err := s.cron.Create(ctx, cron.NewJob{Owner: "telegram:alice", Prompt: "p", Schedule: "every 1h",
		Origin: cron.Origin{Platform: "telegram", ChatID: "chat-alice"}})
	if err != nil {
		t.Fatal(err)
	}
	// The scheduler fired it (as SaveRun leaves it).
	fired := time.Date(2026, 5, 1, 9, 0, 0, 0, time.UTC)
	run := cron.RunID(j.ID, fired, false)
	if _, err := e.db.Exec(ctx, `UPDATE cron_jobs SET last_run_at = $2, last_run_id = $3, next_run_at = $4, last_status = 'ok',
  running_run_id = $3, running_until = $5 WHERE id = $1`,
		j.ID, fired, run, fired.Add(time.Hour), time.Now().Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	if got := e.ask("alice", "/cron run "+j.ID); !strings.Contains(got, "It will run once its current run ends.") {
		t.Errorf("/cron run of a job whose run is in flight: %q", got)
	}
	inFlight := func() string {
		got, err := s.cron.Resolve(ctx, "telegram:alice", j.ID)
		if err != nil {
			t.Fatal(err)
		}
		return got.RunningRunID
	}
	next := func() time.Time {
		got, err := s.cron.Resolve(ctx, "telegram:alice", j.ID)
		if err != nil {
			t.Fatal(err)
		}
		return got.NextRunAt
	}
	end := fired.Add(7 * time.Minute)
	if err := s.cronOutcome(ctx, &turnsv1.TurnCompleted{SessionKey: "agent:main:cron:dm:" + run,
		Status: turnsv1.TurnStatus_TURN_STATUS_STALE, CompletedAt: timestamppb.New(fired.Add(time.Minute))}); err != nil {
		t.Fatal(err)
	}
	if got := next(); !got.Equal(fired.Add(time.Hour)) || inFlight() != run {
		t.Fatalf("a stale turn moved the next run to %v or ended the run (in flight %q)", got, inFlight())
	}
	for i := range 2 { // delivered, then redelivered
		if err := s.cronOutcome(ctx, &turnsv1.TurnCompleted{SessionKey: "agent:main:cron:dm:" + run,
			Status: turnsv1.TurnStatus_TURN_STATUS_COMPLETED, CompletedAt: timestamppb.New(end)}); err != nil {
			t.Fatal(err)
		}
		if got := next(); !got.Equal(end.Add(time.Hour)) || inFlight() != "" {
			t.Errorf("delivery %d: next run %v, in flight %q; want an hour after the run ended (%v), none", i+1, got, inFlight(), end.Add(time.Hour))
		}
	}
}

// TestCronListPausedReason: a job the scheduler paused for failing to
// fire says why in /cron list (Hermes's paused_reason); resumed, it does
// not.
func TestCronListPausedReason(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	s := e.startRouter(testConfig(), nil, nil)
	ctx := context.Background()
	j, err := s.cron.Create(ctx, cron.NewJob{Owner: "telegram:alice", Prompt: "p", Schedule: "every 1h",
		Origin: cron.Origin{Platform: "telegram", ChatID: "chat-alice"}})
	if err != nil {
		t.Fatal(err)
	}
	reason := "paused by the scheduler: it failed to fire the job 5 times in a row (boom); /cron resume " + j.ID + " schedules it again"
	if _, _, err := cron.RecordFireFailure(ctx, e.db, j.ID, func(int) cron.FireFailureOutcome {
		return cron.FireFailureOutcome{LastError: "boom", Pause: true, PausedReason: reason}
	}); err != nil {
		t.Fatal(err)
	}
	if got := e.ask("alice", "/cron list all"); !strings.Contains(got, "\n  State: paused\n") || !strings.Contains(got, "\n  Paused: "+reason) {
		t.Errorf("list of a job the scheduler paused: %q", got)
	}
	if got := e.ask("alice", "/cron resume "+j.ID); !strings.Contains(got, "Resumed") {
		t.Errorf("resume: %q", got)
	}
	if got := e.ask("alice", "/cron list"); strings.Contains(got, "Paused:") || !strings.Contains(got, "State: scheduled") {
		t.Errorf("list after resume: %q", got)
	}
}

// TestCronNextRunAfterRun: after /cron run, the run asked for is the
// job's next run until it fires (as in Hermes, whose trigger_job moves
// next_run_at to now): /cron edit and /cron list show it, not the
// scheduled time after it.
func TestCronNextRunAfterRun(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	s := e.startRouter(testConfig(), nil, nil)
	ctx := context.Background()
	j, err := s.cron.Create(ctx, cron.NewJob{Owner: "telegram:alice", Prompt: "Check the server status", Schedule: "every 2h",
		Origin: cron.Origin{Platform: "telegram", ChatID: "chat-alice"}})
	if err != nil {
		t.Fatal(err)
	}
	if got := e.ask("alice", "/cron run "+j.ID); !strings.HasPrefix(got, "Triggered job: ") {
		t.Fatalf("run: %q", got)
	}
	j, err = s.cron.Resolve(ctx, "telegram:alice", j.ID)
	if err != nil || j.ManualRunAt.IsZero() {
		t.Fatalf("the job after /cron run: %+v %v", j, err)
	}
	want := "\n  Next run: " + s.when(j.ManualRunAt)
	if s.when(j.ManualRunAt) == s.when(j.NextRunAt) {
		t.Fatalf("the run asked for (%v) and the scheduled one (%v) read the same", j.ManualRunAt, j.NextRunAt)
	}
	if got := e.ask("alice", "/cron edit "+j.ID+" --name 'Server check'"); !strings.HasPrefix(got, "Updated job: ") || !strings.HasSuffix(got, want) {
		t.Errorf("edit after run answered %q, want it to end %q", got, want)
	}
	if got := e.ask("alice", "/cron list"); !strings.Contains(got, want+"\n") {
		t.Errorf("list after run answered %q, want %q", got, want)
	}
}

// TestCronListRunningRun: a job whose run is in flight (its turn has
// not ended, and the hold of cron.max_run_duration has not lapsed) says
// since when in /cron list: its next run waits for it.
func TestCronListRunningRun(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	s := e.startRouter(testConfig(), nil, nil)
	ctx := context.Background()
	j, err := s.cron.Create(ctx, cron.NewJob{Owner: "telegram:alice", Prompt: "p", Schedule: "every 1h",
		Origin: cron.Origin{Platform: "telegram", ChatID: "chat-alice"}})
	if err != nil {
		t.Fatal(err)
	}
	run := j.ID + "_20260101_090000"
	fired := time.Now().Add(-3 * time.Minute).UTC().Truncate(time.Minute)
	for _, c := range []struct {
		name          string
		running       string        // running_run_id
		until         time.Duration // running_until, from now
		skipped       bool          // next_skip_at set: a fire was skipped
		want, wantNot string
	}{
		{name: "in flight", running: run, until: time.Hour, want: "\n  Last run: " + s.when(fired) + " (ok)\n  Running since: " + s.when(fired),
			wantNot: "skipped"},
		{name: "another run in flight than the last recorded", running: j.ID + "_20260101_100000", until: time.Hour,
			want: "\n  Running: a run is in flight"},
		{name: "fires skipped meanwhile", running: run, until: time.Hour, skipped: true,
			want: "\n  Running since: " + s.when(fired) + " (runs due meanwhile are skipped)"},
		{name: "its turn ended", running: "", wantNot: "Running"},
		// Held until the scheduler has looked whether it still goes.
		{name: "its hold due for a look", running: run, until: -time.Second, want: "\n  Running since: " + s.when(fired)},
	} {
		t.Run(c.name, func(t *testing.T) {
			var until *time.Time
			if c.running != "" {
				u := time.Now().Add(c.until)
				until = &u
			}
			var skip *time.Time
			if c.skipped {
				u := time.Now().Add(time.Minute)
				skip = &u
			}
			if _, err := e.db.Exec(ctx, `UPDATE cron_jobs SET last_run_at = $2, last_status = 'ok', last_run_id = $3,
  running_run_id = $4, running_until = $5, next_skip_at = $6 WHERE id = $1`, j.ID, fired, run, c.running, until, skip); err != nil {
				t.Fatal(err)
			}
			got := e.ask("alice", "/cron list")
			if c.want != "" && !strings.Contains(got, c.want) {
				t.Errorf("list: %q, want %q", got, c.want)
			}
			if c.wantNot != "" && strings.Contains(got, c.wantNot) {
				t.Errorf("list: %q, want no %q", got, c.wantNot)
			}
		})
	}
}

// CronRunAlive, the scheduler's look at a run held past
// cron.max_run_duration: alive while its session's lock is held (the
// router's grant, a worker's claim) or messages wait in its queue; gone
// once nothing is left, a dead worker's claim lapsing by its TTL.
func TestCronRunAlive(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	cfg := testConfig()
	// The test queues, grants and claims the run's session itself: a
	// sweep between its enqueue and its delete would start the queued
	// message and take the grant first.
	cfg.SweepInterval = time.Hour
	s := e.startRouter(cfg, nil, nil)
	ctx := context.Background()
	run := cron.RunID("0123456789ab", time.Now(), false)
	key := "agent:main:cron:dm:" + run
	locker := redisx.NewLocker(e.rdb, e.prefix)
	alive := func(what string, want bool) {
		t.Helper()
		got, err := s.CronRunAlive(ctx, run)
		if err != nil || got != want {
			t.Fatalf("%s: alive %v (%v), want %v", what, got, err, want)
		}
	}
	alive("nothing of it", false)

	src := &eventsv1.SessionSource{Platform: "cron", Account: "default", ChatId: run, ChatType: "dm", UserId: "0123456789ab"}
	msg := &eventsv1.MessageReceived{EventId: run, MessageId: run, Text: "report", Source: src, Internal: true}
	if _, _, err := sessionstore.New(e.db).ArriveAndEnqueue(ctx, key, cfg.Profile, src, 1, false, msg, 10); err != nil {
		t.Fatal(err)
	}
	alive("its message queued", true)
	if _, err := e.db.Exec(ctx, `DELETE FROM session_queue WHERE session_key = $1`, key); err != nil {
		t.Fatal(err)
	}
	grant := redisx.NewGrant(time.Now())
	if ok, err := locker.Acquire(ctx, key, grant, time.Minute); err != nil || !ok {
		t.Fatalf("grant: %v %v", ok, err)
	}
	alive("granted to its turn", true)
	// A worker claims it under a short TTL and dies: no renewal.
	if c, err := locker.Claim(ctx, key, grant, redisx.Holder(grant, "w.1"), 300*time.Millisecond); err != nil || c == redisx.ClaimLost {
		t.Fatalf("claim: %v %v", c, err)
	}
	alive("run by a worker", true)
	waitFor(t, "the dead worker's claim to lapse", func() bool { v, _ := locker.Owner(ctx, key); return v == "" })
	alive("its worker dead", false)
	// Redis lost the lock of a turn that still runs: its lease in
	// Postgres (migration 00148) says so until the turn's worker ends it,
	// as it lets go of the lock; the turn's recorded end (its answer)
	// does not.
	if _, err := e.db.Exec(ctx, `INSERT INTO turn_leases (session_key, turn_id, generation, expires_at)
		SELECT session_key, 'cron-turn', generation, now() + interval '1 minute' FROM sessions WHERE session_key = $1`, key); err != nil {
		t.Fatal(err)
	}
	alive("its turn's lease holding, the lock lost with Redis's data", true)
	if _, err := e.db.Exec(ctx, `INSERT INTO worker_turns (turn_id, session_key, session_id, generation) VALUES ('cron-turn', $1, '', 0)`, key); err != nil {
		t.Fatal(err)
	}
	alive("its turn answered, still under its lock", true)
	if _, err := e.db.Exec(ctx, `DELETE FROM turn_leases WHERE session_key = $1 AND turn_id = 'cron-turn'`, key); err != nil {
		t.Fatal(err)
	}
	alive("its turn ended", false)
}
