package command

import "strings"

// TopicAction is what /topic's argument asks for.
type TopicAction int

// What /topic does, by its argument (Hermes's _handle_topic_command).
const (
	// TopicEnable: no argument — turn topic mode on, or show its status.
	TopicEnable TopicAction = iota
	// TopicHelp: help, ?, -h or --help.
	TopicHelp
	// TopicOff: off, disable or stop.
	TopicOff
	// TopicRestore: any other argument, a session id to bind to the
	// current topic.
	TopicRestore
)

// TopicArgs is /topic's argument read.
type TopicArgs struct {
	Action TopicAction
	// SessionID is TopicRestore's session id, trimmed; "" otherwise.
	SessionID string
}

// Topic reads /topic's argument as Hermes does: the words help, ?, -h,
// --help, off, disable and stop in any case (the whole argument,
// trimmed); nothing at all enables; anything else is a session id. A
// session id is one word: only its first whitespace-separated word is
// kept (ids never contain spaces; the rest would never match).
func Topic(args string) TopicArgs {
	a := strings.TrimSpace(args)
	switch strings.ToLower(a) {
	case "":
		return TopicArgs{Action: TopicEnable}
	case "help", "?", "-h", "--help":
		return TopicArgs{Action: TopicHelp}
	case "off", "disable", "stop":
		return TopicArgs{Action: TopicOff}
	}
	return TopicArgs{Action: TopicRestore, SessionID: strings.Fields(a)[0]}
}
