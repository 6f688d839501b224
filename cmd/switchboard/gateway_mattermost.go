package main

import (
	"context"

	"github.com/switchboard-chat/switchboard/pkg/bus"
	"github.com/switchboard-chat/switchboard/pkg/platform"
	"github.com/switchboard-chat/switchboard/services/gateway/mattermost"
)

func init() {
	// Hermes's names for the Mattermost gateway (MATTERMOST_ALLOWED_USERS
	// is the router's, as for every platform; MATTERMOST_HOME_CHANNEL is
	// delivery's home channel for Mattermost).
	for env, key := range map[string]string{
		"MATTERMOST_URL":                    "gateways.mattermost.url",
		"MATTERMOST_TOKEN":                  "gateways.mattermost.token",
		"MATTERMOST_REQUIRE_MENTION":        "gateways.mattermost.require_mention",
		"MATTERMOST_FREE_RESPONSE_CHANNELS": "gateways.mattermost.free_response_channels",
		"MATTERMOST_ALLOWED_CHANNELS":       "gateways.mattermost.allowed_channels",
		"MATTERMOST_REPLY_MODE":             "gateways.mattermost.reply_mode",
		"MATTERMOST_REACTIONS":              "gateways.mattermost.reactions",
		"MATTERMOST_ALLOW_CHANNEL_MENTIONS": "gateways.mattermost.allow_channel_mentions",
		"MATTERMOST_ALLOW_BOTS":             "gateways.mattermost.allow_bots",
		"MATTERMOST_HOME_CHANNEL":           "delivery.platforms.mattermost.home",
	} {
		envAliases[env] = key
	}
	registerGateway("mattermost", startMattermostGateway, true)
}

// startMattermostGateway builds the Mattermost gateway. In dev it starts
// only when MATTERMOST_URL and MATTERMOST_TOKEN are set.
func startMattermostGateway(ctx context.Context, a *app) (func(context.Context) error, error) {
	cfg := a.cfg.Gateways.Mattermost
	cfg.AllowBots = allowBots(cfg.AllowBots, a.cfg.Router.Auth.AllowBots, "mattermost")
	return startChatGateway(ctx, a, "mattermost", "MATTERMOST_URL or MATTERMOST_TOKEN", cfg.Enabled(), cfg.Validate, func(b *bus.Bus) (chatService, error) {
		return mattermost.New(cfg, mattermost.Deps{Log: a.log, Bus: b, Runner: platform.Options{Attachments: a.cfg.Attachments}})
	})
}
