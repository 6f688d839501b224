package router

import (
	"context"
	"fmt"
	"math"
	"strings"

	"github.com/switchboard-chat/switchboard/pkg/footer"
	"github.com/switchboard-chat/switchboard/pkg/sessionstore"
)

// /context (alias /ctx) is Hermes's (gateway/run.py,
// _handle_context_command): the deep view of the context window that
// /status does not give — a usage gauge (used / window, percentage, a
// text bar, headroom), the auto-compression threshold and how far off it
// is, how many times the conversation was compressed, the tokens its
// turns used (labelled as throughput, not context size), and what the
// next prompt is made of by category. /context all adds the tool results
// by tool and each compression. Read-only and answered at once, mid-turn
// too (Hermes's busy_policy dispatch): no lock, no once.
//
// Differs from Hermes: the figure in use is the one the runtime footer
// shows (/footer): the prompt of the latest finished turn's latest model
// call, which the worker stores with the turn's final (session_context,
// migration 00125) — Hermes reads its live agent's compressor. Mid-turn
// it is the figure of the turn before, and the breakdown already counts
// the steps the running turn saved. The breakdown is an estimate from the
// stored transcript at ~4 bytes a token (the measure the worker's
// compression uses), of the system prompt, the compression summary and
// the messages after it by role; tool schemas, skills and memory, which
// Hermes's buckets count from the live agent, are not stored and not
// counted. `all` lists tool results by tool and the compressions, where
// Hermes lists toolsets and skills by schema cost.

// contextBar is the gauge's width in characters, as Hermes's.
const contextBar = 24

// contextArgs are the arguments /context all accepts, as Hermes's.
var contextArgs = map[string]bool{"all": true, "full": true, "details": true}

// contextCommand answers /context [all].
func (s *Service) contextCommand(ctx context.Context, m *msgCtx, sess sessionstore.Session, args string, busy bool) error {
	reply := func(text string) error { return s.notice(ctx, m, sess.Generation, text, "command") }
	arg := strings.ToLower(strings.TrimSpace(args))
	if arg != "" && !contextArgs[arg] {
		return reply("Usage: `/context [all]`")
	}
	v, err := s.store.Context(ctx, m.key, sess.ID)
	if err != nil {
		return err
	}
	counted := []sessionstore.Session{sess}
	if err := s.store.AddTurnUsage(ctx, counted); err != nil {
		return err
	}
	model := v.Model
	if model == "" {
		model = sess.ModelOverride
	}
	if model == "" {
		model = s.provider.Model
	}
	return reply(contextText(contextInput{
		view: v, model: model, window: int64(s.cfg.ContextWindow), compressAt: s.cfg.CompressAt,
		protectLast: s.cfg.ProtectLast, in: counted[0].InputTokens, out: counted[0].OutputTokens,
		busy: busy, all: arg != "",
	}))
}

// contextInput is what contextText renders.
type contextInput struct {
	view        sessionstore.ContextView
	model       string
	window      int64
	compressAt  float64
	protectLast int
	// in and out are the conversation's token counts (/usage's).
	in, out int64
	busy    bool
	all     bool
}

// contextText renders /context's answer.
func contextText(c contextInput) string {
	v := c.view
	lines := []string{"🧠 Context Window", ""}
	if c.model != "" {
		lines = append(lines, "Model: "+c.model)
	}
	if c.window > 0 {
		lines = append(lines, "Window: "+thousands(c.window)+" tokens")
	} else {
		lines = append(lines, "Window: the external agent's own (agent.backend); Switchboard does not know its size")
	}

	estimate, messages := contextEstimate(v)
	if v.Tokens == 0 && messages == 0 {
		lines = append(lines, "", "Nothing in the context yet: this conversation has no messages. Send one, then /context shows how full the window is.")
		if c.busy {
			lines = append(lines, "⏳ The agent is working on its first message.")
		}
		if t := threshold(c); t > 0 {
			lines = append(lines, fmt.Sprintf("Auto-compression at %s tokens (%.0f%% of the window).", thousands(t), c.compressAt*100))
		}
		return strings.Join(lines, "\n")
	}

	// The gauge: the footer's figure, else the estimate, marked "~".
	used, mark := v.Tokens, ""
	if used == 0 {
		used, mark = estimate, "~"
	}
	if pct, ok := footer.Percent(used, c.window); ok {
		filled := int(math.Round(float64(pct) / 100 * contextBar))
		lines = append(lines,
			fmt.Sprintf("In use: %s%s / %s (%d%%)", mark, thousands(used), thousands(c.window), pct),
			"["+strings.Repeat("█", filled)+strings.Repeat("░", contextBar-filled)+"]",
			"Headroom: "+mark+thousands(max(0, c.window-used))+" tokens")
	} else {
		lines = append(lines, "In use: "+mark+thousands(used)+" tokens")
	}
	switch {
	case v.Tokens == 0:
		lines = append(lines, "(estimated from the transcript: no turn of this conversation has reported its usage yet)")
	case c.busy:
		lines = append(lines, "⏳ The agent is working: this is as of the last finished turn; the breakdown below counts what the running turn saved so far.")
	}

	lines = append(lines, "")
	if t := threshold(c); t > 0 {
		if used >= t {
			lines = append(lines, fmt.Sprintf("🗜 At or over the auto-compression threshold, %s tokens (%.0f%%): older messages are summarised once the next prompt's estimate passes it.", thousands(t), c.compressAt*100))
		} else {
			lines = append(lines, fmt.Sprintf("🗜 Auto-compression at %s tokens (%.0f%%): %s%s to go", thousands(t), c.compressAt*100, mark, thousands(t-used)))
		}
	}
	lines = append(lines, "Compressions in this conversation: "+fmt.Sprint(len(v.Summaries)))
	if c.protectLast > 0 && c.window > 0 {
		lines = append(lines, fmt.Sprintf("Always kept verbatim: the last %d messages (agent.protect_last)", c.protectLast))
	}
	if c.in > 0 || c.out > 0 {
		lines = append(lines, fmt.Sprintf("Throughput (tokens billed over all model calls, not context size): %s in, %s out", thousands(c.in), thousands(c.out)))
	}

	lines = append(lines, "", "📦 Next prompt, by category (estimated, ~4 bytes a token)")
	total := max(estimate, 1)
	row := func(label string, bytes int64) {
		tok := bytes / 4
		lines = append(lines, fmt.Sprintf("%s: ~%s tok (%d%%)", label, thousands(tok), int(math.Round(float64(tok)/float64(total)*100))))
	}
	if v.SystemBytes > 0 {
		row("System prompt", v.SystemBytes)
	}
	if n := len(v.Summaries); n > 0 {
		row("Summary of earlier messages", v.Summaries[n-1].Bytes)
	}
	for _, p := range v.Parts {
		row(fmt.Sprintf("%s (%d)", partLabel(p.Name), p.Messages), p.Bytes)
	}
	lines = append(lines, "Total: ~"+thousands(estimate)+" tok (tool schemas are not counted)")

	if !c.all {
		if len(v.Tools) > 0 || len(v.Summaries) > 0 {
			lines = append(lines, "", "Use /context all for tool results by tool and each compression.")
		}
		return strings.Join(lines, "\n")
	}
	if len(v.Tools) > 0 {
		lines = append(lines, "", "📎 Tool results by tool")
		for _, t := range v.Tools {
			lines = append(lines, fmt.Sprintf("%s: %s, ~%s tok", t.Name, plural(int(t.Messages), "result"), thousands(t.Bytes/4)))
		}
	}
	if len(v.Summaries) > 0 {
		lines = append(lines, "", "🗜 Compressions")
		for i, sm := range v.Summaries {
			lines = append(lines, fmt.Sprintf("%d. %s — summary ~%s tok", i+1, sm.At.UTC().Format("2006-01-02 15:04 MST"), thousands(sm.Bytes/4)))
		}
	}
	return strings.Join(lines, "\n")
}

// contextEstimate is the next prompt's estimated tokens (the worker's
// measure: bytes / 4) and how many messages it holds after the summary.
func contextEstimate(v sessionstore.ContextView) (tokens int64, messages int64) {
	bytes := v.SystemBytes
	if n := len(v.Summaries); n > 0 {
		bytes += v.Summaries[n-1].Bytes
	}
	for _, p := range v.Parts {
		bytes += p.Bytes
		messages += p.Messages
	}
	return bytes / 4, messages
}

// threshold is the prompt size above which the worker compresses, 0 when
// not known.
func threshold(c contextInput) int64 {
	if c.window <= 0 || c.compressAt <= 0 {
		return 0
	}
	return int64(float64(c.window) * c.compressAt)
}

// partLabel names a role's messages.
func partLabel(role string) string {
	switch role {
	case "user":
		return "Your messages"
	case "assistant":
		return "Agent's messages and tool calls"
	case "tool":
		return "Tool results"
	case "system":
		return "System notes"
	}
	return role
}
