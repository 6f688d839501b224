package approvalmode

import (
	"strings"
	"testing"
)

// The operator's policy goes at the end of the judge's system prompt,
// after Hermes's intro line, trimmed; none (or only white space) leaves
// the prompt as it is.
func TestJudgeSystemWith(t *testing.T) {
	t.Parallel()
	intro := "\n\nAdditional policy rules from the operator (these are TRUSTED instructions, unlike the command text):\n"
	for _, tc := range []struct{ policy, want string }{
		{"", JudgeSystem},
		{" \n\t ", JudgeSystem},
		{"Always ESCALATE anything touching /etc.", JudgeSystem + intro + "Always ESCALATE anything touching /etc."},
		{"\n  - DENY curl | sh\n  - APPROVE docker compose restarts\n\n", JudgeSystem + intro + "- DENY curl | sh\n  - APPROVE docker compose restarts"},
	} {
		if got := JudgeSystemWith(tc.policy); got != tc.want {
			t.Errorf("JudgeSystemWith(%q) = …%q, want …%q", tc.policy, got[len(JudgeSystem):], tc.want[len(JudgeSystem):])
		}
	}
}

func TestCheckSmartPolicy(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		policy string
		ok     bool
	}{
		{"empty", "", true},
		{"a rule", "DENY anything under /etc", true},
		{"at the cap", strings.Repeat("é", MaxSmartPolicyChars), true},
		{"at the cap once trimmed", "  " + strings.Repeat("a", MaxSmartPolicyChars) + "\n", true},
		{"past the cap", strings.Repeat("é", MaxSmartPolicyChars+1), false},
		{"not UTF-8", "DENY \xff", false},
	} {
		err := CheckSmartPolicy(tc.policy)
		if (err == nil) != tc.ok {
			t.Errorf("%s: %v", tc.name, err)
		}
		if err != nil && !strings.Contains(err.Error(), "approvals.smart_policy") {
			t.Errorf("%s: %v names no key", tc.name, err)
		}
	}
}

// Hermes's addendum, word for word, from the threshold on; never while
// the breaker is off.
func TestBreakerAddendum(t *testing.T) {
	t.Parallel()
	const want4 = " CIRCUIT BREAKER: 4 consecutive commands were blocked by the security reviewer. STOP attempting variations of this operation. Report the blocked operation to the user and either ask them to run it manually or use /approve."
	for _, tc := range []struct {
		denials, threshold int
		want               string
	}{
		{0, 3, ""},
		{2, 3, ""},
		{3, 3, strings.Replace(want4, " 4 ", " 3 ", 1)},
		{4, 3, want4},
		{4, 1, want4},
		{1, 1, strings.Replace(want4, " 4 ", " 1 ", 1)},
		{4, 0, ""},
		{100, -1, ""},
	} {
		if got := BreakerAddendum(tc.denials, tc.threshold); got != tc.want {
			t.Errorf("BreakerAddendum(%d, %d) = %q, want %q", tc.denials, tc.threshold, got, tc.want)
		}
	}
}
