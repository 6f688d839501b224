package email

import (
	"regexp"
	"strings"

	"golang.org/x/net/html"
	"golang.org/x/net/html/atom"
)

// htmlText turns an HTML body into text, as Hermes's fallback does when a
// mail has no text/plain part (line breaks for <br> and paragraphs, tags
// dropped, entities decoded), with a real tokenizer: block elements start
// lines, list items are "- " bullets, a link whose text is not its
// address is "text (address)", blockquotes are "> " lines, and nothing
// of <head>, <script> or <style> shows.
func htmlText(src string) string {
	z := html.NewTokenizer(strings.NewReader(src))
	var b strings.Builder
	skip := 0 // inside script, style, title
	// inHead: inside <head>, which HTML lets end without its end tag:
	// <body>, another element that is not the head's or text that is
	// not white space ends it (the parser's "in head" mode), so an
	// unclosed head does not hide the body.
	inHead := false
	quote := 0 // blockquote depth
	var href string
	var linkText strings.Builder
	inLink := false
	newline := func() {
		b.WriteByte('\n')
		if quote > 0 {
			b.WriteString(strings.Repeat("> ", quote))
		}
	}
	for {
		tt := z.Next()
		switch tt {
		case html.ErrorToken:
			return tidy(b.String())
		case html.TextToken:
			if inHead && skip == 0 && strings.TrimSpace(string(z.Text())) != "" {
				inHead = false
			}
			if skip > 0 || inHead {
				continue
			}
			t := collapse(string(z.Text()))
			if inLink {
				linkText.WriteString(t)
			} else {
				b.WriteString(t)
			}
		case html.StartTagToken, html.SelfClosingTagToken, html.EndTagToken:
			name, hasAttr := z.TagName()
			a := atom.Lookup(name)
			end := tt == html.EndTagToken
			switch {
			case a == atom.Head:
				inHead = !end && tt == html.StartTagToken
			case inHead && !end && !headElement(a):
				inHead = false
			}
			switch a {
			case atom.Script, atom.Style, atom.Title:
				if tt == html.StartTagToken {
					skip++
				} else if end && skip > 0 {
					skip--
				}
			case atom.Br:
				newline()
			case atom.Blockquote:
				if end {
					quote = max(quote-1, 0)
				} else {
					quote++
				}
				newline()
			case atom.P, atom.Div, atom.Tr, atom.Table, atom.H1, atom.H2, atom.H3, atom.H4, atom.H5, atom.H6,
				atom.Ul, atom.Ol, atom.Pre, atom.Hr:
				newline()
				if a == atom.P && !end {
					newline()
				}
			case atom.Li:
				if !end {
					newline()
					b.WriteString("- ")
				}
			case atom.Td, atom.Th:
				if !end {
					b.WriteByte(' ')
				}
			case atom.A:
				if !end && tt == html.StartTagToken {
					href, inLink = "", true
					linkText.Reset()
					for hasAttr {
						var k, v []byte
						k, v, hasAttr = z.TagAttr()
						if string(k) == "href" {
							href = string(v)
						}
					}
				} else if end && inLink {
					inLink = false
					t := strings.TrimSpace(linkText.String())
					b.WriteString(t)
					if href != "" && !strings.HasPrefix(href, "mailto:") && href != t && !strings.HasPrefix(href, "#") {
						b.WriteString(" (" + href + ")")
					}
				}
			case atom.Img:
				for hasAttr {
					var k, v []byte
					k, v, hasAttr = z.TagAttr()
					if string(k) == "alt" && len(v) > 0 {
						b.WriteString("[" + collapse(string(v)) + "]")
					}
				}
			}
		}
	}
}

// headElement reports whether an element may stand in <head>; any
// other ends it.
func headElement(a atom.Atom) bool {
	switch a {
	case atom.Meta, atom.Link, atom.Title, atom.Style, atom.Script, atom.Base, atom.Noscript, atom.Template, atom.Head:
		return true
	}
	return false
}

// collapse makes runs of white space one space, as HTML shows them.
func collapse(s string) string {
	s = strings.ReplaceAll(s, "\u00a0", " ")
	lead := len(s) > 0 && strings.ContainsRune(" \t\r\n", rune(s[0]))
	trail := len(s) > 1 && strings.ContainsRune(" \t\r\n", rune(s[len(s)-1]))
	f := strings.Join(strings.Fields(s), " ")
	if f == "" {
		if lead {
			return " "
		}
		return ""
	}
	if lead {
		f = " " + f
	}
	if trail {
		f += " "
	}
	return f
}

var blankRuns = regexp.MustCompile(`\n{3,}`)

// tidy trims each line's trailing space and keeps at most one blank line
// between paragraphs.
func tidy(s string) string {
	lines := strings.Split(s, "\n")
	for i, l := range lines {
		lines[i] = strings.TrimRight(strings.TrimLeft(l, " "), " \t")
		if strings.HasPrefix(strings.TrimLeft(l, " "), ">") {
			lines[i] = strings.TrimRight(l, " \t")
		}
	}
	return strings.TrimSpace(blankRuns.ReplaceAllString(strings.Join(lines, "\n"), "\n\n"))
}

var (
	// attribution is the line a mail client puts above the quoted mail
	// ("On Mon, 1 Jan 2024 at 10:00, Ann <ann@example.com> wrote:"),
	// which Gmail may wrap onto a second line.
	attribution = regexp.MustCompile(`(?i)^(on|am|le|el|il|op)\s.{4,200}(wrote|schrieb|a écrit|escribió|ha scritto|schreef)\s*:\s*$`)
	// outlookHeader starts Outlook's quoted mail.
	outlookHeader = regexp.MustCompile(`(?i)^\s*(-{2,}\s*original message\s*-{2,}|_{10,})\s*$`)
	// mobileSig is a phone's signature line.
	mobileSig = regexp.MustCompile(`(?i)^\s*(sent from my \S.{0,40}|get outlook for \S.{0,30}|sent from (mail|yahoo mail) for .{0,30})\s*$`)
)

// maxSignatureLines bounds the lines under a "-- " separator taken for a
// signature: a longer tail is more likely text that happens to follow one.
const maxSignatureLines = 15

// trimReply cuts what a reply repeats of the conversation: the quoted
// mail under an attribution line or Outlook's "Original Message"
// header, a quoted block at the end, the signature under the "-- "
// separator (RFC 3676) and a phone's "Sent from my …" line. Quotes
// inside the text, answered line by line, stay. When nothing would be
// left, the text stays whole. (Hermes hands the agent the whole body;
// the transcript holds the conversation already.)
func trimReply(s string) string {
	s = strings.TrimSpace(s)
	lines := strings.Split(s, "\n")
	cut := len(lines)
	for i, l := range lines {
		t := strings.TrimSpace(l)
		if outlookHeader.MatchString(t) {
			cut = i
			break
		}
		if attribution.MatchString(t) || (i+1 < len(lines) && attribution.MatchString(t+" "+strings.TrimSpace(lines[i+1])) &&
			!attribution.MatchString(strings.TrimSpace(lines[i+1]))) {
			if quotedAfter(lines, i+1) || quotedAfter(lines, i+2) {
				cut = i
				break
			}
		}
	}
	lines = lines[:cut]
	// A quoted block at the end.
	end := len(lines)
	for end > 0 {
		t := strings.TrimSpace(lines[end-1])
		if t == "" || strings.HasPrefix(t, ">") {
			end--
			continue
		}
		break
	}
	lines = lines[:end]
	// The signature.
	for i := len(lines) - 1; i >= 0 && len(lines)-i <= maxSignatureLines+1; i-- {
		if l := strings.TrimRight(lines[i], "\r"); l == "-- " || l == "--" {
			lines = lines[:i]
			break
		}
	}
	for len(lines) > 0 && (strings.TrimSpace(lines[len(lines)-1]) == "" || mobileSig.MatchString(lines[len(lines)-1])) {
		lines = lines[:len(lines)-1]
	}
	out := strings.TrimSpace(strings.Join(lines, "\n"))
	if out == "" {
		return s
	}
	return out
}

// quotedAfter reports whether what follows line i is a quote (its first
// non-blank line starts with ">") or nothing.
func quotedAfter(lines []string, i int) bool {
	for ; i < len(lines); i++ {
		t := strings.TrimSpace(lines[i])
		if t == "" {
			continue
		}
		return strings.HasPrefix(t, ">")
	}
	return i >= len(lines)
}
