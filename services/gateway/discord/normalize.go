package discord

import (
	"encoding/json"
	"errors"
	"fmt"
	"path"
	"regexp"
	"strings"

	"github.com/bwmarrin/discordgo"
	"google.golang.org/protobuf/types/known/timestamppb"

	eventsv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/events/v1"
	"github.com/switchboard-chat/switchboard/pkg/platform"
)

// errMalformed marks a MESSAGE_CREATE that is not a message.
var errMalformed = errors.New("malformed discord message")

// parseMessage reads the d of a MESSAGE_CREATE dispatch.
func parseMessage(raw []byte) (*discordgo.Message, error) {
	var m discordgo.Message
	if err := json.Unmarshal(raw, &m); err != nil {
		return nil, fmt.Errorf("%w: %v", errMalformed, err)
	}
	if m.ID == "" || m.ChannelID == "" || m.Author == nil || m.Author.ID == "" {
		return nil, fmt.Errorf("%w: missing id, channel or author", errMalformed)
	}
	if !snowflake(m.ID) {
		return nil, fmt.Errorf("%w: message id is not a snowflake", errMalformed)
	}
	return &m, nil
}

// snowflake reports whether id looks like a Discord id: 1 to 20 ASCII
// digits. The message id becomes the bus message id; sends check their
// ids with it before the ids become REST paths (checkIDs).
func snowflake(id string) bool {
	if id == "" || len(id) > 20 {
		return false
	}
	for i := 0; i < len(id); i++ {
		if id[i] < '0' || id[i] > '9' {
			return false
		}
	}
	return true
}

// channelInfo is what normalization needs to know about a channel.
type channelInfo struct {
	Thread bool
	Parent string
	Owner  string // a thread's creator
	// Posts: a forum or media channel, whose threads (posts) begin with
	// a message in the thread itself, with the thread's id.
	Posts bool
}

// rules are the gateway's filters and identity.
type rules struct {
	Account         string
	BotID           string
	Bots            platform.BotMode // other bots' and webhooks' messages
	AllowedChannels map[string]bool  // empty: every channel
	IgnoredChannels map[string]bool  // "*": every channel
	AllowedRoles    map[string]bool  // members authorized by role
	AutoThread      bool
	RequireMention  bool
	FreeChannels    map[string]bool // "*": every channel
	IgnoreNoMention bool
}

// free reports whether a channel (or the thread's parent) is answered
// without a mention.
func (r rules) free(channel string, ch channelInfo) bool {
	return r.FreeChannels["*"] || r.FreeChannels[channel] || (ch.Thread && r.FreeChannels[ch.Parent])
}

// skip explains why a message is not published.
type skip string

// skipUnaddressed is a guild message that neither mentions the bot nor
// replies to it where a mention is required; normalize returns its event
// too, for the caller to admit when the message's thread turns out to be
// one the bot takes part in.
const skipUnaddressed skip = "not addressed to the bot"

// normalize turns a message into the inbound event. ch describes the
// message's channel (a thread or not) for guild messages.
func normalize(m *discordgo.Message, ch channelInfo, r rules) (*eventsv1.MessageReceived, skip) {
	if m.Author.ID == r.BotID {
		return nil, "own message"
	}
	bot := m.Author.Bot || m.WebhookID != ""
	if bot && !r.Bots.Admits(true) {
		return nil, "bot message"
	}
	switch m.Type {
	case discordgo.MessageTypeDefault, discordgo.MessageTypeReply:
	default:
		return nil, skip(fmt.Sprintf("message type %d", m.Type))
	}
	src := &eventsv1.SessionSource{
		Platform: "discord", Account: r.Account, ChatId: m.ChannelID,
		UserId: m.Author.ID, UserName: displayName(m.Author, m.Member), ScopeId: m.GuildID, IsBot: bot,
	}
	dm := m.GuildID == ""
	switch {
	case dm:
		src.ChatType = "dm"
	case ch.Thread:
		src.ChatType, src.ThreadId, src.ParentChatId = "thread", m.ChannelID, ch.Parent
	default:
		src.ChatType = "group"
	}
	if !dm && len(r.AllowedChannels) > 0 && !r.AllowedChannels[m.ChannelID] && !(ch.Thread && r.AllowedChannels[ch.Parent]) {
		return nil, "channel not allowed"
	}
	if !dm && (r.IgnoredChannels["*"] || r.IgnoredChannels[m.ChannelID] || (ch.Thread && r.IgnoredChannels[ch.Parent])) {
		return nil, "channel ignored"
	}
	// As Hermes (its client user in message.mentions), the message's
	// mentions decide, not its text: Discord lists no mention written
	// in code (`<@id>`, a code block), which is text like any other.
	mentioned := false
	for _, u := range m.Mentions {
		if u != nil && u.ID == r.BotID {
			mentioned = true
		}
	}
	text := m.Content
	if mentioned {
		text = stripMention(m.Content, r.BotID)
	}
	if bot && !r.Bots.Admits(mentioned) {
		// As Hermes's DISCORD_ALLOW_BOTS=mentions: a bot's message is
		// taken when it mentions this bot (a reply that pings it lists
		// it among the mentions).
		return nil, "bot message without a mention"
	}
	if !dm && !mentioned && mentionsOtherBot(m, r.BotID) {
		// Hermes's multi-agent filter: a message that mentions another
		// bot and not this one is that bot's to answer, in a
		// free-response channel or a thread too, whatever
		// ignore_no_mention says; two agents in one channel do not both
		// answer it.
		return nil, "addressed to another bot"
	}
	ev := &eventsv1.MessageReceived{EventId: m.ID, MessageId: m.ID, Source: src, Text: text,
		// A role that authorizes its members stands in for the user
		// allowlists, as in Hermes.
		TransportAuthenticated: !dm && !m.Author.Bot && hasRole(m.Member, r.AllowedRoles)}
	if ref := m.MessageReference; ref != nil && ref.MessageID != "" {
		ev.ReplyTo = &eventsv1.ReplyTo{MessageId: ref.MessageID}
		if rm := m.ReferencedMessage; rm != nil {
			ev.ReplyTo.Text = rm.Content
			if rm.Author != nil {
				ev.ReplyTo.UserId = rm.Author.ID
				ev.ReplyTo.FromBot = rm.Author.ID == r.BotID
				mentioned = mentioned || ev.ReplyTo.FromBot
			}
		}
	}
	ev.Mentioned = mentioned || dm
	free := !dm && r.free(m.ChannelID, ch)
	if !dm && !mentioned && !free && r.IgnoreNoMention && mentionsOthers(m, r.BotID) {
		return nil, "addressed to others"
	}
	if r.AutoThread && src.ChatType == "group" && mentioned && !free && m.Type != discordgo.MessageTypeReply {
		// The reply opens a thread from this message; Discord gives the
		// thread the message's id. Not in a free-response channel, as in
		// Hermes: it is answered inline, mention or not.
		src.ProspectiveThreadId = m.ID
	}
	if !m.Timestamp.IsZero() {
		ev.SentAt = timestamppb.New(m.Timestamp)
	}
	voice := m.Flags&discordgo.MessageFlagsIsVoiceMessage != 0
	for _, a := range m.Attachments {
		if a == nil {
			continue
		}
		kind := kindOf(a.ContentType, voice)
		if a.ContentType == "" && pictureExts[strings.ToLower(path.Ext(a.Filename))] {
			// Discord left the type out: a picture by its name, which
			// the download's Content-Type then names.
			kind = eventsv1.AttachmentKind_ATTACHMENT_KIND_IMAGE
		}
		ev.Attachments = append(ev.Attachments, &eventsv1.Attachment{
			Kind: kind, Location: &eventsv1.Attachment_Url{Url: a.URL},
			MimeType: a.ContentType, SizeBytes: int64(a.Size), FileName: a.Filename, PlatformFileId: a.ID,
		})
	}
	for _, st := range m.StickerItems {
		if st != nil {
			ev.Attachments = append(ev.Attachments, sticker(st))
		}
	}
	if ev.Text == "" && len(ev.Attachments) == 0 {
		return nil, "empty message"
	}
	if !dm && r.RequireMention && !mentioned && !free && !(ch.Thread && ch.Owner == r.BotID) {
		return ev, skipUnaddressed
	}
	return ev, ""
}

// displayName is the name Discord shows for a user, Hermes's
// user_name (discord.py's display_name): the member's nickname in the
// guild, else the user's display name (global_name), else the username
// (the handle, "alice_1234"). member is the guild member, nil in a DM;
// a message's carries no user, its author is u.
func displayName(u *discordgo.User, member *discordgo.Member) string {
	if member != nil && member.Nick != "" {
		return member.Nick
	}
	if u.GlobalName != "" {
		return u.GlobalName
	}
	return u.Username
}

// mentionsOtherBot reports whether a message mentions a bot other than
// this one (Discord marks a mentioned bot user bot: true).
func mentionsOtherBot(m *discordgo.Message, self string) bool {
	for _, u := range m.Mentions {
		if u != nil && u.Bot && u.ID != self {
			return true
		}
	}
	return false
}

// mentionsOthers reports whether a message mentions users (or roles, or
// everyone) other than the bot.
func mentionsOthers(m *discordgo.Message, bot string) bool {
	if m.MentionEveryone || len(m.MentionRoles) > 0 {
		return true
	}
	for _, u := range m.Mentions {
		if u != nil && u.ID != bot {
			return true
		}
	}
	return false
}

func hasRole(m *discordgo.Member, allowed map[string]bool) bool {
	if m == nil {
		return false
	}
	for _, r := range m.Roles {
		if allowed[r] {
			return true
		}
	}
	return false
}

// mentionRE is a mention of a user ("<@id>", "<@!id>"), with the spaces
// and tabs after it.
var mentionRE = regexp.MustCompile(`<@!?([0-9]+)>[ \t]*`)

// stripMention removes mentions of the bot ("<@id>", "<@!id>"), each with
// the spaces after it, from the text of a message that mentions it, and
// trims the text, as Hermes does. The rest stays as written: its lines,
// indentation and code blocks are the user's.
func stripMention(text, bot string) string {
	found := false
	out := mentionRE.ReplaceAllStringFunc(text, func(s string) string {
		if mentionRE.FindStringSubmatch(s)[1] == bot {
			found = true
			return ""
		}
		return s
	})
	if !found {
		return text
	}
	return strings.TrimSpace(out)
}

// pictureExts are the file extensions of the pictures the model is shown.
var pictureExts = map[string]bool{".png": true, ".jpg": true, ".jpeg": true, ".gif": true, ".webp": true}

// kindOf is an attachment's kind by its media type; voice says the message
// is a voice message (flag IS_VOICE_MESSAGE), whose one attachment is the
// recording. An Ogg file sent as a file is audio, not a voice message.
func kindOf(mime string, voice bool) eventsv1.AttachmentKind {
	switch {
	case voice:
		return eventsv1.AttachmentKind_ATTACHMENT_KIND_VOICE
	case strings.HasPrefix(mime, "image/"):
		return eventsv1.AttachmentKind_ATTACHMENT_KIND_IMAGE
	case strings.HasPrefix(mime, "audio/"):
		return eventsv1.AttachmentKind_ATTACHMENT_KIND_AUDIO
	case strings.HasPrefix(mime, "video/"):
		return eventsv1.AttachmentKind_ATTACHMENT_KIND_VIDEO
	default:
		return eventsv1.AttachmentKind_ATTACHMENT_KIND_DOCUMENT
	}
}

// stickerCDN serves Discord's stickers by id.
const stickerCDN = "https://media.discordapp.net/stickers/"

// sticker is a sticker of a message: PNG (APNG shows its first frame) and
// GIF ones are pictures on Discord's CDN; a Lottie one is only named.
func sticker(st *discordgo.StickerItem) *eventsv1.Attachment {
	a := &eventsv1.Attachment{Kind: eventsv1.AttachmentKind_ATTACHMENT_KIND_STICKER, PlatformFileId: st.ID, FileName: st.Name}
	switch st.FormatType {
	case discordgo.StickerFormatTypePNG, discordgo.StickerFormatTypeAPNG:
		a.MimeType, a.Location = "image/png", &eventsv1.Attachment_Url{Url: stickerCDN + st.ID + ".png"}
	case discordgo.StickerFormatTypeGIF:
		a.MimeType, a.Location = "image/gif", &eventsv1.Attachment_Url{Url: stickerCDN + st.ID + ".gif"}
	default:
		a.MimeType = "application/x-lottie"
	}
	return a
}
