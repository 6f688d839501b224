package matrix

import (
	"encoding/json"
	"errors"
	"net/url"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"
	"maunium.net/go/mautrix/event"
	"maunium.net/go/mautrix/id"

	eventsv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/events/v1"
)

// parseEvent reads a room event as the sync answer carries it.
func parseEvent(t testing.TB, raw string) *event.Event {
	t.Helper()
	var ev event.Event
	if err := json.Unmarshal([]byte(raw), &ev); err != nil {
		t.Fatalf("event %s: %v", raw, err)
	}
	return &ev
}

func testRules() rules {
	return rules{Bot: bot, RequireMention: true, AutoThread: true, Free: map[string]bool{}, Allowed: map[string]bool{}}
}

var (
	dmView   = roomView{ID: dmRm, DM: true, BotName: "Hermes", Names: func(u id.UserID) string { return map[id.UserID]string{ann: "Ann"}[u] }}
	teamView = roomView{ID: team, Name: "Team", BotName: "Hermes", Names: func(u id.UserID) string { return map[id.UserID]string{ann: "Ann"}[u] }}
)

func TestNormalize(t *testing.T) {
	t.Parallel()
	msg := func(content string) string {
		return `{"type":"m.room.message","event_id":"$e1","sender":"@ann:fake.test","origin_server_ts":1700000000000,"content":` + content + `}`
	}
	dmSrc := &eventsv1.SessionSource{Platform: "matrix", Account: bot, ChatId: dmRm, ChatName: "Ann", ChatType: "dm", UserId: ann, UserName: "Ann"}
	teamSrc := func(thread string) *eventsv1.SessionSource {
		return &eventsv1.SessionSource{Platform: "matrix", Account: bot, ChatId: team, ChatName: "Team", ChatType: "group", UserId: ann, UserName: "Ann",
			ThreadId: thread, ParentChatId: team}
	}
	for _, tc := range []struct {
		name     string
		raw      string
		view     roomView
		rules    func(*rules)
		inThread bool
		text     string
		src      *eventsv1.SessionSource
		reply    string
		skip     skip
		malform  bool
		kind     eventsv1.AttachmentKind
		// quiet: published without a mention (a command, a free room, a
		// thread the bot is in).
		quiet bool
	}{
		{name: "dm text", raw: msg(`{"msgtype":"m.text","body":"hi"}`), view: dmView, text: "hi", src: dmSrc},
		{name: "own message", raw: `{"type":"m.room.message","event_id":"$e1","sender":"@bot:fake.test","content":{"msgtype":"m.text","body":"hi"}}`, view: dmView, skip: skipOwn},
		// MATRIX_USER_ID written in another case than the homeserver's
		// (which the access token does not check): still the bot's own.
		{name: "own message, user id configured in another case", raw: `{"type":"m.room.message","event_id":"$e1","sender":"@bot:fake.test","content":{"msgtype":"m.text","body":"hi"}}`,
			view: dmView, rules: func(r *rules) { r.Bot = "@Bot:Fake.test" }, skip: skipOwn},
		{name: "edit", raw: msg(`{"msgtype":"m.text","body":"* hi","m.new_content":{"msgtype":"m.text","body":"hi"},"m.relates_to":{"rel_type":"m.replace","event_id":"$e0"}}`), view: dmView, skip: skipEdit},
		{name: "redaction", raw: `{"type":"m.room.redaction","event_id":"$e1","sender":"@ann:fake.test","redacts":"$e0","content":{}}`, view: dmView, skip: skipNotMessage},
		{name: "reaction", raw: `{"type":"m.reaction","event_id":"$e1","sender":"@ann:fake.test","content":{"m.relates_to":{"rel_type":"m.annotation","event_id":"$e0","key":"👍"}}}`, view: dmView, skip: skipNotMessage},
		{name: "encrypted", raw: `{"type":"m.room.encrypted","event_id":"$e1","sender":"@ann:fake.test","content":{"algorithm":"m.megolm.v1.aes-sha2","ciphertext":"x"}}`, view: dmView, skip: skipEncrypted},
		{name: "notice ignored", raw: msg(`{"msgtype":"m.notice","body":"beep"}`), view: dmView, skip: skipNotice},
		{name: "notice processed", raw: msg(`{"msgtype":"m.notice","body":"beep"}`), view: dmView, rules: func(r *rules) { r.ProcessNotices = true }, text: "beep", src: dmSrc},
		{name: "emote", raw: msg(`{"msgtype":"m.emote","body":"waves"}`), view: dmView, text: "* Ann waves", src: dmSrc},
		{name: "location", raw: msg(`{"msgtype":"m.location","body":"here","geo_uri":"geo:1,2"}`), view: dmView, skip: skipMsgType},
		{name: "empty", raw: msg(`{"msgtype":"m.text","body":"  "}`), view: dmView, skip: skipEmpty},
		{name: "body not a string", raw: msg(`{"msgtype":"m.text","body":42}`), view: dmView, malform: true},
		{name: "reply fallback stripped", raw: msg(`{"msgtype":"m.text","body":"> <@bot:fake.test> old\n> more\n\nnew","m.relates_to":{"m.in_reply_to":{"event_id":"$old"}}}`), view: dmView, text: "new", src: dmSrc, reply: "$old"},
		{name: "room without mention", raw: msg(`{"msgtype":"m.text","body":"chatting"}`), view: teamView, skip: skipNotMention},
		{name: "room command without mention", raw: msg(`{"msgtype":"m.text","body":"!new"}`), view: teamView, text: "!new", src: teamSrc("$e1"), quiet: true},
		{name: "room m.mentions", raw: msg(`{"msgtype":"m.text","body":"Hermes: status?","m.mentions":{"user_ids":["@bot:fake.test"]}}`), view: teamView, text: "status?", src: teamSrc("$e1")},
		{name: "room user id in body", raw: msg(`{"msgtype":"m.text","body":"@bot:fake.test status?"}`), view: teamView, text: "status?", src: teamSrc("$e1")},
		{name: "room pill in formatted body", raw: msg(`{"msgtype":"m.text","body":"Hermes: yo","format":"org.matrix.custom.html","formatted_body":"<a href=\"https://matrix.to/#/%40bot%3Afake.test\">Hermes</a>: yo"}`), view: teamView, text: "yo", src: teamSrc("$e1")},
		{name: "room pill percent-encoded mid-sentence", raw: msg(`{"msgtype":"m.text","body":"ask Hermes about it","format":"org.matrix.custom.html","formatted_body":"ask <a href=\"https://matrix.to/#/%40bot%3Afake.test\">Hermes</a> about it"}`),
			view: teamView, text: "ask Hermes about it", src: teamSrc("$e1")},
		{name: "room pill with @ encoded only", raw: msg(`{"msgtype":"m.text","body":"ask Hermes","format":"org.matrix.custom.html","formatted_body":"ask <a href=\"https://matrix.to/#/%40bot:fake.test\">Hermes</a>"}`),
			view: teamView, text: "ask Hermes", src: teamSrc("$e1")},
		{name: "room pill for another user", raw: msg(`{"msgtype":"m.text","body":"ask Bob","format":"org.matrix.custom.html","formatted_body":"ask <a href=\"https://matrix.to/#/%40bot%3Afake.test.other\">Bob</a>"}`),
			view: teamView, skip: skipNotMention},
		{name: "room pill for a longer user id", raw: msg(`{"msgtype":"m.text","body":"ask Bob","format":"org.matrix.custom.html","formatted_body":"ask <a href=\"https://matrix.to/#/@bot:fake.test.other\">Bob</a>"}`),
			view: teamView, skip: skipNotMention},
		{name: "room free response", raw: msg(`{"msgtype":"m.text","body":"chatting"}`), view: teamView, rules: func(r *rules) { r.Free = map[string]bool{team: true} }, text: "chatting", src: teamSrc("$e1"), quiet: true},
		{name: "room not allowed", raw: msg(`{"msgtype":"m.text","body":"@bot:fake.test hi"}`), view: teamView, rules: func(r *rules) { r.Allowed = map[string]bool{"!other:x": true} }, skip: skipRoom},
		{name: "room without auto thread", raw: msg(`{"msgtype":"m.text","body":"@bot:fake.test hi"}`), view: teamView, rules: func(r *rules) { r.AutoThread = false },
			text: "hi", src: &eventsv1.SessionSource{Platform: "matrix", Account: bot, ChatId: team, ChatName: "Team", ChatType: "group", UserId: ann, UserName: "Ann"}},
		{name: "thread the bot is in", raw: msg(`{"msgtype":"m.text","body":"more","m.relates_to":{"rel_type":"m.thread","event_id":"$root","is_falling_back":true,"m.in_reply_to":{"event_id":"$root"}}}`),
			view: teamView, inThread: true, text: "more", src: teamSrc("$root"), quiet: true},
		{name: "thread the bot is not in", raw: msg(`{"msgtype":"m.text","body":"more","m.relates_to":{"rel_type":"m.thread","event_id":"$root","is_falling_back":true,"m.in_reply_to":{"event_id":"$root"}}}`),
			view: teamView, skip: skipNotMention},
		{name: "reply in a thread", raw: msg(`{"msgtype":"m.text","body":"@bot:fake.test that","m.relates_to":{"rel_type":"m.thread","event_id":"$root","m.in_reply_to":{"event_id":"$mid"}}}`),
			view: teamView, text: "that", src: teamSrc("$root"), reply: "$mid"},
		{name: "dm auto thread", raw: msg(`{"msgtype":"m.text","body":"hi"}`), view: dmView, rules: func(r *rules) { r.DMAutoThread = true },
			text: "hi", src: &eventsv1.SessionSource{Platform: "matrix", Account: bot, ChatId: dmRm, ChatName: "Ann", ChatType: "dm", UserId: ann, UserName: "Ann", ThreadId: "$e1", ParentChatId: dmRm}},
		{name: "image", raw: msg(`{"msgtype":"m.image","body":"cat.png","url":"mxc://fake.test/m1","info":{"mimetype":"image/png","size":4}}`), view: dmView, src: dmSrc, kind: eventsv1.AttachmentKind_ATTACHMENT_KIND_IMAGE},
		{name: "voice", raw: msg(`{"msgtype":"m.audio","body":"voice.ogg","url":"mxc://fake.test/m2","org.matrix.msc3245.voice":{}}`), view: dmView, src: dmSrc, kind: eventsv1.AttachmentKind_ATTACHMENT_KIND_VOICE},
		{name: "file with caption", raw: msg(`{"msgtype":"m.file","body":"read this","filename":"a.pdf","url":"mxc://fake.test/m3"}`), view: dmView, text: "read this", src: dmSrc, kind: eventsv1.AttachmentKind_ATTACHMENT_KIND_DOCUMENT},
		{name: "media not on mxc", raw: msg(`{"msgtype":"m.image","body":"x.png","url":"https://evil.example/x.png"}`), view: dmView, skip: skipNonMXCMedia},
		{name: "encrypted media", raw: msg(`{"msgtype":"m.image","body":"x.png","file":{"url":"mxc://fake.test/e","v":"v2"}}`), view: dmView, skip: skipEncrypted},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := testRules()
			if tc.rules != nil {
				tc.rules(&r)
			}
			got, reason, err := normalize(parseEvent(t, tc.raw), tc.view, r, func(id.EventID) bool { return tc.inThread })
			if tc.malform {
				if !errors.Is(err, errMalformed) {
					t.Fatalf("err %v, want malformed", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if reason != tc.skip {
				t.Fatalf("skip %q, want %q", reason, tc.skip)
			}
			if tc.skip != skipNone {
				if got != nil {
					t.Fatalf("skipped event published: %v", got)
				}
				return
			}
			if got.GetText() != tc.text {
				t.Errorf("text %q, want %q", got.GetText(), tc.text)
			}
			if !proto.Equal(got.GetSource(), tc.src) {
				t.Errorf("source %v, want %v", got.GetSource(), tc.src)
			}
			if got.GetReplyTo().GetMessageId() != tc.reply {
				t.Errorf("reply to %q, want %q", got.GetReplyTo().GetMessageId(), tc.reply)
			}
			if got.GetEventId() != "$e1" || got.GetMessageId() != "$e1" || got.GetMentioned() == tc.quiet {
				t.Errorf("ids %q %q mentioned %v", got.GetEventId(), got.GetMessageId(), got.GetMentioned())
			}
			if tc.kind != 0 {
				if len(got.GetAttachments()) != 1 || got.GetAttachments()[0].GetKind() != tc.kind || got.GetAttachments()[0].GetPlatformFileId() == "" {
					t.Errorf("attachments %v, want one of kind %v", got.GetAttachments(), tc.kind)
				}
			}
		})
	}
}

// FuzzNormalize feeds arbitrary room events to the normalizer: it never
// panics, and what it publishes passes the kit's checks.
func FuzzNormalize(f *testing.F) {
	for _, s := range []string{
		`{"type":"m.room.message","event_id":"$e1","sender":"@ann:fake.test","content":{"msgtype":"m.text","body":"hi @bot:fake.test"}}`,
		`{"type":"m.room.message","event_id":"$e1","sender":"@ann:fake.test","content":{"msgtype":"m.image","body":"a.png","url":"mxc://s/m","info":{"size":-1}}}`,
		`{"type":"m.room.message","event_id":"$e1","sender":"@ann:fake.test","content":{"msgtype":"m.text","body":"> x\n\ny","m.relates_to":{"rel_type":"m.thread","event_id":"$r","m.in_reply_to":{"event_id":"$q"}}}}`,
		`{"type":"m.room.message","event_id":"$e1","sender":"@ann:fake.test","content":{"msgtype":"m.emote","body":"Hermes:","m.mentions":{"user_ids":["@bot:fake.test"]}}}`,
		// Pills (pills parses the formatted body, outside input).
		`{"type":"m.room.message","event_id":"$e1","sender":"@ann:fake.test","content":{"msgtype":"m.text","body":"ask Hermes","format":"org.matrix.custom.html","formatted_body":"ask <a href=\"https://matrix.to/#/%40bot%3Afake.test\">Hermes</a>"}}`,
		`{"type":"m.room.message","event_id":"$e1","sender":"@ann:fake.test","content":{"msgtype":"m.text","body":"x","format":"org.matrix.custom.html","formatted_body":"<a href='https://matrix.to/#/@bot:fake.test?via=fake.test'>x</a> matrix.to/#/%zz matrix.to/#/%4 matrix.to/#/"}}`,
		`{"type":"m.room.message","event_id":"$e1","sender":"@ann:fake.test","content":{"msgtype":"m.text","body":"x","format":"org.matrix.custom.html","formatted_body":"matrix.to/#/matrix.to/#/%40BOT%3aFAKE.TEST"}}`,
	} {
		f.Add(s, false)
	}
	f.Fuzz(func(t *testing.T, raw string, dm bool) {
		var ev event.Event
		if json.Unmarshal([]byte(raw), &ev) != nil {
			return
		}
		view := teamView
		if dm {
			view = dmView
		}
		got, _, err := normalize(&ev, view, testRules(), func(id.EventID) bool { return false })
		if err != nil || got == nil {
			return
		}
		if got.GetEventId() == "" || got.GetSource().GetChatId() != view.ID.String() || got.GetSource().GetUserId() == "" {
			t.Fatalf("published an event without ids: %v", got)
		}
		if got.GetText() == "" && len(got.GetAttachments()) == 0 {
			t.Fatalf("published an empty event: %v", got)
		}
	})
}

// A user id's localpart may hold a "/" (the spec's user id grammar, and
// Synapse registers such names), which Element writes as it is in the
// pill's matrix.to link: the link's id runs past it to the server name.
func TestPillOfAnIDWithASlash(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, formatted, user string
		want                  bool
	}{
		{"raw slash", `ask <a href="https://matrix.to/#/@hermes/bot:fake.test">Hermes</a>`, "@hermes/bot:fake.test", true},
		{"escaped slash", `ask <a href="https://matrix.to/#/%40hermes%2Fbot%3Afake.test">Hermes</a>`, "@hermes/bot:fake.test", true},
		{"raw slash, via", `<a href='https://matrix.to/#/@hermes/bot:fake.test?via=fake.test'>Hermes</a>`, "@hermes/bot:fake.test", true},
		{"raw slash, trailing path", `<a href="https://matrix.to/#/@hermes/bot:fake.test/">Hermes</a>`, "@hermes/bot:fake.test", true},
		{"another user under it", `<a href="https://matrix.to/#/@hermes/bot2:fake.test">Bob</a>`, "@hermes/bot:fake.test", false},
		{"the user before the slash", `<a href="https://matrix.to/#/@hermes/bot:fake.test">Hermes</a>`, "@hermes", false},
		{"no slash, path after", `<a href="https://matrix.to/#/@bot:fake.test/$event">x</a>`, "@bot:fake.test", true},
	} {
		if got := pills(tc.formatted, id.UserID(tc.user)); got != tc.want {
			t.Errorf("%s: pills(%q, %s) = %v, want %v", tc.name, tc.formatted, tc.user, got, tc.want)
		}
	}
}

// FuzzPills feeds arbitrary formatted bodies to the pill parser, which
// reads outside input: it never panics, and a matrix.to link to a user
// id, percent-encoded or not, is always found.
func FuzzPills(f *testing.F) {
	for _, s := range [][2]string{
		{`<a href="https://matrix.to/#/%40bot%3Afake.test">Hermes</a>`, "@bot:fake.test"},
		{`<a href="https://matrix.to/#/%40bot:fake.test">Hermes</a> and matrix.to/#/@bot:fake.test.other`, "@bot:fake.test"},
		{`matrix.to/#/%zz matrix.to/#/%4 matrix.to/#/ matrix.to/#/?`, "@Bot:Fake.Test"},
		{`<a href='https://matrix.to/#/@bot:fake.test/$event?via=x'>`, "@bot:fake.test"},
		{"MATRIX.TO/#/%40\u00e9:x", "@\u00e9:x"},
	} {
		f.Add(s[0], s[1])
	}
	f.Fuzz(func(t *testing.T, formatted, user string) {
		_ = pills(formatted, id.UserID(user))
		// Matrix user ids are printable ASCII, and their server name (from
		// the first ":") holds no "/" (a link's path starts there).
		if user == "" || strings.IndexFunc(user, func(r rune) bool { return r < 0x21 || r > 0x7e }) >= 0 {
			return
		}
		if c := strings.IndexByte(user, ':'); c >= 0 && strings.Contains(user[c:], "/") {
			return
		}
		for _, link := range []string{url.PathEscape(user), url.QueryEscape(user)} {
			if body := formatted + `<a href="https://matrix.to/#/` + link + `">x</a>`; !pills(body, id.UserID(user)) {
				t.Fatalf("the pill of %q not found in %q", user, body)
			}
		}
	})
}
