package whatsapp

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"

	deliveryv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/delivery/v1"
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
// 30 days. Either request answered 429, 5xx or one of Meta's transient
// or rate-limit codes is asked again (mediaGet).
func (p *Platform) Fetch(ctx context.Context, a *eventsv1.Attachment) (io.ReadCloser, string, error) {
	id := a.GetPlatformFileId()
	if !validMediaID(id) {
		return nil, "", platform.ErrNotFetched
	}
	resp, err := p.mediaGet(ctx, p.graph.base+"/"+id+"?phone_number_id="+url.QueryEscape(p.graph.phoneID))
	if err != nil {
		return nil, "", fmt.Errorf("media %s: %w", id, err)
	}
	var info mediaInfo
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxAnswerBytes))
	_ = resp.Body.Close()
	if err == nil {
		err = json.Unmarshal(body, &info)
	}
	if err != nil {
		return nil, "", fmt.Errorf("media %s: graph api answer: %w", id, err)
	}
	if info.URL == "" {
		return nil, "", fmt.Errorf("media %s: the graph api answered without a url", id)
	}
	// Meta's media URLs need the token as well.
	if resp, err = p.mediaGet(ctx, info.URL); err != nil {
		var ge *GraphError
		if errors.As(err, &ge) {
			return nil, "", fmt.Errorf("%w: media %s: HTTP %d", ErrDownload, id, ge.Status)
		}
		return nil, "", fmt.Errorf("download media %s: %w", id, err)
	}
	mt := baseType(info.MimeType)
	if mt == "" {
		mt = baseType(resp.Header.Get("Content-Type"))
	}
	return resp.Body, mt, nil
}

// mediaGet GETs u with the access token and returns its 200 answer. An
// answer that classify does not take for permanent (429, 5xx, Meta's
// rate-limit and transient codes such as 4, 80007, 130429 or 131000) is
// asked again as platform.Download asks a 429. Other answers are a
// *GraphError.
func (p *Platform) mediaGet(ctx context.Context, u string) (*http.Response, error) {
	resp, err := platform.DownloadReading(ctx, p.graph.hc, func(ctx context.Context) (*http.Request, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
		if err != nil {
			return nil, err
		}
		req.Header.Set("Authorization", "Bearer "+p.graph.token)
		return req, nil
	}, func(resp *http.Response, body []byte) (bool, error) {
		ge := decodeError(resp, body)
		return mediaRetried(ge), ge
	})
	var ue *url.Error
	if errors.As(err, &ue) {
		// Without the query: a media URL's is its signature.
		path := "?"
		if pu, perr := url.Parse(u); perr == nil {
			path = pu.Path
		}
		return nil, fmt.Errorf("graph api %s: %w", path, ue.Err)
	}
	return resp, err
}

// mediaRetried reports whether a media request answered ge is asked
// again: a rate limit or a failure classify does not call permanent.
func mediaRetried(ge *GraphError) bool {
	var se *platform.SendError
	if errors.As(classify(ge), &se) {
		return se.Class == deliveryv1.ErrorClass_ERROR_CLASS_RATE_LIMITED
	}
	return true
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
