package main

import (
	"context"

	"github.com/switchboard-chat/switchboard/pkg/bus"
	"github.com/switchboard-chat/switchboard/pkg/platform"
	"github.com/switchboard-chat/switchboard/services/gateway/signal"
)

func init() {
	// Hermes's names for the Signal gateway (SIGNAL_ALLOWED_USERS is the
	// router's, as for every platform).
	for env, key := range map[string]string{
		"SIGNAL_HTTP_URL":            "gateways.signal.http_url",
		"SIGNAL_ACCOUNT":             "gateways.signal.account",
		"SIGNAL_GROUP_ALLOWED_USERS": "gateways.signal.allowed_groups",
		"SIGNAL_REQUIRE_MENTION":     "gateways.signal.require_mention",
		"SIGNAL_REACTIONS":           "gateways.signal.reactions",
		"SIGNAL_QUOTE_REPLIES":       "gateways.signal.quote_replies",
		"SIGNAL_RECEIVE_MODE":        "gateways.signal.receive_mode",
	} {
		envAliases[env] = key
	}
	registerGateway("signal", startSignalGateway, true)
}

// startSignalGateway builds the Signal gateway. In dev it starts only
// when SIGNAL_HTTP_URL and SIGNAL_ACCOUNT are set.
func startSignalGateway(ctx context.Context, a *app) (func(context.Context) error, error) {
	cfg := a.cfg.Gateways.Signal
	return startChatGateway(ctx, a, "signal", "SIGNAL_HTTP_URL or SIGNAL_ACCOUNT", cfg.Enabled(), cfg.Validate, func(b *bus.Bus) (chatService, error) {
		return signal.New(cfg, signal.Deps{Log: a.log, Bus: b, Runner: platform.Options{Attachments: a.cfg.Attachments}})
	})
}
