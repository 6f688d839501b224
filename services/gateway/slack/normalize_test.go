package slack

import (
	"bytes"
	"encoding/json"
	"errors"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	slackapi "github.com/slack-go/slack"

	eventsv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/events/v1"
	"github.com/switchboard-chat/switchboard/pkg/platform"
	"github.com/switchboard-chat/switchboard/pkg/sessionkey"
	"github.com/switchboard-chat/switchboard/services/gateway/slack/slackfake"
)

var me = identity{Account: "U0BOT", BotUserID: "U0BOT", BotID: "B0BOT"}

// TestMentionGate: with a mention required (Hermes's default), a channel
// message without one is returned unaddressed, for the caller to admit
// when its thread is one the bot answered.
func TestMentionGate(t *testing.T) {
	f := &slackfake.Fake{TeamID: "T0WORKSPACE", AppID: "A0APP", BotUserID: "U0BOT"}
	gated := identity{Account: "U0BOT", BotUserID: "U0BOT", BotID: "B0BOT", RequireMention: true, FreeChannels: map[string]bool{"C0FREE": true}}
	for _, c := range []struct {
		name string
		ev   slackfake.Event
		why  skip
		// react: Hermes's Slack adapter reacts to it (a DM, a group DM
		// or a mention of the bot), when a turn answers it.
		react bool
	}{
		{"channel message", slackfake.Event{Channel: "C0CHANNEL", ChannelType: "channel", User: "U1", Text: "hi", TS: "1.1"}, skipUnaddressed, false},
		{"thread reply", slackfake.Event{Channel: "C0CHANNEL", ChannelType: "channel", User: "U1", Text: "hi", TS: "2.1", ThreadTS: "1.1"}, skipUnaddressed, false},
		{"thread reply with a mention", slackfake.Event{Channel: "C0CHANNEL", ChannelType: "channel", User: "U1", Text: "hi <@U0BOT>", TS: "2.1", ThreadTS: "1.1"}, "", true},
		{"mention", slackfake.Event{Channel: "C0CHANNEL", ChannelType: "channel", User: "U1", Text: "<@U0BOT> hi", TS: "1.1"}, "", true},
		{"mention of someone else", slackfake.Event{Channel: "C0CHANNEL", ChannelType: "channel", User: "U1", Text: "<@U0OTHER> hi", TS: "1.1"}, skipUnaddressed, false},
		{"app_mention", slackfake.Event{Type: "app_mention", Channel: "C0CHANNEL", User: "U1", Text: "<@U0BOT> hi", TS: "1.1"}, "", true},
		{"free-response channel", slackfake.Event{Channel: "C0FREE", ChannelType: "channel", User: "U1", Text: "hi", TS: "1.1"}, "", false},
		{"free-response channel, mention", slackfake.Event{Channel: "C0FREE", ChannelType: "channel", User: "U1", Text: "<@U0BOT> hi", TS: "1.1"}, "", true},
		{"dm", slackfake.Event{Channel: "D0DM", ChannelType: "im", User: "U1", Text: "hi", TS: "1.1"}, "", true},
		{"dm thread", slackfake.Event{Channel: "D0DM", ChannelType: "im", User: "U1", Text: "hi", TS: "2.1", ThreadTS: "1.1"}, "", true},
		{"dm without channel type", slackfake.Event{Channel: "D0DM", User: "U1", Text: "hi", TS: "1.1"}, "", true},
		{"group dm", slackfake.Event{Channel: "G0MPIM", ChannelType: "mpim", User: "U1", Text: "hi", TS: "1.1"}, "", true},
	} {
		t.Run(c.name, func(t *testing.T) {
			ev, why, err := normalize(f.Callback("Ev1", c.ev), gated)
			if err != nil || ev == nil || why != c.why {
				t.Fatalf("got %v %q %v, want the event and %q", ev, why, err, c.why)
			}
			if ev.GetNoReaction() == c.react {
				t.Errorf("no_reaction %v, want %v", ev.GetNoReaction(), !c.react)
			}
		})
	}
	// With no mention required every channel message is answered; still
	// only those that mention the bot take reactions.
	open := gated
	open.RequireMention = false
	ev, why, err := normalize(f.Callback("Ev1", slackfake.Event{Channel: "C0CHANNEL", ChannelType: "channel", User: "U1", Text: "hi", TS: "1.1"}), open)
	if err != nil || why != "" || !ev.GetNoReaction() {
		t.Fatalf("require_mention off: got %v %q %v, want the event, with no reaction", ev, why, err)
	}
}

// TestChannelMessageStartsItsThread: as in Hermes, a channel message
// outside a thread is keyed by the thread it starts (its own ts) and
// answered there, so the replies in that thread, from anyone, reach the
// same session; the key is Hermes's byte for byte. With
// dm_top_level_threads_as_sessions off (here) a DM keeps one session and
// is answered where it was written.
func TestChannelMessageStartsItsThread(t *testing.T) {
	f := &slackfake.Fake{TeamID: "T0WORKSPACE", AppID: "A0APP", BotUserID: "U0BOT"}
	gated := identity{Account: "U0BOT", BotUserID: "U0BOT", BotID: "B0BOT", RequireMention: true}
	for _, c := range []struct {
		name  string
		ev    slackfake.Event
		key   string
		reply string // the thread the answer goes to
	}{
		{"mention in a channel", slackfake.Event{Type: "app_mention", Channel: "C0CHANNEL", User: "U0USER01", Text: "<@U0BOT> plan the trip", TS: "1.1"},
			"agent:main:slack:group:T0WORKSPACE:C0CHANNEL:1.1", "1.1"},
		{"its author's reply in its thread", slackfake.Event{Channel: "C0CHANNEL", ChannelType: "channel", User: "U0USER01", Text: "and the hotel?", TS: "2.1", ThreadTS: "1.1"},
			"agent:main:slack:group:T0WORKSPACE:C0CHANNEL:1.1", "1.1"},
		{"someone else's reply in its thread", slackfake.Event{Channel: "C0CHANNEL", ChannelType: "channel", User: "U0USER02", Text: "<@U0BOT> add me", TS: "3.1", ThreadTS: "1.1"},
			"agent:main:slack:group:T0WORKSPACE:C0CHANNEL:1.1", "1.1"},
		{"another mention in the channel", slackfake.Event{Channel: "C0CHANNEL", ChannelType: "channel", User: "U0USER01", Text: "<@U0BOT> new topic", TS: "4.1"},
			"agent:main:slack:group:T0WORKSPACE:C0CHANNEL:4.1", "4.1"},
		{"dm", slackfake.Event{Channel: "D0DM", ChannelType: "im", User: "U0USER01", Text: "hi", TS: "5.1"},
			"agent:main:slack:dm:T0WORKSPACE:D0DM", ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			ev, _, err := normalize(f.Callback("Ev1", c.ev), gated)
			if err != nil || ev == nil {
				t.Fatalf("got %v, %v; want the event", ev, err)
			}
			if got := sessionkey.Build(ev.GetSource(), sessionkey.DefaultOptions()); got != c.key {
				t.Errorf("key %s, want %s", got, c.key)
			}
			if got := sessionkey.ReplyThread(ev.GetSource()); got != c.reply {
				t.Errorf("answered in thread %q, want %q", got, c.reply)
			}
		})
	}
}

// TestDMTopLevelThreadsAsSessions: as Hermes's
// dm_top_level_threads_as_sessions (on by default), a DM message outside
// a thread (a group DM's too) is keyed by the thread it starts, its own
// ts, and answered there, so each top-level DM is a session of its own
// and a reply in its thread continues it; the key is Hermes's byte for
// byte. Off, as Hermes's legacy behaviour, a DM's top level is one
// session, answered at the top level. A reply in a DM thread is keyed
// by that thread either way.
func TestDMTopLevelThreadsAsSessions(t *testing.T) {
	f := &slackfake.Fake{TeamID: "T0WORKSPACE", AppID: "A0APP", BotUserID: "U0BOT"}
	for _, c := range []struct {
		name  string
		on    bool
		ev    slackfake.Event
		key   string
		reply string // the thread the answer goes to
	}{
		{"on: top-level dm", true, slackfake.Event{Channel: "D0DM", ChannelType: "im", User: "U0USER01", Text: "hi", TS: "1234567890.000001"},
			"agent:main:slack:dm:T0WORKSPACE:D0DM:1234567890.000001", "1234567890.000001"},
		{"on: another top-level dm", true, slackfake.Event{Channel: "D0DM", ChannelType: "im", User: "U0USER01", Text: "new topic", TS: "1234567890.000009"},
			"agent:main:slack:dm:T0WORKSPACE:D0DM:1234567890.000009", "1234567890.000009"},
		{"on: reply in its thread", true, slackfake.Event{Channel: "D0DM", ChannelType: "im", User: "U0USER01", Text: "and?", TS: "1234567890.000005", ThreadTS: "1234567890.000001"},
			"agent:main:slack:dm:T0WORKSPACE:D0DM:1234567890.000001", "1234567890.000001"},
		{"on: thread parent", true, slackfake.Event{Channel: "D0DM", ChannelType: "im", User: "U0USER01", Text: "hi", TS: "1234567890.000001", ThreadTS: "1234567890.000001"},
			"agent:main:slack:dm:T0WORKSPACE:D0DM:1234567890.000001", "1234567890.000001"},
		{"on: dm without channel type", true, slackfake.Event{Channel: "D0DM", User: "U0USER01", Text: "hi", TS: "1234567890.000001"},
			"agent:main:slack:dm:T0WORKSPACE:D0DM:1234567890.000001", "1234567890.000001"},
		{"on: top-level group dm", true, slackfake.Event{Channel: "G0MPIM", ChannelType: "mpim", User: "U0USER01", Text: "hi", TS: "1234567890.000001"},
			"agent:main:slack:dm:T0WORKSPACE:G0MPIM:1234567890.000001", "1234567890.000001"},
		{"on: channel message unchanged", true, slackfake.Event{Type: "app_mention", Channel: "C0CHANNEL", User: "U0USER01", Text: "<@U0BOT> hi", TS: "1234567890.000001"},
			"agent:main:slack:group:T0WORKSPACE:C0CHANNEL:1234567890.000001", "1234567890.000001"},
		{"off: top-level dm", false, slackfake.Event{Channel: "D0DM", ChannelType: "im", User: "U0USER01", Text: "hi", TS: "1234567890.000001"},
			"agent:main:slack:dm:T0WORKSPACE:D0DM", ""},
		{"off: another top-level dm", false, slackfake.Event{Channel: "D0DM", ChannelType: "im", User: "U0USER01", Text: "new topic", TS: "1234567890.000009"},
			"agent:main:slack:dm:T0WORKSPACE:D0DM", ""},
		{"off: reply in a thread", false, slackfake.Event{Channel: "D0DM", ChannelType: "im", User: "U0USER01", Text: "and?", TS: "1234567890.000005", ThreadTS: "1234567890.000001"},
			"agent:main:slack:dm:T0WORKSPACE:D0DM:1234567890.000001", "1234567890.000001"},
		{"off: top-level group dm", false, slackfake.Event{Channel: "G0MPIM", ChannelType: "mpim", User: "U0USER01", Text: "hi", TS: "1234567890.000001"},
			"agent:main:slack:dm:T0WORKSPACE:G0MPIM", ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			id := identity{Account: "U0BOT", BotUserID: "U0BOT", BotID: "B0BOT", RequireMention: true, DMThreads: c.on}
			ev, why, err := normalize(f.Callback("Ev1", c.ev), id)
			if err != nil || ev == nil || why != "" {
				t.Fatalf("got %v %q %v; want the event", ev, why, err)
			}
			if got := sessionkey.Build(ev.GetSource(), sessionkey.DefaultOptions()); got != c.key {
				t.Errorf("key %s, want %s", got, c.key)
			}
			if got := sessionkey.ReplyThread(ev.GetSource()); got != c.reply {
				t.Errorf("answered in thread %q, want %q", got, c.reply)
			}
			if ev.GetMessageId() != c.ev.TS {
				t.Errorf("message id %s, want %s", ev.GetMessageId(), c.ev.TS)
			}
		})
	}
}

func TestNormalize(t *testing.T) {
	f := &slackfake.Fake{TeamID: "T0WORKSPACE", AppID: "A0APP", BotUserID: "U0BOT"}
	cases := []struct {
		name    string
		ev      slackfake.Event
		id      identity
		skip    bool
		key     string // session key with default options
		text    string
		mention bool
		files   int
		bot     bool // marked is_bot
	}{
		{name: "channel message starts its thread", ev: slackfake.Event{Channel: "C0CHANNEL", ChannelType: "channel", User: "U0USER01", Text: "hi", TS: "1.1"},
			key: "agent:main:slack:group:T0WORKSPACE:C0CHANNEL:1.1", text: "hi"},
		{name: "dm", ev: slackfake.Event{Channel: "D0DM", ChannelType: "im", User: "U0USER01", Text: "hi", TS: "1.1"},
			key: "agent:main:slack:dm:T0WORKSPACE:D0DM", text: "hi", mention: true},
		{name: "dm in a thread", ev: slackfake.Event{Channel: "D0DM", ChannelType: "im", User: "U0USER01", Text: "hi", TS: "2.1", ThreadTS: "1.1"},
			key: "agent:main:slack:dm:T0WORKSPACE:D0DM:1.1", text: "hi", mention: true},
		{name: "group dm (mpim) is a dm, as in Hermes", ev: slackfake.Event{Channel: "G0MPIM", ChannelType: "mpim", User: "U0USER01", Text: "hi", TS: "1.1"},
			key: "agent:main:slack:dm:T0WORKSPACE:G0MPIM", text: "hi", mention: true},
		{name: "channel thread is shared", ev: slackfake.Event{Channel: "C0CHANNEL", ChannelType: "channel", User: "U0USER01", Text: "hi", TS: "2.1", ThreadTS: "1.1"},
			key: "agent:main:slack:group:T0WORKSPACE:C0CHANNEL:1.1", text: "hi"},
		{name: "thread parent is its thread's", ev: slackfake.Event{Channel: "C0CHANNEL", ChannelType: "channel", User: "U0USER01", Text: "hi", TS: "1.1", ThreadTS: "1.1"},
			key: "agent:main:slack:group:T0WORKSPACE:C0CHANNEL:1.1", text: "hi"},
		{name: "app mention stripped", ev: slackfake.Event{Type: "app_mention", Channel: "C0CHANNEL", User: "U0USER01", Text: "<@U0BOT>  !new  please", TS: "1.1"},
			key: "agent:main:slack:group:T0WORKSPACE:C0CHANNEL:1.1", text: "!new  please", mention: true},
		// As Hermes, only the mention goes: the lines and indentation of
		// code the user pasted stay as written.
		{name: "a mention keeps the message's lines", ev: slackfake.Event{Type: "app_mention", Channel: "C0CHANNEL", User: "U0USER01", Text: "<@U0BOT>  why does this fail?\n```\nfunc f() {\n\treturn  nil\n}\n```\n", TS: "1.1"},
			key: "agent:main:slack:group:T0WORKSPACE:C0CHANNEL:1.1", text: "why does this fail?\n```\nfunc f() {\n\treturn  nil\n}\n```", mention: true},
		{name: "a mention inside the text", ev: slackfake.Event{Channel: "C0CHANNEL", ChannelType: "channel", User: "U0USER01", Text: "so <@U0BOT|hermes> what now?\n• a\n• b", TS: "1.1"},
			key: "agent:main:slack:group:T0WORKSPACE:C0CHANNEL:1.1", text: "so what now?\n• a\n• b", mention: true},
		{name: "other mentions kept", ev: slackfake.Event{Channel: "C0CHANNEL", ChannelType: "channel", User: "U0USER01", Text: "ask <@U0OTHER|bob>", TS: "1.1"},
			key: "agent:main:slack:group:T0WORKSPACE:C0CHANNEL:1.1", text: "ask <@U0OTHER|bob>"},
		{name: "command passes through", ev: slackfake.Event{Channel: "D0DM", ChannelType: "im", User: "U0USER01", Text: "!model gpt", TS: "1.1"},
			key: "agent:main:slack:dm:T0WORKSPACE:D0DM", text: "!model gpt", mention: true},
		{name: "file share", ev: slackfake.Event{Subtype: "file_share", Channel: "D0DM", ChannelType: "im", User: "U0USER01", TS: "1.1",
			Files: []slackfake.File{{ID: "F1", Name: "a.pdf", Mimetype: "application/pdf", URL: "https://x/a.pdf"}}},
			key: "agent:main:slack:dm:T0WORKSPACE:D0DM", mention: true, files: 1},
		{name: "own message", ev: slackfake.Event{Channel: "C1", ChannelType: "channel", User: "U0BOT", Text: "x", TS: "1.1"}, skip: true},
		{name: "own bot id", ev: slackfake.Event{Subtype: "bot_message", Channel: "C1", ChannelType: "channel", BotID: "B0BOT", Text: "x", TS: "1.1"}, id: identity{Account: "U0BOT", BotUserID: "U0BOT", BotID: "B0BOT", Bots: platform.BotsAll}, skip: true},
		{name: "own bot user, every bot allowed", ev: slackfake.Event{Channel: "C1", ChannelType: "channel", User: "U0BOT", BotID: "B0BOT", Text: "<@U0BOT> x", TS: "1.1"}, id: identity{Account: "U0BOT", BotUserID: "U0BOT", BotID: "B0BOT", Bots: platform.BotsAll}, skip: true},
		{name: "other bot ignored", ev: slackfake.Event{Subtype: "bot_message", Channel: "C1", ChannelType: "channel", BotID: "B9", Text: "x", TS: "1.1"}, skip: true},
		{name: "other bot allowed", ev: slackfake.Event{Subtype: "bot_message", Channel: "C1", ChannelType: "channel", BotID: "B9", Text: "x", TS: "1.1"},
			id: identity{Account: "U0BOT", BotUserID: "U0BOT", BotID: "B0BOT", Bots: platform.BotsAll}, key: "agent:main:slack:group:T0WORKSPACE:C1:1.1", text: "x", bot: true},
		{name: "other bot on mention: not mentioned", ev: slackfake.Event{Subtype: "bot_message", Channel: "C1", ChannelType: "channel", BotID: "B9", Text: "x", TS: "1.1"},
			id: identity{Account: "U0BOT", BotUserID: "U0BOT", BotID: "B0BOT", Bots: platform.BotsMentions}, skip: true},
		{name: "other bot on mention: not mentioned in a DM", ev: slackfake.Event{Channel: "D0DM", ChannelType: "im", User: "U0OTHERBOT", BotID: "B9", Text: "x", TS: "1.1"},
			id: identity{Account: "U0BOT", BotUserID: "U0BOT", BotID: "B0BOT", Bots: platform.BotsMentions}, skip: true},
		{name: "other bot on mention: mentioned", ev: slackfake.Event{Channel: "C1", ChannelType: "channel", User: "U0OTHERBOT", BotID: "B9", Text: "<@U0BOT> x", TS: "1.1"},
			id: identity{Account: "U0BOT", BotUserID: "U0BOT", BotID: "B0BOT", Bots: platform.BotsMentions}, key: "agent:main:slack:group:T0WORKSPACE:C1:1.1", text: "x", mention: true, bot: true},
		{name: "edit skipped", ev: slackfake.Event{Subtype: "message_changed", Channel: "C1", ChannelType: "channel", TS: "1.1"}, skip: true},
		{name: "empty skipped", ev: slackfake.Event{Channel: "C1", ChannelType: "channel", User: "U1", TS: "1.1"}, skip: true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			id := c.id
			if id.Account == "" {
				id = me
			}
			ev, why, err := normalize(f.Callback("Ev1", c.ev), id)
			if err != nil {
				t.Fatal(err)
			}
			if c.skip {
				if ev != nil || why == "" {
					t.Fatalf("got %v (%q), want skipped", ev, why)
				}
				return
			}
			if ev == nil {
				t.Fatalf("skipped: %s", why)
			}
			if got := sessionkey.Build(ev.GetSource(), sessionkey.DefaultOptions()); got != c.key {
				t.Errorf("key %s, want %s", got, c.key)
			}
			if ev.GetText() != c.text || ev.GetMentioned() != c.mention || len(ev.GetAttachments()) != c.files {
				t.Errorf("text %q mentioned %v files %d", ev.GetText(), ev.GetMentioned(), len(ev.GetAttachments()))
			}
			if ev.GetSource().GetIsBot() != c.bot {
				t.Errorf("is_bot %v, want %v", ev.GetSource().GetIsBot(), c.bot)
			}
			if ev.GetEventId() != c.ev.Channel+":"+c.ev.TS || ev.GetMessageId() != c.ev.TS {
				t.Errorf("event id %s message id %s", ev.GetEventId(), ev.GetMessageId())
			}
		})
	}
}

func TestNormalizeMalformed(t *testing.T) {
	for _, raw := range []string{`{`, `{"type":"event_callback"}`, `{"type":"event_callback","event":3}`,
		`{"type":"event_callback","event":{"type":"message","user":"U1","text":"x"}}`} {
		if _, _, err := normalize([]byte(raw), me); !errors.Is(err, errMalformed) {
			t.Errorf("%s: err %v, want malformed", raw, err)
		}
	}
}

func FuzzNormalize(f *testing.F) {
	fk := &slackfake.Fake{TeamID: "T1", AppID: "A1", BotUserID: "U0BOT"}
	f.Add(fk.Callback("Ev1", slackfake.Event{Channel: "C1", ChannelType: "channel", User: "U1", Text: "<@U0BOT> hi", TS: "1700000000.000100", ThreadTS: "1.2"}))
	f.Add(fk.Callback("Ev2", slackfake.Event{Subtype: "file_share", Channel: "D1", ChannelType: "im", User: "U1", TS: "1.1", Files: []slackfake.File{{ID: "F", Mimetype: "audio/ogg"}}}))
	f.Add([]byte(`{"type":"url_verification","challenge":"x"}`))
	f.Fuzz(func(t *testing.T, raw []byte) {
		ev, why, err := normalize(raw, me)
		if err != nil && !errors.Is(err, errMalformed) {
			t.Fatalf("error not marked malformed: %v", err)
		}
		if ev == nil {
			return
		}
		if why != "" || err != nil {
			t.Fatal("event with a skip reason or error")
		}
		if ev.GetEventId() == "" || ev.GetSource().GetChatId() == "" || ev.GetSource().GetUserId() == "" {
			t.Fatalf("event without ids: %v", ev)
		}
		_ = sessionkey.Build(ev.GetSource(), sessionkey.DefaultOptions())
		if err := platform.CheckEvent(ev, "slack", "", 1<<20); err != nil {
			t.Fatalf("normalized event refused: %v", err)
		}
	})
}

// FuzzVerify: only a body signed with the secret at a fresh timestamp
// passes, and a signature covers exactly the body it was made for.
func FuzzVerify(f *testing.F) {
	f.Add([]byte(`{"type":"event_callback"}`), []byte(`{"type":"event_callback"}`), "v0=00", int64(0), true)
	f.Add([]byte(`{"type":"event_callback"}`), []byte(`{"type":"event_callback"} `), "", int64(1), true)
	f.Add([]byte(``), []byte(``), "", int64(-400), false)
	f.Add([]byte(`x`), []byte(`x`), "v0=", int64(310), true)
	f.Fuzz(func(t *testing.T, body, other []byte, sig string, skew int64, sign bool) {
		ts := time.Now().Unix() + skew%1000
		if sign {
			sig = slackfake.Sign("secret", ts, body)
		}
		h := http.Header{}
		h.Set("X-Slack-Request-Timestamp", strconv.FormatInt(ts, 10))
		h.Set("X-Slack-Signature", sig)
		err := verify(h, body, "secret")
		fresh := skew%1000 > -290 && skew%1000 < 290
		if sign && fresh && err != nil {
			t.Fatalf("good signature refused: %v", err)
		}
		if !sign && sig != slackfake.Sign("secret", ts, body) && err == nil {
			t.Fatal("bad signature accepted")
		}
		if sign && skew%1000 < -310 && err == nil {
			t.Fatal("stale timestamp accepted")
		}
		if err == nil && verify(h, body, "other secret") == nil {
			t.Fatal("signature accepted with another secret")
		}
		if verify(h, other, "secret") == nil && err == nil && !bytes.Equal(other, body) {
			t.Fatalf("signature for %q accepted for %q", body, other)
		}
	})
}

// FuzzEnvelopeID: the envelope id of a Socket Mode frame Slack sent
// malformed is read without panicking, and only from a JSON object.
func FuzzEnvelopeID(f *testing.F) {
	f.Add([]byte(`{"envelope_id":"e1","type":"events_api","payload":{`))
	f.Add([]byte(`{"envelope_id":"e1","type":"events_api"}`))
	f.Add([]byte(`{"envelope_id":1}`))
	f.Add([]byte(`[]`))
	f.Fuzz(func(t *testing.T, raw []byte) {
		id := envelopeID(raw)
		if id != "" && !json.Valid(raw) {
			t.Fatalf("envelope id %q from invalid JSON", id)
		}
		if id != "" && !utf8.ValidString(id) {
			t.Fatalf("envelope id %q is not UTF-8", id)
		}
	})
}

func TestSlash(t *testing.T) {
	t.Parallel()
	base := slackapi.SlashCommand{Command: "/hermes", TeamID: "T0WORKSPACE", ChannelID: "C1", UserID: "U1", TriggerID: "tr1"}
	for _, c := range []struct {
		name, text, want, key string
		channel               string
		command               string // the slash; "" is /hermes
	}{
		{name: "a command", text: "sethome", want: "!sethome", key: "agent:main:slack:group:T0WORKSPACE:C1:U1"},
		{name: "a command with arguments", text: "Model gpt-5", want: "!Model gpt-5"},
		{name: "nothing", text: "  ", want: "!help"},
		{name: "a message", text: "what is the time?", want: "what is the time?"},
		{name: "in a dm", text: "new", want: "!new", channel: "D0DM", key: "agent:main:slack:dm:T0WORKSPACE:D0DM"},
		// Hermes's manifest registers each command as a slash of its own.
		{name: "a command's own slash", command: "/stop", want: "!stop"},
		{name: "a command's own slash with arguments", command: "/model", text: " gpt-5 ", want: "!model gpt-5"},
		{name: "an alias's own slash", command: "/bg", text: "tidy the notes", want: "!bg tidy the notes"},
		{name: "a command's own slash named like another command", command: "/new", text: "help", want: "!new help"},
		// A catch-all slash of another name reads as /hermes.
		{name: "another catch-all slash", command: "/ai", text: "new", want: "!new"},
		{name: "another catch-all slash, a message", command: "/ai", text: "what is the time?", want: "what is the time?"},
	} {
		t.Run(c.name, func(t *testing.T) {
			cmd := base
			cmd.Text = c.text
			if c.channel != "" {
				cmd.ChannelID = c.channel
			}
			if c.command != "" {
				cmd.Command = c.command
			}
			ev, why := slash(cmd, me)
			if ev == nil {
				t.Fatalf("skipped: %s", why)
			}
			if ev.GetText() != c.want || ev.GetEventId() != "slash:tr1" || !ev.GetMentioned() {
				t.Fatalf("text %q id %q mentioned %v, want %q", ev.GetText(), ev.GetEventId(), ev.GetMentioned(), c.want)
			}
			if c.key != "" {
				if got := sessionkey.Build(ev.GetSource(), sessionkey.DefaultOptions()); got != c.key {
					t.Fatalf("key %s, want %s", got, c.key)
				}
			}
		})
	}
	noTrigger := base
	noTrigger.TriggerID = ""
	if ev, _ := slash(noTrigger, me); ev != nil {
		t.Fatalf("published %v without a trigger id", ev)
	}
}

// TestAudioFileIsAVoiceMessage: as Hermes's Slack adapter types a message
// with an audio/* file VOICE (unless it has an image too, or is a /command),
// and /voice on answers a voice message with speech, the audio file is
// published as a voice message; other files keep their kinds.
func TestAudioFileIsAVoiceMessage(t *testing.T) {
	f := &slackfake.Fake{TeamID: "T0WORKSPACE", AppID: "A0APP", BotUserID: "U0BOT"}
	const (
		voice = eventsv1.AttachmentKind_ATTACHMENT_KIND_VOICE
		audio = eventsv1.AttachmentKind_ATTACHMENT_KIND_AUDIO
		image = eventsv1.AttachmentKind_ATTACHMENT_KIND_IMAGE
		doc   = eventsv1.AttachmentKind_ATTACHMENT_KIND_DOCUMENT
		video = eventsv1.AttachmentKind_ATTACHMENT_KIND_VIDEO
	)
	file := func(name, mime string) slackfake.File {
		return slackfake.File{ID: "F" + name, Name: name, Mimetype: mime, URL: "https://files.slack.test/" + name}
	}
	for _, tc := range []struct {
		name  string
		text  string
		files []slackfake.File
		want  []eventsv1.AttachmentKind
	}{
		{name: "audio clip", files: []slackfake.File{file("audio_message.m4a", "audio/mp4")}, want: []eventsv1.AttachmentKind{voice}},
		{name: "audio with text", text: "what is this?", files: []slackfake.File{file("a.ogg", "audio/ogg")}, want: []eventsv1.AttachmentKind{voice}},
		{name: "audio with a document", files: []slackfake.File{file("a.mp3", "audio/mpeg"), file("b.pdf", "application/pdf")},
			want: []eventsv1.AttachmentKind{voice, doc}},
		{name: "an image makes it a photo", files: []slackfake.File{file("a.mp3", "audio/mpeg"), file("b.png", "image/png")},
			want: []eventsv1.AttachmentKind{audio, image}},
		{name: "a command is not a voice message", text: "/whatever", files: []slackfake.File{file("a.ogg", "audio/ogg")},
			want: []eventsv1.AttachmentKind{audio}},
		{name: "video is not audio", files: []slackfake.File{file("a.mp4", "video/mp4")}, want: []eventsv1.AttachmentKind{video}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ev, why, err := normalize(f.Callback("Ev1", slackfake.Event{Subtype: "file_share", Channel: "D0DM", ChannelType: "im",
				User: "U0USER01", Text: tc.text, TS: "1.1", Files: tc.files}), me)
			if err != nil || ev == nil {
				t.Fatalf("skipped: %s %v", why, err)
			}
			var got []eventsv1.AttachmentKind
			for _, a := range ev.GetAttachments() {
				got = append(got, a.GetKind())
			}
			if !slices.Equal(got, tc.want) {
				t.Fatalf("kinds %v, want %v", got, tc.want)
			}
			// Hermes types the message by the files it downloaded: it
			// is a voice message once an audio file is (the worker
			// decides, when a turn has fetched them).
			byDownload := !strings.HasPrefix(tc.text, "/") && (slices.Contains(tc.want, voice) || slices.Contains(tc.want, audio))
			if ev.GetVoiceByDownload() != byDownload {
				t.Fatalf("voice_by_download %v, want %v", ev.GetVoiceByDownload(), byDownload)
			}
		})
	}
}

// A forwarded message's content is in the forwarding message's
// attachments (is_share, with is_msg_unfurl), its text what the user
// typed with it, "" when nothing: skipped as empty before, and only the
// comment reached the agent when there was one. It is now shown as
// Hermes shows an attachment ("📎 <url>", the text, "_footer_"), after
// the comment; a message link's unfurl (is_msg_unfurl alone) is left
// out, as Hermes does. A link preview is shown as Hermes shows it, and a
// message whose words are only in rich text blocks reads them as
// Hermes's _extract_text_from_slack_blocks. Blocks of other shapes do
// not make a message unreadable.
func TestForwardedAndRichText(t *testing.T) {
	f := &slackfake.Fake{TeamID: "T0WORKSPACE", AppID: "A0APP", BotUserID: "U0BOT"}
	const permalink = "https://acme.slack.com/archives/C0OPS/p1700000000000100"
	forward := func(text, fallback, messageText string) json.RawMessage {
		return json.RawMessage(`[{"ts":"1700000000.000100","author_id":"U0ALICE","channel_id":"C0OPS","channel_team":"T0WORKSPACE",
			"is_msg_unfurl":true,"is_share":true,"color":"D0D0D0","from_url":"` + permalink + `",
			"message_blocks":[{"team":"T0WORKSPACE","channel":"C0OPS","ts":"1700000000.000100","message":{"blocks":[
				{"type":"rich_text","block_id":"a1","elements":[{"type":"rich_text_section","elements":[{"type":"text","text":"` + messageText + `"}]}]}]}}],
			"text":"` + text + `","fallback":"` + fallback + `","author_name":"alice","author_subname":"alice",
			"mrkdwn_in":["text"],"footer":"Posted in #ops"}]`)
	}
	richBlocks := json.RawMessage(`[{"type":"rich_text","block_id":"b1","elements":[
		{"type":"rich_text_section","elements":[{"type":"text","text":"look at "},{"type":"link","url":"https://example.com","text":"this"},
			{"type":"text","text":" "},{"type":"user","user_id":"U0CAROL"},{"type":"text","text":" "},{"type":"emoji","name":"eyes","unicode":"1f440"}]},
		{"type":"rich_text_quote","elements":[{"type":"text","text":"quoted words"}]},
		{"type":"rich_text_list","style":"bullet","indent":0,"elements":[
			{"type":"rich_text_section","elements":[{"type":"text","text":"one","style":{"bold":true}}]},
			{"type":"rich_text_section","elements":[{"type":"text","text":"two"}]}]},
		{"type":"rich_text_preformatted","border":0,"elements":[{"type":"text","text":"make test"}]}]}]`)
	sectionBlocks := json.RawMessage(`[{"type":"section","text":{"type":"mrkdwn","text":"*deploy* done"},
		"accessory":{"type":"button","text":{"type":"plain_text","text":"Open"},"action_id":"open"}}]`)
	for _, c := range []struct {
		name string
		ev   slackfake.Event
		id   identity
		text string // "" skipped
	}{
		{"a forward without a comment", slackfake.Event{Channel: "D0DM", ChannelType: "im", User: "U0USER01", TS: "1.1",
			Attachments: forward("the deploy is stuck on staging", "[November 14th, 2023 10:13 PM] alice: the deploy is stuck on staging", "the deploy is stuck on staging")},
			me, "📎 " + permalink + "\n   the deploy is stuck on staging\n   _Posted in #ops_"},
		{"a forward with a comment and a mention", slackfake.Event{Type: "app_mention", Channel: "C0CHANNEL", User: "U0USER01", Text: "<@U0BOT> can you look?", TS: "1.1",
			Attachments: forward("the deploy is stuck on staging", "", "the deploy is stuck on staging")},
			me, "can you look?\n\n📎 " + permalink + "\n   the deploy is stuck on staging\n   _Posted in #ops_"},
		{"a forward whose text is only in its blocks", slackfake.Event{Channel: "D0DM", ChannelType: "im", User: "U0USER01", TS: "1.1",
			Attachments: forward("", "[November 14th, 2023 10:13 PM] alice: ", "rollback please")},
			me, "📎 " + permalink + "\n   rollback please\n   _Posted in #ops_"},
		{"a message link's unfurl is left out", slackfake.Event{Channel: "D0DM", ChannelType: "im", User: "U0USER01", Text: "see <" + permalink + ">", TS: "1.1",
			Attachments: json.RawMessage(`[{"is_msg_unfurl":true,"from_url":"` + permalink + `","text":"an answer of the bot","footer":"Posted in #ops"}]`)},
			me, "see <" + permalink + ">"},
		{"a link preview", slackfake.Event{Channel: "D0DM", ChannelType: "im", User: "U0USER01", Text: "<https://example.com/doc>", TS: "1.1",
			Attachments: json.RawMessage(`[{"title":"The doc","title_link":"https://example.com/doc","text":"` + strings.Repeat("w", 600) + `","footer":"Example"}]`)},
			me, "<https://example.com/doc>\n\n📎 [The doc](https://example.com/doc)\n   " + strings.Repeat("w", 497) + "...\n   _Example_"},
		{"words only in rich text blocks", slackfake.Event{Channel: "D0DM", ChannelType: "im", User: "U0USER01", TS: "1.1", Blocks: richBlocks},
			me, "look at this (https://example.com) <@U0CAROL> :eyes:\n> quoted words\n• one\n• two\n```\nmake test\n```"},
		// A quote's and a code block's elements are inline ones, as
		// Slack sends them: a styled word, a link or a line break in
		// them does not cut the quote or the code into lines, each line
		// of a quote is quoted, and a link in code stays as written.
		{"a quote and code with links and styles", slackfake.Event{Channel: "D0DM", ChannelType: "im", User: "U0USER01", TS: "1.1", Blocks: json.RawMessage(`[{"type":"rich_text","block_id":"q1","elements":[
			{"type":"rich_text_quote","elements":[{"type":"text","text":"the deploy is "},{"type":"text","text":"stuck","style":{"bold":true}},
				{"type":"text","text":" on "},{"type":"link","url":"https://ci.example.com/42","text":"staging"},{"type":"text","text":"\nsince noon"}]},
			{"type":"rich_text_preformatted","border":0,"elements":[{"type":"text","text":"curl -v "},{"type":"link","url":"https://ci.example.com/42"},
				{"type":"text","text":" \\\n  -H 'Accept: */*'"}]}]}]`)},
			me, "> the deploy is stuck on staging (https://ci.example.com/42)\n> since noon\n```\ncurl -v https://ci.example.com/42 \\\n  -H 'Accept: */*'\n```"},
		// A nested list comes as a list of its own, indented, and the
		// ordered list continued after it numbers on from its offset.
		{"a nested list", slackfake.Event{Channel: "D0DM", ChannelType: "im", User: "U0USER01", TS: "1.1", Blocks: json.RawMessage(`[{"type":"rich_text","block_id":"l1","elements":[
			{"type":"rich_text_list","style":"ordered","indent":0,"border":0,"elements":[{"type":"rich_text_section","elements":[{"type":"text","text":"build"}]}]},
			{"type":"rich_text_list","style":"bullet","indent":1,"border":0,"elements":[{"type":"rich_text_section","elements":[{"type":"text","text":"arm64"}]},
				{"type":"rich_text_section","elements":[{"type":"text","text":"amd64"}]}]},
			{"type":"rich_text_list","style":"ordered","indent":0,"offset":1,"border":0,"elements":[{"type":"rich_text_section","elements":[{"type":"text","text":"deploy"}]}]}]}]`)},
			me, "1. build\n  • arm64\n  • amd64\n2. deploy"},
		{"text first, its blocks not added", slackfake.Event{Channel: "D0DM", ChannelType: "im", User: "U0USER01", Text: "look at <https://example.com|this>", TS: "1.1", Blocks: richBlocks},
			me, "look at <https://example.com|this>"},
		{"section blocks with text", slackfake.Event{Channel: "D0DM", ChannelType: "im", User: "U0USER01", Text: "deploy done", TS: "1.1", Blocks: sectionBlocks},
			me, "deploy done"},
		{"section blocks alone are empty", slackfake.Event{Channel: "D0DM", ChannelType: "im", User: "U0USER01", TS: "1.1", Blocks: sectionBlocks},
			me, ""},
		{"a bot's legacy attachment", slackfake.Event{Subtype: "bot_message", Channel: "C0CHANNEL", ChannelType: "channel", BotID: "B9", TS: "1.1",
			Attachments: json.RawMessage(`[{"fallback":"Build 42 failed","title":"Build 42","title_link":"https://ci.example.com/42","text":"tests failed","color":"danger","fields":[{"title":"branch","value":"main","short":true}]}]`)},
			identity{Account: "U0BOT", BotUserID: "U0BOT", BotID: "B0BOT", Bots: platform.BotsAll}, "📎 [Build 42](https://ci.example.com/42)\n   tests failed"},
	} {
		t.Run(c.name, func(t *testing.T) {
			ev, why, err := normalize(f.Callback("Ev1", c.ev), c.id)
			if err != nil {
				t.Fatal(err)
			}
			if c.text == "" {
				if ev != nil {
					t.Fatalf("published %q, want it skipped as empty", ev.GetText())
				}
				return
			}
			if ev == nil {
				t.Fatalf("skipped: %s", why)
			}
			if ev.GetText() != c.text {
				t.Fatalf("text\n%q\nwant\n%q", ev.GetText(), c.text)
			}
		})
	}
}
