package whatsapp

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/encoding/prototext"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	eventsv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/events/v1"
	"github.com/switchboard-chat/switchboard/pkg/platform"
	"github.com/switchboard-chat/switchboard/pkg/sessionkey"
)

const (
	phoneID = "106540352242922"
	display = "15550783881"
	ann     = "15551234567"
)

// notify wraps message objects (JSON) into a notification for phoneID.
func notify(messages ...string) []byte {
	return []byte(`{"object":"whatsapp_business_account","entry":[{"id":"102290129340398","changes":[{"field":"messages","value":{` +
		`"messaging_product":"whatsapp","metadata":{"display_phone_number":"` + display + `","phone_number_id":"` + phoneID + `"},` +
		`"contacts":[{"profile":{"name":"Ann Example"},"wa_id":"` + ann + `"}],` +
		`"messages":[` + strings.Join(messages, ",") + `]}}]}]}`)
}

// msg is a message object from Ann of type typ with its object.
func msg(id, typ, object string) string {
	s := `{"from":"` + ann + `","id":"` + id + `","timestamp":"1700000000","type":"` + typ + `"`
	if object != "" {
		s += `,"` + typ + `":` + object
	}
	return s + "}"
}

func base(id, text string) *eventsv1.MessageReceived {
	return &eventsv1.MessageReceived{EventId: id, MessageId: id, Text: text, SentAt: timestamppb.New(time.Unix(1700000000, 0)),
		Source: &eventsv1.SessionSource{Platform: "whatsapp", Account: phoneID, ChatId: ann, ChatType: "dm", ChatName: "Ann Example", UserId: ann, UserName: "Ann Example"}}
}

func with(ev *eventsv1.MessageReceived, f func(*eventsv1.MessageReceived)) *eventsv1.MessageReceived {
	f(ev)
	return ev
}

func TestNormalize(t *testing.T) {
	t.Parallel()
	img := eventsv1.AttachmentKind_ATTACHMENT_KIND_IMAGE
	for _, c := range []struct {
		name string
		msg  string
		want *eventsv1.MessageReceived
		skip string
	}{
		{"text", msg("w1", "text", `{"body":"hello"}`), base("w1", "hello"), ""},
		{"image with caption", msg("w2", "image", `{"id":"501","mime_type":"image/jpeg","sha256":"x","caption":"a cat"}`),
			with(base("w2", "a cat"), func(e *eventsv1.MessageReceived) {
				e.Attachments = []*eventsv1.Attachment{{Kind: img, PlatformFileId: "501", MimeType: "image/jpeg", Caption: "a cat"}}
			}), ""},
		{"voice note", msg("w3", "audio", `{"id":"502","mime_type":"audio/ogg; codecs=opus","voice":true}`),
			with(base("w3", ""), func(e *eventsv1.MessageReceived) {
				e.Attachments = []*eventsv1.Attachment{{Kind: eventsv1.AttachmentKind_ATTACHMENT_KIND_VOICE, PlatformFileId: "502", MimeType: "audio/ogg"}}
			}), ""},
		{"audio file", msg("w4", "audio", `{"id":"503","mime_type":"audio/mpeg"}`),
			with(base("w4", ""), func(e *eventsv1.MessageReceived) {
				e.Attachments = []*eventsv1.Attachment{{Kind: eventsv1.AttachmentKind_ATTACHMENT_KIND_AUDIO, PlatformFileId: "503", MimeType: "audio/mpeg"}}
			}), ""},
		{"video", msg("w5", "video", `{"id":"504","mime_type":"video/mp4","caption":"look"}`),
			with(base("w5", "look"), func(e *eventsv1.MessageReceived) {
				e.Attachments = []*eventsv1.Attachment{{Kind: eventsv1.AttachmentKind_ATTACHMENT_KIND_VIDEO, PlatformFileId: "504", MimeType: "video/mp4", Caption: "look"}}
			}), ""},
		{"document", msg("w6", "document", `{"id":"505","mime_type":"application/pdf","filename":"report.pdf"}`),
			with(base("w6", ""), func(e *eventsv1.MessageReceived) {
				e.Attachments = []*eventsv1.Attachment{{Kind: eventsv1.AttachmentKind_ATTACHMENT_KIND_DOCUMENT, PlatformFileId: "505", MimeType: "application/pdf", FileName: "report.pdf"}}
			}), ""},
		{"sticker", msg("w7", "sticker", `{"id":"506","mime_type":"image/webp","animated":false}`),
			with(base("w7", ""), func(e *eventsv1.MessageReceived) {
				e.Attachments = []*eventsv1.Attachment{{Kind: eventsv1.AttachmentKind_ATTACHMENT_KIND_STICKER, PlatformFileId: "506", MimeType: "image/webp"}}
			}), ""},
		{"location", msg("w8", "location", `{"latitude":-33.8688,"longitude":151.2093,"name":"Opera House","address":"Bennelong Point","url":"https://sydneyoperahouse.com"}`),
			base("w8", "[Location: Opera House, Bennelong Point (latitude -33.8688, longitude 151.2093) https://sydneyoperahouse.com]"), ""},
		{"bare location", msg("w9", "location", `{"latitude":1.5,"longitude":2}`), base("w9", "[Location (latitude 1.5, longitude 2)]"), ""},
		{"contacts", msg("w10", "contacts", `[{"name":{"formatted_name":"Bob Builder","first_name":"Bob"},"phones":[{"phone":"+1 555 0100","wa_id":"15550100","type":"CELL"}],"emails":[{"email":"bob@example.com"}]},{"name":{"formatted_name":"Eve"}}]`),
			base("w10", "[Contact: Bob Builder, +1 555 0100, bob@example.com]\n[Contact: Eve]"), ""},
		{"button reply", msg("w11", "interactive", `{"type":"button_reply","button_reply":{"id":"b1","title":"Yes"}}`), base("w11", "Yes"), ""},
		{"list reply", msg("w12", "interactive", `{"type":"list_reply","list_reply":{"id":"r1","title":"Tuesday","description":"10am"}}`), base("w12", "Tuesday"), ""},
		{"flow reply", msg("w13", "interactive", `{"type":"nfm_reply","nfm_reply":{"name":"flow","body":"Sent","response_json":"{\"size\":\"L\"}"}}`),
			base("w13", `[Form response: {"size":"L"}]`), ""},
		{"template button", msg("w14", "button", `{"payload":"STOP","text":"Stop promotions"}`), base("w14", "Stop promotions"), ""},
		{"reply to the bot", `{"from":"` + ann + `","id":"w15","timestamp":"1700000000","type":"text","text":{"body":"and?"},"context":{"from":"` + display + `","id":"wamid.OUT1"}}`,
			with(base("w15", "and?"), func(e *eventsv1.MessageReceived) {
				e.ReplyTo = &eventsv1.ReplyTo{MessageId: "wamid.OUT1", UserId: display, FromBot: true}
			}), ""},
		{"reply to themselves", `{"from":"` + ann + `","id":"w16","timestamp":"1700000000","type":"text","text":{"body":"this"},"context":{"from":"` + ann + `","id":"wamid.IN1"}}`,
			with(base("w16", "this"), func(e *eventsv1.MessageReceived) {
				e.ReplyTo = &eventsv1.ReplyTo{MessageId: "wamid.IN1", UserId: ann}
			}), ""},
		{"reaction", msg("w17", "reaction", `{"message_id":"wamid.OUT1","emoji":"👍"}`), nil, "reaction"},
		{"unsupported", `{"from":"` + ann + `","id":"w18","timestamp":"1700000000","type":"unsupported","errors":[{"code":131051,"title":"Message type unknown"}]}`, nil, "unsupported message"},
		{"system", msg("w19", "system", `{"body":"Ann changed their phone number","type":"user_changed_number"}`), nil, "type system"},
		{"empty text", msg("w20", "text", `{"body":"  "}`), nil, "empty message"},
		{"media without id", msg("w21", "image", `{"mime_type":"image/jpeg"}`), nil, "media without an id"},
		{"group shaped", `{"from":"` + ann + `","id":"w22","timestamp":"1700000000","type":"text","text":{"body":"hi all"},"group_id":"g1"}`, nil, "group message"},
		// Hermes's Cloud adapter takes a "chat" field for the group.
		{"group shaped by chat", `{"from":"` + ann + `","id":"w23","timestamp":"1700000000","type":"text","text":{"body":"hi all"},"chat":{"id":"120363000000000000@g.us"}}`, nil, "group message"},
	} {
		t.Run(c.name, func(t *testing.T) {
			out, err := parseNotification(notify(c.msg), phoneID)
			if err != nil {
				t.Fatal(err)
			}
			if len(out.messages) != 1 {
				t.Fatalf("%d messages, want 1", len(out.messages))
			}
			m := out.messages[0]
			if m.err != nil || m.skip != c.skip {
				t.Fatalf("skip %q err %v, want skip %q", m.skip, m.err, c.skip)
			}
			if c.want == nil {
				if m.ev != nil {
					t.Fatalf("event %v for a skipped message", m.ev)
				}
				return
			}
			if !proto.Equal(m.ev, c.want) {
				t.Fatalf("got  %s\nwant %s", prototext.Format(m.ev), prototext.Format(c.want))
			}
			if err := platform.CheckEvent(m.ev, "whatsapp", phoneID, 256<<10); err != nil {
				t.Fatalf("the kit refuses the event: %v", err)
			}
			// Switchboard's (and Hermes's) key for a WhatsApp DM: the wa_id.
			if k := sessionkey.Build(m.ev.GetSource(), sessionkey.DefaultOptions()); k != "agent:main:whatsapp:dm:"+ann {
				t.Fatalf("session key %q", k)
			}
		})
	}
}

// A notification with several messages, statuses, other numbers and other
// fields: each message stands alone, a malformed one included.
func TestNotificationParts(t *testing.T) {
	t.Parallel()
	raw := []byte(`{"object":"whatsapp_business_account","entry":[{"id":"1","changes":[
		{"field":"messages","value":{"messaging_product":"whatsapp","metadata":{"display_phone_number":"` + display + `","phone_number_id":"` + phoneID + `"},
		 "messages":[` + msg("a1", "text", `{"body":"one"}`) + `,{"id":"a2","type":"text","text":{"body":"no sender"}},{"from":5},` + msg("a3", "text", `{"body":"three"}`) + `],
		 "statuses":[{"id":"wamid.OUT1","status":"delivered","timestamp":"1","recipient_id":"` + ann + `"},
		             {"id":"wamid.OUT2","status":"failed","timestamp":"1","recipient_id":"` + ann + `","errors":[{"code":131047,"title":"Re-engagement message"}]}]}},
		{"field":"messages","value":{"metadata":{"phone_number_id":"999"},"messages":[` + msg("b1", "text", `{"body":"other number"}`) + `]}},
		{"field":"account_update","value":{"event":"VERIFIED_ACCOUNT"}}]}]}`)
	out, err := parseNotification(raw, phoneID)
	if err != nil {
		t.Fatal(err)
	}
	if len(out.messages) != 4 {
		t.Fatalf("%d messages, want 4 (the other number's skipped whole)", len(out.messages))
	}
	if out.messages[0].ev.GetText() != "one" || out.messages[3].ev.GetText() != "three" {
		t.Fatalf("messages %+v", out.messages)
	}
	for _, i := range []int{1, 2} {
		if !errors.Is(out.messages[i].err, errMalformed) {
			t.Fatalf("message %d: err %v, want malformed", i, out.messages[i].err)
		}
	}
	if out.messages[0].ev.GetSource().GetChatName() != ann {
		t.Fatalf("without a contact the chat name is the wa_id, got %q", out.messages[0].ev.GetSource().GetChatName())
	}
	if len(out.statuses) != 2 || out.statuses[1].Errors[0].Code != codeReengagement {
		t.Fatalf("statuses %+v", out.statuses)
	}
	if strings.Join(out.skipped, "|") != "other phone number|field account_update" {
		t.Fatalf("skipped %q", out.skipped)
	}
}

func TestMalformedNotification(t *testing.T) {
	t.Parallel()
	for _, raw := range []string{``, `not json`, `[]`, `{"object":"whatsapp_business_account","entry":"x"}`, `{"object":"whatsapp_business_account","entry":[{"changes":[{"field":"messages","value":{"messages":{}}}]}]}`} {
		if _, err := parseNotification([]byte(raw), phoneID); !errors.Is(err, errMalformed) {
			t.Errorf("%q: err %v, want malformed", raw, err)
		}
	}
	// Another product's notification is skipped, not malformed: Meta
	// would retry a refusal for days.
	out, err := parseNotification([]byte(`{"object":"page","entry":[]}`), phoneID)
	if err != nil || len(out.skipped) != 1 {
		t.Fatalf("page object: %+v %v", out, err)
	}
}

func FuzzParseNotification(f *testing.F) {
	f.Add(notify(msg("w1", "text", `{"body":"hello"}`)))
	f.Add(notify(msg("w2", "image", `{"id":"501","mime_type":"image/jpeg; q=1","caption":"c"}`), msg("w3", "reaction", `{"message_id":"x","emoji":"👍"}`)))
	f.Add(notify(`{"from":"1","id":"w4","type":"text","text":{"body":"x"},"context":{"from":"","id":"y"}}`, `{"id":"","from":""}`, `7`))
	f.Add(notify(msg("w5", "location", `{"latitude":1e308,"longitude":-0}`), msg("w6", "contacts", `[{"phones":[{}]}]`)))
	f.Add([]byte(`{"object":"whatsapp_business_account","entry":[{"changes":[{"field":"messages","value":{"statuses":[{"status":"failed"}]}}]}]}`))
	f.Add([]byte(`{"object":"x"}`))
	f.Fuzz(func(t *testing.T, raw []byte) {
		out, err := parseNotification(raw, phoneID)
		if err != nil {
			if !errors.Is(err, errMalformed) {
				t.Fatalf("error not marked malformed: %v", err)
			}
			if json.Valid(raw) && len(out.messages) > 0 {
				t.Fatal("messages with an error")
			}
			return
		}
		for _, m := range out.messages {
			switch {
			case m.err != nil:
				if !errors.Is(m.err, errMalformed) || m.ev != nil {
					t.Fatalf("message error %v with event %v", m.err, m.ev)
				}
			case m.ev == nil:
				if m.skip == "" {
					t.Fatal("no event, no reason")
				}
			default:
				ev := m.ev
				if ev.GetEventId() == "" || ev.GetSource().GetChatId() == "" || ev.GetSource().GetAccount() != phoneID {
					t.Fatalf("event without ids: %v", ev)
				}
				_ = sessionkey.Build(ev.GetSource(), sessionkey.DefaultOptions())
				if err := platform.CheckEvent(ev, "whatsapp", phoneID, 1<<20); err != nil && !strings.Contains(err.Error(), "printable") && !strings.Contains(err.Error(), "encoded") {
					t.Fatalf("normalized event refused: %v", err)
				}
			}
		}
	})
}

// A user whose username hides their number (Meta's usernames, 2026) is
// known only by their business-scoped user id: the message carries
// from_user_id and no from, the contact user_id and no wa_id. The
// message is theirs, in a DM keyed by that id; a message that has both
// keeps the wa_id (Hermes's key).
func TestSenderWithoutNumber(t *testing.T) {
	t.Parallel()
	const bsuid = "US.13491208655302741918"
	body := func(contact, message string) []byte {
		return []byte(`{"object":"whatsapp_business_account","entry":[{"id":"102290129340398","changes":[{"field":"messages","value":{` +
			`"messaging_product":"whatsapp","metadata":{"display_phone_number":"` + display + `","phone_number_id":"` + phoneID + `"},` +
			`"contacts":[` + contact + `],"messages":[` + message + `]}}]}]}`)
	}
	for _, c := range []struct {
		name, contact, message, chat, key string
	}{
		{"username only",
			`{"profile":{"name":"Bo","username":"@bo"},"user_id":"` + bsuid + `"}`,
			`{"from_user_id":"` + bsuid + `","id":"wb1","timestamp":"1700000000","type":"text","text":{"body":"hi"}}`,
			bsuid, "agent:main:whatsapp:dm:" + bsuid},
		{"number and user id",
			`{"profile":{"name":"Bo"},"wa_id":"` + ann + `","user_id":"` + bsuid + `"}`,
			`{"from":"` + ann + `","from_user_id":"` + bsuid + `","id":"wb2","timestamp":"1700000000","type":"text","text":{"body":"hi"}}`,
			ann, "agent:main:whatsapp:dm:" + ann},
	} {
		t.Run(c.name, func(t *testing.T) {
			out, err := parseNotification(body(c.contact, c.message), phoneID)
			if err != nil {
				t.Fatal(err)
			}
			if len(out.messages) != 1 {
				t.Fatalf("%d messages, want 1", len(out.messages))
			}
			m := out.messages[0]
			if m.err != nil || m.ev == nil {
				t.Fatalf("not published: skip %q err %v", m.skip, m.err)
			}
			src := m.ev.GetSource()
			if src.GetChatId() != c.chat || src.GetUserId() != c.chat || src.GetUserName() != "Bo" || m.ev.GetText() != "hi" {
				t.Fatalf("event %s", prototext.Format(m.ev))
			}
			if err := platform.CheckEvent(m.ev, "whatsapp", phoneID, 256<<10); err != nil {
				t.Fatalf("the kit refuses the event: %v", err)
			}
			if k := sessionkey.Build(src, sessionkey.DefaultOptions()); k != c.key {
				t.Fatalf("session key %q, want %q", k, c.key)
			}
		})
	}
}
