package router

import (
	"context"
	"strings"

	"github.com/switchboard-chat/switchboard/pkg/personality"
	"github.com/switchboard-chat/switchboard/pkg/sessionstore"
)

// personalityCommand answers /personality as Hermes does (writing with
// st, the transaction of once): no argument
// lists the personalities, none|default|neutral clears the chat's, a
// name sets it. Unlike Hermes, which writes the choice into its one
// config (every chat takes it), the choice is the session key's: it
// outlives /new and /resume, as /reasoning's does.
func (s *Service) personalityCommand(ctx context.Context, st *sessionstore.Store, m *msgCtx, args string) (string, error) {
	args = strings.ToLower(strings.TrimSpace(args))
	names := personality.Names(s.cfg.Personalities)
	if len(names) == 0 {
		return "No personalities configured (agent.personalities).", nil
	}
	if args == "" {
		lines := []string{"🎭 **Available Personalities**\n", "• `none` — (no personality overlay)"}
		for _, name := range names {
			prompt, _ := personality.Lookup(s.cfg.Personalities, name)
			lines = append(lines, "• `"+name+"` — "+preview(prompt, 50)) // Hermes's list preview
		}
		lines = append(lines, "\nUsage: `/personality <name>`")
		return strings.Join(lines, "\n"), nil
	}
	if personality.Clears(args) {
		if err := st.SetPersonality(ctx, m.key, ""); err != nil {
			return "", err
		}
		return "🎭 Personality cleared — using base agent behavior.\n_(takes effect on next message)_", nil
	}
	if _, ok := personality.Lookup(s.cfg.Personalities, args); ok {
		if err := st.SetPersonality(ctx, m.key, args); err != nil {
			return "", err
		}
		return "🎭 Personality set to **" + args + "**\n_(takes effect on next message)_", nil
	}
	available := make([]string, 0, len(names)+1)
	for _, n := range append([]string{"none"}, names...) {
		available = append(available, "`"+n+"`")
	}
	return "Unknown personality: `" + preview(args, 64) + "`\n\nAvailable: " + strings.Join(available, ", "), nil
}

// reasoningUsage lists /reasoning's arguments.
const reasoningUsage = "`/reasoning <none|minimal|low|medium|high|xhigh|reset|show|hide>`"

// reasoningCommand answers /reasoning as Hermes does (writing with st,
// the transaction of once): no argument shows
// the effort, where it comes from and whether the model's reasoning is
// shown; a level sets the chat's effort, reset goes back to
// agent.reasoning_effort, show|on and hide|off turn the display on and
// off. Hermes's --global (write the level into its config) has no
// counterpart: replicas do not write their config, so it is refused.
// The display is the session key's too, where Hermes keeps one per
// platform.
func (s *Service) reasoningCommand(ctx context.Context, st *sessionstore.Store, m *msgCtx, sess sessionstore.Session, args string) (string, error) {
	words := strings.Fields(strings.ToLower(args))
	if len(words) == 0 {
		level, scope := "provider default", "global config"
		if e := s.cfg.ReasoningEffort; e != "" {
			level = e
		}
		if e := sess.ReasoningEffort; e != "" {
			level, scope = e, "session override"
		}
		if level == "none" {
			level = "none (disabled)"
		}
		display := "off"
		if sess.ShowReasoning {
			display = "on ✓"
		}
		return "🧠 **Reasoning Settings**\n\n**Effort:** `" + level + "`\n**Scope:** " + scope + "\n**Display:** " + display +
			"\n\n_Usage:_ " + reasoningUsage, nil
	}
	for _, w := range words {
		if w == "--global" {
			return "⚠️ `--global` is not available here: the default of every chat is the gateway's agent.reasoning_effort. " +
				"`/reasoning <level>` sets this chat's.", nil
		}
	}
	arg := strings.Join(words, " ")
	switch {
	case arg == "show" || arg == "on":
		if err := st.SetShowReasoning(ctx, m.key, true); err != nil {
			return "", err
		}
		return "🧠 ✓ Reasoning display: **ON**\nModel thinking will be shown before each response in this chat.", nil
	case arg == "hide" || arg == "off":
		if err := st.SetShowReasoning(ctx, m.key, false); err != nil {
			return "", err
		}
		return "🧠 ✓ Reasoning display: **OFF** for this chat", nil
	case arg == "reset":
		if err := st.SetReasoningEffort(ctx, m.key, ""); err != nil {
			return "", err
		}
		return "🧠 ✓ Session reasoning override cleared; falling back to global config.", nil
	case personality.ValidEffort(arg):
		if err := st.SetReasoningEffort(ctx, m.key, arg); err != nil {
			return "", err
		}
		return "🧠 ✓ Reasoning effort set to `" + arg + "` (this chat only)\n_(takes effect on next message)_", nil
	}
	return "⚠️ Unknown argument: `" + preview(arg, 64) + "`\n\n**Valid levels:** none, minimal, low, medium, high, xhigh\n**Display:** show, hide", nil
}

// chatSettings is /status's lines for the chat's own /personality,
// /reasoning, /fast and /voice, each only when the chat set it (a line a
// line, each ending in a newline; "" when none is set). The voice mode
// is the one its turns carry (voiceFor: none where voice replies are not
// configured or the platform cannot send them), named as /voice status
// names it, Hermes's "Voice mode: On (voice reply to voice messages)".
func (s *Service) chatSettings(sess sessionstore.Session, key, platform string) string {
	var b strings.Builder
	if sess.Personality != "" {
		b.WriteString("Personality: " + sess.Personality + "\n")
	}
	if sess.ReasoningEffort != "" {
		b.WriteString("Reasoning effort: " + sess.ReasoningEffort + "\n")
	}
	if sess.ShowReasoning {
		b.WriteString("Reasoning display: on\n")
	}
	if sess.ServiceTier != "" {
		b.WriteString("Fast mode: " + sess.ServiceTier + "\n")
	}
	if mode := s.voiceFor(key, platform, sess); mode != "" {
		b.WriteString("Voice mode: " + voiceLabel(mode) + "\n")
	}
	return b.String()
}
