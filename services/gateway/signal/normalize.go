package signal

import (
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"
	"unicode/utf16"

	"google.golang.org/protobuf/types/known/timestamppb"

	eventsv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/events/v1"
)

// errMalformed marks an event that is not a signal-cli receive
// notification.
var errMalformed = errors.New("malformed signal-cli event")

// notification is the data of one `receive` event: what signal-cli's
// JsonReceiveMessageHandler writes (the params of a JSON-RPC `receive`
// notification on its socket interface).
type notification struct {
	Account   string    `json:"account"`
	Envelope  *envelope `json:"envelope"`
	Exception *struct {
		Message string `json:"message"`
		Type    string `json:"type"`
	} `json:"exception"`
}

type envelope struct {
	Source         string          `json:"source"`
	SourceNumber   string          `json:"sourceNumber"`
	SourceUUID     string          `json:"sourceUuid"`
	SourceName     string          `json:"sourceName"`
	Timestamp      int64           `json:"timestamp"`
	DataMessage    *dataMessage    `json:"dataMessage"`
	EditMessage    *editMessage    `json:"editMessage"`
	SyncMessage    *syncMessage    `json:"syncMessage"`
	StoryMessage   json.RawMessage `json:"storyMessage"`
	ReceiptMessage json.RawMessage `json:"receiptMessage"`
	TypingMessage  json.RawMessage `json:"typingMessage"`
	CallMessage    json.RawMessage `json:"callMessage"`
}

type dataMessage struct {
	Timestamp   int64           `json:"timestamp"`
	Message     string          `json:"message"`
	GroupInfo   *groupInfo      `json:"groupInfo"`
	Mentions    []mention       `json:"mentions"`
	Attachments []inAttachment  `json:"attachments"`
	Quote       *quote          `json:"quote"`
	Reaction    json.RawMessage `json:"reaction"`
}

type editMessage struct {
	TargetSentTimestamp int64        `json:"targetSentTimestamp"`
	DataMessage         *dataMessage `json:"dataMessage"`
}

type syncMessage struct {
	SentMessage *sentMessage `json:"sentMessage"`
}

// sentMessage is a sync transcript: a message the account sent from
// another of its devices, with the data message's fields inline.
type sentMessage struct {
	Destination       string       `json:"destination"`
	DestinationNumber string       `json:"destinationNumber"`
	DestinationUUID   string       `json:"destinationUuid"`
	EditMessage       *editMessage `json:"editMessage"`
	dataMessage
}

type groupInfo struct {
	GroupID   string `json:"groupId"`
	GroupName string `json:"groupName"`
	Type      string `json:"type"`
}

type mention struct {
	Name   string `json:"name"`
	Number string `json:"number"`
	UUID   string `json:"uuid"`
	Start  int    `json:"start"`
	Length int    `json:"length"`
}

type inAttachment struct {
	ContentType string `json:"contentType"`
	Filename    string `json:"filename"`
	ID          string `json:"id"`
	Size        int64  `json:"size"`
	Caption     string `json:"caption"`
}

type quote struct {
	ID           int64     `json:"id"`
	Author       string    `json:"author"`
	AuthorNumber string    `json:"authorNumber"`
	AuthorUUID   string    `json:"authorUuid"`
	Text         string    `json:"text"`
	Mentions     []mention `json:"mentions"`
}

// parseEvent reads the data of one event: {"envelope": …, "account": …},
// or the same wrapped in a JSON-RPC notification.
func parseEvent(raw []byte) (*notification, error) {
	var top struct {
		notification
		Method string          `json:"method"`
		Params json.RawMessage `json:"params"`
	}
	if err := json.Unmarshal(raw, &top); err != nil {
		return nil, fmt.Errorf("%w: %v", errMalformed, err)
	}
	n := top.notification
	if top.Method != "" {
		if top.Method != "receive" || len(top.Params) == 0 {
			return nil, fmt.Errorf("%w: method %q", errMalformed, top.Method)
		}
		n = notification{}
		if err := json.Unmarshal(top.Params, &n); err != nil {
			return nil, fmt.Errorf("%w: params: %v", errMalformed, err)
		}
	}
	if n.Envelope == nil && n.Exception == nil {
		return nil, fmt.Errorf("%w: no envelope", errMalformed)
	}
	return &n, nil
}

// rules are the gateway's identity and filters.
type rules struct {
	// Account is the bot's number (or ACI for a numberless account).
	Account string
	// Groups allowed (Hermes's SIGNAL_GROUP_ALLOWED_USERS): empty, no
	// group; "*", every group.
	Groups map[string]bool
	// RequireMention: in groups, only messages that mention the bot (or
	// quote it).
	RequireMention bool
}

// skip explains why an event is not published.
type skip string

// groupPrefix marks a group chat id, as in Hermes: "group:<base64 id>".
const groupPrefix = "group:"

// messageID is how the gateway names a Signal message: its author and
// its timestamp, which is what quotes and reactions address it by.
func messageID(author string, ts int64) string {
	return author + ":" + strconv.FormatInt(ts, 10)
}

// splitMessageID reads a messageID.
func splitMessageID(id string) (author string, ts int64, ok bool) {
	i := strings.LastIndexByte(id, ':')
	if i <= 0 {
		return "", 0, false
	}
	ts, err := strconv.ParseInt(id[i+1:], 10, 64)
	if err != nil || ts <= 0 {
		return "", 0, false
	}
	return id[:i], ts, true
}

// normalize turns a notification into the inbound event, or says why
// there is none. As in Hermes: a data message (or an edit's new text),
// and a sync transcript of a message the account's owner sent to
// themselves (Note to Self) or to a group from another device; receipts,
// typing, calls, stories and other sync messages are skipped.
func normalize(n *notification, r rules) (*eventsv1.MessageReceived, skip, error) {
	env := n.Envelope
	if env == nil {
		return nil, "exception", nil
	}
	var data *dataMessage
	ts := env.Timestamp
	sync := env.SyncMessage != nil
	switch {
	case sync:
		sent := env.SyncMessage.SentMessage
		if sent == nil {
			return nil, "sync message", nil
		}
		data = &sent.dataMessage
		if sent.EditMessage != nil && sent.EditMessage.DataMessage != nil {
			// An edit's group is in its own data message: signal-cli
			// writes no data message fields beside it.
			data = sent.EditMessage.DataMessage
		}
		dest := firstOf(sent.DestinationNumber, sent.Destination, sent.DestinationUUID)
		toGroup := data.GroupInfo != nil && data.GroupInfo.GroupID != ""
		if (dest == "" || dest != r.Account) && !toGroup {
			return nil, "sync of a message to someone else", nil
		}
		if data.Timestamp > 0 {
			ts = data.Timestamp
		}
	case env.DataMessage != nil:
		data = env.DataMessage
	case env.EditMessage != nil && env.EditMessage.DataMessage != nil:
		data = env.EditMessage.DataMessage
	case len(env.StoryMessage) > 0:
		return nil, "story", nil
	case len(env.ReceiptMessage) > 0:
		return nil, "receipt", nil
	case len(env.TypingMessage) > 0:
		return nil, "typing", nil
	case len(env.CallMessage) > 0:
		return nil, "call", nil
	default:
		return nil, "no message", nil
	}
	sender := firstOf(env.SourceNumber, env.SourceUUID, env.Source)
	if sender == "" {
		return nil, "", fmt.Errorf("%w: envelope without a source", errMalformed)
	}
	if ts <= 0 {
		return nil, "", fmt.Errorf("%w: envelope without a timestamp", errMalformed)
	}
	if sender == r.Account && !sync {
		return nil, "own message", nil
	}
	gid := ""
	if data.GroupInfo != nil {
		gid = data.GroupInfo.GroupID
	}
	group := gid != ""
	if group && len(r.Groups) == 0 {
		return nil, "groups off", nil
	}
	if group && !r.Groups["*"] && !r.Groups[gid] {
		return nil, "group not allowed", nil
	}

	text := renderMentions(data.Message, data.Mentions)
	mentioned := !group
	if group {
		units := len(utf16.Encode([]rune(data.Message)))
		for _, m := range data.Mentions {
			if !m.within(units) {
				continue // ignored, as in the rendering
			}
			if r.Account != "" && (m.Number == r.Account || m.UUID == r.Account) {
				mentioned = true
			}
		}
		if rest, found := cutOwnMention(text, r.Account); found {
			mentioned = true
			text = strings.TrimSpace(strings.ReplaceAll(rest, "  ", " "))
		}
	}
	src := &eventsv1.SessionSource{
		Platform: "signal", Account: r.Account, ChatId: sender, ChatType: "dm", ChatName: env.SourceName,
		UserId: sender, UserName: firstOf(env.SourceName, sender), UserIdAlt: env.SourceUUID,
	}
	if group {
		src.ChatId, src.ChatType, src.ChatIdAlt, src.ChatName = groupPrefix+gid, "group", gid, data.GroupInfo.GroupName
	}
	id := messageID(sender, ts)
	ev := &eventsv1.MessageReceived{EventId: id, MessageId: id, Source: src, Text: text,
		SentAt: timestamppb.New(time.UnixMilli(ts))}
	if q := data.Quote; q != nil && q.ID > 0 {
		author := firstOf(q.AuthorNumber, q.AuthorUUID, q.Author)
		ev.ReplyTo = &eventsv1.ReplyTo{MessageId: messageID(author, q.ID), Text: renderMentions(q.Text, q.Mentions), UserId: author,
			FromBot: r.Account != "" && (q.AuthorNumber == r.Account || q.Author == r.Account || q.AuthorUUID == r.Account)}
		if author == "" {
			ev.ReplyTo.MessageId = strconv.FormatInt(q.ID, 10)
		}
		mentioned = mentioned || ev.ReplyTo.FromBot
	}
	for _, a := range data.Attachments {
		if a.ID == "" || longTextCopy(a, data.Message) {
			continue
		}
		ev.Attachments = append(ev.Attachments, &eventsv1.Attachment{
			Kind: kindOf(a.ContentType), MimeType: a.ContentType, SizeBytes: a.Size,
			FileName: a.Filename, Caption: a.Caption, PlatformFileId: a.ID,
		})
	}
	ev.Mentioned = mentioned
	if strings.TrimSpace(ev.Text) == "" && len(ev.Attachments) == 0 {
		// Reactions, group updates, profile key updates …
		return nil, "empty message", nil
	}
	if group && r.RequireMention && !mentioned {
		return nil, "not mentioned", nil
	}
	return ev, "", nil
}

// longTextMIME is the type of the attachment a Signal client sends a long
// message's whole text in (the body holds its first 2 KB or so).
const longTextMIME = "text/x-signal-plain"

// longTextCopy reports whether a is a long message's text attachment whose
// text signal-cli already put in the body (it reads the file and replaces
// the body, but lists the attachment still): published, the agent would
// read the message twice. One the body is shorter than (signal-cli could
// not read it) is kept, the only copy of the rest.
func longTextCopy(a inAttachment, body string) bool {
	mime, _, _ := strings.Cut(strings.ToLower(strings.TrimSpace(a.ContentType)), ";")
	return mime == longTextMIME && body != "" && a.Size <= int64(len(body))
}

// cutOwnMention removes every "@<account>" from text and reports whether
// there was one. An "@<account>" that goes on with a letter or digit is
// another member's number or id that begins like the bot's
// ("@+15550000001" in "@+155500000012"): it is left alone.
func cutOwnMention(text, account string) (string, bool) {
	if account == "" {
		return text, false
	}
	tag := "@" + account
	var b strings.Builder
	found := false
	for {
		i := strings.Index(text, tag)
		if i < 0 {
			b.WriteString(text)
			return b.String(), found
		}
		end := i + len(tag)
		if end < len(text) && isAlnum(text[end]) {
			b.WriteString(text[:end])
		} else {
			b.WriteString(text[:i])
			found = true
		}
		text = text[end:]
	}
}

func isAlnum(c byte) bool {
	return c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z'
}

// objectReplacement is the character Signal puts where a mention is.
const objectReplacement = '\uFFFC'

// renderMentions replaces each mention's placeholder with @number (or
// @uuid), as Hermes does. Signal counts start and length in UTF-16 code
// units; a mention outside the text, or reaching past it (or past the
// next mention), is ignored, as Signal's own clients ignore an
// out-of-range mention: the message keeps its placeholder. Start plus
// Length is never computed, so that a length near the int maximum
// cannot overflow into range.
func renderMentions(text string, ms []mention) string {
	if len(ms) == 0 || !strings.ContainsRune(text, objectReplacement) {
		return text
	}
	u := utf16.Encode([]rune(text))
	sorted := append([]mention(nil), ms...)
	sort.SliceStable(sorted, func(i, j int) bool { return sorted[i].Start > sorted[j].Start })
	end := len(u)
	for _, m := range sorted {
		if !m.within(end) {
			continue
		}
		name := firstOf(m.Number, m.UUID, "user")
		repl := utf16.Encode([]rune("@" + name))
		u = append(u[:m.Start:m.Start], append(repl, u[m.Start+m.Length:]...)...)
		end = m.Start // mentions never overlap: later ones stay left of this
	}
	return string(utf16.Decode(u))
}

// within reports whether m lies in the first n UTF-16 units of a text.
func (m mention) within(n int) bool {
	return m.Start >= 0 && m.Length >= 0 && m.Start <= n && m.Length <= n-m.Start
}

func kindOf(mime string) eventsv1.AttachmentKind {
	switch {
	case strings.HasPrefix(mime, "image/"):
		return eventsv1.AttachmentKind_ATTACHMENT_KIND_IMAGE
	case strings.HasPrefix(mime, "audio/"):
		// Signal's audio is its voice notes (AAC); Hermes reads it as voice.
		return eventsv1.AttachmentKind_ATTACHMENT_KIND_VOICE
	case strings.HasPrefix(mime, "video/"):
		return eventsv1.AttachmentKind_ATTACHMENT_KIND_VIDEO
	default:
		return eventsv1.AttachmentKind_ATTACHMENT_KIND_DOCUMENT
	}
}

func firstOf(s ...string) string {
	for _, x := range s {
		if x != "" {
			return x
		}
	}
	return ""
}
