package telegram

import (
	"context"
	"fmt"
	"strconv"

	"github.com/go-telegram/bot"
	"github.com/go-telegram/bot/models"

	deliveryv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/delivery/v1"
	"github.com/switchboard-chat/switchboard/pkg/platform"
)

// Reactions are Hermes's (gateway/platforms/telegram.py): 👀 while a turn
// runs, then 👍 or 👎, all on the Bot API's list of reaction emoji. A bot
// has one reaction per message, which setMessageReaction replaces.
func (p *Platform) Reactions() platform.Reactions {
	if !p.cfg.Reactions {
		return platform.Reactions{}
	}
	return platform.Reactions{Processing: "👀", Success: "👍", Failure: "👎", Replace: true}
}

// React sets the bot's reaction on a user's message, replacing the one
// it had (setMessageReaction).
func (p *Platform) React(ctx context.Context, t *deliveryv1.Target, messageID, emoji string) error {
	return p.setReaction(ctx, t, messageID, []models.ReactionType{{Type: models.ReactionTypeTypeEmoji,
		ReactionTypeEmoji: &models.ReactionTypeEmoji{Emoji: emoji}}})
}

// Unreact removes the bot's reaction, whichever it is (setMessageReaction
// with an empty list).
func (p *Platform) Unreact(ctx context.Context, t *deliveryv1.Target, messageID, _ string) error {
	return p.setReaction(ctx, t, messageID, []models.ReactionType{})
}

func (p *Platform) setReaction(ctx context.Context, t *deliveryv1.Target, messageID string, r []models.ReactionType) error {
	id, err := strconv.Atoi(messageID)
	if err != nil || id <= 0 {
		return platform.Permanent(fmt.Errorf("message id %q is not a telegram message id", messageID))
	}
	_, err = p.api.SetMessageReaction(ctx, &bot.SetMessageReactionParams{ChatID: chatID(t.GetChatId()), MessageID: id, Reaction: r})
	return classify(err)
}
