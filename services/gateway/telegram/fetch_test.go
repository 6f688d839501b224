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

	"google.golang.org/protobuf/proto"

	"github.com/switchboard-chat/switchboard/pkg/attachment"
	"github.com/switchboard-chat/switchboard/pkg/bus"
	"github.com/switchboard-chat/switchboard/pkg/bus/bustest"
	eventsv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/events/v1"
	"github.com/switchboard-chat/switchboard/pkg/platform"
	"github.com/switchboard-chat/switchboard/pkg/platform/platformtest"
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
		// downloads is how many file downloads the fetch makes, and
		// getFiles how many getFile calls (0: not checked); maxTime
		// bounds how long it takes (0: not checked).
		downloads, getFiles int
		maxTime             time.Duration
	}{
		{name: "photo", a: image("photo1"), want: photo, wantMIME: "image/jpeg"},
		{name: "image document keeps its type", want: png, wantMIME: "image/png",
			a: &eventsv1.Attachment{Kind: eventsv1.AttachmentKind_ATTACHMENT_KIND_DOCUMENT, PlatformFileId: "png1", MimeType: "image/png"}},
		{name: "document without a type", want: png, wantMIME: "",
			a: &eventsv1.Attachment{Kind: eventsv1.AttachmentKind_ATTACHMENT_KIND_DOCUMENT, PlatformFileId: "png1"}},
		{name: "no file id", a: &eventsv1.Attachment{Kind: eventsv1.AttachmentKind_ATTACHMENT_KIND_IMAGE,
			Location: &eventsv1.Attachment_Url{Url: "https://example.com/a.png"}}, wantErr: platform.ErrNotFetched},
		{name: "unknown file id", a: image("nope"), wantText: "invalid file_id", getFiles: 1},
		{name: "over the Bot API's 20 MB", a: image("huge"), wantErr: attachment.ErrTooLarge, wantText: "file is too big"},
		// getFile rate limited, or failed by a server error: asked again
		// (after its retry_after, else 1.5 s), as the download is.
		{name: "getFile flood wait", a: image("photo1"), want: photo, wantMIME: "image/jpeg", getFiles: 2, downloads: 1,
			setup: func() { f.FailNext("getFile", telegramfake.FloodWait(1)) }},
		{name: "getFile 502", a: image("photo1"), want: photo, wantMIME: "image/jpeg", getFiles: 2, downloads: 1,
			setup: func() { f.FailNext("getFile", telegramfake.APIError{Code: 502, Description: "Bad Gateway"}) }},
		{name: "getFile flood wait beyond the bound", a: image("photo1"), wantText: "Too Many Requests: retry after 60: retry_after 60, asked to wait 1m0s", getFiles: 1, maxTime: time.Second,
			setup: func() { f.FailNext("getFile", telegramfake.FloodWait(60)) }},
		{name: "getFile flood waits to the last", a: image("photo1"), wantText: "Too Many Requests", getFiles: 3,
			setup: func() {
				for range 3 {
					f.FailNext("getFile", telegramfake.FloodWait(1))
				}
			}},
		{name: "download 404", a: image("photo1"), wantErr: ErrDownload, wantText: "404 Not Found", downloads: 1,
			setup: func() { f.FailNextDownload(telegramfake.APIError{Code: 404, Description: "Not Found"}) }},
		// A rate limit or a server error is asked again (after the
		// Retry-After the Bot API names, else 1.5 s), as Hermes's
		// media downloads: before, the file was lost to the turn.
		{name: "download 429", a: image("photo1"), want: photo, wantMIME: "image/jpeg", downloads: 2,
			setup: func() {
				f.FailNextDownload(telegramfake.APIError{Code: 429, Description: "Too Many Requests: retry after 1", RetryAfter: 1})
			}},
		{name: "download 502", a: image("photo1"), want: photo, wantMIME: "image/jpeg", downloads: 2,
			setup: func() { f.FailNextDownload(telegramfake.APIError{Code: 502, Description: "Bad Gateway"}) }},
		// Last: cut every time, the download fails after its three
		// attempts; the HTTP client retries a GET cut on a reused
		// connection, so some of the drops may be left over. The error
		// names the file server's host alone, not the URL and its token
		// (platform.Download).
		{name: "download cut", a: image("photo1"), wantText: "3 attempts failed, the last: Get \"127.0.0.1:",
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
			before, getFiles := f.Downloads(), f.Calls("getFile")
			start := time.Now()
			rc, mime, err := p.Fetch(ctx, tt.a)
			if took := time.Since(start); tt.maxTime != 0 && took > tt.maxTime {
				t.Errorf("Fetch took %s, want at most %s", took, tt.maxTime)
			}
			if d := f.Downloads() - before; tt.downloads != 0 && d != tt.downloads {
				t.Errorf("Fetch made %d downloads, want %d", d, tt.downloads)
			}
			if n := f.Calls("getFile") - getFiles; tt.getFiles != 0 && n != tt.getFiles {
				t.Errorf("Fetch made %d getFile calls, want %d", n, tt.getFiles)
			}
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
// send reach the bus as Telegram sent them (their file_id), with nothing
// downloaded. When a turn reads one, the worker asks the gateway, which
// downloads it once through the Bot API into the attachment store and
// answers where it is; asked again (a second attempt of the turn), it
// downloads nothing more. One that cannot be kept is answered with the
// reason; one too large by its declared file_size is marked so as it is
// published, and files the agent does not read are never downloaded.
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
	notes := []byte("# Notes\n\n- ship it\n")
	tests := []struct {
		name string
		// send queues the update and returns its id and the file_id it
		// carries.
		send func() (int64, string)
		// notRead: the agent does not read the file (attachment.Wanted is
		// false), so no turn asks for it.
		notRead bool
		// published is what the published Attachment.unavailable must
		// contain ("": empty).
		published string
		// beforeFetch runs just before the fetch request.
		beforeFetch func()
		// want are the bytes the store must hold (nil: none kept).
		want     []byte
		wantMIME string
		// unavailable is what the fetch's answer must contain ("": kept).
		unavailable string
		// downloads is how many file downloads the fetch causes.
		downloads int
	}{
		{name: "photo", want: photo, wantMIME: "image/jpeg", downloads: 1, send: func() (int64, string) {
			f.AddFile("photo-ok", photo)
			return f.InjectPhoto(with(obj{"caption": "what is this?"}), "photo-ok"), "photo-ok"
		}},
		{name: "image sent as a file", want: png, wantMIME: "image/png", downloads: 1, send: func() (int64, string) {
			f.AddFile("png-ok", png)
			return f.InjectDocument(from, "png-ok", "chart.png", "image/png"), "png-ok"
		}},
		{name: "text document", want: notes, wantMIME: "text/markdown", downloads: 1, send: func() (int64, string) {
			f.AddFile("md-ok", notes)
			return f.InjectDocument(from, "md-ok", "notes.md", "text/markdown"), "md-ok"
		}},
		{name: "pdf is not downloaded", notRead: true, send: func() (int64, string) {
			f.AddFile("pdf", testBytes(100))
			return f.InjectDocument(from, "pdf", "report.pdf", "application/pdf"), "pdf"
		}},
		{name: "video is not downloaded", notRead: true, send: func() (int64, string) {
			f.AddFile("video", testBytes(200))
			return f.Inject(obj{"message": msg(with(obj{"video": obj{"file_id": "video", "file_unique_id": "v",
				"width": 640, "height": 360, "duration": 3, "mime_type": "video/mp4", "file_size": 200}}))}), "video"
		}},
		{name: "unknown file id", unavailable: "could not be downloaded", send: func() (int64, string) {
			return f.InjectPhoto(from, "never-added"), "never-added"
		}},
		{name: "download fails", unavailable: "could not be downloaded", downloads: 1, send: func() (int64, string) {
			f.AddFile("photo-404", photo)
			return f.InjectPhoto(from, "photo-404"), "photo-404"
		}, beforeFetch: func() {
			f.FailNextDownload(telegramfake.APIError{Code: 404, Description: "Not Found"})
		}},
		// Rate limited once: asked again after the Retry-After, and kept.
		{name: "download rate limited", want: photo, wantMIME: "image/jpeg", downloads: 2, send: func() (int64, string) {
			f.AddFile("photo-429", photo)
			return f.InjectPhoto(from, "photo-429"), "photo-429"
		}, beforeFetch: func() {
			f.FailNextDownload(telegramfake.APIError{Code: 429, Description: "Too Many Requests: retry after 1", RetryAfter: 1})
		}},
		// The worker does not ask for it; a gateway asked all the same
		// refuses it without a download.
		{name: "over max_bytes by its file_size", published: "too large (4.0 KB", unavailable: "too large (4.0 KB", send: func() (int64, string) {
			f.AddFile("photo-big", big)
			return f.InjectPhoto(from, "photo-big"), "photo-big"
		}},
		{name: "over max_bytes without a file_size", unavailable: "too large (the limit is 4.0 KB)", downloads: 1, send: func() (int64, string) {
			f.AddFile("photo-big-quiet", big)
			return f.Inject(obj{"message": msg(with(obj{"photo": []obj{{"file_id": "photo-big-quiet", "file_unique_id": "q", "width": 800, "height": 600}}}))}), "photo-big-quiet"
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := f.Downloads()
			update, fileID := tt.send()
			id := strconv.FormatInt(update, 10)
			var ev *eventsv1.MessageReceived
			waitFor(t, "the update on the bus", 20*time.Second, func() bool {
				ev = eventByID(t, b, id)
				return ev != nil
			})
			if n := len(ev.GetAttachments()); n != 1 {
				t.Fatalf("event has %d attachments, want 1: %v", n, ev)
			}
			a := ev.GetAttachments()[0]
			if d := f.Downloads() - before; d != 0 {
				t.Errorf("publishing made %d downloads, want none", d)
			}
			if a.GetPlatformFileId() != fileID || a.GetBytesRef() != "" {
				t.Errorf("published attachment %v, want its file_id %s", a, fileID)
			}
			switch {
			case tt.published == "" && a.GetUnavailable() != "":
				t.Errorf("published unavailable %q, want none", a.GetUnavailable())
			case tt.published != "" && !strings.Contains(a.GetUnavailable(), tt.published):
				t.Errorf("published unavailable %q, want it to contain %q", a.GetUnavailable(), tt.published)
			}
			if tt.notRead {
				if attachment.Wanted(a) {
					t.Fatalf("attachment %v is read by the agent, want it left alone", a)
				}
				return
			}
			if tt.published == "" && !attachment.Wanted(a) {
				t.Fatalf("attachment %v is not read by the agent: no turn would ask for it", a)
			}

			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			if tt.beforeFetch != nil {
				tt.beforeFetch()
			}
			before = f.Downloads()
			got := platformtest.Fetch(t, ctx, b, "telegram", ev, 0)
			if d := f.Downloads() - before; d != tt.downloads {
				t.Errorf("the fetch made %d downloads, want %d", d, tt.downloads)
			}
			if tt.unavailable != "" {
				if got.GetBytesRef() != "" || !strings.Contains(got.GetUnavailable(), tt.unavailable) {
					t.Fatalf("fetched %v, want it unavailable: %q", got, tt.unavailable)
				}
				return
			}
			name := attachment.Name("telegram", ev.GetSource().GetAccount(), ev.GetEventId(), 0)
			if got.GetBytesRef() != name || got.GetUnavailable() != "" || got.GetSizeBytes() != int64(len(tt.want)) || got.GetMimeType() != tt.wantMIME {
				t.Fatalf("fetched %v, want %s: %d bytes of %s", got, name, len(tt.want), tt.wantMIME)
			}
			data, mime, err := store.Get(ctx, got.GetBytesRef(), 0)
			if err != nil {
				t.Fatalf("store: %v", err)
			}
			if !bytes.Equal(data, tt.want) || mime != tt.wantMIME {
				t.Fatalf("store holds %d bytes of %q, want %d of %q (same bytes: %v)", len(data), mime, len(tt.want), tt.wantMIME, bytes.Equal(data, tt.want))
			}

			// A second attempt of the turn finds it kept.
			before = f.Downloads()
			again := platformtest.Fetch(t, ctx, b, "telegram", ev, 0)
			if d := f.Downloads() - before; d != 0 || !proto.Equal(again, got) {
				t.Fatalf("asked again: %v after %d downloads, want %v after none", again, d, got)
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
