package slack

import (
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"time"

	slackapi "github.com/slack-go/slack"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/switchboard-chat/switchboard/pkg/command"
	eventsv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/events/v1"
	"github.com/switchboard-chat/switchboard/pkg/platform"
)

// callback is the outer Events API payload (event_callback,
// url_verification), the same in Socket Mode and over HTTP.
type callback struct {
	Type      string          `json:"type"`
	Challenge string          `json:"challenge"`
	TeamID    string          `json:"team_id"`
	EventID   string          `json:"event_id"`
	Event     json.RawMessage `json:"event"`
}

// message is a message or app_mention event.
type message struct {
	Type        string      `json:"type"`
	Subtype     string      `json:"subtype"`
	Channel     string      `json:"channel"`
	ChannelType string      `json:"channel_type"`
	User        string      `json:"user"`
	BotID       string      `json:"bot_id"`
	Text        string      `json:"text"`
	TS          string      `json:"ts"`
	ThreadTS    string      `json:"thread_ts"`
	Team        string      `json:"team"`
	Files       []slackFile `json:"files"`
	Hidden      bool        `json:"hidden"`
	// Blocks and Attachments are decoded leniently (richBlocks,
	// attachments): a shape this gateway does not know in them must
	// not make the message unreadable.
	Blocks      json.RawMessage `json:"blocks"`
	Attachments json.RawMessage `json:"attachments"`
}

type slackFile struct {
	ID                 string `json:"id"`
	Name               string `json:"name"`
	Mimetype           string `json:"mimetype"`
	URLPrivate         string `json:"url_private"`
	URLPrivateDownload string `json:"url_private_download"`
	Size               int64  `json:"size"`
}

// fileURL is the URL a shared file is downloaded from, as Hermes picks
// it (gateway/platforms/slack.py, `f.get("url_private_download") or
// f.get("url_private")`): url_private_download, Slack's URL for the
// file's bytes as a download, or url_private when Slack gives no other.
func fileURL(urlPrivate, urlPrivateDownload string) string {
	return cmp.Or(urlPrivateDownload, urlPrivate)
}

// identity is who the bot is, for mention detection and ignoring itself.
type identity struct {
	Account        string // bot user id
	BotUserID      string
	BotID          string
	Bots           platform.BotMode // other bots' messages
	RequireMention bool
	FreeChannels   map[string]bool
	// DMThreads is dm_top_level_threads_as_sessions: a DM message
	// outside a thread starts a session of its own.
	DMThreads bool
}

// skipUnaddressed is a channel message that does not mention the bot
// where a mention is required; normalize returns its event too, for the
// caller to admit when it replies in the thread of a message the bot
// answered.
const skipUnaddressed skip = "not addressed to the bot"

// errMalformed marks a payload that is not a Slack event.
var errMalformed = errors.New("malformed slack payload")

// skip explains why a well-formed event is not a user message; it is
// acknowledged to Slack and not published.
type skip string

// normalize turns an event_callback payload into the inbound event, or
// says why it is skipped. The event id is "<channel>:<ts>", the message's
// own identity: the message and app_mention events Slack sends for one
// message, and every retry of either, share it, so only one is published.
func normalize(raw []byte, id identity) (*eventsv1.MessageReceived, skip, error) {
	var cb callback
	if err := json.Unmarshal(raw, &cb); err != nil {
		return nil, "", fmt.Errorf("%w: %v", errMalformed, err)
	}
	if cb.Type != "event_callback" {
		return nil, skip("payload type " + cb.Type), nil
	}
	if len(cb.Event) == 0 {
		return nil, "", fmt.Errorf("%w: event_callback without event", errMalformed)
	}
	var m message
	if err := json.Unmarshal(cb.Event, &m); err != nil {
		return nil, "", fmt.Errorf("%w: event: %v", errMalformed, err)
	}
	switch m.Type {
	case "message", "app_mention":
	default:
		return nil, skip("event type " + m.Type), nil
	}
	switch m.Subtype {
	case "", "file_share", "thread_broadcast":
	case "bot_message":
		if !id.Bots.Admits(true) {
			return nil, "bot message", nil
		}
	default:
		return nil, skip("message subtype " + m.Subtype), nil
	}
	if m.Hidden {
		return nil, "hidden message", nil
	}
	if m.Channel == "" || m.TS == "" {
		return nil, "", fmt.Errorf("%w: message without channel or ts", errMalformed)
	}
	if (m.User != "" && m.User == id.BotUserID) || (m.BotID != "" && m.BotID == id.BotID) {
		return nil, "own message", nil
	}
	if m.BotID != "" && !id.Bots.Admits(true) {
		return nil, "bot message", nil
	}
	if m.User == "" && m.BotID == "" {
		return nil, "", fmt.Errorf("%w: message without user", errMalformed)
	}
	team := cb.TeamID
	if team == "" {
		team = m.Team
	}
	// As in Hermes, a group DM (mpim) is a DM like a 1:1 one: answered
	// without a mention, keyed dm.
	chatType := "group"
	if m.ChannelType == "im" || m.ChannelType == "mpim" || (m.ChannelType == "" && strings.HasPrefix(m.Channel, "D")) {
		chatType = "dm"
	}
	user := m.User
	if user == "" {
		user = m.BotID
	}
	text, mentioned := stripMention(m.Text, id.BotUserID)
	if strings.TrimSpace(m.Text) == "" {
		// Its words only in rich text blocks (see richText).
		text, _ = stripMention(richText(richBlocks(rawList(m.Blocks))), id.BotUserID)
	}
	if shared := attachmentText(attachments(m.Attachments), text); shared != "" {
		// A forwarded message, a link preview (see attachmentText):
		// after what the user typed, as Hermes adds them.
		text = strings.TrimSpace(text + "\n\n" + shared)
	}
	if m.BotID != "" && !id.Bots.Admits(mentioned || m.Type == "app_mention") {
		// As Hermes's SLACK_ALLOW_BOTS=mentions: a bot's message is
		// taken when it mentions this bot, in a DM too.
		return nil, "bot message without a mention", nil
	}
	if m.Type == "app_mention" || chatType == "dm" {
		mentioned = true
	}
	ev := &eventsv1.MessageReceived{
		EventId:   m.Channel + ":" + m.TS,
		MessageId: m.TS,
		Source: &eventsv1.SessionSource{
			Platform: "slack", Account: id.Account, ChatId: m.Channel, ChatType: chatType,
			UserId: user, ThreadId: m.ThreadTS, ScopeId: team, IsBot: m.BotID != "",
		},
		Text:      text,
		Mentioned: mentioned,
		SentAt:    tsTime(m.TS),
		// As Hermes's Slack adapter, react only to messages addressed to
		// the bot: in a DM (a group DM is one), or with a mention.
		NoReaction: !mentioned,
	}
	if (chatType == "group" || id.DMThreads) && (m.ThreadTS == "" || m.ThreadTS == m.TS) {
		// As in Hermes, a channel message outside a thread is keyed and
		// answered in the thread it starts (its own ts), so it and the
		// replies in that thread are one session and the answer goes
		// there; at the top level the answer would open a session of
		// its own, and the user's follow-up in the thread would find
		// none of the first exchange. So is a DM's, as Hermes's
		// dm_top_level_threads_as_sessions (default on); off, a DM's
		// top level stays one session.
		ev.Source.ThreadId = m.TS
	} else if m.ThreadTS == m.TS {
		ev.Source.ThreadId = ""
	}
	for _, f := range m.Files {
		ev.Attachments = append(ev.Attachments, &eventsv1.Attachment{
			Kind: kindOf(f.Mimetype), Location: &eventsv1.Attachment_Url{Url: fileURL(f.URLPrivate, f.URLPrivateDownload)},
			MimeType: f.Mimetype, SizeBytes: f.Size, FileName: f.Name, PlatformFileId: f.ID,
		})
	}
	ev.VoiceByDownload = voiceMessage(ev.Attachments, m.Text)
	if ev.Text == "" && len(ev.Attachments) == 0 {
		return nil, "empty message", nil
	}
	if chatType == "group" && id.RequireMention && !mentioned && !id.FreeChannels[m.Channel] {
		return ev, skipUnaddressed, nil
	}
	return ev, "", nil
}

// mentionRE is a mention of a user ("<@U…>", "<@U…|name>"), with the
// spaces and tabs after it.
var mentionRE = regexp.MustCompile(`<@([A-Z0-9]+)(\|[^>]*)?>[ \t]*`)

// stripMention removes mentions of the bot, each with the spaces after
// it, and reports whether there was one; "<@U0BOT> !new" becomes "!new"
// so commands work after a mention. The text is trimmed, as Hermes
// does; the rest stays as written: its lines, indentation and code
// blocks are the user's.
func stripMention(text, bot string) (string, bool) {
	if bot == "" {
		return text, false
	}
	found := false
	out := mentionRE.ReplaceAllStringFunc(text, func(s string) string {
		if mentionRE.FindStringSubmatch(s)[1] == bot {
			found = true
			return ""
		}
		return s
	})
	if !found {
		return text, false
	}
	return strings.TrimSpace(out), true
}

// tsTime reads a Slack ts ("1700000000.000100") as a time; nil if it is
// not one.
func tsTime(ts string) *timestamppb.Timestamp {
	sec, frac, _ := strings.Cut(ts, ".")
	s, err := strconv.ParseInt(sec, 10, 64)
	if err != nil || s <= 0 || s > 1<<40 {
		return nil
	}
	var us int64
	if frac != "" {
		if len(frac) > 6 {
			frac = frac[:6]
		}
		frac += strings.Repeat("0", 6-len(frac))
		if us, err = strconv.ParseInt(frac, 10, 64); err != nil || us < 0 {
			return nil
		}
	}
	return timestamppb.New(time.Unix(s, us*1000))
}

func kindOf(mime string) eventsv1.AttachmentKind {
	switch {
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

// voiceMessage marks a message's audio files as a voice message, as
// Hermes's Slack adapter types a message with an audio/* file VOICE
// (gateway/platforms/slack.py), which /voice on answers with speech: not
// when an image comes with it (Hermes's PHOTO), nor for a /command. text
// is the message's as Slack sent it. Slack has no voice messages of its
// own: a clip recorded in the app is an audio file too. Hermes types a
// message by the files it downloaded, so the message is a voice message
// only once they are (MessageReceived.voice_by_download, which it
// reports): an audio file whose download fails makes none, a picture
// whose download fails leaves one.
func voiceMessage(atts []*eventsv1.Attachment, text string) bool {
	command := strings.HasPrefix(text, "/")
	voice, audio := !command, false
	for _, a := range atts {
		switch a.GetKind() {
		case eventsv1.AttachmentKind_ATTACHMENT_KIND_IMAGE:
			voice = false
		case eventsv1.AttachmentKind_ATTACHMENT_KIND_AUDIO, eventsv1.AttachmentKind_ATTACHMENT_KIND_VOICE:
			audio = true
		}
	}
	for _, a := range atts {
		switch a.GetKind() {
		case eventsv1.AttachmentKind_ATTACHMENT_KIND_AUDIO, eventsv1.AttachmentKind_ATTACHMENT_KIND_VOICE:
			a.Kind = eventsv1.AttachmentKind_ATTACHMENT_KIND_AUDIO
			if voice {
				a.Kind = eventsv1.AttachmentKind_ATTACHMENT_KIND_VOICE
			}
		}
	}
	return audio && !command
}

// slash turns a slash command (Socket Mode) into the inbound event, as
// Hermes reads /hermes: "/hermes new" is the command !new, "/hermes" alone
// is !help, and "/hermes <anything else>" is a message to the bot. A
// slash named after a command is that command with its text as the
// arguments ("/stop" is !stop, "/model gpt-5" !model gpt-5): Hermes's
// Slack app manifest (`hermes slack manifest`) registers every gateway
// command as a slash of its own beside /hermes, and Hermes reads one as
// "/<name> <text>". A slash of any other name is read as /hermes, the
// one an app registers otherwise. The trigger id, one per invocation, is
// the event id. The answer goes to the channel the command was typed in.
func slash(cmd slackapi.SlashCommand, id identity) (*eventsv1.MessageReceived, skip) {
	if cmd.ChannelID == "" || cmd.UserID == "" || cmd.TriggerID == "" {
		return nil, "slash command without channel, user or trigger id"
	}
	text := strings.TrimSpace(cmd.Text)
	name, _, _ := strings.Cut(text, " ")
	native := strings.ToLower(strings.TrimPrefix(strings.TrimSpace(cmd.Command), "/"))
	_, nativeKnown := command.Canonical(native)
	switch _, known := command.Canonical(strings.ToLower(name)); {
	case native != "hermes" && nativeKnown:
		text = strings.TrimSpace("!" + native + " " + text)
	case text == "":
		text = "!help"
	case known:
		text = "!" + text
	}
	chatType := "group"
	if strings.HasPrefix(cmd.ChannelID, "D") {
		chatType = "dm"
	}
	return &eventsv1.MessageReceived{
		EventId:   "slash:" + cmd.TriggerID,
		MessageId: "slash:" + cmd.TriggerID,
		Source: &eventsv1.SessionSource{
			Platform: "slack", Account: id.Account, ChatId: cmd.ChannelID, ChatType: chatType,
			UserId: cmd.UserID, UserName: cmd.UserName, ScopeId: cmd.TeamID, ChatName: cmd.ChannelName,
		},
		Text:      text,
		Mentioned: true,
		SentAt:    timestamppb.Now(),
		// Its message id names no Slack message to react to.
		NoReaction: true,
	}, ""
}
