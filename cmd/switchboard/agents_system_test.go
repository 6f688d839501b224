package main

import (
	"context"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/switchboard-chat/switchboard/pkg/telegramfake"
)

// TestWholeSystemAgents runs `switchboard dev` with the Telegram gateway
// pointed at the fake Bot API and a model that takes its time. /agents,
// sent while a turn runs, answers at once with the running turn (on the
// real worker that claimed it), the /queue'd message behind it and a
// /background task in flight, without disturbing either: the turn's
// answer, the queued message's and the task's all come once. An idle
// chat gets Hermes's empty answer.
func TestWholeSystemAgents(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the whole system")
	}
	t.Parallel()
	tg, err := telegramfake.New("4747:telegram-test-token", "switchboard_bot")
	if err != nil {
		t.Fatal(err)
	}
	defer tg.Close()
	d := startDev(t,
		"GATEWAY_ALLOW_ALL_USERS=true",
		"TELEGRAM_BOT_TOKEN=4747:telegram-test-token", "TELEGRAM_API_BASE_URL="+tg.URL,
		"SWITCHBOARD_GATEWAYS__TELEGRAM__POLL_TIMEOUT=1s",
		"SWITCHBOARD_ROUTER__HOME_NOTICE=false",
	)
	defer d.stop(t)
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	chat := &annChat{t: t, ctx: ctx, tg: tg, d: d}
	waitFor, say, count, index := chat.waitFor, chat.say, countContaining, indexContaining

	say("/agents")
	got := waitFor("/agents when idle", func(s []string) bool { return count(s, "Active Agents & Tasks") == 1 })
	if idle := got[index(got, "Active Agents & Tasks")]; !strings.HasSuffix(idle, "No active agents or running tasks.") ||
		!strings.Contains(idle, "Active agents: 0") {
		t.Errorf("/agents when idle: %q", idle)
	}

	key := "agent:main:telegram:dm:99"
	say("think it over [[latency:10s]]")
	for {
		owner, err := d.locker.Owner(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(owner, "/") {
			break // a worker claimed the turn
		}
		if ctx.Err() != nil {
			t.Fatalf("no worker claimed the turn; stderr:\n%s", d.stderr.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
	say("/queue and then this")
	waitFor("the queue's acknowledgement", func(s []string) bool { return count(s, "Queued for the next turn") == 1 })
	say("/bg count the stars [[latency:10s]]")
	waitFor("the task's acknowledgement", func(s []string) bool { return count(s, "Background task started") == 1 })

	say("/tasks")
	got = waitFor("/tasks mid-turn", func(s []string) bool { return count(s, "Active Agents & Tasks") == 2 })
	if count(got, "echo: think it over") != 0 {
		t.Fatalf("the turn ended before /tasks answered: %q", got)
	}
	var answer string
	for _, m := range got {
		if strings.Contains(m, "Active Agents & Tasks") {
			answer = m
		}
	}
	t.Logf("/tasks mid-turn:\n%s", answer)
	for _, re := range []string{
		`Active agents: 1\n1\. ` + regexp.QuoteMeta(key) + ` · running · \d+s · \d{8}_\d{6}_[0-9a-f]{8} · .+ · worker \S+`,
		`Waiting messages: 1\n- \d+s · and then this`,
		`Background tasks: 1\n- bg_\d{6}_[0-9a-f]{6} · (starting|running) · \d+s · count the stars \[\[latency:10s\]\]`,
	} {
		if !regexp.MustCompile(re).MatchString(answer) {
			t.Errorf("/tasks mid-turn: %q does not match %q", answer, re)
		}
	}

	got = waitFor("every answer", func(s []string) bool {
		return count(s, "echo: think it over") == 1 && count(s, "echo: and then this") == 1 && count(s, "Background task complete") == 1
	})
	if index(got, "echo: think it over") > index(got, "echo: and then this") {
		t.Errorf("the queued message was answered before the turn it waited for: %q", got)
	}
	time.Sleep(2 * time.Second)
	got = chat.shown()
	if count(got, "echo: think it over") != 1 || count(got, "echo: and then this") != 1 || count(got, "Background task complete") != 1 {
		t.Errorf("the chat shows %q, want each answer once", got)
	}
}
