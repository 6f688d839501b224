package fakellm

import (
	"testing"
)

// As a goal judge the fake rules what the goal's [[verdict:...]]
// directives say, counting uses by the goal's line while the agent's
// answer in the prompt changes; without one it rules done; an agent's
// request (tools offered, no verdict asked for) echoes the text without
// the directives.
func TestJudgeVerdicts(t *testing.T) {
	s := New(Config{})
	judge := func(response string) Reply {
		t.Helper()
		req := &Request{System: `Reply with {"verdict": "done"} ...`, Messages: []Message{{Role: "user",
			Content: "Goal:\ncount [[verdict:continue times=2]] [[verdict:garbage times=1]] [[verdict:fail times=1]] [[verdict:blocked]]\n\nAgent's most recent response:\n" + response}}}
		return s.decide(req).reply
	}
	for i, want := range []string{`{"reason":"fake judge: continue","verdict":"continue"}`, `{"reason":"fake judge: continue","verdict":"continue"}`,
		"I think the agent is doing fine.", "401", `{"reason":"fake judge: blocked","verdict":"blocked"}`, `{"reason":"fake judge: blocked","verdict":"blocked"}`} {
		r := judge("answer " + string(rune('a'+i)))
		got := r.Text
		if r.Failure != nil {
			got = "401"
			if r.Failure.Status != 401 {
				got = "other failure"
			}
		}
		if got != want {
			t.Errorf("judge call %d: %q, want %q", i+1, got, want)
		}
	}
	plain := s.decide(&Request{System: `{"verdict": …}`, Messages: []Message{{Role: "user", Content: "Goal:\nsomething\n\nAgent's most recent response:\nx"}}}).reply
	if plain.Text != `{"reason":"fake judge: every goal is done","verdict":"done"}` {
		t.Errorf("judge without directives: %q", plain.Text)
	}
	agent := s.decide(&Request{System: "You are helpful.", Tools: []Tool{{Name: "clock"}},
		Messages: []Message{{Role: "user", Content: "count [[verdict:continue times=2]] [[verdict:done]]"}}}).reply
	if agent.Text != "echo: count" {
		t.Errorf("agent's answer %q", agent.Text)
	}
}

// As a smart-approval judge the fake rules what the quoted call's
// [[risk:...]] says, escalates without one, and an agent's request
// ignores the directive.
func TestRiskRulings(t *testing.T) {
	s := New(Config{})
	judge := func(call string) Reply {
		t.Helper()
		req := &Request{System: "Respond with exactly one word: APPROVE, DENY, or ESCALATE", Messages: []Message{{Role: "user",
			Content: "<review_data>\n<command>\n" + call + "\n</command>\n</review_data>"}}}
		return s.decide(req).reply
	}
	for _, tc := range []struct{ call, want string }{
		{`rm {"p":"[[risk:approve]]"}`, "APPROVE"},
		{`rm {"p":"[[risk:deny]]"}`, "DENY"},
		{`rm {"p":"[[risk:escalate]]"}`, "ESCALATE"},
		{`rm {"p":"[[risk:garbage]]"}`, "This looks fine to me, probably."},
		{`rm {"p":"x"}`, "ESCALATE"},
	} {
		if got := judge(tc.call).Text; got != tc.want {
			t.Errorf("judge(%s) = %q, want %q", tc.call, got, tc.want)
		}
	}
	if f := judge(`rm {"p":"[[risk:fail]]"}`).Failure; f == nil || f.Status != 401 {
		t.Errorf("fail ruling: %+v", f)
	}
	agent := s.decide(&Request{System: "You are helpful.", Tools: []Tool{{Name: "rm"}},
		Messages: []Message{{Role: "user", Content: "clean [[risk:approve]]"}}}).reply
	if agent.Text != "echo: clean" {
		t.Errorf("agent's answer %q", agent.Text)
	}
}
