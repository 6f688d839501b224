package mattermost

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	deliveryv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/delivery/v1"
	eventsv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/events/v1"
	"github.com/switchboard-chat/switchboard/pkg/platform"
	"github.com/switchboard-chat/switchboard/pkg/sessionkey"
)

// postedFrame is a posted event as the server sends it.
func postedFrame(t testing.TB, channelType, sender string, p map[string]any, mentions []string) []byte {
	t.Helper()
	pj, err := json.Marshal(p)
	if err != nil {
		t.Fatal(err)
	}
	data := map[string]any{"channel_type": channelType, "channel_display_name": "Town Square", "channel_name": "town-square",
		"post": string(pj), "sender_name": "@" + sender, "team_id": "t"}
	if mentions != nil {
		m, _ := json.Marshal(mentions)
		data["mentions"] = string(m)
	}
	b, err := json.Marshal(map[string]any{"event": "posted", "data": data, "broadcast": map[string]any{"channel_id": p["channel_id"]}, "seq": 3})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestNormalize(t *testing.T) {
	r := newRules(bot, botName, true, map[string]bool{priv: true}, platform.BotsNone)
	post := func(ch, user, msg string, extra map[string]any) map[string]any {
		p := map[string]any{"id": "post00000000000000000000aa", "create_at": 1700000000000, "channel_id": ch, "user_id": user, "message": msg, "type": ""}
		for k, v := range extra {
			p[k] = v
		}
		return p
	}
	for _, tc := range []struct {
		name             string
		chType           string
		post             map[string]any
		mentions         []string
		skip             skip
		text, chat       string
		thread, chatName string
		key              string
	}{
		{name: "dm", chType: "D", post: post(dmCh, ann, "hello", nil), text: "hello", chat: "dm", chatName: "ann",
			key: "agent:main:mattermost:dm:" + dmCh},
		{name: "dm thread", chType: "D", post: post(dmCh, ann, "more", map[string]any{"root_id": "root0000000000000000000000"}), text: "more", chat: "dm",
			thread: "root0000000000000000000000", chatName: "ann", key: "agent:main:mattermost:dm:" + dmCh + ":root0000000000000000000000"},
		{name: "channel mention", chType: "O", post: post(town, ann, "@hermes hi", nil), text: "hi", chat: "channel", chatName: "Town Square",
			key: "agent:main:mattermost:channel:" + town + ":" + ann},
		{name: "channel thread shared", chType: "O", post: post(town, ann, "@HERMES, go", map[string]any{"root_id": "root0000000000000000000000"}), text: "go", chat: "channel",
			thread: "root0000000000000000000000", chatName: "Town Square", key: "agent:main:mattermost:channel:" + town + ":root0000000000000000000000"},
		{name: "@here lists every member", chType: "O", post: post(town, ann, "@here standup in 5", nil), mentions: []string{ann, bot}, skip: skipNotMention},
		{name: "@channel with the bot named", chType: "O", post: post(town, ann, "@channel @hermes summarize", nil), mentions: []string{ann, bot},
			text: "@channel  summarize", chat: "channel", chatName: "Town Square", key: "agent:main:mattermost:channel:" + town + ":" + ann},
		{name: "private is a group", chType: "P", post: post(priv, ann, "free here", nil), text: "free here", chat: "group", chatName: "Town Square",
			key: "agent:main:mattermost:group:" + priv + ":" + ann},
		{name: "group message", chType: "G", post: post(grp, ann, "@hermes yo", nil), text: "yo", chat: "group", chatName: "Town Square",
			key: "agent:main:mattermost:group:" + grp + ":" + ann},
		{name: "mention alone keeps text", chType: "O", post: post(town, ann, "@hermes", nil), text: "@hermes", chat: "channel", chatName: "Town Square",
			key: "agent:main:mattermost:channel:" + town + ":" + ann},
		{name: "not mentioned", chType: "O", post: post(town, ann, "hi @hermesfan", nil), skip: skipNotMention},
		{name: "command needs a mention", chType: "O", post: post(town, ann, "/new", nil), skip: skipNotMention},
		{name: "own", chType: "D", post: post(dmCh, bot, "answer", nil), skip: skipOwn},
		{name: "system", chType: "O", post: post(town, ann, "joined @hermes", map[string]any{"type": "system_join_channel"}), skip: skipSystem},
		{name: "deleted", chType: "D", post: post(dmCh, ann, "gone", map[string]any{"delete_at": 5}), skip: skipDeleted},
		{name: "empty", chType: "D", post: post(dmCh, ann, "  ", nil), skip: skipEmpty},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f, err := parseFrame(postedFrame(t, tc.chType, "ann", tc.post, tc.mentions))
			if err != nil {
				t.Fatal(err)
			}
			ev, err := parsePosted(f.Data)
			if err != nil {
				t.Fatal(err)
			}
			got, why := normalize(ev, r)
			if why != tc.skip {
				t.Fatalf("skip %q, want %q", why, tc.skip)
			}
			if tc.skip != skipNone {
				return
			}
			src := got.GetSource()
			if got.GetText() != tc.text || src.GetChatType() != tc.chat || src.GetThreadId() != tc.thread || src.GetChatName() != tc.chatName {
				t.Fatalf("event %v: want text %q, chat type %q, thread %q, name %q", got, tc.text, tc.chat, tc.thread, tc.chatName)
			}
			if got.GetSentAt().AsTime() != time.UnixMilli(1700000000000).UTC() || got.GetEventId() != "post00000000000000000000aa" {
				t.Fatalf("event %v: sent_at or id", got)
			}
			if key := sessionkey.Build(src, sessionkey.DefaultOptions()); key != tc.key {
				t.Fatalf("session key %q, want Hermes's %q", key, tc.key)
			}
		})
	}
}

func TestAttachmentsOfPost(t *testing.T) {
	p := &post{FileIDs: []string{"a", "b", "c", ""}}
	p.Metadata.Files = []fileInfo{{ID: "a", Name: "x.png", MimeType: "image/png", Size: 3}, {ID: "b", Name: "talk.ogg", Size: -1}}
	atts := attachments(p)
	want := []struct {
		kind eventsv1.AttachmentKind
		mime string
		size int64
	}{{eventsv1.AttachmentKind_ATTACHMENT_KIND_IMAGE, "image/png", 3}, {eventsv1.AttachmentKind_ATTACHMENT_KIND_AUDIO, "audio/ogg", 0},
		{eventsv1.AttachmentKind_ATTACHMENT_KIND_DOCUMENT, "", 0}}
	if len(atts) != len(want) {
		t.Fatalf("%d attachments, want %d", len(atts), len(want))
	}
	for i, w := range want {
		if a := atts[i]; a.GetKind() != w.kind || a.GetMimeType() != w.mime || a.GetSizeBytes() != w.size {
			t.Errorf("attachment %d: %v, want %v", i, a, w)
		}
	}
}

func TestParseErrors(t *testing.T) {
	for _, raw := range []string{
		`not json`, `{}`, `{"event":"posted","data":{}}`, `{"event":"posted","data":{"post":"{}"}}`,
		`{"event":"posted","data":"str"}`,
	} {
		f, err := parseFrame([]byte(raw))
		if err == nil {
			_, err = parsePosted(f.Data)
		}
		if !errors.Is(err, errMalformed) {
			t.Errorf("%s: error %v, want malformed", raw, err)
		}
	}
}

func TestRetryAfter(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	for _, tc := range []struct {
		h    map[string]string
		want time.Duration
	}{
		{map[string]string{"X-Ratelimit-Reset": "3"}, 3 * time.Second},
		{map[string]string{"X-Ratelimit-Reset": "0"}, time.Second},
		{map[string]string{"Retry-After": "7"}, 7 * time.Second},
		{map[string]string{"X-Ratelimit-Reset": "1800000010"}, 10 * time.Second},
		{map[string]string{"X-Ratelimit-Reset": "soon"}, time.Second},
		{nil, time.Second},
	} {
		h := http.Header{}
		for k, v := range tc.h {
			h.Set(k, v)
		}
		if got := retryAfter(h, now); got != tc.want {
			t.Errorf("%v: %s, want %s", tc.h, got, tc.want)
		}
	}
}

func TestClassify(t *testing.T) {
	for _, tc := range []struct {
		status int
		want   deliveryv1.ErrorClass
	}{
		{429, deliveryv1.ErrorClass_ERROR_CLASS_RATE_LIMITED}, {500, deliveryv1.ErrorClass_ERROR_CLASS_RETRYABLE},
		{502, deliveryv1.ErrorClass_ERROR_CLASS_RETRYABLE}, {408, deliveryv1.ErrorClass_ERROR_CLASS_RETRYABLE},
		{400, deliveryv1.ErrorClass_ERROR_CLASS_PERMANENT}, {401, deliveryv1.ErrorClass_ERROR_CLASS_PERMANENT},
		{403, deliveryv1.ErrorClass_ERROR_CLASS_PERMANENT}, {404, deliveryv1.ErrorClass_ERROR_CLASS_PERMANENT},
	} {
		err := classify(&apiError{Op: "x", Status: tc.status, RetryAfter: 2 * time.Second})
		var se *platform.SendError
		got := deliveryv1.ErrorClass_ERROR_CLASS_RETRYABLE
		if errors.As(err, &se) {
			got = se.Class
		}
		if got != tc.want {
			t.Errorf("HTTP %d: %s, want %s", tc.status, got, tc.want)
		}
	}
	if classify(errors.New("connection reset")) == nil {
		t.Error("a network error was dropped")
	}
}

func TestConfigValidate(t *testing.T) {
	for _, tc := range []struct {
		cfg Config
		ok  bool
	}{
		{Config{URL: "https://mm.example.com", Token: "t"}, true},
		{Config{URL: "https://mm.example.com", Token: "t", ReplyMode: "Thread"}, true},
		{Config{URL: "https://mm.example.com"}, false},
		{Config{URL: "mm.example.com", Token: "t"}, false},
		{Config{URL: "https://mm.example.com", Token: "t", ReplyMode: "nested"}, false},
	} {
		if err := tc.cfg.Validate(); (err == nil) != tc.ok {
			t.Errorf("%+v: %v, want ok %v", tc.cfg, err, tc.ok)
		}
	}
}

// TestAudioFileIsAVoiceMessage: as Hermes's Mattermost adapter types a
// post with an audio/* file VOICE (unless it has an image too, or is a
// /command), and /voice on answers a voice message with speech, the
// audio file is published as a voice message; other files keep their
// kinds.
func TestAudioFileIsAVoiceMessage(t *testing.T) {
	r := newRules(bot, botName, true, nil, platform.BotsNone)
	const (
		voice = eventsv1.AttachmentKind_ATTACHMENT_KIND_VOICE
		audio = eventsv1.AttachmentKind_ATTACHMENT_KIND_AUDIO
		image = eventsv1.AttachmentKind_ATTACHMENT_KIND_IMAGE
		doc   = eventsv1.AttachmentKind_ATTACHMENT_KIND_DOCUMENT
		video = eventsv1.AttachmentKind_ATTACHMENT_KIND_VIDEO
	)
	type file struct{ name, mime string }
	for _, tc := range []struct {
		name  string
		text  string
		files []file
		want  []eventsv1.AttachmentKind
	}{
		{name: "audio clip", files: []file{{"voice.m4a", "audio/mp4"}}, want: []eventsv1.AttachmentKind{voice}},
		{name: "audio typed by its name", text: "listen", files: []file{{"talk.ogg", ""}}, want: []eventsv1.AttachmentKind{voice}},
		{name: "audio with a document", files: []file{{"a.mp3", "audio/mpeg"}, {"b.pdf", "application/pdf"}}, want: []eventsv1.AttachmentKind{voice, doc}},
		{name: "an image makes it a photo", files: []file{{"a.mp3", "audio/mpeg"}, {"b.png", "image/png"}}, want: []eventsv1.AttachmentKind{audio, image}},
		{name: "a command is not a voice message", text: "/whatever", files: []file{{"a.ogg", "audio/ogg"}}, want: []eventsv1.AttachmentKind{audio}},
		{name: "video is not audio", files: []file{{"a.mp4", "video/mp4"}}, want: []eventsv1.AttachmentKind{video}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var ids []string
			var infos []map[string]any
			for i, f := range tc.files {
				id := fmt.Sprintf("file%022d", i)
				ids = append(ids, id)
				infos = append(infos, map[string]any{"id": id, "name": f.name, "mime_type": f.mime, "size": 10})
			}
			p := map[string]any{"id": "post00000000000000000000aa", "create_at": 1700000000000, "channel_id": dmCh, "user_id": ann,
				"message": tc.text, "type": "", "file_ids": ids, "metadata": map[string]any{"files": infos}}
			f, err := parseFrame(postedFrame(t, "D", "ann", p, nil))
			if err != nil {
				t.Fatal(err)
			}
			ev, err := parsePosted(f.Data)
			if err != nil {
				t.Fatal(err)
			}
			got, why := normalize(ev, r)
			if why != skipNone {
				t.Fatalf("skipped: %s", why)
			}
			var kinds []eventsv1.AttachmentKind
			for _, a := range got.GetAttachments() {
				kinds = append(kinds, a.GetKind())
			}
			if !slices.Equal(kinds, tc.want) {
				t.Fatalf("kinds %v, want %v", kinds, tc.want)
			}
			// Hermes types the post by the files it downloaded: it is a
			// voice message once an audio file is (the worker decides,
			// when a turn has fetched them).
			byDownload := !strings.HasPrefix(tc.text, "/") && (slices.Contains(tc.want, voice) || slices.Contains(tc.want, audio))
			if got.GetVoiceByDownload() != byDownload {
				t.Fatalf("voice_by_download %v, want %v", got.GetVoiceByDownload(), byDownload)
			}
		})
	}
}
