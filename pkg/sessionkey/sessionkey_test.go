package sessionkey

import (
	"testing"

	eventsv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/events/v1"
)

type src = eventsv1.SessionSource

// opt is shorthand for Options with the default profile.
func opt(groupPerUser, threadPerUser bool) Options {
	return Options{GroupSessionsPerUser: groupPerUser, ThreadSessionsPerUser: threadPerUser}
}

// TestBuildDesignExamples pins every example of DESIGN.md, verbatim.
func TestBuildDesignExamples(t *testing.T) {
	def := DefaultOptions()
	tests := []struct {
		name string
		src  *src
		opts Options
		want string
	}{
		{"telegram dm", &src{Platform: "telegram", ChatType: "dm", ChatId: "99", UserId: "99"}, def,
			"agent:main:telegram:dm:99"},
		{"telegram group per user", &src{Platform: "telegram", ChatType: "group", ChatId: "-1002285219667", UserId: "alice"}, def,
			"agent:main:telegram:group:-1002285219667:alice"},
		{"telegram forum topic shared", &src{Platform: "telegram", ChatType: "group", ChatId: "-1002285219667", ThreadId: "17585", UserId: "alice"}, def,
			"agent:main:telegram:group:-1002285219667:17585"},
		{"slack workspace channel user", &src{Platform: "slack", ChatType: "group", ScopeId: "T0WORKSPACE", ChatId: "C0CHANNEL", UserId: "U0USER01"}, def,
			"agent:main:slack:group:T0WORKSPACE:C0CHANNEL:U0USER01"},
		{"discord prospective thread", &src{Platform: "discord", ChatType: "group", ScopeId: "123", ChatId: "900000000000000001", ProspectiveThreadId: "700000000000000007", UserId: "42"}, def,
			"agent:main:discord:thread:900000000000000001:700000000000000007"},
		{"whatsapp group participant", &src{Platform: "whatsapp", ChatType: "group", ChatId: "120363000000000000@g.us", UserId: "15551234567:12@s.whatsapp.net"}, def,
			"agent:main:whatsapp:group:120363000000000000@g.us:15551234567"},
		{"profile coder", &src{Platform: "telegram", ChatType: "dm", ChatId: "99"}, Options{Profile: "coder", GroupSessionsPerUser: true},
			"agent:coder:telegram:dm:99"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := Build(tt.src, tt.opts); got != tt.want {
				t.Errorf("Build() = %q, want %q", got, tt.want)
			}
		})
	}
}

// TestBuild covers every branch of Build.
func TestBuild(t *testing.T) {
	def := DefaultOptions()
	tests := []struct {
		name string
		src  *src
		opts Options
		want string
	}{
		// Namespace.
		{"profile empty", &src{Platform: "telegram", ChatType: "dm", ChatId: "1"}, opt(true, false), "agent:main:telegram:dm:1"},
		{"profile default", &src{Platform: "telegram", ChatType: "dm", ChatId: "1"}, Options{Profile: "default"}, "agent:main:telegram:dm:1"},
		{"profile main marked", &src{Platform: "telegram", ChatType: "dm", ChatId: "1"}, Options{Profile: "main"}, "agent:main~:telegram:dm:1"},
		{"profile named", &src{Platform: "telegram", ChatType: "dm", ChatId: "1"}, Options{Profile: "ops"}, "agent:ops:telegram:dm:1"},
		{"profile case sensitive", &src{Platform: "telegram", ChatType: "dm", ChatId: "1"}, Options{Profile: "Main"}, "agent:Main:telegram:dm:1"},

		// DM fallbacks.
		{"dm chat id beats participant", &src{Platform: "telegram", ChatType: "dm", ChatId: "1", UserId: "2"}, def, "agent:main:telegram:dm:1"},
		{"dm no chat id uses participant", &src{Platform: "signal", ChatType: "dm", UserId: "+4912"}, def, "agent:main:signal:dm:+4912"},
		{"dm participant prefers alt", &src{Platform: "signal", ChatType: "dm", UserId: "+4912", UserIdAlt: "uuid-1"}, def, "agent:main:signal:dm:uuid-1"},
		{"dm empty alt falls back to user id", &src{Platform: "signal", ChatType: "dm", UserId: "+4912", UserIdAlt: ""}, def, "agent:main:signal:dm:+4912"},
		{"dm chat and thread", &src{Platform: "slack", ChatType: "dm", ChatId: "D1", ThreadId: "171.2"}, def, "agent:main:slack:dm:D1:171.2"},
		{"dm participant then thread", &src{Platform: "x", ChatType: "dm", UserId: "u", ThreadId: "t"}, def, "agent:main:x:dm:u:t"},
		{"dm only thread", &src{Platform: "x", ChatType: "dm", ThreadId: "t"}, def, "agent:main:x:dm:t"},
		{"dm bare sink", &src{Platform: "x", ChatType: "dm"}, def, "agent:main:x:dm"},
		{"dm ignores prospective thread", &src{Platform: "discord", ChatType: "dm", ChatId: "5", ProspectiveThreadId: "7"}, def, "agent:main:discord:dm:5"},
		{"dm ignores group flags", &src{Platform: "telegram", ChatType: "dm", ChatId: "5", UserId: "9"}, opt(true, true), "agent:main:telegram:dm:5"},
		{"empty chat type is dm", &src{Platform: "telegram", ChatId: "5", UserId: "9"}, def, "agent:main:telegram:dm:5"},
		{"nil source", nil, def, "agent:main::dm"},

		// SMS keeps the number as Twilio gives it, "+" included (only WhatsApp ids are canonicalised).
		{"sms dm", &src{Platform: "sms", ChatType: "dm", ChatId: "+15551234567", UserId: "+15551234567"}, def, "agent:main:sms:dm:+15551234567"},

		// BlueBubbles (iMessage): a DM is the address, a group its chat guid, ";" and "+" kept.
		{"imessage dm", &src{Platform: "bluebubbles", ChatType: "dm", ChatId: "iMessage;-;+15551234567", ChatIdAlt: "+15551234567", UserId: "+15551234567"}, def, "agent:main:bluebubbles:dm:iMessage;-;+15551234567"},
		{"imessage group", &src{Platform: "bluebubbles", ChatType: "group", ChatId: "iMessage;+;chat493817263544", UserId: "ann@icloud.com"}, def, "agent:main:bluebubbles:group:iMessage;+;chat493817263544:ann@icloud.com"},

		// WhatsApp canonicalisation.
		{"wa dm jid with device", &src{Platform: "whatsapp", ChatType: "dm", ChatId: "15551234567:12@s.whatsapp.net"}, def, "agent:main:whatsapp:dm:15551234567"},
		{"wa dm plus", &src{Platform: "whatsapp", ChatType: "dm", ChatId: "+15551234567"}, def, "agent:main:whatsapp:dm:15551234567"},
		{"wa dm lid", &src{Platform: "whatsapp", ChatType: "dm", ChatId: "999999999999999@lid"}, def, "agent:main:whatsapp:dm:999999999999999"},
		{"wa drops only one plus", &src{Platform: "whatsapp", ChatType: "dm", ChatId: "++1@x"}, def, "agent:main:whatsapp:dm:+1"},
		{"wa plus not leading stays", &src{Platform: "whatsapp", ChatType: "dm", ChatId: "1+2@x"}, def, "agent:main:whatsapp:dm:1+2"},
		{"wa colon after at", &src{Platform: "whatsapp", ChatType: "dm", ChatId: "1@x:2"}, def, "agent:main:whatsapp:dm:1"},
		{"wa empty canonical keeps raw", &src{Platform: "whatsapp", ChatType: "dm", ChatId: "@s.whatsapp.net"}, def, "agent:main:whatsapp:dm:@s.whatsapp.net"},
		{"wa plus only keeps raw", &src{Platform: "whatsapp", ChatType: "dm", ChatId: "+"}, def, "agent:main:whatsapp:dm:+"},
		{"wa dm participant fallback", &src{Platform: "whatsapp", ChatType: "dm", UserId: "+15551234567@s.whatsapp.net"}, def, "agent:main:whatsapp:dm:15551234567"},
		{"wa group id raw", &src{Platform: "whatsapp", ChatType: "group", ChatId: "+1203:63@g.us", UserId: "1@lid"}, def, "agent:main:whatsapp:group:+1203:63@g.us:1"},
		{"wa group participant alt", &src{Platform: "whatsapp", ChatType: "group", ChatId: "g@g.us", UserId: "1@s.whatsapp.net", UserIdAlt: "2@lid"}, def, "agent:main:whatsapp:group:g@g.us:2"},
		{"wa participant empty canonical keeps raw", &src{Platform: "whatsapp", ChatType: "group", ChatId: "g@g.us", UserId: ":5"}, def, "agent:main:whatsapp:group:g@g.us::5"},
		{"not whatsapp never canonical", &src{Platform: "signal", ChatType: "dm", ChatId: "+1:2@x"}, def, "agent:main:signal:dm:+1:2@x"},

		// Slack scope; other platforms never.
		{"slack dm scope", &src{Platform: "slack", ChatType: "dm", ScopeId: "T1", ChatId: "D1"}, def, "agent:main:slack:dm:T1:D1"},
		{"slack dm scope participant", &src{Platform: "slack", ChatType: "dm", ScopeId: "T1", UserId: "U1"}, def, "agent:main:slack:dm:T1:U1"},
		{"slack thread scope", &src{Platform: "slack", ChatType: "group", ScopeId: "T1", ChatId: "C1", ThreadId: "1.2", UserId: "U1"}, def, "agent:main:slack:group:T1:C1:1.2"},
		{"slack without scope", &src{Platform: "slack", ChatType: "group", ChatId: "C1", UserId: "U1"}, def, "agent:main:slack:group:C1:U1"},
		{"discord guild ignored", &src{Platform: "discord", ChatType: "group", ScopeId: "G1", ChatId: "C1", UserId: "U1"}, def, "agent:main:discord:group:C1:U1"},
		{"platform match is exact", &src{Platform: "Slack", ChatType: "group", ScopeId: "T1", ChatId: "C1"}, opt(false, false), "agent:main:Slack:group:C1"},

		// Threads and the slot.
		{"real thread keeps chat type", &src{Platform: "discord", ChatType: "thread", ChatId: "T7", ThreadId: "T7", UserId: "u"}, def, "agent:main:discord:thread:T7:T7"},
		{"real thread wins over prospective", &src{Platform: "discord", ChatType: "group", ChatId: "C", ThreadId: "T", ProspectiveThreadId: "P"}, def, "agent:main:discord:group:C:T"},
		{"forum chat type as given", &src{Platform: "telegram", ChatType: "forum", ChatId: "C", ThreadId: "5", UserId: "u"}, def, "agent:main:telegram:forum:C:5"},
		{"channel chat type as given", &src{Platform: "slack", ChatType: "channel", ChatId: "C", UserId: "u"}, def, "agent:main:slack:channel:C:u"},
		{"prospective thread no chat id", &src{Platform: "discord", ChatType: "group", ProspectiveThreadId: "P", UserId: "u"}, def, "agent:main:discord:thread:P"},

		// Per-user flags.
		{"group shared", &src{Platform: "telegram", ChatType: "group", ChatId: "C", UserId: "u"}, opt(false, false), "agent:main:telegram:group:C"},
		{"group per user", &src{Platform: "telegram", ChatType: "group", ChatId: "C", UserId: "u"}, opt(true, false), "agent:main:telegram:group:C:u"},
		{"group per user thread flag irrelevant", &src{Platform: "telegram", ChatType: "group", ChatId: "C", UserId: "u"}, opt(true, true), "agent:main:telegram:group:C:u"},
		{"group per user needs group flag", &src{Platform: "telegram", ChatType: "group", ChatId: "C", UserId: "u"}, opt(false, true), "agent:main:telegram:group:C"},
		{"thread shared by default", &src{Platform: "telegram", ChatType: "group", ChatId: "C", ThreadId: "T", UserId: "u"}, opt(true, false), "agent:main:telegram:group:C:T"},
		{"thread per user", &src{Platform: "telegram", ChatType: "group", ChatId: "C", ThreadId: "T", UserId: "u"}, opt(true, true), "agent:main:telegram:group:C:T:u"},
		{"thread per user needs group flag", &src{Platform: "telegram", ChatType: "group", ChatId: "C", ThreadId: "T", UserId: "u"}, opt(false, true), "agent:main:telegram:group:C:T"},
		{"prospective thread per user", &src{Platform: "discord", ChatType: "group", ChatId: "C", ProspectiveThreadId: "P", UserIdAlt: "a", UserId: "u"}, opt(true, true), "agent:main:discord:thread:C:P:a"},
		{"group without participant", &src{Platform: "telegram", ChatType: "group", ChatId: "C"}, def, "agent:main:telegram:group:C"},
		{"group without chat id", &src{Platform: "telegram", ChatType: "group", UserId: "u"}, def, "agent:main:telegram:group:u"},

		// Fields that never enter the key.
		{"ignored fields", &src{Platform: "telegram", Account: "bot1", ChatType: "group", ChatId: "C", ChatName: "n", UserName: "un", ChatIdAlt: "alt", ParentChatId: "p", ChatTopic: "t", IsBot: true, UserId: "u"}, def, "agent:main:telegram:group:C:u"},
		{"no escaping", &src{Platform: "web", ChatType: "dm", ChatId: "a:b"}, def, "agent:main:web:dm:a:b"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := Build(tt.src, tt.opts); got != tt.want {
				t.Errorf("Build() = %q, want %q", got, tt.want)
			}
		})
	}
}

func TestDefaultOptions(t *testing.T) {
	want := Options{Profile: "", GroupSessionsPerUser: true, ThreadSessionsPerUser: false}
	if got := DefaultOptions(); got != want {
		t.Errorf("DefaultOptions() = %+v, want %+v", got, want)
	}
}

func TestChatKey(t *testing.T) {
	tests := []struct {
		name string
		src  *src
		want string
	}{
		{"all set", &src{Platform: "telegram", Account: "bot1", ChatId: "-100", UserId: "u", ThreadId: "t"}, "telegram:bot1:-100"},
		{"raw whatsapp id", &src{Platform: "whatsapp", Account: "+1555", ChatType: "dm", ChatId: "+1:2@s.whatsapp.net"}, "whatsapp:+1555:+1:2@s.whatsapp.net"},
		{"empty account", &src{Platform: "slack", ChatId: "C1", ScopeId: "T1"}, "slack::C1"},
		{"nil", nil, "::"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := ChatKey(tt.src); got != tt.want {
				t.Errorf("ChatKey() = %q, want %q", got, tt.want)
			}
		})
	}
}

func BenchmarkBuild(b *testing.B) {
	cases := []struct {
		name string
		src  *src
	}{
		{"dm", &src{Platform: "telegram", ChatType: "dm", ChatId: "99", UserId: "99"}},
		{"slack_group", &src{Platform: "slack", ChatType: "group", ScopeId: "T0WORKSPACE", ChatId: "C0CHANNEL", UserId: "U0USER01"}},
		{"whatsapp_group", &src{Platform: "whatsapp", ChatType: "group", ChatId: "120363000000000000@g.us", UserId: "15551234567:12@s.whatsapp.net"}},
	}
	opts := DefaultOptions()
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				_ = Build(c.src, opts)
			}
		})
	}
}

func TestReplyThread(t *testing.T) {
	tests := []struct {
		name string
		src  *eventsv1.SessionSource
		want string
	}{
		{"thread", &eventsv1.SessionSource{ChatType: "thread", ThreadId: "8", ProspectiveThreadId: "7"}, "8"},
		{"prospective", &eventsv1.SessionSource{ChatType: "group", ProspectiveThreadId: "7"}, "7"},
		{"dm ignores prospective", &eventsv1.SessionSource{ChatType: "dm", ProspectiveThreadId: "7"}, ""},
		{"empty chat type is a dm", &eventsv1.SessionSource{ProspectiveThreadId: "7"}, ""},
		{"nil", nil, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := ReplyThread(tc.src); got != tc.want {
				t.Fatalf("ReplyThread = %q, want %q", got, tc.want)
			}
		})
	}
}

func TestBackground(t *testing.T) {
	tests := []struct {
		name, chatKey, profile, task, want string
	}{
		{"dm", "agent:main:telegram:dm:99", "", "bg_072011_a1b2c3", "agent:main:background:telegram:dm:99:bg_072011_a1b2c3"},
		{"slack thread", "agent:main:slack:group:T1:C1:17.5", "default", "bg_000000_000000", "agent:main:background:slack:group:T1:C1:17.5:bg_000000_000000"},
		{"matrix room id has colons", "agent:main:matrix:group:!room:example.org:@ann:example.org", "", "bg_235959_ffffff",
			"agent:main:background:matrix:group:!room:example.org:@ann:example.org:bg_235959_ffffff"},
		{"profile main", "agent:main~:telegram:dm:99", "main", "bg_1", "agent:main~:background:telegram:dm:99:bg_1"},
		{"other profile", "agent:coder:telegram:dm:99", "coder", "bg_1", "agent:coder:background:telegram:dm:99:bg_1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := Background(tt.chatKey, tt.profile, tt.task)
			if got != tt.want {
				t.Fatalf("Background = %q, want %q", got, tt.want)
			}
			if id, ok := BackgroundTask(got, tt.profile); !ok || id != tt.task {
				t.Errorf("BackgroundTask(%q) = %q, %v; want %q", got, id, ok, tt.task)
			}
			if _, ok := BackgroundTask(tt.chatKey, tt.profile); ok {
				t.Errorf("the chat's key %q reads as a background task's", tt.chatKey)
			}
			if chat, ok := BackgroundChat(got, tt.profile); !ok || chat != tt.chatKey {
				t.Errorf("BackgroundChat(%q) = %q, %v; want %q", got, chat, ok, tt.chatKey)
			}
			if chat, ok := BackgroundChat(tt.chatKey, tt.profile); ok {
				t.Errorf("BackgroundChat(%q) = %q: the chat's key reads as a task's", tt.chatKey, chat)
			}
		})
	}
	for _, key := range []string{"agent:main:background:", "agent:main:background:x:", "agent:main:backgroundx:telegram:dm:1:bg",
		"agent:coder:background:telegram:dm:99:bg_1", "agent:main:cron:dm:job_20260101_000000"} {
		if id, ok := BackgroundTask(key, ""); ok {
			t.Errorf("BackgroundTask(%q) = %q; want none", key, id)
		}
		if chat, ok := BackgroundChat(key, ""); ok {
			t.Errorf("BackgroundChat(%q) = %q; want none", key, chat)
		}
	}
}
