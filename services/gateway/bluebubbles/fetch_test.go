package bluebubbles

import (
	"context"
	"io"
	"net/http"
	"testing"

	eventsv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/events/v1"
	"github.com/switchboard-chat/switchboard/pkg/platform/platformtest"
	"github.com/switchboard-chat/switchboard/services/gateway/bluebubbles/bbfake"
)

// An attachment download the server answers 429 or 5xx is asked again,
// after its Retry-After, else 1.5 s then 3 s, three attempts in all; a
// 404 or another refusal is final at once, and a wait longer than the
// fetch's bound fails at once.
func TestFetchRetried(t *testing.T) {
	t.Parallel()
	platformtest.DownloadRetries(t, func(t *testing.T) platformtest.Downloads {
		f := bbfake.New(t)
		p, err := NewPlatform(testConfig(f), nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		pic := []byte("\xff\xd8\xff\xe0 a small jpeg")
		g := f.AddAttachment("image/jpeg", pic)
		injected := 0
		return platformtest.Downloads{
			Fetch: func(ctx context.Context) (io.ReadCloser, error) {
				rc, mt, err := p.Fetch(ctx, &eventsv1.Attachment{Kind: eventsv1.AttachmentKind_ATTACHMENT_KIND_IMAGE, PlatformFileId: g})
				if err == nil && mt != "image/jpeg" {
					t.Errorf("fetched as %q, want image/jpeg", mt)
				}
				return rc, err
			},
			Fail: func(fails ...platformtest.DownloadFailure) {
				for _, fl := range fails {
					f.FailDownloads(bbfake.Failure{Status: fl.Status, Message: http.StatusText(fl.Status), RetryAfter: fl.RetryAfter, Cut: fl.Cut})
				}
				injected += len(fails)
			},
			// The fake counts the downloads it served; the refused ones
			// are the failures a download reached.
			Count: func() int {
				_, _, served, _ := f.Counts("")
				return served + injected - f.DownloadFailuresLeft()
			},
			Data: pic,
		}
	})
}
