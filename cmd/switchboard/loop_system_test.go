package main

import (
	"testing"
	"time"

	"github.com/switchboard-chat/switchboard/pkg/telegramfake"
)

// TestWholeSystemLoop runs Hermes's /loop through `switchboard dev`
// (router scheduler, worker, delivery, the Telegram gateway against the
// fake Bot API, the fake model as agent and as the --until judge;
// router.loop_min_interval 5s): the first wakeup runs at once in the
// chat's conversation, the next after the interval, and the loop ends
// after --times runs, when the judge rules the --until condition met,
// or when the agent answers LOOP_COMPLETE on a line of its own, each
// with its line once, after the answer it is about.
func TestWholeSystemLoop(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the whole system")
	}
	t.Parallel()
	tg, err := telegramfake.New("4848:telegram-test-token", "switchboard_bot")
	if err != nil {
		t.Fatal(err)
	}
	defer tg.Close()
	d := startDev(t,
		"GATEWAY_ALLOW_ALL_USERS=true",
		"TELEGRAM_BOT_TOKEN=4848:telegram-test-token", "TELEGRAM_API_BASE_URL="+tg.URL,
		"SWITCHBOARD_GATEWAYS__TELEGRAM__POLL_TIMEOUT=1s",
		"SWITCHBOARD_ROUTER__HOME_NOTICE=false",
		"SWITCHBOARD_ROUTER__LOOP_MIN_INTERVAL=5s",
		"SWITCHBOARD_ROUTER__LOOP_POLL_INTERVAL=200ms",
	)
	defer d.stop(t)
	chat := func(t *testing.T, id int) *goalChat { return newGoalChat(t, tg, d, id) }
	t.Run("chats", func(t *testing.T) {
		t.Run("--times", func(t *testing.T) {
			t.Parallel()
			c := chat(t, 401)
			c.say("hello")
			c.waitFor("the first answer", func(s []string) bool { return countContaining(s, "echo: hello") == 1 })
			c.say("/loop 1s count sheep --times 2")
			c.waitFor("the loop finished", func(s []string) bool { return countContaining(s, "✓ Loop finished — ran 2/2 times.") == 1 })
			got := c.settled(7 * time.Second)
			if !inOrder(got, "↻ Loop set (every 5s): count sheep\n(interval raised to the 5s minimum",
				"echo: [/loop wakeup #1, every 5s]", "echo: [/loop wakeup #2, every 5s]", "✓ Loop finished — ran 2/2 times.") ||
				countContaining(got, "echo: [/loop wakeup") != 2 || countContaining(got, "✓ Loop finished") != 1 {
				t.Errorf("the chat shows %q", got)
			}
			c.say("/loop status")
			c.waitFor("the status", func(s []string) bool {
				return countContaining(s, "✓ Loop finished (2 ticks — completed the requested 2 runs): count sheep") == 1
			})
		})
		t.Run("--until", func(t *testing.T) {
			t.Parallel()
			c := chat(t, 402)
			c.say("/loop 5s look at the fence --until the fence is painted [[verdict:continue times=1]] [[verdict:done]]")
			c.waitFor("the loop finished", func(s []string) bool {
				return countContaining(s, "✓ Loop finished after 2 ticks — fake judge: done") == 1
			})
			got := c.settled(7 * time.Second)
			if !inOrder(got, "↻ Loop set (every 5s): look at the fence\nStops when: the fence is painted",
				"echo: [/loop wakeup #1, every 5s]", "echo: [/loop wakeup #2, every 5s]", "✓ Loop finished after 2 ticks") ||
				countContaining(got, "echo: [/loop wakeup") != 2 {
				t.Errorf("the chat shows %q", got)
			}
		})
		t.Run("LOOP_COMPLETE", func(t *testing.T) {
			t.Parallel()
			c := chat(t, 403)
			c.say("/loop 5s wrap up\nLOOP_COMPLETE")
			c.waitFor("the loop finished", func(s []string) bool {
				return countContaining(s, "✓ Loop finished after 1 tick — task complete.") == 1
			})
			if got := c.settled(7 * time.Second); countContaining(got, "echo: [/loop wakeup") != 1 {
				t.Errorf("the loop went on after LOOP_COMPLETE: %q", got)
			}
		})
	})
}
