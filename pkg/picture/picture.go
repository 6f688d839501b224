// Package picture fits users' pictures within what the model providers
// take: a picture too large in bytes or in pixels is decoded, scaled down
// and encoded again as a JPEG; one within the limits is left as it is.
// A BMP or TIFF, which no provider takes, is encoded again whatever its
// size: as a PNG (without loss) when that is within the limits, else as
// a JPEG, as any picture over them; so is an animated GIF's first frame
// (OpenAI takes only GIFs of one frame).
package picture

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"image"
	"image/color"
	_ "image/gif" // registers GIF (only the first frame is decoded)
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
	// ErrTruncated: the picture's data is too short for the pixels its
	// header claims (a file cut short, or a header that lies), found
	// before they are decoded. It is an ErrUnreadable.
	ErrTruncated = fmt.Errorf("%w: its data is too short for the pixels its header claims", ErrUnreadable)
	// ErrTooManyPixels: the picture claims more than Limits.MaxPixels
	// (half for a TIFF); Fit's error is a *TooManyPixelsError.
	ErrTooManyPixels = errors.New("picture has too many pixels to decode")
	// ErrTooLarge: the picture cannot be brought within Limits.MaxBytes.
	ErrTooLarge = errors.New("picture cannot be made small enough")
)

// TooManyPixelsError is Fit's error for a picture of more pixels than
// it decodes: an ErrTooManyPixels, with the bound that applied, which
// depends on the format (pixelLimit).
type TooManyPixelsError struct {
	Width, Height int
	// Limit is the most pixels a picture of its format may have.
	Limit int64
}

func (e *TooManyPixelsError) Error() string {
	return fmt.Sprintf("%v: %dx%d is %.1f megapixels, the limit is %.1f", ErrTooManyPixels,
		e.Width, e.Height, float64(int64(e.Width)*int64(e.Height))/1e6, float64(e.Limit)/1e6)
}

func (e *TooManyPixelsError) Unwrap() error { return ErrTooManyPixels }

// mimes are the media types of the formats registered above, by the
// names image.DecodeConfig gives them (another package of the program
// may register more: they are not taken).
var mimes = map[string]string{"png": "image/png", "jpeg": "image/jpeg", "gif": "image/gif", "webp": "image/webp",
	"bmp": "image/bmp", "tiff": "image/tiff"}

// taken are the formats the model providers (OpenAI, Anthropic) take as
// they are, but for an animated GIF; a picture in another (BMP, TIFF) is
// always encoded again.
var taken = map[string]bool{"image/png": true, "image/jpeg": true, "image/gif": true, "image/webp": true}

// Header is what a picture's first bytes tell: its format and size.
type Header struct {
	MIME          string
	Width, Height int
	// Animated: a GIF of more than one frame, which OpenAI does not take.
	Animated bool
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
	return Header{MIME: mime, Width: cfg.Width, Height: cfg.Height, Animated: mime == "image/gif" && gifAnimated(data)}, nil
}

// gifAnimated reports whether data, a GIF, holds a second frame: its
// blocks are walked, not decoded, up to the second image descriptor (a
// GIF may have thousands of frames). A GIF cut short or broken after
// its first frame counts as it reads so far.
func gifAnimated(data []byte) bool {
	const screen = 13 // the signature and the logical screen descriptor
	if len(data) < screen {
		return false
	}
	frames := 0
	for p := screen + gifColours(data[10]); p < len(data); {
		switch data[p] {
		case 0x21: // an extension: its label, then sub-blocks
			p = skipSubBlocks(data, p+2)
		case 0x2c: // an image: its descriptor, colours, LZW code size, then sub-blocks
			if frames++; frames > 1 {
				return true
			}
			if p+10 > len(data) {
				return false
			}
			p = skipSubBlocks(data, p+10+gifColours(data[p+9])+1)
		default: // the trailer, or bytes no decoder reads on from
			return false
		}
	}
	return false
}

// gifColours is the length of the colour table that a GIF descriptor's
// flags announce.
func gifColours(flags byte) int {
	if flags&0x80 == 0 {
		return 0
	}
	return 3 << (flags&7 + 1)
}

// skipSubBlocks is where the sub-blocks at p end (each a length byte and
// so many bytes, up to one of length 0).
func skipSubBlocks(data []byte, p int) int {
	for p < len(data) {
		n := int(data[p])
		p += 1 + n
		if n == 0 {
			break
		}
	}
	return p
}

// Fits reports whether a picture of n bytes with header h is within l as
// it is: in a format the providers take, too, and no animated GIF.
func (l Limits) Fits(h Header, n int) bool {
	return taken[h.MIME] && !h.Animated && int64(n) <= l.MaxBytes && max(h.Width, h.Height) <= l.MaxEdge
}

// JPEG qualities tried at each size, and the smallest longer side worth
// showing: a picture that does not fit at it is given up.
var qualities = []int{85, 70, 55}

const minEdge = 64

// Fit returns data, a picture, within l, with its media type: data itself
// when it is within already (encoding again would lose quality), else a
// JPEG scaled down to l.MaxEdge, its transparency flattened onto white, at
// a lower quality or a smaller size still while it is over l.MaxBytes.
// A BMP or TIFF, or an animated GIF's first frame, is shown as the PNG
// of its pixels would be: that PNG when it is within l (the pixels and
// transparency are kept; a BMP's bytes, uncompressed, are often over
// l.MaxBytes where its PNG is not), else the JPEG. Only a GIF's first
// frame is decoded, however many it has, and it is shown on the GIF's
// screen (onScreen). The media type is the one the bytes are in,
// whatever the sender said, and always one the providers take. A
// picture of too many pixels for l.MaxPixels, or whose data is too short
// for the pixels it claims (ErrTruncated), is refused before any pixel
// is decoded.
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
	if limit := pixelLimit(h, l); int64(h.Width)*int64(h.Height) > limit {
		return nil, "", &TooManyPixelsError{Width: h.Width, Height: h.Height, Limit: limit}
	}
	if err := checkLength(data, h); err != nil {
		return nil, "", err
	}
	src, _, err := image.Decode(bytes.NewReader(data))
	if err != nil {
		return nil, "", fmt.Errorf("%w: %v", ErrUnreadable, err)
	}
	if src.Bounds().Empty() { // a GIF's first frame may be smaller than its screen, even empty
		return nil, "", fmt.Errorf("%w: an empty frame", ErrUnreadable)
	}
	if h.MIME == "image/gif" {
		src = onScreen(src, h)
	}
	sb := src.Bounds()
	if (!taken[h.MIME] || h.Animated) && max(sb.Dx(), sb.Dy()) <= l.MaxEdge {
		if out, ok, err := asPNG(src, l.MaxBytes); err != nil || ok {
			return out, "image/png", err
		}
	}
	return fitJPEG(src, l)
}

// onScreen is frame, a GIF's first frame, as it is shown: on the GIF's
// logical screen (h's size), at its place there, the screen around it
// transparent, as browsers show it (and a GIF of one such frame within
// the limits reaches the providers as it is, at the screen's size). Its
// decoder gives the frame alone, which may be smaller than the screen,
// anywhere within it. The screen is drawn as it is read, not held: a
// GIF of a few bytes whose first frame is a pixel may claim a screen of
// MaxPixels.
func onScreen(frame image.Image, h Header) image.Image {
	if r := image.Rect(0, 0, h.Width, h.Height); frame.Bounds() != r {
		return gifScreen{frame: frame, r: r}
	}
	return frame
}

// gifScreen is onScreen's picture: frame within r, transparent around it.
type gifScreen struct {
	frame image.Image
	r     image.Rectangle
}

func (s gifScreen) ColorModel() color.Model { return color.RGBAModel }

func (s gifScreen) Bounds() image.Rectangle { return s.r }

func (s gifScreen) At(x, y int) color.Color {
	if (image.Point{X: x, Y: y}).In(s.frame.Bounds()) {
		return s.frame.At(x, y)
	}
	return color.Transparent
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

// checkLength refuses a picture whose data cannot hold the pixels its
// header h claims (ErrTruncated): the decoders allocate every pixel
// before they read any, so a few kilobytes cut from a picture of 49
// megapixels, or a header that lies, would hold about 200 MB before
// the decoding failed. It is called after the pixel bound, once
// ReadHeader has read data's header, and refuses only what its decoder
// would fail on.
//
// A JPEG, GIF or WebP is left to its decoder: their coding shrinks far
// more (a JPEG's block of 64 pixels may take a bit, a GIF's or WebP's
// code thousands of pixels), so a bound would refuse only pictures cut
// very short.
func checkLength(data []byte, h Header) error {
	switch h.MIME {
	case "image/bmp":
		return checkBMP(data, h)
	case "image/png":
		return checkPNG(data, h)
	case "image/tiff":
		return checkTIFF(data, h)
	}
	return nil
}

// checkBMP: a BMP's pixels are rows of width × bits a pixel, each padded
// to 4 bytes, from the offset in its file header, and its decoder reads
// every row whole, the last one's padding too. Its decoder takes only
// uncompressed ones (BI_RGB, or BI_BITFIELDS with the default masks),
// and at 1, 2, 4, 8, 24 or 32 bits a pixel: a run-length encoded one is
// refused by ReadHeader, before this.
func checkBMP(data []byte, h Header) error {
	if len(data) < 30 { // ReadHeader read 54 bytes at least
		return nil
	}
	offset := uint64(binary.LittleEndian.Uint32(data[10:]))
	bits := uint64(binary.LittleEndian.Uint16(data[28:]))
	row := (uint64(h.Width)*bits + 31) / 32 * 4
	need, have := row*uint64(h.Height), uint64(len(data))-min(offset, uint64(len(data)))
	if have < need {
		return fmt.Errorf("%w: a %dx%d BMP of %d bits a pixel needs %d bytes of pixels, it has %d",
			ErrTruncated, h.Width, h.Height, bits, need, have)
	}
	return nil
}

// deflateRatio bounds how many times deflate (PNG, and TIFF's Deflate
// compression) shrinks data: at best a match of 258 bytes in 2 bits.
const deflateRatio = 1032

// checkPNG: a PNG's pixels, width × height × bits a pixel and more (a
// filter byte a row, rows padded to a byte, Adam7's passes), are
// deflated in its IDAT chunks (those in a row from the first: its
// decoder reads no other), so those hold a 1032nd of that at least.
// The chunks are walked, not decoded, and a length past the end of data
// counts only the bytes there.
func checkPNG(data []byte, h Header) error {
	if len(data) < 29 { // ReadHeader read the signature and IHDR
		return nil
	}
	var samples float64
	switch data[25] { // colour type; ReadHeader refused any other
	case 0, 3: // grey, or palette indices
		samples = 1
	case 4: // grey and alpha
		samples = 2
	case 2: // RGB
		samples = 3
	case 6: // RGBA
		samples = 4
	}
	need := float64(h.Width) * float64(h.Height) * samples * float64(data[24]) / 8 // bit depth
	var idat int64
	for p := 8; len(data)-p >= 8; {
		n := min(int64(binary.BigEndian.Uint32(data[p:])), int64(len(data)-p-8))
		typ := string(data[p+4 : p+8])
		if typ == "IDAT" {
			idat += n
		} else if typ == "IEND" || idat > 0 {
			// Its decoder reads the IDAT chunks in a row from the first
			// and fails at any other chunk before the pixels are all
			// there: an IDAT after it is never read.
			break
		}
		p += 8 + int(n) + 4 // and the CRC
	}
	if float64(idat)*deflateRatio < need {
		return fmt.Errorf("%w: a %dx%d PNG needs %.0f bytes of pixels, its %d compressed bytes hold %d at most",
			ErrTruncated, h.Width, h.Height, need, idat, idat*deflateRatio)
	}
	return nil
}

// checkTIFF: a TIFF's pixels, width × height × bits a pixel, are in
// strips (or tiles) at the offsets and of the lengths its first
// directory lists (as many as its decoder reads: one a RowsPerStrip
// rows, or one a tile), each compressed at most so many times: 1 uncompressed,
// 64 with PackBits (a byte repeated 128 times in 2), 1032 with Deflate,
// and under 4096 with LZW (a code of 9 bits at least for a string of
// 4096 bytes at most). The strips' bytes present in data are counted,
// each once for each time it is listed: strips may share bytes. A TIFF
// compressed for fax (CCITT), which one bit can stretch over a whole row,
// is left to its decoder: it is 1 bit a pixel, and decodes to 1 byte a
// pixel, 25 MB at most within the pixel bound. Its decoder refuses any
// other compression only after it allocated the pixels: so does this,
// before.
//
// Where the directory cannot be read as its decoder reads it, the
// decoder fails before it allocates anything, and the check is left to
// it.
func checkTIFF(data []byte, h Header) error {
	d, ok := readTIFFDir(data)
	if !ok {
		return nil
	}
	var ratio float64
	switch c, _ := d.value(d.entry(259), 0); c { // Compression
	case 0, 1: // none (missing, as its decoder reads it)
		ratio = 1
	case 32773: // PackBits
		ratio = 64
	case 8, 32946: // Deflate
		ratio = deflateRatio
	case 5: // LZW
		ratio = 4096
	case 3, 4: // CCITT Group 3 and 4 fax
		return nil
	default:
		return fmt.Errorf("%w: a TIFF of compression %d", ErrUnreadable, c)
	}
	bits, samples := uint64(1), uint64(1) // BitsPerSample: 1 sample of 1 bit when missing
	if e := d.entry(258); e != nil {
		bits, _ = d.value(e, 0)
		samples = min(uint64(d.order.Uint32(e[4:])), 16) // as many as its decoder reads
	}
	// The blocks its decoder reads: those of the picture's rows, or tiles.
	// Any listed after them are never read, so they hold no pixels (and
	// a directory listing millions would cost a walk of them all).
	width, height := uint64(h.Width), uint64(h.Height)
	offsets, counts := d.entry(273), d.entry(279) // StripOffsets, StripByteCounts
	rows, _ := d.value(d.entry(278), 0)           // RowsPerStrip: all when missing, 0 or more
	if rows == 0 || rows > height {
		rows = height
	}
	blocks := (height + rows - 1) / rows
	if tw, _ := d.value(d.entry(322), 0); tw != 0 { // TileWidth: in tiles
		th, _ := d.value(d.entry(323), 0) // TileLength
		if tw < 8 || th < 8 {
			// Its decoder refuses it before it allocates anything, and
			// the tiles, one a pixel, would be walked by the million.
			return nil
		}
		offsets, counts = d.entry(324), d.entry(325)
		blocks = (width + tw - 1) / tw * ((height + th - 1) / th)
	}
	var have float64
	for k := uint64(0); k < blocks; k++ {
		off, ok1 := d.value(offsets, k)
		n, ok2 := d.value(counts, k)
		if !ok1 || !ok2 {
			break
		}
		have += float64(min(n, uint64(len(data))-min(off, uint64(len(data))))) * ratio
	}
	if need := float64(h.Width) * float64(h.Height) * float64(bits*samples) / 8; have < need {
		return fmt.Errorf("%w: a %dx%d TIFF needs %.0f bytes of pixels, its strips hold %.0f at most",
			ErrTruncated, h.Width, h.Height, need, have)
	}
	return nil
}

// tiffDir is a TIFF's first directory: entries of 12 bytes (a tag, a
// type, a count and the values or where they are).
type tiffDir struct {
	data    []byte
	order   binary.ByteOrder
	entries []byte
}

// readTIFFDir finds data's first directory, and whether it is whole.
func readTIFFDir(data []byte) (tiffDir, bool) {
	if len(data) < 8 {
		return tiffDir{}, false
	}
	d := tiffDir{data: data, order: binary.LittleEndian}
	if data[0] == 'M' {
		d.order = binary.BigEndian
	}
	at := uint64(d.order.Uint32(data[4:]))
	if at+2 > uint64(len(data)) {
		return tiffDir{}, false
	}
	n := uint64(d.order.Uint16(data[at:])) * 12
	if at+2+n > uint64(len(data)) {
		return tiffDir{}, false
	}
	d.entries = data[at+2 : at+2+n]
	return d, true
}

// entry is the entry of tag, or nil.
func (d tiffDir) entry(tag uint16) []byte {
	for e := d.entries; len(e) >= 12; e = e[12:] {
		if d.order.Uint16(e) == tag {
			return e[:12]
		}
	}
	return nil
}

// value is the kth value of entry e, and whether it is there: a BYTE,
// SHORT or LONG, the types its decoder reads these entries in.
func (d tiffDir) value(e []byte, k uint64) (uint64, bool) {
	if e == nil {
		return 0, false
	}
	var size uint64
	switch d.order.Uint16(e[2:]) {
	case 1:
		size = 1
	case 3:
		size = 2
	case 4:
		size = 4
	default:
		return 0, false
	}
	count := uint64(d.order.Uint32(e[4:]))
	if k >= count {
		return 0, false
	}
	vals := e[8:12]
	if size*count > 4 { // elsewhere in data
		at := uint64(d.order.Uint32(e[8:]))
		if at > uint64(len(d.data)) {
			return 0, false
		}
		vals = d.data[at:]
	}
	if (k+1)*size > uint64(len(vals)) {
		return 0, false
	}
	switch v := vals[k*size:]; size {
	case 1:
		return uint64(v[0]), true
	case 2:
		return uint64(d.order.Uint16(v)), true
	default:
		return uint64(d.order.Uint32(v)), true
	}
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
