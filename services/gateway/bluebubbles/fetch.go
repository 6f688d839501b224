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
// the password, as Hermes does on arrival. A 429 or a 5xx (a busy or
// restarting server) is asked again (platform.Download).
func (p *Platform) Fetch(ctx context.Context, a *eventsv1.Attachment) (io.ReadCloser, string, error) {
	g := a.GetPlatformFileId()
	if g == "" || len(g) > 256 {
		return nil, "", platform.ErrNotFetched
	}
	resp, err := platform.Download(ctx, p.api.hc, func(ctx context.Context) (*http.Request, error) {
		return http.NewRequestWithContext(ctx, http.MethodGet, p.api.url("/api/v1/attachment/"+url.PathEscape(g)+"/download"), nil)
	})
	var (
		status *platform.StatusError
		ue     *url.Error
	)
	switch {
	case errors.As(err, &status):
		return nil, "", fmt.Errorf("%w: attachment %s: %w", ErrDownload, reason(g), err)
	case errors.As(err, &ue):
		// Without the URL: it carries the password.
		return nil, "", fmt.Errorf("download attachment %s: %w", reason(g), ue.Err)
	case err != nil:
		return nil, "", fmt.Errorf("attachment %s: %w", reason(g), err)
	}
	mt := baseType(resp.Header.Get("Content-Type"))
	if mt == "" || mt == "application/octet-stream" {
		mt = a.GetMimeType()
	}
	return resp.Body, mt, nil
}
