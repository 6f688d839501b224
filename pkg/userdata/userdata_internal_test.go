package userdata

import (
	"testing"

	eventsv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/events/v1"
)

func TestOwnSession(t *testing.T) {
	src := func(platform, chatType, chat, thread, user, alt string) *eventsv1.SessionSource {
		return &eventsv1.SessionSource{Platform: platform, ChatType: chatType, ChatId: chat, ThreadId: thread, UserId: user, UserIdAlt: alt}
	}
	for _, tt := range []struct {
		name string
		key  string
		src  *eventsv1.SessionSource
		own  bool
	}{
		{"dm", "agent:main:telegram:dm:42", src("telegram", "dm", "42", "", "42", ""), true},
		{"dm of a profile", "agent:coder:telegram:dm:42", src("telegram", "dm", "42", "", "42", ""), true},
		{"dm of the profile main", "agent:main~:telegram:dm:42", src("telegram", "dm", "42", "", "42", ""), true},
		{"dm topic", "agent:main:telegram:dm:42:5", src("telegram", "dm", "42", "5", "42", ""), true},
		{"dm without chat id", "agent:main:signal:dm:+15550001", src("signal", "", "", "", "+15550001", ""), true},
		{"dm: a key of another chat", "agent:main:telegram:dm:43", src("telegram", "dm", "42", "", "42", ""), false},
		{"slack dm", "agent:main:slack:dm:T1:D42", src("slack", "dm", "D42", "", "U42", ""), false}, // no scope id in src: not its key
		{"group, per user", "agent:main:telegram:group:-100:42", src("telegram", "group", "-100", "", "42", ""), true},
		{"group, per user by alt id", "agent:main:telegram:group:-100:alice", src("telegram", "group", "-100", "", "42", "alice"), true},
		{"group, shared", "agent:main:telegram:group:-100", src("telegram", "group", "-100", "", "42", ""), false},
		{"thread, shared", "agent:main:telegram:group:-100:17", src("telegram", "group", "-100", "17", "42", ""), false},
		{"thread, per user", "agent:main:telegram:group:-100:17:42", src("telegram", "group", "-100", "17", "42", ""), true},
		{"whatsapp group, per user", "agent:main:whatsapp:group:120@g.us:15551234567", src("whatsapp", "group", "120@g.us", "", "15551234567:3@s.whatsapp.net", ""), true},
		{"background task of a dm", "agent:main:background:telegram:dm:42:bg_1", src("telegram", "dm", "42", "", "42", ""), true},
		{"background task of a shared group", "agent:main:background:telegram:group:-100:bg_1", src("telegram", "group", "-100", "", "42", ""), false},
		{"background key without a task", "agent:main:background:", src("telegram", "dm", "42", "", "42", ""), false},
		{"not a session key", "cron:job:1", src("telegram", "dm", "42", "", "42", ""), false},
		{"a bare namespace", "agent", src("telegram", "dm", "42", "", "42", ""), false},
	} {
		if got := ownSession(tt.key, tt.src); got != tt.own {
			t.Errorf("%s: ownSession(%q) = %v, want %v", tt.name, tt.key, got, tt.own)
		}
	}
}

func TestSentBy(t *testing.T) {
	for _, tt := range []struct {
		name      string
		user, alt string
		u         User
		want      bool
	}{
		{"user id", "42", "", User{"telegram", "42"}, true},
		{"alt id", "42", "alice", User{"telegram", "alice"}, true},
		{"another", "43", "", User{"telegram", "42"}, false},
		{"a prefix is another", "421", "", User{"telegram", "42"}, false},
		{"whatsapp jid", "15551234567:3@s.whatsapp.net", "", User{"whatsapp", "15551234567"}, true},
		{"whatsapp number as given", "15551234567", "", User{"whatsapp", "+15551234567"}, true},
		{"whatsapp another number", "15551234568@s.whatsapp.net", "", User{"whatsapp", "15551234567"}, false},
		{"jid suffixes elsewhere are ids", "42@x", "", User{"telegram", "42"}, false},
	} {
		src := &eventsv1.SessionSource{Platform: tt.u.Platform, UserId: tt.user, UserIdAlt: tt.alt}
		if got := sentBy(src, tt.u); got != tt.want {
			t.Errorf("%s: sentBy = %v, want %v", tt.name, got, tt.want)
		}
	}
}

func TestPerUserKey(t *testing.T) {
	for _, tt := range []struct {
		key, platform, id string
		want              bool
	}{
		{"agent:main:telegram:group:-100:42", "telegram", "42", true},
		{"agent:coder:telegram:group:-100:7:42", "telegram", "42", true},
		{"agent:main:slack:group:T1:C1:U42", "slack", "U42", true},
		{"agent:main:telegram:group:-100", "telegram", "-100", false}, // a chat alone: shared
		{"agent:main:telegram:dm:42", "telegram", "42", false},
		{"agent:main:background:telegram:group:-100:42", "telegram", "42", false},
		{"agent:main:telegram:group:-100:421", "telegram", "42", false},
		{"agent:main:discord:group:-100:42", "telegram", "42", false},
		{"cron:telegram:group:-100:42", "telegram", "42", false},
	} {
		if got := perUserKey(tt.key, tt.platform, tt.id); got != tt.want {
			t.Errorf("perUserKey(%q, %s, %s) = %v, want %v", tt.key, tt.platform, tt.id, got, tt.want)
		}
	}
	if got := likeEscape(`50%_off\`); got != `50\%\_off\\` {
		t.Errorf("likeEscape: %q", got)
	}
}
