package telegram

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"google.golang.org/protobuf/encoding/prototext"
	"google.golang.org/protobuf/proto"

	eventsv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/events/v1"
)

func TestNormalizeKinds(t *testing.T) {
	t.Parallel()
	me := identity{id: testBotID, username: testUsername}
	g := gating{requireMention: true}
	for i, c := range kindCases() {
		t.Run(c.name, func(t *testing.T) {
			c.update["update_id"] = 1000 + i
			raw, _ := json.Marshal(c.update)
			out, err := parseUpdate(raw, me, g)
			if err != nil {
				t.Fatalf("parse: %v", err)
			}
			if c.want == nil {
				if out.ev != nil || out.skip == "" {
					t.Fatalf("want skipped, got %v (skip %q)", out.ev, out.skip)
				}
				return
			}
			want := proto.Clone(c.want).(*eventsv1.MessageReceived)
			want.EventId = strconv.Itoa(1000 + i)
			if !proto.Equal(out.ev, want) {
				t.Fatalf("got  %s\nwant %s", prototext.Format(out.ev), prototext.Format(want))
			}
		})
	}
}

func TestMentionGatingOff(t *testing.T) {
	t.Parallel()
	raw := []byte(`{"update_id":5,"message":{"message_id":1,"date":1,"chat":{"id":-100,"type":"supergroup","title":"T"},"from":{"id":1,"is_bot":false,"first_name":"A"},"text":"chatter"}}`)
	me := identity{id: testBotID, username: testUsername}
	if out, _ := parseUpdate(raw, me, gating{requireMention: true}); out.ev != nil {
		t.Fatal("require_mention on: unmentioned group message published")
	}
	if out, _ := parseUpdate(raw, me, gating{requireMention: true, freeChats: map[string]bool{"-100": true}}); out.ev == nil {
		t.Fatal("free-response chat: message skipped")
	}
	out, _ := parseUpdate(raw, me, gating{})
	if out.ev == nil || out.ev.GetMentioned() {
		t.Fatalf("require_mention off: got %v, want published and not mentioned", out.ev)
	}
}

func TestMalformedUpdates(t *testing.T) {
	t.Parallel()
	me := identity{id: testBotID, username: testUsername}
	for _, raw := range []string{`{"update_id":1,"message":"nope"}`, `{"update_id":1,"message":{"message_id":1}}`, `[1,2]`, `{`} {
		if _, err := parseUpdate([]byte(raw), me, gating{}); err == nil {
			t.Errorf("%s: parsed without error", raw)
		}
	}
}

func FuzzParseUpdate(f *testing.F) {
	me := identity{id: testBotID, username: testUsername}
	for i, c := range kindCases() {
		c.update["update_id"] = i
		raw, _ := json.Marshal(c.update)
		f.Add(raw)
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		out, err := parseUpdate(raw, me, gating{requireMention: true})
		if err != nil {
			return
		}
		if out.ev == nil && out.skip == "" {
			t.Fatal("neither an event nor a skip reason")
		}
		if out.ev != nil && (out.ev.GetSource().GetChatId() == "" || out.ev.GetEventId() == "") {
			t.Fatalf("event without chat or id: %v", out.ev)
		}
	})
}

// TestWriteFuzzSeeds keeps testdata/fuzz in step with the kind table.
func TestWriteFuzzSeeds(t *testing.T) {
	if os.Getenv("UPDATE_FUZZ_SEEDS") == "" {
		t.Skip("set UPDATE_FUZZ_SEEDS=1 to rewrite the seed corpus")
	}
	dir := filepath.Join("testdata", "fuzz", "FuzzParseUpdate")
	_ = os.MkdirAll(dir, 0o755)
	for i, c := range kindCases() {
		c.update["update_id"] = i
		raw, _ := json.Marshal(c.update)
		body := "go test fuzz v1\n[]byte(" + strconv.Quote(string(raw)) + ")\n"
		if err := os.WriteFile(filepath.Join(dir, c.name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}
