package router

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/switchboard-chat/switchboard/pkg/bus"
	eventsv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/events/v1"
	turnsv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/turns/v1"
	"github.com/switchboard-chat/switchboard/pkg/redisx"
	"github.com/switchboard-chat/switchboard/pkg/sessionstore"
)

// gate holds turns whose first input has a given text until opened, or
// until the test ends (so a failed test's cleanup, which stops the worker
// the gate holds, does not wait for it).
type gate struct {
	once sync.Once
	ch   chan struct{}
	text string
	done <-chan struct{}
}

func newGate(t *testing.T, text string) *gate {
	return &gate{ch: make(chan struct{}), text: text, done: t.Context().Done()}
}

// busySession starts a router with cfg and a worker whose turns on text
// wait at a gate, and has user start one: the session is busy until the
// gate opens.
func busySession(t *testing.T, cfg Config, user, text string) (*env, *gate, *worker) {
	t.Helper()
	e := newEnv(t)
	e.startRouter(cfg, nil, nil)
	g := newGate(t, text)
	w := e.startWorker(g.hold)
	e.publish(dm(user, text))
	waitFor(t, "the turn runs", func() bool { turns, _ := w.snapshot(); return len(turns) == 1 })
	return e, g, w
}

func (g *gate) open() { g.once.Do(func() { close(g.ch) }) }

func (g *gate) hold(t *turnsv1.TurnRequested) {
	if len(t.Inputs) > 0 && t.Inputs[0].Text == g.text {
		select {
		case <-g.ch:
		case <-g.done:
		}
	}
}

// settled waits until count reaches want (what the router published
// arrives at the test's subscriptions shortly after the inbound stream
// drains) and returns the count then, which may be higher.
func settled(t *testing.T, what string, want int, count func() int) int {
	t.Helper()
	waitFor(t, what, func() bool { return count() >= want })
	return count()
}

func (e *env) controls(action turnsv1.ControlAction) []*turnsv1.TurnControlRequested {
	e.mu.Lock()
	defer e.mu.Unlock()
	var out []*turnsv1.TurnControlRequested
	for _, c := range e.control {
		if c.Action == action {
			out = append(out, c)
		}
	}
	return out
}

func (e *env) countNotices(user, substr string) int {
	n := 0
	for _, text := range e.noticesTo(user) {
		if strings.Contains(text, substr) {
			n++
		}
	}
	return n
}

func TestAPIRequestsNeverMerge(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	cfg := testConfig()
	// No sweep: each completion must start the next request, the last
	// two of which were queued behind the first turn at once.
	cfg.SweepInterval = time.Hour
	e.startRouter(cfg, nil, nil)
	g := newGate(t, "first")
	w := e.startWorker(g.hold)
	api := func(text string) *eventsv1.MessageReceived {
		ev := dm("x", text)
		ev.Source.Platform, ev.Source.ChatId, ev.Source.UserId = "api", "conv-1", ""
		ev.TransportAuthenticated = true
		return ev
	}
	e.publish(api("first"))
	waitFor(t, "first turn", func() bool { turns, _ := w.snapshot(); return len(turns) == 1 })
	e.publish(api("second"))
	e.publish(api("third"))
	waitFor(t, "inbound drained", e.inboundDrained)
	g.open()
	waitFor(t, "three turns", func() bool { turns, _ := w.snapshot(); return len(turns) == 3 })
	turns, _ := w.snapshot()
	for i, want := range []string{"first", "second", "third"} {
		if len(turns[i].Inputs) != 1 || turns[i].Inputs[0].Text != want {
			t.Fatalf("turn %d inputs %v, want just %q", i, turns[i].Inputs, want)
		}
	}
	if n := len(e.controls(controlInterrupt)); n != 0 {
		t.Fatalf("%d interrupts for api requests", n)
	}
}

// An API request's message owns its turn (it never steers one), but an
// explicit /steer from the API — the runs API's steer — reaches the
// running turn of its session; one no turn takes is queued as a turn of
// its own.
func TestAPISteerReachesTheRunningTurn(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.startRouter(testConfig(), nil, nil)
	g := newGate(t, "run")
	w := e.startWorker(g.hold)
	api := func(text string) *eventsv1.MessageReceived {
		ev := dm("x", text)
		ev.Source.Platform, ev.Source.ChatId, ev.Source.UserId = "api", "conv-1", "client"
		ev.TransportAuthenticated = true
		return ev
	}
	e.publish(api("run"))
	waitFor(t, "the run's turn", func() bool { turns, _ := w.snapshot(); return len(turns) == 1 })
	e.publish(api("a plain message"))
	e.publish(api("/steer also check the tests"))
	waitFor(t, "inbound drained", e.inboundDrained)
	steers := e.controls(controlSteer)
	if n := settled(t, "steer controls", 1, func() int { steers = e.controls(controlSteer); return len(steers) }); n != 1 ||
		steers[0].Text != "also check the tests" || steers[0].SessionKey != "agent:main:api:dm:conv-1" {
		t.Fatalf("steer controls %v, want the /steer's text only", steers)
	}
	e.refuseControl.Store(true)
	e.publish(api("/steer too late"))
	waitFor(t, "inbound drained", e.inboundDrained)
	g.open()
	waitFor(t, "the queued turns", func() bool { turns, _ := w.snapshot(); return len(turns) == 3 })
	turns, _ := w.snapshot()
	for i, want := range []string{"run", "a plain message", "too late"} {
		if len(turns[i].Inputs) != 1 || turns[i].Inputs[0].Text != want {
			t.Fatalf("turn %d inputs %v, want just %q", i, turns[i].Inputs, want)
		}
	}
}

func TestInterruptPhotoMergeAndOneBusyAck(t *testing.T) {
	t.Parallel()
	e, g, w := busySession(t, testConfig(), "alice", "long")
	e.publish(dm("alice", "actually, this"))
	photo := dm("alice", "")
	photo.Attachments = []*eventsv1.Attachment{{Kind: eventsv1.AttachmentKind_ATTACHMENT_KIND_IMAGE, Location: &eventsv1.Attachment_Url{Url: "http://x/1.jpg"}}}
	e.publish(photo)
	waitFor(t, "inbound drained", e.inboundDrained)
	// Controls and notices reach the test's subscriptions after the
	// inbound acks that drained the stream: wait for them, then count.
	if n := settled(t, "interrupts", 1, func() int { return len(e.controls(controlInterrupt)) }); n != 1 {
		t.Fatalf("%d interrupts, want 1 (photos do not interrupt)", n)
	}
	// The interrupt names the turn it is for: a later turn ignores it.
	if running, _ := w.snapshot(); e.controls(controlInterrupt)[0].GetTurnId() != running[0].GetTurnId() {
		t.Fatalf("interrupt for turn %q, want the running turn %q", e.controls(controlInterrupt)[0].GetTurnId(), running[0].GetTurnId())
	}
	if n := settled(t, "busy acknowledgements", 1, func() int { return e.countNotices("alice", "Interrupting") }); n != 1 {
		t.Fatalf("%d busy acknowledgements, want 1", n)
	}
	g.open() // the worker stops, as it would on the interrupt
	waitFor(t, "second turn", func() bool { turns, _ := w.snapshot(); return len(turns) == 2 })
	turns, _ := w.snapshot()
	if in := turns[1].Inputs; len(in) != 2 || in[0].Text != "actually, this" || len(in[1].Attachments) != 1 {
		t.Fatalf("second turn inputs %v; want the text and the photo together", in)
	}
}

func TestQueueCapAndSteer(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	cfg := testConfig()
	cfg.QueueCap = 2
	cfg.BusyMode = BusyQueue
	cfg.ChatBusyModes = map[string]string{"telegram:chat-bob": BusySteer}
	e.startRouter(cfg, nil, nil)
	g := newGate(t, "long")
	w := e.startWorker(g.hold)

	e.publish(dm("alice", "long"))
	e.publish(dm("bob", "long"))
	waitFor(t, "two turns", func() bool { turns, _ := w.snapshot(); return len(turns) == 2 })
	for _, text := range []string{"q1", "q2", "q3"} {
		e.publish(dm("alice", text))
	}
	e.publish(dm("bob", "go left"))
	waitFor(t, "inbound drained", e.inboundDrained)
	if n := settled(t, "queue-full replies", 1, func() int { return e.countNotices("alice", "Too many messages are waiting (2)") }); n != 1 {
		t.Fatalf("queue-full replies: %d; notices %q", n, e.noticesTo("alice"))
	}
	if n := settled(t, "queued acknowledgements", 1, func() int {
		return e.countNotices("alice", "⏳ Queued for the next turn. I'll respond once the current task finishes.")
	}); n != 1 {
		t.Fatalf("queued acknowledgements: %d, want 1; notices %q", n, e.noticesTo("alice"))
	}
	settled(t, "steer controls", 1, func() int { return len(e.controls(controlSteer)) })
	steers := e.controls(controlSteer)
	if len(steers) != 1 || steers[0].Text != "go left" || steers[0].SessionKey != "agent:main:telegram:dm:chat-bob" {
		t.Fatalf("steer controls %v", steers)
	}
	if n := settled(t, "steer acknowledgements", 1, func() int { return e.countNotices("bob", "⏩ Steered into current run") }); n != 1 {
		t.Fatalf("steer acknowledgements: %d", n)
	}
	g.open()
	waitFor(t, "queued turn", func() bool { turns, _ := w.snapshot(); return len(turns) == 3 })
	turns, _ := w.snapshot()
	if got := inputsText(turns, "agent:main:telegram:dm:chat-alice"); strings.Join(got, ",") != "long,q1,q2" {
		t.Fatalf("alice inputs %v", got)
	}
	if got := inputsText(turns, "agent:main:telegram:dm:chat-bob"); len(got) != 1 {
		t.Fatalf("bob's steer was queued as a turn too: %v", got)
	}
}

// Steering no running turn takes (its worker has not claimed it yet, or
// its answer is decided) is queued as the next turn, not acknowledged as
// added and lost.
func TestSteerNobodyTakesIsQueued(t *testing.T) {
	t.Parallel()
	cfg := testConfig()
	cfg.BusyMode = BusySteer
	e, g, w := busySession(t, cfg, "bob", "long")
	e.refuseControl.Store(true)
	e.publish(dm("bob", "go left"))
	waitFor(t, "inbound drained", e.inboundDrained)
	if n := len(e.controls(controlSteer)); n != 1 {
		t.Fatalf("%d steer requests, want 1", n)
	}
	if n := e.countNotices("bob", "⏩ Steered into current run"); n != 0 {
		t.Fatalf("told the text was added (%d) though no turn took it", n)
	}
	g.open()
	waitFor(t, "the queued turn", func() bool { turns, _ := w.snapshot(); return len(turns) == 2 })
	turns, _ := w.snapshot()
	if got := inputsText(turns, "agent:main:telegram:dm:chat-bob"); strings.Join(got, ",") != "long,go left" {
		t.Fatalf("bob's inputs %v, want the steering queued as the next turn", got)
	}
}

// Steering for a turn no worker has claimed yet (the lock holds the
// router's bare grant) is queued at once: no turn could read it.
func TestSteerBeforeTheTurnIsClaimedIsQueued(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	cfg := testConfig()
	cfg.BusyMode = BusySteer
	e.startRouter(cfg, nil, nil)
	// No worker: the first turn waits in the queue, unclaimed.
	e.publish(dm("bob", "long"))
	key := "agent:main:telegram:dm:chat-bob"
	store := sessionstore.New(e.db)
	waitFor(t, "the first turn's lock", func() bool {
		owner, _ := redisx.NewLocker(e.rdb, e.prefix).Owner(context.Background(), key)
		return owner != ""
	})
	e.publish(dm("bob", "go left"))
	waitFor(t, "inbound drained", e.inboundDrained)
	if n := len(e.controls(controlSteer)); n != 0 {
		t.Fatalf("%d steer requests for an unclaimed turn", n)
	}
	if n, _ := store.QueueLen(context.Background(), key); n != 1 {
		t.Fatalf("%d queued, want the steering queued", n)
	}
	if n := e.countNotices("bob", "⏩ Steered into current run"); n != 0 {
		t.Fatalf("told the text was added (%d)", n)
	}
}

// While a task runs, commands answer as Hermes's do: /queue and /steer
// always say what became of their text, /approve and /deny whether an
// approval was waiting, and the commands that would read or change the
// conversation under the task are refused. /whoami and /bundles, which
// read neither (Hermes refuses them by his default busy_policy), answer.
func TestCommandsMidTurnAnswerAsHermes(t *testing.T) {
	t.Parallel()
	e, g, w := busySession(t, testConfig(), "bob", "long job")
	refusal := func(name string) string {
		return "⏳ Agent is running — `/" + name + "` can't run mid-turn. Wait for the current response or `/stop` first."
	}
	tests := []struct {
		text, want string
		refuse     bool // no running turn takes controls
	}{
		{"/whoami", "Platform: telegram\nUser id: bob\n", false},
		{"/bundles", "No skill bundles installed.", false},
		{"/sessions", refusal("sessions"), false},
		{"/resume", refusal("resume"), false},
		{"/title Trip", refusal("title"), false},
		{"/retry", refusal("retry"), false},
		{"/undo", refusal("undo"), false},
		{"/compress", refusal("compress"), false},
		{"/set-home", refusal("sethome"), false},
		{"/personality", refusal("personality"), false},
		{"/personality pirate", refusal("personality"), false},
		{"/reasoning", refusal("reasoning"), false},
		{"/reasoning high", refusal("reasoning"), false},
		// Hermes's busy_policy for /approvals is the default, reject.
		{"/approvals", refusal("approvals"), false},
		{"/approvals off", refusal("approvals"), false},
		{"/model", "Agent is running — wait or /stop first, then switch models.", false},
		{"/model gpt-x", "Agent is running — wait or /stop first, then switch models.", false},
		{"/queue first thing", "Queued for the next turn.", false},
		{"/q second thing", "Queued for the next turn. (2 queued)", false},
		{"/steer", "Usage: /steer <prompt>", false},
		{"/steer go left", "⏩ Steer queued — arrives after the next tool call: 'go left'", false},
		{"/steer " + strings.Repeat("x", 70), "⏩ Steer queued — arrives after the next tool call: '" + strings.Repeat("x", 60) + "...'", false},
		{"/steer go right", "⏳ The current task is finishing — /steer queued for the next turn.", true},
		{"/approve", "✅ Command approved. The agent is resuming...", false},
		{"/deny", "❌ Command denied.", false},
		{"/approve session", "✅ Command approved (pattern approved for this session). The agent is resuming...", false},
		{"yes", "✅ Command approved. The agent is resuming...", false},
		{"Always!", "✅ Command approved (pattern approved permanently). The agent is resuming...", false},
		{"👎", "❌ Command denied.", false},
		// Hermes's /deny [all] [reason]: the reason goes to the agent.
		{"/deny use the trash instead", `❌ Command denied. Reason relayed to the agent: "use the trash instead"`, false},
		{"/deny all", "❌ Command denied.", false},
		{"/deny ALL wrong\n  folder", `❌ Command denied. Reason relayed to the agent: "wrong folder"`, false},
		{"/approve always session", "✅ Command approved (pattern approved permanently). The agent is resuming...", false},
		{"/approve", "No pending command to approve.", true},
		{"/deny", "No pending command to deny.", true},
		{"/status", "State: working", false},
		// Hermes refuses them too (TestCommandsRefusedMidTurnAsHermes).
		{"/insights", refusal("insights"), false},
		{"/provider", refusal("provider"), false},
	}
	for _, tt := range tests {
		e.refuseControl.Store(tt.refuse)
		if got := e.ask("bob", tt.text); !strings.Contains(got, tt.want) {
			t.Errorf("%s: got %q, want %q", tt.text, got, tt.want)
		}
	}
	if n := len(e.controls(controlStop)); n != 0 {
		t.Fatalf("%d stops sent", n)
	}
	// The worker reads the argument itself (command.Deny): it goes as typed.
	var denials []string
	for _, c := range e.controls(controlDeny) {
		denials = append(denials, c.GetText())
	}
	if want := []string{"", "", "use the trash instead", "all", "ALL wrong\n  folder", ""}; !slices.Equal(denials, want) {
		t.Errorf("deny controls %q, want %q", denials, want)
	}
	// /resume would have ended the task without a word: it kept its lock.
	owner, err := redisx.NewLocker(e.rdb, e.prefix).Owner(context.Background(), "agent:main:telegram:dm:chat-bob")
	if err != nil || owner == "" {
		t.Fatalf("the running turn lost its lock (%q, %v)", owner, err)
	}
	g.open()
	waitFor(t, "the queued turns", func() bool { turns, _ := w.snapshot(); return len(turns) >= 3 })
	turns, _ := w.snapshot()
	got := inputsText(turns, "agent:main:telegram:dm:chat-bob")
	if len(got) < 3 || got[1] != "first thing" || got[2] != "second thing" {
		t.Fatalf("inputs %q, want the queued texts next, in order", got)
	}
}

// A /steer for a turn no worker has claimed yet is queued, and says so.
func TestSteerCommandBeforeTheTurnIsClaimed(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.startRouter(testConfig(), nil, nil)
	e.publish(dm("bob", "long")) // no worker: the turn waits, unclaimed
	waitFor(t, "the first turn's lock", func() bool {
		owner, _ := redisx.NewLocker(e.rdb, e.prefix).Owner(context.Background(), "agent:main:telegram:dm:chat-bob")
		return owner != ""
	})
	if got := e.ask("bob", "/steer go left"); got != "Agent still starting — /steer queued for the next turn." {
		t.Fatalf("reply %q", got)
	}
	if got, want := e.ask("bob", "/stop"), "⚡ Stopped. The agent hadn't started yet — you can continue this session. 1 waiting message dropped."; got != want {
		t.Fatalf("reply %q, want %q", got, want)
	}
}

// The busy acknowledgement says, as Hermes's does, how long the running
// task has taken once it is a minute or more.
func TestBusyAckSaysHowLongTheTaskRuns(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	cfg := testConfig()
	cfg.BusyMode = BusyQueue
	cfg.SweepInterval = time.Hour // the old grant stays the running turn's
	e.startRouter(cfg, nil, nil)
	key := "agent:main:telegram:dm:chat-bob"
	grant := redisx.NewGrant(time.Now().Add(-3*time.Minute - time.Second))
	if err := e.rdb.Set(context.Background(), redisx.NewLocker(e.rdb, e.prefix).Key(key), grant, time.Hour).Err(); err != nil {
		t.Fatal(err)
	}
	if got, want := e.ask("bob", "are you there?"), "⏳ Queued for the next turn (3 min elapsed). I'll respond once the current task finishes."; got != want {
		t.Fatalf("ack %q, want %q", got, want)
	}
}

// A webhook's text (an issue title, say) that starts with "/" is a message
// for the agent, not a command: "/approve" must not answer a waiting tool,
// and "/btw" or "/background" start no side question or task, whose
// answer would go where the route delivers, nowhere for most.
func TestInternalEventTextIsNoCommand(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.startRouter(testConfig(), nil, nil)
	w := e.startWorker(nil)
	texts := []string{"/approve", "/btw what did we decide?", "/background summarise the plan", "/bg summarise the plan"}
	for i, text := range texts {
		// A route each: the turns do not meet in one session.
		ev := &eventsv1.MessageReceived{EventId: nextEventID(), Text: text, Internal: true, TransportAuthenticated: true,
			Source: &eventsv1.SessionSource{Platform: "webhook", Account: "github", ChatId: fmt.Sprintf("issues-%d", i), ChatType: "dm", UserId: "webhook:github"}}
		e.publish(ev)
	}
	waitFor(t, "the webhooks' turns", func() bool {
		turns, _ := w.snapshot()
		return len(turns) == len(texts)
	})
	turns, _ := w.snapshot()
	for i, text := range texts {
		key := fmt.Sprintf("agent:main:webhook:dm:issues-%d", i)
		if got := inputsText(turns, key); len(got) != 1 || got[0] != text {
			t.Errorf("%s: inputs %q, want the text as the turn's input", key, got)
		}
	}
	for _, tr := range turns {
		if tr.GetSideQuestion() != nil || tr.GetBackgroundTaskId() != "" {
			t.Errorf("a side question's or task's turn ran: %q on %s", tr.GetInputs()[0].GetText(), tr.SessionKey)
		}
	}
	if n := len(e.controls(controlApprove)); n != 0 {
		t.Fatalf("%d approvals sent", n)
	}
}

// A plain "ok" while no approval waits is a message like any other: it is
// queued for the next turn (queue mode here), not swallowed.
func TestApprovalWordNobodyWaitsForIsAMessage(t *testing.T) {
	t.Parallel()
	cfg := testConfig()
	cfg.BusyMode = BusyQueue
	e, g, w := busySession(t, cfg, "bob", "long job")
	e.refuseControl.Store(true)
	if got := e.ask("bob", "ok"); !strings.HasPrefix(got, "⏳ Queued for the next turn") {
		t.Fatalf("reply %q, want the busy acknowledgement", got)
	}
	if n := len(e.controls(controlApprove)); n != 1 {
		t.Fatalf("%d approval requests, want the one no turn took", n)
	}
	g.open()
	waitFor(t, "the next turn", func() bool { turns, _ := w.snapshot(); return len(turns) == 2 })
	turns, _ := w.snapshot()
	if got := inputsText(turns, "agent:main:telegram:dm:chat-bob"); strings.Join(got, ",") != "long job,ok" {
		t.Fatalf("inputs %q", got)
	}
}

// Where /approve is reserved for admins, so is a plain "yes": another
// user's "yes" is a message, not an answer.
func TestApprovalWordOfANonAdminIsAMessage(t *testing.T) {
	t.Parallel()
	cfg := testConfig()
	cfg.BusyMode = BusyQueue
	cfg.Admins = map[string][]string{"telegram": {"alice"}}
	e, g, _ := busySession(t, cfg, "bob", "long job")
	if got := e.ask("bob", "yes"); !strings.HasPrefix(got, "⏳ Queued for the next turn") {
		t.Fatalf("reply %q, want the busy acknowledgement", got)
	}
	if n := len(e.controls(controlApprove)); n != 0 {
		t.Fatalf("%d approval requests for a non-admin's yes", n)
	}
	g.open()
}

// A typed answer to an approval names no tool call: the running turn
// gives it to whichever call waits. Its redelivery (a router that
// stopped, or whose Redis write failed, before the event was recorded as
// handled) must not answer again: by then the turn may wait on another
// call, one the user has not seen. It is answered as the first delivery
// was, and a plain "yes" does not become a message either.
func TestRedeliveredApprovalAnswersNoOtherCall(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		text, want string
		action     turnsv1.ControlAction
	}{
		{"/approve", "✅ Command approved. The agent is resuming...", controlApprove},
		{"/deny", "❌ Command denied.", controlDeny},
		{"yes", "✅ Command approved. The agent is resuming...", controlApprove},
		{"no", "❌ Command denied.", controlDeny},
	} {
		t.Run(tt.text, func(t *testing.T) {
			t.Parallel()
			e, g, _ := busySession(t, testConfig(), "bob", "long job")
			defer g.open()
			ev := dm("bob", tt.text)
			e.publish(ev)
			waitFor(t, "the answer", func() bool { return len(e.answersTo(ev)) == 1 })
			e.loseHandled(ev)
			e.publishID(ev, "redelivered-"+ev.EventId)
			waitFor(t, "the redelivery's answer", func() bool { return len(e.answersTo(ev)) == 2 })
			waitFor(t, "inbound drained", e.inboundDrained)

			for _, a := range e.answersTo(ev) {
				if got := a.GetNotice().GetText(); got != tt.want || a.GetSeq() != 1 {
					t.Errorf("answer %d %q, want %q as answer 1", a.GetSeq(), got, tt.want)
				}
			}
			asked := 0
			for _, c := range e.controls(tt.action) {
				if c.GetEventId() == "telegram:bot1:"+ev.EventId {
					asked++
				}
			}
			if asked != 1 {
				t.Errorf("the turn was asked %d times to take the answer of %q, want once", asked, tt.text)
			}
			if c := e.controls(controlInterrupt); len(c) != 0 {
				t.Errorf("%d interrupts: the answer ran as a message", len(c))
			}
		})
	}
}

// turnsOf are the inputs of each of key's turns, a turn's joined with
// ",", the turns' with "|".
func turnsOf(turns []*turnsv1.TurnRequested, key string) string {
	var out []string
	for _, t := range turns {
		if t.SessionKey == key {
			out = append(out, strings.Join(inputsText([]*turnsv1.TurnRequested{t}, key), ","))
		}
	}
	return strings.Join(out, "|")
}

// Steering a turn took stays queued until the turn gives it to the
// model (this release's workers remove it then; the simulated one never
// does): when the turn ends without it (its model call failed, a newer
// message interrupted it) the text runs as the next input, in its place
// among the messages queued behind the turn, once. It was acknowledged as
// added and lost. A redelivered completion of the turn does not run it
// twice.
func TestSteeringATurnDidNotGiveToTheModelRunsNext(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name string
		mode string
		// send are bob's messages while the first turn runs.
		send []string
		// ack is the notice that tells bob the text was added.
		ack       string
		interrupt bool
		// want are bob's turns' inputs.
		want string
	}{
		{name: "its turn ends", mode: BusySteer, send: []string{"go left"},
			ack: "⏩ Steered into current run", want: "long|go left"},
		{name: "a newer message interrupts its turn", mode: BusyInterrupt, send: []string{"/steer go left", "go right"},
			ack: "⏩ Steer queued — arrives after the next tool call: 'go left'", interrupt: true, want: "long|go left,go right"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			e.steerQueue.Store(true)
			cfg := testConfig()
			cfg.BusyMode = tc.mode
			e.startRouter(cfg, nil, nil)
			first, next := newGate(t, "long"), newGate(t, "go left")
			w := e.startWorker(func(tr *turnsv1.TurnRequested) { first.hold(tr); next.hold(tr) })
			const key = "agent:main:telegram:dm:chat-bob"
			e.publish(dm("bob", "long"))
			waitFor(t, "the turn runs", func() bool { turns, _ := w.snapshot(); return len(turns) == 1 })
			for _, text := range tc.send {
				e.publish(dm("bob", text))
				waitFor(t, "inbound drained", e.inboundDrained)
			}
			if n := len(e.controls(controlSteer)); n != 1 {
				t.Fatalf("%d steer requests, want 1", n)
			}
			if n := settled(t, "the steering's acknowledgement", 1, func() int { return e.countNotices("bob", tc.ack) }); n != 1 {
				t.Fatalf("%d acknowledgements %q; notices %q", n, tc.ack, e.noticesTo("bob"))
			}
			if got := len(e.controls(controlInterrupt)) > 0; got != tc.interrupt {
				t.Fatalf("interrupted %v, want %v", got, tc.interrupt)
			}
			// The turn ends without having given the text to the model.
			first.open()
			waitFor(t, "the next turn", func() bool { turns, _ := w.snapshot(); return len(turns) == 2 })
			turns, _ := w.snapshot()
			done := &turnsv1.TurnCompleted{TurnId: turns[0].TurnId, SessionKey: key, SessionId: turns[0].SessionId,
				Generation: turns[0].Generation, Status: turnsv1.TurnStatus_TURN_STATUS_FAILED}
			redeliver := func(n int) {
				// A redelivery the bus's duplicate window no longer
				// catches: another message id.
				if _, err := e.bus.Publish(context.Background(), e.bus.Topology().Subject(bus.SubjectTurnCompleted),
					fmt.Sprintf("turn-done:%s:again-%d", done.TurnId, n), done); err != nil {
					t.Fatal(err)
				}
			}
			redeliver(1) // while the next turn runs
			next.open()
			store := sessionstore.New(e.db)
			locker := redisx.NewLocker(e.rdb, e.prefix)
			idle := func() bool {
				n, _ := store.QueueLen(context.Background(), key)
				owner, _ := locker.Owner(context.Background(), key)
				return n == 0 && owner == ""
			}
			waitFor(t, "the session idle", idle)
			redeliver(2) // after it
			time.Sleep(time.Second)
			waitFor(t, "the session idle", idle)
			turns, _ = w.snapshot()
			if got := turnsOf(turns, key); got != tc.want {
				t.Fatalf("bob's turns %q, want %q", got, tc.want)
			}
		})
	}
}

// Steering needs no room in the queue to reach the running turn: with
// the session's queue full (QueueCap), text for the running turn was
// dropped with "Too many messages are waiting" since steering is queued
// before the turn is asked (it reached the turn before). The turn is
// asked for the text alone then, as before steering was queued: taken,
// it is acknowledged as added; declined, it is dropped as a full queue's
// message is.
func TestSteeringWhenTheQueueIsFull(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name   string
		refuse bool // no turn takes the steering
		ack    string
		turns  string
	}{
		{name: "the turn takes it", ack: "⏩ Steered into current run", turns: "long|q1|q2"},
		{name: "no turn takes it", refuse: true, ack: "Too many messages are waiting (2)", turns: "long|q1|q2"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			cfg := testConfig()
			cfg.QueueCap = 2
			cfg.BusyMode = BusySteer
			e, g, w := busySession(t, cfg, "bob", "long")
			e.steerQueue.Store(true)
			const key = "agent:main:telegram:dm:chat-bob"
			for _, text := range []string{"/queue q1", "/queue q2"} {
				e.publish(dm("bob", text))
				waitFor(t, "inbound drained", e.inboundDrained)
			}
			e.refuseControl.Store(tc.refuse)
			e.publish(dm("bob", "go left"))
			waitFor(t, "inbound drained", e.inboundDrained)
			steers := e.controls(controlSteer)
			if len(steers) != 1 || steers[0].GetText() != "go left" || steers[0].GetQueuedEventId() != "" {
				t.Fatalf("steer requests %v, want one for the text alone (nothing queued)", steers)
			}
			if n := settled(t, "the steering's answer", 1, func() int { return e.countNotices("bob", tc.ack) }); n != 1 {
				t.Fatalf("%d notices %q; notices %q", n, tc.ack, e.noticesTo("bob"))
			}
			g.open()
			waitFor(t, "the queued turns", func() bool { turns, _ := w.snapshot(); return len(turns) == 3 })
			time.Sleep(300 * time.Millisecond)
			turns, _ := w.snapshot()
			if got := turnsOf(turns, key); got != tc.turns {
				t.Fatalf("bob's turns %q, want %q", got, tc.turns)
			}
		})
	}
}

// Steering the running turn took stays queued until the turn gives it
// to the model, but it is that turn's, not a message waiting for the
// next one: router.queue_cap counted it, so a user who steered a long
// turn twice found a queue of 2 full ("Too many messages are waiting")
// with no message waiting. The cap counts the waiting messages alone,
// as /status and /queue do, and still holds for them.
func TestSteeringTakesNoRoomInTheQueue(t *testing.T) {
	t.Parallel()
	cfg := testConfig()
	cfg.QueueCap = 2
	cfg.BusyMode = BusyQueue
	e, g, w := busySession(t, cfg, "bob", "long")
	e.steerQueue.Store(true)
	const key = "agent:main:telegram:dm:chat-bob"
	for _, text := range []string{"go left", "go right"} {
		if got, want := e.ask("bob", "/steer "+text), "⏩ Steer queued — arrives after the next tool call: '"+text+"'"; got != want {
			t.Fatalf("/steer %s: %q, want %q", text, got, want)
		}
	}
	for _, step := range []struct{ send, want string }{
		{"/queue q1", "Queued for the next turn."},
		{"/queue q2", "Queued for the next turn. (2 queued)"},
		{"/queue q3", "⚠️ Too many messages are waiting (2). This one was not queued; please wait for the current reply."},
	} {
		if got := e.ask("bob", step.send); got != step.want {
			t.Fatalf("%s: %q, want %q", step.send, got, step.want)
		}
	}
	if n, _ := sessionstore.New(e.db).QueueLen(context.Background(), key); n != 4 {
		t.Fatalf("%d queued, want the two steering texts and q1, q2", n)
	}
	g.open()
	waitFor(t, "the queued turns", func() bool { turns, _ := w.snapshot(); return len(turns) == 4 })
	time.Sleep(300 * time.Millisecond)
	turns, _ := w.snapshot()
	if got, want := turnsOf(turns, key), "long|go left,go right|q1|q2"; got != want {
		t.Fatalf("bob's turns %q, want %q", got, want)
	}
}

// Steering the running turn took stays queued until the turn gives it
// to the model, but the user sent it into that turn: /status, /queue,
// /agents and /stop counted it as a message waiting for the next turn
// ("2 queued" for the one /queue message, "2 waiting messages
// dropped"). It counts as the turn's steering now; /stop still drops it
// with the turn, as Hermes's hard stop drops a pending steer.
func TestSteeringIsNotCountedAsWaiting(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name string
		mode string
		send string
		ack  string
	}{
		{name: "busy mode steer", mode: BusySteer, send: "go left", ack: "⏩ Steered into current run"},
		{name: "/steer", mode: BusyQueue, send: "/steer go left", ack: "⏩ Steer queued — arrives after the next tool call: 'go left'"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			cfg := testConfig()
			cfg.BusyMode = tc.mode
			e, g, w := busySession(t, cfg, "bob", "long")
			e.steerQueue.Store(true)
			const key = "agent:main:telegram:dm:chat-bob"
			e.publish(dm("bob", tc.send))
			waitFor(t, "inbound drained", e.inboundDrained)
			if n := settled(t, "the steering's acknowledgement", 1, func() int { return e.countNotices("bob", tc.ack) }); n != 1 {
				t.Fatalf("%d acknowledgements %q; notices %q", n, tc.ack, e.noticesTo("bob"))
			}
			// Still queued: the simulated worker never gives it to the model.
			if n, _ := sessionstore.New(e.db).QueueLen(context.Background(), key); n != 1 {
				t.Fatalf("%d queued, want the steering", n)
			}
			if got, want := e.ask("bob", "/status"), "State: working, 0 messages waiting, 1 steer not yet read by the agent\n"; !strings.Contains(got, want) {
				t.Fatalf("/status %q, want %q", got, want)
			}
			if got, want := e.ask("bob", "/queue q1"), "Queued for the next turn."; got != want {
				t.Fatalf("/queue %q, want %q", got, want)
			}
			if got, want := e.ask("bob", "/status"), "State: working, 1 message waiting, 1 steer not yet read by the agent\n"; !strings.Contains(got, want) {
				t.Fatalf("/status %q, want %q", got, want)
			}
			if got := e.ask("bob", "/agents"); !strings.Contains(got, "**Waiting messages:** 1\n") || strings.Contains(got, "go left") {
				t.Fatalf("/agents %q, want q1 alone waiting", got)
			}
			if got, want := e.ask("bob", "/stop"), "⚡ Stopped. You can continue this session. 1 waiting message dropped."; got != want {
				t.Fatalf("/stop %q, want %q", got, want)
			}
			g.open()
			time.Sleep(300 * time.Millisecond)
			if n, _ := sessionstore.New(e.db).QueueLen(context.Background(), key); n != 0 {
				t.Fatalf("%d queued after /stop, want none (the steering dropped with the turn)", n)
			}
			turns, _ := w.snapshot()
			if got := turnsOf(turns, key); got != "long" {
				t.Fatalf("bob's turns %q, want the stopped one alone", got)
			}
		})
	}
}

// A message that comes after the running turn's worker recorded its end
// (its answer may be in the chat already) but before the router took its
// completion (a router restarting after a kill -9, one behind) is the
// next turn's, as after the completion: no "⚡ Interrupting current task"
// nor "⏳ Queued" for a task the user saw end, and no interrupt. The
// chaos run's Telegram chats got the notice as the first answer to their
// next message after a router was killed.
func TestMessageAfterTheTurnsRecordedEndIsNotBusy(t *testing.T) {
	t.Parallel()
	for _, mode := range []string{BusyInterrupt, BusyQueue, BusySteer} {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			cfg := testConfig()
			cfg.BusyMode = mode
			e, g, w := busySession(t, cfg, "alice", "long")
			running, _ := w.snapshot()
			turn := running[0]
			// The worker recorded the turn's end; its completion is not
			// published yet (the gate holds it).
			if _, err := e.db.Exec(context.Background(), `INSERT INTO worker_turns (turn_id, session_key, session_id, generation, status, final_kind, final_text)
				VALUES ($1, $2, $3, $4, 'completed', 'text', 'the answer')`, turn.TurnId, turn.SessionKey, turn.SessionId, turn.Generation); err != nil {
				t.Fatal(err)
			}
			e.publish(dm("alice", "next question"))
			waitFor(t, "inbound drained", e.inboundDrained)
			g.open()
			waitFor(t, "the next turn", func() bool { turns, _ := w.snapshot(); return len(turns) == 2 })
			turns, _ := w.snapshot()
			if in := turns[1].Inputs; len(in) != 1 || in[0].Text != "next question" {
				t.Fatalf("next turn inputs %v, want the message", in)
			}
			if n := len(e.controls(controlInterrupt)) + len(e.controls(controlSteer)); n != 0 {
				t.Errorf("%d interrupt or steer controls for an ended turn, want none", n)
			}
			for _, word := range []string{"Interrupting", "Queued", "Steered"} {
				if n := e.countNotices("alice", word); n != 0 {
					t.Errorf("%d %q notices for an ended turn, want none", n, word)
				}
			}
		})
	}
}
