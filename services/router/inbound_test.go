package router

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	eventsv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/events/v1"
)

// A NUL in a name or a message (Postgres text refuses it) once failed
// every write of the session, on every redelivery: the sender never got
// a turn or an answer. The router drops NULs from inbound events.
func TestNULIsDroppedFromInboundEvents(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.startRouter(testConfig(), nil, nil)
	w := e.startWorker(nil)
	ev := dm("alice", "hi\x00 there")
	ev.Source.UserName = "Al\x00ice"
	ev.Source.ChatName = "chat\x00"
	e.publish(ev)
	turnOf(t, w, "hi there") // and its end: /cron is refused mid-turn
	tr, _ := w.snapshot()
	if got := inputsText(tr, tr[0].SessionKey); !slices.Equal(got, []string{"hi there"}) {
		t.Errorf("turn inputs %q, want [\"hi there\"]", got)
	}
	if got := e.ask("alice", "/cron add every 1h remind\x00 me"); !strings.Contains(got, "Created job") {
		t.Errorf("/cron add with a NUL: %q", got)
	}
}

func TestDropNUL(t *testing.T) {
	ev := &eventsv1.MessageReceived{Text: "a\x00b", Source: &eventsv1.SessionSource{UserName: "\x00x\x00"},
		Attachments: []*eventsv1.Attachment{{FileName: "f\x00.txt"}}}
	dropNUL(ev.ProtoReflect())
	if ev.Text != "ab" || ev.Source.UserName != "x" || ev.Attachments[0].FileName != "f.txt" {
		t.Errorf("got %q %q %q", ev.Text, ev.Source.UserName, ev.Attachments[0].FileName)
	}
}

// "/cmd@other_bot" is a command for another bot in the chat: it is
// neither a command here nor a message for the agent.
func TestCommandForAnotherBotIsDropped(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	cfg := testConfig()
	cfg.BotNames = map[string]string{"telegram": "switchbot"}
	e.startRouter(cfg, nil, nil)
	w := e.startWorker(nil)
	e.publish(dm("bob", "/new@otherbot"))
	e.publish(dm("bob", "/status@OtherBot"))
	if got := e.ask("bob", "/help@switchbot"); !strings.Contains(got, "/new [title] (/reset)") {
		t.Fatalf("/help@switchbot: %q", got)
	}
	waitFor(t, "inbound drained", e.inboundDrained)
	if turns, _ := w.snapshot(); len(turns) != 0 {
		t.Errorf("%d turns started, want none", len(turns))
	}
	if got := e.noticesTo("bob"); len(got) != 1 {
		t.Errorf("notices %q, want only the help", got)
	}
}

// /sessions pages through a chat's conversations, and /resume takes the
// number of any of them, not only of the newest ten.
func TestSessionsPages(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.startRouter(testConfig(), nil, nil)
	for i := 1; i <= 12; i++ {
		if got := e.ask("bob", fmt.Sprintf("/new t%d", i)); !strings.Contains(got, "New session started") {
			t.Fatalf("/new t%d: %q", i, got)
		}
	}
	// 13 conversations: the first, untitled, and t1 … t12.
	first := e.ask("bob", "/sessions")
	if !strings.Contains(first, "1. t12") || !strings.Contains(first, "10. t3") || strings.Contains(first, "11.") ||
		!strings.Contains(first, "Older: /sessions 2") {
		t.Errorf("page 1: %q", first)
	}
	second := e.ask("bob", "/sessions 2")
	if !strings.Contains(second, "11. t2") || !strings.Contains(second, "12. t1") || !strings.Contains(second, "13. ") ||
		strings.Contains(second, "Older") {
		t.Errorf("page 2: %q", second)
	}
	if got := e.ask("bob", "/sessions 5"); !strings.Contains(got, "No conversations on page 5") {
		t.Errorf("page 5: %q", got)
	}
	if got := e.ask("bob", "/resume 12"); got != "↩️ Resumed t1." {
		t.Errorf("/resume 12: %q", got)
	}
	if got := e.ask("bob", "/resume 14"); !strings.Contains(got, "There is no conversation 14") {
		t.Errorf("/resume 14: %q", got)
	}
}
