package command

import (
	"strings"
	"unicode/utf8"
)

// PauseReasonMax bounds the reason of /pause, in characters.
const PauseReasonMax = 200

// PauseArgs is /pause's argument as Pause reads it.
type PauseArgs struct {
	// Off: the argument is off, resume, stop or disengage (any case),
	// Hermes's words that lift the pause.
	Off bool
	// Reason is the argument otherwise, one line of at most
	// PauseReasonMax characters; "" for none.
	Reason string
}

// Pause reads /pause's argument as Hermes does: off, resume, stop or
// disengage alone resume; any other text is the pause's reason, here
// made one line of valid UTF-8 and cut to PauseReasonMax characters.
func Pause(args string) PauseArgs {
	reason := PauseReason(args)
	switch strings.ToLower(reason) {
	case "off", "resume", "stop", "disengage":
		return PauseArgs{Off: true}
	}
	return PauseArgs{Reason: reason}
}

// PauseReason makes s a pause's reason, as /pause keeps it: one line of
// valid UTF-8 (a byte that is not is U+FFFD) with its spaces collapsed,
// cut to PauseReasonMax characters. The admin API's SetPause uses it too.
func PauseReason(s string) string {
	reason := strings.Join(strings.Fields(strings.ToValidUTF8(s, "\uFFFD")), " ")
	if utf8.RuneCountInString(reason) > PauseReasonMax {
		reason = strings.TrimSpace(string([]rune(reason)[:PauseReasonMax]))
	}
	return reason
}
