package fakellm

import (
	"encoding/json"
	"net/http"
	"strings"
)

// The fake as a goal judge (Switchboard's /goal, Hermes's judge_goal): a
// request that offers no tools and whose system prompt asks for a JSON
// "verdict" is a judge's. The fake cannot judge; the test says what it
// rules, in the goal's text, which the judge's prompt quotes:
//
//	[[verdict:continue times=2]] [[verdict:done]]
//
// answers the judge "continue" twice, then "done". Verdicts: done,
// blocked, continue; garbage answers text that is no JSON verdict (a
// judge model that cannot follow the format), fail answers 401 (the
// judge's provider refuses it). The first directive whose uses are not
// spent applies; a verdict's uses are counted by the directive and the
// line it is written in, which the judge's prompt repeats turn after
// turn (the goal), while the rest of the prompt (the agent's answer)
// changes. With no verdict directive the fake rules every goal done,
// so a goal ends after its first turn in `switchboard dev`.

// verdicts are the words [[verdict:...]] takes.
var verdicts = map[string]bool{"done": true, "blocked": true, "continue": true, "garbage": true, "fail": true}

// judgeRequest reports whether req is a goal judge's.
func judgeRequest(req *Request) bool {
	return len(req.Tools) == 0 && strings.Contains(req.System, `"verdict"`)
}

// verdict answers a judge's request whose last user message is text.
func (s *Server) verdict(dirs []Directive, text string) Reply {
	for _, d := range dirs {
		if d.Kind != KindVerdict {
			continue
		}
		if d.Times > 0 && !s.use(d, lineOf(text, "[["+d.Raw+"]]")) {
			continue
		}
		switch d.Name {
		case "garbage":
			return Reply{Text: "I think the agent is doing fine."}
		case "fail":
			return Reply{Failure: &Failure{Status: http.StatusUnauthorized, Message: "invalid api key for the judge"}}
		}
		return judgeReply(d.Name, "fake judge: "+d.Name)
	}
	return judgeReply("done", "fake judge: every goal is done")
}

// judgeReply is a verdict in the judge's one-line JSON.
func judgeReply(verdict, reason string) Reply {
	b, _ := json.Marshal(map[string]string{"verdict": verdict, "reason": reason})
	return Reply{Text: string(b)}
}

// lineOf is the line of text that holds marker (text when none does).
func lineOf(text, marker string) string {
	i := strings.Index(text, marker)
	if i < 0 {
		return text
	}
	start := strings.LastIndexByte(text[:i], '\n') + 1
	end := strings.IndexByte(text[i:], '\n')
	if end < 0 {
		return text[start:]
	}
	return text[start : i+end]
}

// The fake as a smart-approval judge (approvals.mode smart, Hermes's
// _smart_approve): a request that offers no tools and whose system
// prompt asks for "APPROVE, DENY, or ESCALATE" is the judge's. The test
// says what it rules in the tool call's arguments, which the judge's
// prompt quotes:
//
//	[[tool:rm {"path":"/tmp/x [[risk:approve]]"}]]
//
// Rulings: approve, deny, escalate (the one words); garbage answers a
// sentence that is no verdict; fail answers 401. With no risk directive
// the fake escalates (a judge that cannot tell asks the user).

// risks are the words [[risk:...]] takes.
var risks = map[string]bool{"approve": true, "deny": true, "escalate": true, "garbage": true, "fail": true}

// riskRequest reports whether req is a smart-approval judge's.
func riskRequest(req *Request) bool {
	return len(req.Tools) == 0 && strings.Contains(req.System, "APPROVE, DENY, or ESCALATE")
}

// risk answers a smart-approval judge's request whose last user message
// is text.
func (s *Server) risk(dirs []Directive, text string) Reply {
	for _, d := range dirs {
		if d.Kind != KindRisk {
			continue
		}
		if d.Times > 0 && !s.use(d, text) {
			continue
		}
		switch d.Name {
		case "garbage":
			return Reply{Text: "This looks fine to me, probably."}
		case "fail":
			return Reply{Failure: &Failure{Status: http.StatusUnauthorized, Message: "invalid api key for the judge"}}
		}
		return Reply{Text: strings.ToUpper(d.Name)}
	}
	return Reply{Text: "ESCALATE"}
}
