package telegram

import (
	"bytes"
	"context"
	"errors"
	"io"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/switchboard-chat/switchboard/pkg/attachment"
	"github.com/switchboard-chat/switchboard/pkg/bus"
	"github.com/switchboard-chat/switchboard/pkg/bus/bustest"
	eventsv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/events/v1"
	"github.com/switchboard-chat/switchboard/pkg/platform"
	"github.com/switchboard-chat/switchboard/pkg/telegramfake"
)

// testBytes is n bytes that are not all alike.
func testBytes(n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i*7 + i/251)
	}
	return b
}

func TestFetch(t *testing.T) {
	t.Parallel()
	f := newFake(t)
	p, err := NewPlatform(testConfig(f), quietLog(), nil)
	if err != nil {
		t.Fatal(err)
	}
	photo, png := testBytes(3000), testBytes(500)
	f.AddFile("photo1", photo)
	f.AddFile("png1", png)
	f.AddFile("huge", make([]byte, telegramfake.MaxDownload+1))
	image := func(fileID string) *eventsv1.Attachment {
		return &eventsv1.Attachment{Kind: eventsv1.AttachmentKind_ATTACHMENT_KIND_IMAGE, PlatformFileId: fileID}
	}
	tests := []struct {
		name     string
		a        *eventsv1.Attachment
		setup    func()
		want     []byte
		wantMIME string
		wantErr  error  // errors.Is
		wantText string // in the error
	}{
		{name: "photo", a: image("photo1"), want: photo, wantMIME: "image/jpeg"},
		{name: "image document keeps its type", want: png, wantMIME: "image/png",
			a: &eventsv1.Attachment{Kind: eventsv1.AttachmentKind_ATTACHMENT_KIND_DOCUMENT, PlatformFileId: "png1", MimeType: "image/png"}},
		{name: "document without a type", want: png, wantMIME: "",
			a: &eventsv1.Attachment{Kind: eventsv1.AttachmentKind_ATTACHMENT_KIND_DOCUMENT, PlatformFileId: "png1"}},
		{name: "no file id", a: &eventsv1.Attachment{Kind: eventsv1.AttachmentKind_ATTACHMENT_KIND_IMAGE,
			Location: &eventsv1.Attachment_Url{Url: "https://example.com/a.png"}}, wantErr: platform.ErrNotFetched},
		{name: "unknown file id", a: image("nope"), wantText: "invalid file_id"},
		{name: "over the Bot API's 20 MB", a: image("huge"), wantErr: attachment.ErrTooLarge, wantText: "file is too big"},
		{name: "getFile flood wait", a: image("photo1"), setup: func() { f.FailNext("getFile", telegramfake.FloodWait(3)) }, wantText: "Too Many Requests"},
		{name: "download 404", a: image("photo1"), wantErr: ErrDownload, wantText: "HTTP 404",
			setup: func() { f.FailNextDownload(telegramfake.APIError{Code: 404, Description: "Not Found"}) }},
		{name: "download 502", a: image("photo1"), wantErr: ErrDownload, wantText: "HTTP 502",
			setup: func() { f.FailNextDownload(telegramfake.APIError{Code: 502, Description: "Bad Gateway"}) }},
		// Last: the HTTP client retries a GET cut on a reused connection,
		// so some of the drops may be left over. The client's error names
		// the URL, which must not show the token.
		{name: "download cut", a: image("photo1"), wantText: "/file/bot<token>/",
			setup: func() {
				for range 5 {
					f.FailNextDownload(telegramfake.ErrDropConnection)
				}
			}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.setup != nil {
				tt.setup()
			}
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			rc, mime, err := p.Fetch(ctx, tt.a)
			if tt.wantErr != nil || tt.wantText != "" {
				if err == nil {
					_ = rc.Close()
					t.Fatal("Fetch succeeded, want an error")
				}
				if tt.wantErr != nil && !errors.Is(err, tt.wantErr) {
					t.Errorf("Fetch error %v, want %v", err, tt.wantErr)
				}
				if !strings.Contains(err.Error(), tt.wantText) {
					t.Errorf("Fetch error %q, want it to contain %q", err, tt.wantText)
				}
				if strings.Contains(err.Error(), "test-secret") {
					t.Errorf("Fetch error %q names the bot token", err)
				}
				return
			}
			if err != nil {
				t.Fatalf("Fetch: %v", err)
			}
			defer rc.Close()
			got, err := io.ReadAll(rc)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, tt.want) || mime != tt.wantMIME {
				t.Fatalf("Fetch gave %d bytes of %q, want %d of %q (same bytes: %v)", len(got), mime, len(tt.want), tt.wantMIME, bytes.Equal(got, tt.want))
			}
		})
	}
}

// TestPhotosKept runs the gateway with attachments on: the photos users
// send reach the bus pointing at their bytes in the attachment store, and
// one that cannot be kept is published all the same, with the reason.
func TestPhotosKept(t *testing.T) {
	t.Parallel()
	f := newFake(t)
	b := bustest.New(t, bustest.EmbeddedURL(t))
	const limit = 4 << 10
	cfg := attachment.Config{Enabled: true, MaxBytes: limit}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = b.JetStream().DeleteObjectStore(ctx, b.Topology().Stream(attachment.Bucket))
	})
	s, err := New(testConfig(f), Deps{Log: quietLog(), Bus: b, Instance: "a", Backoff: platform.Schedule(50 * time.Millisecond), Attachments: cfg})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("run: %v", err)
		}
	})
	store := attachment.New(b.JetStream(), b.Topology(), cfg)
	from := obj{"from": alice, "chat": dmChat}
	with := func(extra obj) obj {
		m := obj{"from": alice, "chat": dmChat}
		for k, v := range extra {
			m[k] = v
		}
		return m
	}

	photo, png, big := testBytes(3000), testBytes(700), testBytes(limit+1)
	tests := []struct {
		name string
		// send queues the update and returns its id.
		send func() int64
		// want are the bytes the store must hold (nil: none kept).
		want     []byte
		wantMIME string
		// unavailable is what Attachment.unavailable must contain ("": empty).
		unavailable string
		// downloads is how many file downloads the update may cause.
		downloads int
	}{
		{name: "photo", want: photo, wantMIME: "image/jpeg", downloads: 1, send: func() int64 {
			f.AddFile("photo-ok", photo)
			return f.InjectPhoto(with(obj{"caption": "what is this?"}), "photo-ok")
		}},
		{name: "image sent as a file", want: png, wantMIME: "image/png", downloads: 1, send: func() int64 {
			f.AddFile("png-ok", png)
			return f.InjectDocument(from, "png-ok", "chart.png", "image/png")
		}},
		{name: "pdf is not downloaded", send: func() int64 {
			f.AddFile("pdf", testBytes(100))
			return f.InjectDocument(from, "pdf", "report.pdf", "application/pdf")
		}},
		{name: "unknown file id", unavailable: "could not be downloaded", send: func() int64 {
			return f.InjectPhoto(from, "never-added")
		}},
		{name: "download fails", unavailable: "could not be downloaded", downloads: 1, send: func() int64 {
			f.AddFile("photo-500", photo)
			f.FailNextDownload(telegramfake.APIError{Code: 500, Description: "Internal Server Error"})
			return f.InjectPhoto(from, "photo-500")
		}},
		{name: "over max_bytes by its file_size", unavailable: "too large (4.0 KB", send: func() int64 {
			f.AddFile("photo-big", big)
			return f.InjectPhoto(from, "photo-big")
		}},
		{name: "over max_bytes without a file_size", unavailable: "too large (the limit is 4.0 KB)", downloads: 1, send: func() int64 {
			f.AddFile("photo-big-quiet", big)
			return f.Inject(obj{"message": msg(with(obj{"photo": []obj{{"file_id": "photo-big-quiet", "file_unique_id": "q", "width": 800, "height": 600}}}))})
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := f.Downloads()
			id := strconv.FormatInt(tt.send(), 10)
			var got *eventsv1.MessageReceived
			waitFor(t, "the update on the bus", 20*time.Second, func() bool {
				got = eventByID(t, b, id)
				return got != nil
			})
			if n := len(got.GetAttachments()); n != 1 {
				t.Fatalf("event has %d attachments, want 1: %v", n, got)
			}
			a := got.GetAttachments()[0]
			if d := f.Downloads() - before; d != tt.downloads {
				t.Errorf("%d downloads, want %d", d, tt.downloads)
			}
			switch {
			case tt.unavailable == "" && a.GetUnavailable() != "":
				t.Errorf("unavailable %q, want it kept", a.GetUnavailable())
			case tt.unavailable != "" && !strings.Contains(a.GetUnavailable(), tt.unavailable):
				t.Errorf("unavailable %q, want it to contain %q", a.GetUnavailable(), tt.unavailable)
			}
			if tt.want == nil {
				if a.GetBytesRef() != "" {
					t.Fatalf("bytes_ref %q, want none", a.GetBytesRef())
				}
				return
			}
			if a.GetBytesRef() == "" || a.GetSizeBytes() != int64(len(tt.want)) || a.GetMimeType() != tt.wantMIME {
				t.Fatalf("attachment %v, want a bytes_ref to %d bytes of %s", a, len(tt.want), tt.wantMIME)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			data, mime, err := store.Get(ctx, a.GetBytesRef(), 0)
			if err != nil {
				t.Fatalf("store: %v", err)
			}
			if !bytes.Equal(data, tt.want) || mime != tt.wantMIME {
				t.Fatalf("store holds %d bytes of %q, want %d of %q (same bytes: %v)", len(data), mime, len(tt.want), tt.wantMIME, bytes.Equal(data, tt.want))
			}
		})
	}
}

// eventByID is the inbound event with this event id, or nil.
func eventByID(t *testing.T, b *bus.Bus, id string) *eventsv1.MessageReceived {
	t.Helper()
	for _, ev := range inbound(t, b) {
		if ev.GetEventId() == id {
			return ev
		}
	}
	return nil
}
