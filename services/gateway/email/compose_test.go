package email

import (
	"bytes"
	"io"
	"testing"
	"time"

	gomail "github.com/emersion/go-message/mail"
)

// An attachment's type goes out with its parameters; a type that does
// not parse goes as application/octet-stream, never as an empty
// Content-Type.
func TestComposeAttachmentTypes(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ mime, want, charset string }{
		{"text/csv; charset=utf-8", "text/csv", "utf-8"},
		{"application/pdf", "application/pdf", ""},
		{"not a type", "application/octet-stream", ""},
	} {
		t.Run(c.mime, func(t *testing.T) {
			raw, err := compose("agent@example.com", "ann@example.com", "Re: x", "<a@example.com>", nil, "See attached.",
				[]file{{Name: "data.bin", MIME: c.mime, Data: []byte("1,2\n")}}, time.Unix(0, 0))
			if err != nil {
				t.Fatalf("compose: %v", err)
			}
			r, err := gomail.CreateReader(bytes.NewReader(raw))
			if err != nil {
				t.Fatal(err)
			}
			for {
				p, err := r.NextPart()
				if err == io.EOF {
					t.Fatalf("no attachment in\n%s", raw)
				}
				if err != nil {
					t.Fatal(err)
				}
				h, ok := p.Header.(*gomail.AttachmentHeader)
				if !ok {
					continue
				}
				mt, params, err := h.ContentType()
				if err != nil || mt != c.want || params["charset"] != c.charset {
					t.Fatalf("attachment type %q %v (%v), want %q charset %q\n%s", mt, params, err, c.want, c.charset, raw)
				}
				return
			}
		})
	}
}
