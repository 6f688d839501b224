package bluebubbles

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"

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
// the password, as Hermes does on arrival.
func (p *Platform) Fetch(ctx context.Context, a *eventsv1.Attachment) (io.ReadCloser, string, error) {
	g := a.GetPlatformFileId()
	if g == "" || len(g) > 256 {
		return nil, "", platform.ErrNotFetched
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, p.api.url("/api/v1/attachment/"+url.PathEscape(g)+"/download"), nil)
	if err != nil {
		return nil, "", fmt.Errorf("attachment %s: %w", reason(g), err)
	}
	resp, err := p.api.hc.Do(req)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err // its URL carries the password
		}
		return nil, "", fmt.Errorf("download attachment %s: %w", reason(g), err)
	}
	if resp.StatusCode != http.StatusOK {
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 4<<10))
		_ = resp.Body.Close()
		return nil, "", fmt.Errorf("%w: attachment %s: HTTP %d", ErrDownload, reason(g), resp.StatusCode)
	}
	mt := baseType(resp.Header.Get("Content-Type"))
	if mt == "" || mt == "application/octet-stream" {
		mt = a.GetMimeType()
	}
	return resp.Body, mt, nil
}
