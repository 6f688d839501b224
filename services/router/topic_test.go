package router

import (
	"context"
	"strings"
	"testing"

	eventsv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/events/v1"
	"github.com/switchboard-chat/switchboard/pkg/sessionstore"
)

// topicMsg is user's DM message in the topic thread of their private
// chat ("" for the main view).
func topicMsg(user, thread, text string) *eventsv1.MessageReceived {
	ev := dm(user, text)
	ev.Source.ThreadId = thread
	return ev
}

// Hermes's /topic: off (the default) or on, each topic of a Telegram DM
// is a conversation of its own (DESIGN.md's key for a DM with a thread,
// as Hermes's), answered in its own topic; on, the main view is a lobby
// for commands, /new there
// explains, /new in a topic replaces its conversation; /topic in a topic
// shows it ready or linked; /topic <session-id> restores one of the
// chat's earlier conversations into a topic, once (the main view's own
// moves there); /topic off goes back.
func TestTopicMode(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := newEnv(t)
	e.startRouter(testConfig(), nil, nil)
	w := e.startWorker(nil)
	const root = "agent:main:telegram:dm:chat-alice"
	askIn := func(thread, text string) string {
		t.Helper()
		before := len(e.noticesTo("alice"))
		e.publish(topicMsg("alice", thread, text))
		waitFor(t, "reply to "+text, func() bool { return len(e.noticesTo("alice")) > before })
		return e.noticesTo("alice")[before]
	}
	turnIn := func(thread, text string) (key, replyThread string) {
		t.Helper()
		e.publish(topicMsg("alice", thread, text))
		tr := turnOf(t, w, text)
		return tr.GetSessionKey(), tr.GetOrigin().GetThreadId()
	}

	// Off: DESIGN.md's keys, a conversation per topic (as Hermes's), the
	// main view a chat like any other; answers in their topics.
	for _, tt := range []struct{ thread, text, key string }{
		{"10", "in ten", root + ":10"}, {"20", "in twenty", root + ":20"}, {"", "in the main view", root}, {"1", "in General", root + ":1"},
	} {
		if key, reply := turnIn(tt.thread, tt.text); key != tt.key || reply != tt.thread {
			t.Errorf("topic mode off, %q: key %s, answered in thread %q; want %s, %q", tt.text, key, reply, tt.key, tt.thread)
		}
	}
	rootSess, err := sessionstore.New(e.db).Get(ctx, root)
	if err != nil {
		t.Fatal(err)
	}
	if got := askIn("", "/topic help"); !strings.HasPrefix(got, "/topic — enable multi-session DM mode (one bot, many parallel chats)") {
		t.Errorf("/topic help: %q", got)
	}
	if got := askIn("", "/topic off"); got != topicNotEnabled {
		t.Errorf("/topic off while off: %q", got)
	}
	if got := askIn("", "/topic "+rootSess.ID); got != topicRestoreNeedTopic {
		t.Errorf("/topic <id> in the main view: %q", got)
	}
	if got := askIn("10", "/topic "+rootSess.ID); got != topicRestoreNeedsMode {
		t.Errorf("/topic <id> in a topic while off: %q", got)
	}

	// On.
	got := askIn("", "/topic")
	for _, want := range []string{"Telegram multi-session topics are enabled.", "Previous unlinked sessions:",
		"- Untitled session — `" + rootSess.ID + "`", "Example: Send /topic " + rootSess.ID + " inside a topic."} {
		if !strings.Contains(got, want) {
			t.Errorf("/topic: %q, want it to contain %q", got, want)
		}
	}
	for _, tt := range []struct{ thread, text string }{{"10", "ten again"}, {"20", "twenty again"}} {
		if key, reply := turnIn(tt.thread, tt.text); key != root+":"+tt.thread || reply != tt.thread {
			t.Errorf("topic mode on, %q: key %s, answered in thread %q", tt.text, key, reply)
		}
	}
	// The main view (no thread, or General's 1) takes commands only.
	if got := askIn("", "hello lobby"); got != topicLobbyText {
		t.Errorf("a prompt in the lobby: %q", got)
	}
	before := len(e.noticesTo("alice"))
	e.publish(topicMsg("alice", "1", "hello again lobby"))
	waitFor(t, "inbound drained", e.inboundDrained)
	if n := len(e.noticesTo("alice")); n != before {
		t.Errorf("a second lobby reminder within %v: %q", lobbyReminderEvery, e.noticesTo("alice")[before:])
	}
	turns, _ := w.snapshot()
	for _, tr := range turns {
		for _, in := range tr.GetInputs() {
			if strings.Contains(in.GetText(), "lobby") {
				t.Errorf("a lobby message started a turn: %q", in.GetText())
			}
		}
	}
	if got := askIn("", "/new"); got != topicRootNew {
		t.Errorf("/new in the lobby: %q", got)
	}
	if got := askIn("", "/status"); !strings.Contains(got, "Key: "+root) {
		t.Errorf("/status in the lobby: %q", got)
	}
	if got := askIn("10", "/topic"); !strings.HasPrefix(got, "This topic is linked to:\nSession: Untitled session\nID: ") {
		t.Errorf("/topic in a topic with a conversation: %q", got)
	}
	if got := askIn("30", "/topic"); got != topicThreadReady {
		t.Errorf("/topic in a new topic: %q", got)
	}
	if got := askIn("10", "/new"); got != topicNewHeader {
		t.Errorf("/new in a topic: %q", got)
	}

	// Restore the main view's conversation into topic 30, once.
	e.ask("alice", "/title Old plan")
	if got := askIn("30", "/topic "+rootSess.ID); got != "Session restored: Old plan" {
		t.Errorf("/topic <id>: %q", got)
	}
	if key, _ := turnIn("30", "continue the plan"); key != root+":30" {
		t.Errorf("restored topic's key %s", key)
	}
	if tr := turnOf(t, w, "continue the plan"); tr.GetSessionId() != rootSess.ID {
		t.Errorf("restored topic's turn in conversation %s, want %s", tr.GetSessionId(), rootSess.ID)
	}
	if got := askIn("40", "/topic "+rootSess.ID); got != topicAlreadyLinked {
		t.Errorf("the same conversation into a second topic: %q", got)
	}
	if got := askIn("30", "/topic"); !strings.HasPrefix(got, "This topic is linked to:\nSession: Old plan\nID: "+rootSess.ID) {
		t.Errorf("/topic in the restored topic: %q", got)
	}
	if got := askIn("40", "/topic 20990101_000000_deadbeef"); got != "Session not found: 20990101_000000_deadbeef" {
		t.Errorf("an unknown id: %q", got)
	}
	bob := sessionstore.New(e.db)
	if _, _, _, err := bob.Arrive(ctx, "agent:main:telegram:dm:chat-bob", "", topicMsg("bob", "", "x").Source, "b1"); err != nil {
		t.Fatal(err)
	}
	bobSess, _ := bob.Get(ctx, "agent:main:telegram:dm:chat-bob")
	if got := askIn("40", "/topic "+bobSess.ID); got != topicNotYours {
		t.Errorf("another user's conversation: %q", got)
	}
	slack := &eventsv1.SessionSource{Platform: "slack", ChatId: "D1", ChatType: "dm", UserId: "alice"}
	if _, _, _, err := bob.Arrive(ctx, "agent:main:slack:dm:D1", "", slack, "s1"); err != nil {
		t.Fatal(err)
	}
	slackSess, _ := bob.Get(ctx, "agent:main:slack:dm:D1")
	if got := askIn("40", "/topic "+slackSess.ID); got != topicNotTelegram {
		t.Errorf("a Slack conversation: %q", got)
	}

	// Off again: the main view a chat again, bindings gone, topics still
	// conversations of their own.
	if got := askIn("", "/topic off"); got != topicOffDone {
		t.Errorf("/topic off: %q", got)
	}
	var bindings int
	if err := e.db.QueryRow(ctx, `SELECT count(*) FROM telegram_topic_bindings`).Scan(&bindings); err != nil || bindings != 0 {
		t.Errorf("%d bindings after /topic off (%v)", bindings, err)
	}
	if key, reply := turnIn("20", "back in twenty"); key != root+":20" || reply != "20" {
		t.Errorf("after /topic off: key %s, thread %q", key, reply)
	}
	if key, _ := turnIn("", "back in the main view"); key != root {
		t.Errorf("after /topic off, the main view: key %s", key)
	}
	// The conversation topic 30 took moved there: the main view went on
	// in a new one, so the two never run turns on one conversation.
	if tr := turnOf(t, w, "back in the main view"); tr.GetSessionId() == rootSess.ID {
		t.Errorf("after /topic off, the main view is still on conversation %s, which topic 30 took", rootSess.ID)
	}
}

// /topic is Telegram's, in private chats: anywhere else it gets Hermes's
// refusal and changes nothing.
func TestTopicRefusedOutsideTelegramDMs(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.startRouter(testConfig(), nil, nil)
	group := dm("alice", "/topic")
	group.Source.ChatType, group.Source.ChatId = "group", "chat-alice"
	slack := dm("alice", "/topic")
	slack.Source.Platform = "slack"
	for _, ev := range []*eventsv1.MessageReceived{group, slack} {
		before := len(e.noticesTo("alice"))
		e.publish(ev)
		waitFor(t, "the refusal", func() bool { return len(e.noticesTo("alice")) > before })
		if got := e.noticesTo("alice")[before]; got != topicNotTelegramDM {
			t.Errorf("/topic on %s %s: %q", ev.Source.Platform, ev.Source.ChatType, got)
		}
	}
	var n int
	if err := e.db.QueryRow(context.Background(), `SELECT count(*) FROM telegram_topic_modes`).Scan(&n); err != nil || n != 0 {
		t.Errorf("%d topic modes (%v)", n, err)
	}
}

// /topic <prefix> restores the one conversation of the chat whose id
// starts so (as Hermes's resolve_session_id); a prefix of several of the
// chat's gets Hermes's "Session not found", and so does a prefix of
// another user's conversation: only the chat's own count.
func TestTopicRestoreByPrefix(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := newEnv(t)
	e.startRouter(testConfig(), nil, nil)
	const root = "agent:main:telegram:dm:chat-alice"
	st := sessionstore.New(e.db)
	for _, user := range []string{"alice", "bob"} {
		if _, _, _, err := st.Arrive(ctx, "agent:main:telegram:dm:chat-"+user, "", topicMsg(user, "", "x").Source, user+"1"); err != nil {
			t.Fatal(err)
		}
	}
	first, _ := st.Get(ctx, root)
	second, err := st.Reset(ctx, root, "new")
	if err != nil {
		t.Fatal(err)
	}
	bob, _ := st.Get(ctx, "agent:main:telegram:dm:chat-bob")
	askIn := func(thread, text string) string {
		t.Helper()
		before := len(e.noticesTo("alice"))
		e.publish(topicMsg("alice", thread, text))
		waitFor(t, "reply to "+text, func() bool { return len(e.noticesTo("alice")) > before })
		return e.noticesTo("alice")[before]
	}
	askIn("", "/topic")
	askIn("10", "/topic") // topic 10's own conversation, one more of the chat's

	var ids []string
	rows, err := e.db.Query(ctx, `SELECT DISTINCT session_id FROM session_history WHERE session_key = $1 OR starts_with(session_key, $1 || ':')`, root)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	// common is a prefix of both of alice's first conversations;
	// unique, of the first only among all of the chat's.
	common := first.ID[:1]
	for n := 1; n < len(first.ID) && first.ID[:n] == second.ID[:n]; n++ {
		common = first.ID[:n]
	}
	unique := ""
	for n := 1; n < len(first.ID) && unique == ""; n++ {
		shared := false
		for _, id := range ids {
			shared = shared || id != first.ID && strings.HasPrefix(id, first.ID[:n])
		}
		if !shared {
			unique = first.ID[:n]
		}
	}
	if unique == "" || unique == first.ID {
		t.Fatalf("no unique prefix of %s among %q", first.ID, ids)
	}
	bobPrefix := bob.ID[:len(bob.ID)-1]

	for _, tt := range []struct{ arg, want string }{
		{common, "Session not found: " + common},
		{bobPrefix, "Session not found: " + bobPrefix},
		{unique, "Session restored: " + first.ID},
	} {
		if got := askIn("10", "/topic "+tt.arg); got != tt.want {
			t.Errorf("/topic %s: %q, want %q", tt.arg, got, tt.want)
		}
	}
	if got, _ := st.Get(ctx, root+":10"); got.ID != first.ID {
		t.Errorf("topic 10 is on %s, want %s", got.ID, first.ID)
	}
	var bound string
	if err := e.db.QueryRow(ctx, `SELECT string_agg(session_id, ',') FROM telegram_topic_bindings`).Scan(&bound); err != nil || bound != first.ID {
		t.Errorf("bindings %q (%v), want only %s", bound, err, first.ID)
	}
}

// /resume in a topic of a conversation the main view is on answers, in
// topic mode, what the user can do there: the main view takes no /new
// (nor prompts) then, so the answer is /topic <session-id> in the topic,
// which moves the conversation into it. Outside topic mode, /new in
// the main view frees it, as the answer says.
func TestResumeInATopicOfTheMainViewsConversation(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := newEnv(t)
	e.startRouter(testConfig(), nil, nil)
	const root = "agent:main:telegram:dm:chat-alice"
	st := sessionstore.New(e.db)
	askIn := func(thread, text string) string {
		t.Helper()
		before := len(e.noticesTo("alice"))
		e.publish(topicMsg("alice", thread, text))
		waitFor(t, "reply to "+text, func() bool { return len(e.noticesTo("alice")) > before })
		return e.noticesTo("alice")[before]
	}
	askIn("", "/title Old plan")
	plan, err := st.Get(ctx, root)
	if err != nil {
		t.Fatal(err)
	}
	// Topic 30 takes the conversation, goes on to a new one; the main
	// view resumes it.
	askIn("", "/topic")
	askIn("30", "/topic")
	for _, step := range []struct{ thread, text, want string }{
		{"30", "/topic " + plan.ID, "Session restored: Old plan"},
		{"30", "/new", topicNewHeader},
		{"", "/resume Old plan", "↩️ Resumed Old plan."},
	} {
		if got := askIn(step.thread, step.text); got != step.want {
			t.Fatalf("%s in %q: %q, want %q", step.text, step.thread, got, step.want)
		}
	}

	for _, tt := range []struct {
		name, mode, want string
	}{
		{"topic mode", "", "That conversation is open in the main chat, which topic mode keeps for commands: send /topic " + plan.ID + " here to move it into this topic."},
		{"topic mode off", "/topic off", "That conversation is open in this chat, outside its topics: continue it there, or send /new there to free it for this one."},
	} {
		if tt.mode != "" {
			askIn("", tt.mode)
		}
		if got := askIn("30", "/resume Old plan"); got != tt.want {
			t.Errorf("%s: /resume in the topic of the main view's conversation: %q, want %q", tt.name, got, tt.want)
		}
		if tt.mode != "" {
			continue
		}
		// What the answer says works.
		if got := askIn("30", "/topic "+plan.ID); got != "Session restored: Old plan" {
			t.Fatalf("/topic <id> after the answer: %q", got)
		}
		if topic, err := st.Get(ctx, root+":30"); err != nil || topic.ID != plan.ID {
			t.Errorf("topic 30 on %s (%v), want %s", topic.ID, err, plan.ID)
		}
		// The main view resumes it again, for the case off.
		askIn("30", "/new")
		if got := askIn("", "/resume Old plan"); got != "↩️ Resumed Old plan." {
			t.Fatalf("/resume in the main view: %q", got)
		}
	}
}
