package router

import (
	"context"
	"fmt"
	"time"

	"github.com/switchboard-chat/switchboard/pkg/command"
	turnsv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/turns/v1"
)

// An approval prompt's buttons (Hermes's Allow Once, Session, Always,
// Deny) reach the router as the typed commands they stand for, from the
// user who pressed, so admin rules and allowlists apply as to typing.
// The answer replaces the prompt's text and takes its buttons off, in
// Hermes's words: "✅ Approved once by Alice", or "⌛ Approval expired"
// when no call waited for it.

// expiredText is Hermes's card for a press that found no call waiting.
const expiredText = "⌛ Approval expired — no command was waiting. It already timed out (and was denied) or was resolved elsewhere."

// decidedTTL is how long the router remembers that a prompt was
// answered by one of its buttons.
const decidedTTL = 24 * time.Hour

// pressedReply is Hermes's card for an answer taken from a button that
// name pressed.
func pressedReply(action turnsv1.ControlAction, args, name string) string {
	if name == "" {
		name = "User"
	}
	label := "❌ Denied"
	if action == controlApprove {
		label = map[string]string{
			command.ApproveOnce:    "✅ Approved once",
			command.ApproveSession: "✅ Approved for session",
			command.ApproveAlways:  "✅ Approved permanently",
		}[command.ApprovalScope(args)]
	}
	return label + " by " + name
}

// pressed answers an approval button's press (took: a call waited and
// took the answer) by replacing the prompt's text. A press on a prompt
// whose button already answered it changes nothing: the prompt keeps
// the first answer (two quick presses, or two users).
func (s *Service) pressed(ctx context.Context, m *msgCtx, gen int64, action turnsv1.ControlAction, args string, took bool) error {
	card := m.ev.GetButtonPress().GetMessageId()
	key := fmt.Sprintf("%sapprovalcard:%s:%s:%s:%s", s.prefix, m.src.GetPlatform(), m.src.GetAccount(), m.src.GetChatId(), card)
	text := expiredText
	if took {
		text = pressedReply(action, args, m.src.GetUserName())
		if err := s.rdb.Set(ctx, key, m.dedupeID, decidedTTL).Err(); err != nil {
			return fmt.Errorf("remember answered prompt: %w", err)
		}
	} else {
		by, err := s.rdb.Get(ctx, key).Result()
		if err == nil && by != m.dedupeID {
			return nil // answered by an earlier press
		}
	}
	return s.publishNotice(ctx, m, gen, text, "command", card)
}
