package platform_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"unicode/utf8"

	"google.golang.org/protobuf/proto"

	eventsv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/events/v1"
	"github.com/switchboard-chat/switchboard/pkg/platform"
)

func TestCheckEvent(t *testing.T) {
	t.Parallel()
	ok := func() *eventsv1.MessageReceived {
		return &eventsv1.MessageReceived{EventId: "1", Source: &eventsv1.SessionSource{ChatId: "c"}, Text: "hi"}
	}
	for _, c := range []struct {
		name   string
		change func(ev *eventsv1.MessageReceived)
		want   string // "" accepted, else a word of the error
	}{
		{"plain", func(*eventsv1.MessageReceived) {}, ""},
		{"no event id", func(ev *eventsv1.MessageReceived) { ev.EventId = "" }, "event id"},
		{"no chat", func(ev *eventsv1.MessageReceived) { ev.Source.ChatId = "" }, "chat id"},
		{"other platform", func(ev *eventsv1.MessageReceived) { ev.Source.Platform = "slack" }, "platform"},
		{"newline in event id", func(ev *eventsv1.MessageReceived) { ev.EventId = "1\r\nNats-Expected-Stream: X" }, "token"},
		{"long event id", func(ev *eventsv1.MessageReceived) { ev.EventId = strings.Repeat("9", platform.MaxEventIDBytes+1) }, "token"},
		{"text not utf-8", func(ev *eventsv1.MessageReceived) { ev.Text = "bad \xff byte" }, "encoded"},
		{"user name not utf-8", func(ev *eventsv1.MessageReceived) { ev.Source.UserName = "\xc3" }, "encoded"},
		{"too big", func(ev *eventsv1.MessageReceived) { ev.Text = strings.Repeat("x", 1024) }, "limit"},
	} {
		t.Run(c.name, func(t *testing.T) {
			ev := ok()
			c.change(ev)
			err := platform.CheckEvent(ev, "telegram", "bot1", 512)
			switch {
			case c.want == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
				t.Fatalf("err = %v, want one about %q", err, c.want)
			}
			if err == nil && (ev.GetSource().GetPlatform() != "telegram" || ev.GetSource().GetAccount() != "bot1") {
				t.Fatalf("platform and account not filled: %v", ev.GetSource())
			}
		})
	}
}

// FuzzCheckEvent: whatever the inbound check accepts can be published —
// it encodes, fits the size limit, and its bus message id is a printable
// header value — and the check never panics.
func FuzzCheckEvent(f *testing.F) {
	f.Add("1", "", "99", "hi", "Ann", uint16(1024))
	f.Add("C1:1700000000.000100", "T1", "C1", "<@U0BOT> hi", "", uint16(256))
	f.Add("1\r\nX: y", "", "c", "", "", uint16(1024))
	f.Add("e", "acct", "c", "bad \xff", "\xc3", uint16(1024))
	f.Add("e", "", "c", strings.Repeat("long ", 100), "", uint16(64))
	f.Fuzz(func(t *testing.T, eventID, account, chatID, text, userName string, max uint16) {
		limit := 64 + int(max)%4096
		ev := &eventsv1.MessageReceived{EventId: eventID, Text: text,
			Source: &eventsv1.SessionSource{Account: account, ChatId: chatID, UserName: userName}}
		if err := platform.CheckEvent(ev, "telegram", "bot1", limit); err != nil {
			return
		}
		b, err := proto.Marshal(ev)
		if err != nil {
			t.Fatalf("accepted an event that does not encode: %v", err)
		}
		if len(b) > limit {
			t.Fatalf("accepted %d bytes over a limit of %d", len(b), limit)
		}
		src := ev.GetSource()
		if src.GetPlatform() != "telegram" || src.GetChatId() == "" || ev.GetEventId() == "" {
			t.Fatalf("accepted an event without platform, chat or id: %v", ev)
		}
		msgID := src.GetPlatform() + ":" + src.GetAccount() + ":" + ev.GetEventId()
		if !utf8.ValidString(msgID) || strings.ContainsAny(msgID, "\r\n\x00") {
			t.Fatalf("message id %q is not a header value", msgID)
		}
		for _, s := range []string{ev.GetText(), src.GetUserName(), src.GetChatId(), src.GetAccount()} {
			if !utf8.ValidString(s) {
				t.Fatalf("accepted invalid UTF-8 %q", s)
			}
		}
	})
}

// FuzzSummary: whatever a platform sends, the summary of it is short,
// valid UTF-8, the same each time, made only of the characters of field
// names, ids and shapes (no spaces inside a value, no @ of an address,
// no + of a phone number: no text of the payload's values), says valid
// JSON is JSON, and never panics.
func FuzzSummary(f *testing.F) {
	for _, name := range []string{"telegram_update.json", "slack_event.json", "discord_message.json", "matrix_event.json", "email.eml"} {
		raw, err := os.ReadFile(filepath.Join("testdata", "payloads", name))
		if err != nil {
			f.Fatal(err)
		}
		f.Add(raw)
	}
	f.Add([]byte(`{"update_id":"+15551234567","@ann:x":{"ann@example.com":[1,"two",{"id":"3"}]}}`))
	f.Add([]byte(`[[[[[[[[[[[[{"a":"b"}]]]]]]]]]]]]`))
	f.Add([]byte(`{"a":1} {"b":2}`))
	f.Fuzz(func(t *testing.T, raw []byte) {
		got := platform.Summary(raw)
		if got != platform.Summary(raw) {
			t.Fatalf("two summaries of one payload")
		}
		if !utf8.ValidString(got) {
			t.Fatalf("summary not UTF-8: %q", got)
		}
		head, shape, _ := strings.Cut(got, " sha256:")
		if !strings.HasSuffix(head, " bytes") {
			t.Fatalf("summary %q does not start with the size", got)
		}
		_, shape, _ = strings.Cut(shape, " ")
		if len(shape) > 400+len("…") {
			t.Fatalf("shape %d bytes long: %q", len(shape), shape)
		}
		for _, r := range shape {
			if !strings.ContainsRune(`abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.-:$!/=<>{}[]()" …`, r) {
				t.Fatalf("shape %q has %q, which no field name, id or shape has", shape, r)
			}
		}
		if json.Valid(raw) && shape == "not JSON" {
			t.Fatalf("valid JSON %q summarized as not JSON", raw)
		}
	})
}
