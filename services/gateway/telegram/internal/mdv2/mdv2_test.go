package mdv2

import (
	"testing"

	"github.com/switchboard-chat/switchboard/pkg/telegramfake"
)

func TestConvert(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ in, want, shown string }{
		{"plain. text!", `plain\. text\!`, "plain. text!"},
		{"**bold** and *it*", "*bold* and _it_", "bold and it"},
		{"snake_case_name", `snake\_case\_name`, "snake_case_name"},
		{"`a_b*c`", "`a_b*c`", "a_b*c"},
		{"# Title", "*Title*", "Title"},
		{"> quoted.", `>quoted\.`, "quoted."},
		{"[docs](https://x.io/a_b)", "[docs](https://x.io/a_b)", "docs"},
		{"~~gone~~", "~gone~", "gone"},
		{"```go\nfmt.Println(`x`)\n```", "```go\nfmt.Println(\\`x\\`)\n```", "fmt.Println(`x`)\n"},
		{"2 * 3 = 6", `2 \* 3 \= 6`, "2 * 3 = 6"},
	} {
		got := Convert(c.in)
		if got != c.want {
			t.Errorf("Convert(%q) = %q, want %q", c.in, got, c.want)
			continue
		}
		shown, err := telegramfake.ParseMarkdownV2(got)
		if err != nil || shown != c.shown {
			t.Errorf("telegram shows %q (%v) for %q, want %q", shown, err, got, c.shown)
		}
	}
}

// FuzzEscape: escaped text always parses and shows the input unchanged.
func FuzzEscape(f *testing.F) {
	for _, s := range []string{"a.b", "x_y*z", "[a](b)", "\\", "`"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		shown, err := telegramfake.ParseMarkdownV2(Escape(s))
		if err != nil || shown != s {
			t.Fatalf("Escape(%q): shown %q, err %v", s, shown, err)
		}
	})
}
