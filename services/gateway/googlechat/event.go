package googlechat

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"
	"unicode"

	"google.golang.org/protobuf/types/known/timestamppb"

	eventsv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/events/v1"
	"github.com/switchboard-chat/switchboard/pkg/platform"
)

// Event is the part of a Google Chat interaction event the gateway reads
// (developers.google.com/workspace/chat/api/reference/rest/v1/Event).
type Event struct {
	Type      string  `json:"type"` // MESSAGE, ADDED_TO_SPACE, REMOVED_FROM_SPACE, CARD_CLICKED
	EventTime string  `json:"eventTime"`
	Space     Space   `json:"space"`
	Message   Message `json:"message"`
	User      User    `json:"user"`
}

// Space is a space (spaces/…).
type Space struct {
	Name        string `json:"name"`
	Type        string `json:"type"`      // DM, ROOM (deprecated)
	SpaceType   string `json:"spaceType"` // DIRECT_MESSAGE, GROUP_CHAT, SPACE
	DisplayName string `json:"displayName"`
}

// Message is a message (spaces/…/messages/…).
type Message struct {
	Name         string       `json:"name"`
	Sender       User         `json:"sender"`
	CreateTime   string       `json:"createTime"`
	Text         string       `json:"text"`
	ArgumentText string       `json:"argumentText"`
	Thread       Thread       `json:"thread"`
	ThreadReply  bool         `json:"threadReply"`
	Annotations  []Annotation `json:"annotations"`
	Attachment   []Attachment `json:"attachment"`
	SlashCommand *struct {
		CommandID json.Number `json:"commandId"`
	} `json:"slashCommand"`
}

// User is a user or app (users/…).
type User struct {
	Name        string `json:"name"`
	DisplayName string `json:"displayName"`
	Email       string `json:"email"`
	Type        string `json:"type"` // HUMAN, BOT
}

// Thread is a thread (spaces/…/threads/…).
type Thread struct {
	Name string `json:"name"`
}

// Annotation marks a mention in the text.
type Annotation struct {
	Type        string `json:"type"` // USER_MENTION, SLASH_COMMAND …
	UserMention *struct {
		User User `json:"user"`
	} `json:"userMention"`
}

// Attachment is a file on a message.
type Attachment struct {
	Name              string `json:"name"`
	ContentName       string `json:"contentName"`
	ContentType       string `json:"contentType"`
	Source            string `json:"source"` // UPLOADED_CONTENT, DRIVE_FILE
	AttachmentDataRef struct {
		ResourceName string `json:"resourceName"`
	} `json:"attachmentDataRef"`
}

// ErrMalformed is a body that is not an event.
var ErrMalformed = errors.New("malformed google chat event")

// parseEvent decodes a request body. It checks what every event needs (a
// type, a space) and, for a message, its name and sender.
func parseEvent(body []byte) (*Event, error) {
	var e Event
	if err := json.Unmarshal(body, &e); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrMalformed, err)
	}
	switch {
	case e.Type == "":
		return nil, fmt.Errorf("%w: no type", ErrMalformed)
	case !validName(e.Space.Name, "spaces/"):
		return nil, fmt.Errorf("%w: bad space name", ErrMalformed)
	}
	if carriesMessage(&e) {
		switch {
		case !validName(e.Message.Name, e.Space.Name+"/messages/"):
			return nil, fmt.Errorf("%w: message without a valid name in its space", ErrMalformed)
		case !validName(e.Message.Sender.Name, "users/"):
			return nil, fmt.Errorf("%w: message without a sender", ErrMalformed)
		case e.Message.Thread.Name != "" && !validName(e.Message.Thread.Name, e.Space.Name+"/threads/"):
			return nil, fmt.Errorf("%w: bad thread name", ErrMalformed)
		}
	}
	return &e, nil
}

// carriesMessage reports whether an event brings a user's message: a
// MESSAGE, or an ADDED_TO_SPACE that has one (the app was added to a
// space by an @mention of it: the mentioning message comes with the
// event and with no MESSAGE event of its own).
func carriesMessage(e *Event) bool {
	return e.Type == "MESSAGE" || e.Type == "ADDED_TO_SPACE" && e.Message.Name != ""
}

// validName reports whether s is a resource name under prefix: longer
// than it, at most 1,024 bytes, no spaces or control characters.
func validName(s, prefix string) bool {
	if len(s) <= len(prefix) || len(s) > 1024 || !strings.HasPrefix(s, prefix) {
		return false
	}
	for _, r := range s {
		if unicode.IsControl(r) || unicode.IsSpace(r) || r == unicode.ReplacementChar {
			return false
		}
	}
	return true
}

// isDM is Hermes's rule: spaceType DIRECT_MESSAGE, or the older type DM.
func isDM(s Space) bool {
	t := strings.ToUpper(s.SpaceType)
	if t == "" {
		t = strings.ToUpper(s.Type)
	}
	return t == "DIRECT_MESSAGE" || t == "DM"
}

// normalized is what the gateway makes of one event: a message to
// publish, or the reason it publishes nothing.
type normalized struct {
	ev   *eventsv1.MessageReceived
	skip string
}

// normalize turns a verified event into a message, as Hermes builds its
// source: the space as the chat, the sender's email as the user (its
// resource name when it has none) and its resource name as user_id_alt,
// argumentText (the text without the app's mention) as the text, a
// slash command as /cmd_<id> unless its text is one. The message an
// ADDED_TO_SPACE event carries (the @mention that added the app) is
// published as any message; Hermes, which reads only MESSAGE events,
// drops it. A message of another app (sender type BOT) is published,
// marked is_bot, only as bots admits it; the app's own (self) never,
// whatever bots says: answering them would loop.
func normalize(e *Event, account string, bots platform.BotMode, self func(name string) bool) normalized {
	if !carriesMessage(e) {
		return normalized{skip: "event_" + reason(e.Type)}
	}
	m := e.Message
	bot := strings.EqualFold(m.Sender.Type, "BOT")
	if bot && self(m.Sender.Name) {
		return normalized{skip: "own"}
	}
	text := m.ArgumentText
	if text == "" {
		text = m.Text
	}
	text = strings.TrimSpace(text)
	if m.SlashCommand != nil && m.SlashCommand.CommandID != "" && !strings.HasPrefix(text, "/") {
		text = strings.TrimSpace("/cmd_" + m.SlashCommand.CommandID.String() + " " + text)
	}
	atts := attachments(m.Attachment)
	if text == "" && len(atts) == 0 {
		return normalized{skip: "empty"}
	}
	mentioned := false
	for _, a := range m.Annotations {
		if a.Type == "USER_MENTION" && a.UserMention != nil && strings.EqualFold(a.UserMention.User.Type, "BOT") {
			mentioned = true
		}
	}
	if bot && !bots.Admits(mentioned) {
		return normalized{skip: "bot"}
	}
	chatType, thread := "group", m.Thread.Name
	if isDM(e.Space) {
		chatType = "dm"
		if !m.ThreadReply {
			thread = "" // the thread Google Chat opens for every top-level DM message
		}
	}
	user := m.Sender.Email
	if user == "" {
		user = m.Sender.Name
	}
	name := m.Sender.DisplayName
	if name == "" {
		name = user
	}
	chatName := e.Space.DisplayName
	if chatName == "" {
		chatName = e.Space.Name
	}
	ev := &eventsv1.MessageReceived{
		EventId:   m.Name,
		MessageId: m.Name,
		Text:      text,
		Source: &eventsv1.SessionSource{
			Platform: PlatformName, Account: account, ChatId: e.Space.Name, ChatName: chatName, ChatType: chatType,
			UserId: user, UserName: name, UserIdAlt: m.Sender.Name, ThreadId: thread, IsBot: bot,
		},
		Attachments: atts,
		Mentioned:   mentioned,
	}
	for _, ts := range []string{m.CreateTime, e.EventTime} {
		if t, err := time.Parse(time.RFC3339Nano, ts); err == nil {
			ev.SentAt = timestamppb.New(t)
			break
		}
	}
	return normalized{ev: ev}
}

// reason is a metric label for an event type (bounded).
func reason(typ string) string {
	switch typ {
	case "ADDED_TO_SPACE", "REMOVED_FROM_SPACE", "CARD_CLICKED", "WIDGET_UPDATED", "APP_COMMAND", "APP_HOME", "SUBMIT_FORM":
		return strings.ToLower(typ)
	}
	return "other"
}

// attachments are the message's uploaded files, fetched later through
// media.download by their attachmentDataRef; Drive files (which need a
// user's OAuth) are left out, as Hermes leaves them.
func attachments(in []Attachment) []*eventsv1.Attachment {
	var out []*eventsv1.Attachment
	for _, a := range in {
		ref := a.AttachmentDataRef.ResourceName
		if ref == "" || len(ref) > 4096 {
			continue
		}
		mt := strings.ToLower(strings.TrimSpace(a.ContentType))
		out = append(out, &eventsv1.Attachment{Kind: kindOf(mt), PlatformFileId: ref, MimeType: mt, FileName: a.ContentName})
	}
	return out
}

func kindOf(mt string) eventsv1.AttachmentKind {
	switch {
	case strings.HasPrefix(mt, "image/"):
		return eventsv1.AttachmentKind_ATTACHMENT_KIND_IMAGE
	case strings.HasPrefix(mt, "video/"):
		return eventsv1.AttachmentKind_ATTACHMENT_KIND_VIDEO
	case strings.HasPrefix(mt, "audio/"):
		return eventsv1.AttachmentKind_ATTACHMENT_KIND_AUDIO
	}
	return eventsv1.AttachmentKind_ATTACHMENT_KIND_DOCUMENT
}

// appAlias is the name the Chat API gives the calling app ("users/app").
const appAlias = "users/app"

// selfNames are the app's own user names: the alias, and the name the
// Chat API gave the sender of each message the app created (its numeric
// users/… id). A replica that has not sent yet knows only the alias; an
// app's own messages do not come back to it as events, this is the
// guard should one come.
type selfNames struct{ names sync.Map }

func (s *selfNames) learn(name string) {
	if name != "" {
		s.names.Store(name, true)
	}
}

// is reports whether name is the app's.
func (s *selfNames) is(name string) bool {
	if name == appAlias {
		return true
	}
	_, ok := s.names.Load(name)
	return ok
}
