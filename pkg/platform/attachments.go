package platform

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/protobuf/proto"

	"github.com/switchboard-chat/switchboard/pkg/attachment"
	"github.com/switchboard-chat/switchboard/pkg/bus"
	eventsv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/events/v1"
	"github.com/switchboard-chat/switchboard/pkg/panics"
)

// FetchTimeout bounds the download and storing of one attachment a worker
// asked for.
const FetchTimeout = time.Minute

// fetchReplyMargin: a download a worker asked for ends this long before
// the worker stops waiting for it (bus.RequestTimeout), so its answer
// reaches the worker in time, and nothing is stored once the worker went
// on without the file: a resumed attempt of the turn, which looks the
// file up in the store, would read what its stored message says the
// turn never had.
const fetchReplyMargin = 2 * time.Second

// fetchBudget is how long a download may take whose worker waits wait
// for its answer: wait less fetchReplyMargin, but at least half of wait,
// so a worker with little of its bound left (a merged turn's later
// attachments) still gets an answer, a file kept already found, instead
// of a download ended before it began.
func fetchBudget(wait time.Duration) time.Duration {
	return max(wait-fetchReplyMargin, wait/2)
}

// fetchConcurrency bounds the downloads one gateway replica runs at once.
const fetchConcurrency = 8

// Reasons an attachment is unavailable, as the model reads them.
const (
	unavailableFailed   = "it could not be downloaded"
	unavailableNotKept  = "it could not be kept"
	unavailableNoInline = "pictures sent inline are not accepted here"
)

// prepareAttachments readies ev's attachments for the bus without any
// download: an attachment declared larger than the store takes is marked
// so, and a data: URL (the API's inline pictures) is decoded into the
// store, or dropped with the reason when it cannot be kept, so an event
// never carries the bytes. Everything else is fetched when a turn needs it
// (serveFetch): a message that is refused, a duplicate or never answered
// downloads nothing, and the platform's connection is never held up by a
// download.
func (r *Runner) prepareAttachments(ctx context.Context, ev *eventsv1.MessageReceived) {
	for i, a := range ev.GetAttachments() {
		if r.attachments != nil && attachment.Wanted(a) && a.GetSizeBytes() > r.attachments.Config().MaxBytes {
			a.Unavailable = tooLarge(a.GetSizeBytes(), r.attachments.Config().MaxBytes)
			attachmentsTotal.WithLabelValues(r.name, "too_large").Inc()
			continue
		}
		if !strings.HasPrefix(a.GetUrl(), "data:") {
			continue
		}
		if r.attachments == nil || ev.GetEventId() == "" {
			a.Location, a.Unavailable = nil, unavailableNoInline
			continue
		}
		data, mime, _, err := attachment.ParseDataURL(a.GetUrl())
		if err == nil {
			if a.GetMimeType() == "" {
				a.MimeType = mime
			}
			name := attachment.Name(r.name, r.p.Account(), ev.GetEventId(), i)
			var n int64
			if n, err = r.attachments.Keep(ctx, name, a.GetMimeType(), bytes.NewReader(data)); err == nil {
				a.Location, a.SizeBytes = &eventsv1.Attachment_BytesRef{BytesRef: name}, n
				attachmentsTotal.WithLabelValues(r.name, "kept").Inc()
				continue
			}
		}
		r.log.Warn("inline attachment not kept", "msg_id", r.name+":"+r.p.Account()+":"+ev.GetEventId(), "index", i, "err", err)
		a.Location, a.Unavailable = nil, unavailableNotKept
		if errors.Is(err, attachment.ErrTooLarge) {
			a.Unavailable = tooLarge(0, r.attachments.Config().MaxBytes)
		}
		attachmentsTotal.WithLabelValues(r.name, "failed").Inc()
	}
}

// serveFetch answers a worker's AttachmentFetchRequested, after naming
// this replica to a worker that asked (its sending subject, which
// serveSending answers, tells the worker it is still there), within the
// time the worker waits, less fetchReplyMargin (bus.RequestWait); one
// that came after that wait ended downloads nothing.
func (r *Runner) serveFetch(ctx context.Context, m *nats.Msg) {
	ctx, span := otel.Tracer("github.com/switchboard-chat/switchboard/pkg/platform").Start(ctx, "platform fetch "+r.name,
		trace.WithSpanKind(trace.SpanKindServer))
	defer span.End()
	// The worker watches this replica while it downloads: killed, it is
	// found gone and another replica is asked (bus.RequestWatched).
	if err := bus.AckServedBy(m, r.opts.Instance); err != nil {
		r.log.Debug("name the fetch's replica", "err", err)
	}
	download := true
	if wait, ok := bus.RequestWait(m, time.Now()); ok && wait <= 0 {
		// The worker stopped waiting before the request came (it went out
		// late: sent while the worker's connection was down, or held up
		// on its way). A download would be read by no one and stored
		// after the worker's turn went on without the file, so the
		// platform is not called: the answer is what the worker makes of
		// a wait that ended (the file if the store holds it, else not
		// downloaded), should it still be listening.
		download = false
	} else if ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, fetchBudget(wait))
		defer cancel()
	}
	req := &eventsv1.AttachmentFetchRequested{}
	var reply *eventsv1.AttachmentFetched
	if err := proto.Unmarshal(m.Data, req); err != nil {
		r.log.Warn("malformed fetch request", "err", err)
		reply = &eventsv1.AttachmentFetched{Unavailable: unavailableFailed}
	} else {
		reply = r.fetchRecovered(ctx, req, download)
	}
	r.replyFetch(ctx, m, reply)
}

func (r *Runner) replyFetch(ctx context.Context, m *nats.Msg, reply *eventsv1.AttachmentFetched) {
	if m.Reply == "" {
		return
	}
	if err := bus.Reply(ctx, m, reply); err != nil {
		r.log.Warn("fetch reply failed", "err", err)
	}
}

// validName reports whether name is one attachment.Name makes.
func validName(name string) bool {
	hash, index, ok := strings.Cut(name, ".")
	if !ok || len(hash) != 40 || index == "" || len(index) > 4 {
		return false
	}
	for _, c := range hash {
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	_, err := strconv.Atoi(index)
	return err == nil
}

// FetchAttachment downloads req's attachment through the platform into
// the attachment store, unless it is kept already. A panic in the
// platform's download is recovered (logged, counted as component
// gateway_fetch) and answered like a failed download: the turn goes on
// without the file, told it could not be downloaded.
func (r *Runner) FetchAttachment(ctx context.Context, req *eventsv1.AttachmentFetchRequested) *eventsv1.AttachmentFetched {
	return r.fetchRecovered(ctx, req, true)
}

// fetchRecovered is FetchAttachment; without download, the attachment
// is only looked up in the store, the platform not called.
func (r *Runner) fetchRecovered(ctx context.Context, req *eventsv1.AttachmentFetchRequested, download bool) *eventsv1.AttachmentFetched {
	var reply *eventsv1.AttachmentFetched
	if err := panics.Recover(r.log, "gateway_fetch", func() error {
		reply = r.fetchAttachment(ctx, req, download)
		return nil
	}, "platform", r.name, "name", req.GetName()); err != nil {
		return &eventsv1.AttachmentFetched{Unavailable: unavailableFailed}
	}
	return reply
}

func (r *Runner) fetchAttachment(ctx context.Context, req *eventsv1.AttachmentFetchRequested, download bool) *eventsv1.AttachmentFetched {
	a, name := req.GetAttachment(), req.GetName()
	fetcher, _ := r.p.(Fetcher)
	switch {
	case r.attachments == nil || fetcher == nil || a == nil:
		return &eventsv1.AttachmentFetched{Unavailable: unavailableFailed}
	case !validName(name):
		r.log.Warn("fetch request with a bad name", "name_bytes", len(name))
		return &eventsv1.AttachmentFetched{Unavailable: unavailableFailed}
	case req.GetAccount() != r.p.Account():
		return &eventsv1.AttachmentFetched{Unavailable: unavailableFailed} // another bot's file
	}
	limit := r.attachments.Config().MaxBytes
	if a.GetSizeBytes() > limit {
		return &eventsv1.AttachmentFetched{Unavailable: tooLarge(a.GetSizeBytes(), limit)}
	}
	ctx, cancel := context.WithTimeout(ctx, FetchTimeout)
	defer cancel()
	mime := a.GetMimeType()
	if n, kept, ok := r.attachments.Stat(ctx, name); ok {
		// What the first download learnt of it, so every attempt of the
		// turn reads it alike.
		attachmentsTotal.WithLabelValues(r.name, "found").Inc()
		return &eventsv1.AttachmentFetched{BytesRef: name, SizeBytes: n, MimeType: cmp.Or(kept, mime)}
	}
	if !download {
		r.log.Info("fetch request came after its worker stopped waiting; not downloaded", "name", name)
		attachmentsTotal.WithLabelValues(r.name, "late").Inc()
		return &eventsv1.AttachmentFetched{Unavailable: unavailableFailed}
	}
	rc, fetchedMIME, err := fetcher.Fetch(ctx, a)
	var n int64
	if err == nil {
		if mime == "" || mime == "application/octet-stream" {
			mime = fetchedMIME
		}
		// Read within ctx: a platform's read that returns only after it
		// ended (its last bytes late, or a platform heedless of ctx) is
		// not stored, as the store's own check of ctx, between reads,
		// would let it be.
		n, err = r.attachments.Keep(ctx, name, mime, readWithin{ctx: ctx, r: rc})
		_ = rc.Close()
	}
	switch {
	case err == nil:
		attachmentsTotal.WithLabelValues(r.name, "kept").Inc()
		return &eventsv1.AttachmentFetched{BytesRef: name, SizeBytes: n, MimeType: mime}
	case errors.Is(err, attachment.ErrTooLarge):
		attachmentsTotal.WithLabelValues(r.name, "too_large").Inc()
		return &eventsv1.AttachmentFetched{Unavailable: tooLarge(0, limit)}
	case ctx.Err() != nil && errors.Is(context.Cause(ctx), context.Canceled):
		// The gateway is stopping: another replica, or this one once
		// back, downloads it when the worker asks again.
		return &eventsv1.AttachmentFetched{Retry: true}
	default:
		r.log.Warn("attachment not kept", "name", name, "err", err)
		attachmentsTotal.WithLabelValues(r.name, "failed").Inc()
		return &eventsv1.AttachmentFetched{Unavailable: unavailableFailed}
	}
}

// readWithin reads r while ctx lasts: a read that returns once ctx ended
// fails, its bytes dropped, so a download that did not end within its
// bound (the worker's wait, less fetchReplyMargin) is not stored (Keep
// stores nothing of a failed read), whereas the gateway answers it was
// not downloaded.
type readWithin struct {
	ctx context.Context
	r   io.Reader
}

func (w readWithin) Read(p []byte) (int, error) {
	n, err := w.r.Read(p)
	if cerr := w.ctx.Err(); cerr != nil {
		return 0, fmt.Errorf("download: %w", cerr)
	}
	return n, err
}

func tooLarge(size, limit int64) string {
	if size > 0 {
		return fmt.Sprintf("it is too large (%s, the limit is %s)", attachment.Size(size), attachment.Size(limit))
	}
	return fmt.Sprintf("it is too large (the limit is %s)", attachment.Size(limit))
}
