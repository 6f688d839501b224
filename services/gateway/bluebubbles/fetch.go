package bluebubbles

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"time"

	eventsv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/events/v1"
	"github.com/switchboard-chat/switchboard/pkg/platform"
)

var _ platform.Fetcher = (*Platform)(nil)

// ErrDownload is an attachment download answered with a status other
// than 200.
var ErrDownload = errors.New("bluebubbles attachment download failed")

// Fetch downloads an attachment when a turn asks for it (the Runner
// serves the workers' fetch requests on every replica, within
// attachments.max_bytes): GET /api/v1/attachment/{guid}/download with
// the password, as Hermes does on arrival. A 429 or a 5xx (a busy or
// restarting server) is asked again after its Retry-After, else 1.5 s
// then 3 s, three attempts in all, within ctx (the fetch's bound): a
// wait that would outlast it fails at once.
func (p *Platform) Fetch(ctx context.Context, a *eventsv1.Attachment) (io.ReadCloser, string, error) {
	g := a.GetPlatformFileId()
	if g == "" || len(g) > 256 {
		return nil, "", platform.ErrNotFetched
	}
	var resp *http.Response
	drain := func() {
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 4<<10))
		_ = resp.Body.Close()
	}
	for try := 1; ; try++ {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, p.api.url("/api/v1/attachment/"+url.PathEscape(g)+"/download"), nil)
		if err != nil {
			return nil, "", fmt.Errorf("attachment %s: %w", reason(g), err)
		}
		if resp, err = p.api.hc.Do(req); err != nil {
			var ue *url.Error
			if errors.As(err, &ue) {
				err = ue.Err // its URL carries the password
			}
			return nil, "", fmt.Errorf("download attachment %s: %w", reason(g), err)
		}
		if resp.StatusCode == http.StatusOK {
			break
		}
		drain()
		status := fmt.Errorf("%w: attachment %s: HTTP %d", ErrDownload, reason(g), resp.StatusCode)
		if !(resp.StatusCode == http.StatusTooManyRequests || resp.StatusCode >= 500) || try == downloadTries {
			return nil, "", status
		}
		wait := time.Duration(try) * 1500 * time.Millisecond
		if d, ok := platform.ParseRetryAfter(resp.Header.Get("Retry-After"), time.Now()); ok {
			wait = d
		}
		if d, ok := ctx.Deadline(); ok && time.Until(d) < wait {
			return nil, "", fmt.Errorf("%w, asked to wait %s", status, wait)
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, "", fmt.Errorf("%w: %w", status, ctx.Err())
		case <-t.C:
		}
	}
	mt := baseType(resp.Header.Get("Content-Type"))
	if mt == "" || mt == "application/octet-stream" {
		mt = a.GetMimeType()
	}
	return resp.Body, mt, nil
}

// downloadTries is how many times Fetch asks for an attachment the
// server answers 429 or 5xx.
const downloadTries = 3
