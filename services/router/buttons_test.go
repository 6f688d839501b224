package router

import (
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	deliveryv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/delivery/v1"
	eventsv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/events/v1"
	repliesv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/replies/v1"
	turnsv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/turns/v1"
	"github.com/switchboard-chat/switchboard/pkg/platform"
)

// held gives ev, a press, an interaction its gateway holds (a Telegram
// callback query's, a Teams invoke's).
func held(ev *eventsv1.MessageReceived, id string) *eventsv1.MessageReceived {
	ev.Interaction = &eventsv1.Interaction{Id: id, Component: true, ExpiresAt: timestamppb.New(time.Now().Add(1500 * time.Millisecond))}
	return ev
}

// pressAnswers collects the router's answers to held presses (what
// their gateways are sent, bus.Topology.PressSubject); the func returns
// those to interaction id so far.
func pressAnswers(t *testing.T, e *env) func(id string) []*deliveryv1.SendRequested {
	t.Helper()
	var mu sync.Mutex
	got := map[string][]*deliveryv1.SendRequested{}
	sub, err := e.bus.Conn().Subscribe(e.bus.Topology().Subject("gateway.*.press.*"), func(m *nats.Msg) {
		req := &deliveryv1.SendRequested{}
		if err := proto.Unmarshal(m.Data, req); err != nil {
			t.Errorf("press answer: %v", err)
			return
		}
		if e.bus.Topology().PressSubject(req.GetTarget().GetPlatform(), req.GetTarget().GetInteraction().GetId()) != m.Subject {
			t.Errorf("press answer %v on %s", req, m.Subject)
		}
		mu.Lock()
		defer mu.Unlock()
		id := req.GetTarget().GetInteraction().GetId()
		got[id] = append(got[id], req)
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := e.bus.Conn().Flush(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	return func(id string) []*deliveryv1.SendRequested {
		mu.Lock()
		defer mu.Unlock()
		return append([]*deliveryv1.SendRequested(nil), got[id]...)
	}
}

// answeredWith waits for the router's answer to held press id and
// checks it is one, with text, and kept for the gateway's replicas
// (keptWith).
func answeredWith(t *testing.T, e *env, answers func(string) []*deliveryv1.SendRequested, id, text string) {
	t.Helper()
	waitFor(t, "the press's answer", func() bool { return len(answers(id)) > 0 })
	a := answers(id)
	if len(a) != 1 || a[0].GetText() != text || a[0].GetTarget().GetInteraction().GetId() != id {
		t.Fatalf("press %s answered %v, want once with %q", id, a, text)
	}
	keptWith(t, e, a[0].GetTarget().GetPlatform(), id, text)
}

// keptWith waits for the router's word on held press id of platform in
// the bucket every replica of its gateway reads (platform.PressWord),
// kept after the answer's publish, and checks its text: a replica
// holding the press only after the publish, or taking over a dead
// holder's query, answers with it.
func keptWith(t *testing.T, e *env, platformName, id, text string) {
	t.Helper()
	var word *deliveryv1.SendRequested
	waitFor(t, "the press's answer kept", func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		var err error
		if word, _, err = platform.PressWord(ctx, e.bus, platformName, id); err != nil {
			t.Fatal(err)
		}
		return word != nil
	})
	if word.GetText() != text {
		t.Fatalf("press %s kept with %q, want %q", id, word.GetText(), text)
	}
}

// press is user's press of an approval prompt's button in their DM: the
// command the button stands for, from card (the prompt's message).
func press(user, text, card, call string) *eventsv1.MessageReceived {
	ev := dm(user, text)
	ev.MessageId = ""
	ev.ButtonPress = &eventsv1.ButtonPress{MessageId: card, ToolCallId: call}
	return ev
}

func (e *env) noticeEvents(user string) []*repliesv1.Notice {
	e.mu.Lock()
	defer e.mu.Unlock()
	var out []*repliesv1.Notice
	for _, n := range e.notices {
		if n.GetTarget().GetChatId() == "chat-"+user && n.GetNotice() != nil {
			out = append(out, n.GetNotice())
		}
	}
	return out
}

// A press answers the call its prompt asked about, and the answer
// replaces the prompt's text in Hermes's words; a redelivered press is
// answered once, and a later press on an answered prompt leaves it as
// it is; a press that finds nothing waiting says the approval expired.
func TestApprovalButtonPress(t *testing.T) {
	t.Parallel()
	cfg := testConfig()
	cfg.BusyMode = BusyQueue
	e, g, _ := busySession(t, cfg, "bob", "long job")
	defer g.open()
	answers := pressAnswers(t, e)

	first := held(press("bob", "/approve session", "card-1", "call-1"), "q1")
	e.publish(first)
	waitFor(t, "the answer", func() bool { return len(e.noticeEvents("bob")) == 1 })
	n := e.noticeEvents("bob")[0]
	if n.GetText() != "✅ Approved for session by bob" || n.GetReplacesMessageId() != "card-1" {
		t.Fatalf("notice %q replacing %q, want Hermes's decision replacing card-1", n.GetText(), n.GetReplacesMessageId())
	}
	ctl := e.controls(controlApprove)
	if len(ctl) != 1 || ctl[0].GetToolCallId() != "call-1" || ctl[0].GetText() != "session" {
		t.Fatalf("approval controls %v, want one for call-1 with scope session", ctl)
	}

	// The same press again (a platform's redelivery under another bus id).
	e.publishID(first, "redelivered-"+first.EventId)
	// A second press on the answered prompt: no call takes it.
	e.refuseControl.Store(true)
	e.publish(held(press("bob", "/deny", "card-1", "call-1"), "q2"))
	waitFor(t, "inbound drained", e.inboundDrained)
	if got := e.noticeEvents("bob"); len(got) != 1 {
		t.Fatalf("%d notices after a redelivery and a late press, want the first answer alone: %v", len(got), got)
	}
	if n := len(e.controls(controlApprove)); n != 1 {
		t.Fatalf("%d approval controls, want the redelivery dropped", n)
	}

	// Each press the router decided is answered to its gateway once,
	// with Hermes's toast: the answer's label, or the prompt answered
	// before; the redelivery is not.
	answeredWith(t, e, answers, "q1", "✅ Approved for session")
	answeredWith(t, e, answers, "q2", "This approval has already been resolved.")

	// Another prompt nothing waits for any more (timed out).
	e.publish(held(press("bob", "/approve", "card-2", "call-2"), "q3"))
	waitFor(t, "the expired card", func() bool { return len(e.noticeEvents("bob")) == 2 })
	n = e.noticeEvents("bob")[1]
	if n.GetText() != expiredText || n.GetReplacesMessageId() != "card-2" {
		t.Fatalf("notice %q replacing %q, want the expired text replacing card-2", n.GetText(), n.GetReplacesMessageId())
	}
	answeredWith(t, e, answers, "q3", "⌛ Approval expired")

	// On Teams, Hermes's card says the prompt is resolved or expired.
	teams := held(press("bob", "/deny", "card-3", "call-3"), "invoke-1")
	teams.Source.Platform = "teams"
	e.publish(teams)
	answeredWith(t, e, answers, "invoke-1", "⚠️ Approval already resolved or expired.")

	// A Teams press that came as an Action.Submit message carries no
	// interaction: nobody holds it, and it is sent no answer (the next
	// press's answer comes alone).
	submit := press("bob", "/deny", "card-4", "call-4")
	submit.Source.Platform = "teams"
	e.publish(submit)
	teams = held(press("bob", "/deny", "card-5", "call-5"), "invoke-2")
	teams.Source.Platform = "teams"
	e.publish(teams)
	answeredWith(t, e, answers, "invoke-2", "⚠️ Approval already resolved or expired.")
	if a := answers(""); len(a) != 0 {
		t.Fatalf("a press without an interaction was answered: %v", a)
	}
}

// A press from a user who may not answer approvals is refused as the
// typed command is, in a message of its own: the prompt keeps its
// buttons for those who may.
func TestApprovalButtonOfANonAdmin(t *testing.T) {
	t.Parallel()
	cfg := testConfig()
	cfg.BusyMode = BusyQueue
	cfg.Admins = map[string][]string{"telegram": {"alice"}}
	e, g, _ := busySession(t, cfg, "bob", "long job")
	defer g.open()
	answers := pressAnswers(t, e)
	e.publish(held(press("bob", "/approve", "card-1", "call-1"), "q1"))
	waitFor(t, "the refusal", func() bool { return len(e.noticeEvents("bob")) == 1 })
	// The press is decided: its gateway is told, without a word.
	answeredWith(t, e, answers, "q1", "")
	n := e.noticeEvents("bob")[0]
	if n.GetReplacesMessageId() != "" || n.GetText() != "/approve is reserved for admins here. /help and /whoami are available." {
		t.Fatalf("notice %q replacing %q, want the admin refusal as a message", n.GetText(), n.GetReplacesMessageId())
	}
	if c := e.controls(controlApprove); len(c) != 0 {
		t.Fatalf("%d approval controls for a non-admin's press", len(c))
	}
}

// The presser of an approval button is shown Hermes's word for the
// outcome where his gateway shows one: Telegram's callback answers, the
// ephemeral message of Discord's view on a prompt resolved before,
// Teams's card on one resolved or expired; nothing elsewhere.
func TestPressToast(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		platform string
		outcome  pressOutcome
		action   turnsv1.ControlAction
		args     string
		want     string
	}{
		{"telegram", pressTaken, controlApprove, "session", "✅ Approved for session"},
		{"telegram", pressTaken, controlDeny, "", "❌ Denied"},
		{"telegram", pressExpired, controlApprove, "", "⌛ Approval expired"},
		{"telegram", pressAnsweredBefore, controlApprove, "", "This approval has already been resolved."},
		{"discord", pressTaken, controlApprove, "always", ""},
		{"discord", pressExpired, controlDeny, "", ""},
		{"discord", pressAnsweredBefore, controlApprove, "", "This approval has already been resolved~"},
		{"teams", pressTaken, controlApprove, "", ""},
		{"teams", pressExpired, controlApprove, "", "⚠️ Approval already resolved or expired."},
		{"teams", pressAnsweredBefore, controlDeny, "", "⚠️ Approval already resolved or expired."},
		{"slack", pressAnsweredBefore, controlApprove, "", ""},
	} {
		if got := pressToast(tc.platform, tc.outcome, tc.action, tc.args); got != tc.want {
			t.Errorf("%s, outcome %d, %v %q: %q, want %q", tc.platform, tc.outcome, tc.action, tc.args, got, tc.want)
		}
	}
}

// The press of a choice its gateway cannot read (a Teams card action
// naming no approval choice: Interaction.unknown_choice, its text
// "/start") is answered as Hermes answers it, after the sender's
// authorization: an authorized sender's with "Unknown action." to its
// holder and nothing else, a stranger's with Hermes's refusal, as a
// stranger's press of a known choice is. No turn runs and no notice goes
// to the chat for the authorized sender. Before, the router read it as
// the /start it carries and answered the press with nothing.
func TestPressOfAnUnknownChoice(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.startRouter(testConfig(), nil, nil)
	w := e.startWorker(nil)
	answers := pressAnswers(t, e)
	onTeams := func(ev *eventsv1.MessageReceived, id string, unknown bool) *eventsv1.MessageReceived {
		ev.Source.Platform = "teams"
		held(ev, id).Interaction.UnknownChoice = unknown
		return ev
	}
	for _, tc := range []struct {
		name string
		ev   *eventsv1.MessageReceived
		// notice is the refusal's text through delivery ("" none);
		// answer the press's answer to its holder otherwise.
		notice, answer string
	}{
		{"an authorized sender's unknown choice", onTeams(press("alice", "/start", "card-1", ""), "invoke-1", true), "", "Unknown action."},
		{"a stranger's unknown choice", onTeams(press("mallory", "/start", "card-2", ""), "invoke-2", true), "⛔ Not authorized.", ""},
		{"a stranger's known choice within the minute", onTeams(press("mallory", "/approve", "card-3", ""), "invoke-3", false), "", "⛔ Not authorized."},
	} {
		t.Run(tc.name, func(t *testing.T) { pressAnsweredOnce(t, e, answers, tc.ev, tc.notice, tc.answer) })
	}
	if turns, _ := w.snapshot(); len(turns) != 0 {
		t.Fatalf("presses started %d turns", len(turns))
	}
}

// A Teams press refused because no allowlist applies to Teams (no
// TEAMS_ALLOWED_USERS or auth.allowed_users.teams, no
// GATEWAY_ALLOWED_USERS, no allow-all) is refused with Hermes's notice,
// "⛔ Approval buttons require TEAMS_ALLOWED_USERS to be configured.",
// which his Teams card action answers every press with in that case,
// through delivery the first time in the minute and to the press's
// holder after; other platforms keep their refusal. Before, the presser
// was told "⛔ Not authorized." and nobody what was missing.
func TestTeamsPressWithoutAnAllowlist(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	cfg := testConfig()
	cfg.Auth.GatewayAllowedUsers = nil
	cfg.Auth.AllowedUsers = map[string][]string{"slack": {"alice"}}
	var logs lockedBuffer
	e.startRouterWith(cfg, nil, func(d *Deps) { d.Log = slog.New(slog.NewTextHandler(&logs, nil)) })
	w := e.startWorker(nil)
	answers := pressAnswers(t, e)
	onTeams := func(ev *eventsv1.MessageReceived, id string) *eventsv1.MessageReceived {
		ev.Source.Platform = "teams"
		return held(ev, id)
	}
	unknownChoice := func(ev *eventsv1.MessageReceived) *eventsv1.MessageReceived {
		ev.Interaction.UnknownChoice = true
		return ev
	}
	const notice = "⛔ Approval buttons require TEAMS_ALLOWED_USERS to be configured."
	for _, tc := range []struct {
		name string
		ev   *eventsv1.MessageReceived
		// refusal is the refusal's text through delivery ("" none);
		// answer the press's answer to its holder otherwise.
		refusal, answer string
	}{
		{"a Teams press", onTeams(press("mallory", "/approve", "card-1", ""), "invoke-1"), notice, ""},
		{"a Teams press within the minute", onTeams(press("mallory", "/deny", "card-1", ""), "invoke-2"), "", notice},
		{"a Teams press of an unknown choice", unknownChoice(onTeams(press("trudy", "/start", "card-2", ""), "invoke-3")), notice, ""},
		{"a Telegram press", held(press("oscar", "/approve", "card-3", ""), "callback-1"), "⛔ You are not authorized to approve commands.", ""},
	} {
		t.Run(tc.name, func(t *testing.T) { pressAnsweredOnce(t, e, answers, tc.ev, tc.refusal, tc.answer) })
	}
	if turns, _ := w.snapshot(); len(turns) != 0 {
		t.Fatalf("presses started %d turns", len(turns))
	}
	// The operator's warning comes once for the three Teams presses
	// (teamsNoAllowlistLogEvery), each presser having had the notice.
	if n := strings.Count(logs.String(), `msg="teams button press refused: no allowlist applies to teams`); n != 1 {
		t.Errorf("the warning logged %d times, want once; router log:\n%s", n, logs.String())
	}
}

// pressAnsweredOnce publishes ev, a held press, and checks how it was
// answered: with refusal, its refusal through delivery to the press's
// chat (kept for the gateway's replicas), when refusal is set; else with
// answer to its holder alone, no notice going to the chat.
func pressAnsweredOnce(t *testing.T, e *env, answers func(string) []*deliveryv1.SendRequested, ev *eventsv1.MessageReceived, refusal, answer string) {
	t.Helper()
	chat := ev.GetSource().GetChatId()
	notices := func() []*repliesv1.ReplyEvent {
		e.mu.Lock()
		defer e.mu.Unlock()
		var out []*repliesv1.ReplyEvent
		for _, n := range e.notices {
			if n.GetTarget().GetChatId() == chat && n.GetNotice() != nil {
				out = append(out, n)
			}
		}
		return out
	}
	before := len(notices())
	e.publish(ev)
	id := ev.GetInteraction().GetId()
	if refusal != "" {
		waitFor(t, "the refusal", func() bool { return len(notices()) > before })
		waitFor(t, "inbound drained", e.inboundDrained)
		n := notices()[before]
		if n.GetNotice().GetText() != refusal || n.GetTarget().GetInteraction().GetId() != id {
			t.Fatalf("refusal %q to %v, want %q with interaction %q", n.GetNotice().GetText(), n.GetTarget(), refusal, id)
		}
		keptWith(t, e, ev.GetSource().GetPlatform(), id, refusal)
		return
	}
	waitFor(t, "inbound drained", e.inboundDrained)
	answeredWith(t, e, answers, id, answer)
	if got := notices(); len(got) != before {
		t.Fatalf("%s got %v, want nothing", chat, got[before:])
	}
}
