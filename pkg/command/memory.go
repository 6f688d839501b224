package command

import "strings"

// The subcommands of /memory, as Memory reads them.
const (
	MemoryShow     = ""         // bare /memory: the gate and the pending writes
	MemoryPending  = "pending"  // list the pending writes
	MemoryApprove  = "approve"  // apply one, or all ("apply")
	MemoryReject   = "reject"   // drop one, or all ("deny", "drop")
	MemoryApproval = "approval" // show or set the gate ("mode")
	MemoryUnknown  = "unknown"  // any other word
)

// MemoryWordMax bounds the id or value Memory keeps from its argument,
// in characters: answers quote them.
const MemoryWordMax = 64

// MemoryArgs is /memory's argument as Memory reads it.
type MemoryArgs struct {
	// Sub is one of the Memory* subcommands.
	Sub string
	// Target is approve's or reject's id as typed, or "all" (any case);
	// "" when missing.
	Target string
	// Gate is approval's value: "on" or "off" for Hermes's words that
	// mean them, "" for none (show the gate), or, lowercased, the word
	// that is neither.
	Gate string
}

// Memory reads /memory's argument as Hermes does
// (handle_pending_subcommand): words split at white space, the first
// one lowercased picks the subcommand (aliases apply, deny, drop, mode),
// the second is approve's or reject's id (or "all") or approval's value
// (on, true, yes, 1, enable, enabled; off, false, no, 0, disable,
// disabled); further words are ignored. Words are valid UTF-8 of at
// most MemoryWordMax characters.
func Memory(args string) MemoryArgs {
	words := strings.Fields(strings.ToValidUTF8(args, "\uFFFD"))
	if len(words) == 0 {
		return MemoryArgs{Sub: MemoryShow}
	}
	var next string
	if len(words) > 1 {
		next = clip(words[1], MemoryWordMax)
	}
	switch strings.ToLower(words[0]) {
	case "pending":
		return MemoryArgs{Sub: MemoryPending}
	case "approve", "apply":
		return MemoryArgs{Sub: MemoryApprove, Target: allOr(next)}
	case "reject", "deny", "drop":
		return MemoryArgs{Sub: MemoryReject, Target: allOr(next)}
	case "approval", "mode":
		switch v := strings.ToLower(next); v {
		case "on", "true", "yes", "1", "enable", "enabled":
			return MemoryArgs{Sub: MemoryApproval, Gate: "on"}
		case "off", "false", "no", "0", "disable", "disabled":
			return MemoryArgs{Sub: MemoryApproval, Gate: "off"}
		default:
			return MemoryArgs{Sub: MemoryApproval, Gate: v}
		}
	}
	return MemoryArgs{Sub: MemoryUnknown}
}

func allOr(w string) string {
	if strings.EqualFold(w, "all") {
		return "all"
	}
	return w
}
