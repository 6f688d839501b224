package router

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/switchboard-chat/switchboard/pkg/attachment"
	"github.com/switchboard-chat/switchboard/pkg/command"
	eventsv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/events/v1"
	repliesv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/replies/v1"
	turnsv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/turns/v1"
	"github.com/switchboard-chat/switchboard/pkg/sessionstore"
)

// mediaTo are the files sent to user's DM, one per reply (turn id and
// seq: what delivery's idempotency key is made of).
func (e *env) mediaTo(user string) []*repliesv1.ReplyEvent {
	e.mu.Lock()
	defer e.mu.Unlock()
	seen := map[string]bool{}
	var out []*repliesv1.ReplyEvent
	for _, n := range e.notices {
		id := fmt.Sprintf("%s:%d", n.GetTurnId(), n.GetSeq())
		if n.GetTarget().GetChatId() == "chat-"+user && n.GetMedia() != nil && !seen[id] {
			seen[id] = true
			out = append(out, n)
		}
	}
	return out
}

// /save renders the chat's conversation and sends it as a document kept
// in the attachment store, then says what it saved; redact masks the
// credentials; the refusals: a bare /save (Hermes's usage), an unknown
// format (Hermes's error and the usage), a conversation with no
// messages, a running turn (the "⏳ Agent is running" text), the API
// (no file in a response body), a conversation over
// router.save_max_bytes. A redelivered /save sends one file.
func TestSaveCommand(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	// The gateways create the store; the router only opens it.
	store := attachment.New(e.bus.JetStream(), e.bus.Topology(), attachment.DefaultConfig())
	if _, err := store.Keep(ctx, "create", "text/plain", strings.NewReader("x")); err != nil {
		t.Fatal(err)
	}
	cfg := testConfig()
	cfg.Auth.GatewayAllowedUsers = append(cfg.Auth.GatewayAllowedUsers, "carol", "client")
	e.startRouter(cfg, nil, nil)
	release := make(chan struct{})
	w := e.startWorker(func(tr *turnsv1.TurnRequested) {
		if strings.Contains(strings.Join(inputsText([]*turnsv1.TurnRequested{tr}, tr.SessionKey), " "), "hold") {
			<-release
		}
	})
	const alice = "agent:main:telegram:dm:chat-alice"

	if got := e.ask("alice", "/save"); got != command.SaveUsage {
		t.Errorf("bare /save: %q", got)
	}
	if got := e.ask("alice", "/save pdf"); got != "Unknown format 'pdf' — expected one of: json, md, html\n\n"+command.SaveUsage {
		t.Errorf("/save pdf: %q", got)
	}
	if got := e.ask("alice", "/save md"); !strings.HasPrefix(got, "No messages to save in session `") {
		t.Errorf("/save of an empty conversation: %q", got)
	}

	// A conversation as the worker stores it.
	e.publish(dm("alice", "first"))
	waitFor(t, "the turn", func() bool { turns, _ := w.snapshot(); return len(turns) == 1 })
	sess, err := sessionstore.New(e.db).Get(ctx, alice)
	if err != nil {
		t.Fatal(err)
	}
	for i, m := range [][2]string{
		{"user", "my key is sk-proj-abcdefghijklmnopqrstuvwxyz1234 <script>alert(1)</script>"},
		{"assistant", "Noted, I will keep it safe."},
	} {
		if _, err := e.db.Exec(ctx, `INSERT INTO transcript_messages (session_key, session_id, turn_id, generation, step, role, content)
			VALUES ($1, $2, 'turn-1', $3, $4, $5, $6)`, alice, sess.ID, sess.Generation, i, m[0], m[1]); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, "the turn's end", func() bool { return e.inboundDrained() })

	read := func(a *eventsv1.Attachment) string {
		t.Helper()
		if a.GetBytesRef() == "" {
			t.Fatalf("the file is not in the attachment store: %v", a)
		}
		b, _, err := store.Get(ctx, a.GetBytesRef(), 0)
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}

	ev := dm("alice", "/save md notes")
	before := len(e.noticesTo("alice"))
	e.publish(ev)
	waitFor(t, "the answer", func() bool { return len(e.noticesTo("alice")) > before })
	if got := e.noticesTo("alice")[before]; got != "💾 Saved 2 messages: notes.md, "+attachment.Size(int64(len(read(e.mediaTo("alice")[0].GetMedia().GetAttachment()))))+"." {
		t.Errorf("answer: %q", got)
	}
	files := e.mediaTo("alice")
	if len(files) != 1 {
		t.Fatalf("%d files sent, want 1", len(files))
	}
	a := files[0].GetMedia().GetAttachment()
	if a.GetKind() != eventsv1.AttachmentKind_ATTACHMENT_KIND_DOCUMENT || a.GetFileName() != "notes.md" ||
		a.GetMimeType() != "text/markdown; charset=utf-8" || a.GetCaption() != "💾 notes.md" {
		t.Errorf("attachment = %v", a)
	}
	md := read(a)
	for _, want := range []string{"# Session: " + sess.ID, "- Source: `telegram`", "- Messages: 2",
		"## User - ", "my key is sk-proj-abcdefghijklmnopqrstuvwxyz1234", "## Assistant - ", "Noted, I will keep it safe."} {
		if !strings.Contains(md, want) {
			t.Errorf("the Markdown lacks %q:\n%s", want, md)
		}
	}
	if int64(len(md)) != a.GetSizeBytes() {
		t.Errorf("size %d, the file has %d bytes", a.GetSizeBytes(), len(md))
	}

	// The same event again (a redelivery the dedupe record did not stop
	// would publish the same ids): one file.
	e.publishID(ev, "telegram:bot1:"+ev.EventId+":again")
	e.settle()
	if n := len(e.mediaTo("alice")); n != 1 {
		t.Errorf("after a redelivery, %d files", n)
	}

	// redact, as html: the key masked, the message text escaped.
	got := e.ask("alice", "/save html ../../etc/page.html redact")
	if !strings.HasPrefix(got, "💾 Saved 2 messages: page.html, ") || !strings.HasSuffix(got, "API keys, tokens and credentials are masked.") {
		t.Errorf("answer: %q", got)
	}
	files = e.mediaTo("alice")
	a = files[len(files)-1].GetMedia().GetAttachment()
	page := read(a)
	if a.GetFileName() != "page.html" || a.GetCaption() != "💾 page.html (redacted)" || strings.Contains(page, "abcdefghijklmnopqrstuvwxyz") ||
		!strings.Contains(page, "sk-pro...1234") || strings.Contains(page, "<script>") || !strings.Contains(page, "&lt;script&gt;") {
		t.Errorf("redacted page %v:\n%s", a, page)
	}

	// json round-trips.
	e.ask("alice", "/save json")
	files = e.mediaTo("alice")
	a = files[len(files)-1].GetMedia().GetAttachment()
	var snap struct {
		ID       string `json:"id"`
		Messages []struct{ Role, Content string }
	}
	if err := json.Unmarshal([]byte(read(a)), &snap); err != nil || snap.ID != sess.ID || len(snap.Messages) != 2 || snap.Messages[1].Content != "Noted, I will keep it safe." {
		t.Errorf("json snapshot %v: %+v, %v", a.GetFileName(), snap, err)
	}
	if want := "hermes_session_" + sess.ID + ".json"; a.GetFileName() != want {
		t.Errorf("default name %q, want %q", a.GetFileName(), want)
	}

	// Mid-turn: refused, nothing sent.
	n := len(e.mediaTo("alice"))
	e.publish(dm("alice", "hold on"))
	waitFor(t, "the held turn", func() bool { turns, _ := w.snapshot(); return len(turns) == 2 })
	if got := e.ask("alice", "/save md"); got != "⏳ Agent is running — `/save` can't run mid-turn. Wait for the current response or `/stop` first." {
		t.Errorf("/save mid-turn: %q", got)
	}
	close(release)
	if len(e.mediaTo("alice")) != n {
		t.Error("a file was sent mid-turn")
	}

	// The API: no file in a response body.
	api := &eventsv1.MessageReceived{EventId: nextEventID(), Text: "/save md",
		Source: &eventsv1.SessionSource{Platform: "api", Account: "a", ChatId: "chat-client", ChatType: "dm", UserId: "client"}}
	before = len(e.noticesTo("client"))
	e.publish(api)
	waitFor(t, "the API's answer", func() bool { return len(e.noticesTo("client")) > before })
	if got := e.noticesTo("client")[before]; got != saveNoFilesAPI {
		t.Errorf("/save over the API: %q", got)
	}
}

// A conversation over router.save_max_bytes is not sent: the answer
// says how large it is and what the limit is.
func TestSaveTooLarge(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	cfg := testConfig()
	cfg.SaveMaxBytes = 1000
	e.startRouter(cfg, nil, nil)
	e.startWorker(nil)
	const alice = "agent:main:telegram:dm:chat-alice"
	e.ask("alice", "/save") // the conversation
	sess, err := sessionstore.New(e.db).Get(ctx, alice)
	if err != nil {
		t.Fatal(err)
	}
	insert := func(step int, content string) {
		t.Helper()
		if _, err := e.db.Exec(ctx, `INSERT INTO transcript_messages (session_key, session_id, turn_id, generation, step, role, content)
			VALUES ($1, $2, 'turn-1', $3, $4, 'user', $5)`, alice, sess.ID, sess.Generation, step, content); err != nil {
			t.Fatal(err)
		}
	}
	insert(0, strings.Repeat("<", 600)) // 600 bytes stored, 2,400 as HTML
	got := e.ask("alice", "/save html")
	if !strings.HasPrefix(got, "⚠️ This conversation is too large to save: ") || !strings.Contains(got, " as html, the limit is 1000 bytes (router.save_max_bytes)") {
		t.Errorf("/save html over the limit: %q", got)
	}
	insert(1, strings.Repeat("x", 600))
	got = e.ask("alice", "/save md")
	if !strings.HasPrefix(got, "⚠️ This conversation is too large to save: 1.2 KB stored, the limit is 1000 bytes") {
		t.Errorf("/save md over the limit: %q", got)
	}
	if n := len(e.mediaTo("alice")); n != 0 {
		t.Errorf("%d files sent", n)
	}

	// No gateway created the attachment store here: a small file goes
	// inline, as a data: URL.
	const bob = "agent:main:telegram:dm:chat-bob"
	e.ask("bob", "/save")
	bs, err := sessionstore.New(e.db).Get(ctx, bob)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.db.Exec(ctx, `INSERT INTO transcript_messages (session_key, session_id, turn_id, generation, step, role, content)
		VALUES ($1, $2, 'turn-b', $3, 0, 'user', 'hi')`, bob, bs.ID, bs.Generation); err != nil {
		t.Fatal(err)
	}
	if got := e.ask("bob", "/save json"); !strings.HasPrefix(got, "💾 Saved 1 message: ") {
		t.Errorf("/save json: %q", got)
	}
	files := e.mediaTo("bob")
	if len(files) != 1 {
		t.Fatalf("%d files sent to bob", len(files))
	}
	data, mime, ok, err := attachment.ParseDataURL(files[0].GetMedia().GetAttachment().GetUrl())
	if !ok || err != nil || mime != "application/json" || !strings.Contains(string(data), `"content": "hi"`) {
		t.Errorf("inline file: %q %q %v %v", data, mime, ok, err)
	}
}
