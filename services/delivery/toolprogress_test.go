package delivery_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	deliveryv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/delivery/v1"
	repliesv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/replies/v1"
	"github.com/switchboard-chat/switchboard/services/delivery"
	"github.com/switchboard-chat/switchboard/services/delivery/internal/ratelimit"
)

// shown is what a chat of the gateway shows, message by message: its
// sends, with the edits and deletes applied.
func (g *gateway) shown(platform, chat string) []string {
	var ids []string
	text := map[string]string{}
	for _, c := range g.sends() {
		if c.Req.GetTarget().GetPlatform() != platform || c.Req.GetTarget().GetChatId() != chat {
			continue
		}
		switch c.Op {
		case deliveryv1.SendOp_SEND_OP_SEND:
			id := fmt.Sprintf("m%d", len(ids)+1000)
			g.mu.Lock()
			if rec := g.receipts[c.Key]; rec != nil {
				id = rec.GetPlatformMessageId()
			}
			g.mu.Unlock()
			ids = append(ids, id)
			text[id] = c.Req.GetText()
		case deliveryv1.SendOp_SEND_OP_EDIT:
			text[c.Req.GetMessageId()] = c.Req.GetText()
		case deliveryv1.SendOp_SEND_OP_DELETE:
			delete(text, c.Req.GetMessageId())
		}
	}
	var out []string
	for _, id := range ids {
		if t, ok := text[id]; ok {
			out = append(out, t)
		}
	}
	return out
}

// republish publishes ev again under another bus message id: the reply
// event comes back (a worker's retried publish past the dedupe window, a
// redelivery after a crash) and must not show twice.
func (e *env) republish(t *testing.T, ev *repliesv1.ReplyEvent) {
	t.Helper()
	id := fmt.Sprintf("reply:%s:%d:again", ev.GetTurnId(), ev.GetSeq())
	if _, err := e.bus.Publish(context.Background(), e.bus.Topology().ReplySubject(ev.GetSessionKey()), id, ev); err != nil {
		t.Fatal(err)
	}
}

func started(tool, arg string) *repliesv1.ToolProgress {
	return &repliesv1.ToolProgress{ToolCallId: "c-" + tool + arg, ToolName: tool, Phase: repliesv1.ToolPhase_TOOL_PHASE_STARTED,
		Preview: arg, Arguments: `{"q":"` + arg + `"}`, Detail: `{"q":"` + arg + `"}`}
}

var rmApproval = &repliesv1.ToolProgress{ToolCallId: "c-rm", ToolName: "rm", Phase: repliesv1.ToolPhase_TOOL_PHASE_AWAITING_APPROVAL,
	Detail: `rm {"path":"/tmp/x"} — reply /approve or /deny`, Command: `rm {"path":"/tmp/x"}`, Reason: "dangerous tool (agent.dangerous_tools): Remove a file."}

func prompt(prefix string) string {
	return "⚠️ **Dangerous command requires approval:**\n```\nrm {\"path\":\"/tmp/x\"}\n```\nReason: dangerous tool (agent.dangerous_tools): Remove a file.\n\n" +
		"Reply `" + prefix + "approve` to execute, `" + prefix + "approve session` to approve this pattern for the session, `" +
		prefix + "approve always` to approve permanently, or `" + prefix + "deny` to cancel."
}

// A tool call waiting for approval reaches the chat the turn answers as
// Hermes's prompt, once, also when its reply event comes back, and before
// the answer; Slack's users are told to type "!". The API's runs get the
// step, not the prompt.
func TestApprovalPromptReachesTheChatOnce(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	slack := newGateway(t, e.bus, e.clock, "slack")
	cfg := testConfig()
	cfg.ToolProgress = delivery.ToolProgressOff
	cfg.Platforms["slack"] = delivery.Platform{ChatRate: ratelimit.Rate{Count: -1}}
	e.start(t, cfg, "a")
	for _, platform := range []string{"test", "stream", "slack", "api"} {
		turn, session := "t-"+platform, "s-"+platform
		ask := event(turn, 1, session, rmApproval)
		ask.Target.Platform = platform
		e.publish(t, ask)
		e.republish(t, ask)
		for i, body := range []any{started("rm", "/tmp/x"), final("removed")} {
			ev := event(turn, int64(i+2), session, body)
			ev.Target.Platform = platform
			e.publish(t, ev)
		}
	}
	for _, platform := range []string{"test", "stream", "slack", "api"} {
		g, prefix := e.gw, "/"
		if platform == "slack" {
			g, prefix = slack, "!"
		}
		want := []string{prompt(prefix), "removed"}
		if platform == "api" {
			want = []string{"removed"}
		}
		chat := "chat-s-" + platform
		eventually(t, e.clock, 0, platform+" answer", func() bool { return len(g.shown(platform, chat)) >= len(want) })
		e.consumed(t, "s-"+platform)
		if got := g.shown(platform, chat); strings.Join(got, "\n---\n") != strings.Join(want, "\n---\n") {
			t.Errorf("%s chat shows:\n%s\nwant:\n%s", platform, strings.Join(got, "\n---\n"), strings.Join(want, "\n---\n"))
		}
		for _, c := range g.sends() {
			if c.Req.GetTarget().GetPlatform() == platform && c.Req.GetText() == want[0] && platform != "api" &&
				(c.Req.GetFormat() != deliveryv1.TextFormat_TEXT_FORMAT_MARKDOWN || c.Req.GetFinal() || c.Key != "t-"+platform+":1:a:0") {
				t.Errorf("%s prompt sent as %v final=%v key %s", platform, c.Req.GetFormat(), c.Req.GetFinal(), c.Key)
			}
		}
	}
	if st := rowState(t, e.db, "t-test:1:a:0"); st != "sent" {
		t.Errorf("the prompt's outbox row is %q", st)
	}
}

// Progress lines by mode, as Hermes shows them: where the platform edits,
// one message gathers the turn's lines (a repeated line counts its
// repeats, "new" shows a line only when the tool changes) and stays
// above the answer; where it cannot, each line is a message. A step
// that comes back is not shown twice.
func TestToolProgressModes(t *testing.T) {
	t.Parallel()
	tests := []struct {
		mode     string
		platform string
		want     []string
	}{
		{delivery.ToolProgressOff, "stream", []string{"done"}},
		{delivery.ToolProgressNew, "stream", []string{"⚙️ a: \"one\"\n⚙️ b: \"three\"", "done"}},
		{delivery.ToolProgressAll, "stream", []string{"⚙️ a: \"one\" (×2)\n⚙️ a: \"two\"\n⚙️ b: \"three\"", "done"}},
		{delivery.ToolProgressVerbose, "stream", []string{
			"⚙️ a(['q'])\n{\"q\": \"one\"} (×2)\n⚙️ a(['q'])\n{\"q\": \"two\"}\n⚙️ b(['q'])\n{\"q\": \"three\"}", "done"}},
		{delivery.ToolProgressAll, "test", []string{"⚙️ a: \"one\"", "⚙️ a: \"one\" (×2)", "⚙️ a: \"two\"", "⚙️ b: \"three\"", "done"}},
		{delivery.ToolProgressNew, "test", []string{"⚙️ a: \"one\"", "⚙️ b: \"three\"", "done"}},
		{delivery.ToolProgressOff, "test", []string{"done"}},
	}
	for _, tt := range tests {
		t.Run(tt.mode+" on "+tt.platform, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			cfg := testConfig()
			cfg.Platforms[tt.platform] = delivery.Platform{Streaming: cfg.Platforms[tt.platform].Streaming, ToolProgress: tt.mode}
			e.start(t, cfg, "a")
			var last *repliesv1.ReplyEvent
			for i, body := range []any{started("a", "one"), started("a", "one"), started("a", "two"), started("b", "three"), final("done")} {
				ev := event("t1", int64(i+1), "s1", body)
				ev.Target.Platform = tt.platform
				e.publish(t, ev)
				if i == 1 {
					e.republish(t, ev)
					e.republish(t, last)
				}
				last = ev
			}
			eventually(t, e.clock, 0, "the answer", func() bool { return e.gw.postedTexts()["done"] == 1 })
			e.consumed(t, "s1")
			if got := e.gw.shown(tt.platform, "chat-s1"); strings.Join(got, "\n---\n") != strings.Join(tt.want, "\n---\n") {
				t.Errorf("chat shows:\n%s\nwant:\n%s", strings.Join(got, "\n---\n"), strings.Join(tt.want, "\n---\n"))
			}
			sends := 0
			for _, c := range e.gw.sends() {
				if c.Op == deliveryv1.SendOp_SEND_OP_SEND {
					sends++
				}
			}
			if sends != len(tt.want) {
				t.Errorf("%d messages sent, want %d", sends, len(tt.want))
			}
		})
	}
}

// An approval prompt comes after the lines shown so far; the lines of
// the calls after it gather in a new message below it.
func TestApprovalPromptSplitsToolProgress(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	cfg := testConfig()
	cfg.ToolProgress = delivery.ToolProgressAll
	e.start(t, cfg, "a")
	for i, body := range []any{started("a", "one"), started("b", "two"), rmApproval, started("rm", "/tmp/x"), started("c", "three"), final("done")} {
		e.publishStream(t, "t1", int64(i+1), "s1", body)
	}
	eventually(t, e.clock, 0, "the answer", func() bool { return e.gw.postedTexts()["done"] == 1 })
	e.consumed(t, "s1")
	want := []string{"⚙️ a: \"one\"\n⚙️ b: \"two\"", prompt("/"), "⚙️ rm: \"/tmp/x\"\n⚙️ c: \"three\"", "done"}
	if got := e.gw.shown("stream", "chat-s1"); strings.Join(got, "\n---\n") != strings.Join(want, "\n---\n") {
		t.Errorf("chat shows:\n%s\nwant:\n%s", strings.Join(got, "\n---\n"), strings.Join(want, "\n---\n"))
	}
}

// The prompt's send asks for its buttons (the choices and the call);
// the answer to a pressed button replaces the prompt's text with one
// edit of its message, which takes the buttons off.
func TestApprovalButtonAnswerReplacesThePrompt(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	cfg := testConfig()
	cfg.ToolProgress = delivery.ToolProgressOff
	e.start(t, cfg, "a")
	e.publish(t, event("t1", 1, "s1", rmApproval))
	eventually(t, e.clock, 0, "the prompt", func() bool { return len(e.gw.shown("test", "chat-s1")) == 1 })
	var card string
	for _, c := range e.gw.sends() {
		a := c.Req.GetApproval()
		if c.Op != deliveryv1.SendOp_SEND_OP_SEND || a == nil {
			continue
		}
		if strings.Join(a.GetChoices(), ",") != "once,session,always,deny" || a.GetToolCallId() != "c-rm" {
			t.Fatalf("approval %v, want the four choices for c-rm", a)
		}
		e.gw.mu.Lock()
		card = e.gw.receipts[c.Key].GetPlatformMessageId()
		e.gw.mu.Unlock()
	}
	if card == "" {
		t.Fatal("the prompt was sent without its approval")
	}
	answer := event("", 1, "s1", &repliesv1.Notice{Text: "✅ Approved once by bob", Kind: "command", ReplacesMessageId: card})
	answer.InputMessageIds = nil
	e.publish(t, answer)
	eventually(t, e.clock, 0, "the answer", func() bool {
		got := e.gw.shown("test", "chat-s1")
		return len(got) == 1 && got[0] == "✅ Approved once by bob"
	})
	e.consumed(t, "s1")
	edits := 0
	for _, c := range e.gw.sends() {
		if c.Op == deliveryv1.SendOp_SEND_OP_EDIT {
			edits++
			if c.Req.GetMessageId() != card || c.Req.GetApproval() != nil {
				t.Errorf("edit of %q with approval %v, want the card's without buttons", c.Req.GetMessageId(), c.Req.GetApproval())
			}
		}
	}
	if edits != 1 {
		t.Fatalf("%d edits, want 1", edits)
	}
}

// The mode /verbose chose, carried on a tool progress event, is the one
// the step is shown by: over the platform's configured mode, either way
// (configured off shows lines, configured verbose shows none); an empty
// or unknown one leaves the configured mode.
func TestToolProgressChosenMode(t *testing.T) {
	t.Parallel()
	tests := []struct {
		configured, chosen string
		want               []string
	}{
		{delivery.ToolProgressOff, delivery.ToolProgressAll, []string{"⚙️ a: \"one\"", "⚙️ a: \"two\"", "done"}},
		{delivery.ToolProgressOff, delivery.ToolProgressNew, []string{"⚙️ a: \"one\"", "done"}},
		{delivery.ToolProgressAll, delivery.ToolProgressVerbose, []string{"⚙️ a(['q'])\n{\"q\": \"one\"}", "⚙️ a(['q'])\n{\"q\": \"two\"}", "done"}},
		{delivery.ToolProgressVerbose, delivery.ToolProgressOff, []string{"done"}},
		{delivery.ToolProgressOff, "", []string{"done"}},
		{delivery.ToolProgressNew, "log", []string{"⚙️ a: \"one\"", "done"}},
	}
	for _, tt := range tests {
		t.Run(tt.configured+" chosen "+tt.chosen, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			cfg := testConfig()
			cfg.Platforms["test"] = delivery.Platform{Streaming: cfg.Platforms["test"].Streaming, ToolProgress: tt.configured}
			e.start(t, cfg, "a")
			for i, body := range []any{started("a", "one"), started("a", "two"), final("done")} {
				ev := event("t1", int64(i+1), "s1", body)
				if _, ok := body.(*repliesv1.ToolProgress); ok {
					ev.ToolProgressMode = tt.chosen
				}
				e.publish(t, ev)
			}
			eventually(t, e.clock, 0, "the answer", func() bool { return e.gw.postedTexts()["done"] == 1 })
			e.consumed(t, "s1")
			if got := e.gw.shown("test", "chat-s1"); strings.Join(got, "\n---\n") != strings.Join(tt.want, "\n---\n") {
				t.Errorf("chat shows:\n%s\nwant:\n%s", strings.Join(got, "\n---\n"), strings.Join(tt.want, "\n---\n"))
			}
		})
	}
}
