package telegram

import (
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf16"
	"unicode/utf8"

	"github.com/go-telegram/bot/models"
	"google.golang.org/protobuf/types/known/timestamppb"

	eventsv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/events/v1"
)

// generalTopic is the thread id of a forum's General topic; Telegram
// rejects it as message_thread_id on sends.
const generalTopic = "1"

// identity is what normalization needs to know about the bot.
type identity struct {
	id       int64
	username string // without @, may be empty until getMe answered
}

// gating decides which group messages reach the agent.
type gating struct {
	requireMention bool
	freeChats      map[string]bool
	// otherBotsToo is exclusive_bot_mentions off: a group message that
	// names other bots and not this one follows the rules above too.
	otherBotsToo bool
	// patterns are the mention patterns (wake words): a group message
	// whose text or caption matches one mentions the bot.
	patterns []*regexp.Regexp
}

// wakes reports whether a mention pattern matches the message's text or
// its caption (Hermes's _message_matches_mention_patterns).
func (g gating) wakes(msg *models.Message) bool {
	for _, text := range []string{msg.Text, msg.Caption} {
		if text == "" {
			continue
		}
		for _, re := range g.patterns {
			if re.MatchString(text) {
				return true
			}
		}
	}
	return false
}

// outcome of normalizing one update.
type outcome struct {
	ev *eventsv1.MessageReceived
	// skip explains why the update produces no event (unsupported kind,
	// not addressed to the bot); the update is still acknowledged.
	skip string
	// callbackID is the callback query to answer (a button's press).
	callbackID string
}

// errMalformed marks an update that cannot be decoded.
var errMalformed = errors.New("malformed update")

// updateID reads only the update_id of a raw update, so even an update
// that fails to decode can be acknowledged past.
func updateID(raw []byte) (int64, bool) {
	var head struct {
		ID *int64 `json:"update_id"`
	}
	if err := json.Unmarshal(raw, &head); err != nil || head.ID == nil {
		return 0, false
	}
	return *head.ID, true
}

// queryID reads only the callback query id of a raw update ("" for
// none), so the query of a press that fails to decode can still be
// answered.
func queryID(raw []byte) string {
	var head struct {
		Query struct {
			ID string `json:"id"`
		} `json:"callback_query"`
	}
	if err := json.Unmarshal(raw, &head); err != nil {
		return ""
	}
	return head.Query.ID
}

// parseUpdate decodes and normalizes one raw update.
func parseUpdate(raw []byte, me identity, g gating) (out outcome, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("%w: %v", errMalformed, r)
		}
	}()
	// Without an update_id every such update would share event id 0,
	// and all but the first would be dropped as duplicates.
	if _, ok := updateID(raw); !ok {
		return outcome{}, fmt.Errorf("%w: no update_id", errMalformed)
	}
	var u models.Update
	if err := json.Unmarshal(raw, &u); err != nil {
		return outcome{}, fmt.Errorf("%w: %v", errMalformed, err)
	}
	return normalize(&u, me, g)
}

func normalize(u *models.Update, me identity, g gating) (outcome, error) {
	if u.CallbackQuery != nil {
		return pressed(u, me)
	}
	msg, channel := u.Message, false
	if msg == nil && u.ChannelPost != nil {
		msg, channel = u.ChannelPost, true
	}
	switch {
	case msg == nil && (u.EditedMessage != nil || u.EditedChannelPost != nil):
		return outcome{skip: "edited message"}, nil
	case msg == nil:
		return outcome{skip: "unsupported update kind"}, nil
	}
	if msg.Chat.ID == 0 {
		return outcome{}, fmt.Errorf("%w: message without a chat", errMalformed)
	}
	chatID := strconv.FormatInt(msg.Chat.ID, 10)
	src := &eventsv1.SessionSource{
		Platform: "telegram",
		Account:  strconv.FormatInt(me.id, 10),
		ChatId:   chatID,
		ChatName: chatName(msg.Chat),
		ChatType: chatType(msg.Chat, channel),
	}
	if msg.From != nil {
		src.UserId = strconv.FormatInt(msg.From.ID, 10)
		src.UserName = fullName(msg.From.FirstName, msg.From.LastName)
		src.IsBot = msg.From.IsBot && !anonymousAdmin(msg)
	} else if src.ChatType == "dm" || src.ChatType == "channel" {
		src.UserId = chatID
		src.UserName = src.ChatName
	}
	src.ThreadId = topicOf(src.ChatType, msg.Chat, msg.MessageThreadID, msg.IsTopicMessage)

	text, entities := msg.Text, msg.Entities
	if text == "" && msg.Caption != "" {
		text, entities = msg.Caption, msg.CaptionEntities
	}
	if text == "" {
		text = locationText(msg)
	}
	ev := &eventsv1.MessageReceived{
		EventId:      strconv.FormatInt(u.ID, 10),
		MessageId:    strconv.Itoa(msg.ID),
		Source:       src,
		Attachments:  attachments(msg),
		MediaGroupId: msg.MediaGroupID,
	}
	if msg.Date > 0 {
		ev.SentAt = timestamppb.New(timeUnix(int64(msg.Date)))
	}
	if r := msg.ReplyToMessage; r != nil {
		ev.ReplyTo = &eventsv1.ReplyTo{MessageId: strconv.Itoa(r.ID), Text: r.Text}
		if ev.ReplyTo.Text == "" {
			ev.ReplyTo.Text = r.Caption
		}
		if msg.Quote != nil && msg.Quote.Text != "" {
			ev.ReplyTo.Text = msg.Quote.Text
		}
		if r.From != nil {
			ev.ReplyTo.UserId = strconv.FormatInt(r.From.ID, 10)
			// In a forum topic every message that replies to no other
			// comes as a reply to the topic's creation (the
			// forum_topic_created service message), whose sender is
			// whoever opened the topic: this bot, for a topic it (or
			// Hermes with its token) opened. That is no reply to the bot,
			// or every message of such a topic would pass require_mention.
			ev.ReplyTo.FromBot = r.From.ID == me.id && r.ForumTopicCreated == nil
		}
	}

	command, mentioned, forOther, otherBots := addressing(text, entities, me)
	if forOther {
		return outcome{skip: "command for another bot"}, nil
	}
	if src.ChatType == "group" && !mentioned && g.wakes(msg) {
		// A wake word addresses this bot as an @mention does.
		mentioned = true
	}
	if src.ChatType == "group" && otherBots && !mentioned && !g.otherBotsToo {
		// As Hermes (exclusive bot mentions, on by default): a group
		// message that names other bots ("@other_bot hi") and not this
		// one is theirs, even as a reply to this bot, in a free-response
		// chat or with require_mention off, so that two bots in a group
		// do not both answer what was asked of one.
		return outcome{skip: "group message for another bot"}, nil
	}
	switch {
	case command != "":
		text = command
	case !commandMessage(msg):
		text = stripBotMention(text, me.username)
	}
	ev.Text = text
	if text != msg.Caption && msg.Text == "" && msg.Caption != "" {
		// The caption is the text, read without the bot's mention (or
		// as the command): the worker names an attachment's caption
		// that differs from the text, which would show the agent the
		// caption a second time, mention and all.
		for _, a := range ev.Attachments {
			if a.Caption == msg.Caption {
				a.Caption = text
			}
		}
	}
	replyToMe := ev.GetReplyTo().GetFromBot()
	if src.ChatType == "group" {
		ev.Mentioned = mentioned || replyToMe
		// As in Hermes, a command is no exception: a bare "/cmd" may be
		// meant for any bot in the group (or be no command at all, such
		// as "/shrug"); "/cmd@this_bot", which the command menu types in
		// groups, and "@this_bot /cmd" are mentions.
		if g.requireMention && !g.freeChats[chatID] && !ev.Mentioned {
			return outcome{skip: "group message does not mention the bot"}, nil
		}
	}
	if ev.Text == "" && len(ev.Attachments) == 0 {
		return outcome{skip: "message without text or supported media"}, nil
	}
	return outcome{ev: ev}, nil
}

// addressing reads the entities: a leading bot_command "/cmd@name" is
// rewritten to "/cmd" when name is this bot (forOther when it is another
// bot); mentioned reports an @mention or text_mention of this bot, or a
// "/cmd@this_bot" inside the text (Hermes's _message_mentions_bot);
// otherBots reports an @mention of a bot other than this one (a username
// ending in "bot", which Telegram requires of bots), or a "/cmd@other_bot"
// anywhere in the text.
func addressing(text string, entities []models.MessageEntity, me identity) (command string, mentioned, forOther, otherBots bool) {
	units := utf16.Encode([]rune(text))
	slice := func(e models.MessageEntity) (string, bool) {
		if e.Offset < 0 || e.Length <= 0 || e.Offset+e.Length > len(units) {
			return "", false
		}
		return string(utf16.Decode(units[e.Offset : e.Offset+e.Length])), true
	}
	for _, e := range entities {
		switch e.Type {
		case models.MessageEntityTypeMention:
			s, ok := slice(e)
			if !ok || me.username == "" {
				continue
			}
			switch name := strings.TrimPrefix(s, "@"); {
			case strings.EqualFold(name, me.username):
				mentioned = true
			case botUsername(name):
				otherBots = true
			}
		case models.MessageEntityTypeTextMention:
			if e.User != nil && e.User.ID == me.id {
				mentioned = true
			}
		case models.MessageEntityTypeBotCommand:
			s, ok := slice(e)
			if !ok {
				continue
			}
			name, target, has := strings.Cut(s, "@")
			if !has {
				continue
			}
			if e.Offset != 0 {
				// Inside the text: it names a bot, as in Hermes, but is
				// no command of this message.
				switch {
				case me.username == "":
				case strings.EqualFold(target, me.username):
					mentioned = true
				case botUsername(target):
					otherBots = true
				}
				continue
			}
			if me.username != "" && !strings.EqualFold(target, me.username) {
				return "", false, true, false
			}
			mentioned = true
			rest := string(utf16.Decode(units[e.Offset+e.Length:]))
			command = name + rest
		}
	}
	return command, mentioned, false, otherBots
}

// commandMessage reports whether msg is a command as Telegram marks one:
// its text opens with a bot_command entity (python-telegram-bot's
// filters.COMMAND, which routes it to Hermes's _handle_command). Hermes
// does not clean a command's text of the bot's mention: its parser
// (MessageEvent.get_command, get_command_args) takes "/cmd @bot args" as
// /cmd with the arguments "@bot args", and "/cmd@bot args" as /cmd with
// "args". A caption is never one: Hermes cleans it as any text.
func commandMessage(msg *models.Message) bool {
	if msg.Text == "" || len(msg.Entities) == 0 {
		return false
	}
	e := msg.Entities[0]
	return e.Type == models.MessageEntityTypeBotCommand && e.Offset == 0
}

// stripBotMention takes "@<username>" out of a message's text, with the
// commas, colons, hyphens and spaces after it, as Hermes's
// _clean_bot_trigger_text does: the agent reads "@my_bot, summarize
// this" as "summarize this", and "@my_bot /new" as the command. The
// name matches in any case, and only whole (not "@my_bot2"). A text that
// is only the mention stays as it is; a command's text is left alone
// (commandMessage).
func stripBotMention(text, username string) string {
	if username == "" || !strings.Contains(text, "@") {
		return text
	}
	at := "@" + username
	var b strings.Builder
	last := 0
	for i := 0; i+len(at) <= len(text); {
		if text[i] != '@' || !strings.EqualFold(text[i:i+len(at)], at) || wordAt(text, i+len(at)) {
			i++
			continue
		}
		b.WriteString(text[last:i])
		j := i + len(at)
		for j < len(text) && strings.IndexByte(",:-", text[j]) >= 0 {
			j++
		}
		for j < len(text) {
			r, size := utf8.DecodeRuneInString(text[j:])
			if !unicode.IsSpace(r) {
				break
			}
			j += size
		}
		i, last = j, j
	}
	if last == 0 {
		return text
	}
	b.WriteString(text[last:])
	if out := strings.TrimSpace(b.String()); out != "" {
		return out
	}
	return text
}

// wordAt reports whether a word character (a letter, a digit or "_", as
// a regular expression's \w in Python) starts at byte i of s: there the
// name goes on, and "@" + name is not a mention of it.
func wordAt(s string, i int) bool {
	if i >= len(s) {
		return false
	}
	r, _ := utf8.DecodeRuneInString(s[i:])
	return r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r)
}

// botUsername reports whether name (without "@") can be a bot's username:
// 5 to 32 letters, digits and underscores ending in "bot", any case.
func botUsername(name string) bool {
	if len(name) < 5 || len(name) > 32 || !strings.HasSuffix(strings.ToLower(name), "bot") {
		return false
	}
	for _, r := range name {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '_') {
			return false
		}
	}
	return true
}

func attachments(msg *models.Message) []*eventsv1.Attachment {
	var out []*eventsv1.Attachment
	if n := len(msg.Photo); n > 0 {
		best := msg.Photo[0]
		for _, p := range msg.Photo[1:] {
			if p.Width*p.Height > best.Width*best.Height || (p.Width*p.Height == best.Width*best.Height && p.FileSize > best.FileSize) {
				best = p
			}
		}
		out = append(out, &eventsv1.Attachment{Kind: eventsv1.AttachmentKind_ATTACHMENT_KIND_IMAGE, PlatformFileId: best.FileID,
			MimeType: "image/jpeg", SizeBytes: int64(best.FileSize), Caption: msg.Caption})
	}
	if d := msg.Document; d != nil {
		out = append(out, &eventsv1.Attachment{Kind: eventsv1.AttachmentKind_ATTACHMENT_KIND_DOCUMENT, PlatformFileId: d.FileID,
			MimeType: d.MimeType, SizeBytes: d.FileSize, FileName: d.FileName, Caption: msg.Caption})
	}
	if v := msg.Voice; v != nil {
		mt := v.MimeType
		if mt == "" {
			mt = "audio/ogg"
		}
		out = append(out, &eventsv1.Attachment{Kind: eventsv1.AttachmentKind_ATTACHMENT_KIND_VOICE, PlatformFileId: v.FileID,
			MimeType: mt, SizeBytes: v.FileSize})
	}
	if a := msg.Audio; a != nil {
		out = append(out, &eventsv1.Attachment{Kind: eventsv1.AttachmentKind_ATTACHMENT_KIND_AUDIO, PlatformFileId: a.FileID,
			MimeType: a.MimeType, SizeBytes: a.FileSize, FileName: a.FileName, Caption: msg.Caption})
	}
	if st := msg.Sticker; st != nil {
		// Static stickers are WebP pictures; animated ones Lottie (TGS),
		// video ones WebM: the agent sees the first, and is told of all.
		mt := "image/webp"
		switch {
		case st.IsAnimated:
			mt = "application/x-tgsticker"
		case st.IsVideo:
			mt = "video/webm"
		}
		out = append(out, &eventsv1.Attachment{Kind: eventsv1.AttachmentKind_ATTACHMENT_KIND_STICKER, PlatformFileId: st.FileID,
			MimeType: mt, SizeBytes: int64(st.FileSize), StickerEmoji: st.Emoji, StickerSet: st.SetName})
	}
	if v := msg.Video; v != nil {
		out = append(out, &eventsv1.Attachment{Kind: eventsv1.AttachmentKind_ATTACHMENT_KIND_VIDEO, PlatformFileId: v.FileID,
			MimeType: v.MimeType, SizeBytes: v.FileSize, FileName: v.FileName, Caption: msg.Caption})
	}
	if v := msg.VideoNote; v != nil {
		// A round video message: an MP4 without a name or a caption.
		out = append(out, &eventsv1.Attachment{Kind: eventsv1.AttachmentKind_ATTACHMENT_KIND_VIDEO, PlatformFileId: v.FileID,
			MimeType: "video/mp4", SizeBytes: int64(v.FileSize)})
	}
	return out
}

// locationText is a location pin or a venue as the agent reads it, in
// Hermes's words (_handle_location_message): the venue's title and
// address, the coordinates, a map link and what to ask. "" for a
// message that is neither. A live location's later positions come as
// edits, which are skipped.
func locationText(msg *models.Message) string {
	loc := msg.Location
	if msg.Venue != nil {
		loc = &msg.Venue.Location
	}
	if loc == nil {
		return ""
	}
	lat, lon := pyFloat(loc.Latitude), pyFloat(loc.Longitude)
	parts := []string{"[The user shared a location pin.]"}
	if v := msg.Venue; v != nil {
		if v.Title != "" {
			parts = append(parts, "Venue: "+v.Title)
		}
		if v.Address != "" {
			parts = append(parts, "Address: "+v.Address)
		}
	}
	parts = append(parts, "latitude: "+lat, "longitude: "+lon,
		"Map: https://www.google.com/maps/search/?api=1&query="+lat+","+lon,
		"Ask what they'd like to find nearby (restaurants, cafes, etc.) and any preferences.")
	return strings.Join(parts, "\n")
}

// pyFloat writes f as Python's str does for a coordinate: the shortest
// decimal that reads back as f, with ".0" when it is whole (48.0).
func pyFloat(f float64) string {
	s := strconv.FormatFloat(f, 'f', -1, 64)
	if !strings.ContainsAny(s, ".eEnN") {
		s += ".0"
	}
	return s
}

// topicOf is the thread a message of a chat of chatType belongs to:
// its topic's message_thread_id when it is a topic message (a group's
// forum topic, a private chat's topic), a forum's General topic
// (generalTopic) for any other message of a forum, and "" otherwise. A
// message_thread_id without is_topic_message is no topic but a reply
// chain, its id the chain's first message: a reply in a forum's General
// topic carries one (Telegram's "root message" of the replies; sent to,
// "message thread not found"), and so does a reply in a group without
// topics, or in a private chat. Kept, each reply chain in General would
// be a conversation of its own, apart from General's.
func topicOf(chatType string, c models.Chat, thread int, topicMessage bool) string {
	switch {
	case thread != 0 && topicMessage && (chatType == "group" || chatType == "dm"):
		return strconv.Itoa(thread)
	case chatType == "group" && c.IsForum:
		return generalTopic
	}
	return ""
}

func chatType(c models.Chat, channelPost bool) string {
	switch {
	case channelPost || c.Type == models.ChatTypeChannel:
		return "channel"
	case c.Type == models.ChatTypeGroup || c.Type == models.ChatTypeSupergroup:
		return "group"
	case c.Type == models.ChatTypePrivate:
		return "dm"
	case c.ID < 0:
		return "group"
	default:
		return "dm"
	}
}

func chatName(c models.Chat) string {
	if c.Title != "" {
		return c.Title
	}
	return fullName(c.FirstName, c.LastName)
}

func fullName(first, last string) string {
	return strings.TrimSpace(first + " " + last)
}

// groupAnonymousBot is the placeholder sender of a group's anonymous
// administrators (@GroupAnonymousBot).
const groupAnonymousBot = 1087968824

// anonymousAdmin reports whether a message was written by an anonymous
// administrator of its group: Telegram then names @GroupAnonymousBot
// (a bot account) as from and the group itself as sender_chat. A person
// wrote it, so it is not a bot's message. As in Hermes, the sender stays
// the placeholder's id (1087968824, the session key's participant), and
// it is authorized as any sender: by the chat's allowlist, an allowlist
// that lists that id or "*", or allow-all; never refused as a bot.
func anonymousAdmin(msg *models.Message) bool {
	return msg.From != nil && msg.From.ID == groupAnonymousBot && msg.SenderChat != nil && msg.SenderChat.ID == msg.Chat.ID
}
