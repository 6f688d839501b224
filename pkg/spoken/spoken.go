// Package spoken turns an agent's answer, written in Markdown for a chat,
// into the text a voice reply speaks: Hermes's _strip_markdown_for_tts
// (tools/tts_tool.py) over the answer's first 4000 characters, as its
// gateway's _send_voice_reply cuts it.
package spoken

import (
	"regexp"
	"strings"
)

// MaxChars is how much of an answer is spoken (Hermes's text[:4000]),
// counted in characters before the Markdown comes off; OpenAI's speech
// endpoint takes 4096.
const MaxChars = 4000

var (
	codeBlock  = regexp.MustCompile("```[\\s\\S]*?```")
	link       = regexp.MustCompile(`\[([^\]]+)\]\([^)]+\)`)
	bareURL    = regexp.MustCompile(`https?://\S+`)
	bold       = regexp.MustCompile(`\*\*(.+?)\*\*`)
	italic     = regexp.MustCompile(`\*(.+?)\*`)
	inlineCode = regexp.MustCompile("`(.+?)`")
	header     = regexp.MustCompile(`(?m)^#+\s*`)
	listItem   = regexp.MustCompile(`(?m)^\s*[-*]\s+`)
	rule       = regexp.MustCompile(`---+`)
	blankLines = regexp.MustCompile(`\n{3,}`)
)

// Text is what a voice reply to answer says: its first MaxChars
// characters without code blocks (a space each), links (their text
// stays), bare URLs, bold, italic and code markers, headers' and list
// items' marks and horizontal rules, at most one blank line in a row,
// trimmed. Empty: nothing worth speaking (an answer that was all code).
func Text(answer string) string {
	if r := []rune(answer); len(r) > MaxChars {
		answer = string(r[:MaxChars])
	}
	s := codeBlock.ReplaceAllString(answer, " ")
	s = link.ReplaceAllString(s, "$1")
	s = bareURL.ReplaceAllString(s, "")
	s = bold.ReplaceAllString(s, "$1")
	s = italic.ReplaceAllString(s, "$1")
	s = inlineCode.ReplaceAllString(s, "$1")
	s = header.ReplaceAllString(s, "")
	s = listItem.ReplaceAllString(s, "")
	s = rule.ReplaceAllString(s, "")
	s = blankLines.ReplaceAllString(s, "\n\n")
	return strings.TrimSpace(s)
}
