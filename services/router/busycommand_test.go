package router

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/switchboard-chat/switchboard/pkg/bus"
	"github.com/switchboard-chat/switchboard/pkg/gatewaystatus"
	eventsv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/events/v1"
	repliesv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/replies/v1"
	turnsv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/turns/v1"
	"github.com/switchboard-chat/switchboard/pkg/loop"
	"github.com/switchboard-chat/switchboard/pkg/memorygate"
	"github.com/switchboard-chat/switchboard/pkg/pg/pgtest"
	"github.com/switchboard-chat/switchboard/pkg/redisx"
	"github.com/switchboard-chat/switchboard/pkg/sessionstore"
	"github.com/switchboard-chat/switchboard/pkg/skill"
)

// Hermes's /busy shows and sets the chat's busy input mode in Hermes's
// words; an unknown mode is refused; /new keeps the choice (a column
// of the key's row); another chat is not affected; a chat the operator
// pinned in router.chat_busy_modes is told so and keeps its mode.
func TestBusyCommand(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	cfg := testConfig()
	cfg.ChatBusyModes = map[string]string{"telegram:chat-bob": BusySteer}
	e.startRouter(cfg, nil, nil)
	e.startWorker(nil)
	ctx := context.Background()
	store := sessionstore.New(e.db)
	mode := func(user string) string {
		t.Helper()
		sess, err := store.Get(ctx, "agent:main:telegram:dm:chat-"+user)
		if err != nil {
			t.Fatal(err)
		}
		return sess.BusyMode
	}
	for _, tt := range []struct {
		user, text string
		want       []string
		stored     string
	}{
		{"alice", "/busy", []string{"**Busy input mode: `interrupt`**\nMessages while busy: _interrupts current run_\nChange with `/busy queue`, `/busy steer`, or `/busy interrupt`."}, ""},
		{"alice", "/busy queue", []string{"Busy input mode set to **`queue`** for this chat.\n_Messages will be queued for the next turn while the agent is busy._"}, BusyQueue},
		{"alice", "/busy status", []string{"**Busy input mode: `queue`**", "_queues for next turn_"}, BusyQueue},
		{"alice", "/new", []string{"New session started"}, BusyQueue},
		{"alice", "/busy", []string{"Busy input mode: `queue`"}, BusyQueue},
		{"alice", "/busy STEER", []string{"set to **`steer`**", "_Messages will be steered into the current run (after the next tool call)._"}, BusySteer},
		{"alice", "/busy status", []string{"_steers into current run (after next tool call)_"}, BusySteer},
		{"alice", "/busy interrupt", []string{"set to **`interrupt`**", "_Messages will interrupt the current run while the agent is busy._"}, BusyInterrupt},
		{"alice", "/busy later", []string{"Unknown mode `later`. Use `/busy queue`, `/busy steer`, or `/busy interrupt`."}, BusyInterrupt},
		{"bob", "/busy", []string{"**Busy input mode: `steer`**", "Set for this chat by the operator (`router.chat_busy_modes`); /busy does not change it."}, ""},
		{"bob", "/busy queue", []string{"Busy input mode for this chat is set by the operator (`router.chat_busy_modes`): **`steer`**. /busy does not change it."}, ""},
		{"bob", "/busy nonsense", []string{"Unknown mode `nonsense`."}, ""},
	} {
		got := e.ask(tt.user, tt.text)
		for _, w := range tt.want {
			if !strings.Contains(got, w) {
				t.Errorf("%s %s: %q, want it to contain %q", tt.user, tt.text, got, w)
			}
		}
		if m := mode(tt.user); m != tt.stored {
			t.Errorf("after %s %s: stored mode %q, want %q", tt.user, tt.text, m, tt.stored)
		}
	}
}

// The mode /busy sets decides what a message sent while a turn runs
// does: queued behind it (no interrupt) after /busy queue, steered into
// it after /busy steer (set mid-turn), and with /busy interrupt the
// running turn is interrupted again.
func TestBusyCommandChangesWhatAMessageDoesMidTurn(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.startRouter(testConfig(), nil, nil) // router.busy_mode: interrupt
	g := newGate(t, "long")
	w := e.startWorker(g.hold)
	if got := e.ask("alice", "/busy queue"); !strings.Contains(got, "set to **`queue`**") {
		t.Fatalf("/busy queue: %q", got)
	}
	e.publish(dm("alice", "long"))
	waitFor(t, "the turn runs", func() bool { turns, _ := w.snapshot(); return len(turns) == 1 })

	e.publish(dm("alice", "and also this"))
	waitFor(t, "inbound drained", e.inboundDrained)
	settled(t, "queued acknowledgement", 1, func() int { return e.countNotices("alice", "⏳ Queued for the next turn") })
	if n := len(e.controls(controlInterrupt)); n != 0 {
		t.Fatalf("%d interrupts after /busy queue", n)
	}

	// Mid-turn, /busy steer: the next message steers the running turn.
	if got := e.ask("alice", "/busy steer"); !strings.Contains(got, "set to **`steer`**") {
		t.Fatalf("/busy steer mid-turn: %q", got)
	}
	e.publish(dm("alice", "go left"))
	settled(t, "steer control", 1, func() int { return len(e.controls(controlSteer)) })
	if steers := e.controls(controlSteer); steers[0].GetText() != "go left" {
		t.Fatalf("steer controls %v", steers)
	}

	// /busy interrupt: the next message interrupts it.
	if got := e.ask("alice", "/busy interrupt"); !strings.Contains(got, "set to **`interrupt`**") {
		t.Fatalf("/busy interrupt mid-turn: %q", got)
	}
	e.publish(dm("alice", "stop that, do this"))
	settled(t, "interrupt", 1, func() int { return len(e.controls(controlInterrupt)) })
	if n := len(e.controls(controlInterrupt)); n != 1 {
		t.Fatalf("%d interrupts after /busy interrupt, want 1", n)
	}

	g.open()
	waitFor(t, "the queued turn", func() bool { turns, _ := w.snapshot(); return len(turns) == 2 })
	turns, _ := w.snapshot()
	if got := strings.Join(inputsText(turns[1:], "agent:main:telegram:dm:chat-alice"), ","); got != "and also this,stop that, do this" {
		t.Fatalf("second turn inputs %q", got)
	}
}

// A command refused while a turn runs is refused once: redelivered after
// the turn ended (a crash lost the record that it was handled), it is
// answered with the refusal again, under the first answer's ids (which
// delivery takes once), and what it would have changed stays as it was.
// Besides the commands refused alike, /model (typed, or a picker's
// press) with its own refusal, a /topic restore into a topic whose turn
// runs or of the main view's conversation while its turn runs, and a press on a group's pending memory writes while their
// owner's turn runs.
func TestMidTurnRefusalRedeliveredAfterTheTurn(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	const key = "agent:main:telegram:dm:chat-bob"
	const topicKey = key + ":10"
	const aliceKey = "agent:main:telegram:group:chat-grp:alice"
	sessionOf := func(t *testing.T, e *env, key string) sessionstore.Session {
		t.Helper()
		sess, err := sessionstore.New(e.db).Get(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		return sess
	}
	session := func(t *testing.T, e *env) sessionstore.Session { return sessionOf(t, e, key) }
	turns := func(w *worker) string {
		turns, _ := w.snapshot()
		return strings.Join(inputsText(turns, key), ",")
	}
	typed := func(text string) func(*testing.T, *env) *eventsv1.MessageReceived {
		return func(*testing.T, *env) *eventsv1.MessageReceived { return dm("bob", text) }
	}
	// answer waits for the answer to ev in user's chat.
	ask := func(t *testing.T, e *env, user string, ev *eventsv1.MessageReceived) {
		t.Helper()
		before := len(e.noticesTo(user))
		e.publish(ev)
		waitFor(t, "the answer to "+ev.GetText(), func() bool { return len(e.noticesTo(user)) > before })
	}
	pending := func(t *testing.T, e *env) string {
		t.Helper()
		list, err := memorygate.New(e.db, false, 2200).Pending(ctx, "session:"+aliceKey)
		if err != nil {
			t.Fatal(err)
		}
		var ids []string
		for _, p := range list {
			ids = append(ids, p.ID)
		}
		return strings.Join(ids, ",")
	}
	const modelRefusal = "Agent is running — wait or /stop first, then switch models."
	for _, tt := range []struct {
		name string
		// ev is the command, after what it needs is set up.
		ev func(t *testing.T, e *env) *eventsv1.MessageReceived
		// hold is the session whose turn runs, when not bob's DM's (its
		// lock is held, then released as the turn's end).
		hold    string
		refusal string
		// state is what the command would change.
		state func(t *testing.T, e *env, w *worker) string
	}{
		{"title", typed("/title Trip"), "", midTurnRefusal("title"), func(t *testing.T, e *env, _ *worker) string { return session(t, e).Title }},
		{"reasoning", typed("/reasoning high"), "", midTurnRefusal("reasoning"), func(t *testing.T, e *env, _ *worker) string { return session(t, e).ReasoningEffort }},
		// It would start a turn of its own.
		{"retry", typed("/retry"), "", midTurnRefusal("retry"), func(_ *testing.T, _ *env, w *worker) string { return turns(w) }},
		{"model", typed("/model gpt-4o"), "", modelRefusal, func(t *testing.T, e *env, _ *worker) string { return session(t, e).ModelOverride }},
		{"model picker", func(*testing.T, *env) *eventsv1.MessageReceived { return press("bob", "/model gpt-4o", "card-1", "") },
			"", modelRefusal, func(t *testing.T, e *env, _ *worker) string { return session(t, e).ModelOverride }},
		{"topic restore", func(t *testing.T, e *env) *eventsv1.MessageReceived {
			ask(t, e, "bob", topicMsg("bob", "", "/topic"))
			ask(t, e, "bob", topicMsg("bob", "10", "/topic"))
			return topicMsg("bob", "10", "/topic "+session(t, e).ID)
		}, topicKey, midTurnRefusal("topic"), func(t *testing.T, e *env, _ *worker) string { return sessionOf(t, e, topicKey).ID }},
		// The main view's conversation would move into the topic from
		// under the main view's running turn, fencing its answer off.
		{"topic restore of the main view's running conversation", func(t *testing.T, e *env) *eventsv1.MessageReceived {
			ask(t, e, "bob", topicMsg("bob", "", "/topic"))
			ask(t, e, "bob", topicMsg("bob", "10", "/topic"))
			return topicMsg("bob", "10", "/topic "+session(t, e).ID)
		}, "", midTurnRefusal("topic"), func(t *testing.T, e *env, _ *worker) string {
			return sessionOf(t, e, topicKey).ID + " " + session(t, e).ID
		}},
		{"loop", typed("/loop 30m check the build"), "", loopBusy, func(t *testing.T, e *env, _ *worker) string {
			l, err := sessionstore.New(e.db).Loop(ctx, key, session(t, e).ID, loop.KindLoop)
			if err != nil || l == nil {
				return fmt.Sprint(err)
			}
			return l.Prompt
		}},
		// It would start a turn of its own.
		{"moa", typed("/moa compare the plans"), "", moaBusy, func(_ *testing.T, _ *env, w *worker) string { return turns(w) }},
		{"memory press", func(t *testing.T, e *env) *eventsv1.MessageReceived {
			if _, err := memorygate.New(e.db, false, 2200).Stage(ctx, memorygate.Write{Owner: "session:" + aliceKey, Action: memorygate.ActionAdd, Content: "alice likes tea"}); err != nil {
				t.Fatal(err)
			}
			ask(t, e, "grp", groupMsg("alice", "/memory pending"))
			ev := press("bob", "/memory", "card-1", "")
			ev.Source.ChatType, ev.Source.ChatId = "group", "chat-grp"
			ev.ButtonPress.Data = "a-all." + ownerTag(aliceKey)
			return ev
		}, aliceKey, midTurnRefusal("memory"), func(t *testing.T, e *env, _ *worker) string { return pending(t, e) }},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			cfg := testConfig()
			cfg.Models = []string{"gpt-4o", "gpt-4o-mini"}
			cfg.MoAReferences = []string{"ref-a", "ref-b"}
			e, g, w := busySession(t, cfg, "bob", "long job")
			ev := tt.ev(t, e)
			answers := func() []*repliesv1.ReplyEvent { return e.answersTo(ev) }
			locker := redisx.NewLocker(e.rdb, e.prefix)
			running := key
			if tt.hold != "" {
				running = tt.hold
				if ok, err := locker.Acquire(ctx, tt.hold, "running", time.Minute); err != nil || !ok {
					t.Fatal("take the lock of the running turn", ok, err)
				}
			}
			e.publish(ev)
			waitFor(t, "the refusal", func() bool { return len(answers()) == 1 })

			// The turn ends; then the crash: the bus delivers the command
			// again to a router that finds the session free.
			g.open()
			if tt.hold != "" {
				if err := locker.Release(ctx, tt.hold, "running"); err != nil {
					t.Fatal(err)
				}
			}
			waitFor(t, "the turn's end", func() bool { o, err := locker.Owner(ctx, running); return err == nil && o == "" })
			was := tt.state(t, e, w)
			e.loseHandled(ev)
			e.publishID(ev, "redelivered-"+ev.EventId)
			waitFor(t, "inbound drained", e.inboundDrained)
			waitFor(t, "the redelivery's answer", func() bool { return len(answers()) == 2 })

			for _, a := range answers() {
				if got := a.GetNotice().GetText(); got != tt.refusal || a.GetSeq() != 1 {
					t.Errorf("answer %d %q, want the refusal as answer 1", a.GetSeq(), got)
				}
			}
			if is := tt.state(t, e, w); is != was {
				t.Errorf("%s applied on its redelivery: %q, was %q", ev.GetText(), is, was)
			}
		})
	}
}

// cronJobs are the ids of the cron jobs there are.
func cronJobs(t *testing.T, e *env) string {
	t.Helper()
	var ids string
	if err := e.db.QueryRow(context.Background(), `SELECT coalesce(string_agg(id, ',' ORDER BY id), '') FROM cron_jobs`).Scan(&ids); err != nil {
		t.Fatal(err)
	}
	return ids
}

// pausedPlatforms are the platforms /platform paused.
func pausedPlatforms(t *testing.T, e *env) string {
	t.Helper()
	ctx := context.Background()
	kv, err := gatewaystatus.Pauses(ctx, e.bus.JetStream(), e.bus.Topology())
	if err != nil {
		t.Fatal(err)
	}
	paused, err := gatewaystatus.Paused(ctx, kv)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, p := range paused {
		names = append(names, p.Platform)
	}
	return strings.Join(names, ",")
}

// Hermes answers /usage, /insights, /voice, /fast, /platform,
// /reload-skills and /cron while a task runs with his catch-all
// refusal (gateway/run.py's running-agent guard: none has a mid-turn
// policy of its own), and so did /provider while Hermes had it. Each is
// refused so, whatever its arguments, and changes nothing: no voice or
// fast mode, no cron job, no paused platform, no skills scanned again.
// The task is not interrupted and its waiting messages run after it, in
// order.
func TestCommandsRefusedMidTurnAsHermes(t *testing.T) {
	t.Parallel()
	const key = "agent:main:telegram:dm:chat-bob"
	ctx := context.Background()
	e := newEnv(t)
	dir := t.TempDir()
	writeTestSkill(t, dir, "review", reviewSkill)
	e.skillsCfg = &skill.Config{Dirs: []string{dir}, MaxBytes: skill.DefaultMaxBytes}
	e.provider = Provider{Kind: "openai", Model: "gpt-5.4"} // has a fast tier
	cfg := testConfig()
	cfg.VoiceReplies = true
	e.startRouter(cfg, nil, nil)
	g := newGate(t, "long job")
	w := e.startWorker(g.hold)
	e.publish(dm("bob", "long job"))
	waitFor(t, "the turn runs", func() bool { turns, _ := w.snapshot(); return len(turns) == 1 })
	if got := e.ask("bob", "/queue first thing"); got != "Queued for the next turn." {
		t.Fatalf("/queue: %q", got)
	}
	// Installed while the task runs: a reload would find it.
	writeTestSkill(t, dir, "deploy", "---\ndescription: Ship the build\n---\nDeploy it.\n")

	for _, tt := range []struct{ text, name string }{
		{"/usage", "usage"},
		{"/insights", "insights"},
		{"/insights 7", "insights"},
		{"/voice", "voice"},
		{"/voice on", "voice"},
		{"/voice status", "voice"},
		{"/fast", "fast"},
		{"/fast fast", "fast"},
		{"/platform", "platform"},
		{"/platform list", "platform"},
		{"/platform pause discord", "platform"},
		{"/reload-skills", "reload-skills"},
		{"/reload_skills", "reload-skills"},
		{"/provider", "provider"},
		{"/cron", "cron"},
		{"/cron list", "cron"},
		{"/cron add 30m Check the build", "cron"},
	} {
		if got := e.ask("bob", tt.text); got != midTurnRefusal(tt.name) {
			t.Errorf("%s: %q, want %q", tt.text, got, midTurnRefusal(tt.name))
		}
	}
	if got := e.ask("bob", "/queue second thing"); got != "Queued for the next turn. (2 queued)" {
		t.Fatalf("/queue after the refusals: %q", got)
	}

	sess, err := sessionstore.New(e.db).Get(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	if sess.VoiceMode != "" || sess.ServiceTier != "" {
		t.Errorf("voice mode %q, fast mode %q: a refused command changed them", sess.VoiceMode, sess.ServiceTier)
	}
	if jobs := cronJobs(t, e); jobs != "" {
		t.Errorf("cron jobs %q after a refused /cron add", jobs)
	}
	if paused := pausedPlatforms(t, e); paused != "" {
		t.Errorf("paused %q after a refused /platform pause", paused)
	}
	if got := e.ask("bob", "/deploy now"); !strings.HasPrefix(got, "Unknown command /deploy.") {
		t.Errorf("after a refused /reload-skills: %q, want the new skill unknown still", got)
	}
	for _, c := range []turnsv1.ControlAction{controlInterrupt, controlStop} {
		if n := len(e.controls(c)); n != 0 {
			t.Errorf("%d %s controls sent", n, c)
		}
	}
	if owner, err := redisx.NewLocker(e.rdb, e.prefix).Owner(ctx, key); err != nil || owner == "" {
		t.Fatalf("the running turn lost its lock (%q, %v)", owner, err)
	}

	g.open()
	waitFor(t, "the waiting turns", func() bool { turns, _ := w.snapshot(); return len(inputsText(turns, key)) == 3 })
	turns, _ := w.snapshot()
	if got := strings.Join(inputsText(turns, key), ","); got != "long job,first thing,second thing" {
		t.Fatalf("inputs %q, want the waiting messages after the task, in order", got)
	}
}

// effectReads counts the queries of the commands' records
// (command_effects) the router sends.
type effectReads struct{ n atomic.Int64 }

func (r *effectReads) TraceQueryStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	if strings.Contains(d.SQL, "FROM command_effects") {
		r.n.Add(1)
	}
	return ctx
}

func (*effectReads) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

// A command that waits for a running turn, sent to an idle session, runs
// without reading the record of a refusal it never had: only an event
// refused before (its redelivery) pays that Postgres read.
func TestRefusableCommandInAnIdleSessionReadsNoRefusal(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	_, url := pgtest.NewWithURL(t)
	pcfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		t.Fatal(err)
	}
	reads := &effectReads{}
	pcfg.ConnConfig.Tracer = reads
	traced, err := pgxpool.NewWithConfig(context.Background(), pcfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(traced.Close)
	e.db = traced
	e.startRouter(testConfig(), nil, nil)
	e.startWorker(nil)
	for _, cmd := range []string{"/usage", "/sessions", "/insights", "/model", "/model gpt-4o"} {
		e.ask("bob", cmd)
	}
	if n := reads.n.Load(); n != 0 {
		t.Fatalf("%d reads of command records for commands in an idle session, want none", n)
	}
}

// A /retry, /undo or /compress runs as a turn of its own: redelivered
// while that turn runs (a crash before the dedupe record), it is the
// message of the running turn, not a command to refuse; the user was
// told nothing more.
func TestOwnTurnCommandRedeliveredWhileItRuns(t *testing.T) {
	t.Parallel()
	for _, text := range []string{"/retry", "/undo", "/compress"} {
		t.Run(text, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			e.startRouter(testConfig(), nil, nil)
			g := newGate(t, text)
			w := e.startWorker(g.hold)
			defer g.open()
			ev := dm("bob", text)
			e.publish(ev)
			waitFor(t, "its turn runs", func() bool { turns, _ := w.snapshot(); return len(turns) == 1 })
			e.loseHandled(ev)
			e.publishID(ev, "redelivered-"+ev.EventId)
			// Answered after the redelivery, in order.
			if got := e.ask("bob", "/status"); !strings.Contains(got, "State: working") {
				t.Fatalf("/status answered %q", got)
			}
			for _, n := range e.noticesTo("bob") {
				if strings.Contains(n, "can't run mid-turn") {
					t.Errorf("the redelivered %s was refused: %q", text, n)
				}
			}
		})
	}
}

// A /retry refused while a turn ran, whose handling failed after the
// refusal was recorded and sent (the replies stream gone: the notice
// reaches the test's subscription but no stream keeps it), is
// redelivered by the bus after Redis lost everything (a restart without
// persistence, as deployed: the lock and the refusal's mark): the
// redelivery reads the refusal's record in Postgres and answers with it
// again, rather than starting the retry the user was told could not run.
func TestMidTurnRefusalRedeliveredAfterRedisLostItsMark(t *testing.T) {
	t.Parallel()
	const key = "agent:main:telegram:dm:chat-bob"
	ctx := context.Background()
	e, g, w := busySession(t, testConfig(), "bob", "long job")
	defer g.open()
	turns := func() string {
		turns, _ := w.snapshot()
		return strings.Join(inputsText(turns, key), ",")
	}
	was := turns()
	ev := dm("bob", "/retry")
	answers := func() []*repliesv1.ReplyEvent { return e.answersTo(ev) }
	js := e.bus.JetStream()
	if err := js.DeleteStream(ctx, e.bus.Topology().Stream(bus.StreamReplies)); err != nil {
		t.Fatal(err)
	}
	e.publish(ev)
	waitFor(t, "the refusal", func() bool { return len(answers()) >= 1 })
	// Redis restarts empty: the session's lock and the refusal's mark
	// are gone (the dedupe record was never written).
	lost := []string{redisx.NewLocker(e.rdb, e.prefix).Key(key)}
	refused, err := e.rdb.Keys(ctx, e.prefix+"refused:*").Result()
	if err != nil {
		t.Fatal(err)
	}
	if err := e.rdb.Del(ctx, append(lost, refused...)...).Err(); err != nil {
		t.Fatal(err)
	}
	started := func() bool {
		yes, err := sessionstore.New(e.db).QueuedOrStarted(ctx, key, ev.EventId)
		if err != nil {
			t.Fatal(err)
		}
		return yes
	}
	waitFor(t, "a later attempt", func() bool { return len(answers()) >= 2 || started() })
	if err := e.bus.EnsureStreams(ctx); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "inbound drained", e.inboundDrained)
	if started() {
		t.Fatalf("the refused /retry was queued or started on its redelivery")
	}
	for _, a := range answers() {
		if got := a.GetNotice().GetText(); got != midTurnRefusal("retry") || a.GetSeq() != 1 {
			t.Errorf("answer %d %q, want the refusal as answer 1", a.GetSeq(), got)
		}
	}
	if is := turns(); is != was {
		t.Errorf("turns %q after the redelivery, were %q", is, was)
	}
}
