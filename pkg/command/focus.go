package command

import (
	"strings"
	"unicode/utf8"
)

// CompressFocusMax bounds the focus topic of /compress <focus>, in
// characters: it goes into the summary request's instructions, where a
// few words name a topic (a page would be a prompt of its own).
const CompressFocusMax = 200

// CompressFocus is the focus topic of /compress args, Hermes's "focus
// topic" that the summary keeps in full detail: its words joined by
// single spaces (no line breaks in the prompt it goes into), cut to
// CompressFocusMax characters; "" for none.
func CompressFocus(args string) string {
	focus := strings.Join(strings.Fields(args), " ")
	if utf8.RuneCountInString(focus) > CompressFocusMax {
		focus = strings.TrimSpace(string([]rune(focus)[:CompressFocusMax]))
	}
	return focus
}
