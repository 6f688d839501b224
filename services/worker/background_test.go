package worker_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/switchboard-chat/switchboard/pkg/fakellm"
	eventsv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/events/v1"
	turnsv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/turns/v1"
	"github.com/switchboard-chat/switchboard/pkg/sessionkey"
	"github.com/switchboard-chat/switchboard/services/worker"
	"github.com/switchboard-chat/switchboard/services/worker/internal/tools"
)

// A /background task's turn (TurnRequested.background_task_id) answers
// under Hermes's header with its prompt's first 60 characters, and a
// failed one says which task failed; the transcript keeps the answer as
// the model gave it. Other turns' answers go as they are.
func TestBackgroundTaskAnswersUnderHermesHeader(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.startWorker("w1", nil)
	long := "summarize the top stories of the day and tell me which matter most for us"
	tests := []struct {
		name, key, text, task string
		status                turnsv1.TurnStatus
		want                  string
	}{
		{"answer", "bg1", "hello there", "bg_072011_a1b2c3", turnsv1.TurnStatus_TURN_STATUS_COMPLETED,
			"✅ Background task complete\nPrompt: \"hello there\"\n\necho: hello there"},
		{"long prompt", "bg2", long, "bg_072012_000001", turnsv1.TurnStatus_TURN_STATUS_COMPLETED,
			"✅ Background task complete\nPrompt: \"" + long[:60] + "...\"\n\necho: " + long},
		{"failure", "bg3", "[[fail:401]] hi", "bg_072013_ffffff", turnsv1.TurnStatus_TURN_STATUS_FAILED,
			"Background task bg_072013_ffffff failed: "},
		{"not a task", "chat1", "hello there", "", turnsv1.TurnStatus_TURN_STATUS_COMPLETED, "echo: hello there"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h.setGeneration(tt.key, 1)
			req := h.requestTurn(tt.key, tt.text, turnOpts{answerOnly: true, background: tt.task})
			if c := h.waitCompleted(req.TurnId); c.GetStatus() != tt.status {
				t.Fatalf("status %v (%s), want %v", c.GetStatus(), c.GetError(), tt.status)
			}
			evs := h.replies(req.TurnId)
			final := checkReplies(t, evs)
			if len(evs) != 1 {
				t.Errorf("%d events, want the answer alone: %v", len(evs), evs)
			}
			if tt.status == turnsv1.TurnStatus_TURN_STATUS_FAILED {
				if e := final.GetError(); !strings.HasPrefix(e.GetMessage(), tt.want) || !strings.Contains(e.GetMessage(), "credentials") {
					t.Errorf("error %q %q, want %q and the reason", e.GetCode(), e.GetMessage(), tt.want)
				}
				return
			}
			if got := final.GetFinalText().GetText(); got != tt.want {
				t.Errorf("answer %q, want %q", got, tt.want)
			}
			var stored string
			if err := h.db.QueryRow(t.Context(), `SELECT content FROM transcript_messages WHERE session_key = $1 AND role = 'assistant' ORDER BY id DESC LIMIT 1`,
				tt.key).Scan(&stored); err != nil || strings.Contains(stored, "Background task") {
				t.Errorf("transcript keeps %q (%v), want the model's answer alone", stored, err)
			}
		})
	}
}

// A /background task's call of a dangerous tool is denied at once: no
// prompt can reach the chat, and no answer the task, so it must not wait
// for agent.approval_timeout.
func TestBackgroundTaskDeniesApprovalsAtOnce(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.setGeneration("bg1", 1)
	var runs atomic.Int32
	h.startWorker("w1", func(c *worker.Config, d *worker.Deps) {
		c.Agent.ApprovalTimeout = time.Hour
		c.Agent.DangerousTools = []string{"rm"}
		d.Tools = []tools.Tool{{Name: "rm", Description: "Remove a file.",
			Run: func(context.Context, tools.Call, json.RawMessage) (string, error) {
				runs.Add(1)
				return "removed", nil
			}}}
	})
	req := h.requestTurn("bg1", `[[tool:rm {"path": "/tmp/x"}]] clean up`, turnOpts{answerOnly: true, background: "bg_072011_a1b2c3"})
	done := h.waitCompleted(req.TurnId)
	if done.GetStatus() != turnsv1.TurnStatus_TURN_STATUS_COMPLETED || runs.Load() != 0 {
		t.Fatalf("status %v (%s), the tool ran %d times", done.GetStatus(), done.GetError(), runs.Load())
	}
	evs := h.replies(req.TurnId)
	final := checkReplies(t, evs)
	if len(evs) != 1 || !strings.HasPrefix(final.GetFinalText().GetText(), "✅ Background task complete\n") {
		t.Errorf("replies %v, want the task's answer alone", evs)
	}
}

// A /background task follows the /yolo of the chat it was asked in: the
// worker reads the chat's session_yolo row (under the chat's key,
// sessionkey.BackgroundChat, not the task's own), so a task of a chat in
// YOLO mode runs its dangerous call without asking, while a task of a
// chat that is not, or any task while router.yolo_command is off
// (yolo_disabled), is denied at once as before.
func TestBackgroundTaskFollowsTheChatsYolo(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	var runs atomic.Int32
	h.startWorker("w1", func(c *worker.Config, d *worker.Deps) {
		c.Agent.ApprovalTimeout = time.Hour
		c.Agent.DangerousTools = []string{"rm"}
		d.Tools = []tools.Tool{{Name: "rm", Description: "Remove a file.",
			Run: func(context.Context, tools.Call, json.RawMessage) (string, error) {
				runs.Add(1)
				return "removed", nil
			}}}
	})
	yoloChat, plainChat := "agent:main:telegram:dm:99", "agent:main:telegram:dm:100"
	if _, err := h.db.Exec(t.Context(), `INSERT INTO session_yolo (session_key, set_by) VALUES ($1, 'telegram:alice')`, yoloChat); err != nil {
		t.Fatal(err)
	}
	for i, tt := range []struct {
		name, chat string
		noYolo     bool
		ran        bool
	}{
		{"chat in yolo mode", yoloChat, false, true},
		{"chat not in yolo mode", plainChat, false, false},
		{"chat in yolo mode, router.yolo_command off", yoloChat, true, false},
	} {
		task := fmt.Sprintf("bg_07201%d_a1b2c3", i)
		key := sessionkey.Background(tt.chat, "", task)
		h.setGeneration(key, 1)
		before := runs.Load()
		req := h.requestTurn(key, `[[tool:rm {"path": "/tmp/x"}]] clean up`, turnOpts{answerOnly: true, background: task, noYolo: tt.noYolo})
		done := h.waitCompleted(req.TurnId)
		if done.GetStatus() != turnsv1.TurnStatus_TURN_STATUS_COMPLETED {
			t.Fatalf("%s: status %v (%s)", tt.name, done.GetStatus(), done.GetError())
		}
		if ran := runs.Load() > before; ran != tt.ran {
			t.Errorf("%s: the tool ran %v, want %v", tt.name, ran, tt.ran)
		}
		evs := h.replies(req.TurnId)
		final := checkReplies(t, evs)
		if len(evs) != 1 || !strings.HasPrefix(final.GetFinalText().GetText(), "✅ Background task complete\n") {
			t.Errorf("%s: replies %v, want the task's answer alone (no approval prompt, no tool progress)", tt.name, evs)
		}
	}
}

// A model that says nothing is answered with Hermes's "(No response
// generated)", as delivery words a blank final: alone for a chat's turn,
// under the header for a /background task (its empty answer, as Hermes's
// background notice has it).
func TestEmptyAnswerSaysNoResponseGenerated(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.fake.SetScript(func(r *fakellm.Request) (fakellm.Reply, bool) {
		return fakellm.Reply{}, strings.Contains(r.LastUserText(), "say nothing")
	})
	h.startWorker("w1", nil)
	for _, tt := range []struct{ key, task, want string }{
		{"empty1", "", "(No response generated)"},
		{"empty2", "bg_072011_a1b2c3", "✅ Background task complete\nPrompt: \"say nothing\"\n\n(No response generated)"},
	} {
		h.setGeneration(tt.key, 1)
		req := h.requestTurn(tt.key, "say nothing", turnOpts{background: tt.task})
		if c := h.waitCompleted(req.TurnId); c.GetStatus() != turnsv1.TurnStatus_TURN_STATUS_COMPLETED {
			t.Fatalf("status %v (%s)", c.GetStatus(), c.GetError())
		}
		if got := checkReplies(t, h.replies(req.TurnId)).GetFinalText().GetText(); got != tt.want {
			t.Errorf("answer %q, want %q", got, tt.want)
		}
	}
}

// A cron run's call of a dangerous tool is denied at once, as Hermes's
// approvals.cron_mode (deny by default): a run is answer_only, so the
// approval prompt never reaches a chat, and an /approve in any chat goes
// to that chat's session, not the run's; waiting agent.approval_timeout
// for an answer that cannot come held the run (and its job) that long
// for every such call.
func TestCronRunDeniesApprovalsAtOnce(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	runID := "c0ffeec0ffee_20261205_090000"
	key := "agent:main:cron:dm:" + runID
	h.setGeneration(key, 1)
	var runs atomic.Int32
	h.startWorker("w1", func(c *worker.Config, d *worker.Deps) {
		c.Agent.ApprovalTimeout = time.Hour
		c.Agent.DangerousTools = []string{"rm"}
		d.Tools = []tools.Tool{{Name: "rm", Description: "Remove a file.",
			Run: func(context.Context, tools.Call, json.RawMessage) (string, error) {
				runs.Add(1)
				return "removed", nil
			}}}
	})
	origin := &eventsv1.SessionSource{Platform: "cron", Account: "default", ChatId: runID, ChatName: "Nightly cleanup",
		ChatType: "dm", UserId: "c0ffeec0ffee", UserName: "Nightly cleanup"}
	req := h.requestTurn(key, `[[tool:rm {"path": "/tmp/x"}]] clean up`, turnOpts{answerOnly: true, origin: origin})
	start := time.Now()
	done := h.waitCompleted(req.TurnId)
	if done.GetStatus() != turnsv1.TurnStatus_TURN_STATUS_COMPLETED || runs.Load() != 0 {
		t.Fatalf("status %v (%s), the tool ran %d times", done.GetStatus(), done.GetError(), runs.Load())
	}
	if d := time.Since(start); d > 30*time.Second {
		t.Errorf("the run took %v: it waited for an approval", d)
	}
	evs := h.replies(req.TurnId)
	final := checkReplies(t, evs)
	if len(evs) != 1 || !strings.HasPrefix(final.GetFinalText().GetText(), "Cronjob Response: Nightly cleanup\n") {
		t.Errorf("replies %v, want the run's answer alone", evs)
	}
}

// A /background task's answer goes to the chat, not into a Responses
// answer, so it lists no tool calls, even when its turn carries
// lists_tool_calls from the request that started it (a router from
// before it cleared the flag for /background queued the task): it
// publishes its final alone, as any answer-only turn that lists none.
func TestBackgroundTaskQueuedWithListsToolCallsPublishesNoSteps(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.startWorker("w1", nil)
	api := &eventsv1.SessionSource{Platform: "api", Account: "default", ChatId: "req_1", ChatType: "dm", UserId: "key"}
	for _, tc := range []struct {
		name, key, task string
		want            []string
	}{
		{"a background task", "bg1", "bg_072011_a1b2c3", []string{"final"}},
		{"a Responses request", "api1", "", []string{"clock started", "clock finished", "final"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h.setGeneration(tc.key, 1)
			req := h.requestTurn(tc.key, "what time is it [[tool:clock {\"tz\":\"UTC\"}]]",
				turnOpts{answerOnly: true, listsCalls: true, origin: api, background: tc.task})
			if c := h.waitCompleted(req.TurnId); c.GetStatus() != turnsv1.TurnStatus_TURN_STATUS_COMPLETED {
				t.Fatalf("status %v (%s)", c.GetStatus(), c.GetError())
			}
			evs := h.replies(req.TurnId)
			checkReplies(t, evs)
			var got []string
			for _, ev := range evs {
				if tp := ev.GetToolProgress(); tp != nil {
					got = append(got, tp.GetToolName()+" "+strings.ToLower(strings.TrimPrefix(tp.GetPhase().String(), "TOOL_PHASE_")))
				} else {
					got = append(got, "final")
				}
			}
			if strings.Join(got, ", ") != strings.Join(tc.want, ", ") {
				t.Errorf("published %v, want %v", got, tc.want)
			}
		})
	}
}
