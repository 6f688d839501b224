package router

import (
	"context"
	"slices"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	eventsv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/events/v1"
	repliesv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/replies/v1"
	"github.com/switchboard-chat/switchboard/pkg/sessionstore"
)

// A native command (a Discord slash command) in a group from a sender
// not allowed is refused in words, as Hermes does, once a minute per
// sender; the same sender's typed message there still gets silence, and
// no turn runs. The refusal's target carries the command's interaction,
// for the gateway to show it to the sender only; an allowed sender's
// command goes into its turn without it.
func TestSlashCommandRefusedInGroup(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.startRouter(testConfig(), nil, nil)
	w := e.startWorker(nil)
	const refusal = "You're not authorized to use this command."

	ia := &eventsv1.Interaction{Id: "800000000000000001", ApplicationId: "100000000000000001", Token: "aW50ZXJhY3Rpb24.secret",
		ExpiresAt: timestamppb.New(time.Now().Add(15 * time.Minute))}
	slash := func(user, text string) {
		ev := dm(user, text)
		ev.Source.Platform, ev.Source.ChatType, ev.Source.ScopeId = "discord", "group", "guild1"
		ev.SlashCommand, ev.NoReaction, ev.Mentioned = true, true, true
		ev.Interaction = ia
		e.publish(ev)
	}
	slash("mallory", "/model gpt-5")
	waitFor(t, "the refusal", func() bool { return slices.Contains(e.noticesTo("mallory"), refusal) })
	e.mu.Lock()
	for _, n := range e.notices {
		if got := n.GetTarget().GetInteraction(); n.GetNotice().GetText() == refusal &&
			(got.GetId() != ia.GetId() || got.GetApplicationId() != ia.GetApplicationId() || got.GetToken() != ia.GetToken() || !got.GetExpiresAt().AsTime().Equal(ia.GetExpiresAt().AsTime())) {
			t.Errorf("the refusal's target %v, want the command's interaction", n.GetTarget())
		}
	}
	e.mu.Unlock()

	slash("mallory", "/status") // within the minute: dropped
	typed := dm("mallory", "/model gpt-5")
	typed.Source.Platform, typed.Source.ChatType = "discord", "group"
	e.publish(typed)
	waitFor(t, "inbound drained", e.inboundDrained)
	if n := e.noticesTo("mallory"); len(n) != 1 || n[0] != refusal {
		t.Fatalf("mallory got %q, want one refusal", n)
	}
	if turns, _ := w.snapshot(); len(turns) != 0 {
		t.Fatalf("a sender not allowed started %d turns", len(turns))
	}

	// An allowed sender's: into the turn, without the interaction.
	slash("alice", "what is new")
	waitFor(t, "alice's turn", func() bool { turns, _ := w.snapshot(); return len(turns) == 1 })
	turns, _ := w.snapshot()
	for _, in := range turns[0].GetInputs() {
		if in.GetText() != "what is new" || in.GetInteraction() != nil {
			t.Fatalf("turn input %v, want alice's message without its interaction", in)
		}
	}
}

// A press of a button (an approval prompt's, a picker's) from a sender
// not allowed, with the press's interaction (a Discord component's, a
// Telegram callback query's), is answered with Hermes's refusal on a
// target carrying that interaction, for the gateway to show to the
// presser only: the platform's approval words for an approval's
// buttons, its other words for the rest, in a DM (no pairing code) as
// in a group, once a minute per sender, a window the refusal of a slash
// command shares; within it, the press's answer to its holder carries
// the refusal instead (Hermes refuses every press). Nothing else
// happens: no turn, no session, the picker is not answered. An allowed sender's press works as before, its
// answer without the interaction; a press without an interaction gets
// what the sender's messages get.
func TestButtonPressOfASenderNotAllowed(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.provider = Provider{Kind: "openai", Model: "gpt-4o"}
	cfg := testConfig()
	cfg.Models = []string{"gpt-4o", "gpt-4o-mini"}
	e.startRouter(cfg, nil, nil)
	w := e.startWorker(nil)

	ia := func(id string) *eventsv1.Interaction {
		return &eventsv1.Interaction{Id: id, ApplicationId: "100000000000000001", Token: "aW50ZXJhY3Rpb24." + id,
			ExpiresAt: timestamppb.New(time.Now().Add(15 * time.Minute)), Component: true}
	}
	// onDiscord makes ev a Discord press in chat (a group unless "dm")
	// with interaction id.
	onDiscord := func(ev *eventsv1.MessageReceived, chat, id string) *eventsv1.MessageReceived {
		ev.Source.Platform, ev.NoReaction = "discord", true
		if chat != "dm" {
			ev.Source.ChatType, ev.Source.ChatId, ev.Source.ScopeId = "group", chat, "guild1"
		}
		if id != "" {
			ev.Interaction = ia(id)
		}
		return ev
	}
	// onTelegram gives ev, a Telegram press in a DM, its callback query
	// id (a Telegram press's interaction: no token).
	onTelegram := func(ev *eventsv1.MessageReceived, id string) *eventsv1.MessageReceived {
		ev.Interaction = &eventsv1.Interaction{Id: id, Component: true, ExpiresAt: timestamppb.New(time.Now().Add(1500 * time.Millisecond))}
		return ev
	}
	// onTeams makes ev a Teams press in a group chat with its invoke's
	// interaction id.
	onTeams := func(ev *eventsv1.MessageReceived, id string) *eventsv1.MessageReceived {
		ev.Source.Platform, ev.Source.ChatType, ev.Source.ChatId = "teams", "group", "chat-teams"
		return held(ev, id)
	}
	answers := pressAnswers(t, e)
	const notAllowed, notAllowedApproval = "You're not authorized~", "You're not authorized to approve commands~"
	// sent are the notices published to chat so far.
	sent := func(chat string) []*repliesv1.ReplyEvent {
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
	for _, tc := range []struct {
		name string
		ev   *eventsv1.MessageReceived
		chat string
		// want is the notice's text ("" none) and wantIA the interaction
		// id its target carries ("" none); answer is the text of the
		// press's answer to its holder when there is no notice.
		want, wantIA, answer string
	}{
		{"an allowed sender's press works", onDiscord(pickerPress("alice", "card-1", "x"), "dm", "800000000000000001"),
			"chat-alice", "⚙ **Model Configuration**\n\nModel selection cancelled.", "", ""},
		{"a picker's press in a group", onDiscord(pickerPress("mallory", "card-2", "x"), "chat-grp", "800000000000000002"),
			"chat-grp", notAllowed, "800000000000000002", ""},
		{"a second press within the minute", onDiscord(press("mallory", "/approve", "card-3", "call-3"), "chat-grp", "800000000000000003"),
			"chat-grp", "", "", notAllowedApproval},
		{"an approval's press in a DM", onDiscord(press("eve", "/approve always", "card-4", "call-4"), "dm", "800000000000000004"),
			"chat-eve", notAllowedApproval, "800000000000000004", ""},
		{"a /memory list's press in a DM", onDiscord(press("trent", "/memory approve all", "card-5", ""), "dm", "800000000000000005"),
			"chat-trent", notAllowed, "800000000000000005", ""},
		{"a press without an interaction in a group", onDiscord(pickerPress("oscar", "card-6", "x"), "chat-grp2", ""),
			"chat-grp2", "", "", ""},
		{"a Telegram approval's press in a DM", onTelegram(press("peggy", "/deny", "card-8", "call-8"), "900000000000000008"),
			"chat-peggy", "⛔ You are not authorized to approve commands.", "900000000000000008", ""},
		{"a Telegram picker's press in a DM", onTelegram(pickerPress("victor", "card-9", "x"), "900000000000000009"),
			"chat-victor", "⛔ You are not authorized to answer this prompt.", "900000000000000009", ""},
		{"a Teams approval's press in a group", onTeams(press("sybil", "/approve", "card-10", "call-10"), "invoke-10"),
			"chat-teams", "⛔ Not authorized.", "invoke-10", ""},
		{"a Telegram press within the minute", onTelegram(press("peggy", "/approve", "card-11", "call-11"), "900000000000000011"),
			"chat-peggy", "", "", "⛔ You are not authorized to approve commands."},
		{"a Teams press within the minute", onTeams(press("sybil", "/deny", "card-12", "call-12"), "invoke-12"),
			"chat-teams", "", "", "⛔ Not authorized."},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := len(sent(tc.chat))
			e.publish(tc.ev)
			if tc.want == "" {
				waitFor(t, "inbound drained", e.inboundDrained)
				if got := sent(tc.chat); len(got) != before {
					t.Fatalf("%s got %v, want nothing", tc.chat, got[before:])
				}
				if id := tc.ev.GetInteraction().GetId(); id != "" {
					// Decided: its gateway is told so, a refusal within
					// the minute with Hermes's words, which its presser
					// alone sees (Hermes refuses every press).
					answeredWith(t, e, answers, id, tc.answer)
				}
				return
			}
			waitFor(t, "the answer", func() bool { return len(sent(tc.chat)) > before })
			waitFor(t, "inbound drained", e.inboundDrained)
			got := sent(tc.chat)
			if len(got) != before+1 {
				t.Fatalf("%s got %v, want one notice", tc.chat, got[before:])
			}
			n := got[before]
			if n.GetNotice().GetText() != tc.want || n.GetTarget().GetInteraction().GetId() != tc.wantIA {
				t.Fatalf("notice %q to %v, want %q with interaction %q", n.GetNotice().GetText(), n.GetTarget(), tc.want, tc.wantIA)
			}
			if ia := n.GetTarget().GetInteraction(); tc.wantIA != "" && (!ia.GetComponent() || ia.GetToken() != tc.ev.GetInteraction().GetToken()) {
				t.Fatalf("the refusal's interaction %v, want the press's", ia)
			}
			if tc.wantIA != "" && n.GetNotice().GetReplacesMessageId() != "" {
				t.Fatalf("the refusal replaces %q: the buttons' message must stay", n.GetNotice().GetReplacesMessageId())
			}
			if tc.wantIA != "" {
				// The refusal is the press's answer: nothing else.
				time.Sleep(100 * time.Millisecond)
				if a := answers(tc.wantIA); len(a) != 0 {
					t.Fatalf("a refused press answered %v besides its refusal", a)
				}
				// Kept for the gateway's replicas all the same: a
				// Teams invoke retried where no one holds the press
				// is answered with it.
				keptWith(t, e, tc.ev.GetSource().GetPlatform(), tc.wantIA, tc.want)
			}
		})
	}

	// The window is the slash command's too: mallory's /status is dropped.
	slash := onDiscord(dm("mallory", "/status"), "chat-grp", "800000000000000007")
	slash.SlashCommand, slash.Interaction.Component = true, false
	before := len(sent("chat-grp"))
	e.publish(slash)
	waitFor(t, "inbound drained", e.inboundDrained)
	if got := sent("chat-grp"); len(got) != before {
		t.Fatalf("mallory's slash command within the minute got %v", got[before:])
	}
	if turns, _ := w.snapshot(); len(turns) != 0 {
		t.Fatalf("presses started %d turns", len(turns))
	}
	store := sessionstore.New(e.db)
	for _, key := range []string{"agent:main:discord:group:chat-grp:mallory", "agent:main:discord:dm:chat-eve", "agent:main:discord:dm:chat-trent"} {
		if _, err := store.Get(context.Background(), key); err == nil {
			t.Errorf("session %s exists after a refused press", key)
		}
	}
}
