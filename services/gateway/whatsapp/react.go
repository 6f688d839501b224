package whatsapp

import (
	"context"

	deliveryv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/delivery/v1"
	"github.com/switchboard-chat/switchboard/pkg/platform"
)

// Reactions: 👀 while a turn runs, then ✅ or ❌. A business has one
// reaction per message, which a new reaction message replaces.
func (p *Platform) Reactions() platform.Reactions {
	if !p.cfg.Reactions {
		return platform.Reactions{}
	}
	return platform.Reactions{Processing: "👀", Success: "✅", Failure: "❌", Replace: true}
}

// React sends a reaction message on the user's message.
func (p *Platform) React(ctx context.Context, t *deliveryv1.Target, messageID, emoji string) error {
	return p.react(ctx, t, messageID, emoji)
}

// Unreact removes the business's reaction (a reaction with no emoji).
func (p *Platform) Unreact(ctx context.Context, t *deliveryv1.Target, messageID, _ string) error {
	return p.react(ctx, t, messageID, "")
}

func (p *Platform) react(ctx context.Context, t *deliveryv1.Target, messageID, emoji string) error {
	_, err := p.postMessage(ctx, recipient(t.GetChatId()), map[string]any{
		"type": "reaction", "reaction": map[string]any{"message_id": messageID, "emoji": emoji},
	}, noPart)
	return err
}
