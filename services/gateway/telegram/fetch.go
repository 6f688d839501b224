package telegram

import (
	"context"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/go-telegram/bot"
	"github.com/go-telegram/bot/models"

	"github.com/switchboard-chat/switchboard/pkg/attachment"
	eventsv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/events/v1"
	"github.com/switchboard-chat/switchboard/pkg/platform"
)

var _ platform.Fetcher = (*Platform)(nil)

// ErrDownload is a file download Telegram answered with a status other
// than 200 (the last, after any retries).
var ErrDownload = errors.New("telegram file download failed")

// Fetch downloads a user's attachment through the Bot API when a turn
// asks for it (the Runner serves the workers' fetch requests on every
// replica, not as it publishes the message): getFile turns its file_id
// into a file_path, valid for an hour, and the bytes are at
// <api base>/file/bot<token>/<file_path>. That URL holds the bot token,
// so it never appears in a log or an error. Telegram hands bots files of
// up to 20 MB; getFile refuses larger ones ("file is too big"). A
// download answered 429 (with the Retry-After the Bot API names) or a
// 5xx, or lost to the network, is asked again, three attempts in all
// within ctx, as Hermes retries media downloads (platform.Download);
// before, the first such answer lost the file to the turn. getFile is
// asked again alike (getFileRetry): before, its flood wait lost the
// file before any download.
func (p *Platform) Fetch(ctx context.Context, a *eventsv1.Attachment) (io.ReadCloser, string, error) {
	if a.GetPlatformFileId() == "" {
		return nil, "", platform.ErrNotFetched
	}
	f, err := platform.Retried(ctx, func(ctx context.Context) (*models.File, error) {
		return p.api.GetFile(ctx, &bot.GetFileParams{FileID: a.GetPlatformFileId()})
	}, getFileRetry)
	if err != nil {
		if errors.Is(err, bot.ErrorBadRequest) && strings.Contains(err.Error(), "file is too big") {
			// Over the Bot API's 20 MB: the user is told it is too large.
			return nil, "", fmt.Errorf("getFile: %w: %w", attachment.ErrTooLarge, err)
		}
		return nil, "", fmt.Errorf("getFile: %w", p.redact(err))
	}
	if f.FilePath == "" {
		return nil, "", errors.New("getFile: telegram answered without a file_path")
	}
	link := p.api.FileDownloadLink(f)
	resp, err := platform.Download(ctx, p.http, func(ctx context.Context) (*http.Request, error) {
		return http.NewRequestWithContext(ctx, http.MethodGet, link, nil)
	})
	if se := (*platform.StatusError)(nil); errors.As(err, &se) {
		return nil, "", fmt.Errorf("%w: %w", ErrDownload, err)
	}
	if err != nil {
		return nil, "", fmt.Errorf("download file: %w", p.redactURL(err))
	}
	return resp.Body, fetchedType(a, resp.Header.Get("Content-Type")), nil
}

// getFileRetry reads getFile's failure err, its try-th, as Download
// reads a download's: a 429 (Telegram's flood wait, "Too Many Requests:
// retry after N") is asked again after its parameters.retry_after, a 5xx
// or the network's failure after 1.5 s then 3 s (platform.Retried bounds
// the attempts and the waits by the fetch's ctx). Telegram's refusals
// stand: an unknown file_id or a file too big (400), 401, 403, 404.
func getFileRetry(err error, try int) (time.Duration, bool) {
	var tmr *bot.TooManyRequestsError
	switch {
	case errors.As(err, &tmr) && tmr.RetryAfter > 0:
		return secondsDur(tmr.RetryAfter), true
	case refusal(err):
		return 0, false
	}
	return platform.DownloadBackoff(try), true
}

// fetchedType is the media type of a downloaded attachment: Telegram
// recompresses every photo to JPEG, documents keep the type the sender's
// client declared, and the file server's own Content-Type, which is
// mostly application/octet-stream, is the last resort.
func fetchedType(a *eventsv1.Attachment, contentType string) string {
	if a.GetKind() == eventsv1.AttachmentKind_ATTACHMENT_KIND_IMAGE {
		return "image/jpeg"
	}
	if a.GetMimeType() != "" {
		return a.GetMimeType()
	}
	mt, _, err := mime.ParseMediaType(contentType)
	if err != nil || mt == "application/octet-stream" {
		return ""
	}
	return mt
}

// redactURL removes the bot token from the URL a *url.Error carries (the
// HTTP client's errors name the request URL), keeping the error's chain
// for errors.Is (context.DeadlineExceeded).
func (p *Platform) redactURL(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) && strings.Contains(ue.URL, p.cfg.BotToken) {
		ue.URL = strings.ReplaceAll(ue.URL, p.cfg.BotToken, "<token>")
	}
	return p.redact(err)
}
