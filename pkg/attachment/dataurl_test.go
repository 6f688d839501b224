package attachment_test

import (
	"bytes"
	"encoding/base64"
	"strings"
	"testing"

	"github.com/switchboard-chat/switchboard/pkg/attachment"
)

func TestDataURL(t *testing.T) {
	t.Parallel()
	png := []byte("\x89PNG\r\n\x1a\n\x00\xff")
	tests := []struct {
		name    string
		in      string
		ok      bool
		wantErr bool
		data    []byte
		mime    string
	}{
		{"web address", "https://example.com/a.png", false, false, nil, ""},
		{"base64", "data:image/png;base64," + base64.StdEncoding.EncodeToString(png), true, false, png, "image/png"},
		{"unpadded base64", "data:image/png;base64," + base64.RawStdEncoding.EncodeToString(png), true, false, png, "image/png"},
		{"parameters before base64", "data:image/webp;name=a.webp;base64,UklGRg==", true, false, []byte("RIFF"), "image/webp"},
		{"percent-encoded text", "data:text/plain,hello%20world", true, false, []byte("hello world"), "text/plain"},
		{"no comma", "data:image/png;base64", true, true, nil, ""},
		{"bad base64", "data:image/png;base64,@@@", true, true, nil, ""},
		{"bad escape", "data:text/plain,%zz", true, true, nil, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			data, mime, ok, err := attachment.ParseDataURL(tt.in)
			if ok != tt.ok || (err != nil) != tt.wantErr {
				t.Fatalf("ok %v err %v, want ok %v error %v", ok, err, tt.ok, tt.wantErr)
			}
			if err == nil && (!bytes.Equal(data, tt.data) || mime != tt.mime) {
				t.Fatalf("got %q %q, want %q %q", data, mime, tt.data, tt.mime)
			}
		})
	}
}

// FuzzDataURL: any URL a client sends either is no data: URL, or decodes,
// or is refused with an error; none panics, and base64 payloads round-trip.
func FuzzDataURL(f *testing.F) {
	for _, s := range []string{"data:image/png;base64,iVBORw0KGgo=", "data:,", "data:;base64,", "data:text/plain,%41", "https://x", "data:image/png;base64,===="} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		data, _, ok, err := attachment.ParseDataURL(s)
		if !ok {
			if strings.HasPrefix(s, "data:") || data != nil || err != nil {
				t.Fatalf("%q: not a data URL, yet ok=false with %q %v", s, data, err)
			}
			return
		}
		if err != nil {
			return
		}
		// Decoding never makes more than the payload holds; canonical
		// base64 round-trips (the decoder also takes unpadded payloads and
		// ignores stray low bits, as browsers do).
		meta, payload, _ := strings.Cut(strings.TrimPrefix(s, "data:"), ",")
		if strings.HasSuffix(meta, ";base64") {
			if len(data) > base64.RawStdEncoding.DecodedLen(len(payload)) {
				t.Fatalf("%q decoded to %d bytes", s, len(data))
			}
			if canonical := base64.StdEncoding.EncodeToString(data); strings.HasSuffix(payload, "=") && payload == canonical {
				if again, _, _, err := attachment.ParseDataURL("data:" + meta + "," + canonical); err != nil || !bytes.Equal(again, data) {
					t.Fatalf("%q does not round-trip", s)
				}
			}
		}
	})
}
