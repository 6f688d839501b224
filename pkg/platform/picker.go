package platform

import (
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"

	deliveryv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/delivery/v1"
)

// A picker's button (deliveryv1.PickerChoice) carries in its payload
// (Telegram's callback data, 64 bytes; Discord's custom_id, 100) what a
// press publishes, in one of three forms:
//
//	pc:<command>       the whole command: "pc:/model gpt-4o"
//	pd:<data>:<name>   the choice's data and its command's name: "pd:p1:model"
//	pn:<n>             a button that does nothing (a page counter); n is
//	                   its place, as Discord wants the ids of a message's
//	                   buttons distinct
//
// A press of the first publishes the command; of the second "/<name>"
// with the data (ButtonPress.data), which the router reads.

const (
	// MaxPickerCommand is the longest command, in bytes, a payload
	// carries whole (Telegram's 64 bytes less the prefix).
	MaxPickerCommand = 60
	// maxPickerData is the longest data a choice has.
	maxPickerData = 24
	// maxPickerName is the longest command name a payload carries.
	maxPickerName = 32
	// maxPickerButtons bounds the place of a button that does nothing.
	maxPickerButtons = 100
)

// PickerPayload is what the button of choice c, at place i among its
// picker's buttons, carries; "" when c cannot be carried (a command too
// long and no data, data or a name of the wrong form).
func PickerPayload(c *deliveryv1.PickerChoice, i int) string {
	cmd, data := c.GetCommand(), c.GetData()
	switch {
	case cmd == "" && data == "":
		if i < 0 || i >= maxPickerButtons {
			return ""
		}
		return "pn:" + strconv.Itoa(i)
	case data != "":
		name, _, _ := strings.Cut(cmd, " ")
		name, ok := strings.CutPrefix(name, "/")
		if !ok || !validPickerName(name) || !validPickerData(data) {
			return ""
		}
		return "pd:" + data + ":" + name
	case validPickerCommand(cmd):
		return "pc:" + cmd
	}
	return ""
}

// ParsePickerPayload reads a picker button's payload: the text a press
// publishes and the data it carries (""), or inert for a button that
// does nothing. ok is false for a payload that is none of a picker's.
func ParsePickerPayload(s string) (text, data string, inert, ok bool) {
	switch {
	case strings.HasPrefix(s, "pc:"):
		cmd := s[len("pc:"):]
		if !validPickerCommand(cmd) {
			return "", "", false, false
		}
		return cmd, "", false, true
	case strings.HasPrefix(s, "pd:"):
		data, name, found := strings.Cut(s[len("pd:"):], ":")
		if !found || !validPickerData(data) || !validPickerName(name) {
			return "", "", false, false
		}
		return "/" + name, data, false, true
	case strings.HasPrefix(s, "pn:"):
		n, err := strconv.Atoi(s[len("pn:"):])
		if err != nil || n < 0 || n >= maxPickerButtons || "pn:"+strconv.Itoa(n) != s {
			return "", "", false, false
		}
		return "", "", true, true
	}
	return "", "", false, false
}

// validPickerCommand: a slash command of at most MaxPickerCommand bytes
// of valid UTF-8 without control characters.
func validPickerCommand(cmd string) bool {
	return len(cmd) >= 2 && len(cmd) <= MaxPickerCommand && cmd[0] == '/' && cmd[1] != ' ' && utf8.ValidString(cmd) &&
		strings.IndexFunc(cmd, unicode.IsControl) < 0
}

// validPickerData: 1 to maxPickerData letters, digits, '.', '_', '-'.
func validPickerData(s string) bool {
	if s == "" || len(s) > maxPickerData {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}

// validPickerName: a command's name, 1 to maxPickerName lowercase
// letters, digits and '_'.
func validPickerName(s string) bool {
	if s == "" || len(s) > maxPickerName {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '_') {
			return false
		}
	}
	return true
}
