package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/switchboard-chat/switchboard/pkg/telegramfake"
)

// Hermes's /save end to end: switchboard dev with Telegram's fake and
// the fake model. After one exchange, /save md notes sends the chat a
// document (sendDocument, uploaded from the attachment store) holding
// the Markdown transcript of both messages, captioned with its name,
// and then says what it saved; an unknown format answers the usage and
// sends nothing.
func TestSaveEndToEnd(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the whole system")
	}
	t.Parallel()
	tg, err := telegramfake.New("4343:telegram-test-token", "switchboard_bot")
	if err != nil {
		t.Fatal(err)
	}
	defer tg.Close()
	d := startDev(t,
		"GATEWAY_ALLOW_ALL_USERS=true",
		"TELEGRAM_BOT_TOKEN=4343:telegram-test-token", "TELEGRAM_API_BASE_URL="+tg.URL,
		"SWITCHBOARD_GATEWAYS__TELEGRAM__POLL_TIMEOUT=1s",
		"SWITCHBOARD_ROUTER__HOME_NOTICE=false",
	)
	defer d.stop(t)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	id := 0
	// say sends text and waits for n more messages in the chat.
	say := func(text string, n int) []telegramfake.Message {
		t.Helper()
		before := len(tg.Messages("77"))
		id++
		tg.Inject(map[string]any{"message": map[string]any{
			"message_id": id, "date": time.Now().Unix(), "text": text,
			"chat": map[string]any{"id": 77, "type": "private"},
			"from": map[string]any{"id": 77, "is_bot": false, "first_name": "Ann"},
		}})
		for len(tg.Messages("77")) < before+n {
			if ctx.Err() != nil {
				t.Fatalf("timed out waiting for the answer to %q: %+v\nstderr:\n%s", text, tg.Messages("77"), d.stderr.String())
			}
			time.Sleep(50 * time.Millisecond)
		}
		return tg.Messages("77")[before:]
	}
	if got := say("hello there", 1); got[0].Shown != "echo: hello there" {
		t.Fatalf("answer: %+v", got[0])
	}
	got := say("/save md notes", 2)
	doc, done := got[0], got[1]
	if doc.Kind != "document" || doc.File != "upload:notes.md" || doc.Shown != "💾 notes.md" {
		t.Fatalf("the file: %+v", doc)
	}
	md := string(doc.Data)
	for _, want := range []string{"# Session: ", "- Source: `telegram`", "- Messages: 2", "## User - ", "hello there", "## Assistant - ", "echo: hello there"} {
		if !strings.Contains(md, want) {
			t.Errorf("the document lacks %q:\n%s", want, md)
		}
	}
	if !strings.HasPrefix(done.Shown, "💾 Saved 2 messages: notes.md, ") {
		t.Errorf("the answer after the file: %q", done.Shown)
	}
	got = say("/save pdf", 1)
	if !strings.HasPrefix(got[0].Shown, "Unknown format 'pdf' — expected one of: json, md, html") || !strings.Contains(got[0].Shown, "Usage: /save <format> [filename] [redact]") {
		t.Errorf("/save pdf: %+v", got[0])
	}
	time.Sleep(500 * time.Millisecond)
	if n := len(tg.Messages("77")); n != 4 {
		t.Errorf("the chat has %d messages, want 4: %+v", n, tg.Messages("77"))
	}
}
