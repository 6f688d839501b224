package signal

import (
	"context"
	"fmt"

	deliveryv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/delivery/v1"
	"github.com/switchboard-chat/switchboard/pkg/platform"
)

// Reactions are Hermes's (gateway/platforms/signal.py): 👀 while a turn
// runs, then ✅ or ❌. Signal keeps one reaction per person on a
// message, so each replaces the last (Replace).
func (p *Platform) Reactions() platform.Reactions {
	if !p.cfg.Reactions {
		return platform.Reactions{}
	}
	return platform.Reactions{Processing: "👀", Success: "✅", Failure: "❌", Replace: true}
}

// React sets the bot's reaction on a user's message (sendReaction with
// the message's author and timestamp, which its id carries).
func (p *Platform) React(ctx context.Context, t *deliveryv1.Target, messageID, emoji string) error {
	return p.react(ctx, t, messageID, emoji, false)
}

// Unreact removes the bot's reaction (sendReaction with remove).
func (p *Platform) Unreact(ctx context.Context, t *deliveryv1.Target, messageID, emoji string) error {
	return p.react(ctx, t, messageID, emoji, true)
}

func (p *Platform) react(ctx context.Context, t *deliveryv1.Target, messageID, emoji string, remove bool) error {
	author, ts, ok := splitMessageID(messageID)
	if !ok {
		return platform.Permanent(fmt.Errorf("signal message id %q is not <author>:<timestamp>", messageID))
	}
	params := map[string]any{"emoji": emoji, "targetAuthor": author, "targetTimestamp": ts}
	if remove {
		params["remove"] = true
	}
	if err := target(params, t.GetChatId()); err != nil {
		return err
	}
	return classify(p.client.call(ctx, "sendReaction", params, nil))
}
