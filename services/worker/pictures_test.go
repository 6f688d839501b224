package worker_test

import (
	"bytes"
	"cmp"
	"context"
	"encoding/binary"
	"hash/crc32"
	"image"
	"image/color"
	"image/draw"
	"image/gif"
	"image/jpeg"
	"image/png"
	"math/rand/v2"
	"strings"
	"testing"

	"golang.org/x/image/bmp"
	"golang.org/x/image/tiff"

	"github.com/switchboard-chat/switchboard/pkg/attachment"
	"github.com/switchboard-chat/switchboard/pkg/fakellm"
	eventsv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/events/v1"
	turnsv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/turns/v1"
	"github.com/switchboard-chat/switchboard/services/worker"
)

// testPicture is a w×h picture: noisy ones compress badly.
func testPicture(w, h int, noisy bool) *image.RGBA {
	img := image.NewRGBA(image.Rect(0, 0, w, h))
	r := rand.New(rand.NewPCG(uint64(w), uint64(h)))
	for y := range h {
		for x := range w {
			c := color.RGBA{uint8(x), uint8(y), uint8(x + y), 255}
			if noisy {
				c.R, c.G, c.B = uint8(r.Uint32()), uint8(r.Uint32()), uint8(r.Uint32())
			}
			img.SetRGBA(x, y, c)
		}
	}
	return img
}

func pngOf(t *testing.T, img image.Image) []byte {
	t.Helper()
	var b bytes.Buffer
	if err := png.Encode(&b, img); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

func jpegOf(t *testing.T, img image.Image) []byte {
	t.Helper()
	var b bytes.Buffer
	if err := jpeg.Encode(&b, img, &jpeg.Options{Quality: 90}); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

func bmpOf(t *testing.T, img image.Image) []byte {
	t.Helper()
	var b bytes.Buffer
	if err := bmp.Encode(&b, img); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

func tiffOf(t *testing.T, img image.Image) []byte {
	t.Helper()
	var b bytes.Buffer
	if err := tiff.Encode(&b, img, &tiff.Options{Compression: tiff.Deflate}); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// animatedGIF is a w×h GIF of two frames, the first black, the second
// white.
func animatedGIF(t *testing.T, w, h int) []byte {
	t.Helper()
	g := &gif.GIF{Delay: []int{10, 10}}
	for _, c := range []color.Color{color.Black, color.White} {
		img := image.NewPaletted(image.Rect(0, 0, w, h), color.Palette{color.Black, color.White})
		draw.Draw(img, img.Bounds(), image.NewUniform(c), image.Point{}, draw.Src)
		g.Image = append(g.Image, img)
	}
	var b bytes.Buffer
	if err := gif.EncodeAll(&b, g); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// bmpBomb is a BMP's headers claiming w×h pixels, and nothing more.
func bmpBomb(w, h uint32) []byte {
	b := append([]byte("BM"), make([]byte, 52)...)
	binary.LittleEndian.PutUint32(b[10:], 54) // where the pixels would begin
	binary.LittleEndian.PutUint32(b[14:], 40) // BITMAPINFOHEADER
	binary.LittleEndian.PutUint32(b[18:], w)
	binary.LittleEndian.PutUint32(b[22:], h)
	binary.LittleEndian.PutUint16(b[26:], 1)  // planes
	binary.LittleEndian.PutUint16(b[28:], 24) // bits a pixel
	return b
}

// tiffBomb is a 1×1 TIFF whose directory claims w×h pixels.
func tiffBomb(t *testing.T, w, h uint16) []byte {
	t.Helper()
	b := tiffOf(t, testPicture(1, 1, false)) // little-endian, with SHORT sizes
	ifd := binary.LittleEndian.Uint32(b[4:])
	for i := range int(binary.LittleEndian.Uint16(b[ifd:])) {
		e := b[int(ifd)+2+12*i:]
		switch binary.LittleEndian.Uint16(e) {
		case 256: // ImageWidth
			binary.LittleEndian.PutUint16(e[8:], w)
		case 257, 278: // ImageLength, RowsPerStrip
			binary.LittleEndian.PutUint16(e[8:], h)
		}
	}
	return b
}

// pngBomb is a valid PNG header claiming w×h pixels, and nothing more.
func pngBomb(w, h uint32) []byte {
	ihdr := append([]byte("IHDR"), make([]byte, 13)...)
	binary.BigEndian.PutUint32(ihdr[4:], w)
	binary.BigEndian.PutUint32(ihdr[8:], h)
	ihdr[12], ihdr[13] = 8, 6
	b := append([]byte("\x89PNG\r\n\x1a\n\x00\x00\x00\x0d"), ihdr...)
	return binary.BigEndian.AppendUint32(b, crc32.ChecksumIEEE(ihdr))
}

// A picture over agent.max_image_bytes or agent.max_image_edge reaches the
// model scaled down, as a JPEG within both; the copy is kept next to the
// picture, and a later attempt of the turn shows that copy instead of
// scaling the picture again. One that cannot be scaled down is named with
// why. A BMP or TIFF, which no provider takes, reaches the model as a PNG
// (or, over the limits, a JPEG), however it was sent.
func TestOversizedPicturesAreScaledDown(t *testing.T) {
	t.Parallel()
	const maxBytes, edge = 200 << 10, 512
	fitted := "pic.fit-512-204800" // where the worker keeps the copy
	small := pngOf(t, testPicture(300, 200, false))
	earlier := jpegOf(t, testPicture(64, 48, true))
	cases := []struct {
		name   string
		data   []byte
		said   string // the type the platform said; image/png if none
		doc    bool   // sent as a file (a document), not as a picture
		mod    func(*worker.Config, *worker.Deps)
		kept   []byte // already kept under the copy's name (an earlier attempt)
		reason string // why the model is not shown it
		seen   string // the type of what the model is shown
		same   []byte // exactly what the model is shown
		w, h   int    // the size of what the model is shown
		scaled bool   // a copy is kept
	}{
		{name: "within the limits", data: small, seen: "image/png", same: small},
		{name: "within, with the wrong type", data: jpegOf(t, testPicture(300, 200, false)), seen: "image/jpeg", w: 300, h: 200},
		{name: "over the bytes", data: pngOf(t, testPicture(480, 360, true)), seen: "image/jpeg", w: 480, h: 360, scaled: true},
		{name: "over the edge", data: pngOf(t, testPicture(3000, 600, false)), seen: "image/jpeg", w: 512, h: 102, scaled: true},
		{name: "over both", data: pngOf(t, testPicture(1500, 1000, true)), seen: "image/jpeg", scaled: true},
		{name: "a copy kept by an earlier attempt", data: pngOf(t, testPicture(3000, 600, false)), kept: earlier,
			seen: "image/jpeg", same: earlier},
		{name: "too many pixels", data: pngBomb(20000, 20000),
			reason: "it has too many pixels to be read (over 50 megapixels)"},
		{name: "unreadable and too large", data: append([]byte("\x89PNG\r\n\x1a\n"), make([]byte, 300<<10)...),
			reason: "it could not be read as a picture"},
		{name: "too large to read", data: pngOf(t, testPicture(480, 360, true)),
			mod:    func(c *worker.Config, _ *worker.Deps) { c.Agent.MaxImageSourceBytes = 300 << 10 },
			reason: "it is too large to be read (over 300.0 KB)"},
		{name: "a BMP", data: bmpOf(t, testPicture(300, 200, false)), said: "image/bmp", seen: "image/png", w: 300, h: 200, scaled: true},
		{name: "a BMP over the bytes, its PNG within", data: bmpOf(t, testPicture(400, 300, false)), said: "image/x-ms-bmp",
			seen: "image/png", w: 400, h: 300, scaled: true},
		{name: "a BMP sent as a file", data: bmpOf(t, testPicture(300, 200, false)), said: "image/bmp", doc: true,
			seen: "image/png", w: 300, h: 200, scaled: true},
		{name: "a TIFF", data: tiffOf(t, testPicture(300, 200, false)), said: "image/tiff", seen: "image/png", w: 300, h: 200, scaled: true},
		{name: "a TIFF over the edge", data: tiffOf(t, testPicture(1200, 300, false)), said: "image/tiff",
			seen: "image/jpeg", w: 512, h: 128, scaled: true},
		{name: "a noisy BMP", data: bmpOf(t, testPicture(300, 300, true)), said: "image/bmp", seen: "image/jpeg", w: 300, h: 300, scaled: true},
		{name: "an animated GIF", data: animatedGIF(t, 300, 200), said: "image/gif", seen: "image/png", w: 300, h: 200, scaled: true},
		{name: "an unreadable BMP", data: append([]byte("BM"), make([]byte, 100)...), said: "image/bmp",
			reason: "it could not be read as a picture"},
		{name: "an SVG", data: []byte("<svg/>"), said: "image/svg+xml"}, // only named, as before
		{name: "a BMP with too many pixels", data: bmpBomb(20000, 20000), said: "image/bmp",
			reason: "it has too many pixels to be read (over 50 megapixels)"},
		{name: "a TIFF with too many pixels", data: tiffBomb(t, 6000, 5000), said: "image/tiff", // 30 megapixels
			reason: "it has too many pixels to be read (over 25 megapixels)"},
		{name: "a BMP cut short", data: append(bmpBomb(1000, 1000), make([]byte, 300<<10)...), said: "image/bmp",
			reason: "it is cut short: its data is too short for the size it claims"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			h := newHarness(t)
			ctx := context.Background()
			store := attachment.New(h.bus.JetStream(), h.bus.Topology(), attachment.Config{})
			said, kind := cmp.Or(tc.said, "image/png"), eventsv1.AttachmentKind_ATTACHMENT_KIND_IMAGE
			if tc.doc {
				kind = eventsv1.AttachmentKind_ATTACHMENT_KIND_DOCUMENT
			}
			if _, err := store.Keep(ctx, "pic", said, bytes.NewReader(tc.data)); err != nil {
				t.Fatal(err)
			}
			if tc.kept != nil {
				if _, err := store.Keep(ctx, fitted, "image/jpeg", bytes.NewReader(tc.kept)); err != nil {
					t.Fatal(err)
				}
			}
			h.setGeneration("s1", 1)
			h.startWorker("w1", func(c *worker.Config, d *worker.Deps) {
				c.Agent.MaxImageBytes, c.Agent.MaxImageEdge = maxBytes, edge
				if tc.mod != nil {
					tc.mod(c, d)
				}
			})
			req := h.requestTurn("s1", "what is this?", turnOpts{attachments: []*eventsv1.Attachment{{
				Kind: kind, MimeType: said, FileName: "cat",
				Location: &eventsv1.Attachment_BytesRef{BytesRef: "pic"}}}})
			if c := h.waitCompleted(req.TurnId); c.GetStatus() != turnsv1.TurnStatus_TURN_STATUS_COMPLETED {
				t.Fatalf("status %v (%s)", c.GetStatus(), c.GetError())
			}
			model := h.fake.Requests()[0]
			named := "image"
			if tc.doc {
				named = "document"
			}
			text := "what is this?\n[Attachment: " + named + " cat]"
			if tc.reason != "" {
				text = "what is this?\n[Attachment: " + named + " cat (unavailable: " + tc.reason + ")]"
			}
			if got := model.LastUserText(); got != text {
				t.Fatalf("the model read %q, want %q", got, text)
			}
			imgs := model.Messages[lastUser(model)].Images
			if tc.seen == "" {
				if len(imgs) != 0 {
					t.Fatalf("the model was shown %v", imgs)
				}
				return
			}
			if len(imgs) != 1 {
				t.Fatalf("the model was shown %d pictures", len(imgs))
			}
			img := imgs[0]
			answer := checkReplies(t, h.replies(req.TurnId)).GetFinalText().GetText()
			if want := "[image " + (fakellm.Image{MediaType: tc.seen, Data: img.Data}).String() + "]"; img.MediaType != tc.seen || !strings.Contains(answer, want) {
				t.Fatalf("the model was shown %s, answering %q; want a %s", img, answer, tc.seen)
			}
			if len(img.Data) > maxBytes {
				t.Fatalf("the model was shown %d bytes, over %d", len(img.Data), maxBytes)
			}
			if tc.same != nil && !bytes.Equal(img.Data, tc.same) {
				t.Fatalf("the model was shown other bytes: %s", img)
			}
			cfg, format, err := image.DecodeConfig(bytes.NewReader(img.Data))
			if err != nil || "image/"+format != tc.seen || max(cfg.Width, cfg.Height) > edge || tc.w != 0 && (cfg.Width != tc.w || cfg.Height != tc.h) {
				t.Fatalf("the model was shown a %s of %dx%d (%v), want a %s of %dx%d within %d",
					format, cfg.Width, cfg.Height, err, tc.seen, tc.w, tc.h, edge)
			}
			size, mime, ok := store.Stat(ctx, fitted)
			if ok != (tc.scaled || tc.kept != nil) {
				t.Fatalf("a scaled-down copy kept: %v, want %v", ok, tc.scaled)
			}
			if tc.scaled && (size != int64(len(img.Data)) || mime != tc.seen) {
				t.Fatalf("the copy kept is %d bytes of %s, the model was shown %d", size, mime, len(img.Data))
			}
		})
	}
}
