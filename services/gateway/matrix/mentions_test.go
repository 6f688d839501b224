package matrix

import (
	"regexp"
	"strings"
	"testing"

	deliveryv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/delivery/v1"
	eventsv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/events/v1"
)

func TestNeutralizeRoomMentions(t *testing.T) {
	z := zeroWidthJoiner
	for _, tc := range []struct{ in, want string }{
		{"hello @room", "hello @" + z + "room"},
		{"@room: meeting at 3", "@" + z + "room: meeting at 3"},
		{"@ROOM and @Room.", "@" + z + "ROOM and @" + z + "Room."},
		{"x@room", "x@" + z + "room"},
		{"`@room` in code", "`@" + z + "room` in code"}, // the rule reads code too
		{"@roomba and @room_1 and @rooms", "@roomba and @room_1 and @rooms"},
		{"@roomé", "@" + z + "roomé"}, // ASCII word boundaries: whatever a homeserver may match
		{"@bob:example.org and @room", "@bob:example.org and @" + z + "room"},
		{"no mention", "no mention"},
		{"@", "@"},
		{"@roo", "@roo"},
	} {
		if got := neutralizeRoomMentions(tc.in); got != tc.want {
			t.Errorf("neutralizeRoomMentions(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

// legacyRule is the homeserver's .m.rule.roomnotif as the fake has it.
var legacyRule = regexp.MustCompile(`(?i)@room\b`)

// FuzzNeutralizeRoomMentions: whatever the model writes, nothing the
// homeserver's rule would take for "@room" is left, and taking the
// joiners out gives the text back.
func FuzzNeutralizeRoomMentions(f *testing.F) {
	for _, s := range []string{"@room", "hi @Room.", "@roomba", "`@room`", "@@room", "@ROOM\n@room_"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, text string) {
		out := neutralizeRoomMentions(text)
		if legacyRule.MatchString(out) {
			t.Fatalf("%q -> %q still mentions the room", text, out)
		}
		if strings.ReplaceAll(out, "@"+zeroWidthJoiner, "@") != strings.ReplaceAll(text, "@"+zeroWidthJoiner, "@") {
			t.Fatalf("%q -> %q changed more than mentions", text, out)
		}
	})
}

// "@room" in the agent's messages, edits and captions notifies no one,
// unless gateways.matrix.allow_room_mentions lets it (Hermes sends it as
// it is).
func TestRoomMentions(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		allow bool
	}{{"neutralised", false}, {"allowed", true}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			g := start(t, func(c *Config) { c.AllowRoomMentions = tc.allow })
			g.f.Message(team, ann, "@bot:fake.test tell everyone")
			ev := g.next(t)
			first := g.send(t, answer(ev, deliveryv1.SendOp_SEND_OP_SEND, "m1", "Heads up @room: **lunch** is served"))
			if !first.GetOk() {
				t.Fatalf("send receipt %v", first)
			}
			edit := answer(ev, deliveryv1.SendOp_SEND_OP_EDIT, "m1-edit", "Heads up @room: **lunch** is served now")
			edit.MessageId = first.GetPlatformMessageId()
			if r := g.send(t, edit); !r.GetOk() {
				t.Fatalf("edit receipt %v", r)
			}
			pic := answer(ev, deliveryv1.SendOp_SEND_OP_SEND, "m2", "")
			pic.Attachments = []*eventsv1.Attachment{{Kind: eventsv1.AttachmentKind_ATTACHMENT_KIND_IMAGE, Caption: "@room the menu",
				Location: &eventsv1.Attachment_Url{Url: "data:image/png;base64,iVBORw0KGgo="}}}
			if r := g.send(t, pic); !r.GetOk() {
				t.Fatalf("picture receipt %v", r)
			}
			notified := g.f.RoomNotified(team)
			sent := g.f.Sent(team)
			if len(sent) != 2 {
				t.Fatalf("sent %+v, want the message and the picture", sent)
			}
			if tc.allow {
				// The message, its edit and the caption each ping the room.
				if len(notified) != 3 || !strings.Contains(sent[0].Body, "@room") {
					t.Fatalf("notified %v, sent %+v: want all three to notify, as written", notified, sent)
				}
				return
			}
			if len(notified) != 0 {
				t.Fatalf("events %v notified the room", notified)
			}
			if want := "Heads up @" + zeroWidthJoiner + "room: **lunch** is served now"; sent[0].Body != want || !strings.Contains(sent[0].FormattedBody, "<strong>lunch</strong>") {
				t.Fatalf("message %q / %q, want %q, still formatted", sent[0].Body, sent[0].FormattedBody, want)
			}
			if sent[1].Body != "@"+zeroWidthJoiner+"room the menu" {
				t.Fatalf("caption %q", sent[1].Body)
			}
		})
	}
}
