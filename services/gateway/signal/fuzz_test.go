package signal

import (
	"bytes"
	"encoding/json"
	"io"
	"testing"

	"github.com/switchboard-chat/switchboard/services/gateway/signal/signalfake"
)

// FuzzEvent feeds the envelope parser and normalization arbitrary event
// data: they never panic, and an event they make has a chat, and an id
// that quotes and reactions can address. The committed corpus
// (testdata/fuzz/FuzzEvent) holds signal-cli's envelopes of each kind.
func FuzzEvent(f *testing.F) {
	fk := signalfake.New(bot)
	defer fk.Close()
	seed := func(v any) {
		b, err := json.Marshal(v)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	n, _ := fk.Envelope(signalfake.Message{From: ann, Text: "hello"})
	seed(n)
	n, _ = fk.Envelope(signalfake.Message{From: ann, Text: "\uFFFC hi", GroupID: group, GroupName: "Team",
		Mentions: []signalfake.Mention{{Contact: botC, Start: 0, Length: 1}}, Quote: &signalfake.Quote{ID: 9, Author: botC, Text: "q"},
		Attachments: []signalfake.Attachment{{ID: "a.jpg", ContentType: "image/jpeg", Size: 3}}})
	seed(n)
	seed(fk.NoteToSelf(botC, "note", 0))
	f.Add([]byte(`{"jsonrpc":"2.0","method":"receive","params":{"envelope":{"sourceUuid":"u","timestamp":1,"typingMessage":{"action":"STARTED"}}}}`))
	f.Add([]byte(`{"account":"+1","exception":{"message":"m","type":"t"}}`))
	f.Add([]byte(`{"envelope":{"sourceNumber":"+1","timestamp":2,"dataMessage":{"message":"\uFFFC","mentions":[{"start":-1,"length":9}]}}}`))
	r := rules{Account: bot, Groups: map[string]bool{"*": true}}
	f.Fuzz(func(t *testing.T, raw []byte) {
		n, err := parseEvent(raw)
		if err != nil {
			return
		}
		ev, _, err := normalize(n, r)
		if err != nil || ev == nil {
			return
		}
		if ev.GetSource().GetChatId() == "" || ev.GetEventId() != ev.GetMessageId() {
			t.Fatalf("event without a chat or with two ids: %v", ev)
		}
		if _, ts, ok := splitMessageID(ev.GetEventId()); !ok || ts <= 0 {
			t.Fatalf("event id %q is not <author>:<timestamp>", ev.GetEventId())
		}
	})
}

// FuzzSSE feeds the event stream reader arbitrary bytes: it never
// panics and never returns data over the bound.
func FuzzSSE(f *testing.F) {
	f.Add([]byte("id:1-1\nevent:receive\ndata:{\"a\":1}\n\n:\n\n"))
	f.Add([]byte("data: a\r\ndata: b\r\n\r\nid\nevent\n\n"))
	f.Add([]byte("data\n\n"))
	f.Fuzz(func(t *testing.T, in []byte) {
		rd := newSSEReader(bytes.NewReader(in), nil)
		for range 1000 {
			ev, err := rd.next()
			if err == io.EOF {
				return
			}
			if err != nil {
				t.Fatalf("next: %v", err)
			}
			if len(ev.data) > maxEventBytes {
				t.Fatalf("event of %d bytes", len(ev.data))
			}
		}
	})
}

func TestSSEReader(t *testing.T) {
	in := "id:1-1\nevent:receive\ndata:{\"x\":1}\n\n" + // an event
		":\n\n" + // a keepalive
		"data: one\ndata: two\r\n\r\n" + // two data lines, CRLF
		"id: 1-3\nevent: other\ndata: x\n\n" +
		"data:" + string(bytes.Repeat([]byte("y"), maxEventBytes+10)) + "\n\n" + // too large
		"id:1-5\ndata:after\n\n"
	lines := 0
	rd := newSSEReader(bytes.NewBufferString(in), func() { lines++ })
	var got []sseEvent
	for {
		ev, err := rd.next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, ev)
	}
	want := []sseEvent{{id: "1-1", name: "receive", data: []byte(`{"x":1}`)}, {data: []byte("one\ntwo")},
		{id: "1-3", name: "other", data: []byte("x")}, {oversized: true, data: []byte{}}, {id: "1-5", data: []byte("after")}}
	if len(got) != len(want) {
		t.Fatalf("got %d events, want %d: %+v", len(got), len(want), got)
	}
	for i := range want {
		if got[i].id != want[i].id || got[i].name != want[i].name || !bytes.Equal(got[i].data, want[i].data) || got[i].oversized != want[i].oversized {
			t.Errorf("event %d = %+v, want %+v", i, got[i], want[i])
		}
	}
	if lines < 10 {
		t.Errorf("activity seen on %d lines, want every line", lines)
	}
}
