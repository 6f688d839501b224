package main

import (
	"context"

	"github.com/switchboard-chat/switchboard/pkg/bus"
	"github.com/switchboard-chat/switchboard/pkg/platform"
	"github.com/switchboard-chat/switchboard/services/gateway/googlechat"
)

func init() {
	// Hermes's names for the Google Chat gateway in its HTTP-callback
	// mode (GOOGLE_CHAT_ALLOWED_USERS and GOOGLE_CHAT_ALLOW_ALL_USERS are
	// the router's, as for every platform; GOOGLE_CHAT_HOME_CHANNEL is in
	// homes.go). The URLs point the gateway at a fake Google in tests.
	for env, key := range map[string]string{
		"GOOGLE_CHAT_SERVICE_ACCOUNT_JSON": "gateways.googlechat.service_account_json",
		"GOOGLE_CHAT_HTTP_EVENTS_AUDIENCE": "gateways.googlechat.audience",
		"GOOGLE_CHAT_KEYS_URL":             "gateways.googlechat.keys_url",
		"GOOGLE_CHAT_API_BASE_URL":         "gateways.googlechat.api_base_url",
		"GOOGLE_CHAT_TOKEN_URL":            "gateways.googlechat.token_url",
		"GOOGLE_CHAT_ALLOW_BOTS":           "gateways.googlechat.allow_bots",
	} {
		envAliases[env] = key
	}
	registerGateway("googlechat", startGoogleChatGateway, true)
}

// startGoogleChatGateway builds the Google Chat gateway. In dev it starts
// only when GOOGLE_CHAT_SERVICE_ACCOUNT_JSON and
// GOOGLE_CHAT_HTTP_EVENTS_AUDIENCE are set. Who may talk to the agent is
// the router's: GOOGLE_CHAT_ALLOWED_USERS (emails), GOOGLE_CHAT_ALLOW_ALL_USERS,
// pairing.
func startGoogleChatGateway(ctx context.Context, a *app) (func(context.Context) error, error) {
	cfg := a.cfg.Gateways.GoogleChat
	cfg.AllowBots = allowBots(cfg.AllowBots, a.cfg.Router.Auth.AllowBots, googlechat.PlatformName)
	run, err := startChatGateway(ctx, a, "googlechat", "GOOGLE_CHAT_SERVICE_ACCOUNT_JSON or GOOGLE_CHAT_HTTP_EVENTS_AUDIENCE", cfg.Enabled(), cfg.Validate, func(b *bus.Bus) (chatService, error) {
		return googlechat.New(cfg, googlechat.Deps{Log: a.log, Bus: b, Runner: platform.Options{Attachments: a.cfg.Attachments}})
	})
	if err == nil && cfg.Enabled() {
		a.announce("Google Chat HTTP endpoint", "http://"+hostPort(cfg.Addr)+cfg.Path)
	}
	return run, err
}
