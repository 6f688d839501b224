package telegram

import (
	"strconv"

	"google.golang.org/protobuf/types/known/timestamppb"

	deliveryv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/delivery/v1"
	eventsv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/events/v1"
)

const (
	testToken    = "4242:test-secret"
	testBotID    = int64(4242)
	testUsername = "sbtestbot"
	msgDate      = 1767225600
)

type obj = map[string]any

var (
	alice    = obj{"id": 99, "is_bot": false, "first_name": "Alice", "last_name": "Liddell", "username": "alice"}
	botUser  = obj{"id": testBotID, "is_bot": true, "first_name": "SB", "username": testUsername}
	dmChat   = obj{"id": 99, "type": "private", "first_name": "Alice", "last_name": "Liddell"}
	group    = obj{"id": -1002285219667, "type": "supergroup", "title": "Team"}
	forum    = obj{"id": -1002285219668, "type": "supergroup", "title": "Forum", "is_forum": true}
	channel  = obj{"id": -1001111111111, "type": "channel", "title": "News"}
	basicGrp = obj{"id": -555, "type": "group", "title": "Basic"}
)

// kindCase is one message kind: the update's body (without update_id) and
// the event the gateway must publish for it (event_id filled in later).
type kindCase struct {
	name   string
	update obj
	want   *eventsv1.MessageReceived // nil: skipped (acknowledged, not published)
}

func msg(m obj) obj {
	m["date"] = msgDate
	if _, ok := m["message_id"]; !ok {
		m["message_id"] = 7
	}
	return m
}

func src(chat, chatName, chatType, user, userName, thread string) *eventsv1.SessionSource {
	return &eventsv1.SessionSource{Platform: "telegram", Account: strconv.FormatInt(testBotID, 10), ChatId: chat, ChatName: chatName,
		ChatType: chatType, UserId: user, UserName: userName, ThreadId: thread}
}

func ev(s *eventsv1.SessionSource, text string, mod func(*eventsv1.MessageReceived)) *eventsv1.MessageReceived {
	e := &eventsv1.MessageReceived{MessageId: "7", Source: s, Text: text, SentAt: timestamppb.New(timeUnix(msgDate))}
	if mod != nil {
		mod(e)
	}
	return e
}

func kindCases() []kindCase {
	dm := src("99", "Alice Liddell", "dm", "99", "Alice Liddell", "")
	grp := src("-1002285219667", "Team", "group", "99", "Alice Liddell", "")
	mention := func(e *eventsv1.MessageReceived) { e.Mentioned = true }
	return []kindCase{
		{"text_dm", obj{"message": msg(obj{"from": alice, "chat": dmChat, "text": "hello there"})}, ev(dm, "hello there", nil)},
		{"group_mention", obj{"message": msg(obj{"from": alice, "chat": group, "text": "@" + testUsername + " status?",
			"entities": []obj{{"type": "mention", "offset": 0, "length": len(testUsername) + 1}}})},
			ev(grp, "status?", mention)},
		{"group_reply_to_bot", obj{"message": msg(obj{"from": alice, "chat": group, "text": "and then?",
			"reply_to_message": obj{"message_id": 5, "date": msgDate, "chat": group, "from": botUser, "text": "first answer"}})},
			ev(grp, "and then?", func(e *eventsv1.MessageReceived) {
				e.Mentioned = true
				e.ReplyTo = &eventsv1.ReplyTo{MessageId: "5", Text: "first answer", UserId: "4242", FromBot: true}
			})},
		{"command_at_bot", obj{"message": msg(obj{"from": alice, "chat": group, "text": "/new@" + testUsername + " fresh",
			"entities": []obj{{"type": "bot_command", "offset": 0, "length": len(testUsername) + 5}}})},
			ev(grp, "/new fresh", mention)},

		{"forum_topic", obj{"message": msg(obj{"from": alice, "chat": forum, "text": "@" + testUsername + " in topic",
			"message_thread_id": 17585, "is_topic_message": true,
			"entities": []obj{{"type": "mention", "offset": 0, "length": len(testUsername) + 1}}})},
			ev(src("-1002285219668", "Forum", "group", "99", "Alice Liddell", "17585"), "in topic", mention)},
		// A private chat's topic (Bot API 9.3): the thread is kept, so
		// the router can key it (topic mode) and answer into it.
		{"dm_topic", obj{"message": msg(obj{"from": alice, "chat": dmChat, "text": "in a topic",
			"message_thread_id": 211916, "is_topic_message": true})},
			ev(src("99", "Alice Liddell", "dm", "99", "Alice Liddell", "211916"), "in a topic", nil)},
		// A thread id without is_topic_message (a reply chain) is no topic.
		{"dm_reply_thread", obj{"message": msg(obj{"from": alice, "chat": dmChat, "text": "not a topic",
			"message_thread_id": 5})},
			ev(dm, "not a topic", nil)},
		{"forum_general", obj{"message": msg(obj{"from": alice, "chat": forum, "text": "/help@" + testUsername,
			"entities": []obj{{"type": "bot_command", "offset": 0, "length": len(testUsername) + 6}}})},
			ev(src("-1002285219668", "Forum", "group", "99", "Alice Liddell", "1"), "/help", mention)},
		// A reply in a forum's General topic carries the reply chain's
		// first message as message_thread_id, without is_topic_message:
		// it is no topic (sent to, "message thread not found"), and the
		// reply stays in General's conversation.
		{"forum_general_reply", obj{"message": msg(obj{"from": alice, "chat": forum, "text": "and then?",
			"message_thread_id": 5,
			"reply_to_message":  obj{"message_id": 5, "date": msgDate, "chat": forum, "from": botUser, "text": "first answer"}})},
			ev(src("-1002285219668", "Forum", "group", "99", "Alice Liddell", "1"), "and then?", func(e *eventsv1.MessageReceived) {
				e.Mentioned = true
				e.ReplyTo = &eventsv1.ReplyTo{MessageId: "5", Text: "first answer", UserId: "4242", FromBot: true}
			})},
		// A topic message that replies to no other comes as a reply to
		// the topic's creation; the bot opened this topic, and still the
		// message does not address it.
		{"forum_topic_opened_by_the_bot", obj{"message": msg(obj{"from": alice, "chat": forum, "text": "chatter",
			"message_thread_id": 17585, "is_topic_message": true,
			"reply_to_message": obj{"message_id": 17585, "date": msgDate, "chat": forum, "from": botUser,
				"message_thread_id": 17585, "is_topic_message": true,
				"forum_topic_created": obj{"name": "Deploys", "icon_color": 7322096}}})},
			nil},
		{"forum_topic_reply_to_the_bot", obj{"message": msg(obj{"from": alice, "chat": forum, "text": "and then?",
			"message_thread_id": 17585, "is_topic_message": true,
			"reply_to_message": obj{"message_id": 17590, "date": msgDate, "chat": forum, "from": botUser,
				"message_thread_id": 17585, "is_topic_message": true, "text": "first answer"}})},
			ev(src("-1002285219668", "Forum", "group", "99", "Alice Liddell", "17585"), "and then?", func(e *eventsv1.MessageReceived) {
				e.Mentioned = true
				e.ReplyTo = &eventsv1.ReplyTo{MessageId: "17590", Text: "first answer", UserId: "4242", FromBot: true}
			})},
		{"basic_group_text_mention", obj{"message": msg(obj{"from": alice, "chat": basicGrp, "text": "hey SB",
			"entities": []obj{{"type": "text_mention", "offset": 4, "length": 2, "user": botUser}}})},
			ev(src("-555", "Basic", "group", "99", "Alice Liddell", ""), "hey SB", mention)},
		{"channel_post", obj{"channel_post": msg(obj{"chat": channel, "sender_chat": channel, "text": "breaking"})},
			ev(src("-1001111111111", "News", "channel", "-1001111111111", "News", ""), "breaking", nil)},
		{"photo_caption", obj{"message": msg(obj{"from": alice, "chat": dmChat, "caption": "look",
			"photo": []obj{{"file_id": "small", "file_unique_id": "s", "width": 90, "height": 90, "file_size": 100},
				{"file_id": "large", "file_unique_id": "l", "width": 1280, "height": 960, "file_size": 90000},
				{"file_id": "mid", "file_unique_id": "m", "width": 320, "height": 240, "file_size": 5000}}})},
			ev(dm, "look", func(e *eventsv1.MessageReceived) {
				e.Attachments = []*eventsv1.Attachment{{Kind: eventsv1.AttachmentKind_ATTACHMENT_KIND_IMAGE, PlatformFileId: "large", MimeType: "image/jpeg", SizeBytes: 90000, Caption: "look"}}
			})},
		{"album_photo", obj{"message": msg(obj{"from": alice, "chat": dmChat, "media_group_id": "13745",
			"photo": []obj{{"file_id": "p2", "file_unique_id": "p", "width": 1280, "height": 960, "file_size": 80000}}})},
			ev(dm, "", func(e *eventsv1.MessageReceived) {
				e.MediaGroupId = "13745"
				e.Attachments = []*eventsv1.Attachment{{Kind: eventsv1.AttachmentKind_ATTACHMENT_KIND_IMAGE, PlatformFileId: "p2", MimeType: "image/jpeg", SizeBytes: 80000}}
			})},
		{"sticker", obj{"message": msg(obj{"from": alice, "chat": dmChat,
			"sticker": obj{"file_id": "st1", "file_unique_id": "s1", "type": "regular", "width": 512, "height": 512, "is_animated": false, "is_video": false,
				"emoji": "😀", "set_name": "HappyPack", "file_size": 20000}})},
			ev(dm, "", func(e *eventsv1.MessageReceived) {
				e.Attachments = []*eventsv1.Attachment{{Kind: eventsv1.AttachmentKind_ATTACHMENT_KIND_STICKER, PlatformFileId: "st1", MimeType: "image/webp",
					SizeBytes: 20000, StickerEmoji: "😀", StickerSet: "HappyPack"}}
			})},
		{"animated_sticker", obj{"message": msg(obj{"from": alice, "chat": dmChat,
			"sticker": obj{"file_id": "st2", "file_unique_id": "s2", "type": "regular", "width": 512, "height": 512, "is_animated": true, "is_video": false, "emoji": "🎉"}})},
			ev(dm, "", func(e *eventsv1.MessageReceived) {
				e.Attachments = []*eventsv1.Attachment{{Kind: eventsv1.AttachmentKind_ATTACHMENT_KIND_STICKER, PlatformFileId: "st2", MimeType: "application/x-tgsticker", StickerEmoji: "🎉"}}
			})},
		{"document", obj{"message": msg(obj{"from": alice, "chat": dmChat,
			"document": obj{"file_id": "doc1", "file_unique_id": "d", "file_name": "report.pdf", "mime_type": "application/pdf", "file_size": 1234}})},
			ev(dm, "", func(e *eventsv1.MessageReceived) {
				e.Attachments = []*eventsv1.Attachment{{Kind: eventsv1.AttachmentKind_ATTACHMENT_KIND_DOCUMENT, PlatformFileId: "doc1", MimeType: "application/pdf", SizeBytes: 1234, FileName: "report.pdf"}}
			})},
		{"voice", obj{"message": msg(obj{"from": alice, "chat": dmChat,
			"voice": obj{"file_id": "v1", "file_unique_id": "v", "duration": 3, "mime_type": "audio/ogg", "file_size": 4000}})},
			ev(dm, "", func(e *eventsv1.MessageReceived) {
				e.Attachments = []*eventsv1.Attachment{{Kind: eventsv1.AttachmentKind_ATTACHMENT_KIND_VOICE, PlatformFileId: "v1", MimeType: "audio/ogg", SizeBytes: 4000}}
			})},
		// A round video message is a video the agent is told of, not a
		// message dropped for having no supported media.
		{"video_note", obj{"message": msg(obj{"from": alice, "chat": dmChat,
			"video_note": obj{"file_id": "vn1", "file_unique_id": "n", "length": 240, "duration": 5, "file_size": 300000}})},
			ev(dm, "", func(e *eventsv1.MessageReceived) {
				e.Attachments = []*eventsv1.Attachment{{Kind: eventsv1.AttachmentKind_ATTACHMENT_KIND_VIDEO, PlatformFileId: "vn1", MimeType: "video/mp4", SizeBytes: 300000}}
			})},
		// A location pin or a venue reaches the agent as Hermes writes
		// it (_handle_location_message), rather than being dropped as a
		// message without text.
		{"location", obj{"message": msg(obj{"from": alice, "chat": dmChat,
			"location": obj{"latitude": 53.3498, "longitude": -6.2603}})},
			ev(dm, "[The user shared a location pin.]\nlatitude: 53.3498\nlongitude: -6.2603\n"+
				"Map: https://www.google.com/maps/search/?api=1&query=53.3498,-6.2603\n"+
				"Ask what they'd like to find nearby (restaurants, cafes, etc.) and any preferences.", nil)},
		{"venue", obj{"message": msg(obj{"from": alice, "chat": dmChat,
			"location": obj{"latitude": 48.0, "longitude": 2.2945},
			"venue":    obj{"location": obj{"latitude": 48.0, "longitude": 2.2945}, "title": "Eiffel Tower", "address": "Champ de Mars, Paris"}})},
			ev(dm, "[The user shared a location pin.]\nVenue: Eiffel Tower\nAddress: Champ de Mars, Paris\nlatitude: 48.0\nlongitude: 2.2945\n"+
				"Map: https://www.google.com/maps/search/?api=1&query=48.0,2.2945\n"+
				"Ask what they'd like to find nearby (restaurants, cafes, etc.) and any preferences.", nil)},
		{"reply_in_dm", obj{"message": msg(obj{"from": alice, "chat": dmChat, "text": "this one",
			"reply_to_message": obj{"message_id": 3, "date": msgDate, "chat": dmChat, "from": alice, "text": "older"}})},
			ev(dm, "this one", func(e *eventsv1.MessageReceived) {
				e.ReplyTo = &eventsv1.ReplyTo{MessageId: "3", Text: "older", UserId: "99"}
			})},
		// A press of an approval prompt's button: the command, from the
		// presser, naming the prompt and its call, with its callback
		// query (held for the router's refusal).
		{"approval_button", obj{"callback_query": obj{"id": "4242000001", "from": alice, "chat_instance": "-99", "data": "ea:session:call_1",
			"message": msg(obj{"from": botUser, "chat": dmChat, "text": "⚠️ Dangerous command requires approval"})}},
			ev(dm, "/approve session", func(e *eventsv1.MessageReceived) {
				e.MessageId, e.SentAt = "", nil
				e.ButtonPress = &eventsv1.ButtonPress{MessageId: "7", ToolCallId: "call_1"}
				e.Interaction = &eventsv1.Interaction{Id: "4242000001", Component: true}
			})},
		// A press of a prompt the bot sent in a forum's General topic as
		// a reply (its message_thread_id the reply chain's, no
		// is_topic_message) belongs to General, as the prompt does.
		{"approval_button_forum_general", obj{"callback_query": obj{"id": "4242000003", "from": alice, "chat_instance": "-98", "data": "ea:once",
			"message": msg(obj{"from": botUser, "chat": forum, "text": "⚠️ Dangerous command requires approval", "message_thread_id": 5,
				"reply_to_message": obj{"message_id": 5, "date": msgDate, "chat": forum, "from": alice, "text": "run it"}})}},
			ev(src("-1002285219668", "Forum", "group", "99", "Alice Liddell", "1"), "/approve", func(e *eventsv1.MessageReceived) {
				e.MessageId, e.SentAt, e.Mentioned = "", nil, true
				e.ButtonPress = &eventsv1.ButtonPress{MessageId: "7"}
				e.Interaction = &eventsv1.Interaction{Id: "4242000003", Component: true}
			})},
		// Skipped kinds: acknowledged to Telegram, never published.
		{"unknown_button", obj{"callback_query": obj{"id": "4242000002", "from": alice, "chat_instance": "-99", "data": "mp:gpt",
			"message": msg(obj{"from": botUser, "chat": dmChat, "text": "pick"})}}, nil},
		{"group_unmentioned", obj{"message": msg(obj{"from": alice, "chat": group, "text": "chatter"})}, nil},
		// Under require_mention a bare command needs a mention too, as in
		// Hermes: it may be meant for another bot in the group.
		{"command_plain_group", obj{"message": msg(obj{"from": alice, "chat": group, "text": "/stop",
			"entities": []obj{{"type": "bot_command", "offset": 0, "length": 5}}})}, nil},
		{"command_for_other_bot", obj{"message": msg(obj{"from": alice, "chat": group, "text": "/start@otherbot",
			"entities": []obj{{"type": "bot_command", "offset": 0, "length": 15}}})}, nil},
		{"edited_message", obj{"edited_message": msg(obj{"from": alice, "chat": dmChat, "text": "fixed", "edit_date": msgDate})}, nil},
	}
}

// answer is the send request that replies to ev.
func answer(ev *eventsv1.MessageReceived) *deliveryv1.SendRequested {
	s := ev.GetSource()
	return &deliveryv1.SendRequested{Target: &deliveryv1.Target{Platform: "telegram", Account: s.GetAccount(), ChatId: s.GetChatId(),
		ThreadId: s.GetThreadId(), ReplyToMessageId: ev.GetMessageId()}}
}
