package platform

import (
	"fmt"
	"strings"
)

// BotMode says which messages of other bots a gateway publishes, as
// Hermes's <PLATFORM>_ALLOW_BOTS (DISCORD_ALLOW_BOTS, SLACK_ALLOW_BOTS):
// "none" (the default) drops them, "mentions" publishes those that
// mention this bot, "all" publishes every one. A published bot message is
// marked is_bot, so the router admits it as a bot (router.auth.allow_bots,
// allowed_bots) or checks it as any other sender. The bot's own messages
// are never published, whatever the mode: answering them would loop.
type BotMode string

// The modes.
const (
	BotsNone     BotMode = "none"
	BotsMentions BotMode = "mentions"
	BotsAll      BotMode = "all"
)

// ParseBotMode reads a mode, without regard to case or surrounding
// space; "" is BotsNone. The booleans the gateways' allow_bots took
// before it had modes still mean what they meant: true (or 1, yes, on)
// is BotsAll, false (0, no, off) is BotsNone. Anything else is an error
// (Hermes logs it and treats it as "none").
func ParseBotMode(v string) (BotMode, error) {
	switch strings.ToLower(strings.TrimSpace(v)) {
	case "", "none", "false", "0", "no", "off":
		return BotsNone, nil
	case "mentions":
		return BotsMentions, nil
	case "all", "true", "1", "yes", "on":
		return BotsAll, nil
	}
	return BotsNone, fmt.Errorf("%q is not none, mentions or all", v)
}

// Admits reports whether a message of another bot is published;
// mentioned says whether it mentions this bot.
func (m BotMode) Admits(mentioned bool) bool {
	switch m {
	case BotsAll:
		return true
	case BotsMentions:
		return mentioned
	}
	return false
}
