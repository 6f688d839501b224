package whatsapp

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"testing"
	"time"

	eventsv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/events/v1"
	"github.com/switchboard-chat/switchboard/services/gateway/whatsapp/whatsappfake"
)

// A media request (the look-up of the media id or the download of the
// URL it gives) answered 429, 5xx or one of Meta's rate-limit or
// transient codes is asked again, after its Retry-After, else 1.5 s then
// 3 s, three attempts in all; any other refusal is final at once.
func TestFetchRetried(t *testing.T) {
	t.Parallel()
	var (
		ok          = whatsappfake.Failure{}
		unavailable = whatsappfake.Failure{Status: http.StatusServiceUnavailable, Message: "Service Unavailable"}
		appLimit    = whatsappfake.Failure{Status: http.StatusTooManyRequests, Code: 4, Message: "Application request limit reached", RetryAfter: 1}
		rateLimit   = whatsappfake.Failure{Status: http.StatusBadRequest, Code: 80007, Message: "Rate limit issues"}
		transient   = whatsappfake.Failure{Status: http.StatusInternalServerError, Code: 131000, Message: "Something went wrong"}
		notFound    = whatsappfake.Failure{Status: http.StatusNotFound, Message: "Not Found"}
		badParam    = whatsappfake.Failure{Status: http.StatusBadRequest, Code: 100, Message: "Invalid parameter"}
	)
	for _, c := range []struct {
		name      string
		fails     []whatsappfake.Failure // the media requests' answers, in order
		fetched   bool
		downloads int // served by the fake
		left      int // injected failures no request reached
	}{
		{"look-up rate-limited with retry-after", []whatsappfake.Failure{appLimit}, true, 1, 0},
		{"look-up rate limit code on a 400", []whatsappfake.Failure{rateLimit}, true, 1, 0},
		{"look-up transient code", []whatsappfake.Failure{transient, transient}, true, 1, 0},
		{"download unavailable twice", []whatsappfake.Failure{ok, unavailable, unavailable}, true, 1, 0},
		{"look-up unavailable three times", []whatsappfake.Failure{unavailable, unavailable, unavailable, ok}, false, 0, 1},
		{"download not found", []whatsappfake.Failure{ok, notFound, ok}, false, 0, 1},
		{"look-up refused", []whatsappfake.Failure{badParam, ok}, false, 0, 1},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			f := whatsappfake.New(t)
			p, err := NewPlatform(testConfig(f), nil, nil)
			if err != nil {
				t.Fatal(err)
			}
			pic := []byte("\xff\xd8\xff\xe0 a small jpeg")
			f.AddMedia("601", "image/jpeg", pic)
			f.FailMedia(c.fails...)
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			rc, mt, err := p.Fetch(ctx, &eventsv1.Attachment{Kind: eventsv1.AttachmentKind_ATTACHMENT_KIND_IMAGE, PlatformFileId: "601"})
			if c.fetched {
				if err != nil {
					t.Fatalf("fetch: %v", err)
				}
				data, err := io.ReadAll(rc)
				_ = rc.Close()
				if err != nil || !bytes.Equal(data, pic) || mt != "image/jpeg" {
					t.Fatalf("fetched %q (%s), %v", data, mt, err)
				}
			} else if err == nil {
				_ = rc.Close()
				t.Fatal("fetched, want a failure")
			}
			if n := f.Downloads(); n != c.downloads {
				t.Errorf("%d downloads served, want %d", n, c.downloads)
			}
			// A final refusal is not asked again: what follows it in the
			// fake's queue is left.
			if left := f.MediaFailuresLeft(); left != c.left {
				t.Errorf("%d media failures left, want %d", left, c.left)
			}
		})
	}
}
