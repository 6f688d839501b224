package delivery

import (
	"reflect"
	"regexp"
	"strings"
	"testing"
	"unicode/utf8"
)

func TestExtractImages(t *testing.T) {
	for _, tc := range []struct {
		name, text string
		images     []answerImage
		cleaned    string
	}{
		{
			name:    "markdown image after text",
			text:    "Here is the chart:\n\n![Sales 2026](https://cdn.example.com/chart.png)\n\nAnything else?",
			images:  []answerImage{{url: "https://cdn.example.com/chart.png", alt: "Sales 2026"}},
			cleaned: "Here is the chart:\n\nAnything else?",
		},
		{
			name:    "known image host without an extension",
			text:    "Done! ![](https://v3.fal.media/files/abc/xyz) enjoy",
			images:  []answerImage{{url: "https://v3.fal.media/files/abc/xyz"}},
			cleaned: "Done!  enjoy",
		},
		{
			name:    "extension in the query counts, as in Hermes",
			text:    "![x](https://img.example.com/render?f=.webp)",
			images:  []answerImage{{url: "https://img.example.com/render?f=.webp", alt: "x"}},
			cleaned: "",
		},
		{
			name:    "not an image URL stays",
			text:    "See ![docs](https://example.com/page) for more",
			cleaned: "See ![docs](https://example.com/page) for more",
		},
		{
			name:    "plain link stays",
			text:    "[chart](https://cdn.example.com/chart.png)",
			cleaned: "[chart](https://cdn.example.com/chart.png)",
		},
		{
			name:    "non-http scheme stays",
			text:    "![a](file:///tmp/a.png) ![b](data:image/png;base64,AAAA)",
			cleaned: "![a](file:///tmp/a.png) ![b](data:image/png;base64,AAAA)",
		},
		{
			name:    "html img tag",
			text:    "Look: <img src=\"https://example.com/cat\"></img>\nnice",
			images:  []answerImage{{url: "https://example.com/cat"}},
			cleaned: "Look: \nnice",
		},
		{
			name:    "html img self-closing, single quotes",
			text:    "<img src='https://example.com/a.jpg'/>",
			images:  []answerImage{{url: "https://example.com/a.jpg"}},
			cleaned: "",
		},
		{
			name:    "in order of appearance, a repeat sent once and removed everywhere",
			text:    "<img src=\"https://e.com/1.png\"> ![two](https://e.com/2.gif) ![again](https://e.com/1.png)",
			images:  []answerImage{{url: "https://e.com/1.png"}, {url: "https://e.com/2.gif", alt: "two"}},
			cleaned: "",
		},
		{
			name:    "code is left alone",
			text:    "Write `![a](https://e.com/a.png)` or\n```md\n![b](https://e.com/b.png)\n```\n![c](https://e.com/c.png)",
			images:  []answerImage{{url: "https://e.com/c.png", alt: "c"}},
			cleaned: "Write `![a](https://e.com/a.png)` or\n```md\n![b](https://e.com/b.png)\n```",
		},
		{
			name:    "blank lines collapse",
			text:    "a\n\n![x](https://e.com/x.png)\n\n\n\nb",
			images:  []answerImage{{url: "https://e.com/x.png", alt: "x"}},
			cleaned: "a\n\nb",
		},
		{
			name:    "a fence left open runs to the end, as CommonMark renders it",
			text:    "![a](https://e.com/a.png)\n```md\n![b](https://e.com/b.png)",
			images:  []answerImage{{url: "https://e.com/a.png", alt: "a"}},
			cleaned: "```md\n![b](https://e.com/b.png)",
		},
		{
			name:    "no images: unchanged, untrimmed",
			text:    "  just text\n\n\n\n",
			cleaned: "  just text\n\n\n\n",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			images, cleaned := extractImages(tc.text)
			if !reflect.DeepEqual(images, tc.images) {
				t.Errorf("images = %+v, want %+v", images, tc.images)
			}
			if cleaned != tc.cleaned {
				t.Errorf("cleaned = %q, want %q", cleaned, tc.cleaned)
			}
		})
	}
}

func TestExtractImagesLimit(t *testing.T) {
	var b strings.Builder
	for i := range maxAnswerImages + 2 {
		b.WriteString("![](https://e.com/" + strings.Repeat("x", i+1) + ".png)\n")
	}
	images, cleaned := extractImages(b.String())
	if len(images) != maxAnswerImages {
		t.Fatalf("%d images, want %d", len(images), maxAnswerImages)
	}
	if n := strings.Count(cleaned, "![]("); n != 2 {
		t.Fatalf("%d images left in the text %q, want the 2 over the limit", n, cleaned)
	}
}

func TestNativeImagesConfig(t *testing.T) {
	for _, tc := range []struct {
		name     string
		cfg      Config
		platform string
		want     bool
	}{
		{"telegram by default", Config{}, "telegram", true},
		{"discord posts links", Config{}, "discord", false},
		{"unknown platform", Config{}, "custom", false},
		{"switched off", Config{Images: ImagesLink}, "telegram", false},
		{"off for one platform", Config{Platforms: map[string]Platform{"matrix": {Images: ImagesLink}}}, "matrix", false},
		{"on for a custom platform", Config{Platforms: map[string]Platform{"custom": {Images: ImagesNative}}}, "custom", true},
		{"the switch wins", Config{Images: ImagesLink, Platforms: map[string]Platform{"custom": {Images: ImagesNative}}}, "custom", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.cfg.nativeImages(tc.platform); got != tc.want {
				t.Fatalf("nativeImages(%s) = %v, want %v", tc.platform, got, tc.want)
			}
		})
	}
	if err := (Config{Images: "inline"}).Validate(); err == nil {
		t.Fatal("delivery.images inline validated")
	}
	if err := (Config{Platforms: map[string]Platform{"x": {Images: "yes"}}}).Validate(); err == nil {
		t.Fatal("delivery.platforms.x.images yes validated")
	}
}

// FuzzExtractImages: any answer text (the model's output) is taken apart
// without panicking, every image taken has an http(s) URL that was in the
// text, and what is left is valid text no longer than the answer.
func FuzzExtractImages(f *testing.F) {
	for _, s := range []string{
		"![a](https://e.com/a.png)",
		"x <img src=\"https://e.com/b\"> y",
		"`![a](https://e.com/a.png)`",
		"```\n![a](https://e.com/a.png)\n```\n![b](https://e.com/b.jpg)",
		"![](http://fal.media/x)\n\n\n\ntext",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, text string) {
		images, cleaned := extractImages(text)
		if len(images) == 0 && cleaned != text {
			t.Fatalf("no images, text changed: %q -> %q", text, cleaned)
		}
		if len(images) > maxAnswerImages {
			t.Fatalf("%d images", len(images))
		}
		if len(cleaned) > len(text) {
			t.Fatalf("cleaned text grew: %q -> %q", text, cleaned)
		}
		if utf8.ValidString(text) && !utf8.ValidString(cleaned) {
			t.Fatalf("cleaned text invalid: %q", cleaned)
		}
		for _, img := range images {
			if !strings.HasPrefix(img.url, "http://") && !strings.HasPrefix(img.url, "https://") || !strings.Contains(text, img.url) {
				t.Fatalf("image %q not an http(s) URL of the text", img.url)
			}
		}
	})
}

func TestStreamedText(t *testing.T) {
	for _, tc := range []struct {
		name, text, want string
	}{
		{"plain text as it is", "Hello there\n\n", "Hello there\n\n"},
		{"an image as the final has it", "Here:\n\n![Sales](https://e.com/s.png)\n\nMore", "Here:\n\nMore"},
		{"an image's alt being written", "Here: ![Sal", "Here: "},
		{"an image's URL being written", "Here: ![Sales](https://exa", "Here: "},
		{"the bang alone", "Here!", "Here"},
		{"the scheme under way", "Here: ![Sales](ht", "Here: "},
		{"not an image after all", "Here: ![Sales] are up", "Here: ![Sales] are up"},
		{"a link's URL is no image", "Here: ![Sales](ftp://e.com", "Here: ![Sales](ftp://e.com"},
		{"a URL with a space ended", "Here: ![Sales](https://e.com/a b", "Here: ![Sales](https://e.com/a b"},
		{"finished, but not a picture", "See ![docs](https://e.com/page) ok", "See ![docs](https://e.com/page) ok"},
		{"an img tag being written", "Look <img src=\"https://e.com/c", "Look "},
		{"an img tag's end being written", "Look <img src=\"https://e.com/c.png\" /", "Look "},
		{"the tag's name under way", "a <im", "a "},
		{"a closing tag under way after an image", "<img src=\"https://e.com/c.png\"></im", ""},
		{"another tag", "a <b>bold", "a <b>bold"},
		{"inside an open fence it stays", "```md\n![b](https://e.com/b.p", "```md\n![b](https://e.com/b.p"},
		{"finished inside an open fence it stays", "```md\n![b](https://e.com/b.png)\n", "```md\n![b](https://e.com/b.png)\n"},
		{"after a closed fence it goes", "```\nx\n```\n![b](https://e.com/b.p", "```\nx\n```\n"},
		{"only the last line", "a ![b\nc", "a ![b\nc"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := streamedText(tc.text); got != tc.want {
				t.Fatalf("streamedText(%q) = %q, want %q", tc.text, got, tc.want)
			}
		})
	}
}

// FuzzStreamedText: while any answer streams (every prefix of it), no
// image syntax the final answer takes out shows, and the whole answer
// streamed shows what the final does.
func FuzzStreamedText(f *testing.F) {
	for _, s := range []string{
		"Here:\n\n![Sales](https://e.com/s.png)\n\nMore text",
		"Look <img src='https://e.com/c.gif' /></img> and ```\n![a](https://e.com/a.png)\n``` `![b](https://e.com/b.png)`!",
		"a ![b](https://e.com/x) <img src=https://fal.media/q>",
	} {
		f.Add(s)
	}
	altBreak := regexp.MustCompile(`!\[[^\]]*\n`)
	f.Fuzz(func(t *testing.T, text string) {
		if !utf8.ValidString(text) {
			return
		}
		_, final := extractImages(text)
		if got := streamedText(text + "\n"); len(text) > 0 {
			if _, want := extractImages(text + "\n"); got != want {
				t.Fatalf("streamed %q, the final shows %q", got, want)
			}
		}
		// An alt text with a line break is only caught on its last line.
		if altBreak.MatchString(text) {
			return
		}
		for i := range text {
			shown := streamedText(text[:i])
			if !utf8.ValidString(shown) {
				t.Fatalf("streamed %q: invalid text", text[:i])
			}
			for _, mark := range []string{"![", "<img"} {
				if !strings.Contains(final, mark) && strings.Contains(shown, mark) {
					t.Fatalf("streaming %q shows %q, which the final %q has not", text[:i], shown, final)
				}
			}
		}
	})
}
