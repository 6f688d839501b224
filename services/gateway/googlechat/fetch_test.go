package googlechat

import (
	"context"
	"io"
	"net/http"
	"testing"
	"time"

	eventsv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/events/v1"
	"github.com/switchboard-chat/switchboard/services/gateway/googlechat/googlechatfake"
)

// An attachment media.download answers 429 (the Chat API's quota) or a
// 5xx for is asked again, after the Retry-After it names, else 1.5 s
// then 3 s, three attempts in all: before, the first such answer lost
// the file to the turn. A 404 or 403 is final, and a wait longer than
// the fetch's bound fails at once.
func TestFetchRetries(t *testing.T) {
	t.Parallel()
	rateLimited := googlechatfake.Failure{Status: http.StatusTooManyRequests, RetryAfter: 1}
	for _, tc := range []struct {
		name  string
		fails []googlechatfake.Failure
		// requests is how many downloads the fetch asks for; kept: the
		// file is downloaded.
		requests int
		kept     bool
	}{
		{name: "429 with Retry-After", fails: []googlechatfake.Failure{rateLimited}, requests: 2, kept: true},
		{name: "503", fails: []googlechatfake.Failure{{Status: http.StatusServiceUnavailable}}, requests: 2, kept: true},
		{name: "three failures", fails: []googlechatfake.Failure{rateLimited, {Status: http.StatusInternalServerError}, rateLimited}, requests: 3},
		{name: "404 is final", fails: []googlechatfake.Failure{{Status: http.StatusNotFound}}, requests: 1},
		{name: "403 is final", fails: []googlechatfake.Failure{{Status: http.StatusForbidden}}, requests: 1},
		{name: "a wait beyond the bound", fails: []googlechatfake.Failure{{Status: http.StatusTooManyRequests, RetryAfter: 120}}, requests: 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f, p := newPlatform(t)
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			ref := f.AddFile([]byte("pixels"), "image/png")
			f.FailDownloads(tc.fails...)
			start := time.Now()
			rc, _, err := p.Fetch(ctx, &eventsv1.Attachment{PlatformFileId: ref})
			if n := f.Downloads(); n != tc.requests {
				t.Errorf("%d downloads, want %d", n, tc.requests)
			}
			if !tc.kept {
				if err == nil {
					_ = rc.Close()
					t.Fatal("downloaded, want a failure")
				}
				if d := time.Since(start); d > 10*time.Second {
					t.Errorf("failed after %s, want at once past the bound", d)
				}
				return
			}
			if err != nil {
				t.Fatalf("fetch: %v, want the file", err)
			}
			defer func() { _ = rc.Close() }()
			if got, err := io.ReadAll(rc); err != nil || string(got) != "pixels" {
				t.Fatalf("read %q (%v), want the file's bytes", got, err)
			}
		})
	}
}
