package main

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/switchboard-chat/switchboard/pkg/telegramfake"
)

// goalChat is a private chat with the bot, as annChat, with its own id.
type goalChat struct {
	t     *testing.T
	ctx   context.Context
	tg    *telegramfake.Server
	d     *devProcess
	id    int
	mu    sync.Mutex
	msgID int
}

// newGoalChat is chat id of tg's bot, run by d. Its deadline starts
// when the calling (parallel) subtest runs, not when its group began:
// a parallel subtest first waits for a free slot, minutes on a busy
// CI machine.
func newGoalChat(t *testing.T, tg *telegramfake.Server, d *devProcess, id int) *goalChat {
	ctx, cancel := context.WithTimeout(context.Background(), 150*time.Second)
	t.Cleanup(cancel)
	return &goalChat{t: t, ctx: ctx, tg: tg, d: d, id: id}
}

func (c *goalChat) shown() []string {
	var out []string
	for _, m := range c.tg.Messages(fmt.Sprint(c.id)) {
		out = append(out, m.Shown)
	}
	return out
}

func (c *goalChat) waitFor(what string, cond func([]string) bool) []string {
	c.t.Helper()
	for {
		if got := c.shown(); cond(got) {
			return got
		}
		if c.ctx.Err() != nil {
			c.t.Fatalf("chat %d: timed out waiting for %s; the chat shows %q\nstderr:\n%s", c.id, what, c.shown(), c.d.stderr.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func (c *goalChat) say(text string) {
	c.mu.Lock()
	c.msgID++
	id := c.msgID
	c.mu.Unlock()
	c.tg.Inject(map[string]any{"message": map[string]any{
		"message_id": id, "date": time.Now().Unix(), "text": text,
		"chat": map[string]any{"id": c.id, "type": "private", "first_name": "Ann"},
		"from": map[string]any{"id": c.id, "is_bot": false, "first_name": "Ann"},
	}})
}

// settled returns what the chat shows once it has shown nothing new for
// quiet.
func (c *goalChat) settled(quiet time.Duration) []string {
	c.t.Helper()
	last, since := len(c.shown()), time.Now()
	for time.Since(since) < quiet {
		time.Sleep(100 * time.Millisecond)
		if n := len(c.shown()); n != last {
			last, since = n, time.Now()
		}
	}
	return c.shown()
}

// inOrder reports whether the chat shows each of parts, in this order.
func inOrder(shown []string, parts ...string) bool {
	i := 0
	for _, m := range shown {
		if i < len(parts) && strings.Contains(m, parts[i]) {
			i++
		}
	}
	return i == len(parts)
}

// TestWholeSystemGoal runs Hermes's /goal through `switchboard dev`
// (router, worker, delivery, the Telegram gateway against the fake Bot
// API, the fake model as agent and as judge; router.goal_max_turns 3,
// busy mode queue): the goal's text runs at once, the judge rules after
// every turn, a continuation runs while it says continue, and each
// verdict's status line shows after the answer it is about, once.
func TestWholeSystemGoal(t *testing.T) {
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
		"SWITCHBOARD_ROUTER__GOAL_MAX_TURNS=3",
		"SWITCHBOARD_ROUTER__BUSY_MODE=queue",
	)
	defer d.stop(t)
	chat := func(t *testing.T, id int) *goalChat { return newGoalChat(t, tg, d, id) }
	// The chats run side by side; the group ends when all have.
	t.Run("chats", func(t *testing.T) { goalChats(t, chat) })
}

func goalChats(t *testing.T, chat func(*testing.T, int) *goalChat) {
	const cont = "echo: [Continuing toward your standing goal] Goal: "
	t.Run("continue twice, then done", func(t *testing.T) {
		t.Parallel()
		c := chat(t, 301)
		c.say("/goal count to three [[verdict:continue times=2]] [[verdict:done]]")
		c.waitFor("the goal achieved", func(s []string) bool { return countContaining(s, "✓ Goal achieved") == 1 })
		got := c.settled(2 * time.Second)
		if !inOrder(got,
			"⊙ Goal set (3-turn budget): count to three",
			"echo: count to three",
			"↻ Continuing toward goal (1/3): fake judge: continue",
			cont+"count to three",
			"↻ Continuing toward goal (2/3): fake judge: continue",
			cont+"count to three",
			"✓ Goal achieved: fake judge: done") {
			t.Errorf("the chat shows %q", got)
		}
		if n := countContaining(got, "echo: "); n != 3 || countContaining(got, "↻ Continuing") != 2 || countContaining(got, "✓ Goal achieved") != 1 {
			t.Errorf("%d answers, want 3, and each status line once: %q", n, got)
		}
		c.say("/goal status")
		c.waitFor("the status", func(s []string) bool { return countContaining(s, "✓ Goal done (3/3 turns): count to three") == 1 })
	})

	t.Run("blocked", func(t *testing.T) {
		t.Parallel()
		c := chat(t, 302)
		c.say("/goal fly to the moon [[verdict:blocked]]")
		c.waitFor("the pause", func(s []string) bool {
			return countContaining(s, "⏸ Goal paused — blocked: fake judge: blocked Re-scope with /goal <text>, or resume with /goal resume.") == 1
		})
		c.say("/status")
		got := c.waitFor("the status", func(s []string) bool { return countContaining(s, "Session:") == 1 })
		if !strings.Contains(got[len(got)-1], "⏸ Goal (paused, 1/3 turns — judge blocked: fake judge: blocked): fly to the moon") {
			t.Errorf("/status: %q", got[len(got)-1])
		}
		if got := c.settled(2 * time.Second); countContaining(got, "echo: ") != 1 || countContaining(got, cont) != 0 {
			t.Errorf("a blocked goal continued: %q", got)
		}
	})

	t.Run("budget exhausted", func(t *testing.T) {
		t.Parallel()
		c := chat(t, 303)
		c.say("/goal keep going [[verdict:continue]]")
		c.waitFor("the budget pause", func(s []string) bool {
			return countContaining(s, "⏸ Goal paused — 3/3 turns used. Use /goal resume to keep going, or /goal clear to stop.") == 1
		})
		got := c.settled(2 * time.Second)
		if countContaining(got, "echo: ") != 3 || !inOrder(got, "(1/3)", "(2/3)", "3/3 turns used") {
			t.Errorf("the chat shows %q, want three turns and the pause", got)
		}
	})

	t.Run("the user's message goes first", func(t *testing.T) {
		t.Parallel()
		c := chat(t, 304)
		c.say("/goal paint the fence [[verdict:continue times=1]] [[verdict:done]] [[latency:3s]]")
		c.waitFor("the goal set", func(s []string) bool { return countContaining(s, "⊙ Goal set") == 1 })
		c.say("quick question")
		c.waitFor("the goal achieved", func(s []string) bool { return countContaining(s, "✓ Goal achieved") == 1 })
		got := c.settled(4 * time.Second)
		// The first turn's verdict queued a continuation behind the
		// user's message; the user's turn was judged done, which dropped
		// the continuation before it ran.
		if !inOrder(got, "echo: paint the fence", "↻ Continuing toward goal (1/3)", "echo: quick question", "✓ Goal achieved") ||
			countContaining(got, cont) != 0 {
			t.Errorf("the chat shows %q", got)
		}
	})

	t.Run("/goal clear stops the loop", func(t *testing.T) {
		t.Parallel()
		c := chat(t, 305)
		c.say("/goal count forever [[verdict:continue]] [[latency:2s]]")
		c.waitFor("the first verdict", func(s []string) bool { return countContaining(s, "↻ Continuing toward goal (1/3)") == 1 })
		c.say("/goal clear")
		c.waitFor("the goal cleared", func(s []string) bool { return countContaining(s, "✓ Goal cleared.") == 1 })
		got := c.settled(5 * time.Second)
		// The continuation running when /goal clear came may finish; it
		// is not judged, and nothing follows it.
		if countContaining(got, "(2/3)") != 0 || countContaining(got, cont) > 1 || countContaining(got, "Goal paused") != 0 {
			t.Errorf("the loop went on after /goal clear: %q", got)
		}
	})

	t.Run("the judge failing fails open", func(t *testing.T) {
		t.Parallel()
		c := chat(t, 306)
		c.say("/goal judge is down [[verdict:fail]]")
		c.waitFor("the budget pause", func(s []string) bool { return countContaining(s, "3/3 turns used") == 1 })
		got := c.settled(2 * time.Second)
		if !inOrder(got, "↻ Continuing toward goal (1/3): judge error", "↻ Continuing toward goal (2/3): judge error", "⏸ Goal paused — 3/3 turns used") ||
			countContaining(got, "echo: ") != 3 {
			t.Errorf("the chat shows %q", got)
		}
	})
}
