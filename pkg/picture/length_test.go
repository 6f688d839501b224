package picture_test

import (
	"bytes"
	"compress/lzw"
	"compress/zlib"
	"encoding/binary"
	"hash/crc32"
	"image"
	"image/color"
	"image/gif"
	"image/png"
	"strings"
	"testing"

	"github.com/switchboard-chat/switchboard/pkg/picture"
)

// TestFitTakesWhatItsDecoderReads: the length checks made before
// decoding (ErrTruncated) refuse no picture its decoder reads, in any of
// the forms its format allows and the decoders take: BMPs top-down, of
// 1 to 32 bits, with a palette shorter than its bits allow or a V4
// header; PNGs of 1 to 16 bits, in several IDAT chunks, interlaced, or
// compressed as far as deflate goes; TIFFs big-endian, tiled, of SHORT
// or LONG strip counts, in many strips, uncompressed or compressed by
// PackBits (a run of 128 bytes in 2), LZW or Deflate; GIFs of local
// colour tables and extensions between their frames.
func TestFitTakesWhatItsDecoderReads(t *testing.T) {
	t.Parallel()
	le, be := byteOrder(binary.LittleEndian), byteOrder(binary.BigEndian)
	grey := func(w, h int) []byte { // w×h 8-bit samples, a gradient
		b := make([]byte, w*h)
		for i := range b {
			b[i] = byte(i%w + i/w)
		}
		return b
	}
	uniform := func(n int) []byte { return bytes.Repeat([]byte{0x80}, n) }
	type tc struct {
		name string
		data []byte
	}
	cases := []tc{
		// BMP
		{"BMP, 24 bits, top-down", topDownBMP(t, encodeBMP(t, gradient(33, 17)))},
		{"BMP, 32 bits, with alpha", encodeBMP(t, transparent(31, 9))},
		{"BMP, 8 bits, paletted", encodeBMP(t, paletted(37, 11, 256))},
		{"BMP, 8 bits, grey", encodeBMP(t, image.NewGray(image.Rect(0, 0, 13, 7)))},
		{"BMP, 1 bit", handBMP(1, 2, 0, 35, 9, false)},
		{"BMP, 1 bit, top-down", handBMP(1, 2, 0, 35, 9, true)},
		{"BMP, 2 bits", handBMP(2, 4, 0, 7, 3, false)},
		{"BMP, 4 bits, 5 colours used", handBMP(4, 5, 0, 9, 5, false)},
		{"BMP, 8 bits, 3 colours used", handBMP(8, 3, 0, 5, 4, true)},
		{"BMP, 32 bits, V4 header, bitfields", handBMP(32, 0, 108, 6, 5, false)},
		{"BMP, 24 bits, V5 header", handBMP(24, 0, 124, 7, 3, true)},
		// PNG
		{"PNG, 16-bit grey", encodePNG(t, image.NewGray16(image.Rect(0, 0, 40, 30)))},
		{"PNG, 16-bit RGBA", encodePNG(t, deep16(40, 30))},
		{"PNG, 1-bit palette", encodePNG(t, paletted(41, 13, 2))},
		{"PNG, 2-bit palette", encodePNG(t, paletted(41, 13, 4))},
		{"PNG, 4-bit palette", encodePNG(t, paletted(41, 13, 16))},
		{"PNG, 8-bit palette", encodePNG(t, paletted(41, 13, 200))},
		{"PNG, several IDAT chunks", encodePNG(t, noise(300, 200))},
		{"PNG, one IDAT chunk a row", handPNG(t, 8, 50, 40, false, grey(50, 40), 51)},
		{"PNG, interlaced", handPNG(t, 8, 37, 29, true, grey(37, 29), 0)},
		{"PNG, interlaced, 1-bit grey", handPNG(t, 1, 37, 29, true, uniform(37*29), 0)},
		{"PNG, uniform, deflated at best", encodePNGBest(t, image.NewPaletted(image.Rect(0, 0, 3000, 2000), color.Palette{color.Black, color.White}))},
		{"PNG, uniform 16-bit grey, deflated at best", encodePNGBest(t, image.NewGray16(image.Rect(0, 0, 1500, 1000)))},
		// TIFF
		{"TIFF, Deflate, 16-bit RGBA", encodeTIFF(t, deep16(40, 30))},
		{"TIFF, Deflate, paletted", encodeTIFF(t, paletted(40, 30, 256))},
		{"TIFF, uncompressed, big-endian", handTIFF(t, tiffSpec{order: be, w: 30, h: 20, pixels: grey(30, 20), rows: 7})},
		{"TIFF, uncompressed, SHORT counts", handTIFF(t, tiffSpec{order: le, w: 30, h: 20, pixels: grey(30, 20), rows: 3, short: true})},
		{"TIFF, uncompressed, SHORT counts, big-endian", handTIFF(t, tiffSpec{order: be, w: 30, h: 20, pixels: grey(30, 20), rows: 1, short: true})},
		{"TIFF, uncompressed, strips sharing bytes", handTIFF(t, tiffSpec{order: le, w: 30, h: 20, pixels: uniform(30 * 20), rows: 1, shared: true})},
		{"TIFF, 1 bit, rows padded", handTIFF(t, tiffSpec{order: le, w: 13, h: 9, bits: 1, pixels: uniform(2 * 9), rows: 4})},
		{"TIFF, PackBits, runs of 128", handTIFF(t, tiffSpec{order: le, w: 256, h: 64, compression: 32773, pixels: uniform(256 * 64), rows: 16})},
		{"TIFF, PackBits, big-endian", handTIFF(t, tiffSpec{order: be, w: 30, h: 20, compression: 32773, pixels: grey(30, 20), rows: 6})},
		{"TIFF, LZW, many strips", handTIFF(t, tiffSpec{order: le, w: 30, h: 20, compression: 5, pixels: grey(30, 20), rows: 2})},
		{"TIFF, LZW, big-endian", handTIFF(t, tiffSpec{order: be, w: 30, h: 20, compression: 5, pixels: grey(30, 20), rows: 5, short: true})},
		{"TIFF, Deflate, many strips", handTIFF(t, tiffSpec{order: le, w: 30, h: 20, compression: 8, pixels: grey(30, 20), rows: 3})},
		{"TIFF, Deflate, uniform, one strip", handTIFF(t, tiffSpec{order: be, w: 2000, h: 1500, compression: 8, pixels: uniform(2000 * 1500), rows: 1500})},
		{"TIFF, old Deflate", handTIFF(t, tiffSpec{order: le, w: 30, h: 20, compression: 32946, pixels: grey(30, 20), rows: 20})},
		{"TIFF, tiles", handTIFF(t, tiffSpec{order: le, w: 40, h: 20, pixels: grey(40, 20), tile: 16})},
		{"TIFF, tiles, Deflate, big-endian, SHORT counts", handTIFF(t, tiffSpec{order: be, w: 40, h: 20, compression: 8, pixels: grey(40, 20), tile: 16, short: true})},
		{"TIFF, RGB, 3 samples", handTIFF(t, tiffSpec{order: le, w: 20, h: 10, samples: 3, pixels: grey(60, 10), rows: 4})},
		// GIF
		{"GIF, local colour tables, extensions between frames", animatedGIF(t, true)},
		{"GIF, one frame of a local colour table", animatedGIF(t, false)},
	}
	lim := picture.Limits{MaxBytes: 4 << 20, MaxEdge: 4096, MaxPixels: picture.DefaultMaxPixels}
	for _, c := range cases {
		if _, _, err := image.Decode(bytes.NewReader(c.data)); err != nil {
			t.Errorf("%s: the case is no picture its decoder reads: %v", c.name, err)
			continue
		}
		if _, _, err := picture.Fit(c.data, lim); err != nil {
			t.Errorf("%s: Fit: %v, want the picture taken", c.name, err)
		}
		if h, err := picture.ReadHeader(c.data); err != nil || h.Animated != strings.Contains(c.name, "between frames") {
			t.Errorf("%s: header %+v, %v", c.name, h, err)
		}
	}
}

// paletted is a w×h picture of n colours, each used.
func paletted(w, h, n int) *image.Paletted {
	p := make(color.Palette, n)
	for i := range p {
		p[i] = color.RGBA{uint8(i * 7), uint8(255 - i), uint8(i * 3), 255}
	}
	img := image.NewPaletted(image.Rect(0, 0, w, h), p)
	for i := range img.Pix {
		img.Pix[i] = uint8(i % n)
	}
	return img
}

// deep16 is a w×h picture of 16 bits a sample.
func deep16(w, h int) *image.NRGBA64 {
	img := image.NewNRGBA64(image.Rect(0, 0, w, h))
	for i := range img.Pix {
		img.Pix[i] = byte(i * 13)
	}
	for i := 6; i < len(img.Pix); i += 8 {
		img.Pix[i] = 0xff
	}
	return img
}

func encodePNGBest(t testing.TB, img image.Image) []byte {
	t.Helper()
	var b bytes.Buffer
	if err := (&png.Encoder{CompressionLevel: png.BestCompression}).Encode(&b, img); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// topDownBMP is b, a BMP, told top-down (a negative height): its rows
// read in the other order, the picture upside down, its bytes as many.
func topDownBMP(t testing.TB, b []byte) []byte {
	t.Helper()
	b = bytes.Clone(b)
	h := int32(binary.LittleEndian.Uint32(b[22:]))
	binary.LittleEndian.PutUint32(b[22:], uint32(-h))
	return b
}

// handBMP is a w×h BMP of so many bits a pixel: paletted (of used
// colours, 0 for all its bits allow), else 24 or 32 bits. info is its
// info header's length (40 when 0; 108 or 124 carry the default masks,
// BI_BITFIELDS at 32 bits).
func handBMP(bits, used, info, w, h int, topDown bool) []byte {
	if info == 0 {
		info = 40
	}
	colours := 0
	if bits <= 8 {
		colours = used
		if colours == 0 {
			colours = 1 << bits
		}
	}
	row := (w*bits + 31) / 32 * 4
	offset := 14 + info + 4*colours
	b := make([]byte, offset+row*h)
	copy(b, "BM")
	binary.LittleEndian.PutUint32(b[2:], uint32(len(b)))
	binary.LittleEndian.PutUint32(b[10:], uint32(offset))
	binary.LittleEndian.PutUint32(b[14:], uint32(info))
	binary.LittleEndian.PutUint32(b[18:], uint32(w))
	height := int32(h)
	if topDown {
		height = -height
	}
	binary.LittleEndian.PutUint32(b[22:], uint32(height))
	binary.LittleEndian.PutUint16(b[26:], 1)
	binary.LittleEndian.PutUint16(b[28:], uint16(bits))
	if bits <= 8 {
		binary.LittleEndian.PutUint32(b[46:], uint32(used))
	}
	if info > 40 {
		if bits == 32 {
			binary.LittleEndian.PutUint32(b[30:], 3) // BI_BITFIELDS
		}
		for i, m := range []uint32{0xff0000, 0xff00, 0xff, 0xff000000} {
			binary.LittleEndian.PutUint32(b[54+4*i:], m)
		}
	}
	for i := range colours {
		b[14+info+4*i] = byte(i * 40)
	}
	// Pixels of index 0 (within any palette), or of grey.
	for i := offset; i < len(b) && bits > 8; i++ {
		b[i] = byte(i)
	}
	return b
}

// handPNG is a w×h grey PNG of so many bits a sample from samples (one
// byte each, the low bits kept), interlaced (Adam7) or not, its
// compressed data in IDAT chunks of chunk bytes (0: one chunk).
func handPNG(t testing.TB, bits byte, w, h int, interlaced bool, samples []byte, chunk int) []byte {
	t.Helper()
	var raw []byte
	rows := func(x0, y0, dx, dy int) {
		for y := y0; y < h; y += dy {
			var line []byte
			var acc, n byte
			count := 0
			for x := x0; x < w; x += dx {
				acc, n, count = acc<<bits|samples[y*w+x]&(1<<bits-1), n+bits, count+1
				if n == 8 {
					line, acc, n = append(line, acc), 0, 0
				}
			}
			if count == 0 {
				return // an empty pass has no rows, not even a filter byte
			}
			if n > 0 {
				line = append(line, acc<<(8-n))
			}
			raw = append(append(raw, 0), line...)
		}
	}
	if interlaced {
		for _, p := range [][4]int{{0, 0, 8, 8}, {4, 0, 8, 8}, {0, 4, 4, 8}, {2, 0, 4, 4}, {0, 2, 2, 4}, {1, 0, 2, 2}, {0, 1, 1, 2}} {
			rows(p[0], p[1], p[2], p[3])
		}
	} else {
		rows(0, 0, 1, 1)
	}
	var z bytes.Buffer
	zw := zlib.NewWriter(&z)
	if _, err := zw.Write(raw); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	ihdr := make([]byte, 13)
	binary.BigEndian.PutUint32(ihdr, uint32(w))
	binary.BigEndian.PutUint32(ihdr[4:], uint32(h))
	ihdr[8] = bits
	if interlaced {
		ihdr[12] = 1
	}
	b := []byte("\x89PNG\r\n\x1a\n")
	put := func(typ string, data []byte) {
		b = binary.BigEndian.AppendUint32(b, uint32(len(data)))
		body := append([]byte(typ), data...)
		b = append(b, body...)
		b = binary.BigEndian.AppendUint32(b, crc32.ChecksumIEEE(body))
	}
	put("IHDR", ihdr)
	put("tEXt", []byte("Comment\x00between the header and the pixels"))
	for d := z.Bytes(); len(d) > 0; {
		n := len(d)
		if chunk > 0 {
			n = min(n, chunk)
		}
		put("IDAT", d[:n])
		d = d[n:]
	}
	put("IEND", nil)
	return b
}

// byteOrder puts and appends, as binary.LittleEndian and BigEndian do.
type byteOrder interface {
	binary.ByteOrder
	binary.AppendByteOrder
}

// tiffSpec is a grey (or RGB, of 3 samples) TIFF for handTIFF.
type tiffSpec struct {
	order       byteOrder
	w, h        int
	bits        int      // a sample; 8 when 0
	samples     int      // 1 when 0; 3 is RGB
	compression uint16   // 1 when 0
	pixels      []byte   // packed rows, each padded to a byte
	rows        int      // a strip, when not tiled
	tile        int      // a tile's side, when tiled
	short       bool     // strip or tile counts and offsets of type SHORT
	shared      bool     // every strip at the first one's bytes
	strips      [][]byte // listed as they are, compressed, instead of pixels
}

// handTIFF is the TIFF s describes: its strips (or tiles), compressed,
// then its directory, entries in ascending order.
func handTIFF(t testing.TB, s tiffSpec) []byte {
	t.Helper()
	bits, samples := max(s.bits, 8*boolInt(s.bits == 0)), max(s.samples, 1)
	compression := max(s.compression, 1)
	rowBytes := (s.w*bits*samples + 7) / 8
	chunks := s.strips
	switch {
	case chunks != nil:
	case s.tile > 0:
		tb := (s.tile*bits*samples + 7) / 8
		for ty := 0; ty < s.h; ty += s.tile {
			for tx := 0; tx < s.w; tx += s.tile {
				tile := make([]byte, tb*s.tile)
				for y := 0; y < s.tile && ty+y < s.h; y++ {
					from := (ty+y)*rowBytes + tx*bits*samples/8
					copy(tile[y*tb:(y+1)*tb], s.pixels[from:min(from+tb, (ty+y+1)*rowBytes)])
				}
				chunks = append(chunks, tile)
			}
		}
	default:
		for y := 0; y < s.h; y += s.rows {
			chunks = append(chunks, s.pixels[y*rowBytes:min(y+s.rows, s.h)*rowBytes])
		}
	}
	for i, c := range chunks {
		if s.strips == nil {
			chunks[i] = compressTIFF(t, compression, c, rowBytes)
		}
	}
	b := make([]byte, 8)
	copy(b, "II*\x00")
	if s.order == binary.BigEndian {
		copy(b, "MM\x00*")
	}
	var offsets, counts []uint32
	for i, c := range chunks {
		if s.shared && i > 0 {
			offsets, counts = append(offsets, offsets[0]), append(counts, counts[0])
			continue
		}
		offsets, counts = append(offsets, uint32(len(b))), append(counts, uint32(len(c)))
		b = append(b, c...)
	}
	type entry struct {
		tag, typ uint16
		vals     []uint32
	}
	countType := uint16(4)
	if s.short {
		countType = 3
	}
	bps := make([]uint32, samples)
	for i := range bps {
		bps[i] = uint32(bits)
	}
	photometric := uint32(1)
	if samples == 3 {
		photometric = 2
	}
	entries := []entry{
		{256, 4, []uint32{uint32(s.w)}},
		{257, 4, []uint32{uint32(s.h)}},
		{258, 3, bps},
		{259, 3, []uint32{uint32(compression)}},
		{262, 3, []uint32{photometric}},
	}
	if s.tile > 0 {
		entries = append(entries,
			entry{277, 3, []uint32{uint32(samples)}},
			entry{322, 3, []uint32{uint32(s.tile)}},
			entry{323, 3, []uint32{uint32(s.tile)}},
			entry{324, countType, offsets},
			entry{325, countType, counts})
	} else {
		entries = append(entries,
			entry{273, countType, offsets},
			entry{277, 3, []uint32{uint32(samples)}},
			entry{278, 3, []uint32{uint32(s.rows)}},
			entry{279, countType, counts})
	}
	// Values of more than 4 bytes go before the directory.
	at := make([]uint32, len(entries))
	for i, e := range entries {
		size := 2
		if e.typ == 4 {
			size = 4
		}
		if size*len(e.vals) <= 4 {
			continue
		}
		at[i] = uint32(len(b))
		for _, v := range e.vals {
			if size == 2 {
				b = s.order.AppendUint16(b, uint16(v))
			} else {
				b = s.order.AppendUint32(b, v)
			}
		}
	}
	if len(b)%2 == 1 {
		b = append(b, 0)
	}
	s.order.PutUint32(b[4:], uint32(len(b)))
	b = s.order.AppendUint16(b, uint16(len(entries)))
	for i, e := range entries {
		b = s.order.AppendUint16(b, e.tag)
		b = s.order.AppendUint16(b, e.typ)
		b = s.order.AppendUint32(b, uint32(len(e.vals)))
		var v [4]byte
		switch {
		case at[i] != 0:
			s.order.PutUint32(v[:], at[i])
		case e.typ == 3:
			for k, x := range e.vals {
				s.order.PutUint16(v[2*k:], uint16(x))
			}
		default:
			s.order.PutUint32(v[:], e.vals[0])
		}
		b = append(b, v[:]...)
	}
	return s.order.AppendUint32(b, 0) // no next directory
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// compressTIFF compresses a strip or tile as TIFF's compression c does,
// PackBits row by row (as the specification asks), in runs of 128 where
// it can.
func compressTIFF(t testing.TB, c uint16, raw []byte, rowBytes int) []byte {
	t.Helper()
	var out bytes.Buffer
	switch c {
	case 1:
		return raw
	case 8, 32946:
		zw, _ := zlib.NewWriterLevel(&out, zlib.BestCompression)
		if _, err := zw.Write(raw); err != nil {
			t.Fatal(err)
		}
		if err := zw.Close(); err != nil {
			t.Fatal(err)
		}
	case 5: // short enough that no code grows past 9 bits, where TIFF's LZW and Go's part
		if len(raw) > 250 {
			t.Fatalf("an LZW strip of %d bytes, over 250", len(raw))
		}
		zw := lzw.NewWriter(&out, lzw.MSB, 8)
		if _, err := zw.Write(raw); err != nil {
			t.Fatal(err)
		}
		if err := zw.Close(); err != nil {
			t.Fatal(err)
		}
	case 32773:
		for r := 0; r < len(raw); r += rowBytes {
			row := raw[r:min(r+rowBytes, len(raw))]
			for len(row) > 0 {
				n := 1
				for n < len(row) && n < 128 && row[n] == row[0] {
					n++
				}
				if n > 1 { // a run
					out.Write([]byte{byte(int8(1 - n)), row[0]})
				} else { // one literal byte
					out.Write([]byte{0, row[0]})
				}
				row = row[n:]
			}
		}
	default:
		t.Fatalf("compression %d", c)
	}
	return out.Bytes()
}

// animatedGIF is a GIF whose frames each have their own colour table
// (local), its loop count (an application extension) and each frame's
// delay and disposal (a graphic control extension before each) and a
// comment extension after its first frame; of one frame when not
// animated.
func animatedGIF(t testing.TB, animated bool) []byte {
	t.Helper()
	frame := func(n int, r image.Rectangle) *image.Paletted {
		p := color.Palette{color.RGBA{uint8(n * 90), 0, 0, 255}, color.RGBA{0, uint8(n * 60), 255, 255}, color.Black}
		img := image.NewPaletted(r, p)
		for i := range img.Pix {
			img.Pix[i] = uint8(i % 3)
		}
		return img
	}
	g := &gif.GIF{LoopCount: 3, Config: image.Config{Width: 60, Height: 40,
		ColorModel: color.Palette{color.White, color.Black}}} // a global table none uses
	frames := 1
	if animated {
		frames = 3
	}
	for n := range frames {
		g.Image = append(g.Image, frame(n+1, image.Rect(n*5, n*3, 60-n*7, 40-n*4)))
		g.Delay, g.Disposal = append(g.Delay, 5), append(g.Disposal, gif.DisposalBackground)
	}
	var b bytes.Buffer
	if err := gif.EncodeAll(&b, g); err != nil {
		t.Fatal(err)
	}
	data := b.Bytes()
	if !animated {
		return data
	}
	// A comment extension before the second frame's graphic control.
	gce := []byte{0x21, 0xf9, 0x04}
	first := bytes.Index(data, gce)
	second := first + 3 + bytes.Index(data[first+3:], gce)
	if first < 0 || second < first+3 {
		t.Fatal("no second graphic control extension")
	}
	comment := []byte{0x21, 0xfe, 5, 'h', 'e', 'l', 'l', 'o', 0}
	return append(append(append([]byte{}, data[:second]...), comment...), data[second:]...)
}
