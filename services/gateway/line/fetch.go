package line

import (
	"context"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"strings"
	"time"

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
// with the token. A video's or voice note's content is converted by
// LINE after the message arrives: until it is, its status (GET
// …/content/transcoding) is "processing" and a download is answered 202
// without the content, so Fetch waits for it (within ctx, the fetch's
// bound) instead of failing a turn that reads it at once; "failed" is an
// error.
func (p *Platform) Fetch(ctx context.Context, a *eventsv1.Attachment) (io.ReadCloser, string, error) {
	u := a.GetUrl()
	id, ok := strings.CutPrefix(u, p.cfg.DataBaseURL+"/v2/bot/message/")
	id, ok2 := strings.CutSuffix(id, "/content")
	if !ok || !ok2 || !validMessageID(id) {
		return nil, "", platform.ErrNotFetched
	}
	converted := a.GetKind() == eventsv1.AttachmentKind_ATTACHMENT_KIND_VIDEO || a.GetKind() == eventsv1.AttachmentKind_ATTACHMENT_KIND_AUDIO
	wait := preparePoll
	for {
		if converted {
			if err := p.prepared(ctx, u, id); err != nil {
				return nil, "", err
			}
		}
		rc, mt, err := p.download(ctx, u, id)
		if !errors.Is(err, errNotReady) {
			return rc, mt, err
		}
		// Answered 202: still being prepared; its status says when
		// (or that it failed).
		converted = true
		if err := sleep(ctx, wait); err != nil {
			return nil, "", fmt.Errorf("%w: message %s: content still being prepared: %w", ErrDownload, id, err)
		}
		wait = min(2*wait, maxPreparePoll)
	}
}

// The waits between checks of content LINE is preparing.
const (
	preparePoll    = 200 * time.Millisecond
	maxPreparePoll = 2 * time.Second
)

// errNotReady: the content host answered 202, the content not yet
// prepared.
var errNotReady = errors.New("line content not ready")

// prepared waits while LINE prepares message id's content (its
// transcoding status "processing"); "failed" is an error. A status LINE
// does not give (an error answer) lets the download decide.
func (p *Platform) prepared(ctx context.Context, u, id string) error {
	wait := preparePoll
	for {
		var st struct {
			Status string `json:"status"`
		}
		if err := p.api.get(ctx, u+"/transcoding", &st); err != nil {
			if ctx.Err() != nil {
				return fmt.Errorf("%w: message %s: %w", ErrDownload, id, err)
			}
			return nil
		}
		switch st.Status {
		case "processing":
		case "failed":
			return fmt.Errorf("%w: message %s: line could not prepare its content", ErrDownload, id)
		default:
			return nil
		}
		if err := sleep(ctx, wait); err != nil {
			return fmt.Errorf("%w: message %s: content still being prepared: %w", ErrDownload, id, err)
		}
		wait = min(2*wait, maxPreparePoll)
	}
}

// download GETs the content: errNotReady for a 202. A 429 or a 5xx is
// asked again, three attempts in all within ctx, as Hermes retries
// media downloads (platform.Download); before, the first such answer
// lost the file to the turn.
func (p *Platform) download(ctx context.Context, u, id string) (io.ReadCloser, string, error) {
	resp, err := platform.Download(ctx, p.api.hc, func(ctx context.Context) (*http.Request, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
		if err != nil {
			return nil, fmt.Errorf("content %s: %w", id, err)
		}
		req.Header.Set("Authorization", "Bearer "+p.cfg.ChannelAccessToken)
		return req, nil
	})
	if se := (*platform.StatusError)(nil); errors.As(err, &se) {
		if se.Code == http.StatusAccepted {
			return nil, "", errNotReady
		}
		return nil, "", fmt.Errorf("%w: message %s: %w", ErrDownload, id, err)
	}
	if err != nil {
		return nil, "", fmt.Errorf("download line content: %w", err)
	}
	mt, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type"))
	return resp.Body, mt, nil
}

// sleep waits d, or until ctx ends (its error).
func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
