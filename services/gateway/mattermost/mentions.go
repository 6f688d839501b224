package mattermost

import (
	"regexp"
	"strings"
	"unicode"
)

// The channel-wide mentions: every member of the channel (@channel,
// @all) or every member online (@here) is notified.
var channelWideMentions = map[string]bool{"@channel": true, "@all": true, "@here": true}

// zeroWidthJoiner goes between "@" and the word of a channel-wide
// mention: the post reads the same, and the server, which splits words
// at anything that is not a letter, a digit or one of ":.-_@", no longer
// sees the mention.
const zeroWidthJoiner = "\u200d"

// Code the server leaves out before it looks for mentions (its
// removeCodeFromMessage, app/notification.go): fenced blocks, then
// inline code spans.
var (
	codeBlockPattern  = regexp.MustCompile("(?m)^[^\\S\n]*[\\`~]{3}.*$[\\s\\S]+?(^[^\\S\n]*[`~]{3}$|\\z)")
	inlineCodePattern = regexp.MustCompile("(?m)\\`+(?:.+?|.*?\n(.*?\\S.*?\n)*.*?)\\`+")
)

// neutralizeChannelMentions keeps an answer from notifying a whole
// channel: each @channel, @all and @here the server would take as a
// mention gets a zero-width joiner after its "@". Hermes's adapter posts
// them as they are, so a model that writes "@here" (or quotes a user who
// did) pings everyone; here only gateways.mattermost.allow_channel_mentions
// lets them through. Code spans and blocks, which the server does not
// read for mentions, are left as written (a command copied from them
// stays intact), unless leaving them makes the server see a mention
// after all (code it would not take as code): then every one is
// neutralised. Mentions of users (@name) are not touched.
func neutralizeChannelMentions(text string) string {
	if !strings.Contains(text, "@") {
		return text
	}
	out := neutralize(text, codeRanges(text))
	if mentionsChannel(out) {
		out = neutralize(text, nil)
	}
	return out
}

// codeRanges are the byte ranges of text that are code to the server.
func codeRanges(text string) [][]int {
	var code [][]int
	masked := text
	if strings.Contains(text, "```") || strings.Contains(text, "~~~") {
		b := []byte(text)
		for _, r := range codeBlockPattern.FindAllStringIndex(text, -1) {
			code = append(code, r)
			for i := r[0]; i < r[1]; i++ {
				b[i] = ' ' // blanked, so no inline span starts or ends inside
			}
		}
		masked = string(b)
	}
	if strings.Contains(masked, "`") {
		code = append(code, inlineCodePattern.FindAllStringIndex(masked, -1)...)
	}
	return code
}

// mentionWordRune is what the server's words are made of.
func mentionWordRune(c rune) bool {
	return c == ':' || c == '.' || c == '-' || c == '_' || c == '@' || unicode.IsLetter(c) || unicode.IsNumber(c)
}

// channelMentionsAt returns the byte offsets of the channel-wide
// mentions in text, as the server finds them: words of mentionWordRune,
// each also split at '.', '-' and ':' (the end of a sentence), compared
// without regard to case.
func channelMentionsAt(text string) []int {
	var at []int
	start := -1
	flush := func(end int) {
		if start < 0 {
			return
		}
		sub := start
		for i := start; i <= end; i++ {
			if i == end || text[i] == '.' || text[i] == '-' || text[i] == ':' {
				if channelWideMentions[strings.ToLower(text[sub:i])] {
					at = append(at, sub)
				}
				sub = i + 1
			}
		}
		start = -1
	}
	for i, c := range text {
		if mentionWordRune(c) {
			if start < 0 {
				start = i
			}
			continue
		}
		flush(i)
	}
	flush(len(text))
	return at
}

// neutralize puts a zero-width joiner after the "@" of each channel-wide
// mention outside the code ranges.
func neutralize(text string, code [][]int) string {
	at := channelMentionsAt(text)
	if len(at) == 0 {
		return text
	}
	var b strings.Builder
	b.Grow(len(text) + len(at)*len(zeroWidthJoiner))
	last := 0
outer:
	for _, i := range at {
		for _, r := range code {
			if i >= r[0] && i < r[1] {
				continue outer
			}
		}
		b.WriteString(text[last : i+1]) // through the "@"
		b.WriteString(zeroWidthJoiner)
		last = i + 1
	}
	b.WriteString(text[last:])
	return b.String()
}

// mentionsChannel reports whether the server would notify the channel
// for text: a channel-wide mention outside its code.
func mentionsChannel(text string) bool {
	if strings.Contains(text, "```") || strings.Contains(text, "~~~") {
		text = codeBlockPattern.ReplaceAllString(text, "")
	}
	if strings.Contains(text, "`") {
		text = inlineCodePattern.ReplaceAllString(text, " ")
	}
	return len(channelMentionsAt(text)) > 0
}
