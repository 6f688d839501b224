package teams

import (
	"context"
	"log/slog"
	"strings"
	"testing"

	"github.com/switchboard-chat/switchboard/pkg/bus/bustest"
	deliveryv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/delivery/v1"
	eventsv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/events/v1"
	"github.com/switchboard-chat/switchboard/services/gateway/teams/teamsfake"
)

// Teams shows pictures sent by URL, and answers any other file so sent
// "Unknown attachment type" (400): a document goes as its link, on a
// line of its own under the text, as Hermes sends a file it cannot
// attach ("📎 File: …"), rather than being refused for good with the
// message. A picture stays an attachment. Teams shows a markdown
// activity's single line break as a space (its Markdown's soft break),
// so there the link is a paragraph of its own: after "\n" it would run
// on at the end of the text's last line, or into its list item; a
// plain activity shows line breaks as they are. An attachment's caption
// (a picture's alt text) goes under the text, above a file's link, as
// Hermes sends a picture's caption as its message's text and a file as
// "caption\n📎 File: …", rather than being dropped.
func TestFilesGoAsLinks(t *testing.T) {
	f := teamsfake.New(t)
	b := bustest.New(t, bustest.EmbeddedURL(t))
	p, err := NewPlatform(testConfig(f), b, slog.New(slog.DiscardHandler), nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	file := func(u, mt string, kind eventsv1.AttachmentKind) *eventsv1.Attachment {
		return &eventsv1.Attachment{Kind: kind, Location: &eventsv1.Attachment_Url{Url: u}, MimeType: mt}
	}
	captioned := func(a *eventsv1.Attachment, c string) *eventsv1.Attachment {
		a.Caption = c
		return a
	}
	const pdf = "https://files.example.com/report.pdf"
	for _, tc := range []struct {
		name, text string
		plain      bool // a plain request (TEXT_FORMAT_PLAIN)
		atts       []*eventsv1.Attachment
		wantText   string
		wantTypes  []string // the attachments' content types
	}{
		{name: "document with text", text: "Here is the report.", atts: []*eventsv1.Attachment{file(pdf, "application/pdf", eventsv1.AttachmentKind_ATTACHMENT_KIND_DOCUMENT)},
			wantText: "Here is the report.\n\n" + pdf},
		{name: "document under a list", text: "Sources:\n- the survey\n- the audit\n", atts: []*eventsv1.Attachment{file(pdf, "application/pdf", eventsv1.AttachmentKind_ATTACHMENT_KIND_DOCUMENT)},
			wantText: "Sources:\n- the survey\n- the audit\n\n" + pdf},
		{name: "two documents", text: "Both:", atts: []*eventsv1.Attachment{file(pdf, "", eventsv1.AttachmentKind_ATTACHMENT_KIND_DOCUMENT),
			file("https://files.example.com/data.csv", "text/csv", eventsv1.AttachmentKind_ATTACHMENT_KIND_DOCUMENT)},
			wantText: "Both:\n\n" + pdf + "\n\nhttps://files.example.com/data.csv"},
		{name: "plain document", text: "Here is the report.", plain: true, atts: []*eventsv1.Attachment{file(pdf, "application/pdf", eventsv1.AttachmentKind_ATTACHMENT_KIND_DOCUMENT)},
			wantText: "Here is the report.\n" + pdf},
		{name: "document alone", atts: []*eventsv1.Attachment{file(pdf, "", eventsv1.AttachmentKind_ATTACHMENT_KIND_DOCUMENT)}, wantText: pdf},
		{name: "video", atts: []*eventsv1.Attachment{file("https://files.example.com/clip.mp4", "video/mp4", eventsv1.AttachmentKind_ATTACHMENT_KIND_VIDEO)},
			wantText: "https://files.example.com/clip.mp4"},
		{name: "captioned document", atts: []*eventsv1.Attachment{captioned(file(pdf, "application/pdf", eventsv1.AttachmentKind_ATTACHMENT_KIND_DOCUMENT), "Q3 report")},
			wantText: "Q3 report\n\n" + pdf},
		{name: "captioned picture", atts: []*eventsv1.Attachment{captioned(file("https://files.example.com/chart.png", "image/png", eventsv1.AttachmentKind_ATTACHMENT_KIND_IMAGE), "Sales by month")},
			wantText: "Sales by month", wantTypes: []string{"image/png"}},
		{name: "caption same as the text", text: "Sales by month", atts: []*eventsv1.Attachment{captioned(file("https://files.example.com/chart.png", "image/png", eventsv1.AttachmentKind_ATTACHMENT_KIND_IMAGE), "Sales by month")},
			wantText: "Sales by month", wantTypes: []string{"image/png"}},
		{name: "picture", text: "look", atts: []*eventsv1.Attachment{file("https://files.example.com/cat.png", "", eventsv1.AttachmentKind_ATTACHMENT_KIND_IMAGE)},
			wantText: "look", wantTypes: []string{"image/png"}},
		{name: "picture and document", atts: []*eventsv1.Attachment{file("https://files.example.com/cat.jpg", "image/jpeg", eventsv1.AttachmentKind_ATTACHMENT_KIND_IMAGE),
			file(pdf, "application/pdf", eventsv1.AttachmentKind_ATTACHMENT_KIND_DOCUMENT)}, wantText: pdf, wantTypes: []string{"image/jpeg"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			conv := "a:files-" + strings.ReplaceAll(tc.name, " ", "-")
			req := &deliveryv1.SendRequested{Target: &deliveryv1.Target{Platform: "teams", Account: f.ClientID, ChatId: conv}, Text: tc.text, Attachments: tc.atts}
			if tc.plain {
				req.Format = deliveryv1.TextFormat_TEXT_FORMAT_PLAIN
			}
			id, err := p.Send(ctx, req)
			if err != nil {
				t.Fatalf("send: %v", err)
			}
			got := f.Activities(conv)
			if len(got) != 1 || got[0].ID != id || got[0].Text != tc.wantText {
				t.Fatalf("sent %+v, want one message %q", got, tc.wantText)
			}
			var types []string
			for _, a := range got[0].Attachments {
				ct, _ := a["contentType"].(string)
				types = append(types, ct)
			}
			if len(types) != len(tc.wantTypes) || (len(types) > 0 && types[0] != tc.wantTypes[0]) {
				t.Fatalf("attachments %q, want %q", types, tc.wantTypes)
			}
		})
	}
}
