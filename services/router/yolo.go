package router

import (
	"context"
	"strings"

	"github.com/switchboard-chat/switchboard/pkg/sessionstore"
)

// Hermes's /yolo replies, with "this chat" for "this session": the mode
// belongs to the chat's session key, not to one conversation of it.
const (
	yoloOnText  = "⚡ YOLO mode **ON** for this chat — dangerous commands will run without asking for approval. Use with caution. /yolo again turns it off."
	yoloOffText = "⚠️ YOLO mode **OFF** for this chat — dangerous commands will require approval."
	yoloUsage   = "Usage: /yolo (turns YOLO mode on or off), /yolo on, /yolo off, /yolo status"
	// yoloDisabledText answers /yolo while router.yolo_command is off.
	yoloDisabledText = "YOLO mode is disabled on this gateway: dangerous commands always ask for approval."
)

// yolo is Hermes's /yolo: it turns YOLO mode on for the chat if it is
// off and off if it is on; the worker then runs the chat's dangerous
// tool calls without asking (its approval check reads the session_yolo
// row when such a call comes, so a change mid-turn counts from the
// turn's next dangerous call, as in Hermes). Hermes's /yolo takes no
// argument; here "on" and "off" set the mode whatever it was and
// "status" shows it. A change is made once per inbound event (once): a
// redelivered /yolo does not toggle the mode back. It runs
// mid-turn, as Hermes's. Off with router.yolo_command false: the
// command says so and turns the chat's mode off, and turns carry
// yolo_disabled, so no chat's mode counts.
func (s *Service) yolo(ctx context.Context, m *msgCtx, sess sessionstore.Session, args string) error {
	switch a := strings.ToLower(args); {
	case !s.cfg.YoloCommand, a == "", a == "on", a == "off":
		// Once per inbound event: a redelivered /yolo does not toggle back.
		return s.once(ctx, m, "yolo", func(ctx context.Context, st *sessionstore.Store) (string, int64, error) {
			text, err := s.setYolo(ctx, st, m, a)
			return text, sess.Generation, err
		})
	}
	reply := func(text string) error { return s.notice(ctx, m, sess.Generation, text, "command") }
	if !strings.EqualFold(args, "status") {
		return reply(yoloUsage)
	}
	on, err := s.store.Yolo(ctx, m.key)
	if err != nil {
		return err
	}
	if on {
		return reply("⚡ YOLO mode is ON for this chat: dangerous commands run without asking for approval. /yolo turns it off.")
	}
	return reply("YOLO mode is off for this chat: dangerous commands ask for approval. /yolo turns it on.")
}

// setYolo changes the chat's YOLO mode with st as /yolo's args ("", on,
// off; lower case) say, and returns the answer.
func (s *Service) setYolo(ctx context.Context, st *sessionstore.Store, m *msgCtx, args string) (string, error) {
	by := m.platform + ":" + m.src.GetUserId()
	if !s.cfg.YoloCommand {
		if err := st.SetYolo(ctx, m.key, false, by); err != nil {
			return "", err
		}
		return yoloDisabledText, nil
	}
	var on bool
	if args == "" {
		var err error
		if on, err = st.ToggleYolo(ctx, m.key, by); err != nil {
			return "", err
		}
	} else {
		on = args == "on"
		if err := st.SetYolo(ctx, m.key, on, by); err != nil {
			return "", err
		}
	}
	s.log.InfoContext(ctx, "yolo mode changed", "session_key", m.key, "on", on, "by", by)
	if on {
		return yoloOnText, nil
	}
	return yoloOffText, nil
}
