package signal

import (
	"encoding/json"
	"errors"
	"math"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/encoding/prototext"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	eventsv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/events/v1"
	"github.com/switchboard-chat/switchboard/services/gateway/signal/signalfake"
)

const (
	bot     = "+15550000001"
	botUUID = "b0b0b0b0-0000-4000-8000-000000000001"
	group   = "Pmpi+EfPWmsxiomLe9Nx2XF9HOE483p6iKiFj65iMwI="
)

var (
	ann    = signalfake.Contact{Number: "+4915112345678", UUID: "a11ce000-0000-4000-8000-000000000042", Name: "Ann"}
	hidden = signalfake.Contact{UUID: "0f0f0f0f-0000-4000-8000-000000000007", Name: "Hidden"}
	botC   = signalfake.Contact{Number: bot, UUID: botUUID, Name: "Bot"}
)

// dm is the event Ann's direct message with text becomes.
func dm(ts int64, text string) *eventsv1.MessageReceived {
	id := ann.Number + ":" + itoa(ts)
	return &eventsv1.MessageReceived{EventId: id, MessageId: id, Text: text, Mentioned: true,
		SentAt: timestamppb.New(time.UnixMilli(ts)),
		Source: &eventsv1.SessionSource{Platform: "signal", Account: bot, ChatId: ann.Number, ChatType: "dm", ChatName: "Ann",
			UserId: ann.Number, UserName: "Ann", UserIdAlt: ann.UUID}}
}

// grp is the event Ann's group message with text becomes.
func grp(ts int64, text string, mentioned bool) *eventsv1.MessageReceived {
	ev := dm(ts, text)
	ev.Mentioned = mentioned
	ev.Source.ChatId, ev.Source.ChatType, ev.Source.ChatIdAlt, ev.Source.ChatName = "group:"+group, "group", group, "Team"
	return ev
}

// ownGroup is the event of the account owner's group message with text,
// sent from another of their devices.
func ownGroup(ts int64, text string) *eventsv1.MessageReceived {
	id := bot + ":" + itoa(ts)
	return &eventsv1.MessageReceived{EventId: id, MessageId: id, Text: text, SentAt: timestamppb.New(time.UnixMilli(ts)),
		Source: &eventsv1.SessionSource{Platform: "signal", Account: bot, ChatId: "group:" + group, ChatType: "group", ChatIdAlt: group,
			ChatName: "Team", UserId: bot, UserName: "Bot", UserIdAlt: botUUID}}
}

func itoa(n int64) string { b, _ := json.Marshal(n); return string(b) }

func TestNormalize(t *testing.T) {
	f := signalfake.New(bot)
	defer f.Close()
	const ts = 1700000000123
	all := rules{Account: bot, Groups: map[string]bool{"*": true}}
	env := func(m signalfake.Message) map[string]any {
		m.Timestamp = ts
		n, _ := f.Envelope(m)
		return n
	}
	envelopeOf := func(n map[string]any) map[string]any { return n["envelope"].(map[string]any) }
	with := func(n map[string]any, edit func(e map[string]any)) map[string]any { edit(envelopeOf(n)); return n }

	for _, tc := range []struct {
		name  string
		rules rules
		in    map[string]any
		want  *eventsv1.MessageReceived
		skip  skip
	}{
		{"dm", all, env(signalfake.Message{From: ann, Text: "hello"}), dm(ts, "hello"), ""},
		{"dm from a hidden number is named by uuid", all, env(signalfake.Message{From: hidden, Text: "hi"}), func() *eventsv1.MessageReceived {
			id := hidden.UUID + ":" + itoa(ts)
			return &eventsv1.MessageReceived{EventId: id, MessageId: id, Text: "hi", Mentioned: true, SentAt: timestamppb.New(time.UnixMilli(ts)),
				Source: &eventsv1.SessionSource{Platform: "signal", Account: bot, ChatId: hidden.UUID, ChatType: "dm", ChatName: "Hidden",
					UserId: hidden.UUID, UserName: "Hidden", UserIdAlt: hidden.UUID}}
		}(), ""},
		{"group", all, env(signalfake.Message{From: ann, Text: "hi all", GroupID: group, GroupName: "Team"}), grp(ts, "hi all", false), ""},
		{"group with a mention of the bot", rules{Account: bot, Groups: map[string]bool{group: true}, RequireMention: true},
			env(signalfake.Message{From: ann, Text: "\uFFFC what is up", GroupID: group, GroupName: "Team",
				Mentions: []signalfake.Mention{{Contact: botC, Start: 0, Length: 1}}}), grp(ts, "what is up", true), ""},
		{"mentions of others are rendered after an emoji (UTF-16 positions)", all,
			env(signalfake.Message{From: ann, Text: "😀 \uFFFC and \uFFFC", GroupID: group, GroupName: "Team",
				Mentions: []signalfake.Mention{{Contact: hidden, Start: 3, Length: 1}, {Contact: ann, Start: 9, Length: 1}}}),
			grp(ts, "😀 @"+hidden.UUID+" and @"+ann.Number, false), ""},
		{"a mention whose start plus length overflows is ignored, the message kept", all,
			with(env(signalfake.Message{From: ann, Text: "hi \uFFFC"}), func(e map[string]any) {
				e["dataMessage"].(map[string]any)["mentions"] = []map[string]any{{"number": bot, "start": 3, "length": math.MaxInt64}}
			}), dm(ts, "hi \uFFFC"), ""},
		{"mentions past the text or negative are ignored, one in range rendered", all,
			env(signalfake.Message{From: ann, Text: "\uFFFC and \uFFFC", GroupID: group, GroupName: "Team",
				Mentions: []signalfake.Mention{{Contact: ann, Start: 0, Length: 1}, {Contact: hidden, Start: 6, Length: 2},
					{Contact: hidden, Start: 40, Length: 1}, {Contact: hidden, Start: -1, Length: 1}}}),
			grp(ts, "@"+ann.Number+" and \uFFFC", false), ""},
		{"an out-of-range mention of the bot does not address it", rules{Account: bot, Groups: map[string]bool{"*": true}, RequireMention: true},
			with(env(signalfake.Message{From: ann, Text: "\uFFFC hello", GroupID: group, GroupName: "Team"}), func(e map[string]any) {
				e["dataMessage"].(map[string]any)["mentions"] = []map[string]any{{"number": bot, "start": 0, "length": math.MaxInt64}}
			}), nil, "not mentioned"},
		{"a mention of a member whose number starts with the bot's does not address it", rules{Account: bot, Groups: map[string]bool{"*": true}, RequireMention: true},
			env(signalfake.Message{From: ann, Text: "\uFFFC hello", GroupID: group, GroupName: "Team",
				Mentions: []signalfake.Mention{{Contact: signalfake.Contact{Number: bot + "2", UUID: hidden.UUID}, Start: 0, Length: 1}}}),
			nil, "not mentioned"},
		{"a member whose number starts with the bot's keeps their mention", all,
			env(signalfake.Message{From: ann, Text: "\uFFFC hello", GroupID: group, GroupName: "Team",
				Mentions: []signalfake.Mention{{Contact: signalfake.Contact{Number: bot + "2", UUID: hidden.UUID}, Start: 0, Length: 1}}}),
			grp(ts, "@"+bot+"2 hello", false), ""},
		{"the bot's number written out addresses it, at the end of the text too", rules{Account: bot, Groups: map[string]bool{"*": true}, RequireMention: true},
			env(signalfake.Message{From: ann, Text: "hello @" + bot, GroupID: group, GroupName: "Team"}), grp(ts, "hello", true), ""},
		{"group without a mention where one is required", rules{Account: bot, Groups: map[string]bool{"*": true}, RequireMention: true},
			env(signalfake.Message{From: ann, Text: "chatter", GroupID: group, GroupName: "Team"}), nil, "not mentioned"},
		{"a quote of the bot addresses it", rules{Account: bot, Groups: map[string]bool{"*": true}, RequireMention: true},
			env(signalfake.Message{From: ann, Text: "and then?", GroupID: group, GroupName: "Team", Quote: &signalfake.Quote{ID: 1699, Author: botC, Text: "once upon"}}),
			func() *eventsv1.MessageReceived {
				ev := grp(ts, "and then?", true)
				ev.ReplyTo = &eventsv1.ReplyTo{MessageId: bot + ":1699", Text: "once upon", UserId: bot, FromBot: true}
				return ev
			}(), ""},
		{"mentions in the quoted text are rendered as in the message", all,
			with(env(signalfake.Message{From: ann, Text: "agreed", Quote: &signalfake.Quote{ID: 1699, Author: hidden, Text: "\uFFFC can you look?"}}),
				func(e map[string]any) {
					e["dataMessage"].(map[string]any)["quote"].(map[string]any)["mentions"] = []map[string]any{
						{"name": ann.Number, "number": ann.Number, "uuid": ann.UUID, "start": 0, "length": 1}}
				}),
			func() *eventsv1.MessageReceived {
				ev := dm(ts, "agreed")
				ev.ReplyTo = &eventsv1.ReplyTo{MessageId: hidden.UUID + ":1699", Text: "@" + ann.Number + " can you look?", UserId: hidden.UUID}
				return ev
			}(), ""},
		{"groups are off without an allowlist", rules{Account: bot}, env(signalfake.Message{From: ann, Text: "x", GroupID: group}), nil, "groups off"},
		{"group not in the allowlist", rules{Account: bot, Groups: map[string]bool{"other": true}}, env(signalfake.Message{From: ann, Text: "x", GroupID: group}), nil, "group not allowed"},
		{"attachments", all, env(signalfake.Message{From: ann, Text: "look", Attachments: []signalfake.Attachment{
			{ID: "Ab12_-x.jpg", ContentType: "image/jpeg", Filename: "cat.jpg", Size: 1234},
			{ID: "voice1.aac", ContentType: "audio/aac", Size: 99},
			{ID: "doc1", ContentType: "application/pdf", Filename: "a.pdf", Size: 5}}}),
			func() *eventsv1.MessageReceived {
				ev := dm(ts, "look")
				ev.Attachments = []*eventsv1.Attachment{
					{Kind: eventsv1.AttachmentKind_ATTACHMENT_KIND_IMAGE, MimeType: "image/jpeg", SizeBytes: 1234, FileName: "cat.jpg", PlatformFileId: "Ab12_-x.jpg"},
					{Kind: eventsv1.AttachmentKind_ATTACHMENT_KIND_VOICE, MimeType: "audio/aac", SizeBytes: 99, PlatformFileId: "voice1.aac"},
					{Kind: eventsv1.AttachmentKind_ATTACHMENT_KIND_DOCUMENT, MimeType: "application/pdf", SizeBytes: 5, FileName: "a.pdf", PlatformFileId: "doc1"}}
				return ev
			}(), ""},
		{"attachment without text", all, env(signalfake.Message{From: ann, Attachments: []signalfake.Attachment{{ID: "p", ContentType: "image/png"}}}),
			func() *eventsv1.MessageReceived {
				ev := dm(ts, "")
				ev.Attachments = []*eventsv1.Attachment{{Kind: eventsv1.AttachmentKind_ATTACHMENT_KIND_IMAGE, MimeType: "image/png", PlatformFileId: "p"}}
				return ev
			}(), ""},
		{"a long message's text attachment is not published beside the text signal-cli put in the body", all,
			env(signalfake.Message{From: ann, Text: strings.Repeat("long ", 500), Attachments: []signalfake.Attachment{
				{ID: "lt1.txt", ContentType: "text/x-signal-plain", Size: 2500}}}),
			dm(ts, strings.Repeat("long ", 500)), ""},
		{"a long message's text attachment whose body signal-cli could not read is kept", all,
			env(signalfake.Message{From: ann, Text: strings.Repeat("long ", 400), Attachments: []signalfake.Attachment{
				{ID: "lt1.txt", ContentType: "text/x-signal-plain", Size: 2500}}}),
			func() *eventsv1.MessageReceived {
				ev := dm(ts, strings.Repeat("long ", 400))
				ev.Attachments = []*eventsv1.Attachment{{Kind: eventsv1.AttachmentKind_ATTACHMENT_KIND_DOCUMENT, MimeType: "text/x-signal-plain",
					SizeBytes: 2500, PlatformFileId: "lt1.txt"}}
				return ev
			}(), ""},
		{"note to self", all, f.NoteToSelf(botC, "remember milk", ts), func() *eventsv1.MessageReceived {
			id := bot + ":" + itoa(ts)
			return &eventsv1.MessageReceived{EventId: id, MessageId: id, Text: "remember milk", Mentioned: true, SentAt: timestamppb.New(time.UnixMilli(ts)),
				Source: &eventsv1.SessionSource{Platform: "signal", Account: bot, ChatId: bot, ChatType: "dm", ChatName: "Bot",
					UserId: bot, UserName: "Bot", UserIdAlt: botUUID}}
		}(), ""},
		{"sync of a message to someone else", all, with(f.NoteToSelf(botC, "hi ann", ts), func(e map[string]any) {
			sm := e["syncMessage"].(map[string]any)["sentMessage"].(map[string]any)
			sm["destination"], sm["destinationNumber"] = ann.Number, ann.Number
		}), nil, "sync of a message to someone else"},
		{"the owner's group message from another device", all, with(f.NoteToSelf(botC, "from my phone", ts), func(e map[string]any) {
			sm := e["syncMessage"].(map[string]any)["sentMessage"].(map[string]any)
			sm["destination"], sm["destinationNumber"], sm["destinationUuid"] = nil, nil, nil
			sm["groupInfo"] = map[string]any{"groupId": group, "groupName": "Team", "revision": 3, "type": "DELIVER"}
		}), ownGroup(ts, "from my phone"), ""},
		{"the owner's edit of a group message from another device (the group is in the edit)", all,
			with(f.NoteToSelf(botC, "", ts), func(e map[string]any) {
				// signal-cli writes a sync edit as editMessage beside no data
				// message fields: the group is only in the edit's dataMessage.
				e["syncMessage"] = map[string]any{"sentMessage": map[string]any{
					"destination": nil, "destinationNumber": nil, "destinationUuid": nil,
					"editMessage": map[string]any{"targetSentTimestamp": ts - 5, "dataMessage": map[string]any{
						"timestamp": ts, "message": "fixed on my phone", "expiresInSeconds": 0, "viewOnce": false,
						"groupInfo": map[string]any{"groupId": group, "groupName": "Team", "revision": 3, "type": "DELIVER"}}}}}
			}), ownGroup(ts, "fixed on my phone"), ""},
		{"the bot's own data message", all, env(signalfake.Message{From: botC, Text: "echo"}), nil, "own message"},
		{"edit", all, with(env(signalfake.Message{From: ann, Text: "fixed"}), func(e map[string]any) {
			e["editMessage"] = map[string]any{"targetSentTimestamp": ts - 5, "dataMessage": e["dataMessage"]}
			delete(e, "dataMessage")
		}), dm(ts, "fixed"), ""},
		{"reaction", all, with(env(signalfake.Message{From: ann}), func(e map[string]any) {
			e["dataMessage"].(map[string]any)["reaction"] = map[string]any{"emoji": "👍", "targetAuthor": bot, "targetSentTimestamp": 1, "isRemove": false}
		}), nil, "empty message"},
		{"read receipt", all, with(env(signalfake.Message{From: ann}), func(e map[string]any) {
			delete(e, "dataMessage")
			e["receiptMessage"] = map[string]any{"when": ts, "isDelivery": false, "isRead": true, "timestamps": []int64{1}}
		}), nil, "receipt"},
		{"typing", all, with(env(signalfake.Message{From: ann}), func(e map[string]any) {
			delete(e, "dataMessage")
			e["typingMessage"] = map[string]any{"action": "STARTED", "timestamp": ts}
		}), nil, "typing"},
		{"story", all, with(env(signalfake.Message{From: ann}), func(e map[string]any) {
			delete(e, "dataMessage")
			e["storyMessage"] = map[string]any{"allowsReplies": true}
		}), nil, "story"},
		{"decryption failure", all, map[string]any{"account": bot, "exception": map[string]any{"message": "bad mac", "type": "ProtocolInvalidMessageException"}}, nil, "exception"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			raw, err := json.Marshal(tc.in)
			if err != nil {
				t.Fatal(err)
			}
			n, err := parseEvent(raw)
			if err != nil {
				t.Fatalf("parse: %v", err)
			}
			got, why, err := normalize(n, tc.rules)
			if err != nil {
				t.Fatalf("normalize: %v", err)
			}
			if why != tc.skip {
				t.Fatalf("skip = %q, want %q", why, tc.skip)
			}
			if !proto.Equal(got, tc.want) {
				t.Fatalf("event\n got: %s\nwant: %s", prototext.Format(got), prototext.Format(tc.want))
			}
		})
	}
}

func TestParseEventWrappedAndMalformed(t *testing.T) {
	wrapped := `{"jsonrpc":"2.0","method":"receive","params":{"envelope":{"sourceNumber":"+1","timestamp":5,"dataMessage":{"timestamp":5,"message":"x"}},"account":"+2"}}`
	n, err := parseEvent([]byte(wrapped))
	if err != nil || n.Envelope == nil || n.Envelope.DataMessage.Message != "x" {
		t.Fatalf("wrapped notification: %+v, %v", n, err)
	}
	for _, raw := range []string{``, `[]`, `"x"`, `{}`, `{"account":"+1"}`, `{"method":"send","params":{}}`, `{"envelope":"x"}`,
		`{"envelope":{"timestamp":"soon"}}`} {
		if _, err := parseEvent([]byte(raw)); !errors.Is(err, errMalformed) {
			t.Errorf("parseEvent(%q) = %v, want errMalformed", raw, err)
		}
	}
	for _, raw := range []string{
		`{"envelope":{"timestamp":5,"dataMessage":{"message":"no source"}}}`,
		`{"envelope":{"sourceNumber":"+1","dataMessage":{"message":"no timestamp"}}}`,
	} {
		n, err := parseEvent([]byte(raw))
		if err != nil {
			t.Fatal(err)
		}
		if _, _, err := normalize(n, rules{Account: bot}); !errors.Is(err, errMalformed) {
			t.Errorf("normalize(%s) = %v, want errMalformed", raw, err)
		}
	}
}

func TestMessageIDs(t *testing.T) {
	for _, tc := range []struct {
		id     string
		author string
		ts     int64
		ok     bool
	}{
		{"+4915112345678:1700000000123", "+4915112345678", 1700000000123, true},
		{"a11ce000-0000-4000-8000-000000000042:7", "a11ce000-0000-4000-8000-000000000042", 7, true},
		{"1700000000123", "", 0, false},
		{":5", "", 0, false},
		{"+1:0", "", 0, false},
		{"+1:x", "", 0, false},
	} {
		author, ts, ok := splitMessageID(tc.id)
		if author != tc.author || ts != tc.ts || ok != tc.ok {
			t.Errorf("splitMessageID(%q) = %q, %d, %v", tc.id, author, ts, ok)
		}
	}
}
