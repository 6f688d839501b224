package worker

import (
	"context"
	"strings"

	"github.com/switchboard-chat/switchboard/pkg/attachment"
	eventsv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/events/v1"
	"github.com/switchboard-chat/switchboard/pkg/llm"
)

// maxPictures bounds the pictures of one message shown to the model (each
// up to agent.max_image_bytes, sent again with every model call of the
// turn).
const maxPictures = 8

// mediaSource reads the attachments the gateways kept (attachment.Store).
type mediaSource interface {
	Get(ctx context.Context, ref string, limit int64) ([]byte, string, error)
	Head(ctx context.Context, ref string, n int64) ([]byte, int64, string, error)
}

// attachImages gives the turn's input messages their pictures, read again
// for every attempt (they are not stored with the transcript, whose text
// names them). A picture that cannot be read is only named: the turn goes
// on without it. It returns errFetchLater when a gateway could not be
// asked (fetchAttachments).
func (r *turnRun) attachImages(ctx context.Context, ls *loopState) error {
	if r.s.media == nil || r.s.cfg.Agent.Images == ImagesOff {
		return nil
	}
	if _, ok := transcriptCommandOf(r.req); ok {
		return nil
	}
	// The steps begin gave the inputs: each input's context messages,
	// then its own.
	step := 0
	for _, in := range r.req.GetInputs() {
		for _, c := range in.GetContext() {
			if c.GetRole() == llm.RoleUser || c.GetRole() == llm.RoleAssistant {
				step++
			}
		}
		// A resumed turn's first attempt may have fetched them elsewhere.
		if err := r.fetchAttachments(ctx, in, isPicture); err != nil {
			return err
		}
		if images := r.loadImages(ctx, in); len(images) > 0 {
			for i := range ls.turn {
				if m := &ls.turn[i]; m.Step == step && m.Role == llm.RoleUser {
					m.Images = images
				}
			}
		}
		step++
	}
	return nil
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
		if ref := a.GetBytesRef(); ref != "" {
			data, mime, err := r.s.media.Get(ctx, ref, r.s.cfg.Agent.MaxImageBytes)
			if err != nil {
				r.log.Warn("picture not shown to the model", "ref", ref, "err", err)
				continue
			}
			if a.GetMimeType() != "" {
				mime = a.GetMimeType()
			}
			mime, _, _ = strings.Cut(strings.ToLower(strings.TrimSpace(mime)), ";")
			if mime == "image/jpg" {
				mime = "image/jpeg"
			}
			if !attachment.IsImageType(mime) {
				r.log.Warn("picture not shown to the model: a format the providers do not take", "ref", ref, "mime", mime)
				continue
			}
			out = append(out, llm.Image{MIME: mime, Data: data})
			continue
		}
		u := a.GetUrl()
		if in.GetSource().GetPlatform() == "api" && (strings.HasPrefix(u, "https://") || strings.HasPrefix(u, "http://")) {
			out = append(out, llm.Image{URL: u})
		}
	}
	return out
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
