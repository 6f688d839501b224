package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/switchboard-chat/switchboard/pkg/telegramfake"
)

// TestVoiceRepliesEndToEnd runs `switchboard dev` with the Telegram
// gateway on the Telegram fake and the fake model (which transcribes and
// speaks): Hermes's /voice on makes the answer to a voice message come
// also as a Telegram voice message (sendVoice, Opus in Ogg) after the
// text, not the answer to a text message; /voice tts every answer;
// /voice off none. The text answers are unchanged throughout.
func TestVoiceRepliesEndToEnd(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the whole system")
	}
	t.Parallel()
	tg, err := telegramfake.New("4242:telegram-test-token", "switchboard_bot")
	if err != nil {
		t.Fatal(err)
	}
	defer tg.Close()
	d := startDev(t,
		"GATEWAY_ALLOW_ALL_USERS=true",
		"TELEGRAM_BOT_TOKEN=4242:telegram-test-token", "TELEGRAM_API_BASE_URL="+tg.URL,
		"SWITCHBOARD_GATEWAYS__TELEGRAM__POLL_TIMEOUT=1s",
		"SWITCHBOARD_ROUTER__HOME_NOTICE=false",
	)
	defer d.stop(t)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	msgs := func() []telegramfake.Message { return tg.Messages("99") }
	waitN := func(what string, n int) []telegramfake.Message {
		t.Helper()
		for len(msgs()) < n {
			if ctx.Err() != nil {
				t.Fatalf("timed out waiting for %s (have %+v)\nstderr:\n%s", what, msgs(), d.stderr.String())
			}
			time.Sleep(50 * time.Millisecond)
		}
		return msgs()
	}
	ann := func(id int, extra map[string]any) map[string]any {
		m := map[string]any{"message_id": id, "date": time.Now().Unix(),
			"chat": map[string]any{"id": 99, "type": "private", "first_name": "Ann"},
			"from": map[string]any{"id": 99, "is_bot": false, "first_name": "Ann"}}
		for k, v := range extra {
			m[k] = v
		}
		return map[string]any{"message": m}
	}
	text := func(id int, s string) { tg.Inject(ann(id, map[string]any{"text": s})) }
	voice := func(id int, said string) {
		fileID := "voice-" + said[:3]
		tg.AddFile(fileID, []byte(said))
		tg.Inject(ann(id, map[string]any{"voice": map[string]any{"file_id": fileID, "file_unique_id": "u" + fileID,
			"duration": 2, "mime_type": "audio/ogg", "file_size": len(said)}}))
	}
	heard := func(said string) string {
		return `echo: [The user sent a voice message~ Here's what they said: "` + said + `"]`
	}
	// n is how many messages the chat had before each step.
	type step struct {
		send func(id int)
		want []string // shown texts; "<voice>" for a voice message
	}
	steps := []step{
		{send: func(id int) { text(id, "/voice on") }, want: []string{"Voice mode enabled.\nI'll reply with voice when you send voice messages.\nUse /voice tts to get voice replies for all messages."}},
		{send: func(id int) { text(id, "just text") }, want: []string{"echo: just text"}},
		{send: func(id int) { voice(id, "what time is it") }, want: []string{heard("what time is it"), "<voice>"}},
		{send: func(id int) { text(id, "/voice tts") }, want: []string{"Auto-TTS enabled.\nAll replies will include a voice message."}},
		{send: func(id int) { text(id, "typed **now**") }, want: []string{"echo: typed now", "<voice>"}},
		{send: func(id int) { text(id, "/voice off") }, want: []string{"Voice mode disabled. Text-only replies."}},
		{send: func(id int) { voice(id, "not spoken back") }, want: []string{heard("not spoken back")}},
		{send: func(id int) { text(id, "/voice status") }, want: []string{"Voice mode: Off (text only)"}},
	}
	n := 0
	for i, s := range steps {
		s.send(100 + i)
		got := waitN("step "+string(rune('1'+i)), n+len(s.want))
		// A voice message that should not be there comes right after
		// its text, before the next step's answer, which then fails.
		for j, want := range s.want {
			m := got[n+j]
			if want == "<voice>" {
				if m.Kind != "voice" || !bytes.HasPrefix(m.Data, []byte("OggS")) || !bytes.Contains(m.Data, []byte("OpusHead")) || !strings.HasPrefix(m.File, "upload:") {
					t.Fatalf("step %d: message %d is %s %q (%d bytes), want a voice message of Ogg/Opus", i+1, j, m.Kind, m.File, len(m.Data))
				}
				continue
			}
			if m.Kind != "text" || m.Shown != want {
				t.Fatalf("step %d: message %d is %s %q, want %q", i+1, j, m.Kind, m.Shown, want)
			}
		}
		n += len(s.want)
	}
	time.Sleep(500 * time.Millisecond)
	if got := msgs(); len(got) != n {
		t.Fatalf("the chat has %d messages, want %d: %+v", len(got), n, got[n:])
	}
}
