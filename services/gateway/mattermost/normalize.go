package mattermost

import (
	"mime"
	"path"
	"regexp"
	"strings"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	eventsv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/events/v1"
	"github.com/switchboard-chat/switchboard/pkg/platform"
)

// skip is why a post was read without a message to publish ("" for one
// that is published).
type skip string

const (
	skipNone       skip = ""
	skipOwn        skip = "own"
	skipSystem     skip = "system"
	skipDeleted    skip = "deleted"
	skipEmpty      skip = "empty"
	skipNotMention skip = "not mentioned"
	// skipChannel: a post outside DMs in a channel allowed_channels
	// does not list.
	skipChannel skip = "channel not allowed"
	// skipBot: another bot's or an incoming webhook's post, which
	// allow_bots does not admit ("none", or "mentions" without one).
	skipBot skip = "bot"
)

// rules are the gateway's identity and filters, as Hermes's adapter has
// them.
type rules struct {
	// BotID and BotName (the username) identify the bot: its own posts
	// are skipped, and @name or @id addresses it.
	BotID, BotName string
	RequireMention bool
	Free           map[string]bool
	// Allowed (allowed_channels), when not empty, are the only channels
	// outside DMs whose posts are taken.
	Allowed map[string]bool
	// Bots says which posts of other bots and incoming webhooks are
	// published (allow_bots).
	Bots platform.BotMode
	// mention matches @BotName and @BotID (newRules).
	mention []*regexp.Regexp
}

// allowed reports whether allowed_channels lets in the posts of ev's
// channel: a DM always, and any channel when it is empty.
func (r rules) allowed(ev *posted) bool {
	return chatType(ev.ChannelType) == "dm" || len(r.Allowed) == 0 || r.Allowed[ev.Post.ChannelID]
}

// newRules builds the rules with the bot's mention patterns: @username
// or @id, in any case, as Hermes matches them.
func newRules(botID, botName string, requireMention bool, free map[string]bool, bots platform.BotMode) rules {
	r := rules{BotID: botID, BotName: botName, RequireMention: requireMention, Free: free, Bots: bots}
	for _, s := range []string{botName, botID} {
		if s != "" {
			// A username ends where a username character stops
			// (letters, digits, _ and -; a trailing . is punctuation).
			r.mention = append(r.mention, regexp.MustCompile(`(?i)@`+regexp.QuoteMeta(s)+`($|[^\pL\pN_-])`))
		}
	}
	return r
}

// chatTypes are Hermes's names for Mattermost's channel types: direct
// (D) is a DM, group messages (G) and private channels (P) are groups,
// open channels (O) channels.
var chatTypes = map[string]string{"D": "dm", "G": "group", "P": "group", "O": "channel"}

// chatType is the session key's chat type of a channel type; an unknown
// or missing one is a channel, as in Hermes.
func chatType(channelType string) string {
	if t, ok := chatTypes[channelType]; ok {
		return t
	}
	return "channel"
}

// normalize turns a posted event into the inbound event Hermes's adapter
// would hand its gateway: the post's text (the bot's @mention taken out
// in channels), its files as attachments the workers fetch through the
// gateway, its thread (root_id) and its channel; a post of another bot or
// an incoming webhook (ev.FromBot) is marked is_bot, and published only
// as allow_bots says. The skip reason is set
// for a post that is read and not published.
func normalize(ev *posted, r rules) (*eventsv1.MessageReceived, skip) {
	p := ev.Post
	switch {
	case p.UserID == r.BotID:
		return nil, skipOwn
	case p.Type != "":
		// system_join_channel, system_header_change …
		return nil, skipSystem
	case p.DeleteAt > 0:
		return nil, skipDeleted
	}
	text := p.Message
	atts := attachments(p)
	if strings.TrimSpace(text) == "" && len(atts) == 0 {
		return nil, skipEmpty
	}
	kind := chatType(ev.ChannelType)
	dm := kind == "dm"
	if !r.allowed(ev) {
		// As Hermes's allowed_channels: checked before any mention.
		return nil, skipChannel
	}
	if ev.FromBot && !r.Bots.Admits(mentions(text, r)) {
		// Another bot, or an incoming webhook: published only as
		// allow_bots says ("mentions": when it names this bot, in a DM
		// too, as the Slack and Discord gateways do), so two agents in
		// a free channel do not answer each other for ever.
		return nil, skipBot
	}
	mentioned := false
	if !dm {
		// The text names the bot, as Hermes reads a mention. The
		// event's mentions list is not enough: an @channel, @all or
		// @here puts every member there, the bot included, and the
		// bot would answer every announcement.
		mentioned = mentions(text, r)
		if r.RequireMention && !r.Free[p.ChannelID] && !mentioned {
			return nil, skipNotMention
		}
		if mentioned {
			text = stripMention(text, r)
		}
	}
	name := ev.SenderName
	if name == "" {
		name = p.UserID
	}
	chatName := ev.ChannelName
	if dm || chatName == "" {
		chatName = name
		if !dm {
			chatName = p.ChannelID
		}
	}
	voiceByDownload := voiceMessage(atts, text)
	out := &eventsv1.MessageReceived{
		EventId: p.ID, MessageId: p.ID, Text: text, Attachments: atts, Mentioned: mentioned || dm,
		VoiceByDownload: voiceByDownload,
		Source: &eventsv1.SessionSource{
			Platform: "mattermost", Account: r.BotID, ChatId: p.ChannelID, ChatName: chatName, ChatType: kind,
			UserId: p.UserID, UserName: name, IsBot: ev.FromBot,
		},
	}
	if p.CreateAt > 0 {
		out.SentAt = timestamppb.New(time.UnixMilli(p.CreateAt))
	}
	if p.RootID != "" {
		out.Source.ThreadId = p.RootID
		out.Source.ParentChatId = p.ChannelID
	}
	return out, skipNone
}

// attachments describes a post's files: from the post's metadata (the
// server's, or what describeFiles asked), else by id alone (the download
// tells the type).
func attachments(p *post) []*eventsv1.Attachment {
	byID := map[string]fileInfo{}
	for _, f := range p.Metadata.Files {
		byID[f.ID] = f
	}
	var out []*eventsv1.Attachment
	for _, id := range p.FileIDs {
		if id == "" {
			continue
		}
		f := byID[id]
		a := &eventsv1.Attachment{PlatformFileId: id, FileName: f.Name, MimeType: f.MimeType, SizeBytes: max(f.Size, 0)}
		if a.MimeType == "" && f.Name != "" {
			a.MimeType, _, _ = strings.Cut(mime.TypeByExtension(path.Ext(f.Name)), ";")
		}
		switch {
		case strings.HasPrefix(a.MimeType, "image/"):
			a.Kind = eventsv1.AttachmentKind_ATTACHMENT_KIND_IMAGE
		case strings.HasPrefix(a.MimeType, "audio/"):
			a.Kind = eventsv1.AttachmentKind_ATTACHMENT_KIND_AUDIO
		case strings.HasPrefix(a.MimeType, "video/"):
			a.Kind = eventsv1.AttachmentKind_ATTACHMENT_KIND_VIDEO
		default:
			a.Kind = eventsv1.AttachmentKind_ATTACHMENT_KIND_DOCUMENT
		}
		out = append(out, a)
	}
	return out
}

// voiceMessage marks a post's audio files as a voice message, as
// Hermes's Mattermost adapter types a post with an audio/* file VOICE
// (gateway/platforms/mattermost.py), which /voice on answers with
// speech: not when an image comes with it (Hermes's PHOTO), nor for a
// /command. text is the post's after the bot's mention. Mattermost has
// no voice messages of its own: a recorded clip is an audio file too.
// Hermes types a post by the files it downloaded, so the post is a voice
// message only once they are (MessageReceived.voice_by_download, which
// it reports): an audio file whose download fails makes none, a picture
// whose download fails leaves one.
func voiceMessage(atts []*eventsv1.Attachment, text string) bool {
	if strings.HasPrefix(text, "/") {
		return false
	}
	image, audio := false, false
	for _, a := range atts {
		switch a.GetKind() {
		case eventsv1.AttachmentKind_ATTACHMENT_KIND_IMAGE:
			image = true
		case eventsv1.AttachmentKind_ATTACHMENT_KIND_AUDIO:
			audio = true
		}
	}
	for _, a := range atts {
		if !image && a.GetKind() == eventsv1.AttachmentKind_ATTACHMENT_KIND_AUDIO {
			a.Kind = eventsv1.AttachmentKind_ATTACHMENT_KIND_VOICE
		}
	}
	return audio
}

// mentions reports whether the text names the bot with @.
func mentions(text string, r rules) bool {
	for _, re := range r.mention {
		if re.MatchString(text) {
			return true
		}
	}
	return false
}

// stripMention takes the bot's @mentions out of the text so the agent
// reads the request alone; a post that is nothing but the mention keeps
// its text.
func stripMention(text string, r rules) string {
	out := text
	for _, re := range r.mention {
		out = re.ReplaceAllString(out, "$1")
	}
	out = strings.TrimSpace(strings.TrimLeft(strings.TrimSpace(out), ":,"))
	if out == "" {
		return text
	}
	return out
}
