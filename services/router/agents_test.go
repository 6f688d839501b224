package router

import (
	"context"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/switchboard-chat/switchboard/pkg/bus"
	"github.com/switchboard-chat/switchboard/pkg/cron"
	turnsv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/turns/v1"
	"github.com/switchboard-chat/switchboard/pkg/redisx"
	"github.com/switchboard-chat/switchboard/pkg/sessionkey"
	"github.com/switchboard-chat/switchboard/pkg/sessionstore"
)

// idleAgents is /agents' whole answer in a chat where nothing runs.
const idleAgents = "🤖 **Active Agents & Tasks**\n\n**Active agents:** 0\n\n**Background tasks:** 0\n\nNo active agents or running tasks."

const aliceKey = "agent:main:telegram:dm:chat-alice"

// startRouterStoppable runs a router until stop is called (or the test
// ends): a replica that goes away.
func (e *env) startRouterStoppable(cfg Config, b *bus.Bus) (stop func()) {
	e.t.Helper()
	s, err := New(cfg, Deps{Bus: b, DB: e.db, Redis: e.rdb, RedisPrefix: e.prefix, Environ: []string{}, Provider: e.provider})
	if err != nil {
		e.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	var stopped bool
	stop = func() {
		if stopped {
			return
		}
		stopped = true
		cancel()
		if err := <-done; err != nil {
			e.t.Errorf("router run: %v", err)
		}
	}
	e.t.Cleanup(stop)
	return stop
}

// lockOf is the chat's session lock value ("" free).
func (e *env) lockOf(key string) string {
	e.t.Helper()
	v, err := redisx.NewLocker(e.rdb, e.prefix).Owner(context.Background(), key)
	if err != nil {
		e.t.Fatal(err)
	}
	return v
}

// /agents during a running turn shows it (running, for how long, its
// conversation, model and worker) and the message queued behind it, and
// disturbs nothing: no control reaches the turn, its lock keeps its
// value, the queued message still runs next. Once the chat is idle it
// gets Hermes's empty answer. /tasks is the same command.
func TestAgentsShowsTheRunningTurnAndItsQueue(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.provider = Provider{Kind: "fake", Model: "gpt-test"}
	cfg := testConfig()
	cfg.BusyMode = BusyQueue
	e.startRouter(cfg, nil, nil)
	g := newGate(t, "long job")
	defer g.open()
	w := e.startWorker(g.hold)

	if got := e.ask("alice", "/agents"); got != idleAgents {
		t.Fatalf("/agents before anything ran:\n%s\nwant:\n%s", got, idleAgents)
	}
	e.publish(dm("alice", "long job"))
	waitFor(t, "the turn runs", func() bool { turns, _ := w.snapshot(); return len(turns) == 1 })
	e.publish(dm("alice", "and then\n  this one"))
	waitFor(t, "queued", func() bool { return e.countNotices("alice", "Queued for the next turn") == 1 })
	var sess sessionstore.Session
	// The free start commits the session after its turn is published.
	waitFor(t, "the chat's session", func() bool {
		var err error
		sess, err = sessionstore.New(e.db).Get(context.Background(), aliceKey)
		return err == nil
	})
	lock := e.lockOf(aliceKey)
	controls := len(e.controls(controlInterrupt)) + len(e.controls(controlSteer)) + len(e.controls(controlStop))

	for _, typed := range []string{"/agents", "/tasks"} {
		got := e.ask("alice", typed)
		want := regexp.MustCompile(`^🤖 \*\*Active Agents & Tasks\*\*\n\n\*\*Active agents:\*\* 1\n` +
			"1\\. `" + regexp.QuoteMeta(aliceKey) + "` · running · \\d+s · `" + regexp.QuoteMeta(sess.ID) + "` · `gpt-test` · worker `test-worker`\n\n" +
			`\*\*Waiting messages:\*\* 1\n- \d+s · and then this one\n\n` +
			`\*\*Background tasks:\*\* 0$`)
		if !want.MatchString(got) {
			t.Fatalf("%s mid-turn:\n%s", typed, got)
		}
	}
	if v := e.lockOf(aliceKey); v != lock {
		t.Fatalf("lock %q after /agents, was %q", v, lock)
	}
	if n := len(e.controls(controlInterrupt)) + len(e.controls(controlSteer)) + len(e.controls(controlStop)); n != controls {
		t.Fatalf("%d controls after /agents, %d before", n, controls)
	}
	if turns, _ := w.snapshot(); len(turns) != 1 {
		t.Fatalf("%d turns while the first holds", len(turns))
	}

	g.open()
	waitFor(t, "the queued message's turn", func() bool { turns, _ := w.snapshot(); return len(turns) == 2 })
	turns, _ := w.snapshot()
	if got := strings.Join(inputsText(turns[1:], aliceKey), ","); got != "and then\n  this one" {
		t.Fatalf("second turn's inputs %q", got)
	}
	waitFor(t, "the lock freed", func() bool { return e.lockOf(aliceKey) == "" })
	if got := e.ask("alice", "/agents"); got != idleAgents {
		t.Fatalf("/agents once idle:\n%s", got)
	}
}

// A turn no worker has taken yet shows as Hermes's pending agent,
// "starting", for as long as it has waited; with a worker it runs.
func TestAgentsShowsATurnWaitingForAWorker(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.startRouter(testConfig(), nil, nil)
	e.publish(dm("alice", "hello"))
	waitFor(t, "the turn granted", func() bool { return e.lockOf(aliceKey) != "" })
	got := e.ask("alice", "/agents")
	want := regexp.MustCompile(`^🤖 \*\*Active Agents & Tasks\*\*\n\n\*\*Active agents:\*\* 1\n` +
		"1\\. `" + regexp.QuoteMeta(aliceKey) + "` · starting · \\d+s · waiting for a worker\n\n" +
		`\*\*Background tasks:\*\* 0$`)
	if !want.MatchString(got) {
		t.Fatalf("/agents before a worker took the turn:\n%s", got)
	}
	w := e.startWorker(nil)
	waitFor(t, "the turn ran", func() bool { turns, _ := w.snapshot(); return len(turns) == 1 })
	waitFor(t, "the lock freed", func() bool { return e.lockOf(aliceKey) == "" })
	if got := e.ask("alice", "/agents"); got != idleAgents {
		t.Fatalf("/agents once idle:\n%s", got)
	}
}

// The chat's /background tasks in flight are listed with their id,
// state, age and the first words of their prompt, whether or not
// router.background.max_running bounds them; a task that ended is not.
func TestAgentsShowsBackgroundTasks(t *testing.T) {
	t.Parallel()
	for _, maxRunning := range []int{3, 0} {
		t.Run("max_running="+map[int]string{3: "3", 0: "0"}[maxRunning], func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			cfg := testConfig()
			cfg.Background.MaxRunning = maxRunning
			e.startRouter(cfg, nil, nil)
			release := make(chan struct{})
			var once bool
			defer func() {
				if !once {
					close(release)
				}
			}()
			w := e.startWorker(func(t *turnsv1.TurnRequested) {
				if t.GetBackgroundTaskId() != "" {
					<-release
				}
			})
			prompt := "Summarize the top HN stories today and tell me which ones matter for our team"
			e.publish(dm("alice", "/bg "+prompt))
			waitFor(t, "the task runs", func() bool {
				turns, _ := w.snapshot()
				return len(turns) == 1 && strings.Contains(e.lockOf(turns[0].SessionKey), "/")
			})
			turns, _ := w.snapshot()
			id := turns[0].GetBackgroundTaskId()
			got := e.ask("alice", "/agents")
			want := regexp.MustCompile(`^🤖 \*\*Active Agents & Tasks\*\*\n\n\*\*Active agents:\*\* 0\n\n` +
				`\*\*Background tasks:\*\* 1\n- ` + "`" + regexp.QuoteMeta(id) + "`" + ` · running · \d+s · ` +
				regexp.QuoteMeta(prompt[:60]) + `\.\.\.$`)
			if !want.MatchString(got) {
				t.Fatalf("/agents with a background task:\n%s", got)
			}
			close(release)
			once = true
			waitFor(t, "the task's lock freed", func() bool { return e.lockOf(turns[0].SessionKey) == "" })
			if got := e.ask("alice", "/agents"); got != idleAgents {
				t.Fatalf("/agents once the task ended:\n%s", got)
			}
			// The next /bg prunes the ended task, its prompt with it.
			e.publish(dm("alice", "/bg second"))
			waitFor(t, "the second task", func() bool { turns, _ := w.snapshot(); return len(turns) == 2 })
			turns, _ = w.snapshot()
			s := &Service{prefix: e.prefix}
			keys, err := e.rdb.HKeys(context.Background(), s.backgroundPromptsKey(aliceKey)).Result()
			if err != nil || len(keys) != 1 || keys[0] != turns[1].SessionKey {
				t.Fatalf("prompts kept for %q (%v), want the second task's only", keys, err)
			}
			tasks, err := e.rdb.ZRange(context.Background(), s.backgroundTasksKey(aliceKey), 0, -1).Result()
			if err != nil || len(tasks) != 1 || tasks[0] != turns[1].SessionKey {
				t.Fatalf("tasks listed %q (%v), want the second only", tasks, err)
			}
		})
	}
}

// The chat's cron jobs with a run in flight are listed (and only those).
func TestAgentsShowsRunningCronJobs(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	s := e.startRouter(testConfig(), nil, nil)
	ctx := context.Background()
	var ids []string
	for _, name := range []string{"Morning report", "Idle job"} {
		j, err := s.cron.Create(ctx, cron.NewJob{Owner: "telegram:alice", Name: name, Prompt: "p", Schedule: "every 1h",
			Origin: cron.Origin{Platform: "telegram", Account: "bot1", ChatID: "chat-alice"}})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, j.ID)
	}
	run := cron.RunID(ids[0], time.Now().Add(-90*time.Second), false)
	if _, err := e.db.Exec(ctx, `UPDATE cron_jobs SET running_run_id = $2, running_until = now() + interval '1 hour' WHERE id = $1`, ids[0], run); err != nil {
		t.Fatal(err)
	}
	got := e.ask("alice", "/agents")
	want := regexp.MustCompile(`\n\n\*\*Cron jobs running:\*\* 1\n- ` + "`" + ids[0] + "`" + ` · Morning report · 1m 3\ds$`)
	if !want.MatchString(got) || strings.Contains(got, ids[1]) || strings.Contains(got, agentsNone) {
		t.Fatalf("/agents with a running cron job:\n%s", got)
	}
	// Bob's chat sees none of Alice's jobs.
	if got := e.ask("bob", "/agents"); got != idleAgents {
		t.Fatalf("/agents in another chat:\n%s", got)
	}
}

// Any replica answers from the shared state: a router that never saw
// the turn start (the one that started it is gone) shows the running
// turn and the message waiting behind it.
func TestAgentsAnsweredByAnotherReplica(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	cfg := testConfig()
	cfg.BusyMode = BusyQueue
	stopFirst := e.startRouterStoppable(cfg, e.bus)
	g := newGate(t, "long job")
	defer g.open()
	w := e.startWorker(g.hold)
	e.publish(dm("alice", "long job"))
	waitFor(t, "the turn runs", func() bool { turns, _ := w.snapshot(); return len(turns) == 1 })
	e.publish(dm("alice", "next one"))
	waitFor(t, "queued", func() bool { return e.countNotices("alice", "Queued for the next turn") == 1 })
	stopFirst()

	e.startRouter(cfg, e.secondBus(), nil)
	got := e.ask("alice", "/agents")
	want := regexp.MustCompile(`^🤖 \*\*Active Agents & Tasks\*\*\n\n\*\*Active agents:\*\* 1\n` +
		"1\\. `" + regexp.QuoteMeta(aliceKey) + "` · running · \\d+s · `[^`]+` · worker `test-worker`\n\n" +
		`\*\*Waiting messages:\*\* 1\n- \d+s · next one\n\n\*\*Background tasks:\*\* 0$`)
	if !want.MatchString(got) {
		t.Fatalf("/agents from the second replica:\n%s", got)
	}
	g.open()
	waitFor(t, "the queued turn", func() bool { turns, _ := w.snapshot(); return len(turns) == 2 })
}

func TestAgentsFormatting(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		d    time.Duration
		want string
	}{{-time.Second, "0s"}, {0, "0s"}, {59 * time.Second, "59s"}, {60 * time.Second, "1m 0s"}, {3599 * time.Second, "59m 59s"},
		{3600 * time.Second, "1h 0m"}, {26*time.Hour + 5*time.Minute + 9*time.Second, "26h 5m"}} {
		if got := uptime(tt.d); got != tt.want {
			t.Errorf("uptime(%s) = %q, want %q", tt.d, got, tt.want)
		}
	}
	for holder, want := range map[string]string{"host-1.2": "host-1", "w.example.com-7.10": "w.example.com-7", "bare": "bare", "odd.": "odd.", "v1.x": "v1.x"} {
		if got := workerOf(holder); got != want {
			t.Errorf("workerOf(%q) = %q, want %q", holder, got, want)
		}
	}
}

// A /btw side question in flight is listed apart from the /background
// tasks, with its question's first words, while its turn runs (the
// worker holds it, as a slow model would); it is not counted against
// router.background.max_running (a /bg beside it starts), and once both
// ended /agents is idle again.
func TestAgentsShowsSideQuestions(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	cfg := testConfig()
	cfg.Background.MaxRunning = 1
	e.startRouter(cfg, nil, nil)
	release := make(chan struct{})
	released := false
	defer func() {
		if !released {
			close(release)
		}
	}()
	w := e.startWorker(func(t *turnsv1.TurnRequested) {
		if t.GetSideQuestion() != nil || t.GetBackgroundTaskId() != "" {
			<-release
		}
	})
	e.publish(dm("alice", "first"))
	waitFor(t, "the chat's first turn ends", func() bool {
		turns, _ := w.snapshot()
		return len(turns) == 1 && e.lockOf(aliceKey) == ""
	})
	question := "which file was it again, the one with the runtime settings for the gateway?"
	e.publish(dm("alice", "/btw "+question))
	var side *turnsv1.TurnRequested
	waitFor(t, "the side question runs", func() bool {
		turns, _ := w.snapshot()
		for _, tr := range turns {
			if tr.GetSideQuestion() != nil {
				side = tr
			}
		}
		return side != nil && strings.Contains(e.lockOf(side.SessionKey), "/")
	})
	id, _ := sessionkey.BackgroundTask(side.SessionKey, "")
	sideRow := `\*\*Side questions \(/btw\):\*\* 1\n- ` + "`" + regexp.QuoteMeta(id) + "`" + ` · running · \d+s · ` +
		regexp.QuoteMeta(question[:60]) + `\.\.\.`
	got := e.ask("alice", "/agents")
	want := regexp.MustCompile(`^🤖 \*\*Active Agents & Tasks\*\*\n\n\*\*Active agents:\*\* 0\n\n` +
		`\*\*Background tasks:\*\* 0\n\n` + sideRow + `$`)
	if !want.MatchString(got) {
		t.Fatalf("/agents with a side question:\n%s", got)
	}
	// max_running 1: the side question does not count.
	e.publish(dm("alice", "/bg summarize the logs"))
	var bg *turnsv1.TurnRequested
	waitFor(t, "the background task runs", func() bool {
		turns, _ := w.snapshot()
		for _, tr := range turns {
			if tr.GetBackgroundTaskId() != "" {
				bg = tr
			}
		}
		return bg != nil && strings.Contains(e.lockOf(bg.SessionKey), "/")
	})
	got = e.ask("alice", "/agents")
	want = regexp.MustCompile(`\*\*Background tasks:\*\* 1\n- ` + "`" + regexp.QuoteMeta(bg.GetBackgroundTaskId()) + "`" +
		` · running · \d+s · summarize the logs\n\n` + sideRow + `$`)
	if !want.MatchString(got) {
		t.Fatalf("/agents with a background task and a side question:\n%s", got)
	}
	if e.countNotices("alice", "already running in this chat") != 0 {
		t.Fatal("the side question was counted against max_running")
	}
	close(release)
	released = true
	waitFor(t, "both ended", func() bool { return e.lockOf(side.SessionKey) == "" && e.lockOf(bg.SessionKey) == "" })
	if got := e.ask("alice", "/agents"); got != idleAgents {
		t.Fatalf("/agents once both ended:\n%s", got)
	}
}

// A turn whose router stopped right after taking the chat's lock (its
// grant older than router.lock_ttl names a turn that never committed)
// shows as "stalled", not as starting for ever, and is started again: a
// message queued behind it runs once the sweep takes the lock over. A
// fresh grant (a start still committing) is "starting".
func TestAgentsShowsAStalledStart(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	cfg := testConfig()
	cfg.BusyMode = BusyQueue
	e.startRouter(cfg, nil, nil)
	ctx := context.Background()
	lockKey := redisx.NewLocker(e.rdb, e.prefix).Key(aliceKey)
	for _, tc := range []struct {
		name, age, row string
		made           time.Time
	}{
		{"a start committing", `\ds`, "starting · %s · waiting for a worker", time.Now()},
		{"its router gone", `4\ds`, "stalled · %s · the router that started it stopped before a worker took it; it will be started again",
			time.Now().Add(-cfg.LockTTL - 15*time.Second)},
	} {
		if err := e.rdb.Set(ctx, lockKey, redisx.NewGrant(tc.made), cfg.GrantTTL).Err(); err != nil {
			t.Fatal(err)
		}
		got := e.ask("alice", "/agents")
		want := regexp.MustCompile(`^🤖 \*\*Active Agents & Tasks\*\*\n\n\*\*Active agents:\*\* 1\n` +
			"1\\. `" + regexp.QuoteMeta(aliceKey) + "` · " + strings.ReplaceAll(regexp.QuoteMeta(tc.row), "%s", tc.age) + "\n\n" +
			`\*\*Background tasks:\*\* 0$`)
		if !want.MatchString(got) {
			t.Fatalf("/agents, %s:\n%s", tc.name, got)
		}
	}
	w := e.startWorker(nil)
	e.publish(dm("alice", "hello"))
	waitFor(t, "the stalled chat's next turn", func() bool { turns, _ := w.snapshot(); return len(turns) == 1 })
	if turns, _ := w.snapshot(); turns[0].GetInputs()[0].GetText() != "hello" {
		t.Fatalf("started %v", turns[0].GetInputs())
	}
}
