package discord

import (
	"context"
	"fmt"

	deliveryv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/delivery/v1"
	"github.com/switchboard-chat/switchboard/pkg/platform"
)

// Reactions are Hermes's (gateway/platforms/discord.py): 👀 while a turn
// runs, then ✅ or ❌. Discord keeps each of the bot's reactions until it
// is removed.
func (p *Platform) Reactions() platform.Reactions {
	if !p.cfg.Reactions {
		return platform.Reactions{}
	}
	return platform.Reactions{Processing: "👀", Success: "✅", Failure: "❌"}
}

// React adds the bot's reaction to a user's message (PUT …/reactions/
// <emoji>/@me; one already there is accepted again). The message is in
// the target's chat: a thread is a chat of its own, and the message a
// prospective thread grows from is in the channel. The message an
// auto-thread was opened from has the thread's id and is in its parent
// channel (see messageChannel).
func (p *Platform) React(ctx context.Context, t *deliveryv1.Target, messageID, emoji string) error {
	if err := checkMessage(t.GetChatId(), messageID); err != nil {
		return err
	}
	ch, err := p.messageChannel(ctx, t.GetChatId(), messageID)
	if err != nil {
		return err
	}
	if err := p.s.MessageReactionAdd(ch, messageID, emoji, opts(ctx)...); err != nil {
		return sendError("add reaction", err)
	}
	return nil
}

// Unreact removes the bot's own reaction (DELETE …/reactions/<emoji>/@me;
// Discord accepts removing one that is not there).
func (p *Platform) Unreact(ctx context.Context, t *deliveryv1.Target, messageID, emoji string) error {
	if err := checkMessage(t.GetChatId(), messageID); err != nil {
		return err
	}
	ch, err := p.messageChannel(ctx, t.GetChatId(), messageID)
	if err != nil {
		return err
	}
	if err := p.s.MessageReactionRemove(ch, messageID, emoji, "@me", opts(ctx)...); err != nil {
		return sendError("remove reaction", err)
	}
	return nil
}

// messageChannel is the channel a message of a chat is in: the chat,
// except for the message a thread was opened from (the thread has its
// id), which is in the thread's parent. A forum's or media channel's
// post is a thread whose first message has the thread's id too, but is
// in the thread: the parent is looked up to tell them apart.
func (p *Platform) messageChannel(ctx context.Context, chat, messageID string) (string, error) {
	if chat != messageID {
		return chat, nil
	}
	ci, err := p.channel(ctx, chat)
	if err != nil {
		return "", sendError("look up the thread", err)
	}
	if !ci.Thread || ci.Parent == "" {
		return chat, nil
	}
	parent, err := p.channel(ctx, ci.Parent)
	if err != nil {
		return "", sendError("look up the thread's channel", err)
	}
	if parent.Posts {
		return chat, nil
	}
	return ci.Parent, nil
}

// checkMessage refuses ids that are not snowflakes before they reach a
// REST path (see checkIDs).
func checkMessage(chat, message string) error {
	for _, id := range []string{chat, message} {
		if !snowflake(id) {
			return platform.Permanent(fmt.Errorf("discord id %q is not a snowflake", id))
		}
	}
	return nil
}
