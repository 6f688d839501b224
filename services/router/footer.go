package router

import (
	"context"
	"strings"

	"github.com/switchboard-chat/switchboard/pkg/footer"
	"github.com/switchboard-chat/switchboard/pkg/sessionkey"
	"github.com/switchboard-chat/switchboard/pkg/sessionstore"
)

// /footer is Hermes's (gateway/run.py, _handle_footer_command): it turns
// the runtime footer on or off — a line of runtime state ("gpt-5.4 ·
// 42%": the model, and how full its context window is) appended to the
// agent's final answers — or shows it (/footer status). A bare /footer
// toggles. It runs mid-turn and counts from the next turn, in Hermes's
// words "takes effect on next message".
//
// Differs from Hermes: Hermes writes display.runtime_footer.enabled into
// the profile's config.yaml, for every chat. Here each chat chooses for
// itself (the runtime_footer column of its session key's row, migration
// 00117, which outlives /new, /branch and /resume), and a chat that
// chose nothing follows router.runtime_footer (default off, as Hermes).
// The router puts the chat's choice on each turn
// (TurnRequested.runtime_footer); the worker, which knows the model and
// the tokens, appends the line to the turn's final answer only (never
// to streamed text, tool progress or command answers), after a blank
// line as Hermes does. Its fields are Hermes's defaults without cwd
// (footer.Fields).

// footerUsage answers an argument /footer does not know.
const footerUsage = "Usage: `/footer [on|off|status]`"

// footerOn reports whether turns of the chat carry the footer: its
// choice, else router.runtime_footer.
func (s *Service) footerOn(sess sessionstore.Session) bool {
	switch sess.RuntimeFooter {
	case "on":
		return true
	case "off":
		return false
	}
	return s.cfg.RuntimeFooter
}

// footerFor reports whether the turn of key, answering on platform,
// carries the footer: never for the API (a program's response body),
// cron runs and /background tasks, which are not answers in a chat.
func (s *Service) footerFor(key, platform string, sess sessionstore.Session) bool {
	if platform == "api" || platform == "cron" {
		return false
	}
	if _, ok := sessionkey.BackgroundTask(key, s.cfg.Profile); ok {
		return false
	}
	return s.footerOn(sess)
}

// footerCommand answers /footer [on|off|status].
func (s *Service) footerCommand(ctx context.Context, m *msgCtx, sess sessionstore.Session, args string) error {
	reply := func(text string) error { return s.notice(ctx, m, sess.Generation, text, "command") }
	state := func(on bool) string {
		if on {
			return "ON"
		}
		return "OFF"
	}
	on := s.footerOn(sess)
	var want bool
	switch strings.ToLower(strings.TrimSpace(args)) {
	case "status", "?":
		chosen := "this chat's choice"
		if sess.RuntimeFooter == "" {
			chosen = "the default (`router.runtime_footer`)"
		}
		return reply("📎 Runtime footer: **" + state(on) + "**\nFields: `" + strings.Join(footer.Fields, ", ") + "`\nSet by: " + chosen)
	case "":
		want = !on
	case "on", "enable", "true", "1":
		want = true
	case "off", "disable", "false", "0":
		want = false
	default:
		return reply(footerUsage)
	}
	example := ""
	if want {
		model := sess.ModelOverride
		if model == "" {
			model = s.provider.Model
		}
		if p := footer.Format(model, 0, 0); p != "" {
			example = "\nExample: `" + p + "`"
		}
	}
	// Once per inbound event: a redelivered bare /footer does not
	// toggle back.
	return s.once(ctx, m, "footer", func(ctx context.Context, st *sessionstore.Store) (string, int64, error) {
		if err := st.SetRuntimeFooter(ctx, m.key, map[bool]string{true: "on", false: "off"}[want]); err != nil {
			return "", 0, err
		}
		s.log.InfoContext(ctx, "runtime footer changed", "session_key", m.key, "on", want, "by", m.platform+":"+m.src.GetUserId())
		return "📎 Runtime footer: **" + state(want) + "**" + example + "\n_(saved for this chat — takes effect on next message)_", sess.Generation, nil
	})
}
