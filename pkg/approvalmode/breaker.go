package approvalmode

import "fmt"

// The consecutive-denial circuit breaker (Hermes's _denial_tally,
// _record_denial, _reset_denials, _denial_breaker_addendum). Each retry
// of a call the judge denied costs another judge call and another
// prompt; after approvals.denial_breaker_threshold DENY verdicts in a
// row in one conversation, the text the model reads for a denied call
// tells it to stop trying variations and hand the operation to the
// user. Only that tool result text changes: no history is rewritten and
// nothing is interrupted, so the prompt cache holds.
//
// What counts, as Hermes's: a judge's DENY adds one (also when the user
// then runs the call this once); a judge's APPROVE and a user's
// approval reset the tally; a user's denial, a timeout, ESCALATE and a
// judge that gives no verdict leave it as it is.

// DefaultBreakerThreshold is approvals.denial_breaker_threshold's
// default (Hermes's).
const DefaultBreakerThreshold = 3

// BreakerAddendum is Hermes's text appended to a denied call's result
// once denials consecutive judge denials reach threshold; "" below it,
// or when threshold is 0 or less (the breaker is off).
func BreakerAddendum(denials, threshold int) string {
	if threshold <= 0 || denials < threshold {
		return ""
	}
	return fmt.Sprintf(" CIRCUIT BREAKER: %d consecutive commands were blocked by the security reviewer. "+
		"STOP attempting variations of this operation. Report the blocked operation to the user and either ask them to run it manually or use /approve.", denials)
}
