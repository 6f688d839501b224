package router

import (
	"testing"

	eventsv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/events/v1"
	repliesv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/replies/v1"
)

// press is user's press of an approval prompt's button in their DM: the
// command the button stands for, from card (the prompt's message).
func press(user, text, card, call string) *eventsv1.MessageReceived {
	ev := dm(user, text)
	ev.MessageId = ""
	ev.ButtonPress = &eventsv1.ButtonPress{MessageId: card, ToolCallId: call}
	return ev
}

func (e *env) noticeEvents(user string) []*repliesv1.Notice {
	e.mu.Lock()
	defer e.mu.Unlock()
	var out []*repliesv1.Notice
	for _, n := range e.notices {
		if n.GetTarget().GetChatId() == "chat-"+user && n.GetNotice() != nil {
			out = append(out, n.GetNotice())
		}
	}
	return out
}

// A press answers the call its prompt asked about, and the answer
// replaces the prompt's text in Hermes's words; a redelivered press is
// answered once, and a later press on an answered prompt leaves it as
// it is; a press that finds nothing waiting says the approval expired.
func TestApprovalButtonPress(t *testing.T) {
	t.Parallel()
	cfg := testConfig()
	cfg.BusyMode = BusyQueue
	e, g, _ := busySession(t, cfg, "bob", "long job")
	defer g.open()

	first := press("bob", "/approve session", "card-1", "call-1")
	e.publish(first)
	waitFor(t, "the answer", func() bool { return len(e.noticeEvents("bob")) == 1 })
	n := e.noticeEvents("bob")[0]
	if n.GetText() != "✅ Approved for session by bob" || n.GetReplacesMessageId() != "card-1" {
		t.Fatalf("notice %q replacing %q, want Hermes's decision replacing card-1", n.GetText(), n.GetReplacesMessageId())
	}
	ctl := e.controls(controlApprove)
	if len(ctl) != 1 || ctl[0].GetToolCallId() != "call-1" || ctl[0].GetText() != "session" {
		t.Fatalf("approval controls %v, want one for call-1 with scope session", ctl)
	}

	// The same press again (a platform's redelivery under another bus id).
	e.publishID(first, "redelivered-"+first.EventId)
	// A second press on the answered prompt: no call takes it.
	e.refuseControl.Store(true)
	e.publish(press("bob", "/deny", "card-1", "call-1"))
	waitFor(t, "inbound drained", e.inboundDrained)
	if got := e.noticeEvents("bob"); len(got) != 1 {
		t.Fatalf("%d notices after a redelivery and a late press, want the first answer alone: %v", len(got), got)
	}
	if n := len(e.controls(controlApprove)); n != 1 {
		t.Fatalf("%d approval controls, want the redelivery dropped", n)
	}

	// Another prompt nothing waits for any more (timed out).
	e.publish(press("bob", "/approve", "card-2", "call-2"))
	waitFor(t, "the expired card", func() bool { return len(e.noticeEvents("bob")) == 2 })
	n = e.noticeEvents("bob")[1]
	if n.GetText() != expiredText || n.GetReplacesMessageId() != "card-2" {
		t.Fatalf("notice %q replacing %q, want the expired text replacing card-2", n.GetText(), n.GetReplacesMessageId())
	}
}

// A press from a user who may not answer approvals is refused as the
// typed command is, in a message of its own: the prompt keeps its
// buttons for those who may.
func TestApprovalButtonOfANonAdmin(t *testing.T) {
	t.Parallel()
	cfg := testConfig()
	cfg.BusyMode = BusyQueue
	cfg.Admins = map[string][]string{"telegram": {"alice"}}
	e, g, _ := busySession(t, cfg, "bob", "long job")
	defer g.open()
	e.publish(press("bob", "/approve", "card-1", "call-1"))
	waitFor(t, "the refusal", func() bool { return len(e.noticeEvents("bob")) == 1 })
	n := e.noticeEvents("bob")[0]
	if n.GetReplacesMessageId() != "" || n.GetText() != "/approve is reserved for admins here. /help and /whoami are available." {
		t.Fatalf("notice %q replacing %q, want the admin refusal as a message", n.GetText(), n.GetReplacesMessageId())
	}
	if c := e.controls(controlApprove); len(c) != 0 {
		t.Fatalf("%d approval controls for a non-admin's press", len(c))
	}
}
