package picture_test

import (
	"bytes"
	"compress/zlib"
	"encoding/binary"
	"errors"
	"hash/crc32"
	"image"
	"image/color"
	"image/color/palette"
	"image/gif"
	"image/jpeg"
	"image/png"
	"math/rand/v2"
	"os"
	"runtime"
	"slices"
	"testing"
	"time"

	"golang.org/x/image/bmp"
	"golang.org/x/image/tiff"

	"github.com/switchboard-chat/switchboard/pkg/picture"
)

// gradient is an opaque w×h picture that compresses well.
func gradient(w, h int) *image.RGBA {
	img := image.NewRGBA(image.Rect(0, 0, w, h))
	for y := range h {
		for x := range w {
			img.SetRGBA(x, y, color.RGBA{uint8(x), uint8(y), uint8(x + y), 255})
		}
	}
	return img
}

// noise is an opaque w×h picture that compresses badly.
func noise(w, h int) *image.RGBA {
	img := image.NewRGBA(image.Rect(0, 0, w, h))
	r := rand.New(rand.NewPCG(uint64(w), uint64(h)))
	for i := range img.Pix {
		img.Pix[i] = uint8(r.Uint32())
	}
	for i := 3; i < len(img.Pix); i += 4 {
		img.Pix[i] = 255
	}
	return img
}

func encodePNG(t testing.TB, img image.Image) []byte {
	t.Helper()
	var b bytes.Buffer
	if err := png.Encode(&b, img); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

func encodeJPEG(t testing.TB, img image.Image, quality int) []byte {
	t.Helper()
	var b bytes.Buffer
	if err := jpeg.Encode(&b, img, &jpeg.Options{Quality: quality}); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// gifFrame is the nth frame of encodeGIF's: stripes, other ones in each.
func gifFrame(w, h, n int) *image.Paletted {
	img := image.NewPaletted(image.Rect(0, 0, w, h), palette.Plan9)
	for i := range img.Pix {
		img.Pix[i] = uint8(i/w%256 + 100*n)
	}
	return img
}

// encodeGIF is a w×h GIF of so many frames (gifFrame).
func encodeGIF(t testing.TB, w, h, frames int) []byte {
	t.Helper()
	g := &gif.GIF{}
	for n := range frames {
		g.Image, g.Delay = append(g.Image, gifFrame(w, h, n)), append(g.Delay, 10)
	}
	var b bytes.Buffer
	if err := gif.EncodeAll(&b, g); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

func encodeBMP(t testing.TB, img image.Image) []byte {
	t.Helper()
	var b bytes.Buffer
	if err := bmp.Encode(&b, img); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

func encodeTIFF(t testing.TB, img image.Image) []byte {
	t.Helper()
	var b bytes.Buffer
	if err := tiff.Encode(&b, img, &tiff.Options{Compression: tiff.Deflate, Predictor: true}); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// bombBMP is the header of a BMP that claims w×h pixels (the size of a
// 1×1 one's), its pixels cut off.
func bombBMP(t testing.TB, w, h uint32) []byte {
	t.Helper()
	b := encodeBMP(t, gradient(1, 1))[:54] // the file and info headers
	binary.LittleEndian.PutUint32(b[18:], w)
	binary.LittleEndian.PutUint32(b[22:], h)
	return b
}

// bombTIFF is a 1×1 TIFF whose directory claims w×h pixels, in one
// strip (its few bytes).
func bombTIFF(t testing.TB, w, h uint16) []byte {
	t.Helper()
	b := encodeTIFF(t, gradient(1, 1)) // little-endian, with SHORT sizes
	ifd := binary.LittleEndian.Uint32(b[4:])
	n := int(binary.LittleEndian.Uint16(b[ifd:]))
	for i := range n {
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

// transparent is a w×h picture whose left half is fully transparent and
// right half opaque red.
func transparent(w, h int) *image.NRGBA {
	img := image.NewNRGBA(image.Rect(0, 0, w, h))
	for y := range h {
		for x := w / 2; x < w; x++ {
			img.SetNRGBA(x, y, color.NRGBA{R: 255, A: 255})
		}
	}
	return img
}

// bombPNG is the first bytes of a PNG that claims w×h pixels: its header
// is valid, the pixels never come.
func bombPNG(w, h uint32) []byte {
	ihdr := make([]byte, 4+13)
	copy(ihdr, "IHDR")
	binary.BigEndian.PutUint32(ihdr[4:], w)
	binary.BigEndian.PutUint32(ihdr[8:], h)
	ihdr[12], ihdr[13] = 8, 6 // 8-bit RGBA
	b := []byte("\x89PNG\r\n\x1a\n\x00\x00\x00\x0d")
	b = append(b, ihdr...)
	return binary.BigEndian.AppendUint32(b, crc32.ChecksumIEEE(ihdr))
}

// cutPNG is a PNG that claims w×h 8-bit RGBA pixels whose data ends
// after its first rows: a complete file, its IDAT cut short.
func cutPNG(t testing.TB, w, h uint32, rows int) []byte {
	t.Helper()
	var z bytes.Buffer
	zw := zlib.NewWriter(&z)
	if _, err := zw.Write(make([]byte, rows*(1+4*int(w)))); err != nil { // filter byte 0, black
		t.Fatal(err)
	}
	if err := zw.Flush(); err != nil { // not closed: the stream goes on
		t.Fatal(err)
	}
	b := bombPNG(w, h)
	for _, c := range []struct {
		typ  string
		data []byte
	}{{"IDAT", z.Bytes()}, {"IEND", nil}} {
		b = binary.BigEndian.AppendUint32(b, uint32(len(c.data)))
		body := append([]byte(c.typ), c.data...)
		b = append(b, body...)
		b = binary.BigEndian.AppendUint32(b, crc32.ChecksumIEEE(body))
	}
	return b
}

// splitPNG is p, a PNG, with a tEXt chunk and an IDAT chunk of n zero
// bytes before its IEND.
func splitPNG(t testing.TB, p []byte, n int) []byte {
	t.Helper()
	end := bytes.LastIndex(p, []byte("IEND")) - 4
	if end < 0 {
		t.Fatal("no IEND")
	}
	b := bytes.Clone(p[:end])
	for _, c := range []struct {
		typ  string
		data []byte
	}{{"tEXt", []byte("Comment\x00between")}, {"IDAT", make([]byte, n)}, {"IEND", nil}} {
		b = binary.BigEndian.AppendUint32(b, uint32(len(c.data)))
		body := append([]byte(c.typ), c.data...)
		b = append(b, body...)
		b = binary.BigEndian.AppendUint32(b, crc32.ChecksumIEEE(body))
	}
	return b
}

func readFile(t testing.TB, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(name)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestFit(t *testing.T) {
	t.Parallel()
	lim := picture.Limits{MaxBytes: 200 << 10, MaxEdge: 512, MaxPixels: 4_000_000}
	smallPNG := encodePNG(t, gradient(300, 200))
	smallJPEG := encodeJPEG(t, gradient(300, 200), 90)
	webp := readFile(t, "testdata/blue.lossy.webp")
	tests := []struct {
		name      string
		data      []byte
		lim       picture.Limits
		unchanged bool        // the input itself comes back
		mime      string      // of the result
		w, h      int         // of the result
		white     bool        // its top left pixel is white (flattened transparency)
		pixels    image.Image // the result's pixels are exactly these
		err       error
	}{
		{name: "small PNG", data: smallPNG, unchanged: true, mime: "image/png", w: 300, h: 200},
		{name: "small JPEG", data: smallJPEG, unchanged: true, mime: "image/jpeg", w: 300, h: 200},
		{name: "at the limits", data: smallPNG, lim: picture.Limits{MaxBytes: int64(len(smallPNG)), MaxEdge: 300, MaxPixels: 1},
			unchanged: true, mime: "image/png", w: 300, h: 200},
		{name: "small WebP", data: webp, unchanged: true, mime: "image/webp", w: 150, h: 100},
		{name: "small GIF", data: encodeGIF(t, 40, 30, 1), unchanged: true, mime: "image/gif", w: 40, h: 30},
		// OpenAI takes no animated GIF: its first frame is shown.
		{name: "small animated GIF", data: encodeGIF(t, 40, 30, 2), mime: "image/png", w: 40, h: 30, pixels: gifFrame(40, 30, 0)},
		{name: "wide PNG to the edge", data: encodePNG(t, gradient(2000, 600)), mime: "image/jpeg", w: 512, h: 154},
		{name: "tall PNG to the edge", data: encodePNG(t, gradient(700, 1400)), mime: "image/jpeg", w: 256, h: 512},
		{name: "noise JPEG over the bytes", data: encodeJPEG(t, noise(500, 500), 100), mime: "image/jpeg"},
		{name: "noise PNG over both", data: encodePNG(t, noise(800, 600)), mime: "image/jpeg"},
		{name: "PNG with transparency", data: encodePNG(t, transparent(1024, 512)), mime: "image/jpeg", w: 512, h: 256, white: true},
		{name: "GIF, first frame", data: encodeGIF(t, 1000, 600, 2), mime: "image/jpeg", w: 512, h: 307},
		{name: "lossy WebP", data: webp, lim: picture.Limits{MaxBytes: 1 << 20, MaxEdge: 75, MaxPixels: 1 << 20},
			mime: "image/jpeg", w: 75, h: 50},
		{name: "lossless WebP with transparency", data: readFile(t, "testdata/gopher.lossless.webp"),
			lim: picture.Limits{MaxBytes: 1 << 20, MaxEdge: 50, MaxPixels: 1 << 20}, mime: "image/jpeg", w: 38, h: 50, white: true},
		{name: "over the edge, exactly twice", data: encodePNG(t, gradient(1024, 1024)), mime: "image/jpeg", w: 512, h: 512},
		{name: "bomb", data: bombPNG(20000, 20000), err: picture.ErrTooManyPixels},
		{name: "bomb within the edge", data: bombPNG(400, 400), lim: picture.Limits{MaxBytes: 10, MaxEdge: 512, MaxPixels: 100_000},
			err: picture.ErrTooManyPixels},
		{name: "header without pixels", data: bombPNG(600, 600), err: picture.ErrUnreadable},
		{name: "corrupt", data: append([]byte("\x89PNG\r\n\x1a\n"), bytes.Repeat([]byte{7}, 300)...), err: picture.ErrUnreadable},
		{name: "truncated JPEG", data: encodeJPEG(t, noise(800, 800), 90)[:100<<10], err: picture.ErrUnreadable},
		{name: "not a picture", data: []byte("Dear Ann, this is a letter"), err: picture.ErrUnreadable},
		{name: "BMP", data: encodeBMP(t, gradient(300, 200)), mime: "image/png", w: 300, h: 200, pixels: gradient(300, 200)},
		{name: "BMP over the bytes, its PNG within", data: encodeBMP(t, gradient(400, 400)), mime: "image/png", w: 400, h: 400},
		{name: "BMP whose PNG is over the bytes", data: encodeBMP(t, noise(300, 300)), mime: "image/jpeg", w: 300, h: 300},
		{name: "BMP over the edge", data: encodeBMP(t, gradient(1024, 512)), mime: "image/jpeg", w: 512, h: 256},
		{name: "TIFF", data: encodeTIFF(t, gradient(300, 200)), mime: "image/png", w: 300, h: 200, pixels: gradient(300, 200)},
		{name: "TIFF with transparency", data: encodeTIFF(t, transparent(64, 32)), mime: "image/png", w: 64, h: 32, pixels: transparent(64, 32)},
		{name: "uncompressed TIFF", data: func() []byte {
			var b bytes.Buffer
			if err := tiff.Encode(&b, gradient(120, 80), nil); err != nil {
				t.Fatal(err)
			}
			return b.Bytes()
		}(), mime: "image/png", w: 120, h: 80, pixels: gradient(120, 80)},
		{name: "TIFF over the edge", data: encodeTIFF(t, gradient(600, 1200)), mime: "image/jpeg", w: 256, h: 512},
		{name: "BMP bomb", data: bombBMP(t, 20000, 20000), err: picture.ErrTooManyPixels},
		{name: "BMP bomb, top-down", data: bombBMP(t, 20000, -20000&0xffffffff), err: picture.ErrTooManyPixels},
		{name: "TIFF bomb", data: bombTIFF(t, 20000, 20000), err: picture.ErrTooManyPixels},
		{name: "BMP header without pixels", data: bombBMP(t, 300, 300), err: picture.ErrUnreadable},
		{name: "TIFF without its pixels", data: bombTIFF(t, 300, 300), err: picture.ErrUnreadable},
		{name: "a broken BMP", data: append([]byte("BM"), make([]byte, 60)...), err: picture.ErrUnreadable},
		{name: "empty", data: nil, err: picture.ErrUnreadable},
		{name: "cannot be made small enough", data: encodePNG(t, noise(600, 600)),
			lim: picture.Limits{MaxBytes: 500, MaxEdge: 512, MaxPixels: 1 << 20}, err: picture.ErrTooLarge},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			l := lim
			if tt.lim != (picture.Limits{}) {
				l = tt.lim
			}
			out, mime, err := picture.Fit(tt.data, l)
			if tt.err != nil || err != nil {
				if !errors.Is(err, tt.err) {
					t.Fatalf("error %v, want %v", err, tt.err)
				}
				return
			}
			if mime != tt.mime {
				t.Fatalf("MIME %q, want %q", mime, tt.mime)
			}
			if same := bytes.Equal(out, tt.data); same != tt.unchanged {
				t.Fatalf("unchanged: %v, want %v", same, tt.unchanged)
			}
			if int64(len(out)) > l.MaxBytes {
				t.Fatalf("%d bytes, over %d", len(out), l.MaxBytes)
			}
			img, format, err := image.Decode(bytes.NewReader(out))
			if err != nil {
				t.Fatalf("the result does not decode: %v", err)
			}
			if "image/"+format != mime {
				t.Fatalf("the result is a %s, said %s", format, mime)
			}
			b := img.Bounds()
			if max(b.Dx(), b.Dy()) > l.MaxEdge || tt.w != 0 && (b.Dx() != tt.w || b.Dy() != tt.h) {
				t.Fatalf("%dx%d, want %dx%d within %d", b.Dx(), b.Dy(), tt.w, tt.h, l.MaxEdge)
			}
			if tt.pixels != nil {
				samePixels(t, img, tt.pixels)
			}
			if tt.white {
				if r, g, bl, _ := img.At(b.Min.X, b.Min.Y).RGBA(); r < 0xf000 || g < 0xf000 || bl < 0xf000 {
					t.Fatalf("transparency became %v, not white", img.At(b.Min.X, b.Min.Y))
				}
			}
		})
	}
}

// samePixels fails t unless got's pixels are want's, in 8-bit
// non-premultiplied colour.
func samePixels(t *testing.T, got, want image.Image) {
	t.Helper()
	if got.Bounds().Size() != want.Bounds().Size() {
		t.Fatalf("%v, want %v", got.Bounds(), want.Bounds())
	}
	g, w := got.Bounds().Min, want.Bounds().Min
	for y := range want.Bounds().Dy() {
		for x := range want.Bounds().Dx() {
			gc := color.NRGBAModel.Convert(got.At(g.X+x, g.Y+y))
			wc := color.NRGBAModel.Convert(want.At(w.X+x, w.Y+y))
			if gc != wc {
				t.Fatalf("pixel %d,%d is %v, want %v", x, y, gc, wc)
			}
		}
	}
}

// TestFitTIFFPixels: decoding a TIFF holds, besides its pixels, a strip
// decompressed up to 8 bytes a pixel whatever its depth (in a buffer
// grown by doubling): 19 to 27 bytes a pixel measured, against 10 for a
// 16-bit PNG, so a TIFF of a few hundred kilobytes and 50 megapixels
// would hold about 1 GB, the worker's memory limit. Its pixels count
// twice against MaxPixels.
func TestFitTIFFPixels(t *testing.T) {
	t.Parallel()
	deep := func(w, h int) image.Image { // 16 bits a sample
		img := image.NewNRGBA64(image.Rect(0, 0, w, h))
		for i := range img.Pix {
			img.Pix[i] = byte(i)
		}
		return img
	}
	lim := picture.Limits{MaxBytes: 1 << 20, MaxEdge: 16, MaxPixels: 1000}
	for _, tc := range []struct {
		name    string
		data    []byte
		refused bool
	}{
		{"16-bit TIFF over half the limit", encodeTIFF(t, deep(25, 25)), true},
		{"8-bit TIFF over half the limit", encodeTIFF(t, gradient(25, 25)), true},
		{"16-bit TIFF within half the limit", encodeTIFF(t, deep(20, 20)), false},
		{"16-bit PNG within the limit", encodePNG(t, deep(25, 25)), false},
		{"BMP within the limit", encodeBMP(t, gradient(25, 25)), false},
	} {
		_, _, err := picture.Fit(tc.data, lim)
		if refused := errors.Is(err, picture.ErrTooManyPixels); refused != tc.refused || (!refused && err != nil) {
			t.Errorf("%s: %v, want refused %v", tc.name, err, tc.refused)
		}
		// The error tells the bound that applied, for the model to read.
		var px *picture.TooManyPixelsError
		if tc.refused && (!errors.As(err, &px) || px.Limit != lim.MaxPixels/2 || px.Width != 25 || px.Height != 25) {
			t.Errorf("%s: %#v, want the TIFF's bound %d", tc.name, px, lim.MaxPixels/2)
		}
	}
}

// TestFitRefusesCutPicturesBeforeDecoding: a picture whose header claims
// just under the pixel bound, and whose data cannot hold that many pixels,
// is refused before its decoder allocates them (about 200 MB for 49
// megapixels of PNG or BMP, 100 MB for a TIFF's 24).
func TestFitRefusesCutPicturesBeforeDecoding(t *testing.T) {
	// Not parallel: it counts the bytes the whole test binary allocates,
	// while the parallel tests wait for the sequential ones.
	lim := picture.Limits{MaxBytes: 5 << 20, MaxEdge: 2048, MaxPixels: picture.DefaultMaxPixels}
	for _, tc := range []struct {
		name string
		data []byte
	}{
		{"BMP", append(bombBMP(t, 7000, 7000), make([]byte, 100<<10)...)},
		{"top-down BMP", append(bombBMP(t, 7000, -7000&0xffffffff), make([]byte, 100<<10)...)},
		{"PNG", cutPNG(t, 7000, 7000, 100)},
		// Its decoder reads the IDAT chunks in a row from the first; the
		// one after another chunk, which would hold the pixels compressed,
		// is never read.
		{"PNG of an IDAT its decoder does not read", splitPNG(t, cutPNG(t, 7000, 7000, 100), 200<<10)},
		{"TIFF", bombTIFF(t, 4900, 5000)}, // within half the bound
		// Its decoder reads one strip (RowsPerStrip is its height), of 10
		// bytes; the 24 strips listed after it, which would hold the pixels
		// compressed, are never read.
		{"TIFF listing strips its decoder does not read", handTIFF(t, tiffSpec{order: binary.LittleEndian, w: 4900, h: 5000,
			compression: 8, rows: 5000, strips: append([][]byte{make([]byte, 10)}, slices.Repeat([][]byte{make([]byte, 1<<10)}, 24)...)})},
	} {
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		_, _, err := picture.Fit(tc.data, lim)
		runtime.ReadMemStats(&after)
		if !errors.Is(err, picture.ErrTruncated) || !errors.Is(err, picture.ErrUnreadable) {
			t.Errorf("%s: %v, want %v", tc.name, err, picture.ErrTruncated)
		}
		if n := after.TotalAlloc - before.TotalAlloc; n > 4<<20 {
			t.Errorf("%s: %d MB allocated to refuse it", tc.name, n>>20)
		}
	}
}

func TestFitRefusesBadLimits(t *testing.T) {
	t.Parallel()
	if _, _, err := picture.Fit(encodePNG(t, gradient(10, 10)), picture.Limits{MaxBytes: 1 << 20, MaxEdge: 100}); err == nil {
		t.Fatal("no MaxPixels: no error")
	}
}

func TestReadHeader(t *testing.T) {
	t.Parallel()
	h, err := picture.ReadHeader(bombPNG(20000, 10000))
	if err != nil || h != (picture.Header{MIME: "image/png", Width: 20000, Height: 10000}) {
		t.Fatalf("header %+v, %v", h, err)
	}
	animated := encodeGIF(t, 30, 20, 2)
	for _, tt := range []struct {
		data []byte
		want picture.Header
	}{
		{bombBMP(t, 20000, 10000), picture.Header{MIME: "image/bmp", Width: 20000, Height: 10000}},
		{bombBMP(t, 300, -200&0xffffffff), picture.Header{MIME: "image/bmp", Width: 300, Height: 200}}, // top-down
		{bombTIFF(t, 20000, 10000), picture.Header{MIME: "image/tiff", Width: 20000, Height: 10000}},
		{encodeGIF(t, 30, 20, 1), picture.Header{MIME: "image/gif", Width: 30, Height: 20}},
		{animated, picture.Header{MIME: "image/gif", Width: 30, Height: 20, Animated: true}},
		{animated[:len(animated)-10], picture.Header{MIME: "image/gif", Width: 30, Height: 20, Animated: true}}, // cut in its second frame
	} {
		if h, err := picture.ReadHeader(tt.data); err != nil || h != tt.want {
			t.Errorf("header %+v, %v; want %+v", h, err, tt.want)
		}
	}
	if _, err := picture.ReadHeader([]byte("hello")); !errors.Is(err, picture.ErrUnreadable) {
		t.Fatalf("not a picture: %v", err)
	}
	lim := picture.Limits{MaxBytes: 100, MaxEdge: 50}
	for _, tt := range []struct {
		h    picture.Header
		n    int
		want bool
	}{
		{picture.Header{MIME: "image/png", Width: 50, Height: 20}, 100, true},
		{picture.Header{MIME: "image/webp", Width: 20, Height: 51}, 100, false},
		{picture.Header{MIME: "image/jpeg", Width: 50, Height: 50}, 101, false},
		{picture.Header{MIME: "image/bmp", Width: 10, Height: 10}, 50, false}, // no provider takes it as it is
		{picture.Header{MIME: "image/tiff", Width: 10, Height: 10}, 50, false},
		{picture.Header{MIME: "image/gif", Width: 10, Height: 10}, 50, true},
		{picture.Header{MIME: "image/gif", Width: 10, Height: 10, Animated: true}, 50, false},
	} {
		if got := lim.Fits(tt.h, tt.n); got != tt.want {
			t.Errorf("Fits(%+v, %d) = %v", tt.h, tt.n, got)
		}
	}
}

// FuzzFit: whatever bytes a user sends, Fit returns a picture within the
// limits, in the format it names, one the providers take (a BMP or TIFF
// is encoded again), or one of its errors; it never panics, and never
// refuses as cut short (ErrTruncated) a picture its decoder reads.
// The limits are small, so that each input decodes quickly.
func FuzzFit(f *testing.F) {
	f.Add(encodePNG(f, gradient(200, 8)))
	f.Add(encodePNG(f, transparent(20, 20)))
	f.Add(encodeJPEG(f, noise(40, 20), 95))
	f.Add(encodeGIF(f, 150, 4, 1))
	f.Add(encodeGIF(f, 30, 20, 3))
	f.Add(readFile(f, "testdata/blue.lossy.webp"))
	f.Add(readFile(f, "testdata/gopher.lossless.webp"))
	f.Add(bombPNG(1<<20, 1<<20))
	f.Add(encodeBMP(f, transparent(30, 10)))
	f.Add(encodeBMP(f, noise(20, 20)))
	f.Add(encodeTIFF(f, gradient(40, 30)))
	f.Add(encodeTIFF(f, transparent(16, 16)))
	f.Add(bombBMP(f, 1<<20, 1<<20))
	f.Add(bombTIFF(f, 60000, 60000))
	f.Add(handBMP(4, 5, 0, 9, 5, true))
	f.Add(handPNG(f, 1, 37, 29, true, bytes.Repeat([]byte{1}, 37*29), 40))
	f.Add(handTIFF(f, tiffSpec{order: binary.BigEndian, w: 40, h: 20, compression: 8, pixels: make([]byte, 40*20), tile: 16, short: true}))
	f.Add(handTIFF(f, tiffSpec{order: binary.LittleEndian, w: 128, h: 8, compression: 32773, pixels: make([]byte, 128*8), rows: 2}))
	f.Add(animatedGIF(f, true))
	lim := picture.Limits{MaxBytes: 4 << 10, MaxEdge: 96, MaxPixels: 1 << 16}
	f.Fuzz(func(t *testing.T, data []byte) {
		out, mime, err := picture.Fit(data, lim)
		if errors.Is(err, picture.ErrTruncated) {
			// Refused before decoding: its decoder must fail on it too.
			if _, _, derr := image.Decode(bytes.NewReader(data)); derr == nil {
				t.Fatalf("refused as cut short (%v), which its decoder reads", err)
			}
		}
		if err != nil {
			if !errors.Is(err, picture.ErrUnreadable) && !errors.Is(err, picture.ErrTooManyPixels) && !errors.Is(err, picture.ErrTooLarge) {
				t.Fatalf("unexpected error: %v", err)
			}
			return
		}
		if int64(len(out)) > lim.MaxBytes {
			t.Fatalf("%d bytes, over %d", len(out), lim.MaxBytes)
		}
		h, err := picture.ReadHeader(out)
		if err != nil {
			t.Fatalf("the result has no header: %v", err)
		}
		if h.MIME != mime || max(h.Width, h.Height) > lim.MaxEdge || !lim.Fits(h, len(out)) {
			t.Fatalf("the result is %+v, said %s", h, mime)
		}
		if !bytes.Equal(out, data) && mime != "image/jpeg" && mime != "image/png" {
			t.Fatalf("a new picture in %s", mime)
		}
	})
}

// placedGIF is a GIF of a w×h screen whose first frame covers only
// first, with a second frame over the whole screen: so its first frame
// is what is shown of it (Fit). firstShown is how that frame shows.
func placedGIF(t testing.TB, w, h int, first image.Rectangle) (data []byte, firstShown *image.NRGBA) {
	t.Helper()
	frame := image.NewPaletted(first, palette.Plan9)
	for i := range frame.Pix {
		frame.Pix[i] = uint8(i/first.Dx()%200 + 20)
	}
	g := &gif.GIF{Config: image.Config{Width: w, Height: h}, Delay: []int{10, 10},
		Image: []*image.Paletted{frame, gifFrame(w, h, 1)}}
	var b bytes.Buffer
	if err := gif.EncodeAll(&b, g); err != nil {
		t.Fatal(err)
	}
	firstShown = image.NewNRGBA(image.Rect(0, 0, w, h)) // transparent around the frame
	for y := first.Min.Y; y < first.Max.Y; y++ {
		for x := first.Min.X; x < first.Max.X; x++ {
			firstShown.Set(x, y, frame.At(x, y))
		}
	}
	return b.Bytes(), firstShown
}

// A GIF's first frame may cover only part of its screen (its logical
// size), anywhere on it: it is shown on the screen, at its place, the
// rest transparent (white in a JPEG), as browsers and the providers show
// a GIF of one such frame taken as it is. Not the frame alone, moved to
// the top left corner and of another size than the picture's.
func TestFitShowsAGIFsFirstFrameOnItsScreen(t *testing.T) {
	t.Parallel()
	lim := picture.Limits{MaxBytes: 200 << 10, MaxEdge: 512, MaxPixels: 4_000_000}
	small, smallShown := placedGIF(t, 60, 40, image.Rect(30, 10, 50, 35))
	big, _ := placedGIF(t, 1000, 600, image.Rect(600, 100, 900, 400))
	for _, tt := range []struct {
		name   string
		data   []byte
		mime   string
		w, h   int
		pixels image.Image // the result's pixels are exactly these
		white  bool        // its top left pixel is white (flattened transparency)
	}{
		{"animated, within the limits", small, "image/png", 60, 40, smallShown, false},
		{"animated, over the edge", big, "image/jpeg", 512, 307, nil, true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			out, mime, err := picture.Fit(tt.data, lim)
			if err != nil || mime != tt.mime {
				t.Fatalf("%s, %v; want %s", mime, err, tt.mime)
			}
			img, _, err := image.Decode(bytes.NewReader(out))
			if err != nil {
				t.Fatal(err)
			}
			if b := img.Bounds(); b.Dx() != tt.w || b.Dy() != tt.h {
				t.Fatalf("%dx%d, want %dx%d: the screen's size", b.Dx(), b.Dy(), tt.w, tt.h)
			}
			if tt.pixels != nil {
				samePixels(t, img, tt.pixels)
			}
			if tt.white {
				if r, g, b, _ := img.At(0, 0).RGBA(); r < 0xf000 || g < 0xf000 || b < 0xf000 {
					t.Fatalf("the screen around the frame is %v, not white", img.At(0, 0))
				}
			}
		})
	}
}

// A TIFF of tiles smaller than its decoder reads (8 pixels a side) is
// left to its decoder, which refuses it before it reads any tile: the
// length check walked its tiles, one a pixel, as many as its directory
// lists within the data (0.9 s for a TIFF of 20 MB listing 20 million),
// before it refused it as cut short.
func TestFitLeavesTilesTooSmallToItsDecoder(t *testing.T) {
	t.Parallel()
	const size = 20 << 20 // agent.max_image_source_bytes
	data := make([]byte, size)
	copy(data, "II*\x00")
	binary.LittleEndian.PutUint32(data[4:], 8) // the directory
	// Where its tiles' offsets and counts are, one byte each.
	const tiles = 4096
	// Tag, type (1 BYTE, 3 SHORT), count, value.
	entries := [][4]uint32{
		{256, 3, 1, 5000}, {257, 3, 1, 5000}, {258, 3, 1, 8}, {259, 3, 1, 1}, {262, 3, 1, 1}, // 5000x5000 8-bit grey
		{322, 3, 1, 1}, {323, 3, 1, 1}, // tiles of 1x1
		{324, 1, 25_000_000, tiles}, {325, 1, 25_000_000, tiles},
	}
	binary.LittleEndian.PutUint16(data[8:], uint16(len(entries)))
	for i, e := range entries {
		p := data[10+12*i:]
		binary.LittleEndian.PutUint16(p, uint16(e[0]))
		binary.LittleEndian.PutUint16(p[2:], uint16(e[1]))
		binary.LittleEndian.PutUint32(p[4:], e[2])
		binary.LittleEndian.PutUint32(p[8:], e[3])
	}
	start := time.Now()
	_, _, err := picture.Fit(data, picture.Limits{MaxBytes: 4 << 20, MaxEdge: 2048, MaxPixels: picture.DefaultMaxPixels})
	took := time.Since(start)
	if !errors.Is(err, picture.ErrUnreadable) || errors.Is(err, picture.ErrTruncated) {
		t.Fatalf("%v, want it refused by its decoder (tiles too small), not by the length check", err)
	}
	if took > 250*time.Millisecond {
		t.Errorf("refused in %v, want at once", took)
	}
}
