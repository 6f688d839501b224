package teams

import (
	"encoding/json"
	"errors"
	"fmt"
	"mime"
	"path"
	"regexp"
	"strings"
	"time"
	"unicode"

	"google.golang.org/protobuf/types/known/timestamppb"

	eventsv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/events/v1"
)

// Activity is the part of a Bot Framework activity the gateway reads
// (learn.microsoft.com/azure/bot-service/rest-api/bot-framework-rest-connector-api-reference#activity-object).
type Activity struct {
	Type         string          `json:"type"`
	ID           string          `json:"id"`
	Timestamp    string          `json:"timestamp"`
	ServiceURL   string          `json:"serviceUrl"`
	ChannelID    string          `json:"channelId"`
	From         Account         `json:"from"`
	Conversation Conversation    `json:"conversation"`
	Recipient    Account         `json:"recipient"`
	TextFormat   string          `json:"textFormat"`
	Text         string          `json:"text"`
	ReplyToID    string          `json:"replyToId"`
	Attachments  []Attachment    `json:"attachments"`
	Entities     []Entity        `json:"entities"`
	ChannelData  json.RawMessage `json:"channelData"`
	// Name and Value: an invoke's name (adaptiveCard/action) and value;
	// a message's value is an Action.Submit's data.
	Name  string          `json:"name"`
	Value json.RawMessage `json:"value"`
}

// Account is a channel account (from, recipient).
type Account struct {
	ID          string `json:"id"`
	Name        string `json:"name"`
	AADObjectID string `json:"aadObjectId"`
	Role        string `json:"role"`
}

// Conversation is the activity's conversation.
type Conversation struct {
	ID               string `json:"id"`
	Name             string `json:"name"`
	ConversationType string `json:"conversationType"` // personal, groupChat, channel
	IsGroup          bool   `json:"isGroup"`
	TenantID         string `json:"tenantId"`
}

// Attachment is a file, picture or card on an activity.
type Attachment struct {
	ContentType string          `json:"contentType"`
	ContentURL  string          `json:"contentUrl"`
	Name        string          `json:"name"`
	Content     json.RawMessage `json:"content"`
}

// Entity is an activity entity; the gateway reads mentions.
type Entity struct {
	Type      string  `json:"type"`
	Mentioned Account `json:"mentioned"`
	Text      string  `json:"text"`
}

// ErrMalformed is an activity that is not one.
var ErrMalformed = errors.New("malformed teams activity")

// parseActivity decodes a request body. It checks what every activity
// needs (a type, an http(s) serviceUrl, a conversation) and, for a
// message, its id and sender.
func parseActivity(body []byte) (*Activity, error) {
	var a Activity
	if err := json.Unmarshal(body, &a); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrMalformed, err)
	}
	switch {
	case a.Type == "":
		return nil, fmt.Errorf("%w: no type", ErrMalformed)
	case !httpURL(a.ServiceURL):
		return nil, fmt.Errorf("%w: serviceUrl %q is not an http(s) URL", ErrMalformed, a.ServiceURL)
	case !validID(a.Conversation.ID):
		return nil, fmt.Errorf("%w: bad conversation id", ErrMalformed)
	}
	if a.Type == "message" {
		switch {
		case !validID(a.ID):
			return nil, fmt.Errorf("%w: message without a valid id", ErrMalformed)
		case !validID(a.From.ID):
			return nil, fmt.Errorf("%w: message without a sender", ErrMalformed)
		}
	}
	return &a, nil
}

// validID reports whether s can be an id: not empty, at most 1,024
// bytes, no spaces or control characters.
func validID(s string) bool {
	if s == "" || len(s) > 1024 {
		return false
	}
	for _, r := range s {
		if unicode.IsControl(r) || unicode.IsSpace(r) || r == unicode.ReplacementChar {
			return false
		}
	}
	return true
}

// chatTypes maps conversationType to Hermes's chat types.
var chatTypes = map[string]string{"personal": "dm", "groupChat": "group", "channel": "channel"}

// chatType is Hermes's chat type of a conversation: personal → dm,
// groupChat → group, channel → channel; an unknown type is a dm (as
// Hermes) unless the conversation says it is a group.
func chatType(c Conversation) string {
	if t, ok := chatTypes[c.ConversationType]; ok {
		return t
	}
	if c.IsGroup {
		return "group"
	}
	return "dm"
}

// atTags are the <at>Name</at> tags Teams puts in a message's text for
// its mentions; Hermes strips them with the space after each.
var atTags = regexp.MustCompile(`<at[^>]*>[^<]*</at>\s*`)

// stripMentions removes the mention tags and trims the text.
func stripMentions(s string) string {
	if !strings.Contains(s, "<at") {
		return strings.TrimSpace(s)
	}
	return strings.TrimSpace(atTags.ReplaceAllString(s, ""))
}

// normalized is what the gateway makes of one activity: an event to
// publish, or the reason it publishes nothing.
type normalized struct {
	ev   *eventsv1.MessageReceived
	skip string
	// press: the event is an approval button's press (buttons.go);
	// unknown: an invoke's, of a choice the gateway cannot read
	// (pressOf), which the gateway answers itself when the router's
	// word cannot reach the invoke.
	press, unknown bool
}

// normalize turns a verified activity into an event. botID is the bot's
// app id (its channel account is 28:<app id>); requireMention gates
// channels and group chats on a mention of the bot.
func normalize(a *Activity, botID string, requireMention bool) normalized {
	if command, call, ok, unknown := pressOf(a); ok || unknown {
		// A press needs no mention: the card was the bot's.
		if unknown {
			// An invoke's is held, marked for the router, which answers
			// it as Hermes's card action handler does (endpoint.go). An
			// Action.Submit's is published as the same press, without
			// an interaction: the card's data, and any text the client
			// sends with it, are not the presser's words, and must not
			// start a turn. Hermes reads no Submit's data (its adapter
			// takes a Submit for a message of its text, none for a card's
			// data) and so has no word for one it does not recognise; a
			// message takes no answer, and the router's "Unknown action."
			// sent as a reply would be the whole conversation's. So the
			// router authorizes its sender as for any Submit press (a
			// stranger gets what their messages get: in a DM a pairing
			// code unless an allowlist applies, elsewhere nothing), and
			// its "/start" is answered with nothing, no notice and no
			// turn.
			n := pressEvent(a, botID, unknownChoice, "")
			n.unknown = n.press && a.Type == "invoke"
			return n
		}
		return pressEvent(a, botID, command, call)
	}
	if a.Type != "message" {
		return normalized{skip: "activity_" + reason(a.Type)}
	}
	if isBot(a.From.ID, a.Recipient.ID, botID) {
		return normalized{skip: "own"}
	}
	mentioned := false
	for _, e := range a.Entities {
		if e.Type == "mention" && isBot(e.Mentioned.ID, a.Recipient.ID, botID) {
			mentioned = true
		}
	}
	typ := chatType(a.Conversation)
	if requireMention && typ != "dm" && !mentioned {
		return normalized{skip: "not_mentioned"}
	}
	text := stripMentions(a.Text)
	atts := attachments(a.Attachments)
	if text == "" && len(atts) == 0 {
		return normalized{skip: "empty"}
	}
	ev := base(a, botID)
	ev.Text, ev.Attachments, ev.Mentioned = text, atts, mentioned
	return normalized{ev: ev}
}

// base is the event of an activity without its content: ids, source
// and time.
func base(a *Activity, botID string) *eventsv1.MessageReceived {
	user := a.From.AADObjectID
	if user == "" {
		user = a.From.ID
	}
	tenant := a.Conversation.TenantID
	if tenant == "" {
		tenant = channelTenant(a.ChannelData)
	}
	ev := &eventsv1.MessageReceived{
		EventId:   a.Conversation.ID + "|" + a.ID,
		MessageId: a.ID,
		Source: &eventsv1.SessionSource{
			Platform: "teams", Account: botID, ChatId: a.Conversation.ID, ChatName: a.Conversation.Name,
			ChatType: chatType(a.Conversation), UserId: user, UserName: a.From.Name, ScopeId: tenant,
		},
	}
	if t, err := time.Parse(time.RFC3339Nano, a.Timestamp); err == nil {
		ev.SentAt = timestamppb.New(t)
	}
	return ev
}

// isBot reports whether id is the bot: the activity's recipient, or its
// channel account 28:<app id>.
func isBot(id, recipient, appID string) bool {
	return id != "" && (id == recipient || id == "28:"+appID || id == appID)
}

// reason is a metric label for an activity type (bounded: unknown types
// are "other").
func reason(typ string) string {
	switch typ {
	case "conversationUpdate", "messageReaction", "typing", "invoke", "installationUpdate",
		"messageUpdate", "messageDelete", "event", "endOfConversation", "contactRelationUpdate":
		return typ
	}
	return "other"
}

// channelTenant reads channelData.tenant.id.
func channelTenant(raw json.RawMessage) string {
	var cd struct {
		Tenant struct {
			ID string `json:"id"`
		} `json:"tenant"`
	}
	if len(raw) == 0 || json.Unmarshal(raw, &cd) != nil {
		return ""
	}
	return cd.Tenant.ID
}

// attachments are the activity's files and pictures: an image's
// contentUrl (the connector's, fetched with the bot's token; a pasted
// picture's type is "image/*", which names none), a file's
// pre-authorized downloadUrl; the copy of the message Teams adds as a
// text/html attachment and cards are not attachments.
func attachments(in []Attachment) []*eventsv1.Attachment {
	var out []*eventsv1.Attachment
	for _, a := range in {
		ct := strings.ToLower(strings.TrimSpace(a.ContentType))
		switch {
		case strings.HasPrefix(ct, "application/vnd.microsoft.card"):
			continue
		case ct == "application/vnd.microsoft.teams.file.download.info":
			var info struct {
				DownloadURL string `json:"downloadUrl"`
				FileType    string `json:"fileType"`
			}
			if json.Unmarshal(a.Content, &info) != nil || !httpURL(info.DownloadURL) {
				continue
			}
			ft := strings.TrimPrefix(info.FileType, ".")
			name := a.Name
			if name == "" {
				name = "document"
				if ft != "" {
					name += "." + ft
				}
			}
			mt := fileMediaType(ft, name)
			out = append(out, &eventsv1.Attachment{Kind: kindOf(mt), PlatformFileId: info.DownloadURL, MimeType: mt, FileName: name})
		case a.ContentURL == "" || !httpURL(a.ContentURL):
			continue // text/html, text/plain copies of the text
		default:
			mt, _, err := mime.ParseMediaType(ct)
			if err != nil {
				mt = ""
			}
			kind := kindOf(mt)
			if strings.HasSuffix(mt, "/*") {
				// A pasted picture's "image/*": its type is not known
				// until the connector's answer names it (Fetch).
				mt = ""
			}
			out = append(out, &eventsv1.Attachment{Kind: kind, PlatformFileId: a.ContentURL, MimeType: mt, FileName: a.Name})
		}
	}
	return out
}

// fileMediaType is the media type of a file Teams describes by its
// fileType (an extension: "jpg", "pdf"), else its name's extension; ""
// when neither names a known type. A picture the user attached as a
// file is so a picture, not a document of no type.
func fileMediaType(fileType, name string) string {
	ext := path.Ext(name)
	if fileType != "" && !strings.ContainsAny(fileType, "./") {
		ext = "." + fileType
	}
	mt, _, err := mime.ParseMediaType(mime.TypeByExtension(strings.ToLower(ext)))
	if err != nil {
		return ""
	}
	return mt
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
