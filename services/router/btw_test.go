package router

import (
	"context"
	"fmt"
	"regexp"
	"testing"

	eventsv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/events/v1"
	turnsv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/turns/v1"
	"github.com/switchboard-chat/switchboard/pkg/redisx"
	"github.com/switchboard-chat/switchboard/pkg/sessionkey"
	"github.com/switchboard-chat/switchboard/pkg/sessionstore"
)

var btwTaskRe = regexp.MustCompile(`^btw_\d{6}_[0-9a-f]{6}$`)

// /btw runs its question as a turn of a session of its own, beside the
// chat's running turn, as /background does: Hermes's acknowledgement at
// once, the turn under a key derived from the chat's (its own lock) with
// side_question naming the chat's conversation, the chat's model and /fast, answer
// only, no background task id; the chat's turn is neither interrupted nor
// queued behind, and a redelivery starts nothing more. Without a question
// it answers Hermes's usage, and in a chat that never had a turn it says
// there is nothing to ask about.
func TestBtwRunsBesideTheChat(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.startRouter(testConfig(), nil, nil)
	g := newGate(t, "long job")
	defer g.open()
	w := e.startWorker(func(t *turnsv1.TurnRequested) {
		if t.GetSideQuestion() == nil {
			g.hold(t)
		}
	})
	if got := e.ask("bob", "/btw what did we decide?"); got != btwNoHistory {
		t.Fatalf("/btw in a chat without a conversation: %q", got)
	}
	e.publish(dm("alice", "long job"))
	waitFor(t, "the chat's turn runs", func() bool { turns, _ := w.snapshot(); return len(turns) == 1 })
	ctx := context.Background()
	store := sessionstore.New(e.db)
	const chatKey = "agent:main:telegram:dm:chat-alice"
	waitFor(t, "the chat's session", func() bool { _, err := store.Get(ctx, chatKey); return err == nil })
	if err := store.SetModel(ctx, chatKey, "gpt-fast"); err != nil {
		t.Fatal(err)
	}
	if err := store.SetServiceTier(ctx, chatKey, "fast"); err != nil {
		t.Fatal(err)
	}
	if got := e.ask("alice", "/btw"); got != btwUsage {
		t.Fatalf("/btw alone: %q", got)
	}

	question := "which file was it again, the one with the runtime settings for the gateway?"
	ev := dm("alice", "/btw "+question)
	e.publish(ev)
	const ack = "💬 /btw: \"which file was it again, the one with the runtime settings f...\"\nReply will appear here shortly."
	waitFor(t, "the acknowledgement", func() bool { return e.countNotices("alice", ack) == 1 })
	var side *turnsv1.TurnRequested
	waitFor(t, "the side question's turn", func() bool {
		turns, _ := w.snapshot()
		for _, tr := range turns {
			if tr.GetSideQuestion() != nil {
				side = tr
			}
		}
		return side != nil
	})
	id, ok := sessionkey.BackgroundTask(side.SessionKey, "")
	if !ok || !btwTaskRe.MatchString(id) || side.SessionKey != sessionkey.Background(chatKey, "", id) {
		t.Fatalf("the side question's key %q (task %q)", side.SessionKey, id)
	}
	sess, err := store.Get(ctx, chatKey)
	if err != nil {
		t.Fatal(err)
	}
	in := side.GetInputs()[0]
	if side.GetServiceTier() != "fast" {
		t.Errorf("the side question's turn carries service_tier %q, want the chat's fast", side.GetServiceTier())
	}
	if side.GetSideQuestion().GetSessionId() != sess.ID || side.GetSessionId() == sess.ID || side.GetBackgroundTaskId() != "" ||
		in.GetText() != question || !in.GetAnswerOnly() || side.GetModelOverride() != "gpt-fast" || side.GetRuntimeFooter() ||
		side.GetOrigin().GetChatId() != "chat-alice" || in.GetMessageId() != ev.GetMessageId() {
		t.Fatalf("the side question's turn: asks about %q (chat's %q), runs in %q, task id %q, input %q answer only %v, model %q, footer %v, origin %v, message %q",
			side.GetSideQuestion().GetSessionId(), sess.ID, side.GetSessionId(), side.GetBackgroundTaskId(), in.GetText(), in.GetAnswerOnly(),
			side.GetModelOverride(), side.GetRuntimeFooter(), side.GetOrigin(), in.GetMessageId())
	}
	// The chat's turn still runs, was not interrupted, and nothing waits
	// behind it; its turns carry no side question.
	if owner, err := redisx.NewLocker(e.rdb, e.prefix).Owner(ctx, chatKey); err != nil || owner == "" {
		t.Fatalf("the chat's lock: %q, %v", owner, err)
	}
	if c := e.controls(controlInterrupt); len(c) != 0 {
		t.Fatalf("controls %v: /btw interrupted the chat's turn", c)
	}
	if n, _ := store.QueueLen(ctx, chatKey); n != 0 {
		t.Fatalf("%d messages wait in the chat's session", n)
	}
	turns, overlap := w.snapshot()
	if len(overlap) != 0 {
		t.Fatalf("overlapping turns %v", overlap)
	}
	for _, tr := range turns {
		if tr.SessionKey == chatKey && tr.GetSideQuestion() != nil {
			t.Fatalf("the chat's turn %s carries a side question", tr.TurnId)
		}
	}

	// A redelivery, after a crash that lost the dedupe record: no second
	// turn, no second acknowledgement.
	e.loseHandled(ev)
	e.publishID(ev, "redelivered-"+ev.EventId)
	waitFor(t, "inbound drained", e.inboundDrained)
	if turns, _ := w.snapshot(); len(inputsText(turns, side.SessionKey)) != 1 {
		t.Fatalf("the redelivery asked the side question again: %q", inputsText(turns, side.SessionKey))
	}
	// The redelivery may publish the acknowledgement again, under the
	// first one's ids (the stream and delivery drop the copy).
	e.mu.Lock()
	acks := map[string]bool{}
	for _, n := range e.notices {
		if n.GetNotice().GetText() == ack {
			acks[fmt.Sprintf("%s:%d", n.GetTurnId(), n.GetSeq())] = true
		}
	}
	e.mu.Unlock()
	if len(acks) != 1 {
		t.Fatalf("acknowledgements under %d ids: %v", len(acks), acks)
	}
	// /sessions lists the chat's conversation alone.
	g.open()
	waitFor(t, "the chat's turn ends", func() bool {
		owner, err := redisx.NewLocker(e.rdb, e.prefix).Owner(ctx, chatKey)
		return err == nil && owner == ""
	})
	if got := e.ask("alice", "/sessions"); !regexp.MustCompile(`(?m)^1\. `).MatchString(got) || regexp.MustCompile(`(?m)^2\. `).MatchString(got) {
		t.Fatalf("/sessions: %q", got)
	}
}

// apiMessage is a message the API gateway publishes for the client
// "client" (chat chat-client, as noticesTo names it), authenticated by
// its API key as the gateway's are, with no user name (the request gave
// no OpenAI "user").
func apiMessage(text string) *eventsv1.MessageReceived {
	id := nextEventID()
	return &eventsv1.MessageReceived{EventId: id, MessageId: id, Text: text, TransportAuthenticated: true,
		Source: &eventsv1.SessionSource{Platform: "api", Account: "a", ChatId: "chat-client", ChatType: "dm", UserId: "client"}}
}

// Over the API, /btw and /background are refused, as /save is: their
// answer comes after the request that asked has ended, and nothing is
// left to carry it to the client (Hermes's API server declines them
// too). No side question's or task's turn runs.
func TestBtwAndBackgroundRefusedOnAPI(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.startRouter(testConfig(), nil, nil)
	w := e.startWorker(nil)
	e.publish(apiMessage("what is the plan?"))
	waitFor(t, "the conversation's first turn", func() bool { turns, _ := w.snapshot(); return len(turns) == 1 })
	for _, tc := range []struct{ text, want string }{
		{"/btw what did we decide?", btwNotOnAPI},
		{"/background summarise the plan", backgroundNotOnAPI},
		{"/bg summarise the plan", backgroundNotOnAPI},
	} {
		before := len(e.noticesTo("client"))
		e.publish(apiMessage(tc.text))
		waitFor(t, "the answer to "+tc.text, func() bool { return len(e.noticesTo("client")) > before })
		if got := e.noticesTo("client")[before]; got != tc.want {
			t.Errorf("%s over the API answered %q, want %q", tc.text, got, tc.want)
		}
	}
	// A message after them runs: had either started a turn, it was
	// published before this one was handled.
	e.publish(apiMessage("go on"))
	waitFor(t, "the next message's turn", func() bool {
		turns, _ := w.snapshot()
		for _, tr := range turns {
			if len(tr.GetInputs()) > 0 && tr.GetInputs()[0].GetText() == "go on" {
				return true
			}
		}
		return false
	})
	turns, _ := w.snapshot()
	for _, tr := range turns {
		if tr.GetSideQuestion() != nil || tr.GetBackgroundTaskId() != "" {
			t.Errorf("a turn ran for a refused command: %q on %s", tr.GetInputs()[0].GetText(), tr.SessionKey)
		}
	}
}
