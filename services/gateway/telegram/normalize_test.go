package telegram

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"

	"google.golang.org/protobuf/encoding/prototext"
	"google.golang.org/protobuf/proto"

	"github.com/switchboard-chat/switchboard/pkg/command"
	eventsv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/events/v1"
	"github.com/switchboard-chat/switchboard/pkg/platform"
)

func TestNormalizeKinds(t *testing.T) {
	t.Parallel()
	me := identity{id: testBotID, username: testUsername}
	g := gating{requireMention: true}
	for i, c := range kindCases() {
		t.Run(c.name, func(t *testing.T) {
			c.update["update_id"] = 1000 + i
			raw, _ := json.Marshal(c.update)
			out, err := parseUpdate(raw, me, g)
			if err != nil {
				t.Fatalf("parse: %v", err)
			}
			if c.want == nil {
				if out.ev != nil || out.skip == "" {
					t.Fatalf("want skipped, got %v (skip %q)", out.ev, out.skip)
				}
				return
			}
			want := proto.Clone(c.want).(*eventsv1.MessageReceived)
			want.EventId = strconv.Itoa(1000 + i)
			// A press's interaction is added as its query is held (handle).
			want.Interaction = nil
			if !proto.Equal(out.ev, want) {
				t.Fatalf("got  %s\nwant %s", prototext.Format(out.ev), prototext.Format(want))
			}
		})
	}
}

func TestMentionGatingOff(t *testing.T) {
	t.Parallel()
	raw := []byte(`{"update_id":5,"message":{"message_id":1,"date":1,"chat":{"id":-100,"type":"supergroup","title":"T"},"from":{"id":1,"is_bot":false,"first_name":"A"},"text":"chatter"}}`)
	me := identity{id: testBotID, username: testUsername}
	if out, _ := parseUpdate(raw, me, gating{requireMention: true}); out.ev != nil {
		t.Fatal("require_mention on: unmentioned group message published")
	}
	if out, _ := parseUpdate(raw, me, gating{requireMention: true, freeChats: map[string]bool{"-100": true}}); out.ev == nil {
		t.Fatal("free-response chat: message skipped")
	}
	out, _ := parseUpdate(raw, me, gating{})
	if out.ev == nil || out.ev.GetMentioned() {
		t.Fatalf("require_mention off: got %v, want published and not mentioned", out.ev)
	}
}

// TestMentionNeedsAnEntity: as in Hermes (its _message_mentions_bot,
// bug #12545), only Telegram's entities make a mention: the bot's handle
// in a group message's text without a mention entity (in code, in an
// address, or with the entities missing) is none, and under
// require_mention the message is not published; with the entity it is.
func TestMentionNeedsAnEntity(t *testing.T) {
	t.Parallel()
	me := identity{id: testBotID, username: testUsername}
	handle := "@" + testUsername
	message := func(text string, entities []obj) []byte {
		m := obj{"message_id": 9, "date": msgDate, "chat": group, "from": alice, "text": text}
		if entities != nil {
			m["entities"] = entities
		}
		raw, _ := json.Marshal(obj{"update_id": 77, "message": m})
		return raw
	}
	for _, c := range []struct {
		name    string
		raw     []byte
		publish bool
	}{
		{"handle without entities", message(handle+" hi", nil), false},
		{"handle in a caption without entities", func() []byte {
			raw, _ := json.Marshal(obj{"update_id": 77, "message": obj{"message_id": 9, "date": msgDate, "chat": group, "from": alice,
				"caption": handle + " look", "photo": []obj{{"file_id": "p1", "file_unique_id": "u1", "width": 1, "height": 1}}}})
			return raw
		}(), false},
		{"handle in code", message("use `"+handle+"` here", []obj{{"type": "code", "offset": 4, "length": len(handle) + 2}}), false},
		{"handle in an address", message("mail foo"+handle+".example", nil), false},
		{"handle with its mention entity", message(handle+" hi", []obj{{"type": "mention", "offset": 0, "length": len(handle)}}), true},
	} {
		t.Run(c.name, func(t *testing.T) {
			out, err := parseUpdate(c.raw, me, gating{requireMention: true})
			if err != nil {
				t.Fatalf("parse: %v", err)
			}
			if (out.ev != nil) != c.publish {
				t.Fatalf("published %v (skip %q), want published %v", out.ev != nil, out.skip, c.publish)
			}
		})
	}
}

// TestMessagesForOtherBots: as in Hermes, a group message that names
// other bots (an @mention of a bot's username, or "/cmd@other_bot") and
// not this one is left to them, even where every group message is
// published (require_mention off, a free-response chat) and when it
// replies to this bot; one that names this bot too, or only people, is
// published, and so is any DM.
func TestMessagesForOtherBots(t *testing.T) {
	t.Parallel()
	me := identity{id: testBotID, username: testUsername}
	mention := func(text, name string) obj {
		return obj{"type": "mention", "offset": strings.Index(text, "@"+name), "length": len(name) + 1}
	}
	message := func(chat obj, text string, entities []obj, mod func(obj)) []byte {
		m := obj{"message_id": 9, "date": msgDate, "chat": chat, "from": alice, "text": text, "entities": entities}
		if mod != nil {
			mod(m)
		}
		raw, _ := json.Marshal(obj{"update_id": 77, "message": m})
		return raw
	}
	replyToMe := func(m obj) {
		m["reply_to_message"] = obj{"message_id": 5, "date": msgDate, "chat": group, "from": botUser, "text": "earlier answer"}
	}
	free := gating{requireMention: true, freeChats: map[string]bool{"-1002285219667": true}}
	for _, c := range []struct {
		name    string
		raw     []byte
		g       gating
		publish bool
	}{
		{"another bot named, mention not required", message(group, "@other_bot what time is it",
			[]obj{mention("@other_bot what time is it", "other_bot")}, nil), gating{}, false},
		{"another bot named, free-response chat", message(group, "@OtherBot hi",
			[]obj{mention("@OtherBot hi", "OtherBot")}, nil), free, false},
		{"another bot named in a reply to this bot", message(group, "@other_bot can you check this?",
			[]obj{mention("@other_bot can you check this?", "other_bot")}, replyToMe), gating{requireMention: true}, false},
		{"another bot's command inside the text", message(group, "try /help@other_bot",
			[]obj{{"type": "bot_command", "offset": 4, "length": 15}}, nil), gating{}, false},
		{"this bot named too", message(group, "@other_bot and @"+testUsername+" compare notes",
			[]obj{mention("@other_bot and @"+testUsername, "other_bot"), mention("@other_bot and @"+testUsername, testUsername)}, nil), gating{requireMention: true}, true},
		{"a person named", message(group, "@alice look",
			[]obj{mention("@alice look", "alice")}, nil), gating{}, true},
		{"a person named in a reply to this bot", message(group, "@alice see this",
			[]obj{mention("@alice see this", "alice")}, replyToMe), gating{requireMention: true}, true},
		{"another bot named in a DM", message(dmChat, "@other_bot is better?",
			[]obj{mention("@other_bot is better?", "other_bot")}, nil), gating{requireMention: true}, true},
		// exclusive_bot_mentions off (TELEGRAM_EXCLUSIVE_BOT_MENTIONS=false,
		// as Hermes's): naming another bot leaves the usual rules.
		{"another bot named, not exclusive, mention not required", message(group, "@other_bot what time is it",
			[]obj{mention("@other_bot what time is it", "other_bot")}, nil), gating{otherBotsToo: true}, true},
		{"another bot named, not exclusive, in a reply to this bot", message(group, "@other_bot can you check this?",
			[]obj{mention("@other_bot can you check this?", "other_bot")}, replyToMe), gating{requireMention: true, otherBotsToo: true}, true},
		{"another bot named, not exclusive, mention required", message(group, "@other_bot what time is it",
			[]obj{mention("@other_bot what time is it", "other_bot")}, nil), gating{requireMention: true, otherBotsToo: true}, false},
		// As Hermes's, "/cmd@this_bot" anywhere in the text names this bot.
		{"this bot's command inside the text, another bot named", message(group, "@other_bot or /help@"+testUsername,
			[]obj{mention("@other_bot or /help@"+testUsername, "other_bot"), {"type": "bot_command", "offset": 14, "length": len("/help@" + testUsername)}}, nil), gating{requireMention: true}, true},
		{"this bot's command inside the text, mention required", message(group, "try /help@"+testUsername,
			[]obj{{"type": "bot_command", "offset": 4, "length": len("/help@" + testUsername)}}, nil), gating{requireMention: true}, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			out, err := parseUpdate(c.raw, me, c.g)
			if err != nil {
				t.Fatalf("parse: %v", err)
			}
			if (out.ev != nil) != c.publish {
				t.Fatalf("published %v (skip %q), want published %v", out.ev != nil, out.skip, c.publish)
			}
		})
	}
}

// TestMentionPatterns: as Hermes's mention_patterns, a group message
// whose text or caption matches a wake word counts as a mention of the
// bot (published under require_mention, marked mentioned); one that
// matches none is still gated; a DM is published whatever it says.
func TestMentionPatterns(t *testing.T) {
	t.Parallel()
	me := identity{id: testBotID, username: testUsername}
	pats, err := mentionPatterns([]string{`\bchompy\b`, `^hey\s+team\b`})
	if err != nil {
		t.Fatal(err)
	}
	g := gating{requireMention: true, patterns: pats}
	message := func(chat obj, m obj) []byte {
		m["message_id"], m["date"], m["chat"], m["from"] = 9, msgDate, chat, alice
		raw, _ := json.Marshal(obj{"update_id": 77, "message": m})
		return raw
	}
	photo := []obj{{"file_id": "p1", "file_unique_id": "u1", "width": 1, "height": 1}}
	for _, c := range []struct {
		name      string
		raw       []byte
		mentioned bool // published and marked mentioned; false: skipped
	}{
		{"wake word", message(group, obj{"text": "Chompy, what is the build status?"}), true},
		{"second pattern", message(group, obj{"text": "HEY   team who is on call"}), true},
		{"wake word in a caption", message(group, obj{"caption": "chompy look at this", "photo": photo}), true},
		{"no wake word", message(group, obj{"text": "chompyness is a word?"}), false},
		{"pattern anchored elsewhere", message(group, obj{"text": "well hey team"}), false},
	} {
		t.Run(c.name, func(t *testing.T) {
			out, err := parseUpdate(c.raw, me, g)
			if err != nil {
				t.Fatalf("parse: %v", err)
			}
			if c.mentioned != (out.ev != nil) || (out.ev != nil && !out.ev.GetMentioned()) {
				t.Fatalf("got %v (skip %q), want published and mentioned %v", out.ev, out.skip, c.mentioned)
			}
		})
	}
	if out, _ := parseUpdate(message(dmChat, obj{"text": "no wake word here"}), me, g); out.ev == nil {
		t.Fatal("a DM without a wake word was skipped")
	}
	// Without patterns (the default), a wake word is only text.
	if out, _ := parseUpdate(message(group, obj{"text": "chompy, status?"}), me, gating{requireMention: true}); out.ev != nil {
		t.Fatal("no mention patterns configured: a group message without a mention was published")
	}
}

// TestBotMentionStripped: as Hermes's _clean_bot_trigger_text, the
// agent reads a message without "@<bot username>" (any case, with the
// commas, colons, hyphens and spaces after it), in groups and DMs, in
// text and captions; a text that is only the mention stays, and so does
// a longer name ("@<username>2") or another bot's.
func TestBotMentionStripped(t *testing.T) {
	t.Parallel()
	me := identity{id: testBotID, username: testUsername}
	handle := "@" + testUsername
	upper := "@" + strings.ToUpper(testUsername)
	for _, c := range []struct {
		in, want string
	}{
		{handle + " status?", "status?"},
		{handle + ", summarize this", "summarize this"},
		{upper + ":- go", "go"},
		{"please " + handle + " look at this", "please look at this"},
		{"ask " + handle, "ask"},
		{handle + " /new", "/new"},
		{handle, handle},
		{handle + " ,", ","},
		{handle + "2 hi", handle + "2 hi"},
		{handle + "_x hi", handle + "_x hi"},
		{"@other_bot hi", "@other_bot hi"},
		{"mail foo" + handle + ".example", "mail foo.example"},
		{handle + "\u00a0héllo " + handle + "\t", "héllo"},
	} {
		if got := stripBotMention(c.in, testUsername); got != c.want {
			t.Errorf("stripBotMention(%q) = %q, want %q", c.in, got, c.want)
		}
	}
	if got := stripBotMention(handle+" hi", ""); got != handle+" hi" {
		t.Errorf("without a known username the text changed: %q", got)
	}
	// Through normalize: a DM, and a caption.
	raw, _ := json.Marshal(obj{"update_id": 78, "message": obj{"message_id": 9, "date": msgDate, "chat": dmChat, "from": alice,
		"text": handle + " hello"}})
	if out, _ := parseUpdate(raw, me, gating{}); out.ev.GetText() != "hello" {
		t.Errorf("DM text %q, want hello", out.ev.GetText())
	}
	raw, _ = json.Marshal(obj{"update_id": 79, "message": obj{"message_id": 9, "date": msgDate, "chat": group, "from": alice,
		"caption": handle + ": what is this?", "caption_entities": []obj{{"type": "mention", "offset": 0, "length": len(handle)}},
		"photo": []obj{{"file_id": "p1", "file_unique_id": "u1", "width": 1, "height": 1}}}})
	out, _ := parseUpdate(raw, me, gating{requireMention: true})
	if out.ev.GetText() != "what is this?" || !out.ev.GetMentioned() {
		t.Errorf("caption event %v, want text %q and mentioned", out.ev, "what is this?")
	}
	// The photo's caption is the text as the agent reads it: the worker
	// names an attachment's caption that differs from the message's text
	// ("[Attachment: image @bot: what is this?]"), so the agent read the
	// caption twice, the mention in it.
	if atts := out.ev.GetAttachments(); len(atts) != 1 || atts[0].GetCaption() != "what is this?" {
		t.Errorf("caption event's attachments %v, want one captioned %q", atts, "what is this?")
	}
}

// TestCommandsKeepTheBotMention: a command's text reaches the router as
// Hermes's _handle_command passes it, not cleaned of the bot's mention
// (only text and captions go through _clean_bot_trigger_text), so Hermes's
// parser reads "/title @bot Plans" as /title with the arguments
// "@bot Plans"; "/cmd@bot" loses only its suffix, as get_command drops it,
// and "@bot /cmd" and a captioned command are cleaned as text.
func TestCommandsKeepTheBotMention(t *testing.T) {
	t.Parallel()
	me := identity{id: testBotID, username: testUsername}
	handle := "@" + testUsername
	cmd := func(n int) obj { return obj{"type": "bot_command", "offset": 0, "length": n} }
	at := func(offset int) obj { return obj{"type": "mention", "offset": offset, "length": len(handle)} }
	for _, c := range []struct {
		name     string
		message  obj
		want     string
		wantCmd  string
		wantArgs string
	}{
		{"mention after the command", obj{"chat": dmChat, "text": "/title " + handle + " Plans",
			"entities": []obj{cmd(6), at(7)}}, "/title " + handle + " Plans", "title", handle + " Plans"},
		{"mention alone after the command", obj{"chat": group, "text": "/new " + handle,
			"entities": []obj{cmd(4), at(5)}}, "/new " + handle, "new", handle},
		{"command at the bot, mention after", obj{"chat": group, "text": "/queue" + handle + " " + handle + ", later",
			"entities": []obj{cmd(6 + len(handle)), at(7 + len(handle))}}, "/queue " + handle + ", later", "queue", handle + ", later"},
		{"command at the bot", obj{"chat": group, "text": "/queue" + handle + " later",
			"entities": []obj{cmd(6 + len(handle))}}, "/queue later", "queue", "later"},
		{"mention before the command", obj{"chat": group, "text": handle + " /new",
			"entities": []obj{at(0), {"type": "bot_command", "offset": len(handle) + 1, "length": 4}}}, "/new", "new", ""},
		{"captioned command", obj{"chat": group, "caption": "/title " + handle + " Plans",
			"caption_entities": []obj{cmd(6), at(7)},
			"photo":            []obj{{"file_id": "p1", "file_unique_id": "u1", "width": 1, "height": 1}}}, "/title Plans", "title", "Plans"},
	} {
		t.Run(c.name, func(t *testing.T) {
			m := obj{"message_id": 9, "date": msgDate, "from": alice}
			for k, v := range c.message {
				m[k] = v
			}
			raw, _ := json.Marshal(obj{"update_id": 80, "message": m})
			out, err := parseUpdate(raw, me, gating{requireMention: true})
			if err != nil || out.ev == nil {
				t.Fatalf("not published: %v %q", err, out.skip)
			}
			if got := out.ev.GetText(); got != c.want {
				t.Errorf("text %q, want %q", got, c.want)
			}
			parsed, ok := command.Parse(out.ev.GetText(), "telegram", testUsername)
			if !ok || parsed.Name != c.wantCmd || parsed.Args != c.wantArgs {
				t.Errorf("read as /%s %q (%v), want /%s %q", parsed.Name, parsed.Args, ok, c.wantCmd, c.wantArgs)
			}
		})
	}
}

func TestMalformedUpdates(t *testing.T) {
	t.Parallel()
	me := identity{id: testBotID, username: testUsername}
	for _, raw := range []string{`{"update_id":1,"message":"nope"}`, `{"update_id":1,"message":{"message_id":1}}`, `[1,2]`, `{`,
		`{"message":{"message_id":1,"date":1,"chat":{"id":5,"type":"private"},"from":{"id":5,"first_name":"A"},"text":"no update_id"}}`,
		`{"update_id":null,"message":{"message_id":1,"date":1,"chat":{"id":5,"type":"private"},"text":"null update_id"}}`} {
		if _, err := parseUpdate([]byte(raw), me, gating{}); err == nil {
			t.Errorf("%s: parsed without error", raw)
		}
	}
}

func FuzzParseUpdate(f *testing.F) {
	me := identity{id: testBotID, username: testUsername}
	for i, c := range kindCases() {
		c.update["update_id"] = i
		raw, _ := json.Marshal(c.update)
		f.Add(raw)
	}
	pats, err := mentionPatterns([]string{`\bchompy\b`})
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		out, err := parseUpdate(raw, me, gating{requireMention: true, patterns: pats})
		// The query of a press that fails to decode is answered by the
		// id read alone: read from any input, and the parser's own where
		// the update decodes.
		id := queryID(raw)
		if err != nil {
			return
		}
		if out.callbackID != "" && id != out.callbackID {
			t.Fatalf("query id read alone %q, decoded %q", id, out.callbackID)
		}
		if out.ev == nil && out.skip == "" {
			t.Fatal("neither an event nor a skip reason")
		}
		if out.ev == nil {
			return
		}
		if out.ev.GetSource().GetChatId() == "" || out.ev.GetEventId() == "" {
			t.Fatalf("event without chat or id: %v", out.ev)
		}
		// The poller confirms updates by update_id: an update that gives
		// an event has one, and it is the event id.
		if id, ok := updateID(raw); !ok || strconv.FormatInt(id, 10) != out.ev.GetEventId() {
			t.Fatalf("event %q from an update whose update_id reads %d, %v", out.ev.GetEventId(), id, ok)
		}
		// Everything normalized passes the kit's inbound check (it can be
		// published; a failing publish would stall the poller).
		if err := platform.CheckEvent(out.ev, "telegram", "", 1<<20); err != nil {
			t.Fatalf("normalized event refused: %v", err)
		}
	})
}

// FuzzStripBotMention: taking the bot's mention out of any text never
// panics, never lengthens it, keeps valid UTF-8 valid, and leaves a text
// without an "@" as it is.
func FuzzStripBotMention(f *testing.F) {
	for _, s := range []string{"@" + testUsername + " hi", "a @" + strings.ToUpper(testUsername) + ",: b", "@" + testUsername, "x@" + testUsername + "é", "\xff@" + testUsername} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, text string) {
		got := stripBotMention(text, testUsername)
		if len(got) > len(text) || (utf8.ValidString(text) && !utf8.ValidString(got)) || (!strings.Contains(text, "@") && got != text) {
			t.Fatalf("stripBotMention(%q) = %q", text, got)
		}
	})
}

// FuzzUpdatesAnswer: any getUpdates answer decodes to updates or an API
// error whose flood wait is bounded, never a panic.
func FuzzUpdatesAnswer(f *testing.F) {
	f.Add(200, []byte(`{"ok":true,"result":[{"update_id":1,"message":{"message_id":1}}]}`))
	f.Add(429, []byte(`{"ok":false,"error_code":429,"description":"Too Many Requests: retry after 5","parameters":{"retry_after":5}}`))
	f.Add(409, []byte(`{"ok":false,"description":"Conflict"}`))
	f.Add(429, []byte(`{"ok":false,"error_code":429,"parameters":{"retry_after":9223372036}}`))
	f.Add(502, []byte(`<html>bad gateway</html>`))
	f.Add(200, []byte(`{"ok":true,"result":null}`))
	f.Fuzz(func(t *testing.T, status int, data []byte) {
		updates, err := decodeUpdates(status, data)
		if err == nil {
			for _, u := range updates {
				if !json.Valid(u) {
					t.Fatalf("update %q is not JSON", u)
				}
			}
			return
		}
		if updates != nil {
			t.Fatal("updates with an error")
		}
		var ae *apiError
		if errors.As(err, &ae) {
			if ae.RetryAfter < 0 || ae.RetryAfter > maxRetryAfter {
				t.Fatalf("flood wait %v", ae.RetryAfter)
			}
			if ae.Code == 0 && status != 0 {
				t.Fatalf("API error without a code (HTTP %d)", status)
			}
		}
	})
}

// FuzzWebhookSecret: a webhook call passes only with the exact secret.
func FuzzWebhookSecret(f *testing.F) {
	f.Add("s3cret", "s3cret")
	f.Add("s3cret", "S3CRET")
	f.Add("", "s3cret")
	f.Add("s3cret ", "s3cret")
	f.Fuzz(func(t *testing.T, header, secret string) {
		ok := secretOK(header, secret)
		if secret == "" && !ok {
			t.Fatal("no secret configured, call refused")
		}
		if secret != "" && ok != (header == secret) {
			t.Fatalf("header %q with secret %q: passed %v", header, secret, ok)
		}
	})
}

// TestWriteFuzzSeeds keeps testdata/fuzz in step with the kind table.
func TestWriteFuzzSeeds(t *testing.T) {
	if os.Getenv("UPDATE_FUZZ_SEEDS") == "" {
		t.Skip("set UPDATE_FUZZ_SEEDS=1 to rewrite the seed corpus")
	}
	dir := filepath.Join("testdata", "fuzz", "FuzzParseUpdate")
	_ = os.MkdirAll(dir, 0o755)
	for i, c := range kindCases() {
		c.update["update_id"] = i
		raw, _ := json.Marshal(c.update)
		body := "go test fuzz v1\n[]byte(" + strconv.Quote(string(raw)) + ")\n"
		if err := os.WriteFile(filepath.Join(dir, c.name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// An anonymous group administrator's message (from @GroupAnonymousBot,
// sender_chat the group) is a person's, not a bot's: the router would
// refuse a bot. Another bot's message stays a bot's.
func TestAnonymousAdminIsNotABot(t *testing.T) {
	t.Parallel()
	me := identity{id: testBotID, username: testUsername}
	for _, c := range []struct {
		name, raw string
		bot       bool
	}{
		{"anonymous admin", `{"update_id":7,"message":{"message_id":1,"date":1,"chat":{"id":-100123,"type":"supergroup","title":"T"},"sender_chat":{"id":-100123,"type":"supergroup","title":"T"},"from":{"id":1087968824,"is_bot":true,"first_name":"Group","username":"GroupAnonymousBot"},"text":"hi"}}`, false},
		{"placeholder for another chat", `{"update_id":8,"message":{"message_id":2,"date":1,"chat":{"id":-100123,"type":"supergroup","title":"T"},"sender_chat":{"id":-100999,"type":"channel","title":"C"},"from":{"id":1087968824,"is_bot":true,"first_name":"Group"},"text":"hi"}}`, true},
		{"a bot", `{"update_id":9,"message":{"message_id":3,"date":1,"chat":{"id":-100123,"type":"supergroup","title":"T"},"from":{"id":555,"is_bot":true,"first_name":"Other"},"text":"hi"}}`, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			out, err := parseUpdate([]byte(c.raw), me, gating{})
			if err != nil || out.ev == nil {
				t.Fatalf("parse: %v %v (skip %q)", out.ev, err, out.skip)
			}
			if src := out.ev.GetSource(); src.GetIsBot() != c.bot {
				t.Fatalf("is_bot %v, want %v (source %v)", src.GetIsBot(), c.bot, src)
			}
		})
	}
}
