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
// when no call waited for it; where the gateway holds the press's answer
// (answerPress), the presser is shown Hermes's word for the outcome
// (pressToast).

// expiredText is Hermes's card for a press that found no call waiting.
const expiredText = "⌛ Approval expired — no command was waiting. It already timed out (and was denied) or was resolved elsewhere."

// unknownChoiceAnswer is Hermes's answer to the press of a choice its
// Teams card action cannot read, from a sender it authorizes
// (Interaction.unknown_choice): the presser's invoke answer alone.
const unknownChoiceAnswer = "Unknown action."

// teamsNoAllowlist is Hermes's answer to every press of his Teams
// approval card while neither TEAMS_ALLOWED_USERS nor
// TEAMS_ALLOW_ALL_USERS is set (his card action's default deny). Here
// it is the refusal of a Teams presser who was refused because no
// allowlist applies to Teams (auth.ReasonNoAllowlist: no
// TEAMS_ALLOWED_USERS or auth.allowed_users.teams, no
// GATEWAY_ALLOWED_USERS, no allow-all), in place of "⛔ Not
// authorized.": it tells whoever can fix it what is missing. A presser
// approved by pairing is not refused, as for typing /approve, where
// Hermes refuses every press until the allowlist is set.
const teamsNoAllowlist = "⛔ Approval buttons require TEAMS_ALLOWED_USERS to be configured."

// teamsNoAllowlistLogEvery is how often a router replica logs the
// warning beside teamsNoAllowlist at most; the presses refused between
// two are counted in the next.
const teamsNoAllowlistLogEvery = 10 * time.Minute

// decidedTTL is how long the router remembers that a prompt was
// answered by one of its buttons.
const decidedTTL = 24 * time.Hour

// pressedReply is Hermes's card for an answer taken from a button that
// name pressed.
func pressedReply(action turnsv1.ControlAction, args, name string) string {
	if name == "" {
		name = "User"
	}
	return pressedLabel(action, args) + " by " + name
}

// pressedLabel is Hermes's word for an answer taken from a button.
func pressedLabel(action turnsv1.ControlAction, args string) string {
	if action != controlApprove {
		return "❌ Denied"
	}
	return map[string]string{
		command.ApproveOnce:    "✅ Approved once",
		command.ApproveSession: "✅ Approved for session",
		command.ApproveAlways:  "✅ Approved permanently",
	}[command.ApprovalScope(args)]
}

// pressOutcome is how an approval button's press ended: the answer was
// taken, no call waited for it, or an earlier press had answered the
// prompt.
type pressOutcome int

const (
	pressTaken pressOutcome = iota
	pressExpired
	pressAnsweredBefore
)

// pressToast is what Hermes shows the presser of an approval button
// once the press is decided, besides the prompt's edit, by platform:
// his Telegram callback handler's answer (the label of the answer taken,
// "⌛ Approval expired" when no call waited, "This approval has already
// been resolved." for a prompt answered before), his Discord
// ExecApprovalView's ephemeral message for a prompt answered before
// ("This approval has already been resolved~"; for the rest it edits the
// card alone), his Teams card action's ("⚠️ Approval already resolved
// or expired." for the last two, which Hermes shows as the card: here
// the presser's invoke answer, the card keeping the first answer). ""
// for nothing.
func pressToast(platform string, outcome pressOutcome, action turnsv1.ControlAction, args string) string {
	switch platform {
	case "discord":
		if outcome == pressAnsweredBefore {
			return "This approval has already been resolved~"
		}
	case "telegram":
		switch outcome {
		case pressTaken:
			return pressedLabel(action, args)
		case pressExpired:
			return "⌛ Approval expired"
		default:
			return "This approval has already been resolved."
		}
	case "teams":
		if outcome != pressTaken {
			return "⚠️ Approval already resolved or expired."
		}
	}
	return ""
}

// pressed answers an approval button's press (took: a call waited and
// took the answer) by replacing the prompt's text. A press on a prompt
// whose button already answered it changes nothing: the prompt keeps
// the first answer (two quick presses, or two users).
func (s *Service) pressed(ctx context.Context, m *msgCtx, gen int64, action turnsv1.ControlAction, args string, took bool) error {
	card := m.ev.GetButtonPress().GetMessageId()
	key := fmt.Sprintf("%sapprovalcard:%s:%s:%s:%s", s.prefix, m.src.GetPlatform(), m.src.GetAccount(), m.src.GetChatId(), card)
	text, outcome := expiredText, pressExpired
	if took {
		text, outcome = pressedReply(action, args, m.src.GetUserName()), pressTaken
		if err := s.rdb.Set(ctx, key, m.dedupeID, decidedTTL).Err(); err != nil {
			return fmt.Errorf("remember answered prompt: %w", err)
		}
	} else {
		by, err := s.rdb.Get(ctx, key).Result()
		if err == nil && by != m.dedupeID {
			m.pressText = pressToast(m.platform, pressAnsweredBefore, action, args)
			return nil // answered by an earlier press
		}
	}
	m.pressText = pressToast(m.platform, outcome, action, args)
	return s.publishNotice(ctx, m, gen, text, "command", card)
}
