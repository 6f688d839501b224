package bluebubbles

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"testing"
	"time"

	eventsv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/events/v1"
	"github.com/switchboard-chat/switchboard/services/gateway/bluebubbles/bbfake"
)

// An attachment download the server answers 429 or 5xx is asked again,
// after its Retry-After, else 1.5 s then 3 s, three attempts in all; a
// 404 or another refusal is final at once.
func TestFetchRetried(t *testing.T) {
	t.Parallel()
	var (
		ok       = bbfake.Failure{}
		busy     = bbfake.Failure{Status: http.StatusServiceUnavailable, Message: "Service Unavailable"}
		limited  = bbfake.Failure{Status: http.StatusTooManyRequests, Message: "Too Many Requests", RetryAfter: 1}
		internal = bbfake.Failure{Status: http.StatusInternalServerError, Message: "Internal Server Error"}
		notFound = bbfake.Failure{Status: http.StatusNotFound, Message: "Attachment does not exist on disk"}
	)
	for _, c := range []struct {
		name      string
		fails     []bbfake.Failure // the downloads' answers, in order
		fetched   bool
		downloads int // served by the fake
		left      int // injected failures no download reached
	}{
		{"rate-limited with retry-after", []bbfake.Failure{limited}, true, 1, 0},
		{"server errors twice", []bbfake.Failure{busy, internal}, true, 1, 0},
		{"server errors three times", []bbfake.Failure{busy, busy, busy, ok}, false, 0, 1},
		{"not found", []bbfake.Failure{notFound, ok}, false, 0, 1},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			f := bbfake.New(t)
			p, err := NewPlatform(testConfig(f), nil, nil)
			if err != nil {
				t.Fatal(err)
			}
			pic := []byte("\xff\xd8\xff\xe0 a small jpeg")
			g := f.AddAttachment("image/jpeg", pic)
			f.FailDownloads(c.fails...)
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			rc, mt, err := p.Fetch(ctx, &eventsv1.Attachment{Kind: eventsv1.AttachmentKind_ATTACHMENT_KIND_IMAGE, PlatformFileId: g})
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
			if _, _, n, _ := f.Counts(""); n != c.downloads {
				t.Errorf("%d downloads served, want %d", n, c.downloads)
			}
			// A final answer is not asked again: what follows it in the
			// fake's queue is left.
			if left := f.DownloadFailuresLeft(); left != c.left {
				t.Errorf("%d download failures left, want %d", left, c.left)
			}
		})
	}
}
