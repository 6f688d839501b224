package platformtest

import (
	"bytes"
	"context"
	"image"
	"image/color"
	"image/png"
	"math/rand/v2"
	"testing"

	"github.com/switchboard-chat/switchboard/pkg/attachment"
	"github.com/switchboard-chat/switchboard/pkg/bus"
	eventsv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/events/v1"
)

// Fetch asks platform's gateway for the attachment at index i of ev as a
// worker running ev's turn does: a request on gateway.<platform>.fetch,
// which any replica answers.
func Fetch(t testing.TB, ctx context.Context, b *bus.Bus, platform string, ev *eventsv1.MessageReceived, i int) *eventsv1.AttachmentFetched {
	t.Helper()
	account := ev.GetSource().GetAccount()
	req := &eventsv1.AttachmentFetchRequested{Attachment: ev.GetAttachments()[i], Account: account,
		Name: attachment.Name(platform, account, ev.GetEventId(), i)}
	resp := &eventsv1.AttachmentFetched{}
	if err := b.Request(ctx, b.Topology().FetchSubject(platform), req, resp); err != nil {
		t.Fatalf("fetch request: %v", err)
	}
	return resp
}

// NoisePNG encodes a w×h image of noise (which PNG cannot shrink), the
// same for the same size.
func NoisePNG(t testing.TB, w, h int) []byte {
	t.Helper()
	rnd := rand.New(rand.NewPCG(uint64(w), uint64(h)))
	img := image.NewRGBA(image.Rect(0, 0, w, h))
	for x := range w {
		for y := range h {
			img.Set(x, y, color.RGBA{R: uint8(rnd.Uint32()), G: uint8(rnd.Uint32()), B: uint8(rnd.Uint32()), A: 255})
		}
	}
	var buf bytes.Buffer
	if err := png.Encode(&buf, img); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}
