package worker_test

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/switchboard-chat/switchboard/pkg/attachment"
	"github.com/switchboard-chat/switchboard/pkg/fakellm"
	eventsv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/events/v1"
	turnsv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/turns/v1"
	"github.com/switchboard-chat/switchboard/services/worker"
)

// The pictures a gateway kept reach the model with the user's message, in
// every model call of the turn; a picture that is unavailable, too large
// for the model, or refused by a model without vision is only named, and
// the turn is answered all the same.
func TestPicturesReachTheModel(t *testing.T) {
	t.Parallel()
	png := append([]byte("\x89PNG\r\n\x1a\n"), bytes.Repeat([]byte{7}, 300)...)
	seen := "[image " + fakellm.Image{MediaType: "image/png", Data: png}.String() + "]"
	image := func(ref string) *eventsv1.Attachment {
		return &eventsv1.Attachment{Kind: eventsv1.AttachmentKind_ATTACHMENT_KIND_IMAGE, MimeType: "image/png",
			Location: &eventsv1.Attachment_BytesRef{BytesRef: ref}, FileName: "cat.png"}
	}
	cases := []struct {
		name     string
		textOnly bool
		mod      func(*worker.Config, *worker.Deps)
		text     string
		attach   *eventsv1.Attachment
		want     string // the final answer
		calls    int    // model requests that carried the picture
	}{
		{name: "native", text: "what is this?", attach: image("pic"),
			want: "echo: what is this?\n[Attachment: image cat.png] " + seen, calls: 1},
		{name: "in every call of a tool turn", text: `look [[tool:clock {"tz":"UTC"}]]`, attach: image("pic"),
			want: "echo: look [Attachment: image cat.png] " + seen, calls: 2},
		{name: "a model without vision", textOnly: true, text: "what is this?", attach: image("pic"),
			want: "echo: what is this?\n[Attachment: image cat.png]", calls: 1}, // the refused one
		{name: "images off", mod: func(c *worker.Config, _ *worker.Deps) { c.Agent.Images = worker.ImagesOff },
			text: "what is this?", attach: image("pic"), want: "echo: what is this?\n[Attachment: image cat.png]"},
		{name: "over the model's limit", mod: func(c *worker.Config, _ *worker.Deps) { c.Agent.MaxImageBytes = 100 },
			text: "what is this?", attach: image("pic"), want: "echo: what is this?\n[Attachment: image cat.png]"},
		{name: "expired", text: "what is this?", attach: image("gone"), want: "echo: what is this?\n[Attachment: image cat.png]"},
		{name: "not kept by the gateway", text: "what is this?",
			attach: &eventsv1.Attachment{Kind: eventsv1.AttachmentKind_ATTACHMENT_KIND_IMAGE, PlatformFileId: "f1",
				Unavailable: "it is too large (30.0 MB, the limit is 20.0 MB)"},
			want: "echo: what is this?\n[Attachment: image (not shown: it is too large (30.0 MB, the limit is 20.0 MB))]"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			h := newHarness(t)
			if tc.textOnly {
				h.fake = fakellm.New(fakellm.Config{TextOnly: true})
			}
			store := attachment.New(h.bus.JetStream(), h.bus.Topology(), attachment.Config{})
			if _, err := store.Keep(context.Background(), "pic", "image/png", bytes.NewReader(png)); err != nil {
				t.Fatal(err)
			}
			h.setGeneration("s1", 1)
			h.startWorker("w1", tc.mod)
			req := h.requestTurn("s1", tc.text, turnOpts{attachments: []*eventsv1.Attachment{tc.attach}})
			if c := h.waitCompleted(req.TurnId); c.GetStatus() != turnsv1.TurnStatus_TURN_STATUS_COMPLETED {
				t.Fatalf("status %v (%s)", c.GetStatus(), c.GetError())
			}
			got := checkReplies(t, h.replies(req.TurnId)).GetFinalText().GetText()
			if !strings.HasPrefix(got, tc.want) {
				t.Fatalf("answer %q, want it to start with %q", got, tc.want)
			}
			calls := 0
			for _, r := range h.fake.Requests() {
				for _, m := range r.Messages {
					if len(m.Images) > 0 {
						calls++
						if !bytes.Equal(m.Images[0].Data, png) {
							t.Errorf("the model saw other bytes: %d", len(m.Images[0].Data))
						}
					}
				}
			}
			if calls != tc.calls {
				t.Errorf("%d model requests carried the picture, want %d", calls, tc.calls)
			}
		})
	}
}
