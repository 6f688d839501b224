package markup

import "testing"

// Google Chat's markup is WhatsApp's formatting with links of its own,
// <url|text>, as Hermes's Google Chat adapter writes them: a web or mail
// address shows as its text, linked. A link Chat's syntax cannot carry
// (another target, a text with < > or |, a label naming another
// address) shows as text (url).
func TestGoogleChat(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"**bold** and *it* ~~old~~", "*bold* and _it_ ~old~"},
		{"see [the docs](https://example.com/a?b=1)", "see <https://example.com/a?b=1|the docs>"},
		{"[**Hermes**](https://example.com)", "<https://example.com|*Hermes*>"},
		{"[mail us](mailto:team@example.com)", "<mailto:team@example.com|mail us>"},
		{"[https://example.com](https://example.com)", "https://example.com"},
		{"[https://good.example](https://evil.example)", "https://good.example (https://evil.example)"},
		{"[a|b](https://example.com)", "a|b (https://example.com)"},
		{"[x](https://example.com/a|b)", "<https://example.com/a%7Cb|x>"},
		{"[run](javascript:alert(1))", "run (javascript:alert(1))"},
		{"`[x](https://example.com)`", "`[x](https://example.com)`"},
	} {
		if got := GoogleChat.Convert(c.in); got != c.want {
			t.Errorf("%q: got %q, want %q", c.in, got, c.want)
		}
	}
}
