package command

import (
	"strings"
	"unicode/utf8"
)

// PlatformReasonMax bounds the reason of /platform pause, in characters.
const PlatformReasonMax = 200

// PlatformArgs is /platform's argument as Platform reads it.
type PlatformArgs struct {
	// Action is list, pause or resume; "" for any other word (the usage
	// is the answer).
	Action string
	// Target is the platform named, lowercased; "" for none.
	Target string
	// Force (--force, -f) pauses the platform the command came from.
	Force bool
	// Reason is the rest of a pause's words, one line of at most
	// PlatformReasonMax characters; "" for none.
	Reason string
}

// Platform reads /platform's argument as Hermes does: the first word,
// in any case, is the action (list when there is none), the second the
// platform's name, lowercased. After the name, this gateway also takes
// --force (or -f), anywhere, and a reason for a pause: the other words.
func Platform(args string) PlatformArgs {
	words := strings.Fields(args)
	var a PlatformArgs
	if len(words) == 0 {
		return PlatformArgs{Action: "list"}
	}
	switch w := strings.ToLower(words[0]); w {
	case "list", "pause", "resume":
		a.Action = w
	default:
		return a
	}
	var rest []string
	for _, w := range words[1:] {
		switch lw := strings.ToLower(w); {
		case lw == "--force" || lw == "-f":
			a.Force = true
		case a.Target == "":
			a.Target = lw
		default:
			rest = append(rest, w)
		}
	}
	a.Reason = strings.Join(rest, " ")
	if utf8.RuneCountInString(a.Reason) > PlatformReasonMax {
		a.Reason = strings.TrimSpace(string([]rune(a.Reason)[:PlatformReasonMax]))
	}
	return a
}
