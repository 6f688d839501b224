package platform

import (
	"context"
	"encoding/base64"
	"errors"
	"io"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/switchboard-chat/switchboard/pkg/attachment"
	"github.com/switchboard-chat/switchboard/pkg/bus/bustest"
	deliveryv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/delivery/v1"
	eventsv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/events/v1"
	"github.com/switchboard-chat/switchboard/pkg/telemetry/telemetrytest"
)

// Publishing downloads nothing: a data: URL is kept (or dropped with the
// reason when it cannot be), an attachment declared too large is marked,
// everything else is published as the platform described it.
func TestPublishedAttachments(t *testing.T) {
	t.Parallel()
	pic := base64.StdEncoding.EncodeToString([]byte("\x89PNG\r\n\x1a\n pixels"))
	image := eventsv1.AttachmentKind_ATTACHMENT_KIND_IMAGE
	inline := func(u string) *eventsv1.Attachment {
		return &eventsv1.Attachment{Kind: image, Location: &eventsv1.Attachment_Url{Url: u}}
	}
	tests := []struct {
		name        string
		enabled     bool
		in          *eventsv1.Attachment
		kept        bool
		unavailable string
	}{
		{"inline picture", true, inline("data:image/png;base64," + pic), true, ""},
		{"inline picture, attachments off", false, inline("data:image/png;base64," + pic), false, "pictures sent inline are not accepted here"},
		{"broken inline picture", true, inline("data:image/png;base64,@@"), false, "it could not be kept"},
		{"inline picture over the limit", true, inline("data:image/png;base64," + base64.StdEncoding.EncodeToString(make([]byte, 2000))), false, "it is too large (the limit is 1000 bytes)"},
		{"declared too large", true, &eventsv1.Attachment{Kind: image, PlatformFileId: "f", SizeBytes: 5000}, false, "it is too large (4.9 KB, the limit is 1000 bytes)"},
		{"a file id is left for the turn", true, &eventsv1.Attachment{Kind: image, PlatformFileId: "f", SizeBytes: 10}, false, ""},
		{"a web address is left for the model", true, inline("https://example.com/a.png"), false, ""},
	}
	b := bustest.New(t, bustest.EmbeddedURL(t))
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, err := NewRunner(&filePlatform{}, b,
				Options{Attachments: attachment.Config{Enabled: tt.enabled, MaxBytes: 1000}})
			if err != nil {
				t.Fatal(err)
			}
			a := proto.Clone(tt.in).(*eventsv1.Attachment)
			ev := &eventsv1.MessageReceived{EventId: "e" + strconv.Itoa(i), Attachments: []*eventsv1.Attachment{a}}
			r.prepareAttachments(context.Background(), ev)
			if (a.GetBytesRef() != "") != tt.kept || a.GetUnavailable() != tt.unavailable {
				t.Fatalf("got %v, want kept=%v unavailable=%q", a, tt.kept, tt.unavailable)
			}
			if strings.HasPrefix(a.GetUrl(), "data:") {
				t.Fatal("an event would carry the bytes")
			}
			if !tt.kept && a.GetBytesRef() == "" && a.GetUnavailable() == "" && !proto.Equal(a, tt.in) {
				t.Fatalf("changed %v to %v", tt.in, a)
			}
		})
	}
}

// A fetch request that is not for this gateway's files is refused
// without a download.
func TestFetchRefusals(t *testing.T) {
	t.Parallel()
	b := bustest.New(t, bustest.EmbeddedURL(t))
	r, err := NewRunner(&filePlatform{}, b, Options{Attachments: attachment.Config{Enabled: true, MaxBytes: 1000}})
	if err != nil {
		t.Fatal(err)
	}
	img := &eventsv1.Attachment{Kind: eventsv1.AttachmentKind_ATTACHMENT_KIND_IMAGE, PlatformFileId: "f"}
	name := attachment.Name("files", "bot", "e1", 0)
	tests := []struct {
		name string
		req  *eventsv1.AttachmentFetchRequested
		want string
	}{
		{"no name", &eventsv1.AttachmentFetchRequested{Attachment: img, Account: "bot"}, "it could not be downloaded"},
		{"a name attachment.Name does not make", &eventsv1.AttachmentFetchRequested{Attachment: img, Name: "../../etc/passwd", Account: "bot"}, "it could not be downloaded"},
		{"another bot's file", &eventsv1.AttachmentFetchRequested{Attachment: img, Name: name, Account: "other"}, "it could not be downloaded"},
		{"no account", &eventsv1.AttachmentFetchRequested{Attachment: img, Name: name}, "it could not be downloaded"},
		{"declared too large", &eventsv1.AttachmentFetchRequested{Attachment: &eventsv1.Attachment{PlatformFileId: "f", SizeBytes: 2000}, Name: name, Account: "bot"}, "it is too large (2.0 KB, the limit is 1000 bytes)"},
		{"the download fails", &eventsv1.AttachmentFetchRequested{Attachment: img, Name: name, Account: "bot"}, "it could not be downloaded"},
	}
	for _, tt := range tests {
		if got := r.FetchAttachment(context.Background(), tt.req); got.GetBytesRef() != "" || got.GetUnavailable() != tt.want {
			t.Errorf("%s: %v, want unavailable %q", tt.name, got, tt.want)
		}
	}
}

// A download that panics is answered like a failed one, and counted.
func TestFetchPanicIsAFailedDownload(t *testing.T) {
	t.Parallel()
	b := bustest.New(t, bustest.EmbeddedURL(t))
	r, err := NewRunner(&panickyFiles{}, b, Options{Attachments: attachment.Config{Enabled: true, MaxBytes: 1000}})
	if err != nil {
		t.Fatal(err)
	}
	labels := map[string]string{"component": "gateway_fetch"}
	before := telemetrytest.Value(t, "switchboard_panics_total", labels)
	req := &eventsv1.AttachmentFetchRequested{Name: attachment.Name("files", "bot", "e1", 0), Account: "bot",
		Attachment: &eventsv1.Attachment{Kind: eventsv1.AttachmentKind_ATTACHMENT_KIND_IMAGE, PlatformFileId: "f"}}
	if got := r.FetchAttachment(context.Background(), req); got.GetBytesRef() != "" || got.GetUnavailable() != unavailableFailed {
		t.Fatalf("%v, want unavailable %q", got, unavailableFailed)
	}
	if got := telemetrytest.Value(t, "switchboard_panics_total", labels) - before; got != 1 {
		t.Fatalf("counted %v, want 1", got)
	}
}

// panickyFiles is filePlatform whose download panics.
type panickyFiles struct{ filePlatform }

func (panickyFiles) Fetch(_ context.Context, a *eventsv1.Attachment) (io.ReadCloser, string, error) {
	var parts []string
	return nil, parts[len(a.GetPlatformFileId())], nil // index out of range
}

// filePlatform is a platform that only downloads, and fails to.
type filePlatform struct{}

func (*filePlatform) Name() string                        { return "files" }
func (*filePlatform) Account() string                     { return "bot" }
func (*filePlatform) Capabilities() Capabilities          { return Capabilities{} }
func (*filePlatform) Connect(context.Context, Conn) error { return nil }
func (*filePlatform) Send(context.Context, *deliveryv1.SendRequested) (string, error) {
	return "", ErrUnsupported
}
func (*filePlatform) Edit(context.Context, *deliveryv1.SendRequested) error   { return ErrUnsupported }
func (*filePlatform) Delete(context.Context, *deliveryv1.SendRequested) error { return ErrUnsupported }
func (*filePlatform) Typing(context.Context, *deliveryv1.SendRequested) error { return ErrUnsupported }
func (*filePlatform) Fetch(context.Context, *eventsv1.Attachment) (io.ReadCloser, string, error) {
	return nil, "", errors.New("HTTP 404")
}

func TestFetchBudget(t *testing.T) {
	for _, tc := range []struct{ wait, want time.Duration }{
		{70 * time.Second, 68 * time.Second},
		{4 * time.Second, 2 * time.Second},
		{3 * time.Second, 1500 * time.Millisecond}, // half, not 1 s
		{1500 * time.Millisecond, 750 * time.Millisecond},
		{0, 0},
	} {
		if got := fetchBudget(tc.wait); got != tc.want {
			t.Errorf("fetchBudget(%v) = %v, want %v", tc.wait, got, tc.want)
		}
	}
}
