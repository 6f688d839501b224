package main

import (
	"context"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/switchboard-chat/switchboard/pkg/telegramfake"
)

// TestWholeSystemCron runs `switchboard dev` with the Telegram gateway
// pointed at the fake Bot API and the scheduler ticking every second. A
// job made with /cron and run with /cron run, and a job the agent makes
// with its cronjob tool (a one-shot a few seconds ahead), each fire once
// in a fresh session of their own: their answers reach the chat they
// were made in, under Hermes's "Cronjob Response" header, once.
func TestWholeSystemCron(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the whole system")
	}
	t.Parallel()
	tg, err := telegramfake.New("4545:telegram-test-token", "switchboard_bot")
	if err != nil {
		t.Fatal(err)
	}
	defer tg.Close()
	d := startDev(t,
		"GATEWAY_ALLOW_ALL_USERS=true",
		"TELEGRAM_BOT_TOKEN=4545:telegram-test-token", "TELEGRAM_API_BASE_URL="+tg.URL,
		"SWITCHBOARD_GATEWAYS__TELEGRAM__POLL_TIMEOUT=1s",
		"SWITCHBOARD_ROUTER__HOME_NOTICE=false",
		"SWITCHBOARD_CRON__TICK=1s",
		"SWITCHBOARD_CRON__TIMEZONE=UTC",
	)
	defer d.stop(t)
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	chat := &annChat{t: t, ctx: ctx, tg: tg, d: d}
	shown, waitFor, say, count := chat.shown, chat.waitFor, chat.say, countContaining

	// /cron add, then /cron run: the job fires on the next tick.
	say("/cron add 1d ping the build")
	got := waitFor("the job's creation", func(s []string) bool { return count(s, "Created job: ") == 1 })
	m := regexp.MustCompile(`Created job: ([0-9a-f]{12})`).FindStringSubmatch(strings.Join(got, "\n"))
	if m == nil {
		t.Fatalf("no job id in %q", got)
	}
	id := m[1]
	say("/cron run " + id)
	waitFor("the trigger's answer", func(s []string) bool { return count(s, "Triggered job: ping the build ("+id+")") == 1 })
	got = waitFor("the run's answer", func(s []string) bool { return count(s, "Cronjob Response: ping the build") == 1 })
	run := got[len(got)-1]
	if !strings.Contains(run, "You are running as a scheduled cron job") || !strings.Contains(run, "ping the build") ||
		!strings.Contains(run, "Note: The agent cannot see this message") {
		t.Errorf("the run's answer %q", run)
	}

	// The agent's tool: a one-shot three seconds ahead.
	at := time.Now().UTC().Add(3 * time.Second).Format(time.RFC3339)
	say(`remind me [[tool:cronjob {"action":"create","schedule":"` + at + `","prompt":"the tea is ready","name":"Tea"}]]`)
	waitFor("the tool's answer", func(s []string) bool {
		return count(s, "echo: remind me") == 1 && count(s, "Cron job 'Tea' created.") == 1
	})
	waitFor("the tool job's run", func(s []string) bool { return count(s, "Cronjob Response: Tea") == 1 })

	// Each fired once: a few more ticks add nothing.
	time.Sleep(3 * time.Second)
	got = shown()
	if count(got, "Cronjob Response: ping the build") != 1 || count(got, "Cronjob Response: Tea") != 1 {
		t.Errorf("the chat shows %q, want each run's answer once", got)
	}
	// The runs are on record: both one-shots completed, the triggered one
	// by its run asked for (as Hermes's run-now, that run is its one run).
	say("/cron list all")
	got = waitFor("the list", func(s []string) bool { return count(s, "Scheduled Jobs:") == 1 })
	list := got[len(got)-1]
	if !strings.Contains(list, "ID: "+id) || !strings.Contains(list, "Name: Tea\n  State: completed") ||
		!strings.Contains(list, "Name: ping the build\n  State: completed") || strings.Count(list, "(ok)") != 2 {
		t.Errorf("the list %q", list)
	}
}

// TestWholeSystemCronRunOutlastsMaxRunDuration runs `switchboard dev`
// with cron.max_run_duration at one second and a model that takes six to
// answer: a run of a job goes on well past the bound, on a real worker
// that renews its session's lock. As Hermes's tick skips a job whose
// run is still going, a run asked for meanwhile does not start beside
// it (the scheduler finds the run's lock held and renews the hold); it
// starts once the first run ended, and each answer comes once.
func TestWholeSystemCronRunOutlastsMaxRunDuration(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the whole system")
	}
	t.Parallel()
	tg, err := telegramfake.New("4646:telegram-test-token", "switchboard_bot")
	if err != nil {
		t.Fatal(err)
	}
	defer tg.Close()
	d := startDev(t,
		"GATEWAY_ALLOW_ALL_USERS=true",
		"TELEGRAM_BOT_TOKEN=4646:telegram-test-token", "TELEGRAM_API_BASE_URL="+tg.URL,
		"SWITCHBOARD_GATEWAYS__TELEGRAM__POLL_TIMEOUT=1s",
		"SWITCHBOARD_ROUTER__HOME_NOTICE=false",
		"SWITCHBOARD_CRON__TICK=1s",
		"SWITCHBOARD_CRON__MAX_RUN_DURATION=1s",
		"SWITCHBOARD_CRON__TIMEZONE=UTC",
	)
	defer d.stop(t)
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	chat := &annChat{t: t, ctx: ctx, tg: tg, d: d}
	waitFor, say, count := chat.waitFor, chat.say, countContaining

	say("/cron add every 1d slow report [[latency:6s]]")
	got := waitFor("the job's creation", func(s []string) bool { return count(s, "Created job: ") == 1 })
	m := regexp.MustCompile(`Created job: ([0-9a-f]{12})`).FindStringSubmatch(strings.Join(got, "\n"))
	if m == nil {
		t.Fatalf("no job id in %q", got)
	}
	id := m[1]
	// runs are the job's runs that have a session: each run that started.
	runs := func() (n int, holding string) {
		t.Helper()
		if err := d.db.QueryRow(ctx, `SELECT (SELECT count(*) FROM sessions WHERE session_key LIKE 'agent:main:cron:dm:' || $1 || '\_%'),
  running_run_id FROM cron_jobs WHERE id = $1`, id).Scan(&n, &holding); err != nil {
			t.Fatal(err)
		}
		return n, holding
	}
	say("/cron run " + id)
	var first string
	for first == "" {
		if ctx.Err() != nil {
			t.Fatalf("the run did not start; stderr:\n%s", d.stderr.String())
		}
		time.Sleep(50 * time.Millisecond)
		if n, holding := runs(); n == 1 {
			first = holding
		}
	}
	for {
		owner, err := d.locker.Owner(ctx, "agent:main:cron:dm:"+first)
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(owner, "/") {
			break // a worker runs it
		}
		if ctx.Err() != nil {
			t.Fatalf("no worker took the run; stderr:\n%s", d.stderr.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
	// Past cron.max_run_duration, the run still going: asked again, the
	// job waits.
	time.Sleep(2 * time.Second)
	say("/cron run " + id)
	got = waitFor("the trigger's answer", func(s []string) bool { return count(s, "Triggered job: ") == 2 })
	time.Sleep(2500 * time.Millisecond)
	if n, holding := runs(); n != 1 || holding != first {
		t.Fatalf("%d runs started while the first went on, the job held by %q; want 1, %q", n, holding, first)
	}
	if count(got, "It will run once its current run ends.") != 1 {
		t.Errorf("the trigger's answer: %q", got)
	}
	if c := count(chat.shown(), "Cronjob Response: slow report"); c != 0 {
		t.Fatalf("%d answers before the first run could end", c)
	}
	// The first run ends; the run asked for starts then, and ends too.
	waitFor("the first run's answer", func(s []string) bool { return count(s, "Cronjob Response: slow report") >= 1 })
	waitFor("the second run's answer", func(s []string) bool { return count(s, "Cronjob Response: slow report") == 2 })
	if n, _ := runs(); n != 2 {
		t.Errorf("%d runs, want 2", n)
	}
	time.Sleep(2 * time.Second)
	if c := count(chat.shown(), "Cronjob Response: slow report"); c != 2 {
		t.Errorf("%d answers, want 2", c)
	}
}
