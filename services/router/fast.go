package router

import (
	"context"
	"strings"

	"github.com/switchboard-chat/switchboard/pkg/llm"
	"github.com/switchboard-chat/switchboard/pkg/sessionstore"
)

// /fast is Hermes's (gateway/run.py, _handle_fast_command): "Fast mode —
// OpenAI Priority Processing / Anthropic Fast Mode". /fast fast (or on)
// asks the provider to serve this chat's turns at its faster, dearer
// tier, /fast normal (or off) goes back to the standard one, /fast and
// /fast status show the mode. As in Hermes, a chat whose model has no
// fast tier is told so, whatever the argument (llm.FastModeSupported:
// OpenAI's gpt-*, o1, o3 and o4 models except Codex, and the Claude
// models Anthropic lists for fast mode). It counts from the next turn
// ("takes effect on next message"), and while a turn runs it is refused,
// as Hermes's ("config-only … users should wait and set them between
// turns": refusedMidTurn).
//
// On the wire (pkg/llm): OpenAI gets service_tier "priority" on its chat
// completions request, Anthropic speed "fast" with the
// fast-mode-2026-02-01 beta header, on every model call of the turn (not
// on the summary /compress asks for). A provider that still refuses the
// tier fails the turn with an answer that says so and how to turn /fast
// off (the worker's failureText), never a silent fallback.
//
// Differs from Hermes: Hermes keeps the choice per session (or, with
// --global, writes agent.service_tier into the profile's config.yaml).
// Here it is the session key's (the service_tier column, migration
// 00120), which outlives /new, /resume and /branch as /reasoning's
// effort does, and a chat that chose nothing follows agent.service_tier
// (default normal, as Hermes). --global is refused, as /reasoning's is:
// replicas do not write their config. Newer Hermes's auto and cold modes
// (fast for the first seconds of each turn, or only for a session's
// first turn) are not offered. /background tasks and /btw side
// questions take the chat's mode as it is when asked, as they take its
// /model and /reasoning; cron jobs,
// whose sessions choose nothing, follow agent.service_tier.

// fastUsage lists /fast's arguments, as Hermes's status shows them.
const fastUsage = "`/fast <normal|fast|status>`"

// fastOptions answers an argument /fast does not know.
const fastOptions = "**Valid options:** normal, fast, status"

// chatModel is the provider kind and model the chat's turns use: its
// /model override ("kind:model" picks another configured provider),
// else the default. model is "" when the router cannot tell.
func (s *Service) chatModel(sess sessionstore.Session) (kind, model string) {
	kind, model = s.provider.Kind, s.provider.Model
	o := sess.ModelOverride
	if o == "" {
		return kind, model
	}
	if k, m, ok := strings.Cut(o, ":"); ok && (k == llm.KindOpenAI || k == llm.KindAnthropic) {
		if k != kind {
			// Another provider's default model is the worker's to know.
			model = ""
		}
		kind = k
		if m != "" {
			model = m
		}
		return kind, model
	}
	return kind, o
}

// serviceTier is the chat's fast mode: its /fast choice, else
// agent.service_tier; byChat reports which.
func (s *Service) serviceTier(sess sessionstore.Session) (tier string, byChat bool) {
	if t := sess.ServiceTier; t == llm.TierFast || t == llm.TierNormal {
		return t, true
	}
	t, ok := llm.ParseServiceTier(s.cfg.ServiceTier)
	if !ok {
		t = llm.TierNormal
	}
	return t, false
}

// fastCommand answers /fast [normal|fast|status] (on and off too).
func (s *Service) fastCommand(ctx context.Context, m *msgCtx, sess sessionstore.Session, args string) error {
	reply := func(text string) error { return s.notice(ctx, m, sess.Generation, text, "command") }
	kind, model := s.chatModel(sess)
	if s.provider.Agent != "" || !llm.FastModeSupported(kind, model) {
		shown := model
		if s.provider.Agent != "" || shown == "" {
			shown = "unknown"
		}
		return reply("⚡ /fast is only available for OpenAI models that support Priority Processing and Claude models that support Fast Mode " +
			"(this chat's model: `" + preview(shown, 64) + "`).")
	}
	feature := "Priority Processing"
	if kind == llm.KindAnthropic {
		feature = "Fast Mode"
	}
	words := strings.Fields(strings.ToLower(args))
	for _, w := range words {
		if w == "--global" {
			return reply("⚠️ `--global` is not available here: the default of every chat is the gateway's agent.service_tier. " +
				"`/fast <normal|fast>` sets this chat's.")
		}
	}
	var want, label string
	switch arg := strings.Join(words, " "); arg {
	case "", "status":
		tier, byChat := s.serviceTier(sess)
		scope := "the default (`agent.service_tier`)"
		if byChat {
			scope = "this chat's choice"
		}
		return reply("⚡ " + feature + "\n\nCurrent mode: `" + tier + "`\nSet by: " + scope + "\nModel: `" + preview(model, 64) +
			"`\n\n_Usage:_ " + fastUsage)
	case "fast", "on":
		want, label = llm.TierFast, "FAST"
	case "normal", "off":
		want, label = llm.TierNormal, "NORMAL"
	case "auto", "cold":
		return reply("⚠️ `" + arg + "` is not available here: this gateway's fast mode is on for every turn of the chat or off.\n\n" + fastOptions)
	default:
		return reply("⚠️ Unknown argument: `" + preview(arg, 64) + "`\n\n" + fastOptions)
	}
	// Once per inbound event, as the other settings.
	return s.once(ctx, m, "fast", func(ctx context.Context, st *sessionstore.Store) (string, int64, error) {
		if err := st.SetServiceTier(ctx, m.key, want); err != nil {
			return "", 0, err
		}
		s.log.InfoContext(ctx, "fast mode changed", "session_key", m.key, "tier", want, "by", m.platform+":"+m.src.GetUserId())
		return "⚡ ✓ " + feature + ": **" + label + "** (this chat only)\n_(takes effect on next message)_", sess.Generation, nil
	})
}
