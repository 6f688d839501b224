package mattermost

import (
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/switchboard-chat/switchboard/pkg/platform"
)

// FuzzFrame feeds the websocket message parser, the posted event's
// parser and normalization arbitrary messages: they never panic, and an
// event they make is the post's, in its channel, from its author, never
// the bot's own. The committed corpus (testdata/fuzz/FuzzFrame) holds
// the server's messages of each kind.
func FuzzFrame(f *testing.F) {
	post := func(ch, user, msg string, extra map[string]any) map[string]any {
		p := map[string]any{"id": "post00000000000000000000aa", "create_at": 1700000000000, "channel_id": ch, "user_id": user, "message": msg, "type": ""}
		for k, v := range extra {
			p[k] = v
		}
		return p
	}
	f.Add(postedFrame(f, "D", "ann", post(dmCh, ann, "hello", nil), nil))
	f.Add(postedFrame(f, "O", "ann", post(town, ann, "@hermes hi", map[string]any{"root_id": "root0000000000000000000000"}), []string{bot}))
	f.Add(postedFrame(f, "G", "ann", post(grp, ann, "", map[string]any{"file_ids": []string{"f1"},
		"metadata": map[string]any{"files": []map[string]any{{"id": "f1", "name": "a.png", "mime_type": "image/png", "size": 3}}}}), nil))
	f.Add(postedFrame(f, "P", "ann", post(priv, ann, "joined", map[string]any{"type": "system_join_channel"}), nil))
	f.Add([]byte(`{"status":"OK","seq_reply":1}`))
	f.Add([]byte(`{"status":"FAIL","seq_reply":1,"error":{"id":"api.web_socket_router.not_authenticated.app_error"}}`))
	f.Add([]byte(`{"event":"hello","data":{"server_version":"10.5.0"},"broadcast":{"user_id":"u"},"seq":0}`))
	f.Add([]byte(`{"event":"typing","data":{"parent_id":"","user_id":"u"},"broadcast":{"channel_id":"c"},"seq":4}`))
	f.Add([]byte(`{"event":"posted","data":{"post":"{\"id\":\"p\",\"channel_id\":\"c\",\"user_id\":\"u\",\"message\":\"@hermes\"}","mentions":"[\"u\"]"}}`))
	f.Add(postedFrame(f, "O", "ann", post(town, ann, "@hermes build done", map[string]any{"props": map[string]any{"from_webhook": "true"}}), nil))
	r := newRules(bot, botName, true, map[string]bool{priv: true}, platform.BotsMentions)
	f.Fuzz(func(t *testing.T, raw []byte) {
		fr, err := parseFrame(raw)
		if err != nil || fr.Event != "posted" {
			return
		}
		ev, err := parsePosted(fr.Data)
		if err != nil {
			return
		}
		ev.FromBot = ev.Post.fromProgram()
		m, why := normalize(ev, r)
		if why != skipNone {
			if m != nil {
				t.Fatalf("skipped (%s) with an event", why)
			}
			return
		}
		src := m.GetSource()
		p := ev.Post
		if src.GetIsBot() != ev.FromBot || (ev.FromBot && !mentions(p.Message, r)) {
			t.Fatalf("event %v of a post from a program %v: is_bot, or published without a mention", m, ev.FromBot)
		}
		if m.GetEventId() != p.ID || src.GetChatId() != p.ChannelID || src.GetUserId() != p.UserID || p.UserID == bot {
			t.Fatalf("event %v does not match post %+v", m, p)
		}
		if src.GetPlatform() != "mattermost" || src.GetChatType() == "" || (src.GetChatType() == "dm") != (ev.ChannelType == "D") {
			t.Fatalf("event %v: platform or chat type", m)
		}
		if m.GetText() == "" && len(m.GetAttachments()) == 0 {
			t.Fatalf("event %v without text or files", m)
		}
		if !utf8.ValidString(m.GetText()) && utf8.ValidString(p.Message) {
			t.Fatalf("mention stripping broke the text: %q", m.GetText())
		}
	})
}

// FuzzPostList feeds the catch-up's page of posts (GET
// /channels/{id}/posts) arbitrary JSON: it never panics.
func FuzzPostList(f *testing.F) {
	f.Add([]byte(`{"order":["a"],"posts":{"a":{"id":"a","channel_id":"c","user_id":"u","message":"hi","create_at":5}},"next_post_id":"","prev_post_id":""}`))
	f.Add([]byte(`{"order":[],"posts":{}}`))
	f.Add([]byte(`{"order":null,"posts":{"a":null}}`))
	r := newRules(bot, botName, false, nil, platform.BotsNone)
	f.Fuzz(func(t *testing.T, raw []byte) {
		var list postList
		if json.Unmarshal(raw, &list) != nil {
			return
		}
		for _, p := range list.Posts {
			if p == nil || p.ID == "" {
				continue
			}
			m, why := normalize(&posted{Post: p, ChannelType: "O"}, r)
			if why == skipNone && m.GetEventId() != p.ID {
				t.Fatalf("event %v for post %s", m, p.ID)
			}
		}
	})
}

// FuzzErrorAnswer feeds the reading of a failed REST answer (the error
// body and the rate-limit headers) arbitrary input: it never panics, and
// a 429's wait is at least a second and at most what the headers can say.
func FuzzErrorAnswer(f *testing.F) {
	f.Add(429, "3", "", `{"id":"api.context.rate_limit.app_error","message":"Too many requests","status_code":429}`)
	f.Add(429, "1800000010", "", ``)
	f.Add(429, "", "7", `not json`)
	f.Add(403, "", "", `{"id":"api.context.permissions.app_error","message":"You do not have the appropriate permissions."}`)
	f.Add(500, "-1", "x", strings.Repeat("e", 300))
	f.Fuzz(func(t *testing.T, status int, reset, retry, body string) {
		if status < 100 || status > 999 {
			return
		}
		h := http.Header{}
		h.Set("X-Ratelimit-Reset", reset)
		h.Set("Retry-After", retry)
		resp := &http.Response{StatusCode: status, Header: h, Body: io.NopCloser(strings.NewReader(body))}
		err := responseError("op", resp)
		var ae *apiError
		if !errors.As(err, &ae) || ae.Status != status {
			t.Fatalf("error %v for HTTP %d", err, status)
		}
		if status == http.StatusTooManyRequests && ae.RetryAfter < time.Second {
			t.Fatalf("a 429 asks to wait %s", ae.RetryAfter)
		}
		if len(ae.Message) > 64<<10 {
			t.Fatalf("message of %d bytes", len(ae.Message))
		}
	})
}
