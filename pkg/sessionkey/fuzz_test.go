package sessionkey

import (
	"encoding/json"
	"strings"
	"testing"
)

// FuzzBuild checks that Build never panics, is deterministic, always starts
// with the agent namespace, and keeps the participant's place in the key.
func FuzzBuild(f *testing.F) {
	f.Add("telegram", "dm", "99", "99", "", "", "", "", "", true, false)
	f.Add("slack", "group", "C0CHANNEL", "U0USER01", "", "", "", "T0WORKSPACE", "", true, false)
	f.Add("discord", "group", "900000000000000001", "42", "", "", "700000000000000007", "1", "", true, false)
	f.Add("whatsapp", "group", "120363000000000000@g.us", "15551234567:12@s.whatsapp.net", "", "", "", "", "", true, false)
	f.Add("whatsapp", "dm", "+", "", "", "", "", "", "main", false, true)
	f.Add("", "", "", "", "", "", "", "", "default", false, false)

	f.Fuzz(func(t *testing.T, platform, chatType, chatID, userID, userIDAlt, threadID, prospective, scopeID, profile string, groupPerUser, threadPerUser bool) {
		s := &src{
			Platform: platform, ChatType: chatType, ChatId: chatID, UserId: userID, UserIdAlt: userIDAlt,
			ThreadId: threadID, ProspectiveThreadId: prospective, ScopeId: scopeID,
		}
		opts := Options{Profile: profile, GroupSessionsPerUser: groupPerUser, ThreadSessionsPerUser: threadPerUser}

		key := Build(s, opts)
		if again := Build(s, opts); again != key {
			t.Fatalf("Build not deterministic: %q then %q", key, again)
		}
		if !strings.HasPrefix(key, "agent:") {
			t.Fatalf("key %q does not start with agent:", key)
		}
		if want := namespace(profile) + ":" + platform + ":"; !strings.HasPrefix(key, want) {
			t.Fatalf("key %q does not start with %q", key, want)
		}
		// Fields outside the key never change it.
		s2 := &src{
			Platform: platform, ChatType: chatType, ChatId: chatID, UserId: userID, UserIdAlt: userIDAlt,
			ThreadId: threadID, ProspectiveThreadId: prospective, ScopeId: scopeID,
			Account: "acct", ChatName: "name", UserName: "user", ChatIdAlt: "alt", ParentChatId: "p", ChatTopic: "topic", IsBot: true,
		}
		if other := Build(s2, opts); other != key {
			t.Fatalf("ignored fields changed the key: %q vs %q", key, other)
		}
		// A shared group (no per-user sessions) has one key for everyone.
		if chatType != "" && chatType != "dm" && !groupPerUser {
			s3 := &src{Platform: platform, ChatType: chatType, ChatId: chatID, ThreadId: threadID, ProspectiveThreadId: prospective, ScopeId: scopeID, UserId: "someone-else"}
			if other := Build(s3, opts); other != key {
				t.Fatalf("shared group key depends on sender: %q vs %q", key, other)
			}
		}
	})
}

// FuzzParseRequest checks that the JSON line parser never panics, and that
// whatever it accepts survives a round trip through its own JSON form.
func FuzzParseRequest(f *testing.F) {
	f.Add([]byte(`{"source":{"platform":"telegram","chat_type":"group","chat_id":"-1002285219667","user_id":"alice"}}`))
	f.Add([]byte(`{"source":{"platform":"slack","guild_id":"T1","chat_id":"C1"},"profile":null,"group_sessions_per_user":false}`))
	f.Add([]byte(`{"source":{"platform":"telegram","chat_id":-100,"user_id":42},"thread_sessions_per_user":true,"profile":"main"}`))
	f.Add([]byte(`{"source":{"platform":"x","chat_id":1.5}}`))
	f.Add([]byte(`{"source":`))
	f.Add([]byte(``))

	f.Fuzz(func(t *testing.T, line []byte) {
		src, opts, err := ParseRequest(line)
		if err != nil {
			return
		}
		if src.GetPlatform() == "" {
			t.Fatal("accepted a source without platform")
		}
		key := Build(src, opts)
		if !strings.HasPrefix(key, "agent:") {
			t.Fatalf("key %q does not start with agent:", key)
		}

		// Re-encode what was understood and parse it again: same key.
		again, err := json.Marshal(map[string]any{
			"source": map[string]any{
				"platform": src.Platform, "chat_type": src.ChatType, "chat_id": src.ChatId,
				"user_id": src.UserId, "user_id_alt": src.UserIdAlt, "thread_id": src.ThreadId,
				"prospective_thread_id": src.ProspectiveThreadId, "scope_id": src.ScopeId,
			},
			"group_sessions_per_user":  opts.GroupSessionsPerUser,
			"thread_sessions_per_user": opts.ThreadSessionsPerUser,
			"profile":                  opts.Profile,
		})
		if err != nil {
			t.Fatalf("marshal: %v", err)
		}
		src2, opts2, err := ParseRequest(again)
		if err != nil {
			t.Fatalf("re-parse %s: %v", again, err)
		}
		if key2 := Build(src2, opts2); key2 != key {
			t.Fatalf("round trip changed the key: %q vs %q", key, key2)
		}
	})
}

// FuzzBackground checks that no chat's key (every source a gateway may
// send, whatever its ids hold, under any profile) reads as a /background
// task's, and that a task's key keeps its chat's key and gives its id
// and its chat's key back.
func FuzzBackground(f *testing.F) {
	f.Add("telegram", "dm", "99", "99", "", "", "bg_072011_a1b2c3")
	f.Add("matrix", "group", "!r:example.org", "@ann:example.org", "$t:x", "main", "bg_1")
	f.Add("background", "dm", "x", "", "", "", "bg")
	f.Fuzz(func(t *testing.T, platform, chatType, chatID, userID, threadID, profile, task string) {
		opts := Options{Profile: profile, GroupSessionsPerUser: true}
		chat := Build(&src{Platform: platform, ChatType: chatType, ChatId: chatID, UserId: userID, ThreadId: threadID}, opts)
		if _, ok := BackgroundTask(chat, profile); ok && platform != BackgroundPlatform {
			t.Fatalf("the chat key %q (platform %q) reads as a background task's", chat, platform)
		}
		if task == "" || strings.Contains(task, ":") {
			return
		}
		key := Background(chat, profile, task)
		if id, ok := BackgroundTask(key, profile); !ok || id != task {
			t.Fatalf("BackgroundTask(%q) = %q, %v; want %q", key, id, ok, task)
		}
		if c, ok := BackgroundChat(key, profile); strings.HasPrefix(chat, namespace(profile)+":") && (!ok || c != chat) {
			t.Fatalf("BackgroundChat(%q) = %q, %v; want %q", key, c, ok, chat)
		}
		if key == chat || !strings.HasSuffix(key, strings.TrimPrefix(chat, namespace(profile)+":")+":"+task) {
			t.Fatalf("task key %q does not keep the chat key %q", key, chat)
		}
	})
}
