package discord

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/bwmarrin/discordgo"
	"google.golang.org/protobuf/proto"

	eventsv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/events/v1"
	"github.com/switchboard-chat/switchboard/pkg/platform"
	"github.com/switchboard-chat/switchboard/pkg/sessionkey"
	"github.com/switchboard-chat/switchboard/services/gateway/discord/discordfake"
)

const bot = "100000000000000001"

func TestNormalize(t *testing.T) {
	base := rules{Account: bot, BotID: bot}
	auto := base
	auto.AutoThread = true
	// Hermes's defaults: a mention required, others' mentions skipped.
	gated := rules{Account: bot, BotID: bot, AutoThread: true, RequireMention: true, IgnoreNoMention: true, FreeChannels: map[string]bool{"F1": true}}
	cases := []struct {
		name        string
		m           discordfake.MessageCreate
		ch          channelInfo
		r           rules
		skip        bool
		unaddressed bool // returned for the caller to admit in a thread the bot takes part in
		key         string
		text        string
		mention     bool
		authed      bool // transport_authenticated: a role authorized the sender
		bot         bool // marked is_bot
	}{
		{name: "gated: a channel message without a mention", m: discordfake.MessageCreate{ID: "1", ChannelID: "C1", GuildID: "G1", AuthorID: "U1", Content: "hi"}, r: gated, unaddressed: true},
		{name: "gated: a mention opens a thread", m: discordfake.MessageCreate{ID: "7", ChannelID: "C1", GuildID: "G1", AuthorID: "U1", Content: "<@" + bot + "> hi", Mentions: []string{bot}}, r: gated,
			key: "agent:main:discord:thread:C1:7", text: "hi", mention: true},
		{name: "gated: a reply that pings the bot stays in the channel", m: discordfake.MessageCreate{ID: "7", ChannelID: "C1", GuildID: "G1", AuthorID: "U1", Content: "and?", Mentions: []string{bot}, ReplyTo: "5", Type: 19}, r: gated,
			key: "agent:main:discord:group:C1:U1", text: "and?", mention: true},
		{name: "gated: a free-response channel", m: discordfake.MessageCreate{ID: "1", ChannelID: "F1", GuildID: "G1", AuthorID: "U1", Content: "hi"}, r: gated,
			key: "agent:main:discord:group:F1:U1", text: "hi"},
		// As in Hermes, a free-response channel is answered inline: a
		// mention there opens no thread.
		{name: "gated: a mention in a free-response channel", m: discordfake.MessageCreate{ID: "7", ChannelID: "F1", GuildID: "G1", AuthorID: "U1", Content: "<@" + bot + "> hi", Mentions: []string{bot}}, r: gated,
			key: "agent:main:discord:group:F1:U1", text: "hi", mention: true},
		{name: "gated: a thread of a free-response channel", m: discordfake.MessageCreate{ID: "1", ChannelID: "T1", GuildID: "G1", AuthorID: "U1", Content: "hi"}, ch: channelInfo{Thread: true, Parent: "F1"}, r: gated,
			key: "agent:main:discord:thread:T1:T1", text: "hi"},
		{name: "gated: a thread the bot opened", m: discordfake.MessageCreate{ID: "1", ChannelID: "T1", GuildID: "G1", AuthorID: "U1", Content: "hi"}, ch: channelInfo{Thread: true, Parent: "C1", Owner: bot}, r: gated,
			key: "agent:main:discord:thread:T1:T1", text: "hi"},
		{name: "gated: another's thread", m: discordfake.MessageCreate{ID: "1", ChannelID: "T1", GuildID: "G1", AuthorID: "U1", Content: "hi"}, ch: channelInfo{Thread: true, Parent: "C1", Owner: "U1"}, r: gated, unaddressed: true},
		{name: "gated: addressed to someone else", m: discordfake.MessageCreate{ID: "1", ChannelID: "C1", GuildID: "G1", AuthorID: "U1", Content: "<@55> hi", Mentions: []string{"55"}}, r: rules{Account: bot, BotID: bot, IgnoreNoMention: true}, skip: true},
		{name: "gated: addressed to someone else in a free channel", m: discordfake.MessageCreate{ID: "1", ChannelID: "F1", GuildID: "G1", AuthorID: "U1", Content: "<@55> hi", Mentions: []string{"55"}}, r: gated,
			key: "agent:main:discord:group:F1:U1", text: "<@55> hi"},
		// Hermes's multi-agent filter: a message for another bot is
		// theirs, even in a free-response channel or a thread the bot
		// follows, or with ignore_no_mention off.
		{name: "gated: addressed to another bot in a free channel", m: discordfake.MessageCreate{ID: "1", ChannelID: "F1", GuildID: "G1", AuthorID: "U1", Content: "<@66> hi", MentionedBots: []string{"66"}}, r: gated, skip: true},
		{name: "addressed to another bot in a thread the bot opened", m: discordfake.MessageCreate{ID: "1", ChannelID: "T1", GuildID: "G1", AuthorID: "U1", Content: "<@66> hi", MentionedBots: []string{"66"}}, ch: channelInfo{Thread: true, Parent: "C1", Owner: bot}, r: gated, skip: true},
		{name: "addressed to another bot without ignore_no_mention", m: discordfake.MessageCreate{ID: "1", ChannelID: "C1", GuildID: "G1", AuthorID: "U1", Content: "<@66> hi", MentionedBots: []string{"66"}}, r: base, skip: true},
		{name: "addressed to this bot and another", m: discordfake.MessageCreate{ID: "1", ChannelID: "F1", GuildID: "G1", AuthorID: "U1", Content: "<@" + bot + "> <@66> compare", Mentions: []string{bot}, MentionedBots: []string{"66"}}, r: gated,
			key: "agent:main:discord:group:F1:U1", text: "<@66> compare", mention: true},
		{name: "another bot named in a DM", m: discordfake.MessageCreate{ID: "1", ChannelID: "D1", AuthorID: "U1", Content: "ask <@66>", MentionedBots: []string{"66"}}, r: gated,
			key: "agent:main:discord:dm:D1", text: "ask <@66>", mention: true},
		// As in Hermes, the message's mentions decide: Discord lists no
		// mention written in code, which stays as written.
		{name: "gated: the bot's id in a code span", m: discordfake.MessageCreate{ID: "1", ChannelID: "C1", GuildID: "G1", AuthorID: "U1", Content: "set it to `<@" + bot + ">`"}, r: gated, unaddressed: true},
		{name: "gated: the bot's id in a code block", m: discordfake.MessageCreate{ID: "1", ChannelID: "C1", GuildID: "G1", AuthorID: "U1", Content: "```\nping <@!" + bot + ">\n```"}, r: gated, unaddressed: true},
		{name: "the bot's id in a code span is kept", m: discordfake.MessageCreate{ID: "1", ChannelID: "C1", GuildID: "G1", AuthorID: "U1", Content: "set it to `<@" + bot + ">`"}, r: base,
			key: "agent:main:discord:group:C1:U1", text: "set it to `<@" + bot + ">`"},
		{name: "the bot's id in a code span in a dm", m: discordfake.MessageCreate{ID: "1", ChannelID: "D1", AuthorID: "U1", Content: "what is `<@" + bot + ">`?"}, r: gated,
			key: "agent:main:discord:dm:D1", text: "what is `<@" + bot + ">`?", mention: true},
		{name: "bots on mention: the bot's id in a code span", m: discordfake.MessageCreate{ID: "1", ChannelID: "C1", GuildID: "G1", AuthorID: "9", AuthorBot: true, Content: "`<@" + bot + ">` x"}, r: rules{Account: bot, BotID: bot, Bots: platform.BotsMentions}, skip: true},
		{name: "gated: a dm", m: discordfake.MessageCreate{ID: "1", ChannelID: "D1", AuthorID: "U1", Content: "hi"}, r: gated,
			key: "agent:main:discord:dm:D1", text: "hi", mention: true},
		{name: "guild channel, guild not in key", m: discordfake.MessageCreate{ID: "1", ChannelID: "C1", GuildID: "G1", AuthorID: "U1", Content: "hi"}, r: base,
			key: "agent:main:discord:group:C1:U1", text: "hi"},
		{name: "dm", m: discordfake.MessageCreate{ID: "1", ChannelID: "D1", AuthorID: "U1", Content: "hi"}, r: base,
			key: "agent:main:discord:dm:D1", text: "hi", mention: true},
		{name: "thread keys by the thread", m: discordfake.MessageCreate{ID: "1", ChannelID: "T7", GuildID: "G1", AuthorID: "U1", Content: "hi"}, ch: channelInfo{Thread: true, Parent: "C1"}, r: base,
			key: "agent:main:discord:thread:T7:T7", text: "hi"},
		{name: "mention opens an auto-thread", m: discordfake.MessageCreate{ID: "700000000000000007", ChannelID: "900000000000000001", GuildID: "G1", AuthorID: "42", Content: "<@!" + bot + "> help", Mentions: []string{bot}}, r: auto,
			key: "agent:main:discord:thread:900000000000000001:700000000000000007", text: "help", mention: true},
		{name: "mention without auto-thread", m: discordfake.MessageCreate{ID: "7", ChannelID: "C1", GuildID: "G1", AuthorID: "42", Content: "<@" + bot + "> /new", Mentions: []string{bot}}, r: base,
			key: "agent:main:discord:group:C1:42", text: "/new", mention: true},
		// As Hermes, only the mention goes: the lines and indentation of
		// code the user pasted stay as written.
		{name: "a mention keeps the message's lines", m: discordfake.MessageCreate{ID: "7", ChannelID: "C1", GuildID: "G1", AuthorID: "42", Content: "<@" + bot + ">  why does this fail?\n```go\nfunc f() {\n\treturn  nil\n}\n```\n", Mentions: []string{bot}}, r: base,
			key: "agent:main:discord:group:C1:42", text: "why does this fail?\n```go\nfunc f() {\n\treturn  nil\n}\n```", mention: true},
		{name: "a mention inside the text", m: discordfake.MessageCreate{ID: "7", ChannelID: "C1", GuildID: "G1", AuthorID: "42", Content: "so <@!" + bot + "> what now?\n- a\n- b", Mentions: []string{bot}}, r: base,
			key: "agent:main:discord:group:C1:42", text: "so what now?\n- a\n- b", mention: true},
		{name: "no auto-thread inside a thread", m: discordfake.MessageCreate{ID: "7", ChannelID: "T1", GuildID: "G1", AuthorID: "42", Content: "<@" + bot + "> hi", Mentions: []string{bot}}, ch: channelInfo{Thread: true, Parent: "C1"}, r: auto,
			key: "agent:main:discord:thread:T1:T1", text: "hi", mention: true},
		{name: "attachment only", m: discordfake.MessageCreate{ID: "1", ChannelID: "D1", AuthorID: "U1", Attachments: []discordfake.Attachment{{ID: "a", Filename: "v.ogg", ContentType: "audio/ogg", URL: "https://x/v.ogg"}}}, r: base,
			key: "agent:main:discord:dm:D1", mention: true},
		{name: "own message", m: discordfake.MessageCreate{ID: "1", ChannelID: "C1", GuildID: "G1", AuthorID: bot, Content: "x"}, r: base, skip: true},
		{name: "bot ignored", m: discordfake.MessageCreate{ID: "1", ChannelID: "C1", GuildID: "G1", AuthorID: "9", AuthorBot: true, Content: "x"}, r: base, skip: true},
		{name: "bot allowed", m: discordfake.MessageCreate{ID: "1", ChannelID: "C1", GuildID: "G1", AuthorID: "9", AuthorBot: true, Content: "x"}, r: rules{Account: bot, BotID: bot, Bots: platform.BotsAll},
			key: "agent:main:discord:group:C1:9", text: "x", bot: true},
		{name: "bots on mention: not mentioned", m: discordfake.MessageCreate{ID: "1", ChannelID: "C1", GuildID: "G1", AuthorID: "9", AuthorBot: true, Content: "x"}, r: rules{Account: bot, BotID: bot, Bots: platform.BotsMentions}, skip: true},
		{name: "bots on mention: not mentioned in a DM", m: discordfake.MessageCreate{ID: "1", ChannelID: "D1", AuthorID: "9", AuthorBot: true, Content: "x"}, r: rules{Account: bot, BotID: bot, Bots: platform.BotsMentions}, skip: true},
		{name: "bots on mention: mentioned", m: discordfake.MessageCreate{ID: "1", ChannelID: "C1", GuildID: "G1", AuthorID: "9", AuthorBot: true, Content: "<@" + bot + "> x", Mentions: []string{bot}}, r: rules{Account: bot, BotID: bot, Bots: platform.BotsMentions},
			key: "agent:main:discord:group:C1:9", text: "x", mention: true, bot: true},
		{name: "own message with every bot allowed", m: discordfake.MessageCreate{ID: "1", ChannelID: "C1", GuildID: "G1", AuthorID: bot, AuthorBot: true, Content: "<@" + bot + "> x", Mentions: []string{bot}}, r: rules{Account: bot, BotID: bot, Bots: platform.BotsAll}, skip: true},
		{name: "system message", m: discordfake.MessageCreate{ID: "1", ChannelID: "C1", GuildID: "G1", AuthorID: "9", Content: "x", Type: 7}, r: base, skip: true},
		{name: "empty", m: discordfake.MessageCreate{ID: "1", ChannelID: "C1", GuildID: "G1", AuthorID: "9"}, r: base, skip: true},
		{name: "channel not allowed", m: discordfake.MessageCreate{ID: "1", ChannelID: "C2", GuildID: "G1", AuthorID: "9", Content: "x"}, r: rules{Account: bot, BotID: bot, AllowedChannels: map[string]bool{"C1": true}}, skip: true},
		{name: "without an authorizing role, the allowlists decide", m: discordfake.MessageCreate{ID: "1", ChannelID: "C1", GuildID: "G1", AuthorID: "9", Content: "x", Roles: []string{"R2"}}, r: rules{Account: bot, BotID: bot, AllowedRoles: map[string]bool{"R1": true}},
			key: "agent:main:discord:group:C1:9", text: "x"},
		{name: "an authorizing role", m: discordfake.MessageCreate{ID: "1", ChannelID: "C1", GuildID: "G1", AuthorID: "9", Content: "x", Roles: []string{"R1"}}, r: rules{Account: bot, BotID: bot, AllowedRoles: map[string]bool{"R1": true}},
			key: "agent:main:discord:group:C1:9", text: "x", authed: true},
		{name: "ignored channel", m: discordfake.MessageCreate{ID: "1", ChannelID: "C1", GuildID: "G1", AuthorID: "9", Content: "x"}, r: rules{Account: bot, BotID: bot, IgnoredChannels: map[string]bool{"C1": true}}, skip: true},
		{name: "ignored channel's thread", m: discordfake.MessageCreate{ID: "1", ChannelID: "T1", GuildID: "G1", AuthorID: "9", Content: "x"}, ch: channelInfo{Thread: true, Parent: "C1"}, r: rules{Account: bot, BotID: bot, IgnoredChannels: map[string]bool{"C1": true}}, skip: true},
		{name: "dm not role gated", m: discordfake.MessageCreate{ID: "1", ChannelID: "D1", AuthorID: "9", Content: "x"}, r: rules{Account: bot, BotID: bot, AllowedRoles: map[string]bool{"R1": true}, AllowedChannels: map[string]bool{"C1": true}},
			key: "agent:main:discord:dm:D1", text: "x", mention: true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			raw, _ := json.Marshal(c.m.Payload())
			m, err := parseMessage(raw)
			if err != nil {
				t.Fatal(err)
			}
			ev, why := normalize(m, c.ch, c.r)
			if c.unaddressed {
				if ev == nil || why != skipUnaddressed {
					t.Fatalf("got %v %q, want the event unaddressed", ev, why)
				}
				return
			}
			if c.skip {
				if ev != nil || why == "" {
					t.Fatalf("got %v, want skipped", ev)
				}
				return
			}
			if ev == nil || why != "" {
				t.Fatalf("skipped: %s", why)
			}
			if got := sessionkey.Build(ev.GetSource(), sessionkey.DefaultOptions()); got != c.key {
				t.Errorf("key %s, want %s", got, c.key)
			}
			if ev.GetSource().GetIsBot() != c.bot {
				t.Errorf("is_bot %v, want %v", ev.GetSource().GetIsBot(), c.bot)
			}
			if ev.GetTransportAuthenticated() != c.authed {
				t.Errorf("transport_authenticated %v, want %v", ev.GetTransportAuthenticated(), c.authed)
			}
			if ev.GetText() != c.text || ev.GetMentioned() != c.mention || ev.GetEventId() != c.m.ID {
				t.Errorf("text %q mentioned %v id %s", ev.GetText(), ev.GetMentioned(), ev.GetEventId())
			}
			if c.m.GuildID != "" && ev.GetSource().GetScopeId() != c.m.GuildID {
				t.Errorf("scope id %q, want the guild", ev.GetSource().GetScopeId())
			}
		})
	}
}

func FuzzMessageCreate(f *testing.F) {
	for _, m := range []discordfake.MessageCreate{
		{ID: "1", ChannelID: "C1", GuildID: "G1", AuthorID: "U1", Content: "<@" + bot + "> hi", Mentions: []string{bot}, ReplyTo: "5", Type: 19},
		{ID: "2", ChannelID: "D1", AuthorID: "U1", Attachments: []discordfake.Attachment{{ID: "a", ContentType: "image/png"}}},
	} {
		raw, _ := json.Marshal(m.Payload())
		f.Add(raw, false)
	}
	f.Add([]byte(`{"id":"1\r\nX: y","channel_id":"2","author":{"id":"3"},"content":"hi"}`), false)
	f.Add([]byte(`{"id":"1","channel_id":"2","guild_id":"4","author":{"id":"3"},"content":"<@!`+bot+`> \u00e9 \ud800","timestamp":"2024-01-01T00:00:00Z"}`), false)
	f.Add([]byte(`{"id":"1","channel_id":"2","author":{"id":"3"},"referenced_message":{"author":{"id":"`+bot+`"}},"message_reference":{"message_id":"9"}}`), true)
	f.Fuzz(func(t *testing.T, raw []byte, thread bool) {
		m, err := parseMessage(raw)
		if err != nil {
			if !errors.Is(err, errMalformed) {
				t.Fatalf("error not marked malformed: %v", err)
			}
			return
		}
		ev, why := normalize(m, channelInfo{Thread: thread, Parent: "P"}, rules{Account: bot, BotID: bot, AutoThread: true, RequireMention: true, IgnoreNoMention: true})
		if ev == nil {
			if why == "" {
				t.Fatal("skipped without a reason")
			}
			return
		}
		if ev.GetEventId() == "" || ev.GetSource().GetChatId() == "" || ev.GetSource().GetUserId() == "" {
			t.Fatalf("event without ids: %v", ev)
		}
		if ev.GetSource().GetChatType() == "dm" && ev.GetSource().GetScopeId() != "" {
			t.Fatal("dm with a guild")
		}
		_ = sessionkey.Build(ev.GetSource(), sessionkey.DefaultOptions())
		if !snowflake(ev.GetEventId()) {
			t.Fatalf("event id %q is not a snowflake", ev.GetEventId())
		}
		if err := platform.CheckEvent(ev, "discord", "", 1<<20); err != nil {
			t.Fatalf("normalized event refused: %v", err)
		}
	})
}

// A sticker-only message is published with its sticker: a picture on
// Discord's CDN, or (Lottie) named.
func TestStickers(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name   string
		format discordgo.StickerFormat
		want   *eventsv1.Attachment
	}{
		{"png", discordgo.StickerFormatTypePNG, &eventsv1.Attachment{Kind: eventsv1.AttachmentKind_ATTACHMENT_KIND_STICKER, PlatformFileId: "749054660769218631",
			FileName: "Wave", MimeType: "image/png", Location: &eventsv1.Attachment_Url{Url: "https://media.discordapp.net/stickers/749054660769218631.png"}}},
		{"apng", discordgo.StickerFormatTypeAPNG, &eventsv1.Attachment{Kind: eventsv1.AttachmentKind_ATTACHMENT_KIND_STICKER, PlatformFileId: "749054660769218631",
			FileName: "Wave", MimeType: "image/png", Location: &eventsv1.Attachment_Url{Url: "https://media.discordapp.net/stickers/749054660769218631.png"}}},
		{"gif", discordgo.StickerFormatTypeGIF, &eventsv1.Attachment{Kind: eventsv1.AttachmentKind_ATTACHMENT_KIND_STICKER, PlatformFileId: "749054660769218631",
			FileName: "Wave", MimeType: "image/gif", Location: &eventsv1.Attachment_Url{Url: "https://media.discordapp.net/stickers/749054660769218631.gif"}}},
		{"lottie", discordgo.StickerFormatTypeLottie, &eventsv1.Attachment{Kind: eventsv1.AttachmentKind_ATTACHMENT_KIND_STICKER, PlatformFileId: "749054660769218631",
			FileName: "Wave", MimeType: "application/x-lottie"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			m := &discordgo.Message{ID: "1", ChannelID: "D1", Author: &discordgo.User{ID: "U1"},
				StickerItems: []*discordgo.StickerItem{{ID: "749054660769218631", Name: "Wave", FormatType: tc.format}}}
			ev, skip := normalize(m, channelInfo{}, rules{Account: bot, BotID: bot})
			if skip != "" {
				t.Fatalf("skipped: %s", skip)
			}
			if len(ev.GetAttachments()) != 1 || !proto.Equal(ev.GetAttachments()[0], tc.want) {
				t.Fatalf("attachments %v, want %v", ev.GetAttachments(), tc.want)
			}
		})
	}
}

// An attachment's kind: a voice message is one by its flag
// (IS_VOICE_MESSAGE), not by being Ogg; an Ogg file sent as a file is
// audio; a picture Discord gives no content type is one by its name.
func TestAttachmentKinds(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name     string
		flags    discordgo.MessageFlags
		file, ct string
		kind     eventsv1.AttachmentKind
		mime     string
	}{
		{"voice message", discordgo.MessageFlagsIsVoiceMessage, "voice-message.ogg", "audio/ogg", eventsv1.AttachmentKind_ATTACHMENT_KIND_VOICE, "audio/ogg"},
		{"voice message without a content type", discordgo.MessageFlagsIsVoiceMessage, "voice-message.ogg", "", eventsv1.AttachmentKind_ATTACHMENT_KIND_VOICE, ""},
		{"ogg file", 0, "song.ogg", "audio/ogg", eventsv1.AttachmentKind_ATTACHMENT_KIND_AUDIO, "audio/ogg"},
		{"mp3 file", 0, "song.mp3", "audio/mpeg", eventsv1.AttachmentKind_ATTACHMENT_KIND_AUDIO, "audio/mpeg"},
		{"picture", 0, "a.png", "image/png", eventsv1.AttachmentKind_ATTACHMENT_KIND_IMAGE, "image/png"},
		{"picture without a content type", 0, "Cat.PNG", "", eventsv1.AttachmentKind_ATTACHMENT_KIND_IMAGE, ""},
		{"file without a content type", 0, "notes.bin", "", eventsv1.AttachmentKind_ATTACHMENT_KIND_DOCUMENT, ""},
		{"video", 0, "a.mp4", "video/mp4", eventsv1.AttachmentKind_ATTACHMENT_KIND_VIDEO, "video/mp4"},
		{"document", 0, "a.pdf", "application/pdf", eventsv1.AttachmentKind_ATTACHMENT_KIND_DOCUMENT, "application/pdf"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			m := &discordgo.Message{ID: "1", ChannelID: "D1", Author: &discordgo.User{ID: "U1"}, Flags: tc.flags,
				Attachments: []*discordgo.MessageAttachment{{ID: "9", Filename: tc.file, ContentType: tc.ct, URL: "https://cdn.discordapp.com/a/" + tc.file}}}
			ev, skip := normalize(m, channelInfo{}, rules{Account: bot, BotID: bot})
			if skip != "" {
				t.Fatalf("skipped: %s", skip)
			}
			if a := ev.GetAttachments()[0]; a.GetKind() != tc.kind || a.GetMimeType() != tc.mime {
				t.Fatalf("kind %v, type %q; want %v, %q", a.GetKind(), a.GetMimeType(), tc.kind, tc.mime)
			}
		})
	}
}

// TestDisplayName: the sender's name is the one Discord shows, as
// Hermes's display_name: the nickname in the guild, else the display
// name, else the username; for messages, slash commands and presses.
func TestDisplayName(t *testing.T) {
	t.Parallel()
	r := rules{Account: bot, BotID: bot}
	cases := []struct {
		name, author, member, want string
	}{
		{name: "a nickname in the guild", author: `{"id":"42","username":"alice_1234","global_name":"Alice"}`, member: `{"nick":"Al (ops)","roles":[]}`, want: "Al (ops)"},
		{name: "no nickname", author: `{"id":"42","username":"alice_1234","global_name":"Alice"}`, member: `{"nick":null,"roles":[]}`, want: "Alice"},
		{name: "no display name", author: `{"id":"42","username":"alice_1234","global_name":null}`, member: `{"roles":[]}`, want: "alice_1234"},
		{name: "a DM", author: `{"id":"42","username":"alice_1234","global_name":"Alice"}`, want: "Alice"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			guild, member := "", ""
			if c.member != "" {
				guild, member = `"guild_id":"5",`, `"member":`+c.member+`,`
			}
			raw := `{"id":"7","channel_id":"9",` + guild + member + `"type":0,"content":"hi","mentions":[],"author":` + c.author + `}`
			m, err := parseMessage([]byte(raw))
			if err != nil {
				t.Fatal(err)
			}
			ev, why := normalize(m, channelInfo{}, r)
			if ev == nil {
				t.Fatalf("skipped: %s", why)
			}
			if got := ev.GetSource().GetUserName(); got != c.want {
				t.Errorf("message from %s: user name %q, want %q", c.author, got, c.want)
			}

			// An interaction carries the user in member.user in a guild,
			// in user in a DM.
			user := `"user":` + c.author
			if c.member != "" {
				user = `"member":` + strings.Replace(c.member, "{", `{"user":`+c.author+`,`, 1)
			}
			raw = `{"id":"8","application_id":"` + bot + `","type":2,"token":"tok","channel_id":"9",` + guild + user +
				`,"data":{"id":"3","name":"status","type":1}}`
			in, err := parseInteraction([]byte(raw))
			if err != nil {
				t.Fatal(err)
			}
			ev, why = invoked(in, channelInfo{}, r, time.Now())
			if ev == nil {
				t.Fatalf("slash command skipped: %s", why)
			}
			if got := ev.GetSource().GetUserName(); got != c.want {
				t.Errorf("slash command of %s: user name %q, want %q", raw, got, c.want)
			}
		})
	}
}
