package bluebubbles

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"google.golang.org/protobuf/encoding/prototext"
	"google.golang.org/protobuf/proto"

	"github.com/switchboard-chat/switchboard/pkg/config"
	eventsv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/events/v1"
	"github.com/switchboard-chat/switchboard/pkg/platform"
	"github.com/switchboard-chat/switchboard/pkg/sessionkey"
)

const (
	testAccount = "192.168.1.10:1234"
	ann         = "+15551234567"
	dmGUID      = "iMessage;-;+15551234567"
	groupGUID   = "iMessage;+;chat493817263544"
	msgGUID     = "5B1F2C3D-0A9E-4F1B-8C7D-112233445566"
)

// body is a new-message webhook with data's fields replaced by kv (nil
// deletes one).
func body(kv map[string]any) []byte {
	data := map[string]any{
		"guid": msgGUID, "text": "hello", "isFromMe": false, "itemType": 0, "dateCreated": 1700000000000,
		"handle":                map[string]any{"address": ann, "service": "iMessage"},
		"associatedMessageType": nil, "threadOriginatorGuid": nil, "attachments": []any{},
		"chats": []any{map[string]any{"guid": dmGUID, "chatIdentifier": ann, "style": 45, "displayName": ""}},
	}
	for k, v := range kv {
		if v == nil {
			delete(data, k)
		} else {
			data[k] = v
		}
	}
	b, _ := json.Marshal(map[string]any{"type": "new-message", "data": data})
	return b
}

func groupChats(name string) []any {
	return []any{map[string]any{"guid": groupGUID, "chatIdentifier": "chat493817263544", "style": 43, "displayName": name}}
}

func TestNormalize(t *testing.T) {
	t.Parallel()
	pats, err := compilePatterns(nil)
	if err != nil {
		t.Fatal(err)
	}
	dm := func(text string) *eventsv1.MessageReceived {
		return &eventsv1.MessageReceived{EventId: msgGUID, MessageId: msgGUID, Text: text, Source: &eventsv1.SessionSource{
			Platform: "bluebubbles", Account: testAccount, ChatId: dmGUID, ChatIdAlt: ann, ChatType: "dm", ChatName: ann, UserId: ann, UserName: ann}}
	}
	group := func(text string, mentioned bool) *eventsv1.MessageReceived {
		return &eventsv1.MessageReceived{EventId: msgGUID, MessageId: msgGUID, Text: text, Mentioned: mentioned, Source: &eventsv1.SessionSource{
			Platform: "bluebubbles", Account: testAccount, ChatId: groupGUID, ChatType: "group", ChatName: "Family", UserId: ann, UserName: ann}}
	}
	withAtt := func(ev *eventsv1.MessageReceived, a ...*eventsv1.Attachment) *eventsv1.MessageReceived {
		ev.Attachments = a
		return ev
	}
	replying := dm("yes")
	replying.ReplyTo = &eventsv1.ReplyTo{MessageId: "ORIGINAL-GUID"}
	email := dm("from mail")
	email.Source.ChatId, email.Source.ChatName, email.Source.UserId, email.Source.UserName, email.Source.ChatIdAlt = "iMessage;-;ann@icloud.com", "ann@icloud.com", "ann@icloud.com", "ann@icloud.com", "ann@icloud.com"
	noChat := dm("no chat")
	noChat.Source.ChatId, noChat.Source.ChatIdAlt = ann, ""
	tahoe := dm("new prefix")
	tahoe.Source.ChatId = "any;-;+15551234567"
	for _, c := range []struct {
		name    string
		raw     []byte
		mention bool
		want    *eventsv1.MessageReceived
		key     string
		skip    string
		err     string
	}{
		{name: "dm", raw: body(map[string]any{"text": "  hello \n"}), want: dm("hello"), key: "agent:main:bluebubbles:dm:iMessage;-;+15551234567"},
		{name: "dm by email", raw: body(map[string]any{"text": "from mail", "handle": map[string]any{"address": "ann@icloud.com"},
			"chats": []any{map[string]any{"guid": "iMessage;-;ann@icloud.com"}}}), want: email, key: "agent:main:bluebubbles:dm:iMessage;-;ann@icloud.com"},
		// Hermes keys a DM by its chat guid when the payload has one
		// (chatGuid, else data.chats[0].guid), else by the sender.
		{name: "dm without a chat", raw: body(map[string]any{"text": "no chat", "chats": nil}), want: noChat, key: "agent:main:bluebubbles:dm:+15551234567"},
		{name: "dm with another guid prefix", raw: body(map[string]any{"text": "new prefix", "chats": []any{map[string]any{"guid": "any;-;+15551234567", "chatIdentifier": ann}}}),
			want: tahoe, key: "agent:main:bluebubbles:dm:any;-;+15551234567"},
		{name: "command", raw: body(map[string]any{"text": "/new"}), want: dm("/new"), key: "agent:main:bluebubbles:dm:iMessage;-;+15551234567"},
		{name: "reply", raw: body(map[string]any{"text": "yes", "threadOriginatorGuid": "ORIGINAL-GUID"}), want: replying},
		{name: "group", raw: body(map[string]any{"text": "hi all", "chats": groupChats("Family")}), want: group("hi all", false),
			key: "agent:main:bluebubbles:group:iMessage;+;chat493817263544:+15551234567"},
		{name: "group by isGroup and top-level chatGuid", raw: body(map[string]any{"text": "hi", "isGroup": true, "chatGuid": groupGUID, "chats": groupChats("Family")}),
			want: group("hi", false)},
		{name: "group mention stripped", mention: true, raw: body(map[string]any{"text": "Hermes, what's up", "chats": groupChats("Family")}),
			want: group("what's up", true)},
		{name: "group mention inside", mention: true, raw: body(map[string]any{"text": "ask @hermes agent", "chats": groupChats("Family")}),
			want: group("ask @hermes agent", true)},
		{name: "group without mention", mention: true, raw: body(map[string]any{"text": "hermesian", "chats": groupChats("Family")}), skip: "no mention"},
		{name: "dm needs no mention", mention: true, raw: body(map[string]any{"text": "hello"}), want: dm("hello")},
		{name: "image", raw: body(map[string]any{"text": "", "attachments": []any{map[string]any{"guid": "at_0_ABC", "mimeType": "image/jpeg", "transferName": "IMG_1.jpeg", "totalBytes": 2048}}}),
			want: withAtt(dm(""), &eventsv1.Attachment{Kind: eventsv1.AttachmentKind_ATTACHMENT_KIND_IMAGE, PlatformFileId: "at_0_ABC", MimeType: "image/jpeg", FileName: "IMG_1.jpeg", SizeBytes: 2048})},
		{name: "voice memo", raw: body(map[string]any{"text": "", "attachments": []any{map[string]any{"guid": "at_1_V", "mimeType": "audio/x-caf", "uti": "com.apple.coreaudio-format", "transferName": "Audio.caf"}}}),
			want: withAtt(dm(""), &eventsv1.Attachment{Kind: eventsv1.AttachmentKind_ATTACHMENT_KIND_VOICE, PlatformFileId: "at_1_V", MimeType: "audio/x-caf", FileName: "Audio.caf"})},
		{name: "own message", raw: body(map[string]any{"isFromMe": true}), skip: "own message"},
		{name: "tapback", raw: body(map[string]any{"associatedMessageType": 2001, "associatedMessageGuid": "p:0/X"}), skip: "tapback"},
		{name: "tapback removed, by name", raw: body(map[string]any{"associatedMessageType": "-love"}), skip: "tapback"},
		{name: "group renamed", raw: body(map[string]any{"itemType": 2, "text": ""}), skip: "group event"},
		{name: "empty", raw: body(map[string]any{"text": " "}), skip: "empty message"},
		{name: "updated message", raw: []byte(`{"type":"updated-message","data":{"guid":"x"}}`), skip: "other event"},
		{name: "typing", raw: []byte(`{"type":"typing-indicator","data":{"display":true,"guid":"iMessage;-;+1"}}`), skip: "other event"},
		{name: "no guid", raw: body(map[string]any{"guid": nil}), err: "without a guid"},
		{name: "no sender or chat", raw: body(map[string]any{"handle": nil, "chats": nil}), err: "without a sender"},
		{name: "not json", raw: []byte(`type=new-message`), err: "malformed"},
		{name: "no type", raw: []byte(`{"data":{}}`), err: "no event type"},
		{name: "data not an object", raw: []byte(`{"type":"new-message","data":[1]}`), err: "without a message object"},
		{name: "wrong field type", raw: []byte(`{"type":"new-message","data":{"guid":5}}`), err: "malformed"},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			in := incoming{}
			w, m, err := parseWebhook(c.raw)
			if err == nil {
				if m == nil {
					m = &message{}
				}
				in = normalize(w, m, testAccount, c.mention, pats)
			} else {
				in.err = err
			}
			switch {
			case c.err != "":
				if in.err == nil || !strings.Contains(in.err.Error(), c.err) {
					t.Fatalf("error %v, want %q", in.err, c.err)
				}
				return
			case in.err != nil:
				t.Fatal(in.err)
			case c.skip != "":
				if in.skip != c.skip || in.ev != nil {
					t.Fatalf("skip %q (event %v), want %q", in.skip, in.ev, c.skip)
				}
				return
			}
			in.ev.SentAt = nil
			if !proto.Equal(in.ev, c.want) {
				t.Fatalf("got  %s\nwant %s", prototext.Format(in.ev), prototext.Format(c.want))
			}
			if c.key != "" {
				if got := sessionkey.Build(in.ev.GetSource(), sessionkey.DefaultOptions()); got != c.key {
					t.Fatalf("session key %q, want Hermes's %q", got, c.key)
				}
			}
		})
	}
}

func TestDMChatID(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ guid, ident, sender, want string }{
		{dmGUID, ann, ann, ann},
		{dmGUID, "", "", ann},
		{"SMS;-;+15550001111", "", "", "+15550001111"},
		{"iMessage;-;", "", "x;y", "iMessage;-;"},
		{"", "", "ann@icloud.com", "ann@icloud.com"},
	} {
		if got := dmChatID(c.guid, c.ident, c.sender); got != c.want {
			t.Errorf("dmChatID(%q, %q, %q) = %q, want %q", c.guid, c.ident, c.sender, got, c.want)
		}
	}
}

func TestMentionPatterns(t *testing.T) {
	t.Parallel()
	var read Patterns
	if err := read.UnmarshalText([]byte(`["(?:^|\\W)@?amos\\b[,:]?"]`)); err != nil {
		t.Fatal(err)
	}
	custom, err := compilePatterns(read)
	if err != nil {
		t.Fatal(err)
	}
	if !matches(custom, "hey Amos") || matches(custom, "hermes") || stripMention(custom, "amos: go") != "go" {
		t.Fatal("custom JSON pattern not applied")
	}
	if err := read.UnmarshalText([]byte("bot\nhelper")); err != nil {
		t.Fatal(err)
	}
	lines, err := compilePatterns(read)
	if err != nil || len(lines) != 2 {
		t.Fatalf("newline-separated patterns: %d, %v", len(lines), err)
	}
	if _, err := compilePatterns([]string{"(?<!x)hermes"}); err == nil {
		t.Fatal("a pattern Go cannot compile was accepted")
	}
	def, _ := compilePatterns(nil)
	for text, want := range map[string]bool{"Hermes help": true, "@hermes agent: hi": true, "x@hermes": false, "hermesian": false, "ok HERMES": true} {
		if matches(def, text) != want {
			t.Errorf("default patterns on %q: %v, want %v", text, !want, want)
		}
	}
	if got := stripMention(def, "@Hermes agent: summarize this"); got != "summarize this" {
		t.Errorf("stripped %q", got)
	}
	if got := stripMention(def, "hermes"); got != "hermes" {
		t.Errorf("a text that is only the mention became %q", got)
	}
}

// TestMentionPatternsFromTheEnvironment: BLUEBUBBLES_MENTION_PATTERNS is
// read as Hermes reads it (gateway/config.py, then the adapter's
// _compile_mention_patterns), through the config loader: a JSON list is
// its patterns, commas and all; any other text is split at its line
// breaks and commas. The loader split the text on its commas first, so a
// JSON list of two patterns was two halves that stopped the gateway, and
// a text opening with "[" that is no JSON (a character class) was refused.
func TestMentionPatternsFromTheEnvironment(t *testing.T) {
	t.Parallel()
	aliases := map[string]string{"BLUEBUBBLES_SERVER_URL": "server_url", "BLUEBUBBLES_PASSWORD": "password",
		"BLUEBUBBLES_MENTION_PATTERNS": "mention_patterns"}
	server := []string{"BLUEBUBBLES_SERVER_URL=http://mac:1234", "BLUEBUBBLES_PASSWORD=pw"}
	for _, c := range []struct {
		name, value string
		want        []string
	}{
		{"json list", `["hey\\s+amos", "a{1,3}b"]`, []string{`(?i)hey\s+amos`, "(?i)a{1,3}b"}},
		{"commas", "amos, helper", []string{"(?i)amos", "(?i)helper"}},
		{"lines and commas", "amos\nhelper,bot", []string{"(?i)amos", "(?i)helper", "(?i)bot"}},
		{"a class, no json", "[Aa]mos", []string{"(?i)[Aa]mos"}},
		{"json string", `"amos,helper"`, []string{"(?i)amos", "(?i)helper"}},
		// Set to nothing, the list is empty: no wake word, where Hermes's
		// defaults were taken (Hermes takes them only when none is set).
		{"empty json list", `[]`, nil},
		{"blank patterns", " , \n", nil},
		{"json list of blanks", `["", " "]`, nil},
		{"empty json string", `""`, nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			cfg := Config{}
			environ := append([]string{"BLUEBUBBLES_MENTION_PATTERNS=" + c.value}, server...)
			if _, err := config.Load(config.Options{Environ: environ, Aliases: aliases}, &cfg); err != nil {
				t.Fatal(err)
			}
			got, err := compilePatterns(cfg.MentionPatterns)
			if err != nil {
				t.Fatal(err)
			}
			var exprs []string
			for _, re := range got {
				exprs = append(exprs, re.String())
			}
			if strings.Join(exprs, "\x00") != strings.Join(c.want, "\x00") {
				t.Errorf("patterns %q, want %q", exprs, c.want)
			}
		})
	}
	// In the YAML file, a list is a pattern an item, commas and all.
	path := filepath.Join(t.TempDir(), "config.yaml")
	if err := os.WriteFile(path, []byte("server_url: http://mac:1234\npassword: pw\nmention_patterns:\n  - 'hey, amos'\n  - '\\w{2,3}'\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := Config{}
	if _, err := config.Load(config.Options{Path: path, Environ: []string{}}, &cfg); err != nil {
		t.Fatal(err)
	}
	if got, err := compilePatterns(cfg.MentionPatterns); err != nil || len(got) != 2 || got[0].String() != "(?i)hey, amos" || got[1].String() != `(?i)\w{2,3}` {
		t.Errorf("YAML list: %v %v", got, err)
	}
	// In the YAML file, an empty list is no wake word; a key left empty
	// (null), as one not written, is Hermes's wake words.
	for yaml, want := range map[string]int{"mention_patterns: []\n": 0, "mention_patterns: ''\n": 0,
		"mention_patterns:\n": len(defaultMentionPatterns), "": len(defaultMentionPatterns)} {
		if err := os.WriteFile(path, []byte("server_url: http://mac:1234\npassword: pw\n"+yaml), 0o600); err != nil {
			t.Fatal(err)
		}
		cfg := Config{}
		if _, err := config.Load(config.Options{Path: path, Environ: []string{}}, &cfg); err != nil {
			t.Fatal(err)
		}
		if got, err := cfg.validate(); err != nil || len(got) != want {
			t.Errorf("YAML %q: %d patterns (%v), want %d", yaml, len(got), err, want)
		}
	}
	// A JSON list's item that is no text is refused with the reason.
	environ := append([]string{`BLUEBUBBLES_MENTION_PATTERNS=["amos", 3]`}, server...)
	if _, err := config.Load(config.Options{Environ: environ, Aliases: aliases}, &Config{}); err == nil || !strings.Contains(err.Error(), "not a pattern") {
		t.Errorf("a number in the list: %v", err)
	}
}

// FuzzParseWebhook: any body is an event the kit accepts, a skip, or an
// error; never a panic.
func FuzzParseWebhook(f *testing.F) {
	f.Add(string(body(nil)))
	f.Add(string(body(map[string]any{"chats": groupChats("G"), "text": "hermes hi"})))
	f.Add(string(body(map[string]any{"attachments": []any{map[string]any{"guid": "at", "mimeType": "image/png;;"}}})))
	f.Add(`{"type":"new-message","data":{"guid":"g","handle":{"address":"a;b"},"chats":[{"guid":"iMessage;-;"}]}}`)
	f.Add(`{"type":"new-message","data":{"guid":"g","text":"\ud800","associatedMessageType":0}}`)
	f.Add(`{"type":"updated-message","data":null}`)
	f.Add(`{"type":"new-message","data":"x"}`)
	f.Add("\xff\xfe")
	pats, _ := compilePatterns(nil)
	f.Fuzz(func(t *testing.T, raw string) {
		w, m, err := parseWebhook([]byte(raw))
		if err != nil {
			return
		}
		if m == nil {
			m = &message{}
		}
		for _, mention := range []bool{false, true} {
			in := normalize(w, m, testAccount, mention, pats)
			if in.ev == nil {
				if in.err == nil && in.skip == "" {
					t.Fatal("neither an event, a skip nor an error")
				}
				continue
			}
			if err := platform.CheckEvent(in.ev, "bluebubbles", testAccount, 1<<20); err != nil {
				t.Fatalf("normalized event refused by the kit: %v", err)
			}
			_ = sessionkey.Build(in.ev.GetSource(), sessionkey.DefaultOptions())
		}
	})
}
