package router

import (
	"testing"

	eventsv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/events/v1"
)

// A notice about a Discord channel message that the gateway auto-threads
// (a busy acknowledgement, a command's answer) goes into the thread the
// message opens, where its session's answers go.
func TestNoticeTargetThread(t *testing.T) {
	ev := &eventsv1.MessageReceived{MessageId: "7", Source: &eventsv1.SessionSource{Platform: "discord", ChatType: "group", ChatId: "9", ProspectiveThreadId: "7"}}
	if got := target(ev); got.GetThreadId() != "7" || got.GetChatId() != "9" || got.GetReplyToMessageId() != "7" {
		t.Fatalf("target %v, want thread 7 of channel 9", got)
	}
	ev.Source.ChatType = "dm"
	if got := target(ev); got.GetThreadId() != "" {
		t.Fatalf("dm target %v, want no thread", got)
	}
}
