package delivery_test

import (
	"testing"

	"google.golang.org/protobuf/proto"

	deliveryv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/delivery/v1"
	repliesv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/replies/v1"
)

// A notice with a picker (the /model picker) is sent with its buttons;
// a notice that replaces the picker's message with another picker (its
// next page) edits it with that page's buttons, one without a picker
// edits it without buttons.
func TestPickerNotice(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.start(t, testConfig(), "a")
	choice := func(label, command, data string) *deliveryv1.PickerRow {
		return &deliveryv1.PickerRow{Choices: []*deliveryv1.PickerChoice{{Label: label, Command: command, Data: data}}}
	}
	first := &deliveryv1.Picker{Rows: []*deliveryv1.PickerRow{choice("gpt-4o", "/model gpt-4o", ""), choice("Next ▶", "/model", "p1")}}
	e.publish(t, event("notice:a", 1, "s1", &repliesv1.Notice{Text: "Select a model:", Kind: "command", Picker: first}))
	eventually(t, e.clock, 0, "the picker", func() bool { return len(e.gw.shown("test", "chat-s1")) == 1 })
	card := ""
	for _, c := range e.gw.sends() {
		if c.Op == deliveryv1.SendOp_SEND_OP_SEND && proto.Equal(c.Req.GetPicker(), first) {
			e.gw.mu.Lock()
			card = e.gw.receipts[c.Key].GetPlatformMessageId()
			e.gw.mu.Unlock()
		}
	}
	if card == "" {
		t.Fatal("the picker was sent without its buttons")
	}

	page := &deliveryv1.Picker{Rows: []*deliveryv1.PickerRow{choice("◀ Prev", "/model", "p0")}}
	for i, n := range []*repliesv1.Notice{
		{Text: "Select a model (page 2):", Kind: "command", ReplacesMessageId: card, Picker: page},
		{Text: "Model switched to `gpt-4o`", Kind: "command", ReplacesMessageId: card},
	} {
		ev := event("notice:"+string(rune('b'+i)), 1, "s1", n)
		ev.InputMessageIds = nil
		e.publish(t, ev)
		eventually(t, e.clock, 0, "the edit", func() bool {
			got := e.gw.shown("test", "chat-s1")
			return len(got) == 1 && got[0] == n.GetText()
		})
	}
	var edits []*deliveryv1.Picker
	for _, c := range e.gw.sends() {
		if c.Op == deliveryv1.SendOp_SEND_OP_EDIT && c.Req.GetMessageId() == card {
			edits = append(edits, c.Req.GetPicker())
		}
	}
	if len(edits) != 2 || !proto.Equal(edits[0], page) || edits[1] != nil {
		t.Fatalf("edits with pickers %v, want page 2's then none", edits)
	}
}
