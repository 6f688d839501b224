package router

import (
	"context"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/switchboard-chat/switchboard/pkg/bus"
	"github.com/switchboard-chat/switchboard/pkg/estop"
	"github.com/switchboard-chat/switchboard/pkg/gatewaystatus"
	repliesv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/replies/v1"
	"github.com/switchboard-chat/switchboard/pkg/sessionstore"
)

// A command that changes durable state, redelivered after the router
// crashed between committing its effect and recording the message as
// handled (the Redis dedupe record is lost with the crash here), is
// applied once: the redelivery finds the record written with the effect
// and sends the first answer again, same text, same turn id and seq
// (delivery's idempotency key) and same bus message id (the replies
// stream keeps one), so the user sees one answer.
func TestCommandRedeliveredAfterACrashIsAppliedOnce(t *testing.T) {
	t.Parallel()
	const key = "agent:main:telegram:dm:chat-alice"
	count := func(t *testing.T, e *env, q string) int {
		t.Helper()
		var n int
		if err := e.db.QueryRow(context.Background(), q, key).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	current := func(t *testing.T, e *env) sessionstore.Session {
		t.Helper()
		sess, err := sessionstore.New(e.db).Get(context.Background(), key)
		if err != nil {
			t.Fatal(err)
		}
		return sess
	}
	conversations := `SELECT count(*) FROM session_history WHERE session_key = $1`
	// snapshot is a query's rows as text: the state a redelivery must
	// leave as the first delivery left it.
	snapshot := func(q string, args ...any) func(t *testing.T, e *env) string {
		return func(t *testing.T, e *env) string {
			t.Helper()
			var out string
			if err := e.db.QueryRow(context.Background(), q, args...).Scan(&out); err != nil {
				t.Fatal(err)
			}
			return out
		}
	}
	// The session's generation (a /stop steps it, fencing a turn started
	// since) and its waiting messages.
	stopState := snapshot(`SELECT s.generation || ' ' || (SELECT count(*) FROM session_queue q WHERE q.session_key = s.session_key)
		FROM sessions s WHERE s.session_key = $1`, key)
	// Every cron job, as each change leaves it (a change writes updated_at).
	cronState := snapshot(`SELECT coalesce(string_agg(concat_ws(' ', id, name, state, next_run_at, manual_run_at, repeat_times, updated_at), E'\n'
		ORDER BY created_at, id), '') FROM cron_jobs`)
	addJob := func(t *testing.T, e *env) {
		if got := e.ask("alice", "/cron add 30m Check the build"); !strings.HasPrefix(got, "Created job: ") {
			t.Fatalf("/cron add answered %q", got)
		}
	}
	for _, tt := range []struct {
		name, text string
		command    string // its switchboard_router_commands_replayed_total label
		setup      func(t *testing.T, e *env)
		answer     string                     // the answer's beginning
		check      func(t *testing.T, e *env) // nil: none
		// state, when set, is the durable state the first delivery left,
		// which the redelivery must leave as it is.
		state func(t *testing.T, e *env) string
		// provider is the router's model provider (none by default).
		provider Provider
		// between, when set, runs after the first delivery, before the
		// redelivery: a later command the redelivery must not undo.
		between func(t *testing.T, e *env)
	}{
		{name: "new", command: "new", text: "/new", answer: "✨ New session started.", check: func(t *testing.T, e *env) {
			if n := count(t, e, conversations); n != 2 {
				t.Errorf("%d conversations, want 2: the first and one new", n)
			}
		}},
		{name: "new with a title", command: "new", text: "/new Plan", answer: "✨ New session started: Plan", check: func(t *testing.T, e *env) {
			if n, title := count(t, e, conversations), current(t, e).Title; n != 2 || title != "Plan" {
				t.Errorf("%d conversations, the current titled %q; want 2, Plan", n, title)
			}
		}},
		{name: "branch", command: "branch", text: "/branch", setup: func(t *testing.T, e *env) {
			e.ask("alice", "/title Plan")
			sess := current(t, e)
			if _, err := e.db.Exec(context.Background(), `INSERT INTO transcript_messages (session_key, session_id, user_key, turn_id, generation, step, role, content)
				VALUES ($1, $2, 'telegram:alice', 't1', $3, 0, 'user', 'hello'), ($1, $2, 'telegram:alice', 't1', $3, 1, 'assistant', 'hi there')`,
				key, sess.ID, sess.Generation); err != nil {
				t.Fatal(err)
			}
		}, answer: "⑂ Branched to **Plan #2** (1 message copied)", check: func(t *testing.T, e *env) {
			msgs := count(t, e, `SELECT count(*) FROM transcript_messages WHERE session_key = $1`)
			if n, title := count(t, e, conversations), current(t, e).Title; n != 2 || msgs != 4 || title != "Plan #2" {
				t.Errorf("%d conversations, %d messages, the current titled %q; want 2, 4 (one copy), Plan #2", n, msgs, title)
			}
		}},
		{name: "resume by number", command: "resume", text: "/resume 2", setup: func(t *testing.T, e *env) {
			e.ask("alice", "/title Old")
			e.ask("alice", "/new")
		}, answer: "↩️ Resumed Old.", check: func(t *testing.T, e *env) {
			if title := current(t, e).Title; title != "Old" {
				t.Errorf("current conversation %q, want Old", title)
			}
		}},
		{name: "platform pause", command: "platform", text: "/platform pause discord", answer: "✓ discord paused.", check: func(t *testing.T, e *env) {
			kv, err := gatewaystatus.Pauses(context.Background(), e.bus.JetStream(), e.bus.Topology())
			if err != nil {
				t.Fatal(err)
			}
			if p, err := gatewaystatus.Get(context.Background(), kv, "discord"); err != nil || p == nil {
				t.Errorf("discord's pause: %v, %v", p, err)
			}
		}},
		// A redelivered /pause after /pause off must not pause again.
		{name: "pause", command: "pause", text: "/pause deploy window", answer: "⏸️ Paused (reason: deploy window).",
			between: func(t *testing.T, e *env) {
				if got := e.ask("alice", "/pause off"); got != "▶️ Resumed — new work is accepted again." {
					t.Fatalf("/pause off answered %q", got)
				}
			}, check: func(t *testing.T, e *env) {
				kv, err := estop.Open(context.Background(), e.bus.JetStream(), e.bus.Topology())
				if err != nil {
					t.Fatal(err)
				}
				if st, err := estop.Get(context.Background(), kv); err != nil || st != nil {
					t.Errorf("pause after the redelivery: %+v, %v; want none (lifted by /pause off)", st, err)
				}
			}},
		{name: "yolo", command: "yolo", text: "/yolo", answer: yoloOnText, check: func(t *testing.T, e *env) {
			if n := count(t, e, `SELECT count(*) FROM session_yolo WHERE session_key = $1`); n != 1 {
				t.Errorf("YOLO mode toggled back off")
			}
		}},
		{name: "footer", command: "footer", text: "/footer", answer: "📎 Runtime footer: **ON**", check: func(t *testing.T, e *env) {
			if f := current(t, e).RuntimeFooter; f != "on" {
				t.Errorf("runtime footer %q, want on: toggled once", f)
			}
		}},
		{name: "voice", command: "voice", text: "/voice", answer: "Voice mode enabled.", check: func(t *testing.T, e *env) {
			if v := current(t, e).VoiceMode; v != "voice_only" {
				t.Errorf("voice mode %q, want voice_only: toggled once", v)
			}
		}},
		{name: "busy", command: "busy", text: "/busy queue", answer: "Busy input mode set to **`queue`**", check: func(t *testing.T, e *env) {
			if b := current(t, e).BusyMode; b != BusyQueue {
				t.Errorf("busy mode %q, want queue", b)
			}
		}},
		{name: "verbose", command: "verbose", text: "/verbose", answer: verboseDescriptions["new"], check: func(t *testing.T, e *env) {
			var mode string
			if err := e.db.QueryRow(context.Background(), `SELECT mode FROM tool_progress_modes WHERE platform = 'telegram'`).Scan(&mode); err != nil || mode != "new" {
				t.Errorf("tool progress mode %q (%v), want new: cycled once from off", mode, err)
			}
		}},
		{name: "fast", command: "fast", text: "/fast fast", provider: Provider{Kind: "openai", Model: "gpt-5.4"},
			answer: "⚡ ✓ Priority Processing: **FAST**",
			between: func(t *testing.T, e *env) {
				if got := e.ask("alice", "/fast normal"); !strings.HasPrefix(got, "⚡ ✓ Priority Processing: **NORMAL**") {
					t.Fatalf("/fast normal answered %q", got)
				}
			},
			state: snapshot(`SELECT service_tier FROM sessions WHERE session_key = $1`, key)},
		{name: "stop", command: "stop", text: "/stop", answer: "No active task to stop.", state: stopState},
		{name: "topic", command: "topic", text: "/topic", answer: "Telegram multi-session topics are enabled.",
			state: snapshot(`SELECT count(*)::text || ' ' || coalesce(max(enabled_at)::text, '') FROM telegram_topic_modes`)},
		{name: "topic off", command: "topic", text: "/topic off", setup: func(t *testing.T, e *env) {
			e.ask("alice", "/topic")
		}, answer: "Multi-session topic mode is now OFF for this chat.", state: snapshot(`SELECT count(*)::text FROM telegram_topic_modes`)},
		{name: "cron add", command: "cron", text: "/cron add 30m Check the build", answer: "Created job: ", state: cronState, check: func(t *testing.T, e *env) {
			if n := snapshot(`SELECT count(*)::text FROM cron_jobs`)(t, e); n != "1" {
				t.Errorf("%s cron jobs, want 1", n)
			}
		}},
		{name: "cron edit", command: "cron", text: "/cron edit Check the build --repeat 3", setup: addJob, answer: "Updated job: ", state: cronState},
		{name: "cron pause", command: "cron", text: "/cron pause Check the build", setup: addJob, answer: "Paused job: Check the build", state: cronState},
		{name: "cron resume", command: "cron", text: "/cron resume Check the build", setup: func(t *testing.T, e *env) {
			addJob(t, e)
			e.ask("alice", "/cron pause Check the build")
		}, answer: "Resumed job: Check the build", state: cronState},
		{name: "cron run", command: "cron", text: "/cron run Check the build", setup: addJob, answer: "Triggered job: Check the build", state: cronState},
		{name: "cron remove", command: "cron", text: "/cron remove Check the build", setup: addJob, answer: "Removed job: Check the build", state: cronState},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			e := newEnv(t)
			cfg := testConfig()
			cfg.ToolProgressCommand = true
			cfg.VoiceReplies = true
			e.provider = tt.provider
			e.startToolProgressRouter(cfg, nil)
			if tt.setup != nil {
				tt.setup(t, e)
			}
			ev := dm("alice", tt.text)
			answers := func() []*repliesv1.ReplyEvent { return e.answersTo(ev) }
			e.publish(ev)
			waitFor(t, "the answer", func() bool { return len(answers()) == 1 })
			waitFor(t, "inbound drained", e.inboundDrained)
			if tt.between != nil {
				tt.between(t, e)
				waitFor(t, "inbound drained", e.inboundDrained)
			}
			stored := func() uint64 {
				t.Helper()
				st, err := e.bus.JetStream().Stream(ctx, e.bus.Topology().Stream(bus.StreamReplies))
				if err != nil {
					t.Fatal(err)
				}
				info, err := st.Info(ctx)
				if err != nil {
					t.Fatal(err)
				}
				return info.State.Msgs
			}
			before := stored()
			var was string
			if tt.state != nil {
				was = tt.state(t, e)
			}

			replayed := testutil.ToFloat64(commandsReplayed.WithLabelValues(tt.command))

			// The crash: the effect is committed, the message not recorded
			// as handled; the bus delivers it again.
			e.loseHandled(ev)
			e.publishID(ev, "redelivered-"+ev.EventId)
			waitFor(t, "inbound drained", e.inboundDrained)
			waitFor(t, "the redelivery's answer", func() bool { return len(answers()) == 2 })

			if tt.check != nil {
				tt.check(t, e)
			}
			// At least: another case of the same command may replay
			// meanwhile.
			if n := testutil.ToFloat64(commandsReplayed.WithLabelValues(tt.command)); n < replayed+1 {
				t.Errorf("switchboard_router_commands_replayed_total{command=%q} %v after the redelivery, %v before: want it counted", tt.command, n, replayed)
			}
			if tt.state != nil {
				if is := tt.state(t, e); is != was {
					t.Errorf("the redelivery changed the state:\n%s\nwas, after the first delivery:\n%s", is, was)
				}
			}
			got := answers()
			first := got[0]
			if !strings.HasPrefix(first.GetNotice().GetText(), tt.answer) {
				t.Errorf("answer %q, want it to begin with %q", first.GetNotice().GetText(), tt.answer)
			}
			for _, a := range got[1:] {
				if a.GetSeq() != first.GetSeq() || a.GetNotice().GetText() != first.GetNotice().GetText() {
					t.Errorf("the redelivery answered %q (seq %d), the first delivery %q (seq %d): want the same answer under the same ids",
						a.GetNotice().GetText(), a.GetSeq(), first.GetNotice().GetText(), first.GetSeq())
				}
			}
			if after := stored(); after != before {
				t.Errorf("replies stream holds %d messages after the redelivery, %d before: want the answer once", after, before)
			}
		})
	}
}

// A command applied the first time is not a replay: only the redelivery
// of an event whose effect committed counts (/title is in no case of
// the crash table above, so nothing else counts it meanwhile).
func TestCommandAppliedOnceIsNotCountedAsReplayed(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.startRouter(testConfig(), nil, nil)
	before := testutil.ToFloat64(commandsReplayed.WithLabelValues("title"))
	if got := e.ask("alice", "/title Plan"); !strings.Contains(got, "Plan") {
		t.Fatalf("/title answered %q", got)
	}
	if n := testutil.ToFloat64(commandsReplayed.WithLabelValues("title")); n != before {
		t.Errorf("switchboard_router_commands_replayed_total{command=\"title\"} %v after a first delivery, %v before", n, before)
	}
}
