package worker

import (
	"bytes"
	"io"
	"strings"
	"testing"
	"testing/iotest"
)

// TestStoredAudioHoldsTheStoredSize: audio read from the store says its
// stored size (Len, sent as the upload's length) and yields no byte past
// it, so a store whose size lies cannot stream more than the size checked
// against attachments.max_bytes.
func TestStoredAudioHoldsTheStoredSize(t *testing.T) {
	data := bytes.Repeat([]byte("abcd"), 100<<10)
	cases := []struct {
		name    string
		size    int64
		want    int // bytes read before the error
		wantErr bool
	}{
		{name: "as stored", size: int64(len(data)), want: len(data)},
		{name: "more than stored", size: 1000, want: 1000, wantErr: true},
		{name: "empty but not", size: 0, want: 0, wantErr: true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			a := newStoredAudio(io.NopCloser(iotest.HalfReader(bytes.NewReader(data))), tc.size)
			if a.Len() != int(tc.size) {
				t.Fatalf("Len %d, want the stored %d", a.Len(), tc.size)
			}
			got, err := io.ReadAll(a)
			if len(got) != tc.want || (err != nil) != tc.wantErr {
				t.Fatalf("read %d bytes, err %v; want %d, an error %v", len(got), err, tc.want, tc.wantErr)
			}
			if err != nil && !strings.Contains(err.Error(), "more than its stored") {
				t.Fatalf("err %v", err)
			}
		})
	}
}
