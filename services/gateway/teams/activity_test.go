package teams

import (
	"testing"

	"github.com/switchboard-chat/switchboard/pkg/attachment"
	deliveryv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/delivery/v1"
	eventsv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/events/v1"
)

func TestNormalize(t *testing.T) {
	base := func() *Activity {
		return &Activity{Type: "message", ID: "17", ServiceURL: "https://smba.trafficmanager.net/teams/", ChannelID: "msteams",
			From:         Account{ID: "29:x", Name: "Ann", AADObjectID: "aad-1"},
			Conversation: Conversation{ID: "a:dm", ConversationType: "personal", TenantID: "t1"},
			Recipient:    Account{ID: "28:app", Name: "Bot"}, Text: "hi"}
	}
	mention := []Entity{{Type: "mention", Mentioned: Account{ID: "28:app"}}}
	for _, tc := range []struct {
		name     string
		mod      func(*Activity)
		require  bool
		skip     string
		text     string
		chatType string
		user     string
		atts     int
	}{
		{name: "personal", text: "hi", chatType: "dm", user: "aad-1"},
		{name: "sender without aad id", mod: func(a *Activity) { a.From.AADObjectID = "" }, text: "hi", chatType: "dm", user: "29:x"},
		{name: "channel mention stripped", mod: func(a *Activity) {
			a.Conversation.ConversationType, a.Text, a.Entities = "channel", "<at>Bot</at> hello <at>Ann</at> there", mention
		}, require: true, text: "hello there", chatType: "channel", user: "aad-1"},
		{name: "group without mention, gated", mod: func(a *Activity) { a.Conversation.ConversationType = "groupChat" }, require: true, skip: "not_mentioned"},
		{name: "group without mention, not gated", mod: func(a *Activity) { a.Conversation.ConversationType = "groupChat" }, text: "hi", chatType: "group", user: "aad-1"},
		{name: "personal never gated", require: true, text: "hi", chatType: "dm", user: "aad-1"},
		{name: "unknown group type", mod: func(a *Activity) { a.Conversation.ConversationType, a.Conversation.IsGroup = "", true }, text: "hi", chatType: "group", user: "aad-1"},
		{name: "own", mod: func(a *Activity) { a.From.ID = "28:app" }, skip: "own"},
		{name: "only a mention", mod: func(a *Activity) { a.Text = "<at>Bot</at>" }, skip: "empty"},
		{name: "conversation update", mod: func(a *Activity) { a.Type = "conversationUpdate" }, skip: "activity_conversationUpdate"},
		{name: "strange type", mod: func(a *Activity) { a.Type = "x" }, skip: "activity_other"},
		{name: "picture and html copy", mod: func(a *Activity) {
			a.Text = ""
			a.Attachments = []Attachment{{ContentType: "image/jpeg", ContentURL: "https://smba.trafficmanager.net/i"}, {ContentType: "text/html", Content: []byte(`"<p>x</p>"`)},
				{ContentType: "application/vnd.microsoft.card.hero"}, {ContentType: "application/vnd.microsoft.teams.file.download.info", Content: []byte(`{"downloadUrl":"https://sp/x","fileType":"pdf"}`)}}
		}, text: "", chatType: "dm", user: "aad-1", atts: 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := base()
			if tc.mod != nil {
				tc.mod(a)
			}
			n := normalize(a, "app", tc.require)
			if n.skip != tc.skip {
				t.Fatalf("skip %q, want %q", n.skip, tc.skip)
			}
			if tc.skip != "" {
				return
			}
			ev := n.ev
			if ev.GetText() != tc.text || ev.GetSource().GetChatType() != tc.chatType || ev.GetSource().GetUserId() != tc.user || len(ev.GetAttachments()) != tc.atts {
				t.Fatalf("event %v", ev)
			}
			if ev.GetEventId() != a.Conversation.ID+"|17" || ev.GetSource().GetScopeId() != "t1" || ev.GetSource().GetPlatform() != "teams" {
				t.Fatalf("ids %v", ev)
			}
			if tc.atts == 2 && (ev.GetAttachments()[0].GetKind() != eventsv1.AttachmentKind_ATTACHMENT_KIND_IMAGE || ev.GetAttachments()[1].GetFileName() != "document.pdf") {
				t.Fatalf("attachments %v", ev.GetAttachments())
			}
		})
	}
}

func TestParseActivityRefuses(t *testing.T) {
	for _, body := range []string{
		`not json`, `{}`, `{"type":"message","serviceUrl":"ftp://x","conversation":{"id":"a"}}`,
		`{"type":"message","serviceUrl":"https://x/","conversation":{"id":""}}`,
		`{"type":"message","serviceUrl":"https://x/","conversation":{"id":"a"},"from":{"id":"u"}}`,
		`{"type":"message","id":"1","serviceUrl":"https://x/","conversation":{"id":"a"}}`,
	} {
		if _, err := parseActivity([]byte(body)); err == nil {
			t.Errorf("%s parsed", body)
		}
	}
}

func TestSameServiceURL(t *testing.T) {
	for _, tc := range []struct {
		a, b string
		want bool
	}{
		{"https://smba.trafficmanager.net/teams/", "https://smba.trafficmanager.net/teams", true},
		{"https://SMBA.trafficmanager.net/teams/", "https://smba.trafficmanager.net/teams/", true},
		{"https://smba.trafficmanager.net/amer/", "https://smba.trafficmanager.net/teams/", false},
		{"", "", false},
		{"https://evil.example/", "https://smba.trafficmanager.net/", false},
	} {
		if got := sameServiceURL(tc.a, tc.b); got != tc.want {
			t.Errorf("sameServiceURL(%q, %q) = %v", tc.a, tc.b, got)
		}
	}
}

// An approval button's press reads as the command it stands for and the
// call, whatever the verb of its Action.Execute, as Hermes's card action
// handler reads the action's data alone; an Action.Execute or an
// Action.Submit naming a choice the gateway does not know (or a call it
// cannot carry) is the press of an unknown choice, for the router to
// answer; anything else is no press.
func TestPressOf(t *testing.T) {
	t.Parallel()
	invoke := func(verb, data string) *Activity {
		return &Activity{Type: "invoke", Name: cardActionInvoke, Value: []byte(`{"action":{"type":"Action.Execute","verb":"` + verb + `","data":` + data + `}}`)}
	}
	for _, c := range []struct {
		name        string
		a           *Activity
		cmd, call   string
		ok, unknown bool
	}{
		{"execute", invoke(approveVerb, `{"hermes_action":"approve_always","tool_call_id":"c1"}`), "/approve always", "c1", true, false},
		{"execute without call", invoke(approveVerb, `{"hermes_action":"approve_once"}`), "/approve", "", true, false},
		{"submit", &Activity{Type: "message", Value: []byte(`{"hermes_action":"deny","tool_call_id":"c2"}`)}, "/deny", "c2", true, false},
		{"other verb", invoke("refresh", `{"hermes_action":"deny","tool_call_id":"c3"}`), "/deny", "c3", true, false},
		{"no verb", &Activity{Type: "invoke", Name: cardActionInvoke, Value: []byte(`{"action":{"type":"Action.Execute","data":{"hermes_action":"approve_once"}}}`)}, "/approve", "", true, false},
		{"other verb without our data", invoke("refresh", `{"page":2}`), "", "", false, false},
		{"other invoke", &Activity{Type: "invoke", Name: "composeExtension/query", Value: []byte(`{"hermes_action":"deny"}`)}, "", "", false, false},
		{"unknown action", invoke(approveVerb, `{"hermes_action":"approve_forever"}`), "", "", false, true},
		{"bad call", invoke(approveVerb, `{"hermes_action":"deny","tool_call_id":"a b"}`), "", "", false, true},
		{"no action", invoke(approveVerb, `{"tool_call_id":"c4"}`), "", "", false, false},
		{"submit of an unknown action", &Activity{Type: "message", Value: []byte(`{"hermes_action":"approve_forever"}`)}, "", "", false, true},
		{"submit without an action", &Activity{Type: "message", Value: []byte(`{"page":2}`), Text: "next"}, "", "", false, false},
		{"data not an object", invoke(approveVerb, `"deny"`), "", "", false, false},
		{"message without value", &Activity{Type: "message", Text: "/deny"}, "", "", false, false},
	} {
		cmd, call, ok, unknown := pressOf(c.a)
		if cmd != c.cmd || call != c.call || ok != c.ok || unknown != c.unknown {
			t.Errorf("%s: %q %q %v %v", c.name, cmd, call, ok, unknown)
		}
	}
	if approvalCard(&deliveryv1.Approval{Choices: []string{"once", "maybe"}}) != nil || approvalCard(nil) != nil {
		t.Error("a card for unknown or no choices")
	}
}

// A file sent in a personal chat comes as a file.download.info
// attachment whose fileType names its type: a picture attached as a file
// (a photo uploaded with the paperclip) is a picture, which the agent
// downloads and sees, not a document of no type, which it neither
// downloads nor reads; its media type comes from fileType, else the
// name's extension.
func TestFileAttachmentTypes(t *testing.T) {
	for _, tc := range []struct {
		name, fileType, fileName string
		kind                     eventsv1.AttachmentKind
		mime                     string
	}{
		{name: "photo", fileType: "jpg", fileName: "IMG_0001.jpg", kind: eventsv1.AttachmentKind_ATTACHMENT_KIND_IMAGE, mime: "image/jpeg"},
		{name: "upper case", fileType: "PNG", fileName: "Shot.PNG", kind: eventsv1.AttachmentKind_ATTACHMENT_KIND_IMAGE, mime: "image/png"},
		{name: "no file type", fileName: "chart.png", kind: eventsv1.AttachmentKind_ATTACHMENT_KIND_IMAGE, mime: "image/png"},
		{name: "pdf", fileType: "pdf", fileName: "report.pdf", kind: eventsv1.AttachmentKind_ATTACHMENT_KIND_DOCUMENT, mime: "application/pdf"},
		{name: "unknown type", fileType: "zzq", fileName: "data.zzq", kind: eventsv1.AttachmentKind_ATTACHMENT_KIND_DOCUMENT},
	} {
		t.Run(tc.name, func(t *testing.T) {
			content := `{"downloadUrl":"https://contoso.sharepoint.com/d?tempauth=x","uniqueId":"1","fileType":"` + tc.fileType + `"}`
			got := attachments([]Attachment{{ContentType: "application/vnd.microsoft.teams.file.download.info", Name: tc.fileName,
				ContentURL: "https://contoso.sharepoint.com/personal/ann/Documents/" + tc.fileName, Content: []byte(content)}})
			if len(got) != 1 {
				t.Fatalf("%d attachments, want 1", len(got))
			}
			if a := got[0]; a.GetKind() != tc.kind || a.GetMimeType() != tc.mime || a.GetFileName() != tc.fileName {
				t.Fatalf("kind %v, type %q, name %q; want %v, %q, %q", a.GetKind(), a.GetMimeType(), a.GetFileName(), tc.kind, tc.mime, tc.fileName)
			}
		})
	}
}

// A picture pasted into a message comes with the content type "image/*"
// (Teams does not say which): it is a picture of a type not known yet,
// which the agent downloads and sees, the connector's answer naming its
// type; "image/*" as its type made the worker take it for a format no
// model reads, and leave it undownloaded.
func TestPastedPicture(t *testing.T) {
	got := attachments([]Attachment{{ContentType: "image/*", ContentURL: "https://smba.trafficmanager.net/amer/v3/attachments/0-eus-d4-1/views/original"},
		{ContentType: "text/html", Content: []byte(`"<div><img src=\"https://smba.trafficmanager.net/amer/v3/attachments/0-eus-d4-1/views/original\"></div>"`)}})
	if len(got) != 1 {
		t.Fatalf("%d attachments, want 1", len(got))
	}
	a := got[0]
	if a.GetKind() != eventsv1.AttachmentKind_ATTACHMENT_KIND_IMAGE || a.GetMimeType() != "" {
		t.Fatalf("kind %v, type %q; want a picture of no type yet", a.GetKind(), a.GetMimeType())
	}
	if !attachment.Wanted(a) {
		t.Fatal("the worker would not download the picture")
	}
}
