package router

import (
	"context"
	"strings"
	"testing"
	"time"

	eventsv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/events/v1"
	"github.com/switchboard-chat/switchboard/pkg/sessionkey"
	"github.com/switchboard-chat/switchboard/pkg/sessionstore"
)

// TestSlackDMSessionsSeeTheOtherThreads: with Slack's
// dm_top_level_threads_as_sessions (on by default) each top-level DM is
// a conversation of its own, keyed and answered in its thread. /sessions
// in any thread of the DM lists the whole DM's conversations, numbered as
// /resume takes them, and /resume <title or number> brings one of
// another thread into the thread it is asked in, as Hermes's /resume
// lists and resumes beyond the session asked in. Another user's DM is
// neither listed nor reachable by title.
func TestSlackDMSessionsSeeTheOtherThreads(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.startRouter(testConfig(), nil, nil)
	src := func(chat, thread, user string) *eventsv1.SessionSource {
		return &eventsv1.SessionSource{Platform: "slack", Account: "U0BOT", ScopeId: "T0WS", ChatId: chat, ChatType: "dm",
			UserId: user, UserName: user, ThreadId: thread}
	}
	// ask sends text in the thread of chat and returns the router's
	// answer there.
	ask := func(chat, thread, user, text string) string {
		t.Helper()
		answers := func() []string {
			e.mu.Lock()
			defer e.mu.Unlock()
			var out []string
			for _, n := range e.notices {
				if tg := n.GetTarget(); tg.GetChatId() == chat && tg.GetThreadId() == thread && n.GetNotice() != nil {
					out = append(out, n.GetNotice().GetText())
				}
			}
			return out
		}
		before := len(answers())
		id := nextEventID()
		e.publish(&eventsv1.MessageReceived{EventId: id, MessageId: id, Text: text, Source: src(chat, thread, user)})
		waitFor(t, "the answer to "+text, func() bool { return len(answers()) > before })
		return answers()[before]
	}
	for _, step := range []struct{ chat, thread, user, text, want string }{
		{"D1", "1700000001.000100", "bob", "/title Trip plans", "Title set: Trip plans"},
		{"D1", "1700000002.000100", "bob", "/title Beach day", "Title set: Beach day"},
		{"D2", "1700000003.000100", "alice", "/title Secret plan", "Title set: Secret plan"},
	} {
		if got := ask(step.chat, step.thread, step.user, step.text); got != step.want {
			t.Fatalf("%s: %q, want %q", step.text, got, step.want)
		}
	}

	list := ask("D1", "1700000002.000100", "bob", "/sessions")
	if !strings.Contains(list, "1. Beach day") || !strings.Contains(list, "(current)") || !strings.Contains(list, "2. Trip plans") {
		t.Errorf("/sessions in the second thread:\n%s\nwant both of the DM's threads, this one current", list)
	}
	if strings.Contains(list, "Secret") {
		t.Errorf("/sessions lists another user's DM:\n%s", list)
	}
	if got := ask("D1", "1700000002.000100", "bob", "/resume secret plan"); !strings.Contains(got, "No earlier conversation") {
		t.Errorf("/resume of another user's conversation: %q", got)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st := sessionstore.New(e.db)
	session := func(thread string) sessionstore.Session {
		t.Helper()
		sess, err := st.Get(ctx, sessionkey.Build(src("D1", thread, "bob"), sessionkey.DefaultOptions()))
		if err != nil {
			t.Fatal(err)
		}
		return sess
	}
	trip := session("1700000001.000100").ID
	beach := session("1700000002.000100").ID
	// The first thread is on Trip plans: a turn there and one here would
	// run at once on one conversation (turns are locked per thread). The
	// resume is refused, saying where it is open.
	if got, want := ask("D1", "1700000002.000100", "bob", "/resume trip PLANS"),
		"That conversation is open in the thread of this chat begun Nov 14, 22:13 UTC: continue it there, or send /new there to free it for this one."; got != want {
		t.Fatalf("/resume of the conversation the first thread is on: %q, want %q", got, want)
	}
	if got := session("1700000002.000100").ID; got != beach {
		t.Errorf("the second thread moved to %s, want it kept on %s", got, beach)
	}
	// Once the first thread left it, it comes here.
	ask("D1", "1700000001.000100", "bob", "/new")
	if got := session("1700000001.000100").ID; got == trip {
		t.Fatalf("the first thread is on %s after /new", got)
	}
	if got := ask("D1", "1700000002.000100", "bob", "/resume trip PLANS"); got != "↩️ Resumed Trip plans." {
		t.Fatalf("/resume of the first thread's former conversation: %q", got)
	}
	if got := session("1700000002.000100"); got.ID != trip || got.Title != "Trip plans" {
		t.Errorf("the second thread is on %s (%q), want the first thread's %s", got.ID, got.Title, trip)
	}

	// A new thread counts in the DM's list, each conversation once and
	// by when it began (a resume does not renumber it): itself first,
	// the first thread's new one next.
	list = ask("D1", "1700000004.000100", "bob", "/sessions")
	if !strings.Contains(list, "3. Beach day") || !strings.Contains(list, "4. Trip plans") || strings.Contains(list, "5.") {
		t.Errorf("/sessions in a new thread:\n%s", list)
	}
	if got := ask("D1", "1700000004.000100", "bob", "/resume 4"); !strings.HasPrefix(got, "That conversation is open in the thread of this chat begun Nov 14, 22:13 UTC") {
		t.Errorf("/resume 4, the second thread's now: %q", got)
	}
	if got := ask("D1", "1700000004.000100", "bob", "/resume 3"); got != "↩️ Resumed Beach day." {
		t.Errorf("/resume 3, which no thread is on: %q", got)
	}
}
