package main

import (
	"context"

	"github.com/switchboard-chat/switchboard/pkg/bus"
	"github.com/switchboard-chat/switchboard/pkg/platform"
	"github.com/switchboard-chat/switchboard/services/gateway/line"
)

func init() {
	// Hermes's names for the LINE gateway, and Switchboard's for the API
	// hosts (a fake's in tests). LINE_ALLOWED_USERS and
	// LINE_ALLOW_ALL_USERS are the router's, as for every platform;
	// LINE_HOME_CHANNEL is delivery's (homes.go).
	for env, key := range map[string]string{
		"LINE_CHANNEL_ACCESS_TOKEN": "gateways.line.channel_access_token",
		"LINE_CHANNEL_SECRET":       "gateways.line.channel_secret",
		"LINE_ALLOWED_GROUPS":       "gateways.line.allowed_groups",
		"LINE_ALLOWED_ROOMS":        "gateways.line.allowed_rooms",
		"LINE_REQUIRE_MENTION":      "gateways.line.require_mention",
		"LINE_FREE_RESPONSE_GROUPS": "gateways.line.free_response_groups",
		"LINE_FREE_RESPONSE_ROOMS":  "gateways.line.free_response_rooms",
		"LINE_HOST":                 "gateways.line.host",
		"LINE_PORT":                 "gateways.line.port",
		"LINE_API_BASE_URL":         "gateways.line.api_base_url",
		"LINE_DATA_API_BASE_URL":    "gateways.line.data_base_url",
	} {
		envAliases[env] = key
	}
	registerGateway("line", startLINEGateway, true)
}

// startLINEGateway builds the LINE gateway. In dev it starts only when
// LINE_CHANNEL_ACCESS_TOKEN and LINE_CHANNEL_SECRET are set. Who may
// talk to the agent is the router's: LINE_ALLOWED_USERS (U… user ids),
// LINE_ALLOW_ALL_USERS, LINE_GROUP_ALLOWED_CHATS, pairing.
func startLINEGateway(ctx context.Context, a *app) (func(context.Context) error, error) {
	cfg := a.cfg.Gateways.LINE
	run, err := startChatGateway(ctx, a, "line", "LINE_CHANNEL_ACCESS_TOKEN or LINE_CHANNEL_SECRET", cfg.Enabled(), cfg.Validate, func(b *bus.Bus) (chatService, error) {
		return line.New(cfg, line.Deps{Log: a.log, Bus: b, Runner: platform.Options{Attachments: a.cfg.Attachments}})
	})
	if err == nil && cfg.Enabled() {
		if n, err := cfg.Normalized(); err == nil {
			a.announce("LINE webhook", "http://"+hostPort(n.Addr)+n.Path)
		}
	}
	return run, err
}
