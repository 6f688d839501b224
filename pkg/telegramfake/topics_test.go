package telegramfake

import (
	"encoding/json"
	"net/http"
	"net/url"
	"testing"
)

// Private-chat topics as Telegram models them (Bot API 9.3, 9.4): getMe
// tells whether the bot has topic mode and lets users create topics; a
// user's topic and one the bot creates (createForumTopic) take sends
// with their message_thread_id, the bot's message in one is a topic
// message; a thread that is not a topic of the private chat is refused,
// and without topic mode the bot cannot create one.
func TestPrivateTopics(t *testing.T) {
	t.Parallel()
	const token = "88:secret"
	s, err := New(token, "topicbot")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	call := func(method string, v url.Values) (bool, json.RawMessage, string) {
		t.Helper()
		resp, err := http.PostForm(s.URL+"/bot"+token+"/"+method, v)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var r struct {
			OK          bool            `json:"ok"`
			Result      json.RawMessage `json:"result"`
			Description string          `json:"description"`
		}
		if err := json.NewDecoder(resp.Body).Decode(&r); err != nil {
			t.Fatal(err)
		}
		return r.OK, r.Result, r.Description
	}
	me := func() map[string]any {
		_, raw, _ := call("getMe", url.Values{})
		var m map[string]any
		_ = json.Unmarshal(raw, &m)
		return m
	}
	if m := me(); m["has_topics_enabled"] != nil || m["allows_users_to_create_topics"] != nil {
		t.Errorf("getMe without topic mode: %v", m)
	}
	if _, err := s.OpenTopic("5", "Ideas"); err == nil {
		t.Error("a user opened a topic without topic mode")
	}
	if ok, _, desc := call("createForumTopic", url.Values{"chat_id": {"5"}, "name": {"Bot"}}); ok || desc != "Bad Request: the chat is not a forum" {
		t.Errorf("createForumTopic without topic mode: ok %v %q", ok, desc)
	}
	if ok, _, desc := call("sendMessage", url.Values{"chat_id": {"5"}, "message_thread_id": {"7"}, "text": {"x"}}); ok || desc != ErrThreadNotFound.Description {
		t.Errorf("send into a thread of a private chat without topics: ok %v %q", ok, desc)
	}

	s.SetPrivateTopics(true, false)
	if m := me(); m["has_topics_enabled"] != true || m["allows_users_to_create_topics"] != nil {
		t.Errorf("getMe with topic mode, users not creating: %v", m)
	}
	if _, err := s.OpenTopic("5", "Ideas"); err == nil {
		t.Error("a user opened a topic the bot does not let users create")
	}
	ok, raw, _ := call("createForumTopic", url.Values{"chat_id": {"5"}, "name": {"System"}})
	var topic struct {
		ID   int    `json:"message_thread_id"`
		Name string `json:"name"`
	}
	if _ = json.Unmarshal(raw, &topic); !ok || topic.ID == 0 || topic.Name != "System" {
		t.Fatalf("createForumTopic: ok %v %s", ok, raw)
	}
	s.SetPrivateTopics(true, true)
	if m := me(); m["allows_users_to_create_topics"] != true {
		t.Errorf("getMe: %v", m)
	}
	ideas, err := s.OpenTopic("5", "Ideas")
	if err != nil || ideas == topic.ID {
		t.Fatalf("OpenTopic: %d, %v", ideas, err)
	}
	for _, thread := range []int{topic.ID, ideas} {
		ok, raw, desc := call("sendMessage", url.Values{"chat_id": {"5"}, "message_thread_id": {itoa(thread)}, "text": {"hi"}})
		var m map[string]any
		_ = json.Unmarshal(raw, &m)
		if !ok || m["is_topic_message"] != true || m["message_thread_id"] != float64(thread) {
			t.Errorf("send into topic %d: ok %v %q %v", thread, ok, desc, m)
		}
	}
	if ok, _, _ := call("sendMessage", url.Values{"chat_id": {"6"}, "message_thread_id": {itoa(ideas)}, "text": {"x"}}); ok {
		t.Error("another private chat took a send into this chat's topic")
	}
	if ms := s.Messages("5"); len(ms) != 2 || ms[0].ThreadID != topic.ID || ms[1].ThreadID != ideas {
		t.Errorf("messages %+v", ms)
	}
	u := TopicMessage(5, 9, ideas, "in ideas")["message"].(map[string]any)
	if u["message_thread_id"] != ideas || u["is_topic_message"] != true || TopicMessage(5, 9, 0, "x")["message"].(map[string]any)["is_topic_message"] != nil {
		t.Errorf("TopicMessage: %v", u)
	}
}

func itoa(n int) string { b, _ := json.Marshal(n); return string(b) }
