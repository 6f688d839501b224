package line

import (
	"context"
	"fmt"
	"io"
	"mime"
	"net/http"
	"strings"

	eventsv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/events/v1"
	"github.com/switchboard-chat/switchboard/pkg/platform"
)

var _ platform.Fetcher = (*Platform)(nil)

// Fetch downloads a media message's content when a turn asks for it
// (the Runner serves the workers' fetch requests on every replica,
// within attachments.max_bytes): GET
// /v2/bot/message/{messageId}/content on the content host with the
// channel's token. LINE keeps content for a limited time; a 404 then is
// a clear error. Only content URLs of the configured host are fetched
// with the token.
func (p *Platform) Fetch(ctx context.Context, a *eventsv1.Attachment) (io.ReadCloser, string, error) {
	u := a.GetUrl()
	id, ok := strings.CutPrefix(u, p.cfg.DataBaseURL+"/v2/bot/message/")
	id, ok2 := strings.CutSuffix(id, "/content")
	if !ok || !ok2 || !validMessageID(id) {
		return nil, "", platform.ErrNotFetched
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, "", fmt.Errorf("content %s: %w", id, err)
	}
	req.Header.Set("Authorization", "Bearer "+p.cfg.ChannelAccessToken)
	resp, err := p.api.hc.Do(req)
	if err != nil {
		return nil, "", fmt.Errorf("download line content: %w", err)
	}
	if resp.StatusCode != http.StatusOK {
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 4<<10))
		_ = resp.Body.Close()
		return nil, "", fmt.Errorf("%w: message %s: HTTP %d", ErrDownload, id, resp.StatusCode)
	}
	mt, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type"))
	return resp.Body, mt, nil
}
