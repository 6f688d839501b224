package command

import "strings"

// ApprovalModes are the modes /approvals sets (Hermes's
// VALID_APPROVAL_MODES), as pkg/approvalmode names them.
var ApprovalModes = []string{"manual", "smart", "off"}

// ApprovalsUsage is Hermes's answer to an argument that names no mode.
const ApprovalsUsage = "Usage: /approvals [manual|smart|off]"

// ApprovalsArgs is /approvals's argument as Approvals reads it.
type ApprovalsArgs struct {
	// Set: an argument was given (a change is asked for, which only
	// admins may make, even when it names no mode); false shows the mode.
	Set bool
	// Mode is the mode asked for, one of ApprovalModes; "" when the
	// argument names none (the answer is ApprovalsUsage).
	Mode string
}

// Approvals reads /approvals's argument as Hermes does: none shows the
// mode; otherwise the argument, trimmed and lowercased, must be one of
// ApprovalModes.
func Approvals(args string) ApprovalsArgs {
	req := strings.ToLower(strings.TrimSpace(args))
	if req == "" {
		return ApprovalsArgs{}
	}
	for _, m := range ApprovalModes {
		if req == m {
			return ApprovalsArgs{Set: true, Mode: m}
		}
	}
	return ApprovalsArgs{Set: true}
}
