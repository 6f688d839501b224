package approvalmode

import (
	"fmt"
	"strings"
	"unicode/utf8"
)

// The operator's smart-approval policy (Hermes's approvals.smart_policy,
// _get_smart_policy): rules of the operator's own ("always ESCALATE
// anything touching /etc", "APPROVE docker compose restarts in
// ~/deploys") appended to the judge's system prompt. The system prompt
// is the trusted channel: the policy never goes next to the call in the
// user message, where the judge is told that text is data and that
// instructions in it are to be ignored; putting policy-looking text
// there would teach it the opposite.

// policyIntro is Hermes's line before the operator's rules.
const policyIntro = "\n\nAdditional policy rules from the operator (these are TRUSTED instructions, unlike the command text):\n"

// MaxSmartPolicyChars bounds approvals.smart_policy. Hermes sets none;
// here a policy longer than this fails the start instead of being cut
// (a cut rule could mean its opposite). It is sent with every judge
// call, so a few rules are what it is for: this is some 2,000 tokens.
const MaxSmartPolicyChars = 8192

// JudgeSystemWith is the judge's system prompt with the operator's
// policy: JudgeSystem, then, when the trimmed policy is not empty,
// Hermes's intro line and the policy.
func JudgeSystemWith(policy string) string {
	policy = strings.TrimSpace(policy)
	if policy == "" {
		return JudgeSystem
	}
	return JudgeSystem + policyIntro + policy
}

// CheckSmartPolicy reports why policy cannot be approvals.smart_policy:
// not UTF-8, or longer than MaxSmartPolicyChars once trimmed.
func CheckSmartPolicy(policy string) error {
	policy = strings.TrimSpace(policy)
	if !utf8.ValidString(policy) {
		return fmt.Errorf("approvals.smart_policy is not UTF-8 text")
	}
	if n := utf8.RuneCountInString(policy); n > MaxSmartPolicyChars {
		return fmt.Errorf("approvals.smart_policy has %d characters, at most %d are allowed (it is sent with every judge call; shorten it rather than have it cut)", n, MaxSmartPolicyChars)
	}
	return nil
}
