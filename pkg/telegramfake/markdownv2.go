package telegramfake

import (
	"fmt"
	"strings"
	"unicode/utf8"
)

// reservedV2 are the characters MarkdownV2 requires to be escaped outside
// entities.
const reservedV2 = "_*[]()~`>#+-=|{}.!"

// entityError is Telegram's wording for MarkdownV2 it cannot parse.
func entityError(format string, args ...any) error {
	return fmt.Errorf("Bad Request: can't parse entities: "+format, args...)
}

// ParseMarkdownV2 checks text the way the Bot API does for
// parse_mode=MarkdownV2 and returns the text a user would see (markers and
// escapes removed). It covers bold, italic, underline, strikethrough,
// spoiler, inline code, pre blocks, inline links and block quotes; an
// unescaped reserved character or an unclosed entity is an error worded
// like Telegram's.
func ParseMarkdownV2(text string) (string, error) {
	var out strings.Builder
	var stack []string
	lineStart := true
	for i := 0; i < len(text); {
		c := text[i]
		atLineStart := lineStart
		lineStart = c == '\n'
		switch {
		case c == '\\':
			if i+1 >= len(text) {
				return "", entityError("Character '\\' is reserved and must be escaped with the preceding '\\'")
			}
			_, n := utf8.DecodeRuneInString(text[i+1:])
			out.WriteString(text[i+1 : i+1+n])
			i += 1 + n
			continue
		case strings.HasPrefix(text[i:], "```"):
			end, shown, err := scanCode(text, i+3, "```")
			if err != nil {
				return "", entityError("can't find end of PreCode entity at byte offset %d", i)
			}
			// The first line of a pre block may name the language.
			if nl := strings.IndexByte(shown, '\n'); nl >= 0 && !strings.ContainsAny(shown[:nl], " \t") {
				shown = shown[nl+1:]
			}
			out.WriteString(shown)
			i = end
			continue
		case c == '`':
			end, shown, err := scanCode(text, i+1, "`")
			if err != nil {
				return "", entityError("can't find end of Code entity at byte offset %d", i)
			}
			out.WriteString(shown)
			i = end
			continue
		case c == '*':
			stack = toggle(stack, "*")
		case c == '_' && strings.HasPrefix(text[i:], "__"):
			stack = toggle(stack, "__")
			i += 2
			continue
		case c == '_':
			stack = toggle(stack, "_")
		case c == '~':
			stack = toggle(stack, "~")
		case c == '|' && strings.HasPrefix(text[i:], "||"):
			stack = toggle(stack, "||")
			i += 2
			continue
		case c == '[':
			stack = append(stack, "[")
		case c == ']':
			if len(stack) == 0 || stack[len(stack)-1] != "[" {
				return "", entityError("Character ']' is reserved and must be escaped with the preceding '\\'")
			}
			stack = stack[:len(stack)-1]
			if i+1 >= len(text) || text[i+1] != '(' {
				return "", entityError("can't find end of TextUrl entity at byte offset %d", i)
			}
			end := -1
			for j := i + 2; j < len(text); j++ {
				if text[j] == '\\' {
					j++
					continue
				}
				if text[j] == ')' {
					end = j
					break
				}
			}
			if end < 0 {
				return "", entityError("can't find end of the URL at byte offset %d", i)
			}
			i = end + 1
			continue
		case c == '>' && atLineStart:
			// block quote marker
		case strings.IndexByte(reservedV2, c) >= 0:
			return "", entityError("Character '%c' is reserved and must be escaped with the preceding '\\'", c)
		default:
			out.WriteByte(c)
		}
		i++
	}
	if len(stack) > 0 {
		return "", entityError("can't find end of %s entity", entityName(stack[len(stack)-1]))
	}
	return out.String(), nil
}

func toggle(stack []string, m string) []string {
	if n := len(stack); n > 0 && stack[n-1] == m {
		return stack[:n-1]
	}
	return append(stack, m)
}

func entityName(m string) string {
	switch m {
	case "*":
		return "Bold"
	case "_":
		return "Italic"
	case "__":
		return "Underline"
	case "~":
		return "Strikethrough"
	case "||":
		return "Spoiler"
	default:
		return "TextUrl"
	}
}

// scanCode reads a code entity body from start to the closing marker;
// inside, only '`' and '\' are escaped.
func scanCode(text string, start int, closing string) (int, string, error) {
	var b strings.Builder
	for j := start; j < len(text); j++ {
		if text[j] == '\\' && j+1 < len(text) {
			j++
			b.WriteByte(text[j])
			continue
		}
		if strings.HasPrefix(text[j:], closing) {
			return j + len(closing), b.String(), nil
		}
		if text[j] == '`' {
			return 0, "", fmt.Errorf("unescaped backtick")
		}
		b.WriteByte(text[j])
	}
	return 0, "", fmt.Errorf("unclosed")
}
