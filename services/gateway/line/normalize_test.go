package line

import (
	"encoding/base64"
	"encoding/json"
	"strings"
	"testing"

	"google.golang.org/protobuf/encoding/prototext"
	"google.golang.org/protobuf/proto"

	deliveryv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/delivery/v1"
	eventsv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/events/v1"
	"github.com/switchboard-chat/switchboard/pkg/platform"
	"github.com/switchboard-chat/switchboard/pkg/sessionkey"
)

const (
	alice  = "U4af4980629a0c1b2c3d4e5f6a7b8c9d0"
	bot    = "U0123456789abcdef0123456789abcdef"
	group  = "Ca56f94637cc4347f90a25382909b24b9"
	room   = "Rb1c2d3e4f5a6b7c8d9e0f1a2b3c4d5e6"
	evID   = "01FZ74A0TDDPYRVKNK77XKC3ZR"
	msgID  = "444573844083572737"
	testCh = "chtest"
	data   = "https://api-data.line.me"
)

var normRules = &rules{account: testCh, bot: bot, data: data, groups: map[string]bool{group: true}, rooms: map[string]bool{}}

// lineEvent is a message event as LINE posts it, with fields replaced
// by kv (a JSON fragment per top-level key).
func lineEvent(t testing.TB, src, msg string, kv ...string) event {
	t.Helper()
	raw := map[string]json.RawMessage{
		"type": json.RawMessage(`"message"`), "mode": json.RawMessage(`"active"`), "timestamp": json.RawMessage(`1692251666727`),
		"source": json.RawMessage(src), "webhookEventId": json.RawMessage(`"` + evID + `"`),
		"deliveryContext": json.RawMessage(`{"isRedelivery":false}`), "replyToken": json.RawMessage(`"38ef843bde154d9b91c21320ffd17a0f"`),
		"message": json.RawMessage(msg),
	}
	for i := 0; i+1 < len(kv); i += 2 {
		raw[kv[i]] = json.RawMessage(kv[i+1])
	}
	b, _ := json.Marshal(raw)
	var e event
	if err := json.Unmarshal(b, &e); err != nil {
		t.Fatal(err)
	}
	return e
}

func TestNormalize(t *testing.T) {
	t.Parallel()
	userSrc := `{"type":"user","userId":"` + alice + `"}`
	groupSrc := `{"type":"group","groupId":"` + group + `","userId":"` + alice + `"}`
	text := func(s string) string {
		return `{"id":"` + msgID + `","type":"text","quoteToken":"q","text":` + strconvQuote(s) + `}`
	}
	dm := &eventsv1.SessionSource{Platform: "line", Account: testCh, ChatId: alice, ChatType: "dm", ChatName: alice, UserId: alice, UserName: alice}
	grp := &eventsv1.SessionSource{Platform: "line", Account: testCh, ChatId: group, ChatType: "group", ChatName: group, UserId: alice, UserName: alice}
	for _, c := range []struct {
		name       string
		ev         event
		want       *eventsv1.MessageReceived
		key        string // Hermes's session key
		replyToken bool
		skip, err  string
		rules      *rules // normRules when nil
	}{
		{name: "dm text", ev: lineEvent(t, userSrc, text("Hello, world")), replyToken: true,
			want: &eventsv1.MessageReceived{EventId: evID, MessageId: msgID, Source: dm, Text: "Hello, world"}, key: "agent:main:line:dm:" + alice},
		{name: "command", ev: lineEvent(t, userSrc, text("/new")), replyToken: true,
			want: &eventsv1.MessageReceived{EventId: evID, MessageId: msgID, Source: dm, Text: "/new"}, key: "agent:main:line:dm:" + alice},
		{name: "group text with a mention of the bot", replyToken: true,
			ev:   lineEvent(t, groupSrc, `{"id":"`+msgID+`","type":"text","text":"@Bot hi","mention":{"mentionees":[{"index":0,"length":4,"type":"user","userId":"`+bot+`","isSelf":true}]}}`),
			want: &eventsv1.MessageReceived{EventId: evID, MessageId: msgID, Source: grp, Text: "@Bot hi", Mentioned: true}, key: "agent:main:line:group:" + group + ":" + alice},
		{name: "group text mentioning someone else", replyToken: true,
			ev:   lineEvent(t, groupSrc, `{"id":"`+msgID+`","type":"text","text":"@Ann hi","mention":{"mentionees":[{"index":0,"length":4,"type":"user","userId":"Uother"}]}}`),
			want: &eventsv1.MessageReceived{EventId: evID, MessageId: msgID, Source: grp, Text: "@Ann hi"}, key: "agent:main:line:group:" + group + ":" + alice},
		{name: "require_mention: a group message without one", ev: lineEvent(t, groupSrc, text("chatter")), rules: &rules{account: testCh, bot: bot, data: data,
			groups: map[string]bool{group: true}, rooms: map[string]bool{}, requireMention: true}, skip: "not mentioned"},
		{name: "require_mention: a mention of someone else", ev: lineEvent(t, groupSrc, `{"id":"`+msgID+`","type":"text","text":"@Ann hi","mention":{"mentionees":[{"index":0,"length":4,"type":"user","userId":"Uother"}]}}`),
			rules: &rules{account: testCh, bot: bot, data: data, groups: map[string]bool{group: true}, rooms: map[string]bool{}, requireMention: true}, skip: "not mentioned"},
		{name: "require_mention: the bot's user id without isSelf", replyToken: true,
			ev:    lineEvent(t, groupSrc, `{"id":"`+msgID+`","type":"text","text":"@Bot hi","mention":{"mentionees":[{"index":0,"length":4,"type":"user","userId":"`+bot+`"}]}}`),
			rules: &rules{account: testCh, bot: bot, data: data, groups: map[string]bool{group: true}, rooms: map[string]bool{}, requireMention: true},
			want:  &eventsv1.MessageReceived{EventId: evID, MessageId: msgID, Source: grp, Text: "@Bot hi", Mentioned: true}, key: "agent:main:line:group:" + group + ":" + alice},
		{name: "require_mention: a free-response group", replyToken: true, ev: lineEvent(t, groupSrc, text("chatter")),
			rules: &rules{account: testCh, bot: bot, data: data, groups: map[string]bool{group: true}, rooms: map[string]bool{}, requireMention: true, freeGroups: map[string]bool{group: true}},
			want:  &eventsv1.MessageReceived{EventId: evID, MessageId: msgID, Source: grp, Text: "chatter"}, key: "agent:main:line:group:" + group + ":" + alice},
		{name: "require_mention: a DM needs none", replyToken: true, ev: lineEvent(t, userSrc, text("Hello, world")),
			rules: &rules{account: testCh, bot: bot, data: data, groups: map[string]bool{group: true}, rooms: map[string]bool{}, requireMention: true},
			want:  &eventsv1.MessageReceived{EventId: evID, MessageId: msgID, Source: dm, Text: "Hello, world"}, key: "agent:main:line:dm:" + alice},
		{name: "room not in the allowed list", ev: lineEvent(t, `{"type":"room","roomId":"`+room+`","userId":"`+alice+`"}`, text("hi")), skip: "room not allowed"},
		{name: "group not allowed", ev: lineEvent(t, `{"type":"group","groupId":"Cother"}`, text("hi")), skip: "group not allowed"},
		{name: "group member without a user id", replyToken: true, ev: lineEvent(t, `{"type":"group","groupId":"`+group+`"}`, text("hi")),
			want: &eventsv1.MessageReceived{EventId: evID, MessageId: msgID, Text: "hi",
				Source: &eventsv1.SessionSource{Platform: "line", Account: testCh, ChatId: group, ChatType: "group", ChatName: group, UserId: group, UserName: group}},
			key: "agent:main:line:group:" + group + ":" + group},
		{name: "image", ev: lineEvent(t, userSrc, `{"id":"`+msgID+`","type":"image","contentProvider":{"type":"line"}}`), replyToken: true,
			want: &eventsv1.MessageReceived{EventId: evID, MessageId: msgID, Source: dm, Attachments: []*eventsv1.Attachment{{
				Kind: eventsv1.AttachmentKind_ATTACHMENT_KIND_IMAGE, PlatformFileId: msgID, Location: &eventsv1.Attachment_Url{Url: data + "/v2/bot/message/" + msgID + "/content"}}}}},
		{name: "external video", ev: lineEvent(t, userSrc, `{"id":"`+msgID+`","type":"video","contentProvider":{"type":"external","originalContentUrl":"https://cdn.example/v.mp4"}}`), replyToken: true,
			want: &eventsv1.MessageReceived{EventId: evID, MessageId: msgID, Source: dm, Attachments: []*eventsv1.Attachment{{
				Kind: eventsv1.AttachmentKind_ATTACHMENT_KIND_VIDEO, PlatformFileId: msgID, Location: &eventsv1.Attachment_Url{Url: "https://cdn.example/v.mp4"}}}}},
		{name: "file", ev: lineEvent(t, userSrc, `{"id":"`+msgID+`","type":"file","fileName":"a.pdf","fileSize":2138}`), replyToken: true,
			want: &eventsv1.MessageReceived{EventId: evID, MessageId: msgID, Source: dm, Attachments: []*eventsv1.Attachment{{
				Kind: eventsv1.AttachmentKind_ATTACHMENT_KIND_DOCUMENT, PlatformFileId: msgID, FileName: "a.pdf", SizeBytes: 2138,
				Location: &eventsv1.Attachment_Url{Url: data + "/v2/bot/message/" + msgID + "/content"}}}}},
		{name: "sticker", ev: lineEvent(t, userSrc, `{"id":"`+msgID+`","type":"sticker","packageId":"446","stickerId":"1988","keywords":["Happy","Smile"]}`), replyToken: true,
			want: &eventsv1.MessageReceived{EventId: evID, MessageId: msgID, Source: dm, Text: "[sticker: Happy, Smile]"}},
		{name: "location", ev: lineEvent(t, userSrc, `{"id":"`+msgID+`","type":"location","title":"Tower","address":"Minato","latitude":35.6,"longitude":139.7}`), replyToken: true,
			want: &eventsv1.MessageReceived{EventId: evID, MessageId: msgID, Source: dm, Text: "[location: Tower Minato]"}},
		{name: "unknown kind", ev: lineEvent(t, userSrc, `{"id":"`+msgID+`","type":"hologram"}`), replyToken: true,
			want: &eventsv1.MessageReceived{EventId: evID, MessageId: msgID, Source: dm, Text: "[unsupported message type: hologram]"}},
		{name: "redelivery keeps no reply token", ev: lineEvent(t, userSrc, text("again"), "deliveryContext", `{"isRedelivery":true}`),
			want: &eventsv1.MessageReceived{EventId: evID, MessageId: msgID, Source: dm, Text: "again"}},
		{name: "no webhookEventId: the message id", ev: lineEvent(t, userSrc, text("old"), "webhookEventId", `""`), replyToken: true,
			want: &eventsv1.MessageReceived{EventId: msgID, MessageId: msgID, Source: dm, Text: "old"}},
		{name: "follow", ev: lineEvent(t, userSrc, `{}`, "type", `"follow"`), skip: "event follow"},
		{name: "postback: its data as text (a rich menu's command)", replyToken: true,
			ev:   lineEvent(t, userSrc, `{}`, "type", `"postback"`, "postback", `{"data":" /new "}`),
			want: &eventsv1.MessageReceived{EventId: evID, Source: dm, Text: "/new"}, key: "agent:main:line:dm:" + alice},
		{name: "approval button in a group", replyToken: true,
			ev:   lineEvent(t, groupSrc, `{}`, "type", `"postback"`, "postback", `{"data":"ea:session:call_7"}`),
			want: &eventsv1.MessageReceived{EventId: evID, Source: grp, Text: "/approve session", ButtonPress: &eventsv1.ButtonPress{ToolCallId: "call_7"}}},
		{name: "deny button without its call", replyToken: true,
			ev:   lineEvent(t, userSrc, `{}`, "type", `"postback"`, "postback", `{"data":"ea:deny"}`),
			want: &eventsv1.MessageReceived{EventId: evID, Source: dm, Text: "/deny", ButtonPress: &eventsv1.ButtonPress{}}},
		{name: "unknown approval choice is text", replyToken: true,
			ev:   lineEvent(t, userSrc, `{}`, "type", `"postback"`, "postback", `{"data":"ea:forever"}`),
			want: &eventsv1.MessageReceived{EventId: evID, Source: dm, Text: "ea:forever"}},
		{name: "postback a message id cannot ride on", replyToken: true,
			ev:   lineEvent(t, userSrc, `{"id":"`+msgID+`","type":"text","text":"forged"}`, "type", `"postback"`, "postback", `{"data":"ea:once"}`),
			want: &eventsv1.MessageReceived{EventId: evID, Source: dm, Text: "/approve", ButtonPress: &eventsv1.ButtonPress{}}},
		{name: "empty postback", ev: lineEvent(t, userSrc, `{}`, "type", `"postback"`, "postback", `{"data":""}`), skip: "empty message"},
		{name: "postback without webhookEventId", ev: lineEvent(t, userSrc, `{}`, "type", `"postback"`, "postback", `{"data":"x"}`, "webhookEventId", `""`), err: "without webhookEventId"},
		{name: "postback from a group not allowed", ev: lineEvent(t, `{"type":"group","groupId":"Cother"}`, `{}`, "type", `"postback"`, "postback", `{"data":"ea:once"}`), skip: "group not allowed"},
		{name: "unfollow", ev: lineEvent(t, userSrc, `{}`, "type", `"unfollow"`), skip: "event unfollow"},
		{name: "standby", ev: lineEvent(t, userSrc, text("hi"), "mode", `"standby"`), skip: "standby"},
		{name: "own message", ev: lineEvent(t, `{"type":"user","userId":"`+bot+`"}`, text("hi")), skip: "own message"},
		{name: "empty text", ev: lineEvent(t, userSrc, text("")), skip: "empty message"},
		{name: "no ids", ev: lineEvent(t, userSrc, `{"type":"text","text":"x"}`, "webhookEventId", `""`), err: "without webhookEventId"},
		{name: "unknown source", ev: lineEvent(t, `{"type":"space"}`, text("hi")), err: "source type"},
		{name: "user source without id", ev: lineEvent(t, `{"type":"user"}`, text("hi")), err: "without its id"},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := c.rules
			if r == nil {
				r = normRules
			}
			in := normalize(&c.ev, r)
			switch {
			case c.err != "":
				if in.err == nil || !strings.Contains(in.err.Error(), c.err) {
					t.Fatalf("err %v, want one containing %q", in.err, c.err)
				}
				return
			case c.skip != "":
				if in.skip != c.skip || in.ev != nil {
					t.Fatalf("skip %q (event %v), want %q", in.skip, in.ev, c.skip)
				}
				return
			case in.ev == nil:
				t.Fatalf("no event: skip %q, err %v", in.skip, in.err)
			}
			got := proto.Clone(in.ev).(*eventsv1.MessageReceived)
			got.SentAt = nil
			if !proto.Equal(got, c.want) {
				t.Fatalf("event\n%s\nwant\n%s", prototext.Format(got), prototext.Format(c.want))
			}
			if in.ev.GetSentAt().AsTime().UnixMilli() != 1692251666727 {
				t.Fatalf("sent_at %v", in.ev.GetSentAt().AsTime())
			}
			if (in.replyToken != "") != c.replyToken {
				t.Fatalf("reply token %q, want one: %v", in.replyToken, c.replyToken)
			}
			if c.key != "" {
				if k := sessionkey.Build(in.ev.GetSource(), sessionkey.DefaultOptions()); k != c.key {
					t.Fatalf("session key %s, want %s", k, c.key)
				}
			}
			if err := platform.CheckEvent(in.ev, "line", testCh, 256<<10); err != nil {
				t.Fatalf("kit refuses the event: %v", err)
			}
		})
	}
}

// Hermes's session keys for LINE's three chat kinds, per-user in groups
// and rooms by default.
func TestSessionKeys(t *testing.T) {
	t.Parallel()
	rr := &rules{account: testCh, data: data, groups: map[string]bool{"*": true}, rooms: map[string]bool{"*": true}}
	for src, want := range map[string]string{
		`{"type":"user","userId":"` + alice + `"}`:                            "agent:main:line:dm:" + alice,
		`{"type":"group","groupId":"` + group + `","userId":"` + alice + `"}`: "agent:main:line:group:" + group + ":" + alice,
		`{"type":"room","roomId":"` + room + `","userId":"` + alice + `"}`:    "agent:main:line:room:" + room + ":" + alice,
	} {
		e := lineEvent(t, src, `{"id":"1","type":"text","text":"hi"}`)
		in := normalize(&e, rr)
		if in.ev == nil {
			t.Fatalf("%s: no event (%q %v)", src, in.skip, in.err)
		}
		if k := sessionkey.Build(in.ev.GetSource(), sessionkey.DefaultOptions()); k != want {
			t.Errorf("%s: key %s, want %s", src, k, want)
		}
	}
}

func TestParsePayload(t *testing.T) {
	t.Parallel()
	for body, want := range map[string]string{
		`{"destination":"U1","events":[]}`: "",
		`{"destination":"U1"}`:             "no events",
		`{"events":"x"}`:                   "events:",
		`[1,2]`:                            "malformed",
		"{\"events\":[],\"x\":\"\xff\"}":   "not UTF-8",
		// LINE documents no most events a delivery holds: the body size
		// bounds them.
		`{"events":[` + strings.Repeat(`{},`, 500) + `{}]}`: "",
	} {
		_, err := parsePayload([]byte(body))
		if (want == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), want)) {
			t.Errorf("%.40s: err %v, want %q", body, err, want)
		}
	}
}

func TestSignatureKnownAnswer(t *testing.T) {
	t.Parallel()
	// Computed with Python's hmac and base64 modules, as Hermes checks it.
	body := []byte(`{"destination":"U0123456789abcdef0123456789abcdef","events":[]}`)
	const secret = "8c570fa6dd201bb328f1c1eac23a96d8"
	const want = "j2zwSWvscnRkmVay2eMQI+B6oSOp3bA8F1CD3kPwJNo="
	if got := base64.StdEncoding.EncodeToString(signature(secret, body)); got != want {
		t.Fatalf("signature %s, want %s", got, want)
	}
	for _, c := range []struct {
		secret, header string
		body           []byte
		ok             bool
	}{
		{secret, want, body, true},
		{secret, " " + want + " ", body, true},
		{"", want, body, false},
		{secret, "", body, false},
		{secret, want[:len(want)-2], body, false},
		{secret, want, append([]byte(nil), append(body, ' ')...), false},
		{"other", want, body, false},
		{secret, base64.StdEncoding.EncodeToString([]byte("short")), body, false},
	} {
		if got := validSignature(c.secret, c.header, c.body); got != c.ok {
			t.Errorf("secret %q header %q: %v, want %v", c.secret, c.header, got, c.ok)
		}
	}
}

func TestRetryKey(t *testing.T) {
	t.Parallel()
	k := retryKey("ch1", "turn-1:0")
	if len(k) != 36 || k[14] != '4' || !strings.Contains("89ab", string(k[19])) {
		t.Fatalf("retry key %q is not a version 4 UUID", k)
	}
	if retryKey("ch1", "turn-1:0") != k || retryKey("ch1", "turn-1:1") == k || retryKey("ch2", "turn-1:0") == k {
		t.Fatal("retry keys are not one per channel and idempotency key")
	}
	if retryKey("ch1", "") != "" {
		t.Fatal("a send without an idempotency key got a retry key")
	}
}

func strconvQuote(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

// FuzzParseWebhook: any body parses or is refused without a panic, and
// every event that normalizes is one the kit accepts, with a content
// URL only on the configured host or an external https URL.
func FuzzParseWebhook(f *testing.F) {
	f.Add(`{"destination":"` + bot + `","events":[{"type":"message","mode":"active","timestamp":1,"source":{"type":"user","userId":"` + alice + `"},"webhookEventId":"` + evID + `","replyToken":"r","message":{"id":"1","type":"text","text":"hi"}}]}`)
	f.Add(`{"destination":"` + bot + `","events":[{"type":"message","source":{"type":"group","groupId":"` + group + `","userId":"` + alice + `"},"webhookEventId":"e","message":{"id":"2","type":"image","contentProvider":{"type":"line"}}}]}`)
	f.Add(`{"destination":"` + bot + `","events":[{"type":"message","source":{"type":"user","userId":"U1"},"message":{"id":"x/../3","type":"file"}}]}`)
	f.Add(`{"events":[{"type":"follow"},{"type":"message","source":{"type":"room","roomId":"R"}}]}`)
	f.Add(`{"events":[]}`)
	f.Add(`{"events":null}`)
	f.Add(`{"events":[{"type":"message","source":{"type":"room","roomId":"R1","userId":"U2"},"webhookEventId":"e","message":{"id":"3","type":"text","text":"@Bot hi","mention":{"mentionees":[{"index":0,"length":4,"type":"user","isSelf":true}]}}}]}`)
	f.Add(`{"events":[{"type":"postback","source":{"type":"user","userId":"` + alice + `"},"webhookEventId":"e","postback":{"data":"ea:once:call_1"}}]}`)
	f.Add(`{"events":[{"type":"postback","source":{"type":"group","groupId":"` + group + `"},"webhookEventId":"e","postback":{"data":"ea:deny:\u00e9"}}]}`)
	f.Add("{\"events\":[{\"type\":\"message\",\"webhookEventId\":\"\\u0000\"}]}")
	f.Fuzz(func(t *testing.T, body string) {
		p, err := parsePayload([]byte(body))
		if err != nil {
			return
		}
		rr := &rules{account: testCh, bot: bot, data: data, groups: map[string]bool{"*": true}, rooms: map[string]bool{"*": true},
			requireMention: true, freeGroups: map[string]bool{group: true}}
		for i := range p.Events {
			in := normalize(&p.Events[i], rr)
			if in.ev == nil {
				if in.err == nil && in.skip == "" {
					t.Fatal("neither an event, a skip nor an error")
				}
				continue
			}
			if src := in.ev.GetSource(); p.Events[i].Type == "message" && src.GetChatType() != "dm" && src.GetChatId() != group && !in.ev.GetMentioned() {
				t.Fatalf("a %s message without a mention published under require_mention", src.GetChatType())
			}
			if err := platform.CheckEvent(in.ev, "line", testCh, 256<<10); err != nil {
				// The kit refuses it with a logged reason; what matters is
				// that it never panics or publishes a bad event.
				continue
			}
			for _, a := range in.ev.GetAttachments() {
				u := a.GetUrl()
				if !strings.HasPrefix(u, data+"/v2/bot/message/") && !strings.HasPrefix(u, "https://") {
					t.Fatalf("attachment url %q", u)
				}
			}
		}
	})
}

// FuzzSignature: no header or body makes the check panic, and only the
// signature of the exact body passes.
func FuzzSignature(f *testing.F) {
	f.Add("secret", "", []byte(`{"events":[]}`))
	f.Add("8c570fa6dd201bb328f1c1eac23a96d8", "j2zwSWvscnRkmVay2eMQI+B6oSOp3bA8F1CD3kPwJNo=", []byte(`{"destination":"U0123456789abcdef0123456789abcdef","events":[]}`))
	f.Add("", "====", []byte{})
	f.Add("s", "not base64!", []byte{0, 0xff})
	f.Fuzz(func(t *testing.T, secret, header string, body []byte) {
		_ = validSignature(secret, header, body)
		if secret == "" {
			return
		}
		good := base64.StdEncoding.EncodeToString(signature(secret, body))
		if !validSignature(secret, good, body) {
			t.Fatal("own signature refused")
		}
		if validSignature(secret, good, append(append([]byte(nil), body...), 'x')) {
			t.Fatal("signature accepted for another body")
		}
	})
}

// Every button's data reads back as the command it stands for and its
// call; a call id that would pass LINE's 300 bytes of data, or is not
// printable ASCII, is left out.
func TestApprovalQuickReply(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("c", maxPostbackData)
	for _, c := range []struct {
		call, want string
	}{{"call_1", "call_1"}, {long, ""}, {"caf\u00e9", ""}, {"", ""}} {
		q := approvalQuickReply(&deliveryv1.Approval{Choices: []string{"once", "session", "always", "deny"}, ToolCallId: c.call})
		if q == nil || len(q.Items) != 4 {
			t.Fatalf("%.10q: %+v", c.call, q)
		}
		for _, it := range q.Items {
			cmd, call, ok := parsePostback(it.Action.Data)
			if !ok || cmd != it.Action.DisplayText || call != c.want || len(it.Action.Data) > maxPostbackData || len(it.Action.Label) > 20 {
				t.Fatalf("%.10q: %+v reads as %q %q %v", c.call, it.Action, cmd, call, ok)
			}
		}
	}
	if q := approvalQuickReply(&deliveryv1.Approval{Choices: []string{"once", "maybe"}}); q != nil {
		t.Fatalf("an unknown choice got buttons: %+v", q)
	}
	if q := approvalQuickReply(nil); q != nil {
		t.Fatalf("no approval got buttons: %+v", q)
	}
	for _, data := range []string{"ea:", "ea:once:has space", "approve", "ea:deny:" + long} {
		if _, _, ok := parsePostback(data); ok {
			t.Errorf("%.20q read as a button", data)
		}
	}
}
