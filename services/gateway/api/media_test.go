package api

import (
	"testing"

	eventsv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/events/v1"
)

func TestMediaLinks(t *testing.T) {
	t.Parallel()
	image := eventsv1.AttachmentKind_ATTACHMENT_KIND_IMAGE
	doc := eventsv1.AttachmentKind_ATTACHMENT_KIND_DOCUMENT
	at := func(kind eventsv1.AttachmentKind, url, caption, name string) *eventsv1.Attachment {
		return &eventsv1.Attachment{Kind: kind, Location: &eventsv1.Attachment_Url{Url: url}, Caption: caption, FileName: name}
	}
	for _, c := range []struct {
		name string
		att  *eventsv1.Attachment
		want string
	}{
		{"an image", at(image, "https://x.test/a.png", "", ""), "![](https://x.test/a.png)"},
		{"a caption over a name", at(image, "https://x.test/a.png", "a [b]\nc", "a.png"), "![a (b) c](https://x.test/a.png)"},
		{"a file by its name", at(doc, "http://x.test/r.pdf", "", "r.pdf"), "[r.pdf](http://x.test/r.pdf)"},
		{"a file without a name", at(doc, "https://x.test/r.pdf", "", ""), "[https://x.test/r.pdf](https://x.test/r.pdf)"},
		{"parentheses in the URL", at(image, "https://x.test/a(1).png", "", ""), "![](https://x.test/a%281%29.png)"},
		{"another scheme", at(image, "file:///etc/passwd", "", ""), ""},
		{"no host", at(image, "https:///a.png", "", ""), ""},
		{"kept in the store", &eventsv1.Attachment{Kind: image, Location: &eventsv1.Attachment_BytesRef{BytesRef: "att/a"}}, ""},
	} {
		if got := mediaLinks([]*eventsv1.Attachment{c.att}); got != c.want {
			t.Errorf("%s: %q, want %q", c.name, got, c.want)
		}
	}
}
