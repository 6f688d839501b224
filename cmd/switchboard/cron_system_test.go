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
