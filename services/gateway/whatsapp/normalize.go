package whatsapp

import (
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"mime"
	"strconv"
	"strings"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	eventsv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/events/v1"
)

// The webhook notification as the Cloud API posts it
// (developers.facebook.com/docs/whatsapp/cloud-api/webhooks/components).
type notification struct {
	Object string  `json:"object"`
	Entry  []entry `json:"entry"`
}

type entry struct {
	ID      string   `json:"id"` // the WhatsApp business account id
	Changes []change `json:"changes"`
}

type change struct {
	Field string `json:"field"`
	Value value  `json:"value"`
}

type value struct {
	MessagingProduct string `json:"messaging_product"`
	Metadata         struct {
		DisplayPhoneNumber string `json:"display_phone_number"`
		PhoneNumberID      string `json:"phone_number_id"`
	} `json:"metadata"`
	Contacts []struct {
		Profile struct {
			Name string `json:"name"`
		} `json:"profile"`
		WaID string `json:"wa_id"`
		// UserID is the business-scoped user id (BSUID, "US.1349…"):
		// always there, and the only id of a user whose username hides
		// their number.
		UserID string `json:"user_id"`
	} `json:"contacts"`
	// Messages are decoded one by one, so that one malformed message
	// does not take the others of its notification with it.
	Messages []json.RawMessage `json:"messages"`
	Statuses []status          `json:"statuses"`
}

// status reports what became of a message the business sent.
type status struct {
	ID          string `json:"id"`
	Status      string `json:"status"` // sent, delivered, read, failed (and deleted, warning)
	RecipientID string `json:"recipient_id"`
	// RecipientUserID is the recipient's business-scoped user id: the
	// only id of a message sent to one (a user whose username hides
	// their number), which has no recipient_id.
	RecipientUserID string `json:"recipient_user_id"`
	// CallbackData is the biz_opaque_callback_data the send gave.
	CallbackData string `json:"biz_opaque_callback_data"`
	Errors       []struct {
		Code      int    `json:"code"`
		Title     string `json:"title"`
		Message   string `json:"message"`
		ErrorData struct {
			Details string `json:"details"`
		} `json:"error_data"`
	} `json:"errors"`
}

type message struct {
	// From is the sender's wa_id (their number), absent when a username
	// hides it; FromUserID is their business-scoped user id, always
	// there since 2026.
	From        string                 `json:"from"`
	FromUserID  string                 `json:"from_user_id"`
	ID          string                 `json:"id"`
	Timestamp   string                 `json:"timestamp"`
	Type        string                 `json:"type"`
	Text        *struct{ Body string } `json:"text"`
	Image       *media                 `json:"image"`
	Video       *media                 `json:"video"`
	Audio       *media                 `json:"audio"`
	Document    *media                 `json:"document"`
	Sticker     *media                 `json:"sticker"`
	Location    *location              `json:"location"`
	Contacts    []contactCard          `json:"contacts"`
	Interactive *interactive           `json:"interactive"`
	Button      *struct {
		Payload string `json:"payload"`
		Text    string `json:"text"`
	} `json:"button"`
	Context *struct {
		From string `json:"from"`
		ID   string `json:"id"`
	} `json:"context"`
	// Group-shaped messages carry the group; the Cloud API sends none
	// to a business number today.
	GroupID string `json:"group_id"`
	// Chat is where Hermes's Cloud adapter looks for a group-shaped
	// message's group; either one makes it skipped, never answered as
	// the sender's DM (what the group said would land in their private
	// session, and the answer in their private chat).
	Chat json.RawMessage `json:"chat"`
}

type media struct {
	ID       string `json:"id"`
	MimeType string `json:"mime_type"`
	Caption  string `json:"caption"`
	Filename string `json:"filename"`
	Voice    bool   `json:"voice"`
	Animated bool   `json:"animated"`
}

type location struct {
	Latitude  float64 `json:"latitude"`
	Longitude float64 `json:"longitude"`
	Name      string  `json:"name"`
	Address   string  `json:"address"`
	URL       string  `json:"url"`
}

type contactCard struct {
	Name struct {
		FormattedName string `json:"formatted_name"`
	} `json:"name"`
	Phones []struct {
		Phone string `json:"phone"`
		WaID  string `json:"wa_id"`
	} `json:"phones"`
	Emails []struct {
		Email string `json:"email"`
	} `json:"emails"`
}

type interactive struct {
	Type        string `json:"type"`
	ButtonReply *struct {
		ID    string `json:"id"`
		Title string `json:"title"`
	} `json:"button_reply"`
	ListReply *struct {
		ID          string `json:"id"`
		Title       string `json:"title"`
		Description string `json:"description"`
	} `json:"list_reply"`
	NfmReply *struct {
		Body         string `json:"body"`
		ResponseJSON string `json:"response_json"`
	} `json:"nfm_reply"`
}

// errMalformed marks a notification or message that cannot be decoded.
var errMalformed = errors.New("malformed notification")

// incoming is one message of a notification, normalized: an event to
// publish, or the reason it produces none, or the error that makes it
// malformed (the others of its notification still count).
type incoming struct {
	ev   *eventsv1.MessageReceived
	skip string
	err  error
}

// parsed is what a notification holds for this gateway.
type parsed struct {
	messages []incoming
	statuses []status
	skipped  []string // reasons for whole changes skipped
}

// parseNotification decodes a notification and normalizes the messages
// addressed to phone number phoneID. The error is for a body that is
// not a notification at all.
func parseNotification(raw []byte, phoneID string) (out parsed, err error) {
	defer func() {
		if r := recover(); r != nil {
			out, err = parsed{}, fmt.Errorf("%w: %v", errMalformed, r)
		}
	}()
	var n notification
	if err := json.Unmarshal(raw, &n); err != nil {
		return parsed{}, fmt.Errorf("%w: %v", errMalformed, err)
	}
	if n.Object != "whatsapp_business_account" {
		// Another product's notification on the same callback URL.
		out.skipped = append(out.skipped, "object "+reason(n.Object))
		return out, nil
	}
	for _, e := range n.Entry {
		for _, c := range e.Changes {
			switch {
			case c.Field != "messages":
				out.skipped = append(out.skipped, "field "+reason(c.Field))
				continue
			case c.Value.Metadata.PhoneNumberID != phoneID:
				// Another number of the business account.
				out.skipped = append(out.skipped, "other phone number")
				continue
			}
			out.statuses = append(out.statuses, c.Value.Statuses...)
			names := map[string]string{}
			for _, ct := range c.Value.Contacts {
				for _, id := range nonEmpty(ct.WaID, ct.UserID) {
					names[id] = strings.TrimSpace(ct.Profile.Name)
				}
			}
			for _, rm := range c.Value.Messages {
				out.messages = append(out.messages, normalize(rm, &c.Value, names))
			}
		}
	}
	return out, nil
}

// reason keeps a skip reason a short, printable metric label.
func reason(s string) string {
	if len(s) > 32 {
		s = s[:32]
	}
	return strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '_' {
			return r
		}
		return '?'
	}, s)
}

// normalize turns one message into an event (or a skip reason).
func normalize(raw json.RawMessage, v *value, names map[string]string) incoming {
	var m message
	if err := json.Unmarshal(raw, &m); err != nil {
		return incoming{err: fmt.Errorf("%w: message: %v", errMalformed, err)}
	}
	// The wa_id when WhatsApp gives it (Hermes's key), else the
	// business-scoped user id of a user whose username hides their
	// number: replies go to it (postMessage).
	from := cmp.Or(m.From, m.FromUserID)
	switch {
	case m.ID == "":
		return incoming{err: fmt.Errorf("%w: message without an id", errMalformed)}
	case from == "":
		return incoming{err: fmt.Errorf("%w: message %s without a sender", errMalformed, m.ID)}
	case m.GroupID != "" || present(m.Chat):
		return incoming{skip: "group message"}
	}
	name := names[from]
	src := &eventsv1.SessionSource{
		Platform: "whatsapp",
		Account:  v.Metadata.PhoneNumberID,
		ChatId:   from,
		ChatType: "dm",
		ChatName: name,
		UserId:   from,
		UserName: name,
	}
	if src.ChatName == "" {
		src.ChatName = from
	}
	ev := &eventsv1.MessageReceived{EventId: m.ID, MessageId: m.ID, Source: src}
	if sec, err := strconv.ParseInt(m.Timestamp, 10, 64); err == nil && sec > 0 && sec < 1<<40 {
		ev.SentAt = timestamppb.New(time.Unix(sec, 0).UTC())
	}
	if c := m.Context; c != nil && c.ID != "" {
		ev.ReplyTo = &eventsv1.ReplyTo{MessageId: c.ID, UserId: c.From,
			FromBot: c.From != "" && digits(c.From) == digits(v.Metadata.DisplayPhoneNumber)}
	}
	text, attachments, skip := content(&m)
	if skip != "" {
		return incoming{skip: skip}
	}
	ev.Text, ev.Attachments = text, attachments
	if strings.TrimSpace(ev.Text) == "" && len(ev.Attachments) == 0 {
		return incoming{skip: "empty message"}
	}
	return incoming{ev: ev}
}

// present reports whether a JSON value says something: not absent,
// null, false, 0, "" or empty.
func present(raw json.RawMessage) bool {
	var v any
	if len(raw) == 0 || json.Unmarshal(raw, &v) != nil {
		return len(raw) > 0
	}
	switch v := v.(type) {
	case nil:
		return false
	case bool:
		return v
	case float64:
		return v != 0
	case string:
		return v != ""
	case []any:
		return len(v) > 0
	case map[string]any:
		return len(v) > 0
	}
	return true
}

// content is a message's text and attachments by its type; skip names a
// type that carries nothing for the agent.
func content(m *message) (text string, out []*eventsv1.Attachment, skip string) {
	switch m.Type {
	case "text":
		if m.Text != nil {
			text = m.Text.Body
		}
	case "image", "video", "audio", "document", "sticker":
		a := mediaAttachment(m)
		if a == nil {
			return "", nil, "media without an id"
		}
		return a.GetCaption(), []*eventsv1.Attachment{a}, ""
	case "location":
		if m.Location != nil {
			text = locationText(m.Location)
		}
	case "contacts":
		text = contactsText(m.Contacts)
	case "interactive":
		text = interactiveText(m.Interactive)
	case "button":
		if m.Button != nil {
			text = m.Button.Text
		}
	case "reaction":
		return "", nil, "reaction"
	case "unsupported", "unknown":
		return "", nil, "unsupported message"
	default:
		return "", nil, "type " + reason(m.Type)
	}
	return text, nil, ""
}

func mediaAttachment(m *message) *eventsv1.Attachment {
	var md *media
	var kind eventsv1.AttachmentKind
	switch m.Type {
	case "image":
		md, kind = m.Image, eventsv1.AttachmentKind_ATTACHMENT_KIND_IMAGE
	case "video":
		md, kind = m.Video, eventsv1.AttachmentKind_ATTACHMENT_KIND_VIDEO
	case "audio":
		md, kind = m.Audio, eventsv1.AttachmentKind_ATTACHMENT_KIND_AUDIO
		if md != nil && md.Voice {
			kind = eventsv1.AttachmentKind_ATTACHMENT_KIND_VOICE
		}
	case "document":
		md, kind = m.Document, eventsv1.AttachmentKind_ATTACHMENT_KIND_DOCUMENT
	case "sticker":
		md, kind = m.Sticker, eventsv1.AttachmentKind_ATTACHMENT_KIND_STICKER
	}
	if md == nil || md.ID == "" {
		return nil
	}
	a := &eventsv1.Attachment{Kind: kind, PlatformFileId: md.ID, MimeType: baseType(md.MimeType), Caption: md.Caption, FileName: md.Filename}
	if a.MimeType == "" {
		switch kind {
		case eventsv1.AttachmentKind_ATTACHMENT_KIND_STICKER:
			a.MimeType = "image/webp"
		case eventsv1.AttachmentKind_ATTACHMENT_KIND_VOICE:
			a.MimeType = "audio/ogg"
		}
	}
	return a
}

// baseType drops the parameters of a media type ("audio/ogg; codecs=opus"
// → "audio/ogg").
func baseType(mt string) string {
	if mt == "" {
		return ""
	}
	t, _, err := mime.ParseMediaType(mt)
	if err != nil {
		return ""
	}
	return t
}

func locationText(l *location) string {
	var b strings.Builder
	b.WriteString("[Location")
	if l.Name != "" || l.Address != "" {
		b.WriteString(": ")
		b.WriteString(strings.TrimSpace(strings.Join(nonEmpty(l.Name, l.Address), ", ")))
	}
	fmt.Fprintf(&b, " (latitude %s, longitude %s)", strconv.FormatFloat(l.Latitude, 'f', -1, 64), strconv.FormatFloat(l.Longitude, 'f', -1, 64))
	if l.URL != "" {
		b.WriteString(" ")
		b.WriteString(l.URL)
	}
	b.WriteString("]")
	return b.String()
}

func contactsText(cards []contactCard) string {
	var lines []string
	for _, c := range cards {
		parts := nonEmpty(c.Name.FormattedName)
		for _, p := range c.Phones {
			phone := p.Phone
			if phone == "" {
				phone = p.WaID
			}
			parts = append(parts, nonEmpty(phone)...)
		}
		for _, e := range c.Emails {
			parts = append(parts, nonEmpty(e.Email)...)
		}
		if len(parts) > 0 {
			lines = append(lines, "[Contact: "+strings.Join(parts, ", ")+"]")
		}
	}
	return strings.Join(lines, "\n")
}

// interactiveText is the title of the button or list row the user
// tapped (as Hermes reads it), or a WhatsApp Flow's answer.
func interactiveText(i *interactive) string {
	switch {
	case i == nil:
		return ""
	case i.ButtonReply != nil:
		return i.ButtonReply.Title
	case i.ListReply != nil:
		return i.ListReply.Title
	case i.NfmReply != nil:
		if i.NfmReply.ResponseJSON != "" {
			return "[Form response: " + i.NfmReply.ResponseJSON + "]"
		}
		return i.NfmReply.Body
	}
	return ""
}

func nonEmpty(ss ...string) []string {
	var out []string
	for _, s := range ss {
		if s = strings.TrimSpace(s); s != "" {
			out = append(out, s)
		}
	}
	return out
}

// digits keeps the digits of a phone number ("+1 555-0100" → "15550100").
func digits(s string) string {
	return strings.Map(func(r rune) rune {
		if r >= '0' && r <= '9' {
			return r
		}
		return -1
	}, s)
}
