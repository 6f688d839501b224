package markup

import (
	"strings"
	"testing"
	"unicode/utf16"
	"unicode/utf8"

	"github.com/switchboard-chat/switchboard/pkg/telegramfake"
)

func TestTelegram(t *testing.T) {
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
		// Touching spans of one marker are one span: "_a__b_" would
		// open an underline, and Telegram refuses it.
		{"*a*_b_", "_ab_", "ab"},
		{"_a_*b*_c_ and *d* _e_", "_abc_ and _d_ _e_", "abc and d e"},
		{"**a**__b__ ~~c~~~~d~~", "*ab* ~cd~", "ab cd"},
		{"# *a*_b_", "*_ab_*", "ab"},
		{`*a\_*_b_`, `_a\_b_`, "a_b"},
	} {
		got := Telegram.Convert(c.in)
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

func TestSlack(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ in, want string }{
		{"**bold** and *it*", "*bold* and _it_"},
		{"__bold__ ~~gone~~", "*bold* ~gone~"},
		{"# Title", "*Title*"},
		{"## A & B", "*A &amp; B*"},
		{"> quoted <here>", ">quoted &lt;here&gt;"},
		{"[docs](https://x.io/?a=1&b=2)", "<https://x.io/?a=1&amp;b=2|docs>"},
		{"[a|b](https://x.io/a|b)", "<https://x.io/a%7Cb|a|b>"},
		{"<!channel> ping <@U123>", "&lt;!channel&gt; ping &lt;@U123&gt;"},
		{"snake_case_name 2 * 3", "snake_case_name 2 * 3"},
		{"`a<b && c`", "`a&lt;b &amp;&amp; c`"},
		{"```go\nif a < b {}\n```", "```\nif a &lt; b {}\n```"},
		{`\*not italic\*`, "*not italic*"},
		{"[everyone](!channel)", "everyone (!channel)"},
		{"[bob](@U123)", "bob (@U123)"},
		{"[ops](#C1)", "ops (#C1)"},
		{"[https://bank.example](https://evil.example)", "https://bank.example (<https://evil.example>)"},
		{"[https://x.io](https://x.io)", "<https://x.io>"},
		{"[mail me](mailto:a@b.example)", "<mailto:a@b.example|mail me>"},
	} {
		if got := Slack.Convert(c.in); got != c.want {
			t.Errorf("Convert(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}

// FuzzEscape: escaped text always parses and shows the input unchanged.
// WhatsApp: Hermes's conversion (bold, strike, headings, links as
// "text (url)"), Markdown italics as _x_, code left as it is (WhatsApp has
// no escapes), quotes with the space WhatsApp needs.
func TestWhatsApp(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ in, want string }{
		{"**bold** and *it*", "*bold* and _it_"},
		{"__bold__ ~~gone~~", "*bold* ~gone~"},
		{"# Title", "*Title*"},
		{"### A & B", "*A & B*"},
		{"> quoted <here>", "> quoted <here>"},
		{"[docs](https://x.io/?a=1&b=2)", "docs (https://x.io/?a=1&b=2)"},
		{"[https://x.io](https://x.io)", "https://x.io"},
		{"[https://bank.example](https://evil.example)", "https://bank.example (https://evil.example)"},
		{"snake_case_name 2 * 3", "snake_case_name 2 * 3"},
		{"`a*b_c`", "`a*b_c`"},
		{"```go\nif a < b {}\n```", "```\nif a < b {}\n```"},
		{`\*not italic\*`, "*not italic*"},
		{"plain. text!", "plain. text!"},
	} {
		if got := WhatsApp.Convert(c.in); got != c.want {
			t.Errorf("Convert(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}

func TestPlain(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ in, want string }{
		{"**bold** and *it*", "bold and it"},
		{"__bold__ ~~gone~~", "bold gone"},
		{"# Title", "Title"},
		{"### A & B", "A & B"},
		{"> quoted <here>", "> quoted <here>"},
		{">quoted\n>  **again**", ">quoted\n>  again"},
		{"[docs](https://x.io/?a=1&b=2)", "docs (https://x.io/?a=1&b=2)"},
		{"[https://x.io](https://x.io)", "https://x.io"},
		{"snake_case_name 2 * 3", "snake_case_name 2 * 3"},
		{"`a*b_c` runs", "a*b_c runs"},
		{"```go\nif a < b {}\n```", "if a < b {}"},
		{`\*not italic\*`, "*not italic*"},
		{"- item one\n- item two", "- item one\n- item two"},
	} {
		if got := Plain.Convert(c.in); got != c.want {
			t.Errorf("Convert(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}

func FuzzEscape(f *testing.F) {
	for _, s := range []string{"a.b", "x_y*z", "[a](b)", "\\", "`"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		shown, err := telegramfake.ParseMarkdownV2(Telegram.Escape(s))
		if err != nil || shown != s {
			t.Fatalf("Escape(%q): shown %q, err %v", s, shown, err)
		}
	})
}

// FuzzSlack: whatever the model writes, every raw < in the mrkdwn opens
// a web or mail link (nothing pings anyone or links a channel), and no &
// does not start an entity.
func FuzzSlack(f *testing.F) {
	for _, s := range []string{"**a** <!here>", "[t](u&v)", "```\n<@U1>\n```", "`<`", "> >", "[x](<y>)", "a\\<b", "[x](!channel)", "[x](https://a|b)"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		out := Slack.Convert(s)
		for i := strings.IndexByte(out, '<'); i >= 0; i = nextByte(out, i, '<') {
			if rest := strings.ToLower(out[i+1:]); !strings.HasPrefix(rest, "http://") && !strings.HasPrefix(rest, "https://") && !strings.HasPrefix(rest, "mailto:") {
				t.Fatalf("Convert(%q) = %q: a raw '<' that is no web link", s, out)
			}
		}
		for i := strings.IndexByte(out, '&'); i >= 0; i = nextByte(out, i, '&') {
			rest := out[i:]
			if !strings.HasPrefix(rest, "&amp;") && !strings.HasPrefix(rest, "&lt;") && !strings.HasPrefix(rest, "&gt;") {
				t.Fatalf("Convert(%q) = %q: a bare &", s, out)
			}
		}
	})
}

// nextByte is the index of the next c after i, or -1.
func nextByte(s string, i int, c byte) int {
	j := strings.IndexByte(s[i+1:], c)
	if j < 0 {
		return -1
	}
	return i + 1 + j
}

// A line that starts with ``` but has backticks after the opening run
// ("```npm install```") opens no code block (CommonMark lets no backtick
// into a fence's info string): it is code inline, shown, and the lines
// after it stay text, as they do on the platforms that render the
// Markdown themselves (Discord, Matrix).
func TestTripleBacktickCodeInline(t *testing.T) {
	t.Parallel()
	in := "To install:\n```npm install```\nThen **run** it.\n```sh\nnpm test\n```"
	for _, c := range []struct {
		name    string
		dialect Dialect
		want    string
	}{
		{"telegram", Telegram, "To install:\n`npm install`\nThen *run* it\\.\n```sh\nnpm test\n```"},
		{"slack", Slack, "To install:\n`npm install`\nThen *run* it.\n```\nnpm test\n```"},
		{"whatsapp", WhatsApp, "To install:\n`npm install`\nThen *run* it.\n```\nnpm test\n```"},
		{"plain", Plain, "To install:\nnpm install\nThen run it.\nnpm test"},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := c.dialect.Convert(in); got != c.want {
				t.Errorf("Convert(%q) =\n%q, want\n%q", in, got, c.want)
			}
		})
	}
	for _, c := range []struct{ in, want, shown string }{
		{in, "To install:\n`npm install`\nThen *run* it\\.\n```sh\nnpm test\n```", "To install:\nnpm install\nThen run it.\nnpm test\n"},
		{"``a`b`` and ```` ` ````", "`a\\`b` and `\\``", "a`b and `"},
	} {
		got := Telegram.Convert(c.in)
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

// A closing fence is a run of backticks followed by blanks only
// (CommonMark): a line inside a code block that starts with ``` and has
// text after it is a line of the code, shown, not a fence whose text is
// dropped.
func TestClosingFence(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name    string
		dialect Dialect
		in      string
		want    string
	}{
		{"closed with blanks after", WhatsApp, "```\ncode\n```  \nafter", "```\ncode\n```\nafter"},
		// Shown as code on WhatsApp and Slack too: its backticks are
		// parted (TestCodeBlockWithBackticks).
		{"text after the backticks", WhatsApp, "```\ncode\n```  foo\nmore\n```\nafter", "```\ncode\n``\u200b`  foo\nmore\n```\nafter"},
		{"an info string", Slack, "```\na\n```go\nb\n```", "```\na\n``\u200b`go\nb\n```"},
		{"unclosed", Plain, "```\ncode\n``` not a fence", "code\n``` not a fence"},
		{"telegram", Telegram, "```\nx\n``` y\n```", "```\nx\n\\`\\`\\` y\n```"},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := c.dialect.Convert(c.in); got != c.want {
				t.Errorf("Convert(%q) =\n%q, want\n%q", c.in, got, c.want)
			}
		})
	}
}

// Slack and WhatsApp show a code block without a language, so a
// fence's info string is dropped rather than shown as the code's first
// line (Hermes keeps it). Neither has an escape for a backtick, and
// both end a block at the next "```" wherever it stands: a line of the
// code such as "``` foo" or "```go" (CommonMark's code: a closing fence
// takes no info string), or "```" inside a line of code, would end the
// block there and show the rest as formatted text. Every run of three
// backticks or more in code is parted by a zero-width space, which
// shows nothing, so the block shows whole, as the Markdown reads.
func TestCodeBlockWithBackticks(t *testing.T) {
	t.Parallel()
	const zw = "\u200b"
	for _, c := range []struct {
		name, in, want string
	}{
		{"an info string", "```go\nfmt.Println(1)\n```", "```\nfmt.Println(1)\n```"},
		{"an info string after blanks", "``` python\nprint(1)\n```", "```\nprint(1)\n```"},
		{"an info string with attributes", "```js title=\"a.js\"\nf()\n```", "```\nf()\n```"},
		{"a reopened block's language", "```go\nb := 2\n```\ntext", "```\nb := 2\n```\ntext"},
		{"a fence with text in the code", "```\na\n``` foo\nb\n```\nafter", "```\na\n``" + zw + "` foo\nb\n```\nafter"},
		{"a fence with a language in the code", "```md\nExample:\n```go\nx := 1\n```", "```\nExample:\n``" + zw + "`go\nx := 1\n```"},
		{"backticks inside a line", "```py\ns = '```'\n```", "```\ns = '``" + zw + "`'\n```"},
		{"a long run", "```\n`````x\n```", "```\n``" + zw + "``" + zw + "`x\n```"},
		{"two backticks stay", "```\n``x``\n```", "```\n``x``\n```"},
		{"inline code holding a fence", "run ```` a```b ````", "run `a``" + zw + "`b`"},
		// The span's own backtick beside two of the code's.
		{"inline code starting with backticks", "a ``` ``x ``` b", "a ``" + zw + "`x` b"},
		{"inline code ending with backticks", "say ``` a`` ``` ok", "say `a``" + zw + "` ok"},
	} {
		t.Run(c.name, func(t *testing.T) {
			for _, d := range []struct {
				name    string
				dialect Dialect
			}{{"slack", Slack}, {"whatsapp", WhatsApp}} {
				got := d.dialect.Convert(c.in)
				if got != c.want {
					t.Errorf("%s: Convert(%q) =\n%q, want\n%q", d.name, c.in, got, c.want)
				}
				// As the platform reads it: every "```" left is a line
				// of its own, the block's opening or closing fence.
				for _, line := range strings.Split(got, "\n") {
					if strings.Contains(line, "```") && line != "```" {
						t.Errorf("%s: line %q of %q ends or opens a block where the Markdown does not", d.name, line, got)
					}
				}
			}
		})
	}
}

// Plain text is never longer than the Markdown it comes from, in any
// measure a platform counts: delivery cut the Markdown to the limit of
// the platforms that show plain text (SMS, iMessage), which refuse a
// longer message for good. A quote stays as written (">x" was "> x").
func FuzzPlainNeverLonger(f *testing.F) {
	for _, s := range []string{">x\n>y", "> x", "  >quoted **b**", "```\ncode", "```go\na\n```  b", "[a](b)", "[**a**](u)",
		"# h", "`` a ``", "\\*", "~~s~~ _i_", ">>nested"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, md string) {
		plain := Plain.Convert(md)
		if len(plain) > len(md) || utf8.RuneCountInString(plain) > utf8.RuneCountInString(md) || len(utf16.Encode([]rune(plain))) > len(utf16.Encode([]rune(md))) {
			t.Fatalf("Plain.Convert(%q) = %q, longer", md, plain)
		}
	})
}
