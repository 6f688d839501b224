package platform

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/switchboard-chat/switchboard/pkg/attachment"
	eventsv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/events/v1"
)

// fetchTimeout bounds the download and storing of one attachment.
const fetchTimeout = time.Minute

// publishReserve is what the attachments leave of a caller's deadline
// for the publish (Slack's Events API wants its answer within 3 s): a
// download that would use it up is abandoned, not the message.
const publishReserve = time.Second

// keepAttachments stores the bytes of ev's attachments that the agent
// reads (attachment.Wanted) and points them at the store: data: URLs are
// decoded, other attachments fetched through the platform (Fetcher). One
// that cannot be kept is published all the same, with the reason in
// Unavailable, so the agent can tell the user; the message itself is
// never held back by its attachments.
func (r *Runner) keepAttachments(ctx context.Context, ev *eventsv1.MessageReceived) {
	if r.attachments == nil || ev.GetEventId() == "" || len(ev.GetAttachments()) == 0 {
		return
	}
	fetcher, _ := r.p.(Fetcher)
	budget := ctx
	if dl, ok := ctx.Deadline(); ok {
		var cancel context.CancelFunc
		budget, cancel = context.WithDeadline(ctx, dl.Add(-publishReserve))
		defer cancel()
	}
	base := hashKey(r.name + ":" + r.p.Account() + ":" + ev.GetEventId())
	limit := r.attachments.Config().MaxBytes
	for i, a := range ev.GetAttachments() {
		if !attachment.Wanted(a) || a.GetBytesRef() != "" {
			continue
		}
		a.Unavailable = "" // an earlier attempt's reason (a redelivered event)
		if a.GetSizeBytes() > limit {
			a.Unavailable = tooLarge(a.GetSizeBytes(), limit)
			attachmentsTotal.WithLabelValues(r.name, "too_large").Inc()
			continue
		}
		name := base + "." + strconv.Itoa(i)
		err := r.keepOne(budget, fetcher, name, a)
		switch {
		case err == nil:
			attachmentsTotal.WithLabelValues(r.name, "kept").Inc()
		case errors.Is(err, ErrNotFetched):
			attachmentsTotal.WithLabelValues(r.name, "left").Inc()
		case errors.Is(err, attachment.ErrTooLarge):
			a.Unavailable = tooLarge(0, limit)
			attachmentsTotal.WithLabelValues(r.name, "too_large").Inc()
		default:
			r.log.Warn("attachment not kept", "event_id", ev.GetEventId(), "index", i, "err", err)
			a.Unavailable = "it could not be downloaded"
			if ctx.Err() == nil && budget.Err() != nil {
				a.Unavailable = "it could not be downloaded in time"
			}
			if ctx.Err() == nil {
				attachmentsTotal.WithLabelValues(r.name, "failed").Inc()
			}
		}
	}
}

// keepOne downloads a (or decodes its data: URL) into the store under name.
func (r *Runner) keepOne(ctx context.Context, fetcher Fetcher, name string, a *eventsv1.Attachment) error {
	ctx, cancel := context.WithTimeout(ctx, fetchTimeout)
	defer cancel()
	if n, ok := r.attachments.Stat(ctx, name); ok {
		// Kept for an earlier delivery of the event.
		a.Location = &eventsv1.Attachment_BytesRef{BytesRef: name}
		a.SizeBytes = n
		return nil
	}
	var (
		body io.Reader
		mime string
	)
	if data, dataMIME, ok, err := dataURL(a.GetUrl()); ok {
		if err != nil {
			return err
		}
		body, mime = bytes.NewReader(data), dataMIME
	} else {
		if fetcher == nil {
			return ErrNotFetched
		}
		rc, fetchedMIME, err := fetcher.Fetch(ctx, a)
		if err != nil {
			return err
		}
		defer func() { _ = rc.Close() }()
		body, mime = rc, fetchedMIME
	}
	if a.GetMimeType() == "" || a.GetMimeType() == "application/octet-stream" {
		a.MimeType = mime
	}
	n, err := r.attachments.Keep(ctx, name, a.GetMimeType(), body)
	if err != nil {
		return err
	}
	a.Location = &eventsv1.Attachment_BytesRef{BytesRef: name}
	a.SizeBytes = n
	return nil
}

// dataURL decodes a base64 data: URL. ok is false for any other URL.
func dataURL(s string) (data []byte, mime string, ok bool, err error) {
	rest, found := strings.CutPrefix(s, "data:")
	if !found {
		return nil, "", false, nil
	}
	meta, payload, found := strings.Cut(rest, ",")
	if !found {
		return nil, "", true, errors.New("data URL without a comma")
	}
	mime, params, _ := strings.Cut(meta, ";")
	if !strings.Contains(";"+params+";", ";base64;") {
		text, err := url.PathUnescape(payload)
		return []byte(text), mime, true, err
	}
	b, err := base64.StdEncoding.DecodeString(payload)
	if err != nil {
		b, err = base64.RawStdEncoding.DecodeString(payload)
	}
	if err != nil {
		return nil, "", true, fmt.Errorf("data URL: %w", err)
	}
	return b, mime, true, nil
}

func tooLarge(size, limit int64) string {
	if size > 0 {
		return fmt.Sprintf("it is too large (%s, the limit is %s)", humanBytes(size), humanBytes(limit))
	}
	return fmt.Sprintf("it is too large (the limit is %s)", humanBytes(limit))
}

// humanBytes writes n as KB or MB, one decimal.
func humanBytes(n int64) string {
	switch {
	case n >= 1<<20:
		return strconv.FormatFloat(float64(n)/(1<<20), 'f', 1, 64) + " MB"
	case n >= 1<<10:
		return strconv.FormatFloat(float64(n)/(1<<10), 'f', 1, 64) + " KB"
	}
	return strconv.FormatInt(n, 10) + " bytes"
}
