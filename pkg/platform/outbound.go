package platform

import (
	"context"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/switchboard-chat/switchboard/pkg/attachment"
	"github.com/switchboard-chat/switchboard/pkg/egress"
	deliveryv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/delivery/v1"
	eventsv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/events/v1"
)

// DownloadTimeout bounds one download of an attachment to send, every
// attempt of it (Download) and the waits between them.
const DownloadTimeout = time.Minute

// Downloader downloads the http(s) URLs of attachments to send. The URL
// is the agent's (a remote agent's reply, a proactive send), so it
// reaches only public addresses unless attachments.urls allows more
// (egress), and each download takes at most DownloadTimeout, its
// attempts included (Download).
type Downloader struct{ hc *http.Client }

// NewDownloader is a Downloader with cfg's allowances.
func NewDownloader(cfg egress.Config) *Downloader {
	return &Downloader{hc: egress.Client(cfg, DownloadTimeout)}
}

var (
	publicOnlyOnce sync.Once
	publicOnly     *Downloader
)

// client is d's client; a nil Downloader reaches only public addresses.
func (d *Downloader) client() *http.Client {
	if d != nil {
		return d.hc
	}
	publicOnlyOnce.Do(func() { publicOnly = NewDownloader(egress.Config{}) })
	return publicOnly.hc
}

// ReadOutbound reads what an attachment to send holds, for gateways
// that upload files themselves: an inline data: URL, the kept bytes
// (bytes_ref) from store (nil: the store is off), or an http(s) URL
// downloaded with dl (nil: public addresses only); at most max bytes.
// The media type is the attachment's, else its source's, else sniffed
// from the bytes, without parameters. What a retry cannot mend (a bad
// URL, a 4xx, too large, no source, an address attachments.urls does
// not allow) is Permanent; a download's error never carries its URL,
// which may hold a signature.
func ReadOutbound(ctx context.Context, a *eventsv1.Attachment, store *attachment.Store, dl *Downloader, max int64) ([]byte, string, error) {
	return readOutbound(ctx, a, store, dl.client(), max)
}

func readOutbound(ctx context.Context, a *eventsv1.Attachment, store *attachment.Store, hc *http.Client, max int64) ([]byte, string, error) {
	var data []byte
	var found string
	switch u := a.GetUrl(); {
	case strings.HasPrefix(u, "data:"):
		b, mt, _, err := attachment.ParseDataURL(u)
		if err != nil {
			return nil, "", Permanent(fmt.Errorf("attachment data: URL: %w", err))
		}
		data, found = b, mt
	case a.GetBytesRef() != "":
		if store == nil {
			return nil, "", Permanent(errors.New("attachment store is off"))
		}
		b, mt, err := store.Get(ctx, a.GetBytesRef(), max)
		if err != nil {
			return nil, "", fmt.Errorf("read kept attachment: %w", err)
		}
		data, found = b, mt
	case strings.HasPrefix(u, "https://") || strings.HasPrefix(u, "http://"):
		b, mt, err := download(ctx, hc, u, max)
		if err != nil {
			return nil, "", err
		}
		data, found = b, mt
	default:
		return nil, "", Permanent(errors.New("attachment has no data: URL, http(s) URL or kept bytes"))
	}
	if int64(len(data)) > max {
		return nil, "", Permanent(fmt.Errorf("attachment larger than %d bytes", max))
	}
	mimeType := a.GetMimeType()
	if mimeType == "" {
		mimeType = found
	}
	if mimeType == "" {
		mimeType = http.DetectContentType(data)
	}
	mimeType, _, _ = strings.Cut(mimeType, ";")
	return data, strings.TrimSpace(mimeType), nil
}

// outboundUserAgent names the client that fetches an attachment's URL
// as a browser-compatible one, as Hermes's media fetches do ("Mozilla/5.0
// (compatible; HermesAgent/1.0)"): some file hosts refuse a request
// named as an HTTP library (Go's default, "Go-http-client/1.1").
const outboundUserAgent = "Mozilla/5.0 (compatible; Switchboard/1.0)"

// download fetches u, at most max bytes (one more tells it is larger),
// within DownloadTimeout: platform.Download's attempts, as a received
// file's (a 429 or a 5xx, a connection lost, a body cut off mid-file
// asked again, three attempts in all), as outboundUserAgent. Its error
// does not name u.
func download(ctx context.Context, hc *http.Client, u string, max int64) ([]byte, string, error) {
	if _, err := http.NewRequest(http.MethodGet, u, nil); err != nil {
		return nil, "", Permanent(errors.New("attachment URL is not a valid URL"))
	}
	ctx, cancel := context.WithTimeout(ctx, DownloadTimeout)
	defer cancel()
	resp, err := Download(ctx, hc, func(ctx context.Context) (*http.Request, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
		if err == nil {
			req.Header.Set("User-Agent", outboundUserAgent)
		}
		return req, err
	})
	var se *StatusError
	switch {
	case errors.Is(err, egress.ErrRefused):
		// An internal address: no retry reaches it.
		return nil, "", Permanent(fmt.Errorf("download attachment: %w (allow it with attachments.urls.allow_hosts or allow_private)", err))
	case errors.As(err, &se) && se.Code >= 400 && se.Code < 500 && se.Code != http.StatusTooManyRequests:
		return nil, "", Permanent(fmt.Errorf("attachment: %w", err))
	case se != nil && se.Wait > 0:
		// The file's host asked for a wait past the bound: delivery's
		// next attempt comes after it, not at its own backoff's pace
		// into the same refusal.
		return nil, "", &SendError{Class: deliveryv1.ErrorClass_ERROR_CLASS_RETRYABLE, RetryAfter: se.Wait, Err: fmt.Errorf("attachment: %w", err)}
	case se != nil:
		return nil, "", fmt.Errorf("attachment: %w", err)
	case err != nil:
		return nil, "", fmt.Errorf("download attachment: %w", err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, max+1))
	if err != nil {
		return nil, "", fmt.Errorf("download attachment: %w", err)
	}
	mt := resp.Header.Get("Content-Type")
	if parsed, _, err := mime.ParseMediaType(mt); err == nil {
		mt = parsed
	}
	return data, mt, nil
}

// LinkedText is the message a send becomes on a platform that posts an
// attachment's http(s) URL as a link (it shows the picture or a preview)
// and uploads only bytes: the send's text, each attachment's caption
// that is not that text, and each URL, one per line. files are the
// indexes of the attachments left to upload (a data: URL, or bytes kept
// in the attachment store).
func LinkedText(req *deliveryv1.SendRequested) (text string, files []int) {
	var lines []string
	if req.GetText() != "" {
		lines = append(lines, req.GetText())
	}
	for i, a := range req.GetAttachments() {
		if c := strings.TrimSpace(a.GetCaption()); c != "" && c != req.GetText() {
			lines = append(lines, c)
		}
		if u := a.GetUrl(); strings.HasPrefix(u, "https://") || strings.HasPrefix(u, "http://") {
			lines = append(lines, u)
			continue
		}
		files = append(files, i)
	}
	return strings.Join(lines, "\n"), files
}

// FileName is the name an uploaded attachment goes by: its own, else
// "file" with the usual extension for its media type (fileExts), else
// the first the host's media types give. Discord, Slack and the chat
// apps decide by the extension whether a file shows inline (a picture,
// a player), so it must be the one they know: mime.ExtensionsByType
// lists a type's extensions sorted, from the host's mime.types, where
// the first is often a rare one (Debian: .jfif for JPEG, .mp1 for MP3,
// .brf for plain text), and a distroless image has no file at all (no
// audio type then).
func FileName(a *eventsv1.Attachment, mimeType string) string {
	if n := a.GetFileName(); n != "" {
		return n
	}
	mt, _, _ := strings.Cut(strings.ToLower(mimeType), ";")
	mt = strings.TrimSpace(mt)
	if ext, ok := fileExts[mt]; ok {
		return "file" + ext
	}
	if exts, _ := mime.ExtensionsByType(mt); len(exts) > 0 {
		return "file" + exts[0]
	}
	return "file"
}

// fileExts are the usual extensions of the media types attachments to
// send come in.
var fileExts = map[string]string{
	"image/jpeg": ".jpg", "image/jpg": ".jpg", "image/png": ".png", "image/gif": ".gif", "image/webp": ".webp",
	"image/svg+xml": ".svg", "image/heic": ".heic", "image/avif": ".avif", "image/bmp": ".bmp", "image/tiff": ".tiff",
	"audio/mpeg": ".mp3", "audio/mp3": ".mp3", "audio/ogg": ".ogg", "audio/opus": ".opus", "audio/mp4": ".m4a",
	"audio/m4a": ".m4a", "audio/x-m4a": ".m4a", "audio/aac": ".aac", "audio/wav": ".wav", "audio/x-wav": ".wav",
	"audio/wave": ".wav", "audio/webm": ".webm", "audio/flac": ".flac", "audio/x-flac": ".flac",
	"video/mp4": ".mp4", "video/webm": ".webm", "video/quicktime": ".mov", "video/mpeg": ".mpeg",
	"text/plain": ".txt", "text/markdown": ".md", "text/csv": ".csv", "text/html": ".html", "text/css": ".css",
	"text/calendar": ".ics", "application/json": ".json", "application/pdf": ".pdf", "application/zip": ".zip",
	"application/xml": ".xml", "text/xml": ".xml", "application/gzip": ".gz", "application/x-ndjson": ".jsonl",
	"application/vnd.openxmlformats-officedocument.wordprocessingml.document":   ".docx",
	"application/vnd.openxmlformats-officedocument.spreadsheetml.sheet":         ".xlsx",
	"application/vnd.openxmlformats-officedocument.presentationml.presentation": ".pptx",
}
