package matrix

import (
	"strings"
	"testing"

	deliveryv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/delivery/v1"
)

// The formatted body is safe to show: raw HTML in the model's text is
// escaped, and a link whose scheme runs code (javascript:, vbscript:,
// file:) loses its target and keeps its text; Markdown still renders.
func TestContentSanitised(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, text string
		want       []string // substrings of formatted_body
		not        []string
	}{
		{"markdown", "**bold** and `code`", []string{"<strong>bold</strong>", "<code>code</code>"}, nil},
		{"link", "[docs](https://example.org/a?b=1)", []string{`<a href="https://example.org/a?b=1">docs</a>`}, nil},
		{"raw html", `<img src=x onerror=alert(1)> hi`, []string{"&lt;img"}, []string{"<img"}},
		{"script", "<script>alert(1)</script>", []string{"&lt;script&gt;"}, []string{"<script"}},
		{"javascript link", "[click](javascript:alert(1))", []string{">click</a>"}, []string{"javascript:"}},
		{"javascript autolink", "[a](<javascript:alert(document.cookie)>)", []string{">a</a>"}, []string{"javascript:"}},
		{"vbscript link", "[v](vbscript:msgbox)", []string{">v</a>"}, []string{"vbscript:"}},
		{"file link", "[f](file:///etc/passwd)", []string{">f</a>"}, []string{"file:"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := content(tc.text, deliveryv1.TextFormat_TEXT_FORMAT_MARKDOWN)
			if c.Body != tc.text {
				t.Errorf("body %q, want the Markdown %q", c.Body, tc.text)
			}
			for _, w := range tc.want {
				if !strings.Contains(c.FormattedBody, w) {
					t.Errorf("formatted_body %q lacks %q", c.FormattedBody, w)
				}
			}
			for _, n := range tc.not {
				if strings.Contains(strings.ToLower(c.FormattedBody), n) {
					t.Errorf("formatted_body %q has %q", c.FormattedBody, n)
				}
			}
		})
	}
}
