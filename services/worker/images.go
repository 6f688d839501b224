package worker

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/switchboard-chat/switchboard/pkg/attachment"
	eventsv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/events/v1"
	"github.com/switchboard-chat/switchboard/pkg/llm"
	"github.com/switchboard-chat/switchboard/pkg/picture"
)

// maxPictures bounds the pictures of one message shown to the model (each
// up to agent.max_image_bytes, sent again with every model call of the
// turn).
const maxPictures = 8

// fitsAtOnce bounds the pictures one worker process scales down at once:
// scaling a 12-megapixel photo holds about 30 MB and a core for a second,
// a 50-megapixel one up to a few hundred MB (picture.DefaultMaxPixels).
const fitsAtOnce = 1

// mediaSource reads the attachments the gateways kept, and keeps the
// pictures scaled down for the model next to them (attachment.Store).
type mediaSource interface {
	Get(ctx context.Context, ref string, limit int64) ([]byte, string, error)
	Reader(ctx context.Context, ref string, limit int64) (*attachment.Object, error)
	Head(ctx context.Context, ref string, n int64) ([]byte, int64, string, error)
	Info(ctx context.Context, ref string) (int64, string, error)
	Keep(ctx context.Context, name, mime string, r io.Reader) (int64, error)
}

// attachImages gives the turn's input messages their pictures, read again
// for every attempt (they are not stored with the transcript, whose text
// names them). A picture that cannot be read is only named: the turn goes
// on without it.
func (r *turnRun) attachImages(ctx context.Context, ls *loopState) {
	if r.s.media == nil || r.s.cfg.Agent.Images == ImagesOff {
		return
	}
	if _, ok := transcriptCommandOf(r.req); ok {
		return
	}
	steps := r.inputStepOf()
	for n, in := range r.req.GetInputs() {
		// A resumed turn's are found as its first attempt downloaded them.
		r.lookUpAttachments(ctx, n, isPicture)
		if images := r.loadImages(ctx, in); len(images) > 0 {
			for i := range ls.turn {
				if m := &ls.turn[i]; m.Step == steps[n] && m.Role == llm.RoleUser {
					m.Images = images
				}
			}
		}
	}
}

// loadImages reads in's pictures: the bytes a gateway kept, or a URL an
// API client gave, which the provider fetches as OpenAI's API does.
func (r *turnRun) loadImages(ctx context.Context, in *eventsv1.MessageReceived) []llm.Image {
	var out []llm.Image
	for _, a := range in.GetAttachments() {
		if !attachment.Wanted(a) || !isPicture(a) || a.GetUnavailable() != "" {
			continue
		}
		if len(out) == maxPictures {
			r.log.Warn("more pictures than the model is shown; the rest are only named", "max", maxPictures)
			break
		}
		if a.GetBytesRef() != "" {
			if img, err := r.picture(ctx, a); err == nil {
				// The detail an API client asked for goes with the picture
				// to the model, as Hermes passes it on.
				img.Detail = a.GetDetail()
				out = append(out, img)
			}
			continue
		}
		u := a.GetUrl()
		if in.GetSource().GetPlatform() == "api" && (strings.HasPrefix(u, "https://") || strings.HasPrefix(u, "http://")) {
			out = append(out, llm.Image{URL: u, Detail: a.GetDetail()})
		}
	}
	return out
}

// preparePictures readies in's pictures for the model as the turn begins,
// before its text is written: one that cannot be shown (too large to
// read, too many pixels, unreadable) is marked unavailable, so that the
// text names it with why. An external agent is shown none.
func (r *turnRun) preparePictures(ctx context.Context, in *eventsv1.MessageReceived) {
	if r.s.cfg.Agent.Images == ImagesOff || r.s.agent != nil {
		return
	}
	n := 0
	for _, a := range in.GetAttachments() {
		if !attachment.Wanted(a) || !isPicture(a) || a.GetUnavailable() != "" || a.GetBytesRef() == "" {
			continue
		}
		if n++; n > maxPictures {
			return
		}
		if _, err := r.picture(ctx, a); err != nil {
			a.Unavailable = unshownReason(err, r.s.cfg.Agent)
		}
	}
}

// shownPicture is a picture as the model is shown it, or why it is not.
type shownPicture struct {
	img llm.Image
	err error
}

// errPictureFormat: a picture in a format the providers do not take.
var errPictureFormat = errors.New("a picture format the model providers do not take")

// picture reads a kept picture for the model, once an attempt: as it is
// when it is within agent.max_image_bytes and agent.max_image_edge, else
// scaled down (fit); a BMP or TIFF, or an animated GIF's first frame,
// encoded again as a PNG or JPEG. The scaled-down copy is kept next to
// the picture, where the turn's later attempts find it.
func (r *turnRun) picture(ctx context.Context, a *eventsv1.Attachment) (llm.Image, error) {
	ref := a.GetBytesRef()
	if p, ok := r.pictures[ref]; ok {
		return p.img, p.err
	}
	img, err := r.readPicture(ctx, a)
	if err != nil {
		r.log.Warn("picture not shown to the model", "ref", ref, "err", err)
	}
	if r.pictures == nil {
		r.pictures = map[string]shownPicture{}
	}
	r.pictures[ref] = shownPicture{img: img, err: err}
	return img, err
}

// readPicture is picture, read: a copy an earlier attempt kept, or the
// picture as the gateway kept it, fitted.
func (r *turnRun) readPicture(ctx context.Context, a *eventsv1.Attachment) (llm.Image, error) {
	cfg := r.s.cfg.Agent
	lim := picture.Limits{MaxBytes: cfg.MaxImageBytes, MaxEdge: cfg.MaxImageEdge, MaxPixels: picture.DefaultMaxPixels}
	ref := a.GetBytesRef()
	fitted := fittedName(ref, lim)
	// An earlier attempt's copy is looked for only for a picture that
	// does not fit: most do, and need no second read.
	copied := func() (llm.Image, bool) {
		data, mime, err := r.s.media.Get(ctx, fitted, lim.MaxBytes)
		return llm.Image{MIME: mime, Data: data}, err == nil
	}
	tooLarge := a.GetSizeBytes() > lim.MaxBytes // the size the gateway kept
	if tooLarge {
		if img, ok := copied(); ok {
			return img, nil
		}
	}
	data, mime, err := r.s.media.Get(ctx, ref, cfg.MaxImageSourceBytes)
	if err != nil {
		return llm.Image{}, err
	}
	h, err := picture.ReadHeader(data)
	switch {
	case err == nil && lim.Fits(h, len(data)):
		return llm.Image{MIME: h.MIME, Data: data}, nil // the bytes' own type, whatever the platform said
	case err != nil && int64(len(data)) <= lim.MaxBytes:
		// Bytes this worker cannot read, small enough to send: the
		// provider decides, as before pictures were scaled (a model that
		// refuses them answers from the text).
		mime = cmp.Or(a.GetMimeType(), mime)
		mime, _, _ = strings.Cut(strings.ToLower(strings.TrimSpace(mime)), ";")
		if mime == "image/jpg" {
			mime = "image/jpeg"
		}
		switch {
		case attachment.IsPictureType(mime) && !attachment.IsImageType(mime):
			return llm.Image{}, err // a BMP or TIFF is shown only as a PNG or JPEG it was made into
		case !attachment.IsImageType(mime):
			return llm.Image{}, fmt.Errorf("%w: %s", errPictureFormat, mime)
		}
		return llm.Image{MIME: mime, Data: data}, nil
	case err != nil:
		return llm.Image{}, err
	}
	if !tooLarge { // too large in pixels, or its size was not known
		if img, ok := copied(); ok {
			return img, nil
		}
	}
	out, mime, err := r.s.fit(ctx, data, lim)
	if err != nil {
		return llm.Image{}, err
	}
	r.log.Info("picture scaled down for the model", "ref", ref, "from_bytes", len(data), "bytes", len(out),
		"from_width", h.Width, "from_height", h.Height)
	if _, err := r.s.media.Keep(ctx, fitted, mime, bytes.NewReader(out)); err != nil {
		r.log.Warn("scaled-down picture not kept; a later attempt scales it again", "ref", ref, "err", err)
	}
	return llm.Image{MIME: mime, Data: out}, nil
}

// fittedName is where a picture scaled down to lim is kept, next to the
// original: other limits (a changed configuration) make another copy.
func fittedName(ref string, lim picture.Limits) string {
	return fmt.Sprintf("%s.fit-%d-%d", ref, lim.MaxEdge, lim.MaxBytes)
}

// fit scales a picture down (picture.Fit), one at a time in this process
// (fitsAtOnce), waiting its turn while ctx allows.
func (s *Service) fit(ctx context.Context, data []byte, lim picture.Limits) ([]byte, string, error) {
	select {
	case s.fitting <- struct{}{}:
	case <-ctx.Done():
		return nil, "", context.Cause(ctx)
	}
	defer func() { <-s.fitting }()
	return picture.Fit(data, lim)
}

// unshownReason is why a picture is not shown, as the model reads it
// after its name; empty when the reason may not last (the store did not
// answer), or the picture expired.
func unshownReason(err error, cfg AgentConfig) string {
	var px *picture.TooManyPixelsError
	switch {
	case errors.Is(err, attachment.ErrTooLarge):
		return fmt.Sprintf("it is too large to be read (over %s)", attachment.Size(cfg.MaxImageSourceBytes))
	case errors.As(err, &px): // the bound of its format: a TIFF's is lower
		return fmt.Sprintf("it has too many pixels to be read (over %s megapixels)",
			strconv.FormatFloat(float64(px.Limit)/1e6, 'f', -1, 64))
	case errors.Is(err, picture.ErrTooLarge):
		return "it could not be made small enough to be shown"
	case errors.Is(err, picture.ErrTruncated): // before ErrUnreadable, which it is
		return "it is cut short: its data is too short for the size it claims"
	case errors.Is(err, picture.ErrUnreadable):
		return "it could not be read as a picture"
	case errors.Is(err, errPictureFormat):
		return "its format cannot be shown to the model"
	}
	return ""
}

// dropImages takes the pictures out of the turn, for a model that refuses
// them, and reports whether there were any.
func (ls *loopState) dropImages() bool {
	dropped := false
	for i := range ls.turn {
		if len(ls.turn[i].Images) > 0 {
			ls.turn[i].Images = nil
			dropped = true
		}
	}
	return dropped
}
