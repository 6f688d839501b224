package worker

import (
	"testing"

	eventsv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/events/v1"
	turnsv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/turns/v1"
)

// The answer to a Discord channel message that the gateway auto-threads
// (prospective_thread_id) goes into that thread, which the send opens:
// it went to the channel, so no thread was ever opened and every mention
// started a session of its own with nowhere to continue it.
func TestReplyTargetThread(t *testing.T) {
	tests := []struct {
		name   string
		origin *eventsv1.SessionSource
		want   string
	}{
		{"a message in a thread", &eventsv1.SessionSource{Platform: "discord", ChatType: "thread", ChatId: "9", ThreadId: "8"}, "8"},
		{"a channel message that opens a thread", &eventsv1.SessionSource{Platform: "discord", ChatType: "group", ChatId: "9", ProspectiveThreadId: "7"}, "7"},
		{"a DM keeps no prospective thread", &eventsv1.SessionSource{Platform: "discord", ChatType: "dm", ChatId: "9", ProspectiveThreadId: "7"}, ""},
		{"no thread", &eventsv1.SessionSource{Platform: "telegram", ChatType: "group", ChatId: "-1"}, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			req := &turnsv1.TurnRequested{Origin: tc.origin, Inputs: []*eventsv1.MessageReceived{{MessageId: "7"}}}
			got := replyTarget(req)
			if got.GetThreadId() != tc.want || got.GetChatId() != tc.origin.GetChatId() || got.GetReplyToMessageId() != "7" {
				t.Fatalf("target %v, want thread %q in chat %s replying to 7", got, tc.want, tc.origin.GetChatId())
			}
		})
	}
}
