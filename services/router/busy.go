package router

import (
	"context"
	"fmt"
	"strings"

	"github.com/switchboard-chat/switchboard/pkg/sessionstore"
)

// /busy is Hermes's (gateway/run.py, _handle_busy_command): it shows or
// sets what a message does that arrives while the agent is working —
// interrupt the running turn, queue for the next turn, or steer into the
// running one — in Hermes's words. It runs mid-turn, and counts from the
// next message.
//
// Differs from Hermes: Hermes writes display.busy_input_mode into the
// profile's config.yaml, for every chat of the gateway. Switchboard
// serves many people from one deployment, so one chat's choice must not
// change another's: /busy sets the mode of the chat's session key (the
// busy_mode column of its sessions row, which no reset touches, so it
// outlives /new, /branch and /resume as /personality does). The order
// in which a message's mode is decided (busyMode): router.chat_busy_modes
// for the chat, then the chat's /busy, then router.platform_busy_modes,
// then router.busy_mode. A chat the operator pinned in chat_busy_modes
// is told so, and /busy changes nothing there.

// busyBehavior are Hermes's words for each mode: for /busy status, and
// for the answer to a change.
var busyBehavior = map[string][2]string{
	BusyInterrupt: {"interrupts current run", "Messages will interrupt the current run while the agent is busy."},
	BusyQueue:     {"queues for next turn", "Messages will be queued for the next turn while the agent is busy."},
	BusySteer:     {"steers into current run (after next tool call)", "Messages will be steered into the current run (after the next tool call)."},
}

// busyCommand answers /busy [queue|steer|interrupt|status].
func (s *Service) busyCommand(ctx context.Context, m *msgCtx, sess sessionstore.Session, args string) error {
	reply := func(text string) error { return s.notice(ctx, m, sess.Generation, text, "command") }
	arg := strings.ToLower(strings.TrimSpace(args))
	pinned, isPinned := s.cfg.ChatBusyModes[m.platform+":"+m.src.GetChatId()]
	if arg == "" || arg == "status" {
		mode := s.busyMode(m, sess)
		text := fmt.Sprintf("**Busy input mode: `%s`**\nMessages while busy: _%s_\n", mode, busyBehavior[mode][0])
		if isPinned {
			return reply(text + "Set for this chat by the operator (`router.chat_busy_modes`); /busy does not change it.")
		}
		return reply(text + "Change with `/busy queue`, `/busy steer`, or `/busy interrupt`.")
	}
	if _, ok := busyBehavior[arg]; !ok {
		return reply(fmt.Sprintf("Unknown mode `%s`. Use `/busy queue`, `/busy steer`, or `/busy interrupt`.", preview(arg, 30)))
	}
	if isPinned {
		return reply(fmt.Sprintf("Busy input mode for this chat is set by the operator (`router.chat_busy_modes`): **`%s`**. /busy does not change it.", pinned))
	}
	// Once per inbound event, as every command that changes a chat's
	// settings.
	return s.once(ctx, m, "busy", func(ctx context.Context, st *sessionstore.Store) (string, int64, error) {
		if err := st.SetBusyMode(ctx, m.key, arg); err != nil {
			return "", 0, err
		}
		s.log.InfoContext(ctx, "busy mode changed", "session_key", m.key, "mode", arg, "by", m.platform+":"+m.src.GetUserId())
		return fmt.Sprintf("Busy input mode set to **`%s`** for this chat.\n_%s_", arg, busyBehavior[arg][1]), sess.Generation, nil
	})
}
