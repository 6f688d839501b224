package main

import (
	"context"

	"github.com/switchboard-chat/switchboard/pkg/bus"
	"github.com/switchboard-chat/switchboard/pkg/platform"
	"github.com/switchboard-chat/switchboard/services/gateway/bluebubbles"
)

func init() {
	// Hermes's names for the BlueBubbles (iMessage) gateway, and
	// Switchboard's for what Hermes derives from its listener (the URL it
	// registers) or does not have (a webhook secret other than the
	// password). BLUEBUBBLES_ALLOWED_USERS and BLUEBUBBLES_ALLOW_ALL_USERS
	// are the router's, as for every platform; BLUEBUBBLES_HOME_CHANNEL is
	// delivery's (homes.go).
	for env, key := range map[string]string{
		"BLUEBUBBLES_SERVER_URL":       "gateways.bluebubbles.server_url",
		"BLUEBUBBLES_PASSWORD":         "gateways.bluebubbles.password",
		"BLUEBUBBLES_WEBHOOK_PATH":     "gateways.bluebubbles.path",
		"BLUEBUBBLES_WEBHOOK_HOST":     "gateways.bluebubbles.host",
		"BLUEBUBBLES_WEBHOOK_PORT":     "gateways.bluebubbles.port",
		"BLUEBUBBLES_WEBHOOK_URL":      "gateways.bluebubbles.public_url",
		"BLUEBUBBLES_WEBHOOK_SECRET":   "gateways.bluebubbles.webhook_secret",
		"BLUEBUBBLES_REQUIRE_MENTION":  "gateways.bluebubbles.require_mention",
		"BLUEBUBBLES_MENTION_PATTERNS": "gateways.bluebubbles.mention_patterns",
	} {
		envAliases[env] = key
	}
	registerGateway("bluebubbles", startBlueBubblesGateway, true)
}

// startBlueBubblesGateway builds the iMessage gateway. In dev it starts
// only when BLUEBUBBLES_SERVER_URL and BLUEBUBBLES_PASSWORD are set. Who
// may write to the agent is the router's: BLUEBUBBLES_ALLOWED_USERS
// (phone numbers and Apple ID emails), BLUEBUBBLES_ALLOW_ALL_USERS,
// pairing.
func startBlueBubblesGateway(ctx context.Context, a *app) (func(context.Context) error, error) {
	cfg := a.cfg.Gateways.BlueBubbles
	run, err := startChatGateway(ctx, a, "bluebubbles", "BLUEBUBBLES_SERVER_URL or BLUEBUBBLES_PASSWORD", cfg.Enabled(), cfg.Validate, func(b *bus.Bus) (chatService, error) {
		return bluebubbles.New(cfg, bluebubbles.Deps{Log: a.log, Bus: b, Runner: platform.Options{Attachments: a.cfg.Attachments}})
	})
	if err == nil && cfg.Enabled() {
		if n, err := cfg.Normalized(); err == nil {
			a.announce("BlueBubbles webhook (iMessage; add ?password=<secret>)", "http://"+hostPort(n.Addr)+n.Path)
		}
	}
	return run, err
}
