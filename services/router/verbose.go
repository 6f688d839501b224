package router

import (
	"context"
	"strings"

	"github.com/switchboard-chat/switchboard/pkg/sessionstore"
)

// /verbose is Hermes's (gateway/run.py, _handle_verbose_command): it
// cycles the tool progress mode of the platform it is sent from, off →
// new → all → verbose → off, starting from the mode in effect, and keeps
// the choice where every later turn on that platform reads it, for every
// chat of the platform (Hermes writes display.platforms.<platform>.
// tool_progress into the profile's config.yaml). It is off unless the
// operator turns it on (Hermes's display.tool_progress_command, here
// router.tool_progress_command). It runs mid-turn, as in Hermes; the
// running turn keeps the mode it started with ("takes effect on next
// message").
//
// Switchboard keeps the choice in Postgres (tool_progress_modes, per
// profile and platform). The router reads it when it starts a turn and
// puts it on the turn (TurnRequested.tool_progress_mode); the worker
// copies it onto the turn's tool progress events, and delivery shows
// them by it instead of its configured mode: one read per turn, none per
// reply, the same on every replica. The read happens only while the
// command is on: turning router.tool_progress_command off goes back to
// delivery's configuration (Hermes keeps what /verbose wrote in its
// config file).
//
// Differs from Hermes: "/verbose <mode>" sets a mode (a newer Hermes
// does; it opens a picker for a bare /verbose, which cycles here), and
// Hermes's later "log" mode is not one delivery knows.

// toolProgressDefault is the mode /verbose cycles from where the router
// knows of no configured one (Deps.ToolProgress nil): Hermes's default.
const toolProgressDefault = "all"

// verboseCycle is the order /verbose cycles in.
var verboseCycle = []string{"off", "new", "all", "verbose"}

// verboseDescriptions are Hermes's words for each mode, with delivery's
// key for the preview length.
var verboseDescriptions = map[string]string{
	"off":     "⚙️ Tool progress: **OFF** — no tool activity shown.",
	"new":     "⚙️ Tool progress: **NEW** — shown when tool changes (preview length: `delivery.tool_preview_length`, default 40).",
	"all":     "⚙️ Tool progress: **ALL** — every tool call shown (preview length: `delivery.tool_preview_length`, default 40).",
	"verbose": "⚙️ Tool progress: **VERBOSE** — every tool call with full arguments.",
}

// verboseDisabled is Hermes's answer while the command is off, naming
// this gateway's key.
const verboseDisabled = "The `/verbose` command is not enabled for messaging platforms.\n\n" +
	"Enable it in the configuration:\n```yaml\nrouter:\n  tool_progress_command: true\n```"

// verboseUsage answers an argument that is no mode.
const verboseUsage = "Usage: /verbose [off|new|all|verbose]"

// nextToolProgress is the mode /verbose with args moves to from current:
// the next in the cycle for none (or "next"), the mode named otherwise;
// ok is false for anything else. An unknown current mode counts as all,
// as in Hermes.
func nextToolProgress(current, args string) (mode string, ok bool) {
	switch a := strings.ToLower(strings.TrimSpace(args)); a {
	case "", "next":
		i := 2 // all
		for j, m := range verboseCycle {
			if m == current {
				i = j
			}
		}
		return verboseCycle[(i+1)%len(verboseCycle)], true
	case "off", "new", "all", "verbose":
		return a, true
	}
	return "", false
}

// verboseCommand answers /verbose.
func (s *Service) verboseCommand(ctx context.Context, m *msgCtx, sess sessionstore.Session, args string) error {
	if !s.cfg.ToolProgressCommand {
		return s.notice(ctx, m, sess.Generation, verboseDisabled, "command")
	}
	// Once per inbound event: a redelivered /verbose does not cycle on.
	return s.once(ctx, m, "verbose", func(ctx context.Context, st *sessionstore.Store) (string, int64, error) {
		platform := strings.ToLower(m.platform)
		current, err := st.ToolProgressMode(ctx, sess.Profile, platform)
		if err != nil {
			return "", 0, err
		}
		if current == "" {
			current = s.toolProgress(platform)
		}
		mode, ok := nextToolProgress(current, args)
		if !ok {
			return verboseUsage, sess.Generation, nil
		}
		if err := st.SetToolProgressMode(ctx, sess.Profile, platform, mode, m.platform+":"+m.src.GetUserId()); err != nil {
			return "", 0, err
		}
		return verboseDescriptions[mode] + "\n_(saved for **" + platform + "** — takes effect on next message)_", sess.Generation, nil
	})
}

// chosenToolProgress is the tool progress mode /verbose chose for the
// platform a turn answers, for the turn to carry: "" while the command
// is off (no read) or nothing was chosen.
func (s *Service) chosenToolProgress(ctx context.Context, profile, platform string) (string, error) {
	if !s.cfg.ToolProgressCommand || platform == "" {
		return "", nil
	}
	return s.store.ToolProgressMode(ctx, profile, platform)
}
