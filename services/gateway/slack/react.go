package slack

import (
	"context"
	"errors"

	slackapi "github.com/slack-go/slack"

	deliveryv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/delivery/v1"
	"github.com/switchboard-chat/switchboard/pkg/platform"
)

// Reactions are Hermes's (gateway/platforms/slack.py), by Slack's emoji
// names: eyes while a turn runs, then white_check_mark or x.
func (p *Platform) Reactions() platform.Reactions {
	if !p.cfg.Reactions {
		return platform.Reactions{}
	}
	return platform.Reactions{Processing: "eyes", Success: "white_check_mark", Failure: "x"}
}

// React adds the bot's reaction to a user's message (reactions.add);
// already_reacted is success.
func (p *Platform) React(ctx context.Context, t *deliveryv1.Target, messageID, emoji string) error {
	err := p.api.AddReactionContext(ctx, emoji, slackapi.NewRefToMessage(t.GetChatId(), messageID))
	if err != nil && !isSlackError(err, "already_reacted") {
		return sendError("reactions.add", err)
	}
	return nil
}

// Unreact removes the bot's reaction (reactions.remove); no_reaction is
// success.
func (p *Platform) Unreact(ctx context.Context, t *deliveryv1.Target, messageID, emoji string) error {
	err := p.api.RemoveReactionContext(ctx, emoji, slackapi.NewRefToMessage(t.GetChatId(), messageID))
	if err != nil && !isSlackError(err, "no_reaction") {
		return sendError("reactions.remove", err)
	}
	return nil
}

// isSlackError reports whether err is Slack's error response code.
func isSlackError(err error, code string) bool {
	var se slackapi.SlackErrorResponse
	return errors.As(err, &se) && se.Err == code
}
