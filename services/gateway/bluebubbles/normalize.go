package bluebubbles

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"mime"
	"regexp"
	"strings"
	"time"
	"unicode/utf8"

	"google.golang.org/protobuf/types/known/timestamppb"

	eventsv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/events/v1"
)

// errMalformed marks a webhook call that is not a BlueBubbles event.
var errMalformed = errors.New("malformed bluebubbles webhook")

// maxAttachments bounds the attachments one message publishes.
const maxAttachments = 10

// webhook is a BlueBubbles webhook call: {"type": "new-message", "data":
// a message}.
type webhook struct {
	Type string          `json:"type"`
	Data json.RawMessage `json:"data"`
}

// message is the part of a BlueBubbles message the gateway reads.
type message struct {
	GUID   string `json:"guid"`
	Text   string `json:"text"`
	Handle *struct {
		Address string `json:"address"`
	} `json:"handle"`
	IsFromMe              bool            `json:"isFromMe"`
	IsGroup               bool            `json:"isGroup"`
	ItemType              int             `json:"itemType"`
	DateCreated           int64           `json:"dateCreated"` // ms since the epoch
	ChatGUID              string          `json:"chatGuid"`
	ChatIdentifier        string          `json:"chatIdentifier"`
	AssociatedMessageType json.RawMessage `json:"associatedMessageType"`
	ThreadOriginatorGUID  string          `json:"threadOriginatorGuid"`
	Chats                 []struct {
		GUID           string `json:"guid"`
		ChatIdentifier string `json:"chatIdentifier"`
		DisplayName    string `json:"displayName"`
	} `json:"chats"`
	Attachments []struct {
		GUID         string `json:"guid"`
		MimeType     string `json:"mimeType"`
		UTI          string `json:"uti"`
		TransferName string `json:"transferName"`
		TotalBytes   int64  `json:"totalBytes"`
	} `json:"attachments"`
}

// parseWebhook decodes a webhook body: a JSON object whose type is a
// string and whose data, for a message event, is an object.
func parseWebhook(raw []byte) (*webhook, *message, error) {
	if !utf8.Valid(raw) {
		return nil, nil, fmt.Errorf("%w: body is not UTF-8", errMalformed)
	}
	var w webhook
	if err := json.Unmarshal(raw, &w); err != nil {
		return nil, nil, fmt.Errorf("%w: %v", errMalformed, err)
	}
	if w.Type == "" {
		return nil, nil, fmt.Errorf("%w: no event type", errMalformed)
	}
	if w.Type != "new-message" {
		return &w, nil, nil
	}
	d := bytes.TrimSpace(w.Data)
	if len(d) == 0 || d[0] != '{' {
		return nil, nil, fmt.Errorf("%w: new-message without a message object", errMalformed)
	}
	var m message
	if err := json.Unmarshal(d, &m); err != nil {
		return nil, nil, fmt.Errorf("%w: message: %v", errMalformed, err)
	}
	return &w, &m, nil
}

// incoming is a webhook call normalized: an event to publish, or the
// reason it produces none, or the error that makes it malformed.
type incoming struct {
	ev   *eventsv1.MessageReceived
	skip string
	err  error
	// dmAddr is a DM's address and dmGUID its chat guid, for sends to
	// the address.
	dmAddr, dmGUID string
}

// normalize turns a webhook call into an event of account, as Hermes
// reads it: a chat's id is its chat guid, a DM's with the other person's
// address as chat_id_alt (a group: isGroup or a guid with ";+;"); without
// a guid, the chat identifier or the sender; the sender is the
// handle's address; the id is the message guid. Events other than
// new-message, the bot's own messages, tapbacks, group events and empty
// messages are skipped; in a group under require_mention, so is a
// message that matches no mention pattern, and the pattern is dropped
// from the start of one that does.
func normalize(w *webhook, m *message, account string, requireMention bool, mentions []*regexp.Regexp) incoming {
	switch {
	case w.Type != "new-message":
		return incoming{skip: "other event"}
	case m.IsFromMe:
		return incoming{skip: "own message"}
	case tapback(m.AssociatedMessageType):
		return incoming{skip: "tapback"}
	case m.ItemType != 0:
		return incoming{skip: "group event"}
	}
	guid := strings.TrimSpace(m.GUID)
	chatGUID := strings.TrimSpace(m.ChatGUID)
	chatName := ""
	if len(m.Chats) > 0 {
		if chatGUID == "" {
			chatGUID = strings.TrimSpace(m.Chats[0].GUID)
		}
		chatName = first(strings.TrimSpace(m.Chats[0].DisplayName), strings.TrimSpace(m.Chats[0].ChatIdentifier))
	}
	ident := strings.TrimSpace(m.ChatIdentifier)
	sender := ""
	if m.Handle != nil {
		sender = strings.TrimSpace(m.Handle.Address)
	}
	if sender == "" {
		sender = first(ident, chatGUID)
	}
	switch {
	case guid == "":
		return incoming{err: fmt.Errorf("%w: message without a guid", errMalformed)}
	case len(guid) > 256:
		return incoming{err: fmt.Errorf("%w: message guid is %d bytes", errMalformed, len(guid))}
	case sender == "":
		return incoming{err: fmt.Errorf("%w: message %s without a sender or chat", errMalformed, reason(guid))}
	case len(sender) > 256 || len(chatGUID) > 256 || len(ident) > 256:
		return incoming{err: fmt.Errorf("%w: message %s: an address or chat guid over 256 bytes", errMalformed, reason(guid))}
	}
	group := m.IsGroup || strings.Contains(chatGUID, ";+;")
	text := strings.TrimSpace(m.Text)
	mentioned := false
	if group && requireMention {
		if !matches(mentions, text) {
			return incoming{skip: "no mention"}
		}
		text, mentioned = stripMention(mentions, text), true
	}
	src := &eventsv1.SessionSource{Platform: "bluebubbles", Account: account, UserId: sender, UserName: sender}
	in := incoming{}
	if group {
		src.ChatType, src.ChatId = "group", first(chatGUID, ident, sender)
		src.ChatName = first(chatName, ident, sender)
		if src.ChatId != chatGUID {
			src.ChatIdAlt = chatGUID
		}
	} else {
		// Hermes's session chat id: the chat guid, else the chat
		// identifier or the sender; the person's address rides along
		// as chat_id_alt, and sends to that address go to this chat.
		addr := dmChatID(chatGUID, ident, sender)
		src.ChatType, src.ChatId = "dm", first(chatGUID, ident, sender)
		src.ChatName = first(ident, sender)
		if src.ChatId != addr {
			src.ChatIdAlt = addr
		}
		if chatGUID != "" && addr != chatGUID {
			in.dmAddr, in.dmGUID = addr, chatGUID
		}
	}
	ev := &eventsv1.MessageReceived{EventId: guid, MessageId: guid, Source: src, Text: text, Mentioned: mentioned}
	if m.DateCreated > 0 {
		ev.SentAt = timestamppb.New(time.UnixMilli(m.DateCreated))
	}
	if r := strings.TrimSpace(m.ThreadOriginatorGUID); r != "" && len(r) <= 256 {
		ev.ReplyTo = &eventsv1.ReplyTo{MessageId: r}
	}
	for _, a := range m.Attachments {
		g := strings.TrimSpace(a.GUID)
		if g == "" || len(g) > 256 || len(ev.Attachments) == maxAttachments {
			continue
		}
		mt := baseType(a.MimeType)
		ev.Attachments = append(ev.Attachments, &eventsv1.Attachment{
			Kind: kindOf(mt, a.UTI), PlatformFileId: g, MimeType: mt,
			FileName: cleanName(a.TransferName), SizeBytes: max(a.TotalBytes, 0),
		})
	}
	if ev.Text == "" && len(ev.Attachments) == 0 {
		return incoming{skip: "empty message"}
	}
	in.ev = ev
	return in
}

// dmChatID is a DM's address: the chat identifier or the sender when it
// is an address (no ";"), else what follows ";-;" in the chat guid, else
// whatever is known.
func dmChatID(chatGUID, ident, sender string) string {
	for _, c := range []string{ident, sender} {
		if c != "" && !strings.Contains(c, ";") {
			return c
		}
	}
	if i := strings.LastIndex(chatGUID, ";-;"); i >= 0 {
		if id := strings.TrimSpace(chatGUID[i+3:]); id != "" {
			return id
		}
	}
	return first(chatGUID, ident, sender)
}

// tapback reports whether associatedMessageType marks a reaction (or its
// removal): a number (2000–3005 in BlueBubbles's encoding) other than 0,
// or a name ("love", "-like") as newer servers write it.
func tapback(raw json.RawMessage) bool {
	s := strings.TrimSpace(string(raw))
	switch {
	case s == "" || s == "null" || s == "0" || s == `""`:
		return false
	}
	return true
}

// matches reports whether any mention pattern is found in text.
func matches(pats []*regexp.Regexp, text string) bool {
	for _, p := range pats {
		if p.MatchString(text) {
			return true
		}
	}
	return false
}

// stripMention drops a mention pattern that starts the text, with the
// spaces and punctuation after it, as Hermes does; a text that is only
// the mention is kept whole.
func stripMention(pats []*regexp.Regexp, text string) string {
	t := strings.TrimLeft(text, " \t\n")
	for _, p := range pats {
		if loc := p.FindStringIndex(t); loc != nil && loc[0] == 0 && loc[1] > 0 {
			if rest := strings.TrimLeft(t[loc[1]:], " ,:-\t\n"); rest != "" {
				return rest
			}
			return text
		}
	}
	return text
}

// kindOf is the attachment kind of a media type (a .caf file is a voice
// message, as iMessage records them).
func kindOf(mt, uti string) eventsv1.AttachmentKind {
	switch {
	case strings.HasPrefix(mt, "image/"):
		return eventsv1.AttachmentKind_ATTACHMENT_KIND_IMAGE
	case mt == "audio/x-caf" || strings.HasSuffix(uti, "caf"):
		return eventsv1.AttachmentKind_ATTACHMENT_KIND_VOICE
	case strings.HasPrefix(mt, "audio/"):
		return eventsv1.AttachmentKind_ATTACHMENT_KIND_AUDIO
	case strings.HasPrefix(mt, "video/"):
		return eventsv1.AttachmentKind_ATTACHMENT_KIND_VIDEO
	}
	return eventsv1.AttachmentKind_ATTACHMENT_KIND_DOCUMENT
}

// baseType drops a media type's parameters; "" when it is not one.
func baseType(mt string) string {
	if strings.TrimSpace(mt) == "" {
		return ""
	}
	t, _, err := mime.ParseMediaType(mt)
	if err != nil {
		return ""
	}
	return t
}

// cleanName is a file name without directories, at most 255 bytes.
func cleanName(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.LastIndexAny(s, `/\`); i >= 0 {
		s = s[i+1:]
	}
	if len(s) > 255 {
		s = strings.ToValidUTF8(s[:255], "")
	}
	return s
}

func first(ss ...string) string {
	for _, s := range ss {
		if s != "" {
			return s
		}
	}
	return ""
}

// reason keeps an outside string short and printable for a log line or
// a metric label.
func reason(s string) string {
	if len(s) > 32 {
		s = s[:32]
	}
	return strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '_' || r == '-' {
			return r
		}
		return '?'
	}, s)
}
