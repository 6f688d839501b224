package command

import (
	"strings"
	"unicode/utf8"
)

// DenyReasonMax bounds the reason of /deny <reason>, in characters, as
// Hermes caps it: a one-line reason, not a prompt of its own.
const DenyReasonMax = 280

// Deny reads /deny's argument as Hermes does: a first word "all" (in any
// case) denies every call that waits for an answer, not only the oldest;
// the rest, or the whole argument without "all", is the reason relayed
// to the agent. The reason is one line (its words joined by single
// spaces) of at most DenyReasonMax characters; "" for none.
func Deny(args string) (all bool, reason string) {
	words := strings.Fields(args)
	if len(words) > 0 && strings.EqualFold(words[0], "all") {
		all, words = true, words[1:]
	}
	reason = strings.Join(words, " ")
	if utf8.RuneCountInString(reason) > DenyReasonMax {
		reason = strings.TrimSpace(string([]rune(reason)[:DenyReasonMax]))
	}
	return all, reason
}
