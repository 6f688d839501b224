package telegram

import (
	"context"
	"strconv"
	"testing"
	"time"

	deliveryv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/delivery/v1"
	eventsv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/events/v1"
)

// A group upgraded to a supergroup: Telegram refuses what names the old
// chat with migrate_to_chat_id, and the answer goes to the supergroup
// (not replying to the old group's message, whose id there is another's),
// as do later sends, the chat action, and the edits and deletes of the
// messages sent there in the group's place; a message the group had is
// not looked for in the supergroup. A replica that did not learn it yet
// learns it from Telegram's refusal.
func TestGroupUpgradedToSupergroup(t *testing.T) {
	t.Parallel()
	f := newFake(t)
	p, err := NewPlatform(testConfig(f), quietLog(), nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	const group, super = "-555", "-1001555"
	target := func() *deliveryv1.Target { return &deliveryv1.Target{Platform: "telegram", ChatId: group} }
	before, err := p.Send(ctx, &deliveryv1.SendRequested{Target: target(), Text: "before"})
	if err != nil {
		t.Fatal(err)
	}
	f.Migrate(group, -1001555)

	reply := target()
	reply.ReplyToMessageId = before
	id, err := p.Send(ctx, &deliveryv1.SendRequested{Target: reply, Text: "the answer"})
	if err != nil {
		t.Fatalf("send to the upgraded group: %v", err)
	}
	n, _ := strconv.Atoi(id)
	if m := f.Message(super, n); m == nil || m.Text != "the answer" || m.ReplyTo != 0 {
		t.Fatalf("the supergroup has %+v as %s, want the answer, replying to nothing", m, id)
	}
	if err := p.Edit(ctx, &deliveryv1.SendRequested{Target: target(), MessageId: id, Text: "the answer, streamed"}); err != nil {
		t.Fatalf("edit of the answer: %v", err)
	}
	if m := f.Message(super, n); m.Text != "the answer, streamed" {
		t.Fatalf("the answer reads %q after its edit", m.Text)
	}
	if err := p.Edit(ctx, &deliveryv1.SendRequested{Target: target(), MessageId: before, Text: "edited"}); err == nil {
		t.Fatal("the old group's message edited in the supergroup")
	}
	calls := f.Calls("sendmessage")
	if _, err := p.Send(ctx, &deliveryv1.SendRequested{Target: target(), Text: "later"}); err != nil {
		t.Fatal(err)
	}
	if got := f.Calls("sendmessage") - calls; got != 1 {
		t.Errorf("a later send took %d requests, want 1 (straight to the supergroup)", got)
	}
	if err := p.Typing(ctx, &deliveryv1.SendRequested{Target: target()}); err != nil {
		t.Fatalf("typing: %v", err)
	}
	if a := f.Actions(); len(a) != 1 || a[0].ChatID != super {
		t.Errorf("chat actions %+v, want one in the supergroup", a)
	}
	if err := p.Delete(ctx, &deliveryv1.SendRequested{Target: target(), MessageId: id}); err != nil || f.Message(super, n) != nil {
		t.Fatalf("delete of the answer: %v", err)
	}

	// Another replica (or after a restart) learns it from the refusal;
	// a file with its caption.
	p2, err := NewPlatform(testConfig(f), quietLog(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p2.Send(ctx, &deliveryv1.SendRequested{Target: target(), Text: "a chart",
		Attachments: []*eventsv1.Attachment{{Kind: eventsv1.AttachmentKind_ATTACHMENT_KIND_IMAGE,
			Location: &eventsv1.Attachment_Url{Url: "https://example.com/chart.png"}}}}); err != nil {
		t.Fatalf("send of a file to the upgraded group: %v", err)
	}
	var texts []string
	for _, m := range f.Messages(super) {
		texts = append(texts, m.Kind+":"+m.Text)
	}
	if want := []string{"text:the answer, streamed", "text:later", "photo:a chart"}; len(texts) != len(want) || texts[0] != want[0] || texts[1] != want[1] || texts[2] != want[2] {
		t.Errorf("the supergroup has %q, want %q", texts, want)
	}
	if ms := f.Messages(group); len(ms) != 1 || ms[0].Text != "before" {
		t.Errorf("the old group has %+v, want its one message", ms)
	}
}

// The messages kept as sent to a supergroup are bounded, and reaching
// the bound forgets the oldest, not the ones just sent: the message a
// streamed answer is still editing stays found.
func TestMovedMessagesBoundKeepsTheNewest(t *testing.T) {
	t.Parallel()
	p := &Platform{log: quietLog()}
	const group, super = "-555", "-1001555"
	p.move(group, super)
	for i := 1; i <= maxMovedMessages; i++ {
		p.sentMoved(group, strconv.Itoa(i))
	}
	p.sentMoved(group, strconv.Itoa(maxMovedMessages+1)) // over the bound
	for _, id := range []int{maxMovedMessages, maxMovedMessages + 1} {
		if got := p.movedMessage(group, strconv.Itoa(id)); got != super {
			t.Errorf("message %d sent in the supergroup: found in %q, want %q", id, got, super)
		}
	}
	for i := maxMovedMessages + 2; i <= 3*maxMovedMessages; i++ {
		p.sentMoved(group, strconv.Itoa(i))
	}
	if got := p.movedMessage(group, "1"); got != "" {
		t.Errorf("the oldest message is still kept (%q): unbounded", got)
	}
}
