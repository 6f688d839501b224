package matrix

import (
	"errors"
	"fmt"
	"mime"
	"net/url"
	"path"
	"slices"
	"strings"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"
	"maunium.net/go/mautrix/event"
	"maunium.net/go/mautrix/id"

	"github.com/switchboard-chat/switchboard/pkg/command"
	eventsv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/events/v1"
)

// errMalformed marks a room event that is not a well-formed m.room.message.
var errMalformed = errors.New("malformed matrix event")

// skip is why a room event was read without a message to publish ("" for
// a message that is published).
type skip string

const (
	skipNone        skip = ""
	skipOwn         skip = "own"
	skipNotMessage  skip = "not a message"
	skipEdit        skip = "edit"
	skipNotice      skip = "notice"
	skipEncrypted   skip = "encrypted"
	skipEmpty       skip = "empty"
	skipMsgType     skip = "unsupported msgtype"
	skipRoom        skip = "room not allowed"
	skipNotMention  skip = "not mentioned"
	skipOld         skip = "older than the first start"
	skipNonMXCMedia skip = "media not on mxc"
)

// rules are the gateway's identity and filters, as Hermes's adapter has
// them.
type rules struct {
	// Bot is the bot's user id: its own events are skipped, and a
	// mention of it addresses the bot.
	Bot            id.UserID
	RequireMention bool
	Free, Allowed  map[string]bool
	AutoThread     bool
	DMAutoThread   bool
	ProcessNotices bool
}

// roomView is what the gateway knows of the room an event is in.
type roomView struct {
	ID   id.RoomID
	Name string
	DM   bool
	// BotName is the bot's display name in the room: a client's pill
	// writes it into the body.
	BotName string
	// Names returns a member's display name ("" when unknown).
	Names func(id.UserID) string
}

// normalize turns one timeline event into the inbound event Hermes's
// adapter would hand its gateway: text, emotes (and, with
// process_notices, notices) and media (m.image, m.file, m.audio, m.video
// as attachments the workers fetch through the gateway), with the reply
// it answers, its thread and whether it mentions the bot. inBotThread
// reports whether the bot takes part in a thread (Hermes's thread
// participation: a room message in it needs no mention). The skip
// reason is set for an event that is read and not published; err wraps
// errMalformed for content that is not a message.
func normalize(ev *event.Event, rv roomView, r rules, inBotThread func(thread id.EventID) bool) (*eventsv1.MessageReceived, skip, error) {
	if ev == nil || ev.ID == "" || ev.Sender == "" {
		return nil, skipNone, fmt.Errorf("%w: no event id or sender", errMalformed)
	}
	switch ev.Type {
	case event.EventMessage:
	case event.EventEncrypted:
		return nil, skipEncrypted, nil
	default:
		// Redactions, reactions, state and anything else.
		return nil, skipNotMessage, nil
	}
	if isBot(ev.Sender, r.Bot) {
		return nil, skipOwn, nil
	}
	c, err := messageContent(ev)
	if err != nil {
		return nil, skipNone, err
	}
	rel := c.RelatesTo
	if rel != nil && rel.Type == event.RelReplace {
		return nil, skipEdit, nil
	}
	switch c.MsgType {
	case event.MsgText, event.MsgEmote:
	case event.MsgNotice:
		if !r.ProcessNotices {
			return nil, skipNotice, nil
		}
	case event.MsgImage, event.MsgFile, event.MsgAudio, event.MsgVideo:
	default:
		return nil, skipMsgType, nil
	}

	var thread id.EventID
	if rel != nil && rel.Type == event.RelThread {
		thread = rel.EventID
	}
	var replyTo id.EventID
	if rel != nil && rel.InReplyTo != nil && !(thread != "" && rel.IsFallingBack) {
		// A thread's fallback reply (is_falling_back) is no reply.
		replyTo = rel.InReplyTo.EventID
	}
	body := c.Body
	if replyTo != "" {
		body = stripReplyFallback(body)
	}
	mentioned := mentions(c, body, r.Bot, rv.BotName)

	var atts []*eventsv1.Attachment
	text := body
	if media(c.MsgType) {
		a, reason := attachmentOf(c)
		if reason != skipNone {
			return nil, reason, nil
		}
		atts = append(atts, a)
		// The body of a media event is its file name unless a caption
		// (filename set apart) was written.
		text = ""
		if c.FileName != "" && c.Body != c.FileName {
			text = body
		}
	}
	if strings.TrimSpace(text) == "" && len(atts) == 0 {
		return nil, skipEmpty, nil
	}
	if c.MsgType == event.MsgEmote {
		name := rv.name(ev.Sender)
		text = "* " + name + " " + text
	}

	chatType := "group"
	if rv.DM {
		chatType = "dm"
	} else {
		if len(r.Allowed) > 0 && !r.Allowed[rv.ID.String()] {
			return nil, skipRoom, nil
		}
		_, isCommand := command.Parse(strings.TrimSpace(text), "matrix", "")
		inThread := thread != "" && inBotThread != nil && inBotThread(thread)
		if r.RequireMention && !r.Free[rv.ID.String()] && !inThread && !mentioned && !isCommand {
			return nil, skipNotMention, nil
		}
	}
	if mentioned && r.RequireMention {
		text = stripMention(text, r.Bot, rv.BotName)
	}
	if thread == "" && ((rv.DM && r.DMAutoThread) || (!rv.DM && r.AutoThread)) {
		// Hermes's auto-thread: the answer opens a thread on this message,
		// which is the session from here on.
		thread = ev.ID
	}

	out := &eventsv1.MessageReceived{
		EventId: ev.ID.String(), MessageId: ev.ID.String(), Text: text, Attachments: atts, Mentioned: mentioned || rv.DM,
		Source: &eventsv1.SessionSource{
			Platform: "matrix", Account: r.Bot.String(), ChatId: rv.ID.String(), ChatName: rv.chatName(ev.Sender),
			ChatType: chatType, UserId: ev.Sender.String(), UserName: rv.name(ev.Sender),
		},
	}
	if ev.Timestamp > 0 {
		out.SentAt = timestamppb.New(time.UnixMilli(ev.Timestamp))
	}
	if thread != "" {
		out.Source.ThreadId = thread.String()
		out.Source.ParentChatId = rv.ID.String()
	}
	if replyTo != "" {
		out.ReplyTo = &eventsv1.ReplyTo{MessageId: replyTo.String()}
	}
	return out, skipNone, nil
}

// messageContent parses an m.room.message's content.
func messageContent(ev *event.Event) (*event.MessageEventContent, error) {
	if c, ok := ev.Content.Parsed.(*event.MessageEventContent); ok && c != nil {
		return c, nil
	}
	if len(ev.Content.VeryRaw) == 0 {
		return nil, fmt.Errorf("%w: no content", errMalformed)
	}
	if err := ev.Content.ParseRaw(ev.Type); err != nil {
		return nil, fmt.Errorf("%w: %v", errMalformed, err)
	}
	c, ok := ev.Content.Parsed.(*event.MessageEventContent)
	if !ok || c == nil {
		return nil, fmt.Errorf("%w: content is not a message", errMalformed)
	}
	return c, nil
}

func media(t event.MessageType) bool {
	return t == event.MsgImage || t == event.MsgFile || t == event.MsgAudio || t == event.MsgVideo
}

// attachmentOf describes a media event's file: its mxc:// URI is the
// platform file id the gateway downloads it by. Encrypted media (file)
// is not supported.
func attachmentOf(c *event.MessageEventContent) (*eventsv1.Attachment, skip) {
	if c.File != nil && c.URL == "" {
		return nil, skipEncrypted
	}
	uri, err := c.URL.Parse()
	if err != nil || uri.IsEmpty() {
		return nil, skipNonMXCMedia
	}
	a := &eventsv1.Attachment{PlatformFileId: uri.String(), FileName: c.FileName}
	if a.FileName == "" {
		a.FileName = c.Body
	}
	if c.Info != nil {
		a.MimeType = c.Info.MimeType
		a.SizeBytes = int64(max(c.Info.Size, 0))
	}
	switch c.MsgType {
	case event.MsgImage:
		a.Kind = eventsv1.AttachmentKind_ATTACHMENT_KIND_IMAGE
	case event.MsgAudio:
		a.Kind = eventsv1.AttachmentKind_ATTACHMENT_KIND_AUDIO
		if c.MSC3245Voice != nil {
			a.Kind = eventsv1.AttachmentKind_ATTACHMENT_KIND_VOICE
		}
	case event.MsgVideo:
		a.Kind = eventsv1.AttachmentKind_ATTACHMENT_KIND_VIDEO
	default:
		a.Kind = eventsv1.AttachmentKind_ATTACHMENT_KIND_DOCUMENT
	}
	if a.MimeType == "" {
		a.MimeType = mime.TypeByExtension(path.Ext(a.FileName))
	}
	return a, skipNone
}

// isBot reports whether user u is the bot, whose configured user id is
// bot: in any case, as Hermes compares, since a MATRIX_USER_ID written in
// another case than the homeserver's (an access token does not check
// it) must neither make the bot answer itself nor miss what is its own.
func isBot(u, bot id.UserID) bool {
	return bot != "" && strings.EqualFold(u.String(), bot.String())
}

// mentions reports whether the message addresses the bot: its user id in
// m.mentions, a pill (a matrix.to link to it) in the formatted body, or
// its user id or display name in the body (what clients write for a
// pill).
func mentions(c *event.MessageEventContent, body string, bot id.UserID, botName string) bool {
	if bot == "" {
		return false
	}
	if c.Mentions != nil && slices.ContainsFunc(c.Mentions.UserIDs, func(u id.UserID) bool { return isBot(u, bot) }) {
		return true
	}
	if c.FormattedBody != "" && pills(c.FormattedBody, bot) {
		return true
	}
	lb := strings.ToLower(body)
	if strings.Contains(lb, strings.ToLower(bot.String())) {
		return true
	}
	return botName != "" && namePrefix(lb, strings.ToLower(botName)) > 0
}

// matrixTo is what a pill's link holds before the user id.
const matrixTo = "matrix.to/#/"

// pills reports whether the formatted body links to user u on matrix.to:
// the id written as it is (@bot:example.org) or percent-encoded, whole
// (%40bot%3Aexample.org, as the spec's examples and Ruma-based clients
// write it) or in part; the link's id ends where its query or attribute
// does, or its path (a "/" after the server name's ":": a localpart may
// hold "/", as the spec's user id grammar has it, and Element writes it
// unescaped in the link).
func pills(formatted string, u id.UserID) bool {
	want := strings.ToLower(u.String())
	rest := strings.ToLower(formatted)
	for {
		i := strings.Index(rest, matrixTo)
		if i < 0 {
			return false
		}
		rest = rest[i+len(matrixTo):]
		target := rest
		if end := strings.IndexAny(target, "\"'?#>< \t\n"); end >= 0 {
			target = target[:end]
		}
		target = cutPath(target)
		dec, err := url.PathUnescape(target)
		if s := strings.IndexByte(target, '/'); err != nil && s >= 0 {
			// A malformed escape in the path after an id escaped whole.
			dec, err = url.PathUnescape(target[:s])
		}
		if err == nil && cutPath(dec) == want {
			return true
		}
	}
}

// cutPath is a matrix.to link's user id without the path after it: up to
// the first "/" after the ":" that starts its server name (a "/" before
// it is the localpart's).
func cutPath(s string) string {
	if c := strings.IndexByte(s, ':'); c >= 0 {
		if end := strings.IndexByte(s[c:], '/'); end >= 0 {
			return s[:c+end]
		}
	}
	return s
}

// namePrefix returns the length of "name:" or "name," (a pill as a
// client writes it at the start of a message) at the start of s, 0 when
// s does not start so.
func namePrefix(s, name string) int {
	if name == "" || !strings.HasPrefix(s, name) {
		return 0
	}
	rest := s[len(name):]
	if strings.HasPrefix(rest, ":") || strings.HasPrefix(rest, ",") {
		return len(name) + 1
	}
	return 0
}

// stripMention removes the bot's user id and a leading "Name:" pill from
// the text, as Hermes strips the mention it gates on.
func stripMention(text string, bot id.UserID, botName string) string {
	out := strings.ReplaceAll(text, bot.String(), "")
	if n := namePrefix(strings.ToLower(strings.TrimSpace(out)), strings.ToLower(botName)); n > 0 {
		out = strings.TrimSpace(out)[n:]
	}
	out = strings.TrimSpace(strings.TrimLeft(strings.TrimSpace(out), ":,"))
	if out == "" {
		return text
	}
	return out
}

// stripReplyFallback drops the "> quoted" lines (and the blank line
// after them) older clients put before a reply's text, as Hermes does.
func stripReplyFallback(body string) string {
	if !strings.HasPrefix(body, "> ") {
		return body
	}
	lines := strings.Split(body, "\n")
	i := 0
	for i < len(lines) && (strings.HasPrefix(lines[i], "> ") || lines[i] == ">") {
		i++
	}
	if i < len(lines) && lines[i] == "" {
		i++
	}
	if i >= len(lines) {
		return body
	}
	return strings.Join(lines[i:], "\n")
}

// name is a member's display name, else the user id's localpart.
func (rv roomView) name(u id.UserID) string {
	if rv.Names != nil {
		if n := rv.Names(u); n != "" {
			return n
		}
	}
	if local, _, err := u.Parse(); err == nil && local != "" {
		return local
	}
	return u.String()
}

// chatName is the room's name; a DM without one is named after the
// person the bot talks to.
func (rv roomView) chatName(sender id.UserID) string {
	switch {
	case rv.Name != "":
		return rv.Name
	case rv.DM:
		return rv.name(sender)
	default:
		return rv.ID.String()
	}
}
