package worker_test

import (
	"context"
	"encoding/json"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/switchboard-chat/switchboard/pkg/approvalmode"
	"github.com/switchboard-chat/switchboard/pkg/fakellm"
	repliesv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/replies/v1"
	turnsv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/turns/v1"
	"github.com/switchboard-chat/switchboard/pkg/llm"
	"github.com/switchboard-chat/switchboard/services/worker"
	"github.com/switchboard-chat/switchboard/services/worker/internal/tools"
)

// The approval mode (/approvals, a KV entry every worker watches): with
// none set, approvals.mode (manual here) asks; off runs dangerous calls
// without asking; smart asks the judge (the fake, scripted by
// [[risk:...]] in the call's arguments) once per call: approve runs it
// without asking and grants nothing; escalate asks; deny asks, and the
// user's /approve always runs it this once only; a judge that fails or
// answers no verdict asks (fail safe). /yolo still wins over smart,
// without a judge call. A change counts from the next call, with no
// restart.
func TestApprovalModes(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.setGeneration("s1", 1)
	h.setGeneration("s2", 1)
	var runs atomic.Int32
	h.startWorker("w1", func(c *worker.Config, d *worker.Deps) {
		c.ApprovalsMode = "manual"
		c.Agent.ApprovalTimeout = time.Minute
		c.Agent.DangerousTools = []string{"rm"}
		d.Tools = []tools.Tool{{Name: "rm", Description: "remove files", Run: func(context.Context, tools.Call, json.RawMessage) (string, error) {
			runs.Add(1)
			return "removed", nil
		}}}
	})
	ctx := context.Background()
	kv, err := approvalmode.Open(ctx, h.bus.JetStream(), h.bus.Topology())
	if err != nil {
		t.Fatal(err)
	}
	setMode := func(m approvalmode.Mode) {
		t.Helper()
		if _, err := approvalmode.Set(ctx, kv, approvalmode.State{Mode: m, By: "telegram:admin"}); err != nil {
			t.Fatal(err)
		}
		// The worker's watch follows within moments; a turn asks for the
		// mode only at its dangerous call.
		time.Sleep(200 * time.Millisecond)
	}
	judgeCalls := func() int {
		n := 0
		for _, r := range h.fake.Requests() {
			if len(r.Tools) == 0 && strings.Contains(r.System, "APPROVE, DENY, or ESCALATE") {
				n++
			}
		}
		return n
	}
	asking := func(req *turnsv1.TurnRequested) *repliesv1.ToolProgress {
		for _, ev := range h.replies(req.TurnId) {
			if p := ev.GetToolProgress(); p.GetPhase() == repliesv1.ToolPhase_TOOL_PHASE_AWAITING_APPROVAL {
				return p
			}
		}
		return nil
	}
	standing := func() int {
		var n int
		if err := h.db.QueryRow(ctx, `SELECT count(*) FROM agent_tool_approvals`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	type answer struct {
		action turnsv1.ControlAction
		text   string
	}
	approve := &answer{turnsv1.ControlAction_CONTROL_ACTION_APPROVE, ""}
	deny := &answer{turnsv1.ControlAction_CONTROL_ACTION_DENY, ""}
	for _, tt := range []struct {
		name   string
		mode   approvalmode.Mode // "": as the step before
		key    string
		risk   string // the judge's scripted ruling
		answer *answer
		judged int // judge calls
		ran    bool
		reason string // in the approval request's reason
	}{
		{name: "manual (the default) asks", key: "s1", answer: deny},
		{name: "off runs without asking", mode: approvalmode.Off, key: "s1", ran: true},
		{name: "smart, the judge approves", mode: approvalmode.Smart, key: "s1", risk: "approve", judged: 1, ran: true},
		{name: "smart, the judge escalates", key: "s1", risk: "escalate", answer: approve, judged: 1, ran: true},
		{name: "smart, the judge denies: the user may run it once", key: "s1", risk: "deny",
			answer: &answer{turnsv1.ControlAction_CONTROL_ACTION_APPROVE, "always"}, judged: 1, ran: true, reason: "judge found it genuinely dangerous"},
		{name: "smart, the judge denies and the user denies", key: "s1", risk: "deny", answer: deny, judged: 1},
		{name: "smart, the judge fails: asks", key: "s1", risk: "fail", answer: deny, judged: 1},
		{name: "smart, the judge's answer is no verdict: asks", key: "s1", risk: "garbage", answer: deny, judged: 1},
		{name: "smart, no ruling scripted: the fake escalates", key: "s1", answer: deny, judged: 1},
		{name: "smart, a /yolo chat: no judge, no asking", key: "s2", risk: "deny", ran: true},
		{name: "manual again: asks without a judge", mode: approvalmode.Manual, key: "s1", risk: "approve", answer: deny},
	} {
		if tt.name == "smart, a /yolo chat: no judge, no asking" {
			if _, err := h.db.Exec(ctx, `INSERT INTO session_yolo (session_key, set_by) VALUES ('s2', 'telegram:alice')`); err != nil {
				t.Fatal(err)
			}
		}
		if tt.mode != "" {
			setMode(tt.mode)
		}
		arg := tt.name
		if tt.risk != "" {
			arg += " [[risk:" + tt.risk + "]]"
		}
		call, _ := json.Marshal(map[string]string{"path": arg})
		beforeRuns, beforeJudged := runs.Load(), judgeCalls()
		req := h.requestTurn(tt.key, "[[tool:rm "+string(call)+"]] clean up", turnOpts{})
		if tt.answer != nil {
			waitFor(t, 30*time.Second, tt.name+": approval request", func() bool { return asking(req) != nil })
			h.control(tt.key, tt.answer.action, tt.answer.text)
		}
		h.waitCompleted(req.TurnId)
		p := asking(req)
		if (p != nil) != (tt.answer != nil) {
			t.Errorf("%s: asked %v", tt.name, p != nil)
		}
		if tt.reason != "" && !strings.Contains(p.GetReason(), tt.reason) {
			t.Errorf("%s: reason %q, want it to say %q", tt.name, p.GetReason(), tt.reason)
		}
		if ran := runs.Load() > beforeRuns; ran != tt.ran {
			t.Errorf("%s: the tool ran %v", tt.name, ran)
		}
		if n := judgeCalls() - beforeJudged; n != tt.judged {
			t.Errorf("%s: %d judge calls, want %d", tt.name, n, tt.judged)
		}
		if n := standing(); n != 0 {
			t.Errorf("%s: %d standing approvals, want none (a judged call grants nothing)", tt.name, n)
		}
	}
	// The judge was asked with the call quoted as data, at temperature 0.
	for _, r := range h.fake.Requests() {
		if len(r.Tools) == 0 && strings.Contains(r.System, "APPROVE, DENY, or ESCALATE") {
			if r.Temperature == nil || *r.Temperature != 0 || !strings.Contains(r.Messages[len(r.Messages)-1].Content, "<command>\nrm {") {
				t.Errorf("judge request: temperature %v, prompt %q", r.Temperature, r.Messages[len(r.Messages)-1].Content)
			}
			break
		}
	}
}

// A /stop, or a newer message that interrupts, while the smart-approval
// judge is being asked ends its call at once, as it ends a model call:
// the turn stops without waiting for the judge (held here for 25 s,
// under its 30 s bound, and ruling APPROVE), the tool does not run and
// the user is not asked. The provider's own bound is raised past the
// judge's hold, so that only the stop can end the call early.
func TestApprovalJudgeStoppable(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	var runs atomic.Int32
	h.startWorker("w1", func(c *worker.Config, d *worker.Deps) {
		d.LLM.Provider = llm.WithRetry(llm.NewOpenAI(llm.OpenAIConfig{BaseURL: h.fakeURL + "/v1", Model: "fake-model"}),
			llm.RetryPolicy{MaxAttempts: 1, CallTimeout: time.Minute})
		c.ApprovalsMode = "smart"
		c.Agent.ApprovalJudgeModel = "judge"
		c.Agent.ApprovalTimeout = time.Minute
		c.Agent.DangerousTools = []string{"rm"}
		d.Tools = []tools.Tool{{Name: "rm", Run: func(context.Context, tools.Call, json.RawMessage) (string, error) {
			runs.Add(1)
			return "removed", nil
		}}}
	})
	for _, tt := range []struct {
		key    string
		action turnsv1.ControlAction
		want   turnsv1.TurnStatus
	}{
		{"judge-stop", turnsv1.ControlAction_CONTROL_ACTION_STOP, turnsv1.TurnStatus_TURN_STATUS_STOPPED},
		{"judge-interrupt", turnsv1.ControlAction_CONTROL_ACTION_INTERRUPT, turnsv1.TurnStatus_TURN_STATUS_INTERRUPTED},
	} {
		t.Run(tt.key, func(t *testing.T) {
			h.setGeneration(tt.key, 1)
			before := len(requestsFor(h, "judge"))
			h.fake.EnqueueFor("judge", fakellm.Reply{Text: "APPROVE", Failure: &fakellm.Failure{Latency: 25 * time.Second}})
			req := h.requestTurn(tt.key, `[[tool:rm {"path":"/tmp/x"}]] clean up`, turnOpts{})
			waitFor(t, 10*time.Second, "the judge's call", func() bool { return len(requestsFor(h, "judge")) > before })
			began := time.Now()
			h.control(tt.key, tt.action, "")
			c := h.waitCompleted(req.TurnId)
			if c.GetStatus() != tt.want || time.Since(began) > 10*time.Second {
				t.Fatalf("after %v: %v in %v, want %v at once", tt.action, c.GetStatus(), time.Since(began), tt.want)
			}
			for _, ev := range h.replies(req.TurnId) {
				if p := ev.GetToolProgress(); p != nil {
					t.Errorf("tool progress %v after %v: want no prompt and no run", p.GetPhase(), tt.action)
				}
			}
			if n := len(requestsFor(h, "judge")) - before; n != 1 {
				t.Errorf("%d judge calls, want 1", n)
			}
		})
	}
	if n := runs.Load(); n != 0 {
		t.Errorf("the tool ran %d times, want never", n)
	}
}

// approvals.mode off, with none set: no call asks; a mode that is none
// fails the worker's start.
func TestApprovalModeDefault(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.setGeneration("s1", 1)
	var runs atomic.Int32
	h.startWorker("w1", func(c *worker.Config, d *worker.Deps) {
		c.ApprovalsMode = "off"
		c.Agent.DangerousTools = []string{"rm"}
		d.Tools = []tools.Tool{{Name: "rm", Run: func(context.Context, tools.Call, json.RawMessage) (string, error) {
			runs.Add(1)
			return "removed", nil
		}}}
	})
	req := h.requestTurn("s1", "[[tool:rm {}]] clean up", turnOpts{})
	h.waitCompleted(req.TurnId)
	if runs.Load() != 1 {
		t.Errorf("the tool ran %d times, want once without asking", runs.Load())
	}
	cfg := worker.DefaultConfig()
	cfg.ApprovalsMode = "auto"
	if _, err := worker.New(cfg, worker.Deps{Bus: h.bus, DB: h.db, Redis: h.rdb, LLM: h.openAI()}); err == nil || !strings.Contains(err.Error(), "approvals.mode") {
		t.Errorf("New with approvals.mode auto: %v", err)
	}
}
