package main

import (
	"context"

	"github.com/switchboard-chat/switchboard/pkg/bus"
	"github.com/switchboard-chat/switchboard/pkg/platform"
	"github.com/switchboard-chat/switchboard/services/gateway/whatsapp"
)

func init() {
	for env, key := range map[string]string{
		"WHATSAPP_ACCESS_TOKEN":    "gateways.whatsapp.access_token",
		"WHATSAPP_PHONE_NUMBER_ID": "gateways.whatsapp.phone_number_id",
		"WHATSAPP_APP_SECRET":      "gateways.whatsapp.app_secret",
		"WHATSAPP_VERIFY_TOKEN":    "gateways.whatsapp.verify_token",
		"WHATSAPP_API_BASE_URL":    "gateways.whatsapp.api_base_url",
		"WHATSAPP_REACTIONS":       "gateways.whatsapp.reactions",
	} {
		envAliases[env] = key
	}
	registerGateway("whatsapp", startWhatsAppGateway, true)
}

// startWhatsAppGateway builds the WhatsApp Cloud API gateway. In dev it
// starts only when WHATSAPP_ACCESS_TOKEN is set. Who may talk to the
// agent is the router's: WHATSAPP_ALLOWED_USERS (numbers with country
// code, no +), WHATSAPP_ALLOW_ALL_USERS, pairing.
func startWhatsAppGateway(ctx context.Context, a *app) (func(context.Context) error, error) {
	cfg := a.cfg.Gateways.WhatsApp
	run, err := startChatGateway(ctx, a, "whatsapp", "WHATSAPP_ACCESS_TOKEN", cfg.Enabled(), cfg.Validate, func(b *bus.Bus) (chatService, error) {
		return whatsapp.New(cfg, whatsapp.Deps{Log: a.log, Bus: b, Runner: platform.Options{Attachments: a.cfg.Attachments}})
	})
	if err == nil && cfg.Enabled() {
		path := cfg.Path
		if path == "" {
			path = whatsapp.DefaultConfig().Path
		}
		a.announce("WhatsApp webhook", "http://"+hostPort(cfg.Addr)+path)
	}
	return run, err
}
