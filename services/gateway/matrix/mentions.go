package matrix

import (
	"strings"
)

// zeroWidthJoiner goes between "@" and "room": the message reads the
// same, and the homeserver's push rule no longer finds "@room" in it.
const zeroWidthJoiner = "\u200d"

// neutralizeRoomMentions keeps an answer from notifying everyone in a
// room: each "@room" (in any case) that the homeserver's legacy push rule
// .m.rule.roomnotif would match, a whole word of the message's body, gets
// a zero-width joiner after its "@". That rule fires for a sender with
// the room's notifications.room power level (50 by default: a bot made
// moderator), and Hermes's adapter sends the text as it is, so a model
// that writes "@room" (or quotes a user who did) pings the whole room.
// Unlike Mattermost's, code is not spared: the rule reads the plain body,
// where code is text like the rest. A word that only starts with "room"
// ("@roomba") is not a mention and is left alone, as are user mentions.
// gateways.matrix.allow_room_mentions lets them through.
func neutralizeRoomMentions(text string) string {
	if !strings.Contains(text, "@") {
		return text
	}
	var b strings.Builder
	last := 0
	for i := 0; i < len(text); {
		j := strings.IndexByte(text[i:], '@')
		if j < 0 {
			break
		}
		at := i + j
		i = at + 1
		if !roomMentionAt(text, at) {
			continue
		}
		if b.Len() == 0 {
			b.Grow(len(text) + len(zeroWidthJoiner))
		}
		b.WriteString(text[last : at+1])
		b.WriteString(zeroWidthJoiner)
		last = at + 1
	}
	if last == 0 {
		return text
	}
	b.WriteString(text[last:])
	return b.String()
}

// roomMentionAt reports whether text holds, at the "@" at offset at, the
// word "@room": "room" in any case, not followed by an ASCII letter, digit
// or underscore. That is the narrowest word boundary a homeserver may use
// (Synapse's is Unicode's, which also counts "@roomé" out): what any of
// them could read as the mention is neutralised.
func roomMentionAt(text string, at int) bool {
	rest := text[at+1:]
	if len(rest) < 4 || !strings.EqualFold(rest[:4], "room") {
		return false
	}
	if len(rest) == 4 {
		return true
	}
	c := rest[4]
	return !(c == '_' || c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z')
}
