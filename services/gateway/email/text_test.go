package email

import "testing"

// HTML lets a <head> go without its end tag: <body> (or the first
// element of the body) ends it. A head left open hid the whole body,
// and the agent got "(empty email)".
func TestHTMLTextHeadWithoutEndTag(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ name, html, want string }{
		{"head closed by body", `<html><head><meta charset="utf-8"><title>Note</title><body><p>Call me at 5.</p></body></html>`, "Call me at 5."},
		{"head closed by a body element", `<head><meta charset="utf-8"><style>p{color:red}</style><div>Ship it.</div>`, "Ship it."},
		{"a well-formed head", `<html><head><title>T</title></head><body><p>Fine.</p></body></html>`, "Fine."},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := htmlText(c.html); got != c.want {
				t.Fatalf("htmlText = %q, want %q", got, c.want)
			}
		})
	}
}
