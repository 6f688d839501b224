package googlechat

import (
	"context"
	"strings"
	"testing"

	deliveryv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/delivery/v1"
	"github.com/switchboard-chat/switchboard/services/gateway/googlechat/googlechatfake"
)

// The text goes in Chat's markup (*bold*, _italic_, ~strike~), so every
// create and patch says so (markupSyntax MARKUP_SYNTAX_CHAT): a Chat app
// created now reads a text that names no syntax as Markdown, which shows
// "*done*" in italics and "~old~" as it is. So does an edit, a send cut
// into several messages and an edit's follow-on messages, whatever the
// app's default.
func TestTextIsReadInChatMarkup(t *testing.T) {
	for _, appMarkup := range []string{googlechatfake.MarkupMarkdown, googlechatfake.MarkupChat} {
		t.Run(appMarkup, func(t *testing.T) {
			f, p := newPlatform(t)
			f.AppMarkup = appMarkup
			ctx := context.Background()
			const sp = "spaces/S1"
			target := &deliveryv1.Target{Platform: PlatformName, ChatId: sp, ThreadId: sp + "/threads/t1"}
			id, err := p.Send(ctx, &deliveryv1.SendRequested{Target: target, Text: "**done**", IdempotencyKey: "turn:1:0"})
			if err != nil {
				t.Fatal(err)
			}
			// Over the limit once converted: the rest goes on in a
			// follow-on message.
			long := strings.Repeat("> quoted line\n", 400)
			if _, err := p.Send(ctx, &deliveryv1.SendRequested{Target: target, Text: long, IdempotencyKey: "turn:2:0"}); err != nil {
				t.Fatal(err)
			}
			if err := p.Edit(ctx, &deliveryv1.SendRequested{Target: target, MessageId: id, Text: "~~old~~ " + long, IdempotencyKey: "turn:1:edit"}); err != nil {
				t.Fatal(err)
			}
			ms := f.Messages(sp)
			if len(ms) < 4 {
				t.Fatalf("%d messages, want the send, the split send's two and the edit's follow-on", len(ms))
			}
			for _, m := range ms {
				if m.Markup != googlechatfake.MarkupChat {
					t.Errorf("message %s (%d edits) read as %s, want Chat's markup", m.Name, m.Edits, m.Markup)
				}
			}
			if !strings.HasPrefix(ms[0].Text, "~old~ ") {
				t.Errorf("edited text %.20q, want Chat's strike", ms[0].Text)
			}
		})
	}
}

// A link shows as Chat's <url|text>, its text linked, as Hermes sends it,
// not as "text (url)".
func TestLinks(t *testing.T) {
	f, p := newPlatform(t)
	ctx := context.Background()
	const sp = "spaces/S1"
	if _, err := p.Send(ctx, &deliveryv1.SendRequested{Target: &deliveryv1.Target{Platform: PlatformName, ChatId: sp},
		Text: "See [the guide](https://example.com/guide) or [https://a.example](https://b.example).", IdempotencyKey: "turn:1:0"}); err != nil {
		t.Fatal(err)
	}
	const want = "See <https://example.com/guide|the guide> or https://a.example (https://b.example)."
	if got := f.Texts(sp); len(got) != 1 || got[0] != want {
		t.Fatalf("sent %q, want %q", got, want)
	}
}
