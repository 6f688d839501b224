package sms

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"

	eventsv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/events/v1"
	"github.com/switchboard-chat/switchboard/pkg/platform"
)

var _ platform.Fetcher = (*Platform)(nil)

// ErrDownload is a media download answered with a status other than 200.
var ErrDownload = errors.New("twilio media download failed")

// Fetch downloads an MMS's media when a turn asks for it (the Runner
// serves the workers' fetch requests on every replica, within
// attachments.max_bytes): a GET of its Twilio URL with the account's
// basic auth (needed when the account enforces HTTP auth on media),
// following Twilio's redirect to its storage, which gets no credentials.
// Only media URLs of the configured account are fetched.
func (p *Platform) Fetch(ctx context.Context, a *eventsv1.Attachment) (io.ReadCloser, string, error) {
	u := a.GetUrl()
	if !mediaURL(u, &p.cfg) {
		return nil, "", platform.ErrNotFetched
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, "", fmt.Errorf("media %s: %w", u, err)
	}
	req.SetBasicAuth(p.cfg.AccountSID, p.cfg.AuthToken)
	resp, err := p.twilio.hc.Do(req)
	if err != nil {
		return nil, "", fmt.Errorf("download media: %w", err)
	}
	if resp.StatusCode != http.StatusOK {
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 4<<10))
		_ = resp.Body.Close()
		return nil, "", fmt.Errorf("%w: HTTP %d", ErrDownload, resp.StatusCode)
	}
	return resp.Body, baseType(resp.Header.Get("Content-Type")), nil
}
