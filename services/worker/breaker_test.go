package worker_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/switchboard-chat/switchboard/pkg/approvalmode"
	repliesv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/replies/v1"
	turnsv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/turns/v1"
	"github.com/switchboard-chat/switchboard/pkg/telemetry/telemetrytest"
	"github.com/switchboard-chat/switchboard/services/worker"
	"github.com/switchboard-chat/switchboard/services/worker/internal/tools"
)

// deniedText is what the model reads for a call denied without a reason.
const deniedText = "The user denied this tool call. Do not retry it; continue without it."

// rmCalls is a message whose model calls rm once per ruling, in order,
// each call scripting the judge's ruling on it ([[risk:...]]).
func rmCalls(prefix string, risks []string) string {
	var b strings.Builder
	for i, risk := range risks {
		call, _ := json.Marshal(map[string]string{"path": fmt.Sprintf("/%s/%d [[risk:%s]]", prefix, i, risk)})
		b.WriteString("[[tool:rm " + string(call) + "]] ")
	}
	return b.String() + "clean up"
}

// awaiting counts the approval prompts turn turnID showed.
func awaiting(h *harness, turnID string) int {
	n := 0
	for _, ev := range h.replies(turnID) {
		if ev.GetToolProgress().GetPhase() == repliesv1.ToolPhase_TOOL_PHASE_AWAITING_APPROVAL {
			n++
		}
	}
	return n
}

// toolResults are the tool results of the last turn that the model's
// last request carried (the turn's answer after its calls): those after
// the last user message.
func toolResults(h *harness) []string {
	var out []string
	reqs := requestsFor(h, "fake-model")
	for _, m := range reqs[len(reqs)-1].Messages {
		switch m.Role {
		case "user":
			out = nil
		case "tool":
			out = append(out, m.Content)
		}
	}
	return out
}

// tally is the conversation's count of judge denials in a row as stored;
// -1 for no row.
func tally(t *testing.T, h *harness, sessionID string) int {
	t.Helper()
	n := -1
	_ = h.db.QueryRow(context.Background(), `SELECT denials FROM agent_denial_breaker WHERE session_id = $1`, sessionID).Scan(&n)
	return n
}

// approvals.smart_policy reaches the judge at the end of its system
// prompt, after Hermes's line saying it is the operator's trusted rules,
// and never its user message (where the call is, as untrusted data); no
// policy, or only white space, leaves the system prompt as it was.
func TestApprovalSmartPolicy(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	intro := "\n\nAdditional policy rules from the operator (these are TRUSTED instructions, unlike the command text):\n"
	for i, tt := range []struct {
		name, policy, want string
	}{
		{"none", "", approvalmode.JudgeSystem},
		{"white space", " \n ", approvalmode.JudgeSystem},
		{"rules, trimmed", "\n  DENY anything under /srv.\nAPPROVE rm of /tmp files.  \n", approvalmode.JudgeSystem + intro + "DENY anything under /srv.\nAPPROVE rm of /tmp files."},
	} {
		t.Run(tt.name, func(t *testing.T) {
			key := fmt.Sprintf("policy%d", i)
			h.setGeneration(key, 1)
			w := h.startWorker("w-"+key, func(c *worker.Config, d *worker.Deps) {
				c.ApprovalsMode = "smart"
				c.ApprovalsSmartPolicy = tt.policy
				c.Agent.ApprovalJudgeModel = "judge"
				c.Agent.DangerousTools = []string{"rm"}
				d.Tools = []tools.Tool{{Name: "rm", Run: func(context.Context, tools.Call, json.RawMessage) (string, error) { return "removed", nil }}}
			})
			defer w.stop(t)
			before := len(requestsFor(h, "judge"))
			req := h.requestTurn(key, rmCalls(key, []string{"approve"}), turnOpts{})
			h.waitCompleted(req.TurnId)
			judged := requestsFor(h, "judge")[before:]
			if len(judged) != 1 {
				t.Fatalf("%d judge calls, want 1", len(judged))
			}
			if got := judged[0].System; got != tt.want {
				t.Errorf("judge's system prompt ends …%q, want …%q", got[len(approvalmode.JudgeSystem)-20:], tt.want[len(approvalmode.JudgeSystem)-20:])
			}
			for _, m := range judged[0].Messages {
				if strings.Contains(m.Content, "TRUSTED") || strings.Contains(m.Content, "/srv") {
					t.Errorf("the policy reached the judge's %s message: %q", m.Role, m.Content)
				}
			}
		})
	}
	// A policy past its cap fails the start instead of being cut.
	cfg := worker.DefaultConfig()
	cfg.ApprovalsSmartPolicy = strings.Repeat("x", approvalmode.MaxSmartPolicyChars+1)
	if _, err := worker.New(cfg, worker.Deps{Bus: h.bus, DB: h.db, Redis: h.rdb, LLM: h.openAI()}); err == nil || !strings.Contains(err.Error(), "approvals.smart_policy") {
		t.Errorf("New with a policy past its cap: %v", err)
	}
}

// The circuit breaker (approvals.denial_breaker_threshold, Hermes's
// _denial_tally): the judge's DENY verdicts in a row in a conversation
// are counted, and from the threshold on the result of every denied
// call (the user's /deny here) ends with Hermes's CIRCUIT BREAKER text,
// the count in it. The judge's APPROVE and the user's /approve reset the
// count; ESCALATE, a failed judge and the user's /deny count nothing.
// Threshold 0 is off: no text, no count stored. As Hermes's, the DENY
// is counted before the user is asked, so the third DENY's own denial
// already carries the text at threshold 3.
//
// Not parallel: it reads the process-wide trips counter.
func TestApprovalDenialBreaker(t *testing.T) {
	h := newHarness(t)
	type step struct {
		risk    string // the judge's ruling
		answer  string // the user's: deny, approve; "" when nobody is asked
		breaker int    // the count in the result's CIRCUIT BREAKER text; 0: none
	}
	deny := func(breaker int) step { return step{"deny", "deny", breaker} }
	for i, tt := range []struct {
		name      string
		threshold int
		steps     []step
		tally     int // the count stored after the turn; -1 none
	}{
		{"threshold 3: the third DENY in a row trips it", 3, []step{deny(0), deny(0), deny(3), deny(4)}, 4},
		{"the judge's APPROVE resets the count", 3, []step{deny(0), deny(0), {"approve", "", 0}, deny(0), deny(0), deny(3)}, 3},
		{"the user's approval resets the count", 3, []step{deny(0), deny(0), {"deny", "approve", 0}, deny(0)}, 1},
		{"ESCALATE, a failed judge and /deny count nothing", 3, []step{deny(0), {"escalate", "deny", 0}, {"fail", "deny", 0}, deny(0), deny(3)}, 3},
		{"once tripped, every denial says so", 1, []step{deny(1), {"escalate", "deny", 1}, {"approve", "", 0}, {"escalate", "deny", 0}, deny(1)}, 1},
		{"threshold 0 is off", 0, []step{deny(0), deny(0), deny(0), deny(0)}, -1},
		{"a negative threshold is off", -1, []step{deny(0), deny(0)}, -1},
	} {
		t.Run(tt.name, func(t *testing.T) {
			key := fmt.Sprintf("breaker%d", i)
			h.setGeneration(key, 1)
			var runs atomic.Int32
			w := h.startWorker("w-"+key, func(c *worker.Config, d *worker.Deps) {
				c.ApprovalsMode = "smart"
				c.ApprovalsDenialBreakerThreshold = tt.threshold
				c.Agent.ApprovalJudgeModel = "judge"
				c.Agent.ApprovalTimeout = time.Minute
				c.Agent.DangerousTools = []string{"rm"}
				d.Tools = []tools.Tool{{Name: "rm", Run: func(context.Context, tools.Call, json.RawMessage) (string, error) {
					runs.Add(1)
					return "removed", nil
				}}}
			})
			defer w.stop(t)
			trips := telemetrytest.Value(t, "switchboard_worker_approval_breaker_trips_total", nil)
			var risks []string
			var want []string
			wantTrips := 0
			for _, s := range tt.steps {
				risks = append(risks, s.risk)
				switch {
				case s.answer == "" || s.answer == "approve":
					want = append(want, "removed")
				case s.breaker > 0:
					want = append(want, deniedText+approvalmode.BreakerAddendum(s.breaker, s.breaker))
					wantTrips++
				default:
					want = append(want, deniedText)
				}
			}
			req := h.requestTurn(key, rmCalls(key, risks), turnOpts{})
			asked := 0
			for n, s := range tt.steps {
				if s.answer == "" {
					continue
				}
				asked++
				waitFor(t, 30*time.Second, fmt.Sprintf("prompt for call %d", n), func() bool { return awaiting(h, req.TurnId) == asked })
				action := turnsv1.ControlAction_CONTROL_ACTION_DENY
				if s.answer == "approve" {
					action = turnsv1.ControlAction_CONTROL_ACTION_APPROVE
				}
				h.control(key, action, "")
			}
			if c := h.waitCompleted(req.TurnId); c.GetStatus() != turnsv1.TurnStatus_TURN_STATUS_COMPLETED {
				t.Fatalf("status %v", c.GetStatus())
			}
			got := toolResults(h)
			if len(got) != len(want) {
				t.Fatalf("%d tool results, want %d: %q", len(got), len(want), got)
			}
			for n := range want {
				if got[n] != want[n] {
					t.Errorf("call %d (%s): result\n%q\nwant\n%q", n, tt.steps[n].risk, got[n], want[n])
				}
			}
			if n := tally(t, h, "sid-"+key); n != tt.tally {
				t.Errorf("stored count %d, want %d", n, tt.tally)
			}
			if d := telemetrytest.Value(t, "switchboard_worker_approval_breaker_trips_total", nil) - trips; d != float64(wantTrips) {
				t.Errorf("breaker trips counted %v, want %d", d, wantTrips)
			}
		})
	}
}

// The count is the conversation's, wherever its turns run: a worker that
// resumes a turn (the first died while the user was asked about a call
// the judge denied) asks the judge about that call again without
// counting it twice, and the conversation's next turn, on that worker,
// counts on from the first worker's denials.
func TestApprovalDenialBreakerResumed(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.setGeneration("s1", 1)
	rm := tools.Tool{Name: "rm", Run: func(context.Context, tools.Call, json.RawMessage) (string, error) { return "removed", nil }}
	smart := func(approvalTimeout time.Duration) func(*worker.Config, *worker.Deps) {
		return func(c *worker.Config, d *worker.Deps) {
			c.DrainTimeout = 50 * time.Millisecond // "kill": handlers are cut off at once
			c.ApprovalsMode = "smart"
			c.Agent.ApprovalJudgeModel = "judge"
			c.Agent.ApprovalTimeout = approvalTimeout
			c.Agent.DangerousTools = []string{"rm"}
			d.Tools = []tools.Tool{rm}
		}
	}
	w1 := h.startWorker("w1", smart(time.Minute))
	req := h.requestTurn("s1", rmCalls("a", []string{"deny", "deny"}), turnOpts{})
	waitFor(t, 30*time.Second, "the first prompt", func() bool { return awaiting(h, req.TurnId) == 1 })
	h.control("s1", turnsv1.ControlAction_CONTROL_ACTION_DENY, "")
	waitFor(t, 30*time.Second, "the second prompt", func() bool { return awaiting(h, req.TurnId) == 2 })
	if n := tally(t, h, "sid-s1"); n != 2 {
		t.Fatalf("count %d after two DENY verdicts, want 2", n)
	}
	w1.stop(t)
	if h.completed(req.TurnId) != nil {
		t.Fatal("the killed worker completed the turn")
	}
	// The lock expired meanwhile (a real crash stops renewals).
	if err := h.rdb.Del(context.Background(), h.locker.Key("s1")).Err(); err != nil {
		t.Fatal(err)
	}
	// The second worker's prompts time out: a denial as the user's is.
	h.startWorker("w2", smart(2*time.Second))
	if c := h.waitCompleted(req.TurnId); c.GetStatus() != turnsv1.TurnStatus_TURN_STATUS_COMPLETED || c.GetWorkerId() != "w2" {
		t.Fatalf("completed %v by %s", c.GetStatus(), c.GetWorkerId())
	}
	if n := len(requestsFor(h, "judge")); n != 3 {
		t.Errorf("%d judge calls, want 3 (the second call judged again on resuming)", n)
	}
	if got := toolResults(h); len(got) != 2 || got[0] != deniedText || got[1] != deniedText {
		t.Errorf("tool results %q, want two denials without the breaker", got)
	}
	if n := tally(t, h, "sid-s1"); n != 2 {
		t.Fatalf("count %d after the resumed turn, want still 2", n)
	}
	// The conversation's next turn: its DENY is the third in a row.
	next := h.requestTurn("s1", rmCalls("b", []string{"deny"}), turnOpts{})
	h.waitCompleted(next.TurnId)
	want := deniedText + approvalmode.BreakerAddendum(3, 3)
	if got := toolResults(h); len(got) != 1 || got[0] != want {
		t.Errorf("tool results %q, want %q", got, want)
	}
}
