// Package picture fits users' pictures within what the model providers
// take: a picture too large in bytes or in pixels is decoded, scaled down
// and encoded again as a JPEG; one within the limits is left as it is.
// A BMP or TIFF, which no provider takes, is encoded again whatever its
// size: as a PNG (without loss) when that is within the limits, else as
// a JPEG, as any picture over them.
package picture

import (
	"bytes"
	"errors"
	"fmt"
	"image"
	_ "image/gif" // registers GIF (the first frame is decoded)
	"image/jpeg"
	"image/png" // registers PNG
	"math"

	_ "golang.org/x/image/bmp" // registers BMP
	"golang.org/x/image/draw"
	_ "golang.org/x/image/tiff" // registers TIFF (the first page is decoded)
	_ "golang.org/x/image/webp" // registers WebP
)

// Limits bound a picture. All must be positive.
type Limits struct {
	// MaxBytes bounds the encoded picture.
	MaxBytes int64
	// MaxEdge bounds its longer side, in pixels.
	MaxEdge int
	// MaxPixels bounds width × height of a picture that is decoded to be
	// scaled down or encoded again: decoding holds 1.5 (a JPEG) to 8 (a
	// 16-bit PNG) bytes a pixel, so a few kilobytes that claim a huge size
	// (a decompression bomb) are refused before any pixel is decoded. A
	// TIFF, whose decoder holds its strips decompressed besides, may have
	// half as many (pixelLimit).
	MaxPixels int64
}

// DefaultMaxPixels is 50 megapixels: the full-resolution mode of phone
// cameras, about 75 MB decoded from a JPEG.
const DefaultMaxPixels = 50_000_000

var (
	// ErrUnreadable: the bytes are no PNG, JPEG, GIF, WebP, BMP or TIFF
	// picture this package can read.
	ErrUnreadable = errors.New("not a readable PNG, JPEG, GIF, WebP, BMP or TIFF picture")
	// ErrTooManyPixels: the picture claims more than Limits.MaxPixels.
	ErrTooManyPixels = errors.New("picture has too many pixels to decode")
	// ErrTooLarge: the picture cannot be brought within Limits.MaxBytes.
	ErrTooLarge = errors.New("picture cannot be made small enough")
)

// mimes are the media types of the formats registered above, by the
// names image.DecodeConfig gives them (another package of the program
// may register more: they are not taken).
var mimes = map[string]string{"png": "image/png", "jpeg": "image/jpeg", "gif": "image/gif", "webp": "image/webp",
	"bmp": "image/bmp", "tiff": "image/tiff"}

// taken are the formats the model providers (OpenAI, Anthropic) take as
// they are; a picture in another (BMP, TIFF) is always encoded again.
var taken = map[string]bool{"image/png": true, "image/jpeg": true, "image/gif": true, "image/webp": true}

// Header is what a picture's first bytes tell: its format and size.
type Header struct {
	MIME          string
	Width, Height int
}

// ReadHeader reads data's format and size without decoding its pixels.
func ReadHeader(data []byte) (Header, error) {
	cfg, format, err := image.DecodeConfig(bytes.NewReader(data))
	if err != nil {
		return Header{}, fmt.Errorf("%w: %v", ErrUnreadable, err)
	}
	mime, ok := mimes[format]
	if !ok {
		return Header{}, fmt.Errorf("%w: %s", ErrUnreadable, format)
	}
	if cfg.Width <= 0 || cfg.Height <= 0 {
		return Header{}, fmt.Errorf("%w: %dx%d pixels", ErrUnreadable, cfg.Width, cfg.Height)
	}
	return Header{MIME: mime, Width: cfg.Width, Height: cfg.Height}, nil
}

// Fits reports whether a picture of n bytes with header h is within l as
// it is: in a format the providers take, too.
func (l Limits) Fits(h Header, n int) bool {
	return taken[h.MIME] && int64(n) <= l.MaxBytes && max(h.Width, h.Height) <= l.MaxEdge
}

// JPEG qualities tried at each size, and the smallest longer side worth
// showing: a picture that does not fit at it is given up.
var qualities = []int{85, 70, 55}

const minEdge = 64

// Fit returns data, a picture, within l, with its media type: data itself
// when it is within already (encoding again would lose quality), else a
// JPEG scaled down to l.MaxEdge, its transparency flattened onto white, at
// a lower quality or a smaller size still while it is over l.MaxBytes.
// A BMP or TIFF is shown as the PNG of its pixels would be: that PNG when
// it is within l (the pixels and transparency are kept; a BMP's bytes,
// uncompressed, are often over l.MaxBytes where its PNG is not), else the
// JPEG. The media type is the one the bytes are in, whatever the sender
// said, and always one the providers take.
func Fit(data []byte, l Limits) ([]byte, string, error) {
	if l.MaxBytes <= 0 || l.MaxEdge <= 0 || l.MaxPixels <= 0 {
		return nil, "", fmt.Errorf("picture limits must be positive: %+v", l)
	}
	h, err := ReadHeader(data)
	if err != nil {
		return nil, "", err
	}
	if l.Fits(h, len(data)) {
		return data, h.MIME, nil
	}
	if px, limit := int64(h.Width)*int64(h.Height), pixelLimit(h, l); px > limit {
		return nil, "", fmt.Errorf("%w: %dx%d is %.1f megapixels, the limit is %.1f",
			ErrTooManyPixels, h.Width, h.Height, float64(px)/1e6, float64(limit)/1e6)
	}
	src, _, err := image.Decode(bytes.NewReader(data))
	if err != nil {
		return nil, "", fmt.Errorf("%w: %v", ErrUnreadable, err)
	}
	sb := src.Bounds()
	if sb.Empty() { // a GIF's first frame may be smaller than its screen, even empty
		return nil, "", fmt.Errorf("%w: an empty frame", ErrUnreadable)
	}
	if !taken[h.MIME] && max(sb.Dx(), sb.Dy()) <= l.MaxEdge {
		if out, ok, err := asPNG(src, l.MaxBytes); err != nil || ok {
			return out, "image/png", err
		}
	}
	return fitJPEG(src, l)
}

// pixelLimit is the most pixels of a picture with header h that Fit
// decodes: l.MaxPixels, half for a TIFF. Its decoder holds, besides the
// pixels, a strip decompressed up to 8 bytes a pixel whatever the depth
// (a buffer grown by doubling): measured, 27 bytes a pixel in all for a
// 16-bit TIFF and 19 for an 8-bit grey one whose strip holds 8, against
// 10 for a 16-bit PNG, so that a TIFF of a few hundred kilobytes and 50
// megapixels would hold about a gigabyte.
func pixelLimit(h Header, l Limits) int64 {
	if h.MIME == "image/tiff" {
		return l.MaxPixels / 2
	}
	return l.MaxPixels
}

// asPNG is src as a PNG, and whether it is within maxBytes.
func asPNG(src image.Image, maxBytes int64) ([]byte, bool, error) {
	var buf bytes.Buffer
	if err := png.Encode(&buf, src); err != nil {
		return nil, false, fmt.Errorf("encode picture: %w", err)
	}
	if int64(buf.Len()) > maxBytes {
		return nil, false, nil
	}
	return buf.Bytes(), true, nil
}

// fitJPEG is src as a JPEG within l (Fit).
func fitJPEG(src image.Image, l Limits) ([]byte, string, error) {
	sb := src.Bounds()
	w, ht := within(sb.Dx(), sb.Dy(), l.MaxEdge)
	var buf bytes.Buffer
	for {
		img := flatten(shrink(src, w, ht))
		for _, q := range qualities {
			buf.Reset()
			if err := jpeg.Encode(&buf, img, &jpeg.Options{Quality: q}); err != nil {
				return nil, "", fmt.Errorf("encode picture: %w", err)
			}
			if int64(buf.Len()) <= l.MaxBytes {
				return buf.Bytes(), "image/jpeg", nil
			}
		}
		// Bytes grow about with the area: aim a little under the limit,
		// shrinking by 10 % at least (the loop ends) and 50 % at most.
		f := min(max(math.Sqrt(float64(l.MaxBytes)/float64(buf.Len()))*0.95, 0.5), 0.9)
		nw, nh := max(int(float64(w)*f), 1), max(int(float64(ht)*f), 1)
		if max(nw, nh) < minEdge {
			return nil, "", fmt.Errorf("%w: %d bytes at %dx%d, the limit is %d", ErrTooLarge, buf.Len(), w, ht, l.MaxBytes)
		}
		src, w, ht = img, nw, nh // the next size is scaled from this one
	}
}

// within is w×h scaled to fit edge on its longer side, its aspect kept.
func within(w, h, edge int) (int, int) {
	if w <= edge && h <= edge {
		return w, h
	}
	if w >= h {
		return edge, max(int(math.Round(float64(h)*float64(edge)/float64(w))), 1)
	}
	return max(int(math.Round(float64(w)*float64(edge)/float64(h))), 1), edge
}

// shrink scales src to w×h. The filter is ApproxBiLinear after halvings:
// x/image/draw's kernel filters (CatmullRom, BiLinear) hold a buffer of
// 32 bytes per destination column and source row, 200 MB and a second of
// CPU for a 12-megapixel photo brought to 2048 pixels (400 MB for 50
// megapixels); ApproxBiLinear holds none and takes a tenth of the time,
// but reads only 4 source pixels for each destination pixel, so shrinking
// more than twice at once would skip pixels (jagged text, moiré). Each
// halving averages 2×2 pixels exactly, so the last step shrinks less than
// twice and every source pixel counts, as with mipmaps.
func shrink(src image.Image, w, h int) image.Image {
	b := src.Bounds()
	if b.Dx() == w && b.Dy() == h {
		return src
	}
	for b.Dx()/2 >= w && b.Dy()/2 >= h {
		half := image.NewRGBA(image.Rect(0, 0, b.Dx()/2, b.Dy()/2))
		draw.ApproxBiLinear.Scale(half, half.Bounds(), src, b, draw.Src, nil)
		src, b = half, half.Bounds()
	}
	dst := image.NewRGBA(image.Rect(0, 0, w, h))
	draw.ApproxBiLinear.Scale(dst, dst.Bounds(), src, b, draw.Src, nil)
	return dst
}

// flatten draws img onto white, for JPEG has no transparency (a
// transparent PNG would turn black); an opaque JPEG's pixels are kept.
func flatten(img image.Image) image.Image {
	if o, ok := img.(interface{ Opaque() bool }); ok && o.Opaque() {
		return img
	}
	b := img.Bounds()
	dst := image.NewRGBA(image.Rect(0, 0, b.Dx(), b.Dy()))
	draw.Draw(dst, dst.Bounds(), image.White, image.Point{}, draw.Src)
	draw.Draw(dst, dst.Bounds(), img, b.Min, draw.Over)
	return dst
}
