package router

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/switchboard-chat/switchboard/pkg/estop"
	turnsv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/turns/v1"
	"github.com/switchboard-chat/switchboard/pkg/goal"
	"github.com/switchboard-chat/switchboard/pkg/sessionstore"
)

// TestPauseCommand: /pause is for admins where a platform lists them;
// it pauses every replica, a user's message is then answered with
// Hermes's paused notice and starts no turn, commands still work but
// those that start work (/steer with no task running too) are answered
// the same, /status shows the pause, /pause off resumes, all in Hermes's
// words.
func TestPauseCommand(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	cfg := testConfig()
	cfg.Admins = map[string][]string{"telegram": {"alice"}}
	e.startRouter(cfg, nil, nil)
	w := e.startWorker(nil)
	actions := testutil.ToFloat64(pauseActions.WithLabelValues("pause"))

	for _, tt := range []struct {
		user, text string
		want       string // the answer's beginning
	}{
		{"bob", "/pause", "/pause is reserved for admins here."},
		{"alice", "/pause off", "Switchboard wasn't paused."},
		{"alice", "/pause deploy window", "⏸️ Paused (reason: deploy window). New cron/goal/gateway work is on hold; in-flight work finishes normally. Use `/pause off` to resume."},
		{"bob", "hello", "⏸️ Switchboard is paused (deploy window). New work is on hold; an admin can send `/pause off` to pick things back up."},
		{"alice", "/pause", "⏸️ Switchboard is already paused (reason: deploy window). Use `/pause off` to resume."},
		{"bob", "/pause off", "/pause is reserved for admins here."},
		{"alice", "/background look at the logs", "⏸️ Switchboard is paused (deploy window)."},
		{"alice", "/goal tidy the garden", "⏸️ Switchboard is paused (deploy window)."},
		{"alice", "/queue later", "⏸️ Switchboard is paused (deploy window)."},
		// With no task running, /steer sends its text as a normal
		// message, which the pause holds as any other.
		{"alice", "/steer look again", "⏸️ Switchboard is paused (deploy window)."},
		{"alice", "/help", "Commands:"},
		{"alice", "/pause rotating keys", "⏸️ Paused (reason: rotating keys)."},
		{"bob", "still there?", "⏸️ Switchboard is paused (rotating keys)."},
	} {
		if got := e.ask(tt.user, tt.text); !strings.HasPrefix(got, tt.want) {
			t.Errorf("%s %q: %q, want it to begin with %q", tt.user, tt.text, got, tt.want)
		}
	}
	if got := e.ask("alice", "/status"); !strings.Contains(got, "⏸️ Paused (reason: rotating keys): new work is on hold. /pause off resumes.") {
		t.Errorf("/status while paused: %q", got)
	}
	if n := testutil.ToFloat64(pauseActions.WithLabelValues("pause")); n < actions+2 {
		t.Errorf("switchboard_router_pause_actions_total{action=pause} %v, was %v: want two more", n, actions)
	}
	e.settle()
	if turns, _ := w.snapshot(); len(turns) != 0 {
		t.Fatalf("%d turns started while paused", len(turns))
	}
	kv, err := estop.Open(context.Background(), e.bus.JetStream(), e.bus.Topology())
	if err != nil {
		t.Fatal(err)
	}
	if st, err := estop.Get(context.Background(), kv); err != nil || st == nil || st.By != "telegram:alice" || st.Reason != "rotating keys" {
		t.Errorf("stored pause %+v, %v", st, err)
	}

	if got := e.ask("alice", "/pause off"); got != "▶️ Resumed — new work is accepted again." {
		t.Errorf("/pause off: %q", got)
	}
	if got := e.ask("alice", "/status"); strings.Contains(got, "Paused") {
		t.Errorf("/status after /pause off: %q", got)
	}
	e.publish(dm("bob", "hello again"))
	turnOf(t, w, "hello again")
}

// TestPauseSurvivesRestart: a pause engaged through one router is seen
// by a router that starts after it stopped (another process: its own
// connection), from its first message; its switchboard_router_paused
// says so. Not parallel: the gauge is the process's, which the other
// tests' routers set too.
func TestPauseSurvivesRestart(t *testing.T) {
	e := newEnv(t)
	first, err := New(testConfig(), Deps{Bus: e.bus, DB: e.db, Redis: e.rdb, RedisPrefix: e.prefix, Environ: []string{}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- first.Run(ctx) }()
	if got := e.ask("alice", "/pause maintenance"); !strings.HasPrefix(got, "⏸️ Paused (reason: maintenance).") {
		t.Fatalf("/pause: %q", got)
	}
	waitFor(t, "inbound drained", e.inboundDrained)
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("first router: %v", err)
	}

	second := e.startRouter(testConfig(), e.secondBus(), nil)
	paused, err := second.Paused(context.Background())
	if err != nil || !paused {
		t.Fatalf("the new router: paused %v, %v", paused, err)
	}
	w := e.startWorker(nil)
	if got := e.ask("bob", "hello"); !strings.HasPrefix(got, "⏸️ Switchboard is paused (maintenance).") {
		t.Errorf("message to the new router: %q", got)
	}
	if testutil.ToFloat64(routerPaused) != 1 {
		t.Errorf("switchboard_router_paused %v while paused", testutil.ToFloat64(routerPaused))
	}
	e.settle()
	if turns, _ := w.snapshot(); len(turns) != 0 {
		t.Errorf("%d turns started while paused", len(turns))
	}
}

// TestPauseHoldsGoalContinuation: a goal's continuation that comes due
// while paused is not started: the goal is paused with the reason and
// its continuation dropped (/goal resume continues it after /pause off);
// a message queued before the pause still runs (work in flight).
func TestPauseHoldsGoalContinuation(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.startRouter(testConfig(), nil, nil)
	release := make(chan struct{})
	w := e.startWorker(func(tr *turnsv1.TurnRequested) {
		if tr.GetInputs()[0].GetText() == "hold" {
			<-release
		}
	})
	e.ask("alice", "/goal tidy the garden")
	turnOf(t, w, "tidy the garden")
	e.publish(dm("alice", "hold"))
	turnOf(t, w, "hold")
	st := sessionstore.New(e.db)
	key := "agent:main:telegram:dm:chat-alice"
	sess, err := st.Get(context.Background(), key)
	if err != nil {
		t.Fatal(err)
	}
	cont := dm("alice", "[Continuing toward your standing goal]\nGoal: tidy the garden")
	cont.EventId = sessionstore.GoalEventPrefix + "turn-1"
	if err := st.EnqueueContinuation(context.Background(), key, cont); err != nil {
		t.Fatal(err)
	}
	if got := e.ask("bob", "/pause"); !strings.HasPrefix(got, "⏸️ Paused.") {
		t.Fatalf("/pause: %q", got)
	}
	close(release)
	waitFor(t, "the goal paused", func() bool {
		g, err := st.Goal(context.Background(), key, sess.ID)
		return err == nil && g != nil && g.Status == goal.Paused && g.PausedReason == pausedGoalReason
	})
	if n, err := st.QueueLen(context.Background(), key); err != nil || n != 0 {
		t.Errorf("queue after the held continuation: %d, %v", n, err)
	}
	e.settle()
	turns, _ := w.snapshot()
	for _, tr := range turns {
		if strings.HasPrefix(tr.GetInputs()[0].GetText(), "[Continuing") {
			t.Errorf("a continuation started while paused: %q", tr.GetInputs()[0].GetText())
		}
	}
}

// TestPauseExpiry: a pause with an expiry, as the admin API writes it
// (`switchboard pause --ttl`), adds Hermes's "Auto-resumes" to the paused
// notice, a /pause <reason> re-arm keeps the expiry, and once it passed
// the router takes new work again without any /pause off.
func TestPauseExpiry(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := newEnv(t)
	r := e.startRouter(testConfig(), nil, nil)
	w := e.startWorker(nil)
	kv, err := estop.Open(ctx, e.bus.JetStream(), e.bus.Topology())
	if err != nil {
		t.Fatal(err)
	}
	until := time.Now().Add(6 * time.Second).UTC().Truncate(time.Second)
	if err := estop.Engage(ctx, kv, estop.State{Reason: "window", By: "admin:ops", Until: until}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the router to pause", func() bool { p, _ := r.Paused(ctx); return p })
	resumes := " Auto-resumes " + until.Format("2006-01-02 15:04:05 UTC") + "."
	if got := e.ask("bob", "hello"); !strings.HasPrefix(got, "⏸️ Switchboard is paused (window).") || !strings.HasSuffix(got, resumes) {
		t.Errorf("paused notice %q, want it to end with %q", got, resumes)
	}
	if got := e.ask("alice", "/pause longer window"); !strings.HasPrefix(got, "⏸️ Paused (reason: longer window).") || !strings.HasSuffix(got, resumes) {
		t.Errorf("re-arm %q", got)
	}
	if st, err := estop.Get(ctx, kv); err != nil || st == nil || !st.Until.Equal(until) || st.By != "telegram:alice" {
		t.Fatalf("re-armed pause %+v, %v: want the expiry kept", st, err)
	}
	waitFor(t, "the pause to expire", func() bool { p, _ := r.Paused(ctx); return !p })
	if time.Now().Before(until) {
		t.Fatal("resumed before the expiry")
	}
	e.publish(dm("bob", "after the window"))
	turnOf(t, w, "after the window")
}

// Hermes's allowlist: a pause whose entry lets user ids through (set in
// the bucket) lets their new messages and work-starting commands
// through, refuses everyone else's, names no profile or this router's,
// and a /pause <reason> re-arm keeps it.
func TestPauseAllowlist(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := newEnv(t)
	r := e.startRouter(testConfig(), nil, nil)
	w := e.startWorker(nil)
	kv, err := estop.Open(ctx, e.bus.JetStream(), e.bus.Topology())
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		name, entry string
		through     bool // alice's new work goes through
	}{
		{"no allowlist", `{"reason":"window"}`, false},
		{"alice allowed", `{"reason":"window","allow":{"user_ids":["alice"]}}`, true},
		{"alice allowed on this profile", `{"reason":"window","allow":{"user_ids":"alice","profiles":["default"]}}`, true},
		{"alice allowed on another profile", `{"reason":"window","allow":{"user_ids":["alice"],"profiles":["coder"]}}`, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := kv.Put(ctx, "global", []byte(tt.entry)); err != nil {
				t.Fatal(err)
			}
			waitFor(t, "the router to take the entry", func() bool {
				st := r.paused()
				return st != nil && fmt.Sprint(st.Allow) == fmt.Sprint(estop.Decode([]byte(tt.entry)).Allow)
			})
			if got := e.ask("bob", "bob's "+tt.name); !strings.HasPrefix(got, "⏸️ Switchboard is paused (window).") {
				t.Errorf("bob: %q, want the paused notice", got)
			}
			text := "alice's " + tt.name
			if !tt.through {
				if got := e.ask("alice", text); !strings.HasPrefix(got, "⏸️ Switchboard is paused (window).") {
					t.Errorf("alice: %q, want the paused notice", got)
				}
				return
			}
			e.publish(dm("alice", text))
			turnOf(t, w, text)
			e.publish(dm("alice", "/queue queued "+tt.name))
			turnOf(t, w, "queued "+tt.name)
		})
	}
	// A re-arm from a chat keeps the standing allowlist.
	if got := e.ask("alice", "/pause new reason"); !strings.HasPrefix(got, "⏸️ Paused (reason: new reason).") {
		t.Fatalf("re-arm: %q", got)
	}
	st, err := estop.Get(ctx, kv)
	if err != nil || st == nil || st.Allow == nil || fmt.Sprint(st.Allow.UserIDs) != "[alice]" || fmt.Sprint(st.Allow.Profiles) != "[coder]" {
		t.Fatalf("re-armed pause %+v, %v: want the allowlist kept", st, err)
	}
}

// A /pause <reason> re-arm writes on the condition that the pause is
// still the one it read: a /pause off or an admin API change landing
// between its read and its write (made at the seam between them,
// pauseRead) is read and decided on again, never overwritten; a pause
// lifted meanwhile does not come back with its expiry and allowlist, an
// allowlist replaced meanwhile does not revert.
func TestPauseRearmKeepsAChangeMadeMeanwhile(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := newEnv(t)
	kv, err := estop.Open(ctx, e.bus.JetStream(), e.bus.Topology())
	if err != nil {
		t.Fatal(err)
	}
	var between atomic.Pointer[func()]
	s, err := New(testConfig(), Deps{Bus: e.bus, DB: e.db, Redis: e.rdb, RedisPrefix: e.prefix, Environ: []string{}})
	if err != nil {
		t.Fatal(err)
	}
	s.pauseRead = func(context.Context) {
		if f := between.Swap(nil); f != nil {
			(*f)()
		}
	}
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- s.Run(rctx) }()
	defer func() { cancel(); <-done }()

	until := time.Now().Add(time.Hour).UTC().Truncate(time.Second)
	standing := estop.State{Reason: "window", By: "admin:ops", Until: until, Allow: &estop.Allow{UserIDs: estop.IDs{"alice"}}}
	for _, tt := range []struct {
		name, text string
		between    func() error
		want       string // the answer
		// stored afterwards
		reason, allow string
		until         time.Time
		lifted        bool // nothing is stored
	}{
		{name: "nothing between: the re-arm keeps the expiry and allowlist", text: "/pause new reason",
			want:   "⏸️ Paused (reason: new reason). New cron/goal/gateway work is on hold; in-flight work finishes normally. Use `/pause off` to resume. Auto-resumes " + until.Format("2006-01-02 15:04:05 UTC") + ".",
			reason: "new reason", allow: "[alice]", until: until},
		{name: "a /pause off between: a pause of its own", text: "/pause new reason",
			between: func() error { _, err := estop.Disengage(ctx, kv); return err },
			want:    "⏸️ Paused (reason: new reason). New cron/goal/gateway work is on hold; in-flight work finishes normally. Use `/pause off` to resume.",
			reason:  "new reason", allow: "<nil>"},
		{name: "the admin API's allowlist between is kept", text: "/pause new reason",
			between: func() error {
				return estop.Engage(ctx, kv, estop.State{Reason: "admin", By: "admin", Until: until, Allow: &estop.Allow{UserIDs: estop.IDs{"bob"}}})
			},
			want:   "⏸️ Paused (reason: new reason).",
			reason: "new reason", allow: "[bob]", until: until},
		// A bare /pause writes nothing: it answers from its read, and the
		// /pause off after it stands.
		{name: "a bare /pause with a /pause off between changes nothing", text: "/pause",
			between: func() error { _, err := estop.Disengage(ctx, kv); return err },
			want:    "⏸️ Switchboard is already paused (reason: window). Use `/pause off` to resume.",
			lifted:  true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if err := estop.Engage(ctx, kv, standing); err != nil {
				t.Fatal(err)
			}
			if tt.between != nil {
				f := func() {
					if err := tt.between(); err != nil {
						t.Error(err)
					}
				}
				between.Store(&f)
			}
			if got := e.ask("alice", tt.text); !strings.HasPrefix(got, tt.want) {
				t.Errorf("%q answered %q, want it to begin with %q", tt.text, got, tt.want)
			}
			if between.Load() != nil {
				t.Fatal("the change between was never made")
			}
			st, err := estop.Get(ctx, kv)
			if err != nil || (st == nil) != tt.lifted {
				t.Fatalf("stored %+v, %v: want a pause %v", st, err, !tt.lifted)
			}
			if tt.lifted {
				return
			}
			allow := "<nil>"
			if st.Allow != nil {
				allow = fmt.Sprint(st.Allow.UserIDs)
			}
			if st.Reason != tt.reason || allow != tt.allow || !st.Until.Equal(tt.until) || st.By != "telegram:alice" {
				t.Errorf("stored %+v (allow %s), want reason %q, allow %s, until %v", st, allow, tt.reason, tt.allow, tt.until)
			}
		})
	}
}
