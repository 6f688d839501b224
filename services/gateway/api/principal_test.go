package api

import (
	"net/http"
	"strings"
	"testing"
	"time"
)

// TestClientCannotChooseItsPrincipal: what keys the agent's per-user
// memory (the worker's "api:" + user_id_alt, else user_id) and the
// conversation (the chat id) comes from the key a request authenticated
// with, never from what the client writes: the OpenAI `user` field is
// only a display name, headers such as X-User-Id are ignored, and the
// single key naming another key's chat as its session
// ("alice.<session>") gets a conversation of its own.
func TestClientCannotChooseItsPrincipal(t *testing.T) {
	t.Parallel()
	const alice = "alice-key-0123456789abcdef"
	b := newBus(t)
	s := startService(t, b, func(c *Config) { c.Keys = map[string]string{"alice": alice} })
	r := startResponder(t, b)
	single := identityFor(t, s, testKey)

	for _, c := range []struct {
		name, key, body string
		headers         map[string]string
		user, alt, chat string
		answer          string
	}{
		{name: "alice opens her session", key: alice, body: `{"messages":[{"role":"user","content":"mine"}]}`,
			headers: map[string]string{HeaderSession: "s1"}, user: "key:alice", chat: "alice.s1", answer: "echo: mine (turn 1)"},
		{name: "the single key names alice's chat as its session", key: testKey, body: `{"messages":[{"role":"user","content":"yours?"}]}`,
			headers: map[string]string{HeaderSession: "alice.s1"}, user: single, chat: "~alice.s1", answer: "echo: yours? (turn 1)"},
		{name: "the same by the Responses API's conversation", key: testKey, body: `{"input":"yours?","conversation":"alice.s1"}`,
			user: single, chat: "~alice.s1"},
		{name: "the user field and X- headers name alice", key: testKey,
			body:    `{"user":"key:alice","messages":[{"role":"user","content":"as alice"}]}`,
			headers: map[string]string{"X-User-Id": "key:alice", "X-Hermes-User-Id": "key:alice", HeaderSession: "s2"},
			user:    single, chat: "s2", answer: "echo: as alice (turn 1)"},
		{name: "alice's session goes on undisturbed", key: alice, body: `{"messages":[{"role":"user","content":"again"}]}`,
			headers: map[string]string{HeaderSession: "s1"}, user: "key:alice", chat: "alice.s1", answer: "echo: again (turn 2)"},
		{name: "a dotted id of no key's form stays as sent", key: testKey, body: `{"messages":[{"role":"user","content":"v"}]}`,
			headers: map[string]string{HeaderSession: "Release.2"}, user: single, chat: "Release.2", answer: "echo: v (turn 1)"},
	} {
		t.Run(c.name, func(t *testing.T) {
			before := len(r.received())
			path := "/v1/chat/completions"
			if strings.Contains(c.body, `"input"`) {
				path = "/v1/responses"
			}
			res := do(t, http.MethodPost, "http://"+s.Addr()+path, c.key, c.body, c.headers)
			if res.code != http.StatusOK {
				t.Fatalf("%d %s", res.code, res.body)
			}
			if c.answer != "" && !strings.Contains(string(res.body), c.answer) {
				t.Errorf("answer %s, want %q", res.body, c.answer)
			}
			deadline := time.Now().Add(10 * time.Second)
			for len(r.received()) == before && time.Now().Before(deadline) {
				time.Sleep(10 * time.Millisecond)
			}
			evs := r.received()
			if len(evs) != before+1 {
				t.Fatalf("%d messages, want %d", len(evs), before+1)
			}
			src := evs[before].GetSource()
			if src.GetUserId() != c.user || src.GetUserIdAlt() != c.alt || src.GetChatId() != c.chat || src.GetChatType() != "dm" {
				t.Errorf("user_id %q, user_id_alt %q, chat %q (%s), want %q, %q, %q (dm)",
					src.GetUserId(), src.GetUserIdAlt(), src.GetChatId(), src.GetChatType(), c.user, c.alt, c.chat)
			}
		})
	}
}

func TestChatIDOf(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ identity, session, want string }{
		{"key:alice", "s1", "alice.s1"},
		{"key:alice", "bob.s1", "alice.bob.s1"},
		{"key-0a1b2c3d", "s1", "s1"},
		{"key-0a1b2c3d", "alice.s1", "~alice.s1"},
		{"key-0a1b2c3d", "a_b-c.d.e", "~a_b-c.d.e"},
		{"key-0a1b2c3d", "Alice.s1", "Alice.s1"}, // no key name has a capital
		{"key-0a1b2c3d", "-x.s1", "-x.s1"},       // nor starts with -
		{"key-0a1b2c3d", ".s1", ".s1"},
		{"anonymous-127.0.0.1", "alice.s1", "~alice.s1"},
	} {
		if got := chatIDOf(c.identity, c.session); got != c.want {
			t.Errorf("chatIDOf(%q, %q) = %q, want %q", c.identity, c.session, got, c.want)
		}
	}
}
