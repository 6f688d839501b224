package line

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"google.golang.org/protobuf/types/known/timestamppb"

	eventsv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/events/v1"
)

// errMalformed marks a webhook delivery that is not LINE's.
var errMalformed = errors.New("malformed line webhook")

// payload is a webhook delivery: the bot's user id and its events.
type payload struct {
	Destination string  `json:"destination"`
	Events      []event `json:"events"`
}

type event struct {
	Type           string  `json:"type"`
	Mode           string  `json:"mode"` // active, standby
	Timestamp      int64   `json:"timestamp"`
	Source         source  `json:"source"`
	WebhookEventID string  `json:"webhookEventId"`
	ReplyToken     string  `json:"replyToken"`
	Message        message `json:"message"`
	Postback       struct {
		Data string `json:"data"`
	} `json:"postback"`
	DeliveryContext struct {
		IsRedelivery bool `json:"isRedelivery"`
	} `json:"deliveryContext"`
}

type source struct {
	Type    string `json:"type"` // user, group, room
	UserID  string `json:"userId"`
	GroupID string `json:"groupId"`
	RoomID  string `json:"roomId"`
}

type message struct {
	ID              string `json:"id"`
	Type            string `json:"type"`
	Text            string `json:"text"`
	QuotedMessageID string `json:"quotedMessageId"`
	Mention         struct {
		Mentionees []struct {
			Type   string `json:"type"` // user, all
			UserID string `json:"userId"`
			IsSelf bool   `json:"isSelf"`
		} `json:"mentionees"`
	} `json:"mention"`
	ContentProvider struct {
		Type               string `json:"type"` // line, external
		OriginalContentURL string `json:"originalContentUrl"`
	} `json:"contentProvider"`
	FileName  string   `json:"fileName"`
	FileSize  int64    `json:"fileSize"`
	Title     string   `json:"title"`
	Address   string   `json:"address"`
	PackageID string   `json:"packageId"`
	StickerID string   `json:"stickerId"`
	Keywords  []string `json:"keywords"`
}

// parsePayload decodes a delivery's body.
func parsePayload(raw []byte) (*payload, error) {
	if !utf8.Valid(raw) {
		return nil, fmt.Errorf("%w: body is not UTF-8", errMalformed)
	}
	var p struct {
		Destination string           `json:"destination"`
		Events      *json.RawMessage `json:"events"`
	}
	if err := json.Unmarshal(raw, &p); err != nil {
		return nil, fmt.Errorf("%w: %v", errMalformed, err)
	}
	if p.Events == nil {
		return nil, fmt.Errorf("%w: no events", errMalformed)
	}
	out := &payload{Destination: p.Destination}
	if err := json.Unmarshal(*p.Events, &out.Events); err != nil {
		return nil, fmt.Errorf("%w: events: %v", errMalformed, err)
	}
	return out, nil
}

// rules are the gateway's identity and filters.
type rules struct {
	account string
	bot     string // the bot's own user id, when known
	data    string // the content host (DataBaseURL)
	groups  map[string]bool
	rooms   map[string]bool
	// requireMention gates the messages of groups and rooms, except
	// those of freeGroups and freeRooms ("*": every one).
	requireMention        bool
	freeGroups, freeRooms map[string]bool
}

// free reports whether a group's or room's messages are published
// without a mention.
func (r *rules) free(src *eventsv1.SessionSource) bool {
	set := r.freeGroups
	if src.ChatType == "room" {
		set = r.freeRooms
	}
	return set["*"] || set[src.ChatId]
}

// incoming is one event normalized: an event to publish with its reply
// token, or the reason it produces none, or the error that makes it
// malformed.
type incoming struct {
	ev         *eventsv1.MessageReceived
	replyToken string
	skip       string
	err        error
}

// normalize turns one webhook event into an inbound event, as Hermes
// reads it: the chat is the user (1:1), group or room of the source, the
// user its userId; text is the text, a sticker "[sticker: keywords]", a
// location "[location: title address]", another kind
// "[unsupported message type: <type>]"; images, videos, audio and files
// are attachments whose content is downloaded when a turn reads them.
// A postback (a tap on a button whose action is a postback) is its data
// as the user's text, as Hermes reads it; an approval button's data is
// the command it stands for, with the call it answers (buttons.go).
// Other events (follow, join, unsend …), those in standby mode (another
// channel answers the chat), from the bot itself, from a group or room
// that is not allowed, or (require_mention) a group's or room's message
// that does not mention the bot, are skipped.
func normalize(e *event, r *rules) incoming {
	if e.Type != "message" && e.Type != "postback" {
		return incoming{skip: "event " + reason(e.Type)}
	}
	m := &e.Message
	id := e.WebhookEventID
	if id == "" {
		id = m.ID
	}
	switch {
	case id == "":
		return incoming{err: fmt.Errorf("%w: message event without webhookEventId or message id", errMalformed)}
	case len(id) > 128 || len(m.ID) > 128:
		return incoming{err: fmt.Errorf("%w: event id is %d bytes", errMalformed, len(id))}
	case e.Mode == "standby":
		return incoming{skip: "standby"}
	}
	src := &eventsv1.SessionSource{Platform: "line", Account: r.account, UserId: e.Source.UserID, UserName: e.Source.UserID}
	switch e.Source.Type {
	case "user":
		src.ChatId, src.ChatType = e.Source.UserID, "dm"
	case "group":
		src.ChatId, src.ChatType = e.Source.GroupID, "group"
		if !r.groups["*"] && !r.groups[src.ChatId] {
			return incoming{skip: "group not allowed"}
		}
	case "room":
		src.ChatId, src.ChatType = e.Source.RoomID, "room"
		if !r.rooms["*"] && !r.rooms[src.ChatId] {
			return incoming{skip: "room not allowed"}
		}
	default:
		return incoming{err: fmt.Errorf("%w: event %s: source type %q", errMalformed, id, reason(e.Source.Type))}
	}
	switch {
	case src.ChatId == "":
		return incoming{err: fmt.Errorf("%w: event %s: %s source without its id", errMalformed, id, e.Source.Type)}
	case len(src.ChatId) > 64 || len(src.UserId) > 64:
		return incoming{err: fmt.Errorf("%w: event %s: source id too long", errMalformed, id)}
	case r.bot != "" && src.UserId == r.bot:
		return incoming{skip: "own message"}
	}
	if src.UserId == "" {
		// A member who has not consented to share their profile: LINE
		// leaves userId out; the chat stands in, as in Hermes.
		src.UserId, src.UserName = src.ChatId, src.ChatId
	}
	src.ChatName = src.ChatId
	ev := &eventsv1.MessageReceived{EventId: id, MessageId: m.ID, Source: src}
	if e.Timestamp > 0 {
		ev.SentAt = timestamppb.New(time.UnixMilli(e.Timestamp))
	}
	switch {
	case e.Type == "postback":
		ev.MessageId = ""
		ev.Text = strings.TrimSpace(e.Postback.Data)
		if cmd, call, ok := parsePostback(ev.Text); ok {
			ev.Text, ev.ButtonPress = cmd, &eventsv1.ButtonPress{ToolCallId: call}
		}
	case m.Type == "text":
		ev.Text = m.Text
	case m.Type == "image" || m.Type == "video" || m.Type == "audio" || m.Type == "file":
		if a := attachment(m, r); a != nil {
			ev.Attachments = append(ev.Attachments, a)
		}
	case m.Type == "sticker":
		ev.Text = "[sticker]"
		if len(m.Keywords) > 0 {
			ev.Text = "[sticker: " + strings.Join(m.Keywords, ", ") + "]"
		}
	case m.Type == "location":
		ev.Text = strings.TrimSpace("[location: " + strings.TrimSpace(m.Title+" "+m.Address) + "]")
	default:
		ev.Text = "[unsupported message type: " + reason(m.Type) + "]"
	}
	for _, mt := range m.Mention.Mentionees {
		if mt.IsSelf || (r.bot != "" && mt.UserID == r.bot) {
			ev.Mentioned = true
		}
	}
	if e.Type == "message" && src.ChatType != "dm" && r.requireMention && !ev.Mentioned && !r.free(src) {
		// LINE_REQUIRE_MENTION, as in Hermes: a group's or room's
		// message that does not mention the bot is not for it. A
		// postback is a tap on the bot's own button: never gated.
		return incoming{skip: "not mentioned"}
	}
	if ev.Text == "" && len(ev.Attachments) == 0 {
		return incoming{skip: "empty message"}
	}
	in := incoming{ev: ev}
	if !e.DeliveryContext.IsRedelivery {
		// A redelivered event's token is past its use.
		in.replyToken = e.ReplyToken
	}
	return in
}

// attachment is a media message's content: on LINE's content host
// (downloaded with the token when a turn reads it), or the external URL
// a provider gave.
func attachment(m *message, r *rules) *eventsv1.Attachment {
	a := &eventsv1.Attachment{Kind: kindOf(m.Type), PlatformFileId: m.ID, FileName: m.FileName, SizeBytes: max(m.FileSize, 0)}
	switch {
	case m.ContentProvider.Type == "external" && strings.HasPrefix(m.ContentProvider.OriginalContentURL, "https://"):
		a.Location = &eventsv1.Attachment_Url{Url: m.ContentProvider.OriginalContentURL}
	case validMessageID(m.ID):
		a.Location = &eventsv1.Attachment_Url{Url: contentURL(r.data, m.ID)}
	default:
		return nil
	}
	return a
}

// contentURL is where a message's content is downloaded.
func contentURL(data, id string) string { return data + "/v2/bot/message/" + id + "/content" }

// validMessageID: LINE's message ids are decimal.
func validMessageID(id string) bool {
	if id == "" || len(id) > 32 {
		return false
	}
	for _, c := range id {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}

func kindOf(t string) eventsv1.AttachmentKind {
	switch t {
	case "image":
		return eventsv1.AttachmentKind_ATTACHMENT_KIND_IMAGE
	case "video":
		return eventsv1.AttachmentKind_ATTACHMENT_KIND_VIDEO
	case "audio":
		return eventsv1.AttachmentKind_ATTACHMENT_KIND_AUDIO
	}
	return eventsv1.AttachmentKind_ATTACHMENT_KIND_DOCUMENT
}

// reason keeps an outside string short and printable for a log line or
// a metric label.
func reason(s string) string {
	if len(s) > 32 {
		s = s[:32]
	}
	return strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '_' {
			return r
		}
		return '?'
	}, s)
}
