package fakellm_test

import (
	"bytes"
	"encoding/binary"
	"testing"

	"github.com/switchboard-chat/switchboard/pkg/fakellm"
)

// oggCRCTable is Ogg's CRC-32 (polynomial 0x04c11db7, MSB first) as a
// table, built apart from the fake's bitwise one.
var oggCRCTable = func() (t [256]uint32) {
	for i := range t {
		r := uint32(i) << 24
		for range 8 {
			if r&0x80000000 != 0 {
				r = r<<1 ^ 0x04c11db7
			} else {
				r <<= 1
			}
		}
		t[i] = r
	}
	return t
}()

// OggOpus is what RFC 7845 asks of an Ogg/Opus file: a first page
// (beginning of stream) holding only OpusHead, a second holding
// OpusTags, then the audio, the last page ending the stream with the
// granule position of its samples; each page's CRC right.
func TestOggOpus(t *testing.T) {
	for _, frames := range []int{1, 7, 255, 300} {
		data := fakellm.OggOpus(frames)
		var pages [][]byte
		var flags []byte
		var granules []uint64
		for off := 0; off < len(data); {
			if len(data) < off+27 || !bytes.Equal(data[off:off+4], []byte("OggS")) || data[off+4] != 0 {
				t.Fatalf("%d frames: no Ogg page at %d", frames, off)
			}
			nseg := int(data[off+26])
			size := 27 + nseg
			var body int
			for _, l := range data[off+27 : off+27+nseg] {
				body += int(l)
			}
			page := append([]byte(nil), data[off:off+size+body]...)
			want := binary.LittleEndian.Uint32(page[22:])
			binary.LittleEndian.PutUint32(page[22:], 0)
			var crc uint32
			for _, c := range page {
				crc = crc<<8 ^ oggCRCTable[byte(crc>>24)^c]
			}
			if crc != want {
				t.Fatalf("%d frames: page %d CRC %08x, want %08x", frames, len(pages), want, crc)
			}
			if seq := binary.LittleEndian.Uint32(page[18:]); int(seq) != len(pages) {
				t.Fatalf("page sequence %d at page %d", seq, len(pages))
			}
			flags = append(flags, page[5])
			granules = append(granules, binary.LittleEndian.Uint64(page[6:]))
			pages = append(pages, page[size:])
			off += size + body
		}
		if len(pages) != 3 || flags[0] != 0x02 || flags[1] != 0 || flags[2] != 0x04 {
			t.Fatalf("%d frames: %d pages, flags %v", frames, len(pages), flags)
		}
		head := pages[0]
		if len(head) != 19 || !bytes.HasPrefix(head, []byte("OpusHead")) || head[8] != 1 || head[9] != 1 {
			t.Fatalf("OpusHead %q", head)
		}
		if !bytes.HasPrefix(pages[1], []byte("OpusTags")) {
			t.Fatalf("OpusTags %q", pages[1])
		}
		n := min(frames, 255)
		if len(pages[2]) != 3*n || granules[2] != uint64(312+960*n) {
			t.Fatalf("%d frames: audio %d bytes, granule %d", frames, len(pages[2]), granules[2])
		}
	}
}
