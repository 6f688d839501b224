package whatsapp

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

// ErrDownload is a media download answered with a status other than 200.
var ErrDownload = errors.New("whatsapp media download failed")

// mediaInfo is the Graph API's answer to GET /{media-id}.
type mediaInfo struct {
	URL      string `json:"url"`
	MimeType string `json:"mime_type"`
}

// Fetch downloads a user's media when a turn asks for it (the Runner
// serves the workers' fetch requests on every replica, within
// attachments.max_bytes): GET /{media-id} answers a short-lived URL, whose
// bytes are fetched with the access token too. Media ids stay valid for
// 30 days.
func (p *Platform) Fetch(ctx context.Context, a *eventsv1.Attachment) (io.ReadCloser, string, error) {
	id := a.GetPlatformFileId()
	if !validMediaID(id) {
		return nil, "", platform.ErrNotFetched
	}
	var info mediaInfo
	u := p.graph.base + "/" + id + "?phone_number_id=" + url.QueryEscape(p.graph.phoneID)
	if err := p.graph.get(ctx, u, &info); err != nil {
		return nil, "", fmt.Errorf("media %s: %w", id, err)
	}
	if info.URL == "" {
		return nil, "", fmt.Errorf("media %s: the graph api answered without a url", id)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, info.URL, nil)
	if err != nil {
		return nil, "", fmt.Errorf("media %s: %w", id, err)
	}
	// Meta's media URLs need the token as well.
	req.Header.Set("Authorization", "Bearer "+p.graph.token)
	resp, err := p.graph.hc.Do(req)
	if err != nil {
		return nil, "", fmt.Errorf("download media %s: %w", id, err)
	}
	if resp.StatusCode != http.StatusOK {
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 4<<10))
		_ = resp.Body.Close()
		return nil, "", fmt.Errorf("%w: media %s: HTTP %d", ErrDownload, id, resp.StatusCode)
	}
	mt := baseType(info.MimeType)
	if mt == "" {
		mt = baseType(resp.Header.Get("Content-Type"))
	}
	return resp.Body, mt, nil
}

// validMediaID reports whether id can go into a Graph API path as it is
// (Meta's media ids are digits; a hostile notification could carry
// anything).
func validMediaID(id string) bool {
	if id == "" || len(id) > 128 {
		return false
	}
	for _, c := range id {
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c == '_' || c == '-' || c == '.') {
			return false
		}
	}
	return id != "." && id != ".."
}
