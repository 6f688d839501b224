package googlechat

import (
	"context"
	"io"
	"testing"

	eventsv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/events/v1"
	"github.com/switchboard-chat/switchboard/pkg/platform/platformtest"
	"github.com/switchboard-chat/switchboard/services/gateway/googlechat/googlechatfake"
)

// An attachment media.download answers 429 (the Chat API's quota) or a
// 5xx for is asked again, after the Retry-After it names, else 1.5 s
// then 3 s, three attempts in all: before, the first such answer lost
// the file to the turn. A 404 or 403 is final, and a wait longer than
// the fetch's bound fails at once.
func TestFetchRetries(t *testing.T) {
	t.Parallel()
	platformtest.DownloadRetries(t, func(t *testing.T) platformtest.Downloads {
		f, p := newPlatform(t)
		data := []byte("pixels")
		ref := f.AddFile(data, "image/png")
		return platformtest.Downloads{
			Fetch: func(ctx context.Context) (io.ReadCloser, error) {
				rc, _, err := p.Fetch(ctx, &eventsv1.Attachment{PlatformFileId: ref})
				return rc, err
			},
			Fail: func(fails ...platformtest.DownloadFailure) {
				for _, fl := range fails {
					f.FailDownloads(googlechatfake.Failure{Status: fl.Status, RetryAfter: fl.RetryAfter, Cut: fl.Cut})
				}
			},
			Count: f.Downloads,
			Data:  data,
		}
	})
}
